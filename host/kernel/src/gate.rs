//! The write gate: the one place through which every write of the operator to the API server
//! passes (objects, status, scale, finalizers, Events).
//!
//! While the DR state checker says this instance is passive, [`WriteGate::check`] refuses and
//! every [`Writer`] method returns [`WriteError::Passive`] without sending anything, as
//! Admiral's read-only mode (docs/dr.md): watches, caches and plan
//! computation go on, controllers requeue, and [`WriteGate::promotions_of`] lets them reconcile
//! everything again once the instance becomes active.
//!
//! The DR loop's own lease writes are the only writes that bypass the gate.
//!
//! An active instance holds its lease only until a deadline on its own monotonic clock
//! ([`WriteGate::set_active_until`], set by the DR loop of `wasmop_controllers::dr`): past it
//! the gate refuses by itself, even before the DR loop notices, and a write still in flight at
//! the deadline is abandoned (the [`Writer`] bounds every request by it), so nothing is sent
//! once another instance may have taken over.

use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cache::Ready;

/// Field manager of every write and the Event reporter name of the operator.
pub const FIELD_MANAGER: &str = "wasmop";

/// Why a write was not made.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This instance is passive; nothing was sent.
    #[error("this instance is passive (DR): writes are refused until it is promoted")]
    Passive,
    /// The API server refused or failed the request.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

impl WriteError {
    /// Whether the API server answered 409 Conflict (stale resourceVersion or field conflict).
    pub fn is_conflict(&self) -> bool {
        self.status_code() == Some(409)
    }

    /// Whether the API server answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        self.status_code() == Some(404)
    }

    /// The HTTP status of an API error, if this is one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            WriteError::Kube(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }

    /// A stable label for metrics: `passive`, `conflict`, `not_found`, `api` or `client`.
    pub fn label(&self) -> &'static str {
        match self {
            WriteError::Passive => "passive",
            _ if self.is_conflict() => "conflict",
            _ if self.is_not_found() => "not_found",
            WriteError::Kube(kube::Error::Api(_)) => "api",
            WriteError::Kube(_) => "client",
        }
    }
}

/// Active (writes allowed) or passive, with a channel that tells watchers of every change,
/// and an optional deadline past which an active gate refuses by itself.
#[derive(Debug)]
pub struct WriteGate {
    active: watch::Sender<bool>,
    deadline: Mutex<Option<Instant>>,
}

impl WriteGate {
    /// A gate in the given state. The operator starts passive and the DR loop opens it.
    pub fn new(active: bool) -> Arc<Self> {
        Arc::new(Self {
            active: watch::Sender::new(active),
            deadline: Mutex::new(None),
        })
    }

    /// Whether writes are allowed now: active, and before the deadline if there is one.
    pub fn is_active(&self) -> bool {
        *self.active.borrow() && self.deadline().is_none_or(|d| Instant::now() < d)
    }

    /// The instant (tokio's monotonic clock) until which an active gate stays open, if any.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the state without a deadline; returns whether it changed.
    pub fn set_active(&self, active: bool) -> bool {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.flip(active)
    }

    /// Opens the gate until `deadline` (a lease held until then); returns whether the state
    /// changed. Calling it again moves the deadline (a renewal).
    pub fn set_active_until(&self, deadline: Instant) -> bool {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
        self.flip(true)
    }

    fn flip(&self, active: bool) -> bool {
        self.active.send_if_modified(|current| {
            let changed = *current != active;
            *current = active;
            changed
        })
    }

    /// `Ok` when active.
    ///
    /// # Errors
    /// [`WriteError::Passive`] when passive.
    pub fn check(&self) -> Result<(), WriteError> {
        if self.is_active() {
            Ok(())
        } else {
            Err(WriteError::Passive)
        }
    }

