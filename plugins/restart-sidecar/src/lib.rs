//! The default `restart` plugin: decides, for one page of pods, which must restart so that their
//! `istio-proxy` sidecar matches the desired proxy state, and why. The predicates follow the
//! Kyma Istio Operator's sidecar restarter (docs/restart.md).
//!
//! # The desired proxy state
//!
//! `desired` and `applied` in the `restart-request` are JSON objects of this shape (the
//! ProxyRestartPolicy's `spec.proxy` plus `restartAfter`); [`DesiredProxy`] is its Rust form.
//! `applied` is the same shape as last applied, or `null` before the first application.
//!
//! ```json
//! {
//!   "image": "docker.io/istio/proxyv2:1.27.1",
//!   "resources": {
//!     "requests": { "cpu": "100m", "memory": "128Mi" },
//!     "limits":   { "cpu": "2",    "memory": "1Gi" }
//!   },
//!   "cni": true,
//!   "dnsProxying": true,
//!   "statsMatcher": { "inclusionRegexps": [".*outlier_detection.*"] },
//!   "prometheusMerge": false,
//!   "statusPort": 15020,
//!   "restartAfter": "2026-08-21T10:00:00Z"
//! }
//! ```
//!
//! | field | type | absent or `null` means |
//! |---|---|---|
//! | `image` | `registry/name:tag` | images are not compared |
//! | `resources.{requests,limits}.{cpu,memory}` | Kubernetes quantity (string, or number) | that value is not compared |
//! | `cni` | bool: the CNI plugin is enabled | the CNI predicate is off |
//! | `dnsProxying` | bool | unset (a value of its own: unset ≠ `false`) |
//! | `statsMatcher.inclusionRegexps` | list of strings | the empty list |
//! | `prometheusMerge` | bool | the Prometheus merge predicate is off |
//! | `statusPort` | 1‥65535 | 15020 |
//! | `restartAfter` | RFC 3339 timestamp | the timestamp predicate is off |
//!
//! Other keys are ignored, so the host may add fields before this plugin reads them.
//!
//! # Predicates
//!
//! A pod restarts when at least one predicate is true; the reason lists every one that is,
//! separated by `; `.
//!
//! | predicate | restarts a pod when |
//! |---|---|
//! | image | an `istio-proxy` container or init container has an image ≠ `image` (exact string) |
//! | resources | a cpu/memory request/limit of an `istio-proxy` container ≠ the expected value, compared as quantities (`100m` = `0.1`); a value the container lacks counts as zero |
//! | CNI | `cni` is true and the pod has init container `istio-init`, or false and it has `istio-validation` |
//! | DNS proxying | `applied` is not `null` and its `dnsProxying` ≠ desired (every pod) |
//! | stats matcher | `applied` is not `null` and the sorted, deduplicated `inclusionRegexps` differ (every pod) |
//! | Prometheus merge | on: annotation `prometheus.io/path` ≠ `/stats/prometheus` or `prometheus.io/port` ≠ `statusPort`; off: either one equals it |
//! | restart after | the pod's `metadata.creationTimestamp` ≤ `restartAfter` |
//!
//! Image and resources are skipped for a pod annotated `sidecar.istio.io/proxyImage` (a custom
//! proxy the user manages). The expected resources come from `resources` unless the pod carries
//! any of `sidecar.istio.io/proxyCPU`, `proxyMemory`, `proxyCPULimit` or `proxyMemoryLimit`. Then
//! they come from those annotations only, as Istio's injector replaces the whole block with
//! them: a limit annotation also sets the request when its request annotation is absent (the
//! API server's defaulting), values without an annotation are not compared, and an annotation
//! that is not a quantity leaves the pod's resources uncompared (Kyma #1649).
//!
//! `restartAfter` should be an instant in the past: pods created up to and including it restart,
//! and a pod replaced before that instant would restart again.
//!
//! # Settings
//!
//! A JSON object; `ignoreNamespaces` (list of namespace names) lists namespaces whose pods never
//! restart. Unknown keys are rejected.
//!
//! Choosing which pods are eligible (running, ready, injected) is the host's job; a JSON value
//! without `metadata` gets a no-restart decision saying it is not a pod.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

