//! E2E: the DynamicEnv controller on the local control plane (Istio's real CRDs, kwok pods),
//! run as the `wasmop` binary under the chart's RBAC, on bookinfo-style `details` and
//! `reviews` workloads.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use wasmop_controllers::routing::names;
use wasmop_tests::routing::{
    apply, bookinfo, create, dynamic_env, get, http_routes, virtual_service, vs_http, wait_state,
};
use wasmop_tests::{Operator, eventually, with_temp_ns};

const TIMEOUT: Duration = Duration::from_secs(90);
const REVIEWS_V3: &str = "docker.io/istio/examples-bookinfo-reviews-v3:1.20.3";
const REVIEWS_V4: &str = "docker.io/istio/examples-bookinfo-reviews-v4:1.20.3";
const VS: &str = "networking.istio.io/v1";

/// The names wasmop gives the objects of DynamicEnv `ns/de` for subset `ns/deployment`.
struct Names {
    clone: String,
    version: String,
    destination_rule: String,
    prefix: String,
}

/// Upstream's `riskified.com/dynamic-environment`, renamed with the API group.
const DE_ANNOTATION: &str = "wasmop.dev/dynamic-environment";

fn names_of(ns: &str, de: &str, deployment: &str) -> Names {
    let clone = names::clone_name(ns, de, ns, deployment);
    Names {
        version: names::version(ns, de),
        destination_rule: names::destination_rule_name(ns, de, ns, deployment, deployment),
        prefix: names::route_prefix(ns, de, ns, deployment, deployment, &clone),
        clone,
    }
}

/// The routes of [`http_routes`] after DynamicEnv `n` for `end-user: user`: a copy before
/// `api` (its shared destination only, no weight) and one before `default`.
fn expected_routes(app: &str, n: &Names, user: &str) -> Value {
    let copy = |i: usize, mut m: Value| {
        m["headers"] = json!({"end-user": {"exact": user}});
        json!({
            "name": format!("{}{i}", n.prefix),
            "match": [m],
            "route": [{"destination": {"host": app, "subset": n.version},
                       "headers": {"response": {"add": {"x-dynamic-env": n.clone}}}}],
        })
    };
    let base = http_routes(app);
    json!([
        base[0],
        copy(0, json!({"uri": {"prefix": "/api"}})),
        base[1],
        copy(1, json!({})),
        base[2]
    ])
}

async fn clone_deployment(client: &Client, ns: &str, name: &str) -> Option<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// Reasons of the Events about DynamicEnv `name`, with their related object's name.
async fn events(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.related.and_then(|r| r.name).unwrap_or_default(),
            )
        })
        .collect()
}

/// The `PluginReady` condition of DynamicEnv `ns/name` once its reason is `reason`.
async fn plugin_ready(client: &Client, ns: &str, name: &str, reason: &str) -> Value {
    eventually(&format!("PluginReady {reason}"), TIMEOUT, async || {
        let de = get(client, ns, "wasmop.dev/v1alpha1", "DynamicEnv", name).await?;
        condition(&de, "PluginReady")
            .filter(|c| c["reason"] == reason)
            .cloned()
    })
    .await
}