    /// A receiver of the state (true = active).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.active.subscribe()
    }

    /// [`promotions`](Self::promotions), each yielded only once `ready` (the controller's store
    /// holding its watch's first full list), for `Controller::reconcile_all_on` and loops over
    /// `store.state()`.
    ///
    /// A reflector's store stays empty until the initial list is complete, while the objects
    /// of that list are already handed to the reconciler one by one. An instance promoted in
    /// between (the first instance of a fresh start takes its lease within milliseconds)
    /// would reconcile nothing on promotion, and the objects it had reconciled while passive
    /// would wait for their next resync. Waiting for the store makes the promotion reach them.
    pub fn promotions_of(&self, ready: Ready) -> impl Stream<Item = ()> + Send + 'static {
        self.promotions().then(move |()| {
            let ready = ready.clone();
            async move { ready.wait().await }
        })
    }

    /// A stream that yields once each time the gate turns active (not for the current state).
    /// Controllers use [`promotions_of`](Self::promotions_of), which waits for their cache.
    pub fn promotions(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut rx = self.subscribe();
        rx.mark_unchanged();
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                rx.changed().await.ok()?;
                if *rx.borrow_and_update() {
                    return Some(((), rx));
                }
            }
        })
    }
}

/// Writes to the API server through the [`WriteGate`], with one field manager
/// ([`FIELD_MANAGER`]) and a count of every write by verb, kind and outcome
/// (`wasmop_writes_total`).
#[derive(Clone)]
pub struct Writer {
    gate: Arc<WriteGate>,
    recorders: Recorders,
}

/// How long an Event's series stays open for repeats, as kube's and client-go's recorders.
const EVENT_SERIES_WINDOW: std::time::Duration = std::time::Duration::from_secs(6 * 60);

/// Notes with an open series kept at most; past it the oldest series are closed.
const MAX_OPEN_NOTES: usize = 4096;

/// kube's [`Recorder`] folds an Event into the series of an earlier one with the same type,
/// reason, action and objects even when its note differs, and the series keeps the first
/// note: a second plugin's load failure, or a new cause of the same failure, would read as a
/// repeat of the first. client-go folds only Events with the same note; one [`Recorder`] per
/// note does the same here.
#[derive(Clone)]
struct Recorders {
    client: kube::Client,
    reporter: Reporter,
    by_note: Arc<Mutex<std::collections::HashMap<String, (Recorder, std::time::Instant)>>>,
}

impl Recorders {
    fn for_note(&self, note: &str) -> Recorder {
        let now = std::time::Instant::now();
        let mut by_note = self.by_note.lock().unwrap_or_else(|e| e.into_inner());
        by_note.retain(|_, (_, used)| now.duration_since(*used) < EVENT_SERIES_WINDOW);
        if by_note.len() >= MAX_OPEN_NOTES
            && let Some(oldest) = by_note
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(note, _)| note.clone())
        {
            by_note.remove(&oldest);
        }
        let (recorder, used) = by_note.entry(note.to_owned()).or_insert_with(|| {
            (
                Recorder::new(self.client.clone(), self.reporter.clone()),
                now,
            )
        });
        *used = now;
        recorder.clone()
    }
}

impl Writer {
    /// A writer whose Events are published with `client` as `reporter`. Events fold into one
    /// series (`count`, `lastObservedTime`) only when type, reason, action, note and objects
    /// are all the same, within 6 minutes, as client-go's recorder.
    pub fn new(gate: Arc<WriteGate>, client: kube::Client, reporter: Reporter) -> Self {
        Self {
            gate,
            recorders: Recorders {
                client,
                reporter,
                by_note: Arc::default(),
            },
        }
    }

    /// The gate.
    pub fn gate(&self) -> &Arc<WriteGate> {
        &self.gate
    }

    /// `Ok` when writes are allowed; call it before helpers that write on their own, such as
    /// `kube::runtime::finalizer`.
    ///
    /// # Errors
    /// [`WriteError::Passive`] when passive.
    pub fn check(&self) -> Result<(), WriteError> {
        self.gate.check()
    }

