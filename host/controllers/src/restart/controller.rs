//! The ProxyRestartPolicy reconciler. One reconcile of a policy, in order:
//!
//! 1. **Ingress gateway** (with `spec.ingressGateway`): when its settings differ from the
//!    applied ones ([`plan::gateway_change`]), roll out the gateway Deployment (NotFound counts
//!    as done, as upstream). A sidecar failure never blocks it (upstream #655).
//! 2. **Sidecars**: the pods of the selected namespaces, page by page from the API server
//!    ([`super::pods::PodPager`]). Each eligible pod that is not excluded, not restarted for the
//!    desired state already and not left to an older overlapping policy goes to the plugin
//!    with its page; each pod the plugin restarts is restarted through its owner
//!    ([`super::owners`]): one rollout per workload, a deletion per pod of a bare ReplicaSet or
//!    ReplicationController, a warning (and an Event) per bare pod or Job pod. At most
//!    `limits.restartsPerReconcile` restarts, none outside the maintenance window; the rest
//!    waits for the next reconcile.
//! 3. **Status** ([`status::report`]): state, conditions, the applied configuration (recorded
//!    when the pass is done, even with warnings), the summary, the overlapping policies;
//!    written only when it changed. Events on the policy sum the reconcile up.
//!
//! Triggers: changes of the policy's spec, labels or annotations (a status change, this
//! controller's own write included, is skipped until the requeue is due), changes of
//! overlapping policies (both sides of an overlap are reconciled, deletions included),
//! promotions of this instance, reloads of the plugin registry, and the requeue.
//! There is no finalizer: nothing outside the policy is owned by it.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::error::Error;
use super::options::Options;
use super::owners::{Inspection, Marker, Owner, OwnerKind, Owners, Rollout, pod_ref};
use super::plan::{
    self, Admission, Chunk, Overlap, PodOwner, PodSetKind, Selection, TargetState, WarningKind,
    Window, WorkloadKind,
};
use super::pods::{PodPager, page_json};
use super::status::{self, Gateway, Next, Outcome, Sidecars};
use crate::Context;
use wasmop_api::proxyrestartpolicy::{
    DesiredProxy, GatewaySettings, ProxyRestartPolicy, ProxyRestartPolicyStatus, RestartMode,
    RestartSummary, WouldRestartWorkload,
};
use wasmop_kernel::cache::Ready;
use wasmop_kernel::conditions;
use wasmop_kernel::gate::WriteError;
use wasmop_plugin_host::{FailurePolicy, Hook, RestartRequest};

/// The controller's name in metrics.
const CONTROLLER: &str = "restart";
/// Workloads named in the summary Event of a reconcile.
const EVENT_NAMES: usize = 10;
/// Errors kept in the status description.
const MAX_ERRORS: usize = 5;

/// What this process remembers of a policy between reconciles.
#[derive(Clone, Debug, Default)]
struct Memory {
    /// The [`fingerprint`] of the policy at the last reconcile.
    seen: Option<u64>,
    /// When the last reconcile asked to be requeued.
    due: Option<Instant>,
    /// Set when something other than the policy itself asks for a reconcile (an overlapping
    /// policy changed, this instance was promoted).
    poked: bool,
}

/// The restart controller's state.
pub(crate) struct Restarter {
    /// The operator context.
    pub ctx: Arc<Context>,
    /// The restart options.
    pub opts: Options,
    store: Store<ProxyRestartPolicy>,
    memory: Mutex<HashMap<String, Memory>>,
}

impl Restarter {
    /// The state for `ctx` and `opts`, with the policies of `store` (for overlaps).
    pub fn new(ctx: Arc<Context>, opts: Options, store: Store<ProxyRestartPolicy>) -> Self {
        Self {
            ctx,
            opts,
            store,
            memory: Mutex::default(),
        }
    }

    /// `known` (the overlaps `name` last recorded) and the policies whose status lists `name`
    /// among theirs, sorted: an overlap shows on both sides as soon as either sees it.
    fn reported_overlaps(&self, name: &str, known: &[String]) -> Vec<String> {
        let mut names = known.to_vec();
        for p in self.store.state() {
            let lists_me = p
                .status
                .as_ref()
                .is_some_and(|s| s.overlapping_policies.iter().any(|n| n == name));
            if lists_me && !names.contains(&p.name_any()) {
                names.push(p.name_any());
            }
        }
        names.sort();
        names
    }

    fn remember<T>(&self, name: &str, f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        f(m.entry(name.to_owned()).or_default())
    }

    /// Asks for a full reconcile of policy `name` on its next trigger.
    fn poke(&self, name: &str) {
        self.remember(name, |m| m.poked = true);
    }

    fn poke_all(&self) {
        let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        for memory in m.values_mut() {
            memory.poked = true;
        }
    }

    /// When the trigger changed nothing this controller acts on (a status write, its own or
    /// `PluginReady`'s: same [`fingerprint`] as at the last reconcile, nothing poked, the
    /// requeue not due yet): the time left until the requeue.
    /// A poke is taken here, when the reconcile starts, so that one arriving while it runs
    /// makes the next reconcile a full one too.
    fn echo(&self, policy: &ProxyRestartPolicy) -> Option<Duration> {
        let current = fingerprint(policy);
        self.remember(&policy.name_any(), |m| {
            if std::mem::take(&mut m.poked) {
                return None;
            }
            let due = m.due?;
            let wait = due.checked_duration_since(Instant::now())?;
            (m.seen == Some(current)).then_some(wait)
        })
    }

    /// Records what the reconcile saw, and when it is due again.
    fn settle(&self, name: &str, seen: u64, wait: Duration) {
        self.remember(name, |m| {
            m.seen = Some(seen);
            m.due = Some(Instant::now() + wait);
        });
    }

    fn forget(&self, name: &str) {
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        let _ = metrics().pending.remove(&PolicyLabels {
            policy: name.to_owned(),
        });
    }

