// {{name}}: the router world's exports, which componentize-js binds to the WIT at build time; the
// policy is in policy.js. A thrown `fail(message, field)` becomes the plugin-error.

import { log } from 'wasmop:plugin/log@0.1.0';

import { checkSettings, route as routes } from './policy.js';

export function info() {
  return { name: '{{name}}', version: '0.1.0', hook: 'routing' };
}

export function validateSettings(settings) {
  checkSettings(settings);
}

export function route(settings, request) {
  checkSettings(settings);
  const http = routes(request);
  log('debug', `${request.dynamicEnv}: ${http.length} routes for subset ${request.subset}`);
  return { http: JSON.stringify(http) };
}
