#!/usr/bin/env bash
# Installs cargo-sweep, which keeps the shared build directory (~/.cache/wasmop/cargo-target)
# under a size cap in scripts/test.sh, from crates.io into
# ${WASMOP_CACHE:-~/.cache/wasmop}/cargo-sweep-<version>/bin, idempotently.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../cargo-sweep-version.sh
. "$root/scripts/cargo-sweep-version.sh"
[ -x "$CARGO_SWEEP" ] && exit 0
dir=$(dirname "$(dirname "$CARGO_SWEEP")")
echo "setup (cargo-sweep): cargo install cargo-sweep $CARGO_SWEEP_VERSION into $dir" >&2
rm -rf "$dir.tmp"
# Its own build directory: the shared one is what it sweeps.
CARGO_TARGET_DIR="$dir.build" cargo install --locked --quiet --root "$dir.tmp" \
  "cargo-sweep@$CARGO_SWEEP_VERSION" >&2
rm -rf "$dir" "$dir.build" && mv "$dir.tmp" "$dir"
