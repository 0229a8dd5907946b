# shellcheck shell=bash disable=SC2034 # variables used by cluster.sh
# The real node of the local control plane, sourced by cluster.sh (which defines STATE, PKI,
# LOGS, BIN, PORT_OFFSET, SERVICE_CIDR, start, stop, issue, kubectl_admin, ...).
#
# One node, `wasmop-node`, runs pods for real: a containerd of its own (root, state and socket
# under $STATE/node), runc, a CNI bridge with host-local IPAM, kubelet and kube-proxy in
# iptables mode. All of it lives in a network namespace of its own, wasmop-node-<offset>, linked
# to the host by one veth pair: its iptables rules, bridge, routes and ports are the
# namespace's, so two clusters never meet, and it has no default route: a pod reaches the node,
# the other pods, and the API server through a relay on the host end of the link, nothing else.
#
#   host  $LINK_HOST_IP/30  (socat: $LINK_HOST_IP:<apiserver port> -> 127.0.0.1:<apiserver port>)
#    |  veth $HOST_LINK <-> $NODE_LINK
#   node  $NODE_IP/30, bridge $BRIDGE (the first address of $NODE_POD_CIDR), pods in $NODE_POD_CIDR
#
# The node is tainted wasmop.dev/real-node=true:NoSchedule and labelled wasmop.dev/real-node=true:
# only pods that tolerate and select it run there; everything else stays on kwok's nodes.
# No image is pulled: the sandbox (pause) image is built here, others are imported with
# `cluster.sh import TAR` (scripts/build-image.sh makes them).

NODE_NAME=wasmop-node
NODE_DIR=$STATE/node
NODE_INDEX=$(((PORT_OFFSET / 1000) % 256))
NODE_NETNS=wasmop-node-$PORT_OFFSET
HOST_LINK=wopnode${NODE_INDEX}h
NODE_LINK=wopnode${NODE_INDEX}n
BRIDGE=wopbr$NODE_INDEX
LINK_HOST_IP=10.246.$NODE_INDEX.1
NODE_IP=10.246.$NODE_INDEX.2
NODE_POD_CIDR=10.245.$NODE_INDEX.0/24
KUBELET_PORT=$((10250 + PORT_OFFSET))
KUBELET_HEALTHZ_PORT=$((10248 + PORT_OFFSET))
KUBE_PROXY_HEALTHZ_PORT=$((10256 + PORT_OFFSET))
KUBE_PROXY_METRICS_PORT=$((10249 + PORT_OFFSET))
CGROUP_ROOT=/wasmop-node-$PORT_OFFSET
CONTAINERD_DIR=$NODE_DIR/containerd
CONTAINERD_SOCK=$CONTAINERD_DIR/containerd.sock
KUBELET_DIR=$NODE_DIR/kubelet
POD_LOGS=$NODE_DIR/pod-logs
SAVED_SYSCTLS=$NODE_DIR/host-sysctls
CNI_NETWORK=wasmop-node-$PORT_OFFSET
PAUSE_IMAGE=docker.io/library/wasmop-pause:$K8S_VERSION
NODE_TAINT=wasmop.dev/real-node
# Set by kubelet at start (its kernel tunables): recorded before, restored once the node is
# Ready and on `down`.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

NODE_COMPONENTS=(containerd kubelet kube-proxy)

in_node() { nsenter --net="/run/netns/$NODE_NETNS" "$@"; }

ctr_node() { /usr/bin/ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }

# --- host side -------------------------------------------------------------------

save_sysctls() {
  [[ -s $SAVED_SYSCTLS ]] && return
  local key
  mkdir -p "$NODE_DIR"
  for key in "${KUBELET_SYSCTLS[@]}"; do
    echo "$key=$(sysctl -n "$key")"
  done >"$SAVED_SYSCTLS.tmp"
  mv "$SAVED_SYSCTLS.tmp" "$SAVED_SYSCTLS"
}

restore_sysctls() {
  [[ -s $SAVED_SYSCTLS ]] || return 0
  local key value
  while IFS='=' read -r key value; do
    [[ $(sysctl -n "$key") == "$value" ]] && continue
    log "restoring $key=$value"
    sysctl -qw "$key=$value"
  done <"$SAVED_SYSCTLS"
}

