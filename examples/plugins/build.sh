#!/usr/bin/env bash
# Builds every example plugin into one directory, one component each:
#   retry-router.wasm        Rust, routing      (rust-retry-router)
#   schedule-scaler.wasm     Python, scaling    (python-schedule-scaler)
#   annotation-restart.wasm  JavaScript, restart (js-annotation-restart)
#   business-hours-dr.wasm   C, dr              (c-business-hours-dr)
#   max-age-restart.wasm     Go, restart        (go-max-age-restart)
#
# Usage: examples/plugins/build.sh [OUT_DIR] [NAME...]
#   OUT_DIR defaults to ${CARGO_TARGET_DIR:-target}/example-plugins; NAMEs (e.g. `c-business-hours-dr`)
#   limit the build to those examples.
#
# Cached: a plugin is rebuilt only when its sources, the WIT (plugins/sdk/wit/), this script or
# the toolchain versions change (a stamp of their sha256 beside each component). Toolchains come
# from scripts/setup.d/50-plugin-toolchains.sh; a missing one is an error that says so. Each build's
# wall time goes to OUT_DIR/build-times.txt. Concurrent runs on one OUT_DIR take turns.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# The contract, inside the Rust SDK crate (one copy for every language).
wit=$root/plugins/sdk/wit
# shellcheck source=toolchains.sh
. "$here/toolchains.sh"

out=${1:-${CARGO_TARGET_DIR:-$root/target}/example-plugins}
shift || true
mkdir -p "$out"
out=$(cd "$out" && pwd)
# One build at a time per directory (test binaries run this in parallel).
exec 9>"$out/.lock"
flock 9
work="$out/work"
mkdir -p "$work"

say() { printf 'build.sh: %s\n' "$*" >&2; }
need() {
  [ -x "$1" ] || { say "$2 is missing ($1): run scripts/setup.sh"; exit 1; }
}

# stamp NAME FILES...: the sha256 over the named sources, plugins/sdk/wit/, this script and the
# toolchains.
stamp() {
  local name=$1
  shift
  {
    printf '%s\n' "$WASM_TOOLS_VERSION $WIT_BINDGEN_VERSION $ADAPTER_VERSION $COMPONENTIZE_PY_VERSION $JCO $(go env GOVERSION 2>/dev/null) $(rustc --version)"
    (cd "$root" && find "$@" plugins/sdk/wit examples/plugins/build.sh examples/plugins/toolchains.sh -type f \
      -not -path '*/node_modules/*' -not -name '*.pyc' | LC_ALL=C sort | xargs sha256sum)
  } | sha256sum | cut -d' ' -f1
}

# build NAME COMPONENT SOURCES... : runs build_NAME unless the stamp matches.
build() {
  local name=$1 component=$2
  shift 2
  if [ -n "$only" ] && [[ " $only " != *" $name "* ]]; then return; fi
  local want have="" started
  want=$(stamp "$name" "$@")
  [ -f "$out/$component.stamp" ] && have=$(cat "$out/$component.stamp")
  if [ -f "$out/$component" ] && [ "$want" = "$have" ]; then return; fi
  say "building $name -> $out/$component"
  started=$(date +%s%3N)
  rm -f "$out/$component" "$out/$component.stamp"
  "build_${name//-/_}" "$out/$component"
  local ms=$(($(date +%s%3N) - started))
  printf '%s\t%d.%d s\t%s bytes\n' "$component" $((ms / 1000)) $((ms % 1000 / 100)) \
    "$(stat -c %s "$out/$component")" >>"$out/build-times.txt"
  echo "$want" >"$out/$component.stamp"
}

build_rust_retry_router() {
  # The target directory host/plugin-host/build.rs builds the default plugins in, so their
  # dependencies are compiled once.
  local target=${CARGO_TARGET_DIR:-$root/target}/plugins
  (cd "$root" && cargo build --quiet --locked -p retry-router --target wasm32-wasip2 --profile plugin \
    --target-dir "$target")
  cp "$target/wasm32-wasip2/plugin/retry_router.wasm" "$1"
}

