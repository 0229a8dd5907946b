#!/usr/bin/env bash
# Runs a local Kubernetes control plane for tests: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, and kwok, which simulates nodes and
# the pods scheduled onto them (pods become Running and Ready, nothing is
# actually run), plus one real node, `wasmop-node`, whose kubelet runs pods in
# containers (containerd, runc, a CNI bridge, kube-proxy; see node.sh). Istio's
# CRDs are installed. The control plane listens on 127.0.0.1; the real node
# lives in a network namespace of its own, linked to the host by a veth pair.
#
# Usage: cluster.sh up|down|env|status|logs|import TAR
#   up      start whatever is not running, wait until the cluster is usable, and
#           print the admin kubeconfig path as the last line of stdout
#           (progress goes to stderr). Does nothing more if the cluster is up.
#   down    stop every process `up` started and delete the etcd data, so the
#           next `up` starts an empty cluster; remove every container, mount,
#           cgroup, network namespace and link of the real node, and restore the
#           sysctls its kubelet set. Certificates, kubeconfigs and logs are
#           kept; the logs are cleared when the next `up` starts.
#   env     print export lines for KUBECONFIG and PATH: eval "$(cluster.sh env)"
#   status  print whether each component runs; exit 1 if any does not
#   logs    print the folder holding every log, audit.log included
#   import  load an image tar (OCI layout, e.g. from scripts/build-image.sh) into
#           the real node's containerd
#
# Environment:
#   WASMOP_DEV_DIR    state (pki/, etcd/, pids/, logs/, kubeconfigs),
#                     default ~/.cache/wasmop/dev-cluster
#   WASMOP_CACHE      where install.sh puts the binaries, default ~/.cache/wasmop
#   WASMOP_DEV_NODES  number of kwok nodes, default 2 (0: the real node only)
#   WASMOP_DEV_PORT_OFFSET  added to every port below (default 0), to run a
#                     second cluster beside the first with its own WASMOP_DEV_DIR
#                     (use a multiple of 1000: offset/1000 also numbers the real
#                     node's namespace, links and subnets)
#
# Ports on 127.0.0.1: etcd 23790 (client) and 23800 (peer), kube-apiserver
# 16443, kube-controller-manager 16257, kube-scheduler 16259, kwok 16247. The
# API server is also relayed on the host end of the node's link (node.sh).
# In the node's namespace: kubelet 10250 (10248 healthz), kube-proxy 10256
# (healthz) and 10249 (metrics).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=install.sh
source "$(dirname "${BASH_SOURCE[0]}")/install.sh"

STATE=${WASMOP_DEV_DIR:-$HOME/.cache/wasmop/dev-cluster}
PKI=$STATE/pki
PIDS=$STATE/pids
LOGS=$STATE/logs
ETCD_DATA=$STATE/etcd
READY_MARK=$STATE/ready
ADMIN_KUBECONFIG=$STATE/admin.kubeconfig
NODES=${WASMOP_DEV_NODES:-2}

PORT_OFFSET=${WASMOP_DEV_PORT_OFFSET:-0}
ETCD_PORT=$((23790 + PORT_OFFSET))
ETCD_PEER_PORT=$((23800 + PORT_OFFSET))
APISERVER_PORT=$((16443 + PORT_OFFSET))
CONTROLLER_MANAGER_PORT=$((16257 + PORT_OFFSET))
SCHEDULER_PORT=$((16259 + PORT_OFFSET))
KWOK_PORT=$((16247 + PORT_OFFSET))
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1 # first address of SERVICE_CIDR: the `kubernetes` Service
POD_CIDR=10.244.0.0/16
STARTUP_TIMEOUT=120

# shellcheck source-path=SCRIPTDIR source=node.sh
source "$DEV_DIR/node.sh"

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok
  apiserver-relay "${NODE_COMPONENTS[@]}")

log() { echo "cluster.sh: $*" >&2; }

die() {
  echo "cluster.sh: error: $*" >&2
  echo "cluster.sh: logs are in $LOGS" >&2
  exit 1
}

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --request-timeout=20s "$@"; }

# lock serialises `up` and `down` when several test processes call them at once.
lock() {
  command -v flock >/dev/null || return 0
  mkdir -p "$STATE"
  exec 9>"$STATE/lock"
  flock -w 600 9 || die "another cluster.sh holds $STATE/lock"
}

# --- processes ---------------------------------------------------------------