# node_network_up creates the namespace, the veth pair and the routes (idempotent).
node_network_up() {
  [[ -e /run/netns/$NODE_NETNS ]] || ip netns add "$NODE_NETNS"
  if ! ip link show "$HOST_LINK" >/dev/null 2>&1; then
    ip link add "$HOST_LINK" type veth peer name "$NODE_LINK" netns "$NODE_NETNS"
  fi
  ip addr replace "$LINK_HOST_IP/30" dev "$HOST_LINK"
  ip link set "$HOST_LINK" up
  in_node ip link set lo up
  in_node ip addr replace "$NODE_IP/30" dev "$NODE_LINK"
  in_node ip link set "$NODE_LINK" up
  # The host answers pods through the node; it forwards nothing itself.
  ip route replace "$NODE_POD_CIDR" via "$NODE_IP" dev "$HOST_LINK"
  # Service addresses leave the node's own processes only once kube-proxy rewrote them; one it
  # did not rewrite goes to the host, which does not forward it.
  in_node ip route replace "$SERVICE_CIDR" via "$LINK_HOST_IP" dev "$NODE_LINK"
  in_node sysctl -qw net.ipv4.ip_forward=1
}

# ensure_cgroup_root creates the node's cgroup (kubelet's cgroupRoot, under which it makes
# kubepods) in each cgroup v1 hierarchy; on cgroup v2 in the unified one.
ensure_cgroup_root() {
  local dir
  for dir in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -f $dir/cgroup.procs && $dir != /sys/fs/cgroup/unified/ ]] || continue
    [[ $dir == /sys/fs/cgroup/ && -n $(find /sys/fs/cgroup -maxdepth 2 -name cgroup.procs -path '*/*/*' -print -quit) ]] && continue
    mkdir -p "${dir%/}$CGROUP_ROOT"
    if [[ -f ${dir}cpuset.cpus ]]; then
      cat "${dir}cpuset.cpus" >"${dir%/}$CGROUP_ROOT/cpuset.cpus"
      cat "${dir}cpuset.mems" >"${dir%/}$CGROUP_ROOT/cpuset.mems"
    fi
  done
}

# --- configuration ------------------------------------------------------------------

