// Helpers for wasmop plugins written in JavaScript (componentize-js), beside the bindings it
// generates from plugins/sdk/wit/plugin.wit. Plain ES module without WIT imports, so that a
// plugin's logic and these helpers also run under `node --test`.
//
// With jco, a world's exports are the module's exported functions (camelCase of the WIT names:
// `validateSettings`), records are objects with camelCase fields (`request.elasticService`),
// enums and variant cases are their WIT names as strings (`'restart'`, `'up'`), `option` is a
// value or `undefined`, and a `result`'s error is a thrown value: throw `fail(...)` to return a
// `plugin-error`. The host's `log` is `import { log } from 'wasmop:plugin/log@0.1.0'`, called
// as `log('debug', message)`.

/**
 * A `plugin-error` to throw from an export: `{ message, field }`, `field` a dotted path such
 * as `settings.annotation` (left out when undefined).
 */
export function fail(message, field) {
  return field === undefined ? { message } : { message, field };
}

/**
 * Parses `text` (the settings, or a request field that carries JSON) as a JSON object.
 * Throws `fail(...)` at `field` when it is not JSON or not an object; `what` names it in the
 * message (e.g. `'settings'`).
 */
export function parseJsonObject(text, what, field) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw fail(`${what} are not valid JSON: ${e.message}`, field);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw fail(`${what} must be a JSON object`, field);
  }
  return value;
}

/**
 * Parses the settings JSON object and refuses keys other than `keys` (an array of names), with
 * a message that lists them. Returns the object.
 */
export function parseSettings(text, keys) {
  const settings = parseJsonObject(text, 'settings', 'settings');
  for (const key of Object.keys(settings)) {
    if (!keys.includes(key)) {
      throw fail(`unknown settings key ${JSON.stringify(key)}; the keys are ${keys.join(', ')}`, 'settings');
    }
  }
  return settings;
}

/**
 * Parses a restart request's `pods` (a JSON array of core/v1 Pods); throws `fail(...)` at
 * `request.pods` otherwise.
 */
export function parsePods(text) {
  let pods;
  try {
    pods = JSON.parse(text);
  } catch (e) {
    throw fail(`pods are not valid JSON: ${e.message}`, 'request.pods');
  }
  if (!Array.isArray(pods)) {
    throw fail('pods must be a JSON array of Pod objects', 'request.pods');
  }
  return pods;
}

const GO_UNITS = { h: 3600e3, m: 60e3, s: 1e3, ms: 1, us: 1e-3, 'µs': 1e-3, ns: 1e-6 };

/**
 * Parses a positive Go duration (`24h`, `1h30m`, `1.5h`, `500ms`) into milliseconds; `NaN`
 * for anything else (a sign, `0`, a unit other than h, m, s, ms, us, µs, ns).
 */
export function parseGoDuration(text) {
  if (typeof text !== 'string' || text === '') return NaN;
  let total = 0;
  const rest = text.replace(/(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)/gy, (_, n, unit) => {
    total += Number(n) * GO_UNITS[unit];
    return '';
  });
  return rest === '' && total > 0 ? total : NaN;
}
