#!/usr/bin/env bash
# Routing demo (docs/routing.md): bookinfo-style details and reviews in namespace
# demo-routing (examples/routing/). The plan of a DynamicEnv is printed offline first (wasmop
# plan); then the DynamicEnv is applied, its clones become Ready (kwok pods), and the
# VirtualService's new routes and the DynamicEnv's status are printed. Finally it is deleted
# and the VirtualService is shown restored, exactly.
#
# Environment: as every demo.d script (KUBECONFIG, WASMOP_BIN; the operator make demo started
# watches every namespace).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ns=demo-routing
bin=${WASMOP_BIN:?WASMOP_BIN is set by scripts/demo.sh}
say() { printf '\n\033[1m--> %s\033[0m\n' "$*"; }
die() { printf 'routing demo: %s\n' "$*" >&2; exit 1; }

# until_ok SECONDS WHAT COMMAND...: runs COMMAND every 0.2 s until it succeeds.
until_ok() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 0.2
  done
}
routes() { kubectl get virtualservice reviews -n "$ns" -o jsonpath='{.spec}'; }
# The objects of a plan (wasmop plan -o json on stdin), one line each.
read -r -d '' plan_summary <<'PY' || true
import json, sys
for w in json.load(sys.stdin)["objects"]:
    if w["action"] == "apply":
        o = w["object"]
        print("  apply   %-16s %s" % (o["kind"], o["metadata"]["name"]))
    elif w["action"] == "routes":
        print("  routes  %-16s %s: %d routes added" % ("VirtualService", w["name"], len(w["added"])))
    else:
        print("  delete  %-16s %s" % (w["kind"], w["name"]))
PY
# HTTP routes (JSON on stdin): name, match and destinations of each.
read -r -d '' routes_summary <<'PY' || true
import json, sys
for r in json.load(sys.stdin):
    dest = ", ".join(
        "%s/%s%s" % (d["destination"]["host"], d["destination"]["subset"],
                     " %d%%" % d["weight"] if "weight" in d else "")
        for d in r.get("route", []))
    print("  %s\n      match %s\n      to    %s"
          % (r.get("name", "(unnamed)"), json.dumps(r.get("match", []), separators=(",", ":")), dest))
PY

say "routing: namespace $ns with bookinfo-style details and reviews (examples/routing/bookinfo.yaml)"
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
# A rerun starts from scratch: the DynamicEnv first (its finalizer restores the routes).
kubectl delete dynamicenv --all -n "$ns" --wait=true >/dev/null
kubectl apply --server-side -f "$root/examples/routing/bookinfo.yaml" >/dev/null
kubectl get deployments,services,destinationrules,virtualservices -n "$ns"
before=$(routes)

say "routing: the plan, offline (wasmop plan -f examples/routing): the objects it would write"
"$bin" plan -f "$root/examples/routing" -o json 2>/dev/null | python3 -c "$plan_summary"

say "routing: kubectl apply -f examples/routing/dynamicenv.yaml"
kubectl apply -f "$root/examples/routing/dynamicenv.yaml"
until_ok 120 "DynamicEnv jason to be ready" sh -c "[ \"\$(kubectl get dynamicenv jason -n $ns -o jsonpath='{.status.state}')\" = ready ]"
kubectl get dynamicenv -n "$ns"

say "routing: the clones, Ready"
kubectl get deployments -n "$ns" -l dynamic-env=true
kubectl get destinationrules -n "$ns" -l dynamic-env=true

say "routing: VirtualService reviews, its routes now (copies before each route to the shared version)"
kubectl get virtualservice reviews -n "$ns" -o jsonpath='{.spec.http}' | python3 -c "$routes_summary"

say "routing: the DynamicEnv's status"
kubectl get dynamicenv jason -n "$ns" -o yaml | sed -n '/^status:/,$p'
echo "Events of DynamicEnv jason:"
uid=$(kubectl get dynamicenv jason -n "$ns" -o jsonpath='{.metadata.uid}')
kubectl get events -n "$ns" --field-selector "involvedObject.uid=$uid" \
  -o custom-columns=REASON:.reason,MESSAGE:.message --sort-by=.metadata.creationTimestamp

say "routing: kubectl delete dynamicenv jason"
kubectl delete dynamicenv jason -n "$ns" --wait=true
after=$(routes)
if [ "$before" = "$after" ]; then
  echo "VirtualService reviews is exactly as before the DynamicEnv:"
else
  die "VirtualService reviews differs from before: $after"
fi
kubectl get virtualservice reviews -n "$ns" -o jsonpath='{range .spec.http[*]}  {.name}{"\n"}{end}'
kubectl get deployments,destinationrules -n "$ns"
echo "(namespace $ns is left for you to look at; delete it with: kubectl delete namespace $ns)"
