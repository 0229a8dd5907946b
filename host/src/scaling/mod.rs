//! Scaling: the ElasticService controller, its trigger poller and the resolver
//! (reference/scaling.md), with trigger votes decided by the `scaler` plugin.

pub mod names;
pub mod resolver;

use std::sync::Arc;

use crate::runtime::Context;

/// Options of the scaling controller (flags of `wasmop run`).
#[derive(Clone, Debug, Default, clap::Args)]
#[group(skip)]
pub struct Options {}

/// Runs the ElasticService controller and the poller until shutdown.
///
/// # Errors
/// When the controller cannot start.
pub async fn run(_ctx: Arc<Context>) -> anyhow::Result<()> {
    std::future::pending().await
}
