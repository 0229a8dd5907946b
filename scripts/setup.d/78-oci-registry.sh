#!/usr/bin/env bash
# Builds the CNCF distribution registry (scripts/oci-registry-version.sh) from its Go module
# through the module proxy into the cache, idempotently; the oci:// plugin source tests start
# it on loopback (tests/src/oci.rs). About two and a half minutes on two cores with an empty Go
# module cache, nothing once built.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../oci-registry-version.sh
. "$root/scripts/oci-registry-version.sh"
[ -x "$OCI_REGISTRY" ] && exit 0
bin=$(dirname "$OCI_REGISTRY")
echo "setup (oci-registry): building the distribution registry $OCI_REGISTRY_VERSION into $bin" >&2
mkdir -p "$bin.tmp"
GOBIN="$bin.tmp" go install -trimpath -ldflags "-s -w" \
  "github.com/distribution/distribution/v3/cmd/registry@$OCI_REGISTRY_VERSION"
rm -rf "$bin" && mv "$bin.tmp" "$bin"
