#!/usr/bin/env bash
# The test command (README: `make test`; .ci/run calls it) and its tiers:
#   all   setup, lint, then every test against the local control plane (default)
#   lint  cargo fmt --check, clippy, rustdoc links, cargo deny (licenses, bans, sources)
#   unit  the tests that need nothing but cargo (`cargo test`)
#   e2e   the `#[ignore]`d tests: control plane (with its real node), moto, Prometheus, helm,
#         plugin toolchains
# The control plane is started when a tier needs it and is not running, and stopped again
# afterwards. The e2e tiers first build the wasmop image that the real node's tests install
# (scripts/build-image.sh: a release build, then the OCI tar).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tier=${1:-all}
case "$tier" in all | lint | unit | e2e) ;; *)
  echo "usage: $0 [all|lint|unit|e2e]" >&2
  exit 2
  ;;
esac

"$root/scripts/setup.sh"
# Build artifacts are kept with the other caches so a fresh clone reuses compiled dependencies.
shared_target=${WASMOP_CACHE:-$HOME/.cache/wasmop}/cargo-target
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$shared_target}

step() { printf '\n==> %s\n' "$*"; }

# Each clone path and each change of dependencies adds artifacts of its own to the shared
# directory: the least recently used go first once it passes WASMOP_TARGET_MAX_SIZE
# (cargo-sweep's units, e.g. 500 for MB or 30GB). One clone's full set takes about 11 GiB;
# the default leaves room for a few, since "least recently used" reads access times, which
# relatime mounts move once a day: a tight cap makes builds redo dependencies still in use.
# A CARGO_TARGET_DIR of the caller's own is left as it is.
if [ "$CARGO_TARGET_DIR" = "$shared_target" ]; then
  # shellcheck source=cargo-sweep-version.sh
  . "$root/scripts/cargo-sweep-version.sh"
  max_size=${WASMOP_TARGET_MAX_SIZE:-40GB}
  step "cargo-sweep sweep --maxsize $max_size ($CARGO_TARGET_DIR)"
  "$CARGO_SWEEP" sweep --maxsize "$max_size" "$root" ||
    printf 'warning: the sweep failed (above); %s keeps its artifacts\n' "$CARGO_TARGET_DIR"
fi

lint() {
  step "cargo fmt --check"
  cargo fmt --all --check
  step "cargo clippy --workspace --all-targets -- -D warnings"
  cargo clippy --workspace --all-targets --locked -- -D warnings
  step "cargo doc --workspace --no-deps (broken doc links fail)"
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
  # shellcheck source=cargo-deny-version.sh
  . "$root/scripts/cargo-deny-version.sh"
  # cargo deny reads the metadata of every target's dependencies (wasm32 ones too, which no
  # build of this machine downloads): fetch them first.
  cargo fetch --locked --quiet
  # Advisories need the RustSec database from the network, which this check does without.
  step "cargo deny check licenses bans sources"
  "$CARGO_DENY" --offline check --hide-inclusion-graph licenses bans sources
}

# The image tests/e2e_real_node.rs installs with helm on the real node.
build_image() {
  step "scripts/build-image.sh wasmop (the image of the real node's e2e tests)"
  "$root/scripts/build-image.sh" wasmop --tag e2e --out "$CARGO_TARGET_DIR/e2e-image/wasmop.tar"
}

# Starts the control plane unless it runs, and exports KUBECONFIG and PATH for it.
with_cluster() {
  cluster="$root/deploy/dev/cluster.sh"
  started=0
  if ! "$cluster" status >/dev/null 2>&1; then
    step "starting the local control plane"
    # From an empty etcd: a control plane stopped without `down` (a machine shut down) leaves
    # its data behind, and objects of an older checkout (RBAC above all) would skew the tests.
    "$cluster" down >/dev/null 2>&1 || true
    "$cluster" up >/dev/null
    started=1
  fi
  trap cleanup EXIT
  eval "$("$cluster" env)"
}

cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then
    logs=$("$cluster" logs)
    printf '\n==> tests failed; last lines of the control plane logs in %s\n' "$logs"
    for f in "$logs"/*.log; do
      case "$f" in *audit.log) continue ;; esac
      printf -- '--- %s\n' "$f"
      tail -n 20 "$f" || true
    done
  fi
  if [ "$started" = 1 ]; then "$cluster" down >/dev/null 2>&1 || true; fi
  exit "$status"
}

case "$tier" in
lint) lint ;;
unit)
  step "cargo test --workspace (unit tier: nothing but cargo)"
  cargo test --workspace --locked --no-fail-fast
  ;;
e2e)
  build_image
  with_cluster
  step "cargo test --workspace -- --ignored (e2e tier)"
  cargo test --workspace --locked --no-fail-fast -- --ignored --test-threads=2
  ;;
all)
  lint
  build_image
  with_cluster
  step "cargo test --workspace -- --include-ignored (every tier)"
  cargo test --workspace --locked --no-fail-fast -- --include-ignored --test-threads=2
  ;;
esac