    /// Forgets the policies that are gone (deleted policies are not reconciled: there is no
    /// finalizer), so their metrics go too.
    fn prune(&self) {
        let live: BTreeSet<String> = self.store.state().iter().map(|p| p.name_any()).collect();
        let gone: Vec<String> = self
            .memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|n| !live.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.forget(&name);
        }
    }

    /// How long to wait for `next`.
    fn delay(&self, next: Next, policy: &ProxyRestartPolicy, now: Timestamp) -> Duration {
        match next {
            Next::Resync => self.opts.resync_interval,
            Next::Warning => self.opts.warning_interval,
            Next::Error => self.opts.error_interval,
            Next::Chunk => crate::schedule::parse_duration(&policy.spec.limits.requeue_after)
                .ok()
                .and_then(|d| Duration::try_from(d).ok())
                .unwrap_or(Duration::from_secs(60)),
            Next::Window(opens) => {
                let cap = SignedDuration::try_from(self.opts.resync_interval)
                    .unwrap_or(SignedDuration::from_hours(10));
                plan::delay_until(opens, now, cap)
                    .try_into()
                    .unwrap_or(self.opts.resync_interval)
            }
        }
    }

    async fn event(
        &self,
        about: &ObjectReference,
        related: Option<&ObjectReference>,
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
        self.ctx
            .kernel
            .writer
            .event_related(about, related, type_, reason, action, note)
            .await;
    }

    /// Reconciles `policy` (see the module docs).
    async fn apply(&self, policy: &ProxyRestartPolicy) -> Result<Action, Error> {
        let now = Timestamp::now();
        let name = policy.name_any();
        let policy_ref = policy.object_ref(&());
        let previous = policy.status.clone().unwrap_or_default();
        if policy.spec.suspend {
            return self.suspended(policy, &previous).await;
        }
        let dry_run = policy.spec.mode == RestartMode::DryRun;
        let applied = previous.applied_configuration.clone().unwrap_or_default();
        let desired = DesiredProxy {
            proxy: policy.spec.proxy.clone(),
            restart_after: policy.spec.restart_after.clone(),
        };
        let hash = plan::proxy_hash(&desired);

        let window = plan::window(policy.spec.maintenance_window.as_ref(), now);
        let open = match &window {
            Ok(w) => *w == Window::Open,
            Err(_) => false,
        };
        let opens = match window {
            Ok(Window::Closed(at)) => at,
            _ => None,
        };

        // 1. The ingress gateway.
        let gateway_desired = policy
            .spec
            .ingress_gateway
            .as_ref()
            .map(|g| GatewaySettings {
                num_trusted_proxies: g.num_trusted_proxies,
                forward_client_cert_details: g.forward_client_cert_details.clone(),
                trust_domain: g.trust_domain.clone(),
                stats_matcher: policy.spec.proxy.stats_matcher.clone(),
            });
        let gateway = match (&policy.spec.ingress_gateway, &gateway_desired, &window) {
            (Some(_), _, Err(e)) => Some(Gateway::Failed(e.clone())),
            (Some(spec), Some(desired), Ok(_)) => Some(
                self.gateway(
                    policy,
                    &policy_ref,
                    spec,
                    desired,
                    applied.ingress_gateway.as_ref(),
                    open,
                    opens,
                    dry_run,
                )
                .await?,
            ),
            _ => None,
        };

        // 2. The sidecars.
        let mut pass = Pass::new(self, policy, &policy_ref, &hash, open, dry_run);
        let sidecars = match &window {
            Err(e) => Err(e.clone()),
            Ok(_) => pass.run(&desired, applied.proxy.as_ref()).await?,
        };
        let pending = pass.chunk.count(TargetState::Pending);
        let sidecars = match sidecars {
            Err(e) => Sidecars::Failed(e),
            Ok(()) if !pass.failures.is_empty() => {
                let mut e = pass
                    .failures
                    .iter()
                    .take(MAX_ERRORS)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ");
                if pass.failures.len() > MAX_ERRORS {
                    let _ = write!(e, " and {} more", pass.failures.len() - MAX_ERRORS);
                }
                Sidecars::Failed(e)
            }
            Ok(()) if pending > 0 && open => Sidecars::Partial { pending },
            Ok(()) if pending > 0 => Sidecars::Waiting { pending, opens },
            Ok(()) => Sidecars::Done,
        };
        let outcome = Outcome {
            sidecars,
            warnings: pass.warnings.clone(),
            ignored: pass.ignored_message(),
            gateway,
            overlap: pass.overlap.as_ref().map(|o| o.message(&name)),
        };
        let mut report = status::report(&outcome);
        let would = dry_run.then(|| {
            let mut all = pass.would.clone();
            if let (Some(Gateway::WouldRestart(change)), Some(spec)) =
                (&outcome.gateway, &policy.spec.ingress_gateway)
            {
                all.push(WouldRestartWorkload {
                    namespace: spec.namespace.clone(),
                    kind: "Deployment".into(),
                    name: spec.name.clone(),
                    reason: format!("ingress gateway: {change}"),
                });
            }
            status::would_restart(all)
        });
        if dry_run {
            let gateway = matches!(outcome.gateway, Some(Gateway::WouldRestart(_)));
            report = status::dry_run(report, pass.would.len(), gateway, pending);
        }
        metrics()
            .pending
            .get_or_create(&PolicyLabels {
                policy: name.clone(),
            })
            .set(i64::try_from(pending).unwrap_or(i64::MAX));

        // 3. The status.
        let summary = RestartSummary {
            pods_evaluated: count(pass.evaluated),
            // In a dry run the chunk admits what would restart; nothing was.
            workloads_restarted: if dry_run {
                0
            } else {
                count(pass.chunk.count(TargetState::Restarted))
            },
            workloads_pending: count(pending),
            warnings: count(pass.warnings.len()),
            excluded: count(pass.excluded),
            already_restarted: count(pass.already),
        };
        let mut applied_next = applied.clone();
        if report.record_proxy {
            applied_next.proxy = Some(desired.clone());
            applied_next.proxy_hash = Some(hash.clone());
        }
        if gateway_desired.is_none() {
            applied_next.ingress_gateway = None;
        } else if report.record_gateway {
            applied_next.ingress_gateway = gateway_desired.clone();
        }
        let overlapping = match &pass.overlap {
            Some(o) => o.names(),
            // The pass failed before it judged the pods: what was known, and the policies
            // that report an overlap with this one.
            None => self.reported_overlaps(&name, &previous.overlapping_policies),
        };
        let generation = policy.metadata.generation;
        let mut conditions_next: Vec<Condition> = previous
            .conditions
            .iter()
            .filter(|c| {
                // Kept as they were: the overlap while it is unknown (the pass failed early).
                c.type_ == status::OVERLAP && outcome.overlap.is_none()
            })
            .cloned()
            .collect();
        if outcome.overlap.is_none() && overlapping != previous.overlapping_policies {
            let message = format!(
                "pods are also selected by other ProxyRestartPolicies: {} (as they report; this policy's last pass did not get to its pods)",
                overlapping.join(", ")
            );
            conditions::set(
                &mut conditions_next,
                conditions::condition(
                    &previous.conditions,
                    status::OVERLAP,
                    true,
                    status::reason::OVERLAP,
                    message,
                    generation,
                ),
            );
        }
        for (type_, ok, reason, message) in &report.conditions {
            conditions::set(
                &mut conditions_next,
                conditions::condition(
                    &previous.conditions,
                    type_,
                    *ok,
                    reason,
                    message.clone(),
                    generation,
                ),
            );
        }
        let next = ProxyRestartPolicyStatus {
            state: Some(report.state.as_str().to_owned()),
            description: Some(report.description.clone()),
            observed_generation: generation,
            applied_configuration: Some(applied_next),
            summary: Some(summary),
            overlapping_policies: overlapping.clone(),
            would_restart: would.clone(),
            conditions: conditions_next,
        };
        // A dry run's result, told once per change rather than at every requeue.
        let would_changed = dry_run
            && (previous.would_restart != next.would_restart
                || previous.summary.as_ref().map(|s| s.workloads_pending)
                    != next.summary.as_ref().map(|s| s.workloads_pending));
        self.write_status(policy, &previous, next).await?;
        if previous.state.as_deref() == Some(status::State::Suspended.as_str()) {
            self.event(
                &policy_ref,
                None,
                false,
                "Resumed",
                "Resume",
                "spec.suspend is false: what is out of date is restarted".into(),
            )
            .await;
        }
        if let (true, Some(w)) = (would_changed, &would) {
            self.event(
                &policy_ref,
                None,
                false,
                "WouldRestart",
                "DryRun",
                would_note(w, pending),
            )
            .await;
        }

        // Events on the policy.
        if !pass.restarted.is_empty() {
            let mut note = format!(
                "restarted {} workload(s) for proxy state {hash}: {}",
                pass.restarted.len(),
                pass.restarted
                    .iter()
                    .take(EVENT_NAMES)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if pass.restarted.len() > EVENT_NAMES {
                let _ = write!(note, " and {} more", pass.restarted.len() - EVENT_NAMES);
            }
            self.event(
                &policy_ref,
                None,
                false,
                "ProxySidecarsRestarted",
                "RestartProxySidecars",
                note,
            )
            .await;
        }
        if !pass.warnings.is_empty() && !dry_run {
            self.event(
                &policy_ref,
                None,
                true,
                status::reason::SIDECARS_MANUAL,
                "RestartProxySidecars",
                plan::warning_message(&pass.warnings),
            )
            .await;
        }
        if pending > 0 && !dry_run {
            let note = if open {
                format!(
                    "{pending} workload(s) left for the next chunk in {} (limits.restartsPerReconcile {})",
                    policy.spec.limits.requeue_after, policy.spec.limits.restarts_per_reconcile
                )
            } else {
                format!(
                    "{pending} workload(s) wait for the maintenance window, which opens next {}",
                    opens.map_or_else(|| "not within a year".to_owned(), |t| format!("at {t:.0}"))
                )
            };
            self.event(
                &policy_ref,
                None,
                false,
                "RestartsPending",
                "RestartProxySidecars",
                note,
            )
            .await;
        }
        if overlapping != previous.overlapping_policies && !overlapping.is_empty() {
            let note = outcome
                .overlap
                .clone()
                .flatten()
                .unwrap_or_else(|| overlapping.join(", "));
            self.event(
                &policy_ref,
                None,
                true,
                "OverlappingPolicies",
                "SelectPods",
                note,
            )
            .await;
        }
        if report.state == status::State::Error {
            self.event(
                &policy_ref,
                None,
                true,
                "RestartFailed",
                "RestartProxySidecars",
                report.description.clone(),
            )
            .await;
        }

        tracing::info!(
            policy = %name,
            state = report.state.as_str(),
            evaluated = pass.evaluated,
            restarted = pass.restarted.len(),
            pending,
            warnings = pass.warnings.len(),
            excluded = pass.excluded,
            already_restarted = pass.already,
            pages = pass.pages,
            "reconciled: {}",
            report.description
        );
        let wait = self.delay(report.next, policy, now);
        self.settle(&name, fingerprint(policy), wait);
        match report.next {
            Next::Error => Err(Error::Failed(report.description)),
            _ => Ok(Action::requeue(wait)),
        }
    }

    /// Step 1: restarts the gateway when its settings changed.
    #[allow(clippy::too_many_arguments)]
    async fn gateway(
        &self,
        policy: &ProxyRestartPolicy,
        policy_ref: &ObjectReference,
        spec: &wasmop_api::proxyrestartpolicy::IngressGatewaySpec,
        desired: &GatewaySettings,
        applied: Option<&GatewaySettings>,
        open: bool,
        opens: Option<Timestamp>,
        dry_run: bool,
    ) -> Result<Gateway, Error> {
        let Some(change) = plan::gateway_change(applied, desired) else {
            return Ok(Gateway::Unchanged);
        };
        if !open {
            return Ok(Gateway::Waiting(opens));
        }
        let owner = Owner {
            kind: OwnerKind::Workload(WorkloadKind::Deployment),
            namespace: spec.namespace.clone(),
            name: spec.name.clone(),
        };
        let marker = Marker::gateway(&plan::gateway_hash(desired), &policy.name_any());
        let owners = Owners::new(self.ctx.kernel.client.clone(), &self.ctx.kernel.writer);
        let inspection = match owners.inspect(&owner, &marker).await {
            Ok(Some(i)) => i,
            Ok(None) => {
                tracing::info!(policy = %policy.name_any(), gateway = %owner, "ingress gateway not found: nothing to restart");
                return Ok(Gateway::NotFound);
            }
            Err(e) => return Ok(Gateway::Failed(format!("cannot read {owner}: {e}"))),
        };
        if inspection.restarted_for {
            return Ok(Gateway::Restarted(change));
        }
        if dry_run {
            return Ok(Gateway::WouldRestart(change));
        }
        match owners.mark(&owner, &marker, inspection).await {
            Ok(Rollout::Restarted) => {
                metrics()
                    .restarts
                    .get_or_create(&KindLabels::new("IngressGateway"))
                    .inc();
                self.event(
                    &owner.object_ref(),
                    Some(policy_ref),
                    false,
                    "IngressGatewayRestarted",
                    "RestartIngressGateway",
                    format!("ProxyRestartPolicy {}: {change}", policy.name_any()),
                )
                .await;
                self.event(
                    policy_ref,
                    None,
                    false,
                    "IngressGatewayRestarted",
                    "RestartIngressGateway",
                    format!("restarted {owner}: {change}"),
                )
                .await;
                Ok(Gateway::Restarted(change))
            }
            Ok(Rollout::AlreadyRestarted) => Ok(Gateway::Restarted(change)),
            Ok(Rollout::NotFound) => Ok(Gateway::NotFound),
            Ok(Rollout::Excluded) => Ok(Gateway::Unchanged),
            Err(WriteError::Passive) => Err(Error::Write(WriteError::Passive)),
            Err(e) => Ok(Gateway::Failed(format!("{owner}: {e}"))),
        }
    }

    /// Reconciles a suspended policy: no pod is listed, nothing evaluated or restarted. The
    /// status keeps what the last pass found and says `Suspended` (`Ready` False /
    /// `Suspended`), written once; one Event on entering suspension.
    async fn suspended(
        &self,
        policy: &ProxyRestartPolicy,
        previous: &ProxyRestartPolicyStatus,
    ) -> Result<Action, Error> {
        let name = policy.name_any();
        let next = status::suspended(previous, policy.metadata.generation);
        self.write_status(policy, previous, next).await?;
        if previous.state.as_deref() != Some(status::State::Suspended.as_str()) {
            self.event(
                &policy.object_ref(&()),
                None,
                false,
                "Suspended",
                "Suspend",
                status::message::SUSPENDED.to_owned(),
            )
            .await;
        }
        tracing::info!(policy = %name, "suspended: nothing evaluated or restarted");
        let wait = self.opts.resync_interval;
        self.settle(&name, fingerprint(policy), wait);
        Ok(Action::requeue(wait))
    }

    /// Writes `next` when it differs from `previous`.
    async fn write_status(
        &self,
        policy: &ProxyRestartPolicy,
        previous: &ProxyRestartPolicyStatus,
        next: ProxyRestartPolicyStatus,
    ) -> Result<(), Error> {
        let ours = |s: &ProxyRestartPolicyStatus| {
            let mut s = s.clone();
            s.conditions
                .retain(|c| status::TYPES.contains(&c.type_.as_str()));
            for c in &mut s.conditions {
                c.last_transition_time =
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
            }
            s.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
            s
        };
        if ours(&next) == ours(previous) {
            return Ok(());
        }
        let api: Api<ProxyRestartPolicy> = Api::all(self.ctx.kernel.client.clone());
        self.ctx
            .kernel
            .writer
            .apply_status(&api, &policy.name_any(), &next)
            .await?;
        Ok(())
    }
}

