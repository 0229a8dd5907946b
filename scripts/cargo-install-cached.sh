#!/usr/bin/env bash
# cargo-install-cached.sh CRATE VERSION BIN: installs CRATE@VERSION from crates.io so that its
# binary is BIN (<dir>/bin/<name>, under ${WASMOP_CACHE:-~/.cache/wasmop}), unless BIN exists.
# The build has a directory of its own (the shared one may be what the tool works on) and the
# result appears only once complete, so an interrupted install is started again next time.
set -euo pipefail
crate=$1 version=$2 bin=$3
[ -x "$bin" ] && exit 0
dir=$(dirname "$(dirname "$bin")")
echo "setup ($crate): cargo install $crate $version into $dir" >&2
rm -rf "$dir.tmp"
CARGO_TARGET_DIR="$dir.build" cargo install --locked --quiet --root "$dir.tmp" \
  "$crate@$version" >&2
rm -rf "$dir" "$dir.build" && mv "$dir.tmp" "$dir"