fn condition<'a>(de: &'a Value, type_: &str) -> Option<&'a Value> {
    de["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits until DynamicEnv `ns/name` is degraded with a refused write of `field`
/// (`subsetErrors.<field>` of subset `ns/reviews`) in its status, and checks that a
/// `WriteRefused` Event says so too; returns the error.
async fn refused_write(client: &Client, ns: &str, name: &str, field: &str) -> String {
    let refused = eventually("the refusal in the status", TIMEOUT, async || {
        let de = get(client, ns, "wasmop.dev/v1alpha1", "DynamicEnv", name).await?;
        let errors = &de["status"]["subsetsStatus"][format!("{ns}/reviews")]["subsetErrors"][field];
        let e = errors.get(0)?["error"].as_str()?.to_owned();
        (de["status"]["state"] == "degraded").then_some(e)
    })
    .await;
    assert!(
        events(client, ns, name)
            .await
            .iter()
            .any(|(reason, _)| reason == "WriteRefused"),
        "a WriteRefused Event"
    );
    refused
}

/// Waits until DynamicEnv `ns/name` is ready with no subset errors left in its status.
async fn ready_without_errors(client: &Client, ns: &str, name: &str) {
    let de = wait_state(client, ns, name, "ready", TIMEOUT).await;
    assert!(
        de["status"]["subsetsStatus"][format!("{ns}/reviews")]
            .get("subsetErrors")
            .is_none(),
        "{}",
        de["status"]
    );
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn create_update_and_delete_restore_every_virtual_service() {
    with_temp_ns("routing", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, true).await;
        let original_reviews = get(&client, &ns, VS, "VirtualService", "reviews")
            .await
            .unwrap();
        let original_details = get(&client, &ns, VS, "VirtualService", "details")
            .await
            .unwrap();
        let operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        // It started itself again (same process id) under the operator's allocator options.
        let options = format!(
            "{}={}",
            wasmop_resolver::malloc::MALLOC_CONF_ENV,
            wasmop_resolver::malloc::OPERATOR_MALLOC_CONF
        );
        assert!(
            operator.process.environment().contains(&options),
            "the operator runs without {options}"
        );

        create(
            &client,
            &ns,
            dynamic_env("jason", &ns, "jason", REVIEWS_V3, true),
        )
        .await;
        let de = wait_state(&client, &ns, "jason", "ready", TIMEOUT).await;
        let n = names_of(&ns, "jason", "reviews");
        let consumer = names::clone_name(&ns, "jason", &ns, "details");

        // Status: counts, per-subset and per-consumer entries, conditions of both loops.
        let status = &de["status"];
        assert_eq!(status["totalCount"], 2, "{status}");
        assert_eq!(status["totalReady"], 2, "{status}");
        let entry = &status["subsetsStatus"][format!("{ns}/reviews")];
        assert_eq!(
            entry["deployment"],
            json!({"name": n.clone, "namespace": ns, "status": "running"})
        );
        assert_eq!(
            entry["destinationRules"],
            json!([{"name": n.destination_rule, "namespace": ns, "status": "running"}])
        );
        assert_eq!(
            entry["virtualServices"],
            json!([{"name": "reviews", "namespace": ns, "status": "running",
                    "decidedBy": ["routing-istio"]}])
        );
        assert!(entry.get("subsetErrors").is_none(), "{entry}");
        let first_hash = entry["hash"]
            .as_i64()
            .expect("an integer hash, as upstream's");
        assert_eq!(
            status["consumersStatus"][format!("{ns}/details")]["status"],
            "running"
        );
        assert_eq!(condition(&de, "Ready").unwrap()["status"], "True");
        let plugin_ready = eventually("PluginReady beside Ready", TIMEOUT, async || {
            let de = get(&client, &ns, "wasmop.dev/v1alpha1", "DynamicEnv", "jason").await?;
            let c = condition(&de, "PluginReady")?.clone();
            condition(&de, "Ready")?;
            Some(c)
        })
        .await;
        assert_eq!(plugin_ready["status"], "True");

        // The clones: ready kwok pods, the overrides, the version label.
        let clone = clone_deployment(&client, &ns, &n.clone).await.unwrap();
        assert_eq!(clone.status.as_ref().unwrap().ready_replicas, Some(1));
        let pod = clone.spec.as_ref().unwrap().template.clone();
        let labels = pod.metadata.unwrap().labels.unwrap();
        assert_eq!(labels["version"], n.version);
        assert_eq!(labels["app"], "reviews");
        let c = &pod.spec.unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some(REVIEWS_V3));
        assert_eq!(c.env.as_ref().unwrap()[0].name, "STAR_COLOR");
        let details = clone_deployment(&client, &ns, &consumer).await.unwrap();
        assert_eq!(details.status.as_ref().unwrap().ready_replicas, Some(1));
        // Upstream's annotation, renamed with the API group, where upstream puts it.
        let owner = format!("{ns}/jason");
        for d in [&clone, &details] {
            assert_eq!(
                d.annotations().get(DE_ANNOTATION),
                Some(&owner),
                "{}",
                d.name_any()
            );
        }

        // The DestinationRule: the base's host and traffic policy, one subset.
        let dr = get(&client, &ns, VS, "DestinationRule", &n.destination_rule)
            .await
            .unwrap();
        assert_eq!(
            dr["spec"],
            json!({
                "host": "reviews",
                "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}},
                "subsets": [{"name": n.version, "labels": {"version": n.version}}]
            })
        );
        assert_eq!(dr["metadata"]["annotations"][DE_ANNOTATION], json!(owner));
        let reviews = get(&client, &ns, VS, "VirtualService", "reviews")
            .await
            .unwrap();
        assert_eq!(
            reviews["metadata"]["annotations"][DE_ANNOTATION],
            json!(owner)
        );

        // Istio accepts everything written, with no unreachable rule.
        let written = wasmop_tests::kubectl_ok(&[
            "get",
            "virtualservices.networking.istio.io,destinationrules.networking.istio.io",
            "-n",
            &ns,
            "-o",
            "json",
        ]);
        let (valid, report) = wasmop_tests::istio_validate(&written);
        assert!(valid, "{report}");
        assert!(
            report.contains(&format!(
                "DestinationRule {ns}/{}: valid",
                n.destination_rule
            )),
            "{report}"
        );

        // The routes, exactly; the consumer's base VirtualService is untouched.
        assert_eq!(
            vs_http(&client, &ns, "reviews").await,
            expected_routes("reviews", &n, "jason")
        );
        assert_eq!(
            get(&client, &ns, VS, "VirtualService", "details")
                .await
                .unwrap()["spec"],
            original_details["spec"]
        );

        let reasons = events(&client, &ns, "jason").await;
        for (reason, related) in [
            ("Created", n.clone.as_str()),
            ("Created", consumer.as_str()),
            ("Created", n.destination_rule.as_str()),
            ("RoutesUpdated", "reviews"),
        ] {
            assert!(
                reasons.iter().any(|(r, o)| r == reason && o == related),
                "Event {reason} about {related} in {reasons:?}"
            );
        }

        // A new image: the clone rolls out and the hash changes.
        apply(
            &client,
            &ns,
            dynamic_env("jason", &ns, "jason", REVIEWS_V4, true),
        )
        .await;
        let de = eventually("a new hash and ready again", TIMEOUT, async || {
            let de = get(&client, &ns, "wasmop.dev/v1alpha1", "DynamicEnv", "jason").await?;
            let hash = de["status"]["subsetsStatus"][format!("{ns}/reviews")]["hash"].as_i64()?;
            (hash != first_hash && de["status"]["state"] == "ready").then_some(de)
        })
        .await;
        assert_eq!(de["status"]["totalReady"], 2);
        let clone = clone_deployment(&client, &ns, &n.clone).await.unwrap();
        assert_eq!(
            clone.spec.unwrap().template.spec.unwrap().containers[0]
                .image
                .as_deref(),
            Some(REVIEWS_V4)
        );
        assert!(clone.metadata.generation.unwrap() >= 2, "rolled out again");
        assert!(
            events(&client, &ns, "jason")
                .await
                .iter()
                .any(|(r, o)| r == "Updated" && *o == n.clone)
        );

        // Deletion: every VirtualService back as it was, nothing left.
        Api::<kube::api::DynamicObject>::namespaced_with(
            client.clone(),
            &ns,
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "wasmop.dev",
                "v1alpha1",
                "DynamicEnv",
            )),
        )
        .delete("jason", &DeleteParams::default())
        .await
        .unwrap();
        eventually("the DynamicEnv to be gone", TIMEOUT, async || {
            get(&client, &ns, "wasmop.dev/v1alpha1", "DynamicEnv", "jason")
                .await
                .is_none()
                .then_some(())
        })
        .await;
        let reviews = get(&client, &ns, VS, "VirtualService", "reviews")
            .await
            .unwrap();
        assert_eq!(reviews["spec"], original_reviews["spec"]);
        let mut annotations = original_reviews["metadata"]["annotations"].clone();
        if annotations.is_null() {
            annotations = json!({});
        }
        annotations[DE_ANNOTATION] = json!("");
        assert_eq!(
            reviews["metadata"]["annotations"], annotations,
            "nothing but upstream's emptied annotation was left on the VirtualService"
        );
        assert_eq!(
            get(&client, &ns, VS, "VirtualService", "details")
                .await
                .unwrap()["spec"],
            original_details["spec"]
        );
        for name in [&n.clone, &consumer] {
            assert!(
                clone_deployment(&client, &ns, name).await.is_none(),
                "{name}"
            );
        }
        assert!(
            get(&client, &ns, VS, "DestinationRule", &n.destination_rule)
                .await
                .is_none()
        );
        let left: Vec<String> = Api::<Deployment>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|d| d.metadata.name)
            .collect();
        assert_eq!(left, ["details", "reviews"]);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn routes_and_clones_follow_changes_of_the_virtual_service_and_the_base() {
    with_temp_ns("routing-resync", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, true).await;
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        create(&client, &ns, dynamic_env("jason", &ns, "jason", REVIEWS_V3, false)).await;
        wait_state(&client, &ns, "jason", "ready", TIMEOUT).await;
        let n = names_of(&ns, "jason", "reviews");

        // Someone replaces the routes (dropping wasmop's): the copy comes back, following the
        // new default route.
        let mut vs = virtual_service("reviews");
        vs["spec"]["http"] = json!([{"name": "default", "timeout": "5s",
                                     "route": [{"destination": {"host": "reviews", "subset": "shared"}}]}]);
        apply(&client, &ns, vs).await;
        let want = json!([
            {"name": format!("{}0", n.prefix), "timeout": "5s",
             "match": [{"headers": {"end-user": {"exact": "jason"}}}],
             "route": [{"destination": {"host": "reviews", "subset": n.version},
                        "headers": {"response": {"add": {"x-dynamic-env": n.clone}}}}]},
            {"name": "default", "timeout": "5s",
             "route": [{"destination": {"host": "reviews", "subset": "shared"}}]}
        ]);
        eventually("the routes re-synced", TIMEOUT, async || {
            (vs_http(&client, &ns, "reviews").await == want).then_some(())
        })
        .await;

        // The base Deployment changes: the clone follows, keeping its overrides.
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch(
                "reviews",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "reviews", "env": [{"name": "FROM_THE_BASE", "value": "1"}]}
                ]}}}})),
            )
            .await
            .unwrap();
        let env = eventually("the clone to follow its base", TIMEOUT, async || {
            let d = clone_deployment(&client, &ns, &n.clone).await?;
            let env: Vec<String> = d.spec?.template.spec?.containers[0]
                .env
                .clone()?
                .into_iter()
                .map(|e| e.name)
                .collect();
            env.contains(&"FROM_THE_BASE".to_owned()).then_some(env)
        })
        .await;
        assert_eq!(env, ["FROM_THE_BASE", "STAR_COLOR"]);
        wait_state(&client, &ns, "jason", "ready", TIMEOUT).await;
    })
    .await;
}

