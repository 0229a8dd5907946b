# Versions and locations of the plugin toolchains, shared by the installer
# (scripts/setup.d/50-plugin-toolchains.sh) and the builder (examples/plugins/build.sh).
# Source it; it defines variables and functions only.
#
# Everything lives under ${WASMOP_CACHE:-~/.cache/wasmop}/plugin-tools, one directory per tool
# and version, so a version bump installs beside the old one and nothing is half-updated.

# wasm-tools and wit-bindgen-cli on the wasm-tools 0.258 / wit-bindgen 0.61 line that the Rust
# guests of this workspace use (Cargo.lock), which wasmtime 48 reads.
WASM_TOOLS_VERSION=1.258.3
WIT_BINDGEN_VERSION=0.61.1
# The preview1 -> preview2 adapter must come from the wasmtime line of the host (48).
ADAPTER_VERSION=48.0.8
COMPONENTIZE_PY_VERSION=0.25.1
# jco and componentize-js: pinned with their whole dependency tree by the JS example's
# package.json and package-lock.json (installed with `npm install`, keyed by the lock file's hash).
JS_TOOLCHAIN_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/js-annotation-restart
# Go with //go:wasmexport and -buildmode=c-shared for wasip1.
GO_MIN_VERSION=1.24
# Debian packages of the C toolchain (clang 14 with the wasm32 runtime and wasi-libc).
C_APT_PACKAGES=(clang lld wasi-libc libclang-rt-14-dev-wasm32)

PLUGIN_TOOLS=${WASMOP_CACHE:-$HOME/.cache/wasmop}/plugin-tools
WASM_TOOLS=$PLUGIN_TOOLS/wasm-tools-$WASM_TOOLS_VERSION/bin/wasm-tools
WIT_BINDGEN=$PLUGIN_TOOLS/wit-bindgen-$WIT_BINDGEN_VERSION/bin/wit-bindgen
REACTOR_ADAPTER=$PLUGIN_TOOLS/adapter-$ADAPTER_VERSION/wasi_snapshot_preview1.reactor.wasm
COMPONENTIZE_PY=$PLUGIN_TOOLS/componentize-py-$COMPONENTIZE_PY_VERSION/bin/componentize-py
JCO_PREFIX=$PLUGIN_TOOLS/jco-$(sha256sum "$JS_TOOLCHAIN_DIR/package-lock.json" | cut -c1-12)
JCO=$JCO_PREFIX/node_modules/.bin/jco
# componentize-js's own CLI, installed with jco: unlike `jco componentize`, it loads the source
# from its file, so relative imports (plugins/sdk-js/wasmop-plugin.js) resolve under the working
# directory.
COMPONENTIZE_JS=$JCO_PREFIX/node_modules/.bin/componentize-js

# go_is_recent: whether `go` is on PATH and at least GO_MIN_VERSION.
go_is_recent() {
  local v
  v=$(go env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [ "$(printf '%s\n%s\n' "$GO_MIN_VERSION" "$v" | sort -V | head -n1)" = "$GO_MIN_VERSION" ]
}

# c_toolchain_present: whether the Debian C toolchain for wasm32-wasi is installed.
c_toolchain_present() {
  local p
  for p in "${C_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || return 1
  done
}
