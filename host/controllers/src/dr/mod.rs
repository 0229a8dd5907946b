//! DR: active/passive instances sharing one lease (docs/dr.md, Admiral's design); each
//! tick's state and lease write are decided by the `state-checker` plugin, and the result opens
//! or closes the write gate.
//!
//! ```text
//!  every x s:  backend.read() ──► plugin.check(identity, now, record, x, y, warm-up)
//!                                      │ (state, action)
//!              backend.write(action, CAS on the read) ──► gate open until the hold ends, or closed
//! ```
//!
//! - [`config`] reads the `dr` plugin entry's `settings` (Admiral's `dynamoDB:` block accepted);
//! - [`backend`] is the record store trait, with [`k8s_lease`] (default) and [`dynamodb`];
//! - [`machine`] holds one tick, the hold and every transition rule;
//! - [`metrics`] counts `wasmop_dr_*`;
//! - this module runs the loop of `wasmop run` (settings from the registry, re-read on every
//!   reload) and serves `/dr`.
//!
//! docs/dr.md has the whole picture: the decision table, the exact boundaries, the backends.

pub mod backend;
pub mod config;
pub mod dynamodb;
pub mod k8s_lease;
pub mod machine;
pub mod metrics;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

use crate::Context;
use backend::{LeaseBackend, NoBackend};
use config::{BackendConfig, DrConfig};
use machine::{Clock, Machine, Notify, Status, SystemClock};
use wasmop_kernel::gate::Writer;
use wasmop_plugin_host::Hook;
use wasmop_plugin_host::registry::CONFIGMAP_NAME;

/// DR Events through the write gate, about the Lease (backend `k8s-lease`) or the registry
/// ConfigMap (other backends).
struct WriterNotify {
    writer: Writer,
    reference: ObjectReference,
}

#[async_trait::async_trait]
impl Notify for WriterNotify {
    async fn event(&self, warning: bool, reason: &str, note: String) {
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.writer
            .event(&self.reference, type_, reason, "StateCheck", note)
            .await;
    }
}

fn reference(ctx: &Context, backend: &BackendConfig) -> ObjectReference {
    let (api_version, kind, name) = match backend {
        BackendConfig::KubernetesLease { name } => {
            ("coordination.k8s.io/v1", "Lease", name.as_str())
        }
        _ => ("v1", "ConfigMap", CONFIGMAP_NAME),
    };
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: Some(ctx.kernel.namespace().into()),
        ..ObjectReference::default()
    }
}

/// The backend a configuration names.
pub(crate) async fn backend_for(ctx: &Context, config: &BackendConfig) -> Arc<dyn LeaseBackend> {
    match config {
        BackendConfig::KubernetesLease { name } => Arc::new(k8s_lease::KubernetesLease::new(
            ctx.kernel.client.clone(),
            ctx.kernel.namespace(),
            name,
        )),
        BackendConfig::DynamoDb(d) => Arc::new(dynamodb::DynamoDbLease::new(d).await),
        BackendConfig::None => Arc::new(NoBackend),
    }
}

/// The `/dr` route: this instance's [`machine::StatusSnapshot`] as JSON.
pub fn router(status: Arc<Status>) -> Router {
    Router::new()
        .route("/dr", get(status_json))
        .with_state(status)
}

async fn status_json(State(status): State<Arc<Status>>) -> impl IntoResponse {
    Json(status.snapshot())
}

/// Options of the DR loop (flags of `wasmop run`).
#[derive(Clone, Debug, Default, clap::Args)]
#[group(skip)]
pub struct Options {
    /// The backend this install's registry names (`auto`: whatever it names, the builtin
    /// default when there is none). With any other value an instance that starts without a
    /// valid `wasmop-plugins` stays passive instead of falling back to a Lease of its own
    /// beside the real holder; the chart sets it from `dr.settings.backend`.
    #[arg(
        long = "dr-backend",
        env = "WASMOP_DR_BACKEND",
        value_enum,
        default_value_t
    )]
    pub backend: ExpectedBackend,
}

