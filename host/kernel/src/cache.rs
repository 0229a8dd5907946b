//! Watch caches: a reflector store of one kind, filled by a watch whose stream also triggers
//! reconciles (`Controller::watches_stream`). Controllers read what they depend on from these
//! instead of asking the API server at every reconcile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use futures::{Stream, TryStreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
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

/// A secondary index over a cache's store: the objects that share a key (e.g. the
/// EndpointSlices of one Service, keyed `namespace/service`), found without scanning the
/// store, so that a reconcile of one of N objects costs the same whatever N is.
///
/// Kept current by [`Index::track`] on the stream that fills the store (after the store saw
/// each change). An object deleted while the watch was down is never yielded by the stream:
/// its entry is dropped at the next lookup that finds it gone from the store.
pub struct Index<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    key: fn(&K) -> Option<String>,
    entries: Arc<RwLock<Entries<K>>>,
}

/// The refs under each key, and the key of each ref.
struct Entries<K: Resource<DynamicType = ()>> {
    by_key: HashMap<String, HashSet<ObjectRef<K>>>,
    key_of: HashMap<ObjectRef<K>, String>,
}

impl<K> Clone for Index<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            key: self.key,
            entries: self.entries.clone(),
        }
    }
}

impl<K> Index<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// An empty index of `store` by `key` (`None`: the object is not indexed).
    pub fn new(store: Store<K>, key: fn(&K) -> Option<String>) -> Self {
        Self {
            store,
            key,
            entries: Arc::new(RwLock::new(Entries {
                by_key: HashMap::new(),
                key_of: HashMap::new(),
            })),
        }
    }

    /// `stream` (the one [`cache`] returns) with every object it yields noted in the index.
    pub fn track<S>(&self, stream: S) -> impl Stream<Item = Result<K, watcher::Error>> + use<K, S>
    where
        S: Stream<Item = Result<K, watcher::Error>>,
    {
        let index = self.clone();
        stream.inspect_ok(move |obj| index.note(&ObjectRef::from_obj(obj)))
    }

    /// Records where `r` is now: under the key of the store's copy, or nowhere once deleted.
    fn note(&self, r: &ObjectRef<K>) {
        let now = self.store.get(r).and_then(|o| (self.key)(&o));
        let mut e = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = e.key_of.remove(r)
            && let Some(set) = e.by_key.get_mut(&old)
        {
            set.remove(r);
            if set.is_empty() {
                e.by_key.remove(&old);
            }
        }
        if let Some(key) = now {
            e.by_key.entry(key.clone()).or_default().insert(r.clone());
            e.key_of.insert(r.clone(), key);
        }
    }

    /// The cached objects whose key is `key`, in no particular order.
    pub fn get(&self, key: &str) -> Vec<Arc<K>> {
        let mut found = Vec::new();
        let mut gone = Vec::new();
        {
            let e = self.entries.read().unwrap_or_else(|e| e.into_inner());
            for r in e.by_key.get(key).into_iter().flatten() {
                match self.store.get(r) {
                    Some(o) if (self.key)(&o).as_deref() == Some(key) => found.push(o),
                    _ => gone.push(r.clone()),
                }
            }
        }
        for r in gone {
            self.note(&r);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;

    fn cm(name: &str, svc: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.labels = Some([("svc".to_owned(), svc.to_owned())].into());
        c
    }

    fn names(mut v: Vec<Arc<ConfigMap>>) -> Vec<String> {
        let mut n: Vec<String> = v.drain(..).map(|c| c.name_any()).collect();
        n.sort();
        n
    }

    #[tokio::test]
    async fn index_follows_applies_relabels_deletes_and_missed_deletes() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let index = Index::new(store, |c: &ConfigMap| {
            Some(format!("{}/{}", c.namespace()?, c.labels().get("svc")?))
        });
        // As the cache's stream does: the store sees the event, then the index the object.
        let mut step = async |event: watcher::Event<ConfigMap>, obj: ConfigMap| {
            writer.apply_watcher_event(&event);
            let _: Vec<_> = index
                .track(futures::stream::iter([Ok(obj)]))
                .collect()
                .await;
        };
        for (name, svc) in [("a", "x"), ("b", "x"), ("c", "y")] {
            step(watcher::Event::Apply(cm(name, svc)), cm(name, svc)).await;
        }
        assert_eq!(names(index.get("ns/x")), ["a", "b"]);
        assert_eq!(names(index.get("ns/y")), ["c"]);
        assert!(index.get("other/x").is_empty());

        step(watcher::Event::Apply(cm("a", "y")), cm("a", "y")).await;
        assert_eq!(names(index.get("ns/x")), ["b"]);
        assert_eq!(names(index.get("ns/y")), ["a", "c"]);

        step(watcher::Event::Delete(cm("b", "x")), cm("b", "x")).await;
        assert!(index.get("ns/x").is_empty());

        // Deleted while the watch was down: the stream never yields it; the lookup drops it.
        writer.apply_watcher_event(&watcher::Event::Delete(cm("c", "y")));
        assert_eq!(names(index.get("ns/y")), ["a"]);
        let e = index.entries.read().unwrap();
        assert_eq!(e.key_of.len(), 1);
        assert_eq!(e.by_key.len(), 1);
    }
}
