//! E2E: the ElasticService controller on the local control plane, under the operator's RBAC,
//! with a real Prometheus on loopback scraping a test exporter and the default scaler plugin
//! granted its address. Resolver pods are kwok pods labelled as the resolver's; the test plays
//! the resolver by setting the demand annotation.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use wasmop_api::elasticservice::ElasticService;
use wasmop_api::names::{private_service_name, resolver_slice_name};
use wasmop_tests::dr::{audit_reads, audit_writes, operator_user};
use wasmop_tests::prometheus::{EXPORTER_JOB, Exporter, Prometheus, QueryStub};
use wasmop_tests::{
    Operator, create_in, deployment_replicas, eventually, kubectl_ok, repo_root, sample,
    wait_until, with_temp_ns,
};

const TIMEOUT: Duration = Duration::from_secs(40);
const RESOLVER_LABEL: &str = "app.kubernetes.io/name";
const RESOLVER_NAME: &str = "wasmop-resolver";

fn pod_template(app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
    })
}

/// A Deployment `name` with `replicas` pods labelled `app=name`.
async fn deployment(client: &Client, ns: &str, name: &str, replicas: i32) {
    create_in::<Deployment>(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                        "template": pod_template(name)}}),
    )
    .await;
}

/// A Service `name` selecting `app=name` with two ports.
async fn service(client: &Client, ns: &str, name: &str) {
    create_in::<Service>(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"selector": {"app": name},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080},
                                  {"name": "admin", "port": 9090, "targetPort": 9090}]}}),
    )
    .await;
}

/// A StatefulSet `name` at zero replicas, pods labelled `app=name`: in proxy mode at once.
async fn statefulset_at_zero(client: &Client, ns: &str, name: &str) {
    create_in::<StatefulSet>(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"replicas": 0, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                        "template": pod_template(name)}}),
    )
    .await;
}

/// Fake resolver pods: a Deployment whose kwok pods carry the resolver's label.
async fn resolver_pods(client: &Client, ns: &str, replicas: i32) {
    let mut template = pod_template("fake-resolver");
    template["metadata"]["labels"][RESOLVER_LABEL] = RESOLVER_NAME.into();
    create_in::<Deployment>(
        client,
        ns,
        json!({"metadata": {"name": "fake-resolver"},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "fake-resolver"}},
                        "template": template}}),
    )
    .await;
}

async fn scale_deployment(client: &Client, ns: &str, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    api.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .expect("scale");
}

/// The IPs of the ready pods labelled `app=app`, sorted.
async fn ready_pod_ips(client: &Client, ns: &str, app: &str) -> Vec<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let mut ips: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.status?.pod_ip)
        .collect();
    ips.sort();
    ips
}

fn es_spec(service: &str, kind: &str, api_version: &str, target: &str) -> Value {
    json!({
        "service": service,
        "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
    })
}

async fn elastic_service(
    client: &Client,
    ns: &str,
    name: &str,
    spec: Value,
) -> Api<ElasticService> {
    create_in::<ElasticService>(
        client,
        ns,
        json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
               "metadata": {"name": name}, "spec": spec}),
    )
    .await;
    Api::namespaced(client.clone(), ns)
}

fn mode(es: &ElasticService) -> Option<&str> {
    es.status.as_ref()?.mode.as_deref()
}

fn is_mode(want: &'static str) -> impl Fn(Option<&ElasticService>) -> bool {
    move |es| es.and_then(mode) == Some(want)
}

/// The notes of the Events about `name` with `reason`.
async fn events(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .filter_map(|e| e.note)
        .collect()
}

async fn event_with(client: &Client, ns: &str, name: &str, reason: &str, text: &str) -> String {
    eventually(
        &format!("an Event {reason} about {name} containing {text:?}"),
        TIMEOUT,
        async || {
            events(client, ns, name, reason)
                .await
                .into_iter()
                .find(|n| n.contains(text))
        },
    )
    .await
}

/// The resolver slice of `service`: (endpoint IPs with ready true, ports as (name, port)).
async fn resolver_slice(
    client: &Client,
    ns: &str,
    service: &str,
) -> Option<(Vec<String>, Vec<(String, i32)>)> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let slice = api.get_opt(&resolver_slice_name(service)).await.ok()??;
    assert_eq!(
        slice
            .labels()
            .get("kubernetes.io/service-name")
            .map(String::as_str),
        Some(service)
    );
    assert_eq!(
        slice
            .labels()
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("wasmop.dev")
    );
    let mut ips = vec![];
    for e in slice.endpoints.iter().flatten() {
        assert_eq!(
            e.conditions.as_ref().and_then(|c| c.ready),
            Some(true),
            "every resolver endpoint carries ready: true"
        );
        ips.extend(e.addresses.iter().cloned());
    }
    ips.sort();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.port.unwrap_or(0)))
        .collect();
    Some((ips, ports))
}

