//! What the resolver knows about the cluster: ElasticServices by public Service, the public
//! Services' ports, and the ready endpoints of the private Services' EndpointSlices. It is fed
//! by watches (see `watch.rs`), never by polling, and wakes the requests waiting on a service
//! the moment one of its objects changes.
//!
//! Each kind is mirrored as a compact entry per object, indexed by namespace and group (the
//! ElasticService's `spec.service`, the Service's own name, the EndpointSlice's
//! `kubernetes.io/service-name` label). A relist (`Init` … `InitDone`) replaces a kind
//! atomically, as kube's reflector does.
//!
//! Only EndpointSlices written by Kubernetes' EndpointSlice controller or by wasmop's scaling
//! controller count ([`TRUSTED_SLICE_MANAGERS`]): a slice anyone else wrote for a private
//! Service (a namespace user who may create EndpointSlices) is ignored, so that it cannot point
//! the resolver at an address of its choosing.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::watcher;
use tokio::sync::watch;

use super::host::Target;
use super::probe::ProbeRules;
use wasmop_api::elasticservice::ElasticService;
use wasmop_api::names::private_service_name;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label that names the controller that manages an EndpointSlice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The [`MANAGED_BY_LABEL`] values of the EndpointSlices the resolver reads: Kubernetes'
/// EndpointSlice controller (the private Services' slices) and wasmop's scaling controller.
/// Slices with any other value, or none, are ignored.
pub const TRUSTED_SLICE_MANAGERS: [&str; 2] = ["endpointslice-controller.k8s.io", "wasmop.dev"];

/// The label selector of the EndpointSlice watch: the trusted managers' slices only.
pub(crate) fn trusted_slices_selector() -> String {
    format!(
        "{MANAGED_BY_LABEL} in ({})",
        TRUSTED_SLICE_MANAGERS.join(",")
    )
}

/// What the resolver keeps of an ElasticService.
#[derive(Debug)]
pub struct ElasticEntry {
    /// Name of the ElasticService (the object the demand annotation goes on).
    pub name: String,
    /// The private Service that selects the workload's pods: `status.privateService`, else
    /// the name the controller gives it ([`private_service_name`]).
    pub private_service: String,
    /// Whether `status.mode` is `serve` (the public Service no longer routes to the resolver).
    pub serve_mode: bool,
    /// The compiled `probeResponse` rules.
    pub probes: ProbeRules,
}

impl ElasticEntry {
    fn of(es: &ElasticService) -> Self {
        let status = es.status.as_ref();
        let (probes, errors) = ProbeRules::compile(&es.spec.probe_response);
        for e in errors {
            tracing::warn!(
                namespace = es.namespace().unwrap_or_default(),
                elasticservice = es.name_any(),
                "{e}; this rule is not applied until the ElasticService is fixed"
            );
        }
        Self {
            name: es.name_any(),
            private_service: status
                .and_then(|s| s.private_service.clone())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| private_service_name(&es.spec.service)),
            serve_mode: status.and_then(|s| s.mode.as_deref()) == Some("serve"),
            probes,
        }
    }
}

/// The TCP ports of a Service: (port number, port name; "" when unnamed).
#[derive(Debug, Default)]
struct ServiceEntry {
    ports: Vec<(u16, String)>,
}

impl ServiceEntry {
    fn of(svc: &Service) -> Self {
        let ports = svc
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
            .filter_map(|p| {
                Some((
                    u16::try_from(p.port).ok()?,
                    p.name.clone().unwrap_or_default(),
                ))
            })
            .collect();
        Self { ports }
    }

    /// The name of the port the request addresses: the port with that number; without a
    /// number, port 80, or the Service's only port (an ingress that rewrites the Host to the
    /// Service's name often drops the port).
    fn port_name(&self, port: Option<u16>) -> Option<&str> {
        let by_number = |n| self.ports.iter().find(|(p, _)| *p == n);
        match port {
            Some(n) => by_number(n),
            None => by_number(80).or(match self.ports.as_slice() {
                [only] => Some(only),
                _ => None,
            }),
        }
        .map(|(_, name)| name.as_str())
    }
}

