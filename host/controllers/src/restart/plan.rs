//! The pure part of a restart reconcile: which listed pods go to the plugin, what a restart
//! decision turns into (a rollout, a pod deletion or a warning), how restarts are counted
//! against the chunk limit, the gateway rule, the maintenance window and the hashes that mark
//! what was applied. No I/O; every rule is unit-tested here.
//!
//! The rules follow the Kyma Istio Operator's restarter (docs/restart.md) unless a
//! comment says where this project departs from it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use sha2::{Digest, Sha256};

use super::annotations::{
    EXCLUDE_ANNOTATION, RESTART_CONFIG_ANNOTATION, SIDECAR_STATUS_ANNOTATION,
};
use crate::schedule::{last_start, parse_duration};
use wasmop_api::proxyrestartpolicy::{
    DesiredProxy, GatewaySettings, MaintenanceWindow, ProxyRestartPolicy, StatsMatcher,
};

/// Warning of a pod without owner (upstream's text).
pub(crate) const NO_OWNER_WARNING: &str =
    "pod sidecar could not be updated because OwnerReferences was not found.";
/// Warning of a pod owned by a Job (upstream's text).
pub(crate) const JOB_WARNING: &str =
    "pod sidecar could not be updated because it is owned by a Job.";
/// Prefix of the warning list (upstream's text).
pub(crate) const WARNING_LIST_PREFIX: &str =
    "The sidecars of the following workloads could not be restarted: ";
/// How many workloads the warning list names before summing up the rest (as upstream).
pub(crate) const WARNING_LIST_NAMED: usize = 5;

// ---------------------------------------------------------------------------------------------
// Selection

/// The pods a policy selects, compiled for matching: its namespace and pod selectors, and its
/// age (the oldest of overlapping policies restarts the pods they share).
#[derive(Clone, Debug)]
pub(crate) struct Selection {
    /// The policy's name.
    pub name: String,
    /// `metadata.creationTimestamp` (the epoch when unknown).
    pub created: Timestamp,
    namespaces: Selector,
    pods: Selector,
}

impl Selection {
    /// The selection of `policy`.
    ///
    /// # Errors
    /// A selector with an operator Kubernetes does not know, naming the field.
    pub fn of(policy: &ProxyRestartPolicy) -> Result<Self, String> {
        let compile = |field: &str, s: &Option<LabelSelector>| -> Result<Selector, String> {
            match s {
                None => Ok(Selector::default()),
                Some(s) => Selector::try_from(s.clone()).map_err(|e| format!("{field}: {e}")),
            }
        };
        Ok(Self {
            name: policy.name_any(),
            created: policy
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            namespaces: compile("namespaceSelector", &policy.spec.namespace_selector)?,
            pods: compile("podSelector", &policy.spec.pod_selector)?,
        })
    }

    /// The pod selector, for the list request (the API server filters by it).
    pub fn pod_selector(&self) -> &Selector {
        &self.pods
    }

    /// Whether a namespace with `labels` is selected.
    pub(crate) fn selects_namespace(&self, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.matches(labels)
    }

    /// Whether a pod with `labels` in a namespace with `namespace_labels` is selected.
    pub fn selects(
        &self,
        namespace_labels: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        self.selects_namespace(namespace_labels) && self.pods.matches(labels)
    }

    /// Whether this policy is older than `other` (creation time, then name): the older one
    /// restarts the pods both select.
    pub(crate) fn older_than(&self, other: &Selection) -> bool {
        (self.created, &self.name) < (other.created, &other.name)
    }
}

/// Pods shared with other policies, gathered while paging.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Overlap {
    /// The other policies, by name, with how many pods each shares.
    pub peers: BTreeMap<String, usize>,
    /// Pods left to an older policy.
    pub left_to_older: usize,
}

impl Overlap {
    /// Records that a pod is also selected by `peers` (the policies other than `me` that select
    /// it); returns whether `me` restarts it (it is the oldest of them).
    pub fn record(&mut self, me: &Selection, peers: &[&Selection]) -> bool {
        for p in peers {
            *self.peers.entry(p.name.clone()).or_default() += 1;
        }
        let mine = peers.iter().all(|p| me.older_than(p));
        if !mine {
            self.left_to_older += 1;
        }
        mine
    }

    /// The names of the other policies, sorted.
    pub fn names(&self) -> Vec<String> {
        self.peers.keys().cloned().collect()
    }

