//! Watch caches: a reflector store of one kind, filled by a watch whose stream also triggers
//! reconciles (`Controller::watches_stream`). Controllers read what they depend on from these
//! instead of asking the API server at every reconcile. No cache keeps `managedFields`: no
//! reader needs them, and on an object many field managers write (a VirtualService that
//! hundreds of DynamicEnvs add routes to) they can be larger than the rest of it.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, Stream, TryStreamExt};
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

/// [`cache`] with an [`Index`] of its objects by `key`.
pub fn cache_indexed<K>(
    api: Api<K>,
    config: watcher::Config,
    key: fn(&K) -> Option<String>,
) -> (
    Store<K>,
    Index<K>,
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
    let index = Index::new(store.clone(), key);
    let events = index.clone();
    let stream = reflected(
        api,
        config,
        writer,
        |_| {},
        move |event| events.apply(event),
    );
    (store, index, stream)
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
    (store, reflected(api, config, writer, trim, |_| {}))
}

/// The watch of every cache: with backoff, each object without `managedFields` and through
/// `trim`, each event shown to `observe` and then applied to `writer`'s store; it yields the
/// objects applied or deleted.
fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    mut trim: impl FnMut(&mut K) + Send + 'static,
    mut observe: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    watcher(api, config)
        .default_backoff()
        .modify(move |k: &mut K| {
            k.meta_mut().managed_fields = None;
            trim(k);
        })
        .inspect_ok(move |event| observe(event))
        .reflect(writer)
        .touched_objects()
}

/// A secondary index over a cache's store: the objects that share a key (e.g. the
/// EndpointSlices of one Service, keyed `namespace/service`), found without scanning the
/// store, so that a reconcile of one of N objects costs the same whatever N is.
///
/// It applies the watcher's events as the store does (the objects of a list are buffered
/// until the list ends and then replace everything), so both hold the same objects once an
/// event has passed through both; made by [`cache_indexed`].
pub struct Index<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    key: fn(&K) -> Option<String>,
    entries: Arc<RwLock<Entries<K>>>,
}

/// The refs under each key, and the key of each ref; `listing` gathers a list in progress.
struct Entries<K: Resource<DynamicType = ()>> {
    by_key: HashMap<String, HashSet<ObjectRef<K>>>,
    key_of: HashMap<ObjectRef<K>, String>,
    listing: HashMap<ObjectRef<K>, String>,
}

impl<K: Resource<DynamicType = ()>> Entries<K> {
    fn remove(&mut self, r: &ObjectRef<K>) {
        if let Some(old) = self.key_of.remove(r)
            && let Some(set) = self.by_key.get_mut(&old)
        {
            set.remove(r);
            if set.is_empty() {
                self.by_key.remove(&old);
            }
        }
    }