/// What a reconcile depends on besides the cluster: the generation (the spec), the labels and
/// the annotations (so that annotating a policy reconciles it at once). Status changes are not
/// part of it.
fn fingerprint(policy: &ProxyRestartPolicy) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    policy.metadata.generation.hash(&mut h);
    policy.labels().hash(&mut h);
    policy.annotations().hash(&mut h);
    h.finish()
}

/// The note of a dry run's `WouldRestart` Event: how many restarts, the first
/// [`EVENT_NAMES`] of them, and how many workloads would wait.
fn would_note(w: &wasmop_api::proxyrestartpolicy::WouldRestart, pending: usize) -> String {
    let mut note = format!(
        "dry run: {} restart(s) would be made, nothing is restarted",
        w.count
    );
    if !w.workloads.is_empty() {
        let names: Vec<String> = w
            .workloads
            .iter()
            .take(EVENT_NAMES)
            .map(|x| format!("{} {}/{}", x.kind, x.namespace, x.name))
            .collect();
        let _ = write!(note, ": {}", names.join(", "));
        let more = usize::try_from(w.count)
            .unwrap_or(usize::MAX)
            .saturating_sub(names.len());
        if more > 0 {
            let _ = write!(note, " and {more} more");
        }
    }
    if pending > 0 {
        let _ = write!(
            note,
            "; {pending} workload(s) would wait for the next chunk or the window"
        );
    }
    note
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One sidecar pass over the pods of a policy.
struct Pass<'a> {
    r: &'a Restarter,
    policy: &'a ProxyRestartPolicy,
    policy_ref: &'a ObjectReference,
    name: String,
    hash: String,
    marker: Marker,
    owners: Owners<'a>,
    chunk: Chunk,
    /// Markers put on bare ReplicaSets and ReplicationControllers before deleting their pods.
    pod_sets: HashMap<String, TargetState>,
    evaluated: usize,
    excluded: usize,
    already: usize,
    pages: usize,
    warnings: BTreeSet<String>,
    failures: Vec<String>,
    restarted: Vec<String>,
    ignored: usize,
    ignored_error: Option<String>,
    /// Pods shared with other policies; `None` until every page was seen.
    overlap: Option<Overlap>,
    /// `spec.mode: DryRun`: no workload, pod or set is written; `would` lists what would be.
    dry_run: bool,
    /// What a dry run would restart.
    would: Vec<WouldRestartWorkload>,
}

