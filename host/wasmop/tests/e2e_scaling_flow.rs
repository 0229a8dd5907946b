//! E2E, the whole scale-from-zero flow on the local control plane: the operator (its RBAC), a
//! real `wasmop resolver` process (least-privilege RBAC of the contract, namespaced), a real
//! Prometheus scraping a test exporter, and a backend that listens at the loopback address the
//! resolver's `--dial-prefix-map` maps each kwok pod IP to.
//!
//! idle trigger → target at 0 → proxy → a request through the resolver is held → demand →
//! scale-up → pod Ready → the request is answered 200 with the backend's body; idle again → 0 →
//! a burst of 200 concurrent requests at zero all get 200.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wasmop_api::elasticservice::ElasticService;
use wasmop_tests::prometheus::{EXPORTER_JOB, Exporter, Prometheus};
use wasmop_tests::{
    Operator, Process, create_in, deployment_replicas, dump_dir, eventually, free_port, http_get,
    kubectl_ok, service_account_kubeconfig, wait_until, with_temp_ns,
};

const TIMEOUT: Duration = Duration::from_secs(40);
const BURST: usize = 200;

/// The resolver's RBAC of the contract, as a Role of the test namespace bound to
/// ServiceAccount `wasmop-resolver` there; returns a kubeconfig of that ServiceAccount.
fn resolver_identity(ns: &str) -> std::path::PathBuf {
    let yaml = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: wasmop-resolver, namespace: {ns}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: wasmop-resolver, namespace: {ns}}}\nrules:\n\
         - {{apiGroups: [wasmop.dev], resources: [elasticservices], verbs: [get, list, watch, patch]}}\n\
         - {{apiGroups: [\"\"], resources: [services], verbs: [get, list, watch]}}\n\
         - {{apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: wasmop-resolver, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: wasmop-resolver}}\n\
         subjects: [{{kind: ServiceAccount, name: wasmop-resolver, namespace: {ns}}}]\n"
    );
    let file = dump_dir().join(format!("{ns}-resolver-rbac.yaml"));
    std::fs::write(&file, yaml).unwrap();
    kubectl_ok(&["apply", "-f", file.to_str().unwrap()]);
    service_account_kubeconfig(ns, "wasmop-resolver")
}

/// `wasmop resolver` on loopback, watching `ns`, dialing kwok pod IPs on loopback.
async fn resolver(ns: &str) -> (Process, SocketAddr) {
    let kubeconfig = resolver_identity(ns);
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_wasmop"));
    cmd.args(["resolver", "--watch-namespace", ns, "--timeout", "40s"])
        .args(["--listen", &addr.to_string(), "--admin-listen", &admin])
        .args(["--dial-prefix-map", "10.0.0.0/8=127.0.0.0/8"])
        .env("KUBECONFIG", kubeconfig)
        .env("WASMOP_LOG", "info,wasmop=debug");
    let mut process = Process::spawn(cmd, dump_dir().join(format!("{ns}-resolver.log")));
    eventually("the resolver to be ready", TIMEOUT, async || {
        assert!(process.alive(), "the resolver exited:\n{}", process.log());
        http_get(&admin, "/readyz").filter(|(s, _)| *s == 200)
    })
    .await;
    (process, addr)
}

/// Serves `200 hello from <pod IP>` at the loopback address of every pod labelled `app=web`
/// as soon as kwok gives it an IP (`10.a.b.c` → `127.a.b.c:8080`).
fn backends(client: Client, ns: String) -> Arc<Mutex<BTreeSet<String>>> {
    let served = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = served.clone();
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let config = watcher::Config::default().labels("app=web");
        let mut pods = std::pin::pin!(watcher(pods, config).default_backoff().applied_objects());
        while let Some(pod) = pods.next().await {
            let Some(ip) = pod.ok().and_then(|p| p.status?.pod_ip) else {
                continue;
            };
            if !seen.lock().unwrap().insert(ip.clone()) {
                continue;
            }
            let local = ip.replacen("10.", "127.", 1);
            let listener = TcpListener::bind((local.as_str(), 8080))
                .await
                .expect("bind the backend");
            tokio::spawn(serve(listener, ip));
        }
    });
    served
}

