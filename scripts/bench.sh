#!/usr/bin/env bash
# Every benchmark (`make bench`; docs/performance.md says what each measures). The DR benchmark
# and the second part of the routing one need the local control plane, which is started if it
# is not running and stopped again afterwards. Pass benchmark names to run only those, e.g. `scripts/bench.sh plugins`.
# `scale` (`make bench-scale`) is not in the default list: it takes about two hours. It runs on
# a control plane of its own (WASMOP_DEV_DIR, default ~/.cache/wasmop/dev-cluster-scale, ports
# offset by WASMOP_DEV_PORT_OFFSET, default 7000), started here and stopped afterwards if it was
# not running: its 10,000 pods and its CRDs would disturb tests on the shared one, and theirs
# its figures. It also needs KubeElasti, which scripts/peers.sh builds, and its CRD.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${WASMOP_CACHE:-$HOME/.cache/wasmop}/cargo-target}

# name → package
declare -A package=(
  [plugins]=wasmop-plugin-host
  [resolver]=wasmop-resolver
  [restart]=wasmop-controllers
  [dr]=wasmop-controllers
  [routing]=wasmop
  [scale]=wasmop
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(plugins resolver restart routing dr)

cluster="$root/deploy/dev/cluster.sh"
started=0
stop() { if [ "$started" = 1 ]; then "$cluster" down >/dev/null 2>&1 || true; fi; }
trap stop EXIT
for name in "${names[@]}"; do
  pkg=${package[$name]:-}
  [ -n "$pkg" ] || { echo "no benchmark $name (one of: ${!package[*]})" >&2; exit 2; }
  if [ "$name" = scale ]; then
    (
      export WASMOP_DEV_DIR=${WASMOP_DEV_DIR:-${WASMOP_CACHE:-$HOME/.cache/wasmop}/dev-cluster-scale}
      export WASMOP_DEV_PORT_OFFSET=${WASMOP_DEV_PORT_OFFSET:-7000}
      own=0
      trap '[ "$own" = 0 ] || "$cluster" down >/dev/null 2>&1 || true' EXIT
      if ! "$cluster" status >/dev/null 2>&1; then
        "$cluster" down >/dev/null 2>&1 || true
        own=1
        "$cluster" up >/dev/null
      fi
      eval "$("$cluster" env)"
      if dir=$("$root/scripts/peers.sh" kubeelasti crd); then
        export WASMOP_KUBEELASTI_DIR=$dir
      else
        echo "bench.sh: KubeElasti could not be built; the scale benchmark runs wasmop alone" >&2
      fi
      printf '\n==> cargo bench -p %s --bench %s\n' "$pkg" "$name"
      cargo bench --locked -p "$pkg" --bench "$name"
    )
    continue
  fi
  if [ "$name" = dr ] || [ "$name" = routing ]; then
    if ! "$cluster" status >/dev/null 2>&1; then
      "$cluster" down >/dev/null 2>&1 || true
      "$cluster" up >/dev/null
      started=1
    fi
    eval "$("$cluster" env)"
  fi
  if [ "$name" = routing ]; then
    if dir=$("$root/scripts/peers.sh" riskified); then
      export WASMOP_RISKIFIED_DIR=$dir
    else
      echo "bench.sh: Riskified's Dynamic Environment could not be built; the routing benchmark runs wasmop alone" >&2
    fi
  fi
  printf '\n==> cargo bench -p %s --bench %s\n' "$pkg" "$name"
  cargo bench --locked -p "$pkg" --bench "$name"
done