ensure_node_pki() {
  (
    cd "$PKI" || exit 1
    [[ -f kubelet.crt ]] || issue ca kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    # Issued again when the node's address changed (another WASMOP_DEV_PORT_OFFSET).
    openssl x509 -in kubelet-serving.crt -noout -ext subjectAltName 2>/dev/null |
      grep -q "IP Address:$NODE_IP\b" ||
      issue ca kubelet-serving "/CN=$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
    [[ -f kube-proxy.crt ]] || issue ca kube-proxy "/CN=system:kube-proxy" clientAuth
    [[ -f kube-apiserver-kubelet-client.crt ]] ||
      issue ca kube-apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    chmod 600 ./*.key
  )
}

# write_node_kubeconfig NAME: like write_kubeconfig, for a process in the node's namespace: it
# reaches the API server through the relay, and checks the server's certificate for `kubernetes`.
write_node_kubeconfig() {
  write_kubeconfig "$1"
  sed -i "s|server: https://127.0.0.1:$APISERVER_PORT|server: https://$LINK_HOST_IP:$APISERVER_PORT\n    tls-server-name: kubernetes|" \
    "$STATE/$1.kubeconfig"
}

# write_if_changed FILE: writes stdin to FILE unless FILE holds it already (kube-proxy exits when
# its configuration file changes).
write_if_changed() {
  local text
  text=$(cat)
  [[ -f $1 && $(cat "$1") == "$text" ]] && return
  printf '%s\n' "$text" >"$1"
}

write_node_config() {
  local restrict_oom=false
  grep -q '^CapEff:.*' /proc/self/status &&
    (( (0x$(awk '/^CapEff:/ { print $2 }' /proc/self/status) >> 24 & 1) == 0 )) && restrict_oom=true
  mkdir -p "$CONTAINERD_DIR" "$NODE_DIR/cni/net.d" "$KUBELET_DIR" "$POD_LOGS"
  write_if_changed "$NODE_DIR/containerd.toml" <<EOF
version = 2
root = "$CONTAINERD_DIR/root"
state = "$CONTAINERD_DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$CONTAINERD_DIR/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Sandboxes get oom_score_adj -998 and Guaranteed pods -997, which only a process with
  # CAP_SYS_RESOURCE may set; where the node runs without it, containers keep containerd's.
  restrict_oom_score_adj = $restrict_oom
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "$CONTAINERD_DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
    max_conf_num = 1
EOF
  # No masquerading: pods talk to the node, each other and the API server relay only.
  write_if_changed "$NODE_DIR/cni/net.d/10-wasmop-node.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$NODE_POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$NODE_DIR/cni/ipam"
      }
    }
  ]
}
EOF
  # Eviction thresholds and image GC are off: this node shares a developer's disk and memory,
  # and images, the sandbox image included, can only be imported, never pulled again.
  write_if_changed "$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
resolvConf: ""
podLogsDir: $POD_LOGS
maxPods: 40
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "0%", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
registerWithTaints:
- {key: $NODE_TAINT, value: "true", effect: NoSchedule}
nodeStatusReportFrequency: 10s
shutdownGracePeriod: 0s
EOF
  write_if_changed "$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $NODE_NAME
clientConnection:
  kubeconfig: $STATE/kube-proxy.kubeconfig
clusterCIDR: $NODE_POD_CIDR
healthzBindAddress: 127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$KUBE_PROXY_METRICS_PORT
nodePortAddresses: ["$NODE_IP/32"]
# Every connection to a Service address is masqueraded: a pod's reply to another pod of the
# bridge then goes through the node, which undoes the DNAT (no br_netfilter needed).
iptables:
  masqueradeAll: true
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 0s
# Conntrack table sizes and timeouts are the host's, left alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# node_object is the Node as registered before the kubelet starts, with its pod CIDR (no
# controller allocates one) and the taint and label that keep other pods off it.
node_object() {
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  labels:
    $NODE_TAINT: "true"
    kubernetes.io/hostname: $NODE_NAME
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
spec:
  podCIDR: $NODE_POD_CIDR
  podCIDRs: [$NODE_POD_CIDR]
  taints:
  - {key: $NODE_TAINT, value: "true", effect: NoSchedule}
EOF
}

# --- start and readiness ------------------------------------------------------------------

start_apiserver_relay() {
  start apiserver-relay \
    "TCP-LISTEN:$APISERVER_PORT,bind=$LINK_HOST_IP,reuseaddr,fork" "TCP:127.0.0.1:$APISERVER_PORT"
}

start_containerd() {
  start containerd --config "$NODE_DIR/containerd.toml"
}

start_kubelet() {
  start kubelet \
    --config="$NODE_DIR/kubelet.yaml" \
    --kubeconfig="$STATE/kubelet.kubeconfig" \
    --root-dir="$KUBELET_DIR" \
    --cert-dir="$KUBELET_DIR/pki" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" \
    --node-labels="$NODE_TAINT=true"
}

start_kube_proxy() {
  start kube-proxy --config="$NODE_DIR/kube-proxy.yaml"
}

containerd_ready() { ctr_node version; }

# import_image TAR: loads an OCI layout or docker-archive tar into the node's containerd.
import_image() {
  ctr_node images import "$1" >&2
}

ensure_pause_image() {
  ctr_node images ls -q | grep -qx "$PAUSE_IMAGE" && return
  log "importing $PAUSE_IMAGE"
  python3 "$DEV_DIR/../../scripts/oci-image.py" --name "$PAUSE_IMAGE" --out "$NODE_DIR/pause.tar" \
    --file "$BIN/pause:/pause" --entrypoint /pause --user 65535:65535 >/dev/null
  import_image "$NODE_DIR/pause.tar"
}

node_ready() {
  [[ $(kubectl_admin get node "$NODE_NAME" -o \
    jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

healthz_http() { in_node curl -fsS --max-time 5 "http://127.0.0.1:$1/healthz"; }

# node_up starts the real node once the API server is ready.
node_up() {
  save_sysctls
  ensure_node_pki
  write_node_kubeconfig kubelet
  write_node_kubeconfig kube-proxy
  write_node_config
  ensure_cgroup_root
  start_containerd
  wait_until "$STARTUP_TIMEOUT" "containerd" containerd_ready
  ensure_pause_image
  node_object | kubectl_admin apply --server-side --field-manager=wasmop-dev -f - >&2
  start_kubelet
  start_kube_proxy
  wait_until "$STARTUP_TIMEOUT" "kubelet /healthz" healthz_http "$KUBELET_HEALTHZ_PORT"
  wait_until "$STARTUP_TIMEOUT" "kube-proxy /healthz" healthz_http "$KUBE_PROXY_HEALTHZ_PORT"
  wait_until "$STARTUP_TIMEOUT" "node $NODE_NAME to be Ready" node_ready
  restore_sysctls
}

# --- down --------------------------------------------------------------------------------

# cgroup_pids prints the pids of every process in the node's cgroups.
cgroup_pids() {
  local dir
  for dir in /sys/fs/cgroup/*"$CGROUP_ROOT" /sys/fs/cgroup"$CGROUP_ROOT"; do
    [[ -d $dir ]] || continue
    find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done | sort -u
}

# shim_pids prints the pids of the containerd shims of this node (their command line names
# this node's socket).
shim_pids() {
  local proc
  for proc in /proc/[0-9]*; do
    { tr '\0' ' ' <"$proc/cmdline" | grep -q -- "-address $CONTAINERD_SOCK "; } 2>/dev/null &&
      echo "${proc#/proc/}"
  done
  return 0
}

# other_kubelet_runs: a kubelet of another cluster runs on this machine.
other_kubelet_runs() {
  local proc
  for proc in /proc/[0-9]*; do
    [[ $(readlink "$proc/exe" 2>/dev/null) == */kubelet ]] && return 0
  done
  return 1
}

