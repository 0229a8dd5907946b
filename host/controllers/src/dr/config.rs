//! The DR configuration: the `settings` of the `dr` plugin's entry in `wasmop-plugins`
//! (the registry's default for hook `dr`). The same JSON object is passed to the plugin, so keys
//! the host does not know are left to the plugin.
//!
//! ```yaml
//! settings:
//!   backend: k8s-lease        # k8s-lease (default) | dynamodb | none
//!   leaseName: wasmop         # the Lease (k8s-lease) or the item's leaseName (dynamodb)
//!   waitTimeInSeconds: 5      # x: the tick interval
//!   failureThreshold: 3       # y: a lease not renewed for y × x may be taken over
//!   warmupSeconds: 0          # a fresh instance stays passive this long
//!   podIdentifier: ""         # this instance's identity; default: --identity (POD_NAME)
//!   dynamoDB:                 # Admiral's block, accepted as is (docs/dr.md)
//!     leaseName: mylease
//!     podIdentifier: qal-east
//!     waitTimeInSeconds: 15
//!     failureThreshold: 3
//!     tableName: admiral-lease
//!     role: arn:aws:iam::123456789012:role/admiral   # assumed through STS when set
//!     region: us-west-2
//!     endpoint: http://127.0.0.1:5000                # optional: another DynamoDB endpoint
//! ```
//!
//! A `dynamoDB:` block selects the `dynamodb` backend unless `backend` says otherwise, and its
//! keys win over the top-level ones. Without a backend, the `none` state checker
//! (`builtin://none`) means backend `none`; anything else means `k8s-lease`.

use std::time::Duration;

use serde::Deserialize;

/// Default `waitTimeInSeconds` (x) when the settings give none (Admiral has no default).
pub(crate) const DEFAULT_WAIT_TIME_SECONDS: u32 = 5;
/// Default `failureThreshold` (y).
pub(crate) const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Default lease name.
pub(crate) const DEFAULT_LEASE_NAME: &str = "wasmop";

/// Where the lease record lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendConfig {
    /// A `coordination.k8s.io/v1` Lease of this name in the operator namespace.
    KubernetesLease {
        /// The Lease's name.
        name: String,
    },
    /// An item of Admiral's DynamoDB table.
    DynamoDb(DynamoDbConfig),
    /// No shared record: a single instance, whose state is the plugin's answer alone.
    None,
}

impl BackendConfig {
    /// The name used in settings, metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::KubernetesLease { .. } => "k8s-lease",
            Self::DynamoDb(_) => "dynamodb",
            Self::None => "none",
        }
    }
}

/// Where the DynamoDB lease item is, as Admiral's `dynamoDB:` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamoDbConfig {
    /// The table (`tableName`), with Admiral's schema: `leaseName` (S, partition key),
    /// `leaseOwner` (S), `notes` (S), `updatedTime` (N, Unix seconds).
    pub table: String,
    /// The item's `leaseName`.
    pub lease_name: String,
    /// AWS region.
    pub region: String,
    /// IAM role assumed through STS, when set.
    pub role: Option<String>,
    /// Endpoint override (e.g. a local DynamoDB-compatible server), when set.
    pub endpoint: Option<String>,
}

/// The parsed DR configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrConfig {
    /// The backend and where its record is.
    pub backend: BackendConfig,
    /// This instance's identity when the settings set `podIdentifier`.
    pub pod_identifier: Option<String>,
    /// `waitTimeInSeconds` (x), at least 1.
    pub wait_time_seconds: u32,
    /// `failureThreshold` (y), at least 2.
    pub failure_threshold: u32,
    /// `warmupSeconds`.
    pub warmup_seconds: u32,
}