    fn insert(&mut self, r: ObjectRef<K>, key: String) {
        self.by_key
            .entry(key.clone())
            .or_default()
            .insert(r.clone());
        self.key_of.insert(r, key);
    }
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
                listing: HashMap::new(),
            })),
        }
    }

    /// Applies one watcher event, as `reflector::store::Writer::apply_watcher_event` does.
    pub fn apply(&self, event: &watcher::Event<K>) {
        let mut e = self.entries.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(obj) => {
                let r = ObjectRef::from_obj(obj);
                e.remove(&r);
                if let Some(key) = (self.key)(obj) {
                    e.insert(r, key);
                }
            }
            watcher::Event::Delete(obj) => e.remove(&ObjectRef::from_obj(obj)),
            watcher::Event::Init => e.listing.clear(),
            watcher::Event::InitApply(obj) => {
                if let Some(key) = (self.key)(obj) {
                    e.listing.insert(ObjectRef::from_obj(obj), key);
                }
            }
            watcher::Event::InitDone => {
                let listed = std::mem::take(&mut e.listing);
                e.by_key.clear();
                e.key_of.clear();
                for (r, key) in listed {
                    e.insert(r, key);
                }
            }
        }
    }

    /// The cached objects whose key is `key`, in no particular order. An object the index
    /// has seen but the store not yet (or no longer) is left out.
    pub fn get(&self, key: &str) -> Vec<Arc<K>> {
        let e = self.entries.read().unwrap_or_else(|e| e.into_inner());
        e.by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|r| self.store.get(r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use watcher::Event;

    fn cm(name: &str, svc: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.labels = Some([("svc".to_owned(), svc.to_owned())].into());
        c
    }

    fn names(v: Vec<Arc<ConfigMap>>) -> Vec<String> {
        let mut n: Vec<String> = v.iter().map(|c| c.name_any()).collect();
        n.sort();
        n
    }

    #[test]
    fn index_follows_lists_applies_relabels_and_deletes() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let index = Index::new(store, |c: &ConfigMap| {
            Some(format!("{}/{}", c.namespace()?, c.labels().get("svc")?))
        });
        // As the cache's stream does: the index, then the store, see each event.
        let mut step = |event: Event<ConfigMap>| {
            index.apply(&event);
            writer.apply_watcher_event(&event);
        };
        // The initial list: nothing shows until it ends.
        step(Event::Init);
        for (name, svc) in [("a", "x"), ("b", "x"), ("c", "y")] {
            step(Event::InitApply(cm(name, svc)));
        }
        assert!(index.get("ns/x").is_empty());
        step(Event::InitDone);
        assert_eq!(names(index.get("ns/x")), ["a", "b"]);
        assert_eq!(names(index.get("ns/y")), ["c"]);
        assert!(index.get("other/x").is_empty());

        step(Event::Apply(cm("a", "y")));
        assert_eq!(names(index.get("ns/x")), ["b"]);
        assert_eq!(names(index.get("ns/y")), ["a", "c"]);

        step(Event::Delete(cm("b", "x")));
        assert!(index.get("ns/x").is_empty());

        // A relist after the watch was down replaces everything: "c" was deleted meanwhile.
        step(Event::Init);
        step(Event::InitApply(cm("a", "y")));
        step(Event::InitApply(cm("d", "x")));
        step(Event::InitDone);
        assert_eq!(names(index.get("ns/y")), ["a"]);
        assert_eq!(names(index.get("ns/x")), ["d"]);
        let e = index.entries.read().unwrap();
        assert_eq!(e.key_of.len(), 2);
        assert_eq!(e.by_key.len(), 2);
    }
}

/// A future that resolves once each store it was made of holds its watch's first full list,
/// for any number of tasks at once: clone it, or call [`Ready::wait`] from each.
///
/// `Store::wait_until_ready` of kube-runtime wakes only the last of several tasks that wait
/// on one store at the same time (its `DelayedInit` keeps a single waker): the others sleep
/// until something else polls them, which for reconciles waiting at start-up was the 30 s
/// timeout around their wait. A `Ready` waits on each store from one future and wakes every
/// waiter.
#[derive(Clone)]
pub struct Ready(Shared<BoxFuture<'static, ()>>);

impl Ready {
    /// Ready once every one of `lists` ([`Ready::first_list`] of each store) is.
    pub fn of(lists: Vec<BoxFuture<'static, ()>>) -> Self {
        Self(
            async move {
                for list in lists {
                    list.await;
                }
            }
            .boxed()
            .shared(),
        )
    }

    /// Ready once `store` is: [`Ready::of`] its [`Ready::first_list`].
    pub fn of_store<K>(store: &Store<K>) -> Self
    where
        K: reflector::Lookup + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        Self::of(vec![Self::first_list(store)])
    }

    /// The first full list of `store`, for [`Ready::of`]. Also done when the store's writer
    /// is dropped (its watch is gone, and with it whoever would wait).
    pub fn first_list<K>(store: &Store<K>) -> BoxFuture<'static, ()>
    where
        K: reflector::Lookup + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let store = store.clone();
        async move {
            let _ = store.wait_until_ready().await;
        }
        .boxed()
    }

    /// Waits until ready.
    pub async fn wait(&self) {
        self.0.clone().await;
    }
}

