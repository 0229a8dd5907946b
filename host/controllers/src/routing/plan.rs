//! `plan(snapshot, router) -> Plan`: the routing pipeline from the objects read to the objects
//! to write, pure apart from the router calls (docs/routing.md), shaped inputs → IR → output.
//! The controller and `wasmop plan` run this same function.
//!
//! For each DynamicEnv of the snapshot, in order, and each subset then each consumer:
//!
//! 1. **Base Deployment** `namespace/name`; missing: error `couldn't find the deployment we
//!    need to override ...`, and whatever was made for the entry earlier is kept as it is.
//! 2. **Clone** ([`super::clone`]), applied when its digest differs from the existing clone's
//!    (`initializing` when created, `updating` when changed).
//! 3. Subsets only. **Service hosts**: the Services of the namespace whose non-empty selector
//!    matches the base's pod labels, by name. A Service with an empty selector selects nothing
//!    here (upstream counted it as matching every Deployment).
//! 4. **DestinationRule per host**: a base DestinationRule of the namespace for the host with a
//!    subset whose version label is the default version; the clone's rule copies its host,
//!    `trafficPolicy` and `exportTo` and has one subset (the version), with the base subset's
//!    `trafficPolicy` (upstream dropped both policies). No base rule:
//!    `ignored-missing-destination-rule`, and no route is written for that host (a route to a
//!    subset no rule defines would fail the requests it matches).
//! 5. **VirtualServices per host**, cluster-wide: those whose `hosts` name the Service
//!    (short names in the VirtualService's namespace only) and their delegates. For every
//!    (VirtualService, subset, host) with a DestinationRule the router is called with the
//!    VirtualService as the previous calls left it, so a VirtualService serving several hosts
//!    of one Deployment gets routes for each (upstream: the first only). The router must leave
//!    every route not named with its prefix as it was, in order; an answer that does not is an
//!    error. So removing the routes named with a DynamicEnv's prefixes restores a
//!    VirtualService exactly. A router that refines another's answer (`after:`) is called
//!    after it on what it answered, and its answer is checked the same way (`run_chain`).
//! 6. **Garbage**: objects annotated as made by the DynamicEnv that the plan no longer wants,
//!    and routes named with its token that no call produced, are removed; subsets that left
//!    the spec show `removing` until their objects are gone.
//! 7. **Status**: as docs/routing.md, computed from what the writes will
//!    leave; errors are recomputed every time, so they disappear once fixed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hasher};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource as _, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use super::answer;
use super::clone::{self, CloneSpec, status};
use super::ir::{self, Ir, RouteCallRecord};
use super::istio::{self, DestinationRule, VirtualService};
use super::names;
use super::router::{self, Answers, Router, chain_identity};
use super::snapshot::Snapshot;
use wasmop_api::dynamicenv::{
    ConsumerStatus, DynamicEnv, DynamicEnvStatus, ResourceStatus, StatusError, Subset,
    SubsetErrors, SubsetStatus,
};
use wasmop_plugin_host::{
    FailurePolicy, HeaderMatch, IstioMatch, Label, RouteRequest, StringMatch,
};

/// Settings of the plan (flags of `wasmop run` and `wasmop plan`), as upstream's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanConfig {
    /// The pod label that tells versions apart (`--version-label`, default `version`).
    pub version_label: String,
    /// The version of the base workloads when a subset names none (`--default-version`,
    /// default `shared`).
    pub default_version: String,
    /// Labels of the base Deployment not copied to its clones (`--remove-labels`).
    pub remove_labels: BTreeSet<String>,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            version_label: "version".into(),
            default_version: "shared".into(),
            remove_labels: BTreeSet::new(),
        }
    }
}

/// The result of [`plan`]: the IR, the writes in the order the controller makes them
/// (applies, route updates, deletes), and the status of every DynamicEnv.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// Every resource read, made or looked for, with its errors.
    pub ir: Ir,
    /// The writes that bring the cluster to the plan.
    #[serde(rename = "objects")]
    pub writes: Vec<Write>,
    /// The status of each DynamicEnv (`namespace/name`) once the writes are made.
    pub status: BTreeMap<String, DynamicEnvStatus>,
    /// The router calls of each VirtualService the plan rewrites, to redo them on a newer
    /// copy of the VirtualService at write time.
    #[serde(skip)]
    pub chains: BTreeMap<String, Chain>,
    /// What each DynamicEnv (`namespace/name`) read, for the controller's watches.
    #[serde(skip)]
    pub interest: BTreeMap<String, Interest>,
    /// The router calls that failed, in the order of the IR, for the controller's Events and
    /// metrics.
    #[serde(skip)]
    pub failures: Vec<RouterFailure>,
}

/// A router call that failed (the call, or a refining router's part of it under
/// `failurePolicy: Ignore`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterFailure {
    /// IR key of the VirtualService.
    pub virtual_service: String,
    /// The registry name of the router that failed.
    pub plugin: String,
    /// The policy that applied: its `failurePolicy`, or `Fail` for an invalid answer.
    pub policy: FailurePolicy,
    /// What happened and what was done instead, for a Warning Event: the VirtualService's key
    /// and the error, and under `Ignore` what was kept.
    pub note: String,
}

/// Whether an applied object is new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    /// It does not exist yet.
    Created,
    /// It exists and differs.
    Updated,
}

/// One write of the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Write {
    /// Server-side apply of a clone Deployment or a DestinationRule.
    #[serde(rename_all = "camelCase")]
    Apply {
        /// IR key of the object.
        key: String,
        /// Created or updated.
        change: Change,
        /// `namespace/name` of the DynamicEnv it is for.
        dynamic_env: String,
        /// The object (apiVersion, kind, metadata, spec).
        object: Value,
    },
    /// New `spec.http` of a VirtualService, written only if it still is `expected`.
    #[serde(rename_all = "camelCase")]
    Routes {
        /// IR key of the VirtualService.
        key: String,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Names of the routes added (or rewritten).
        added: Vec<String>,
        /// Names of the routes removed (or rewritten).
        removed: Vec<String>,
        /// The VirtualService the plan was made from.
        #[serde(skip)]
        base: Arc<VirtualService>,
        /// The new `spec.http`.
        http: Vec<Value>,
    },
    /// Deletion of an object wasmop made that is no longer wanted.
    #[serde(rename_all = "camelCase")]
    Delete {
        /// IR key.
        key: String,
        /// `Deployment` or `DestinationRule`.
        kind: String,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// `namespace/name` of the DynamicEnv that made it.
        dynamic_env: String,
    },
}

impl Write {
    /// The IR key of the object written.
    pub fn key(&self) -> &str {
        match self {
            Write::Apply { key, .. } | Write::Routes { key, .. } | Write::Delete { key, .. } => key,
        }
    }
}

/// Which routes of a VirtualService the host removes before the router calls: those named
/// with one of `tokens` (a planned DynamicEnv's) but with none of `keep`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Strip {
    /// Route tokens of the DynamicEnvs planned.
    pub tokens: Arc<BTreeSet<String>>,
    /// Prefixes kept: the calls' route prefixes and the tokens of subsets kept as they were.
    pub keep: Vec<String>,
}

impl Strip {
    /// Whether the route named `name` is removed.
    pub fn drops(&self, name: &str) -> bool {
        names::token_of_route(name).is_some_and(|t| self.tokens.contains(t))
            && !self.keep.iter().any(|k| name.starts_with(k.as_str()))
    }
}

/// One router call: one subset, one service host, on the VirtualService of its chain.
#[derive(Clone, Debug)]
pub struct RouteCall {
    /// IR key of the subset.
    pub subset: String,
    /// The request, without the VirtualService (filled in when called).
    pub request: RouteRequest,
}

/// The router calls on one VirtualService, in order.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    /// Routes removed first.
    pub strip: Strip,
    /// The calls.
    pub calls: Vec<RouteCall>,
}

/// What one call did.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// The router answered; `routes` of the new list are named with the call's prefix.
    Routed {
        /// Routes named with the prefix.
        routes: usize,
        /// Routes to the default version without a copy for every istioMatch
        /// ([`answer::uncopied`]).
        skipped: Vec<String>,
        /// The routers whose answers made the routes, in call order (those the router builds
        /// on first).
        decided_by: Vec<String>,
        /// Refining routers whose call failed under `failurePolicy: Ignore`, with the error:
        /// the answer before them stands.
        ignored: Vec<(String, String)>,
    },
    /// A router of the chain failed; the VirtualService is left as the previous call left it.
    Failed {
        /// The router that failed.
        plugin: String,
        /// The error.
        message: String,
        /// The failure policy that applies (`Fail` for an invalid answer).
        policy: FailurePolicy,
    },
}