    fn record<T>(
        &self,
        verb: &'static str,
        kind: &str,
        result: Result<T, kube::Error>,
    ) -> Result<T, WriteError> {
        let result = result.map_err(WriteError::Kube);
        crate::metrics::write(
            verb,
            kind,
            result.as_ref().err().map_or("ok", WriteError::label),
        );
        result
    }

    fn gated(&self, verb: &'static str, kind: &str) -> Result<(), WriteError> {
        self.gate.check().inspect_err(|e| {
            crate::metrics::write(verb, kind, e.label());
        })
    }

    /// Checks the gate, sends `request` bounded by the gate's deadline (abandoned, as
    /// [`WriteError::Passive`], if the lease runs out first) and counts the outcome.
    async fn send<T>(
        &self,
        verb: &'static str,
        kind: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        self.gated(verb, kind)?;
        let result = match self.gate.deadline() {
            Some(deadline) => match tokio::time::timeout_at(deadline, request).await {
                Ok(r) => r,
                Err(_) => {
                    crate::metrics::write(verb, kind, WriteError::Passive.label());
                    return Err(WriteError::Passive);
                }
            },
            None => request.await,
        };
        self.record(verb, kind, result)
    }

    /// Server-side apply of `object` (a partial object with `apiVersion` and `kind`) as
    /// [`FIELD_MANAGER`], forcing ownership of the fields it names.
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn apply<K, P>(&self, api: &Api<K>, name: &str, object: &P) -> Result<K, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        P: Serialize + Debug,
    {
        let kind = K::kind(&());
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        self.send("apply", &kind, api.patch(name, &pp, &Patch::Apply(object)))
            .await
    }

    /// Server-side apply of `status` (the `status` field's content; `apiVersion` and `kind` are
    /// added from `K`) to the status subresource as [`FIELD_MANAGER`].
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn apply_status<K, S>(
        &self,
        api: &Api<K>,
        name: &str,
        status: &S,
    ) -> Result<K, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        S: Serialize + Debug,
    {
        self.apply_status_as(api, name, status, FIELD_MANAGER).await
    }

