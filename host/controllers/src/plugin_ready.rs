//! The `PluginReady` condition of custom resources: whether the plugin a resource uses (its
//! `spec.plugin`, else the hook's default) is loaded. It is re-evaluated on every registry
//! reload, every promotion of this instance and every change of a resource, and written
//! (under its own field manager, [`FIELD_MANAGER`]) only when it changes.
//!
//! The watch can deliver versions of an object older than this loop's last write to it (the
//! controllers' own status writes made before it): `Written` keeps each write until the watch
//! shows it, so those older versions are not taken for a missing condition and written again.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use wasmop_kernel::cache::Ready;
use wasmop_kernel::conditions;
use wasmop_kernel::gate::WriteError;
use wasmop_plugin_host::Hook;
use wasmop_plugin_host::registry::PluginStatus;

use crate::{Context, ControllerKind};

/// The condition type.
pub(crate) const PLUGIN_READY: &str = "PluginReady";

/// Field manager of the `PluginReady` condition, apart from the controllers' status writes so
/// that neither removes the other's conditions.
pub const FIELD_MANAGER: &str = "wasmop-plugin-ready";

/// A custom resource that names the plugin it uses.
pub trait UsesPlugin:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static
{
    /// The hook of the plugin.
    const HOOK: Hook;
    /// The controller that owns this kind (the loop runs only when that controller does).
    const CONTROLLER: ControllerKind;
    /// `spec.plugin`.
    fn plugin_name(&self) -> Option<&str>;
    /// `status.conditions` (empty without a status).
    fn conditions(&self) -> &[Condition];
    /// The `Api` over the scope the operator watches.
    fn api(ctx: &Context) -> Api<Self>;
    /// The `Api` this object is written through (its namespace, if namespaced).
    fn object_api(&self, client: kube::Client) -> Api<Self>;
}

impl UsesPlugin for wasmop_api::dynamicenv::DynamicEnv {
    const HOOK: Hook = Hook::Routing;
    const CONTROLLER: ControllerKind = ControllerKind::Routing;
    fn plugin_name(&self) -> Option<&str> {
        self.spec.plugin.as_deref()
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    fn api(ctx: &Context) -> Api<Self> {
        ctx.kernel.watched_api()
    }
    fn object_api(&self, client: kube::Client) -> Api<Self> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }
}

impl UsesPlugin for wasmop_api::elasticservice::ElasticService {
    const HOOK: Hook = Hook::Scaling;
    const CONTROLLER: ControllerKind = ControllerKind::Scaling;
    fn plugin_name(&self) -> Option<&str> {
        self.spec.plugin.as_deref()
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    fn api(ctx: &Context) -> Api<Self> {
        ctx.kernel.watched_api()
    }
    fn object_api(&self, client: kube::Client) -> Api<Self> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }
}

impl UsesPlugin for wasmop_api::proxyrestartpolicy::ProxyRestartPolicy {
    const HOOK: Hook = Hook::Restart;
    const CONTROLLER: ControllerKind = ControllerKind::Restart;
    fn plugin_name(&self) -> Option<&str> {
        self.spec.plugin.as_deref()
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    fn api(ctx: &Context) -> Api<Self> {
        // Cluster-scoped: watched cluster-wide whatever --watch-namespace says.
        Api::all(ctx.kernel.client.clone())
    }
    fn object_api(&self, client: kube::Client) -> Api<Self> {
        Api::all(client)
    }
}

/// The `PluginReady` condition for `status`.
pub fn condition(
    status: &PluginStatus,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    conditions::condition(
        previous,
        PLUGIN_READY,
        status.ready,
        &status.reason,
        format!("plugin {}: {}", status.name, status.message),
        generation,
    )
}

/// Runs the `PluginReady` loop of every kind whose controller is in `controllers`.
///
/// # Errors
/// When a watch ends.
pub async fn run_all(ctx: Arc<Context>, controllers: &[ControllerKind]) -> anyhow::Result<()> {
    tokio::try_join!(
        run::<wasmop_api::dynamicenv::DynamicEnv>(ctx.clone(), controllers),
        run::<wasmop_api::elasticservice::ElasticService>(ctx.clone(), controllers),
        run::<wasmop_api::proxyrestartpolicy::ProxyRestartPolicy>(ctx.clone(), controllers),
    )?;
    Ok(())
}

/// Keeps `PluginReady` of every `K` in sync, while `K`'s controller is in `controllers`.
///
/// # Errors
/// When the watch stream or the registry ends; watch errors are logged and retried with backoff.
pub async fn run<K: UsesPlugin>(
    ctx: Arc<Context>,
    controllers: &[ControllerKind],
) -> anyhow::Result<()> {
    if !controllers.contains(&K::CONTROLLER) {
        return std::future::pending().await;
    }
    let (store, writer) = reflector::store();
    let mut events = reflector(
        writer,
        watcher(K::api(&ctx), ctx.kernel.cr_watcher_config()).default_backoff(),
    )
    .applied_objects()
    .boxed();
    let mut reloads = ctx.plugins.reloads();
    let mut promotions = Box::pin(ctx.kernel.gate().promotions_of(Ready::of_store(&store)));
    let kind = K::kind(&());
    let mut written = Written::default();
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(obj)) => sync(&ctx, &obj, &mut written).await,
                Some(Err(e)) => tracing::warn!("watching {kind}: {e}"),
                None => anyhow::bail!("the {kind} watch ended"),
            },
            changed = reloads.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the registry is gone");
                }
                sync_all(&ctx, &store, &mut written).await;
            }
            Some(()) = promotions.next() => sync_all(&ctx, &store, &mut written).await,
        }
    }
}