impl<'a> Pass<'a> {
    fn new(
        r: &'a Restarter,
        policy: &'a ProxyRestartPolicy,
        policy_ref: &'a ObjectReference,
        hash: &str,
        open: bool,
        dry_run: bool,
    ) -> Self {
        let limit = usize::try_from(policy.spec.limits.restarts_per_reconcile.max(1)).unwrap_or(1);
        Self {
            r,
            policy,
            policy_ref,
            name: policy.name_any(),
            hash: hash.to_owned(),
            marker: Marker::sidecars(hash, &policy.name_any()),
            owners: Owners::new(r.ctx.kernel.client.clone(), &r.ctx.kernel.writer),
            chunk: Chunk::new(limit, open),
            pod_sets: HashMap::new(),
            evaluated: 0,
            excluded: 0,
            already: 0,
            pages: 0,
            warnings: BTreeSet::new(),
            failures: Vec::new(),
            restarted: Vec::new(),
            ignored: 0,
            ignored_error: None,
            overlap: None,
            dry_run,
            would: Vec::new(),
        }
    }

    fn ignored_message(&self) -> Option<String> {
        self.ignored_error.as_ref().map(|e| {
            format!(
                "{} pod(s) were not evaluated and are left as they are (failurePolicy Ignore): {e}",
                self.ignored
            )
        })
    }

