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

pub mod annotations;
pub mod controller;
pub mod error;
pub mod options;
pub mod owners;
pub mod plan;
pub mod pods;
pub mod status;

use std::sync::Arc;

use crate::Context;
pub use error::Error;
pub use options::Options;

/// Runs the ProxyRestartPolicy controller with `opts` until shutdown.
///
/// # Errors
/// When the controller cannot start (the CRD is not installed) or ends.
pub async fn run(ctx: Arc<Context>, opts: Options) -> anyhow::Result<()> {
    controller::run(ctx, opts).await
}
