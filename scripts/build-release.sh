#!/usr/bin/env bash
# Builds the release binary of wasmop as one static executable (a static-pie glibc build: no
# dynamic loader, no shared libraries), checks that it is static and that it runs, and copies it
# to OUT_DIR. The Dockerfile's build stage runs exactly this script; CI runs it too.
#
# Usage: scripts/build-release.sh [--out DIR] [--profile release|dev]
#        scripts/build-release.sh --check
#   --out DIR      where to put `wasmop` (default: dist/)
#   --profile P    cargo profile (default: release)
#   --check        the cheap mode the test command runs: the toolchain can link a static-pie
#                  executable with these flags, and the Dockerfile builds with this script and
#                  ships the result non-root on a distroless base. Builds no wasmop.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

TARGET=x86_64-unknown-linux-gnu
# crt-static on the -gnu target links glibc statically into a static-pie executable.
export RUSTFLAGS="-C target-feature=+crt-static"
out=dist
profile=release
check=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    --check) check=1; shift ;;
    *) echo "usage: $0 [--out DIR] [--profile release|dev] | --check" >&2; exit 2 ;;
  esac
done

say() { printf 'build-release: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

# is_static FILE: an ELF executable with no program interpreter and no shared libraries.
is_static() {
  readelf -lW "$1" | grep -q 'Elf file type is DYN\|Elf file type is EXEC' || return 1
  ! readelf -lW "$1" | grep -q 'INTERP' && ! readelf -dW "$1" | grep -q '(NEEDED)'
}

if [ "$check" = 1 ]; then
  dockerfile=$root/Dockerfile
  grep -q '^RUN .*scripts/build-release.sh\|^    scripts/build-release.sh' "$dockerfile" || fail "the Dockerfile's build stage does not run scripts/build-release.sh"
  grep -q '^FROM gcr.io/distroless/static-debian12:nonroot' "$dockerfile" || fail "the Dockerfile's final stage is not distroless static nonroot"
  grep -q '^USER 65532:65532' "$dockerfile" || fail "the Dockerfile does not run as a non-root user"
  probe=$(mktemp -d)
  trap 'rm -rf "$probe"' EXIT
  printf 'fn main() { println!("static ok"); }\n' >"$probe/main.rs"
  rustc --edition 2024 --target "$TARGET" -C target-feature=+crt-static -O -o "$probe/probe" "$probe/main.rs" ||
    fail "rustc cannot link a static executable for $TARGET (glibc's static libraries: Debian package libc6-dev)"
  is_static "$probe/probe" || fail "the probe is not static: $(readelf -lW "$probe/probe" | grep -i interp)"
  [ "$("$probe/probe")" = "static ok" ] || fail "the static probe does not run"
  say "ok: static-pie links for $TARGET; the Dockerfile builds with this script and ships non-root on distroless"
  exit 0
fi

# The commit goes into wasmop_build_info{commit}; a build outside a git checkout says unknown.
WASMOP_COMMIT=${WASMOP_COMMIT:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
export WASMOP_COMMIT
say "cargo build --profile $profile --target $TARGET -p wasmop (RUSTFLAGS=$RUSTFLAGS, commit $WASMOP_COMMIT)"
cargo build --locked --profile "$profile" --target "$TARGET" -p wasmop
target_dir=${CARGO_TARGET_DIR:-$root/target}
dir=$profile
[ "$profile" = dev ] && dir=debug
bin=$target_dir/$TARGET/$dir/wasmop
is_static "$bin" || fail "$bin is not a static executable"
"$bin" --version >/dev/null || fail "$bin does not run"
"$bin" crdgen >/dev/null || fail "$bin crdgen failed"
mkdir -p "$out"
cp "$bin" "$out/wasmop"
say "$out/wasmop: static, $(du -h "$out/wasmop" | cut -f1)"
