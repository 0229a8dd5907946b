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
pub mod error;
pub mod options;
pub mod plan;
pub mod poller;
pub mod target;

use std::sync::Arc;

use kube::Api;
use kube::api::ListParams;
use kube::runtime::controller::{Config, Controller};
use wasmop_api::elasticservice::ElasticService;
use wasmop_kernel::cache::Ready;

use crate::Context;
pub use error::Error;
pub use options::Options;

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
    let (caches, streams) = controller::caches(&ctx, &opts);
    let scaling = Arc::new(controller::Scaling::new(ctx.clone(), opts, caches));
    let controller = Controller::new(es_api, ctx.kernel.cr_watcher_config())
        .with_config(Config::default().concurrency(4));
    let store = controller.store();
    // One waiter for the ElasticService cache, shared by the poller and the promotions.
    let es_ready = Ready::of_store(&store);
    let (poll_tx, poll_rx) = futures::channel::mpsc::unbounded::<()>();
    tokio::select! {
        r = controller::run(scaling.clone(), controller, streams, poll_rx, es_ready.clone()) => r,
        r = poller::run(scaling, store, es_ready, poll_tx) => r,
    }
}
