//! wasmop: a Kubernetes operator whose policy decisions are made by sandboxed WebAssembly
//! components. See `docs/architecture.md` for the data flow and `wit/plugin.wit` for the
//! plugin contract.

pub mod alloc;
pub mod api;
pub mod cli;
pub mod dr;
pub mod metrics;
pub mod plugins;
pub mod restart;
pub mod routing;
pub mod runtime;
pub mod scaling;
