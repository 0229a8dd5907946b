#!/usr/bin/env bash
# Scaling demo (docs/scaling.md): a Deployment whose Prometheus trigger says it is idle is
# scaled to zero; a request sent through the resolver is held, the Deployment scales back up,
# and the request is answered by the new pod. Prints the cold-start time.
#
# Runs on the local control plane of deploy/dev with the operator make demo started. Everything
# listens on 127.0.0.1: Prometheus on 9090 (the address examples/plugins-configmap.yaml grants
# the scaling plugin), a test exporter, `wasmop resolver` on 18012/18013 (with
# --dial-prefix-map, so it dials kwok's pod IPs on loopback) and the backend of the "pod".
# Environment: as every demo.d script; WASMOP_DEMO_SCALING_NS (default demo-scaling) and
# WASMOP_DEMO_RESOLVER_NS, the operator's --resolver-namespace (default wasmop-system), where
# kwok pods labelled as the resolver's stand in for the resolver pods while the demo runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ns=${WASMOP_DEMO_SCALING_NS:-demo-scaling}
resolver_ns=${WASMOP_DEMO_RESOLVER_NS:-wasmop-system}
bin=${WASMOP_BIN:?WASMOP_BIN is set by scripts/demo.sh}
logs=${WASMOP_LOGS:-$(mktemp -d)}
say() { printf '\n\033[1m--> %s\033[0m\n' "$*"; }
die() { printf 'scaling demo: %s\n' "$*" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kubectl delete deployment wasmop-resolver-demo -n "$resolver_ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# until SECONDS WHAT COMMAND...: runs COMMAND every 0.2 s until it succeeds.
until_ok() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 0.2
  done
}

prometheus=${WASMOP_PROMETHEUS:-$(command -v prometheus || true)}
if [ -z "$prometheus" ]; then
  prometheus=$(compgen -G "${WASMOP_CACHE:-$HOME/.cache/wasmop}/prometheus-*/usr/bin/prometheus" | sort | tail -n 1 || true)
fi
[ -x "$prometheus" ] || die "no Prometheus: run scripts/setup.sh"

say "scaling: a test exporter and Prometheus on 127.0.0.1:9090 (scrape every second)"
mkdir -p "$work/metrics"
echo "demo_requests_in_flight 0" >"$work/metrics/metrics"
exporter_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$work/metrics" "$exporter_port" >"$logs/demo-exporter.log" 2>&1 &
pids+=($!)
cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: demo-exporter
    static_configs: [{targets: ['127.0.0.1:$exporter_port']}]
EOF
"$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:9090 --log.level=warn >"$logs/demo-prometheus.log" 2>&1 &
pids+=($!)
until_ok 60 "Prometheus on 127.0.0.1:9090" \
  sh -c "curl -fsS 'http://127.0.0.1:9090/api/v1/query?query=up%7Bjob%3D%22demo-exporter%22%7D' | grep -q '\"1\"\]'"
echo "Prometheus scrapes demo_requests_in_flight = 0 (idle)"

say "scaling: namespace $ns with Deployment web, Service web and an ElasticService"
# A rerun starts from scratch: the ElasticService first (its finalizer restores the workload).
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
kubectl delete elasticservice web -n "$ns" --ignore-not-found --wait=true >/dev/null
kubectl delete deployment,service web -n "$ns" --ignore-not-found --wait=true >/dev/null
kubectl apply -n "$ns" -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: registry.invalid/web:1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: wasmop.dev/v1alpha1
kind: ElasticService
metadata: {name: web}
spec:
  service: web
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minTargetReplicas: 1
  cooldownPeriod: 10
  triggers:
    - type: prometheus
      metadata:
        query: sum(demo_requests_in_flight)
        serverAddress: http://127.0.0.1:9090
        threshold: 1
        uptimeFilter: job="demo-exporter"
EOF
kubectl get elasticservice web -n "$ns"

say "scaling: the resolver (wasmop resolver) on 127.0.0.1:18012, as ServiceAccount $ns/wasmop-resolver"
kubectl apply -n "$ns" -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: wasmop-resolver}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: wasmop-resolver}
rules:
  - {apiGroups: [wasmop.dev], resources: [elasticservices], verbs: [get, list, watch, patch]}
  - {apiGroups: [""], resources: [services], verbs: [get, list, watch]}
  - {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: wasmop-resolver}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: wasmop-resolver}
