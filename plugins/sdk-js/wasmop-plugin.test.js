import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fail, parseGoDuration, parseJsonObject, parsePods, parseSettings } from './wasmop-plugin.js';

test('fail leaves out an absent field', () => {
  assert.deepEqual(fail('no'), { message: 'no' });
  assert.deepEqual(fail('bad', 'settings.x'), { message: 'bad', field: 'settings.x' });
});

test('settings must be an object of known keys', () => {
  assert.deepEqual(parseSettings('{"annotation": "a"}', ['annotation']), { annotation: 'a' });
  assert.throws(() => parseSettings('[]', ['a']), { field: 'settings', message: 'settings must be a JSON object' });
  assert.throws(() => parseSettings('{', ['a']), { field: 'settings' });
  assert.throws(() => parseSettings('{"b": 1}', ['a']), {
    field: 'settings',
    message: 'unknown settings key "b"; the keys are a',
  });
  assert.throws(() => parseJsonObject('null', 'metadata', 'request.metadata'), { field: 'request.metadata' });
});

test('pods must be an array', () => {
  assert.deepEqual(parsePods('[{"metadata": {}}]'), [{ metadata: {} }]);
  assert.throws(() => parsePods('{"kind": "Pod"}'), { field: 'request.pods' });
});

test('Go durations', () => {
  assert.equal(parseGoDuration('24h'), 86400e3);
  assert.equal(parseGoDuration('1h30m'), 5400e3);
  assert.equal(parseGoDuration('1.5h'), 5400e3);
  assert.equal(parseGoDuration('500ms'), 500);
  for (const bad of ['', '5', '-1h', '0s', '1x', '1h 5m', 'h', undefined]) {
    assert.ok(Number.isNaN(parseGoDuration(bad)), String(bad));
  }
});