/// What a DynamicEnv's plan read, for the controller's watches: the fingerprint of every
/// object it depends on (`None`: looked for and absent), the namespaces of its entries and its
/// service hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// The DynamicEnv's route token.
    pub token: String,
    /// Namespaces of its subsets and consumers.
    pub namespaces: BTreeSet<String>,
    /// Deployments it clones, as `(namespace, name)`.
    pub bases: BTreeSet<(String, String)>,
    /// Service hosts of its subsets, as `(namespace, service)`.
    pub hosts: BTreeSet<(String, String)>,
    /// Pod labels of its subsets' bases, as `(namespace, labels)`: a Service selecting them
    /// becomes a host.
    pub pod_labels: Vec<(String, BTreeMap<String, String>)>,
    /// IR key → fingerprint (see the `fingerprint_*` functions).
    pub objects: BTreeMap<String, Option<u64>>,
}

fn hash_of(parts: &[&dyn erased::HashJson]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash_json(&mut h);
    }
    h.finish()
}

/// Hashes a JSON value by walking it (cheaper than printing it).
fn hash_value(v: &Value, h: &mut DefaultHasher) {
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            h.write_u8(u8::from(*b));
        }
        Value::Number(n) => {
            h.write_u8(2);
            h.write(n.to_string().as_bytes());
        }
        Value::String(s) => {
            h.write_u8(3);
            h.write(s.as_bytes());
            h.write_u8(0xff);
        }
        Value::Array(a) => {
            h.write_u8(4);
            h.write_usize(a.len());
            for x in a {
                hash_value(x, h);
            }
        }
        Value::Object(m) => {
            h.write_u8(5);
            h.write_usize(m.len());
            for (k, x) in m {
                h.write(k.as_bytes());
                h.write_u8(0xff);
                hash_value(x, h);
            }
        }
    }
}

mod erased {
    use std::hash::{DefaultHasher, Hash};

    /// Hashes a value through its JSON text.
    pub(crate) trait HashJson {
        fn hash_json(&self, h: &mut DefaultHasher);
    }

    impl<T: serde::Serialize> HashJson for T {
        fn hash_json(&self, h: &mut DefaultHasher) {
            serde_json::to_string(self).unwrap_or_default().hash(h);
        }
    }
}

/// Fingerprint of a base Deployment: what a clone is built from (generation and labels).
pub(crate) fn fingerprint_base(d: &Deployment) -> u64 {
    hash_of(&[&d.metadata.generation, &d.metadata.labels, &d.spec])
}

/// Fingerprint of a Service: its selector.
pub(crate) fn fingerprint_service(s: &Service) -> u64 {
    hash_of(&[&s.spec.as_ref().and_then(|s| s.selector.as_ref())])
}

/// Fingerprint of a DestinationRule: its spec and annotations.
pub(crate) fn fingerprint_destination_rule(d: &DestinationRule) -> u64 {
    hash_of(&[
        &d.spec,
        &clone::applied_hash(&d.metadata),
        &clone::owner(&d.metadata),
    ])
}

/// Fingerprint of a VirtualService for the DynamicEnv with route token `token`: its hosts,
/// the routes no DynamicEnv owns, and the routes named with `token`. Routes other DynamicEnvs
/// add or remove do not change it.
pub(crate) fn fingerprint_virtual_service(token: &str, hosts: &[String], http: &[Value]) -> u64 {
    let mut h = DefaultHasher::new();
    for host in hosts {
        h.write(host.as_bytes());
        h.write_u8(0xff);
    }
    for r in http {
        match istio::route_name(r) {
            Some(n) if n.starts_with(token) => {
                h.write_u8(1);
                hash_value(r, &mut h);
            }
            Some(n) if names::is_dynamic_env_route(n) => {}
            _ => {
                h.write_u8(2);
                hash_value(r, &mut h);
            }
        }
    }
    h.finish()
}

type NsName<'a> = (&'a str, &'a str);

/// The snapshot indexed for lookups.
struct Index<'a> {
    deployments: HashMap<NsName<'a>, &'a Deployment>,
    services: HashMap<&'a str, Vec<&'a Service>>,
    /// `(namespace, service)` → DestinationRules of that namespace for that host, by name.
    dr_by_service: HashMap<(String, String), Vec<&'a DestinationRule>>,
    destination_rules_by_name: HashMap<NsName<'a>, &'a DestinationRule>,
    /// `<namespace>/<name>` of a DynamicEnv → the objects it made: (kind, metadata).
    owned: HashMap<&'a str, Vec<(&'static str, &'a ObjectMeta)>>,
    virtual_services: BTreeMap<NsName<'a>, &'a Arc<VirtualService>>,
    /// `(namespace, service)` → VirtualServices whose hosts name it.
    vs_by_service: HashMap<(String, String), Vec<NsName<'a>>>,
}

fn ns_name(meta: &ObjectMeta) -> NsName<'_> {
    (
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or_default(),
    )
}

impl<'a> Index<'a> {
    fn new(s: &'a Snapshot) -> Self {
        let mut services: HashMap<&str, Vec<&Service>> = HashMap::new();
        for svc in &s.services {
            services
                .entry(ns_name(&svc.metadata).0)
                .or_default()
                .push(svc);
        }
        for list in services.values_mut() {
            list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        }
        let mut dr_by_service: HashMap<(String, String), Vec<&DestinationRule>> = HashMap::new();
        for dr in &s.destination_rules {
            let ns = ns_name(&dr.metadata).0;
            if let Some(svc) = istio::service_of_host(&dr.spec.host, ns)
                && svc.0 == ns
            {
                dr_by_service.entry(svc).or_default().push(dr);
            }
        }
        for list in dr_by_service.values_mut() {
            list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        }
        let mut owned: HashMap<&str, Vec<(&'static str, &ObjectMeta)>> = HashMap::new();
        let made = s
            .deployments
            .iter()
            .map(|d| ("Deployment", &d.metadata))
            .chain(
                s.destination_rules
                    .iter()
                    .map(|d| ("DestinationRule", &d.metadata)),
            );
        for (kind, meta) in made {
            if let Some(owner) = clone::owner(meta) {
                owned.entry(owner).or_default().push((kind, meta));
            }
        }
        let mut vs_by_service: HashMap<(String, String), Vec<NsName<'a>>> = HashMap::new();
        let mut virtual_services = BTreeMap::new();
        for vs in &s.virtual_services {
            let id = ns_name(&vs.metadata);
            virtual_services.insert(id, vs);
            let mut seen = BTreeSet::new();
            for host in &vs.spec.hosts {
                if let Some(svc) = istio::service_of_host(host, id.0)
                    && seen.insert(svc.clone())
                {
                    vs_by_service.entry(svc).or_default().push(id);
                }
            }
        }
        for list in vs_by_service.values_mut() {
            list.sort();
        }
        Self {
            deployments: s
                .deployments
                .iter()
                .map(|d| (ns_name(&d.metadata), d.as_ref()))
                .collect(),
            services,
            dr_by_service,
            owned,
            destination_rules_by_name: s
                .destination_rules
                .iter()
                .map(|d| (ns_name(&d.metadata), d.as_ref()))
                .collect(),
            virtual_services,
            vs_by_service,
        }
    }
}

/// How one VirtualService serves one entry's host.
#[derive(Clone, Debug)]
struct VsUse {
    ns: String,
    name: String,
    /// A root whose routes only delegate: listed only if it gets routes itself.
    delegating_root: bool,
    /// (chain key, call index) when called.
    call: Option<(String, usize)>,
}

/// The plan of one subset or consumer, before the router calls are made.
#[derive(Clone, Debug, Default)]
struct EntryPlan {
    consumer: bool,
    key: String,
    ir_key: String,
    clone_name: String,
    clone_ns: String,
    clone_status: String,
    hash: i64,
    errors: Errors,
    destination_rules: Vec<ResourceStatus>,
    uses: Vec<VsUse>,
    dr_active_hosts: usize,
    /// Whether the entry has service hosts and got to the VirtualService step.
    routed_step: bool,
}

#[derive(Clone, Debug, Default)]
struct Errors {
    deployment: Vec<String>,
    destination_rule: Vec<String>,
    virtual_services: Vec<String>,
    subset: Vec<String>,
}

fn push_unique(list: &mut Vec<String>, e: String) {
    if !list.contains(&e) {
        list.push(e);
    }
}

impl Errors {
    fn is_empty(&self) -> bool {
        self.deployment.is_empty()
            && self.destination_rule.is_empty()
            && self.virtual_services.is_empty()
            && self.subset.is_empty()
    }

    fn all(&self) -> impl Iterator<Item = &String> {
        self.deployment
            .iter()
            .chain(&self.destination_rule)
            .chain(&self.virtual_services)
            .chain(&self.subset)
    }
}

/// The plan of one DynamicEnv, before the router calls are made.
struct DePlan {
    key: String,
    ir_key: String,
    entries: Vec<EntryPlan>,
    subsets_removing: BTreeMap<String, SubsetStatus>,
    consumers_removing: BTreeMap<String, ConsumerStatus>,
    interest: Interest,
}

/// Working state shared by the DynamicEnvs of one plan.
struct Planner<'a> {
    cfg: &'a PlanConfig,
    index: Index<'a>,
    ir: Ir,
    applies: Vec<Write>,
    deletes: Vec<Write>,
    chains: BTreeMap<String, Chain>,
    /// Tokens of subsets whose routes are kept as they are (their plan failed).
    kept_tokens: Vec<String>,
    tokens: BTreeSet<String>,
    claims: &'a names::Claims,
}