#[cfg(target_arch = "wasm32")]
mod component;
pub use wasmop_plugin_sdk::quantity;
pub mod view;

use jiff::Timestamp;
use quantity::Quantity;
use view::{ContainerView, PodView};

/// Name of the sidecar container (or native-sidecar init container).
pub const PROXY_CONTAINER: &str = "istio-proxy";
/// Annotation that marks a custom proxy image; such pods skip the image and resources checks.
pub const CUSTOM_IMAGE_ANNOTATION: &str = "sidecar.istio.io/proxyImage";
/// The path of Istio's merged metrics endpoint.
pub const PROMETHEUS_MERGE_PATH: &str = "/stats/prometheus";
/// The status port used when `statusPort` is absent.
pub const DEFAULT_STATUS_PORT: u16 = 15020;

const ANNOTATION_CPU: &str = "sidecar.istio.io/proxyCPU";
const ANNOTATION_MEMORY: &str = "sidecar.istio.io/proxyMemory";
const ANNOTATION_CPU_LIMIT: &str = "sidecar.istio.io/proxyCPULimit";
const ANNOTATION_MEMORY_LIMIT: &str = "sidecar.istio.io/proxyMemoryLimit";

/// A decision this plugin refuses to make, or settings it rejects (the WIT `plugin-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What is wrong.
    pub message: String,
    /// The offending input as a dotted path, e.g. `desired.resources.limits.cpu`.
    pub field: Option<String>,
}

impl Error {
    fn at(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            field: Some(field.into()),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

/// The desired (or last applied) proxy state; see the crate documentation for its JSON shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DesiredProxy {
    /// The proxy image, `registry/name:tag`; `None`: images are not compared.
    pub image: Option<String>,
    /// The proxy's resources; `None`: resources are not compared.
    pub resources: Option<ProxyResources>,
    /// Whether the Istio CNI plugin is enabled; `None`: the CNI predicate is off.
    pub cni: Option<bool>,
    /// Istio DNS proxying; `None` (unset) is a value of its own.
    pub dns_proxying: Option<bool>,
    /// The proxy stats matcher; `None` equals an empty one.
    pub stats_matcher: Option<StatsMatcher>,
    /// Whether Istio merges application metrics into the proxy's; `None`: the predicate is off.
    pub prometheus_merge: Option<bool>,
    /// The proxy status port the merged metrics are served on.
    #[serde(deserialize_with = "port_or_default")]
    pub status_port: u16,
    /// Pods created at or before this RFC 3339 instant restart; `None`: the predicate is off.
    pub restart_after: Option<String>,
}

impl Default for DesiredProxy {
    fn default() -> Self {
        Self {
            image: None,
            resources: None,
            cni: None,
            dns_proxying: None,
            stats_matcher: None,
            prometheus_merge: None,
            status_port: DEFAULT_STATUS_PORT,
            restart_after: None,
        }
    }
}

/// Requests and limits of the `istio-proxy` container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProxyResources {
    /// `resources.requests`.
    pub requests: Option<ResourceValues>,
    /// `resources.limits`.
    pub limits: Option<ResourceValues>,
}

/// CPU and memory as Kubernetes quantities, kept as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceValues {
    /// e.g. `100m`.
    #[serde(deserialize_with = "quantity_text")]
    pub cpu: Option<String>,
    /// e.g. `128Mi`.
    #[serde(deserialize_with = "quantity_text")]
    pub memory: Option<String>,
}

/// Istio's `proxyStatsMatcher`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatsMatcher {
    /// Regular expressions of the stats to keep; order does not matter.
    pub inclusion_regexps: Option<Vec<String>>,
}

fn port_or_default<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    Ok(Option::<u16>::deserialize(d)?.unwrap_or(DEFAULT_STATUS_PORT))
}

fn quantity_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Number(n) => Ok(Some(n.to_string())),
        other => Err(serde::de::Error::custom(format!(
            "expected a quantity (string or number), got {other}"
        ))),
    }
}

impl DesiredProxy {
    /// Parses and checks the request's `desired` JSON. Errors name the field under `desired`.
    ///
    /// # Errors
    /// Not a JSON object of the documented shape, a quantity that does not parse, a
    /// `restartAfter` that is not RFC 3339, or `statusPort` 0.
    pub fn from_json(json: &str) -> Result<Self, Error> {
        let desired = Self::from_object(json, "desired")?
            .ok_or_else(|| Error::at("desired", "expected a JSON object, got null"))?;
        desired.check()?;
        Ok(desired)
    }