/// A DR configuration that cannot be used; the message names the key and what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DR settings: {0}")]
pub struct ConfigError(pub String);

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Settings {
    backend: Option<String>,
    lease_name: Option<String>,
    pod_identifier: Option<String>,
    wait_time_in_seconds: Option<i64>,
    failure_threshold: Option<i64>,
    warmup_seconds: Option<i64>,
    #[serde(rename = "dynamoDB")]
    dynamo_db: Option<DynamoDbSettings>,
}

/// Admiral's `dynamoDB:` block (`dynamoDB.go`), plus `endpoint`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DynamoDbSettings {
    lease_name: Option<String>,
    pod_identifier: Option<String>,
    wait_time_in_seconds: Option<i64>,
    failure_threshold: Option<i64>,
    table_name: Option<String>,
    role: Option<String>,
    region: Option<String>,
    endpoint: Option<String>,
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

fn bounded(
    key: &str,
    value: Option<i64>,
    default: u32,
    min: u32,
    why: &str,
) -> Result<u32, ConfigError> {
    let Some(v) = value else {
        return Ok(default);
    };
    if v < i64::from(min) {
        return Err(ConfigError(format!(
            "{key} is {v}; it must be at least {min} ({why})"
        )));
    }
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= 86_400)
        .ok_or_else(|| ConfigError(format!("{key} is {v}; it must be at most 86400")))
}

impl DrConfig {
    /// Parses the `dr` plugin's settings; `plugin_source` is its registry `source` (the `none`
    /// state checker, `builtin://none`, defaults to backend `none`).
    ///
    /// # Errors
    /// [`ConfigError`]: settings that are not an object, an unknown backend, `waitTimeInSeconds`
    /// below 1, `failureThreshold` below 2 (with 1 a lease expires the moment its holder renews
    /// it, so the holder could not step down before a takeover), a `dynamodb` backend without
    /// `tableName` or `region`, an unknown key in `dynamoDB:`.
    pub fn parse(
        settings: Option<&serde_json::Value>,
        plugin_source: &str,
    ) -> Result<Self, ConfigError> {
        let s: Settings = match settings {
            None => Settings::default(),
            Some(v @ serde_json::Value::Object(_)) => {
                serde_json::from_value(v.clone()).map_err(|e| ConfigError(e.to_string()))?
            }
            Some(other) => {
                return Err(ConfigError(format!(
                    "settings must be an object, got {other}"
                )));
            }
        };
        let dynamo = s.dynamo_db;
        let default_backend = if dynamo.is_some() {
            "dynamodb"
        } else if plugin_source == "builtin://none" {
            "none"
        } else {
            "k8s-lease"
        };
        let backend = nonempty(s.backend).unwrap_or_else(|| default_backend.to_owned());
        let d = match backend.as_str() {
            "dynamodb" => dynamo.unwrap_or_default(),
            "k8s-lease" | "none" => DynamoDbSettings::default(),
            other => {
                return Err(ConfigError(format!(
                    "backend {other:?} is unknown; use k8s-lease, dynamodb or none"
                )));
            }
        };
        let lease_name = nonempty(d.lease_name)
            .or(nonempty(s.lease_name))
            .unwrap_or_else(|| DEFAULT_LEASE_NAME.to_owned());
        let wait_time_seconds = bounded(
            if d.wait_time_in_seconds.is_some() {
                "dynamoDB.waitTimeInSeconds"
            } else {
                "waitTimeInSeconds"
            },
            d.wait_time_in_seconds.or(s.wait_time_in_seconds),
            DEFAULT_WAIT_TIME_SECONDS,
            1,
            "the tick interval",
        )?;
        let failure_threshold = bounded(
            if d.failure_threshold.is_some() {
                "dynamoDB.failureThreshold"
            } else {
                "failureThreshold"
            },
            d.failure_threshold.or(s.failure_threshold),
            DEFAULT_FAILURE_THRESHOLD,
            2,
            "with 1 a lease expires the moment its holder renews it",
        )?;
        let warmup_seconds = bounded("warmupSeconds", s.warmup_seconds, 0, 0, "")?;
        let backend = match backend.as_str() {
            "dynamodb" => {
                let table = nonempty(d.table_name).ok_or_else(|| {
                    ConfigError("dynamoDB.tableName is required (e.g. admiral-lease)".into())
                })?;
                let region = nonempty(d.region).ok_or_else(|| {
                    ConfigError("dynamoDB.region is required (e.g. us-west-2)".into())
                })?;
                let endpoint = nonempty(d.endpoint);
                if let Some(e) = &endpoint
                    && !(e.starts_with("http://") || e.starts_with("https://"))
                {
                    return Err(ConfigError(format!(
                        "dynamoDB.endpoint {e:?} must be an http:// or https:// URL"
                    )));
                }
                BackendConfig::DynamoDb(DynamoDbConfig {
                    table,
                    lease_name,
                    region,
                    role: nonempty(d.role),
                    endpoint,
                })
            }
            "none" => BackendConfig::None,
            _ => {
                if lease_name.len() > 253 {
                    return Err(ConfigError(format!(
                        "leaseName {lease_name:?} is longer than 253 characters"
                    )));
                }
                BackendConfig::KubernetesLease { name: lease_name }
            }
        };
        Ok(Self {
            backend,
            pod_identifier: nonempty(d.pod_identifier).or(nonempty(s.pod_identifier)),
            wait_time_seconds,
            failure_threshold,
            warmup_seconds,
        })
    }