# binary_of prints the executable of component $1.
binary_of() {
  case $1 in
    containerd) echo /usr/bin/containerd ;;
    apiserver-relay) echo /usr/bin/socat ;;
    *) echo "$BIN/$1" ;;
  esac
}

# pid_of prints the pid of component $1 if it is running.
pid_of() {
  local pid
  pid=$(cat "$PIDS/$1.pid" 2>/dev/null) || return 1
  # The command line check guards against a recycled pid.
  [[ $(ps -o args= -p "$pid" 2>/dev/null) == "$(binary_of "$1") "* ]] || return 1
  echo "$pid"
}

# start runs component $1 with arguments $2... in the background unless it
# already runs; a component of the real node runs in the node's network
# namespace. Its output goes to logs/$1.log.
start() {
  local name=$1 launch=()
  shift
  pid_of "$name" >/dev/null && return
  log "starting $name"
  [[ " ${NODE_COMPONENTS[*]} " == *" $name "* ]] && launch=(nsenter --net="/run/netns/$NODE_NETNS")
  setsid "${launch[@]}" "$(binary_of "$name")" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  local pid=$!
  echo "$pid" >"$PIDS/$name.pid"
  # Until the forked shell has exec'd the binary, its command line is not yet the binary's,
  # and pid_of would take it for an exited component.
  local i
  for ((i = 0; i < 100; i++)); do
    pid_of "$name" >/dev/null && return
    kill -0 "$pid" 2>/dev/null || return
    sleep 0.02
  done
}

# wait_gone NAME SECONDS: waits until component NAME has exited; fails on timeout.
# An exited process that is not reaped yet (a zombie) counts as gone.
wait_gone() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    pid_of "$1" >/dev/null || return 0
    sleep 0.1
  done
  return 1
}

# stop sends TERM to component $1, then KILL if it has not exited in 15s.
stop() {
  local pid
  if pid=$(pid_of "$1"); then
    log "stopping $1 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$1" 15; then
      log "$1 ignored TERM, killing it"
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$1" 5 || die "could not stop $1 (pid $pid)"
    fi
  fi
  rm -f "$PIDS/$1.pid"
}

# check_started dies if a component that was started has exited since.
check_started() {
  local name
  for name in "${COMPONENTS[@]}"; do
    [[ -f $PIDS/$name.pid ]] || continue
    pid_of "$name" >/dev/null || die "$name exited, see $LOGS/$name.log"
  done
}

# wait_until SECONDS WHAT COMMAND...: runs COMMAND every second until it succeeds.
wait_until() {
  local timeout=$1 what=$2
  local deadline=$((SECONDS + timeout))
  shift 2
  while true; do
    check_started
    "$@" >/dev/null 2>&1 && return
    ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for $what"
    sleep 1
  done
}

# --- certificates and configuration -------------------------------------------

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

