//! Restart: the ProxyRestartPolicy controller (docs/restart.md), which keeps the Istio
//! proxy sidecars of the pods a policy selects, and one ingress gateway, in the desired state
//! by restarting their workloads. Which pod must restart, and why, is decided by the
//! `restart-predicate` plugin, one page of pods per call.
//!
//! ```text
//!  ProxyRestartPolicy ──► gateway settings changed? ──► roll out the gateway Deployment
//!          │
//!          └──► pods, page by page from the API server (Running, selected, injected)
//!                 └──► plugin: restart or not, and why (one call per page)
//!                        └──► owner: roll out Deployment/DaemonSet/StatefulSet (one patch per
//!                             workload), delete pods of bare ReplicaSets and
//!                             ReplicationControllers, warn for bare pods and Job pods
//!                               └──► chunk limit, maintenance window ──► status, Events
//! ```
//!
//! The modules: [`plan`] (pure rules: eligibility, exclusion, overlap, owners, chunking,
//! gateway, window, hashes), [`status`] (pure: conditions and state from the outcome),
//! [`pods`] (paging), [`owners`] (owner resolution and restart actions), [`controller`] (the
//! reconcile, Events, metrics).

pub mod controller;
pub mod owners;
pub mod plan;
pub mod pods;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use crate::Context;
use wasmop_kernel::gate::WriteError;

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

/// Options of the restart controller (flags of `wasmop run`).
#[derive(Clone, Debug, clap::Args)]
#[group(skip)]
pub struct Options {
    /// How often a policy is reconciled when nothing changes and all is done (upstream: 10h).
    #[arg(long = "restart-resync-interval", env = "WASMOP_RESTART_RESYNC_INTERVAL", default_value = "10h", value_parser = crate::schedule::parse_interval)]
    pub resync_interval: Duration,
    /// How soon a policy with warnings (workloads that need a manual restart) is reconciled
    /// again (upstream: 1h).
    #[arg(long = "restart-warning-interval", env = "WASMOP_RESTART_WARNING_INTERVAL", default_value = "1h", value_parser = crate::schedule::parse_interval)]
    pub warning_interval: Duration,
    /// How soon a failed reconcile (an API error, a plugin failure with `failurePolicy: Fail`)
    /// is retried.
    #[arg(long = "restart-error-interval", env = "WASMOP_RESTART_ERROR_INTERVAL", default_value = "30s", value_parser = crate::schedule::parse_interval)]
    pub error_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(10 * 3600),
            warning_interval: Duration::from_secs(3600),
            error_interval: Duration::from_secs(30),
        }
    }
}

/// Why a reconcile of a ProxyRestartPolicy failed. The status says the same to users.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write was refused (passive instance) or failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The reconcile ended in the `Error` state; the message is `status.description`.
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// A stable label for `wasmop_reconcile_total{outcome}`: `passive`, `write` or `failed`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::Write(WriteError::Passive) => "passive",
            Error::Write(_) => "write",
            Error::Failed(_) => "failed",
        }
    }

    /// Whether this is the passive gate's refusal.
    pub(crate) fn is_passive(&self) -> bool {
        matches!(self, Error::Write(WriteError::Passive))
    }
}

/// Runs the ProxyRestartPolicy controller with `opts` until shutdown.
///
/// # Errors
/// When the controller cannot start (the CRD is not installed) or ends.
pub async fn run(ctx: Arc<Context>, opts: Options) -> anyhow::Result<()> {
    controller::run(ctx, opts).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_labels() {
        assert_eq!(Error::Write(WriteError::Passive).metric_label(), "passive");
        assert!(Error::Write(WriteError::Passive).is_passive());
        assert_eq!(Error::Failed("x".into()).metric_label(), "failed");
        assert!(!Error::Failed("x".into()).is_passive());
    }
}
