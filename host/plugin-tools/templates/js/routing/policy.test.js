// Unit tests of policy.js: `node --test`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { checkSettings, route } from './policy.js';

const request = (http) => ({
  dynamicEnv: 'shop/feature-x', uniqueName: 'reviews-shop-feature-x', subset: 'feature-x',
  host: 'reviews', namespace: 'shop', defaultVersion: 'shared', routePrefix: 'de-feature-x-',
  matches: [{ headers: [{ name: 'end-user', value: { tag: 'exact', val: 'jason' } }], sourceLabels: [] }],
  virtualService: JSON.stringify({ metadata: { namespace: 'shop' }, spec: { http } }),
});

test('a copy of the default route goes to the subset', () => {
  const original = { name: 'default', match: [{ uri: { prefix: '/' } }],
    route: [{ destination: { host: 'reviews', subset: 'shared' }, weight: 100 }] };
  const http = route(request([original]));
  assert.deepEqual(http, [
    { name: 'de-feature-x-0', match: [{ uri: { prefix: '/' }, headers: { 'end-user': { exact: 'jason' } } }],
      route: [{ destination: { host: 'reviews', subset: 'feature-x' } }] },
    original,
  ]);
  assert.deepEqual(route(request(http)), http, 'its own output gives the same routes');
});

test('other routes stay and conflicting entries are left out', () => {
  const other = { name: 'v3', route: [{ destination: { host: 'reviews', subset: 'v3' } }] };
  const bob = { name: 'bob', match: [{ headers: { 'end-user': { exact: 'bob' } } }],
    route: [{ destination: { host: 'reviews', subset: 'shared' } }] };
  assert.deepEqual(route(request([other, bob])), [other, bob]);
});

test('errors name their field', () => {
  checkSettings('{}');
  assert.throws(() => checkSettings('{"colour": 1}'), { field: 'settings' });
  assert.throws(() => route({ ...request([]), virtualService: 'nope' }), { field: 'request.virtual-service' });
});
