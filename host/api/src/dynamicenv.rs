//! `DynamicEnv`: launch custom versions of Deployments and route to them by header or source
//! label, field-for-field as Riskified's Dynamic Environment (docs/routing.md). The
//! upstream webhook's checks are CEL rules here, so the API server rejects invalid objects
//! with a message naming the field.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Spec of a DynamicEnv. A `namespace/name` appears at most once in `subsets` and at most
/// once in `consumers` (list-map keys); the controller reports one listed in both.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "wasmop.dev",
    version = "v1alpha1",
    kind = "DynamicEnv",
    namespaced,
    shortname = "de",
    category = "wasmop",
    doc = "A DynamicEnv clones Deployments with overrides and routes the requests that match its istioMatches to the clones through Istio VirtualServices and DestinationRules (Riskified's Dynamic Environment). See docs/routing.md.",
    status = "DynamicEnvStatus",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.state","description":"ready, processing or degraded"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".status.totalCount","description":"Subsets and consumers"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.totalReady","description":"Subsets and consumers ready"}"#,
    printcolumn = r#"{"name":"Plugin","type":"string","jsonPath":".status.conditions[?(@.type==\"PluginReady\")].reason","priority":1,"description":"Why the router plugin is or is not ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DynamicEnvSpec {
    /// Requests matching any entry are routed to the subsets (entries are ORed).
    #[x_kube(validation = Rule::new("size(self) > 0").message("at least one istioMatch is required"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("istioMatches is immutable"))]
    #[schemars(length(max = 16))]
    pub istio_matches: Vec<IstioMatch>,
    /// Deployments to clone with overrides; each gets routes and a DestinationRule subset.
    #[schemars(length(min = 1, max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["namespace", "name"]))]
    pub subsets: Vec<Subset>,
    /// Deployments to clone with overrides and no routing (they call the subsets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["namespace", "name"]))]
    pub consumers: Option<Vec<Subset>>,
    /// A registered router plugin (`wasmop-plugins`); the default routing plugin when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
}

/// One match: its headers and source labels are ANDed.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "(has(self.headers) && size(self.headers) > 0) || (has(self.sourceLabels) && size(self.sourceLabels) > 0)"
).message("empty IstioMatch is invalid: set headers or sourceLabels"))]
pub struct IstioMatch {
    /// Header name to value match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 32))]
    pub headers: Option<BTreeMap<String, StringMatch>>,
    /// Labels the calling workload must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 32))]
    pub source_labels: Option<BTreeMap<String, String>>,
}

/// How a header is compared: exactly one of `exact`, `prefix`, `regex` (Istio `StringMatch`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new(
    "[has(self.exact), has(self.prefix), has(self.regex)].filter(x, x).size() == 1"
).message("exactly one of exact, prefix or regex must be set (oneOf)"))]
#[x_kube(validation = Rule::new("!has(self.prefix) || size(self.prefix) > 0")
    .message("prefix string match should not be empty (Istio refuses it)"))]
#[x_kube(validation = Rule::new(
    "!has(self.regex) || (size(self.regex) > 0 && (''.matches(self.regex) || !''.matches(self.regex)))"
).message("regex must be a non-empty RE2 regular expression (Istio refuses others)"))]
pub struct StringMatch {
    /// Exact value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub exact: Option<String>,
    /// Value prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    /// RE2 regular expression, at most 1024 characters (Istio's limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub regex: Option<String>,
}

/// A Deployment to clone and how to override it.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "(has(self.containers) ? size(self.containers) : 0) + (has(self.initContainers) ? size(self.initContainers) : 0) > 0"
).message("at least one container or initContainer override is required"))]
#[x_kube(validation = Rule::new(
    "(has(self.defaultVersion) ? self.defaultVersion : '') == (has(oldSelf.defaultVersion) ? oldSelf.defaultVersion : '')"
).message("defaultVersion is immutable").field_path(".defaultVersion"))]
#[x_kube(validation = Rule::new(
    "(has(self.containers) ? self.containers.map(c, c.containerName) : []) == (has(oldSelf.containers) ? oldSelf.containers.map(c, c.containerName) : []) && (has(self.initContainers) ? self.initContainers.map(c, c.containerName) : []) == (has(oldSelf.initContainers) ? oldSelf.initContainers.map(c, c.containerName) : [])"
).message("the names of containers and initContainers are immutable").field_path(".containers"))]
pub struct Subset {
    /// Name of the base Deployment.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the base Deployment.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Extra labels for the clone's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// Replicas of the clone (default 1; 0 is invalid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != 0").message("replicas must not be 0"))]
    pub replicas: Option<i32>,
    /// Container overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["containerName"]))]
    pub containers: Option<Vec<ContainerOverrides>>,
    /// Init container overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["containerName"]))]
    pub init_containers: Option<Vec<ContainerOverrides>>,
    /// The `version` label value of the base routes to copy (default `shared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub default_version: Option<String>,
}