/// Plans every DynamicEnv of `snapshot`; see the module documentation.
pub async fn plan(snapshot: &Snapshot, router: &Arc<dyn Router>, cfg: &PlanConfig) -> Plan {
    let mut p = Planner {
        cfg,
        index: Index::new(snapshot),
        ir: Ir::default(),
        applies: Vec::new(),
        deletes: Vec::new(),
        chains: BTreeMap::new(),
        kept_tokens: Vec::new(),
        tokens: BTreeSet::new(),
        claims: &snapshot.claims,
    };
    let mut des: Vec<DePlan> = snapshot
        .dynamic_envs
        .iter()
        .map(|de| p.plan_dynamic_env(de))
        .collect();
    p.add_stale_route_chains();
    let Planner {
        index,
        mut ir,
        applies,
        deletes,
        chains,
        ..
    } = p;

    // The router calls: one chain per VirtualService, chains side by side on the runtime's
    // worker threads.
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = Vec::with_capacity(chains.len());
    for (key, chain) in &chains {
        let (ns, name) = split_key(key);
        let vs = Arc::clone(index.virtual_services[&(ns, name)]);
        let (key, chain, router, permits) =
            (key.clone(), chain.clone(), router.clone(), permits.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            (key, run_chain(router.as_ref(), &vs, &chain).await)
        }));
    }
    let mut results: BTreeMap<String, (Vec<Value>, Vec<Outcome>)> = BTreeMap::new();
    for task in tasks {
        let (key, result) = task
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        results.insert(key, result);
    }

    let mut statuses = BTreeMap::new();
    let mut interests = BTreeMap::new();
    for de in &mut des {
        let status = finish_dynamic_env(&mut ir, de, &results);
        // Fingerprints of the VirtualServices as the writes leave them.
        for (key, fp) in &mut de.interest.objects {
            if !key.starts_with("VirtualService/") {
                continue;
            }
            let (ns, name) = split_key(key);
            if let Some(vs) = index.virtual_services.get(&(ns, name)) {
                let http = results.get(key).map_or_else(
                    || vs.spec.http.as_deref().unwrap_or_default(),
                    |(http, _)| http.as_slice(),
                );
                *fp = Some(fingerprint_virtual_service(
                    &de.interest.token,
                    &vs.spec.hosts,
                    http,
                ));
            }
        }
        statuses.insert(de.key.clone(), status);
        interests.insert(de.key.clone(), std::mem::take(&mut de.interest));
    }

    let mut routes = Vec::new();
    let mut failures = Vec::new();
    for (key, (http, outcomes)) in results {
        let (ns, name) = split_key(&key);
        let vs = index.virtual_services[&(ns, name)];
        let res = ir.add(&key, "VirtualService", vs_location(vs));
        for (call, outcome) in chains[&key].calls.iter().zip(&outcomes) {
            let (outcome, decided_by) = match outcome {
                Outcome::Routed {
                    routes,
                    skipped,
                    decided_by,
                    ignored,
                } => {
                    let mut notes: Vec<String> = skipped.clone();
                    for (plugin, message) in ignored {
                        let before = decided_by.join(", then ");
                        let note = format!(
                            "{message} (failurePolicy Ignore: the answer of {before} is used as \
                             it is)"
                        );
                        failures.push(RouterFailure {
                            virtual_service: key.clone(),
                            plugin: plugin.clone(),
                            policy: FailurePolicy::Ignore,
                            note: format!("{key}: {note}"),
                        });
                        notes.push(format!("{plugin} failed: {note}"));
                    }
                    let text = if *routes == 0 && notes.is_empty() {
                        "no route to copy".to_owned()
                    } else if notes.is_empty() {
                        format!("routed: {routes} routes")
                    } else {
                        format!("routed: {routes} routes; {}", notes.join("; "))
                    };
                    (text, decided_by.clone())
                }
                Outcome::Failed {
                    plugin,
                    message,
                    policy,
                } => {
                    failures.push(RouterFailure {
                        virtual_service: key.clone(),
                        plugin: plugin.clone(),
                        policy: *policy,
                        note: match policy {
                            FailurePolicy::Fail => format!("{key}: {message}"),
                            FailurePolicy::Ignore => format!(
                                "{key}: {message} (failurePolicy Ignore: the VirtualService is \
                                 left as it is)"
                            ),
                        },
                    });
                    (format!("failed: {message}"), Vec::new())
                }
            };
            res.routes.push(RouteCallRecord {
                subset: call.subset.clone(),
                host: call.request.host.clone(),
                route_prefix: call.request.route_prefix.clone(),
                outcome,
                decided_by,
            });
        }
        let before = vs.spec.http.as_deref().unwrap_or_default();
        if http != before {
            let (added, removed) = route_diff(before, &http, &chains[&key].strip);
            routes.push(Write::Routes {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                added,
                removed,
                base: vs.clone(),
                http,
                key,
            });
        }
    }

    ir.finalize();
    let mut writes = applies;
    writes.extend(routes);
    writes.extend(deletes);
    Plan {
        ir,
        writes,
        status: statuses,
        chains,
        interest: interests,
        failures,
    }
}

/// Names of the routes added (new or changed) and removed (gone or changed) between two route
/// lists, among the routes of the DynamicEnvs planned (`strip.tokens`): the plan checked
/// that no other route changed.
fn route_diff(before: &[Value], after: &[Value], strip: &Strip) -> (Vec<String>, Vec<String>) {
    let planned = |r: &&Value| {
        istio::route_name(r)
            .and_then(names::token_of_route)
            .is_some_and(|t| strip.tokens.contains(t))
    };
    let (old, new): (Vec<&Value>, Vec<&Value>) = (
        before.iter().filter(planned).collect(),
        after.iter().filter(planned).collect(),
    );
    let label = |r: &&Value| istio::route_name(r).unwrap_or_default().to_owned();
    let added = new.iter().filter(|r| !old.contains(r)).map(label).collect();
    let removed = old.iter().filter(|r| !new.contains(r)).map(label).collect();
    (added, removed)
}

/// `(namespace, name)` of an IR key `Kind/namespace/name`.
fn split_key(key: &str) -> (&str, &str) {
    let mut parts = key.splitn(3, '/').skip(1);
    (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    )
}

fn vs_location(vs: &VirtualService) -> String {
    let (ns, name) = ns_name(&vs.metadata);
    if vs.spec.hosts.is_empty() {
        format!("VirtualService {ns}/{name} (delegate)")
    } else {
        format!(
            "VirtualService {ns}/{name} (hosts: {})",
            vs.spec.hosts.join(", ")
        )
    }
}

/// The VirtualService as the router sees it: apiVersion, kind, name, namespace, labels and the
/// spec with `http` as given.
fn vs_json(vs: &VirtualService, http: &[Value]) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct View<'a> {
        api_version: &'static str,
        kind: &'static str,
        metadata: Meta<'a>,
        spec: Spec<'a>,
    }
    #[derive(Serialize)]
    struct Meta<'a> {
        name: &'a Option<String>,
        namespace: &'a Option<String>,
        labels: &'a Option<BTreeMap<String, String>>,
    }
    #[derive(Serialize)]
    struct Spec<'a> {
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        hosts: &'a [String],
        http: &'a [Value],
        #[serde(flatten)]
        other: &'a serde_json::Map<String, Value>,
    }
    serde_json::to_string(&View {
        api_version: "networking.istio.io/v1",
        kind: "VirtualService",
        metadata: Meta {
            name: &vs.metadata.name,
            namespace: &vs.metadata.namespace,
            labels: &vs.metadata.labels,
        },
        spec: Spec {
            hosts: &vs.spec.hosts,
            http,
            other: &vs.spec.other,
        },
    })
    .unwrap_or_default()
}

/// The answers every plan of this process reuses ([`Answers`]).
fn answers() -> &'static Answers {
    static ANSWERS: std::sync::OnceLock<Answers> = std::sync::OnceLock::new();
    ANSWERS.get_or_init(Answers::default)
}

/// The answer of one call through every router of a chain.
struct Decided {
    /// The new `spec.http`.
    http: Vec<Value>,
    /// The routers whose answers made it, in call order.
    decided_by: Vec<String>,
    /// Refining routers whose call failed under `failurePolicy: Ignore`, with the error.
    ignored: Vec<(String, String)>,
}

/// A call that failed: the router that failed, its error and the policy that applies.
struct CallFailed {
    plugin: String,
    message: String,
    policy: FailurePolicy,
}

