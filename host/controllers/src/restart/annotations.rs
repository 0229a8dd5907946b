//! The annotations the restart controller reads and writes on pods and workloads.

/// Pods with this annotation have an injected Istio sidecar (upstream's eligibility).
pub(crate) const SIDECAR_STATUS_ANNOTATION: &str = "sidecar.istio.io/status";

/// `"true"` on a pod (or its template) or on a workload: never restarted by any policy.
pub(crate) const EXCLUDE_ANNOTATION: &str = "wasmop.dev/restart-exclude";

/// Pod-template annotation set to the restart time (RFC 3339): the change that rolls pods.
pub(crate) const RESTARTED_AT_ANNOTATION: &str = "wasmop.dev/restartedAt";

/// Pod-template annotation set to the hash of the desired proxy state restarted for.
pub(crate) const RESTART_CONFIG_ANNOTATION: &str = "wasmop.dev/restart-config";

/// Pod-template annotation set to the hash of the gateway settings restarted for.
pub(crate) const GATEWAY_CONFIG_ANNOTATION: &str = "wasmop.dev/gateway-config";

/// Pod-template annotation set to the name of the policy that restarted the workload.
pub(crate) const RESTARTED_BY_ANNOTATION: &str = "wasmop.dev/restarted-by";
