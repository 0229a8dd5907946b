// Unit tests of policy.js: `node --test`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { evaluate, settingsRestart } from './policy.js';

const pods = JSON.stringify([{ metadata: { name: 'a', namespace: 'shop' } }, { metadata: { name: 'b', namespace: 'shop' } }]);

test('one decision per pod as the settings say', () => {
  const keep = evaluate(settingsRestart('{}'), pods);
  assert.deepEqual(keep.map((d) => d.restart), [false, false]);
  assert.match(keep[0].reason, /^shop\/a: /);
  assert.deepEqual(evaluate(settingsRestart('{"restart": true}'), pods).map((d) => d.restart), [true, true]);
  assert.deepEqual(evaluate(true, '[]'), []);
});

test('refuses what it cannot read with the field', () => {
  assert.throws(() => evaluate(false, '{}'), { field: 'request.pods' });
  assert.throws(() => settingsRestart('{"restart": "yes"}'), { field: 'settings.restart' });
  assert.throws(() => settingsRestart('{"colour": 1}'), { field: 'settings' });
});
