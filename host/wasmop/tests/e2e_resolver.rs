//! E2E: `wasmop resolver` on the local control plane, under the RBAC of
//! the chart's RBAC (deploy/manifests). The test plays the ElasticService controller: it creates the
//! ElasticService, the public and private Services and a Deployment at zero, watches for the
//! demand annotation and scales the Deployment itself. kwok makes the pod Ready,
//! kube-controller-manager writes the private Service's EndpointSlice, and the resolver forwards
//! to the pod's address mapped onto loopback (`--dial-prefix-map 10.0.0.0/8=127.0.0.0/8`),
//! where the test's backend listens. Nothing is dialed outside 127.0.0.0/8.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use wasmop_api::elasticservice::{DEMAND_ANNOTATION, ElasticService};
use wasmop_api::names::private_service_name;
use wasmop_resolver::proxy::COLD_START_HEADER;
use wasmop_tests::resolver::{HELLO, ResolverProcess, start_backend};
use wasmop_tests::{eventually, kubectl_ok, wait_until, with_temp_ns};

const BIN: &str = env!("CARGO_BIN_EXE_wasmop");
const TIMEOUT: Duration = Duration::from_secs(40);
const DIAL_MAP: [&str; 2] = ["--dial-prefix-map", "10.0.0.0/8=127.0.0.0/8"];

async fn create<K>(client: &Client, ns: &str, obj: Value)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let obj: K = serde_json::from_value(obj).expect("a valid object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create the object");
}

