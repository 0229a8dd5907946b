// {{name}}: the state-checker world's exports, which componentize-js binds to the WIT at build
// time; the policy is in policy.js. A thrown `fail(message, field)` becomes the plugin-error.

import { log } from 'wasmop:plugin/log@0.1.0';

import { check as decide, checkSettings } from './policy.js';

export function info() {
  return { name: '{{name}}', version: '0.1.0', hook: 'dr' };
}

export function validateSettings(settings) {
  checkSettings(settings);
}

export function check(settings, request) {
  checkSettings(settings);
  const d = decide(request);
  log('debug', `${request.identity}: ${d.reason}`);
  return d;
}
