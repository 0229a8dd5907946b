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
//! - [`names`], [`clone`], [`istio`]: generated names, the clone Deployments, Istio's types.
//! - [`router`]: the router behind a small trait (wasm component, native library, stand-in).
//! - [`controller`]: the kube-runtime controller and the thin apply step.

pub mod clone;
pub mod controller;
pub mod ir;
pub mod istio;
pub mod names;
pub mod plan;
pub mod router;
pub mod snapshot;

use std::collections::BTreeSet;
use std::sync::Arc;

use wasmop_kernel::gate::WriteError;

use crate::Context;
pub use plan::{Plan, PlanConfig, plan};
pub use router::{Router, WasmRouter};
pub use snapshot::Snapshot;

/// Options of the routing controller (flags of `wasmop run`), as upstream's.
#[derive(Clone, Debug, clap::Args)]
#[group(skip)]
pub struct Options {
    /// The pod label that tells versions apart: clones get `<label>=<version of the
    /// DynamicEnv>`, and base DestinationRule subsets are found by `<label>=<defaultVersion>`.
    #[arg(
        long = "version-label",
        env = "WASMOP_ROUTING_VERSION_LABEL",
        default_value = "version"
    )]
    pub version_label: String,
    /// The version of the base workloads when a subset names no `defaultVersion`.
    #[arg(
        long = "default-version",
        env = "WASMOP_ROUTING_DEFAULT_VERSION",
        default_value = "shared"
    )]
    pub default_version: String,
    /// Labels of a base Deployment not copied to its clones (comma-separated), e.g. labels
    /// of a GitOps tool that would claim the clone.
    #[arg(
        long = "remove-labels",
        env = "WASMOP_ROUTING_REMOVE_LABELS",
        value_delimiter = ','
    )]
    pub remove_labels: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        let cfg = PlanConfig::default();
        Self {
            version_label: cfg.version_label,
            default_version: cfg.default_version,
            remove_labels: Vec::new(),
        }
    }
}

impl Options {
    /// The plan settings these options give.
    pub fn plan_config(&self) -> PlanConfig {
        PlanConfig {
            version_label: self.version_label.clone(),
            default_version: self.default_version.clone(),
            remove_labels: self
                .remove_labels
                .iter()
                .filter(|l| !l.is_empty())
                .cloned()
                .collect::<BTreeSet<_>>(),
        }
    }
}

/// Output format of `wasmop plan`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// YAML (the default).
    #[default]
    Yaml,
    /// JSON.
    Json,
}

/// Why a reconcile of a DynamicEnv failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write was refused (passive instance) or failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A VirtualService changed between the plan and the write (the JSON patch test failed):
    /// the next reconcile plans again.
    #[error("VirtualService {0} changed while its routes were written; planning again")]
    Stale(String),
    /// The finalizer step failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A stable label for `wasmop_reconcile_total{outcome}`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::Write(WriteError::Passive) => "passive",
            Error::Write(e) if e.is_conflict() => "conflict",
            Error::Write(_) => "write",
            Error::Stale(_) => "stale",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
        }
    }

    /// Whether a retry soon is likely to succeed: a newer version of an object exists (409,
    /// 422 from a JSON patch test or the finalizer's own test).
    pub(crate) fn is_stale(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Stale(_) => true,
            Error::Write(e) => e.is_conflict(),
            Error::Finalizer(e) => match e.as_ref() {
                F::AddFinalizer(kube::Error::Api(s)) | F::RemoveFinalizer(kube::Error::Api(s)) => {
                    s.code == 422 || s.code == 409
                }
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.is_stale(),
                _ => false,
            },
        }
    }

    /// Whether this is (or wraps) the passive gate's refusal.
    pub(crate) fn is_passive(&self) -> bool {
        self.metric_label() == "passive"
    }
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
        OutputFormat::Yaml => serde_yaml::to_string(&plan)?,
        OutputFormat::Json => format!("{}\n", serde_json::to_string_pretty(&plan)?),
    })
}
