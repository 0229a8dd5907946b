//! Export glue for the `state-checker` world.
use wasmop_plugin_sdk::state_checker::wasmop::plugin::dr::{Action, State};
use wasmop_plugin_sdk::state_checker::{Guest, StateDecision, StateRequest};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("none", env!("CARGO_PKG_VERSION"), Hook::Dr)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::validate_settings(&settings)
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