    /// Parses the request's `applied` JSON: `null` before the first application. Only its
    /// shape is checked: an old record must not block new decisions.
    ///
    /// # Errors
    /// Neither `null` nor a JSON object of the documented shape.
    pub fn applied_from_json(json: &str) -> Result<Option<Self>, Error> {
        Self::from_object(json, "applied")
    }

    /// `None` for `null`; otherwise the object's fields (not `null`, arrays or scalars).
    fn from_object(json: &str, field: &str) -> Result<Option<Self>, Error> {
        match serde_json::from_str::<Value>(json) {
            Ok(Value::Null) => Ok(None),
            Ok(object @ Value::Object(_)) => Self::deserialize(object)
                .map(Some)
                .map_err(|e| Error::at(field, e.to_string())),
            Ok(other) => Err(Error::at(
                field,
                format!("expected a JSON object, got {}", kind_of(&other)),
            )),
            Err(e) => Err(Error::at(field, format!("not valid JSON: {e}"))),
        }
    }

    /// Checks the values serde cannot: quantities, `restartAfter` and `statusPort`.
    ///
    /// # Errors
    /// The first bad value, with its field under `desired`.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(resources) = &self.resources {
            for (kind, values) in [
                ("requests", &resources.requests),
                ("limits", &resources.limits),
            ] {
                let Some(values) = values else { continue };
                for (name, value) in [("cpu", &values.cpu), ("memory", &values.memory)] {
                    if let Some(text) = value {
                        Quantity::parse(text).map_err(|e| {
                            Error::at(format!("desired.resources.{kind}.{name}"), e.to_string())
                        })?;
                    }
                }
            }
        }
        if let Some(at) = &self.restart_after {
            parse_timestamp(at).map_err(|e| Error::at("desired.restartAfter", e))?;
        }
        if self.status_port == 0 {
            return Err(Error::at(
                "desired.statusPort",
                "statusPort must be between 1 and 65535",
            ));
        }
        Ok(())
    }
}

/// The plugin's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Pods in these namespaces never restart.
    pub ignore_namespaces: Vec<String>,
}

/// Parses and checks the settings object.
///
/// # Errors
/// Not a JSON object, unknown keys (all named), or `ignoreNamespaces` not a list of strings.
pub fn validate_settings(settings: &str) -> Result<Settings, Error> {
    let map = match serde_json::from_str::<Value>(settings) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(Error::at(
                "settings",
                format!("settings must be a JSON object, got {other}"),
            ));
        }
        Err(e) => {
            return Err(Error::at(
                "settings",
                format!("settings are not valid JSON: {e}"),
            ));
        }
    };
    let unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "ignoreNamespaces")
        .collect();
    if let Some(first) = unknown.first() {
        return Err(Error::at(
            format!("settings.{first}"),
            format!(
                "unknown settings key(s): {} (known: ignoreNamespaces)",
                unknown.join(", ")
            ),
        ));
    }
    let mut out = Settings::default();
    match map.get("ignoreNamespaces") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let Some(ns) = item.as_str() else {
                    return Err(Error::at(
                        format!("settings.ignoreNamespaces[{i}]"),
                        format!("expected a namespace name, got {item}"),
                    ));
                };
                out.ignore_namespaces.push(ns.to_owned());
            }
        }
        Some(other) => {
            return Err(Error::at(
                "settings.ignoreNamespaces",
                format!("expected a list of namespace names, got {other}"),
            ));
        }
    }
    Ok(out)
}

/// Parses the request's `pods`: a JSON array of Pod objects. Its entries are kept whatever
/// their shape; one that is not a pod gets a no-restart decision saying so.
///
/// # Errors
/// Not valid JSON, or not an array.
pub fn parse_pods(json: &str) -> Result<Vec<Value>, Error> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Array(pods)) => Ok(pods),
        Ok(other) => Err(Error::at(
            "pods",
            format!("expected a JSON array of pods, got {}", kind_of(&other)),
        )),
        Err(e) => Err(Error::at("pods", format!("not valid JSON: {e}"))),
    }
}