# new_ca NAME COMMON_NAME: a self-signed CA, NAME.key and NAME.crt.
new_ca() {
  new_key "$1"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 3650 -out "$1.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# issue CA NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]: NAME.key and
# NAME.crt, signed by CA.
issue() {
  local ca=$1 name=$2 subject=$3 usage=$4 sans=${5:-}
  new_key "$name"
  openssl req -new -key "$name.key" -subj "$subject" |
    openssl x509 -req -CA "$ca.crt" -CAkey "$ca.key" -days 3650 \
      -set_serial "0x$(openssl rand -hex 16)" -out "$name.crt" 2>/dev/null \
      -extfile <(
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$usage"
        [[ -z $sans ]] || echo "subjectAltName=$sans"
      )
}

# ensure_pki creates the CAs, certificates (valid for ten years) and the
# service account signing key once; delete pki/ to start over.
ensure_pki() {
  [[ -d $PKI ]] && return
  log "creating certificates in $PKI"
  rm -rf "$PKI.tmp"
  mkdir -p "$PKI.tmp"
  (
    cd "$PKI.tmp"
    new_ca ca wasmop-dev-ca
    issue ca kube-apiserver "/CN=kube-apiserver" serverAuth \
      "IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    issue ca admin "/O=system:masters/CN=wasmop-dev-admin" clientAuth
    issue ca kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
    issue ca kube-scheduler "/CN=system:kube-scheduler" clientAuth
    # kwok acts for every fake node and pod, and serves their kubelet endpoint.
    issue ca kwok "/O=system:masters/CN=kwok" clientAuth,serverAuth "IP:127.0.0.1,DNS:localhost"
    # The front proxy (request header) identity the apiserver presents to
    # extension API servers; the controller manager and scheduler expect it.
    new_ca front-proxy-ca wasmop-dev-front-proxy-ca
    issue front-proxy-ca front-proxy-client "/CN=front-proxy-client" clientAuth
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub
    chmod 600 ./*.key
  )
  mv "$PKI.tmp" "$PKI"
}

base64_of() { base64 <"$1" | tr -d '\n'; }

# write_kubeconfig NAME: $STATE/NAME.kubeconfig, authenticating with pki/NAME.crt.
write_kubeconfig() {
  cat >"$STATE/$1.kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: wasmop-dev
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64_of "$PKI/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64_of "$PKI/$1.crt")
    client-key-data: $(base64_of "$PKI/$1.key")
contexts:
- name: wasmop-dev
  context:
    cluster: wasmop-dev
    user: $1
current-context: wasmop-dev
EOF
  chmod 600 "$STATE/$1.kubeconfig.tmp"
  mv "$STATE/$1.kubeconfig.tmp" "$STATE/$1.kubeconfig"
}

# Every request is logged at Metadata level (who, verb, resource, response
# code; no bodies), so tests can check which user wrote what.
write_audit_policy() {
  cat >"$STATE/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF
}

fake_nodes() {
  local i
  for ((i = 0; i < NODES; i++)); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
EOF
  done
}

# --- components ---------------------------------------------------------------

start_etcd() {
  # --unsafe-no-fsync: the data is thrown away by `down` anyway.
  start etcd \
    --name=dev \
    --data-dir="$ETCD_DATA" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="dev=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync
}

start_apiserver() {
  # The audit log is read by byte offset (tests, benchmarks): it is rotated only
  # past 2 GiB, not at the default 100 MB, which one benchmark run can pass.
  # The `kubernetes` Service's endpoint is the relay on the host end of the real
  # node's link (node.sh), which pods reach. Kubelet endpoints of the fake nodes
  # are kwok's server on 127.0.0.1, the real node's its kubelet.
  start kube-apiserver \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address="$LINK_HOST_IP" \
    --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$PKI/kube-apiserver.crt" \
    --tls-private-key-file="$PKI/kube-apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --allow-privileged=true \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --kubelet-preferred-address-types=InternalIP \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/kube-apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/kube-apiserver-kubelet-client.key" \
    --audit-policy-file="$STATE/audit-policy.yaml" \
    --audit-log-path="$LOGS/audit.log" \
    --audit-log-maxsize=2048 \
    --audit-log-maxbackup=1
}

start_controller_manager() {
  start kube-controller-manager \
    --kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$CONTROLLER_MANAGER_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key"
}

start_scheduler() {
  start kube-scheduler \
    --kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT" \
    --leader-elect=false
}

start_kwok() {
  # KWOK_WORKDIR keeps kwok from also reading ~/.kwok/kwok.yaml.
  KWOK_WORKDIR=$STATE/kwok start kwok \
    --kubeconfig="$STATE/kwok.kubeconfig" \
    --config="$KWOK_STAGES" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --manage-nodes-with-label-selector= \
    --node-ip=127.0.0.1 \
    --node-port="$KWOK_PORT" \
    --server-address="127.0.0.1:$KWOK_PORT" \
    --tls-cert-file="$PKI/kwok.crt" \
    --tls-private-key-file="$PKI/kwok.key" \
    --node-lease-duration-seconds=40 \
    --cidr="$POD_CIDR"
}

# --- readiness checks -----------------------------------------------------------

etcd_healthy() { curl -fsS --max-time 5 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }

apiserver_ready() { kubectl_admin get --raw /readyz; }

# healthz_ok PORT: the component serving https on PORT reports healthy.
healthz_ok() { curl -fsSk --max-time 5 "https://127.0.0.1:$1/healthz"; }

# nodes_ready: all fake nodes are Ready and the Ready taint was lifted.
nodes_ready() {
  local ready
  ready=$(kubectl_admin get nodes -l type=kwok -o \
    jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status} {.spec.taints}{"\n"}{end}' |
    awk '$1 == "True" && NF == 1' | wc -l)
  ((ready >= NODES))
}

crds_established() {
  local states
  states=$(kubectl_admin get -f "$ISTIO_CRDS" -o \
    jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{"\n"}{end}') || return 1
  [[ -n $states ]] && ! grep -qvx True <<<"$states"
}

all_running() {
  local name
  for name in "${COMPONENTS[@]}"; do
    pid_of "$name" >/dev/null || return 1
  done
}

# --- subcommands ------------------------------------------------------------------

cmd_up() {
  lock
  if [[ -f $READY_MARK ]] && all_running && apiserver_ready >/dev/null 2>&1; then
    log "already running"
    echo "$ADMIN_KUBECONFIG"
    return
  fi
  rm -f "$READY_MARK"
  install_all
  mkdir -p "$PIDS" "$LOGS"
  local name
  for name in "${COMPONENTS[@]}"; do
    pid_of "$name" >/dev/null || rm -f "$PIDS/$name.pid"
  done
  if [[ ! -d $ETCD_DATA ]] && ! pid_of etcd >/dev/null; then
    rm -f "$LOGS"/*.log
  fi
  ensure_pki
  ensure_node_pki
  for name in admin kube-controller-manager kube-scheduler kwok; do
    write_kubeconfig "$name"
  done
  write_audit_policy
  node_network_up

  start_etcd
  wait_until "$STARTUP_TIMEOUT" "etcd to be healthy" etcd_healthy
  start_apiserver
  start_apiserver_relay
  wait_until "$STARTUP_TIMEOUT" "kube-apiserver /readyz" apiserver_ready
  start_controller_manager
  start_scheduler
  start_kwok
  wait_until "$STARTUP_TIMEOUT" "kube-controller-manager /healthz" healthz_ok "$CONTROLLER_MANAGER_PORT"
  wait_until "$STARTUP_TIMEOUT" "kube-scheduler /healthz" healthz_ok "$SCHEDULER_PORT"
  wait_until "$STARTUP_TIMEOUT" "kwok /healthz" healthz_ok "$KWOK_PORT"

  if ((NODES > 0)); then
    log "creating $NODES fake nodes"
    fake_nodes | kubectl_admin apply --server-side --field-manager=wasmop-dev -f - >&2
    wait_until "$STARTUP_TIMEOUT" "$NODES kwok nodes to be Ready and untainted" nodes_ready
  fi
  node_up
  wait_until "$STARTUP_TIMEOUT" "the default ServiceAccount" kubectl_admin get serviceaccount default -n default

  log "installing Istio CRDs ($ISTIO_API_VERSION)"
  kubectl_admin apply --server-side --force-conflicts --field-manager=wasmop-dev -f "$ISTIO_CRDS" >/dev/null
  wait_until "$STARTUP_TIMEOUT" "Istio CRDs to be Established" crds_established

  touch "$READY_MARK"
  log "ready; eval \"\$($0 env)\" to use it"
  echo "$ADMIN_KUBECONFIG"
}

cmd_down() {
  lock
  local i
  node_down
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop "${COMPONENTS[i]}"
  done
  rm -rf "$ETCD_DATA" "$READY_MARK"
  log "stopped; etcd data deleted, logs kept in $LOGS"
}

cmd_env() {
  printf 'export KUBECONFIG=%q\n' "$ADMIN_KUBECONFIG"
  # shellcheck disable=SC2016 # $PATH is expanded by the caller's eval
  printf 'export PATH=%q:"$PATH"\n' "$BIN"
}

cmd_status() {
  local name pid failed=0
  for name in "${COMPONENTS[@]}"; do
    if pid=$(pid_of "$name"); then
      echo "$name: running (pid $pid)"
    else
      echo "$name: stopped"
      failed=1
    fi
  done
  if [[ -e /run/netns/$NODE_NETNS ]]; then
    echo "node network: namespace $NODE_NETNS, link $HOST_LINK $LINK_HOST_IP <-> $NODE_IP, pods $NODE_POD_CIDR"
  else
    echo "node network: absent"
    failed=1
  fi
  if pid_of kube-apiserver >/dev/null && node_ready 2>/dev/null; then
    echo "node $NODE_NAME: Ready"
  else
    echo "node $NODE_NAME: not Ready"
    failed=1
  fi
  return "$failed"
}

main() {
  case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    env) cmd_env ;;
    status) cmd_status ;;
    logs) echo "$LOGS" ;;
    import)
      [[ -f ${2:-} ]] || die "usage: $0 import TAR"
      import_image "$2"
      ;;
    *)
      echo "usage: $0 up|down|env|status|logs|import TAR" >&2
      exit 2
      ;;
  esac
}

main "$@"
