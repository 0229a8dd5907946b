//! The local control plane is real: scheduling, kwok kubelets, the EndpointSlice controller,
//! Istio's CRD schemas, and the test namespace helper.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use wasmop_tests::{crds_dir, dump_dir, eventually, install_crds, with_temp_ns};

const TIMEOUT: Duration = Duration::from_secs(90);

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "example.com/app:1", "ports": [{"containerPort": 8080}]}]}
            }
        }
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn deployment_pods_become_ready_and_endpoints_are_published() {
    with_temp_ns("deploy", |client: Client, ns: String| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("web", 2))
            .await
            .unwrap();
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
        }))
        .unwrap();
        Api::<Service>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();

        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let ready = eventually("2 Running and Ready pods", TIMEOUT, async || {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let ready: Vec<_> = list
                .items
                .into_iter()
                .filter(|p| {
                    let status = p.status.as_ref();
                    status.and_then(|s| s.phase.as_deref()) == Some("Running")
                        && status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                            c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .collect();
            (ready.len() == 2).then_some(ready)
        })
        .await;
        assert!(ready.iter().all(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| n.starts_with("kwok-"))
        }));

        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
        let endpoints = eventually(
            "2 ready endpoints in the Service's EndpointSlices",
            TIMEOUT,
            async || {
                let list = slices
                    .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
                    .await
                    .ok()?;
                let ready: Vec<String> = list
                    .items
                    .iter()
                    .flat_map(|s| s.endpoints.iter().flatten())
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .flat_map(|e| e.addresses.clone())
                    .collect();
                (ready.len() == 2).then_some(ready)
            },
        )
        .await;
        let pod_ips: Vec<String> = ready
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        for ip in &endpoints {
            assert!(
                pod_ips.contains(ip),
                "endpoint {ip} is not one of the pods' IPs {pod_ips:?}"
            );
        }
    })
    .await;
}

fn virtual_services(client: Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("networking.istio.io", "v1", "VirtualService");
    Api::namespaced_with(client, ns, &ApiResource::from_gvk(&gvk))
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn istio_crd_schema_accepts_routes_and_rejects_invalid_ones() {
    with_temp_ns("istio", |client: Client, ns: String| async move {
        let api = virtual_services(client, &ns);
        let valid: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "reviews"},
            "spec": {
                "hosts": ["reviews"],
                "http": [{
                    "name": "weighted",
                    "match": [{"headers": {"end-user": {"exact": "jason"}}}],
                    "route": [
                        {"destination": {"host": "reviews", "subset": "v1"}, "weight": 75},
                        {"destination": {"host": "reviews", "subset": "v2"}, "weight": 25}
                    ]
                }]
            }
        }))
        .unwrap();
        let created = api.create(&PostParams::default(), &valid).await.expect("a valid VirtualService is accepted");
        assert_eq!(created.data["spec"]["http"][0]["route"][1]["weight"], 25);

        let invalid: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "broken"},
            "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": "heavy"}]}]}
        }))
        .unwrap();
        match api.create(&PostParams::default(), &invalid).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 422, "{e:?}");
                assert!(e.message.contains("weight"), "the rejection names the field: {}", e.message);
            }
            other => panic!("an invalid VirtualService must be rejected by the CRD schema, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn crds_apply_cleanly() {
    let applied = install_crds();
    let files = std::fs::read_dir(crds_dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        })
        .count();
    assert!(files > 0, "crds/ holds no CRD");
    assert_eq!(
        applied
            .lines()
            .filter(|l| l.contains("customresourcedefinition"))
            .count(),
        files,
        "{applied}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_failing_test_dumps_its_namespace() {
    let mut ns_seen = String::new();
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(with_temp_ns(
        "dump",
        |client: Client, ns: String| {
            ns_seen = ns.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(
                    json!({"metadata": {"name": "evidence"}, "data": {"k": "v"}}),
                )
                .unwrap();
                Api::<ConfigMap>::namespaced(client, &ns)
                    .create(&PostParams::default(), &cm)
                    .await
                    .unwrap();
                panic!("deliberate failure");
            }
        },
    )))
    .await;
    assert!(result.is_err(), "the panic is re-raised");
    let dump =
        std::fs::read_to_string(dump_dir().join(format!("{ns_seen}.yaml"))).expect("a dump file");
    assert!(
        dump.contains("name: evidence"),
        "the dump lists the namespace's objects:\n{dump}"
    );
}