/// Overrides of one container (matched by name; it must exist in the base Deployment).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverrides {
    /// Name of the container in the base Deployment.
    #[schemars(length(min = 1, max = 63))]
    pub container_name: String,
    /// Replacement image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Replacement command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Environment merged into the container's (same name overrides, new names appended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
}

/// Observed state, as upstream's status.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicEnvStatus {
    /// Per subset, keyed `<namespace>/<deployment>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subsets_status: BTreeMap<String, SubsetStatus>,
    /// Per consumer, keyed `<namespace>/<deployment>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumers_status: BTreeMap<String, ConsumerStatus>,
    /// `ready`, `processing` or `degraded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Subsets plus consumers.
    #[serde(default)]
    pub total_count: i32,
    /// Those of them that are ready.
    #[serde(default)]
    pub total_ready: i32,
    /// Conditions, e.g. `PluginReady` (whether the router plugin it uses is loaded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A resource wasmop created or changed, and its status (`unknown`, `initializing`, `running`,
/// `failed`, `missing`, `updating`, `removing`, `ignored-missing-destination-rule`,
/// `ignored-missing-virtual-service`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceStatus {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Status value.
    pub status: String,
    /// For a VirtualService only: its routes to the subset's service at the default version
    /// that got no copy for some istioMatch, each as `route "NAME" (spec.http[I]) has no copy
    /// for istioMatches[J, …]` (docs/routing.md, "Routes that get no copy"); omitted when empty.
    #[serde(
        rename = "skippedRoutes",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub skipped_routes: Vec<String>,
    /// For a VirtualService only: the router plugins (registry entries) whose answers made the
    /// subset's routes in it, in call order: those the DynamicEnv's plugin builds on (`after:`
    /// in the registry), then that plugin. A refining plugin whose call failed under
    /// `failurePolicy: Ignore` is left out (docs/routing.md, "Refining a router: `after`");
    /// omitted when no plugin answered.
    #[serde(rename = "decidedBy", default, skip_serializing_if = "Vec::is_empty")]
    pub decided_by: Vec<String>,
}

/// An error attached to a status entry (de-duplicated by text; cleared once fixed).
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusError {
    /// The error text.
    pub error: String,
    /// When the error was first seen in its current run: kept while it persists, so an
    /// unchanged error does not rewrite the status. Unset in `wasmop plan` output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_occurrence: Option<Time>,
}

/// Errors of one subset by the resource they concern.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubsetErrors {
    /// Deployment errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployment: Vec<StatusError>,
    /// DestinationRule errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_rule: Vec<StatusError>,
    /// VirtualService errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_services: Vec<StatusError>,
    /// Errors of the subset as a whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subset: Vec<StatusError>,
}

/// Status of one subset.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubsetStatus {
    /// The clone Deployment.
    pub deployment: ResourceStatus,
    /// DestinationRules created for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_rules: Vec<ResourceStatus>,
    /// VirtualServices whose routes it changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_services: Vec<ResourceStatus>,
    /// Errors, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset_errors: Option<SubsetErrors>,
    /// Hash of the subset spec the clone was built from: a signed 64-bit integer, as
    /// upstream's `hash` (int64); a string written by an earlier version reads as 0.
    #[serde(default, deserialize_with = "int_hash")]
    pub hash: i64,
}

/// Reads a status `hash`: an integer, or the hex string earlier versions wrote (then 0: the
/// next status write replaces it).
fn int_hash<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    Ok(serde_json::Value::deserialize(d)?.as_i64().unwrap_or(0))
}

/// Status of one consumer.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerStatus {
    /// The clone Deployment's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its status value.
    pub status: String,
    /// Hash of the consumer spec the clone was built from (as the subset's `hash`).
    #[serde(default, deserialize_with = "int_hash")]
    pub hash: i64,
    /// Errors, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<StatusError>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_status_hash_is_an_integer_and_a_stored_string_reads_as_zero() {
        let read = |hash: serde_json::Value| -> ConsumerStatus {
            serde_json::from_value(serde_json::json!({
                "name": "c", "namespace": "n", "status": "running", "hash": hash,
            }))
            .unwrap()
        };
        assert_eq!(
            read(serde_json::json!(-7_893_432_429_265_961_114_i64)).hash,
            -7_893_432_429_265_961_114
        );
        assert_eq!(read(serde_json::json!("3f2a9c01de")).hash, 0);
        let written = serde_json::to_value(read(serde_json::json!(42))).unwrap();
        assert_eq!(written["hash"], serde_json::json!(42));
        let crd = serde_json::to_value(DynamicEnv::crd()).unwrap();
        let hash = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]["consumersStatus"]["additionalProperties"]["properties"]["hash"];
        assert_eq!(
            (hash["type"].as_str(), hash["format"].as_str()),
            (Some("integer"), Some("int64")),
            "{hash}"
        );
    }
}