fn install_fixture_crds() {
    let dir = repo_root().join("tests/fixtures/crds");
    let dir = dir.to_str().expect("a UTF-8 path");
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=wasmop-e2e",
        "-f",
        dir,
    ]);
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        dir,
    ]);
}

fn dynamic(client: &Client, ns: &str, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates KEDA ScaledObject `web` (of Deployment `web`) with `annotations`; its API.
async fn scaled_object(client: &Client, ns: &str, annotations: Value) -> Api<DynamicObject> {
    let keda = dynamic(client, ns, "keda.sh", "ScaledObject", "scaledobjects");
    let object = json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "web", "annotations": annotations},
        "spec": {"scaleTargetRef": {"name": "web"}}});
    keda.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .expect("create the ScaledObject");
    keda
}

async fn annotations(
    api: &Api<DynamicObject>,
    name: &str,
) -> std::collections::BTreeMap<String, String> {
    api.get(name).await.expect("get").annotations().clone()
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn idle_trigger_scales_to_zero_and_demand_brings_it_back() {
    install_fixture_crds();
    with_temp_ns("scaling-idle", |client: Client, ns: String| async move {
        let exporter = Exporter::start();
        exporter.set_gauge("wasmop_test_load", 0.0);
        let prom = Prometheus::start(&exporter).await;
        create_in::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": prom.registry()}})).await;
        resolver_pods(&client, &ns, 2).await;
        deployment(&client, &ns, "web", 1).await;
        service(&client, &ns, "web").await;
        let keda = scaled_object(&client, &ns, json!({"team": "shop"})).await;
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &["--poll-interval", "1s"]).await;

        let mut spec = es_spec("web", "Deployment", "apps/v1", "web");
        spec["cooldownPeriod"] = 5.into();
        spec["autoscaler"] = json!({"type": "keda", "name": "web"});
        spec["triggers"] = json!([{"type": "prometheus", "metadata": {
            "query": "sum(wasmop_test_load)", "serverAddress": prom.url(), "threshold": "1",
            "uptimeFilter": format!("job=\"{EXPORTER_JOB}\"")}}]);
        let es_api = elastic_service(&client, &ns, "web", spec).await;

        // Idle: all triggers vote down, the cooldown since creation passes, the target goes to 0.
        let es = wait_until(&es_api, "web", TIMEOUT, "mode proxy", is_mode("proxy")).await;
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 0);
        let status = es.status.clone().unwrap();
        assert_eq!(status.private_service.as_deref(), Some(private_service_name("web").as_str()));
        let vote = &status.trigger_votes[0];
        assert_eq!((vote.vote.as_str(), vote.value), ("down", Some(0.0)), "{vote:?}");
        assert!(es.finalizers().contains(&"wasmop.dev/elasticservice-cleanup".to_owned()));
        event_with(&client, &ns, "web", "ScaledDown", "all 1 triggers vote down").await;
        event_with(&client, &ns, "web", "SwitchedToProxy", "to the resolver").await;
        let paused = annotations(&keda, "web").await;
        assert_eq!(paused.get("autoscaling.keda.sh/paused").map(String::as_str), Some("true"));
        assert_eq!(paused.get("autoscaling.keda.sh/paused-replicas").map(String::as_str), Some("0"));
        assert_eq!(paused.get("team").map(String::as_str), Some("shop"), "other annotations kept");

        // Proxy mode: the public Service's traffic goes to both resolver pods on every port,
        // and the private Service mirrors the public one.
        let resolvers = ready_pod_ips(&client, &ns, "fake-resolver").await;
        assert_eq!(resolvers.len(), 2);
        let (ips, ports) = eventually("the resolver slice", TIMEOUT, async || {
            resolver_slice(&client, &ns, "web").await.filter(|(ips, _)| *ips == resolvers)
        })
        .await;
        assert_eq!(ips, resolvers);
        assert_eq!(ports, vec![("http".to_owned(), 8012), ("admin".to_owned(), 8012)]);
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let private = services.get(&private_service_name("web")).await.unwrap();
        let pspec = private.spec.unwrap();
        assert_eq!(pspec.selector, Some([("app".to_owned(), "web".to_owned())].into()));
        assert_eq!(pspec.cluster_ip.as_deref(), Some("None"), "headless: no ClusterIP spent");
        assert_eq!(pspec.ports.unwrap().len(), 2);
        let public = services.get("web").await.unwrap();
        assert_eq!(
            public.spec.unwrap().selector,
            Some([("app".to_owned(), "web".to_owned())].into()),
            "the public Service is left alone"
        );

        // Demand: the resolver holds a request and sets the annotation; the target scales up,
        // its pod becomes Ready and the Service serves again.
        let demand = k8s_openapi::jiff::Timestamp::now();
        es_api
            .patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {
                "wasmop.dev/demand": format!("{demand:.0}")}}})))
            .await
            .unwrap();
        event_with(&client, &ns, "web", "ScaledUp", "request held by the resolver").await;
        let es = wait_until(&es_api, "web", TIMEOUT, "mode serve", is_mode("serve")).await;
        let last_up = es.status.unwrap().last_scaled_up_time.expect("lastScaledUpTime").0;
        assert!(last_up.as_second() >= demand.as_second(), "{last_up} >= {demand}");
        assert!(resolver_slice(&client, &ns, "web").await.is_none(), "the resolver slice is gone in serve mode");
        let resumed = annotations(&keda, "web").await;
        assert_eq!(resumed.get("autoscaling.keda.sh/paused").map(String::as_str), Some("false"));
        assert!(!resumed.contains_key("autoscaling.keda.sh/paused-replicas"));
        event_with(&client, &ns, "web", "SwitchedToServe", "ready pods").await;

        // A newer demand while the workload already wants its replicas scales nothing but is
        // noted (and counts as activity).
        let later = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(2);
        es_api
            .patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {
                "wasmop.dev/demand": format!("{later:.0}")}}})))
            .await
            .unwrap();
        event_with(&client, &ns, "web", "ScaledUp", "already wants 1 replicas").await;
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 1);

        // Still idle: after the cooldown since that activity it goes to zero again; then the
        // load rises and the trigger alone brings it back.
        wait_until(&es_api, "web", TIMEOUT, "mode proxy again", is_mode("proxy")).await;
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 0);
        exporter.set_gauge("wasmop_test_load", 5.0);
        event_with(&client, &ns, "web", "ScaledUp", "trigger 0 (prometheus) votes up: value 5").await;
        wait_until(&es_api, "web", TIMEOUT, "serving under load", is_mode("serve")).await;
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 1);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn resolver_pods_coming_and_going_rebuild_the_slices() {
    with_temp_ns("scaling-slices", |client: Client, ns: String| async move {
        resolver_pods(&client, &ns, 2).await;
        // A StatefulSet at zero: proxy mode at once, no trigger needed.
        statefulset_at_zero(&client, &ns, "db").await;
        service(&client, &ns, "db").await;
        let _operator = Operator::start(
            env!("CARGO_BIN_EXE_wasmop"),
            &ns,
            &["--poll-interval", "1s"],
        )
        .await;
        let es_api = elastic_service(
            &client,
            &ns,
            "db",
            es_spec("db", "StatefulSet", "apps/v1", "db"),
        )
        .await;
        wait_until(&es_api, "db", TIMEOUT, "mode proxy", is_mode("proxy")).await;

        for count in [3, 1, 0, 2] {
            scale_deployment(&client, &ns, "fake-resolver", count).await;
            let (ips, ports) = eventually(
                &format!("the slice to follow {count} resolver pods"),
                TIMEOUT,
                async || {
                    let ready = ready_pod_ips(&client, &ns, "fake-resolver").await;
                    if ready.len() != count as usize {
                        return None;
                    }
                    resolver_slice(&client, &ns, "db")
                        .await
                        .filter(|(ips, _)| *ips == ready)
                },
            )
            .await;
            assert_eq!(ips.len(), count as usize);
            assert_eq!(
                ports,
                vec![("http".to_owned(), 8012), ("admin".to_owned(), 8012)]
            );
            if count == 0 {
                let c = eventually("Ready=False without resolver pods", TIMEOUT, async || {
                    let es = es_api.get("db").await.ok()?;
                    es.status?
                        .conditions
                        .into_iter()
                        .find(|c| c.type_ == "Ready" && c.status == "False")
                })
                .await;
                assert!(c.message.contains("no ready resolver pod"), "{}", c.message);
            }
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn deletion_restores_replicas_and_removes_everything() {
    install_fixture_crds();
    with_temp_ns("scaling-delete", |client: Client, ns: String| async move {
        resolver_pods(&client, &ns, 1).await;
        deployment(&client, &ns, "web", 0).await;
        service(&client, &ns, "web").await;
        let rollouts = dynamic(&client, &ns, "argoproj.io", "Rollout", "rollouts");
        rollouts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                    "metadata": {"name": "canary"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "canary"}}}}))
                .unwrap(),
            )
            .await
            .unwrap();
        service(&client, &ns, "canary").await;
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &["--poll-interval", "1s"]).await;

        let mut web = es_spec("web", "Deployment", "apps/v1", "web");
        web["minTargetReplicas"] = 2.into();
        let es_api = elastic_service(&client, &ns, "web", web).await;
        elastic_service(&client, &ns, "canary", es_spec("canary", "Rollout", "argoproj.io/v1alpha1", "canary")).await;
        for name in ["web", "canary"] {
            wait_until(&es_api, name, TIMEOUT, "mode proxy", is_mode("proxy")).await;
            eventually("the resolver slice", TIMEOUT, async || resolver_slice(&client, &ns, name).await).await;
        }

        for name in ["web", "canary"] {
            es_api.delete(name, &DeleteParams::default()).await.unwrap();
        }
        for name in ["web", "canary"] {
            eventually(&format!("ElasticService {name} to be gone"), TIMEOUT, async || {
                es_api.get_opt(name).await.ok()?.is_none().then_some(())
            })
            .await;
        }
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 2, "restored to minTargetReplicas");
        let canary = rollouts.get("canary").await.unwrap();
        assert_eq!(canary.data["spec"]["replicas"], 1, "the Rollout is restored through /scale");
        event_with(&client, &ns, "web", "ScaleRestored", "ElasticService deleted: Deployment").await;
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
        for name in ["web", "canary"] {
            assert!(slices.get_opt(&resolver_slice_name(name)).await.unwrap().is_none());
            assert!(services.get_opt(&private_service_name(name)).await.unwrap().is_none());
            assert!(services.get_opt(name).await.unwrap().is_some(), "the public Service stays");
        }
    })
    .await;
}

