#!/usr/bin/env bash
# Builds {{wasm}}, the component: `cargo build --target wasm32-wasip2 --release` (rustup target
# add wasm32-wasip2 once; the wasmop checkout's scripts/setup.sh adds it there).
set -euo pipefail
cd "$(dirname "$0")"
cargo build --quiet --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" {{wasm}}
echo "built {{wasm}}"
