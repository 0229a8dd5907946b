//! The ElasticService reconciler (docs/scaling.md), in the controller-rs shape: the
//! finalizer is the top-level step; `apply` converges the objects and the mode, `cleanup`
//! restores the workload and removes what wasmop created (upstream #133, #283).
//!
//! One reconcile of an ElasticService, in order:
//! 1. the workload's desired replicas (`/scale`);
//! 2. demand: a `wasmop.dev/demand` annotation newer than the last activity scales the workload
//!    to `minTargetReplicas` (Event `ScaledUp`);
//! 3. the poller's votes, if it left some: [`decide`] and scale (Events `ScaledUp`,
//!    `ScaledDown`);
//! 4. the private Service, mirrored from the public one;
//! 5. the mode ([`plan::mode`]) and, in proxy mode, the resolver EndpointSlice of the ready
//!    resolver pods; in serve mode that slice is deleted (Events `SwitchedToProxy`,
//!    `SwitchedToServe`);
//! 6. the status (`mode`, `privateService`, `lastScaledUpTime`, `triggerVotes`, conditions
//!    `Ready` and `Triggers`), written only when it changed.
//!
//! Triggers: the ElasticServices themselves (no generation predicate, so the demand annotation
//! is seen), Services and EndpointSlices of their namespace (public and private Service,
//! readiness), the resolver pods (slices rebuilt when they come and go, upstream #175, #296),
//! the poller's rounds and promotions of this instance.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use wasmop_kernel::cache::{Index, Ready, WrittenStatus, cache, cache_indexed, cache_trimmed};

use super::decide::{self, Decision, Inputs, TriggerOutcome, Vote};
use super::error::Error;
use super::options::Options;
use super::plan::{self, Mode, SERVICE_NAME_LABEL};
use super::target::{self, Target};
use crate::Context;
use wasmop_api::elasticservice::{
    DEMAND_ANNOTATION, ElasticService, ElasticServiceStatus, TriggerVoteStatus,
};
use wasmop_api::names::{private_service_name, resolver_slice_name};
use wasmop_kernel::conditions;
use wasmop_kernel::gate::WriteError;
use wasmop_plugin_host::FailurePolicy;

/// The finalizer wasmop puts on every ElasticService, so deleting one restores its workload
/// and removes what wasmop created for it.
pub const FINALIZER: &str = "wasmop.dev/elasticservice-cleanup";

/// The controller's name in metrics.
const CONTROLLER: &str = "scaling";

/// Requeue after a successful reconcile (the watches bring every change sooner).
const RESYNC: Duration = Duration::from_secs(300);

/// Condition: the objects of the ElasticService are in place for its mode.
pub(crate) const READY: &str = "Ready";
/// Condition: the last trigger evaluation succeeded; its message is the poller's decision.
pub(crate) const TRIGGERS: &str = "Triggers";
/// Condition: every port of the Service is TCP, so the resolver can hold all of its traffic
/// (False, reason `NotTCP`, naming the UDP and SCTP ports it cannot).
pub(crate) const PORTS: &str = "Ports";

/// The conditions this controller writes (the rest, e.g. `PluginReady`, belong to others).
fn ours(type_: &str) -> bool {
    type_ == READY || type_ == TRIGGERS || type_ == PORTS
}

/// The votes of one poller round for one ElasticService.
#[derive(Clone, Debug)]
pub struct Poll {
    /// When the votes were taken.
    pub at: Timestamp,
    /// One per trigger, in spec order; empty when the decision needed none.
    pub votes: Vec<TriggerOutcome>,
    /// The scaler plugin's `failurePolicy`.
    pub policy: FailurePolicy,
}

/// What this process knows of an ElasticService beyond its (possibly stale) cached copy.
#[derive(Clone, Debug, Default)]
struct Memory {
    /// The last activity this process recorded (scale-up, up decision).
    last_active: Option<Timestamp>,
    /// The demand annotation value already acted on.
    demand_handled: Option<Timestamp>,
    /// The mode last written.
    mode: Option<Mode>,
    /// Votes left by the poller, taken by the next reconcile.
    poll: Option<Poll>,
}

/// Watch caches of what a reconcile reads besides the ElasticService: it asks the API server
/// only for the `/scale` of a target the caches do not hold (an Argo Rollout, or a workload
/// not yet seen) and, when the workload is scaled, for the KEDA ScaledObject.
pub struct Caches {
    /// Services of the watched namespaces.
    pub services: Store<Service>,
    /// EndpointSlices of the watched namespaces that carry `kubernetes.io/service-name`.
    pub slices: Store<EndpointSlice>,
    /// `slices` by `namespace/service` (their `kubernetes.io/service-name` label).
    pub slices_by_service: Index<EndpointSlice>,
    /// The resolver pods (`--resolver-selector` in the resolver namespace).
    pub resolver_pods: Store<Pod>,
    /// Deployments of the watched namespaces, trimmed to their metadata and `spec.replicas`.
    pub deployments: Store<Deployment>,
    /// StatefulSets of the watched namespaces, trimmed as `deployments`.
    pub statefulsets: Store<StatefulSet>,
}

/// How long a reconcile waits for the first list of every cache before it is requeued.
const CACHE_WAIT: Duration = Duration::from_secs(30);

impl Caches {
    /// Done once every cache holds its first list.
    fn ready(&self) -> Ready {
        Ready::of(vec![
            Ready::first_list(&self.services),
            Ready::first_list(&self.slices),
            Ready::first_list(&self.resolver_pods),
            Ready::first_list(&self.deployments),
            Ready::first_list(&self.statefulsets),
        ])
    }