    /// Pages through the pods. `Ok(Err(e))`: the pass failed (an unreadable list, an
    /// invalid selector, a plugin failure under `failurePolicy: Fail`); `Err`: passive.
    async fn run(
        &mut self,
        desired: &DesiredProxy,
        applied: Option<&DesiredProxy>,
    ) -> Result<Result<(), String>, Error> {
        let me = match Selection::of(self.policy) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        let plugin = match self
            .r
            .ctx
            .plugins
            // Cluster-scoped: an entry restricted to namespaces is not for it.
            .resolve_for(Hook::Restart, self.policy.spec.plugin.as_deref(), None)
        {
            Ok(p) => p,
            Err(e) => return Ok(Err(format!("no restart plugin: {e}"))),
        };
        let failure_policy = plugin.spec().failure_policy;
        let namespaces: HashMap<String, std::collections::BTreeMap<String, String>> =
            match Api::<Namespace>::all(self.r.ctx.kernel.client.clone())
                .list(&ListParams::default())
                .await
            {
                Ok(list) => list
                    .items
                    .into_iter()
                    .map(|ns| (ns.name_any(), ns.metadata.labels.unwrap_or_default()))
                    .collect(),
                Err(e) => return Ok(Err(format!("cannot list namespaces: {e}"))),
            };
        // The other policies, read now rather than from the cache, which may not have seen a
        // deletion yet when that deletion is what triggered this reconcile.
        let mut params = ListParams::default();
        if let Some(selector) = &self.r.ctx.kernel.scope.selector {
            params = params.labels(selector);
        }
        let peers: Vec<Selection> =
            match Api::<ProxyRestartPolicy>::all(self.r.ctx.kernel.client.clone())
                .list(&params)
                .await
            {
                Ok(list) => list
                    .items
                    .iter()
                    .filter(|p| {
                        p.name_any() != self.name && p.metadata.deletion_timestamp.is_none()
                    })
                    .filter_map(|p| Selection::of(p).ok())
                    .collect(),
                Err(e) => return Ok(Err(format!("cannot list ProxyRestartPolicies: {e}"))),
            };
        let desired_json = serde_json::to_string(desired).unwrap_or_else(|_| "{}".into());
        let applied_json = serde_json::to_string(&applied).unwrap_or_else(|_| "null".into());
        let page_size =
            u32::try_from(self.policy.spec.limits.page_size.clamp(1, 500)).unwrap_or(100);
        let mut pager = PodPager::new(
            self.r.ctx.kernel.watched_api::<Pod>(),
            me.pod_selector(),
            page_size,
        );
        let mut overlap = Overlap::default();
        let empty = std::collections::BTreeMap::new();
        loop {
            let page = match pager.next_page().await {
                Ok(Some(page)) => page,
                Ok(None) => break,
                Err(e) => return Ok(Err(format!("cannot list pods: {e}"))),
            };
            self.pages += 1;
            let mut judged: Vec<&Pod> = Vec::with_capacity(page.len());
            for pod in &page {
                let ns = pod.namespace().unwrap_or_default();
                let ns_labels = namespaces.get(&ns).unwrap_or(&empty);
                if !me.selects(ns_labels, pod.labels()) || plan::eligible(pod).is_err() {
                    continue;
                }
                let sharing: Vec<&Selection> = peers
                    .iter()
                    .filter(|p| p.selects(ns_labels, pod.labels()))
                    .collect();
                if !overlap.record(&me, &sharing) {
                    pod_metric("other_policy");
                    continue;
                }
                if plan::excluded(pod.annotations()) {
                    self.excluded += 1;
                    pod_metric("excluded");
                    continue;
                }
                if plan::restarted_for(pod.annotations(), &self.hash) {
                    self.already += 1;
                    pod_metric("already_restarted");
                    continue;
                }
                judged.push(pod);
            }
            if judged.is_empty() {
                continue;
            }
            let pods_json = match page_json(&judged) {
                Ok(j) => j,
                Err(e) => return Ok(Err(format!("cannot encode pods: {e}"))),
            };
            let request = RestartRequest {
                policy: self.name.clone(),
                desired: desired_json.clone(),
                applied: applied_json.clone(),
                pods: pods_json,
            };
            let decisions = match plugin.evaluate(request, judged.len()).await {
                Ok(d) => d,
                Err(e) => {
                    let note = format!("{e}");
                    self.r
                        .event(
                            self.policy_ref,
                            None,
                            true,
                            "PluginFailed",
                            "EvaluatePods",
                            format!("{} pod(s) not evaluated: {note}", judged.len()),
                        )
                        .await;
                    match failure_policy {
                        FailurePolicy::Fail => {
                            return Ok(Err(format!("{note} (failurePolicy Fail)")));
                        }
                        FailurePolicy::Ignore => {
                            tracing::warn!(policy = %self.name, pods = judged.len(), "plugin failed, pods left as they are (failurePolicy Ignore): {note}");
                            self.ignored += judged.len();
                            self.ignored_error = Some(note);
                            for _ in 0..judged.len() {
                                pod_metric("not_evaluated");
                            }
                            continue;
                        }
                    }
                }
            };
            self.evaluated += judged.len();
            for (pod, decision) in judged.iter().zip(decisions) {
                if decision.restart {
                    pod_metric("restart");
                    self.restart(pod, &decision.reason).await?;
                } else {
                    pod_metric("keep");
                }
            }
        }
        self.overlap = Some(overlap);
        tracing::debug!(policy = %self.name, pages = pager.pages(), restarts = pager.restarts(), "paged");
        Ok(Ok(()))
    }

    /// Restarts `pod` through its owner. `Err` only when this instance became passive.
    async fn restart(&mut self, pod: &Pod, reason: &str) -> Result<(), Error> {
        let ns = pod.namespace().unwrap_or_default();
        let owner = |kind, name: &str| Owner {
            kind,
            namespace: ns.clone(),
            name: name.to_owned(),
        };
        match plan::pod_owner(pod) {
            PodOwner::None => self.warn(pod, WarningKind::NoOwner, reason).await,
            PodOwner::Job(_) => self.warn(pod, WarningKind::Job, reason).await,
            PodOwner::Other { kind, .. } => {
                self.warn(pod, WarningKind::Unsupported(kind), reason).await;
            }
            PodOwner::Workload(kind, name) => {
                self.roll_out(pod, owner(OwnerKind::Workload(kind), &name), reason)
                    .await?;
            }
            PodOwner::ReplicationController(name) => {
                let rc = owner(OwnerKind::PodSet(PodSetKind::ReplicationController), &name);
                self.delete(pod, rc, reason).await?;
            }
            PodOwner::ReplicaSet(rs) => match self.owners.replica_set(&ns, &rs).await {
                Err(e) => self
                    .failures
                    .push(format!("cannot read ReplicaSet {ns}/{rs}: {e}")),
                Ok(super::owners::ReplicaSetOwner::Missing) => {
                    self.warn(pod, WarningKind::NoOwner, reason).await;
                }
                Ok(super::owners::ReplicaSetOwner::Deployment(d)) => {
                    self.roll_out(
                        pod,
                        owner(OwnerKind::Workload(WorkloadKind::Deployment), &d),
                        reason,
                    )
                    .await?;
                }
                Ok(super::owners::ReplicaSetOwner::Unowned) => {
                    let set = owner(OwnerKind::PodSet(PodSetKind::ReplicaSet), &rs);
                    self.delete(pod, set, reason).await?;
                }
                Ok(super::owners::ReplicaSetOwner::Other(kind)) => {
                    self.warn(pod, WarningKind::Unsupported(kind), reason).await;
                }
            },
        }
        Ok(())
    }

