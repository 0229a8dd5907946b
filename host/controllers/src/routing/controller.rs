//! The DynamicEnv controller: kube-runtime's `Controller` with the finalizer as its top-level
//! step, the plan of [`super::plan()`] on a snapshot of the caches, and a thin apply step.
//!
//! One reconcile of a DynamicEnv:
//! 1. the snapshot: the caches of Deployments, Services and DestinationRules of its
//!    namespaces (and the ones it made anywhere) and of every VirtualService, overlaid with
//!    what this process wrote and the watches have not delivered yet;
//! 2. the plan, with the router the DynamicEnv names (`spec.plugin`) or the default;
//! 3. the writes, through the write gate with the one field manager: server-side apply of the
//!    clones and DestinationRules, the VirtualService route updates, the deletions, each with
//!    an Event on the DynamicEnv (`Created`, `Updated`, `Deleted`, `RoutesUpdated`,
//!    `RoutesRemoved`; Warning `RouterFailed`);
//! 4. the status (our fields and the `Ready` condition; `PluginReady` belongs to its own loop),
//!    written only when it changed.
//!
//! **VirtualService writes** change `spec.http` (and the DynamicEnv annotation) only, by a JSON
//! merge patch conditional on the `resourceVersion` the plan read: a concurrent change by anyone
//! makes it a 409 Conflict and the reconcile plans again, so no other writer's routes are lost.
//! Writes to one VirtualService are serialized within the process, and a plan made on an older
//! copy is redone on the newest one before writing. Deletion strips the routes named with the
//! DynamicEnv's prefixes, which restores each VirtualService exactly (the plan guarantees the
//! router changed nothing else).
//!
//! **Triggers**: DynamicEnv changes of generation or finalizers (not its status), and
//! Deployments, Services, DestinationRules and VirtualServices mapped to the DynamicEnvs whose
//! last plan read them, when what that plan read of them changed (fingerprints, see
//! [`Interest`]); objects not read yet are mapped by namespace and service host. Routes other
//! DynamicEnvs add to a shared VirtualService do not trigger anyone. Registry reloads and
//! promotions of this instance reconcile everything.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use wasmop_kernel::cache::{Ready, WrittenStatus, cache};

use super::clone;
use super::error::{Error, Refusal};
use super::ir;
use super::istio::{self, DestinationRule, VirtualService};
use super::names;
use super::plan::{
    Chain, Change, Interest, Plan, PlanConfig, Write, fingerprint_base,
    fingerprint_destination_rule, fingerprint_service, fingerprint_virtual_service, plan,
    removal_snapshot, run_chain,
};
use super::router::{Router, Unavailable, wasm_chain};
use super::snapshot::Snapshot;
use crate::Context;
use wasmop_api::dynamicenv::{DynamicEnv, DynamicEnvStatus, StatusError};
use wasmop_kernel::conditions;
use wasmop_plugin_host::Hook;

/// The finalizer on every DynamicEnv: deleting one removes its clones and DestinationRules and
/// restores every VirtualService it changed.
pub const FINALIZER: &str = "wasmop.dev/dynamicenv-cleanup";
/// Condition: every subset and consumer is ready (reason `Ready`, `Processing` or `Degraded`).
pub(crate) const READY: &str = "Ready";
/// The controller's name in metrics.
const CONTROLLER: &str = "routing";
/// Requeue of a ready DynamicEnv (the watches bring every change sooner).
const RESYNC: Duration = Duration::from_secs(300);
/// Requeue while something is not ready yet: a safety net, since the watches of the clones and
/// the other objects a DynamicEnv depends on bring each change first.
const PROCESSING_RETRY: Duration = Duration::from_secs(60);
/// Requeue of a degraded DynamicEnv (or a failing router under `failurePolicy: Fail`).
const DEGRADED_RETRY: Duration = Duration::from_secs(60);
/// How long a write of this process overrides the caches that have not seen it.
const OVERLAY_TTL: Duration = Duration::from_secs(60);
/// How long a reconcile waits for the caches' first list.
const CACHE_WAIT: Duration = Duration::from_secs(60);

/// `namespace/name` of a DynamicEnv.
fn de_key(de: &DynamicEnv) -> String {
    format!("{}/{}", de.namespace().unwrap_or_default(), de.name_any())
}

type Key = (String, String);

/// The resourceVersion of object `ns/name` in `list`, if it is there.
fn rv_of<K: Resource>(list: &[Arc<K>], ns: &str, name: &str) -> Option<String> {
    list.iter()
        .find(|o| {
            o.meta().namespace.as_deref().unwrap_or_default() == ns
                && o.meta().name.as_deref().unwrap_or_default() == name
        })
        .and_then(|o| o.meta().resource_version.clone())
}

fn key_of<K: Resource>(obj: &K) -> Key {
    (
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.meta().name.clone().unwrap_or_default(),
    )
}

/// One write of this process the caches may not have delivered yet.
struct Written<K> {
    /// resourceVersion of the object the write replaced (`None`: it did not exist).
    before: Option<String>,
    /// The object after the write (`None`: deleted).
    after: Option<Arc<K>>,
    at: Instant,
}

/// This process's recent writes of one kind, laid over a cache so the next reconcile sees
/// them even before the watch does: while the cache still holds the object the write replaced
/// (same resourceVersion), the written one counts; once the cache moves on, the cache counts.
struct Overlay<K> {
    written: Mutex<HashMap<Key, Written<K>>>,
}

impl<K: Resource + Clone> Overlay<K> {
    fn new() -> Self {
        Self {
            written: Mutex::new(HashMap::new()),
        }
    }

    fn record(&self, key: Key, before: Option<String>, after: Option<K>) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                key,
                Written {
                    before,
                    after: after.map(Arc::new),
                    at: Instant::now(),
                },
            );
    }

    fn view(&self, cached: Vec<Arc<K>>) -> Vec<Arc<K>> {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.retain(|_, w| w.at.elapsed() < OVERLAY_TTL);
        if written.is_empty() {
            return cached;
        }
        let mut out = Vec::with_capacity(cached.len() + written.len());
        let mut seen = BTreeSet::new();
        for obj in cached {
            let key = key_of(obj.as_ref());
            match written.get(&key) {
                Some(w) if w.before.is_some() && w.before == obj.meta().resource_version => {
                    seen.insert(key);
                    out.extend(w.after.clone());
                }
                Some(_) => {
                    written.remove(&key);
                    out.push(obj);
                }
                None => out.push(obj),
            }
        }
        for (key, w) in written.iter() {
            if !seen.contains(key) && w.before.is_none() {
                out.extend(w.after.clone());
            }
        }
        out
    }
}