/// The registry of the test's operator: the builtin router again as `tiny`, whose output may
/// not exceed 1 KiB, with `failurePolicy: Fail`.
fn registry_with_tiny_router() -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": "wasmop-plugins"},
        "data": {"plugins.yaml": "plugins:\n  - name: tiny\n    hook: routing\n    source: builtin://routing-istio\n    limits: {maxOutputKiB: 1}\n    failurePolicy: Fail\n"}
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn degraded_with_the_reference_error_until_fixed_and_a_failing_router_fails_its_own() {
    with_temp_ns("routing-degraded", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, false).await;
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &registry_with_tiny_router())
            .await
            .unwrap();
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        create(&client, &ns, dynamic_env("jason", &ns, "jason", REVIEWS_V3, false)).await;
        let de = wait_state(&client, &ns, "jason", "degraded", TIMEOUT).await;
        let n = names_of(&ns, "jason", "reviews");
        let error = format!(
            "error updating virtual service for subset ({}): could not find even one virtual service that handles subset \"{ns}/reviews\"",
            n.clone
        );
        let errors = &de["status"]["subsetsStatus"][format!("{ns}/reviews")]["subsetErrors"];
        assert_eq!(errors["virtualServices"][0]["error"], error, "{errors}");
        assert!(errors["virtualServices"][0]["lastOccurrence"].is_string());
        let ready = condition(&de, "Ready").unwrap();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "Degraded");
        assert!(ready["message"].as_str().unwrap().contains(&error), "{ready}");

        // Fixed: the VirtualService appears; the error leaves the status.
        create(&client, &ns, virtual_service("reviews")).await;
        let de = wait_state(&client, &ns, "jason", "ready", TIMEOUT).await;
        let entry = &de["status"]["subsetsStatus"][format!("{ns}/reviews")];
        assert!(entry.get("subsetErrors").is_none(), "{entry}");
        assert_eq!(
            vs_http(&client, &ns, "reviews").await,
            expected_routes("reviews", &n, "jason")
        );

        // A DynamicEnv whose router fails (output over its limit, failurePolicy Fail):
        // degraded with the plugin's error, its VirtualService untouched; the other one stays
        // ready.
        create(&client, &ns, virtual_service("details")).await;
        let mut de = dynamic_env("tiny-user", &ns, "mike", REVIEWS_V3, false);
        de["spec"]["plugin"] = json!("tiny");
        // Three matches: six copies, well over 1 KiB of routes.
        de["spec"]["istioMatches"] = json!([
            {"headers": {"end-user": {"exact": "mike"}}},
            {"headers": {"x-team": {"prefix": "payments-"}}},
            {"sourceLabels": {"app": "productpage", "track": "canary"}}
        ]);
        de["spec"]["subsets"][0]["name"] = json!("details");
        de["spec"]["subsets"][0]["containers"][0]["containerName"] = json!("details");
        create(&client, &ns, de).await;
        let de = wait_state(&client, &ns, "tiny-user", "degraded", TIMEOUT).await;
        let t = names_of(&ns, "tiny-user", "details");
        let entry = &de["status"]["subsetsStatus"][format!("{ns}/details")];
        let e = entry["subsetErrors"]["virtualServices"][0]["error"]
            .as_str()
            .unwrap();
        assert!(
            e.starts_with(&format!(
                "error updating virtual service {ns}/details for subset ({}): plugin \"tiny\" (routing): output of",
                t.clone
            )) && e.ends_with("exceeds 1 KiB (limits.maxOutputKiB)"),
            "{e}"
        );
        assert_eq!(entry["virtualServices"][0]["status"], "failed");
        assert_eq!(vs_http(&client, &ns, "details").await, http_routes("details"));
        assert!(
            events(&client, &ns, "tiny-user")
                .await
                .iter()
                .any(|(r, _)| r == "RouterFailed")
        );
        assert_eq!(
            wasmop_tests::routing::state(&client, &ns, "jason").await.as_deref(),
            Some("ready")
        );
    })
    .await;
}

