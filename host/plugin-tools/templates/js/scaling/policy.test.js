// Unit tests of policy.js: `node --test`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { settingsVote, vote } from './policy.js';

const trigger = { elasticService: 'shop/reviews', triggerType: 'cron', metadata: '{}', cooldownSeconds: 300, now: 0n };

test('votes as the settings say', () => {
  const up = vote('{}', trigger);
  assert.equal(up.vote, 'up');
  assert.match(up.reason, /shop\/reviews/);
  assert.equal(vote('{"vote": "down"}', trigger).vote, 'down');
});

test('refuses other settings with their field', () => {
  assert.throws(() => settingsVote('{"vote": "sideways"}'), { field: 'settings.vote' });
  assert.throws(() => settingsVote('{"colour": 1}'), { field: 'settings' });
  assert.throws(() => settingsVote('[]'), { field: 'settings' });
});
