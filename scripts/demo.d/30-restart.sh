#!/usr/bin/env bash
# Restart demo (docs/restart.md): a ProxyRestartPolicy moves the desired proxy image forward
# and only the outdated workloads restart, once each. A workload whose team already moved,
# one that opted out, and a bare pod (which only a person can restart) show the rest of the
# rules. Prints the policy's status and the Events.
#
# Runs on the local control plane of deploy/dev with the operator make demo started (all
# controllers, all namespaces). Pods "with a sidecar" are kwok pods whose template carries
# Istio's injection annotation and an istio-proxy container; nothing injects a new proxy here,
# so re-created pods keep their template's image, and the policy knows them as restarted for
# this change by the pod-template annotation it set.
# Environment: as every demo.d script; WASMOP_DEMO_RESTART_NS (default demo-restart).
set -euo pipefail
ns=${WASMOP_DEMO_RESTART_NS:-demo-restart}
policy=demo-mesh
old=docker.io/istio/proxyv2:1.26.4
new=docker.io/istio/proxyv2:1.27.1
say() { printf '\n\033[1m--> %s\033[0m\n' "$*"; }
die() { printf 'restart demo: %s\n' "$*" >&2; exit 1; }

# until SECONDS WHAT COMMAND...: runs COMMAND every 0.2 s until it succeeds.
until_ok() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 0.2
  done
}
field() { kubectl get proxyrestartpolicy "$policy" -o jsonpath="$1" 2>/dev/null; }
# state_is STATE: the policy was reconciled at its current generation into STATE.
state_is() {
  [ "$(field '{.status.state}')" = "$1" ] &&
    [ "$(field '{.status.observedGeneration}')" = "$(field '{.metadata.generation}')" ]
}
deployment() { # name image [extra template annotation, YAML flow] [annotations, YAML flow map]
  local extra=${3:+, $3} annotations=${4:-"{}"}
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, annotations: $annotations}
spec:
  replicas: 2
  selector: {matchLabels: {app: $1}}
  template:
    metadata:
      labels: {app: $1}
      annotations: {sidecar.istio.io/status: '{"containers":["istio-proxy"]}'$extra}
    spec:
      containers:
        - {name: app, image: registry.invalid/$1:1}
        - {name: istio-proxy, image: $2}
---
EOF
}
generations() {
  kubectl get deployments -n "$ns" -o custom-columns='DEPLOYMENT:.metadata.name,GENERATION:.metadata.generation,PROXY:.spec.template.spec.containers[1].image,RESTARTED-BY:.spec.template.metadata.annotations.wasmop\.dev/restarted-by,RESTARTED-AT:.spec.template.metadata.annotations.wasmop\.dev/restartedAt'
}
rolled_out() {
  for d in cart checkout search legacy; do
    [ "$(kubectl get deployment "$d" -n "$ns" -o jsonpath='{.status.observedGeneration}/{.status.updatedReplicas}/{.status.readyReplicas}/{.status.replicas}')" = \
      "$(kubectl get deployment "$d" -n "$ns" -o jsonpath='{.metadata.generation}')/2/2/2" ] || return 1
  done
}

say "restart: namespace $ns with four Deployments and a bare pod, all on proxy $old"
# A rerun starts from scratch.
kubectl delete proxyrestartpolicy "$policy" --ignore-not-found --wait=true >/dev/null
kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$ns" >/dev/null
kubectl label namespace "$ns" wasmop.dev/demo=restart >/dev/null
{
  deployment cart "$old"
  deployment checkout "$old"
  deployment search "$old"
  deployment legacy "$old" "" '{wasmop.dev/restart-exclude: "true"}'
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: debug
  labels: {app: debug}
  annotations: {sidecar.istio.io/status: '{"containers":["istio-proxy"]}'}
spec:
  containers:
    - {name: app, image: registry.invalid/debug:1}
    - {name: istio-proxy, image: $old}
EOF
} | kubectl apply -n "$ns" -f - >/dev/null
until_ok 90 "the Deployments to be ready" rolled_out
until_ok 60 "pod debug to be Running" sh -c "[ \"\$(kubectl get pod debug -n $ns -o jsonpath='{.status.phase}')\" = Running ]"
kubectl get pods -n "$ns" -o custom-columns='POD:.metadata.name,PHASE:.status.phase,PROXY:.spec.containers[1].image'

say "restart: ProxyRestartPolicy $policy wants $old for namespaces labelled wasmop.dev/demo=restart"
kubectl apply -f - >/dev/null <<EOF
apiVersion: wasmop.dev/v1alpha1
kind: ProxyRestartPolicy
metadata: {name: $policy}
spec:
  namespaceSelector: {matchLabels: {wasmop.dev/demo: restart}}
  proxy: {image: $old}
EOF
until_ok 60 "state Ready" state_is Ready
kubectl get proxyrestartpolicy "$policy"
echo "everything already runs $old: nothing restarted; legacy opted out (wasmop.dev/restart-exclude: \"true\")"

say "restart: the search team moves to $new on its own (an ordinary rollout)"
kubectl set image deployment/search -n "$ns" istio-proxy="$new" >/dev/null
until_ok 90 "search to be rolled out" rolled_out

say "restart: the policy moves forward to $new"
kubectl patch proxyrestartpolicy "$policy" --type=merge -p "{\"spec\":{\"proxy\":{\"image\":\"$new\"}}}" >/dev/null
until_ok 60 "the policy to be reconciled" sh -c "[ \"\$(kubectl get proxyrestartpolicy $policy -o jsonpath='{.status.observedGeneration}')\" = 2 ]"
until_ok 90 "the restarted Deployments to be rolled out" rolled_out
kubectl get proxyrestartpolicy "$policy" -o wide
echo
echo "only the outdated workloads restarted, once each (generation 2); search moved itself, legacy opted out:"
generations

say "restart: the policy's status"
kubectl get proxyrestartpolicy "$policy" -o jsonpath='state: {.status.state}{"\n"}description: {.status.description}{"\n"}summary: {.status.summary}{"\n"}applied image: {.status.appliedConfiguration.proxy.image}{"\n"}'
kubectl get proxyrestartpolicy "$policy" -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'

say "restart: Events of the policy (namespace default) and of the workloads and pods in $ns"
uid=$(field '{.metadata.uid}')
kubectl get events -n default --field-selector "involvedObject.uid=$uid" \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message --sort-by=.metadata.creationTimestamp
kubectl get events -n "$ns" --field-selector reportingComponent=wasmop \
  -o custom-columns=TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message --sort-by=.metadata.creationTimestamp
echo "(namespace $ns and ProxyRestartPolicy $policy are left for you to look at; delete them with:"
echo " kubectl delete proxyrestartpolicy $policy && kubectl delete namespace $ns)"