    /// The `OverlappingPolicies` condition message, or `None` without overlap.
    pub fn message(&self, me: &str) -> Option<String> {
        if self.peers.is_empty() {
            return None;
        }
        let shared = self
            .peers
            .iter()
            .map(|(name, n)| format!("{name} ({n} pod(s))"))
            .collect::<Vec<_>>()
            .join(", ");
        let who = if self.left_to_older == 0 {
            format!("{me} is the oldest and restarts them")
        } else {
            format!("{} pod(s) are left to an older policy", self.left_to_older)
        };
        Some(format!(
            "pods are also selected by other ProxyRestartPolicies: {shared}; {who}"
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Which pods go to the plugin

/// Why a listed pod is not eligible (upstream: Running, not deleting, every condition True,
/// annotated `sidecar.istio.io/status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// `status.phase` is not `Running`.
    NotRunning,
    /// It is being deleted.
    Deleting,
    /// A condition is not `True`.
    ConditionNotTrue(String),
    /// No `sidecar.istio.io/status` annotation: no injected sidecar.
    NotInjected,
}

/// Whether `pod` is eligible for a restart decision.
///
/// # Errors
/// The first reason it is not.
pub fn eligible(pod: &Pod) -> Result<(), Ineligible> {
    let status = pod.status.as_ref();
    if status.and_then(|s| s.phase.as_deref()) != Some("Running") {
        return Err(Ineligible::NotRunning);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Err(Ineligible::Deleting);
    }
    if let Some(c) = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.status != "True")
    {
        return Err(Ineligible::ConditionNotTrue(c.type_.clone()));
    }
    if !pod.annotations().contains_key(SIDECAR_STATUS_ANNOTATION) {
        return Err(Ineligible::NotInjected);
    }
    Ok(())
}

/// Whether annotations carry `wasmop.dev/restart-exclude: "true"`.
pub fn excluded(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(EXCLUDE_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Whether annotations (of a pod or a pod template) say it was restarted for the desired state
/// of hash `hash`.
pub(crate) fn restarted_for(annotations: &BTreeMap<String, String>, hash: &str) -> bool {
    annotations
        .get(RESTART_CONFIG_ANNOTATION)
        .is_some_and(|v| v == hash)
}

// ---------------------------------------------------------------------------------------------
// What a restart decision turns into

/// A workload kind rolled out by a pod-template annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` DaemonSet.
    DaemonSet,
    /// `apps/v1` StatefulSet.
    StatefulSet,
}

impl WorkloadKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }

    /// The kind named `kind` of API group `apps`, if it is one.
    pub(crate) fn from_owner(api_version: &str, kind: &str) -> Option<Self> {
        if api_version != "apps/v1" {
            return None;
        }
        match kind {
            "Deployment" => Some(Self::Deployment),
            "DaemonSet" => Some(Self::DaemonSet),
            "StatefulSet" => Some(Self::StatefulSet),
            _ => None,
        }
    }
}

/// The kinds whose pods are deleted (and re-created by them) rather than rolled out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodSetKind {
    /// A ReplicaSet without a controller of its own.
    ReplicaSet,
    /// A ReplicationController.
    ReplicationController,
}

impl PodSetKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PodSetKind::ReplicaSet => "ReplicaSet",
            PodSetKind::ReplicationController => "ReplicationController",
        }
    }
}

/// A pod's owner as its `ownerReferences` tell (the controller reference, else the first, as
/// upstream uses `ownerReferences[0]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PodOwner {
    /// No owner reference.
    None,
    /// A Job (`batch/v1`).
    Job(String),
    /// A ReplicaSet: its own owner decides (a Deployment, or none).
    ReplicaSet(String),
    /// A ReplicationController.
    ReplicationController(String),
    /// A Deployment, DaemonSet or StatefulSet.
    Workload(WorkloadKind, String),
    /// Any other kind.
    Other {
        /// `apiVersion` of the owner.
        api_version: String,
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
}

/// The reference that controls an object: the one with `controller: true`, else the first.
pub(crate) fn controller_ref(refs: &[OwnerReference]) -> Option<&OwnerReference> {
    refs.iter()
        .find(|r| r.controller == Some(true))
        .or_else(|| refs.first())
}

