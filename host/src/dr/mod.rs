//! DR: active/passive instances sharing one lease (reference/dr.md); each tick's state and
//! lease write are decided by the `state-checker` plugin, and the result opens or closes the
//! write gate.

use std::sync::Arc;

use crate::runtime::Context;

/// Options of the DR loop (flags of `wasmop run`).
#[derive(Clone, Debug, Default, clap::Args)]
#[group(skip)]
pub struct Options {}

/// Runs the DR loop until shutdown. Until the state checker is wired, this instance is active.
///
/// # Errors
/// When the loop cannot start.
pub async fn run(ctx: Arc<Context>) -> anyhow::Result<()> {
    ctx.gate().set_active(true);
    std::future::pending().await
}
