#!/usr/bin/env bash
# Installs what a fresh machine lacks for building, testing and demoing wasmop, and does
# nothing when it is already there. Downloads and builds are cached under
# ${WASMOP_CACHE:-~/.cache/wasmop}, keyed by version.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

say() { printf 'setup: %s\n' "$*" >&2; }

# Rust target for plugins: rustup first; the kept rust-std copy beside the repo only as fallback.
sysroot=$(rustc --print sysroot)
if ! ls "$sysroot"/lib/rustlib/wasm32-wasip2/lib/libstd-*.rlib >/dev/null 2>&1; then
  say "adding the wasm32-wasip2 target"
  if ! rustup target add wasm32-wasip2; then
    fallback="$root/../shared/toolchain/install-wasm32-wasip2.sh"
    [ -x "$fallback" ] || { say "rustup target add wasm32-wasip2 failed and no fallback at $fallback"; exit 1; }
    "$fallback"
  fi
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt

# The local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok) built from Go modules, and Istio's CRDs.
"$root/deploy/dev/install.sh"

# Tools of single features (e.g. Prometheus for the scaling tests, moto for DynamoDB), one
# idempotent script each, in name order. Each prints nothing when there is nothing to do.
for script in "$root"/scripts/setup.d/*.sh; do
  [ -e "$script" ] || continue
  "$script"
done
