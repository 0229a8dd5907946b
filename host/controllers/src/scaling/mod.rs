//! Scaling: the ElasticService controller and its trigger poller (KubeElasti's behaviour), with
//! trigger votes decided by the `scaler` plugin. The resolver that holds requests is the
//! `wasmop-resolver` crate; the two meet only in the API server (the demand annotation, the
//! EndpointSlices) and in the names of `wasmop_api::names`.
//!
//! ```text
//!  poller (every --poll-interval) ── plugin votes ──┐
//!  resolver ── wasmop.dev/demand annotation ────────┤
//!  Services, EndpointSlices, resolver pods ─────────┴──► reconcile ──► scale, private Service,
//!                                                                      resolver EndpointSlice,
//!                                                                      status, Events
//! ```
//!
//! Every write happens in [`controller`]'s reconcile, which kube-runtime never runs twice at
//! once for one ElasticService: the [`poller`] only gathers votes (plugin calls) and hands them
//! over. The decision is [`decide::decide`], the objects are [`plan`]'s, the workload is reached
//! through [`target`].

pub mod controller;
pub mod decide;
pub mod plan;
pub mod poller;
pub mod target;

use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::api::ListParams;
use kube::runtime::controller::{Config, Controller};
use wasmop_api::elasticservice::ElasticService;

use crate::Context;
use wasmop_kernel::gate::WriteError;

/// Options of the scaling controller (flags of `wasmop run`).
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// How often the trigger poller asks the scaler plugin for every trigger's vote (e.g.
    /// `30s`, `500ms`, `1m`).
    #[arg(long = "poll-interval", env = "WASMOP_SCALING_POLL_INTERVAL", default_value = "30s", value_parser = crate::schedule::parse_interval)]
    pub poll_interval: Duration,
    /// Namespace of the resolver pods; the operator namespace (`--namespace`) when unset.
    #[arg(long = "resolver-namespace", env = "WASMOP_SCALING_RESOLVER_NAMESPACE")]
    pub resolver_namespace: Option<String>,
    /// Label selector of the resolver pods whose IPs the public Services point at in proxy mode.
    #[arg(
        long = "resolver-selector",
        env = "WASMOP_SCALING_RESOLVER_SELECTOR",
        default_value = "app.kubernetes.io/name=wasmop-resolver"
    )]
    pub resolver_selector: String,
    /// The resolver's proxy port: every port of a public Service is redirected to it.
    #[arg(long = "resolver-port", env = "WASMOP_SCALING_RESOLVER_PORT", default_value_t = 8012, value_parser = clap::value_parser!(i32).range(1..=65535))]
    pub resolver_port: i32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(30),
            resolver_namespace: None,
            resolver_selector: "app.kubernetes.io/name=wasmop-resolver".into(),
            resolver_port: 8012,
        }
    }
}

/// Why a reconcile of an ElasticService failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write was refused (passive instance) or failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Reading an object failed.
    #[error("cannot read {0}: {1}")]
    Read(String, #[source] kube::Error),
    /// The ElasticService or an object it names is unusable; the message says what to change.
    #[error("{0}")]
    Invalid(String),
    /// The finalizer step failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A stable label for `wasmop_reconcile_total{outcome}`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::Write(WriteError::Passive) => "passive",
            Error::Write(_) => "write",
            Error::Read(..) => "read",
            Error::Invalid(_) => "invalid",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
        }
    }

    /// Whether the finalizer step raced a newer version of the object (its JSON patch test
    /// failed with 422, or 409): the cache was stale and a retry soon converges.
    pub(crate) fn is_stale(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Finalizer(e) => matches!(
                e.as_ref(),
                F::AddFinalizer(kube::Error::Api(s)) | F::RemoveFinalizer(kube::Error::Api(s))
                    if s.code == 422 || s.code == 409
            ),
            Error::Write(e) => e.is_conflict(),
            _ => false,
        }
    }

    /// Whether this is (or wraps) the passive gate's refusal.
    pub(crate) fn is_passive(&self) -> bool {
        self.metric_label() == "passive"
    }
}

/// Runs the ElasticService controller and the poller with `opts` until one of them ends.
///
/// # Errors
/// The ElasticService API is not served (CRDs not installed), or a loop ends.
pub async fn run(ctx: Arc<Context>, opts: Options) -> anyhow::Result<()> {
    let es_api: Api<ElasticService> = ctx.kernel.watched_api();
    es_api.list(&ListParams::default().limit(1)).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot list ElasticServices ({e}); install the CRDs: kubectl apply --server-side -f crds/"
        )
    })?;
    let scaling = Arc::new(controller::Scaling::new(ctx.clone(), opts));
    let controller = Controller::new(es_api, ctx.kernel.cr_watcher_config())
        .with_config(Config::default().concurrency(4));
    let store = controller.store();
    let (poll_tx, poll_rx) = futures::channel::mpsc::unbounded::<()>();
    tokio::select! {
        r = controller::run(scaling.clone(), controller, poll_rx) => r,
        r = poller::run(scaling, store, poll_tx) => r,
    }
}
