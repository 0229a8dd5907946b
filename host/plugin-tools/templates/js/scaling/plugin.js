// {{name}}: the scaler world's exports, which componentize-js binds to the WIT at build time; the
// policy is in policy.js. A thrown `fail(message, field)` becomes the plugin-error.

import { log } from 'wasmop:plugin/log@0.1.0';

import { settingsVote, vote as decide } from './policy.js';

export function info() {
  return { name: '{{name}}', version: '0.1.0', hook: 'scaling' };
}

export function validateSettings(settings) {
  settingsVote(settings);
}

export function vote(settings, request) {
  const v = decide(settings, request);
  log('debug', v.reason);
  return v;
}