/// The decision for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the pod's owner must be restarted.
    pub restart: bool,
    /// Why: every predicate that is true, or why none is.
    pub reason: String,
}

/// One `evaluate` call of the WIT contract, from its JSON strings.
///
/// # Errors
/// Bad settings, `desired`, `applied` or `pods`, with the field named.
pub fn evaluate_request(
    settings: &str,
    desired: &str,
    applied: &str,
    pods: &str,
) -> Result<Vec<Decision>, Error> {
    let settings = validate_settings(settings)?;
    let desired = DesiredProxy::from_json(desired)?;
    let applied = DesiredProxy::applied_from_json(applied)?;
    let pods = parse_pods(pods)?;
    Ok(evaluate_with(&settings, &desired, applied.as_ref(), &pods))
}

/// Judges each pod against the desired state with default settings; one decision per pod, in order.
pub fn evaluate(
    desired: &DesiredProxy,
    applied: Option<&DesiredProxy>,
    pods: &[Value],
) -> Vec<Decision> {
    evaluate_with(&Settings::default(), desired, applied, pods)
}

/// Judges each pod against the desired state; one decision per pod, in order.
pub fn evaluate_with(
    settings: &Settings,
    desired: &DesiredProxy,
    applied: Option<&DesiredProxy>,
    pods: &[Value],
) -> Vec<Decision> {
    let plan = Plan::new(desired, applied);
    pods.iter().map(|pod| plan.judge(settings, pod)).collect()
}

/// One expected resource value and where it came from (`desired` or an annotation).
#[derive(Clone, Debug)]
struct Expected {
    text: String,
    value: Quantity,
    source: &'static str,
}

/// Expected `[cpu request, memory request, cpu limit, memory limit]`.
type ExpectedResources = [Option<Expected>; 4];

/// `(path in the container's resources, label)` of each slot of [`ExpectedResources`].
const RESOURCE_SLOTS: [(&str, &str, &str); 4] = [
    ("requests", "cpu", "cpu request"),
    ("requests", "memory", "memory request"),
    ("limits", "cpu", "cpu limit"),
    ("limits", "memory", "memory limit"),
];

/// Everything that does not depend on the pod, worked out once per page.
struct Plan<'a> {
    desired: &'a DesiredProxy,
    resources: ExpectedResources,
    /// Problems with `desired` itself (when it skipped [`DesiredProxy::check`]).
    notes: Vec<String>,
    /// Reasons that apply to every pod (DNS proxying, stats matcher).
    global: Vec<String>,
    restart_after: Option<(Timestamp, &'a str)>,
    status_port: String,
}

impl<'a> Plan<'a> {
    fn new(desired: &'a DesiredProxy, applied: Option<&DesiredProxy>) -> Self {
        let mut notes = Vec::new();
        let mut resources: ExpectedResources = Default::default();
        if let Some(r) = &desired.resources {
            for (slot, (kind, name, label)) in resources.iter_mut().zip(RESOURCE_SLOTS) {
                let values = if kind == "requests" {
                    &r.requests
                } else {
                    &r.limits
                };
                let text = values.as_ref().and_then(|v| {
                    if name == "cpu" {
                        v.cpu.as_ref()
                    } else {
                        v.memory.as_ref()
                    }
                });
                let Some(text) = text else { continue };
                match Quantity::parse(text) {
                    Ok(value) => {
                        *slot = Some(Expected {
                            text: text.clone(),
                            value,
                            source: "desired",
                        })
                    }
                    Err(e) => notes.push(format!("desired {label} not compared: {e}")),
                }
            }
        }
        let mut global = Vec::new();
        if let Some(applied) = applied {
            if applied.dns_proxying != desired.dns_proxying {
                global.push(format!(
                    "dnsProxying changed from {} to {}",
                    show_bool(applied.dns_proxying),
                    show_bool(desired.dns_proxying)
                ));
            }
            let (was, now) = (regexps(applied), regexps(desired));
            if was != now {
                global.push(format!(
                    "statsMatcher.inclusionRegexps changed from {was:?} to {now:?}"
                ));
            }
        }
        let mut restart_after = None;
        if let Some(at) = desired.restart_after.as_deref() {
            match parse_timestamp(at) {
                Ok(t) => restart_after = Some((t, at)),
                Err(e) => notes.push(format!("restartAfter not applied: {e}")),
            }
        }
        Self {
            desired,
            resources,
            notes,
            global,
            restart_after,
            status_port: desired.status_port.to_string(),
        }
    }

