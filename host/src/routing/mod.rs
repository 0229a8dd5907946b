//! Routing: the DynamicEnv controller (reference/routing.md), with each VirtualService's new
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
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use crate::plugins::{Hook, PluginRuntime, RuntimeOptions};
use crate::runtime::Context;
use crate::runtime::gate::WriteError;
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

/// Options of `wasmop plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanOptions {
    /// Directory of YAML or JSON files: DynamicEnvs and the Deployments, Services,
    /// DestinationRules and VirtualServices they may touch (other kinds are skipped).
    #[arg(short = 'f', long = "filename")]
    pub dir: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// The router: `builtin://NAME` or a component file.
    #[arg(long, default_value = "builtin://routing-istio")]
    pub plugin: String,
    /// Settings JSON of the router.
    #[arg(long, default_value = "{}")]
    pub settings: String,
    /// Plan settings, as `wasmop run`'s.
    #[command(flatten)]
    pub routing: Options,
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
    pub fn metric_label(&self) -> &'static str {
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
    pub fn is_stale(&self) -> bool {
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
    pub fn is_passive(&self) -> bool {
        self.metric_label() == "passive"
    }
}

/// Runs the DynamicEnv controller until shutdown.
///
/// # Errors
/// When the controller cannot start (the CRDs are not installed).
pub async fn run(ctx: Arc<Context>) -> anyhow::Result<()> {
    controller::run(ctx).await
}

/// Loads the router of `wasmop plan`: `builtin://NAME` or a component file.
async fn load_router(plugin: &str, settings: &str) -> anyhow::Result<WasmRouter> {
    let runtime = PluginRuntime::new(RuntimeOptions::default())?;
    let settings = serde_json::from_str(settings).context("--settings is not valid JSON")?;
    let plugin = crate::cli::load_for_cli(
        &runtime,
        Hook::Routing,
        plugin,
        settings,
        crate::plugins::Limits::default(),
        crate::plugins::Grants::default(),
    )
    .await?;
    Ok(WasmRouter(plugin))
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

/// `wasmop plan`: the routing pipeline offline, on YAML files, with the same code as the
/// controller. Prints the IR (each resource's key, location, status and errors), the objects
/// it would write and the DynamicEnvs' status. Exit code 0 whether or not the IR holds errors.
///
/// # Errors
/// Unreadable input, or a router that cannot be loaded.
pub async fn plan_command(opts: PlanOptions) -> anyhow::Result<ExitCode> {
    let router: Arc<dyn Router> = Arc::new(load_router(&opts.plugin, &opts.settings).await?);
    let out = plan_dir(&opts.dir, &router, &opts.routing.plan_config(), opts.output).await?;
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
