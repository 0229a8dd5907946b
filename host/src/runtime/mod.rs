//! `wasmop run`: the operator process.
//!
//! It loads the plugin registry from the `wasmop-plugins` ConfigMap and keeps it in sync
//! ([`registry_watch`]), runs the DR loop that opens and closes the [`gate::WriteGate`]
//! ([`crate::dr`]), the controllers ([`crate::routing`], [`crate::scaling`],
//! [`crate::restart`]), the `PluginReady` condition loops ([`plugin_ready`]), and the HTTP
//! server of [`server`] (`/healthz`, `/readyz`, `/health/ready`, `/metrics`, `/plugins`).
//! Every write to the API server goes through [`gate::Writer`].

pub mod conditions;
pub mod gate;
pub mod plugin_ready;
pub mod registry_watch;
pub mod server;
#[cfg(test)]
pub(crate) mod test_support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::events::Reporter;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use tokio::sync::watch;

use crate::plugins::registry::Registry;
use crate::plugins::{PluginRuntime, RuntimeOptions};
use gate::{WriteGate, Writer};

/// Field manager of every write and the Event reporter name of the operator.
pub const FIELD_MANAGER: &str = "wasmop";

/// The controllers `wasmop run` can run.
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

/// Options of `wasmop run`.
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
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
    /// faster plugin calls, virtual memory reserved up front (about 100 GiB, none of it
    /// committed), plugin memory capped at 1 GiB. Falls back to on-demand allocation, with a
    /// warning, where the reservation is refused.
    #[arg(long, env = "WASMOP_POOLING", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pooling: bool,
    /// Routing controller options.
    #[command(flatten)]
    pub routing: crate::routing::Options,
    /// Scaling controller options.
    #[command(flatten)]
    pub scaling: crate::scaling::Options,
    /// Restart controller options.
    #[command(flatten)]
    pub restart: crate::restart::Options,
    /// DR loop options.
    #[command(flatten)]
    pub dr: crate::dr::Options,
}

/// Shared state of the running operator, handed to every controller.
pub struct Context {
    /// The Kubernetes client (reads; writes go through [`Context::writer`]).
    pub client: Client,
    /// The plugin registry.
    pub registry: Arc<Registry>,
    /// The only way to write: gated by the DR state, one field manager, Events included.
    pub writer: Writer,
    /// The options the operator was started with.
    pub options: RunOptions,
    /// The DR loop's view of the lease (`/dr`).
    pub dr: Arc<crate::dr::machine::Status>,
    registry_loaded: AtomicBool,
    reloads: watch::Sender<u64>,
}

impl Context {
    /// A context for `client` and `registry`; the gate starts passive until the DR loop opens it.
    pub fn new(client: Client, registry: Arc<Registry>, options: RunOptions) -> Arc<Self> {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(options.identity.clone()),
        };
        Arc::new(Self {
            writer: Writer::new(WriteGate::new(false), client.clone(), reporter),
            client,
            registry,
            options,
            dr: Arc::default(),
            registry_loaded: AtomicBool::new(false),
            reloads: watch::Sender::new(0),
        })
    }

    /// The write gate.
    pub fn gate(&self) -> &Arc<WriteGate> {
        self.writer.gate()
    }

    /// The operator namespace (`--namespace`).
    pub fn namespace(&self) -> &str {
        &self.options.namespace
    }

    /// Extra CA certificates (`--extra-ca-file`), for `https://` plugin sources; the plugin
    /// runtime trusts them for plugins' `https://` requests too.
    pub fn extra_ca_pem(&self) -> Option<&[u8]> {
        self.registry.runtime().extra_ca_pem()
    }

    /// An `Api` for a namespaced kind over the watched scope: `--watch-namespace` if set,
    /// else all namespaces.
    pub fn watched_api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    {
        match &self.options.watch_namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Whether objects of namespace `ns` are in the watched scope.
    pub fn watches_namespace(&self, ns: &str) -> bool {
        self.options
            .watch_namespace
            .as_deref()
            .is_none_or(|w| w == ns)
    }

    /// Watcher configuration for wasmop's own custom resources (`--selector` applied).
    pub fn cr_watcher_config(&self) -> watcher::Config {
        let config = watcher::Config::default();
        match &self.options.selector {
            Some(s) => config.labels(s),
            None => config,
        }
    }

    /// Whether the registry has been loaded once (readiness).
    pub fn registry_loaded(&self) -> bool {
        self.registry_loaded.load(Ordering::Relaxed)
    }

    /// Marks the registry loaded, sets the registry's gauges and tells every watcher of reloads.
    pub fn registry_reloaded(&self) {
        let (statuses, config_error) = self.registry.statuses();
        crate::metrics::plugin_registry(&statuses, config_error.as_deref());
        self.registry_loaded.store(true, Ordering::Relaxed);
        self.reloads.send_modify(|n| *n += 1);
    }

    /// A receiver that changes after every registry reload (for `PluginReady` and for
    /// re-reconciling resources whose plugin changed).
    pub fn reloads(&self) -> watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// Whether controller `kind` runs in this process (`--controllers`).
    pub fn runs(&self, kind: ControllerKind) -> bool {
        self.options.controllers.contains(&kind)
    }
}

