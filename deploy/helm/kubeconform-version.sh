# kubeconform, which deploy/helm/render.sh runs on the chart's output, and the schemas it checks
# against, made offline by scripts/setup.d/72-kubeconform.sh: Kubernetes' own (the OpenAPI
# document of the k8s.io/kubernetes module that deploy/dev/go/go.mod pins) and the Prometheus
# Operator's ServiceMonitor, PodMonitor and PrometheusRule (the CRDs in its Go module). Source
# it; it defines the versions, KUBECONFORM and KUBECONFORM_SCHEMAS.
KUBECONFORM_VERSION=v0.7.0
PROMETHEUS_OPERATOR_VERSION=v0.85.0
KUBERNETES_VERSION=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' \
  "$(dirname "${BASH_SOURCE[0]}")/../dev/go/go.mod")
KUBECONFORM=${WASMOP_CACHE:-$HOME/.cache/wasmop}/kubeconform-$KUBECONFORM_VERSION/bin/kubeconform
KUBECONFORM_SCHEMAS=${WASMOP_CACHE:-$HOME/.cache/wasmop}/kubeconform-schemas-k8s-$KUBERNETES_VERSION-prometheus-operator-$PROMETHEUS_OPERATOR_VERSION
