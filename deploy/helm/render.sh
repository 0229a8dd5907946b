#!/usr/bin/env bash
# Lints deploy/helm/wasmop and renders it with its default values (release `wasmop`, namespace
# `wasmop-system`) into deploy/manifests/wasmop.yaml.
#
# Usage: deploy/helm/render.sh            lint and write deploy/manifests/wasmop.yaml
#        deploy/helm/render.sh --check    lint and fail if deploy/manifests/wasmop.yaml is stale
#
# Lint runs `helm lint --strict` (values checked against values.schema.json) with the default
# values and with the variants in deploy/helm/lint-values/. CRDs are not rendered: they are in
# crds/ (the chart's crds/ links there), applied before the manifests.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=helm-version.sh
. "$here/helm-version.sh"
[ -x "$HELM" ] || { echo "render.sh: helm is missing ($HELM): run scripts/setup.sh" >&2; exit 1; }
chart=$here/wasmop
out=$root/deploy/manifests/wasmop.yaml

# helm says at INFO level that it follows the chart's crds/ link; the rest goes to stderr.
helm() { "$HELM" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }

helm lint --strict --quiet "$chart" --namespace wasmop-system >&2
for values in "$here"/lint-values/*.yaml; do
  helm lint --strict --quiet "$chart" --namespace wasmop-system -f "$values" >&2 ||
    { echo "render.sh: helm lint failed with $values" >&2; exit 1; }
done

rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
{
  echo "# deploy/helm/wasmop rendered with its default values by deploy/helm/render.sh; do not edit."
  echo "# Install: kubectl apply --server-side -f crds/ && kubectl apply --server-side -f deploy/manifests/"
  helm template wasmop "$chart" --namespace wasmop-system
} >"$rendered"

if [ "${1:-}" = --check ]; then
  if ! diff -u "$out" "$rendered" >&2; then
    echo "render.sh: deploy/manifests/wasmop.yaml is stale: run deploy/helm/render.sh and commit it" >&2
    exit 1
  fi
  exit 0
fi
mkdir -p "$(dirname "$out")"
install -m 644 "$rendered" "$out"
echo "$out"
