//! `ProxyRestartPolicy`: keep the Istio proxy sidecars of the pods it selects, and one ingress
//! gateway, in a desired state by restarting their workloads, as the Kyma Istio Operator's
//! sidecar and ingress gateway restarters do (docs/restart.md). Cluster-scoped: a policy
//! acts on the namespaces its `namespaceSelector` picks.
//!
//! What can be checked without the cluster is checked by the API server (OpenAPI and CEL):
//! `restartAfter` is an RFC 3339 time, quantities parse, the maintenance window has a
//! five-field schedule and a positive Go duration, limits are positive. The rest (a cron field
//! out of range, a selector that does not parse) is reported in the status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Default namespace of the ingress gateway Deployment (as upstream).
pub const DEFAULT_GATEWAY_NAMESPACE: &str = "istio-system";
/// Default name of the ingress gateway Deployment (as upstream).
pub const DEFAULT_GATEWAY_NAME: &str = "istio-ingressgateway";

/// Spec of a ProxyRestartPolicy.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "wasmop.dev",
    version = "v1alpha1",
    kind = "ProxyRestartPolicy",
    shortname = "prp",
    category = "wasmop",
    doc = "A ProxyRestartPolicy keeps the Istio sidecars of the pods it selects, and one ingress gateway, in a desired state, restarting their workloads once per change within chunk limits and a maintenance window (the Kyma Istio Operator's restarters). See docs/restart.md.",
    status = "ProxyRestartPolicyStatus",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state","description":"Ready, Processing, Warning, Error, Suspended or DryRun"}"#,
    printcolumn = r#"{"name":"Proxy Image","type":"string","jsonPath":".spec.proxy.image","priority":1,"description":"The desired sidecar image"}"#,
    printcolumn = r#"{"name":"Restarted","type":"integer","jsonPath":".status.summary.workloadsRestarted","description":"Workloads restarted by the last reconcile"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.summary.workloadsPending","description":"Workloads waiting for the next chunk or window"}"#,
    printcolumn = r#"{"name":"Warnings","type":"integer","jsonPath":".status.summary.warnings","description":"Workloads that need a manual restart"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode","priority":1,"description":"Restart (the default) or DryRun (report, restart nothing)"}"#,
    printcolumn = r#"{"name":"Would Restart","type":"integer","jsonPath":".status.wouldRestart.count","priority":1,"description":"Workloads a dry run would restart in this reconcile"}"#,
    printcolumn = r#"{"name":"Plugin","type":"string","jsonPath":".status.conditions[?(@.type==\"PluginReady\")].reason","priority":1,"description":"Why the restart plugin is or is not ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProxyRestartPolicySpec {
    /// The desired proxy state; pods whose sidecar differs are restarted (the plugin decides).
    #[serde(default)]
    pub proxy: ProxySpec,
    /// Pods created at or before this RFC 3339 time restart (the timestamp predicate of the
    /// upstream design). Use a time in the past.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    #[schemars(length(max = 64))]
    pub restart_after: Option<String>,
    /// The ingress gateway restarted when its settings (or `proxy.statsMatcher`) change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_gateway: Option<IngressGatewaySpec>,
    /// Namespaces whose pods this policy considers; all namespaces when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods this policy considers within those namespaces; all pods when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// How much one reconcile does.
    #[serde(default)]
    pub limits: RestartLimits,
    /// When set, restarts happen only inside this window; outside it they wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window: Option<MaintenanceWindow>,
    /// A registered restart plugin (`wasmop-plugins`); the default restart plugin when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub plugin: Option<String>,
    /// While true, nothing is restarted and nothing is evaluated for this policy: the status
    /// says `Suspended` and keeps what the last pass found. Setting it back to false restarts
    /// what is out of date then (nothing is recorded as applied while suspended). Default false.
    #[serde(default)]
    pub suspend: bool,
    /// `Restart` (the default) restarts what the plugin asks for; `DryRun` evaluates every pod
    /// as `Restart` would (plugin, chunk limit, maintenance window) and reports what it would
    /// restart in `status.wouldRestart` and an Event, restarting and recording nothing.
    #[serde(default)]
    #[schemars(with = "String", extend("enum" = ["Restart", "DryRun"]))]
    pub mode: RestartMode,
}

