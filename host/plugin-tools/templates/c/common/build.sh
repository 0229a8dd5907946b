#!/usr/bin/env bash
# Builds {{wasm}}, the component: the bindings of the {{world}} world (wit-bindgen c), plugin.c
# built for wasm32-wasi as a reactor (clang with wasi-libc), then a component with the preview1
# reactor adapter (wasm-tools).
#
# WASMOP_SDK is the wasmop checkout (its WIT). WIT_BINDGEN, WASM_TOOLS and REACTOR_ADAPTER (the
# adapter's .wasm) are by default where the checkout's scripts/setup.sh installs them (its
# examples/plugins/toolchains.sh), else found on PATH. CC and WASI_SYSROOT default to Debian's
# clang and wasi-libc (`clang`, `/usr`); with wasi-sdk, set CC=$WASI_SDK/bin/clang and
# WASI_SYSROOT=$WASI_SDK/share/wasi-sysroot. CFLAGS are added (e.g. -Werror).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sdk=${WASMOP_SDK:-{{sdk}}}
wit=$sdk/plugins/sdk/wit
[ -f "$wit/plugin.wit" ] || { echo "build.sh: no wasmop checkout at $sdk: set WASMOP_SDK" >&2; exit 1; }

# tool VAR CMD: $VAR if set, else where scripts/setup.sh installs CMD, else CMD on PATH.
tool() {
  local var=$1 cmd=$2 path=${!1:-}
  if [ -z "$path" ] && [ -f "$sdk/examples/plugins/toolchains.sh" ]; then
    path=$(. "$sdk/examples/plugins/toolchains.sh" && printf '%s' "${!var}")
    [ -e "$path" ] || path=""
  fi
  [ -n "$path" ] || path=$(command -v "$cmd" || true)
  [ -e "$path" ] || {
    echo "build.sh: $cmd not found: set $var, run the wasmop checkout's scripts/setup.sh, or put $cmd on PATH" >&2
    exit 1
  }
  printf '%s' "$path"
}
wit_bindgen=$(tool WIT_BINDGEN wit-bindgen)
wasm_tools=$(tool WASM_TOOLS wasm-tools)
adapter=$(tool REACTOR_ADAPTER wasi_snapshot_preview1.reactor.wasm)

gen=$here/build
rm -rf "$gen" && mkdir -p "$gen"
"$wit_bindgen" c "$wit" --world {{world}} --out-dir "$gen" 2>&1 | { grep -v '^Generating' >&2 || true; }
# shellcheck disable=SC2086 # CFLAGS are words
"${CC:-clang}" --target=wasm32-wasi --sysroot="${WASI_SYSROOT:-/usr}" -mexec-model=reactor -O2 -Wall -Wextra \
  ${CFLAGS:-} -I"$gen" -I"$here" -o "$gen/core.wasm" "$here/plugin.c" "$gen/{{c_world}}.c" \
  "$gen/{{c_world}}_component_type.o"
"$wasm_tools" component new "$gen/core.wasm" --adapt "wasi_snapshot_preview1=$adapter" -o "$here/{{wasm}}"
echo "built {{wasm}}"