    /// The tick interval, x.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(u64::from(self.wait_time_seconds))
    }

    /// `y × x`: a lease not renewed for longer than this may be taken over.
    pub(crate) fn expiry(&self) -> Duration {
        self.interval() * self.failure_threshold
    }

    /// How long a successful lease write keeps this instance active on its own monotonic
    /// clock, counted from the moment the write's timestamp was taken: `y × x − x/2`.
    ///
    /// A peer may take over only when its wall clock is more than `y × x` past that timestamp,
    /// so this instance stops writing `x/2` before any takeover is legal; the `x/2` absorbs
    /// wall-clock skew between instances. With `y ≥ 2` it is at least `1.5 x`, longer than
    /// the renewal interval, so one slow renewal does not demote a healthy holder.
    pub fn hold(&self) -> Duration {
        self.expiry() - self.interval() / 2
    }

    /// The identity of this instance: `podIdentifier` if set, else `fallback` (`--identity`).
    pub fn identity(&self, fallback: &str) -> String {
        self.pod_identifier
            .clone()
            .unwrap_or_else(|| fallback.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<DrConfig, ConfigError> {
        DrConfig::parse(Some(&v), "builtin://dr-lease")
    }

    #[test]
    fn defaults_are_a_kubernetes_lease_ticking_every_5_s() {
        let c = DrConfig::parse(None, "builtin://dr-lease").unwrap();
        assert_eq!(
            c.backend,
            BackendConfig::KubernetesLease {
                name: "wasmop".into()
            }
        );
        assert_eq!(
            (c.wait_time_seconds, c.failure_threshold, c.warmup_seconds),
            (5, 3, 0)
        );
        assert_eq!(c.identity("pod-a"), "pod-a");
        assert_eq!(c.expiry(), Duration::from_secs(15));
        assert_eq!(c.hold(), Duration::from_millis(12_500));
        let none = DrConfig::parse(Some(&json!({})), "builtin://none").unwrap();
        assert_eq!(none.backend, BackendConfig::None);
    }

    #[test]
    fn the_seed_dynamodb_block_is_accepted_as_is() {
        let c = parse(json!({"dynamoDB": {
            "leaseName": "mylease", "podIdentifier": "qal-east", "waitTimeInSeconds": 15,
            "failureThreshold": 3, "tableName": "admiral-lease",
            "role": "arn:aws:iam::123456789012:role/admiral", "region": "us-west-2"
        }}))
        .unwrap();
        assert_eq!(
            c.backend,
            BackendConfig::DynamoDb(DynamoDbConfig {
                table: "admiral-lease".into(),
                lease_name: "mylease".into(),
                region: "us-west-2".into(),
                role: Some("arn:aws:iam::123456789012:role/admiral".into()),
                endpoint: None,
            })
        );
        assert_eq!(c.identity("pod-a"), "qal-east");
        assert_eq!((c.wait_time_seconds, c.failure_threshold), (15, 3));
    }

    #[test]
    fn the_block_wins_over_top_level_keys_and_backend_can_override_it() {
        let v = json!({"waitTimeInSeconds": 1, "failureThreshold": 4, "leaseName": "top",
            "dynamoDB": {"tableName": "t", "region": "r", "waitTimeInSeconds": 2,
                         "endpoint": "http://127.0.0.1:5000"}});
        let c = parse(v.clone()).unwrap();
        assert_eq!((c.wait_time_seconds, c.failure_threshold), (2, 4));
        let BackendConfig::DynamoDb(d) = &c.backend else {
            panic!("{c:?}")
        };
        assert_eq!(
            (d.lease_name.as_str(), d.endpoint.as_deref()),
            ("top", Some("http://127.0.0.1:5000"))
        );
        let mut k8s = v;
        k8s["backend"] = "k8s-lease".into();
        let c = parse(k8s).unwrap();
        assert_eq!(
            c.backend,
            BackendConfig::KubernetesLease { name: "top".into() }
        );
        assert_eq!(
            c.wait_time_seconds, 1,
            "the block is ignored for another backend"
        );
    }

    #[test]
    fn bad_settings_name_the_key() {
        let err = |v| parse(v).unwrap_err().to_string();
        assert!(err(json!({"waitTimeInSeconds": 0})).contains("waitTimeInSeconds is 0"));
        assert!(
            err(json!({"dynamoDB": {"tableName": "t", "region": "r", "waitTimeInSeconds": 0}}))
                .contains("dynamoDB.waitTimeInSeconds is 0")
        );
        assert!(err(json!({"failureThreshold": 1})).contains("at least 2"));
        assert!(err(json!({"waitTimeInSeconds": -3})).contains("at least 1"));
        assert!(err(json!({"waitTimeInSeconds": 100000})).contains("at most"));
        assert!(err(json!({"waitTimeInSeconds": "5"})).contains("invalid type"));
        assert!(err(json!({"backend": "etcd"})).contains("unknown"));
        assert!(
            err(json!({"dynamoDB": {"region": "us-west-2"}})).contains("tableName is required")
        );
        assert!(err(json!({"dynamoDB": {"tableName": "t"}})).contains("region is required"));
        assert!(
            err(json!({"dynamoDB": {"tableName": "t", "region": "r", "podIdentifierPrefix": "x"}}))
                .contains("podIdentifierPrefix")
        );
        assert!(
            err(json!({"dynamoDB": {"tableName": "t", "region": "r", "endpoint": "localhost"}}))
                .contains("http://")
        );
        assert!(err(json!([1])).contains("must be an object"));
    }

    #[test]
    fn keys_of_the_plugin_are_left_to_it() {
        let c = parse(json!({"utcOffsetMinutes": 60, "waitTimeInSeconds": 2})).unwrap();
        assert_eq!(c.wait_time_seconds, 2);
    }

    #[test]
    fn the_hold_is_shorter_than_the_expiry_and_longer_than_a_tick() {
        for x in [1, 2, 5, 15, 60] {
            for y in [2, 3, 5] {
                let c = parse(json!({"waitTimeInSeconds": x, "failureThreshold": y})).unwrap();
                assert!(c.hold() < c.expiry());
                assert!(c.expiry() - c.hold() >= c.interval() / 2);
                assert!(c.hold() >= c.interval() + c.interval() / 2);
            }
        }
    }
}