/// What a ProxyRestartPolicy does with the pods its plugin would restart (`spec.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartMode {
    /// Restart them (rollouts, pod deletions).
    #[default]
    Restart,
    /// Report them in `status.wouldRestart` and an Event; write nothing to workloads or pods.
    DryRun,
}

/// The desired state of the `istio-proxy` sidecar. Every field is optional: an absent field is
/// not compared. This object, plus `restartAfter`, is the `desired` JSON the restart plugin
/// receives (see `plugins/restart-sidecar`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxySpec {
    /// The proxy image, `registry/name:tag`; pods whose `istio-proxy` container or init
    /// container runs another image restart, unless annotated `sidecar.istio.io/proxyImage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// The proxy's requests and limits (per-pod `sidecar.istio.io/proxyCPU` and similar
    /// annotations override them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ProxyResources>,
    /// Whether the Istio CNI plugin is enabled: pods with init container `istio-init` restart
    /// when it is, pods with `istio-validation` when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<bool>,
    /// Istio DNS proxying; a change restarts every selected pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_proxying: Option<bool>,
    /// The proxy stats matcher; a change restarts every selected pod and the ingress gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_matcher: Option<StatsMatcher>,
    /// Whether Istio merges application metrics into the proxy's: pods whose
    /// `prometheus.io/path`/`port` annotations do not say so restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus_merge: Option<bool>,
    /// The proxy status port the merged metrics are served on (default 15020).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub status_port: Option<i32>,
}

/// Requests and limits of the `istio-proxy` container.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyResources {
    /// `resources.requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceValues>,
    /// `resources.limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceValues>,
}

/// CPU and memory as Kubernetes quantities (`100m`, `128Mi`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceValues {
    /// CPU, e.g. `100m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("cpu must be a Kubernetes quantity such as 100m or 2"))]
    pub cpu: Option<String>,
    /// Memory, e.g. `128Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("memory must be a Kubernetes quantity such as 128Mi or 1Gi"))]
    pub memory: Option<String>,
}

/// Istio's `proxyStatsMatcher`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsMatcher {
    /// Regular expressions of the stats to keep; order and duplicates do not matter, and an
    /// absent list equals an empty one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub inclusion_regexps: Option<Vec<String>>,
}

/// The ingress gateway Deployment and the settings whose change restarts it (as upstream:
/// `numTrustedProxies`, `forwardClientCertDetails`, `trustDomain`, and `proxy.statsMatcher`).
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressGatewaySpec {
    /// Namespace of the gateway Deployment (default `istio-system`).
    #[serde(default = "default_gateway_namespace")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Name of the gateway Deployment (default `istio-ingressgateway`).
    #[serde(default = "default_gateway_name")]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Trusted proxies in front of the gateway (`X-Forwarded-For` hops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4294967295_i64))]
    pub num_trusted_proxies: Option<i64>,
    /// How the gateway handles the `x-forwarded-client-cert` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["UNDEFINED", "SANITIZE", "FORWARD_ONLY", "APPEND_FORWARD", "SANITIZE_SET", "ALWAYS_FORWARD_ONLY"]))]
    pub forward_client_cert_details: Option<String>,
    /// The mesh trust domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub trust_domain: Option<String>,
}

impl Default for IngressGatewaySpec {
    fn default() -> Self {
        Self {
            namespace: default_gateway_namespace(),
            name: default_gateway_name(),
            num_trusted_proxies: None,
            forward_client_cert_details: None,
            trust_domain: None,
        }
    }
}

fn default_gateway_namespace() -> String {
    DEFAULT_GATEWAY_NAMESPACE.into()
}

fn default_gateway_name() -> String {
    DEFAULT_GATEWAY_NAME.into()
}