    /// Counts a pod of a target already seen in this reconcile.
    fn count_again(&mut self, state: TargetState) {
        match state {
            TargetState::Excluded => self.excluded += 1,
            TargetState::AlreadyRestarted => self.already += 1,
            _ => {}
        }
    }

    /// Reads `owner` for a restart: `Ok(None)` when it settles without one (gone, excluded,
    /// restarted for this change already).
    async fn inspect(&mut self, pod: &Pod, owner: &Owner, reason: &str) -> Option<Inspection> {
        let key = owner.key();
        match self.owners.inspect(owner, &self.marker).await {
            Err(e) => {
                self.failures.push(format!("cannot read {owner}: {e}"));
                self.chunk.settle(&key, TargetState::Failed);
                None
            }
            Ok(None) => {
                self.chunk.settle(&key, TargetState::Warned);
                self.warn(pod, WarningKind::NoOwner, reason).await;
                None
            }
            Ok(Some(i)) if i.excluded => {
                self.chunk.settle(&key, TargetState::Excluded);
                self.excluded += 1;
                None
            }
            Ok(Some(i)) if i.restarted_for => {
                self.chunk.settle(&key, TargetState::AlreadyRestarted);
                self.already += 1;
                None
            }
            Ok(Some(i)) => Some(i),
        }
    }

    /// Rolls out workload `owner` once per reconcile, within the chunk.
    async fn roll_out(&mut self, pod: &Pod, owner: Owner, reason: &str) -> Result<(), Error> {
        let key = owner.key();
        if let Some(state) = self.chunk.state(&key) {
            self.count_again(state);
            return Ok(());
        }
        let Some(inspection) = self.inspect(pod, &owner, reason).await else {
            return Ok(());
        };
        if self.chunk.admit(&key) == Admission::Pending {
            return Ok(());
        }
        if self.dry_run {
            self.would_restart(owner.kind.as_str(), &owner.namespace, &owner.name, reason);
            return Ok(());
        }
        match self.owners.mark(&owner, &self.marker, inspection).await {
            Ok(Rollout::Restarted) => {
                if let OwnerKind::Workload(k) = owner.kind {
                    metrics()
                        .restarts
                        .get_or_create(&KindLabels::new(k.as_str()))
                        .inc();
                }
                self.restarted.push(owner.to_string());
                self.r
                    .event(
                        &owner.object_ref(),
                        Some(self.policy_ref),
                        false,
                        "ProxySidecarRestarted",
                        "RestartProxySidecars",
                        format!(
                            "ProxyRestartPolicy {}: rolled out for pod {}: {reason}",
                            self.name,
                            pod.name_any()
                        ),
                    )
                    .await;
            }
            Ok(Rollout::AlreadyRestarted) => {
                self.chunk.settle(&key, TargetState::AlreadyRestarted);
                self.already += 1;
            }
            Ok(Rollout::Excluded) => {
                self.chunk.settle(&key, TargetState::Excluded);
                self.excluded += 1;
            }
            Ok(Rollout::NotFound) => {
                self.chunk.settle(&key, TargetState::Warned);
                self.warn(pod, WarningKind::NoOwner, reason).await;
            }
            Err(WriteError::Passive) => return Err(Error::Write(WriteError::Passive)),
            Err(e) => self.restart_failed(&owner, &key, &e).await,
        }
        Ok(())
    }

    async fn restart_failed(&mut self, owner: &Owner, key: &str, e: &WriteError) {
        self.chunk.failed(key);
        self.failures.push(format!("cannot restart {owner}: {e}"));
        self.r
            .event(
                &owner.object_ref(),
                Some(self.policy_ref),
                true,
                "ProxySidecarRestartFailed",
                "RestartProxySidecars",
                format!("ProxyRestartPolicy {}: {e}", self.name),
            )
            .await;
    }

    /// Deletes `pod` of the bare ReplicaSet or ReplicationController `set`, after marking the
    /// set's template so that the pods it re-creates are known to be restarted.
    async fn delete(&mut self, pod: &Pod, set: Owner, reason: &str) -> Result<(), Error> {
        let set_key = set.key();
        let state = match self.pod_sets.get(&set_key) {
            Some(s) => *s,
            None => {
                let state = match self.owners.inspect(&set, &self.marker).await {
                    Err(e) => {
                        self.failures.push(format!("cannot read {set}: {e}"));
                        TargetState::Failed
                    }
                    Ok(None) => TargetState::Warned,
                    Ok(Some(i)) if i.excluded => TargetState::Excluded,
                    Ok(Some(i)) if i.restarted_for => TargetState::AlreadyRestarted,
                    // Nothing is restarted outside the window, or in a dry run; the marker
                    // waits too.
                    Ok(Some(_)) if !self.chunk.is_open() || self.dry_run => TargetState::Pending,
                    Ok(Some(i)) => match self.owners.mark(&set, &self.marker, i).await {
                        Ok(Rollout::Restarted | Rollout::AlreadyRestarted) => {
                            TargetState::AlreadyRestarted
                        }
                        Ok(Rollout::Excluded) => TargetState::Excluded,
                        Ok(Rollout::NotFound) => TargetState::Warned,
                        Err(WriteError::Passive) => {
                            return Err(Error::Write(WriteError::Passive));
                        }
                        Err(e) => {
                            self.failures.push(format!("cannot mark {set}: {e}"));
                            TargetState::Failed
                        }
                    },
                };
                self.pod_sets.insert(set_key, state);
                state
            }
        };
        match state {
            TargetState::Excluded => {
                self.excluded += 1;
                return Ok(());
            }
            TargetState::Warned => {
                self.warn(pod, WarningKind::NoOwner, reason).await;
                return Ok(());
            }
            TargetState::Failed => return Ok(()),
            _ => {}
        }
        let key = format!(
            "Pod/{}/{}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        );
        if self.chunk.state(&key).is_some() || self.chunk.admit(&key) == Admission::Pending {
            return Ok(());
        }
        if self.dry_run {
            let ns = pod.namespace().unwrap_or_default();
            self.would_restart("Pod", &ns, &pod.name_any(), reason);
            return Ok(());
        }
        match self
            .owners
            .delete_pod(&pod.namespace().unwrap_or_default(), &pod.name_any())
            .await
        {
            Ok(_) => {
                metrics()
                    .restarts
                    .get_or_create(&KindLabels::new("Pod"))
                    .inc();
                self.restarted.push(format!(
                    "Pod {}/{}",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any()
                ));
                self.r
                    .event(
                        &set.object_ref(),
                        Some(self.policy_ref),
                        false,
                        "ProxySidecarRestarted",
                        "DeletePod",
                        format!(
                            "ProxyRestartPolicy {}: deleted pod {} for {set} to re-create: {reason}",
                            self.name,
                            pod.name_any()
                        ),
                    )
                    .await;
            }
            Err(WriteError::Passive) => return Err(Error::Write(WriteError::Passive)),
            Err(e) => self.restart_failed(&set, &key, &e).await,
        }
        Ok(())
    }

    /// Records that a dry run would restart `kind` `namespace/name`, because of `reason`.
    fn would_restart(&mut self, kind: &str, namespace: &str, name: &str, reason: &str) {
        self.would.push(WouldRestartWorkload {
            namespace: namespace.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            reason: reason.to_owned(),
        });
    }

    /// Records that `pod` needs a manual restart, with a Warning Event on the pod (not in a
    /// dry run, whose status lists them).
    async fn warn(&mut self, pod: &Pod, kind: WarningKind, reason: &str) {
        let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        if !self.warnings.insert(name) || self.dry_run {
            return;
        }
        metrics()
            .warnings
            .get_or_create(&WarningLabels {
                reason: kind.label().into(),
            })
            .inc();
        self.r
            .event(
                &pod_ref(pod),
                Some(self.policy_ref),
                true,
                status::reason::SIDECARS_MANUAL,
                "RestartProxySidecars",
                format!("{} Restart it by hand ({reason})", kind.text()),
            )
            .await;
    }
}

async fn reconcile(policy: Arc<ProxyRestartPolicy>, r: Arc<Restarter>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&policy, &r).await;
    wasmop_kernel::metrics::reconcile(
        CONTROLLER,
        started.elapsed(),
        result.as_ref().err().map_or("ok", Error::metric_label),
    );
    result
}

