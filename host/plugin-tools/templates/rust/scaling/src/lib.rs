//! {{name}}: a `scaling` plugin. Every trigger gets the vote its settings name (`up` unless
//! they say `down`): a starting point to replace with a policy that reads the trigger.

use serde_json::Value;
use wasmop_plugin_sdk::scaler::wasmop::plugin::scaling::Vote;
use wasmop_plugin_sdk::scaler::{Guest, TriggerRequest, TriggerVote};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

/// The plugin's settings, from its registry entry: `{"vote": "up" | "down"}`.
#[derive(Debug, PartialEq, Eq)]
pub struct Settings {
    /// The vote every trigger gets (`up` when absent).
    pub vote: Vote,
}

impl Settings {
    /// Parses the settings JSON object.
    ///
    /// # Errors
    /// Not a JSON object or an unknown key (at `settings`), a vote other than `up` and `down`
    /// (at `settings.vote`).
    pub fn parse(text: &str) -> Result<Self, PluginError> {
        let Ok(Value::Object(settings)) = serde_json::from_str::<Value>(text) else {
            return Err(PluginError::at(
                "settings",
                "settings must be a JSON object",
            ));
        };
        let mut out = Self { vote: Vote::Up };
        for (key, value) in &settings {
            match (key.as_str(), value.as_str()) {
                ("vote", Some("up")) => out.vote = Vote::Up,
                ("vote", Some("down")) => out.vote = Vote::Down,
                ("vote", _) => {
                    return Err(PluginError::at(
                        "settings.vote",
                        format!("vote must be \"up\" or \"down\", got {value}"),
                    ));
                }
                _ => {
                    return Err(PluginError::at(
                        "settings",
                        format!("unknown settings key {key:?}; the key is vote"),
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// The vote for one trigger.
pub fn vote(settings: &Settings, r: &TriggerRequest) -> TriggerVote {
    let name = if settings.vote == Vote::Up {
        "up"
    } else {
        "down"
    };
    TriggerVote {
        vote: settings.vote,
        value: None,
        reason: format!(
            "{} trigger of {}: the settings' vote, {name}",
            r.trigger_type, r.elastic_service
        ),
    }
}

/// The `scaler` world's exports.
pub struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), Hook::Scaling)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        Settings::parse(&settings).map(drop)
    }

    fn vote(settings: String, request: TriggerRequest) -> Result<TriggerVote, PluginError> {
        let v = vote(&Settings::parse(&settings)?, &request);
        wasmop_plugin_sdk::log!(Debug, "{}", v.reason);
        Ok(v)
    }
}

#[cfg(target_arch = "wasm32")]
wasmop_plugin_sdk::scaler::export_scaler!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger() -> TriggerRequest {
        TriggerRequest {
            elastic_service: "shop/reviews".into(),
            trigger_type: "cron".into(),
            metadata: "{}".into(),
            cooldown_seconds: 300,
            now: 1_795_424_400_000,
        }
    }

    #[test]
    fn votes_as_the_settings_say() {
        let up = vote(&Settings::parse("{}").unwrap(), &trigger());
        assert_eq!(up.vote, Vote::Up);
        assert!(up.reason.contains("shop/reviews"), "{}", up.reason);
        let down = vote(&Settings::parse(r#"{"vote": "down"}"#).unwrap(), &trigger());
        assert_eq!(down.vote, Vote::Down);
    }

    #[test]
    fn refuses_other_settings_with_their_field() {
        let field = |s: &str| Settings::parse(s).unwrap_err().field;
        assert_eq!(
            field(r#"{"vote": "sideways"}"#).as_deref(),
            Some("settings.vote")
        );
        assert_eq!(field(r#"{"colour": 1}"#).as_deref(), Some("settings"));
        assert_eq!(field("[]").as_deref(), Some("settings"));
    }

    /// Each `fixtures/*.json` (settings, a request, the answer or plugin-error it expects)
    /// through `Plugin::vote`, as `{{cli}} test --fixtures fixtures` runs them on the
    /// component.
    #[test]
    fn fixtures() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
        assert!(wasmop_plugin_sdk::fixtures::check_dir(dir, Plugin::vote) > 0);
    }
}
