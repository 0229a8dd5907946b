//! Export glue for the `restart-predicate` world.
use wasmop_plugin_sdk::restart_predicate::{Guest, PodDecision, RestartRequest};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

struct Plugin;

fn plugin_error(e: crate::Error) -> PluginError {
    match e.field {
        Some(field) => PluginError::at(field, e.message),
        None => PluginError::new(e.message),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("restart-sidecar", env!("CARGO_PKG_VERSION"), Hook::Restart)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::validate_settings(&settings)
            .map(drop)
            .map_err(plugin_error)
    }

    fn evaluate(
        settings: String,
        request: RestartRequest,
    ) -> Result<Vec<PodDecision>, PluginError> {
        let decisions =
            crate::evaluate_request(&settings, &request.desired, &request.applied, &request.pods)
                .map_err(plugin_error)?;
        Ok(decisions
            .into_iter()
            .map(|d| PodDecision {
                restart: d.restart,
                reason: d.reason,
            })
            .collect())
    }
}

wasmop_plugin_sdk::restart_predicate::export_restart_predicate!(Plugin);
