// Example `restart` plugin in JavaScript: restart on request, by annotation.
//
// A pod restarts when it carries the annotation named in the settings (default
// `example.com/restart-requested-at`) with an RFC 3339 time, and it started before that time.
// Put the annotation on a workload's pod template (or on pods directly) to ask for a rolling
// restart after, say, a rotated secret or a patched shared library; pods started after the
// requested time are left alone, so the decision is idempotent and a retry never restarts a
// pod twice. Pods without the annotation, or with a value that is not a time, never restart
// (the latter with a reason that says so).
//
// Settings (optional): {"annotation": "example.com/restart-requested-at"}
//
// Built with componentize-js (StarlingMonkey) with `-d http fetch-event`: the world imports
// no wasi:http and exports no incoming handler. See README.md.

import { log } from 'wasmop:plugin/log@0.1.0';

import { fail, parsePods, parseSettings as parseSettingsObject } from '../../../plugins/sdk-js/wasmop-plugin.js';

const DEFAULT_ANNOTATION = 'example.com/restart-requested-at';
// A Kubernetes annotation key: optional DNS prefix, then a name of at most 63 characters.
const ANNOTATION_KEY = /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

// Thrown values (`fail(message, field)`) become the `plugin-error` of the result.
function parseSettings(text) {
  const settings = parseSettingsObject(text, ['annotation']);
  const annotation = settings.annotation ?? DEFAULT_ANNOTATION;
  if (typeof annotation !== 'string' || !ANNOTATION_KEY.test(annotation)) {
    throw fail(`annotation must be an annotation key, got ${JSON.stringify(annotation)}`, 'settings.annotation');
  }
  return { annotation };
}

// RFC 3339 as Kubernetes writes it (`2026-11-22T08:00:00Z`, offsets and fractions allowed).
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

function parseTime(text) {
  if (typeof text !== 'string' || !RFC3339.test(text)) return NaN;
  return Date.parse(text);
}

export function decide(pod, annotation) {
  const name = `${pod?.metadata?.namespace ?? '?'}/${pod?.metadata?.name ?? '?'}`;
  const requested = pod?.metadata?.annotations?.[annotation];
  if (requested === undefined) {
    return { restart: false, reason: `${name}: no ${annotation} annotation` };
  }
  const requestedAt = parseTime(requested);
  if (Number.isNaN(requestedAt)) {
    return { restart: false, reason: `${name}: ${annotation} is ${JSON.stringify(requested)}, not an RFC 3339 time; ignored` };
  }
  const startedText = pod?.status?.startTime ?? pod?.metadata?.creationTimestamp;
  const startedAt = parseTime(startedText);
  if (Number.isNaN(startedAt)) {
    return { restart: true, reason: `${name}: restart requested at ${requested} and the pod has no start time` };
  }
  if (startedAt < requestedAt) {
    return { restart: true, reason: `${name}: restart requested at ${requested}, pod started at ${startedText}` };
  }
  return { restart: false, reason: `${name}: started at ${startedText}, after the restart requested at ${requested}` };
}

export function info() {
  return { name: 'annotation-restart', version: '0.1.0', hook: 'restart' };
}

export function validateSettings(settings) {
  parseSettings(settings);
}

export function evaluate(settings, request) {
  const { annotation } = parseSettings(settings);
  const pods = parsePods(request.pods);
  const decisions = pods.map((pod) => decide(pod, annotation));
  const restarts = decisions.filter((d) => d.restart).length;
  log('debug', `policy ${request.policy}: ${restarts} of ${pods.length} pods restart (annotation ${annotation})`);
  return decisions;
}
