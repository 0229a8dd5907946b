# The CNCF distribution registry (cmd/registry of github.com/distribution/distribution/v3),
# which the oci:// plugin source tests run on loopback (tests/src/oci.rs), built from its Go
# module by scripts/setup.d/78-oci-registry.sh. Source it; it defines OCI_REGISTRY_VERSION and
# OCI_REGISTRY (the binary).
OCI_REGISTRY_VERSION=v3.0.0
OCI_REGISTRY=${WASMOP_CACHE:-$HOME/.cache/wasmop}/oci-registry-$OCI_REGISTRY_VERSION/registry