/// The caches the snapshot is made of.
struct Caches {
    dynamic_envs: Store<DynamicEnv>,
    deployments: Store<Deployment>,
    services: Store<Service>,
    destination_rules: Store<DestinationRule>,
    virtual_services: Store<VirtualService>,
}

impl Caches {
    /// Done once every cache but the DynamicEnvs' holds its first list.
    fn ready(&self) -> Ready {
        Ready::of(vec![
            Ready::first_list(&self.deployments),
            Ready::first_list(&self.services),
            Ready::first_list(&self.destination_rules),
            Ready::first_list(&self.virtual_services),
        ])
    }
}

impl Routing {
    /// Waits for the first list of every cache.
    async fn caches_ready(&self) -> Result<(), String> {
        tokio::time::timeout(CACHE_WAIT, self.ready.wait()).await.map_err(|_| {
            format!(
                "the caches of Deployments, Services, DestinationRules and VirtualServices are not filled after {CACHE_WAIT:?}: see the operator log for the failing watch (RBAC? Istio CRDs installed?)"
            )
        })
    }
}

/// The routing controller's state.
pub struct Routing {
    ctx: Arc<Context>,
    cfg: PlanConfig,
    caches: Caches,
    /// [`Caches::ready`], shared by every reconcile.
    ready: Ready,
    deployments: Overlay<Deployment>,
    destination_rules: Overlay<DestinationRule>,
    virtual_services: Overlay<VirtualService>,
    vs_locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    interest: RwLock<HashMap<String, Interest>>,
    written_status: WrittenStatus<DynamicEnvStatus>,
}

impl Routing {
    fn new(ctx: Arc<Context>, cfg: PlanConfig, caches: Caches) -> Self {
        Self {
            cfg,
            ctx,
            ready: caches.ready(),
            caches,
            deployments: Overlay::new(),
            destination_rules: Overlay::new(),
            virtual_services: Overlay::new(),
            vs_locks: Mutex::new(HashMap::new()),
            interest: RwLock::new(HashMap::new()),
            written_status: WrittenStatus::default(),
        }
    }

