// {{name}}: the restart-predicate world's exports, which componentize-js binds to the WIT at build
// time; the policy is in policy.js. A thrown `fail(message, field)` becomes the plugin-error.

import { log } from 'wasmop:plugin/log@0.1.0';

import { evaluate as decide, settingsRestart } from './policy.js';

export function info() {
  return { name: '{{name}}', version: '0.1.0', hook: 'restart' };
}

export function validateSettings(settings) {
  settingsRestart(settings);
}

export function evaluate(settings, request) {
  const decisions = decide(settingsRestart(settings), request.pods);
  log('debug', `policy ${request.policy}: ${decisions.length} pods judged`);
  return decisions;
}