/// How long a write is waited for in the watch before the watch counts again (a relist can
/// skip the written version itself).
const WRITTEN_TTL: Duration = Duration::from_secs(60);

/// The `PluginReady` conditions this loop wrote that the watch has not shown yet, by object
/// uid. Watch events come in resourceVersion order, so until an event shows a write, every
/// event of that object is a version from before it.
#[derive(Default)]
struct Written {
    by_uid: HashMap<String, (Condition, Instant)>,
}

impl Written {
    /// Whether `wanted` is already written to `obj`, whose `current` condition (from the watch)
    /// may predate the write. An event that shows the write ends the wait for it.
    fn covers(&mut self, uid: &str, current: Option<&Condition>, wanted: &Condition) -> bool {
        let Some((condition, at)) = self.by_uid.get(uid) else {
            return false;
        };
        if at.elapsed() >= WRITTEN_TTL || conditions::unchanged(current, condition) {
            self.by_uid.remove(uid);
            return false;
        }
        conditions::unchanged(Some(condition), wanted)
    }

    fn record(&mut self, uid: String, condition: Condition) {
        self.by_uid.retain(|_, (_, at)| at.elapsed() < WRITTEN_TTL);
        self.by_uid.insert(uid, (condition, Instant::now()));
    }
}

async fn sync_all<K: UsesPlugin>(ctx: &Context, store: &Store<K>, written: &mut Written) {
    for obj in store.state() {
        sync(ctx, obj.as_ref(), written).await;
    }
}

async fn sync<K: UsesPlugin>(ctx: &Context, obj: &K, written: &mut Written) {
    let namespace = obj.namespace();
    let status = ctx
        .plugins
        .status_for(K::HOOK, obj.plugin_name(), namespace.as_deref());
    let previous = obj.conditions();
    let current = conditions::find(previous, PLUGIN_READY);
    let wanted = condition(&status, obj.meta().generation, previous);
    let uid = obj.meta().uid.clone().unwrap_or_default();
    if written.covers(&uid, current, &wanted) || conditions::unchanged(current, &wanted) {
        return;
    }
    let name = obj.name_any();
    let api = obj.object_api(ctx.kernel.client.clone());
    let id = obj
        .namespace()
        .map_or_else(|| name.clone(), |ns| format!("{ns}/{name}"));
    let patch = serde_json::json!({ "conditions": [&wanted] });
    match ctx
        .kernel
        .writer
        .apply_status_as(&api, &name, &patch, FIELD_MANAGER)
        .await
    {
        Ok(_) => {
            written.record(uid, wanted);
            tracing::info!(kind = %K::kind(&()), object = %id, ready = status.ready, reason = %status.reason, "PluginReady updated")
        }
        Err(WriteError::Passive) => {}
        Err(e) => {
            tracing::warn!(kind = %K::kind(&()), object = %id, "cannot update PluginReady: {e}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(ok: bool) -> Condition {
        conditions::condition(
            &[],
            PLUGIN_READY,
            ok,
            if ok { "Loaded" } else { "Failed" },
            "plugin p",
            Some(1),
        )
    }

    #[test]
    fn versions_from_before_a_write_are_not_written_again() {
        let mut written = Written::default();
        assert!(
            !written.covers("u", None, &ready(true)),
            "nothing written yet"
        );
        written.record("u".into(), ready(true));
        // The controller's status write made before ours comes in without the condition.
        assert!(written.covers("u", None, &ready(true)));
        // The plugin failed meanwhile: that is a change of its own, not covered.
        assert!(!written.covers("u", None, &ready(false)));
        // Another object is not covered.
        assert!(!written.covers("v", None, &ready(true)));
    }

    #[test]
    fn once_the_watch_shows_the_write_it_counts_again() {
        let mut written = Written::default();
        written.record("u".into(), ready(true));
        assert!(!written.covers("u", Some(&ready(true)), &ready(true)));
        // Someone removed the condition after the watch showed it: written again.
        assert!(!written.covers("u", None, &ready(true)));
    }

    #[test]
    fn a_write_the_watch_never_shows_stops_counting_after_the_ttl() {
        let mut written = Written::default();
        written.record("u".into(), ready(true));
        written.by_uid.get_mut("u").unwrap().1 = Instant::now() - WRITTEN_TTL;
        assert!(!written.covers("u", None, &ready(true)));
        assert!(written.by_uid.is_empty());
    }
}
