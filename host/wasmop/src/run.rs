//! `wasmop run`: the operator process, assembled from the crates by layer.
//!
//! It builds the kernel (client, scope, write gate) and the plugin registry, keeps the registry
//! in sync with the `wasmop-plugins` ConfigMap ([`crate::registry_watch`]), runs the DR loop
//! that opens and closes the write gate, the controllers and the `PluginReady` loops
//! (`wasmop_controllers`), and the HTTP server of [`crate::server`] (`/healthz`, `/readyz`,
//! `/health/ready`, `/metrics`, `/plugins`, `/dr`). Every write to the API server goes through
//! the kernel's writer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use wasmop_controllers::{Context, ControllerKind, dr, plugin_ready, restart, routing, scaling};
use wasmop_kernel::{Kernel, Scope, shutdown_signal};
use wasmop_plugin_host::registry::Registry;
use wasmop_plugin_host::{PluginRuntime, RuntimeOptions};

use crate::{registry_watch, server};

/// Options of `wasmop run`.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct RunOptions {
    /// Namespace of the `wasmop-plugins` ConfigMap, the DR lease and the operator's own objects.
    #[arg(long, env = "WASMOP_NAMESPACE", default_value = "wasmop-system")]
    pub namespace: String,
    /// Address of the health, metrics and plugins server.
    #[arg(long, env = "WASMOP_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// This instance's identity (the pod name in a cluster): the DR lease holder and the Event
    /// reporter instance.
    #[arg(long, env = "POD_NAME", default_value = "wasmop")]
    pub identity: String,
    /// Watch custom resources (and the objects they manage) in this namespace only; all
    /// namespaces when unset. Cluster-scoped resources are always watched cluster-wide.
    #[arg(long, env = "WASMOP_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Reconcile only custom resources whose labels match this label selector (e.g.
    /// `team=payments`), to run several operators side by side.
    #[arg(long, env = "WASMOP_SELECTOR")]
    pub selector: Option<String>,
    /// The controllers to run (comma-separated); all by default.
    #[arg(long, env = "WASMOP_CONTROLLERS", value_delimiter = ',', default_values_t = ControllerKind::ALL.to_vec(), value_enum)]
    pub controllers: Vec<ControllerKind>,
    /// PEM file of CA certificates trusted, in addition to the usual roots, for `https://`
    /// plugin sources (besides the system's roots) and for plugins' `https://` requests
    /// (besides the webpki roots), e.g. the cluster's CA.
    #[arg(long, env = "WASMOP_EXTRA_CA_FILE")]
    pub extra_ca_file: Option<PathBuf>,
    /// Wasmtime's pooling instance allocator (on by default; `--pooling=false` turns it off):
    /// faster plugin calls, virtual memory reserved up front ((N + 6) × 16 GiB for
    /// `--max-concurrent-calls` N, none of it committed), plugin memory capped at 1 GiB. Falls back to on-demand allocation, with a
    /// warning, where the reservation is refused.
    #[arg(long, env = "WASMOP_POOLING", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pooling: bool,
    /// Plugin calls that run at once on the shared permits, all hooks together (default: the
    /// number of CPUs, 1 to 256). Each hook (routing, scaling, restart, dr) also has one permit
    /// of its own that no other hook's calls can take, so at most N + 4 calls run at once and a
    /// flood of one hook's calls (a router looping to its deadline for many DynamicEnvs) never
    /// holds back another (a DR tick). Each call may use its entry's limits.memoryMiB; the
    /// pooling allocator reserves (N + 6) × 16 GiB of virtual memory.
    #[arg(long, env = "WASMOP_MAX_CONCURRENT_CALLS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub max_concurrent_calls: Option<u16>,
    /// The directory every `grants.readOnlyDir` must be under (resolved without following a
    /// symlink out of it; `/`, `/proc`, `/sys`, `/dev` and the Secrets' directories are
    /// refused). The chart mounts a volume there.
    #[arg(long, env = "WASMOP_PLUGIN_DATA_ROOT", value_name = "DIR",
          default_value = wasmop_plugin_host::DEFAULT_PLUGIN_DATA_ROOT,
          value_parser = wasmop_plugin_tools::parse_data_root)]
    pub plugin_data_root: wasmop_plugin_host::DataRoot,
    /// Wall clock a plugin compile may take: past it the entry fails to load ("too large or too
    /// complex to compile here") and the compile is dropped once it ends. Accepts `90s`, `2m`.
    #[arg(long, env = "WASMOP_COMPILE_TIMEOUT", default_value = "60s",
          value_parser = wasmop_resolver::parse_duration)]
    pub compile_timeout: std::time::Duration,
    /// Routing controller options.
    #[command(flatten)]
    pub routing: routing::Options,
    /// Scaling controller options.
    #[command(flatten)]
    pub scaling: scaling::Options,
    /// Restart controller options.
    #[command(flatten)]
    pub restart: restart::Options,
    /// DR loop options.
    #[command(flatten)]
    pub dr: dr::Options,
}

