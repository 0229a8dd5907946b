//! Helpers of the restart e2e tests: workloads whose pods look as Istio's injector leaves them
//! (the `sidecar.istio.io/status` annotation and an `istio-proxy` container), their rollouts,
//! and the Events and metrics the operator leaves.
//!
//! kwok runs every pod and makes it Running and Ready, except that it completes the pods of a
//! Job at once; [`running_job_pod`] keeps a Job's pod off kwok's nodes and writes its status as
//! a kubelet would, so that it stays Running.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::{create_in, eventually};

/// An outdated proxy image.
pub const OLD_PROXY: &str = "docker.io/istio/proxyv2:1.26.4";
/// The desired proxy image.
pub const NEW_PROXY: &str = "docker.io/istio/proxyv2:1.27.1";

/// A pod template labelled `app=<app>` with an injected sidecar running `proxy_image`, plus
/// `annotations`.
pub fn sidecar_template(app: &str, proxy_image: &str, annotations: Value) -> Value {
    let mut all = json!({"sidecar.istio.io/status": "{\"containers\":[\"istio-proxy\"]}"});
    if let (Some(all), Some(extra)) = (all.as_object_mut(), annotations.as_object()) {
        all.extend(extra.clone());
    }
    json!({
        "metadata": {"labels": {"app": app}, "annotations": all},
        "spec": {"containers": [
            {"name": "app", "image": "registry.invalid/app:1"},
            {"name": "istio-proxy", "image": proxy_image,
             "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
        ]}
    })
}

/// Creates Deployment `name` with `replicas` sidecar pods running `proxy_image`;
/// `annotations` go on the Deployment itself, `template_annotations` on its pods.
pub async fn sidecar_deployment(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
    proxy_image: &str,
    annotations: Value,
    template_annotations: Value,
) -> Deployment {
    create_in(
        client,
        ns,
        json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": sidecar_template(name, proxy_image, template_annotations)}
        }),
    )
    .await
}

/// Waits until Deployment `name` is fully rolled out at its current generation: every
/// replica updated and ready, and no other pod of it left.
///
/// # Panics
/// When it is not within `timeout`.
pub async fn wait_rolled_out(client: &Client, ns: &str, name: &str, timeout: Duration) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("Deployment {ns}/{name} to be rolled out"),
        timeout,
        async || {
            let d = deployments.get(name).await.ok()?;
            let want = d.spec.as_ref()?.replicas.unwrap_or(1);
            let s = d.status.as_ref()?;
            let done = s.observed_generation == d.metadata.generation
                && s.updated_replicas == Some(want)
                && s.ready_replicas == Some(want)
                && s.replicas == Some(want);
            let listed = pods
                .list(&ListParams::default().labels(&format!("app={name}")))
                .await
                .ok()?
                .items
                .len();
            (done && listed == usize::try_from(want).ok()?).then_some(())
        },
    )
    .await;
}

/// Waits until every Deployment of `names` is rolled out.
///
/// # Panics
/// When one is not within `timeout`.
pub async fn wait_all_rolled_out(client: &Client, ns: &str, names: &[&str], timeout: Duration) {
    for name in names {
        wait_rolled_out(client, ns, name, timeout).await;
    }
}

/// `metadata.generation` of Deployment `name` (1 until its spec changes).
///
/// # Panics
/// When it cannot be read.
pub async fn generation(client: &Client, ns: &str, name: &str) -> i64 {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("get the Deployment")
        .metadata
        .generation
        .unwrap_or(0)
}

/// The pod-template annotations of Deployment `name`.
///
/// # Panics
/// When it cannot be read.
pub async fn template_annotations(
    client: &Client,
    ns: &str,
    name: &str,
) -> BTreeMap<String, String> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("get the Deployment")
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .unwrap_or_default()
}

/// Creates bare pod `name` (no owner) with a sidecar running `proxy_image`; kwok runs it.
pub async fn bare_sidecar_pod(client: &Client, ns: &str, name: &str, proxy_image: &str) -> Pod {
    let mut pod = sidecar_template(name, proxy_image, json!({}));
    pod["metadata"]["name"] = name.into();
    create_in(client, ns, pod).await
}

/// Creates Job `name` whose one pod has a sidecar running `proxy_image` and stays Running:
/// kwok would complete it at once, so the pod names a scheduler that does not exist and this
/// function writes its status (Running, every condition True) as a kubelet would. Returns the
/// pod's name.
///
/// # Panics
/// When the pod does not appear or its status cannot be written.
pub async fn running_job_pod(client: &Client, ns: &str, name: &str, proxy_image: &str) -> String {
    let mut template = sidecar_template(name, proxy_image, json!({}));
    template["spec"]["schedulerName"] = "e2e-nobody".into();
    template["spec"]["restartPolicy"] = "Never".into();
    create_in::<Job>(
        client,
        ns,
        json!({"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": template}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = eventually(
        &format!("the pod of Job {ns}/{name}"),
        Duration::from_secs(30),
        async || {
            pods.list(&ListParams::default().labels(&format!("job-name={name}")))
                .await
                .ok()?
                .items
                .into_iter()
                .next()
        },
    )
    .await;
    let status = json!({"status": {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "ContainersReady", "status": "True"},
        {"type": "Ready", "status": "True"}
    ]}});
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("write the Job pod's status");
    pod.name_any()
}

/// The Events in `ns` about object `kind/name` with `reason`.
///
/// # Panics
/// When they cannot be listed.
pub async fn events(client: &Client, ns: &str, kind: &str, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .collect()
}

/// How many times an Event stands for: its series count, else 1.
pub fn occurrences(events: &[Event]) -> i32 {
    events
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}