/// The DR backend an install expects ([`Options::backend`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ExpectedBackend {
    /// Whatever the registry names; the builtin default without a registry.
    #[default]
    Auto,
    /// A Kubernetes Lease.
    K8sLease,
    /// Admiral's DynamoDB table.
    Dynamodb,
    /// No lease (a single instance).
    None,
}

/// What the loop runs with: the entry's source and settings, and the identity they give.
#[derive(Clone, Debug, PartialEq)]
struct Applied {
    source: String,
    settings: Option<serde_json::Value>,
}

/// Runs the DR loop until shutdown: waits for the registry, then ticks every x seconds with the
/// registry's `dr` plugin and its settings; a reload that changes them applies at once (a new
/// backend or identity starts passive). The DR settings are the `dr` plugin entry's `settings`
/// in `wasmop-plugins` ([`config`]), so a reload changes them without a restart. `status` is
/// what `/dr` and `/health/ready` show ([`router`]).
///
/// Only a valid registry changes the DR configuration: while the registry serves the builtin
/// defaults because `wasmop-plugins` is missing, deleted or invalid, the loop keeps the last
/// good state checker and settings (a shared DynamoDB lease is not swapped for a Lease of this
/// instance's own), and an instance that starts that way with `--dr-backend` other than `auto`
/// stays passive until the registry is valid.
///
/// # Errors
/// When the registry is gone.
pub async fn run(ctx: Arc<Context>, status: Arc<Status>, opts: Options) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started_at = clock.wall_ms();
    let mut reloads = ctx.plugins.reloads();
    while !ctx.plugins.loaded() {
        reloads
            .changed()
            .await
            .map_err(|_| anyhow::anyhow!("the registry is gone"))?;
    }
    let mut machine: Option<Machine> = None;
    let mut applied: Option<Applied> = None;
    // The state checker of the configuration applied last, kept while the registry falls back.
    let mut last_good: Option<Arc<wasmop_plugin_host::Plugin>> = None;
    loop {
        reloads.mark_unchanged();
        let resolved = match (ctx.plugins.fallback_reason(), &last_good) {
            (Some(reason), Some(kept)) => {
                let note = kept_note(&reason);
                if status.snapshot().registry_error.as_ref() != Some(&note) {
                    tracing::warn!("DR: {note}");
                    status.update(|s| s.registry_error = Some(note));
                }
                Ok(kept.clone())
            }
            (Some(reason), None) if opts.backend != ExpectedBackend::Auto => {
                let error = format!(
                    "{CONFIGMAP_NAME} is not usable ({reason}) and this install's backend is \
                     {:?} (--dr-backend): passive until the registry is valid, rather than \
                     holding a lease of the builtin defaults beside the real holder",
                    opts.backend
                );
                give_up(&ctx, &status, &mut machine, "config", &error).await;
                wait_for_reload(&mut reloads).await?;
                continue;
            }
            _ => {
                status.update(|s| s.registry_error = None);
                ctx.plugins.resolve(Hook::Dr, None)
            }
        };
        let plugin = match resolved {
            Ok(p) => p,
            Err(e) => {
                let error = format!("no usable DR state checker: {e}");
                give_up(&ctx, &status, &mut machine, "plugin", &error).await;
                applied = None;
                wait_for_reload(&mut reloads).await?;
                continue;
            }
        };
        let now_applied = Applied {
            source: plugin.spec().source.clone(),
            settings: plugin.spec().settings.clone(),
        };
        if applied.as_ref() != Some(&now_applied) {
            match DrConfig::parse(now_applied.settings.as_ref(), &now_applied.source) {
                Ok(config) => {
                    metrics::config_valid(true);
                    configure(&ctx, &status, &mut machine, config, started_at, &clock).await;
                    applied = Some(now_applied);
                    last_good = Some(plugin.clone());
                }
                Err(e) => {
                    metrics::config_valid(false);
                    metrics::tick("config_error");
                    let error = format!(
                        "{e}; passive until the `{}` entry of {CONFIGMAP_NAME} is fixed",
                        plugin.spec().name
                    );
                    give_up(&ctx, &status, &mut machine, "config", &error).await;
                    applied = Some(now_applied);
                    wait_for_reload(&mut reloads).await?;
                    continue;
                }
            }
        }
        let Some(m) = machine.as_mut() else {
            wait_for_reload(&mut reloads).await?;
            continue;
        };
        let next = tokio::time::Instant::now() + m.config().interval();
        m.tick(&plugin).await;
        // Until the next tick: close the gate when the hold runs out; a reload re-reads the
        // settings at once.
        loop {
            let deadline = m.deadline();
            tokio::select! {
                () = tokio::time::sleep_until(next) => break,
                () = sleep_until_opt(deadline) => { m.expire_if_due().await; }
                r = reloads.changed() => {
                    r.map_err(|_| anyhow::anyhow!("the registry is gone"))?;
                    break;
                }
            }
        }
    }
}