/// Runs the operator until SIGINT or SIGTERM.
///
/// # Errors
/// No cluster connection, the server address cannot be bound, or a loop ends.
pub(crate) async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let client = wasmop_kernel::client::client()
        .await
        .context("cannot connect to the Kubernetes API (is KUBECONFIG set?)")?;
    let defaults = RuntimeOptions::default();
    let max_concurrent_calls = opts
        .max_concurrent_calls
        .map_or(defaults.max_concurrent_calls, usize::from);
    let runtime = PluginRuntime::new(RuntimeOptions {
        pooling: opts.pooling,
        max_concurrent_calls,
        extra_ca_pem: wasmop_plugin_host::read_extra_ca_file(opts.extra_ca_file.as_deref())?,
        ..defaults
    })?;
    runtime.set_plugin_data_root(opts.plugin_data_root.clone());
    runtime.set_compile_limits(wasmop_plugin_host::CompileLimits {
        timeout: opts.compile_timeout,
        ..wasmop_plugin_host::CompileLimits::default()
    });
    wasmop_kernel::metrics::register_with(|registry| runtime.register_metrics(registry));
    let kernel = Kernel::new(
        client,
        Scope {
            namespace: opts.namespace.clone(),
            identity: opts.identity.clone(),
            watch_namespace: opts.watch_namespace.clone(),
            selector: opts.selector.clone(),
        },
    );
    let ctx = Context::new(kernel, Registry::new(runtime));
    let dr_status = Arc::new(dr::machine::Status::default());

    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    tracing::info!(
        listen = %opts.listen,
        namespace = %opts.namespace,
        identity = %opts.identity,
        watch_namespace = opts.watch_namespace.as_deref().unwrap_or("(all)"),
        plugin_data_root = %opts.plugin_data_root.path().display(),
        max_concurrent_calls,
        controllers = ?opts.controllers,
        "wasmop starting"
    );
    let server = axum::serve(listener, server::router(ctx.clone(), dr_status.clone()))
        .with_graceful_shutdown(shutdown_signal());
    let runs = |kind: ControllerKind| opts.controllers.contains(&kind);
    tokio::select! {
        r = server => r.context("server failed")?,
        r = registry_watch::run(ctx.clone()) => r?,
        r = dr::run(ctx.clone(), dr_status, opts.dr.clone()) => r.context("DR loop")?,
        r = plugin_ready::run_all(ctx.clone(), &opts.controllers) => r?,
        r = only_if(runs(ControllerKind::Routing), routing::run(ctx.clone(), opts.routing.clone())) => r.context("routing controller")?,
        r = only_if(runs(ControllerKind::Scaling), scaling::run(ctx.clone(), opts.scaling.clone())) => r.context("scaling controller")?,
        r = only_if(runs(ControllerKind::Restart), restart::run(ctx.clone(), opts.restart.clone())) => r.context("restart controller")?,
    }
    tracing::info!("wasmop stopped");
    Ok(())
}

/// `task` when `enabled`, else a future that never ends.
async fn only_if<T>(enabled: bool, task: impl Future<Output = T>) -> T {
    if enabled {
        task.await
    } else {
        std::future::pending().await
    }
}