/// A registry entry that refines the default router's answer (`after: routing-istio`, the
/// refining fixture of tests/fixtures/refine-header): the DynamicEnv naming it gets
/// routing-istio's routes with the fixture's response header on each, its status and
/// `PluginReady` name both plugins. An `after` naming the entry itself fails the entry
/// (`PluginReady=False` with the reason) while its last good version keeps the routes as they
/// are; fixed, it is ready again.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn an_entry_after_the_default_router_refines_its_routes() {
    with_temp_ns("routing-after", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, true).await;
        let fixture = wasmop_tests::components_dir().join("wasmop_refine_fixture.wasm");
        let sha = wasmop_plugin_host::sha256_hex(&std::fs::read(&fixture).unwrap());
        let registry = |after: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "wasmop-plugins"},
                   "data": {"plugins.yaml": format!(
                       "plugins:\n  - {{name: team-header, hook: routing, source: 'file://{}', \
                        sha256: {sha}, settings: {{header: x-team, value: payments}}, after: {after}}}\n",
                       fixture.display())}})
        };
        create(&client, &ns, registry("routing-istio")).await;
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        let mut de = dynamic_env("jason", &ns, "jason", REVIEWS_V3, false);
        de["spec"]["plugin"] = json!("team-header");
        create(&client, &ns, de).await;
        let de = wait_state(&client, &ns, "jason", "ready", TIMEOUT).await;
        let n = names_of(&ns, "jason", "reviews");
        let mut refined = expected_routes("reviews", &n, "jason");
        for route in refined.as_array_mut().unwrap() {
            if route["name"].as_str().unwrap().starts_with(&n.prefix) {
                route["headers"] = json!({"response": {"set": {"x-team": "payments"}}});
            }
        }
        assert_eq!(vs_http(&client, &ns, "reviews").await, refined);
        let entry = &de["status"]["subsetsStatus"][format!("{ns}/reviews")];
        assert_eq!(
            entry["virtualServices"],
            json!([{"name": "reviews", "namespace": ns, "status": "running",
                    "decidedBy": ["routing-istio", "team-header"]}])
        );
        let ready = plugin_ready(&client, &ns, "jason", "Loaded").await;
        assert_eq!(ready["status"], "True");
        assert!(
            ready["message"].as_str().unwrap().ends_with("; builds on routing-istio"),
            "{ready}"
        );

        // An entry that builds on itself is refused; its last good version keeps serving.
        apply(&client, &ns, registry("team-header")).await;
        let failed = plugin_ready(&client, &ns, "jason", "LoadFailed").await;
        assert_eq!(failed["status"], "False");
        assert!(
            failed["message"].as_str().unwrap().contains(
                "invalid plugins.yaml entry: after: team-header is the entry itself"
            ),
            "{failed}"
        );
        assert_eq!(vs_http(&client, &ns, "reviews").await, refined);
        apply(&client, &ns, registry("routing-istio")).await;
        assert_eq!(
            plugin_ready(&client, &ns, "jason", "Loaded").await["status"],
            "True"
        );
        assert_eq!(vs_http(&client, &ns, "reviews").await, refined);
    })
    .await;
}

