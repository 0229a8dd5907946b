//! `wasmop run`: the operator process. It loads the plugin registry from the `wasmop-plugins`
//! ConfigMap, keeps it in sync (hot reload), records Events on the ConfigMap, and serves
//! `/healthz`, `/readyz`, `/metrics` and `/plugins` (the registry's readiness as JSON).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};

use crate::plugins::registry::{
    self, Fetch, LocalFetch, Registry, RegistryConfig, ReloadReport, Source,
};
use crate::plugins::{PluginRuntime, RuntimeOptions};

/// Field manager and Event reporter name of the operator.
pub const FIELD_MANAGER: &str = "wasmop";

/// Options of `wasmop run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Namespace holding `wasmop-plugins` and the operator's own objects.
    pub namespace: String,
    /// Address of the health, metrics and plugins server.
    pub listen: SocketAddr,
    /// This instance's identity (pod name), used in Events.
    pub identity: String,
    /// PEM certificates trusted for `https://` plugin sources besides the system's roots.
    pub extra_ca_pem: Option<Vec<u8>>,
    /// Use the pooling instance allocator (see [`RuntimeOptions::pooling`]).
    pub pooling: bool,
}

/// Shared state of the running operator.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The plugin registry.
    pub registry: Arc<Registry>,
    /// Event recorder (reporter `wasmop`, instance = identity).
    pub recorder: Recorder,
    /// The operator namespace.
    pub namespace: String,
    ready: AtomicBool,
    reloads: tokio::sync::watch::Sender<u64>,
    extra_ca_pem: Option<Vec<u8>>,
}

impl Context {
    /// Marks the registry loaded and tells every watcher of reloads.
    fn reloaded(&self) {
        self.ready.store(true, Ordering::Relaxed);
        self.reloads.send_modify(|n| *n += 1);
    }
}

/// Reads `configmap://NAME/KEY` sources from the operator namespace and everything else locally.
pub struct KubeFetch {
    api: Api<ConfigMap>,
    local: LocalFetch,
}

#[async_trait::async_trait]
impl Fetch for KubeFetch {
    async fn fetch(&self, source: &Source) -> Result<Vec<u8>, String> {
        let Source::ConfigMap { name, key } = source else {
            return self.local.fetch(source).await;
        };
        let cm = self
            .api
            .get_opt(name)
            .await
            .map_err(|e| format!("cannot read ConfigMap {name}: {e}"))?;
        let cm = cm.ok_or_else(|| format!("ConfigMap {name} not found"))?;
        cm.binary_data
            .and_then(|mut d| d.remove(key))
            .map(|b| b.0)
            .ok_or_else(|| format!("ConfigMap {name} has no binaryData key {key:?}"))
    }
}

/// Runs the operator until SIGINT or SIGTERM.
///
/// # Errors
/// No cluster connection, or the server address cannot be bound.
pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("cannot connect to the Kubernetes API (is KUBECONFIG set?)")?;
    let runtime = PluginRuntime::new(RuntimeOptions {
        pooling: opts.pooling,
        ..RuntimeOptions::default()
    })?;
    let registry = Registry::new(runtime);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(opts.identity.clone()),
        },
    );
    let (reloads, reloads_rx) = tokio::sync::watch::channel(0);
    let ctx = Arc::new(Context {
        client: client.clone(),
        registry: registry.clone(),
        recorder,
        namespace: opts.namespace.clone(),
        ready: AtomicBool::new(false),
        reloads,
        extra_ca_pem: opts.extra_ca_pem.clone(),
    });

    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    tracing::info!(listen = %opts.listen, namespace = %opts.namespace, identity = %opts.identity, "wasmop starting");
    let server =
        axum::serve(listener, router(ctx.clone())).with_graceful_shutdown(shutdown_signal());
    tokio::select! {
        r = server => r.context("server failed")?,
        r = watch_registry(ctx.clone()) => r?,
        r = crate::plugin_ready::run(client, registry, reloads_rx) => r?,
    }
    tracing::info!("wasmop stopped");
    Ok(())
}

fn router(ctx: Arc<Context>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(|| async { crate::metrics::encode() }))
        .route("/plugins", get(plugins))
        .with_state(ctx)
}

async fn readyz(State(ctx): State<Arc<Context>>) -> impl IntoResponse {
    if ctx.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "loading plugins")
    }
}

