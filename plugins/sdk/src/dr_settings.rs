//! The DR settings a state checker receives: the `settings:` of the registry's `dr` entry,
//! which the operator reads too (docs/dr.md, "Settings"). A state checker that takes no keys
//! of its own checks their shape with [`validate`], so a misspelt key is refused instead of
//! silently taking its default.

use serde_json::{Map, Value};

use crate::PluginError;

/// The top-level keys of the DR settings, as docs/dr.md lists them.
pub const KEYS: [&str; 7] = [
    "backend",
    "leaseName",
    "podIdentifier",
    "waitTimeInSeconds",
    "failureThreshold",
    "warmupSeconds",
    "dynamoDB",
];

/// Parses `settings` as the DR settings object and returns it.
///
/// # Errors
/// A [`PluginError`] at `settings` when it is not a JSON object, or at `settings.KEY` for the
/// first key not in [`KEYS`]. The values themselves are the operator's to check.
pub fn validate(settings: &str) -> Result<Map<String, Value>, PluginError> {
    let object = match serde_json::from_str::<Value>(settings) {
        Ok(Value::Object(object)) => object,
        Ok(other) => {
            return Err(PluginError::at(
                "settings",
                format!("settings must be a JSON object, got {other}"),
            ));
        }
        Err(e) => {
            return Err(PluginError::at(
                "settings",
                format!("settings are not valid JSON: {e}"),
            ));
        }
    };
    if let Some(key) = object.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(PluginError::at(
            format!("settings.{key}"),
            format!("unknown key; the DR settings are {}", KEYS.join(", ")),
        ));
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(settings: &str) -> Option<String> {
        validate(settings).unwrap_err().field
    }

    #[test]
    fn takes_the_documented_keys_only() {
        let all = r#"{"backend": "k8s-lease", "leaseName": "w", "podIdentifier": "",
            "waitTimeInSeconds": 5, "failureThreshold": 3, "warmupSeconds": 0,
            "dynamoDB": {"tableName": "t"}}"#;
        assert_eq!(validate(all).unwrap().len(), KEYS.len());
        assert!(validate("{}").unwrap().is_empty());
        assert_eq!(
            field(r#"{"failureTreshold": 5}"#).as_deref(),
            Some("settings.failureTreshold")
        );
        assert_eq!(field("[1]").as_deref(), Some("settings"));
        assert_eq!(field("{").as_deref(), Some("settings"));
        assert!(validate("3").unwrap_err().message.contains("JSON object"));
    }
}