    /// The snapshot of `de`: the caches (with this process's writes laid over them) of its
    /// namespaces, the objects it made anywhere, and every VirtualService.
    fn snapshot_for(&self, de: &Arc<DynamicEnv>) -> Snapshot {
        let owner = de_key(de);
        let namespaces = names::entry_namespaces(de);
        let wanted = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.namespace
                .as_deref()
                .is_some_and(|ns| namespaces.contains(&ns))
                || clone::owner(meta) == Some(owner.as_str())
        };
        Snapshot {
            dynamic_envs: vec![de.clone()],
            deployments: self
                .deployments
                .view(self.caches.deployments.state())
                .into_iter()
                .filter(|d| wanted(&d.metadata))
                .collect(),
            services: self
                .caches
                .services
                .state()
                .into_iter()
                .filter(|s| wanted(&s.metadata))
                .collect(),
            destination_rules: self
                .destination_rules
                .view(self.caches.destination_rules.state())
                .into_iter()
                .filter(|d| wanted(&d.metadata))
                .collect(),
            virtual_services: self
                .virtual_services
                .view(self.caches.virtual_services.state()),
            claims: names::Claims::new(self.caches.dynamic_envs.state().iter().map(AsRef::as_ref)),
        }
    }

    /// The router `de` uses: its `spec.plugin`, else the registry's default, refining the
    /// answers of the entries it builds on (`after:`), if any.
    fn router_for(&self, de: &DynamicEnv) -> Arc<dyn Router> {
        let chain = self.ctx.plugins.resolve_chain_for(
            Hook::Routing,
            de.spec.plugin.as_deref(),
            de.metadata.namespace.as_deref(),
        );
        let unavailable = |reason: String| -> Arc<dyn Router> {
            Arc::new(Unavailable {
                name: de.spec.plugin.clone().unwrap_or_else(|| "(default)".into()),
                reason,
            })
        };
        match chain {
            Ok(plugins) => wasm_chain(plugins)
                .unwrap_or_else(|| unavailable("the registry resolved no plugin".into())),
            Err(e) => unavailable(e.to_string()),
        }
    }

    async fn event(
        &self,
        de: &DynamicEnv,
        related: Option<k8s_openapi::api::core::v1::ObjectReference>,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        tracing::info!(dynamicenv = %de_key(de), reason, "{note}");
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.ctx
            .kernel
            .writer
            .event_related(
                &de.object_ref(&()),
                related.as_ref(),
                type_,
                reason,
                action,
                note,
            )
            .await;
    }

    fn vs_lock(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.vs_locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(key.clone()).or_default().clone()
    }

    /// The newest copy of VirtualService `key` this process knows.
    fn current_vs(&self, key: &Key) -> Option<Arc<VirtualService>> {
        let cached: Vec<Arc<VirtualService>> = self
            .caches
            .virtual_services
            .get(&ObjectRef::new(&key.1).within(&key.0))
            .into_iter()
            .collect();
        let mut view = self.virtual_services.view(cached);
        if view.is_empty() {
            // Created by this process and not cached yet is impossible for VirtualServices
            // (wasmop never creates them): absent means deleted.
            return None;
        }
        Some(view.swap_remove(0))
    }

    /// Makes the writes of `plan` (made on `snapshot` for `de`), in order; returns those the
    /// API server refused.
    async fn write(
        &self,
        de: &DynamicEnv,
        snapshot: &Snapshot,
        plan: &Plan,
        router: &dyn Router,
    ) -> Result<Vec<Refusal>, Error> {
        let mut refusals = Vec::new();
        for w in &plan.writes {
            // A refused write fails only itself: the others still go out.
            match self.write_one(de, snapshot, plan, router, w).await {
                Ok(()) => {}
                Err(Error::Refused(r)) => refusals.push(r),
                Err(e) => return Err(e),
            }
        }
        Ok(refusals)
    }

    /// Makes one write of `plan`, with its Event and metric.
    async fn write_one(
        &self,
        de: &DynamicEnv,
        snapshot: &Snapshot,
        plan: &Plan,
        router: &dyn Router,
        w: &Write,
    ) -> Result<(), Error> {
        let why = if de.metadata.deletion_timestamp.is_some() {
            "the DynamicEnv is being deleted"
        } else {
            "no longer wanted"
        };
        let client = &self.ctx.kernel.client;
        match w {
            Write::Apply { change, object, .. } => {
                let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                let kind = object["kind"].as_str().unwrap_or_default();
                let (reason, action) = match change {
                    Change::Created => ("Created", "Create"),
                    Change::Updated => ("Updated", "Update"),
                };
                // A refusal names the object and the entry it is for.
                let refused = |e, kind: &'static str| {
                    let field = if kind == "Deployment" {
                        "deployment"
                    } else {
                        "destinationRule"
                    };
                    Error::refused_or(
                        e,
                        || format!("{kind} {ns}/{name}"),
                        field,
                        Some(clone::subset_of_value(object).to_owned()),
                    )
                };
                let related = if kind == "Deployment" {
                    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
                    let before = rv_of(&snapshot.deployments, ns, name);
                    let obj = self
                        .ctx
                        .kernel
                        .writer
                        .apply(&api, name, object)
                        .await
                        .map_err(|e| refused(e, "Deployment"))?;
                    let related = obj.object_ref(&());
                    self.deployments.record(key_of(&obj), before, Some(obj));
                    related
                } else {
                    let api: Api<DestinationRule> = Api::namespaced(client.clone(), ns);
                    let before = rv_of(&snapshot.destination_rules, ns, name);
                    let obj = self
                        .ctx
                        .kernel
                        .writer
                        .apply(&api, name, object)
                        .await
                        .map_err(|e| refused(e, "DestinationRule"))?;
                    let related = obj.object_ref(&());
                    self.destination_rules
                        .record(key_of(&obj), before, Some(obj));
                    related
                };
                metrics()
                    .changes
                    .get_or_create(&ChangeLabels::new(kind, reason))
                    .inc();
                let what = if kind == "Deployment" {
                    format!(
                        "clone Deployment {ns}/{name} of {}",
                        clone::subset_of_value(object)
                    )
                } else {
                    format!(
                        "DestinationRule {ns}/{name} (host {}, subset {})",
                        object["spec"]["host"].as_str().unwrap_or_default(),
                        object["spec"]["subsets"][0]["name"]
                            .as_str()
                            .unwrap_or_default()
                    )
                };
                let verb = if *change == Change::Created {
                    "created"
                } else {
                    "updated"
                };
                self.event(
                    de,
                    Some(related),
                    false,
                    reason,
                    action,
                    format!("{what} {verb}"),
                )
                .await;
            }
            Write::Routes {
                key,
                namespace,
                name,
                base,
                http,
                ..
            } => {
                let expected = base.spec.http.as_deref().unwrap_or_default();
                let chain = plan.chains.get(key).cloned().unwrap_or_default();
                self.write_routes(
                    de,
                    (namespace.clone(), name.clone()),
                    expected,
                    http,
                    &chain,
                    router,
                )
                .await?;
            }
            Write::Delete {
                kind,
                namespace,
                name,
                ..
            } => {
                let existed = if kind == "Deployment" {
                    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
                    let before = rv_of(&snapshot.deployments, namespace, name);
                    let existed = self.ctx.kernel.writer.delete(&api, name).await?;
                    self.deployments
                        .record((namespace.clone(), name.clone()), before, None);
                    existed
                } else {
                    let api: Api<DestinationRule> = Api::namespaced(client.clone(), namespace);
                    let before = rv_of(&snapshot.destination_rules, namespace, name);
                    let existed = self.ctx.kernel.writer.delete(&api, name).await?;
                    self.destination_rules
                        .record((namespace.clone(), name.clone()), before, None);
                    existed
                };
                if existed {
                    metrics()
                        .changes
                        .get_or_create(&ChangeLabels::new(kind, "Deleted"))
                        .inc();
                    let related = k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some(if kind == "Deployment" {
                            "apps/v1".into()
                        } else {
                            format!("{}/{}", istio::GROUP, istio::VERSION)
                        }),
                        kind: Some(kind.clone()),
                        namespace: Some(namespace.clone()),
                        name: Some(name.clone()),
                        ..Default::default()
                    };
                    self.event(
                        de,
                        Some(related),
                        false,
                        "Deleted",
                        "Delete",
                        format!("{kind} {namespace}/{name} deleted: {why}"),
                    )
                    .await;
                }
            }
        }
        Ok(())
    }

    /// Writes the routes of one VirtualService: under the process's lock for it, on its newest
    /// copy (redoing the chain if the plan was made on an older one), with a merge patch
    /// conditional on that copy's `resourceVersion` ([`RoutesPatch`]).
    async fn write_routes(
        &self,
        de: &DynamicEnv,
        key: Key,
        expected: &[Value],
        http: &[Value],
        chain: &Chain,
        router: &dyn Router,
    ) -> Result<(), Error> {
        let lock = self.vs_lock(&key);
        let _guard = lock.lock().await;
        let Some(current) = self.current_vs(&key) else {
            tracing::debug!(virtualservice = %format!("{}/{}", key.0, key.1), "gone before its routes were written");
            return Ok(());
        };
        // Borrowed, not copied: with a thousand routes a list is megabytes of JSON values, and
        // several reconciles write at once.
        let before = current.spec.http.as_deref().unwrap_or_default();
        let redone;
        let after = if before == expected {
            http
        } else {
            redone = run_chain(router, &current, chain).await.0;
            redone.as_slice()
        };
        let token = names::route_token(&de.namespace().unwrap_or_default(), &de.name_any());
        let ours = |list: &[Value]| {
            list.iter()
                .filter(|r| istio::route_name(r).is_some_and(|n| n.starts_with(token.as_str())))
                .count()
        };
        let (had, has) = (ours(before), ours(after));
        let annotations = current.metadata.annotations.as_ref();
        let listed = annotations
            .and_then(|a| a.get(clone::DYNAMIC_ENVIRONMENT_ANNOTATION))
            .map(String::as_str);
        let list = clone::with_dynamic_env(listed, &de_key(de), has > 0);
        let changed = before != after;
        if !changed && listed == Some(list.as_str()) {
            return Ok(());
        }
        let patch = RoutesPatch {
            metadata: RoutesPatchMeta {
                resource_version: current.metadata.resource_version.as_deref(),
                annotations: (listed != Some(list.as_str())).then(|| {
                    BTreeMap::from([(clone::DYNAMIC_ENVIRONMENT_ANNOTATION, list.as_str())])
                }),
            },
            spec: changed.then_some(RoutesPatchSpec { http: after }),
        };
        let api: Api<VirtualService> = Api::namespaced(self.ctx.kernel.client.clone(), &key.0);
        let id = format!("{}/{}", key.0, key.1);
        let written = match self
            .ctx
            .kernel
            .writer
            .patch(&api, &key.1, &Patch::Merge(&patch))
            .await
        {
            Ok(obj) => obj,
            Err(e) if e.is_conflict() => {
                return Err(Error::Stale(id));
            }
            // 422: the object the patch makes is invalid (the CRD's schema); no test op fails.
            Err(e) if matches!(e.status_code(), Some(400 | 403 | 422)) => {
                return Err(Error::refused_or(
                    e,
                    || format!("VirtualService {id}"),
                    "virtualServices",
                    None,
                ));
            }
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let related = written.object_ref(&());
        self.virtual_services.record(
            key,
            current.metadata.resource_version.clone(),
            Some(written),
        );
        if !changed {
            return Ok(());
        }
        let (reason, action) = if has == 0 {
            ("RoutesRemoved", "RemoveRoutes")
        } else {
            ("RoutesUpdated", "UpdateRoutes")
        };
        metrics()
            .changes
            .get_or_create(&ChangeLabels::new("VirtualService", reason))
            .inc();
        self.event(
            de,
            Some(related),
            false,
            reason,
            action,
            format!(
                "VirtualService {id}: {has} routes of this DynamicEnv (had {had}), {} routes in all",
                after.len()
            ),
        )
        .await;
        Ok(())
    }

    /// Writes the status of `de` (our fields and the `Ready` condition) when it changed;
    /// error times are kept while an error persists.
    async fn write_status(&self, de: &DynamicEnv, planned: &DynamicEnvStatus) -> Result<(), Error> {
        let before = self
            .written_status
            .status(de, de.status.as_ref())
            .unwrap_or_default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let mut status = planned.clone();
        stamp_errors(&mut status, &before, &now);
        let state = status.state.clone().unwrap_or_default();
        let (ready, reason) = match state.as_str() {
            "ready" => (true, "Ready"),
            "degraded" => (false, "Degraded"),
            _ => (false, "Processing"),
        };
        let message = summary(&status);
        let condition = conditions::condition(
            &before.conditions,
            READY,
            ready,
            reason,
            message,
            de.metadata.generation,
        );
        let ours = |s: &DynamicEnvStatus| {
            let mut s = s.clone();
            s.conditions.clear();
            s
        };
        if ours(&status) == ours(&before)
            && conditions::unchanged(conditions::find(&before.conditions, READY), &condition)
        {
            return Ok(());
        }
        status.conditions = vec![condition];
        let api: Api<DynamicEnv> = Api::namespaced(
            self.ctx.kernel.client.clone(),
            &de.namespace().unwrap_or_default(),
        );
        let after = self
            .ctx
            .kernel
            .writer
            .apply_status(&api, &de.name_any(), &status)
            .await?;
        self.written_status
            .record(de, after.status.unwrap_or_default());
        if before.state.as_deref() != Some(state.as_str()) {
            let warning = state == "degraded";
            self.event(
                de,
                None,
                warning,
                if warning { "Degraded" } else { "StateChanged" },
                "Reconcile",
                format!(
                    "state {} → {state}: {}",
                    before.state.as_deref().unwrap_or("(none)"),
                    summary(&status)
                ),
            )
            .await;
        }
        Ok(())
    }

    /// Reconciles `de` towards its spec.
    async fn apply(&self, de: Arc<DynamicEnv>) -> Result<Action, Error> {
        let key = de_key(&de);
        let router = self.router_for(&de);
        let snapshot = self.snapshot_for(&de);
        let plan = plan(&snapshot, &router, &self.cfg).await;
        for failure in &plan.failures {
            metrics()
                .router_failures
                .get_or_create(&FailureLabels {
                    plugin: failure.plugin.clone(),
                    policy: format!("{:?}", failure.policy),
                })
                .inc();
            self.event(
                &de,
                None,
                true,
                "RouterFailed",
                "Route",
                failure.note.clone(),
            )
            .await;
        }
        let mut status = plan.status.get(&key).cloned().unwrap_or_default();
        let refusals = self.write(&de, &snapshot, &plan, router.as_ref()).await?;
        for r in &refusals {
            let error = r.to_string();
            add_refusal(&mut status, r.field, r.entry.as_deref(), &error);
            tracing::warn!(dynamicenv = %key, "{error}; retrying in {REFUSED_RETRY:?}");
            self.event(&de, None, true, "WriteRefused", "Write", error)
                .await;
        }
        self.write_status(&de, &status).await?;
        if !refusals.is_empty() {
            return Ok(Action::requeue(REFUSED_RETRY));
        }
        if let Some(interest) = plan.interest.get(&key) {
            self.interest
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), interest.clone());
        }
        let state = status.state.clone().unwrap_or_default();
        set_state(&de, Some(&state));
        Ok(match state.as_str() {
            "ready" => Action::requeue(RESYNC),
            "degraded" => Action::requeue(DEGRADED_RETRY),
            _ => Action::requeue(PROCESSING_RETRY),
        })
    }

    /// Removes what `de` made and restores every VirtualService it changed.
    async fn cleanup(&self, de: Arc<DynamicEnv>) -> Result<Action, Error> {
        let key = de_key(&de);
        let snapshot = removal_snapshot(&self.snapshot_for(&de), &de);
        let router: Arc<dyn Router> = Arc::new(Unavailable {
            name: "(none)".into(),
            reason: "no routes are made while a DynamicEnv is deleted".into(),
        });
        let plan = plan(&snapshot, &router, &self.cfg).await;
        let refusals = self.write(&de, &snapshot, &plan, router.as_ref()).await?;
        // The finalizer stays until everything is removed, so nothing is left behind.
        if let Some(r) = refusals.into_iter().next() {
            self.event(&de, None, true, "WriteRefused", "Write", r.to_string())
                .await;
            return Err(Error::Refused(r));
        }
        self.interest
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.written_status.forget(de.as_ref());
        set_state(&de, None);
        tracing::info!(dynamicenv = %key, writes = plan.writes.len(), "cleaned up");
        Ok(Action::await_change())
    }

    // ---- watch mappers --------------------------------------------------------------------

    fn refs<'a>(
        &'a self,
        pick: impl Fn(&DynamicEnv, Option<&Interest>) -> bool + 'a,
    ) -> Vec<ObjectRef<DynamicEnv>> {
        let interest = self.interest.read().unwrap_or_else(|e| e.into_inner());
        self.caches
            .dynamic_envs
            .state()
            .iter()
            .filter(|de| pick(de, interest.get(&de_key(de))))
            .map(|de| ObjectRef::from_obj(de.as_ref()))
            .collect()
    }

    fn owner_ref(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Option<ObjectRef<DynamicEnv>> {
        let (ns, name) = clone::owner(meta)?.split_once('/')?;
        Some(ObjectRef::new(name).within(ns))
    }

    fn map_deployment(&self, d: &Deployment) -> Vec<ObjectRef<DynamicEnv>> {
        if let Some(owner) = Self::owner_ref(&d.metadata) {
            return vec![owner];
        }
        let (ns, name) = key_of(d);
        let present = self
            .caches
            .deployments
            .get(&ObjectRef::from_obj(d))
            .is_some();
        let fp = present.then(|| fingerprint_base(d));
        let key = ir::key("Deployment", &ns, &name);
        self.refs(|de, interest| {
            let listed = de
                .spec
                .subsets
                .iter()
                .chain(de.spec.consumers.iter().flatten())
                .any(|s| s.namespace == ns && s.name == name);
            listed && interest.and_then(|i| i.objects.get(&key)) != Some(&fp)
        })
    }

    fn map_service(&self, s: &Service) -> Vec<ObjectRef<DynamicEnv>> {
        let (ns, name) = key_of(s);
        let present = self.caches.services.get(&ObjectRef::from_obj(s)).is_some();
        let fp = present.then(|| fingerprint_service(s));
        let key = ir::key("Service", &ns, &name);
        let selector = s
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        self.refs(|de, interest| match interest {
            None => spec_namespaces(de).contains(ns.as_str()),
            Some(i) => match i.objects.get(&key) {
                // A host of the DynamicEnv: its selector changed, or it is gone.
                Some(recorded) => *recorded != fp,
                // A Service that now selects one of its bases is a new host.
                None => {
                    present
                        && !selector.is_empty()
                        && i.pod_labels.iter().any(|(n, labels)| {
                            *n == ns && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                        })
                }
            },
        })
    }

    fn map_destination_rule(&self, d: &DestinationRule) -> Vec<ObjectRef<DynamicEnv>> {
        let (ns, name) = key_of(d);
        let present = self
            .caches
            .destination_rules
            .get(&ObjectRef::from_obj(d))
            .is_some();
        let fp = present.then(|| fingerprint_destination_rule(d));
        let key = ir::key("DestinationRule", &ns, &name);
        let owner = clone::owner(&d.metadata).map(str::to_owned);
        let host = istio::service_of_host(&d.spec.host, &ns);
        self.refs(|de, interest| {
            let mine = owner.as_deref() == Some(de_key(de).as_str());
            match interest {
                None => mine || spec_namespaces(de).contains(ns.as_str()),
                Some(i) => match i.objects.get(&key) {
                    // A base rule it uses, or one it made: changed or gone.
                    Some(recorded) => *recorded != fp,
                    // One it made and did not plan (e.g. left over), or a rule for one of its
                    // hosts that may now be a base: not one another DynamicEnv made (never a
                    // base), or 200 DynamicEnvs of one host would each be reconciled for each
                    // other's rule.
                    None => {
                        mine || (owner.is_none()
                            && host.as_ref().is_some_and(|h| i.hosts.contains(h)))
                    }
                },
            }
        })
    }

    fn map_virtual_service(&self, vs: &VirtualService) -> Vec<ObjectRef<DynamicEnv>> {
        let (ns, name) = key_of(vs);
        let present = self
            .caches
            .virtual_services
            .get(&ObjectRef::from_obj(vs))
            .is_some();
        let key = ir::key("VirtualService", &ns, &name);
        let http = vs.spec.http.as_deref().unwrap_or_default();
        let services: Vec<(String, String)> = vs
            .spec
            .hosts
            .iter()
            .filter_map(|h| istio::service_of_host(h, &ns))
            .collect();
        self.refs(|de, interest| match interest {
            None => {
                let namespaces = spec_namespaces(de);
                services
                    .iter()
                    .any(|(n, _)| namespaces.contains(n.as_str()))
                    || (services.is_empty() && namespaces.contains(ns.as_str()))
            }
            Some(i) => match i.objects.get(&key) {
                Some(recorded) => {
                    let fp = present
                        .then(|| fingerprint_virtual_service(&i.token, &vs.spec.hosts, http));
                    *recorded != fp
                }
                None => {
                    services.iter().any(|s| i.hosts.contains(s))
                        || http.iter().any(|r| {
                            istio::route_name(r).is_some_and(|n| n.starts_with(i.token.as_str()))
                        })
                }
            },
        })
    }
}

