// {{name}}: a routing plugin. Requests that match one of the DynamicEnv's istioMatches go to its
// subset: before each route to the service's default version, one copy per istioMatch, narrowed
// by it and sent to the subset (README.md says what the host checks).
//
// No WIT imports, so that `node --test` runs it (policy.test.js); plugin.js hands it the world's
// calls. `request` is the WIT route-request as componentize-js gives it (camelCase fields, a
// string-match as `{tag: 'exact', val: 'jason'}`).

import { fail, parseJsonObject } from './wasmop-plugin.js';

// Checks the settings JSON object: this plugin takes no settings yet.
export function checkSettings(text) {
  const keys = Object.keys(parseJsonObject(text, 'settings', 'settings'));
  if (keys.length > 0) {
    throw fail(`unknown settings keys ${JSON.stringify(keys)}: this plugin takes no settings yet`, 'settings');
  }
}

// Whether a destination host names the request's service: host, host.namespace,
// host.namespace.svc or host.namespace.svc.cluster.local; the short name only when the
// VirtualService is in the service's namespace (Istio reads it in the VirtualService's).
function isService(host, r, vsNamespace) {
  const long = `${r.host}.${r.namespace}`;
  return (host === r.host && (vsNamespace === '' || vsNamespace === r.namespace))
    || [long, `${long}.svc`, `${long}.svc.cluster.local`].includes(host);
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// `entry` (a route's match entry) narrowed by the istioMatch `m`, or null when it already has
// another condition on one of m's headers or source labels.
function narrow(entry, m) {
  const out = structuredClone(entry);
  const conditions = [
    ...m.headers.map((h) => ['headers', h.name, { [h.value.tag]: h.value.val }]),
    ...m.sourceLabels.map((l) => ['sourceLabels', l.key, l.value]),
  ];
  for (const [field, key, want] of conditions) {
    out[field] ??= {};
    if (!isObject(out[field])) return null;
    const have = out[field][key];
    if (have !== undefined && JSON.stringify(have) !== JSON.stringify(want)) return null;
    out[field][key] = want;
  }
  return out;
}

// The route's destination to the service at its default version, or undefined.
function defaultDestination(route, r, vsNamespace) {
  return (Array.isArray(route.route) ? route.route : [])
    .map((d) => d?.destination)
    .find((d) => isObject(d) && isService(d.host, r, vsNamespace) && d.subset === r.defaultVersion);
}

// The complete new spec.http of the request's VirtualService.
export function route(r) {
  let vs;
  try {
    vs = JSON.parse(r.virtualService);
  } catch (e) {
    throw fail(`not JSON: ${e.message}`, 'request.virtual-service');
  }
  const routes = vs?.spec?.http ?? [];
  if (!Array.isArray(routes)) throw fail('spec.http is not a list', 'request.virtual-service');
  const vsNamespace = vs?.metadata?.namespace ?? '';
  const out = [];
  let copies = 0;
  for (const original of routes) {
    if (!isObject(original)) throw fail('spec.http holds a route that is not an object', 'request.virtual-service');
    if (typeof original.name === 'string' && original.name.startsWith(r.routePrefix)) {
      continue; // this plugin's earlier output: made again below
    }
    const destination = defaultDestination(original, r, vsNamespace);
    if (destination !== undefined) {
      const entries = Array.isArray(original.match) && original.match.length > 0 ? original.match : [{}];
      for (const m of r.matches) {
        const narrowed = entries.filter(isObject).map((e) => narrow(e, m)).filter((e) => e !== null);
        if (narrowed.length === 0) continue;
        out.push({
          ...structuredClone(original),
          name: `${r.routePrefix}${copies++}`,
          match: narrowed,
          route: [{ destination: { ...destination, subset: r.subset } }],
        });
      }
    }
    out.push(original);
  }
  return out;
}
