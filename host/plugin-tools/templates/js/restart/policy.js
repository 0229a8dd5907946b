// {{name}}: a restart plugin. No pod restarts unless the settings say {"restart": true}: a
// starting point to replace with a policy that compares each pod with the desired proxy state.
//
// No WIT imports, so that `node --test` runs it (policy.test.js); plugin.js hands it the world's
// calls.

import { fail, parsePods, parseSettings } from './wasmop-plugin.js';

// Whether the settings JSON object says to restart every pod (false by default).
export function settingsRestart(text) {
  const restart = parseSettings(text, ['restart']).restart ?? false;
  if (typeof restart !== 'boolean') {
    throw fail(`restart must be true or false, got ${JSON.stringify(restart)}`, 'settings.restart');
  }
  return restart;
}

// One pod-decision per pod of the page (`pods`, a JSON array of Pods), in page order.
export function evaluate(restart, pods) {
  return parsePods(pods).map((pod) => ({
    restart,
    reason: `${pod?.metadata?.namespace ?? '?'}/${pod?.metadata?.name ?? '?'}: the settings' restart is ${restart}`,
  }));
}
