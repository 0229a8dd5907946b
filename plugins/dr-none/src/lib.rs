//! The `none` state checker (`builtin://none`): for a single wasmop instance, which needs no
//! DR. Every tick it answers active with no lease write, as Admiral's `NoOPStateChecker`
//! (docs/dr.md), so the instance writes from its first tick on. The host pairs it with
//! the `none` backend (no lease record at all); see docs/dr.md.

#[cfg(target_arch = "wasm32")]
mod component;

/// The reason given with every decision.
pub const REASON: &str = "single instance (state checker `none`): always active";

/// Validates the settings: a JSON object (the host's DR settings; nothing of its own).
///
/// # Errors
/// A message when `settings` is not a JSON object.
pub fn validate_settings(settings: &str) -> Result<(), String> {
    match serde_json::from_str::<serde_json::Value>(settings) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(other) => Err(format!("settings must be a JSON object, got {other}")),
        Err(e) => Err(format!("settings are not valid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_must_be_an_object() {
        assert!(validate_settings("{}").is_ok());
        assert!(validate_settings("{\"backend\": \"none\"}").is_ok());
        assert!(validate_settings("3").unwrap_err().contains("JSON object"));
        assert!(
            validate_settings("{")
                .unwrap_err()
                .contains("not valid JSON")
        );
    }
}