/// Runs `chain` on `vs`: removes the routes `chain.strip` drops, then makes each call on the
/// result of the previous one, through every router of `router`'s chain ([`router::stages`]:
/// the routers it builds on first, each given the VirtualService as the one before left it).
/// Every router's answer is checked ([`answer::check`]) against the routes it was given, so the
/// final answer passes the checks against the VirtualService the call started from. A failed
/// call, or an answer that changed a route not named with the call's prefix, leaves the list as
/// it was and is reported in its [`Outcome`], with the failing router's policy; a refining
/// router that fails under `failurePolicy: Ignore` leaves the answer before it as it is. An
/// answer whose own routes are the ones already there, only at other places, is not taken, so
/// that planning again on an unchanged cluster writes nothing. An answer through the whole
/// chain is kept for reuse, under the identities of all its routers ([`chain_identity`]).
/// Returns the final `spec.http` and one outcome per call.
pub(crate) async fn run_chain(
    router: &dyn Router,
    vs: &VirtualService,
    chain: &Chain,
) -> (Vec<Value>, Vec<Outcome>) {
    let mut http = vs.spec.http.clone().unwrap_or_default();
    http.retain(|r| !istio::route_name(r).is_some_and(|n| chain.strip.drops(n)));
    let (ns, vs_name) = ns_name(&vs.metadata);
    let mut outcomes = Vec::with_capacity(chain.calls.len());
    let stages = router::stages(router);
    let identity = chain_identity(&stages);
    for call in &chain.calls {
        let prefix = call.request.route_prefix.as_str();
        let mut request = call.request.clone();
        request.virtual_service = vs_json(vs, &http);
        let key = identity
            .as_deref()
            .map(|id| Answers::key(id, (ns, vs_name), &request));
        let owned = |r: &Value| istio::route_name(r).is_some_and(|n| n.starts_with(prefix));
        let kept = key.and_then(|k| answers().get(k, &http, owned));
        let answer = match kept {
            Some(out) => Ok(Decided {
                http: out,
                decided_by: stages.iter().map(|s| s.name().to_owned()).collect(),
                ignored: Vec::new(),
            }),
            None => {
                let decided =
                    decide(&stages, &call.request, request.virtual_service, vs, &http).await;
                // An answer a refining router did not refine is not the chain's: not kept.
                if let (Ok(d), Some(k)) = (&decided, key)
                    && d.ignored.is_empty()
                {
                    answers().put(k, &d.http, owned);
                }
                decided
            }
        };
        outcomes.push(match answer {
            Ok(Decided {
                http: out,
                decided_by,
                ignored,
            }) => {
                let ours = |list: &[Value]| -> Vec<u64> {
                    let mut v: Vec<u64> = list
                        .iter()
                        .filter(|r| owned(r))
                        .map(|r| {
                            let mut h = DefaultHasher::new();
                            hash_value(r, &mut h);
                            h.finish()
                        })
                        .collect();
                    v.sort_unstable();
                    v
                };
                let mine = ours(&out);
                let routes = mine.len();
                let skipped = answer::uncopied(&call.request, ns, &out);
                // The same routes, only moved (e.g. behind another DynamicEnv's copies that
                // now precede the default route): keep them where they are, or two
                // DynamicEnvs on one VirtualService would swap places on every reconcile.
                if mine != ours(&http) {
                    http = out;
                }
                Outcome::Routed {
                    routes,
                    skipped,
                    decided_by,
                    ignored,
                }
            }
            Err(CallFailed {
                plugin,
                message,
                policy,
            }) => Outcome::Failed {
                plugin,
                message,
                policy,
            },
        });
    }
    (http, outcomes)
}

/// One call `call` (its request without the VirtualService) through `stages` (call order) on
/// `input`, the routes of `vs` before the call; `vs_input` is `vs` with `input` as the
/// routers see it ([`vs_json`]).
async fn decide(
    stages: &[&dyn Router],
    call: &RouteRequest,
    vs_input: String,
    vs: &VirtualService,
    input: &[Value],
) -> Result<Decided, CallFailed> {
    let (ns, name) = ns_name(&vs.metadata);
    let mut current: Option<Vec<Value>> = None;
    let mut decided_by = Vec::with_capacity(stages.len());
    let mut ignored = Vec::new();
    let mut vs_input = Some(vs_input);
    for (i, stage) in stages.iter().enumerate() {
        let given = current.as_deref().unwrap_or(input);
        let request = RouteRequest {
            virtual_service: vs_input.take().unwrap_or_else(|| vs_json(vs, given)),
            ..call.clone()
        };
        let failed = |message: String, policy: FailurePolicy| CallFailed {
            plugin: stage.name().to_owned(),
            message,
            policy,
        };
        match stage.route(request).await {
            Ok(out) => {
                if let Err(e) = answer::check(call, ns, given, &out) {
                    // Invalid output fails the call whatever the entry's failurePolicy says: a
                    // router that answers routes it may not write is broken, not unavailable.
                    return Err(failed(
                        format!(
                            "plugin {:?} gave invalid output for VirtualService {ns}/{name}: \
                             {e}; the VirtualService is left as it was",
                            stage.name()
                        ),
                        FailurePolicy::Fail,
                    ));
                }
                current = Some(out);
                decided_by.push(stage.name().to_owned());
            }
            // A refining router's own call is ignored: the answer before it stands.
            Err(e) if i > 0 && stage.failure_policy() == FailurePolicy::Ignore => {
                ignored.push((stage.name().to_owned(), e));
            }
            Err(e) => return Err(failed(e, stage.failure_policy())),
        }
    }
    Ok(Decided {
        http: current.unwrap_or_else(|| input.to_vec()),
        decided_by,
        ignored,
    })
}