/// The owner of `pod`.
pub(crate) fn pod_owner(pod: &Pod) -> PodOwner {
    let Some(r) = controller_ref(pod.owner_references()) else {
        return PodOwner::None;
    };
    let name = r.name.clone();
    match (r.api_version.as_str(), r.kind.as_str()) {
        ("batch/v1", "Job") => PodOwner::Job(name),
        ("apps/v1", "ReplicaSet") => PodOwner::ReplicaSet(name),
        ("v1", "ReplicationController") => PodOwner::ReplicationController(name),
        (api, kind) => match WorkloadKind::from_owner(api, kind) {
            Some(k) => PodOwner::Workload(k, name),
            None => PodOwner::Other {
                api_version: api.to_owned(),
                kind: kind.to_owned(),
                name,
            },
        },
    }
}

/// Why a pod that must restart needs a manual restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WarningKind {
    /// No owner, or its owner is gone.
    NoOwner,
    /// Owned by a Job.
    Job,
    /// Owned by a kind that cannot be rolled out.
    Unsupported(String),
}

impl WarningKind {
    /// The warning text (upstream's for a missing owner and for Jobs).
    pub fn text(&self) -> String {
        match self {
            WarningKind::NoOwner => NO_OWNER_WARNING.to_owned(),
            WarningKind::Job => JOB_WARNING.to_owned(),
            WarningKind::Unsupported(kind) => format!(
                "pod sidecar could not be updated because its owner kind {kind} is not supported for rollout."
            ),
        }
    }

    /// A stable label for metrics: `no_owner`, `job` or `unsupported_owner`.
    pub fn label(&self) -> &'static str {
        match self {
            WarningKind::NoOwner => "no_owner",
            WarningKind::Job => "job",
            WarningKind::Unsupported(_) => "unsupported_owner",
        }
    }
}

/// The warning list of the `ProxySidecarManualRestartRequired` condition (upstream's text):
/// `The sidecars of the following workloads could not be restarted: ns/a, ns/b` naming the
/// first [`WARNING_LIST_NAMED`] of `names` (sorted), then ` and N additional workload(s)`.
pub(crate) fn warning_message(names: &BTreeSet<String>) -> String {
    let named: Vec<&str> = names
        .iter()
        .take(WARNING_LIST_NAMED)
        .map(String::as_str)
        .collect();
    let mut text = format!("{WARNING_LIST_PREFIX}{}", named.join(", "));
    if names.len() > WARNING_LIST_NAMED {
        text.push_str(&format!(
            " and {} additional workload(s)",
            names.len() - WARNING_LIST_NAMED
        ));
    }
    text
}

// ---------------------------------------------------------------------------------------------
// Counting restarts

/// What became of a restart target (a workload, or one pod of a ReplicaSet or
/// ReplicationController) in this reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TargetState {
    /// Restarted by this reconcile.
    Restarted,
    /// Its pod template already carries the desired state's hash: restarted for this change
    /// earlier (its old pods are still going away).
    AlreadyRestarted,
    /// It carries the exclude annotation.
    Excluded,
    /// Over the chunk limit (or outside the window): left to a later reconcile.
    Pending,
    /// It needs a manual restart.
    Warned,
    /// The restart failed.
    Failed,
}

/// What the caller does with a target the first time it is seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Restart it now.
    Go,
    /// The chunk is full (or the window closed): it waits.
    Pending,
}

/// The restarts of one reconcile: each target is acted on once (one patch per workload per
/// reconcile, however many of its pods must restart), at most `limit` restarts, and the pods
/// of every target counted for the summary.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    limit: usize,
    open: bool,
    restarts: usize,
    targets: HashMap<String, TargetState>,
}

impl Chunk {
    /// A chunk of at most `limit` restarts; `open` is false outside the maintenance window
    /// (nothing is restarted).
    pub fn new(limit: usize, open: bool) -> Self {
        Self {
            limit,
            open,
            restarts: 0,
            targets: HashMap::new(),
        }
    }

    /// Whether restarts may happen at all (inside the maintenance window).
    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// The state of target `key`, if it was seen.
    pub fn state(&self, key: &str) -> Option<TargetState> {
        self.targets.get(key).copied()
    }

    /// Records the state of a target that needs no restart slot (excluded, already restarted,
    /// warned). A target admitted with `Go` that settles so was not written (a conflict re-read
    /// it as already restarted, say): its slot goes back, since only a written restart spends
    /// one.
    pub fn settle(&mut self, key: &str, state: TargetState) {
        let before = self.targets.insert(key.to_owned(), state);
        if before == Some(TargetState::Restarted) && state != TargetState::Restarted {
            self.restarts -= 1;
        }
    }