/// Namespaces of a DynamicEnv's subsets and consumers.
fn spec_namespaces(de: &DynamicEnv) -> BTreeSet<&str> {
    de.spec
        .subsets
        .iter()
        .chain(de.spec.consumers.iter().flatten())
        .map(|s| s.namespace.as_str())
        .collect()
}

/// Sets `lastOccurrence` of every error of `status`: kept from `before` when the same error
/// was already there (same entry, same kind), else `now`.
fn stamp_errors(status: &mut DynamicEnvStatus, before: &DynamicEnvStatus, now: &Time) {
    fn stamp(list: &mut [StatusError], prev: &[StatusError], now: &Time) {
        for e in list {
            e.last_occurrence = prev
                .iter()
                .find(|p| p.error == e.error)
                .and_then(|p| p.last_occurrence.clone())
                .or_else(|| Some(now.clone()));
        }
    }
    for (key, s) in &mut status.subsets_status {
        let prev = before
            .subsets_status
            .get(key)
            .and_then(|p| p.subset_errors.clone())
            .unwrap_or_default();
        if let Some(e) = &mut s.subset_errors {
            stamp(&mut e.deployment, &prev.deployment, now);
            stamp(&mut e.destination_rule, &prev.destination_rule, now);
            stamp(&mut e.virtual_services, &prev.virtual_services, now);
            stamp(&mut e.subset, &prev.subset, now);
        }
    }
    for (key, c) in &mut status.consumers_status {
        let prev = before
            .consumers_status
            .get(key)
            .map(|p| p.errors.clone())
            .unwrap_or_default();
        stamp(&mut c.errors, &prev, now);
    }
}