subjects: [{kind: ServiceAccount, name: wasmop-resolver, namespace: $ns}]
EOF
"$root/deploy/dev/sa-kubeconfig.sh" "$ns" wasmop-resolver "$work/resolver.kubeconfig"
KUBECONFIG=$work/resolver.kubeconfig "$bin" resolver --watch-namespace "$ns" \
  --listen 127.0.0.1:18012 --admin-listen 127.0.0.1:18013 --timeout 120s \
  --dial-prefix-map 10.0.0.0/8=127.0.0.0/8 >"$logs/demo-resolver.log" 2>&1 &
pids+=($!)
until_ok 60 "the resolver to be ready" curl -fsS http://127.0.0.1:18013/readyz

# The public Service's EndpointSlice points at the resolver pods. kwok runs no containers, so
# kwok pods with the resolver's label stand in for them; the demo's requests go to the resolver
# process on loopback, as a cluster's traffic would go to those pods.
kubectl apply -n "$resolver_ns" -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: wasmop-resolver-demo}
spec:
  replicas: 2
  selector: {matchLabels: {app.kubernetes.io/name: wasmop-resolver, demo: scaling}}
  template:
    metadata: {labels: {app.kubernetes.io/name: wasmop-resolver, demo: scaling}}
    spec: {containers: [{name: resolver, image: registry.invalid/wasmop:demo}]}
EOF

# The "pod": kwok runs no containers, so this backend listens at the loopback address the
# resolver dials for each web pod's IP (10.a.b.c -> 127.a.b.c:8080).
cat >"$work/backend.py" <<'EOF'
import http.server, subprocess, sys, threading, time
ns = sys.argv[1]
served = set()
def serve(ip):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"hello from pod {ip}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    addr = "127." + ip.split(".", 1)[1]
    http.server.ThreadingHTTPServer((addr, 8080), H).serve_forever()
while True:
    out = subprocess.run(["kubectl", "get", "pods", "-n", ns, "-l", "app=web", "-o",
                          "jsonpath={.items[*].status.podIP}"], capture_output=True, text=True).stdout
    for ip in out.split():
        if ip not in served and ip.startswith("10."):
            served.add(ip)
            threading.Thread(target=serve, args=(ip,), daemon=True).start()
    time.sleep(0.1)
EOF
python3 "$work/backend.py" "$ns" >"$logs/demo-backend.log" 2>&1 &
pids+=($!)

say "scaling: waiting for the idle trigger to scale web to zero (the operator polls every --poll-interval, 30 s by default)"
until_ok 180 "mode proxy" sh -c "[ \"\$(kubectl get elasticservice web -n $ns -o jsonpath='{.status.mode}')\" = proxy ]"
until_ok 60 "no web pod" sh -c "[ -z \"\$(kubectl get pods -n $ns -l app=web -o name)\" ]"
kubectl get elasticservice web -n "$ns" -o wide
kubectl get deployment web -n "$ns"
echo "trigger votes: $(kubectl get elasticservice web -n "$ns" -o jsonpath='{.status.triggerVotes[0].vote} ({.status.triggerVotes[0].reason})')"
echo "EndpointSlices of Service web (the wasmop.dev one points at the resolver pods):"
kubectl get endpointslices -n "$ns" -l kubernetes.io/service-name=web

say "scaling: GET http://web.$ns.svc.cluster.local/ through the resolver, at zero replicas"
start=$(date +%s.%N)
answer=$(curl -sS --max-time 120 -H "Host: web.$ns.svc.cluster.local" -w '\nHTTP %{http_code}' http://127.0.0.1:18012/)
end=$(date +%s.%N)
echo "$answer"
awk -v s="$start" -v e="$end" 'BEGIN { printf "cold start (request held, scale-up, pod Ready, answered): %.0f ms\n", (e - s) * 1000 }'
kubectl get deployment web -n "$ns"
until_ok 60 "mode serve" sh -c "[ \"\$(kubectl get elasticservice web -n $ns -o jsonpath='{.status.mode}')\" = serve ]"
kubectl get elasticservice web -n "$ns"
echo "Events of ElasticService web:"
uid=$(kubectl get elasticservice web -n "$ns" -o jsonpath='{.metadata.uid}')
kubectl get events -n "$ns" --field-selector "involvedObject.uid=$uid" \
  -o custom-columns=REASON:.reason,MESSAGE:.message --sort-by=.metadata.creationTimestamp
echo "(namespace $ns is left for you to look at; delete it with: kubectl delete namespace $ns."
echo " Prometheus and the resolver stop with this step, so the operator's next poll of web reports"
echo " TriggerFailed: connection refused, as it would for a Prometheus that went away.)"