/// The ports and ready addresses of an EndpointSlice.
#[derive(Debug, Default)]
struct SliceEntry {
    ports: Vec<(String, u16)>,
    ready: Vec<IpAddr>,
}

impl SliceEntry {
    fn of(slice: &EndpointSlice) -> Self {
        if slice.address_type == "FQDN" {
            return Self::default();
        }
        let ports = slice
            .ports
            .iter()
            .flatten()
            .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
            .filter_map(|p| {
                Some((
                    p.name.clone().unwrap_or_default(),
                    u16::try_from(p.port?).ok()?,
                ))
            })
            .collect();
        let ready = slice
            .endpoints
            .iter()
            .flatten()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.iter().filter_map(|a| a.parse().ok()))
            .collect();
        Self { ports, ready }
    }
}

/// Objects of one kind by namespace and name, with their group index.
#[derive(Debug)]
struct Mirror<V> {
    objects: HashMap<String, HashMap<String, (String, Arc<V>)>>,
    groups: HashMap<String, HashMap<String, BTreeSet<String>>>,
    relist: Option<Vec<(String, String, String, V)>>,
    synced: bool,
}

impl<V> Default for Mirror<V> {
    fn default() -> Self {
        Self {
            objects: HashMap::new(),
            groups: HashMap::new(),
            relist: None,
            synced: false,
        }
    }
}

/// A (namespace, name) whose waiters must look again.
type Changed = Vec<(String, String)>;

impl<V> Mirror<V> {
    fn insert(&mut self, ns: String, name: String, group: String, value: V, changed: &mut Changed) {
        let old = self
            .objects
            .entry(ns.clone())
            .or_default()
            .insert(name.clone(), (group.clone(), Arc::new(value)));
        if let Some((old_group, _)) = old
            && old_group != group
        {
            self.unindex(&ns, &old_group, &name);
            changed.push((ns.clone(), old_group));
        }
        self.groups
            .entry(ns.clone())
            .or_default()
            .entry(group.clone())
            .or_default()
            .insert(name);
        changed.push((ns, group));
    }

    fn unindex(&mut self, ns: &str, group: &str, name: &str) {
        if let Some(groups) = self.groups.get_mut(ns)
            && let Some(names) = groups.get_mut(group)
        {
            names.remove(name);
            if names.is_empty() {
                groups.remove(group);
            }
        }
    }

    fn remove(&mut self, ns: &str, name: &str, changed: &mut Changed) {
        let Some((group, _)) = self.objects.get_mut(ns).and_then(|m| m.remove(name)) else {
            return;
        };
        self.unindex(ns, &group, name);
        changed.push((ns.to_owned(), group));
    }

    fn event(&mut self, event: Event<V>, changed: &mut Changed) {
        match event {
            Event::Apply {
                ns,
                name,
                group,
                value,
            } => match (self.relist.as_mut(), value) {
                // During a relist the listed set replaces everything at InitDone.
                (Some(items), Some(v)) => items.push((ns, name, group, v)),
                (Some(_), None) => {}
                (None, Some(v)) => self.insert(ns, name, group, v, changed),
                (None, None) => self.remove(&ns, &name, changed),
            },
            Event::Delete { ns, name } => self.remove(&ns, &name, changed),
            Event::Init => self.relist = Some(Vec::new()),
            Event::InitDone => {
                let items = self.relist.take().unwrap_or_default();
                for (ns, groups) in self.groups.drain() {
                    changed.extend(groups.into_keys().map(|g| (ns.clone(), g)));
                }
                self.objects.clear();
                for (ns, name, group, value) in items {
                    self.insert(ns, name, group, value, changed);
                }
                self.synced = true;
            }
        }
    }