/// The error `/dr` shows while the registry falls back and the last good DR configuration
/// stays in force.
fn kept_note(reason: &str) -> String {
    format!(
        "{CONFIGMAP_NAME} is not usable ({reason}): DR keeps its last good state checker and \
         settings until the registry is valid again"
    )
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn wait_for_reload(reloads: &mut tokio::sync::watch::Receiver<u64>) -> anyhow::Result<()> {
    reloads
        .changed()
        .await
        .map_err(|_| anyhow::anyhow!("the registry is gone"))
}

/// Applies a valid configuration: new timings keep the machine; a new backend or identity
/// replaces it (the old one stepping down first).
async fn configure(
    ctx: &Context,
    status: &Arc<Status>,
    machine: &mut Option<Machine>,
    config: DrConfig,
    started_at: i64,
    clock: &Arc<dyn Clock>,
) {
    let identity = config.identity(&ctx.kernel.scope.identity);
    if let Some(m) = machine.as_mut() {
        if m.config().backend == config.backend && m.identity() == identity {
            tracing::info!(identity = %identity, x = config.wait_time_seconds, y = config.failure_threshold, warmup = config.warmup_seconds, "DR settings changed");
            m.reconfigure(config);
            return;
        }
        m.demote("config", "the DR backend or identity changed".into(), true)
            .await;
    }
    let backend = backend_for(ctx, &config.backend).await;
    tracing::info!(
        identity = %identity,
        backend = %backend.describe(),
        x = config.wait_time_seconds,
        y = config.failure_threshold,
        warmup = config.warmup_seconds,
        hold_ms = config.hold().as_millis() as u64,
        "DR loop configured"
    );
    let notify = Arc::new(WriterNotify {
        writer: ctx.kernel.writer.clone(),
        reference: reference(ctx, &config.backend),
    });
    *machine = Some(Machine::new(
        ctx.kernel.gate().clone(),
        backend,
        config,
        identity,
        started_at,
        clock.clone(),
        notify,
        status.clone(),
    ));
}

/// Leaves DR without a usable configuration or plugin: passive (an active instance records a
/// Warning Event first, while it still holds the lease), with the error in the log, `/dr` and
/// the metrics.
async fn give_up(
    ctx: &Context,
    status: &Status,
    machine: &mut Option<Machine>,
    cause: &str,
    error: &str,
) {
    tracing::error!("DR: {error}");
    if let Some(m) = machine.as_mut() {
        if m.holding() {
            let notify = WriterNotify {
                writer: ctx.kernel.writer.clone(),
                reference: reference(ctx, &BackendConfig::None),
            };
            notify
                .event(true, "DRConfigInvalid", error.to_owned())
                .await;
        }
        m.demote(cause, error.to_owned(), false).await;
    } else {
        ctx.kernel.gate().set_active(false);
    }
    *machine = None;
    status.update(|s| {
        s.state = "passive".into();
        s.identity.clone_from(&ctx.kernel.scope.identity);
        s.error = Some(error.to_owned());
        s.reason = format!("passive: {error}");
    });
}
