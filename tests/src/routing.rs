//! Helpers for the routing e2e tests and benchmark: bookinfo-style `details` and `reviews`
//! workloads (Deployment with `version: shared` pods, Service, DestinationRule, VirtualService)
//! and DynamicEnvs, created through the API as JSON.

use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The `Api` of the kind `api_version`/`kind` in `ns`.
pub fn dynamic_api(client: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// Creates `obj` (JSON with apiVersion, kind and metadata.name) in `ns`.
///
/// # Panics
/// When the API server refuses it.
pub async fn create(client: &Client, ns: &str, obj: Value) -> DynamicObject {
    let api = dynamic_api(
        client,
        ns,
        obj["apiVersion"].as_str().expect("apiVersion"),
        obj["kind"].as_str().expect("kind"),
    );
    let obj: DynamicObject = serde_json::from_value(obj).expect("an object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "create {}: {e}",
                obj.metadata.name.as_deref().unwrap_or("?")
            )
        })
}

/// Server-side applies `obj` in `ns` as field manager `wasmop-e2e` (creates or changes it).
///
/// # Panics
/// When the API server refuses it.
pub async fn apply(client: &Client, ns: &str, obj: Value) -> DynamicObject {
    let api = dynamic_api(
        client,
        ns,
        obj["apiVersion"].as_str().expect("apiVersion"),
        obj["kind"].as_str().expect("kind"),
    );
    let name = obj["metadata"]["name"].as_str().expect("a name").to_owned();
    api.patch(
        &name,
        &PatchParams::apply("wasmop-e2e").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"))
}

/// The object `name` of kind `api_version`/`kind` in `ns` as JSON, if it exists.
///
/// # Panics
/// On an API error other than Not Found.
pub async fn get(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Option<Value> {
    dynamic_api(client, ns, api_version, kind)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {kind} {name}: {e}"))
        .map(|o| serde_json::to_value(o).expect("JSON"))
}

/// `spec.http` of VirtualService `ns/name`.
///
/// # Panics
/// When it does not exist.
pub async fn vs_http(client: &Client, ns: &str, name: &str) -> Value {
    get(client, ns, "networking.istio.io/v1", "VirtualService", name)
        .await
        .unwrap_or_else(|| panic!("VirtualService {ns}/{name}"))["spec"]["http"]
        .clone()
}

/// A bookinfo-style Deployment `app` (pods labelled `app` and `version: shared`).
pub fn deployment(app: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "labels": {"app": app}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app, "version": "shared"}},
                "spec": {"containers": [{"name": app, "image": format!("docker.io/istio/examples-bookinfo-{app}-v1:1.20.3")}]}
            }
        }
    })
}

/// Service `app` selecting the pods of Deployment `app`.
pub fn service(app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": app},
        "spec": {"selector": {"app": app}, "ports": [{"name": "http", "port": 9080}]}
    })
}

/// DestinationRule `app` with subsets `shared` and `v2` and a host traffic policy.
pub fn destination_rule(app: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
        "metadata": {"name": app},
        "spec": {
            "host": app,
            "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}},
            "subsets": [
                {"name": "shared", "labels": {"version": "shared"}},
                {"name": "v2", "labels": {"version": "v2"}}
            ]
        }
    })
}

/// The routes of VirtualService `app`: testers to v2, `/api` weighted 80/20, default shared.
pub fn http_routes(app: &str) -> Value {
    json!([
        {"name": "testers", "match": [{"headers": {"x-tester": {"exact": "yes"}}}],
         "route": [{"destination": {"host": app, "subset": "v2"}}]},
        {"name": "api", "match": [{"uri": {"prefix": "/api"}}],
         "route": [{"destination": {"host": app, "subset": "shared"}, "weight": 80},
                   {"destination": {"host": app, "subset": "v2"}, "weight": 20}]},
        {"name": "default", "route": [{"destination": {"host": app, "subset": "shared"}}]}
    ])
}

/// VirtualService `app` for host `app` with [`http_routes`].
pub fn virtual_service(app: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": app},
        "spec": {"hosts": [app], "http": http_routes(app)}
    })
}

/// Creates `details` and `reviews` in `ns`: Deployment, Service, DestinationRule and (when
/// `with_vs`) VirtualService each.
pub async fn bookinfo(client: &Client, ns: &str, with_vs: bool) {
    for app in ["details", "reviews"] {
        create(client, ns, deployment(app)).await;
        create(client, ns, service(app)).await;
        create(client, ns, destination_rule(app)).await;
        if with_vs {
            create(client, ns, virtual_service(app)).await;
        }
    }
}

/// A DynamicEnv `name` in `ns`: requests with `end-user: <user>` go to a clone of `reviews`
/// (image `reviews_image`); `details` is cloned as a consumer when `consumer`.
pub fn dynamic_env(name: &str, ns: &str, user: &str, reviews_image: &str, consumer: bool) -> Value {
    let mut spec = json!({
        "istioMatches": [{"headers": {"end-user": {"exact": user}}}],
        "subsets": [{"name": "reviews", "namespace": ns,
                     "containers": [{"containerName": "reviews", "image": reviews_image,
                                     "env": [{"name": "STAR_COLOR", "value": "red"}]}]}]
    });
    if consumer {
        spec["consumers"] = json!([{"name": "details", "namespace": ns,
                                     "containers": [{"containerName": "details", "image": "docker.io/istio/examples-bookinfo-details-v2:1.20.3"}]}]);
    }
    json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv",
        "metadata": {"name": name},
        "spec": spec
    })
}

/// `status.state` of DynamicEnv `ns/name`, if it has one.
pub async fn state(client: &Client, ns: &str, name: &str) -> Option<String> {
    get(client, ns, "wasmop.dev/v1alpha1", "DynamicEnv", name).await?["status"]["state"]
        .as_str()
        .map(str::to_owned)
}

/// Waits until DynamicEnv `ns/name` has `status.state == want`; returns the object.
///
/// # Panics
/// After `timeout`, with the last status.
pub async fn wait_state(
    client: &Client,
    ns: &str,
    name: &str,
    want: &str,
    timeout: Duration,
) -> Value {
    let api = dynamic_api(client, ns, "wasmop.dev/v1alpha1", "DynamicEnv");
    let want = want.to_owned();
    let found = crate::wait_until(
        &api,
        name,
        timeout,
        &format!("DynamicEnv {name} to be {want}"),
        move |o: Option<&DynamicObject>| {
            o.and_then(|o| o.data["status"]["state"].as_str()) == Some(want.as_str())
        },
    )
    .await;
    serde_json::to_value(found).expect("JSON")
}
