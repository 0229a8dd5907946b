#!/usr/bin/env bash
# Builds {{wasm}}, the component: the Go module for wasip1 (Go 1.24 or newer), embedded with
# the WIT of the {{world}} world and wrapped with the Go SDK's preview1 adapter.
#
# WASMOP_SDK is the wasmop checkout (its WIT and Go SDK; go.mod's replace names it too);
# WASM_TOOLS the wasm-tools binary, by default where the checkout's scripts/setup.sh installs
# it (its examples/plugins/toolchains.sh), else `wasm-tools` on PATH.
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
wasm_tools=$(tool WASM_TOOLS wasm-tools)

gen=$here/build
rm -rf "$gen" && mkdir -p "$gen/wit/deps/wasmop-plugin"
(cd "$here" && GOOS=wasip1 GOARCH=wasm GOFLAGS=-mod=mod go build -buildmode=c-shared -trimpath -o "$gen/core.wasm" .)
# The adapter's world imports wasmop:plugin/log: it resolves against plugin.wit as a dependency.
cp -r "$sdk/plugins/sdk-go/adapter/wit/." "$gen/wit/"
cp "$wit/plugin.wit" "$gen/wit/deps/wasmop-plugin/"
"$wasm_tools" component embed "$gen/wit" --world adapter "$sdk/plugins/sdk-go/adapter/adapter.wat" -o "$gen/adapter.wasm"
"$wasm_tools" component embed "$wit" --world {{world}} "$gen/core.wasm" -o "$gen/embedded.wasm"
"$wasm_tools" component new "$gen/embedded.wasm" --adapt "wasi_snapshot_preview1=$gen/adapter.wasm" -o "$here/{{wasm}}"
echo "built {{wasm}}"
