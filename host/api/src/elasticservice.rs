//! `ElasticService`: scale a workload to zero when its triggers say it is idle and back up on
//! the first request, which the resolver holds meanwhile. The spec is field-compatible with
//! KubeElasti's `ElastiService` (docs/scaling.md): an ElastiService spec works after
//! changing `apiVersion` and `kind`. Upstream's traps are fixed: `minTargetReplicas` defaults
//! to 1 and a trigger's `threshold` may be a number or a string.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The annotation through which the resolver signals demand for a service at zero: the RFC 3339
/// time of the oldest request it holds. The controller scales the target up when this is newer
/// than `status.lastScaledUpTime`.
pub const DEMAND_ANNOTATION: &str = "wasmop.dev/demand";

/// Spec of an ElasticService.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "wasmop.dev",
    version = "v1alpha1",
    kind = "ElasticService",
    namespaced,
    shortname = "elsvc",
    category = "wasmop",
    doc = "An ElasticService scales a workload to zero when its triggers say it is idle and back up on the first request, which the wasmop resolver holds meanwhile (KubeElasti's ElastiService). See docs/scaling.md.",
    status = "ElasticServiceStatus",
    printcolumn = r#"{"name":"Service","type":"string","jsonPath":".spec.service","description":"The public Service"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".status.mode","description":"serve (traffic to the workload) or proxy (to the resolver, at zero)"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"The Ready condition"}"#,
    printcolumn = r#"{"name":"Last Scaled Up","type":"date","jsonPath":".status.lastScaledUpTime","description":"When the service was last scaled up"}"#,
    printcolumn = r#"{"name":"Plugin","type":"string","jsonPath":".status.conditions[?(@.type==\"PluginReady\")].reason","priority":1,"description":"Why the scaler plugin is or is not ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ElasticServiceSpec {
    /// The workload that is scaled (through its `scale` subresource). Deleting the
    /// ElasticService scales it back to `minTargetReplicas` if it is below.
    pub scale_target_ref: ScaleTargetRef,
    /// Name of the public Service in front of the workload (same namespace). It must have a
    /// selector; wasmop never modifies it.
    #[schemars(length(min = 1, max = 63))]
    pub service: String,
    /// Replicas when the service is up (default 1; upstream's omitted value meant 0).
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 1))]
    pub min_target_replicas: i32,
    /// Seconds since the last activity (or creation) before the service may go to zero
    /// (default 900; 0 means 900, as upstream).
    #[serde(default = "default_cooldown")]
    #[schemars(range(min = 0, max = 604800))]
    pub cooldown_period: i32,
    /// The triggers, evaluated by the scaler plugin every poll interval; any "up" vote keeps
    /// the service up, all "down" votes let it go to zero once the cooldown is over. Without
    /// triggers the service never goes to zero by itself and is only woken on demand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub triggers: Vec<ScaleTrigger>,
    /// The autoscaler that owns the workload while it is up; `keda` is paused at zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<AutoscalerRef>,
    /// When set, the service may go to zero only inside this window (outside it stays up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_period: Option<EnabledPeriod>,
    /// Answers the resolver gives itself while the service is at zero (e.g. load-balancer
    /// health checks), first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub probe_response: Vec<ProbeResponse>,
    /// A registered scaler plugin (`wasmop-plugins`); the default scaling plugin when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
}

fn default_min_replicas() -> i32 {
    1
}

fn default_cooldown() -> i32 {
    900
}

/// The scaled workload: a Deployment, StatefulSet or Argo Rollout.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "self.apiVersion == 'apps/v1' ? self.kind in ['deployments', 'Deployment', 'statefulsets', 'StatefulSet'] : self.kind in ['rollouts', 'Rollout']"
).message("scaleTargetRef: apps/v1 takes kind Deployment or StatefulSet, argoproj.io/v1alpha1 takes kind Rollout"))]
pub struct ScaleTargetRef {
    /// `apps/v1` or `argoproj.io/v1alpha1`.
    #[schemars(extend("enum" = ["apps/v1", "argoproj.io/v1alpha1"]))]
    pub api_version: String,
    /// `Deployment`, `StatefulSet` or `Rollout` (upstream's lowercase plurals are accepted).
    pub kind: String,
    /// Name of the workload in the ElasticService's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// One trigger: a type and its metadata, passed as JSON to the scaler plugin.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleTrigger {
    /// The trigger type, e.g. `prometheus`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 63))]
    pub type_: String,
    /// Free-form settings of the trigger, e.g. for `prometheus`: `query`, `serverAddress`,
    /// `threshold` (number or string), `uptimeFilter`.
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub metadata: serde_json::Value,
}

fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The autoscaler of the workload.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoscalerRef {
    /// `hpa` or `keda`.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["hpa", "keda"]))]
    pub type_: String,
    /// Name of the HorizontalPodAutoscaler or KEDA ScaledObject.
    pub name: String,
}

/// A window, opened by a cron schedule and lasting `duration`, in which the service may go to
/// zero; outside it the service is kept up (as upstream: the latest start at or before now,
/// plus the duration, must be later than now).
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnabledPeriod {
    /// Five-field cron expression (UTC) of the window's start (default `0 0 * * *`).
    #[serde(default = "default_schedule")]
    #[schemars(extend("pattern" = r"^\s*\S+(\s+\S+){4}\s*$"))]
    #[schemars(length(max = 128))]
    pub schedule: String,
    /// Length of the window, a Go duration such as `8h`, `90m` or `1h30m` (default `24h`).
    #[serde(default = "default_duration")]
    #[schemars(extend("pattern" = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    #[schemars(length(max = 64))]
    pub duration: String,
}

fn default_schedule() -> String {
    "0 0 * * *".into()
}

fn default_duration() -> String {
    "24h".into()
}

/// One locally answered request pattern and its answer.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeResponse {
    /// What a request must look like (all conditions ANDed).
    #[serde(default, rename = "match")]
    pub match_: ProbeMatch,
    /// The answer.
    pub response: ProbeAnswer,
}

/// Request conditions, in the style of Gateway API's `HTTPRouteMatch`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeMatch {
    /// Path condition (default: prefix `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathMatch>,
    /// Header conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<ValueMatch>,
    /// Query parameter conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_params: Vec<ValueMatch>,
    /// HTTP method, e.g. `GET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// A path condition.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathMatch {
    /// `PathPrefix` (default), `Exact` or `RegularExpression`.
    #[serde(rename = "type", default = "default_path_type")]
    #[schemars(extend("enum" = ["PathPrefix", "Exact", "RegularExpression"]))]
    pub type_: String,
    /// The path or pattern.
    pub value: String,
}

fn default_path_type() -> String {
    "PathPrefix".into()
}

/// A header or query parameter condition.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValueMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type", default = "default_value_type")]
    #[schemars(extend("enum" = ["Exact", "RegularExpression"]))]
    pub type_: String,
    /// Header or parameter name (headers compare case-insensitively).
    pub name: String,
    /// The value or pattern.
    pub value: String,
}

fn default_value_type() -> String {
    "Exact".into()
}

/// A locally given answer.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeAnswer {
    /// HTTP status code.
    // Kubernetes knows int32, not schemars' uint16 (which it warns about on every apply).
    #[schemars(range(min = 100, max = 599), extend("format" = "int32"))]
    pub status: u16,
    /// Body (none for HEAD requests).
    #[serde(default)]
    pub body: String,
}

/// Observed state.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElasticServiceStatus {
    /// `serve` (traffic goes to the workload's ready pods) or `proxy` (traffic goes to the
    /// resolver, which holds requests until the workload is ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// When the service was last scaled up (by the triggers or on demand); the cooldown counts
    /// from the latest of this and the times votes turned down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scaled_up_time: Option<Time>,
    /// When the controller last reconciled this resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconciled_time: Option<Time>,
    /// Name of the private Service that selects the workload's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_service: Option<String>,
    /// Each trigger's vote, in spec order; an entry changes only when its vote does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trigger_votes: Vec<TriggerVoteStatus>,
    /// Conditions: `Ready` (the objects are in place for the mode; False with the reason
    /// otherwise), `Triggers` (the last evaluation and its decision) and `PluginReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// What one trigger said.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerVoteStatus {
    /// The trigger's type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `up`, `down`, or `error`.
    pub vote: String,
    /// The measured value when the trigger took this vote, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The plugin's explanation or the error.
    pub reason: String,
    /// When the trigger took this vote (the poll where its vote changed).
    pub time: Time,
}
