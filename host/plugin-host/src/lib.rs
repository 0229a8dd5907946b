//! The plugin host: every policy decision of wasmop is a call into a WebAssembly component.
//! It knows nothing of Kubernetes controllers; they call it through [`Plugin`]'s typed methods.
//!
//! - [`PluginRuntime`] owns the wasmtime engine (component model only, epoch interruption with a
//!   10 ms ticker), the compile cache and the permits that bound concurrent calls (shared, and
//!   one of each hook's own).
//! - [`Plugin`] is one loaded registry entry: its `InstancePre` for its world, settings,
//!   limits and grants. Each call gets a fresh `Store` (`sandbox::Sandbox`), runs in the
//!   calling task through wasmtime's async API and leaves the async executor once it has
//!   computed for a whole epoch tick (see [`Plugin`]'s `call_in_store`), and fails alone with a
//!   [`CallError`] that names the plugin, the hook and the cause.
//! - [`registry`] turns the `wasmop-plugins` ConfigMap into loaded plugins and swaps them in.
//! - [`route_checks`]: what the host checks in a router's answer (the routing controller and
//!   `wasmop plugin test` run it).
//!
//! Modules, leaves first: `epoch` (the ticker), [`bindings`] (the worlds of
//! `plugins/sdk/wit/plugin.wit`), `spec` (what a registry entry says), `error`, [`http_pool`], [`data_root`] (where
//! `grants.readOnlyDir` may point), [`sandbox`] (a call's store:
//! limits, WASI, `wasi:http` grants), [`cache`], [`metrics`], `world` (a component's typed
//! pre-instance), `runtime` ([`PluginRuntime`]), [`builtin`], `plugin` ([`Plugin`] and its
//! calls), [`registry`], [`route_checks`]. None imports one after it.
//!
//! The shape follows Kubewarden's policy-server and wasmtime's embedding guidance
//! (docs/architecture.md): compile once per digest, one pre-instance per digest, a fresh
//! instance per call, deny-all WASI.
// The one unsafe block of the project loads compiled artifacts (src/cache.rs).
#![deny(unsafe_code)]

pub mod bindings;
pub mod builtin;
pub mod cache;
pub mod data_root;
mod epoch;
mod error;
pub mod http_pool;
pub mod metrics;
pub mod oci;
mod plugin;
pub mod registry;
pub mod route_checks;
mod runtime;
pub mod sandbox;
mod spec;
mod world;

pub use cache::{CompileCache, Origin, sha256_hex};
pub use data_root::{DEFAULT_PLUGIN_DATA_ROOT, DataRoot};
pub use epoch::EPOCH_TICK;
pub use error::{CallError, Failure, LoadError};
pub use plugin::Plugin;
pub use runtime::{
    CompileLimits, LOAD_CALLS, MAX_COMPONENT_BYTES, MAX_WASM_STACK, OWN_PERMITS_PER_HOOK,
    POOLING_MAX_MEMORY, PluginRuntime, RuntimeOptions, instance_slots, pooling_reservation,
    read_extra_ca_file,
};
pub use spec::{FailurePolicy, Grants, Hook, Limits, PluginSpec};

/// The records of the four worlds, as the controllers build requests and read answers.
pub use bindings::{
    DrState, HeaderMatch, IstioMatch, Label, LeaseAction, LeaseRecord, PodDecision, RestartRequest,
    RouteRequest, RouteResponse, StateDecision, StateRequest, StringMatch, TriggerRequest,
    TriggerVote, Vote,
};