    fn judge(&self, settings: &Settings, pod: &Value) -> Decision {
        let pod = match PodView::of(pod) {
            Ok(pod) => pod,
            Err(not_a_pod) => return no_restart(not_a_pod),
        };
        let namespace = pod.namespace.unwrap_or("");
        if settings.ignore_namespaces.iter().any(|ns| ns == namespace) {
            return no_restart(format!(
                "namespace {namespace} is ignored (settings.ignoreNamespaces)"
            ));
        }

        let mut reasons = Vec::new();
        let mut notes = self.notes.clone();
        if pod.annotation(CUSTOM_IMAGE_ANNOTATION).is_none() {
            self.image(&pod, &mut reasons);
            self.resources(&pod, &mut reasons, &mut notes);
        }
        self.cni(&pod, &mut reasons);
        reasons.extend(self.global.iter().cloned());
        self.prometheus_merge(&pod, &mut reasons);
        self.restart_after(&pod, &mut reasons, &mut notes);

        let restart = !reasons.is_empty();
        if !restart {
            reasons.push("sidecar matches the desired state".to_owned());
        }
        reasons.extend(notes.into_iter().map(|n| format!("note: {n}")));
        Decision {
            restart,
            reason: reasons.join("; "),
        }
    }

    fn image(&self, pod: &PodView<'_>, reasons: &mut Vec<String>) {
        let Some(want) = &self.desired.image else {
            return;
        };
        for (container, init) in proxy_containers(pod) {
            let have = container.image.unwrap_or("(none)");
            if have != want {
                let what = if init {
                    "istio-proxy init container image"
                } else {
                    "istio-proxy image"
                };
                reasons.push(format!("{what} {have} differs from desired {want}"));
            }
        }
    }

    fn resources(&self, pod: &PodView<'_>, reasons: &mut Vec<String>, notes: &mut Vec<String>) {
        let annotated;
        let expected = match annotated_resources(pod) {
            None => &self.resources,
            Some(Ok(from_annotations)) => {
                annotated = from_annotations;
                &annotated
            }
            Some(Err(note)) => {
                notes.push(note);
                return;
            }
        };
        for (container, init) in proxy_containers(pod) {
            let what = if init {
                "istio-proxy init container"
            } else {
                "istio-proxy"
            };
            for ((want, have), (_, _, label)) in expected
                .iter()
                .zip(&container.resources)
                .zip(RESOURCE_SLOTS)
            {
                let Some(want) = want else { continue };
                let (have_text, have_value) = match have.as_deref() {
                    None => ("(none)", Quantity::ZERO),
                    Some(text) => match Quantity::parse(text) {
                        Ok(value) => (text, value),
                        Err(e) => {
                            notes.push(format!("{what} {label} not compared: {e}"));
                            continue;
                        }
                    },
                };
                if have_value != want.value {
                    reasons.push(format!(
                        "{what} {label} {have_text} differs from {} {}",
                        want.source, want.text
                    ));
                }
            }
        }
    }

    fn cni(&self, pod: &PodView<'_>, reasons: &mut Vec<String>) {
        let (stale, state) = match self.desired.cni {
            None => return,
            Some(true) => ("istio-init", "enabled"),
            Some(false) => ("istio-validation", "disabled"),
        };
        if pod.init_containers.iter().any(|c| c.name == Some(stale)) {
            reasons.push(format!(
                "CNI is {state} but the pod has init container {stale}"
            ));
        }
    }

