#!/usr/bin/env bash
# Installs the toolchains that build the example plugins in five languages
# (examples/plugins/build.sh), idempotently, from the package registries only:
#   C       Debian clang, lld, wasi-libc, libclang-rt-14-dev-wasm32
#   C, Go   wasm-tools and wit-bindgen (crates.io, `cargo install --locked`, only the features
#           used) and the preview1 reactor adapter (crates.io crate
#           wasi-preview1-component-adapter-provider, the host's wasmtime line)
#   Python  componentize-py (PyPI) in a venv
#   JS      @bytecodealliance/jco with componentize-js (npm install of the JS example's lock file)
#   Go      the Go toolchain already required by deploy/dev (checked, not installed)
#   Rust    the wasm32-wasip2 target (scripts/setup.sh)
# Versions and paths: examples/plugins/toolchains.sh. Silent when everything is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../examples/plugins/toolchains.sh
. "$root/examples/plugins/toolchains.sh"

say() { printf 'setup (plugin toolchains): %s\n' "$*" >&2; }

if ! c_toolchain_present; then
  say "installing ${C_APT_PACKAGES[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${C_APT_PACKAGES[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  rm -f "$log"
fi

# cargo_tool CRATE VERSION BIN FEATURES: `cargo install` into its own versioned root.
cargo_tool() {
  local crate=$1 version=$2 bin=$3 features=$4 dir
  [ -x "$bin" ] && return
  dir=$(dirname "$(dirname "$bin")")
  say "cargo install $crate $version (features: $features) into $dir"
  cargo install --locked --quiet --root "$dir.tmp" --no-default-features --features "$features" \
    "$crate@$version" >&2
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}
cargo_tool wasm-tools "$WASM_TOOLS_VERSION" "$WASM_TOOLS" component,validate,print
cargo_tool wit-bindgen-cli "$WIT_BINDGEN_VERSION" "$WIT_BINDGEN" c

if [ ! -s "$REACTOR_ADAPTER" ]; then
  say "fetching wasi-preview1-component-adapter-provider $ADAPTER_VERSION (crates.io)"
  fetch=$PLUGIN_TOOLS/adapter-fetch
  mkdir -p "$fetch/src"
  cat >"$fetch/Cargo.toml" <<EOF
[package]
name = "adapter-fetch"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
wasi-preview1-component-adapter-provider = "=$ADAPTER_VERSION"
[workspace]
EOF
  : >"$fetch/src/lib.rs"
  cargo fetch --quiet --manifest-path "$fetch/Cargo.toml" >&2
  manifest=$(cargo metadata --quiet --format-version 1 --manifest-path "$fetch/Cargo.toml" |
    python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "wasi-preview1-component-adapter-provider"))')
  mkdir -p "$(dirname "$REACTOR_ADAPTER")"
  cp "$(dirname "$manifest")/artefacts/wasi_snapshot_preview1.reactor.wasm" "$REACTOR_ADAPTER.tmp"
  mv "$REACTOR_ADAPTER.tmp" "$REACTOR_ADAPTER"
  rm -rf "$fetch"
fi

venv=$(dirname "$(dirname "$COMPONENTIZE_PY")")
if [ ! -e "$venv/.installed" ]; then
  # A venv records its own path, so it is built in place; the stamp marks a finished install.
  say "pip install componentize-py==$COMPONENTIZE_PY_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION" >&2
  touch "$venv/.installed"
fi

if [ ! -x "$JCO" ]; then
  say "npm install of jco and componentize-js ($JS_TOOLCHAIN_DIR/package-lock.json) into $JCO_PREFIX"
  rm -rf "$JCO_PREFIX.tmp" && mkdir -p "$JCO_PREFIX.tmp"
  cp "$JS_TOOLCHAIN_DIR/package.json" "$JS_TOOLCHAIN_DIR/package-lock.json" "$JCO_PREFIX.tmp/"
  # `npm install` honours the lock file; `npm ci` refuses locks without other platforms' optional
  # binaries, which npm leaves out when it writes them.
  (cd "$JCO_PREFIX.tmp" && npm install --no-audit --no-fund --loglevel=error >&2)
  rm -rf "$JCO_PREFIX" && mv "$JCO_PREFIX.tmp" "$JCO_PREFIX"
fi

if ! go_is_recent; then
  say "Go $GO_MIN_VERSION or newer is needed for the Go example plugin (found: $(go env GOVERSION 2>/dev/null || echo none))"
  exit 1
fi
