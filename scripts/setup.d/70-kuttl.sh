#!/usr/bin/env bash
# Builds kuttl (scripts/kuttl-version.sh) from its Go module into
# ${WASMOP_CACHE:-~/.cache/wasmop}/kuttl-<version>/bin, idempotently. The module proxy refuses
# kuttl's version listing, so `go install …@version` fails; `go mod download` of the exact
# version works, and the build runs on a writable copy of it. kuttl drives Go's `testing`
# package through `testing.MainStart`, whose dependency interface gained `ModulePath` in Go
# 1.25; the copy gets that one method (an empty module path, as kuttl has no test module).
# Beside it, mikefarah's yq, which the suite's step scripts call (`go install`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../kuttl-version.sh
. "$root/scripts/kuttl-version.sh"
[ -x "$KUTTL" ] && [ -x "$KUTTL_BIN/yq" ] && exit 0
bin=$KUTTL_BIN
echo "setup (kuttl): building kuttl $KUTTL_VERSION and yq $YQ_VERSION into $bin" >&2
scratch=$(mktemp -d)
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
module=$(cd "$scratch" && go mod download -json "github.com/kudobuilder/kuttl@$KUTTL_VERSION" |
  awk -F'"' '$2 == "Dir" { print $4 }')
[ -d "$module" ] || { echo "setup (kuttl): go mod download of kuttl@$KUTTL_VERSION failed" >&2; exit 1; }
cp -r "$module" "$scratch/src"
chmod -R u+w "$scratch/src"
if ! grep -q 'ModulePath()' "$scratch/src/pkg/test/utils/testing.go"; then
  printf 'package utils\n\nfunc (testDeps) ModulePath() string { return "" }\n' \
    >"$scratch/src/pkg/test/utils/testdeps_module_path.go"
fi
mkdir -p "$bin.tmp"
(cd "$scratch/src" && go build -trimpath -ldflags "-s -w" -o "$bin.tmp/kubectl-kuttl" ./cmd/kubectl-kuttl)
GOBIN="$bin.tmp" go install -trimpath -ldflags "-s -w" "github.com/mikefarah/yq/v4@$YQ_VERSION"
rm -rf "$bin" && mv "$bin.tmp" "$bin"
