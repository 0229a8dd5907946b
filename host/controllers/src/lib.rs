//! wasmop's reconcile loops. Each module runs one controller with `run(ctx, opts)` and imports
//! none of the others:
//!
//! - [`routing`]: DynamicEnv (the `router` hook);
//! - [`scaling`]: ElasticService and its trigger poller (the `scaler` hook);
//! - [`restart`]: ProxyRestartPolicy (the `restart-predicate` hook);
//! - [`dr`]: the DR loop that opens and closes the write gate (the `state-checker` hook);
//! - [`plugin_ready`]: the `PluginReady` condition of every resource that names a plugin.
//!
//! They share the [`Context`]: the kernel (`wasmop-kernel`: client, scope, write gate) and the
//! plugin registry (`wasmop-plugin-host`). The `wasmop` binary assembles them.
#![forbid(unsafe_code)]

pub mod dr;
pub mod plugin_ready;
pub mod restart;
pub mod routing;
pub mod scaling;
pub mod schedule;
#[cfg(test)]
mod test_support;

use std::sync::Arc;

use wasmop_kernel::Kernel;
use wasmop_plugin_host::registry::Registry;

/// The controllers `wasmop run` can run (`--controllers`); DR and the registry always run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ControllerKind {
    /// DynamicEnv (routing hook).
    Routing,
    /// ElasticService and its trigger poller (scaling hook).
    Scaling,
    /// ProxyRestartPolicy (restart hook).
    Restart,
}

impl ControllerKind {
    /// Every controller.
    pub const ALL: [ControllerKind; 3] = [Self::Routing, Self::Scaling, Self::Restart];
}

/// What every controller receives.
pub struct Context {
    /// The client, the scope and the gated writer.
    pub kernel: Arc<Kernel>,
    /// The plugin registry the controllers resolve their plugins in.
    pub plugins: Arc<Registry>,
}

impl Context {
    /// A context of `kernel` and `plugins`.
    pub fn new(kernel: Arc<Kernel>, plugins: Arc<Registry>) -> Arc<Self> {
        Arc::new(Self { kernel, plugins })
    }
}