build_python_schedule_scaler() {
  need "$COMPONENTIZE_PY" componentize-py
  local src="$work/python-src"
  rm -rf "$src" && mkdir -p "$src" && cp "$here/python-schedule-scaler/app.py" "$src/"
  (cd "$src" && PYTHONDONTWRITEBYTECODE=1 "$COMPONENTIZE_PY" -d "$wit" -w scaler componentize \
    -p . -p "$root/plugins/sdk-python" app -o "$1" >/dev/null)
}

build_js_annotation_restart() {
  need "$COMPONENTIZE_JS" componentize-js
  # componentize-js sees the working directory only (as `/`), so paths are relative to the root;
  # the plugin imports the SDK's helper module by its relative path.
  (cd "$root" && "$COMPONENTIZE_JS" examples/plugins/js-annotation-restart/plugin.js \
    --wit plugins/sdk/wit --world-name restart-predicate -d http fetch-event -o "$1" >/dev/null)
}

build_c_business_hours_dr() {
  need "$WIT_BINDGEN" wit-bindgen
  need "$WASM_TOOLS" wasm-tools
  [ -s "$REACTOR_ADAPTER" ] || { say "the preview1 reactor adapter is missing: run scripts/setup.sh"; exit 1; }
  command -v clang >/dev/null || { say "clang is missing: run scripts/setup.sh"; exit 1; }
  local gen="$work/c"
  rm -rf "$gen" && mkdir -p "$gen"
  "$WIT_BINDGEN" c "$wit" --world state-checker --out-dir "$gen" 2>&1 | { grep -v '^Generating' >&2 || true; }
  clang --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -Wall -Wextra -Werror \
    -I"$gen" -o "$gen/core.wasm" "$here/c-business-hours-dr/plugin.c" "$gen/state_checker.c" \
    "$gen/state_checker_component_type.o"
  "$WASM_TOOLS" component new "$gen/core.wasm" --adapt "wasi_snapshot_preview1=$REACTOR_ADAPTER" -o "$1"
}

build_go_max_age_restart() {
  need "$WASM_TOOLS" wasm-tools
  go_is_recent || { say "Go $GO_MIN_VERSION or newer is needed"; exit 1; }
  local gen="$work/go"
  rm -rf "$gen" && mkdir -p "$gen/wit/deps/wasmop-plugin"
  (cd "$here/go-max-age-restart" && GOOS=wasip1 GOARCH=wasm GOFLAGS=-mod=mod \
    go build -buildmode=c-shared -trimpath -o "$gen/core.wasm" .)
  # The adapter's world imports wasmop:plugin/log, so it resolves against the WIT as a dependency.
  cp -r "$root/plugins/sdk-go/adapter/wit/." "$gen/wit/"
  cp "$wit/plugin.wit" "$gen/wit/deps/wasmop-plugin/"
  "$WASM_TOOLS" component embed "$gen/wit" --world adapter "$root/plugins/sdk-go/adapter/adapter.wat" \
    -o "$gen/adapter.wasm"
  "$WASM_TOOLS" component embed "$wit" --world restart-predicate "$gen/core.wasm" -o "$gen/embedded.wasm"
  "$WASM_TOOLS" component new "$gen/embedded.wasm" --adapt "wasi_snapshot_preview1=$gen/adapter.wasm" -o "$1"
}

only="$*"
build rust-retry-router retry-router.wasm examples/plugins/rust-retry-router plugins/sdk Cargo.lock
build python-schedule-scaler schedule-scaler.wasm examples/plugins/python-schedule-scaler \
  plugins/sdk-python
build js-annotation-restart annotation-restart.wasm examples/plugins/js-annotation-restart plugins/sdk-js
build c-business-hours-dr business-hours-dr.wasm examples/plugins/c-business-hours-dr
build go-max-age-restart max-age-restart.wasm examples/plugins/go-max-age-restart plugins/sdk-go
echo "$out"
