//! Watch caches: a reflector store of one kind, filled by a watch whose stream also triggers
//! reconciles (`Controller::watches_stream`). Controllers read what they depend on from these
//! instead of asking the API server at every reconcile.

use futures::Stream;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// A store of the objects of `api` selected by `config`, and the stream that fills it and
/// yields each object that was applied or deleted (for a controller's `watches_stream`). The
/// store is empty until the stream is polled; [`Store::wait_until_ready`] resolves after the
/// first list.
pub fn cache<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    cache_trimmed(api, config, |_| {})
}

/// [`cache`] whose objects pass through `trim` before they are stored, e.g. to drop the
/// fields no reader needs (a pod template) and keep the cache small.
pub fn cache_trimmed<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .touched_objects();
    (store, stream)
}
