#!/usr/bin/env bash
# Builds {{wasm}}, the component: componentize-js (StarlingMonkey) bundles plugin.js and the
# modules it imports with the JS engine, against the WIT of the {{world}} world.
#
# WASMOP_SDK is the wasmop checkout (its WIT and the JS SDK's helper module, copied beside
# plugin.js as wasmop-plugin.js by every build); COMPONENTIZE_JS the componentize-js binary, by
# default where the checkout's scripts/setup.sh installs it (its
# examples/plugins/toolchains.sh), else `componentize-js` on PATH.
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
componentize_js=$(tool COMPONENTIZE_JS componentize-js)

cp "$sdk/plugins/sdk-js/wasmop-plugin.js" "$here/wasmop-plugin.js"
# The engine sees the working directory only: relative imports resolve under it. `-d http
# fetch-event`: the world neither imports wasi:http nor exports an HTTP handler.
(cd "$here" && "$componentize_js" plugin.js --wit "$wit" --world-name {{world}} -d http fetch-event \
  -o {{wasm}} >/dev/null)
echo "built {{wasm}}"