/// The `Ready` condition's message: how many entries are ready, and the first error.
fn summary(status: &DynamicEnvStatus) -> String {
    let first_error = status
        .subsets_status
        .iter()
        .find_map(|(k, s)| {
            let e = s.subset_errors.as_ref()?;
            let first = e
                .deployment
                .iter()
                .chain(&e.destination_rule)
                .chain(&e.virtual_services)
                .chain(&e.subset)
                .next()?;
            Some(format!("subset {k}: {}", first.error))
        })
        .or_else(|| {
            status
                .consumers_status
                .iter()
                .find_map(|(k, c)| Some(format!("consumer {k}: {}", c.errors.first()?.error)))
        });
    let counts = format!(
        "{} of {} subsets and consumers ready",
        status.total_ready, status.total_count
    );
    match first_error {
        Some(e) => format!("{counts}; {e}"),
        None => counts,
    }
}

async fn reconcile(de: Arc<DynamicEnv>, r: Arc<Routing>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(de, &r).await;
    wasmop_kernel::metrics::reconcile(
        CONTROLLER,
        started.elapsed(),
        result.as_ref().err().map_or("ok", Error::metric_label),
    );
    result
}

async fn reconcile_inner(de: Arc<DynamicEnv>, r: &Routing) -> Result<Action, Error> {
    if !r.ctx.kernel.gate().is_active() {
        tracing::debug!(dynamicenv = %de_key(&de), "passive: nothing written; reconciled again once promoted");
        return Ok(Action::requeue(RESYNC));
    }
    if let Err(e) = r.caches_ready().await {
        tracing::warn!(dynamicenv = %de_key(&de), "{e}");
        return Ok(Action::requeue(PROCESSING_RETRY));
    }
    let api: Api<DynamicEnv> = Api::namespaced(
        r.ctx.kernel.client.clone(),
        &de.namespace().unwrap_or_default(),
    );
    r.ctx.kernel.writer.check()?;
    let result = finalizer(&api, FINALIZER, de, |event| async move {
        match event {
            Finalizer::Apply(de) => r.apply(de).await,
            Finalizer::Cleanup(de) => r.cleanup(de).await,
        }
    })
    .await;
    wasmop_kernel::unless_deleted_meanwhile(result).map_err(|e| Error::Finalizer(Box::new(e)))
}

