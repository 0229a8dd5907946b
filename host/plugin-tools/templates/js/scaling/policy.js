// {{name}}: a scaling plugin. Every trigger gets the vote its settings name ('up' unless they say
// 'down'): a starting point to replace with a policy that reads the trigger.
//
// No WIT imports, so that `node --test` runs it (policy.test.js); plugin.js hands it the world's
// calls. `request` is the WIT trigger-request as componentize-js gives it (camelCase fields).

import { fail, parseSettings } from './wasmop-plugin.js';

// The vote the settings JSON object names: 'up' (the default) or 'down'.
export function settingsVote(text) {
  const vote = parseSettings(text, ['vote']).vote ?? 'up';
  if (vote !== 'up' && vote !== 'down') {
    throw fail(`vote must be "up" or "down", got ${JSON.stringify(vote)}`, 'settings.vote');
  }
  return vote;
}

// The trigger-vote for one trigger.
export function vote(settingsText, request) {
  const v = settingsVote(settingsText);
  return { vote: v, value: undefined, reason: `${request.triggerType} trigger of ${request.elasticService}: the settings' vote, ${v}` };
}
