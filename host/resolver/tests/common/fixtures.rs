#![allow(dead_code)] // Each test target and the benchmark use a part of it.
//! Builders of the objects the resolver reads, for tests and benchmarks that feed a
//! `Catalog` by hand: an ElasticService, its public Service (port 80 named `http`), a ready
//! EndpointSlice of its private Service, and a demand sink that records. Shared by the unit
//! tests (src/lib.rs includes it), the integration tests and the benchmark.

use std::net::SocketAddr;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use wasmop_api::elasticservice::ElasticService;
use wasmop_api::names::private_service_name;
use wasmop_resolver::catalog::{MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use wasmop_resolver::demand::DemandSink;

/// ElasticService `es-<service>` in `ns` for public Service `service`; `spec_extra` is merged
/// into its spec (e.g. `probeResponse`), `status` is its status.
///
/// # Panics
/// When `spec_extra` or `status` do not fit the ElasticService schema.
pub fn elastic_service(
    ns: &str,
    service: &str,
    spec_extra: Value,
    status: Value,
) -> ElasticService {
    let mut spec = json!({"service": service, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": service}});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), spec_extra) {
        spec.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
        "metadata": {"name": format!("es-{service}"), "namespace": ns},
        "spec": spec, "status": status,
    }))
    .expect("an ElasticService")
}

/// Public Service `name` in `ns` with TCP port 80 named `http` (target port 8080).
///
/// # Panics
/// Never for valid names.
pub fn public_service(ns: &str, name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))
    .expect("a Service")
}

/// EndpointSlice `<service>-slice` of the private Service of `service`, as Kubernetes'
/// EndpointSlice controller writes it: one ready endpoint, `endpoint`, on port `http`.
///
/// # Panics
/// Never for valid names.
pub fn ready_slice(ns: &str, service: &str, endpoint: SocketAddr) -> EndpointSlice {
    slice_managed_by("endpointslice-controller.k8s.io", ns, service, endpoint)
}

/// [`ready_slice`] with `manager` in its `endpointslice.kubernetes.io/managed-by` label.
///
/// # Panics
/// Never for valid names.
pub fn slice_managed_by(
    manager: &str,
    ns: &str,
    service: &str,
    endpoint: SocketAddr,
) -> EndpointSlice {
    let family = if endpoint.is_ipv4() { "IPv4" } else { "IPv6" };
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": family,
        "metadata": {"name": format!("{service}-slice"), "namespace": ns,
                     "labels": {SERVICE_NAME_LABEL: private_service_name(service),
                                MANAGED_BY_LABEL: manager}},
        "ports": [{"name": "http", "port": endpoint.port(), "protocol": "TCP"}],
        "endpoints": [{"addresses": [endpoint.ip().to_string()], "conditions": {"ready": true}}],
    }))
    .expect("an EndpointSlice")
}

/// A [`DemandSink`] that records each signal as `namespace/elasticservice=time`.
#[derive(Debug, Default)]
pub struct RecordedDemand(Mutex<Vec<String>>);

impl RecordedDemand {
    /// The signals so far, oldest first.
    pub fn signals(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait::async_trait]
impl DemandSink for RecordedDemand {
    async fn signal(&self, ns: &str, es: &str, oldest: &str) -> Result<(), String> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{ns}/{es}={oldest}"));
        Ok(())
    }
}