    /// The desired replicas of `target` (`spec.replicas`, 1 when unset as the API server
    /// defaults it), if its kind is cached and it is in the cache.
    fn replicas(&self, target: &Target) -> Option<i32> {
        let (ns, name) = (target.namespace.as_str(), target.name.as_str());
        let replicas = match target.kind {
            target::Kind::Deployment => Self::get(&self.deployments, ns, name)?
                .spec
                .map(|s| s.replicas),
            target::Kind::StatefulSet => Self::get(&self.statefulsets, ns, name)?
                .spec
                .map(|s| s.replicas),
            target::Kind::Rollout => return None,
        };
        Some(replicas.flatten().unwrap_or(1))
    }

    /// Object `name` of namespace `ns` in `store`, if cached.
    fn get<K>(store: &Store<K>, ns: &str, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone,
    {
        store
            .get(&ObjectRef::new(name).within(ns))
            .map(|k| k.as_ref().clone())
    }
}

/// The scaling controller's state, shared by the reconciler and the poller.
pub struct Scaling {
    /// The operator context.
    pub ctx: Arc<Context>,
    /// The scaling options.
    pub opts: Options,
    resolver_namespace: String,
    caches: Caches,
    /// [`Caches::ready`], shared by every reconcile.
    ready: Ready,
    memory: Mutex<HashMap<String, Memory>>,
    written: WrittenStatus<ElasticServiceStatus>,
}

/// `--resolver-namespace`, else the operator namespace.
pub(crate) fn resolver_namespace(ctx: &Context, opts: &Options) -> String {
    opts.resolver_namespace
        .clone()
        .unwrap_or_else(|| ctx.kernel.namespace().to_owned())
}

fn key(es: &ElasticService) -> String {
    format!("{}/{}", es.namespace().unwrap_or_default(), es.name_any())
}

impl Scaling {
    /// The state for `ctx`, with `opts`.
    pub fn new(ctx: Arc<Context>, opts: Options, caches: Caches) -> Self {
        let resolver_namespace = resolver_namespace(&ctx, &opts);
        Self {
            ctx,
            opts,
            resolver_namespace,
            ready: caches.ready(),
            caches,
            memory: Mutex::default(),
            written: WrittenStatus::default(),
        }
    }

    /// Waits for the first list of every cache.
    async fn caches_ready(&self) -> Result<(), String> {
        tokio::time::timeout(CACHE_WAIT, self.ready.wait()).await.map_err(|_| {
            format!(
                "the caches of Services, EndpointSlices, resolver pods, Deployments and StatefulSets are not filled after {CACHE_WAIT:?}: see the operator log for the failing watch (RBAC?)"
            )
        })
    }

    fn remember<T>(&self, es: &ElasticService, f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        f(m.entry(key(es)).or_default())
    }

    fn forget(&self, es: &ElasticService) {
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key(es));
        self.written.forget(es);
    }

    /// The status of `es`: its cached one, or the last one written from this very cached
    /// version (see [`WrittenStatus`]).
    fn status_of(&self, es: &ElasticService) -> ElasticServiceStatus {
        self.written
            .status(es, es.status.as_ref())
            .unwrap_or_default()
    }

    /// Leaves the poller's votes for the next reconcile of `es`.
    pub(crate) fn leave_poll(&self, es: &ElasticService, poll: Poll) {
        self.remember(es, |m| m.poll = Some(poll));
    }

    /// Takes the votes the poller left for `es`, if any.
    pub(crate) fn take_poll(&self, es: &ElasticService) -> Option<Poll> {
        self.remember(es, |m| m.poll.take())
    }

    /// The last activity: `status.lastScaledUpTime` or what this process recorded later (an
    /// up decision while the workload is up is remembered here, not written).
    pub(crate) fn last_active(&self, es: &ElasticService) -> Option<Timestamp> {
        let status = es
            .status
            .as_ref()
            .and_then(|s| s.last_scaled_up_time.as_ref())
            .map(|t| t.0);
        let memory = self.remember(es, |m| m.last_active);
        status.max(memory)
    }

    /// Where the cooldown counts from: the last activity, or the time a trigger's vote last
    /// turned down if later. Votes are written only when they change, so after a restart a
    /// vote that turned down at T says the service was active until T.
    fn cooldown_from(&self, es: &ElasticService) -> Option<Timestamp> {
        let turned_down = es.status.as_ref().and_then(|s| {
            s.trigger_votes
                .iter()
                .filter(|v| v.vote == Vote::Down.as_str())
                .map(|v| v.time.0)
                .max()
        });
        self.last_active(es).max(turned_down)
    }

