//! Keeps the plugin registry in sync with ConfigMap `wasmop-plugins` in the operator namespace
//! (hot reload), with a Warning Event on the ConfigMap for every entry that fails to load and
//! a fallback to the builtin defaults when the ConfigMap is missing, deleted or invalid.
//!
//! An entry that failed at its source (a `configmap://` ConfigMap not created yet, an
//! `https://` server or `oci://` registry down, an `oci://` pull Secret missing, bytes that do
//! not match the sha256) is loaded again after
//! [`RETRY_FIRST`], then at doubling intervals up to [`RETRY_MAX`], as the kubelet backs off
//! an image pull, until it loads or the ConfigMap changes.
//!
//! Events are writes: while this instance is passive (DR) they are kept (the latest
//! [`MAX_PENDING_EVENTS`]) and recorded once it is promoted, so the reload that happened at
//! start, before the first lease write, is still reported.

use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, Resource};

use wasmop_controllers::Context;
use wasmop_plugin_host::oci::{Credentials, docker_config_credentials};
use wasmop_plugin_host::registry::{
    self, Fetch, LocalFetch, RegistryConfig, ReloadReport, Source, oci_pull,
};

/// Reads `configmap://NAME/KEY` sources and the pull Secrets of `oci://` ones from the operator
/// namespace, and everything else locally.
pub struct KubeFetch {
    api: Api<ConfigMap>,
    secrets: Api<Secret>,
    local: LocalFetch,
}

/// The type of Secret a `pullSecret` names.
pub const PULL_SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";

impl KubeFetch {
    /// The credentials for `registry` in Secret `name` of the operator namespace (an entry's
    /// `pullSecret`), read at each pull: a Secret created or fixed after the entry is picked up
    /// by the retry.
    ///
    /// # Errors
    /// The Secret cannot be read (forbidden: the chart grants `get` on the Secrets its
    /// `registry` values name), is missing, is not of type `kubernetes.io/dockerconfigjson`,
    /// has no `.dockerconfigjson`, or holds no credentials for `registry`.
    async fn pull_secret(&self, name: &str, registry: &str) -> Result<Credentials, String> {
        let what = format!("pullSecret {name}");
        let secret = self.secrets.get_opt(name).await.map_err(|e| {
            let forbidden = matches!(&e, kube::Error::Api(s) if s.code == 403);
            let hint = if forbidden {
                " (the operator reads only the Secrets its chart's registry values name as \
                 pullSecret)"
            } else {
                ""
            };
            format!("cannot read {what}: {e}{hint}")
        })?;
        let secret = secret.ok_or_else(|| format!("{what}: Secret {name} not found"))?;
        let type_ = secret.type_.as_deref().unwrap_or("Opaque");
        if type_ != PULL_SECRET_TYPE {
            return Err(format!(
                "{what}: Secret {name} is of type {type_}, not {PULL_SECRET_TYPE} (kubectl \
                 create secret docker-registry makes one)"
            ));
        }
        let json = secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
            .ok_or_else(|| format!("{what}: Secret {name} has no .dockerconfigjson"))?;
        docker_config_credentials(&json.0, registry)
            .map_err(|e| format!("{what}: .dockerconfigjson of Secret {name}: {e}"))?
            .ok_or_else(|| {
                format!("{what}: Secret {name} holds no credentials for registry {registry}")
            })
    }
}