/// Runs the operator until SIGINT or SIGTERM.
///
/// # Errors
/// No cluster connection, the server address cannot be bound, or a loop ends.
pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("cannot connect to the Kubernetes API (is KUBECONFIG set?)")?;
    let runtime = PluginRuntime::new(RuntimeOptions {
        pooling: opts.pooling,
        extra_ca_pem: crate::plugins::read_extra_ca_file(opts.extra_ca_file.as_deref())?,
        ..RuntimeOptions::default()
    })?;
    let registry = Registry::new(runtime);
    let listen = opts.listen;
    let ctx = Context::new(client, registry, opts);

    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(
        %listen,
        namespace = %ctx.namespace(),
        identity = %ctx.options.identity,
        watch_namespace = ctx.options.watch_namespace.as_deref().unwrap_or("(all)"),
        controllers = ?ctx.options.controllers,
        "wasmop starting"
    );
    let server = axum::serve(listener, server::router(ctx.clone()))
        .with_graceful_shutdown(shutdown_signal());
    let controller = |kind: ControllerKind| {
        let ctx = ctx.clone();
        async move {
            if !ctx.runs(kind) {
                return std::future::pending().await;
            }
            match kind {
                ControllerKind::Routing => crate::routing::run(ctx).await,
                ControllerKind::Scaling => crate::scaling::run(ctx).await,
                ControllerKind::Restart => crate::restart::run(ctx).await,
            }
        }
    };
    tokio::select! {
        r = server => r.context("server failed")?,
        r = registry_watch::run(ctx.clone()) => r?,
        r = crate::dr::run(ctx.clone()) => r.context("DR loop")?,
        r = plugin_ready::run_all(ctx.clone()) => r?,
        r = controller(ControllerKind::Routing) => r.context("routing controller")?,
        r = controller(ControllerKind::Scaling) => r.context("scaling controller")?,
        r = controller(ControllerKind::Restart) => r.context("restart controller")?,
    }
    tracing::info!("wasmop stopped");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// The result of [`kube::runtime::finalizer::finalizer`], with the finalizer's own patch
/// finding the object deleted (HTTP 404 when adding or removing it) turned into
/// `Ok(Action::await_change())`; any other result as it was.
///
/// A reconcile works on the reflector's copy, which can still show an object the API server
/// has already deleted: typically a second reconcile of a deleted custom resource, queued by an
/// object it managed, whose cleanup finds nothing left to do and whose finalizer is already
/// gone. Nothing remains to converge, so it is done (a debug log, in the controller's
/// `reconciling object` span that names it), not a failed reconcile to retry.
///
/// # Errors
/// Every other [`kube::runtime::finalizer::Error`], unchanged.
pub fn unless_deleted_meanwhile<E: std::error::Error + 'static>(
    result: Result<kube::runtime::controller::Action, kube::runtime::finalizer::Error<E>>,
) -> Result<kube::runtime::controller::Action, kube::runtime::finalizer::Error<E>> {
    use kube::runtime::finalizer::Error as F;
    match result {
        Err(F::AddFinalizer(kube::Error::Api(s)) | F::RemoveFinalizer(kube::Error::Api(s)))
            if s.code == 404 =>
        {
            tracing::debug!("already deleted: {}", s.message);
            Ok(kube::runtime::controller::Action::await_change())
        }
        other => other,
    }
}