async fn reconcile_inner(policy: &ProxyRestartPolicy, r: &Restarter) -> Result<Action, Error> {
    let name = policy.name_any();
    if !r.ctx.kernel.gate().is_active() {
        tracing::debug!(policy = %name, "passive: nothing restarted or written; reconciled again once promoted");
        return Ok(Action::requeue(r.opts.resync_interval));
    }
    if policy.metadata.deletion_timestamp.is_some() {
        r.forget(&name);
        return Ok(Action::await_change());
    }
    r.prune();
    if let Some(wait) = r.echo(policy) {
        tracing::trace!(policy = %name, "own status write: nothing to do before the requeue");
        return Ok(Action::requeue(wait));
    }
    r.apply(policy).await
}

fn error_policy(policy: Arc<ProxyRestartPolicy>, e: &Error, r: Arc<Restarter>) -> Action {
    if e.is_passive() {
        tracing::debug!(policy = %policy.name_any(), "passive: requeued");
        return Action::requeue(r.opts.resync_interval);
    }
    tracing::warn!(policy = %policy.name_any(), "reconcile failed, retrying in {:?}: {e}", r.opts.error_interval);
    Action::requeue(r.opts.error_interval)
}

/// The policies to reconcile when `changed` changes: those it overlaps with, on both sides,
/// so that an overlap appears and disappears on both (deletions included).
fn overlapping(
    store: &Store<ProxyRestartPolicy>,
    changed: &ProxyRestartPolicy,
) -> Vec<ObjectRef<ProxyRestartPolicy>> {
    let name = changed.name_any();
    let listed = |p: &ProxyRestartPolicy| -> Vec<String> {
        p.status
            .as_ref()
            .map(|s| s.overlapping_policies.clone())
            .unwrap_or_default()
    };
    let mine = listed(changed);
    store
        .state()
        .iter()
        .filter(|p| p.name_any() != name)
        .filter(|p| mine.contains(&p.name_any()) || listed(p).contains(&name))
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Runs the controller until it ends.
///
/// # Errors
/// The ProxyRestartPolicy API is not served (CRDs not installed), or the controller ends.
pub async fn run(ctx: Arc<Context>, opts: Options) -> anyhow::Result<()> {
    let api: Api<ProxyRestartPolicy> = Api::all(ctx.kernel.client.clone());
    api.list(&ListParams::default().limit(1)).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot list ProxyRestartPolicies ({e}); install the CRDs: kubectl apply --server-side -f crds/"
        )
    })?;
    let _ = metrics();
    let controller = Controller::new(api.clone(), ctx.kernel.cr_watcher_config())
        .with_config(Config::default().concurrency(2));
    let store = controller.store();
    let restarter = Arc::new(Restarter::new(ctx.clone(), opts, store.clone()));
    let (mapper_store, mapper_restarter) = (store.clone(), restarter.clone());
    let (promoted, reloaded) = (restarter.clone(), restarter.clone());
    // A new plugin (or a fixed one) judges every policy's pods again.
    let reloads = futures::stream::unfold(ctx.plugins.reloads(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
    .map(move |()| reloaded.poke_all());
    let controller = controller
        .watches(
            api,
            ctx.kernel.cr_watcher_config(),
            move |p: ProxyRestartPolicy| {
                let refs = overlapping(&mapper_store, &p);
                for r in &refs {
                    mapper_restarter.poke(&r.name);
                }
                refs
            },
        )
        .reconcile_all_on(
            ctx.kernel
                .gate()
                .promotions_of(Ready::of_store(&store))
                .map(move |()| promoted.poke_all()),
        )
        .reconcile_all_on(reloads)
        .run(reconcile, error_policy, restarter.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!("restart controller: {e}");
            }
        });
    tracing::info!(
        resync = ?restarter.opts.resync_interval,
        watch_namespace = ctx.kernel.scope.watch_namespace.as_deref().unwrap_or("(all)"),
        "restart controller started"
    );
    controller.await;
    anyhow::bail!("the ProxyRestartPolicy controller ended")
}

