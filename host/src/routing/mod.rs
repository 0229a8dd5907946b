//! Routing: the DynamicEnv controller (reference/routing.md), with route rewrites decided by
//! the `router` plugin.

use std::sync::Arc;

use crate::runtime::Context;

/// Options of the routing controller (flags of `wasmop run`).
#[derive(Clone, Debug, Default, clap::Args)]
#[group(skip)]
pub struct Options {}

/// Options of `wasmop plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanOptions {}

/// Runs the DynamicEnv controller until shutdown.
///
/// # Errors
/// When the controller cannot start.
pub async fn run(_ctx: Arc<Context>) -> anyhow::Result<()> {
    std::future::pending().await
}

/// `wasmop plan`: the routing pipeline offline.
///
/// # Errors
/// Unreadable input.
pub async fn plan_command(_opts: PlanOptions) -> anyhow::Result<std::process::ExitCode> {
    eprintln!("not yet implemented");
    Ok(std::process::ExitCode::from(2))
}
