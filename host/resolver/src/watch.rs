//! Feeds the [`Catalog`] from three watches (ElasticServices, Services, EndpointSlices),
//! cluster-wide or in `--watch-namespace`. No polling: a change of a private Service's
//! EndpointSlice reaches the held requests as one watch event.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::catalog::{Catalog, trusted_slices_selector};
use wasmop_api::elasticservice::ElasticService;

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn feed<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    apply: impl Fn(watcher::Event<K>),
) -> anyhow::Result<()>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => apply(event),
            Err(e) => tracing::warn!(
                "watching {what} failed ({e}); retrying with backoff. The resolver's ServiceAccount needs get, list and watch on {what}"
            ),
        }
    }
    anyhow::bail!("the watch of {what} ended")
}

/// Watches the three kinds into `catalog` until one watch ends (they retry errors forever).
/// EndpointSlices are watched only when a trusted controller manages them
/// ([`super::catalog::TRUSTED_SLICE_MANAGERS`]; the catalog checks again).
///
/// # Errors
/// A watch stream ended.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    catalog: Arc<Catalog>,
) -> anyhow::Result<()> {
    let ns = namespace.as_deref();
    tokio::try_join!(
        feed(
            api::<ElasticService>(&client, ns),
            watcher::Config::default(),
            "elasticservices",
            |e| catalog.elastic_service_event(e),
        ),
        feed(
            api::<Service>(&client, ns),
            watcher::Config::default(),
            "services",
            |e| catalog.service_event(e),
        ),
        feed(
            api::<EndpointSlice>(&client, ns),
            watcher::Config::default().labels(&trusted_slices_selector()),
            "endpointslices",
            |e| catalog.endpoint_slice_event(e),
        ),
    )?;
    Ok(())
}