async fn serve(listener: TcpListener, ip: String) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let body = format!("hello from {ip}");
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
        });
    }
}

/// `GET /` through the resolver for Service `web` of `ns`: (status, body).
async fn get(resolver: SocketAddr, ns: &str) -> (u16, String) {
    let conn = TcpStream::connect(resolver).await.expect("connect");
    wasmop_tests::http_get_over(conn, &format!("web.{ns}.svc.cluster.local"))
        .await
        .expect("GET through the resolver")
}

fn is_mode(want: &'static str) -> impl Fn(Option<&ElasticService>) -> bool {
    move |es| es.and_then(|e| e.status.as_ref()?.mode.as_deref()) == Some(want)
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_request_at_zero_is_held_scales_the_service_up_and_is_answered() {
    with_temp_ns("scaling-flow", |client: Client, ns: String| async move {
        let exporter = Exporter::start();
        exporter.set_gauge("wasmop_test_load", 0.0);
        let prom = Prometheus::start(&exporter).await;
        create_in::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": prom.registry()}})).await;
        let template = |app: &str, extra: Value| {
            let mut labels = json!({"app": app});
            if let (Some(l), Some(e)) = (labels.as_object_mut(), extra.as_object()) {
                l.extend(e.clone());
            }
            json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}})
        };
        create_in::<Deployment>(&client, &ns, json!({"metadata": {"name": "fake-resolver"}, "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": "fake-resolver"}},
            "template": template("fake-resolver", json!({"app.kubernetes.io/name": "wasmop-resolver"}))}})).await;
        create_in::<Deployment>(&client, &ns, json!({"metadata": {"name": "web"}, "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": "web"}}, "template": template("web", json!({}))}})).await;
        create_in::<Service>(&client, &ns, json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})).await;
        let _backends = backends(client.clone(), ns.clone());
        let _operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &["--poll-interval", "1s"]).await;
        let (_resolver, resolver_addr) = resolver(&ns).await;

        create_in::<ElasticService>(&client, &ns, json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
            "metadata": {"name": "web"},
            "spec": {"service": "web", "cooldownPeriod": 3,
                     "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "triggers": [{"type": "prometheus", "metadata": {"query": "sum(wasmop_test_load)",
                        "serverAddress": prom.url(), "threshold": 1, "uptimeFilter": format!("job=\"{EXPORTER_JOB}\"")}}]}})).await;
        let es_api: Api<ElasticService> = Api::namespaced(client.clone(), &ns);

        // Idle: to zero, proxy mode.
        wait_until(&es_api, "web", TIMEOUT, "mode proxy", is_mode("proxy")).await;
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 0);

        // One request at zero: held, scale-up on demand, answered by the new pod.
        let started = Instant::now();
        let (status, body) = tokio::time::timeout(TIMEOUT, get(resolver_addr, &ns))
            .await
            .expect("the held request is answered");
        let cold_start = started.elapsed();
        assert_eq!(status, 200, "{body}");
        assert!(body.starts_with("hello from 10."), "{body}");
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 1);
        eprintln!("cold start through the resolver: {cold_start:?}");
        let es = wait_until(&es_api, "web", TIMEOUT, "mode serve", is_mode("serve")).await;
        assert!(es.status.unwrap().last_scaled_up_time.is_some());

        // Idle again: back to zero; then a burst at zero is held and every request answered.
        wait_until(&es_api, "web", TIMEOUT, "mode proxy again", is_mode("proxy")).await;
        eventually("no web pod left", TIMEOUT, async || {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            pods.list(&ListParams::default().labels("app=web")).await.ok()?.items.is_empty().then_some(())
        })
        .await;
        let burst: Vec<_> = (0..BURST)
            .map(|_| {
                let ns = ns.clone();
                tokio::spawn(async move { tokio::time::timeout(TIMEOUT, get(resolver_addr, &ns)).await })
            })
            .collect();
        let mut ok = 0;
        for r in burst {
            let (status, body) = r.await.unwrap().expect("every request of the burst is answered");
            assert_eq!(status, 200, "{body}");
            ok += 1;
        }
        assert_eq!(ok, BURST);
        assert_eq!(deployment_replicas(&client, &ns, "web").await, 1);
    })
    .await;
}
