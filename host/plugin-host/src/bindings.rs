//! Host-side bindings of the `wasmop:plugin` worlds (`plugins/sdk/wit/plugin.wit`), one module
//! per world.
//! Shared interfaces are generated once (in `router`) and reused by the other worlds.
#![allow(missing_docs)]

/// The `router` world (routing hook); also the home of the shared `types` and `log` bindings.
pub mod router {
    wasmtime::component::bindgen!({
        world: "router",
        path: "../../plugins/sdk/wit",
        additional_derives: [serde::Serialize, serde::Deserialize],
        exports: { default: async },
    });
}

/// The `scaler` world (scaling hook).
pub mod scaler {
    wasmtime::component::bindgen!({
        world: "scaler",
        path: "../../plugins/sdk/wit",
        additional_derives: [serde::Serialize, serde::Deserialize],
        exports: { default: async },
        with: {
            "wasmop:plugin/types": super::router::wasmop::plugin::types,
            "wasmop:plugin/log": super::router::wasmop::plugin::log,
        },
    });
}

/// The `restart-predicate` world (restart hook).
pub mod restart {
    wasmtime::component::bindgen!({
        world: "restart-predicate",
        path: "../../plugins/sdk/wit",
        additional_derives: [serde::Serialize, serde::Deserialize],
        exports: { default: async },
        with: {
            "wasmop:plugin/types": super::router::wasmop::plugin::types,
            "wasmop:plugin/log": super::router::wasmop::plugin::log,
        },
    });
}

/// The `state-checker` world (DR hook).
pub mod dr {
    wasmtime::component::bindgen!({
        world: "state-checker",
        path: "../../plugins/sdk/wit",
        additional_derives: [serde::Serialize, serde::Deserialize],
        exports: { default: async },
        with: {
            "wasmop:plugin/types": super::router::wasmop::plugin::types,
            "wasmop:plugin/log": super::router::wasmop::plugin::log,
        },
    });
}

pub use router::wasmop::plugin::log::Level as LogLevel;
pub use router::wasmop::plugin::types::{Hook as WitHook, PluginError, PluginInfo};

pub use dr::wasmop::plugin::dr::{
    Action as LeaseAction, LeaseRecord, State as DrState, StateDecision, StateRequest,
};
pub use restart::wasmop::plugin::restart::{PodDecision, RestartRequest};
pub use router::wasmop::plugin::routing::{
    HeaderMatch, IstioMatch, Label, RouteRequest, RouteResponse, StringMatch,
};
pub use scaler::wasmop::plugin::scaling::{TriggerRequest, TriggerVote, Vote};
