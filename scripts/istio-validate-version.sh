# Istio's own validation as a command (tests/istio-validate), built by
# scripts/setup.d/75-istio-validate.sh into the cache, keyed by its sources. Source it; it
# defines ISTIO_VALIDATE.
_istio_validate_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/istio-validate" && pwd)
_istio_validate_key=$(cat "$_istio_validate_dir/go.mod" "$_istio_validate_dir/go.sum" "$_istio_validate_dir/main.go" | sha256sum | cut -c1-12)
ISTIO_VALIDATE=${WASMOP_CACHE:-$HOME/.cache/wasmop}/istio-validate-$_istio_validate_key/istio-validate
