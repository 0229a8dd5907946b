#!/usr/bin/env bash
# Installs what the local control plane (cluster.sh) runs, built from the Go
# module in deploy/dev/go, into ${WASMOP_CACHE:-~/.cache/wasmop}/k8s-<version>:
#   bin/            etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok
#                   kubelet kube-proxy (the real node), pause (its sandbox image's program)
#   kwok-stages-<kwok version>.yaml   kwok's default node and pod lifecycle stages
#   istio-crds-<istio api version>.yaml   Istio's CustomResourceDefinitions
# Idempotent: only missing pieces are built or fetched, and it is silent when
# nothing is missing. Progress goes to stderr.
#
# cluster.sh sources this file for the paths below; run directly, it installs.
set -euo pipefail

ISTIO_API_VERSION=v1.31.1

DEV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GO_MOD_DIR=$DEV_DIR/go

# module_version prints the version go.mod requires for module $1.
module_version() {
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$GO_MOD_DIR/go.mod"
}

K8S_VERSION=$(module_version k8s.io/kubernetes)
KWOK_VERSION=$(module_version sigs.k8s.io/kwok)
CACHE=${WASMOP_CACHE:-$HOME/.cache/wasmop}/k8s-$K8S_VERSION
BIN=$CACHE/bin
KWOK_STAGES=$CACHE/kwok-stages-$KWOK_VERSION.yaml
ISTIO_CRDS=$CACHE/istio-crds-$ISTIO_API_VERSION.yaml

BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kubelet kube-proxy)
PACKAGES=(
  ./cmd/etcd
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  sigs.k8s.io/kwok/cmd/kwok
  k8s.io/kubernetes/cmd/kubelet
  k8s.io/kubernetes/cmd/kube-proxy
)

log() { echo "install.sh: $*" >&2; }

# version_ldflags stamps the Kubernetes version into the binaries, as the
# upstream release build does, so /version and `kubectl version` report it.
version_ldflags() {
  local major minor pkg flags=()
  IFS=. read -r major minor _ <<<"${K8S_VERSION#v}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=("-X $pkg.gitVersion=$K8S_VERSION" "-X $pkg.gitMajor=$major"
      "-X $pkg.gitMinor=$minor" "-X $pkg.gitTreeState=clean")
  done
  echo "${flags[*]}"
}

install_binaries() {
  local name
  for name in "${BINARIES[@]}"; do
    [[ -x $BIN/$name ]] && continue
    log "building Kubernetes $K8S_VERSION, etcd and kwok into $BIN (takes a while the first time)"
    mkdir -p "$BIN"
    (cd "$GO_MOD_DIR" && go build -trimpath -ldflags "$(version_ldflags)" -o "$BIN/" "${PACKAGES[@]}")
    return
  done
}

# install_pause builds the program of the real node's sandbox (pause) image: static (no cgo), it
# only waits for SIGTERM or SIGINT.
install_pause() {
  [[ -x $BIN/pause ]] && return
  log "building pause into $BIN"
  mkdir -p "$BIN"
  (cd "$GO_MOD_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/pause" ./cmd/pause)
}

# module_dir prints where the Go module cache holds module $1 (downloading it if needed).
module_dir() {
  go mod download -json "$1" | awk -F'"' '$2 == "Dir" { print $4 }'
}

# install_kwok_stages concatenates the stages kwokctl applies by default:
# nodes become Ready and keep a lease, pods become Running/Ready, complete and
# get deleted. kwok itself ships no stages, so it gets them through --config.
install_kwok_stages() {
  [[ -s $KWOK_STAGES ]] && return
  local dir file
  dir=$(cd "$GO_MOD_DIR" && module_dir sigs.k8s.io/kwok)/kustomize/stage
  log "writing $KWOK_STAGES"
  mkdir -p "$CACHE"
  for file in node/fast/node-initialize.yaml \
    node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$dir/$file"
  done >"$KWOK_STAGES.tmp"
  mv "$KWOK_STAGES.tmp" "$KWOK_STAGES"
}

install_istio_crds() {
  [[ -s $ISTIO_CRDS ]] && return
  local dir
  # Run outside the wrapper module, so its go.mod and go.sum stay untouched.
  mkdir -p "$CACHE"
  dir=$(cd "$CACHE" && module_dir "istio.io/api@$ISTIO_API_VERSION")
  log "writing $ISTIO_CRDS"
  cp "$dir/kubernetes/customresourcedefinitions.gen.yaml" "$ISTIO_CRDS.tmp"
  chmod 644 "$ISTIO_CRDS.tmp"
  mv "$ISTIO_CRDS.tmp" "$ISTIO_CRDS"
}

install_all() {
  install_binaries
  install_pause
  install_kwok_stages
  install_istio_crds
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  install_all
fi
