#!/usr/bin/env bash
# Installs helm (`helm lint` and `helm template` of deploy/helm/wasmop, see deploy/helm/render.sh)
# from the Go module proxy into ${WASMOP_CACHE:-~/.cache/wasmop}/helm-<version>/bin, idempotently.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../deploy/helm/helm-version.sh
. "$root/deploy/helm/helm-version.sh"
[ -x "$HELM" ] && exit 0
bin=$(dirname "$HELM")
echo "setup (helm): go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION into $bin" >&2
mkdir -p "$bin.tmp"
GOBIN="$bin.tmp" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
rm -rf "$bin" && mv "$bin.tmp" "$bin"