    /// As [`Writer::apply_status`] with another field manager, for status fields owned by a
    /// different loop of the operator (e.g. `PluginReady`).
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn apply_status_as<K, S>(
        &self,
        api: &Api<K>,
        name: &str,
        status: &S,
        field_manager: &str,
    ) -> Result<K, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        S: Serialize + Debug,
    {
        let kind = K::kind(&());
        let object = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": kind,
            "status": status,
        });
        let pp = PatchParams::apply(field_manager).force();
        self.send(
            "apply_status",
            &kind,
            api.patch_status(name, &pp, &Patch::Apply(&object)),
        )
        .await
    }

    /// Any patch (merge, strategic, JSON) of the object.
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn patch<K, P>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &Patch<P>,
    ) -> Result<K, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        P: Serialize + Debug,
    {
        let kind = K::kind(&());
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.send("patch", &kind, api.patch(name, &pp, patch)).await
    }

    /// Any patch of the status subresource.
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn patch_status<K, P>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &Patch<P>,
    ) -> Result<K, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        P: Serialize + Debug,
    {
        let kind = K::kind(&());
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.send("patch_status", &kind, api.patch_status(name, &pp, patch))
            .await
    }

    /// A patch of the `scale` subresource (e.g. `{"spec":{"replicas":N}}` as a merge patch).
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn patch_scale<K, P>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &Patch<P>,
    ) -> Result<k8s_openapi::api::autoscaling::v1::Scale, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        P: Serialize + Debug,
    {
        let kind = K::kind(&());
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.send("patch_scale", &kind, api.patch_scale(name, &pp, patch))
            .await
    }

    /// Creates `object`.
    ///
    /// # Errors
    /// [`WriteError`]; 409 when it exists.
    pub async fn create<K>(&self, api: &Api<K>, object: &K) -> Result<K, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
    {
        let kind = K::kind(&());
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.send("create", &kind, api.create(&pp, object)).await
    }

    /// Replaces `object` (an update carrying its `resourceVersion`, so a concurrent change
    /// fails with 409 Conflict).
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn replace<K>(&self, api: &Api<K>, name: &str, object: &K) -> Result<K, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
    {
        let kind = K::kind(&());
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.send("replace", &kind, api.replace(name, &pp, object))
            .await
    }

    /// Deletes the object (background propagation); returns whether it existed.
    ///
    /// # Errors
    /// [`WriteError`] other than Not Found.
    pub async fn delete<K>(&self, api: &Api<K>, name: &str) -> Result<bool, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let kind = K::kind(&());
        match self
            .send(
                "delete",
                &kind,
                api.delete(name, &DeleteParams::background()),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Publishes an Event about `reference` (best effort: a passive instance or a failure
    /// only logs). `action` is what the operator did (e.g. `Restart`), `reason` a
    /// CamelCase code (e.g. `WorkloadRestarted`).
    pub async fn event(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.event_related(reference, None, type_, reason, action, note)
            .await;
    }

    /// As [`Writer::event`], naming a `related` object too (e.g. the policy that restarted a
    /// workload). Events fold into one series only when type, reason, action, note, object
    /// and related object are all the same (see [`Writer::new`]). The note is cut to
    /// [`EVENT_NOTE_BYTES`](crate::text::EVENT_NOTE_BYTES), past which the API server refuses
    /// the Event.
    pub async fn event_related(
        &self,
        reference: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        let note = note.into();
        let note = crate::text::cut(&note, crate::text::EVENT_NOTE_BYTES).into_owned();
        if !self.gate.is_active() {
            crate::metrics::write("event", "Event", WriteError::Passive.label());
            tracing::debug!(reason, %note, "passive: Event not recorded");
            return;
        }
        let recorder = self.recorders.for_note(&note);
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related.cloned(),
        };
        let result = self
            .send("event", "Event", recorder.publish(&event, reference))
            .await;
        if let Err(e) = &result
            && !matches!(e, WriteError::Passive)
        {
            tracing::warn!("cannot record Event {reason}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn refuses_while_passive_and_announces_promotions() {
        let gate = WriteGate::new(false);
        assert!(matches!(gate.check(), Err(WriteError::Passive)));
        let mut promotions = Box::pin(gate.promotions());
        assert!(!gate.set_active(false), "no change");
        assert!(gate.set_active(true));
        assert!(gate.check().is_ok());
        tokio::time::timeout(std::time::Duration::from_secs(1), promotions.next())
            .await
            .expect("a promotion is announced")
            .expect("the stream lives");
        assert!(gate.set_active(false));
        assert!(gate.set_active(true));
        tokio::time::timeout(std::time::Duration::from_secs(1), promotions.next())
            .await
            .expect("every promotion is announced")
            .expect("the stream lives");
        assert!(matches!(gate.check(), Ok(())));
    }

    #[tokio::test]
    async fn a_promotion_during_the_initial_list_waits_for_the_store() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::watcher;
        let gate = WriteGate::new(false);
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        let ready = Ready::of_store(&store);
        let mut promotions = Box::pin(gate.promotions_of(ready));
        let mut object = ConfigMap::default();
        object.metadata.name = Some("a".into());
        object.metadata.namespace = Some("ns".into());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
        assert!(gate.set_active(true));
        let early = tokio::time::timeout(std::time::Duration::from_millis(200), promotions.next());
        assert!(
            early.await.is_err(),
            "no promotion while the store is empty: a reconcile of all would reach nothing"
        );
        writer.apply_watcher_event(&watcher::Event::InitDone);
        tokio::time::timeout(std::time::Duration::from_secs(1), promotions.next())
            .await
            .expect("the promotion once the store is filled")
            .expect("the stream lives");
        assert_eq!(
            store.state().len(),
            1,
            "what a reconcile of all then reaches"
        );
        assert!(gate.set_active(false));
        assert!(gate.set_active(true));
        tokio::time::timeout(std::time::Duration::from_secs(1), promotions.next())
            .await
            .expect("a later promotion at once")
            .expect("the stream lives");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_closes_the_gate_and_abandons_writes_in_flight() {
        let gate = WriteGate::new(false);
        let deadline = Instant::now() + std::time::Duration::from_secs(2);
        assert!(gate.set_active_until(deadline));
        assert!(gate.is_active());
        assert!(
            !gate.set_active_until(deadline),
            "a renewal is no transition"
        );
        let writer = test_writer(gate.clone());
        let never = std::future::pending::<Result<(), kube::Error>>();
        let started = Instant::now();
        let r = writer.send("patch", "Thing", never).await;
        assert!(matches!(r, Err(WriteError::Passive)), "{r:?}");
        assert_eq!(started.elapsed(), std::time::Duration::from_secs(2));
        assert!(
            !gate.is_active(),
            "past the deadline the gate refuses by itself"
        );
        assert!(matches!(gate.check(), Err(WriteError::Passive)));
        gate.set_active(true);
        assert!(gate.is_active(), "no deadline");
        assert_eq!(gate.deadline(), None);
    }

    fn test_writer(gate: Arc<WriteGate>) -> Writer {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Writer::new(
            gate,
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        )
    }

    #[tokio::test]
    async fn events_with_another_note_get_their_own_series() {
        let writer = test_writer(WriteGate::new(true));
        let open = || writer.recorders.by_note.lock().unwrap().len();
        writer.recorders.for_note("plugin a: sha256 mismatch");
        writer.recorders.for_note("plugin a: sha256 mismatch");
        assert_eq!(open(), 1, "a repeat joins the open series");
        writer.recorders.for_note("plugin b: not found");
        assert_eq!(open(), 2, "another note opens its own");
        // A series past its window closes.
        for (_, used) in writer.recorders.by_note.lock().unwrap().values_mut() {
            *used -= EVENT_SERIES_WINDOW;
        }
        writer.recorders.for_note("plugin b: not found");
        assert_eq!(open(), 1);
        for i in 0..MAX_OPEN_NOTES + 10 {
            writer.recorders.for_note(&format!("note {i}"));
        }
        assert_eq!(open(), MAX_OPEN_NOTES, "bounded");
    }

    /// The API server refuses an Event whose note is over 1024 bytes, and the Event is lost:
    /// a long note (a trap quoting a plugin's stderr) is cut to fit, and the Event is sent.
    #[tokio::test]
    async fn a_long_event_note_is_cut_to_what_the_api_server_accepts() {
        let sent = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
        let seen = sent.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let body = http_body_util::BodyExt::collect(request.into_body())
                    .await
                    .expect("a body")
                    .to_bytes();
                let event = serde_json::from_slice(&body).expect("an Event");
                seen.lock().unwrap().push(event);
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(body))
                        .expect("a response"),
                )
            }
        });
        let writer = Writer::new(
            WriteGate::new(true),
            kube::Client::new(service, "default"),
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some("wasmop-plugins".into()),
            namespace: Some("wasmop-system".into()),
            ..ObjectReference::default()
        };
        let note = format!("trapped: unreachable; stderr: {}", "y".repeat(3000));
        writer
            .event(
                &reference,
                EventType::Warning,
                "PluginLoadFailed",
                "Load",
                note,
            )
            .await;
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 1, "the Event is sent");
        let note = sent[0]["note"].as_str().expect("a note");
        assert!(
            note.len() <= crate::text::EVENT_NOTE_BYTES,
            "{} bytes",
            note.len()
        );
        assert!(
            note.starts_with("trapped: unreachable; stderr: yyy"),
            "{note}"
        );
        assert!(note.ends_with(crate::text::CUT_MARK), "{note}");
    }

    #[test]
    fn labels_are_stable() {
        assert_eq!(WriteError::Passive.label(), "passive");
    }
}