    /// A restart slot for the new target `key`: `Go` while the window is open and the limit is
    /// not reached (the target is then counted as restarted), else `Pending`.
    pub fn admit(&mut self, key: &str) -> Admission {
        if self.open && self.restarts < self.limit {
            self.restarts += 1;
            self.targets.insert(key.to_owned(), TargetState::Restarted);
            Admission::Go
        } else {
            self.targets.insert(key.to_owned(), TargetState::Pending);
            Admission::Pending
        }
    }

    /// Marks target `key`, admitted with `Go`, as failed (its slot stays used).
    pub fn failed(&mut self, key: &str) {
        self.targets.insert(key.to_owned(), TargetState::Failed);
    }

    /// How many targets are in `state`.
    pub fn count(&self, state: TargetState) -> usize {
        self.targets.values().filter(|s| **s == state).count()
    }
}

// ---------------------------------------------------------------------------------------------
// Hashes and the gateway rule

/// The first 16 hex digits of the SHA-256 of `value`'s JSON.
fn hash_json<T: serde::Serialize>(value: &T) -> String {
    let json = serde_json::to_vec(value).unwrap_or_default();
    hex::encode(Sha256::digest(&json))[..16].to_owned()
}

/// The hash of a desired proxy state: the `wasmop.dev/restart-config` annotation put on the
/// pod templates of the workloads restarted for it.
pub fn proxy_hash(desired: &DesiredProxy) -> String {
    hash_json(desired)
}

/// The hash of gateway settings, put on the gateway's pod template when it is restarted.
pub(crate) fn gateway_hash(settings: &GatewaySettings) -> String {
    hash_json(settings)
}

/// The sorted, deduplicated inclusion regexps (absent = empty), as the plugin compares them.
fn regexps(m: Option<&StatsMatcher>) -> Vec<&str> {
    let mut list: Vec<&str> = m
        .and_then(|m| m.inclusion_regexps.as_ref())
        .map(|v| v.iter().map(String::as_str).collect())
        .unwrap_or_default();
    list.sort_unstable();
    list.dedup();
    list
}

/// What changed between the applied and the desired gateway settings (upstream's
/// `RequiresIngressGatewayRestart`: nil-aware diffs of numTrustedProxies,
/// forwardClientCertDetails, trustDomain and the stats matcher), or `None`. Nothing has changed
/// before the first application (`applied` is `None`): the gateway is not restarted for a new
/// policy.
pub fn gateway_change(
    applied: Option<&GatewaySettings>,
    desired: &GatewaySettings,
) -> Option<String> {
    let applied = applied?;
    fn show<T: std::fmt::Debug>(v: &Option<T>) -> String {
        v.as_ref()
            .map_or_else(|| "unset".to_owned(), |v| format!("{v:?}"))
    }
    let mut changes = Vec::new();
    if applied.num_trusted_proxies != desired.num_trusted_proxies {
        changes.push(format!(
            "numTrustedProxies changed from {} to {}",
            show(&applied.num_trusted_proxies),
            show(&desired.num_trusted_proxies)
        ));
    }
    if applied.forward_client_cert_details != desired.forward_client_cert_details {
        changes.push(format!(
            "forwardClientCertDetails changed from {} to {}",
            show(&applied.forward_client_cert_details),
            show(&desired.forward_client_cert_details)
        ));
    }
    if applied.trust_domain != desired.trust_domain {
        changes.push(format!(
            "trustDomain changed from {} to {}",
            show(&applied.trust_domain),
            show(&desired.trust_domain)
        ));
    }
    let (was, now) = (
        regexps(applied.stats_matcher.as_ref()),
        regexps(desired.stats_matcher.as_ref()),
    );
    if was != now {
        changes.push(format!(
            "statsMatcher.inclusionRegexps changed from {was:?} to {now:?}"
        ));
    }
    (!changes.is_empty()).then(|| changes.join("; "))
}

// ---------------------------------------------------------------------------------------------
// The maintenance window

/// Whether restarts may happen now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// No window, or inside it.
    Open,
    /// Outside it; it opens next at this time (`None` if not within a year).
    Closed(Option<Timestamp>),
}

/// The state of `window` at `now`: open when the latest start (`schedule`, five-field cron in
/// UTC) at or before now, plus `duration`, is after now.
///
/// # Errors
/// An invalid schedule or duration, described with its field.
pub fn window(window: Option<&MaintenanceWindow>, now: Timestamp) -> Result<Window, String> {
    let Some(w) = window else {
        return Ok(Window::Open);
    };
    let length =
        parse_duration(&w.duration).map_err(|e| format!("maintenanceWindow.duration: {e}"))?;
    let start =
        last_start(&w.schedule, now).map_err(|e| format!("maintenanceWindow.schedule: {e}"))?;
    if start.is_some_and(|s| now < s + length) {
        return Ok(Window::Open);
    }
    next_start(&w.schedule, now)
        .map(Window::Closed)
        .map_err(|e| format!("maintenanceWindow.schedule: {e}"))
}

