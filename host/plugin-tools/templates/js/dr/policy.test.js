// Unit tests of policy.js: `node --test`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SKIP_LEASE_POD, check, checkSettings } from './policy.js';

const tick = (owner, updatedAgoMs = 0n, edit = {}) => ({
  identity: 'eu-1', now: 1000000n, waitTimeSeconds: 15, failureThreshold: 3, startedAt: 0n, warmupSeconds: 0,
  lease: owner === undefined ? undefined : { owner, updatedTime: 1000000n - updatedAgoMs, notes: '' },
  ...edit,
});

test('follows the lease', () => {
  const cases = [
    [tick(), 'active', 'create'],
    [tick('eu-1', 15000n), 'active', 'renew'],
    [tick('us-1', 45000n), 'passive', 'none'],
    [tick('us-1', 45001n), 'active', 'takeover'],
    [tick(SKIP_LEASE_POD, 900000n), 'passive', 'none'],
    [tick(undefined, 0n, { warmupSeconds: 2000 }), 'passive', 'none'],
  ];
  for (const [r, state, action] of cases) {
    const d = check(r);
    assert.deepEqual([d.state, d.action], [state, action], d.reason);
  }
});

test("takes the host's keys and refuses others", () => {
  checkSettings('{"backend": "k8s-lease", "waitTimeInSeconds": 5}');
  assert.throws(() => checkSettings('{"colour": 1}'), { field: 'settings' });
  assert.throws(() => check(tick(undefined, 0n, { failureThreshold: 0 })), { field: 'request' });
});