/// Once converged, an ElasticService whose votes hold gets no write (status, patch or Event),
/// whatever its measured value does, and a ScaledObject someone paused by hand stays paused.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_converged_elastic_service_gets_no_writes_while_its_votes_hold() {
    install_fixture_crds();
    with_temp_ns("scaling-quiet", |client: Client, ns: String| async move {
        let exporter = Exporter::start();
        exporter.set_gauge("wasmop_test_load", 5.0);
        let prom = Prometheus::start(&exporter).await;
        create_in::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": prom.registry()}})).await;
        deployment(&client, &ns, "web", 1).await;
        service(&client, &ns, "web").await;
        let keda = scaled_object(&client, &ns, json!({"autoscaling.keda.sh/paused": "true"})).await;
        let op = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &["--poll-interval", "1s"]).await;
        let mut spec = es_spec("web", "Deployment", "apps/v1", "web");
        spec["cooldownPeriod"] = 5.into();
        spec["autoscaler"] = json!({"type": "keda", "name": "web"});
        spec["triggers"] = json!([{"type": "prometheus", "metadata": {
            "query": "sum(wasmop_test_load)", "serverAddress": prom.url(), "threshold": "1",
            "uptimeFilter": format!("job=\"{EXPORTER_JOB}\"")}}]);
        let es_api = elastic_service(&client, &ns, "web", spec).await;
        wait_until(&es_api, "web", TIMEOUT, "serving with an up vote", |es: Option<&ElasticService>| {
            es.and_then(|es| es.status.as_ref())
                .is_some_and(|s| s.mode.as_deref() == Some("serve") && s.trigger_votes.first().is_some_and(|v| v.vote == "up"))
        })
        .await;

        // Steady state: the value changes, the vote holds, evaluations go on (five more calls
        // of the scaler; the operator's only ElasticService).
        let calls = r#"wasmop_plugin_calls_total{plugin="prometheus-test",hook="scaling",outcome="ok"}"#;
        let metrics = || op.get("/metrics").map(|(_, b)| b).unwrap_or_default();
        let since = k8s_openapi::jiff::Timestamp::now();
        let before = sample(&metrics(), calls);
        exporter.set_gauge("wasmop_test_load", 7.0);
        eventually("five more evaluations", TIMEOUT, async || {
            (sample(&metrics(), calls) >= before + 5.0).then_some(())
        })
        .await;
        let writes: Vec<_> = audit_writes(&[&operator_user()])
            .into_iter()
            .filter(|w| w.at >= since && w.object.contains(&format!(" {ns}/")) && !w.object.starts_with("leases "))
            .collect();
        assert!(writes.is_empty(), "no write at steady state: {writes:?}");
        // Reads come from watch caches, the target's replicas too.
        let reads: Vec<_> = audit_reads(&[&operator_user()])
            .into_iter()
            .filter(|r| r.at >= since && r.object.contains(&format!(" {ns}/")))
            .filter(|r| !r.object.starts_with("leases "))
            .collect();
        assert!(reads.is_empty(), "reads at steady state: {reads:?}");
        let evaluated = format!(r#"wasmop_scaling_trigger_evaluated_timestamp_seconds{{namespace="{ns}",elasticservice="web"}}"#);
        assert!(sample(&metrics(), &evaluated) >= since.as_second() as f64, "the poll time is a metric");
        let es = es_api.get("web").await.unwrap();
        let vote = &es.status.unwrap().trigger_votes[0];
        assert_eq!((vote.vote.as_str(), vote.value), ("up", Some(5.0)), "the vote as it started: {vote:?}");
        let paused = annotations(&keda, "web").await;
        assert_eq!(paused.get("autoscaling.keda.sh/paused").map(String::as_str), Some("true"), "paused by hand, left paused");
    })
    .await;
}

