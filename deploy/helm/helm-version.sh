# The helm used to lint and render deploy/helm/wasmop, built from the Go module proxy by
# scripts/setup.d/60-helm.sh. Source it; it defines HELM_VERSION and HELM.
HELM_VERSION=v4.3.1
HELM=${WASMOP_CACHE:-$HOME/.cache/wasmop}/helm-$HELM_VERSION/bin/helm
