#!/usr/bin/env bash
# Builds tests/istio-validate (Istio's own VirtualService and DestinationRule validation, from
# the istio.io/istio module through the Go module proxy) into the cache, idempotently; the
# routing tests run it on every plan wasmop writes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../istio-validate-version.sh
. "$root/scripts/istio-validate-version.sh"
[ -x "$ISTIO_VALIDATE" ] && exit 0
echo "setup (istio-validate): building tests/istio-validate into $(dirname "$ISTIO_VALIDATE")" >&2
mkdir -p "$(dirname "$ISTIO_VALIDATE")"
(cd "$root/tests/istio-validate" && go build -mod=readonly -trimpath -ldflags "-s -w" -o "$ISTIO_VALIDATE.tmp" .)
mv "$ISTIO_VALIDATE.tmp" "$ISTIO_VALIDATE"