/// The first time after `now` that the five-field cron `schedule` (UTC) fires, looking ahead
/// at most 366 days.
fn next_start(schedule: &str, now: Timestamp) -> Result<Option<Timestamp>, String> {
    use std::str::FromStr as _;
    let cron = croner::Cron::from_str(schedule).map_err(|e| format!("{schedule:?}: {e}"))?;
    let now_chrono = chrono::DateTime::<chrono::Utc>::from_timestamp(now.as_second(), 0)
        .ok_or_else(|| format!("time {now} is out of range"))?;
    let latest = now_chrono + chrono::Duration::days(366);
    match cron.find_next_occurrence(&now_chrono, false) {
        Ok(t) if t <= latest => Timestamp::from_second(t.timestamp())
            .map(Some)
            .map_err(|e| format!("{schedule:?}: {e}")),
        Ok(_) | Err(croner::errors::CronError::TimeSearchLimitExceeded) => Ok(None),
        Err(e) => Err(format!("{schedule:?}: {e}")),
    }
}

/// The delay until `at`, at least one second and at most `cap`.
pub(crate) fn delay_until(
    at: Option<Timestamp>,
    now: Timestamp,
    cap: SignedDuration,
) -> SignedDuration {
    at.map_or(cap, |at| at.duration_since(now))
        .clamp(SignedDuration::from_secs(1), cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn running_pod() -> Pod {
        pod(json!({
            "metadata": {"name": "p", "namespace": "ns",
                         "annotations": {SIDECAR_STATUS_ANNOTATION: "{}"}},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"}]}
        }))
    }

    fn policy(name: &str, created: &str, spec: serde_json::Value) -> ProxyRestartPolicy {
        serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "ProxyRestartPolicy",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": spec,
        }))
        .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn running_ready_injected_pods_are_eligible() {
        assert_eq!(eligible(&running_pod()), Ok(()));
    }

    #[test]
    fn ineligible_pods_say_why() {
        let mut p = running_pod();
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        assert_eq!(eligible(&p), Err(Ineligible::NotRunning));

        let mut p = running_pod();
        p.status = None;
        assert_eq!(eligible(&p), Err(Ineligible::NotRunning));

        let mut p = running_pod();
        p.metadata.deletion_timestamp = Some(Time(ts("2026-01-01T00:00:00Z")));
        assert_eq!(eligible(&p), Err(Ineligible::Deleting));

        let mut p = running_pod();
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![
                PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                },
                PodCondition {
                    type_: "ContainersReady".into(),
                    status: "False".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        assert_eq!(
            eligible(&p),
            Err(Ineligible::ConditionNotTrue("ContainersReady".into()))
        );

        let mut p = running_pod();
        p.metadata.annotations = None;
        assert_eq!(eligible(&p), Err(Ineligible::NotInjected));
    }

    #[test]
    fn exclude_annotation_must_say_true() {
        assert!(excluded(&labels(&[(EXCLUDE_ANNOTATION, "true")])));
        assert!(excluded(&labels(&[(EXCLUDE_ANNOTATION, "True")])));
        assert!(!excluded(&labels(&[(EXCLUDE_ANNOTATION, "false")])));
        assert!(!excluded(&labels(&[(EXCLUDE_ANNOTATION, "yes")])));
        assert!(!excluded(&labels(&[])));
    }

    #[test]
    fn restarted_for_compares_the_hash() {
        let a = labels(&[(RESTART_CONFIG_ANNOTATION, "abc")]);
        assert!(restarted_for(&a, "abc"));
        assert!(!restarted_for(&a, "abd"));
        assert!(!restarted_for(&labels(&[]), "abc"));
    }

    #[test]
    fn owners_by_controller_reference() {
        let with = |refs: serde_json::Value| {
            pod_owner(&pod(
                json!({"metadata": {"name": "p", "ownerReferences": refs}}),
            ))
        };
        assert_eq!(pod_owner(&running_pod()), PodOwner::None);
        assert_eq!(with(json!([])), PodOwner::None);
        let r = |api: &str, kind: &str, name: &str, controller: bool| json!({"apiVersion": api, "kind": kind, "name": name, "uid": "u", "controller": controller});
        assert_eq!(
            with(json!([r("batch/v1", "Job", "j", true)])),
            PodOwner::Job("j".into())
        );
        assert_eq!(
            with(json!([r("apps/v1", "ReplicaSet", "rs", true)])),
            PodOwner::ReplicaSet("rs".into())
        );
        assert_eq!(
            with(json!([r("v1", "ReplicationController", "rc", true)])),
            PodOwner::ReplicationController("rc".into())
        );
        assert_eq!(
            with(json!([r("apps/v1", "StatefulSet", "s", true)])),
            PodOwner::Workload(WorkloadKind::StatefulSet, "s".into())
        );
        assert_eq!(
            with(json!([r("apps/v1", "DaemonSet", "d", true)])),
            PodOwner::Workload(WorkloadKind::DaemonSet, "d".into())
        );
        // The controller reference wins over the first one.
        assert_eq!(
            with(json!([
                r("v1", "ConfigMap", "cm", false),
                r("apps/v1", "StatefulSet", "s", true)
            ])),
            PodOwner::Workload(WorkloadKind::StatefulSet, "s".into())
        );
        // Without a controller reference, the first (upstream's ownerReferences[0]).
        assert_eq!(
            with(json!([
                r("batch/v1", "Job", "j", false),
                r("apps/v1", "StatefulSet", "s", false)
            ])),
            PodOwner::Job("j".into())
        );
        assert_eq!(
            with(json!([r("argoproj.io/v1alpha1", "Rollout", "ro", true)])),
            PodOwner::Other {
                api_version: "argoproj.io/v1alpha1".into(),
                kind: "Rollout".into(),
                name: "ro".into()
            }
        );
        // A kind of the right name in another group is not the apps/v1 one.
        assert!(matches!(
            with(json!([r("example.com/v1", "Deployment", "x", true)])),
            PodOwner::Other { .. }
        ));
    }

    #[test]
    fn warning_texts_are_upstreams() {
        assert_eq!(
            WarningKind::NoOwner.text(),
            "pod sidecar could not be updated because OwnerReferences was not found."
        );
        assert_eq!(
            WarningKind::Job.text(),
            "pod sidecar could not be updated because it is owned by a Job."
        );
        assert!(
            WarningKind::Unsupported("Rollout".into())
                .text()
                .contains("owner kind Rollout is not supported")
        );
    }

    #[test]
    fn warning_list_names_five_then_counts() {
        let names = |n: usize| -> BTreeSet<String> { (0..n).map(|i| format!("ns/w{i}")).collect() };
        assert_eq!(
            warning_message(&names(1)),
            "The sidecars of the following workloads could not be restarted: ns/w0"
        );
        assert_eq!(
            warning_message(&names(5)),
            "The sidecars of the following workloads could not be restarted: ns/w0, ns/w1, ns/w2, ns/w3, ns/w4"
        );
        assert_eq!(
            warning_message(&names(7)),
            "The sidecars of the following workloads could not be restarted: ns/w0, ns/w1, ns/w2, ns/w3, ns/w4 and 2 additional workload(s)"
        );
        // Sorted, whatever the order of discovery.
        let set: BTreeSet<String> = ["b/x".to_owned(), "a/y".to_owned()].into();
        assert_eq!(
            warning_message(&set),
            "The sidecars of the following workloads could not be restarted: a/y, b/x"
        );
    }

    #[test]
    fn chunk_restarts_each_target_once_up_to_the_limit() {
        let mut c = Chunk::new(2, true);
        assert_eq!(c.state("Deployment/ns/a"), None);
        assert_eq!(c.admit("Deployment/ns/a"), Admission::Go);
        assert_eq!(c.state("Deployment/ns/a"), Some(TargetState::Restarted));
        c.settle("Deployment/ns/b", TargetState::AlreadyRestarted);
        c.settle("Deployment/ns/x", TargetState::Excluded);
        assert_eq!(c.admit("Deployment/ns/c"), Admission::Go);
        assert_eq!(c.admit("Deployment/ns/d"), Admission::Pending);
        assert_eq!(c.admit("Deployment/ns/e"), Admission::Pending);
        assert_eq!(c.count(TargetState::Restarted), 2);
        assert_eq!(c.count(TargetState::Pending), 2);
        assert_eq!(c.count(TargetState::AlreadyRestarted), 1);
        assert_eq!(c.count(TargetState::Excluded), 1);
        c.failed("Deployment/ns/c");
        assert_eq!(c.count(TargetState::Restarted), 1);
        assert_eq!(c.count(TargetState::Failed), 1);
        // The failed one keeps its slot: still full.
        assert_eq!(c.admit("Deployment/ns/f"), Admission::Pending);
    }

    /// A slot is spent only by a restart that was written: an admitted target that turns out
    /// already restarted, excluded or ownerless gives its slot back.
    #[test]
    fn an_admitted_target_that_was_not_written_gives_its_slot_back() {
        let mut c = Chunk::new(1, true);
        assert_eq!(c.admit("Deployment/ns/a"), Admission::Go);
        c.settle("Deployment/ns/a", TargetState::AlreadyRestarted);
        assert_eq!(c.admit("Deployment/ns/b"), Admission::Go);
        c.settle("Deployment/ns/b", TargetState::Excluded);
        assert_eq!(c.admit("Deployment/ns/c"), Admission::Go);
        assert_eq!(
            c.admit("Deployment/ns/d"),
            Admission::Pending,
            "c spent the only slot"
        );
        assert_eq!(c.count(TargetState::Restarted), 1);
        assert_eq!(c.count(TargetState::AlreadyRestarted), 1);
    }

    #[test]
    fn closed_chunk_restarts_nothing() {
        let mut c = Chunk::new(30, false);
        assert!(!c.is_open());
        assert_eq!(c.admit("Deployment/ns/a"), Admission::Pending);
        assert_eq!(c.count(TargetState::Restarted), 0);
    }

    #[test]
    fn selections_match_namespace_and_pod_labels() {
        let p = policy(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"namespaceSelector": {"matchLabels": {"mesh": "on"}},
                   "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}}),
        );
        let s = Selection::of(&p).unwrap();
        let on = labels(&[("mesh", "on")]);
        assert!(s.selects(&on, &labels(&[("tier", "web")])));
        assert!(!s.selects(&on, &labels(&[("tier", "db")])));
        assert!(!s.selects(&labels(&[]), &labels(&[("tier", "web")])));
        assert_eq!(s.pod_selector().to_string(), "tier in (api,web)");
        let all = Selection::of(&policy("b", "2026-01-01T00:00:00Z", json!({}))).unwrap();
        assert!(all.selects(&labels(&[]), &labels(&[])));
        let bad = policy(
            "c",
            "2026-01-01T00:00:00Z",
            json!({"podSelector": {"matchExpressions": [{"key": "x", "operator": "Near"}]}}),
        );
        assert!(
            Selection::of(&bad)
                .unwrap_err()
                .starts_with("podSelector: ")
        );
    }

    #[test]
    fn the_oldest_policy_restarts_shared_pods() {
        let old = Selection::of(&policy("old", "2026-01-01T00:00:00Z", json!({}))).unwrap();
        let young = Selection::of(&policy("young", "2026-02-01T00:00:00Z", json!({}))).unwrap();
        let twin = Selection::of(&policy("twin", "2026-02-01T00:00:00Z", json!({}))).unwrap();
        assert!(old.older_than(&young));
        assert!(!young.older_than(&old));
        assert!(twin.older_than(&young), "same age: the name decides");

        let mut o = Overlap::default();
        assert!(o.record(&old, &[&young]));
        assert!(o.record(&old, &[]));
        assert_eq!(o.names(), ["young"]);
        assert_eq!(o.left_to_older, 0);
        assert!(o.message("old").unwrap().contains("old is the oldest"));

        let mut y = Overlap::default();
        assert!(!y.record(&young, &[&old]));
        assert!(!y.record(&young, &[&old, &twin]));
        assert_eq!(y.names(), ["old", "twin"]);
        assert_eq!(y.peers["old"], 2);
        assert_eq!(y.left_to_older, 2);
        assert!(
            y.message("young")
                .unwrap()
                .contains("2 pod(s) are left to an older policy")
        );
        assert_eq!(Overlap::default().message("x"), None);
    }

    #[test]
    fn gateway_restarts_on_a_change_of_its_settings_only_after_the_first_application() {
        let desired = GatewaySettings {
            num_trusted_proxies: Some(2),
            ..Default::default()
        };
        assert_eq!(gateway_change(None, &desired), None, "first application");
        assert_eq!(gateway_change(Some(&desired), &desired), None);
        let was = GatewaySettings {
            num_trusted_proxies: Some(1),
            ..Default::default()
        };
        assert_eq!(
            gateway_change(Some(&was), &desired).unwrap(),
            "numTrustedProxies changed from 1 to 2"
        );
        // nil-aware: unset differs from a value.
        let unset = GatewaySettings::default();
        assert!(gateway_change(Some(&unset), &desired).is_some());
        let fccd = GatewaySettings {
            forward_client_cert_details: Some("SANITIZE".into()),
            ..desired.clone()
        };
        assert!(
            gateway_change(Some(&desired), &fccd)
                .unwrap()
                .contains("forwardClientCertDetails")
        );
        let td = GatewaySettings {
            trust_domain: Some("example.org".into()),
            ..desired.clone()
        };
        assert!(
            gateway_change(Some(&desired), &td)
                .unwrap()
                .contains("trustDomain")
        );
    }

    #[test]
    fn gateway_stats_matcher_compares_sorted_lists_and_nil_as_empty() {
        let with = |v: Option<Vec<&str>>| GatewaySettings {
            stats_matcher: Some(StatsMatcher {
                inclusion_regexps: v.map(|v| v.into_iter().map(String::from).collect()),
            }),
            ..Default::default()
        };
        let none = GatewaySettings::default();
        assert_eq!(gateway_change(Some(&none), &with(Some(vec![]))), None);
        assert_eq!(gateway_change(Some(&with(None)), &none), None);
        assert_eq!(
            gateway_change(
                Some(&with(Some(vec!["b", "a"]))),
                &with(Some(vec!["a", "b", "a"]))
            ),
            None
        );
        assert!(
            gateway_change(Some(&with(Some(vec!["a"]))), &with(Some(vec!["a", "b"])))
                .unwrap()
                .contains("statsMatcher")
        );
    }

    #[test]
    fn hashes_follow_the_desired_state() {
        let a = DesiredProxy::default();
        let mut b = a.clone();
        assert_eq!(proxy_hash(&a), proxy_hash(&b));
        assert_eq!(proxy_hash(&a).len(), 16);
        b.proxy.image = Some("proxy:2".into());
        assert_ne!(proxy_hash(&a), proxy_hash(&b));
        let mut c = b.clone();
        c.restart_after = Some("2026-01-01T00:00:00Z".into());
        assert_ne!(proxy_hash(&b), proxy_hash(&c));
        let g = GatewaySettings::default();
        let h = GatewaySettings {
            trust_domain: Some("x".into()),
            ..Default::default()
        };
        assert_ne!(gateway_hash(&g), gateway_hash(&h));
    }

    fn mw(schedule: &str, duration: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            schedule: schedule.into(),
            duration: duration.into(),
        }
    }

    #[test]
    fn maintenance_window_opens_at_the_schedule_for_its_duration() {
        let w = mw("0 2 * * *", "2h");
        assert_eq!(window(None, ts("2026-03-01T12:00:00Z")), Ok(Window::Open));
        assert_eq!(
            window(Some(&w), ts("2026-03-01T02:00:00Z")),
            Ok(Window::Open)
        );
        assert_eq!(
            window(Some(&w), ts("2026-03-01T03:59:59Z")),
            Ok(Window::Open)
        );
        assert_eq!(
            window(Some(&w), ts("2026-03-01T04:00:00Z")),
            Ok(Window::Closed(Some(ts("2026-03-02T02:00:00Z"))))
        );
        assert_eq!(
            window(Some(&w), ts("2026-03-01T01:59:00Z")),
            Ok(Window::Closed(Some(ts("2026-03-01T02:00:00Z"))))
        );
    }

    #[test]
    fn invalid_windows_name_the_field() {
        let now = ts("2026-03-01T12:00:00Z");
        assert!(
            window(Some(&mw("0 2 * * *", "soon")), now)
                .unwrap_err()
                .starts_with("maintenanceWindow.duration")
        );
        assert!(
            window(Some(&mw("99 2 * * *", "1h")), now)
                .unwrap_err()
                .starts_with("maintenanceWindow.schedule")
        );
    }

    #[test]
    fn delays_are_clamped() {
        let now = ts("2026-03-01T12:00:00Z");
        let cap = SignedDuration::from_hours(1);
        assert_eq!(
            delay_until(Some(ts("2026-03-01T12:10:00Z")), now, cap),
            SignedDuration::from_mins(10)
        );
        assert_eq!(delay_until(Some(ts("2026-03-05T00:00:00Z")), now, cap), cap);
        assert_eq!(delay_until(None, now, cap), cap);
        assert_eq!(
            delay_until(Some(ts("2026-03-01T11:00:00Z")), now, cap),
            SignedDuration::from_secs(1)
        );
    }
}
