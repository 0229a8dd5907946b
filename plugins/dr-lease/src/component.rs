//! Export glue for the `state-checker` world.
use wasmop_plugin_sdk::state_checker::wasmop::plugin::dr::{Action as A, State as S};
use wasmop_plugin_sdk::state_checker::{Guest, StateDecision, StateRequest};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("dr-lease", env!("CARGO_PKG_VERSION"), Hook::Dr)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::validate_settings(&settings)
    }

    fn check(_settings: String, r: StateRequest) -> Result<StateDecision, PluginError> {
        let lease = r.lease.map(|l| crate::Lease {
            owner: l.owner,
            updated_time: l.updated_time,
        });
        let d = crate::decide(&crate::Tick {
            identity: &r.identity,
            now: r.now,
            lease: lease.as_ref(),
            wait_time_seconds: r.wait_time_seconds,
            failure_threshold: r.failure_threshold,
            started_at: r.started_at,
            warmup_seconds: r.warmup_seconds,
        })?;
        Ok(StateDecision {
            state: match d.state {
                crate::State::Active => S::Active,
                crate::State::Passive => S::Passive,
            },
            action: match d.action {
                crate::Action::None => A::None,
                crate::Action::Create => A::Create,
                crate::Action::Renew => A::Renew,
                crate::Action::Takeover => A::Takeover,
            },
            reason: d.reason,
        })
    }
}

wasmop_plugin_sdk::state_checker::export_state_checker!(Plugin);
