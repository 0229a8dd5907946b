//! What every wasmop controller shares, and nothing that knows about plugins:
//!
//! - [`Kernel`]: the Kubernetes client, the scope the operator watches, and the only way to
//!   write ([`gate::Writer`], closed while this instance is passive);
//! - [`gate`]: the DR write gate and the writer every write goes through;
//! - [`conditions`]: status conditions as the API conventions want them;
//! - [`metrics`]: the process's Prometheus registry, with the write and reconcile metrics;
//! - [`cache::cache`]: watch caches the controllers read instead of the API server;
//! - [`client::client`]: the Kubernetes client, with counted backoff on 429, 503 and 504;
//! - [`yaml::to_string`]: YAML that kubectl and istioctl read back as written;
//! - [`FIELD_MANAGER`], [`shutdown_signal`] and [`unless_deleted_meanwhile`].
//!
//! The controllers (`wasmop-controllers`) and the resolver (`wasmop-resolver`) build on it; the
//! plugin host does not (docs/architecture.md).
#![forbid(unsafe_code)]

pub mod cache;
pub mod client;
pub mod conditions;
pub mod gate;
pub mod metrics;
pub mod text;
pub mod yaml;

use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use kube::runtime::events::Reporter;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};

pub use gate::FIELD_MANAGER;
use gate::{WriteGate, Writer};

/// Where the operator runs and what it watches (flags of `wasmop run`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// Namespace of the `wasmop-plugins` ConfigMap, the DR lease and the operator's own objects.
    pub namespace: String,
    /// This instance's identity (the pod name in a cluster): the DR lease holder and the Event
    /// reporter instance.
    pub identity: String,
    /// Watch custom resources (and the objects they manage) in this namespace only; all
    /// namespaces when `None`. Cluster-scoped resources are always watched cluster-wide.
    pub watch_namespace: Option<String>,
    /// Reconcile only custom resources whose labels match this label selector.
    pub selector: Option<String>,
}

/// The Kubernetes side every controller receives: a client for reads, the gated writer for
/// writes, and the scope.
pub struct Kernel {
    /// The Kubernetes client (reads; writes go through [`Kernel::writer`]).
    pub client: Client,
    /// The only way to write: gated by the DR state, one field manager, Events included.
    pub writer: Writer,
    /// Where the operator runs and what it watches.
    pub scope: Scope,
}

impl Kernel {
    /// A kernel for `client` in `scope`; the gate starts closed (passive) until the DR loop
    /// opens it.
    pub fn new(client: Client, scope: Scope) -> Arc<Self> {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(scope.identity.clone()),
        };
        Arc::new(Self {
            writer: Writer::new(WriteGate::new(false), client.clone(), reporter),
            client,
            scope,
        })
    }

    /// The write gate.
    pub fn gate(&self) -> &Arc<WriteGate> {
        self.writer.gate()
    }

    /// The operator namespace (`--namespace`).
    pub fn namespace(&self) -> &str {
        &self.scope.namespace
    }

    /// This instance's identity (`--identity`, the pod name in a cluster).
    pub fn identity(&self) -> &str {
        &self.scope.identity
    }

    /// An `Api` for a namespaced kind over the watched scope: `--watch-namespace` if set,
    /// else all namespaces.
    pub fn watched_api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    {
        match &self.scope.watch_namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Whether objects of namespace `ns` are in the watched scope.
    pub fn watches_namespace(&self, ns: &str) -> bool {
        self.scope
            .watch_namespace
            .as_deref()
            .is_none_or(|w| w == ns)
    }

    /// Watcher configuration for wasmop's own custom resources (`--selector` applied).
    pub fn cr_watcher_config(&self) -> watcher::Config {
        let config = watcher::Config::default();
        match &self.scope.selector {
            Some(s) => config.labels(s),
            None => config,
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
///
/// # Panics
/// When the SIGTERM handler cannot be installed (the process has no signal support).
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
