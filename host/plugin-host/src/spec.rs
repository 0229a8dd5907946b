//! What a registry entry says: the hook, limits, grants and failure policy of a plugin
//! (`plugins:` in `plugins.yaml`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bindings::WitHook;
use crate::epoch::EPOCH_TICK;

/// The four extension points.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    /// DynamicEnv route generation, world `router`.
    Routing,
    /// ElasticService trigger votes, world `scaler`.
    Scaling,
    /// ProxyRestartPolicy pod decisions, world `restart-predicate`.
    Restart,
    /// Active/passive state checks, world `state-checker`.
    Dr,
}

impl Hook {
    /// Every hook, in a stable order.
    pub const ALL: [Hook; 4] = [Hook::Routing, Hook::Scaling, Hook::Restart, Hook::Dr];

    /// The hook's name as written in `plugins.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Routing => "routing",
            Hook::Scaling => "scaling",
            Hook::Restart => "restart",
            Hook::Dr => "dr",
        }
    }

    /// The WIT world a plugin for this hook must target.
    pub fn world(self) -> &'static str {
        match self {
            Hook::Routing => "router",
            Hook::Scaling => "scaler",
            Hook::Restart => "restart-predicate",
            Hook::Dr => "state-checker",
        }
    }

    pub(crate) fn from_wit(h: WitHook) -> Self {
        match h {
            WitHook::Routing => Hook::Routing,
            WitHook::Scaling => Hook::Scaling,
            WitHook::Restart => Hook::Restart,
            WitHook::Dr => Hook::Dr,
        }
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-plugin resource limits (`limits:` in `plugins.yaml`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Limits {
    /// Memory cap in MiB (default 64): every linear memory and table of one call together (a
    /// table element counts [`TABLE_ELEMENT_BYTES`](crate::sandbox::TABLE_ELEMENT_BYTES)).
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u32,
    /// Wall-clock cap per call in milliseconds (default 250): an epoch deadline while the
    /// guest runs, and the whole call (host I/O and sleeps included) dropped one epoch tick
    /// after it.
    pub timeout_ms: u32,
    /// Cap on a call's output in KiB (default 1024): the strings of its answer (route JSON,
    /// reasons), or of its `plugin-error` (message and field together).
    #[serde(rename = "maxOutputKiB")]
    pub max_output_kib: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: 64,
            timeout_ms: 250,
            max_output_kib: 1024,
        }
    }
}

impl Limits {
    /// The memory cap in bytes.
    pub(crate) fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize) << 20
    }

    /// The output cap in bytes.
    pub(crate) fn max_output_bytes(&self) -> usize {
        (self.max_output_kib as usize) << 10
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.timeout_ms))
    }

    pub(crate) fn deadline_ticks(&self) -> u64 {
        u64::from(self.timeout_ms)
            .div_ceil(EPOCH_TICK.as_millis() as u64)
            .max(1)
    }
}

/// Capabilities granted to a plugin (`grants:` in `plugins.yaml`); nothing unless listed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Grants {
    /// `host:port` or `host` entries the plugin may reach over `wasi:http`.
    pub allowed_hosts: Vec<String>,
    /// A host directory visible read-only at `/data` in the guest.
    pub read_only_dir: Option<String>,
}

/// What a reconcile does when the plugin call fails (`failurePolicy:` in `plugins.yaml`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// The reconcile reports the error (condition, Event) and retries with backoff.
    #[default]
    Fail,
    /// The host's built-in default decision is used and the failure is logged and counted.
    Ignore,
}

/// A registry entry (one item of `plugins:` in `plugins.yaml`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSpec {
    /// Name referenced by `defaults` and by a CR's `spec.plugin`.
    pub name: String,
    /// The hook it implements.
    pub hook: Hook,
    /// `builtin://NAME`, `configmap://NAME/KEY`, `file:///path`, `https://…`, or
    /// `oci://REGISTRY/REPOSITORY:TAG` / `oci://REGISTRY/REPOSITORY@sha256:DIGEST`.
    pub source: String,
    /// Lowercase hex sha256 of the component; required for every source but `builtin://` and
    /// an `oci://` reference by digest (which pins it already; when both are given, both must
    /// match).
    #[serde(default)]
    pub sha256: Option<String>,
    /// `oci://` only: the Secret of type `kubernetes.io/dockerconfigjson` in the operator's
    /// namespace whose credentials for the registry the pull uses; anonymous without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
    /// `oci://` only: plain HTTP instead of HTTPS, allowed for a registry on loopback only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// JSON passed to `validate-settings` and to every call.
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Granted capabilities.
    #[serde(default)]
    pub grants: Grants,
    /// What a failed call does to the reconcile.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// The namespaces whose resources may name this entry in `spec.plugin`; every namespace
    /// when unset. A resource elsewhere, or a cluster-scoped one, gets `PluginReady=False`
    /// with reason `NotAllowed` and the entry is never called for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<Vec<String>>,
    /// Routing entries only: the entry whose answer this one refines. Each call goes to that
    /// entry first (and to the one it builds on, if any); this entry then gets the
    /// VirtualService with those routes applied. It must name another routing entry (or a
    /// builtin) without forming a cycle, or this entry fails to load
    /// ([`crate::registry::after_errors`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

impl PluginSpec {
    /// A spec with defaults for the given name, hook and source.
    pub fn new(name: &str, hook: Hook, source: &str) -> Self {
        Self {
            name: name.into(),
            hook,
            source: source.into(),
            sha256: None,
            pull_secret: None,
            insecure: false,
            settings: None,
            limits: Limits::default(),
            grants: Grants::default(),
            failure_policy: FailurePolicy::Fail,
            allowed_namespaces: None,
            after: None,
        }
    }

    /// Whether a resource in `namespace` (`None`: a cluster-scoped resource) may use this entry
    /// ([`PluginSpec::allowed_namespaces`]).
    pub fn allows(&self, namespace: Option<&str>) -> bool {
        match (&self.allowed_namespaces, namespace) {
            (None, _) => true,
            (Some(allowed), Some(ns)) => allowed.iter().any(|a| a == ns),
            (Some(_), None) => false,
        }
    }

    /// The settings as the JSON string plugins receive (`{}` when unset).
    pub(crate) fn settings_json(&self) -> String {
        self.settings
            .as_ref()
            .map_or_else(|| "{}".to_owned(), |v| v.to_string())
    }
}
