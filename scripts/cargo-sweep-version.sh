# The cargo-sweep that scripts/test.sh runs; sourced by scripts/setup.d/20-cargo-sweep.sh too.
CARGO_SWEEP_VERSION=0.8.0
CARGO_SWEEP=${WASMOP_CACHE:-$HOME/.cache/wasmop}/cargo-sweep-$CARGO_SWEEP_VERSION/bin/cargo-sweep
