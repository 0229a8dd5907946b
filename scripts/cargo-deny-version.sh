# The cargo-deny that `make lint` runs; sourced by scripts/setup.d/25-cargo-deny.sh too.
CARGO_DENY_VERSION=0.20.2
CARGO_DENY=${WASMOP_CACHE:-$HOME/.cache/wasmop}/cargo-deny-$CARGO_DENY_VERSION/bin/cargo-deny
