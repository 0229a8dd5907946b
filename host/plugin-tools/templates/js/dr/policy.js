// {{name}}: a dr plugin. It follows the lease as the default plugin, dr-lease, does (README.md
// lists the rules): a starting point to change where your sites need it.
//
// No WIT imports, so that `node --test` runs it (policy.test.js); plugin.js hands it the world's
// calls. `r` is the WIT state-request as componentize-js gives it: camelCase fields, `lease`
// undefined when there is none, and the s64 times as BigInts.

import { fail, parseSettings } from './wasmop-plugin.js';

// The keys of the host's DR settings (docs/dr.md), which a dr entry's settings carry beside the
// plugin's own: the host checks them.
export const HOST_KEYS = ['backend', 'leaseName', 'waitTimeInSeconds', 'failureThreshold', 'warmupSeconds', 'podIdentifier', 'dynamoDB'];

// The lease owner that keeps every instance passive (Admiral's manual switch).
export const SKIP_LEASE_POD = 'SKIP-LEASE-POD';

// Checks the settings JSON object: the host's keys only, for now.
export function checkSettings(text) {
  parseSettings(text, HOST_KEYS);
}

const decide = (state, action, reason) => ({ state, action, reason });

// The state-decision of one tick, the first matching rule winning.
export function check(r) {
  if (r.waitTimeSeconds === 0 || r.failureThreshold === 0) {
    throw fail('wait-time-seconds and failure-threshold must be at least 1', 'request');
  }
  const now = BigInt(r.now);
  const warming = now - BigInt(r.startedAt) < BigInt(r.warmupSeconds) * 1000n;
  const expiryMs = BigInt(r.waitTimeSeconds) * BigInt(r.failureThreshold) * 1000n;
  const lease = r.lease;
  if (lease === undefined) {
    return warming ? decide('passive', 'none', 'no lease, warming up') : decide('active', 'create', 'no lease: creating it');
  }
  if (lease.owner === SKIP_LEASE_POD) return decide('passive', 'none', 'the owner is SKIP-LEASE-POD: every instance stays passive');
  if (warming) return decide('passive', 'none', 'warming up');
  if (lease.owner === r.identity) return decide('active', 'renew', 'holding the lease: renewing it');
  const age = now - BigInt(lease.updatedTime);
  if (age > expiryMs) {
    return decide('active', 'takeover', `the lease of ${lease.owner} was renewed ${age} ms ago, more than ${expiryMs} ms: taking it over`);
  }
  return decide('passive', 'none', `the lease is held by ${lease.owner}`);
}
