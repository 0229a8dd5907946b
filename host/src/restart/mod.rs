//! Restart: the ProxyRestartPolicy controller (reference/restart.md), with per-pod decisions
//! made by the `restart-predicate` plugin.

use std::sync::Arc;

use crate::runtime::Context;

/// Options of the restart controller (flags of `wasmop run`).
#[derive(Clone, Debug, Default, clap::Args)]
#[group(skip)]
pub struct Options {}

/// Runs the ProxyRestartPolicy controller until shutdown.
///
/// # Errors
/// When the controller cannot start.
pub async fn run(_ctx: Arc<Context>) -> anyhow::Result<()> {
    std::future::pending().await
}