/// A registry entry limited by `allowedNamespaces` to another namespace serves no resource
/// here: a DynamicEnv naming it gets `PluginReady=False` (`NotAllowed`) and is degraded, and the
/// plugin is never called for it; a DynamicEnv beside it on the default router is routed.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn an_entry_allowed_only_elsewhere_is_not_called_for_a_resource_here() {
    with_temp_ns("allowed-ns", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, true).await;
        let registry = "plugins:\n  - {name: team-x, hook: routing, source: 'builtin://routing-istio', allowedNamespaces: [team-x]}\n";
        create(&client, &ns, json!({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "wasmop-plugins"},
                                    "data": {"plugins.yaml": registry}}))
        .await;
        let operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        let mut restricted = dynamic_env("restricted", &ns, "jason", REVIEWS_V3, false);
        restricted["spec"]["plugin"] = json!("team-x");
        create(&client, &ns, restricted).await;
        create(&client, &ns, dynamic_env("allowed", &ns, "bob", REVIEWS_V3, false)).await;
        wait_state(&client, &ns, "allowed", "ready", TIMEOUT).await;
        let de = wait_state(&client, &ns, "restricted", "degraded", TIMEOUT).await;
        let cond = eventually("PluginReady=False (NotAllowed)", TIMEOUT, async || {
            let de = get(&client, &ns, "wasmop.dev/v1alpha1", "DynamicEnv", "restricted").await?;
            de["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "PluginReady" && c["reason"] == "NotAllowed")
                .cloned()
        })
        .await;
        assert_eq!(cond["status"], "False");
        assert!(
            cond["message"].as_str().unwrap().contains(&format!("in namespace {ns}")),
            "{cond}"
        );
        assert!(de["status"].to_string().contains("allowedNamespaces"), "{de}");
        // Calls: the default router's, none of team-x's.
        let (_, metrics) = wasmop_tests::http_get(&operator.addr, "/metrics").unwrap();
        assert!(
            metrics.contains(r#"wasmop_plugin_calls_total{plugin="routing-istio",hook="routing",outcome="ok"}"#),
            "{metrics}"
        );
        assert!(!metrics.contains(r#"plugin="team-x",hook="routing",outcome"#), "{metrics}");
    })
    .await;
}

/// A DynamicEnv that has converged gets no write when it is reconciled again (a registry
/// reload reconciles every resource): no status, no patch of its clone, DestinationRule or
/// VirtualService, no PluginReady, no Event (the API server's audit log says so).
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_converged_dynamic_env_gets_no_writes_when_reconciled_again() {
    with_temp_ns("routing-quiet", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, true).await;
        let registry = |n: u32| -> ConfigMap {
            serde_json::from_value(json!({"metadata": {"name": "wasmop-plugins"},
                "data": {"plugins.yaml": format!("# nudge {n}\nplugins: []\n")}}))
            .unwrap()
        };
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        configmaps
            .create(&PostParams::default(), &registry(0))
            .await
            .unwrap();
        let op = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        create(
            &client,
            &ns,
            dynamic_env("jason", &ns, "jason", REVIEWS_V3, false),
        )
        .await;
        wait_state(&client, &ns, "jason", "ready", TIMEOUT).await;
        let reconciled = r#"wasmop_reconcile_total{controller="routing",outcome="ok"}"#;
        let count = || {
            wasmop_tests::sample(
                &op.get("/metrics").map(|(_, b)| b).unwrap_or_default(),
                reconciled,
            )
        };
        let nudge = async |n: u32| {
            let before = count();
            configmaps
                .replace("wasmop-plugins", &PostParams::default(), &{
                    let mut cm = registry(n);
                    cm.metadata.resource_version = configmaps
                        .get("wasmop-plugins")
                        .await
                        .unwrap()
                        .metadata
                        .resource_version;
                    cm
                })
                .await
                .unwrap();
            eventually(
                "a reconcile after the registry reload",
                TIMEOUT,
                async || (count() > before).then_some(()),
            )
            .await;
        };
        nudge(1).await;

        let since = k8s_openapi::jiff::Timestamp::now();
        for n in 2..5 {
            nudge(n).await;
        }
        let writes: Vec<_> = wasmop_tests::dr::audit_writes(&[&wasmop_tests::dr::operator_user()])
            .into_iter()
            .filter(|w| {
                w.at >= since
                    && w.object.contains(&format!(" {ns}/"))
                    && !w.object.starts_with("leases ")
            })
            .collect();
        assert!(writes.is_empty(), "no write at steady state: {writes:?}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_write_the_api_server_refuses_is_in_the_status_and_an_event_and_is_retried() {
    with_temp_ns("routing-refused", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, true).await;
        // A quota that holds exactly the two base Deployments: the clones are refused (403).
        create(
            &client,
            &ns,
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "deployments"},
                   "spec": {"hard": {"count/deployments.apps": "2"}}}),
        )
        .await;
        eventually("the quota to count the Deployments", TIMEOUT, async || {
            let q = get(&client, &ns, "v1", "ResourceQuota", "deployments").await?;
            (q["status"]["used"]["count/deployments.apps"] == "2").then_some(())
        })
        .await;
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        create(
            &client,
            &ns,
            dynamic_env("jason", &ns, "jason", REVIEWS_V3, false),
        )
        .await;

        let refused = refused_write(&client, &ns, "jason", "deployment").await;
        let clone = names::clone_name(&ns, "jason", &ns, "reviews");
        assert!(
            refused.starts_with(&format!("the API server refused Deployment {ns}/{clone}: "))
                && refused.contains("exceeded quota"),
            "{refused}"
        );

        // Once the quota is gone, the next try succeeds and the error leaves the status.
        Api::<k8s_openapi::api::core::v1::ResourceQuota>::namespaced(client.clone(), &ns)
            .delete("deployments", &DeleteParams::default())
            .await
            .unwrap();
        ready_without_errors(&client, &ns, "jason").await;
        assert!(clone_deployment(&client, &ns, &clone).await.is_some());
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_virtual_service_write_refused_as_invalid_is_in_the_status_not_retried_as_stale() {
    with_temp_ns("routing-invalid", |client: Client, ns: String| async move {
        bookinfo(&client, &ns, true).await;
        // An admission policy that refuses every update of a VirtualService in this namespace:
        // the API server answers 422 (reason Invalid), as for an object its schema rejects.
        let policy = format!("{ns}-frozen-routes");
        let manifest = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n\
             metadata: {{name: {policy}}}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n\
             \x20   resourceRules: [{{apiGroups: [networking.istio.io], apiVersions: ['*'],\
             operations: [UPDATE], resources: [virtualservices]}}]\n\
             \x20 validations: [{{expression: 'false', message: routes are frozen}}]\n---\n\
             apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n\
             metadata: {{name: {policy}}}\nspec:\n  policyName: {policy}\n\
             \x20 validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n\
             \x20     matchLabels: {{kubernetes.io/metadata.name: {ns}}}\n"
        );
        let file = wasmop_tests::dump_dir().join(format!("{policy}.yaml"));
        std::fs::write(&file, manifest).unwrap();
        let file = file.to_str().unwrap().to_owned();
        wasmop_tests::kubectl_ok(&["apply", "-f", &file]);
        let vs_api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            &ns,
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "networking.istio.io",
                "v1",
                "VirtualService",
            )),
        );
        eventually("the policy to refuse updates", TIMEOUT, async || {
            let label = json!({"metadata": {"labels": {"probe": "x"}}});
            match vs_api
                .patch("reviews", &PatchParams::default(), &Patch::Merge(&label))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 422 => Some(()),
                _ => None,
            }
        })
        .await;
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        create(
            &client,
            &ns,
            dynamic_env("jason", &ns, "jason", REVIEWS_V3, false),
        )
        .await;

        let refused = refused_write(&client, &ns, "jason", "virtualServices").await;
        assert!(
            refused.starts_with(&format!(
                "the API server refused VirtualService {ns}/reviews: "
            )) && refused.contains("routes are frozen"),
            "{refused}"
        );

        // Once the policy is gone, the next try writes the routes and the error leaves.
        wasmop_tests::kubectl_ok(&["delete", "--wait=true", "-f", &file]);
        ready_without_errors(&client, &ns, "jason").await;
        let routes = vs_http(&client, &ns, "reviews").await;
        assert!(
            routes.to_string().contains("\"jason\""),
            "the DynamicEnv's routes are written: {routes}"
        );
    })
    .await;
}