#[cfg(test)]
mod ready_tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::time::Duration;

    #[tokio::test]
    async fn every_task_waiting_for_a_store_wakes_when_it_fills() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let ready = Ready::of_store(&store);
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let ready = ready.clone();
                tokio::spawn(async move { ready.wait().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(1), waiter)
                .await
                .expect("each waiter is woken")
                .unwrap();
        }
    }

    /// What [`Ready`] is for: of several tasks waiting on one store directly, only the last
    /// to wait is woken (kube-runtime's behaviour; if it changes, `Ready` can go).
    #[tokio::test]
    async fn a_store_wakes_only_one_of_its_direct_waiters() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.wait_until_ready().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let woken = waiters.iter().filter(|w| w.is_finished()).count();
        assert!(
            woken < 4,
            "every direct waiter woke: Ready is no longer needed"
        );
    }
}

/// This process's last status write of each object, until the cache shows it.
///
/// A reconcile queued by a write's own side effects (an owned object it created) can run on
/// the cached copy from before the write, and would write the same status again. While the
/// cache still holds the version a write was made from (same resourceVersion), the status the
/// API server answered with counts instead; once the cache moves on, the cache counts.
/// Objects are told apart by namespace and name.
pub struct WrittenStatus<S> {
    by_key: std::sync::Mutex<HashMap<String, (String, S)>>,
}

impl<S> Default for WrittenStatus<S> {
    fn default() -> Self {
        Self {
            by_key: std::sync::Mutex::default(),
        }
    }
}

fn written_key<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

impl<S: Clone> WrittenStatus<S> {
    /// Records that `status` was written from `cached`, the cached copy of the object.
    pub fn record<K: Resource>(&self, cached: &K, status: S) {
        let key = written_key(cached);
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        match cached.meta().resource_version.clone() {
            Some(from) => by_key.insert(key, (from, status)),
            None => by_key.remove(&key),
        };
    }

    /// The status of `cached` (a cached copy whose status is `status`): the written one while
    /// the cache holds the version it was made from, else `status`.
    pub fn status<K: Resource>(&self, cached: &K, status: Option<&S>) -> Option<S> {
        let key = written_key(cached);
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        match by_key.get(&key) {
            Some((from, written)) if cached.meta().resource_version.as_ref() == Some(from) => {
                Some(written.clone())
            }
            Some(_) => {
                by_key.remove(&key);
                status.cloned()
            }
            None => status.cloned(),
        }
    }

    /// Forgets `obj` (it is gone).
    pub fn forget<K: Resource>(&self, obj: &K) {
        self.by_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&written_key(obj));
    }
}

#[cfg(test)]
mod written_status_tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::WrittenStatus;

    /// The cached copy of `ns/name` at resourceVersion `rv`.
    fn at(name: &str, rv: &str) -> ConfigMap {
        let mut obj = ConfigMap::default();
        obj.metadata.namespace = Some("ns".into());
        obj.metadata.name = Some(name.into());
        obj.metadata.resource_version = Some(rv.into());
        obj
    }

    #[test]
    fn a_write_counts_until_the_cache_moves_past_the_version_it_was_made_from() {
        let written = WrittenStatus::default();
        assert_eq!(written.status(&at("a", "7"), Some(&"old")), Some("old"));
        written.record(&at("a", "7"), "new");
        assert_eq!(written.status(&at("a", "7"), Some(&"old")), Some("new"));
        assert_eq!(written.status(&at("b", "7"), Some(&"other")), Some("other"));
        assert_eq!(written.status(&at("a", "8"), Some(&"newer")), Some("newer"));
        // Once moved on, the record is gone: even the old version's status counts again.
        assert_eq!(written.status(&at("a", "7"), Some(&"old")), Some("old"));
    }

    #[test]
    fn a_forgotten_object_counts_its_cache() {
        let written = WrittenStatus::default();
        written.record(&at("a", "7"), "new");
        written.forget(&at("a", "7"));
        assert_eq!(written.status(&at("a", "7"), None), None);
    }
}
