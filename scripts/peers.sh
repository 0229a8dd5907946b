#!/usr/bin/env bash
# Builds an upstream project that a benchmark runs side by side with wasmop, from the copy in
# ../shared/peers/ (its README.md lists them), with the Go that scripts/setup.sh uses, into
# ${WASMOP_CACHE:-~/.cache/wasmop}/peers/<name>-<commit>/, and prints that directory.
# Idempotent: nothing is built when the directory is complete. Progress goes to stderr.
#
# Usage: scripts/peers.sh kubeelasti        build if missing, print the directory
#        scripts/peers.sh kubeelasti crd    the same, then apply its CRD to the cluster of
#                                           KUBECONFIG (server-side, idempotent)
#
#        scripts/peers.sh riskified         Riskified's Dynamic Environment operator
#        scripts/peers.sh riskified crd     the same, then apply its CRD
#
# riskified-dynamic-environment-<commit>/:
#   bin/manager  `go build` of cmd/ (run it with ENABLE_WEBHOOKS=false)
#   crd.yaml     the DynamicEnv CRD (config/crd/bases, group riskified.com)
#   role.yaml    its ClusterRole `manager-role` (config/rbac/role.yaml)
#
# kubeelasti-<commit>/:
#   bin/elasti-operator, bin/elasti-resolver   `go build` of operator/cmd and resolver/cmd
#   crd.yaml     the ElastiService CRD (operator/config/crd/bases)
#   chart.yaml   its Helm chart (charts/elasti) rendered with the default values, release
#                `elasti`, namespace `elasti-bench-placeholder` (the benchmark substitutes its
#                own namespace)
#
# The peer is built from a copy in a scratch folder: the shared folder may be read-only, and
# `go` writes go.work.sum as it resolves modules. Environment: WASMOP_PEERS_DIR (default
# ../shared/peers beside the repository), WASMOP_CACHE.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
peers=${WASMOP_PEERS_DIR:-$root/../shared/peers}
cache=${WASMOP_CACHE:-$HOME/.cache/wasmop}/peers

say() { printf 'peers.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# commit_of NAME: the commit the peers README gives for folder NAME/, else a digest of its files.
commit_of() {
  local commit
  commit=$(awk -F'|' -v dir="\`$1/\`" '{ gsub(/ /, "", $2); gsub(/ /, "", $4) } $2 == dir { print $4; exit }' \
    "$peers/README.md" 2>/dev/null || true)
  if [[ -z $commit ]]; then
    commit=$(cd "$peers/$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
  fi
  echo "$commit"
}

build_kubeelasti() {
  local src=$peers/kubeelasti
  [[ -d $src ]] || die "$src is missing"
  local out
  out=$cache/kubeelasti-$(commit_of kubeelasti)
  if [[ -x $out/bin/elasti-operator && -x $out/bin/elasti-resolver && -s $out/crd.yaml && -s $out/chart.yaml ]]; then
    echo "$out"
    return
  fi
  command -v go >/dev/null || die "go is not on PATH (scripts/setup.sh needs it too)"
  # shellcheck source=../deploy/helm/helm-version.sh
  . "$root/deploy/helm/helm-version.sh"
  [[ -x $HELM ]] || "$root/scripts/setup.d/60-helm.sh"
  local scratch
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/wasmop-peer-kubeelasti.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$scratch'" EXIT
  say "building KubeElasti ($(go env GOVERSION)) into $out"
  cp -r "$src" "$scratch/src"
  chmod -R u+w "$scratch/src"
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/bin"
  (cd "$scratch/src" &&
    go build -trimpath -o "$out.tmp/bin/elasti-operator" ./operator/cmd &&
    go build -trimpath -o "$out.tmp/bin/elasti-resolver" ./resolver/cmd)
  cp "$scratch/src/operator/config/crd/bases/elasti.truefoundry.com_elastiservices.yaml" "$out.tmp/crd.yaml"
  "$HELM" template elasti "$scratch/src/charts/elasti" --namespace elasti-bench-placeholder >"$out.tmp/chart.yaml"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "$out"
}

build_riskified() {
  local name=riskified-dynamic-environment
  local src=$peers/$name
  [[ -d $src ]] || die "$src is missing"
  local out
  out=$cache/$name-$(commit_of $name)
  if [[ -x $out/bin/manager && -s $out/crd.yaml && -s $out/role.yaml ]]; then
    echo "$out"
    return
  fi
  command -v go >/dev/null || die "go is not on PATH (scripts/setup.sh needs it too)"
  local scratch
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/wasmop-peer-riskified.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$scratch'" EXIT
  say "building Riskified's Dynamic Environment ($(go env GOVERSION)) into $out"
  cp -r "$src" "$scratch/src"
  chmod -R u+w "$scratch/src"
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/bin"
  # Its go.mod asks for toolchain go1.25.6, which the proxy does not serve: build with ours.
  (cd "$scratch/src" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -trimpath -o "$out.tmp/bin/manager" ./cmd)
  cp "$scratch/src/config/crd/bases/riskified.com_dynamicenvs.yaml" "$out.tmp/crd.yaml"
  cp "$scratch/src/config/rbac/role.yaml" "$out.tmp/role.yaml"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "$out"
}

apply_crd() {
  [[ -n ${KUBECONFIG:-} ]] || die "KUBECONFIG is not set: eval \"\$(deploy/dev/cluster.sh env)\" first"
  kubectl apply --server-side --force-conflicts --field-manager=wasmop-bench -f "$1/crd.yaml" >&2
  kubectl wait --for=condition=Established --timeout=60s -f "$1/crd.yaml" >&2
}

case "${1:-}" in
kubeelasti)
  dir=$(build_kubeelasti)
  if [[ ${2:-} == crd ]]; then apply_crd "$dir"; fi
  echo "$dir"
  ;;
riskified)
  dir=$(build_riskified)
  if [[ ${2:-} == crd ]]; then apply_crd "$dir"; fi
  echo "$dir"
  ;;
*)
  die "usage: $0 kubeelasti|riskified [crd]"
  ;;
esac
