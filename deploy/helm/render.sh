#!/usr/bin/env bash
# Lints deploy/helm/wasmop and renders it with its default values (release `wasmop`, namespace
# `wasmop-system`) into deploy/manifests/wasmop.yaml.
#
# Usage: deploy/helm/render.sh            lint and write deploy/manifests/wasmop.yaml
#        deploy/helm/render.sh --check    lint and fail if deploy/manifests/wasmop.yaml is stale
#
# Lint runs `helm lint --strict` (values checked against values.schema.json) with the default
# values and with the variants in deploy/helm/lint-values/, and kubeconform -strict on what each
# of them renders (every kind against its schema, made offline by scripts/setup.d/72-kubeconform.sh;
# wasmop's own CRDs from crds/). deploy/manifests/ leaves the CRDs out (crds.install=false):
# they are in crds/, applied before the manifests.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=helm-version.sh
. "$here/helm-version.sh"
# shellcheck source=kubeconform-version.sh
. "$here/kubeconform-version.sh"
# shellcheck source=../../scripts/kuttl-version.sh
. "$root/scripts/kuttl-version.sh"
missing() { echo "render.sh: $1 is missing: run scripts/setup.sh" >&2; exit 1; }
[ -x "$HELM" ] || missing "helm ($HELM)"
[ -x "$KUBECONFORM" ] || missing "kubeconform ($KUBECONFORM)"
[ -f "$KUBECONFORM_SCHEMAS/.complete" ] || missing "the kubeconform schemas ($KUBECONFORM_SCHEMAS)"
[ -x "$KUTTL_BIN/yq" ] || missing "yq ($KUTTL_BIN/yq)"
chart=$here/wasmop
out=$root/deploy/manifests/wasmop.yaml

# helm says at INFO level that it follows the chart's files/crds link; the rest goes to stderr.
helm() { "$HELM" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The schemas of wasmop's CRDs, as they are now.
for crd in "$root"/crds/*.yaml; do
  "$KUTTL_BIN/yq" -o=json '.' "$crd" >"$scratch/$(basename "$crd" .yaml).json"
done
python3 "$here/kubeconform-schemas.py" "$scratch/schemas" "$scratch"/*.json
kubeconform() {
  "$KUBECONFORM" -strict -summary -output text \
    -schema-location "$KUBECONFORM_SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
    -schema-location "$scratch/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" -
}

# Lints and checks with kubeconform the chart rendered with helm arguments "$@".
check() {
  helm lint --strict --quiet "$chart" --namespace wasmop-system "$@" >&2
  helm template wasmop "$chart" --namespace wasmop-system "$@" | kubeconform >&2
}
check || { echo "render.sh: the default values fail" >&2; exit 1; }
for values in "$here"/lint-values/*.yaml; do
  check -f "$values" || { echo "render.sh: $values fails" >&2; exit 1; }
done

rendered=$scratch/wasmop.yaml
{
  echo "# deploy/helm/wasmop rendered with its default values by deploy/helm/render.sh; do not edit."
  echo "# The CRDs are left out (crds.install=false): they are in crds/."
  echo "# Install: kubectl apply --server-side -f crds/ && kubectl apply --server-side -f deploy/manifests/"
  helm template wasmop "$chart" --namespace wasmop-system --set crds.install=false
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