/// How much one reconcile does (the chunking of upstream's legacy restarter).
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartLimits {
    /// Restarts per reconcile: a workload rollout, or a pod deletion, counts one (default 30).
    /// Work left over is done by the next reconcile, `requeueAfter` later.
    #[serde(default = "default_restarts")]
    #[schemars(range(min = 1, max = 10000))]
    pub restarts_per_reconcile: i32,
    /// Pods per list request to the API server, and per plugin call (default 100).
    #[serde(default = "default_page_size")]
    #[schemars(range(min = 1, max = 500))]
    pub page_size: i32,
    /// Delay before the next chunk, a Go duration (default `1m`).
    #[serde(default = "default_requeue_after")]
    #[schemars(extend("pattern" = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s')").message("requeueAfter must be at least 1s"))]
    pub requeue_after: String,
}

impl Default for RestartLimits {
    fn default() -> Self {
        Self {
            restarts_per_reconcile: default_restarts(),
            page_size: default_page_size(),
            requeue_after: default_requeue_after(),
        }
    }
}

fn default_restarts() -> i32 {
    30
}

fn default_page_size() -> i32 {
    100
}

fn default_requeue_after() -> String {
    "1m".into()
}

/// A window, opened by a cron schedule and lasting `duration`, outside of which nothing is
/// restarted (the window is open when the latest start at or before now, plus the duration,
/// is after now).
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceWindow {
    /// Five-field cron expression (UTC) of the window's start, e.g. `0 2 * * *`.
    #[schemars(extend("pattern" = r"^\s*\S+(\s+\S+){4}\s*$"))]
    #[schemars(length(max = 128))]
    pub schedule: String,
    /// Length of the window, a Go duration such as `4h` or `1h30m`.
    #[schemars(extend("pattern" = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("duration must be positive"))]
    pub duration: String,
}

/// The desired proxy state as the restart plugin receives it: `spec.proxy` plus
/// `restartAfter`, one JSON object.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredProxy {
    /// `spec.proxy`.
    #[serde(flatten)]
    pub proxy: ProxySpec,
    /// `spec.restartAfter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_after: Option<String>,
}

/// The gateway settings whose change restarts the ingress gateway.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySettings {
    /// `spec.ingressGateway.numTrustedProxies`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_trusted_proxies: Option<i64>,
    /// `spec.ingressGateway.forwardClientCertDetails`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_client_cert_details: Option<String>,
    /// `spec.ingressGateway.trustDomain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
    /// `spec.proxy.statsMatcher`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_matcher: Option<StatsMatcher>,
}

/// What has been applied: the last desired state every selected workload was restarted for
/// (recorded even when some workloads need a manual restart, so a retry does not restart the
/// others again), and the gateway settings the gateway was last restarted for.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedConfiguration {
    /// The desired proxy state last applied (the plugin's `applied`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<DesiredProxy>,
    /// Its hash: the value of the `wasmop.dev/restart-config` pod-template annotation of the
    /// workloads restarted for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_hash: Option<String>,
    /// The gateway settings last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_gateway: Option<GatewaySettings>,
}

/// Counts of the last reconcile.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartSummary {
    /// Eligible pods the plugin judged.
    pub pods_evaluated: i64,
    /// Workloads restarted (rollouts and pod deletions) by this reconcile.
    pub workloads_restarted: i64,
    /// Workloads that need a restart and wait for the next chunk or the maintenance window.
    pub workloads_pending: i64,
    /// Workloads that need a manual restart (bare pods, Job pods, unsupported owners).
    pub warnings: i64,
    /// Pods left alone because they or their workload carry `wasmop.dev/restart-exclude: "true"`.
    pub excluded: i64,
    /// Pods already restarted for the desired state (their workload's template carries its hash).
    pub already_restarted: i64,
}

/// Longest list of [`WouldRestart::workloads`].
pub const MAX_WOULD_RESTART: usize = 50;

