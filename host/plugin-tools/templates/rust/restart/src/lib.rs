//! {{name}}: a `restart` plugin. No pod restarts unless the settings say `{"restart": true}`:
//! a starting point to replace with a policy that compares each pod with `desired`.

use serde_json::Value;
use wasmop_plugin_sdk::restart_predicate::{Guest, PodDecision, RestartRequest};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

/// The plugin's settings, from its registry entry: `{"restart": bool}`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Whether every pod restarts (`false` when absent).
    pub restart: bool,
}

impl Settings {
    /// Parses the settings JSON object.
    ///
    /// # Errors
    /// Not a JSON object or an unknown key (at `settings`), a `restart` that is not a boolean
    /// (at `settings.restart`).
    pub fn parse(text: &str) -> Result<Self, PluginError> {
        let Ok(Value::Object(settings)) = serde_json::from_str::<Value>(text) else {
            return Err(PluginError::at(
                "settings",
                "settings must be a JSON object",
            ));
        };
        let mut out = Self::default();
        for (key, value) in &settings {
            match key.as_str() {
                "restart" => {
                    out.restart = value.as_bool().ok_or_else(|| {
                        PluginError::at(
                            "settings.restart",
                            format!("restart must be true or false, got {value}"),
                        )
                    })?;
                }
                _ => {
                    return Err(PluginError::at(
                        "settings",
                        format!("unknown settings key {key:?}; the key is restart"),
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// One decision per pod of `pods` (a JSON array of Pods), in page order.
///
/// # Errors
/// `pods` is not a JSON array, at `request.pods`.
pub fn evaluate(settings: &Settings, pods: &str) -> Result<Vec<PodDecision>, PluginError> {
    let Ok(Value::Array(pods)) = serde_json::from_str::<Value>(pods) else {
        return Err(PluginError::at(
            "request.pods",
            "pods must be a JSON array of Pod objects",
        ));
    };
    Ok(pods
        .iter()
        .map(|pod| {
            let field = |f: &str| pod["metadata"][f].as_str().unwrap_or("?").to_owned();
            PodDecision {
                restart: settings.restart,
                reason: format!(
                    "{}/{}: the settings' restart is {}",
                    field("namespace"),
                    field("name"),
                    settings.restart
                ),
            }
        })
        .collect())
}

/// The `restart-predicate` world's exports.
pub struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), Hook::Restart)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        Settings::parse(&settings).map(drop)
    }

    fn evaluate(
        settings: String,
        request: RestartRequest,
    ) -> Result<Vec<PodDecision>, PluginError> {
        let decisions = evaluate(&Settings::parse(&settings)?, &request.pods)?;
        wasmop_plugin_sdk::log!(
            Debug,
            "policy {}: {} pods judged",
            request.policy,
            decisions.len()
        );
        Ok(decisions)
    }
}

#[cfg(target_arch = "wasm32")]
wasmop_plugin_sdk::restart_predicate::export_restart_predicate!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    const PODS: &str =
        r#"[{"metadata": {"name": "a", "namespace": "shop"}}, {"metadata": {"name": "b"}}]"#;

    #[test]
    fn one_decision_per_pod_as_the_settings_say() {
        let keep = evaluate(&Settings::parse("{}").unwrap(), PODS).unwrap();
        assert_eq!(
            keep.iter().map(|d| d.restart).collect::<Vec<_>>(),
            [false, false]
        );
        assert!(keep[0].reason.starts_with("shop/a: "), "{}", keep[0].reason);
        let all = evaluate(&Settings::parse(r#"{"restart": true}"#).unwrap(), PODS).unwrap();
        assert_eq!(
            all.iter().map(|d| d.restart).collect::<Vec<_>>(),
            [true, true]
        );
        assert!(evaluate(&Settings::default(), "[]").unwrap().is_empty());
    }

    #[test]
    fn refuses_what_it_cannot_read_with_the_field() {
        let e = evaluate(&Settings::default(), "{}").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("request.pods"));
        let field = |s: &str| Settings::parse(s).unwrap_err().field;
        assert_eq!(
            field(r#"{"restart": "yes"}"#).as_deref(),
            Some("settings.restart")
        );
        assert_eq!(field(r#"{"colour": 1}"#).as_deref(), Some("settings"));
    }

    /// Each `fixtures/*.json` (settings, a request, the answer or plugin-error it expects)
    /// through `Plugin::evaluate`, as `{{cli}} test --fixtures fixtures` runs them on the
    /// component.
    #[test]
    fn fixtures() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
        assert!(wasmop_plugin_sdk::fixtures::check_dir(dir, Plugin::evaluate) > 0);
    }
}