    fn get(&self, ns: &str, name: &str) -> Option<&Arc<V>> {
        self.objects.get(ns)?.get(name).map(|(_, v)| v)
    }

    fn group<'a>(&'a self, ns: &str, group: &str) -> impl Iterator<Item = &'a Arc<V>> + 'a {
        let names = self.groups.get(ns).and_then(|g| g.get(group));
        let objects = self.objects.get(ns);
        names
            .into_iter()
            .flatten()
            .filter_map(move |n| objects?.get(n).map(|(_, v)| v))
    }
}

/// A change of one object, already converted to its entry.
enum Event<V> {
    /// Added or modified; `value: None` means the object no longer counts (removed).
    Apply {
        ns: String,
        name: String,
        group: String,
        value: Option<V>,
    },
    Delete {
        ns: String,
        name: String,
    },
    Init,
    InitDone,
}

#[derive(Debug, Default)]
struct State {
    elastic: Mirror<ElasticEntry>,
    services: Mirror<ServiceEntry>,
    slices: Mirror<SliceEntry>,
}

/// Where a request for a [`Target`] goes, as far as the catalog knows now.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// No ElasticService names this Service (404).
    NoElasticService,
    /// The ElasticService's public Service does not exist (404).
    NoService,
    /// The public Service has no TCP port with this number (404).
    NoPort {
        /// The ports it has, for the message.
        available: Vec<u16>,
    },
    /// The service is known; `endpoints` may be empty (at zero).
    Found(Route),
}

/// A known service and its ready endpoints.
#[derive(Debug, Clone)]
pub struct Route {
    /// The ElasticService.
    pub elastic: Arc<ElasticEntry>,
    /// The name of the addressed port ("" when unnamed).
    pub port_name: String,
    /// Ready endpoints of the private Service on that port (sorted, deduplicated); empty
    /// while the service is at zero.
    pub endpoints: Vec<SocketAddr>,
}

/// The catalog: mirrors of the three kinds, wake-up channels, and sync state.
#[derive(Debug, Default)]
pub struct Catalog {
    state: RwLock<State>,
    signals: Mutex<HashMap<(String, String), watch::Sender<()>>>,
    synced: watch::Sender<bool>,
}

fn key_of<K: kube::Resource>(obj: &K) -> (String, String) {
    (
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.name_any(),
    )
}

/// The entries of a kind and how objects of that kind map to them.
trait Mirrored: kube::Resource + Sized {
    type Entry;
    /// (group, entry), `None` when the object does not count.
    fn entry(&self) -> Option<(String, Self::Entry)>;
    fn mirror(state: &mut State) -> &mut Mirror<Self::Entry>;
}

impl Mirrored for ElasticService {
    type Entry = ElasticEntry;
    fn entry(&self) -> Option<(String, ElasticEntry)> {
        Some((self.spec.service.clone(), ElasticEntry::of(self)))
    }
    fn mirror(state: &mut State) -> &mut Mirror<ElasticEntry> {
        &mut state.elastic
    }
}

impl Mirrored for Service {
    type Entry = ServiceEntry;
    fn entry(&self) -> Option<(String, ServiceEntry)> {
        Some((self.name_any(), ServiceEntry::of(self)))
    }
    fn mirror(state: &mut State) -> &mut Mirror<ServiceEntry> {
        &mut state.services
    }
}

impl Mirrored for EndpointSlice {
    type Entry = SliceEntry;
    fn entry(&self) -> Option<(String, SliceEntry)> {
        let labels = self.labels();
        let manager = labels.get(MANAGED_BY_LABEL)?;
        if !TRUSTED_SLICE_MANAGERS.contains(&manager.as_str()) {
            return None;
        }
        let service = labels.get(SERVICE_NAME_LABEL)?;
        Some((service.clone(), SliceEntry::of(self)))
    }
    fn mirror(state: &mut State) -> &mut Mirror<SliceEntry> {
        &mut state.slices
    }
}

