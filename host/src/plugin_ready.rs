//! The `PluginReady` condition of custom resources: whether the plugin a resource uses (its
//! `spec.plugin`, else the hook's default) is loaded. It is re-evaluated on every registry
//! reload and every change of a resource, and written only when it changes.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::watch;

use crate::api::dynamicenv::DynamicEnv;
use crate::plugins::Hook;
use crate::plugins::registry::{PluginStatus, Registry};
use crate::runtime::FIELD_MANAGER;

/// The condition type.
pub const PLUGIN_READY: &str = "PluginReady";

/// The `PluginReady` condition for `status`, keeping `previous`'s transition time when the
/// condition's status did not change.
pub fn condition(
    status: &PluginStatus,
    generation: Option<i64>,
    previous: Option<&Condition>,
) -> Condition {
    let value = if status.ready { "True" } else { "False" };
    let last_transition_time = match previous {
        Some(p) if p.status == value => p.last_transition_time.clone(),
        _ => Time(k8s_openapi::jiff::Timestamp::now()),
    };
    Condition {
        type_: PLUGIN_READY.into(),
        status: value.into(),
        reason: status.reason.clone(),
        message: format!("plugin {}: {}", status.name, status.message),
        observed_generation: generation,
        last_transition_time,
    }
}

/// Whether `current` already says what `wanted` says.
fn unchanged(current: Option<&Condition>, wanted: &Condition) -> bool {
    current.is_some_and(|c| {
        c.status == wanted.status && c.reason == wanted.reason && c.message == wanted.message
    })
}

/// Keeps `PluginReady` of every DynamicEnv in sync; `reloads` ticks after each registry reload.
///
/// # Errors
/// Never returns while the watch stream lives; watch errors are logged and retried with backoff.
pub async fn run(
    client: kube::Client,
    registry: Arc<Registry>,
    mut reloads: watch::Receiver<u64>,
) -> anyhow::Result<()> {
    let api: Api<DynamicEnv> = Api::all(client.clone());
    let (store, writer) = reflector::store();
    let mut events = reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .applied_objects()
    .boxed();
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(de)) => sync(&client, &registry, &de).await,
                Some(Err(e)) => tracing::warn!("watching DynamicEnvs: {e}"),
                None => anyhow::bail!("the DynamicEnv watch ended"),
            },
            changed = reloads.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the registry is gone");
                }
                sync_all(&client, &registry, &store).await;
            }
        }
    }
}

async fn sync_all(client: &kube::Client, registry: &Registry, store: &Store<DynamicEnv>) {
    for de in store.state() {
        sync(client, registry, &de).await;
    }
}

async fn sync(client: &kube::Client, registry: &Registry, de: &DynamicEnv) {
    let status = registry.status(Hook::Routing, de.spec.plugin.as_deref());
    let current = de
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == PLUGIN_READY));
    let wanted = condition(&status, de.metadata.generation, current);
    if unchanged(current, &wanted) {
        return;
    }
    let (Some(ns), name) = (de.namespace(), de.name_any()) else {
        return;
    };
    let patch = serde_json::json!({
        "apiVersion": DynamicEnv::api_version(&()),
        "kind": DynamicEnv::kind(&()),
        "status": { "conditions": [wanted] },
    });
    let api: Api<DynamicEnv> = Api::namespaced(client.clone(), &ns);
    match api
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(dynamicenv = %format!("{ns}/{name}"), ready = status.ready, reason = %status.reason, "PluginReady updated")
        }
        Err(e) => {
            tracing::warn!(dynamicenv = %format!("{ns}/{name}"), "cannot update PluginReady: {e}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(ready: bool, reason: &str) -> PluginStatus {
        PluginStatus {
            name: "r".into(),
            hook: Some(Hook::Routing),
            ready,
            reason: reason.into(),
            message: "m".into(),
            serving_digest: None,
        }
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let first = condition(&status(true, "Loaded"), Some(1), None);
        assert_eq!(
            (first.status.as_str(), first.reason.as_str()),
            ("True", "Loaded")
        );
        let mut old = first.clone();
        old.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let same = condition(&status(true, "Loaded"), Some(2), Some(&old));
        assert_eq!(same.last_transition_time, old.last_transition_time);
        assert!(unchanged(Some(&old), &same));
        let failed = condition(&status(false, "LoadFailed"), Some(2), Some(&old));
        assert_ne!(failed.last_transition_time, old.last_transition_time);
        assert!(!unchanged(Some(&old), &failed));
    }
}