async fn plugins(State(ctx): State<Arc<Context>>) -> impl IntoResponse {
    let (plugins, config_error) = ctx.registry.statuses();
    Json(serde_json::json!({ "plugins": plugins, "configError": config_error }))
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// Watches `wasmop-plugins` and applies every change to the registry.
async fn watch_registry(ctx: Arc<Context>) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let fetch = KubeFetch {
        api: api.clone(),
        local: LocalFetch {
            extra_ca_pem: ctx.extra_ca_pem.clone(),
        },
    };
    let cfg =
        watcher::Config::default().fields(&format!("metadata.name={}", registry::CONFIGMAP_NAME));
    let mut events = watcher(api, cfg).boxed();
    let mut seen_in_init = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => seen_in_init = false,
            Ok(watcher::Event::InitApply(cm)) => {
                seen_in_init = true;
                apply_configmap(&ctx, &fetch, &cm).await;
            }
            Ok(watcher::Event::Apply(cm)) => apply_configmap(&ctx, &fetch, &cm).await,
            Ok(watcher::Event::InitDone) if !seen_in_init => {
                // No ConfigMap to attach the Event to: it goes on the operator's namespace.
                let ns = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Namespace".into()),
                    name: Some(ctx.namespace.clone()),
                    ..ObjectReference::default()
                };
                fall_back(&ctx, &fetch, "not found", &ns, "PluginsConfigMissing").await;
            }
            Ok(watcher::Event::InitDone) => {}
            Ok(watcher::Event::Delete(cm)) => {
                fall_back(
                    &ctx,
                    &fetch,
                    "was deleted",
                    &cm.object_ref(&()),
                    "PluginsConfigDeleted",
                )
                .await;
            }
            Err(e) => tracing::warn!("watching ConfigMap {}: {e}", registry::CONFIGMAP_NAME),
        }
    }
    anyhow::bail!("the ConfigMap watch ended")
}

async fn apply_configmap(ctx: &Context, fetch: &KubeFetch, cm: &ConfigMap) {
    let reference = cm.object_ref(&());
    let doc = cm
        .data
        .as_ref()
        .and_then(|d| d.get(registry::CONFIGMAP_KEY));
    let parsed = match doc {
        None => Err(format!("key {} is missing", registry::CONFIGMAP_KEY)),
        Some(doc) => RegistryConfig::parse(doc),
    };
    let config = match parsed {
        Ok(config) => config,
        Err(error) => {
            let what = format!("is invalid: {error}");
            return fall_back(ctx, fetch, &what, &reference, "PluginsConfigInvalid").await;
        }
    };
    let report = ctx.registry.apply(config, fetch).await;
    log_report(&report);
    ctx.reloaded();
    for (name, error) in &report.failed {
        let note = format!("plugin {name}: {error}; the last good version (if any) keeps serving");
        publish(
            ctx,
            &reference,
            EventType::Warning,
            "PluginLoadFailed",
            note,
        )
        .await;
    }
    if !report.loaded.is_empty() {
        let note = format!("loaded {}", report.loaded.join(", "));
        publish(ctx, &reference, EventType::Normal, "PluginsLoaded", note).await;
    }
}

/// Serves the builtin defaults because the registry ConfigMap `what` (e.g. "was deleted"), with
/// a log line and a Warning Event `event_reason` on `reference`.
async fn fall_back(
    ctx: &Context,
    fetch: &KubeFetch,
    what: &str,
    reference: &ObjectReference,
    event_reason: &str,
) {
    let reason = format!(
        "ConfigMap {}/{} {what}; using the builtin defaults",
        ctx.namespace,
        registry::CONFIGMAP_NAME
    );
    tracing::warn!("{reason}");
    let report = ctx.registry.apply_fallback(reason.clone(), fetch).await;
    log_report(&report);
    ctx.reloaded();
    publish(ctx, reference, EventType::Warning, event_reason, reason).await;
}

fn log_report(report: &ReloadReport) {
    for name in &report.loaded {
        crate::metrics::plugin_reload(name, true);
    }
    for (name, error) in &report.failed {
        crate::metrics::plugin_reload(name, false);
        tracing::warn!(plugin = %name, "load failed: {error}");
    }
    if !report.removed.is_empty() {
        tracing::info!(removed = ?report.removed, "plugins removed from the registry");
    }
}

async fn publish(
    ctx: &Context,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reload".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::warn!("cannot record Event {reason}: {e}");
    }
}
