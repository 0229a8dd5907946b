//! The `none` state checker (`builtin://none`): for a single wasmop instance, which needs no
//! DR. Every tick it answers active with no lease write, as Admiral's `NoOPStateChecker`
//! (docs/dr.md), so the instance writes from its first tick on. The host pairs it with
//! the `none` backend (no lease record at all); see docs/dr.md.

#[cfg(target_arch = "wasm32")]
mod component;

/// The reason given with every decision.
pub const REASON: &str = "single instance (state checker `none`): always active";

/// Validates the settings: the DR settings (docs/dr.md), with no keys of its own.
///
/// # Errors
/// A `plugin-error` at `settings` when they are not a JSON object, or at `settings.KEY` for a
/// key the DR settings do not have.
pub fn validate_settings(settings: &str) -> Result<(), wasmop_plugin_sdk::PluginError> {
    wasmop_plugin_sdk::dr_settings::validate(settings).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_the_dr_settings() {
        assert!(validate_settings("{}").is_ok());
        assert!(validate_settings(r#"{"backend": "none"}"#).is_ok());
        let e = validate_settings(r#"{"backend": "none", "replicas": 1}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("settings.replicas"));
        let e = validate_settings("{").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("settings"));
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
    }
}
