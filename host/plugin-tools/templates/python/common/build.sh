#!/usr/bin/env bash
# Builds {{wasm}}, the component: componentize-py bundles CPython, app.py and policy.py with
# the bindings it generates from the WIT of the {{world}} world, and the SDK's helper module
# (wasmop_plugin).
#
# WASMOP_SDK is the wasmop checkout (its WIT and Python SDK); COMPONENTIZE_PY the componentize-py
# binary, by default where the checkout's scripts/setup.sh installs it (its
# examples/plugins/toolchains.sh), else `componentize-py` on PATH.
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
componentize_py=$(tool COMPONENTIZE_PY componentize-py)

# Only the plugin's own modules go in (not its tests or a build directory).
src=$here/build/src
rm -rf "$src" && mkdir -p "$src"
cp "$here/app.py" "$here/policy.py" "$src/"
(cd "$src" && PYTHONDONTWRITEBYTECODE=1 "$componentize_py" -d "$wit" -w {{world}} componentize \
  -p . -p "$sdk/plugins/sdk-python" app -o "$here/{{wasm}}" >/dev/null)
echo "built {{wasm}}"