/// What the controller would have made: Deployment `name` (`replicas`), public Service `name`
/// (port 80 `http` → 8080), its private Service, and ElasticService `name` with `spec_extra`.
async fn workload(client: &Client, ns: &str, name: &str, replicas: i32, spec_extra: Value) {
    create::<Deployment>(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}}}),
    )
    .await;
    for svc in [name.to_owned(), private_service_name(name)] {
        create::<Service>(
            client,
            ns,
            json!({"metadata": {"name": svc},
                   "spec": {"selector": {"app": name},
                            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
        )
        .await;
    }
    let mut spec = json!({"service": name, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), spec_extra) {
        spec.extend(extra);
    }
    create::<ElasticService>(
        client,
        ns,
        json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
               "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    api.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .expect("scale the Deployment");
}

/// The IP of a ready pod labelled `app=name`, once there is one.
async fn ready_pod_ip(client: &Client, ns: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(&format!("a ready pod of {name}"), TIMEOUT, async || {
        pods.list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .find_map(|p| p.status?.pod_ip)
    })
    .await
}

/// The loopback address the resolver dials for pod IP `ip` under [`DIAL_MAP`].
fn mapped(ip: &str, port: u16) -> String {
    let ip: std::net::Ipv4Addr = ip.parse().expect("an IPv4 pod IP");
    let [first, b, c, d] = ip.octets();
    assert_eq!(first, 10, "kwok hands out pod IPs from 10.244.0.0/16");
    format!("127.{b}.{c}.{d}:{port}")
}

fn host(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.svc.cluster.local")
}

type Answer = (StatusCode, http::HeaderMap, String);

async fn request(proxy: SocketAddr, host: &str, method: &str, path: &str, body: &str) -> Answer {
    let client: HttpClient<_, Full<Bytes>> = HttpClient::builder(TokioExecutor::new()).build_http();
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{proxy}{path}"))
        .header("host", host)
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a request");
    let response = client.request(req).await.expect("the resolver answers");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("the whole body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// Waits until the resolver knows the service: its `/known` probe rule answers 204 (404 before
/// the ElasticService has reached the resolver's watch).
async fn known(proxy: SocketAddr, host: &str) {
    eventually(
        &format!("the resolver to know {host}"),
        TIMEOUT,
        async || (request(proxy, host, "GET", "/known", "").await.0 == 204).then_some(()),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_burst_held_at_zero_signals_demand_and_every_request_reaches_the_pod() {
    with_temp_ns("resolver-cold", |client: Client, ns: String| async move {
        let mut args = vec!["--demand-interval", "1s"];
        args.extend(DIAL_MAP);
        let resolver = ResolverProcess::start(BIN, &ns, &args).await;
        // It started itself again (same process id) under the resolver's allocator options.
        let options = format!(
            "{}={}",
            wasmop_resolver::malloc::MALLOC_CONF_ENV,
            wasmop_resolver::malloc::RESOLVER_MALLOC_CONF
        );
        assert!(
            resolver.environment().contains(&options),
            "the resolver runs without {options}"
        );
        let probe = json!({"probeResponse": [{"match": {"path": {"type": "Exact", "value": "/known"}},
                                              "response": {"status": 204}}]});
        workload(&client, &ns, "web", 0, probe).await;
        let web = host("web", &ns);
        known(resolver.proxy, &web).await;

        // 200 concurrent requests while the service is at zero; one GET, the rest echo bodies.
        let first = tokio::spawn({
            let web = web.clone();
            let proxy = resolver.proxy;
            async move { request(proxy, &web, "GET", "/hello?x=1", "").await }
        });
        let burst: Vec<_> = (1..200)
            .map(|i| {
                let web = web.clone();
                let proxy = resolver.proxy;
                tokio::spawn(async move {
                    (i, request(proxy, &web, "POST", "/echo", &format!("request {i}")).await)
                })
            })
            .collect();
        eventually("200 requests held", TIMEOUT, async || {
            (resolver.held(&ns, "web") == 200).then_some(())
        })
        .await;

        // The demand annotation: the time of the oldest held request.
        let es_api: Api<ElasticService> = Api::namespaced(client.clone(), &ns);
        let es = wait_until(&es_api, "web", TIMEOUT, "the demand annotation", |es: Option<&ElasticService>| {
            es.is_some_and(|es| es.annotations().contains_key(DEMAND_ANNOTATION))
        })
        .await;
        let demand: k8s_openapi::jiff::Timestamp = es.annotations()[DEMAND_ANNOTATION]
            .parse()
            .expect("an RFC 3339 time");
        let created = es.creation_timestamp().expect("a creation time").0;
        assert!(demand >= created.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(1)).unwrap(), "{demand} {created}");
        assert!(!first.is_finished() && burst.iter().all(|r| !r.is_finished()), "held, not answered");

        // Playing the controller: scale up; kwok makes the pod Ready; its address gets a backend.
        scale(&client, &ns, "web", 1).await;
        let ip = ready_pod_ip(&client, &ns, "web").await;
        start_backend(&mapped(&ip, 8080)).await;

        let (status, headers, body) = tokio::time::timeout(TIMEOUT, first).await.expect("answered").unwrap();
        assert_eq!((status.as_u16(), body.as_str()), (200, HELLO));
        assert_eq!(headers["x-seen-uri"], "/hello?x=1");
        assert_eq!(headers["x-seen-host"], web.as_str());
        assert_eq!(headers["x-seen-xfh"], web.as_str());
        assert_eq!(headers["x-seen-xff"], "127.0.0.1");
        assert!(headers.contains_key(COLD_START_HEADER));
        for r in burst {
            let (i, (status, _, body)) = tokio::time::timeout(TIMEOUT, r).await.expect("answered").unwrap();
            assert_eq!((status.as_u16(), body), (200, format!("request {i}")));
        }
        assert_eq!(resolver.held(&ns, "web"), 0);
        let metrics = resolver.metrics();
        let forwarded = format!(
            "wasmop_resolver_requests_forwarded_total{{namespace=\"{ns}\",service=\"web\",path=\"cold\"}} 200"
        );
        assert!(metrics.contains(&forwarded), "{forwarded} not in\n{metrics}");

        // Now warm: h2c stays HTTP/2 to the pod, and bodies stream both ways.
        let stream = tokio::net::TcpStream::connect(resolver.proxy).await.unwrap();
        let (mut h2, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an h2c connection to the resolver");
        tokio::spawn(conn);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
        let body = StreamBody::new(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        let req = Request::post(format!("http://{web}/echo")).body(body).unwrap();
        tx.send(Ok(Frame::data(Bytes::from("first")))).await.unwrap();
        let response = h2.send_request(req).await.expect("an h2c answer");
        assert_eq!(response.headers()["x-seen-version"], "HTTP/2.0");
        let mut body = response.into_body();
        let chunk = tokio::time::timeout(TIMEOUT, body.frame()).await.unwrap().unwrap().unwrap();
        assert_eq!(chunk.into_data().unwrap(), "first", "streamed back before the request ended");
        tx.send(Ok(Frame::data(Bytes::from("second")))).await.unwrap();
        let chunk = tokio::time::timeout(TIMEOUT, body.frame()).await.unwrap().unwrap().unwrap();
        assert_eq!(chunk.into_data().unwrap(), "second");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_full_queue_a_timeout_and_probes_get_clear_answers_at_zero() {
    with_temp_ns("resolver-limits", |client: Client, ns: String| async move {
        let mut args = vec!["--queue-size", "2", "--timeout", "4s"];
        args.extend(DIAL_MAP);
        let resolver = ResolverProcess::start(BIN, &ns, &args).await;
        let probe = json!({"probeResponse": [
            {"match": {"path": {"type": "Exact", "value": "/healthz"}}, "response": {"status": 200, "body": "up"}},
            {"match": {"path": {"type": "Exact", "value": "/known"}}, "response": {"status": 204}}]});
        workload(&client, &ns, "idle", 0, probe).await;
        let idle = host("idle", &ns);
        let proxy = resolver.proxy;

        // A bare Service name cannot be resolved.
        let (status, _, body) = request(proxy, "idle", "GET", "/", "").await;
        assert_eq!(status, 400);
        assert!(body.contains("names no namespace"), "{body}");

        // A health check is answered at zero without holding or waking anything.
        known(proxy, &idle).await;
        let (status, _, body) = request(proxy, &idle, "GET", "/healthz", "").await;
        assert_eq!((status.as_u16(), body.as_str()), (200, "up"));

        let held: Vec<_> = (0..2)
            .map(|_| {
                let idle = idle.clone();
                tokio::spawn(async move { request(proxy, &idle, "GET", "/", "").await })
            })
            .collect();
        eventually("2 requests held", TIMEOUT, async || (resolver.held(&ns, "idle") == 2).then_some(())).await;
        let (status, headers, body) = request(proxy, &idle, "GET", "/", "").await;
        assert_eq!(status, 503);
        assert_eq!(headers["retry-after"], "5");
        assert!(body.contains("--queue-size"), "{body}");

        // Nobody scales the Deployment up: the held requests time out.
        for r in held {
            let (status, _, body) = tokio::time::timeout(TIMEOUT, r).await.expect("answered").unwrap();
            assert_eq!(status, 504);
            assert!(body.contains("no ready endpoint within 4s (--timeout)"), "{body}");
        }
        assert_eq!(resolver.held(&ns, "idle"), 0);
        let es_api: Api<ElasticService> = Api::namespaced(client.clone(), &ns);
        let es = es_api.get("idle").await.unwrap();
        assert!(es.annotations().contains_key(DEMAND_ANNOTATION), "demand was signalled");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_pod_that_refuses_connections_gets_502_after_the_retries() {
    with_temp_ns("resolver-broken", |client: Client, ns: String| async move {
        let mut args = vec!["--connect-attempts", "3", "--connect-backoff", "100ms"];
        args.extend(DIAL_MAP);
        let resolver = ResolverProcess::start(BIN, &ns, &args).await;
        let probe = json!({"probeResponse": [{"match": {"path": {"type": "Exact", "value": "/known"}},
                                              "response": {"status": 204}}]});
        workload(&client, &ns, "broken", 0, probe).await;
        known(resolver.proxy, &host("broken", &ns)).await;
        scale(&client, &ns, "broken", 1).await;
        let ip = ready_pod_ip(&client, &ns, "broken").await;
        // Nothing listens on the pod's mapped address.
        let (status, _, body) = request(resolver.proxy, &host("broken", &ns), "GET", "/", "").await;
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("after 3 attempts"), "{body}");
        assert!(body.contains(&format!("{ip}:8080 (dialed as {})", mapped(&ip, 8080))), "{body}");
        assert!(body.contains("refused"), "{body}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn endpoint_slices_written_by_anyone_but_the_endpointslice_controller_are_ignored() {
    with_temp_ns("resolver-forged", |client: Client, ns: String| async move {
        let mut args = vec!["--timeout", "3s"];
        args.extend(DIAL_MAP);
        let resolver = ResolverProcess::start(BIN, &ns, &args).await;
        let probe = json!({"probeResponse": [{"match": {"path": {"type": "Exact", "value": "/known"}},
                                              "response": {"status": 204}}]});
        workload(&client, &ns, "web", 0, probe).await;
        let web = host("web", &ns);
        known(resolver.proxy, &web).await;
        // A namespace user's slices for the private Service, pointing at an address of its
        // choosing (where a backend does listen): another manager, and no manager at all.
        let target = "10.244.250.9";
        start_backend(&mapped(target, 8080)).await;
        for (name, labels) in [
            ("forged", json!({"kubernetes.io/service-name": private_service_name("web"),
                              "endpointslice.kubernetes.io/managed-by": "someone-else"})),
            ("unlabelled", json!({"kubernetes.io/service-name": private_service_name("web")})),
        ] {
            create::<EndpointSlice>(
                &client,
                &ns,
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                       "metadata": {"name": name, "labels": labels}, "addressType": "IPv4",
                       "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                       "endpoints": [{"addresses": [target], "conditions": {"ready": true}}]}),
            )
            .await;
        }
        // Give the watch time to have seen them, then ask: held (at zero) until the timeout.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (status, _, body) = request(resolver.proxy, &web, "GET", "/", "").await;
        assert_eq!(status, 504, "{body}");
        let metrics = resolver.metrics();
        assert!(!metrics.contains("path=\"warm\""), "nothing was forwarded:\n{metrics}");
        let es_api: Api<ElasticService> = Api::namespaced(client.clone(), &ns);
        let es = es_api.get("web").await.unwrap();
        assert!(
            es.annotations().contains_key(DEMAND_ANNOTATION),
            "the service still counts as at zero, so demand was signalled"
        );
    })
    .await;
}

#[test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
fn the_resolver_deployment_is_accepted_by_the_api_server() {
    wasmop_tests::resolver::install_resolver_rbac();
    let out = kubectl_ok(&[
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        &wasmop_tests::manifests_dir().to_string_lossy(),
    ]);
    assert!(out.contains("deployment.apps/wasmop-resolver"), "{out}");
}