#[async_trait::async_trait]
impl Fetch for KubeFetch {
    async fn fetch(&self, source: &Source) -> Result<Vec<u8>, String> {
        if let Source::Oci(oci) = source {
            let credentials = match &oci.pull_secret {
                Some(name) => self.pull_secret(name, &oci.reference.registry).await?,
                None => Credentials::Anonymous,
            };
            return oci_pull(oci, credentials, self.local.extra_ca_pem.as_deref()).await;
        }
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

/// The first retry of entries that failed at their source, after a load.
pub const RETRY_FIRST: Duration = Duration::from_secs(5);
/// The longest interval between retries.
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// When to retry entries that failed at their source, if any did.
#[derive(Default)]
struct Backoff {
    next: Option<(tokio::time::Instant, Duration)>,
}

impl Backoff {
    /// After a load of the ConfigMap: from [`RETRY_FIRST`] again, if anything is to retry.
    fn restart(&mut self, retryable: bool) {
        self.next = retryable.then(|| (tokio::time::Instant::now() + RETRY_FIRST, RETRY_FIRST));
    }

    /// After a retry: twice the last interval (at most [`RETRY_MAX`]), if anything is left.
    fn again(&mut self, retryable: bool) {
        let last = self.next.map_or(RETRY_FIRST, |(_, d)| d);
        let interval = (last * 2).min(RETRY_MAX);
        self.next = retryable.then(|| (tokio::time::Instant::now() + interval, interval));
    }

    async fn due(&self) {
        match self.next {
            Some((at, _)) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
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

/// A load of the registry in progress (an apply of the ConfigMap or of the builtins, or a
/// retry), which a newer ConfigMap event drops.
type Loading<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Loaded> + Send + 'a>>;

/// What a finished load did, to report.
struct Loaded {
    /// The ConfigMap the Events go on (the operator's namespace when it is missing).
    reference: ObjectReference,
    report: ReloadReport,
    /// The Event reason and message when the builtins stand in for the ConfigMap.
    fallback: Option<(&'static str, String)>,
    /// A retry, not an apply.
    retried: bool,
}

/// Watches `wasmop-plugins` and applies every change to the registry.
///
/// One load runs at a time, beside the watch: a ConfigMap event that arrives while a load is
/// in progress drops it (the newest version wins, and a download that hangs until its timeout
/// holds back neither a fix nor a retry's ConfigMap change), and a reload serves what loaded
/// after [`registry::LOAD_WAIT`] while slower entries go on loading.
pub async fn run(ctx: std::sync::Arc<Context>) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.kernel.client.clone(), ctx.kernel.namespace());
    let fetch = &KubeFetch {
        api: api.clone(),
        secrets: Api::namespaced(ctx.kernel.client.clone(), ctx.kernel.namespace()),
        local: LocalFetch {
            extra_ca_pem: ctx.plugins.runtime().extra_ca_pem().map(<[u8]>::to_vec),
            docker_config: None,
        },
    };
    let mut events = configmap_events(api);
    let mut promotions = Box::pin(ctx.kernel.gate().promotions());
    let outbox = &Outbox::default();
    let ctx = &*ctx;
    let mut seen_in_init = false;
    let mut backoff = Backoff::default();
    // The ConfigMap last loaded, for the Events of retries.
    let mut in_use = ObjectReference::default();
    // The load in progress, with the `plugins.yaml` it applies (none for a retry or the
    // builtins).
    let mut loading: Option<(Loading<'_>, Option<String>)> = None;
    loop {
        let event = tokio::select! {
            loaded = async {
                match loading.as_mut() {
                    Some((load, _)) => load.await,
                    None => std::future::pending().await,
                }
            } => {
                loading = None;
                report(ctx, outbox, &loaded).await;
                prune_compile_cache(ctx).await;
                if loaded.retried {
                    backoff.again(ctx.plugins.has_retryable());
                } else {
                    backoff.restart(ctx.plugins.has_retryable());
                }
                continue;
            }
            event = events.next() => match event {
                Some(event) => event,
                None => break,
            },
            Some(()) = promotions.next() => {
                outbox.flush(ctx).await;
                continue;
            }
            () = backoff.due(), if loading.is_none() => {
                let reference = in_use.clone();
                let retry: Loading<'_> = Box::pin(async move {
                    Loaded {
                        report: ctx.plugins.retry(fetch).await,
                        reference,
                        fallback: None,
                        retried: true,
                    }
                });
                loading = Some((retry, None));
                continue;
            }
        };
        let initial = matches!(event, Ok(watcher::Event::InitApply(_)));
        let next: (Loading<'_>, Option<String>) = match event {
            Ok(watcher::Event::Init) => {
                seen_in_init = false;
                continue;
            }
            Ok(watcher::Event::InitApply(cm) | watcher::Event::Apply(cm)) => {
                seen_in_init |= initial;
                in_use = cm.object_ref(&());
                let doc = registry_doc(&cm).cloned();
                if doc.is_some() && loading.as_ref().is_some_and(|(_, d)| *d == doc) {
                    // The same document (a re-list, or a change of labels): let it finish.
                    continue;
                }
                (Box::pin(apply_configmap(ctx, fetch, cm)), doc)
            }
            Ok(watcher::Event::InitDone) if !seen_in_init => {
                // No ConfigMap to attach the Event to: it goes on the operator's namespace.
                let ns = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Namespace".into()),
                    name: Some(ctx.kernel.namespace().to_owned()),
                    ..ObjectReference::default()
                };
                let missing = fall_back(ctx, fetch, "not found", ns, "PluginsConfigMissing");
                (Box::pin(missing), None)
            }
            Ok(watcher::Event::InitDone) => continue,
            Ok(watcher::Event::Delete(cm)) => {
                let reference = cm.object_ref(&());
                let deleted =
                    fall_back(ctx, fetch, "was deleted", reference, "PluginsConfigDeleted");
                (Box::pin(deleted), None)
            }
            Err(e) => {
                tracing::warn!("watching ConfigMap {}: {e}", registry::CONFIGMAP_NAME);
                continue;
            }
        };
        if loading.replace(next).is_some() {
            tracing::info!(
                "ConfigMap {} changed while plugins were loading; loading its new version instead",
                registry::CONFIGMAP_NAME
            );
        }
    }
    anyhow::bail!("the ConfigMap watch ended")
}

/// The watch events of the registry's ConfigMap in `api`'s namespace. A failed list or watch
/// (the API server down, the ConfigMap forbidden) is yielded as an error and retried with
/// kube's default backoff (up to about 30 s apart), never at once.
fn configmap_events(
    api: Api<ConfigMap>,
) -> futures::stream::BoxStream<'static, Result<watcher::Event<ConfigMap>, watcher::Error>> {
    use kube::runtime::WatchStreamExt;
    let cfg =
        watcher::Config::default().fields(&format!("metadata.name={}", registry::CONFIGMAP_NAME));
    watcher(api, cfg).default_backoff().boxed()
}

/// The `plugins.yaml` of `cm`, if it has one.
fn registry_doc(cm: &ConfigMap) -> Option<&String> {
    cm.data.as_ref()?.get(registry::CONFIGMAP_KEY)
}

/// Applies `cm`'s registry, or falls back to the builtins when it is invalid.
async fn apply_configmap(ctx: &Context, fetch: &KubeFetch, cm: ConfigMap) -> Loaded {
    let reference = cm.object_ref(&());
    let doc = registry_doc(&cm);
    let parsed = match doc {
        None => Err(format!("key {} is missing", registry::CONFIGMAP_KEY)),
        Some(doc) => RegistryConfig::parse(doc),
    };
    let config = match parsed {
        Ok(config) => config,
        Err(error) => {
            let what = format!("is invalid: {error}");
            return fall_back(ctx, fetch, &what, reference, "PluginsConfigInvalid").await;
        }
    };
    // Serves what loaded, with readiness and conditions, while a slow entry goes on loading
    // (info: a large component takes that long to compile; a load that fails says so then).
    let swapped = |loading: &[String]| {
        tracing::info!(
            ?loading,
            "plugins still loading after {:?} (fetching, verifying, compiling); the others serve \
             meanwhile, and these keep their previous version, if any, until they load or fail",
            registry::LOAD_WAIT
        );
        ctx.plugins.reloaded();
    };
    let report = ctx
        .plugins
        .apply_notifying(config, fetch, Some(registry::LOAD_WAIT), &swapped)
        .await;
    Loaded {
        reference,
        report,
        fallback: None,
        retried: false,
    }
}

/// How old a compiled artifact no plugin uses must be before a reload removes it: a cache
/// directory shared with another process (a second operator, `wasmop plugin` commands) keeps
/// what that process compiled lately.
pub const PRUNE_UNUSED_AFTER: Duration = Duration::from_secs(600);

/// Removes compiled components no entry serves any more, so that the compile cache (an
/// emptyDir with a size limit in the chart) holds the registry's current versions, not every
/// version ever loaded.
async fn prune_compile_cache(ctx: &Context) {
    let keep = ctx.plugins.serving_digests();
    let runtime = ctx.plugins.runtime().clone();
    let pruned =
        tokio::task::spawn_blocking(move || runtime.prune_compile_cache(&keep, PRUNE_UNUSED_AFTER))
            .await;
    if let Ok((files, bytes)) = pruned
        && files > 0
    {
        tracing::info!(
            files,
            "removed compiled plugins no entry uses any more from the compile cache ({:.1} MiB)",
            bytes as f64 / f64::from(1 << 20)
        );
    }
}

/// Logs and records what a finished load did: its report, or the fallback to the builtins.
async fn report(ctx: &Context, outbox: &Outbox, loaded: &Loaded) {
    match &loaded.fallback {
        Some((event_reason, reason)) => {
            log_report(ctx, &loaded.report);
            ctx.plugins.reloaded();
            publish(
                ctx,
                outbox,
                &loaded.reference,
                EventType::Warning,
                event_reason,
                reason.clone(),
            )
            .await;
        }
        // A retry that changed nothing says nothing.
        None if loaded.retried
            && loaded.report.loaded.is_empty()
            && loaded.report.failed.is_empty() => {}
        None => report_reload(ctx, outbox, &loaded.reference, &loaded.report).await,
    }
}

/// Logs a reload, tells the registry's watchers, and records its Events on `reference`.
async fn report_reload(
    ctx: &Context,
    outbox: &Outbox,
    reference: &ObjectReference,
    report: &ReloadReport,
) {
    log_report(ctx, report);
    ctx.plugins.reloaded();
    for (name, error) in &report.failed {
        let retried = if ctx.plugins.retrying(name) {
            " (retried with backoff)"
        } else {
            ""
        };
        let note = format!(
            "plugin {name}: {error}{retried}; the last good version (if any) keeps serving"
        );
        publish(
            ctx,
            outbox,
            reference,
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
            reference,
            EventType::Normal,
            "PluginsLoaded",
            note,
        )
        .await;
    }
}

/// Serves the builtin defaults because the registry ConfigMap `what` (e.g. "was deleted"), with
/// a log line now and, once loaded, a Warning Event `event_reason` on `reference`.
async fn fall_back(
    ctx: &Context,
    fetch: &KubeFetch,
    what: &str,
    reference: ObjectReference,
    event_reason: &'static str,
) -> Loaded {
    let reason = format!(
        "ConfigMap {}/{} {what}; using the builtin defaults",
        ctx.kernel.namespace(),
        registry::CONFIGMAP_NAME
    );
    tracing::warn!("{reason}");
    let report = ctx.plugins.apply_fallback(reason.clone(), fetch).await;
    Loaded {
        reference,
        report,
        fallback: Some((event_reason, reason)),
        retried: false,
    }
}

fn log_report(ctx: &Context, report: &ReloadReport) {
    for name in &report.loaded {
        ctx.plugins.runtime().metrics().reload(name, true);
    }
    for (name, error) in &report.failed {
        ctx.plugins.runtime().metrics().reload(name, false);
        let retried = ctx.plugins.retrying(name);
        tracing::warn!(plugin = %name, retried, "load failed: {error}");
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
    if ctx.kernel.gate().is_active() {
        ctx.kernel
            .writer
            .event(reference, type_, reason, "Reload", note)
            .await;
    } else {
        outbox.keep((reference.clone(), type_, reason.to_owned(), note));
    }
}

#[cfg(test)]
mod tests {
    /// A ConfigMap list the API server refuses is retried with backoff: a few requests in a
    /// second and a half, not thousands.
    #[tokio::test]
    async fn a_refused_configmap_watch_is_retried_with_backoff() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            counted.fetch_add(1, Ordering::Relaxed);
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(403)
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from_static(
                            br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}"#,
                        )))
                        .expect("a response"),
                )
            }
        });
        let client = kube::Client::new(service, "wasmop-system");
        let mut events = super::configmap_events(kube::Api::namespaced(client, "wasmop-system"));
        let mut errors = 0;
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1500), async {
            while let Some(event) = futures::StreamExt::next(&mut events).await {
                errors += usize::from(event.is_err());
            }
        })
        .await;
        let sent = requests.load(Ordering::Relaxed);
        assert!(errors >= 1, "the refusal is reported");
        assert!(
            sent <= 5,
            "{sent} requests in 1.5 s: retried without backoff"
        );
    }

    use super::*;

    fn interval(b: &Backoff) -> Option<u64> {
        b.next.map(|(_, d)| d.as_secs())
    }

    #[test]
    fn retries_back_off_from_5_s_to_5_min_and_start_over_at_each_load() {
        let mut b = Backoff::default();
        b.restart(true);
        let mut seen = vec![interval(&b)];
        for _ in 0..7 {
            b.again(true);
            seen.push(interval(&b));
        }
        let want = [5, 10, 20, 40, 80, 160, 300, 300];
        assert_eq!(seen, want.map(Some));
        b.restart(true);
        assert_eq!(
            interval(&b),
            Some(5),
            "a change of the ConfigMap starts over"
        );
        b.again(false);
        assert_eq!(interval(&b), None, "nothing left to retry");
        b.restart(false);
        assert_eq!(interval(&b), None);
    }
}
