//! The objects an ElasticService owns and the mode it is in, as pure functions of what the
//! controller read (docs/scaling.md, "Modes").
//!
//! - The **private Service** `<public>-pvt-<hash10>` ([`private_service`]) copies the public
//!   Service's selector and ports (no node ports), headless: the resolver forwards to its
//!   endpoints, so it needs no ClusterIP of its own. It exists in both modes and follows every
//!   change of the public Service.
//! - The **public Service is never modified**: it keeps its selector, so kube-controller-manager
//!   keeps its own EndpointSlices, which are empty at zero replicas. In proxy mode wasmop adds
//!   one more slice for it, `<public>-to-resolver-<hash10>` ([`resolver_slice`]), whose endpoints
//!   are the ready resolver pods with `ready: true` and one port per Service port (all of them,
//!   not just the first), each pointing at the resolver's proxy port. Serve mode deletes it.
//! - **Mode** ([`mode`]): serve when the workload wants replicas and the public Service has a
//!   ready endpoint of its own; proxy otherwise (as upstream's readiness test, measured on the
//!   Service the traffic goes to).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use wasmop_api::elasticservice::ElasticService;
use wasmop_api::names::{private_service_name, resolver_slice_name};

/// Label of every EndpointSlice naming its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming the controller that manages an EndpointSlice.
pub(crate) const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on the slices wasmop writes.
pub(crate) const MANAGED_BY: &str = "wasmop.dev";
/// Label on every object wasmop creates for an ElasticService: its name.
pub(crate) const OWNER_LABEL: &str = "wasmop.dev/elasticservice";

/// Where the public Service's traffic goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// To the workload's pods.
    Serve,
    /// To the resolver, which holds requests until the workload is ready.
    Proxy,
}

impl Mode {
    /// `serve` or `proxy`, as in `status.mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Serve => "serve",
            Mode::Proxy => "proxy",
        }
    }
}

/// The mode for a workload that wants `replicas` and a public Service that does or does not
/// have a ready endpoint of its own.
pub fn mode(replicas: i32, public_ready: bool) -> Mode {
    if replicas > 0 && public_ready {
        Mode::Serve
    } else {
        Mode::Proxy
    }
}

/// Whether any slice of the public Service not written by wasmop has an endpoint that is ready
/// (`conditions.ready` true or unset, which the API defines as ready).
pub(crate) fn public_ready(slices: &[EndpointSlice]) -> bool {
    slices
        .iter()
        .filter(|s| s.labels().get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY))
        .flat_map(|s| s.endpoints.iter().flatten())
        .any(|e| {
            !e.addresses.is_empty() && e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)
        })
}

fn labels(es: &ElasticService) -> BTreeMap<String, String> {
    [
        (OWNER_LABEL.to_owned(), es.name_any()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            wasmop_kernel::FIELD_MANAGER.to_owned(),
        ),
    ]
    .into()
}

fn meta(es: &ElasticService, name: String, extra: BTreeMap<String, String>) -> ObjectMeta {
    let mut labels = labels(es);
    labels.extend(extra);
    ObjectMeta {
        name: Some(name),
        namespace: es.namespace(),
        labels: Some(labels),
        owner_references: es.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The private Service for `public`: its selector and ports (node ports dropped), headless
/// (`clusterIP: None`, so neither an address of the Service CIDR nor kube-proxy rules are spent
/// on it), controller-owned by `es`.
///
/// # Errors
/// A public Service without a selector (its pods cannot be found), described.
pub fn private_service(es: &ElasticService, public: &Service) -> Result<Service, String> {
    let spec = public.spec.clone().unwrap_or_default();
    let selector = spec.selector.filter(|s| !s.is_empty()).ok_or_else(|| {
        format!(
            "Service {} has no selector: wasmop finds the workload's pods through it",
            public.name_any()
        )
    })?;
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| ServicePort {
            node_port: None,
            ..p
        })
        .collect();
    Ok(Service {
        metadata: meta(
            es,
            private_service_name(&public.name_any()),
            BTreeMap::new(),
        ),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(HEADLESS.into()),
            selector: Some(selector),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// `spec.clusterIP` of a headless Service.
const HEADLESS: &str = "None";

/// Whether `existing` has a ClusterIP, which cannot be removed in place: a private Service
/// made with one (before the private Service was headless) is deleted and made again.
pub(crate) fn private_service_has_cluster_ip(existing: &Service) -> bool {
    existing
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != HEADLESS)
}

/// Whether `existing` already is what [`private_service`] wants (selector, ports, type,
/// headless).
pub(crate) fn private_service_current(existing: &Service, wanted: &Service) -> bool {
    let (Some(e), Some(w)) = (&existing.spec, &wanted.spec) else {
        return false;
    };
    let strip = |ports: &Option<Vec<ServicePort>>| {
        ports
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                (
                    p.name.unwrap_or_default(),
                    p.port,
                    p.protocol.unwrap_or_else(|| "TCP".into()),
                    p.target_port,
                    p.app_protocol,
                )
            })
            .collect::<Vec<_>>()
    };
    e.selector == w.selector
        && strip(&e.ports) == strip(&w.ports)
        && e.type_.as_deref().unwrap_or("ClusterIP") == "ClusterIP"
        && e.cluster_ip.as_deref() == Some(HEADLESS)
        && existing.controller_owner_ref_uid() == wanted.controller_owner_ref_uid()
}

trait OwnerUid {
    fn controller_owner_ref_uid(&self) -> Option<String>;
}

impl OwnerUid for Service {
    fn controller_owner_ref_uid(&self) -> Option<String> {
        self.owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone())
    }
}