/// What a dry run would have restarted in one reconcile (within the chunk limit and the
/// maintenance window; what would wait is `summary.workloadsPending`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WouldRestart {
    /// How many restarts (workload rollouts, pod deletions, the ingress gateway) it would make.
    pub count: i64,
    /// The first 50 of them (`MAX_WOULD_RESTART`), sorted by namespace, kind and name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub workloads: Vec<WouldRestartWorkload>,
}

/// One restart a dry run would make.
#[derive(
    KubeSchema, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub struct WouldRestartWorkload {
    /// Namespace of the object.
    pub namespace: String,
    /// `Deployment`, `DaemonSet` or `StatefulSet` (a rollout), or `Pod` (a pod of a bare
    /// ReplicaSet or ReplicationController, deleted to be re-created).
    pub kind: String,
    /// Name of the object.
    pub name: String,
    /// Why: the plugin's reason for the first of its pods (at most 256 bytes), or the gateway
    /// settings that changed.
    pub reason: String,
}

/// Observed state.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyRestartPolicyStatus {
    /// `Ready`, `Processing` (restarts continue in the next chunk or window), `Warning` (some
    /// workloads need a manual restart), `Error`, `Suspended` (`spec.suspend`) or `DryRun`
    /// (`spec.mode: DryRun`, when the evaluation did not fail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// What the state means, as upstream: `"<description>: <error>"` when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What has been applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_configuration: Option<AppliedConfiguration>,
    /// Counts of the last reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<RestartSummary>,
    /// Other ProxyRestartPolicies that select some of the same pods (sorted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlapping_policies: Vec<String>,
    /// What the last reconcile would have restarted, with `spec.mode: DryRun` (absent otherwise;
    /// kept while suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_restart: Option<WouldRestart>,
    /// Conditions: `Ready`, `ProxySidecarRestartSucceeded`, `IngressGatewayRestartSucceeded`
    /// (with an ingress gateway), `OverlappingPolicies` and `PluginReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The CRD's `spec.proxy` plus `restartAfter` is the `desired` JSON the default plugin reads:
    /// every field arrives with its meaning.
    #[test]
    fn the_desired_state_is_what_the_default_plugin_reads() {
        let spec: ProxyRestartPolicySpec = serde_json::from_value(json!({
            "proxy": {
                "image": "proxy:2",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"cpu": "2", "memory": "1Gi"}},
                "cni": true, "dnsProxying": false,
                "statsMatcher": {"inclusionRegexps": ["a", "b"]},
                "prometheusMerge": true, "statusPort": 15021
            },
            "restartAfter": "2026-08-21T10:00:00Z"
        }))
        .unwrap();
        let desired = DesiredProxy {
            proxy: spec.proxy,
            restart_after: spec.restart_after,
        };
        let json = serde_json::to_string(&desired).unwrap();
        let read = restart_sidecar::DesiredProxy::from_json(&json).unwrap();
        assert_eq!(read.image.as_deref(), Some("proxy:2"));
        let r = read.resources.unwrap();
        assert_eq!(r.requests.as_ref().unwrap().cpu.as_deref(), Some("100m"));
        assert_eq!(r.requests.unwrap().memory.as_deref(), Some("128Mi"));
        assert_eq!(r.limits.as_ref().unwrap().cpu.as_deref(), Some("2"));
        assert_eq!(r.limits.unwrap().memory.as_deref(), Some("1Gi"));
        assert_eq!(
            (read.cni, read.dns_proxying, read.prometheus_merge),
            (Some(true), Some(false), Some(true))
        );
        assert_eq!(
            read.stats_matcher.unwrap().inclusion_regexps,
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(read.status_port, 15021);
        assert_eq!(read.restart_after.as_deref(), Some("2026-08-21T10:00:00Z"));

        // An empty policy compares nothing.
        let empty = serde_json::to_string(&DesiredProxy::default()).unwrap();
        assert_eq!(empty, "{}");
        assert_eq!(
            restart_sidecar::DesiredProxy::from_json(&empty).unwrap(),
            restart_sidecar::DesiredProxy::default()
        );
    }
}