# remove_host_leftovers removes what containerd, the CNI plugins and kubelet keep in fixed
# places of the host: the CNI result cache of this node's sandboxes, kubelet's device plugin
# socket and log links, and the folders they made, once empty.
remove_host_leftovers() {
  local id
  for id in "$@"; do
    rm -f "/var/lib/cni/results/cni-loopback-$id-lo"
    # A killed shim leaves its socket, named by the hash of containerd's socket, namespace and id.
    rm -f "/run/containerd/s/$(printf '%s' "$CONTAINERD_SOCK/k8s.io/$id" | sha256sum | cut -d' ' -f1)"
  done
  rm -f "/var/lib/cni/results/$CNI_NETWORK-"*
  find /var/log/containers -maxdepth 1 -type l -lname "$POD_LOGS/*" -delete 2>/dev/null || true
  other_kubelet_runs || rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/cni/results /var/lib/cni /var/lib/kubelet/device-plugins /var/lib/kubelet \
    /var/log/containers /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/fifo \
    /run/containerd/s /run/containerd 2>/dev/null || true
}

kill_pids() {
  local pid
  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null || true; done
}

# pod_netns prints the network namespaces (/var/run/netns/cni-...) of this node's sandboxes.
pod_netns() {
  [[ -S $CONTAINERD_SOCK ]] || return 0
  local id
  for id in $(ctr_node containers ls -q 2>/dev/null); do
    # A container shares its sandbox's namespace and names none: grep finds nothing there.
    ctr_node containers info "$id" 2>/dev/null |
      grep -o '"path": *"/var/run/netns/cni-[^"]*"' | sed 's/.*"\(\/var[^"]*\)"/\1/' || true
  done | sort -u
}

# netns_of_pids PID...: the pod network namespaces (/run/netns/cni-...) one of PIDS is in.
netns_of_pids() {
  local pid file inodes=" "
  for pid in "$@"; do
    inodes+="$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null || true) "
  done
  for file in /run/netns/cni-*; do
    [[ -e $file && $inodes == *" $(stat -L -c %i "$file" 2>/dev/null || true) "* ]] && echo "$file"
  done
  return 0
}

# umount_under DIR: unmounts every mount point below DIR, deepest first.
umount_under() {
  local mount
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r mount; do
      umount -l "$mount" 2>/dev/null || true
    done
}

node_down() {
  local netns i pids ids=()
  if pid_of kube-proxy >/dev/null; then
    stop kube-proxy
  fi
  if [[ -e /run/netns/$NODE_NETNS ]]; then
    in_node "$BIN/kube-proxy" --cleanup >>"$LOGS/kube-proxy.log" 2>&1 || true
  fi
  stop kubelet
  # The sandboxes' namespaces, as containerd names them and as the node's processes hold them.
  mapfile -t netns < <(pod_netns; netns_of_pids $(cgroup_pids))
  [[ -S $CONTAINERD_SOCK ]] && mapfile -t ids < <(ctr_node containers ls -q 2>/dev/null)
  stop containerd
  # Containers and sandboxes, then the shims that ran them.
  for ((i = 0; i < 50; i++)); do
    mapfile -t pids < <(cgroup_pids; shim_pids)
    ((${#pids[@]} == 0)) && break
    kill_pids "${pids[@]}"
    sleep 0.1
  done
  ((${#pids[@]} == 0)) || log "processes left in $CGROUP_ROOT: ${pids[*]}"
  for i in $(printf '%s\n' "${netns[@]}" | sed 's|^/var/run/|/run/|' | sort -u); do
    umount "$i" 2>/dev/null || true
    rm -f "$i"
  done
  umount_under "$NODE_DIR"
  find /sys/fs/cgroup/*"$CGROUP_ROOT" /sys/fs/cgroup"$CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null || true
  if [[ -e /run/netns/$NODE_NETNS ]]; then
    ip netns del "$NODE_NETNS"
  fi
  ip link del "$HOST_LINK" 2>/dev/null || true
  stop apiserver-relay
  remove_host_leftovers "${ids[@]}"
  restore_sysctls
  rm -f "$SAVED_SYSCTLS"
  rm -rf "$CONTAINERD_DIR" "$KUBELET_DIR" "$POD_LOGS" "$NODE_DIR/cni/ipam"
}
