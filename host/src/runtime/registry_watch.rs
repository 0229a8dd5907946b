//! Keeps the plugin registry in sync with ConfigMap `wasmop-plugins` in the operator namespace
//! (hot reload), with a Warning Event on the ConfigMap for every entry that fails to load and
//! a fallback to the builtin defaults when the ConfigMap is missing, deleted or invalid.
//!
//! Events are writes: while this instance is passive (DR) they are kept (the latest
//! [`MAX_PENDING_EVENTS`]) and recorded once it is promoted, so the reload that happened at
//! start, before the first lease write, is still reported.

use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, Resource};

use super::Context;
use crate::plugins::registry::{self, Fetch, LocalFetch, RegistryConfig, ReloadReport, Source};

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

/// How many Events a passive instance keeps for its promotion.
pub const MAX_PENDING_EVENTS: usize = 16;

/// Events not recorded yet because this instance was passive.
#[derive(Default)]
struct Outbox(Mutex<Vec<(ObjectReference, EventType, String, String)>>);

impl Outbox {
    fn keep(&self, event: (ObjectReference, EventType, String, String)) {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() == MAX_PENDING_EVENTS {
            pending.remove(0);
        }
        pending.push(event);
    }

    async fn flush(&self, ctx: &Context) {
        let pending = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for (reference, type_, reason, note) in pending {
            publish(ctx, self, &reference, type_, &reason, note).await;
        }
    }
}

/// Watches `wasmop-plugins` and applies every change to the registry.
pub async fn run(ctx: std::sync::Arc<Context>) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let fetch = KubeFetch {
        api: api.clone(),
        local: LocalFetch {
            extra_ca_pem: ctx.extra_ca_pem().map(<[u8]>::to_vec),
        },
    };
    let cfg =
        watcher::Config::default().fields(&format!("metadata.name={}", registry::CONFIGMAP_NAME));
    let mut events = watcher(api, cfg).boxed();
    let mut promotions = Box::pin(ctx.gate().promotions());
    let outbox = &Outbox::default();
    let mut seen_in_init = false;
    loop {
        let event = tokio::select! {
            event = events.next() => match event {
                Some(event) => event,
                None => break,
            },
            Some(()) = promotions.next() => {
                outbox.flush(&ctx).await;
                continue;
            }
        };
        match event {
            Ok(watcher::Event::Init) => seen_in_init = false,
            Ok(watcher::Event::InitApply(cm)) => {
                seen_in_init = true;
                apply_configmap(&ctx, &fetch, outbox, &cm).await;
            }
            Ok(watcher::Event::Apply(cm)) => apply_configmap(&ctx, &fetch, outbox, &cm).await,
            Ok(watcher::Event::InitDone) if !seen_in_init => {
                // No ConfigMap to attach the Event to: it goes on the operator's namespace.
                let ns = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Namespace".into()),
                    name: Some(ctx.namespace().to_owned()),
                    ..ObjectReference::default()
                };
                fall_back(
                    &ctx,
                    &fetch,
                    outbox,
                    "not found",
                    &ns,
                    "PluginsConfigMissing",
                )
                .await;
            }
            Ok(watcher::Event::InitDone) => {}
            Ok(watcher::Event::Delete(cm)) => {
                fall_back(
                    &ctx,
                    &fetch,
                    outbox,
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

async fn apply_configmap(ctx: &Context, fetch: &KubeFetch, outbox: &Outbox, cm: &ConfigMap) {
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
            return fall_back(
                ctx,
                fetch,
                outbox,
                &what,
                &reference,
                "PluginsConfigInvalid",
            )
            .await;
        }
    };
    let report = ctx.registry.apply(config, fetch).await;
    log_report(&report);
    ctx.registry_reloaded();
    for (name, error) in &report.failed {
        let note = format!("plugin {name}: {error}; the last good version (if any) keeps serving");
        publish(
            ctx,
            outbox,
            &reference,
            EventType::Warning,
            "PluginLoadFailed",
            note,
        )
        .await;
    }
    if !report.loaded.is_empty() {
        let note = format!("loaded {}", report.loaded.join(", "));
        publish(
            ctx,
            outbox,
            &reference,
            EventType::Normal,
            "PluginsLoaded",
            note,
        )
        .await;
    }
}

/// Serves the builtin defaults because the registry ConfigMap `what` (e.g. "was deleted"), with
/// a log line and a Warning Event `event_reason` on `reference`.
async fn fall_back(
    ctx: &Context,
    fetch: &KubeFetch,
    outbox: &Outbox,
    what: &str,
    reference: &ObjectReference,
    event_reason: &str,
) {
    let reason = format!(
        "ConfigMap {}/{} {what}; using the builtin defaults",
        ctx.namespace(),
        registry::CONFIGMAP_NAME
    );
    tracing::warn!("{reason}");
    let report = ctx.registry.apply_fallback(reason.clone(), fetch).await;
    log_report(&report);
    ctx.registry_reloaded();
    publish(
        ctx,
        outbox,
        reference,
        EventType::Warning,
        event_reason,
        reason,
    )
    .await;
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
    outbox: &Outbox,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    if ctx.gate().is_active() {
        ctx.writer
            .event(reference, type_, reason, "Reload", note)
            .await;
    } else {
        outbox.keep((reference.clone(), type_, reason.to_owned(), note));
    }
}