    fn prometheus_merge(&self, pod: &PodView<'_>, reasons: &mut Vec<String>) {
        let Some(merge) = self.desired.prometheus_merge else {
            return;
        };
        let checks = [
            ("prometheus.io/path", PROMETHEUS_MERGE_PATH),
            ("prometheus.io/port", self.status_port.as_str()),
        ];
        for (key, merged) in checks {
            let have = pod.annotation(key);
            let matches = have == Some(merged);
            if merge && !matches {
                let have = have.map_or_else(|| "unset".to_owned(), |v| format!("{v:?}"));
                reasons.push(format!(
                    "prometheusMerge is on but annotation {key} is {have}, want {merged:?}"
                ));
            } else if !merge && matches {
                reasons.push(format!(
                    "prometheusMerge is off but annotation {key} is {merged:?}"
                ));
            }
        }
    }

    fn restart_after(&self, pod: &PodView<'_>, reasons: &mut Vec<String>, notes: &mut Vec<String>) {
        let Some((after, after_text)) = self.restart_after else {
            return;
        };
        let Some(created_text) = pod.creation_timestamp else {
            notes.push("restartAfter not applied: the pod has no creationTimestamp".to_owned());
            return;
        };
        match parse_timestamp(created_text) {
            Ok(created) if created <= after => {
                reasons.push(format!(
                    "pod created at {created_text}, not after restartAfter {after_text}"
                ));
            }
            Ok(_) => {}
            Err(e) => notes.push(format!("restartAfter not applied: creationTimestamp {e}")),
        }
    }
}

/// Every container named `istio-proxy`, with whether it is an init (native sidecar) container.
fn proxy_containers<'p>(
    pod: &'p PodView<'_>,
) -> impl Iterator<Item = (&'p ContainerView<'p>, bool)> + 'p {
    let plain = pod.containers.iter().map(|c| (c, false));
    let init = pod.init_containers.iter().map(|c| (c, true));
    plain
        .chain(init)
        .filter(|(c, _)| c.name == Some(PROXY_CONTAINER))
}

/// `None` when the pod has no resource annotation; otherwise the expected values they give,
/// or a note when one of them is not a quantity.
fn annotated_resources(pod: &PodView<'_>) -> Option<Result<ExpectedResources, String>> {
    let keys = [
        ANNOTATION_CPU,
        ANNOTATION_MEMORY,
        ANNOTATION_CPU_LIMIT,
        ANNOTATION_MEMORY_LIMIT,
    ];
    if keys.iter().all(|k| pod.annotation(k).is_none()) {
        return None;
    }
    let parse = |key: &'static str| -> Result<Option<Expected>, String> {
        let Some(text) = pod.annotation(key) else {
            return Ok(None);
        };
        Quantity::parse(text)
            .map(|value| {
                Some(Expected {
                    text: text.to_owned(),
                    value,
                    source: key,
                })
            })
            .map_err(|e| format!("resources not compared: annotation {key}: {e}"))
    };
    let run = || -> Result<ExpectedResources, String> {
        let (cpu_limit, memory_limit) = (
            parse(ANNOTATION_CPU_LIMIT)?,
            parse(ANNOTATION_MEMORY_LIMIT)?,
        );
        let cpu = parse(ANNOTATION_CPU)?.or_else(|| cpu_limit.clone());
        let memory = parse(ANNOTATION_MEMORY)?.or_else(|| memory_limit.clone());
        Ok([cpu, memory, cpu_limit, memory_limit])
    };
    Some(run())
}

/// Parses an RFC 3339 timestamp with its offset (`2026-08-21T10:00:00Z`,
/// `2026-08-21T12:00:00.5+02:00`), as Kubernetes writes them.
fn parse_timestamp(text: &str) -> Result<Timestamp, String> {
    text.parse()
        .map_err(|e| format!("{text:?} is not an RFC 3339 timestamp: {e}"))
}

fn no_restart(reason: impl Into<String>) -> Decision {
    Decision {
        restart: false,
        reason: reason.into(),
    }
}

fn show_bool(b: Option<bool>) -> &'static str {
    match b {
        None => "unset",
        Some(true) => "true",
        Some(false) => "false",
    }
}

/// The inclusion regexps, sorted and deduplicated; `None` and empty are the same.
fn regexps(p: &DesiredProxy) -> Vec<&str> {
    let mut list: Vec<&str> = p
        .stats_matcher
        .as_ref()
        .and_then(|m| m.inclusion_regexps.as_ref())
        .map(|v| v.iter().map(String::as_str).collect())
        .unwrap_or_default();
    list.sort_unstable();
    list.dedup();
    list
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
