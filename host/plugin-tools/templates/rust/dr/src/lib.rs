//! {{name}}: a `dr` plugin. It follows the lease as the default plugin, `dr-lease`, does
//! (README.md lists the rules): a starting point to change where your sites need it.

use serde_json::Value;
use wasmop_plugin_sdk::state_checker::wasmop::plugin::dr::{Action, State};
use wasmop_plugin_sdk::state_checker::{Guest, StateDecision, StateRequest};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

/// The keys of the host's DR settings (docs/dr.md), which a `dr` entry's settings carry beside
/// the plugin's own: the host checks them.
pub const HOST_KEYS: [&str; 7] = [
    "backend",
    "leaseName",
    "waitTimeInSeconds",
    "failureThreshold",
    "warmupSeconds",
    "podIdentifier",
    "dynamoDB",
];

/// The lease owner that keeps every instance passive (Admiral's manual switch).
pub const SKIP_LEASE_POD: &str = "SKIP-LEASE-POD";

/// Checks the settings JSON object: the host's keys only, for now.
///
/// # Errors
/// Not a JSON object, or a key that is not one of [`HOST_KEYS`], at `settings`.
pub fn parse_settings(text: &str) -> Result<(), PluginError> {
    let Ok(Value::Object(settings)) = serde_json::from_str::<Value>(text) else {
        return Err(PluginError::at(
            "settings",
            "settings must be a JSON object",
        ));
    };
    match settings.keys().find(|k| !HOST_KEYS.contains(&k.as_str())) {
        Some(key) => Err(PluginError::at(
            "settings",
            format!(
                "unknown settings key {key:?}; the keys are the host's DR keys, {}",
                HOST_KEYS.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

fn decide(state: State, action: Action, reason: String) -> StateDecision {
    StateDecision {
        state,
        action,
        reason,
    }
}

/// The decision for one tick, the first matching rule winning.
///
/// # Errors
/// `wait-time-seconds` or `failure-threshold` is 0, at `request`.
pub fn check(r: &StateRequest) -> Result<StateDecision, PluginError> {
    if r.wait_time_seconds == 0 || r.failure_threshold == 0 {
        return Err(PluginError::at(
            "request",
            "wait-time-seconds and failure-threshold must be at least 1",
        ));
    }
    let warming = r.now - r.started_at < i64::from(r.warmup_seconds) * 1000;
    let expiry_ms = i64::from(r.wait_time_seconds) * i64::from(r.failure_threshold) * 1000;
    Ok(match &r.lease {
        None if warming => decide(State::Passive, Action::None, "no lease, warming up".into()),
        None => decide(
            State::Active,
            Action::Create,
            "no lease: creating it".into(),
        ),
        Some(l) if l.owner == SKIP_LEASE_POD => decide(
            State::Passive,
            Action::None,
            "the owner is SKIP-LEASE-POD: every instance stays passive".into(),
        ),
        Some(_) if warming => decide(State::Passive, Action::None, "warming up".into()),
        Some(l) if l.owner == r.identity => decide(
            State::Active,
            Action::Renew,
            "holding the lease: renewing it".into(),
        ),
        Some(l) if r.now - l.updated_time > expiry_ms => decide(
            State::Active,
            Action::Takeover,
            format!(
                "the lease of {} was renewed {} ms ago, more than {expiry_ms} ms: taking it over",
                l.owner,
                r.now - l.updated_time
            ),
        ),
        Some(l) => decide(
            State::Passive,
            Action::None,
            format!("the lease is held by {}", l.owner),
        ),
    })
}

/// The `state-checker` world's exports.
pub struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), Hook::Dr)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        parse_settings(&settings)
    }

    fn check(settings: String, request: StateRequest) -> Result<StateDecision, PluginError> {
        parse_settings(&settings)?;
        let d = check(&request)?;
        wasmop_plugin_sdk::log!(Debug, "{}: {}", request.identity, d.reason);
        Ok(d)
    }
}

#[cfg(target_arch = "wasm32")]
wasmop_plugin_sdk::state_checker::export_state_checker!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_plugin_sdk::state_checker::wasmop::plugin::dr::LeaseRecord;

    fn tick(owner: Option<&str>, updated_ago_ms: i64) -> StateRequest {
        StateRequest {
            identity: "eu-1".into(),
            now: 1_000_000,
            lease: owner.map(|o| LeaseRecord {
                owner: o.into(),
                updated_time: 1_000_000 - updated_ago_ms,
                notes: String::new(),
            }),
            wait_time_seconds: 15,
            failure_threshold: 3,
            started_at: 0,
            warmup_seconds: 0,
        }
    }

    fn outcome(r: &StateRequest) -> (State, Action) {
        let d = check(r).unwrap();
        (d.state, d.action)
    }

    #[test]
    fn follows_the_lease() {
        assert_eq!(outcome(&tick(None, 0)), (State::Active, Action::Create));
        assert_eq!(
            outcome(&tick(Some("eu-1"), 15_000)),
            (State::Active, Action::Renew)
        );
        assert_eq!(
            outcome(&tick(Some("us-1"), 45_000)),
            (State::Passive, Action::None)
        );
        assert_eq!(
            outcome(&tick(Some("us-1"), 45_001)),
            (State::Active, Action::Takeover)
        );
        assert_eq!(
            outcome(&tick(Some(SKIP_LEASE_POD), 900_000)),
            (State::Passive, Action::None)
        );
        let mut warming = tick(None, 0);
        warming.warmup_seconds = 2_000;
        assert_eq!(outcome(&warming), (State::Passive, Action::None));
    }

    #[test]
    fn takes_the_hosts_keys_and_refuses_others() {
        assert!(parse_settings(r#"{"backend": "k8s-lease", "waitTimeInSeconds": 5}"#).is_ok());
        let e = parse_settings(r#"{"colour": 1}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("settings"));
        let mut zero = tick(None, 0);
        zero.failure_threshold = 0;
        assert_eq!(check(&zero).unwrap_err().field.as_deref(), Some("request"));
    }

    /// Each `fixtures/*.json` (settings, a request, the answer or plugin-error it expects)
    /// through `Plugin::check`, as `{{cli}} test --fixtures fixtures` runs them on the
    /// component.
    #[test]
    fn fixtures() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
        assert!(wasmop_plugin_sdk::fixtures::check_dir(dir, Plugin::check) > 0);
    }
}