/// A private Service made with a ClusterIP (as versions before the headless one did) is
/// deleted and made again headless, and the ElasticService converges.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_private_service_with_a_cluster_ip_is_made_again_headless() {
    with_temp_ns(
        "scaling-headless",
        |client: Client, ns: String| async move {
            resolver_pods(&client, &ns, 1).await;
            deployment(&client, &ns, "web", 0).await;
            service(&client, &ns, "web").await;
            let es_api = elastic_service(
                &client,
                &ns,
                "web",
                es_spec("web", "Deployment", "apps/v1", "web"),
            )
            .await;
            let es = es_api.get("web").await.unwrap();
            let owner = es.controller_owner_ref(&()).unwrap();
            let name = private_service_name("web");
            let old = create_in::<Service>(
                &client,
                &ns,
                json!({"metadata": {"name": name, "ownerReferences": [owner]},
                   "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}}),
            )
            .await;
            let old_ip = old.spec.unwrap().cluster_ip.unwrap();
            assert_ne!(old_ip, "None", "the API server gave it a ClusterIP");

            let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
            let services: Api<Service> = Api::namespaced(client.clone(), &ns);
            let headless = eventually(
                "the private Service made again headless",
                TIMEOUT,
                async || {
                    services.get_opt(&name).await.ok().flatten().filter(|s| {
                        s.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
                    })
                },
            )
            .await;
            assert_eq!(
                headless.spec.unwrap().ports.unwrap().len(),
                2,
                "both ports mirrored"
            );
            assert_eq!(
                headless.metadata.owner_references.unwrap()[0].uid,
                es.metadata.uid.unwrap()
            );
            wait_until(&es_api, "web", TIMEOUT, "mode proxy", is_mode("proxy")).await;
        },
    )
    .await;
}

/// A Service with UDP and SCTP ports: only its TCP ports go to the resolver at zero, and the
/// ElasticService says which ports it cannot hold.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn udp_and_sctp_ports_are_reported_and_not_sent_to_the_resolver() {
    with_temp_ns("scaling-udp", |client: Client, ns: String| async move {
        resolver_pods(&client, &ns, 1).await;
        statefulset_at_zero(&client, &ns, "dns").await;
        create_in::<Service>(
            &client,
            &ns,
            json!({"metadata": {"name": "dns"},
                   "spec": {"selector": {"app": "dns"},
                            "ports": [{"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                                      {"name": "dns", "port": 53, "protocol": "UDP"},
                                      {"name": "sig", "port": 9, "protocol": "SCTP"}]}}),
        )
        .await;
        let _operator = Operator::start(
            env!("CARGO_BIN_EXE_wasmop"),
            &ns,
            &["--poll-interval", "1s"],
        )
        .await;
        let es_api = elastic_service(
            &client,
            &ns,
            "dns",
            es_spec("dns", "StatefulSet", "apps/v1", "dns"),
        )
        .await;
        let es = wait_until(&es_api, "dns", TIMEOUT, "mode proxy", is_mode("proxy")).await;
        let ports = es
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ports")
            .expect("a Ports condition");
        assert_eq!(
            (ports.status.as_str(), ports.reason.as_str()),
            ("False", "NotTCP")
        );
        assert!(
            ports.message.contains("dns (UDP), sig (SCTP)"),
            "{}",
            ports.message
        );
        let (_, slice_ports) = eventually("the resolver slice", TIMEOUT, async || {
            resolver_slice(&client, &ns, "dns").await
        })
        .await;
        assert_eq!(
            slice_ports,
            vec![("dns-tcp".to_owned(), 8012)],
            "only the TCP port goes to the resolver"
        );
    })
    .await;
}

/// A Prometheus that stops answering for every trigger at once costs each ElasticService one
/// status write and one `TriggerFailed` Event, when its vote turns to error, and nothing at the
/// polls after that.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_prometheus_that_times_out_for_every_trigger_costs_one_write_per_elastic_service() {
    const SERVICES: usize = 4;
    with_temp_ns("scaling-timeout", |client: Client, ns: String| async move {
        let prom = QueryStub::start("5");
        let registry = format!(
            "plugins:\n  - name: prometheus-test\n    hook: scaling\n    source: builtin://scaling-prometheus\n    settings: {{timeoutMs: 300}}\n    grants: {{allowedHosts: [\"{}\"]}}\ndefaults: {{scaling: prometheus-test}}\n",
            prom.addr
        );
        create_in::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": registry}})).await;
        let names: Vec<String> = (0..SERVICES).map(|i| format!("web{i}")).collect();
        for name in &names {
            deployment(&client, &ns, name, 1).await;
            service(&client, &ns, name).await;
        }
        let op = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &["--poll-interval", "1s"]).await;
        let mut es_api = None;
        for name in &names {
            let mut spec = es_spec(name, "Deployment", "apps/v1", name);
            spec["cooldownPeriod"] = 5.into();
            spec["triggers"] = json!([{"type": "prometheus", "metadata": {
                "query": "sum(load)", "serverAddress": format!("http://{}", prom.addr), "threshold": "1"}}]);
            es_api = Some(elastic_service(&client, &ns, name, spec).await);
        }
        let es_api = es_api.unwrap();
        let vote_is = |want: &'static str| {
            move |es: Option<&ElasticService>| {
                es.and_then(|es| es.status.as_ref())
                    .is_some_and(|s| s.trigger_votes.first().is_some_and(|v| v.vote == want))
            }
        };
        for name in &names {
            wait_until(&es_api, name, TIMEOUT, "an up vote", vote_is("up")).await;
        }

        let since = k8s_openapi::jiff::Timestamp::now();
        prom.set_silent(true);
        for name in &names {
            wait_until(&es_api, name, TIMEOUT, "an error vote", vote_is("error")).await;
        }
        // Five more polls of every trigger, all failing.
        let errors = r#"wasmop_scaling_trigger_votes_total{plugin="prometheus-test",vote="error"}"#;
        let metrics = || op.get("/metrics").map(|(_, b)| b).unwrap_or_default();
        let after_flip = sample(&metrics(), errors);
        eventually("five more failing polls of every trigger", TIMEOUT, async || {
            (sample(&metrics(), errors) >= after_flip + 5.0 * SERVICES as f64).then_some(())
        })
        .await;
        prom.set_silent(false);

        let writes: Vec<_> = audit_writes(&[&operator_user()])
            .into_iter()
            .filter(|w| w.at >= since && w.object.contains(&format!(" {ns}/")) && !w.object.starts_with("leases "))
            .collect();
        for name in &names {
            let of = |prefix: &str| writes.iter().filter(|w| w.object == format!("{prefix} {ns}/{name}")).count();
            assert_eq!(of("elasticservices/status"), 1, "one status write for {name}: {writes:?}");
            let failed = events(&client, &ns, name, "TriggerFailed").await;
            assert_eq!(failed.len(), 1, "one TriggerFailed for {name}: {failed:?}");
            assert!(failed[0].contains("prometheus"), "{failed:?}");
        }
        let events_written = writes.iter().filter(|w| w.object.starts_with("events ")).count();
        assert_eq!(events_written, SERVICES, "one Event per ElasticService: {writes:?}");
        assert_eq!(writes.len(), 2 * SERVICES, "nothing else is written: {writes:?}");
        let es = es_api.get(&names[0]).await.unwrap();
        let triggers = es.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Triggers").expect("a Triggers condition");
        assert_eq!(triggers.status, "False", "{triggers:?}");
    })
    .await;
}
