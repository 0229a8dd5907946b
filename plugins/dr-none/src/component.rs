//! Export glue for the `state-checker` world.
use wasmop_plugin_sdk::state_checker::wasmop::plugin::dr::{Action, State};
use wasmop_plugin_sdk::state_checker::{
    Guest, PluginError, PluginInfo, StateDecision, StateRequest, wasmop::plugin::types::Hook,
};

struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "none".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            hook: Hook::Dr,
        }
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::validate_settings(&settings).map_err(|message| PluginError {
            message,
            field: None,
        })
    }

    fn check(_settings: String, _request: StateRequest) -> Result<StateDecision, PluginError> {
        Ok(StateDecision {
            state: State::Active,
            action: Action::None,
            reason: crate::REASON.into(),
        })
    }
}

wasmop_plugin_sdk::state_checker::export_state_checker!(Plugin);