    /// The decision inputs of `es` at `now`.
    pub(crate) fn inputs<'a>(&self, es: &'a ElasticService, now: Timestamp) -> Inputs<'a> {
        Inputs {
            now,
            created: es.meta().creation_timestamp.as_ref().map_or(now, |t| t.0),
            last_active: self.cooldown_from(es),
            cooldown: decide::cooldown(es.spec.cooldown_period),
            enabled_period: es.spec.enabled_period.as_ref(),
            triggers: es.spec.triggers.len(),
        }
    }

    /// Records an Event. Events with the same reason and action fold into one series (kube's
    /// recorder), so the action names the cause: a scale on demand and one by the triggers
    /// stay apart.
    async fn event(
        &self,
        es: &ElasticService,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        tracing::info!(elasticservice = %key(es), reason, "{note}");
        self.ctx
            .kernel
            .writer
            .event(&es.object_ref(&()), type_, reason, action, note)
            .await;
    }

    /// Pauses (`pause`) or resumes the ElasticService's KEDA ScaledObject, if it names one and
    /// its pause differs; a pause someone else set is left alone, with a Warning Event.
    async fn keda(&self, es: &ElasticService, pause: bool) -> Result<(), Error> {
        let ns = es.namespace().unwrap_or_default();
        let done = target::set_keda_paused(
            &self.ctx.kernel.client,
            &self.ctx.kernel.writer,
            &ns,
            es.spec.autoscaler.as_ref(),
            pause,
        )
        .await?;
        if done == target::Keda::PausedElsewhere {
            let name = es.spec.autoscaler.as_ref().map_or("", |a| a.name.as_str());
            let note = format!(
                "KEDA ScaledObject {ns}/{name} was paused by someone else (no {} annotation): left paused",
                target::PAUSED_BY_WASMOP
            );
            self.event(es, true, "AutoscalerPausedElsewhere", "SetAutoscaler", note)
                .await;
        }
        Ok(())
    }

    /// Sets `target` from `from` to `to` replicas, counts it and records the Event of `cause`.
    async fn scale(
        &self,
        es: &ElasticService,
        target: &Target,
        (from, to): (i32, i32),
        cause: Cause,
        why: &str,
    ) -> Result<i32, Error> {
        target
            .set_replicas(&self.ctx.kernel.client, &self.ctx.kernel.writer, to)
            .await?;
        let (direction, label, reason, action) = cause.describe();
        metrics()
            .scales
            .get_or_create(&ScaleLabels::new(direction, label))
            .inc();
        let note = format!("{why}: {target} scaled from {from} to {to} replicas");
        self.event(es, false, reason, action, note).await;
        Ok(to)
    }

    /// Unless `target` has `minTargetReplicas` or more: resumes KEDA (if wasmop paused it) and
    /// scales `target` to `minTargetReplicas`. Returns the new desired replicas.
    async fn scale_up(
        &self,
        es: &ElasticService,
        target: &Target,
        replicas: i32,
        cause: Cause,
        why: &str,
    ) -> Result<i32, Error> {
        let min = es.spec.min_target_replicas.max(1);
        if !target::needs_scale(replicas, min) {
            return Ok(replicas);
        }
        self.keda(es, false).await?;
        self.scale(es, target, (replicas, min), cause, why).await
    }

    /// Pauses KEDA at zero and scales `target` to zero; returns the new desired replicas.
    async fn scale_down(
        &self,
        es: &ElasticService,
        target: &Target,
        replicas: i32,
        why: &str,
    ) -> Result<i32, Error> {
        if replicas == 0 {
            return Ok(0);
        }
        self.keda(es, true).await?;
        self.scale(es, target, (replicas, 0), Cause::TriggersDown, why)
            .await
    }

    /// Converges `es` (see the module docs).
    async fn apply(&self, es: Arc<ElasticService>) -> Result<Action, Error> {
        let now = Timestamp::now();
        let before = self.status_of(&es);
        let mut status = ElasticServiceStatus {
            conditions: before
                .conditions
                .iter()
                .filter(|c| ours(&c.type_))
                .cloned()
                .collect(),
            ..before.clone()
        };
        let result = self.converge(&es, now, &mut status).await;
        let generation = es.meta().generation;
        let (ready, reason, message) = match &result {
            Ok(mode) => (
                true,
                match mode {
                    Mode::Serve => "Serving",
                    Mode::Proxy => "Proxying",
                },
                match mode {
                    Mode::Serve => "traffic goes to the workload".to_owned(),
                    Mode::Proxy => {
                        "traffic goes to the resolver, which holds requests until the workload is ready"
                            .to_owned()
                    }
                },
            ),
            Err(Error::Invalid(m)) => (false, "Invalid", m.clone()),
            Err(e) if e.is_passive() => return Err(Error::Write(WriteError::Passive)),
            Err(e) => (false, "Error", e.to_string()),
        };
        let wanted = conditions::condition(
            &status.conditions,
            READY,
            ready,
            reason,
            message,
            generation,
        );
        conditions::set(&mut status.conditions, wanted);
        self.write_status(&es, &before, status, now).await?;
        match result {
            Ok(_) | Err(Error::Invalid(_)) => Ok(Action::requeue(RESYNC)),
            Err(e) => Err(e),
        }
    }

    async fn converge(
        &self,
        es: &ElasticService,
        now: Timestamp,
        status: &mut ElasticServiceStatus,
    ) -> Result<Mode, Error> {
        let ns = es.namespace().unwrap_or_default();
        let client = &self.ctx.kernel.client;
        let target = Target::new(&es.spec.scale_target_ref, &ns)?;
        let mut replicas = self
            .replicas(&target)
            .await?
            .ok_or_else(|| Error::Invalid(format!("scaleTargetRef: {target} does not exist")))?;

        // Demand from the resolver.
        if let Some(t) = demand(es) {
            let newer = self.last_active(es).is_none_or(|last| t > last);
            let handled = self.remember(es, |m| m.demand_handled) == Some(t);
            if newer && !handled {
                let why = format!("request held by the resolver since {t:.0}");
                let before = replicas;
                replicas = self
                    .scale_up(es, &target, replicas, Cause::Demand, &why)
                    .await?;
                if replicas == before {
                    // Already scaled up (its pods are not ready yet): the demand is still noted,
                    // under an action of its own so it does not fold into the last scale-up.
                    let (_, _, reason, _) = Cause::Demand.describe();
                    let note = format!("{why}: {target} already wants {replicas} replicas");
                    self.event(es, false, reason, "KeepReplicasOnDemand", note)
                        .await;
                }
                self.remember(es, |m| {
                    m.demand_handled = Some(t);
                    m.last_active = Some(now);
                });
                status.last_scaled_up_time = Some(Time(now));
            }
        }

        // The poller's votes.
        if let Some(poll) = self.take_poll(es) {
            replicas = self
                .apply_poll(es, &target, replicas, poll, now, status)
                .await?;
        }

        // The private Service, mirrored from the public one.
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let public =
            Caches::get(&self.caches.services, &ns, &es.spec.service).ok_or_else(|| {
                Error::Invalid(format!(
                    "service: Service {ns}/{} does not exist",
                    es.spec.service
                ))
            })?;
        let not_tcp = plan::non_tcp_ports(&public);
        let ports = if not_tcp.is_empty() {
            conditions::condition(
                &status.conditions,
                PORTS,
                true,
                "AllTCP",
                "every port is TCP: the resolver holds all of the Service's traffic at zero",
                es.meta().generation,
            )
        } else {
            conditions::condition(
                &status.conditions,
                PORTS,
                false,
                "NotTCP",
                format!(
                    "the resolver holds TCP only: while the workload is at zero, ports {} get no endpoint and their traffic is dropped",
                    not_tcp.join(", ")
                ),
                es.meta().generation,
            )
        };
        conditions::set(&mut status.conditions, ports);
        let private = plan::private_service(es, &public).map_err(Error::Invalid)?;
        let private_name = private_service_name(&es.spec.service);
        let existing = Caches::get(&self.caches.services, &ns, &private_name);
        if let Some(existing) = &existing
            && !owned_by(existing.owner_references(), es)
        {
            return Err(Error::Invalid(format!(
                "Service {ns}/{private_name} exists and is not owned by this ElasticService; rename or remove it"
            )));
        }
        if let Some(old) = existing
            .as_ref()
            .filter(|e| plan::private_service_has_cluster_ip(e))
        {
            // Made with a ClusterIP by an earlier version: made again headless (the ClusterIP
            // cannot be removed in place). The resolver forwards to its endpoints again as soon
            // as kube-controller-manager fills the new one's EndpointSlices.
            self.ctx
                .kernel
                .writer
                .delete(&services, &private_name)
                .await?;
            tracing::info!(
                elasticservice = %key(es),
                service = %private_name,
                cluster_ip = old.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()).unwrap_or_default(),
                "private Service with a ClusterIP deleted, to be made again headless"
            );
        }
        if existing.is_none_or(|e| !plan::private_service_current(&e, &private)) {
            self.ctx
                .kernel
                .writer
                .apply(&services, &private_name, &private)
                .await?;
            tracing::info!(elasticservice = %key(es), service = %private_name, "private Service applied");
        }
        status.private_service = Some(private_name);

        // The mode.
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
        let public_slices: Vec<EndpointSlice> = self
            .caches
            .slices_by_service
            .get(&format!("{ns}/{}", es.spec.service))
            .iter()
            .map(|s| s.as_ref().clone())
            .collect();
        let mode = plan::mode(replicas, plan::public_ready(&public_slices));
        let slice_name = resolver_slice_name(&es.spec.service);
        let existing = public_slices.iter().find(|s| s.name_any() == slice_name);
        let mut problem = None;
        match mode {
            Mode::Proxy => {
                let resolver_pods: Vec<Pod> = self
                    .caches
                    .resolver_pods
                    .state()
                    .iter()
                    .map(|p| p.as_ref().clone())
                    .collect();
                let wanted =
                    plan::resolver_slice(es, &public, &resolver_pods, self.opts.resolver_port);
                if existing.is_none_or(|e| !plan::slice_current(e, &wanted)) {
                    self.ctx
                        .kernel
                        .writer
                        .apply(&slices, &slice_name, &wanted)
                        .await?;
                    tracing::info!(
                        elasticservice = %key(es),
                        slice = %slice_name,
                        endpoints = wanted.endpoints.as_ref().map_or(0, Vec::len),
                        "resolver EndpointSlice applied"
                    );
                }
                if wanted.endpoints.as_ref().is_none_or(Vec::is_empty) {
                    problem = Some(format!(
                        "no ready resolver pod matches {} in namespace {}: requests to Service {ns}/{} fail until one is ready",
                        self.opts.resolver_selector, self.resolver_namespace, es.spec.service
                    ));
                }
            }
            Mode::Serve => {
                if existing.is_some() {
                    self.ctx.kernel.writer.delete(&slices, &slice_name).await?;
                    tracing::info!(elasticservice = %key(es), slice = %slice_name, "resolver EndpointSlice deleted");
                }
            }
        }
        let previous = self
            .remember(es, |m| m.mode)
            .or(match status.mode.as_deref() {
                Some("serve") => Some(Mode::Serve),
                Some("proxy") => Some(Mode::Proxy),
                _ => None,
            });
        if previous != Some(mode) {
            let note = match mode {
                Mode::Proxy => format!(
                    "Service {} now sends its traffic to the resolver ({} desired replicas)",
                    es.spec.service, replicas
                ),
                Mode::Serve => format!(
                    "Service {} now sends its traffic to the workload's ready pods",
                    es.spec.service
                ),
            };
            let reason = match mode {
                Mode::Proxy => "SwitchedToProxy",
                Mode::Serve => "SwitchedToServe",
            };
            self.event(es, false, reason, "SwitchMode", note).await;
        }
        self.remember(es, |m| m.mode = Some(mode));
        metrics()
            .proxy
            .get_or_create(&EsLabels::of(es))
            .set(i64::from(mode == Mode::Proxy));
        status.mode = Some(mode.as_str().to_owned());
        match problem {
            Some(message) => Err(Error::Invalid(message)),
            None => Ok(mode),
        }
    }

    /// Applies the poller's votes: decide, scale, record.
    async fn apply_poll(
        &self,
        es: &ElasticService,
        target: &Target,
        mut replicas: i32,
        poll: Poll,
        now: Timestamp,
        status: &mut ElasticServiceStatus,
    ) -> Result<i32, Error> {
        let decision = decide::decide(&self.inputs(es, now), &poll.votes, poll.policy);
        tracing::debug!(elasticservice = %key(es), ?decision, "trigger decision");
        metrics()
            .evaluated
            .get_or_create(&EsLabels::of(es))
            .set(poll.at.as_second());
        if !poll.votes.is_empty() {
            let votes = vote_statuses(&status.trigger_votes, &poll.votes, poll.at);
            for (n, (v, changed)) in poll.votes.iter().zip(&votes).enumerate() {
                if v.vote == Vote::Failed && changed.1 {
                    self.event(
                        es,
                        true,
                        "TriggerFailed",
                        "EvaluateTriggers",
                        format!("trigger {n} ({}): {}", v.trigger_type, v.reason),
                    )
                    .await;
                }
            }
            status.trigger_votes = votes.into_iter().map(|(v, _)| v).collect();
        }
        let failed = poll.votes.iter().any(|v| v.vote == Vote::Failed);
        let message = match &decision {
            Decision::Up(r) => format!("up: {r}"),
            Decision::Down(r) => format!("down: {r}"),
            Decision::Hold(r) => format!("hold: {r}"),
        };
        let condition = conditions::condition(
            &status.conditions,
            TRIGGERS,
            !failed,
            if failed { "TriggerFailed" } else { "Evaluated" },
            message,
            es.meta().generation,
        );
        conditions::set(&mut status.conditions, condition);
        match decision {
            Decision::Up(why) => {
                let words = decide::cited(&poll.votes).map_or("", |(_, v)| v.reason.as_str());
                let before = replicas;
                replicas = self
                    .scale_up(
                        es,
                        target,
                        replicas,
                        Cause::TriggersUp,
                        &format!("{why}: {words}"),
                    )
                    .await?;
                self.remember(es, |m| m.last_active = Some(now));
                if replicas != before {
                    status.last_scaled_up_time = Some(Time(now));
                }
            }
            Decision::Down(why) => {
                replicas = self.scale_down(es, target, replicas, &why).await?;
            }
            Decision::Hold(_) => {}
        }
        Ok(replicas)
    }

    /// Writes `status` (our fields and conditions only) when it differs from `before`.
    async fn write_status(
        &self,
        es: &ElasticService,
        before: &ElasticServiceStatus,
        mut status: ElasticServiceStatus,
        now: Timestamp,
    ) -> Result<(), Error> {
        let ours = |s: &ElasticServiceStatus| {
            let mut s = s.clone();
            s.last_reconciled_time = None;
            s.conditions.retain(|c| ours(&c.type_));
            s
        };
        if ours(&status) == ours(before) {
            return Ok(());
        }
        status.last_reconciled_time = Some(Time(now));
        let api: Api<ElasticService> = Api::namespaced(
            self.ctx.kernel.client.clone(),
            &es.namespace().unwrap_or_default(),
        );
        let after = self
            .ctx
            .kernel
            .writer
            .apply_status(&api, &es.name_any(), &status)
            .await?;
        self.written.record(es, after.status.unwrap_or_default());
        Ok(())
    }

    /// The desired replicas of `target`, from the workload caches, else from its `/scale`;
    /// `None` when it does not exist.
    ///
    /// # Errors
    /// As [`Target::replicas`].
    async fn replicas(&self, target: &Target) -> Result<Option<i32>, Error> {
        match self.caches.replicas(target) {
            Some(replicas) => Ok(Some(replicas)),
            None => target.replicas(&self.ctx.kernel.client).await,
        }
    }

    /// Restores the workload and removes what wasmop created for `es`.
    async fn cleanup(&self, es: Arc<ElasticService>) -> Result<Action, Error> {
        let ns = es.namespace().unwrap_or_default();
        let client = &self.ctx.kernel.client;
        match Target::new(&es.spec.scale_target_ref, &ns) {
            Ok(target) => match self.replicas(&target).await {
                Ok(Some(replicas)) => {
                    self.keda(&es, false).await.or_else(ignore_invalid)?;
                    let min = es.spec.min_target_replicas.max(1);
                    if target::needs_scale(replicas, min) {
                        let why = "ElasticService deleted";
                        self.scale(&es, &target, (replicas, min), Cause::Deletion, why)
                            .await?;
                    }
                }
                Ok(None) => {}
                Err(e) => ignore_invalid(e)?,
            },
            Err(e) => ignore_invalid(e)?,
        }
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
        self.ctx
            .kernel
            .writer
            .delete(&slices, &resolver_slice_name(&es.spec.service))
            .await?;
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let private_name = private_service_name(&es.spec.service);
        if let Some(svc) = services
            .get_opt(&private_name)
            .await
            .map_err(|e| Error::Read(format!("Service {ns}/{private_name}"), e))?
            && owned_by(svc.owner_references(), &es)
        {
            self.ctx
                .kernel
                .writer
                .delete(&services, &private_name)
                .await?;
        }
        self.forget(&es);
        let _ = metrics().proxy.remove(&EsLabels::of(&es));
        let _ = metrics().evaluated.remove(&EsLabels::of(&es));
        tracing::info!(elasticservice = %key(&es), "cleaned up");
        Ok(Action::await_change())
    }
}