/// How long a DynamicEnv whose write the API server refused waits before it tries again (its
/// own change, or a change of what it reads, triggers a reconcile sooner).
const REFUSED_RETRY: Duration = Duration::from_secs(20);

/// Adds a refused write to `status`: the entry's list named by `field` (every subset's, for a
/// VirtualService), and the state `degraded`.
fn add_refusal(status: &mut DynamicEnvStatus, field: &str, entry: Option<&str>, error: &str) {
    let err = StatusError {
        error: error.to_owned(),
        last_occurrence: None,
    };
    let mut hit = false;
    for (key, s) in &mut status.subsets_status {
        if entry.is_some_and(|e| e != key) {
            continue;
        }
        let errors = s.subset_errors.get_or_insert_with(Default::default);
        let list = match field {
            "deployment" => &mut errors.deployment,
            "destinationRule" => &mut errors.destination_rule,
            _ => &mut errors.virtual_services,
        };
        list.push(err.clone());
        hit = true;
    }
    if let Some(c) = entry.and_then(|e| status.consumers_status.get_mut(e)) {
        c.errors.push(err);
        hit = true;
    }
    if hit {
        status.state = Some("degraded".into());
    }
}

fn error_policy(de: Arc<DynamicEnv>, e: &Error, _r: Arc<Routing>) -> Action {
    if e.is_passive() {
        return Action::requeue(RESYNC);
    }
    if e.is_stale() {
        tracing::debug!(dynamicenv = %de_key(&de), "retrying at once: {e}");
        return Action::requeue(Duration::from_millis(100));
    }
    tracing::warn!(dynamicenv = %de_key(&de), "reconcile failed, retrying in 10s: {e}");
    Action::requeue(Duration::from_secs(10))
}

/// Runs the controller until it ends.
///
/// # Errors
/// The DynamicEnv API is not served (CRDs not installed).
pub async fn run(ctx: Arc<Context>, cfg: PlanConfig) -> anyhow::Result<()> {
    let de_api: Api<DynamicEnv> = ctx.kernel.watched_api();
    de_api.list(&ListParams::default().limit(1)).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot list DynamicEnvs ({e}); install the CRDs: kubectl apply --server-side -f crds/"
        )
    })?;
    let (de_store, de_writer) = reflector::store();
    let de_stream = watcher(de_api, ctx.kernel.cr_watcher_config())
        .default_backoff()
        .modify(|d: &mut DynamicEnv| d.metadata.managed_fields = None)
        .reflect(de_writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation::<DynamicEnv>.combine(predicates::finalizers::<DynamicEnv>),
            Default::default(),
        );
    let any = || watcher::Config::default().any_semantic();
    let (deployments, dep_stream) = cache(ctx.kernel.watched_api::<Deployment>(), any());
    let (services, svc_stream) = cache(ctx.kernel.watched_api::<Service>(), any());
    let (destination_rules, dr_stream) = cache(ctx.kernel.watched_api::<DestinationRule>(), any());
    let (virtual_services, vs_stream) = cache(ctx.kernel.watched_api::<VirtualService>(), any());
    let routing = Arc::new(Routing::new(
        ctx.clone(),
        cfg,
        Caches {
            dynamic_envs: de_store.clone(),
            deployments,
            services,
            destination_rules,
            virtual_services,
        },
    ));
    let (r1, r2, r3, r4) = (
        routing.clone(),
        routing.clone(),
        routing.clone(),
        routing.clone(),
    );
    let reloads = tokio_stream_of(ctx.plugins.reloads());
    let promoted = Ready::of_store(&de_store);
    let controller = Controller::for_stream(de_stream, de_store)
        .with_config(Config::default().concurrency(4))
        .watches_stream(dep_stream, move |d: Deployment| r1.map_deployment(&d))
        .watches_stream(svc_stream, move |s: Service| r2.map_service(&s))
        .watches_stream(dr_stream, move |d: DestinationRule| {
            r3.map_destination_rule(&d)
        })
        .watches_stream(vs_stream, move |v: VirtualService| {
            r4.map_virtual_service(&v)
        })
        .reconcile_all_on(ctx.kernel.gate().promotions_of(promoted))
        .reconcile_all_on(reloads)
        .run(reconcile, error_policy, routing.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!("routing controller: {e}");
            }
        });
    let cfg = &routing.cfg;
    tracing::info!(
        version_label = %cfg.version_label,
        default_version = %cfg.default_version,
        remove_labels = ?cfg.remove_labels,
        "routing controller started"
    );
    controller.await;
    anyhow::bail!("the DynamicEnv controller ended")
}

