#!/usr/bin/env bash
# Demo: custom plugins in five languages. Builds the examples (cached), checks each with
# `wasmop plugin check`, runs the DR hook's conformance suite on the C plugin with `wasmop
# plugin test`, and makes real decisions with `wasmop plugin run`: the C follow-the-sun DR
# checker inside and outside business hours, the Go max-age restart predicate on a page of
# pods. Then shows what the chart installed (deploy/manifests).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "building the example plugins (examples/plugins/build.sh, rebuilt only when sources change)"
out=$("$root/examples/plugins/build.sh")
ls -lh "$out"/*.wasm

step "wasmop plugin check, one plugin per language"
check() { "$WASMOP_BIN" plugin check "$out/$1" --hook "$2" --settings "$3" 2>/dev/null; }
check retry-router.wasm routing '{"attempts": 3}'
check schedule-scaler.wasm scaling '{"holidays": ["2026-12-25"]}'
check annotation-restart.wasm restart '{}'
check business-hours-dr.wasm dr '{"utcOffsetMinutes": 60}'
check max-age-restart.wasm restart '{"maxAge": "24h"}'
echo "and a rejected setting names its field:"
check max-age-restart.wasm restart '{"maxAge": "1s"}' || true

step "wasmop plugin test: the dr hook's conformance suite on the C plugin"
"$WASMOP_BIN" plugin test "$out/business-hours-dr.wasm" --hook dr --settings '{"utcOffsetMinutes": 60}' 2>/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step "C business-hours-dr: Monday 10:00 (UTC+1) with no lease, then Monday 20:00"
for now in 1795424400000 1795460400000; do
  printf '{"identity": "eu-1", "now": %s, "lease": null, "wait-time-seconds": 15, "failure-threshold": 3, "started-at": 0, "warmup-seconds": 0}' \
    "$now" >"$work/tick.json"
  "$WASMOP_BIN" plugin run --hook dr --plugin "$out/business-hours-dr.wasm" --input "$work/tick.json" \
    --settings '{"utcOffsetMinutes": 60}' 2>/dev/null
done

step "Go max-age-restart (maxAge 24h): a pod from 2020, an exempt one, a fresh one"
pods='[{"metadata":{"name":"old","namespace":"shop"},"status":{"phase":"Running","startTime":"2020-01-01T00:00:00Z"}},
{"metadata":{"name":"pinned","namespace":"shop","annotations":{"example.com/max-age-exempt":"true"}},"status":{"phase":"Running","startTime":"2020-01-01T00:00:00Z"}},
{"metadata":{"name":"fresh","namespace":"shop"},"status":{"phase":"Running","startTime":"2999-01-01T00:00:00Z"}}]'
printf '{"policy": "demo", "desired": {}, "applied": null, "pods": %s}' "$pods" |
  "$WASMOP_BIN" plugin run --hook restart --plugin "$out/max-age-restart.wasm" --input - \
    --settings '{"maxAge": "24h"}' 2>/dev/null

step "what the chart installed in wasmop-system (deploy/manifests)"
kubectl -n wasmop-system get deploy,svc,pdb,sa,configmap -l app.kubernetes.io/part-of=wasmop
