#!/usr/bin/env bash
# Installs cargo-deny, which checks the dependency graph's licenses, bans and sources in
# `make lint` (deny.toml), from crates.io into
# ${WASMOP_CACHE:-~/.cache/wasmop}/cargo-deny-<version>/bin, idempotently.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../cargo-deny-version.sh
. "$root/scripts/cargo-deny-version.sh"
[ -x "$CARGO_DENY" ] && exit 0
dir=$(dirname "$(dirname "$CARGO_DENY")")
echo "setup (cargo-deny): cargo install cargo-deny $CARGO_DENY_VERSION into $dir" >&2
rm -rf "$dir.tmp"
CARGO_TARGET_DIR="$dir.build" cargo install --locked --quiet --root "$dir.tmp" \
  "cargo-deny@$CARGO_DENY_VERSION" >&2
rm -rf "$dir" "$dir.build" && mv "$dir.tmp" "$dir"