/// A stream that yields once per change of a watch channel (registry reloads).
fn tokio_stream_of(
    rx: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

// ---- metrics ------------------------------------------------------------------------------

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    kind: String,
    change: String,
}

impl ChangeLabels {
    fn new(kind: &str, change: &str) -> Self {
        Self {
            kind: kind.into(),
            change: change.into(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    plugin: String,
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

struct Metrics {
    changes: Family<ChangeLabels, Counter>,
    router_failures: Family<FailureLabels, Counter>,
    states: Family<StateLabels, Gauge>,
    /// The state each DynamicEnv was last counted in.
    counted: Mutex<BTreeMap<String, String>>,
}

/// The routing metrics (registered on first use):
/// `wasmop_routing_changes_total{kind, change}` (kind `Deployment`, `DestinationRule`,
/// `VirtualService`; change `Created`, `Updated`, `Deleted`, `RoutesUpdated`, `RoutesRemoved`),
/// `wasmop_routing_router_failures_total{plugin, policy}`,
/// `wasmop_routing_dynamicenvs{state}` (DynamicEnvs by state: ready, processing, degraded).
fn metrics() -> &'static Metrics {
    static M: LazyLock<Metrics> = LazyLock::new(|| {
        let m = Metrics {
            changes: Family::default(),
            router_failures: Family::default(),
            states: Family::default(),
            counted: Mutex::new(BTreeMap::new()),
        };
        wasmop_kernel::metrics::register(
            "routing_changes",
            "Objects created, updated or deleted and VirtualService route updates by the routing controller",
            m.changes.clone(),
        );
        wasmop_kernel::metrics::register(
            "routing_router_failures",
            "Failed router plugin calls by plugin and failure policy",
            m.router_failures.clone(),
        );
        wasmop_kernel::metrics::register(
            "routing_dynamicenvs",
            "DynamicEnvs by state",
            m.states.clone(),
        );
        m
    });
    &M
}

/// Counts `de` in `state` (`None`: forget it).
fn set_state(de: &DynamicEnv, state: Option<&str>) {
    let m = metrics();
    let mut counted = m.counted.lock().unwrap_or_else(|e| e.into_inner());
    let key = de_key(de);
    let previous = match state {
        Some(s) => counted.insert(key, s.to_owned()),
        None => counted.remove(&key),
    };
    if previous.as_deref() == state {
        return;
    }
    if let Some(p) = previous {
        m.states.get_or_create(&StateLabels { state: p }).dec();
    }
    if let Some(s) = state {
        m.states
            .get_or_create(&StateLabels {
                state: s.to_owned(),
            })
            .inc();
    }
}

/// The JSON merge patch that writes a VirtualService's routes (`spec.http`, a list, so it is
/// replaced whole) and its [`clone::DYNAMIC_ENVIRONMENT_ANNOTATION`], on the condition that the
/// object is still at `metadata.resourceVersion`: the API server answers 409 Conflict when
/// anyone wrote it since it was read. The routes are borrowed from the plan.
#[derive(Debug, serde::Serialize)]
struct RoutesPatch<'a> {
    metadata: RoutesPatchMeta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<RoutesPatchSpec<'a>>,
}

/// [`RoutesPatch`]'s metadata: the precondition and the annotation, when it changes.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RoutesPatchMeta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<&'a str, &'a str>>,
}

/// [`RoutesPatch`]'s spec: the new routes.
#[derive(Debug, serde::Serialize)]
struct RoutesPatchSpec<'a> {
    http: &'a [Value],
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    #[test]
    fn the_routes_patch_is_conditional_and_sets_only_what_changed() {
        let routes = [json!({"name": "b"})];
        let patch = RoutesPatch {
            metadata: RoutesPatchMeta {
                resource_version: Some("42"),
                annotations: Some(BTreeMap::from([(
                    clone::DYNAMIC_ENVIRONMENT_ANNOTATION,
                    "x/y",
                )])),
            },
            spec: Some(RoutesPatchSpec { http: &routes }),
        };
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!({
                "metadata": {"resourceVersion": "42",
                             "annotations": {"wasmop.dev/dynamic-environment": "x/y"}},
                "spec": {"http": [{"name": "b"}]},
            })
        );
        let annotation_only = RoutesPatch {
            spec: None,
            metadata: RoutesPatchMeta {
                annotations: None,
                ..patch.metadata
            },
        };
        assert_eq!(
            serde_json::to_value(&annotation_only).unwrap(),
            json!({"metadata": {"resourceVersion": "42"}})
        );
    }

    /// A controller whose client points at a closed port (any request fails) and whose
    /// caches are empty.
    fn unreachable() -> (Arc<Context>, Routing) {
        routing_with(crate::test_support::unreachable_context())
    }

    /// A controller on `ctx` whose caches are empty.
    fn routing_with(ctx: Arc<Context>) -> (Arc<Context>, Routing) {
        let caches = Caches {
            dynamic_envs: reflector::store().0,
            deployments: reflector::store().0,
            services: reflector::store().0,
            destination_rules: reflector::store().0,
            virtual_services: reflector::store().0,
        };
        (
            ctx.clone(),
            Routing::new(ctx, PlanConfig::default(), caches),
        )
    }

    #[tokio::test]
    async fn a_rule_another_dynamic_env_made_reconciles_only_its_owner() {
        let (dynamic_envs, mut writer) = reflector::store::<DynamicEnv>();
        let (_, routing) = unreachable();
        let routing = Routing::new(
            routing.ctx.clone(),
            PlanConfig::default(),
            Caches {
                dynamic_envs,
                ..routing.caches
            },
        );
        for name in ["a", "b"] {
            let de: DynamicEnv = serde_json::from_value(json!({
                "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv",
                "metadata": {"name": name, "namespace": "bookinfo"},
                "spec": {"istioMatches": [], "subsets": [{"name": "reviews", "namespace": "bookinfo"}]}
            }))
            .unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(de));
            routing.interest.write().unwrap().insert(
                format!("bookinfo/{name}"),
                Interest {
                    hosts: [("bookinfo".to_owned(), "reviews".to_owned())].into(),
                    ..Interest::default()
                },
            );
        }
        let rule = |owner: Option<&str>| -> DestinationRule {
            serde_json::from_value(json!({
                "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
                "metadata": {"name": "r", "namespace": "bookinfo",
                             "annotations": owner.map(|o| json!({clone::OWNER_ANNOTATION: o}))},
                "spec": {"host": "reviews"}
            }))
            .unwrap()
        };
        let names = |refs: Vec<ObjectRef<DynamicEnv>>| {
            let mut n: Vec<String> = refs.into_iter().map(|r| r.name).collect();
            n.sort();
            n
        };
        // A rule DynamicEnv a made: only a looks again (b never takes it as a base).
        assert_eq!(
            names(routing.map_destination_rule(&rule(Some("bookinfo/a")))),
            ["a"]
        );
        // A new rule of nobody's for their host may be a base: both look.
        assert_eq!(names(routing.map_destination_rule(&rule(None))), ["a", "b"]);
    }

    #[tokio::test]
    async fn a_passive_instance_sends_nothing_and_requeues() {
        let (ctx, routing) = unreachable();
        let de: Arc<DynamicEnv> = Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv",
                "metadata": {"name": "jason", "namespace": "bookinfo", "uid": "u"},
                "spec": {"istioMatches": [{"headers": {"end-user": {"exact": "jason"}}}],
                         "subsets": [{"name": "reviews", "namespace": "bookinfo",
                                      "containers": [{"containerName": "reviews"}]}]}
            }))
            .unwrap(),
        );
        assert!(
            !ctx.kernel.gate().is_active(),
            "the operator starts passive"
        );
        let action = reconcile_inner(de.clone(), &routing).await.unwrap();
        assert_eq!(action, Action::requeue(RESYNC));
        assert!(
            routing.interest.read().unwrap().is_empty(),
            "nothing was planned"
        );
        // Once active, the same reconcile goes to the API server (here: fails to reach it).
        ctx.kernel.gate().set_active(true);
        let e = reconcile_inner(de, &routing).await.unwrap_err();
        assert!(
            matches!(&e, Error::Finalizer(f) if matches!(f.as_ref(), kube::runtime::finalizer::Error::AddFinalizer(_))),
            "{e}"
        );
    }

    /// A DynamicEnv being deleted, as a reflector still shows it: our finalizer, a deletion
    /// timestamp.
    fn deleting_de() -> Arc<DynamicEnv> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv",
                "metadata": {"name": "jason", "namespace": "bookinfo", "uid": "u",
                             "finalizers": [FINALIZER],
                             "deletionTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"istioMatches": [{"headers": {"end-user": {"exact": "jason"}}}],
                         "subsets": [{"name": "reviews", "namespace": "bookinfo",
                                      "containers": [{"containerName": "reviews"}]}]}
            }))
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_cleanup_of_a_dynamic_env_already_deleted_is_done_not_failed() {
        use crate::test_support::{client_answering, context_with};
        // The API server no longer has it: removing the finalizer answers 404.
        let (ctx, routing) = routing_with(context_with(client_answering(404)));
        ctx.kernel.gate().set_active(true);
        let action = reconcile_inner(deleting_de(), &routing).await.unwrap();
        assert_eq!(action, Action::await_change());

        // Any other failure to remove the finalizer is still an error, retried.
        let (ctx, routing) = routing_with(context_with(client_answering(500)));
        ctx.kernel.gate().set_active(true);
        let e = reconcile_inner(deleting_de(), &routing).await.unwrap_err();
        assert!(
            matches!(&e, Error::Finalizer(f) if matches!(f.as_ref(), kube::runtime::finalizer::Error::RemoveFinalizer(_))),
            "{e}"
        );
    }

    fn vs(rv: &str, routes: usize) -> VirtualService {
        serde_json::from_value(json!({
            "metadata": {"name": "reviews", "namespace": "default", "resourceVersion": rv},
            "spec": {"hosts": ["reviews"], "http": vec![json!({"route": []}); routes]}
        }))
        .unwrap()
    }

    #[test]
    fn the_overlay_holds_a_write_until_the_cache_moves_on() {
        let o: Overlay<VirtualService> = Overlay::new();
        let key = ("default".to_owned(), "reviews".to_owned());
        o.record(key.clone(), Some("1".into()), Some(vs("2", 2)));
        // The cache still has the version the write replaced: the write counts.
        let seen = o.view(vec![Arc::new(vs("1", 1))]);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].metadata.resource_version.as_deref(), Some("2"));
        // The cache caught up (or moved further): the cache counts, the entry is dropped.
        let seen = o.view(vec![Arc::new(vs("3", 3))]);
        assert_eq!(seen[0].metadata.resource_version.as_deref(), Some("3"));
        assert!(o.written.lock().unwrap().is_empty());
        // A deletion hides the stale copy; a creation shows before the cache has it.
        o.record(key.clone(), Some("3".into()), None);
        assert!(o.view(vec![Arc::new(vs("3", 3))]).is_empty());
        o.record(key, None, Some(vs("9", 1)));
        assert_eq!(o.view(vec![]).len(), 1);
    }

    #[test]
    fn error_times_are_kept_while_the_error_persists() {
        let old = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let now = Time("2026-02-01T00:00:00Z".parse().unwrap());
        let before: DynamicEnvStatus = serde_json::from_value(json!({
            "subsetsStatus": {"default/reviews": {
                "deployment": {"name": "c", "namespace": "default", "status": "running"},
                "subsetErrors": {"subset": [{"error": "still", "lastOccurrence": "2026-01-01T00:00:00Z"},
                                            {"error": "fixed", "lastOccurrence": "2026-01-01T00:00:00Z"}]}}},
            "totalCount": 1, "totalReady": 0, "state": "degraded"
        }))
        .unwrap();
        let mut status: DynamicEnvStatus = serde_json::from_value(json!({
            "subsetsStatus": {"default/reviews": {
                "deployment": {"name": "c", "namespace": "default", "status": "running"},
                "subsetErrors": {"subset": [{"error": "still"}, {"error": "new"}]}}},
            "totalCount": 1, "totalReady": 0, "state": "degraded"
        }))
        .unwrap();
        stamp_errors(&mut status, &before, &now);
        let errors = &status.subsets_status["default/reviews"]
            .subset_errors
            .as_ref()
            .unwrap()
            .subset;
        assert_eq!(errors[0].last_occurrence.as_ref(), Some(&old));
        assert_eq!(errors[1].last_occurrence.as_ref(), Some(&now));
        assert_eq!(
            summary(&status),
            "0 of 1 subsets and consumers ready; subset default/reviews: still"
        );
    }
}
