#!/usr/bin/env bash
# Every benchmark (`make bench`; docs/performance.md says what each measures). The DR benchmark
# and the second part of the routing one need the local control plane, which is started if it
# is not running and stopped again afterwards. Pass benchmark names to run only those, e.g. `scripts/bench.sh plugins`.
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
  if [ "$name" = dr ] || [ "$name" = routing ]; then
    if ! "$cluster" status >/dev/null 2>&1; then
      "$cluster" down >/dev/null 2>&1 || true
      "$cluster" up >/dev/null
      started=1
    fi
    eval "$("$cluster" env)"
  fi
  printf '\n==> cargo bench -p %s --bench %s\n' "$pkg" "$name"
  cargo bench --locked -p "$pkg" --bench "$name"
done
