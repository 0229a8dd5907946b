#!/usr/bin/env bash
# Installs cargo-sweep, which keeps the shared build directory (~/.cache/wasmop/cargo-target)
# under a size cap in scripts/test.sh, idempotently.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../cargo-sweep-version.sh
. "$root/scripts/cargo-sweep-version.sh"
"$root/scripts/cargo-install-cached.sh" cargo-sweep "$CARGO_SWEEP_VERSION" "$CARGO_SWEEP"