/// The ready resolver pods with an IPv4 address: (IP, pod), sorted by IP.
pub(crate) fn ready_resolver_pods(pods: &[Pod]) -> Vec<(String, &Pod)> {
    let mut out: Vec<(String, &Pod)> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            ip.parse::<std::net::Ipv4Addr>().ok()?;
            Some((ip, p))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// Whether a Service port carries TCP (`protocol` unset means TCP).
fn is_tcp(p: &ServicePort) -> bool {
    p.protocol.as_deref().unwrap_or("TCP") == "TCP"
}

/// The ports of `public` the resolver cannot hold, as `name (PROTOCOL)`: those whose protocol
/// is UDP or SCTP. They get no endpoint while the workload is at zero.
pub fn non_tcp_ports(public: &Service) -> Vec<String> {
    public
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .filter(|p| !is_tcp(p))
        .map(|p| {
            let name = p.name.clone().unwrap_or_else(|| p.port.to_string());
            format!("{name} ({})", p.protocol.as_deref().unwrap_or_default())
        })
        .collect()
}

/// The EndpointSlice that sends `public`'s traffic to the resolver: one endpoint per ready
/// resolver pod (`ready: true`), one port per TCP Service port, all on `resolver_port` (the
/// resolver holds TCP only: UDP and SCTP ports are left out, see [`non_tcp_ports`]).
pub fn resolver_slice(
    es: &ElasticService,
    public: &Service,
    resolver_pods: &[Pod],
    resolver_port: i32,
) -> EndpointSlice {
    let public_name = public.name_any();
    let extra = [
        (SERVICE_NAME_LABEL.to_owned(), public_name.clone()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ]
    .into();
    let endpoints = ready_resolver_pods(resolver_pods)
        .into_iter()
        .map(|(ip, pod)| Endpoint {
            addresses: vec![ip],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.namespace(),
                name: Some(pod.name_any()),
                uid: pod.uid(),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        })
        .collect::<Vec<_>>();
    let ports = public
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .filter(|p| is_tcp(p))
        .map(|p| EndpointPort {
            name: Some(p.name.clone().unwrap_or_default()),
            port: Some(resolver_port),
            protocol: Some("TCP".into()),
            app_protocol: None,
        })
        .collect();
    EndpointSlice {
        metadata: meta(es, resolver_slice_name(&public_name), extra),
        address_type: "IPv4".into(),
        endpoints: Some(endpoints),
        ports: Some(ports),
    }
}

/// Whether `existing` already has the endpoints, ports and labels of `wanted`.
pub(crate) fn slice_current(existing: &EndpointSlice, wanted: &EndpointSlice) -> bool {
    let label = |s: &EndpointSlice, k: &str| s.labels().get(k).cloned();
    let addresses = |s: &EndpointSlice| {
        s.endpoints
            .iter()
            .flatten()
            .map(|e| {
                (
                    e.addresses.clone(),
                    e.conditions.as_ref().and_then(|c| c.ready),
                )
            })
            .collect::<Vec<_>>()
    };
    existing.address_type == wanted.address_type
        && existing.ports == wanted.ports
        && addresses(existing) == addresses(wanted)
        && label(existing, SERVICE_NAME_LABEL) == label(wanted, SERVICE_NAME_LABEL)
        && label(existing, MANAGED_BY_LABEL) == label(wanted, MANAGED_BY_LABEL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn es() -> ElasticService {
        serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
            "metadata": {"name": "web-es", "namespace": "shop", "uid": "es-uid"},
            "spec": {"service": "web", "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
        }))
        .unwrap()
    }

    fn public() -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "svc-uid"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.9", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"},
                               {"name": "grpc", "port": 9090, "targetPort": "grpc", "nodePort": 30090, "protocol": "TCP"}]}
        }))
        .unwrap()
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "wasmop-system", "uid": format!("{name}-uid")},
            "spec": {"nodeName": "node-1", "containers": []},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    #[test]
    fn private_service_mirrors_selector_and_ports() {
        let svc = private_service(&es(), &public()).unwrap();
        let v = serde_json::to_value(&svc).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": private_service_name("web"), "namespace": "shop",
                    "labels": {"wasmop.dev/elasticservice": "web-es", "app.kubernetes.io/managed-by": "wasmop"},
                    "ownerReferences": [{"apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
                        "name": "web-es", "uid": "es-uid", "controller": true}]
                },
                "spec": {"type": "ClusterIP", "clusterIP": "None", "selector": {"app": "web"},
                         "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                                   {"name": "grpc", "port": 9090, "targetPort": "grpc", "protocol": "TCP"}]}
            })
        );
        assert!(private_service_current(&svc, &svc));
        let mut changed = public();
        changed.spec.as_mut().unwrap().selector = Some([("app".into(), "web2".into())].into());
        assert!(!private_service_current(
            &svc,
            &private_service(&es(), &changed).unwrap()
        ));
    }

    #[test]
    fn a_private_service_with_a_cluster_ip_is_made_again_headless() {
        let wanted = private_service(&es(), &public()).unwrap();
        assert!(!private_service_has_cluster_ip(&wanted));
        let mut old = wanted.clone();
        old.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.17".into());
        assert!(private_service_has_cluster_ip(&old));
        assert!(!private_service_current(&old, &wanted));
    }

    #[test]
    fn a_public_service_without_selector_is_an_error() {
        let mut p = public();
        p.spec.as_mut().unwrap().selector = None;
        assert_eq!(
            private_service(&es(), &p).unwrap_err(),
            "Service web has no selector: wasmop finds the workload's pods through it"
        );
    }

    #[test]
    fn udp_and_sctp_ports_are_not_redirected_to_the_resolver() {
        let public: Service = serde_json::from_value(json!({
            "metadata": {"name": "dns", "namespace": "a"},
            "spec": {"selector": {"app": "dns"},
                     "ports": [{"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                               {"name": "dns", "port": 53, "protocol": "UDP"},
                               {"name": "sig", "port": 9, "protocol": "SCTP"},
                               {"name": "http", "port": 80}]}
        }))
        .unwrap();
        let es = es();
        let slice = resolver_slice(&es, &public, &[], 8012);
        let names: Vec<_> = slice
            .ports
            .unwrap()
            .into_iter()
            .map(|p| p.name.unwrap())
            .collect();
        assert_eq!(names, ["dns-tcp", "http"]);
        assert_eq!(non_tcp_ports(&public), ["dns (UDP)", "sig (SCTP)"]);
    }

    #[test]
    fn resolver_slice_redirects_every_port_to_ready_resolver_pods() {
        let pods = [
            pod("r-b", Some("10.244.0.9"), true),
            pod("r-a", Some("10.244.0.3"), true),
            pod("r-starting", Some("10.244.0.4"), false),
            pod("r-no-ip", None, true),
            pod("r-v6", Some("fd00::1"), true),
        ];
        let slice = resolver_slice(&es(), &public(), &pods, 8012);
        let v = serde_json::to_value(&slice).unwrap();
        assert_eq!(v["metadata"]["name"], resolver_slice_name("web").as_str());
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/service-name"], "web");
        assert_eq!(
            v["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "wasmop.dev"
        );
        assert_eq!(v["addressType"], "IPv4");
        assert_eq!(
            v["ports"],
            json!([{"name": "http", "port": 8012, "protocol": "TCP"},
                   {"name": "grpc", "port": 8012, "protocol": "TCP"}])
        );
        assert_eq!(
            v["endpoints"],
            json!([
                {"addresses": ["10.244.0.3"], "conditions": {"ready": true, "serving": true, "terminating": false},
                 "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "wasmop-system", "name": "r-a", "uid": "r-a-uid"}},
                {"addresses": ["10.244.0.9"], "conditions": {"ready": true, "serving": true, "terminating": false},
                 "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "wasmop-system", "name": "r-b", "uid": "r-b-uid"}}
            ])
        );
        assert!(slice_current(&slice, &slice));
        let fewer = resolver_slice(&es(), &public(), &pods[..1], 8012);
        assert!(!slice_current(&slice, &fewer), "resolver pods went away");
    }

    #[test]
    fn mode_needs_replicas_and_a_ready_endpoint_of_the_public_service() {
        let slice = |managed_by: &str, ready: Option<bool>| -> EndpointSlice {
            serde_json::from_value(json!({
                "metadata": {"name": "s", "labels": {"endpointslice.kubernetes.io/managed-by": managed_by}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.244.1.1"], "conditions": {"ready": ready}}]
            }))
            .unwrap()
        };
        let kcm = "endpointslice-controller.k8s.io";
        assert!(public_ready(&[slice(kcm, Some(true))]));
        assert!(public_ready(&[slice(kcm, None)]), "unset means ready");
        assert!(!public_ready(&[slice(kcm, Some(false))]));
        assert!(
            !public_ready(&[slice(MANAGED_BY, Some(true))]),
            "the resolver's endpoints do not count"
        );
        assert_eq!(mode(1, true), Mode::Serve);
        assert_eq!(mode(0, true), Mode::Proxy, "scaled to zero: proxy at once");
        assert_eq!(mode(1, false), Mode::Proxy, "pods not ready yet");
    }
}
