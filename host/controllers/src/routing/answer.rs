//! What the host checks in a router's answer before any of it is written: the plugin decides
//! the routes of one DynamicEnv subset, and nothing else. The checks live in the plugin host
//! (host/plugin-host/src/route_checks.rs), so that `wasmop plugin test` runs them without a
//! Kubernetes client; this module is their path for the routing controller.

pub use wasmop_plugin_host::route_checks::{check, uncopied};
