//! Routing: the DynamicEnv controller (docs/routing.md), with each VirtualService's new
//! routes decided by the `router` plugin.
//!
//! ```text
//!  caches (DynamicEnvs, Deployments, Services, DestinationRules, VirtualServices)
//!    └─► snapshot ─► plan: IR (keys, locations, errors) ─► router calls ─► writes + status
//!                                                                          └─► write gate
//! ```
//!
//! - [`snapshot`]: what a plan reads; `wasmop plan -f DIR` reads it from YAML files.
//! - [`plan`](mod@plan): `plan(snapshot, router) -> Plan`, pure apart from the router calls; the
//!   controller and `wasmop plan` run the same function.
//! - [`ir`]: the dumpable intermediate representation.
//! - [`answer`]: what the host checks in a router's answer (`wasmop_plugin_host::route_checks`,
//!   also run by `wasmop plugin test`).
//! - [`names`], [`clone`], [`istio`]: generated names, the clone Deployments, Istio's types;
//!   [`gohash`]: the status `hash` as upstream computes it.
//! - [`router`]: the router behind a small trait (wasm component, native library, stand-in).
//! - [`controller`]: the kube-runtime controller and the thin apply step.

pub mod answer;
pub mod clone;
pub mod controller;
pub mod error;
pub mod gohash;
pub mod ir;
pub mod istio;
pub mod names;
pub mod options;
pub mod plan;
pub mod router;
pub mod snapshot;

use std::sync::Arc;

use crate::Context;
pub use error::Error;
pub use options::Options;
pub use plan::{Plan, PlanConfig, plan};
pub use router::{Refining, Router, WasmRouter, wasm_chain};
pub use snapshot::Snapshot;

/// Output format of `wasmop plan`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// YAML (the default).
    #[default]
    Yaml,
    /// JSON.
    Json,
}

/// Runs the DynamicEnv controller with `opts` until shutdown.
///
/// # Errors
/// When the controller cannot start (the CRDs are not installed).
pub async fn run(ctx: Arc<Context>, opts: Options) -> anyhow::Result<()> {
    controller::run(ctx, opts.plan_config()).await
}

/// Plans the files of `dir` with `router` and renders the plan (IR, objects to write, status)
/// as `format`; skipped documents are listed on stderr. The golden tests and `wasmop plan` use
/// this function.
///
/// # Errors
/// An unreadable directory or file, or a document of a known kind that does not parse.
pub async fn plan_dir(
    dir: &std::path::Path,
    router: &Arc<dyn Router>,
    cfg: &PlanConfig,
    format: OutputFormat,
) -> anyhow::Result<String> {
    let (snapshot, skipped) = Snapshot::read_dir(dir)?;
    for s in &skipped {
        eprintln!("skipped {} ({}): not read by a plan", s.location, s.kind);
    }
    let plan = plan(&snapshot, router, cfg).await;
    Ok(match format {
        OutputFormat::Yaml => wasmop_kernel::yaml::to_string(&serde_json::to_value(&plan)?),
        OutputFormat::Json => format!("{}\n", serde_json::to_string_pretty(&plan)?),
    })
}
