#!/usr/bin/env bash
# DR demo (docs/dr.md): two wasmop instances share one Lease (x = 1 s, y = 3). One is active,
# the other passive; /health/ready?checkifreadonly=true tells them apart (200 / 502). The
# active one is killed (SIGKILL); the other takes over and the demo prints how long it took,
# the answers after, the Lease and the Events.
#
# Runs on the local control plane of deploy/dev (make demo). Both instances run as the chart's
# ServiceAccount in a namespace of their own (WASMOP_DEMO_DR_NS, default demo-dr), listening on
# 127.0.0.1:18181 and 127.0.0.1:18182. Environment: as every demo.d script.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ns=${WASMOP_DEMO_DR_NS:-demo-dr}
bin=${WASMOP_BIN:?WASMOP_BIN is set by scripts/demo.sh}
logs=${WASMOP_LOGS:-$(mktemp -d)}
say() { printf '\n\033[1m--> %s\033[0m\n' "$*"; }
die() { printf 'dr demo: %s\n' "$*" >&2; exit 1; }

declare -A pid addr
addr[a]=127.0.0.1:18181
addr[b]=127.0.0.1:18182
cleanup() {
  local p
  for p in "${pid[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# code NAME [QUERY]: the status code of /health/ready?QUERY on instance NAME ("---": no answer).
code() {
  local c
  c=$(curl -s -o /dev/null -w '%{http_code}' "http://${addr[$1]}/health/ready${2:+?$2}" 2>/dev/null || true)
  [ "$c" = 000 ] || [ -z "$c" ] && c=---
  echo "$c"
}
# view NAME: state and holder from /dr.
view() {
  curl -s "http://${addr[$1]}/dr" 2>/dev/null |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["state"], "(lease holder:", str(s["holder"]) + ")")' 2>/dev/null ||
    echo "(not running)"
}
show() {
  local n
  for n in a b; do
    printf '  dr-demo-%s  checkifreadonly=true -> %s   %s\n' "$n" "$(code "$n" checkifreadonly=true)" "$(view "$n")"
  done
}
# until_ok SECONDS WHAT COMMAND...: runs COMMAND every 50 ms until it succeeds.
until_ok() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 0.05
  done
}
is_code() { [ "$(code "$1" checkifreadonly=true)" = "$2" ]; }
holder_is() { curl -s "http://${addr[$1]}/dr" | grep -q "\"holder\":\"$2\""; }

say "dr: namespace $ns with its own plugin registry (dr-lease, k8s-lease backend, x = 1 s, y = 3)"
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
kubectl delete lease wasmop -n "$ns" --ignore-not-found >/dev/null
kubectl apply -n "$ns" -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: wasmop-plugins}
data:
  plugins.yaml: |
    plugins:
      - name: dr-lease
        hook: dr
        source: builtin://dr-lease
        settings: {backend: k8s-lease, leaseName: wasmop, waitTimeInSeconds: 1, failureThreshold: 3}
    defaults: {dr: dr-lease}
YAML
kubectl apply -n "$ns" -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: wasmop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasmop-namespace}
subjects: [{kind: ServiceAccount, name: wasmop, namespace: wasmop-system}]
YAML
sa_kubeconfig=$("$root/deploy/dev/sa-kubeconfig.sh" wasmop-system wasmop "$logs/wasmop-dr-demo.kubeconfig")

start() {
  KUBECONFIG=$sa_kubeconfig "$bin" run --namespace "$ns" --watch-namespace "$ns" \
    --listen "${addr[$1]}" --identity "dr-demo-$1" >"$logs/wasmop-dr-demo-$1.log" 2>&1 &
  pid[$1]=$!
  disown "${pid[$1]}" # no job-control notice when it is killed
}

say "dr: starting dr-demo-a; it creates the Lease and becomes active"
start a
until_ok 60 "dr-demo-a to be active" is_code a 200
say "dr: starting dr-demo-b; it finds the Lease held and stays passive"
start b
until_ok 60 "dr-demo-b to see dr-demo-a's lease" holder_is b dr-demo-a
show
echo "  /health/ready without the parameter: dr-demo-a $(code a), dr-demo-b $(code b) (both stay ready)"
kubectl get lease wasmop -n "$ns"

say "dr: SIGKILL dr-demo-a; dr-demo-b takes over once the lease is older than y × x = 3 s"
started=$(date +%s%N)
kill -KILL "${pid[a]}"
until_ok 30 "dr-demo-b to take over" is_code b 200
took=$((($(date +%s%N) - started) / 1000000))
printf '  dr-demo-b active %d ms after the kill (bound: (y+1) × x = 4000 ms plus latency)\n' "$took"
show
kubectl get lease wasmop -n "$ns" \
  -o custom-columns='HOLDER:.spec.holderIdentity,DURATION:.spec.leaseDurationSeconds,TRANSITIONS:.spec.leaseTransitions,RENEWED:.spec.renewTime'

say "dr: dr-demo-a comes back: passive, dr-demo-b keeps the lease"
start a
until_ok 60 "dr-demo-a to see dr-demo-b's lease" holder_is a dr-demo-b
show

say "dr: Events on the Lease (recorded by the active instance)"
kubectl get events.events.k8s.io -n "$ns" \
  -o custom-columns='REASON:.reason,BY:.reportingInstance,NOTE:.note' | grep -E '^(REASON|DR)' | tail -n 5