/// Why Istio would refuse `m` (its header names must be HTTP tokens, its source labels
/// Kubernetes label keys and values), or `None`. The CRD cannot check map keys within its CEL
/// cost budget, so the plan does.
fn invalid_match(m: &IstioMatch) -> Option<String> {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let label_value = |v: &str| {
        v.is_empty()
            || (v.len() <= 63
                && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
    };
    let label_key = |k: &str| {
        let (prefix, name) = k.rsplit_once('/').map_or((None, k), |(p, n)| (Some(p), n));
        !name.is_empty()
            && label_value(name)
            && prefix.is_none_or(|p| p.len() <= 253 && names::is_dns_subdomain(p))
    };
    if let Some(h) = m.headers.iter().find(|h| !token(&h.name)) {
        return Some(format!(
            "header name {:?} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~)",
            h.name
        ));
    }
    if let Some(l) = m.source_labels.iter().find(|l| !label_key(&l.key)) {
        return Some(format!(
            "source label key {:?} is not a Kubernetes label key",
            l.key
        ));
    }
    if let Some(l) = m.source_labels.iter().find(|l| !label_value(&l.value)) {
        return Some(format!(
            "source label {}={:?} is not a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
            l.key, l.value
        ));
    }
    None
}

fn istio_matches(de: &DynamicEnv) -> Vec<IstioMatch> {
    de.spec
        .istio_matches
        .iter()
        .map(|m| IstioMatch {
            headers: m
                .headers
                .iter()
                .flatten()
                .filter_map(|(name, v)| {
                    let value = if let Some(x) = &v.exact {
                        StringMatch::Exact(x.clone())
                    } else if let Some(x) = &v.prefix {
                        StringMatch::Prefix(x.clone())
                    } else {
                        StringMatch::Regex(v.regex.clone()?)
                    };
                    Some(HeaderMatch {
                        name: name.clone(),
                        value,
                    })
                })
                .collect(),
            source_labels: m
                .source_labels
                .iter()
                .flatten()
                .map(|(k, v)| Label {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
        })
        .collect()
}

fn selects(svc: &Service, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl<'a> Planner<'a> {
    /// The version of DynamicEnv `key`: the digest form if its clones carry it (so nothing is
    /// renamed), else the one the claims give it (`names`).
    fn version_of(&self, de: &DynamicEnv, key: &str) -> String {
        let (de_ns, de_name) = ns_name(&de.metadata);
        let digest = names::digest_version(de_ns, de_name);
        let carried = self
            .index
            .owned
            .get(key)
            .into_iter()
            .flatten()
            .filter(|(kind, _)| *kind == "Deployment")
            .filter_map(|(_, meta)| meta.labels.as_ref()?.get(&self.cfg.version_label))
            .any(|v| *v == digest);
        if carried {
            digest
        } else {
            self.claims
                .version(de_ns, de_name, &names::entry_namespaces(de))
        }
    }

    /// The name for an object of this DynamicEnv: the form an object it made already has,
    /// else `plain` unless an object of that name exists that it did not make, else `digest`.
    fn pick_name(
        owner: &str,
        existing: impl Fn(&str) -> Option<&'a ObjectMeta>,
        plain: String,
        digest: String,
    ) -> String {
        let mine = |name: &str| existing(name).is_some_and(|m| clone::owner(m) == Some(owner));
        if mine(&plain) {
            plain
        } else if mine(&digest) || existing(&plain).is_some() {
            digest
        } else {
            plain
        }
    }

    fn clone_name_of(&self, version: &str, de_ns: &str, de_name: &str, subset: &Subset) -> String {
        let (ns, dep) = (subset.namespace.as_str(), subset.name.as_str());
        Self::pick_name(
            &format!("{de_ns}/{de_name}"),
            |name| self.index.deployments.get(&(ns, name)).map(|d| &d.metadata),
            self.claims.clone_name(version, de_ns, de_name, ns, dep),
            names::digest_clone_name(de_ns, de_name, ns, dep),
        )
    }

    fn destination_rule_name_of(
        &self,
        clone_name: &str,
        de_ns: &str,
        de_name: &str,
        subset: &Subset,
        host: &str,
    ) -> String {
        let (ns, dep) = (subset.namespace.as_str(), subset.name.as_str());
        Self::pick_name(
            &format!("{de_ns}/{de_name}"),
            |name| {
                self.index
                    .destination_rules_by_name
                    .get(&(ns, name))
                    .map(|d| &d.metadata)
            },
            names::destination_rule_name_for(clone_name, de_ns, de_name, ns, dep, host),
            names::digest_destination_rule_name(de_ns, de_name, ns, dep, host),
        )
    }

    fn plan_dynamic_env(&mut self, de: &'a DynamicEnv) -> DePlan {
        let (de_ns, de_name) = ns_name(&de.metadata);
        let key = format!("{de_ns}/{de_name}");
        let ir_key = ir::key("DynamicEnv", de_ns, de_name);
        self.ir
            .add(&ir_key, "DynamicEnv", format!("DynamicEnv {key}"));
        let token = names::route_token(de_ns, de_name);
        self.tokens.insert(token.clone());
        let mut interest = Interest {
            token,
            ..Interest::default()
        };
        let version = self.version_of(de, &key);
        // Matches Istio would refuse are left out, and every subset says why.
        let mut match_errors = Vec::new();
        let matches: Vec<IstioMatch> = istio_matches(de)
            .into_iter()
            .enumerate()
            .filter_map(|(at, m)| match invalid_match(&m) {
                None => Some(m),
                Some(why) => {
                    match_errors.push(format!(
                        "istioMatches[{at}]: {why}, so Istio would refuse its routes: it is left out (istioMatches are immutable: create the DynamicEnv again with a valid one)"
                    ));
                    None
                }
            })
            .collect();
        let mut entries = Vec::new();
        let subsets: BTreeSet<(&str, &str)> = de
            .spec
            .subsets
            .iter()
            .map(|s| (s.namespace.as_str(), s.name.as_str()))
            .collect();
        let consumers = de.spec.consumers.as_deref().unwrap_or_default();
        let all = de
            .spec
            .subsets
            .iter()
            .enumerate()
            .map(|(i, s)| (false, i, s))
            .chain(consumers.iter().enumerate().map(|(i, s)| (true, i, s)));
        // Objects made for each entry: kept when the entry's plan fails, deleted when unwanted.
        let mut wanted: BTreeSet<(String, String, String)> = BTreeSet::new();
        let mut kept_entries: BTreeSet<String> = BTreeSet::new();
        for (consumer, i, subset) in all {
            interest.namespaces.insert(subset.namespace.clone());
            let entry_key = format!("{}/{}", subset.namespace, subset.name);
            let field = if consumer { "consumers" } else { "subsets" };
            let entry_ir = format!("{ir_key}/{field}/{entry_key}");
            let location = format!("DynamicEnv {key} spec.{field}[{i}] (Deployment {entry_key})");
            self.ir.add(
                &entry_ir,
                if consumer { "Consumer" } else { "Subset" },
                location,
            );
            self.ir.reference(&ir_key, &entry_ir);
            let mut entry = EntryPlan {
                consumer,
                key: entry_key.clone(),
                ir_key: entry_ir.clone(),
                clone_name: self.clone_name_of(&version, de_ns, de_name, subset),
                clone_ns: subset.namespace.clone(),
                hash: super::gohash::subset_hash(subset),
                ..EntryPlan::default()
            };
            if consumer && subsets.contains(&(subset.namespace.as_str(), subset.name.as_str())) {
                let e = format!(
                    "deployment {entry_key} is listed both in subsets and in consumers: it is cloned once, as a subset"
                );
                self.ir.post_error(&entry_ir, &e);
                entry.errors.subset.push(e);
                entry.clone_status = status::FAILED.into();
                entries.push(entry);
                continue;
            }
            if !consumer {
                for e in &match_errors {
                    self.ir.post_error(&entry_ir, e);
                    entry.errors.subset.push(e.clone());
                }
            }
            let ok = self.plan_entry(
                de,
                subset,
                &version,
                &matches,
                &mut entry,
                &mut interest,
                &mut wanted,
            );
            if !ok {
                kept_entries.insert(entry_key.clone());
                if !consumer {
                    self.kept_tokens.push(names::subset_route_token(
                        de_ns,
                        de_name,
                        &subset.namespace,
                        &subset.name,
                    ));
                }
            }
            entries.push(entry);
        }

        // Garbage: what this DynamicEnv made earlier and no longer wants.
        let mut removing_objects: BTreeMap<String, Vec<(String, String, String)>> = BTreeMap::new();
        let owned = self
            .index
            .owned
            .get(key.as_str())
            .cloned()
            .unwrap_or_default();
        for (kind, meta) in owned {
            let (ns, name) = ns_name(meta);
            let id = (kind.to_owned(), ns.to_owned(), name.to_owned());
            let entry = clone::subset_of(meta).unwrap_or_default().to_owned();
            if wanted.contains(&id) || kept_entries.contains(&entry) {
                continue;
            }
            let obj_key = ir::key(kind, ns, name);
            self.ir.add(
                &obj_key,
                kind,
                format!("{kind} {ns}/{name}, made for DynamicEnv {key}, no longer wanted"),
            );
            self.ir.set_status(&obj_key, status::REMOVING);
            self.ir.reference(&obj_key, &ir_key);
            self.deletes.push(Write::Delete {
                key: obj_key,
                kind: kind.to_owned(),
                namespace: ns.to_owned(),
                name: name.to_owned(),
                dynamic_env: key.clone(),
            });
            removing_objects.entry(entry).or_default().push(id);
        }
        // Routes of entries that left the spec.
        let in_spec: BTreeSet<String> = entries.iter().map(|e| e.key.clone()).collect();
        let mut removing_routes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let previous = de.status.clone().unwrap_or_default();
        for entry in previous.subsets_status.keys() {
            if in_spec.contains(entry) {
                continue;
            }
            let Some((ns, dep)) = entry.split_once('/') else {
                continue;
            };
            let t = names::subset_route_token(de_ns, de_name, ns, dep);
            for (id, vs) in &self.index.virtual_services {
                let has = vs
                    .spec
                    .http
                    .iter()
                    .flatten()
                    .any(|r| istio::route_name(r).is_some_and(|n| n.starts_with(t.as_str())));
                if has {
                    removing_routes
                        .entry(entry.clone())
                        .or_default()
                        .push((id.0.to_owned(), id.1.to_owned()));
                }
            }
        }
        let (subsets_removing, consumers_removing) =
            removing_status(&previous, &in_spec, &removing_objects, &removing_routes);
        DePlan {
            key,
            ir_key,
            entries,
            subsets_removing,
            consumers_removing,
            interest,
        }
    }

    /// Plans one subset or consumer; returns false when it cannot be planned (its objects and
    /// routes are then kept as they are).
    #[allow(clippy::too_many_arguments)]
    fn plan_entry(
        &mut self,
        de: &'a DynamicEnv,
        subset: &'a Subset,
        version: &str,
        matches: &[IstioMatch],
        entry: &mut EntryPlan,
        interest: &mut Interest,
        wanted: &mut BTreeSet<(String, String, String)>,
    ) -> bool {
        let (de_ns, de_name) = ns_name(&de.metadata);
        let owner = format!("{de_ns}/{de_name}");
        let ns = subset.namespace.as_str();
        let base_key = ir::key("Deployment", ns, &subset.name);
        interest.bases.insert((ns.to_owned(), subset.name.clone()));
        let clone_key = ir::key("Deployment", ns, &entry.clone_name);
        let existing_clone = self
            .index
            .deployments
            .get(&(ns, entry.clone_name.as_str()))
            .copied();
        let Some(base) = self
            .index
            .deployments
            .get(&(ns, subset.name.as_str()))
            .copied()
        else {
            interest.objects.insert(base_key.clone(), None);
            let e = format!(
                "couldn't find the deployment we need to override (name: {name}, ns: {ns}), Deployment.apps \"{name}\" not found",
                name = subset.name
            );
            self.ir.add(
                &base_key,
                "Deployment",
                format!("Deployment {ns}/{} (not found)", subset.name),
            );
            self.ir.set_status(&base_key, status::MISSING);
            self.ir.reference(&entry.ir_key, &base_key);
            self.ir.post_error(&entry.ir_key, &e);
            entry.errors.deployment.push(e);
            entry.clone_status = existing_clone
                .map_or(status::MISSING, clone::deployment_status)
                .into();
            return false;
        };
        interest
            .objects
            .insert(base_key.clone(), Some(fingerprint_base(base)));
        self.ir.add(
            &base_key,
            "Deployment",
            format!("Deployment {ns}/{}", subset.name),
        );
        self.ir.reference(&entry.ir_key, &base_key);

        // The clone.
        let spec = CloneSpec {
            owner: &owner,
            subset_key: &entry.key,
            name: &entry.clone_name,
            version,
            version_label: &self.cfg.version_label,
            remove_labels: &self.cfg.remove_labels,
        };
        let field = if entry.consumer {
            "consumers"
        } else {
            "subsets"
        };
        self.ir.add(
            &clone_key,
            "Deployment",
            format!(
                "clone of Deployment {ns}/{} for DynamicEnv {owner} ({field} entry {})",
                subset.name, entry.key
            ),
        );
        self.ir.reference(&clone_key, &base_key);
        self.ir.reference(&entry.ir_key, &clone_key);
        if let Some(existing) = existing_clone
            && clone::owner(&existing.metadata) != Some(owner.as_str())
        {
            let e = format!(
                "Deployment {ns}/{} exists and was not made by DynamicEnv {owner}: it is left as it is",
                entry.clone_name
            );
            self.ir.post_error(&clone_key, &e);
            entry.errors.deployment.push(e);
            entry.clone_status = status::FAILED.into();
            self.ir.set_status(&clone_key, status::FAILED);
            return false;
        }
        let object = match clone::clone_deployment(base, subset, &spec) {
            Ok(o) => o,
            Err(e) => {
                self.ir.post_error(&clone_key, &e);
                entry.errors.deployment.push(e);
                entry.clone_status = existing_clone
                    .map_or(status::FAILED, clone::deployment_status)
                    .into();
                self.ir.set_status(&clone_key, &entry.clone_status);
                return false;
            }
        };
        wanted.insert(("Deployment".into(), ns.to_owned(), entry.clone_name.clone()));
        let clone_pod_labels: BTreeMap<String, String> =
            serde_json::from_value(object["spec"]["template"]["metadata"]["labels"].clone())
                .unwrap_or_default();
        let want_hash = object["metadata"]["annotations"][clone::APPLIED_HASH_ANNOTATION]
            .as_str()
            .map(str::to_owned);
        entry.clone_status = match existing_clone {
            None => {
                self.applies.push(Write::Apply {
                    key: clone_key.clone(),
                    change: Change::Created,
                    dynamic_env: owner.clone(),
                    object,
                });
                status::INITIALIZING.into()
            }
            Some(existing) if clone::applied_hash(&existing.metadata) != want_hash.as_deref() => {
                self.applies.push(Write::Apply {
                    key: clone_key.clone(),
                    change: Change::Updated,
                    dynamic_env: owner.clone(),
                    object,
                });
                status::UPDATING.into()
            }
            Some(existing) => clone::deployment_status(existing).into(),
        };
        self.ir.set_status(&clone_key, &entry.clone_status);
        if entry.consumer {
            return true;
        }

        // Service hosts.
        let pod_labels = base
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let selecting: Vec<&Service> = self
            .index
            .services
            .get(ns)
            .into_iter()
            .flatten()
            .copied()
            .filter(|s| selects(s, &pod_labels))
            .collect();
        for svc in &selecting {
            interest.objects.insert(
                ir::key("Service", ns, &svc.name_any()),
                Some(fingerprint_service(svc)),
            );
        }
        interest.pod_labels.push((ns.to_owned(), pod_labels));
        if selecting.is_empty() {
            let e = format!(
                "no Service in namespace {ns} selects the pods of Deployment {}: nothing to route to (a Service with an empty selector selects nothing)",
                subset.name
            );
            self.ir.post_error(&entry.ir_key, &e);
            entry.errors.subset.push(e);
            return true;
        }
        // A Service whose selector the clone's pods leave (podLabels, --remove-labels) would
        // send the subset's requests nowhere: no route for that host, and an error.
        let mut hosts = Vec::with_capacity(selecting.len());
        for svc in selecting {
            let host = svc.name_any();
            if selects(svc, &clone_pod_labels) {
                hosts.push(host);
                continue;
            }
            let left: Vec<String> = svc
                .spec
                .iter()
                .flat_map(|s| s.selector.iter().flatten())
                .filter(|(k, v)| clone_pod_labels.get(*k) != Some(*v))
                .map(|(k, v)| match clone_pod_labels.get(k) {
                    Some(have) => format!("{k}={v} (the clone's pods have {k}={have})"),
                    None => format!("{k}={v} (the clone's pods lack {k})"),
                })
                .collect();
            let e = format!(
                "the clone's pods leave the selector of Service {ns}/{host} ({}), so subset {version} would have no endpoint: no route is written for host {host}; change podLabels or --remove-labels",
                left.join(", ")
            );
            self.ir.post_error(&entry.ir_key, &e);
            entry.errors.subset.push(e);
        }
        if hosts.is_empty() {
            return true;
        }
        let default_version = subset
            .default_version
            .clone()
            .unwrap_or_else(|| self.cfg.default_version.clone());
        entry.routed_step = true;
        for host in &hosts {
            interest.hosts.insert((ns.to_owned(), host.clone()));
            let svc_key = ir::key("Service", ns, host);
            self.ir
                .add(&svc_key, "Service", format!("Service {ns}/{host}"));
            self.ir.reference(&entry.ir_key, &svc_key);
            let dr_active = self.plan_destination_rule(
                de,
                subset,
                version,
                &default_version,
                host,
                entry,
                wanted,
                interest,
            );
            if dr_active {
                entry.dr_active_hosts += 1;
            }
            self.plan_virtual_services(
                de,
                subset,
                version,
                &default_version,
                matches,
                host,
                dr_active,
                entry,
                interest,
            );
        }
        true
    }

    /// Plans the DestinationRule of `host`; returns whether the host is active (has one).
    #[allow(clippy::too_many_arguments)]
    fn plan_destination_rule(
        &mut self,
        de: &DynamicEnv,
        subset: &Subset,
        version: &str,
        default_version: &str,
        host: &str,
        entry: &mut EntryPlan,
        wanted: &mut BTreeSet<(String, String, String)>,
        interest: &mut Interest,
    ) -> bool {
        let (de_ns, de_name) = ns_name(&de.metadata);
        let owner = format!("{de_ns}/{de_name}");
        let ns = subset.namespace.as_str();
        let name = self.destination_rule_name_of(&entry.clone_name, de_ns, de_name, subset, host);
        let dr_key = ir::key("DestinationRule", ns, &name);
        let label = self.cfg.version_label.as_str();
        let base =
            self.index
                .dr_by_service
                .get(&(ns.to_owned(), host.to_owned()))
                .into_iter()
                .flatten()
                .filter(|dr| clone::owner(&dr.metadata).is_none())
                .find_map(|dr| {
                    let s = dr.spec.subsets.iter().find(|s| {
                        s.labels.get(label).map(String::as_str) == Some(default_version)
                    })?;
                    Some((*dr, s))
                });
        let Some((base, base_subset)) = base else {
            self.ir.add(
                &dr_key,
                "DestinationRule",
                format!(
                    "DestinationRule for host {host} of subset {}: no DestinationRule of namespace {ns} for host {host} has a subset with {label}={default_version}",
                    entry.key
                ),
            );
            self.ir.set_status(&dr_key, status::IGNORED_MISSING_DR);
            self.ir.reference(&entry.ir_key, &dr_key);
            entry.destination_rules.push(ResourceStatus {
                name,
                namespace: ns.to_owned(),
                status: status::IGNORED_MISSING_DR.into(),
                ..Default::default()
            });
            return false;
        };
        let base_key = ir::key("DestinationRule", ns, &base.name_any());
        interest
            .objects
            .insert(base_key.clone(), Some(fingerprint_destination_rule(base)));
        self.ir.add(
            &base_key,
            "DestinationRule",
            format!(
                "DestinationRule {ns}/{} (host {})",
                base.name_any(),
                base.spec.host
            ),
        );
        self.ir.add(
            &dr_key,
            "DestinationRule",
            format!(
                "clone of DestinationRule {ns}/{} for host {host} of subset {} (DynamicEnv {owner})",
                base.name_any(),
                entry.key
            ),
        );
        self.ir.reference(&dr_key, &base_key);
        self.ir.reference(&entry.ir_key, &dr_key);
        let existing = self
            .index
            .destination_rules_by_name
            .get(&(ns, name.as_str()))
            .copied();
        if let Some(existing) = existing
            && clone::owner(&existing.metadata) != Some(owner.as_str())
        {
            let e = format!(
                "DestinationRule {ns}/{name} exists and was not made by DynamicEnv {owner}: it is left as it is"
            );
            self.ir.post_error(&dr_key, &e);
            self.ir.set_status(&dr_key, status::FAILED);
            entry.errors.destination_rule.push(e);
            entry.destination_rules.push(ResourceStatus {
                name,
                namespace: ns.to_owned(),
                status: status::FAILED.into(),
                ..Default::default()
            });
            return false;
        }
        let mut subset_obj = serde_json::json!({
            "name": version,
            "labels": {label: version},
        });
        if let Some(tp) = &base_subset.traffic_policy {
            subset_obj["trafficPolicy"] = tp.clone();
        }
        let mut spec = serde_json::json!({
            "host": base.spec.host,
            "subsets": [subset_obj],
        });
        if let Some(tp) = &base.spec.traffic_policy {
            spec["trafficPolicy"] = tp.clone();
        }
        if let Some(export) = &base.spec.export_to {
            spec["exportTo"] = serde_json::json!(export);
        }
        let mut annotations = serde_json::json!({
            clone::OWNER_ANNOTATION: owner,
            clone::DYNAMIC_ENVIRONMENT_ANNOTATION: owner,
            clone::SUBSET_ANNOTATION: entry.key,
        });
        let mut object = serde_json::json!({
            "apiVersion": DestinationRule::api_version(&()),
            "kind": DestinationRule::kind(&()),
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {label: version, clone::DYNAMIC_ENV_LABEL: "true"},
                "annotations": annotations,
            },
            "spec": spec,
        });
        let hash = clone::json_hash(&object, 16);
        annotations[clone::APPLIED_HASH_ANNOTATION] = Value::String(hash.clone());
        object["metadata"]["annotations"] = annotations;
        wanted.insert(("DestinationRule".into(), ns.to_owned(), name.clone()));
        if let Ok(planned) = serde_json::from_value::<DestinationRule>(object.clone()) {
            interest
                .objects
                .insert(dr_key.clone(), Some(fingerprint_destination_rule(&planned)));
        }
        match existing {
            None => self.applies.push(Write::Apply {
                key: dr_key.clone(),
                change: Change::Created,
                dynamic_env: owner,
                object,
            }),
            Some(e) if clone::applied_hash(&e.metadata) != Some(hash.as_str()) => {
                self.applies.push(Write::Apply {
                    key: dr_key.clone(),
                    change: Change::Updated,
                    dynamic_env: owner,
                    object,
                });
            }
            Some(_) => {}
        }
        self.ir.set_status(&dr_key, status::RUNNING);
        entry.destination_rules.push(ResourceStatus {
            name,
            namespace: ns.to_owned(),
            status: status::RUNNING.into(),
            ..Default::default()
        });
        true
    }

    /// Finds the VirtualServices of `host` and their delegates; adds a call for each when the
    /// host has a DestinationRule.
    #[allow(clippy::too_many_arguments)]
    fn plan_virtual_services(
        &mut self,
        de: &DynamicEnv,
        subset: &Subset,
        version: &str,
        default_version: &str,
        matches: &[IstioMatch],
        host: &str,
        dr_active: bool,
        entry: &mut EntryPlan,
        interest: &mut Interest,
    ) {
        let (de_ns, de_name) = ns_name(&de.metadata);
        let ns = subset.namespace.as_str();
        let request = RouteRequest {
            dynamic_env: format!("{de_ns}/{de_name}"),
            unique_name: entry.clone_name.clone(),
            subset: version.to_owned(),
            host: host.to_owned(),
            namespace: ns.to_owned(),
            default_version: default_version.to_owned(),
            matches: matches.to_vec(),
            route_prefix: names::route_prefix(
                de_ns,
                de_name,
                ns,
                &subset.name,
                host,
                &entry.clone_name,
            ),
            virtual_service: String::new(),
        };
        let roots = self
            .index
            .vs_by_service
            .get(&(ns.to_owned(), host.to_owned()))
            .cloned()
            .unwrap_or_default();
        for (root_ns, root_name) in roots {
            let root = self.index.virtual_services[&(root_ns, root_name)];
            let delegates: Vec<(String, String)> = root
                .spec
                .http
                .iter()
                .flatten()
                .filter_map(|r| istio::delegate_of(r, root_ns))
                .collect();
            self.use_virtual_service(
                root,
                !delegates.is_empty(),
                dr_active,
                &request,
                entry,
                interest,
            );
            for (d_ns, d_name) in delegates {
                let d_key = ir::key("VirtualService", &d_ns, &d_name);
                let root_key = ir::key("VirtualService", root_ns, root_name);
                let found = self
                    .index
                    .virtual_services
                    .get(&(d_ns.as_str(), d_name.as_str()))
                    .copied();
                match found {
                    Some(delegate) => {
                        self.use_virtual_service(
                            delegate, false, dr_active, &request, entry, interest,
                        );
                        self.ir.reference(&root_key, &d_key);
                    }
                    None => {
                        interest.objects.insert(d_key.clone(), None);
                        self.ir.add(
                            &d_key,
                            "VirtualService",
                            format!("VirtualService {d_ns}/{d_name} (delegate of {root_ns}/{root_name}, not found)"),
                        );
                        self.ir.set_status(&d_key, status::MISSING);
                        self.ir.reference(&root_key, &d_key);
                        for e in [
                            format!(
                                "Wierd, Couldn't find a service with name: {d_name}, namespace: {d_ns}, in the service list"
                            ),
                            format!("Delegate ({d_ns}/{d_name}) not found"),
                        ] {
                            self.ir.post_error(&root_key, &e);
                            push_unique(&mut entry.errors.virtual_services, e);
                        }
                    }
                }
            }
        }
    }

    fn use_virtual_service(
        &mut self,
        vs: &VirtualService,
        delegating_root: bool,
        dr_active: bool,
        request: &RouteRequest,
        entry: &mut EntryPlan,
        interest: &mut Interest,
    ) {
        let (ns, name) = ns_name(&vs.metadata);
        let key = ir::key("VirtualService", ns, name);
        self.ir.add(&key, "VirtualService", vs_location(vs));
        self.ir.reference(&entry.ir_key, &key);
        // Fingerprinted once the calls are made.
        interest.objects.insert(key.clone(), None);
        let call = if dr_active {
            let chain = self.chains.entry(key.clone()).or_default();
            let existing = chain
                .calls
                .iter()
                .position(|c| c.request.route_prefix == request.route_prefix);
            let index = existing.unwrap_or_else(|| {
                chain.calls.push(RouteCall {
                    subset: entry.ir_key.clone(),
                    request: request.clone(),
                });
                chain.calls.len() - 1
            });
            Some((key, index))
        } else {
            None
        };
        entry.uses.push(VsUse {
            ns: ns.to_owned(),
            name: name.to_owned(),
            delegating_root,
            call,
        });
    }

    /// Adds chains for VirtualServices holding routes of planned DynamicEnvs that no call
    /// wants any more, and sets every chain's strip rule.
    fn add_stale_route_chains(&mut self) {
        for (id, vs) in &self.index.virtual_services {
            let stale = vs.spec.http.iter().flatten().any(|r| {
                istio::route_name(r)
                    .and_then(names::token_of_route)
                    .is_some_and(|t| self.tokens.contains(t))
            });
            if stale {
                self.chains
                    .entry(ir::key("VirtualService", id.0, id.1))
                    .or_default();
            }
        }
        let tokens = Arc::new(self.tokens.clone());
        for chain in self.chains.values_mut() {
            chain.strip = Strip {
                tokens: tokens.clone(),
                keep: chain
                    .calls
                    .iter()
                    .map(|c| c.request.route_prefix.clone())
                    .chain(self.kept_tokens.iter().cloned())
                    .collect(),
            };
        }
    }
}

/// Errors as the status lists them, each cut to
/// [`STATUS_TEXT_BYTES`](wasmop_kernel::text::STATUS_TEXT_BYTES) (a router's error quotes the
/// plugin).
fn status_errors(list: &[String]) -> Vec<StatusError> {
    list.iter()
        .map(|e| StatusError {
            error: wasmop_kernel::text::status_text(e),
            last_occurrence: None,
        })
        .collect()
}

/// One VirtualService of a subset's status, as its calls left it.
struct VsStatus {
    /// `(namespace, name)`.
    id: (String, String),
    status: &'static str,
    /// Routes without a copy for every istioMatch.
    skipped: Vec<String>,
    /// The routers that decided every routed call on it; `None` before the first.
    decided_by: Option<Vec<String>>,
}

/// The status of a DynamicEnv once its calls are made.
fn finish_dynamic_env(
    ir: &mut Ir,
    de: &mut DePlan,
    results: &BTreeMap<String, (Vec<Value>, Vec<Outcome>)>,
) -> DynamicEnvStatus {
    let mut out = DynamicEnvStatus::default();
    let mut not_ready = 0;
    let mut degraded = false;
    for entry in &mut de.entries {
        // In discovery order (each root VirtualService, then its delegates), as upstream lists
        // them.
        let mut vs_status: Vec<VsStatus> = Vec::new();
        let mut routed_hosts = 0;
        let mut dr_less_vs = false;
        let mut call_failed = false;
        let mut routed_calls = BTreeSet::new();
        for u in &entry.uses {
            let id = (u.ns.clone(), u.name.clone());
            let mut skipped: &[String] = &[];
            let mut decided: &[String] = &[];
            let value = match &u.call {
                None => {
                    dr_less_vs = true;
                    Some(status::IGNORED_MISSING_DR)
                }
                Some((chain, i)) => match results.get(chain).and_then(|(_, o)| o.get(*i)) {
                    Some(Outcome::Routed {
                        routes,
                        skipped: s,
                        decided_by,
                        ..
                    }) if *routes > 0 => {
                        if routed_calls.insert((chain.clone(), *i)) {
                            routed_hosts += 1;
                        }
                        skipped = s;
                        decided = decided_by;
                        Some(status::RUNNING)
                    }
                    Some(Outcome::Routed { .. }) if u.delegating_root => None,
                    Some(Outcome::Routed { .. }) | None => Some(status::IGNORED_MISSING_VS),
                    Some(Outcome::Failed {
                        message, policy, ..
                    }) => {
                        call_failed = true;
                        if *policy == FailurePolicy::Fail {
                            let e = format!(
                                "error updating virtual service {}/{} for subset ({}): {message}",
                                u.ns, u.name, entry.clone_name
                            );
                            ir.post_error(chain, &e);
                            push_unique(&mut entry.errors.virtual_services, e);
                        }
                        Some(status::FAILED)
                    }
                },
            };
            let Some(value) = value else { continue };
            let rank = |s: &str| match s {
                status::RUNNING => 0,
                status::FAILED => 1,
                status::IGNORED_MISSING_VS => 2,
                _ => 3,
            };
            match vs_status.iter_mut().find(|v| v.id == id) {
                Some(v) => {
                    if rank(value) < rank(v.status) {
                        v.status = value;
                    }
                    for note in skipped {
                        push_unique(&mut v.skipped, note.clone());
                    }
                    // The routers that decided every routed call on it.
                    if !decided.is_empty() {
                        v.decided_by = Some(match v.decided_by.take() {
                            None => decided.to_vec(),
                            Some(mut all) => {
                                all.retain(|p| decided.contains(p));
                                all
                            }
                        });
                    }
                }
                None => vs_status.push(VsStatus {
                    id,
                    status: value,
                    skipped: skipped.to_vec(),
                    decided_by: (!decided.is_empty()).then(|| decided.to_vec()),
                }),
            }
        }
        if entry.routed_step {
            if entry.dr_active_hosts == 0 {
                let e = format!(
                    "no base destination rules were found for subset: {}",
                    entry.clone_name
                );
                ir.post_error(&entry.ir_key, &e);
                entry.errors.destination_rule.push(e);
                vs_status.clear();
            } else if routed_hosts == 0 && !call_failed {
                let e = if dr_less_vs {
                    "Couldn't find common active service hostname across DestinationRules and VirtualServices".to_owned()
                } else {
                    format!(
                        "error updating virtual service for subset ({}): could not find even one virtual service that handles subset \"{}\"",
                        entry.clone_name, entry.key
                    )
                };
                ir.post_error(&entry.ir_key, &e);
                if dr_less_vs {
                    entry.errors.subset.push(e);
                } else {
                    entry.errors.virtual_services.push(e);
                }
            }
        }
        let virtual_services: Vec<ResourceStatus> = vs_status
            .into_iter()
            .map(|v| ResourceStatus {
                name: v.id.1,
                namespace: v.id.0,
                status: v.status.into(),
                skipped_routes: v.skipped,
                decided_by: v.decided_by.unwrap_or_default(),
            })
            .collect();
        let ready = entry.clone_status == status::RUNNING
            && entry.errors.is_empty()
            && !virtual_services.iter().any(|v| v.status == status::FAILED)
            && !entry
                .destination_rules
                .iter()
                .any(|d| d.status == status::FAILED || d.status == status::MISSING);
        if !ready {
            not_ready += 1;
        }
        if !entry.errors.is_empty() {
            degraded = true;
        }
        ir.set_status(&entry.ir_key, if ready { "ready" } else { "not ready" });
        let errs = status_errors;
        let deployment = ResourceStatus {
            name: entry.clone_name.clone(),
            namespace: entry.clone_ns.clone(),
            status: entry.clone_status.clone(),
            ..Default::default()
        };
        if entry.consumer {
            out.consumers_status.insert(
                entry.key.clone(),
                ConsumerStatus {
                    name: deployment.name,
                    namespace: deployment.namespace,
                    status: deployment.status,
                    hash: entry.hash,
                    errors: errs(&entry.errors.all().cloned().collect::<Vec<_>>()),
                },
            );
        } else {
            let e = &entry.errors;
            out.subsets_status.insert(
                entry.key.clone(),
                SubsetStatus {
                    deployment,
                    destination_rules: entry.destination_rules.clone(),
                    virtual_services,
                    subset_errors: (!e.is_empty()).then(|| SubsetErrors {
                        deployment: errs(&e.deployment),
                        destination_rule: errs(&e.destination_rule),
                        virtual_services: errs(&e.virtual_services),
                        subset: errs(&e.subset),
                    }),
                    hash: entry.hash,
                },
            );
        }
    }
    let removing = !de.subsets_removing.is_empty() || !de.consumers_removing.is_empty();
    out.subsets_status
        .extend(std::mem::take(&mut de.subsets_removing));
    out.consumers_status
        .extend(std::mem::take(&mut de.consumers_removing));
    let total = i32::try_from(de.entries.len()).unwrap_or(i32::MAX);
    out.total_count = total;
    out.total_ready = total - not_ready;
    out.state = Some(
        if degraded {
            "degraded"
        } else if not_ready > 0 || removing {
            "processing"
        } else {
            "ready"
        }
        .into(),
    );
    ir.set_status(&de.ir_key, out.state.as_deref().unwrap_or_default());
    out
}

/// Status entries of subsets and consumers that left the spec: `removing` while wasmop's
/// objects or routes for them remain, dropped once they are gone.
fn removing_status(
    previous: &DynamicEnvStatus,
    in_spec: &BTreeSet<String>,
    objects: &BTreeMap<String, Vec<(String, String, String)>>,
    routes: &BTreeMap<String, Vec<(String, String)>>,
) -> (
    BTreeMap<String, SubsetStatus>,
    BTreeMap<String, ConsumerStatus>,
) {
    let removing = |ns: &str, name: &str| ResourceStatus {
        name: name.to_owned(),
        namespace: ns.to_owned(),
        status: status::REMOVING.into(),
        ..Default::default()
    };
    let mut subsets = BTreeMap::new();
    for (key, prev) in &previous.subsets_status {
        if in_spec.contains(key) || (!objects.contains_key(key) && !routes.contains_key(key)) {
            continue;
        }
        let objs = objects.get(key).map(Vec::as_slice).unwrap_or_default();
        let deployment = objs.iter().find(|(k, ..)| k == "Deployment").map_or_else(
            || removing(&prev.deployment.namespace, &prev.deployment.name),
            |(_, ns, n)| removing(ns, n),
        );
        subsets.insert(
            key.clone(),
            SubsetStatus {
                deployment,
                destination_rules: objs
                    .iter()
                    .filter(|(k, ..)| k == "DestinationRule")
                    .map(|(_, ns, n)| removing(ns, n))
                    .collect(),
                virtual_services: routes
                    .get(key)
                    .into_iter()
                    .flatten()
                    .map(|(ns, n)| removing(ns, n))
                    .collect(),
                subset_errors: None,
                hash: prev.hash,
            },
        );
    }
    let mut consumers = BTreeMap::new();
    for (key, prev) in &previous.consumers_status {
        if in_spec.contains(key) || !objects.contains_key(key) {
            continue;
        }
        consumers.insert(
            key.clone(),
            ConsumerStatus {
                name: prev.name.clone(),
                namespace: prev.namespace.clone(),
                status: status::REMOVING.into(),
                hash: prev.hash,
                errors: Vec::new(),
            },
        );
    }
    (subsets, consumers)
}

/// The snapshot to plan the removal of `de` (its finalizer): the DynamicEnv with no subsets
/// and no consumers, so that the plan deletes everything it made and strips all its routes.
pub fn removal_snapshot(snapshot: &Snapshot, de: &DynamicEnv) -> Snapshot {
    let mut gone = de.clone();
    gone.spec.subsets.clear();
    gone.spec.consumers = None;
    Snapshot {
        dynamic_envs: vec![Arc::new(gone)],
        ..snapshot.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_errors_are_cut_to_a_kib() {
        let long = format!("router failed: plugin error: {}", "e".repeat(100_000));
        let errors = status_errors(&[long, "short".into()]);
        assert_eq!(
            errors[0].error.len(),
            wasmop_kernel::text::STATUS_TEXT_BYTES
        );
        assert!(
            errors[0]
                .error
                .starts_with("router failed: plugin error: eee")
        );
        assert_eq!(errors[1].error, "short");
    }
}
