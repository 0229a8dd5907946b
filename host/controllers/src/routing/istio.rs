//! Istio's `networking.istio.io/v1` VirtualService and DestinationRule as small serde types:
//! the fields wasmop reads are typed, everything else is kept as JSON so that an object read
//! and written back loses nothing. [`kube::Resource`] is implemented by hand (no CRD derive:
//! the CRDs are Istio's), so they work with `kube::Api`, reflectors and the write gate.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// API group of both kinds.
pub(crate) const GROUP: &str = "networking.istio.io";
/// API version wasmop reads and writes.
pub(crate) const VERSION: &str = "v1";

macro_rules! istio_resource {
    ($ty:ident, $kind:literal, $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// An Istio VirtualService.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualService {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec.
    #[serde(default)]
    pub spec: VirtualServiceSpec,
}

/// The parts of a VirtualService spec wasmop reads; the rest is kept in `other`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualServiceSpec {
    /// Hosts it serves (short names resolve in the VirtualService's namespace). Empty for a
    /// delegate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// HTTP routes (Istio `HTTPRoute` objects), in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<Vec<Value>>,
    /// Every other field (`gateways`, `tcp`, `exportTo`, ...).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

istio_resource!(VirtualService, "VirtualService", "virtualservices");

/// An Istio DestinationRule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DestinationRule {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec.
    #[serde(default)]
    pub spec: DestinationRuleSpec,
}

/// The parts of a DestinationRule spec wasmop reads; the rest is kept in `other`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRuleSpec {
    /// The service host (short or fully qualified).
    #[serde(default)]
    pub host: String,
    /// Traffic policy of the whole host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<Value>,
    /// Named subsets of the host's endpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subsets: Vec<DestinationRuleSubset>,
    /// Namespaces the rule is visible to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_to: Option<Vec<String>>,
    /// Every other field (`workloadSelector`, ...).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One subset of a DestinationRule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRuleSubset {
    /// Subset name, referenced by route destinations.
    pub name: String,
    /// Pod labels that select the subset's endpoints.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Traffic policy of this subset (overrides the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<Value>,
    /// Every other field.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

istio_resource!(DestinationRule, "DestinationRule", "destinationrules");

// Host names and route names as the route checks read them: one copy of the rules.
pub(crate) use wasmop_plugin_host::route_checks::{route_name, service_of_host};

/// A route's `delegate` as `(namespace, name)`; the namespace defaults to `vs_ns`.
pub(crate) fn delegate_of(route: &Value, vs_ns: &str) -> Option<(String, String)> {
    let d = route.get("delegate")?;
    let name = d.get("name")?.as_str()?.to_owned();
    let ns = d
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(vs_ns)
        .to_owned();
    Some((ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_round_trip_without_losing_fields() {
        let vs = json!({
            "metadata": {"name": "reviews", "namespace": "default"},
            "spec": {"hosts": ["reviews"], "gateways": ["mesh"], "http": [{"route": []}],
                     "tcp": [{"route": []}], "exportTo": ["."]}
        });
        let parsed: VirtualService = serde_json::from_value(vs.clone()).unwrap();
        assert_eq!(parsed.spec.hosts, ["reviews"]);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), vs);
        let dr = json!({
            "metadata": {"name": "reviews", "namespace": "default"},
            "spec": {"host": "reviews", "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}},
                     "subsets": [{"name": "shared", "labels": {"version": "shared"},
                                  "trafficPolicy": {"loadBalancer": {"simple": "ROUND_ROBIN"}}}],
                     "workloadSelector": {"matchLabels": {"a": "b"}}}
        });
        let parsed: DestinationRule = serde_json::from_value(dr.clone()).unwrap();
        assert_eq!(parsed.spec.subsets[0].labels["version"], "shared");
        assert_eq!(serde_json::to_value(&parsed).unwrap(), dr);
    }

    #[test]
    fn delegates_default_to_the_namespace_of_the_root() {
        assert_eq!(
            delegate_of(&json!({"delegate": {"name": "d"}}), "root"),
            Some(("root".into(), "d".into()))
        );
        assert_eq!(
            delegate_of(
                &json!({"delegate": {"name": "d", "namespace": "x"}}),
                "root"
            ),
            Some(("x".into(), "d".into()))
        );
        assert_eq!(delegate_of(&json!({"route": []}), "root"), None);
    }
}