fn convert<K: Mirrored>(event: watcher::Event<K>) -> Event<K::Entry> {
    let apply = |obj: K| {
        let (ns, name) = key_of(&obj);
        match obj.entry() {
            Some((group, value)) => Event::Apply {
                ns,
                name,
                group,
                value: Some(value),
            },
            None => Event::Apply {
                ns,
                name,
                group: String::new(),
                value: None,
            },
        }
    };
    match event {
        watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => apply(obj),
        watcher::Event::Delete(obj) => {
            let (ns, name) = key_of(&obj);
            Event::Delete { ns, name }
        }
        watcher::Event::Init => Event::Init,
        watcher::Event::InitDone => Event::InitDone,
    }
}

impl Catalog {
    /// An empty catalog, not synced.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn change<K: Mirrored>(&self, event: watcher::Event<K>) {
        let event = convert(event);
        let mut changed = Changed::new();
        let synced = {
            let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
            K::mirror(&mut state).event(event, &mut changed);
            state.elastic.synced && state.services.synced && state.slices.synced
        };
        if synced {
            self.synced
                .send_if_modified(|s| !std::mem::replace(s, true));
        }
        self.notify(changed);
    }

    /// Feeds a watch event of ElasticServices.
    pub fn elastic_service_event(&self, event: watcher::Event<ElasticService>) {
        self.change(event);
    }

    /// Feeds a watch event of Services.
    pub fn service_event(&self, event: watcher::Event<Service>) {
        self.change(event);
    }

    /// Feeds a watch event of EndpointSlices.
    pub fn endpoint_slice_event(&self, event: watcher::Event<EndpointSlice>) {
        self.change(event);
    }

    /// Marks every kind as listed (for catalogs fed by hand, e.g. in tests and benchmarks).
    pub fn mark_synced(&self) {
        self.elastic_service_event(watcher::Event::InitDone);
        self.service_event(watcher::Event::InitDone);
        self.endpoint_slice_event(watcher::Event::InitDone);
    }

    /// Whether every kind has been listed once.
    pub(crate) fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves once every kind has been listed.
    pub(crate) async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Where a request for `target` goes now.
    pub(crate) fn lookup(&self, target: &Target) -> Lookup {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let ns = target.namespace.as_str();
        let Some(elastic) = state.elastic.group(ns, &target.service).next() else {
            return Lookup::NoElasticService;
        };
        let Some(service) = state.services.get(ns, &target.service) else {
            return Lookup::NoService;
        };
        let Some(port_name) = service.port_name(target.port) else {
            return Lookup::NoPort {
                available: service.ports.iter().map(|(p, _)| *p).collect(),
            };
        };
        let mut endpoints: Vec<SocketAddr> = state
            .slices
            .group(ns, &elastic.private_service)
            .flat_map(|slice| {
                let port = slice
                    .ports
                    .iter()
                    .find(|(n, _)| n == port_name)
                    .map(|(_, p)| *p);
                port.into_iter()
                    .flat_map(|p| slice.ready.iter().map(move |ip| SocketAddr::new(*ip, p)))
            })
            .collect();
        endpoints.sort_unstable();
        endpoints.dedup();
        Lookup::Found(Route {
            elastic: elastic.clone(),
            port_name: port_name.to_owned(),
            endpoints,
        })
    }

    /// The name of the ElasticService of public Service `service` in `namespace`, if it has
    /// one and its private Service has no ready endpoint (the service is at zero).
    pub(crate) fn cold_elastic_service(&self, namespace: &str, service: &str) -> Option<String> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let elastic = state.elastic.group(namespace, service).next()?;
        let ready = state
            .slices
            .group(namespace, &elastic.private_service)
            .any(|s| !s.ready.is_empty() && !s.ports.is_empty());
        (!ready).then(|| elastic.name.clone())
    }

    /// A receiver that changes whenever an object of (namespace, name) changes: an
    /// ElasticService or Service of that public name, or an EndpointSlice of that Service.
    /// Subscribe before looking up, so that no change is missed.
    pub fn subscribe(&self, namespace: &str, name: &str) -> watch::Receiver<()> {
        let mut signals = self.signals.lock().unwrap_or_else(|e| e.into_inner());
        signals
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert_with(|| watch::Sender::new(()))
            .subscribe()
    }

    fn notify(&self, changed: Changed) {
        if changed.is_empty() {
            return;
        }
        let mut signals = self.signals.lock().unwrap_or_else(|e| e.into_inner());
        for key in changed {
            if let Some(tx) = signals.get(&key) {
                if tx.receiver_count() == 0 {
                    signals.remove(&key);
                } else {
                    tx.send_replace(());
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// An ElasticService `name` for public Service `service`.
    pub(crate) fn es(
        ns: &str,
        name: &str,
        service: &str,
        status: serde_json::Value,
    ) -> ElasticService {
        serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"service": service, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": service}},
            "status": status,
        }))
        .unwrap()
    }

    /// A Service with `ports`.
    pub(crate) fn svc(ns: &str, name: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns}, "spec": {"ports": ports},
        }))
        .unwrap()
    }

    /// An EndpointSlice of `service`, written by Kubernetes' EndpointSlice controller.
    pub(crate) fn slice(
        ns: &str,
        name: &str,
        service: &str,
        ports: serde_json::Value,
        endpoints: serde_json::Value,
    ) -> EndpointSlice {
        slice_by(
            Some("endpointslice-controller.k8s.io"),
            ns,
            name,
            service,
            ports,
            endpoints,
        )
    }

    /// An EndpointSlice of `service` whose managed-by label is `manager` (none when `None`).
    pub(crate) fn slice_by(
        manager: Option<&str>,
        ns: &str,
        name: &str,
        service: &str,
        ports: serde_json::Value,
        endpoints: serde_json::Value,
    ) -> EndpointSlice {
        let mut labels = json!({SERVICE_NAME_LABEL: service});
        if let Some(manager) = manager {
            labels[MANAGED_BY_LABEL] = json!(manager);
        }
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "ports": ports, "endpoints": endpoints,
        }))
        .unwrap()
    }

    fn target(ns: &str, service: &str, port: Option<u16>) -> Target {
        Target {
            namespace: ns.into(),
            service: service.into(),
            port,
        }
    }

    fn endpoints(c: &Catalog, t: &Target) -> Vec<String> {
        match c.lookup(t) {
            Lookup::Found(r) => r.endpoints.iter().map(ToString::to_string).collect(),
            other => panic!("{other:?}"),
        }
    }

    fn pvt(service: &str) -> String {
        private_service_name(service)
    }

    #[test]
    fn resolves_ready_endpoints_of_the_private_service_by_port_name() {
        let c = Catalog::new();
        c.elastic_service_event(watcher::Event::Apply(es("a", "es", "web", json!({}))));
        c.service_event(watcher::Event::Apply(svc(
            "a",
            "web",
            json!([{"name": "http", "port": 80}, {"name": "admin", "port": 9000}]),
        )));
        let ports = json!([{"name": "http", "port": 8080}, {"name": "admin", "port": 9090}]);
        c.endpoint_slice_event(watcher::Event::Apply(slice(
            "a",
            "s1",
            &pvt("web"),
            ports.clone(),
            json!([
                {"addresses": ["10.244.0.2"], "conditions": {"ready": true}},
                {"addresses": ["10.244.0.3"], "conditions": {"ready": false}},
                {"addresses": ["10.244.0.4"], "conditions": {}},
            ]),
        )));
        // The public Service's own slice is not where requests go.
        c.endpoint_slice_event(watcher::Event::Apply(slice(
            "a",
            "public",
            "web",
            ports,
            json!([{"addresses": ["10.244.9.9"], "conditions": {"ready": true}}]),
        )));
        assert_eq!(
            endpoints(&c, &target("a", "web", None)),
            ["10.244.0.2:8080"]
        );
        assert_eq!(
            endpoints(&c, &target("a", "web", Some(9000))),
            ["10.244.0.2:9090"]
        );
        assert!(matches!(
            c.lookup(&target("a", "web", Some(81))),
            Lookup::NoPort { available } if available == [80, 9000]
        ));
        assert!(matches!(
            c.lookup(&target("b", "web", None)),
            Lookup::NoElasticService
        ));
    }

    #[test]
    fn a_single_port_service_takes_requests_without_a_port() {
        let c = Catalog::new();
        c.elastic_service_event(watcher::Event::Apply(es("a", "es", "web", json!({}))));
        assert!(matches!(
            c.lookup(&target("a", "web", None)),
            Lookup::NoService
        ));
        c.service_event(watcher::Event::Apply(svc(
            "a",
            "web",
            json!([{"port": 8080}]),
        )));
        c.endpoint_slice_event(watcher::Event::Apply(slice(
            "a",
            "s1",
            &pvt("web"),
            json!([{"port": 3000}]),
            json!([{"addresses": ["10.244.0.2"], "conditions": {"ready": true}}]),
        )));
        assert_eq!(
            endpoints(&c, &target("a", "web", None)),
            ["10.244.0.2:3000"]
        );
    }

    #[test]
    fn status_private_service_and_mode_are_honoured() {
        let c = Catalog::new();
        c.elastic_service_event(watcher::Event::Apply(es(
            "a",
            "es",
            "web",
            json!({"privateService": "custom", "mode": "serve"}),
        )));
        c.service_event(watcher::Event::Apply(svc(
            "a",
            "web",
            json!([{"port": 80}]),
        )));
        c.endpoint_slice_event(watcher::Event::Apply(slice(
            "a",
            "s1",
            "custom",
            json!([{"port": 80}]),
            json!([{"addresses": ["10.244.0.7"], "conditions": {"ready": true}}]),
        )));
        let Lookup::Found(route) = c.lookup(&target("a", "web", None)) else {
            panic!()
        };
        assert!(route.elastic.serve_mode);
        assert_eq!(route.elastic.name, "es");
        assert_eq!(route.endpoints, ["10.244.0.7:80".parse().unwrap()]);
    }

    #[tokio::test]
    async fn slice_changes_wake_subscribers_and_deletes_remove_endpoints() {
        let c = Catalog::new();
        c.elastic_service_event(watcher::Event::Apply(es("a", "es", "web", json!({}))));
        c.service_event(watcher::Event::Apply(svc(
            "a",
            "web",
            json!([{"port": 80}]),
        )));
        let mut rx = c.subscribe("a", &pvt("web"));
        let mut other = c.subscribe("a", "other");
        let s = slice(
            "a",
            "s1",
            &pvt("web"),
            json!([{"port": 80}]),
            json!([{"addresses": ["10.244.0.2"], "conditions": {"ready": true}}]),
        );
        c.endpoint_slice_event(watcher::Event::Apply(s.clone()));
        assert!(rx.has_changed().unwrap());
        assert!(!other.has_changed().unwrap());
        rx.mark_unchanged();
        other.mark_unchanged();
        assert_eq!(endpoints(&c, &target("a", "web", None)).len(), 1);
        c.endpoint_slice_event(watcher::Event::Delete(s));
        assert!(rx.has_changed().unwrap());
        assert!(endpoints(&c, &target("a", "web", None)).is_empty());
    }

    #[test]
    fn a_relist_replaces_a_kind_atomically_and_marks_it_synced() {
        let c = Catalog::new();
        c.elastic_service_event(watcher::Event::Apply(es("a", "old", "gone", json!({}))));
        c.service_event(watcher::Event::InitDone);
        c.endpoint_slice_event(watcher::Event::InitDone);
        assert!(!c.is_synced());
        c.elastic_service_event(watcher::Event::Init);
        c.elastic_service_event(watcher::Event::InitApply(es("a", "new", "web", json!({}))));
        // Until InitDone the old view still serves.
        assert!(!matches!(
            c.lookup(&target("a", "gone", None)),
            Lookup::NoElasticService
        ));
        c.elastic_service_event(watcher::Event::InitDone);
        assert!(c.is_synced());
        assert!(matches!(
            c.lookup(&target("a", "gone", None)),
            Lookup::NoElasticService
        ));
        assert!(matches!(
            c.lookup(&target("a", "web", None)),
            Lookup::NoService
        ));
    }

    #[test]
    fn an_elastic_service_that_changes_its_service_moves_in_the_index() {
        let c = Catalog::new();
        c.service_event(watcher::Event::Apply(svc(
            "a",
            "one",
            json!([{"port": 80}]),
        )));
        c.service_event(watcher::Event::Apply(svc(
            "a",
            "two",
            json!([{"port": 80}]),
        )));
        c.elastic_service_event(watcher::Event::Apply(es("a", "es", "one", json!({}))));
        let rx = c.subscribe("a", "one");
        c.elastic_service_event(watcher::Event::Apply(es("a", "es", "two", json!({}))));
        assert!(rx.has_changed().unwrap(), "the old group is told");
        assert!(matches!(
            c.lookup(&target("a", "one", None)),
            Lookup::NoElasticService
        ));
        assert!(matches!(
            c.lookup(&target("a", "two", None)),
            Lookup::Found(_)
        ));
    }

    #[test]
    fn only_slices_of_the_endpointslice_controller_or_wasmop_count() {
        let c = Catalog::new();
        c.elastic_service_event(watcher::Event::Apply(es("a", "es", "web", json!({}))));
        c.service_event(watcher::Event::Apply(svc(
            "a",
            "web",
            json!([{"name": "http", "port": 80}]),
        )));
        let ports = json!([{"name": "http", "port": 8080}]);
        let ready = |ip: &str| json!([{"addresses": [ip], "conditions": {"ready": true}}]);
        // A namespace user's slices for the private Service: another manager, or none.
        for (name, manager) in [("forged", Some("someone-else")), ("unlabelled", None)] {
            c.endpoint_slice_event(watcher::Event::Apply(slice_by(
                manager,
                "a",
                name,
                &pvt("web"),
                ports.clone(),
                ready("192.0.2.66"),
            )));
        }
        assert!(
            endpoints(&c, &target("a", "web", None)).is_empty(),
            "forged slices are ignored"
        );
        assert_eq!(
            c.cold_elastic_service("a", "web").as_deref(),
            Some("es"),
            "and do not make the service look warm to the demand loop"
        );
        for (name, manager, ip) in [
            ("kube", "endpointslice-controller.k8s.io", "10.244.0.2"),
            ("wasmop", "wasmop.dev", "10.244.0.3"),
        ] {
            c.endpoint_slice_event(watcher::Event::Apply(slice_by(
                Some(manager),
                "a",
                name,
                &pvt("web"),
                ports.clone(),
                ready(ip),
            )));
        }
        assert_eq!(
            endpoints(&c, &target("a", "web", None)),
            ["10.244.0.2:8080", "10.244.0.3:8080"]
        );
        // A trusted slice relabelled by someone else stops counting.
        c.endpoint_slice_event(watcher::Event::Apply(slice_by(
            Some("someone-else"),
            "a",
            "kube",
            &pvt("web"),
            ports,
            ready("10.244.0.2"),
        )));
        assert_eq!(
            endpoints(&c, &target("a", "web", None)),
            ["10.244.0.3:8080"]
        );
        assert_eq!(
            trusted_slices_selector(),
            "endpointslice.kubernetes.io/managed-by in (endpointslice-controller.k8s.io,wasmop.dev)"
        );
    }
}
