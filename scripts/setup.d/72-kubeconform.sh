#!/usr/bin/env bash
# Builds kubeconform from its Go module and writes the JSON schemas it checks the chart against
# (deploy/helm/kubeconform-version.sh), idempotently, under ${WASMOP_CACHE:-~/.cache/wasmop}.
# Nothing is downloaded but Go modules: Kubernetes' schemas come from the OpenAPI document in
# the k8s.io/kubernetes module, the Prometheus Operator's from the CRDs in its module (made JSON
# by the yq of 70-kuttl.sh), both converted by deploy/helm/kubeconform-schemas.py.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../deploy/helm/kubeconform-version.sh
. "$root/deploy/helm/kubeconform-version.sh"
# shellcheck source=../kuttl-version.sh
. "$root/scripts/kuttl-version.sh"
[ -x "$KUBECONFORM" ] && [ -f "$KUBECONFORM_SCHEMAS/.complete" ] && exit 0

if [ ! -x "$KUBECONFORM" ]; then
  bin=$(dirname "$KUBECONFORM")
  echo "setup (kubeconform): go install github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION into $bin" >&2
  mkdir -p "$bin.tmp"
  GOBIN="$bin.tmp" go install -trimpath -ldflags "-s -w" \
    "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
fi

if [ ! -f "$KUBECONFORM_SCHEMAS/.complete" ]; then
  echo "setup (kubeconform): schemas of Kubernetes $KUBERNETES_VERSION and Prometheus Operator $PROMETHEUS_OPERATOR_VERSION into $KUBECONFORM_SCHEMAS" >&2
  module_dir() { go mod download -json "$1" | awk -F'"' '$2 == "Dir" { print $4 }'; }
  kubernetes=$(cd "$root/deploy/dev/go" && module_dir "k8s.io/kubernetes@$KUBERNETES_VERSION")
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  operator=$(cd "$scratch" && module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
  out=$KUBECONFORM_SCHEMAS.tmp
  rm -rf "$out"
  python3 "$root/deploy/helm/kubeconform-schemas.py" "$out" "$kubernetes/api/openapi-spec/swagger.json"
  for kind in servicemonitors podmonitors prometheusrules; do
    "$KUTTL_BIN/yq" -o=json '.' "$operator/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" \
      >"$scratch/$kind.json"
  done
  python3 "$root/deploy/helm/kubeconform-schemas.py" "$out" "$scratch"/*.json
  touch "$out/.complete"
  rm -rf "$KUBECONFORM_SCHEMAS" && mv "$out" "$KUBECONFORM_SCHEMAS"
fi