fn pod_metric(outcome: &str) {
    metrics()
        .pods
        .get_or_create(&OutcomeLabels {
            outcome: outcome.into(),
        })
        .inc();
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

impl KindLabels {
    fn new(kind: &str) -> Self {
        Self { kind: kind.into() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WarningLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
}

struct Metrics {
    restarts: Family<KindLabels, Counter>,
    warnings: Family<WarningLabels, Counter>,
    pods: Family<OutcomeLabels, Counter>,
    pending: Family<PolicyLabels, Gauge>,
}

/// The restart metrics (registered on first use):
/// `wasmop_restart_restarts_total{kind=Deployment|DaemonSet|StatefulSet|Pod|IngressGateway}`,
/// `wasmop_restart_warnings_total{reason=no_owner|job|unsupported_owner}`,
/// `wasmop_restart_pods_total{outcome=restart|keep|excluded|already_restarted|other_policy|not_evaluated}`,
/// `wasmop_restart_pending_workloads{policy}`.
fn metrics() -> &'static Metrics {
    static M: LazyLock<Metrics> = LazyLock::new(|| {
        let m = Metrics {
            restarts: Family::default(),
            warnings: Family::default(),
            pods: Family::default(),
            pending: Family::default(),
        };
        wasmop_kernel::metrics::register(
            "restart_restarts",
            "Restarts made by ProxyRestartPolicies: workload rollouts, pod deletions, gateway rollouts",
            m.restarts.clone(),
        );
        wasmop_kernel::metrics::register(
            "restart_warnings",
            "Pods that need a manual restart, by reason",
            m.warnings.clone(),
        );
        wasmop_kernel::metrics::register(
            "restart_pods",
            "Eligible pods seen by ProxyRestartPolicies, by outcome",
            m.pods.clone(),
        );
        wasmop_kernel::metrics::register(
            "restart_pending_workloads",
            "Workloads a ProxyRestartPolicy left for its next chunk or maintenance window",
            m.pending.clone(),
        );
        m
    });
    &M
}

#[cfg(test)]
mod tests {
    use super::*;

    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn unreachable_context() -> Arc<Context> {
        crate::test_support::unreachable_context()
    }

    fn policy(name: &str, overlapping: &[&str]) -> ProxyRestartPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "ProxyRestartPolicy",
            "metadata": {"name": name, "resourceVersion": "1", "generation": 1},
            "spec": {},
            "status": {"overlappingPolicies": overlapping},
        }))
        .unwrap()
    }

    fn store_of(policies: &[ProxyRestartPolicy]) -> Store<ProxyRestartPolicy> {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Init);
        for p in policies {
            writer.apply_watcher_event(&Event::InitApply(p.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        store
    }

    #[test]
    fn both_sides_of_an_overlap_are_reconciled() {
        let store = store_of(&[policy("a", &["b"]), policy("b", &["a"]), policy("c", &[])]);
        let names = |refs: Vec<ObjectRef<ProxyRestartPolicy>>| -> Vec<String> {
            refs.into_iter().map(|r| r.name).collect()
        };
        assert_eq!(names(overlapping(&store, &policy("a", &["b"]))), ["b"]);
        // A new policy that found a (not yet reciprocated) overlap with c.
        assert_eq!(names(overlapping(&store, &policy("d", &["c"]))), ["c"]);
        // A deleted policy no longer listing anyone: those that list it are reconciled.
        assert_eq!(names(overlapping(&store, &policy("a", &[]))), ["b"]);
        assert!(overlapping(&store, &policy("c", &[])).is_empty());
    }

    #[tokio::test]
    async fn a_passive_instance_sends_nothing_and_requeues() {
        let ctx = unreachable_context();
        let r = Restarter::new(ctx.clone(), Options::default(), store_of(&[]));
        assert!(
            !ctx.kernel.gate().is_active(),
            "the operator starts passive"
        );
        let p = policy("a", &[]);
        let action = reconcile_inner(&p, &r).await.unwrap();
        assert_eq!(action, Action::requeue(r.opts.resync_interval));
        assert!(r.memory.lock().unwrap().is_empty(), "nothing was attempted");

        // Once active, the same reconcile goes to the API server (here: fails to reach it) and
        // the failure ends in the Error state, whose status write fails too.
        ctx.kernel.gate().set_active(true);
        let e = reconcile_inner(&p, &r).await.unwrap_err();
        assert!(matches!(e, Error::Write(WriteError::Kube(_))), "{e}");
    }

    #[tokio::test]
    async fn status_changes_are_skipped_until_the_requeue_is_due() {
        let ctx = unreachable_context();
        let r = Restarter::new(ctx, Options::default(), store_of(&[]));
        let mut p = policy("a", &[]);
        let minute = Duration::from_secs(60);
        assert_eq!(r.echo(&p), None, "never reconciled");
        r.settle("a", fingerprint(&p), minute);
        assert!(r.echo(&p).is_some_and(|w| w <= minute));
        // A status change (this controller's own write, PluginReady) is no reason.
        p.metadata.resource_version = Some("2".into());
        p.status.as_mut().unwrap().state = Some("Ready".into());
        assert!(r.echo(&p).is_some());
        // Another poked it (an overlapping policy changed, a promotion): one full reconcile.
        r.poke("a");
        assert_eq!(r.echo(&p), None);
        assert!(r.echo(&p).is_some(), "the poke is taken");
        r.poke_all();
        assert_eq!(r.echo(&p), None);
        // A poke while a reconcile runs survives its end.
        r.poke("a");
        r.settle("a", fingerprint(&p), minute);
        assert_eq!(r.echo(&p), None);
        // A new generation, label or annotation is a real change.
        for change in [
            |p: &mut ProxyRestartPolicy| p.metadata.generation = Some(2),
            |p: &mut ProxyRestartPolicy| {
                p.labels_mut().insert("x".into(), "y".into());
            },
            |p: &mut ProxyRestartPolicy| {
                p.annotations_mut().insert("x".into(), "y".into());
            },
        ] {
            let mut changed = p.clone();
            r.settle("a", fingerprint(&p), minute);
            change(&mut changed);
            assert_eq!(r.echo(&changed), None);
        }
        // The requeue itself is never skipped.
        r.settle("a", fingerprint(&p), Duration::ZERO);
        assert_eq!(r.echo(&p), None);
    }

    #[tokio::test]
    async fn chunk_delay_comes_from_the_spec() {
        let ctx = unreachable_context();
        let r = Restarter::new(ctx, Options::default(), store_of(&[]));
        let mut p = policy("a", &[]);
        let now = Timestamp::now();
        p.spec.limits.requeue_after = "2s".into();
        assert_eq!(r.delay(Next::Chunk, &p, now), Duration::from_secs(2));
        assert_eq!(r.delay(Next::Resync, &p, now), Duration::from_secs(36000));
        assert_eq!(r.delay(Next::Warning, &p, now), Duration::from_secs(3600));
        assert_eq!(r.delay(Next::Error, &p, now), Duration::from_secs(30));
        let soon = now + SignedDuration::from_secs(90);
        let d = r.delay(Next::Window(Some(soon)), &p, now);
        assert!(
            d <= Duration::from_secs(90) && d >= Duration::from_secs(89),
            "{d:?}"
        );
    }
}
