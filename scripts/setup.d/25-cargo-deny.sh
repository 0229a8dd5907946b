#!/usr/bin/env bash
# Installs cargo-deny, which checks the dependency graph's licenses, bans and sources in
# `make lint` (deny.toml), idempotently.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../cargo-deny-version.sh
. "$root/scripts/cargo-deny-version.sh"
"$root/scripts/cargo-install-cached.sh" cargo-deny "$CARGO_DENY_VERSION" "$CARGO_DENY"