/// Nothing to restore when the workload or an API is gone: log it and go on.
fn ignore_invalid(e: Error) -> Result<(), Error> {
    match e {
        Error::Invalid(m) => {
            tracing::info!("cleanup: {m}");
            Ok(())
        }
        e => Err(e),
    }
}

fn owned_by(
    refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    es: &ElasticService,
) -> bool {
    let uid = es.uid();
    refs.iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

/// The time of the demand annotation, if set and valid (an invalid one is logged).
pub fn demand(es: &ElasticService) -> Option<Timestamp> {
    let raw = es.annotations().get(DEMAND_ANNOTATION)?;
    match raw.parse::<Timestamp>() {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(elasticservice = %key(es), "ignoring annotation {DEMAND_ANNOTATION}={raw:?}: not an RFC 3339 time: {e}");
            None
        }
    }
}

async fn reconcile(es: Arc<ElasticService>, s: Arc<Scaling>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(es.clone(), &s).await;
    wasmop_kernel::metrics::reconcile(
        CONTROLLER,
        started.elapsed(),
        result.as_ref().err().map_or("ok", Error::metric_label),
    );
    result
}

async fn reconcile_inner(es: Arc<ElasticService>, s: &Scaling) -> Result<Action, Error> {
    if !s.ctx.kernel.gate().is_active() {
        tracing::debug!(
            elasticservice = %key(&es),
            mode = ?es.status.as_ref().and_then(|st| st.mode.as_deref()),
            demand = ?demand(&es),
            "passive: nothing written; reconciled again once promoted"
        );
        return Ok(Action::requeue(RESYNC));
    }
    let api: Api<ElasticService> = Api::namespaced(
        s.ctx.kernel.client.clone(),
        &es.namespace().unwrap_or_default(),
    );
    s.ctx.kernel.writer.check()?;
    if es.meta().deletion_timestamp.is_none()
        && let Err(e) = s.caches_ready().await
    {
        tracing::warn!(elasticservice = %key(&es), "{e}");
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let result = finalizer(&api, FINALIZER, es, |event| async move {
        match event {
            Finalizer::Apply(es) => s.apply(es).await,
            Finalizer::Cleanup(es) => s.cleanup(es).await,
        }
    })
    .await;
    wasmop_kernel::unless_deleted_meanwhile(result).map_err(|e| Error::Finalizer(Box::new(e)))
}

fn error_policy(es: Arc<ElasticService>, e: &Error, _s: Arc<Scaling>) -> Action {
    if e.is_passive() {
        tracing::debug!(elasticservice = %key(&es), "passive: requeued");
        return Action::requeue(RESYNC);
    }
    if e.is_stale() {
        tracing::debug!(elasticservice = %key(&es), "the cached copy was stale, retrying: {e}");
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(elasticservice = %key(&es), "reconcile failed, retrying in 10s: {e}");
    Action::requeue(Duration::from_secs(10))
}

fn refs_for_service(
    store: &Store<ElasticService>,
    ns: Option<String>,
    service: &str,
) -> Vec<ObjectRef<ElasticService>> {
    store
        .state()
        .iter()
        .filter(|es| es.namespace() == ns)
        .filter(|es| {
            es.spec.service == service || private_service_name(&es.spec.service) == service
        })
        .map(|es| ObjectRef::from_obj(es.as_ref()))
        .collect()
}

/// The streams that fill [`Caches`]; the controller drives them ([`run`]).
pub struct CacheStreams {
    services: BoxStream<'static, Result<Service, watcher::Error>>,
    slices: BoxStream<'static, Result<EndpointSlice, watcher::Error>>,
    resolver_pods: BoxStream<'static, Result<Pod, watcher::Error>>,
    /// Fills the workload caches; their changes do not trigger reconciles (the poller and
    /// the ElasticService's own changes do).
    workloads: BoxStream<'static, ()>,
}

/// The caches of the objects a reconcile reads, in `ctx`'s watched scope and `opts`'s
/// resolver namespace and selector, with the streams that fill them.
pub fn caches(ctx: &Context, opts: &Options) -> (Caches, CacheStreams) {
    let (services, svc_stream) = cache(ctx.kernel.watched_api::<Service>(), Default::default());
    let (slices, slices_by_service, slice_stream) = cache_indexed(
        ctx.kernel.watched_api::<EndpointSlice>(),
        watcher::Config::default().labels(SERVICE_NAME_LABEL),
        slice_key,
    );
    let resolver_api: Api<Pod> =
        Api::namespaced(ctx.kernel.client.clone(), &resolver_namespace(ctx, opts));
    let (resolver_pods, pod_stream) = cache(
        resolver_api,
        watcher::Config::default().labels(&opts.resolver_selector),
    );
    let (deployments, deploy_stream) = cache_trimmed(
        ctx.kernel.watched_api::<Deployment>(),
        Default::default(),
        |d: &mut Deployment| {
            trim_meta(d);
            if let Some(spec) = d.spec.as_mut() {
                spec.template = Default::default();
            }
            d.status = None;
        },
    );
    let (statefulsets, sts_stream) = cache_trimmed(
        ctx.kernel.watched_api::<StatefulSet>(),
        Default::default(),
        |s: &mut StatefulSet| {
            trim_meta(s);
            if let Some(spec) = s.spec.as_mut() {
                spec.template = Default::default();
                spec.volume_claim_templates = None;
            }
            s.status = None;
        },
    );
    let workloads = futures::stream::select(
        deploy_stream.map(|_| ()).boxed(),
        sts_stream.map(|_| ()).boxed(),
    );
    (
        Caches {
            services,
            slices,
            slices_by_service,
            resolver_pods,
            deployments,
            statefulsets,
        },
        CacheStreams {
            services: svc_stream.boxed(),
            slices: slice_stream.boxed(),
            resolver_pods: pod_stream.boxed(),
            workloads: workloads.boxed(),
        },
    )
}

/// `namespace/service` of an EndpointSlice (its [`SERVICE_NAME_LABEL`]).
fn slice_key(slice: &EndpointSlice) -> Option<String> {
    Some(format!(
        "{}/{}",
        slice.namespace()?,
        slice.labels().get(SERVICE_NAME_LABEL)?
    ))
}

/// Drops what no reader of a workload cache needs: managed fields and annotations (the
/// last-applied configuration can be as large as the object).
fn trim_meta(k: &mut impl Resource) {
    k.meta_mut().managed_fields = None;
    k.meta_mut().annotations = None;
}

/// Runs `controller` (the ElasticService controller, whose store the poller reads) with the
/// objects it watches besides ElasticServices (`streams`, which fill the scaling caches),
/// reconciling every ElasticService again on each promotion and each message of `poll_rx` (a
/// poller round left votes), until it ends.
///
/// # Errors
/// Always, once the controller's stream ends.
pub async fn run(
    scaling: Arc<Scaling>,
    controller: Controller<ElasticService>,
    streams: CacheStreams,
    poll_rx: futures::channel::mpsc::UnboundedReceiver<()>,
    es_ready: Ready,
) -> anyhow::Result<()> {
    let ctx = scaling.ctx.clone();
    let store = controller.store();
    let (svc_store, slice_store, pod_store) = (store.clone(), store.clone(), store.clone());
    let controller = controller
        .watches_stream(streams.services, move |svc: Service| {
            refs_for_service(&svc_store, svc.namespace(), &svc.name_any())
        })
        .watches_stream(streams.slices, move |slice: EndpointSlice| {
            let service = slice
                .labels()
                .get(SERVICE_NAME_LABEL)
                .cloned()
                .unwrap_or_default();
            refs_for_service(&slice_store, slice.namespace(), &service)
        })
        .watches_stream(streams.resolver_pods, move |_: Pod| {
            pod_store
                .state()
                .iter()
                .map(|es| ObjectRef::from_obj(es.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(ctx.kernel.gate().promotions_of(es_ready))
        .reconcile_all_on(poll_rx)
        .run(reconcile, error_policy, scaling.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!("scaling controller: {e}");
            }
        });
    tracing::info!(
        poll_interval = ?scaling.opts.poll_interval,
        resolver_namespace = %scaling.resolver_namespace,
        resolver_selector = %scaling.opts.resolver_selector,
        "scaling controller started"
    );
    let fill = streams.workloads.for_each(|()| std::future::ready(()));
    futures::future::select(Box::pin(controller), fill).await;
    anyhow::bail!("the ElasticService controller ended")
}

/// Why a workload is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    /// The resolver holds a request.
    Demand,
    /// The triggers (or the enabled window) want the service up.
    TriggersUp,
    /// Every trigger votes down and the cooldown is over.
    TriggersDown,
    /// The ElasticService is deleted.
    Deletion,
}

impl Cause {
    /// (direction, cause label, Event reason, Event action). Events with the same reason and
    /// action fold into one series, so the action names the cause.
    fn describe(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Cause::Demand => ("up", "demand", "ScaledUp", "ScaleUpOnDemand"),
            Cause::TriggersUp => ("up", "triggers", "ScaledUp", "ScaleUpByTriggers"),
            Cause::TriggersDown => ("down", "triggers", "ScaledDown", "ScaleDownByTriggers"),
            Cause::Deletion => ("up", "deletion", "ScaleRestored", "RestoreOnDeletion"),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScaleLabels {
    direction: String,
    cause: String,
}

impl ScaleLabels {
    fn new(direction: &str, cause: &str) -> Self {
        Self {
            direction: direction.into(),
            cause: cause.into(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EsLabels {
    namespace: String,
    elasticservice: String,
}

impl EsLabels {
    fn of(es: &ElasticService) -> Self {
        Self {
            namespace: es.namespace().unwrap_or_default(),
            elasticservice: es.name_any(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VoteLabels {
    pub(super) plugin: String,
    pub(super) vote: String,
}

pub(super) struct Metrics {
    scales: Family<ScaleLabels, Counter>,
    proxy: Family<EsLabels, Gauge>,
    evaluated: Family<EsLabels, Gauge>,
    pub(super) votes: Family<VoteLabels, Counter>,
}

/// The scaling metrics (registered on first use):
/// `wasmop_scaling_scales_total{direction=up|down, cause=demand|triggers|deletion}`,
/// `wasmop_scaling_proxy_mode{namespace, elasticservice}` (1 in proxy mode, 0 in serve mode),
/// `wasmop_scaling_trigger_evaluated_timestamp_seconds{namespace, elasticservice}`,
/// `wasmop_scaling_trigger_votes_total{plugin, vote=up|down|error}`.
pub(super) fn metrics() -> &'static Metrics {
    static M: LazyLock<Metrics> = LazyLock::new(|| {
        let m = Metrics {
            scales: Family::default(),
            proxy: Family::default(),
            evaluated: Family::default(),
            votes: Family::default(),
        };
        wasmop_kernel::metrics::register(
            "scaling_scales",
            "Workload scale changes by direction and cause",
            m.scales.clone(),
        );
        wasmop_kernel::metrics::register(
            "scaling_proxy_mode",
            "1 while an ElasticService's Service sends its traffic to the resolver, 0 in serve mode",
            m.proxy.clone(),
        );
        wasmop_kernel::metrics::register(
            "scaling_trigger_evaluated_timestamp_seconds",
            "When an ElasticService's triggers were last evaluated (Unix seconds); the status records only changes of their votes",
            m.evaluated.clone(),
        );
        wasmop_kernel::metrics::register(
            "scaling_trigger_votes",
            "Trigger votes by plugin and vote",
            m.votes.clone(),
        );
        m
    });
    &M
}

/// The `status.triggerVotes` for `votes` taken at `at`, each with whether it changed: a
/// trigger whose vote is what `previous` shows keeps its entry as it was (value, reason and
/// time of that vote's start), so a steady vote writes nothing, whatever its measured value.
fn vote_statuses(
    previous: &[TriggerVoteStatus],
    votes: &[TriggerOutcome],
    at: Timestamp,
) -> Vec<(TriggerVoteStatus, bool)> {
    votes
        .iter()
        .enumerate()
        .map(|(n, v)| match previous.get(n) {
            Some(p) if p.type_ == v.trigger_type && p.vote == v.vote.as_str() => (p.clone(), false),
            _ => (vote_status(v, at), true),
        })
        .collect()
}

/// A trigger's vote as the status shows it, its reason (the plugin's words) cut to
/// [`STATUS_TEXT_BYTES`](wasmop_kernel::text::STATUS_TEXT_BYTES).
fn vote_status(v: &TriggerOutcome, at: Timestamp) -> TriggerVoteStatus {
    TriggerVoteStatus {
        type_: v.trigger_type.clone(),
        vote: v.vote.as_str().into(),
        value: v.value,
        reason: wasmop_kernel::text::status_text(&v.reason),
        time: Time(at),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Caches that stay empty (their writers are gone): for reconciles that never read them.
    pub(crate) fn no_caches() -> Caches {
        let slices = kube::runtime::reflector::store().0;
        Caches {
            services: kube::runtime::reflector::store().0,
            slices_by_service: Index::new(slices.clone(), slice_key),
            slices,
            resolver_pods: kube::runtime::reflector::store().0,
            deployments: kube::runtime::reflector::store().0,
            statefulsets: kube::runtime::reflector::store().0,
        }
    }

    #[test]
    fn a_plugins_long_reason_is_cut_in_the_status() {
        let vote = TriggerOutcome {
            trigger_type: "prometheus".into(),
            vote: Vote::Up,
            value: Some(1.0),
            reason: "ü".repeat(300_000),
        };
        let status = vote_status(&vote, Timestamp::UNIX_EPOCH);
        assert!(status.reason.len() <= wasmop_kernel::text::STATUS_TEXT_BYTES);
        assert!(status.reason.ends_with(wasmop_kernel::text::CUT_MARK));
    }

    fn unreachable_context() -> Arc<Context> {
        crate::test_support::unreachable_context()
    }

    /// A client whose API server answers every request with `es` and counts the requests.
    fn client_answering_with(
        es: &ElasticService,
    ) -> (kube::Client, Arc<std::sync::atomic::AtomicUsize>) {
        let body = bytes::Bytes::from(serde_json::to_vec(es).unwrap());
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = sent.clone();
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = body.clone();
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(body))
                        .unwrap(),
                )
            }
        });
        (kube::Client::new(service, "default"), sent)
    }

    #[tokio::test]
    async fn a_reconcile_on_a_cached_version_older_than_its_status_write_does_not_write_again() {
        let mut cached = (*demanded()).clone();
        cached.metadata.resource_version = Some("7".into());
        let status = ElasticServiceStatus {
            mode: Some("proxy".into()),
            ..ElasticServiceStatus::default()
        };
        let mut answer = cached.clone();
        answer.metadata.resource_version = Some("8".into());
        answer.status = Some(status.clone());
        let (client, sent) = client_answering_with(&answer);
        let ctx = crate::test_support::context_with(client);
        ctx.kernel.gate().set_active(true);
        let scaling = Scaling::new(ctx, Options::default(), no_caches());
        let now = Timestamp::now();
        let requests = || sent.load(std::sync::atomic::Ordering::SeqCst);

        let before = scaling.status_of(&cached);
        scaling
            .write_status(&cached, &before, status.clone(), now)
            .await
            .unwrap();
        assert_eq!(requests(), 1, "the first status write");

        // A reconcile queued by the write's side effects, before the watch delivers it.
        let before = scaling.status_of(&cached);
        assert_eq!(before.mode.as_deref(), Some("proxy"));
        scaling
            .write_status(&cached, &before, status.clone(), now)
            .await
            .unwrap();
        assert_eq!(requests(), 1, "the same status is not written again");

        // Once the cache moves on, its status counts: one someone changed is written again.
        let mut moved = answer.clone();
        moved.metadata.resource_version = Some("9".into());
        moved.status = Some(ElasticServiceStatus::default());
        let before = scaling.status_of(&moved);
        assert_eq!(before.mode, None);
        scaling
            .write_status(&moved, &before, status, now)
            .await
            .unwrap();
        assert_eq!(requests(), 2, "the cache's status counts again");
    }

    fn demanded() -> Arc<ElasticService> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
                "metadata": {"name": "web", "namespace": "shop", "uid": "u",
                             "annotations": {DEMAND_ANNOTATION: "2026-01-01T00:00:00Z"}},
                "spec": {"service": "web", "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
            }))
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_passive_instance_sends_nothing_and_requeues() {
        let ctx = unreachable_context();
        let scaling = Scaling::new(ctx.clone(), Options::default(), no_caches());
        assert!(
            !ctx.kernel.gate().is_active(),
            "the operator starts passive"
        );
        let action = reconcile_inner(demanded(), &scaling).await.unwrap();
        assert_eq!(action, Action::requeue(RESYNC));
        assert!(
            scaling.memory.lock().unwrap().is_empty(),
            "the demand was not acted on"
        );

        // Once active, the same reconcile goes to the API server (here: fails to reach it).
        ctx.kernel.gate().set_active(true);
        let e = reconcile_inner(demanded(), &scaling).await.unwrap_err();
        assert!(
            matches!(&e, Error::Finalizer(f) if matches!(f.as_ref(), kube::runtime::finalizer::Error::AddFinalizer(_))),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_cleanup_of_an_elastic_service_already_deleted_is_done_not_failed() {
        use crate::test_support::{client_answering, context_with};
        let deleting = || {
            let mut es = (*demanded()).clone();
            es.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
            es.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-01-01T00:00:00Z".parse().unwrap(),
                ));
            Arc::new(es)
        };
        // The API server has none of it any more (the workload, the resolver's EndpointSlice,
        // the private Service, the ElasticService itself): every request answers 404.
        let ctx = context_with(client_answering(404));
        ctx.kernel.gate().set_active(true);
        let action = reconcile_inner(
            deleting(),
            &Scaling::new(ctx, Options::default(), no_caches()),
        )
        .await
        .unwrap();
        assert_eq!(action, Action::await_change());

        // Any other failure is still an error, retried.
        let ctx = context_with(client_answering(500));
        ctx.kernel.gate().set_active(true);
        let e = reconcile_inner(
            deleting(),
            &Scaling::new(ctx, Options::default(), no_caches()),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&e, Error::Finalizer(f) if matches!(f.as_ref(), kube::runtime::finalizer::Error::CleanupFailed(_))),
            "{e}"
        );
    }

    #[test]
    fn invalid_demand_annotations_are_ignored() {
        let mut es = (*demanded()).clone();
        assert_eq!(demand(&es), Some("2026-01-01T00:00:00Z".parse().unwrap()));
        es.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(DEMAND_ANNOTATION.into(), "yesterday".into());
        assert_eq!(demand(&es), None);
    }
}
