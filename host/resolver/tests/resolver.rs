//! The resolver's request path in-process: a real proxy listener and real backends on
//! loopback addresses, with the catalog fed by hand (no cluster) and demand recorded.

#[path = "common/fixtures.rs"]
mod fixtures;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fixtures::RecordedDemand;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tower::ServiceExt;
use wasmop_resolver::proxy::COLD_START_HEADER;
use wasmop_resolver::{Catalog, PrefixMap, ProxyConfig, Resolver};
use wasmop_tests::eventually;
use wasmop_tests::resolver::{HELLO, start_backend};

const WAIT: Duration = Duration::from_secs(10);

struct Harness {
    ns: String,
    addr: SocketAddr,
    resolver: Resolver,
    demand: Arc<RecordedDemand>,
}

impl Harness {
    async fn start(ns: &str, config: ProxyConfig) -> Self {
        Self::start_until(ns, config, std::future::pending(), Duration::from_secs(1))
            .await
            .0
    }

    /// A resolver that shuts down when `shutdown` resolves, with `grace`; the handle of its
    /// `serve`.
    async fn start_until(
        ns: &str,
        config: ProxyConfig,
        shutdown: impl Future<Output = ()> + Send + 'static,
        grace: Duration,
    ) -> (Self, tokio::task::JoinHandle<std::io::Result<()>>) {
        let catalog = Catalog::new();
        catalog.mark_synced();
        let demand = Arc::new(RecordedDemand::default());
        let resolver = Resolver::new(config, catalog, demand.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let serving = resolver.clone();
        let served = tokio::spawn(async move { serving.serve(listener, shutdown, grace).await });
        let h = Self {
            ns: ns.into(),
            addr,
            resolver,
            demand,
        };
        (h, served)
    }

    fn catalog(&self) -> &Arc<Catalog> {
        self.resolver.catalog()
    }

    /// ElasticService `es-<service>` and a public Service with port 80 named `http`.
    fn add_service(&self, service: &str, spec_extra: Value, status: Value) {
        let catalog = self.catalog();
        catalog.elastic_service_event(Event::Apply(fixtures::elastic_service(
            &self.ns, service, spec_extra, status,
        )));
        catalog.service_event(Event::Apply(fixtures::public_service(&self.ns, service)));
    }

    /// The private Service of `service` gets the ready endpoint `endpoint`.
    fn make_ready(&self, service: &str, endpoint: SocketAddr) {
        self.catalog()
            .endpoint_slice_event(Event::Apply(fixtures::ready_slice(
                &self.ns, service, endpoint,
            )));
    }

    fn host(&self, service: &str) -> String {
        format!("{service}.{}.svc.cluster.local", self.ns)
    }

    fn held(&self, service: &str) -> usize {
        self.resolver.queues().held(&self.ns, service)
    }

    async fn wait_held(&self, service: &str, n: usize) {
        eventually(
            &format!("{n} requests held for {service}"),
            WAIT,
            async || (self.held(service) == n).then_some(()),
        )
        .await;
    }

    /// `GET path` for `service` in the background (it may be held).
    fn spawn_get(&self, service: &str, path: &str) -> tokio::task::JoinHandle<Answer> {
        let req = Request::get(format!("http://{}{path}", self.addr))
            .header("host", self.host(service))
            .body(Full::new(Bytes::new()))
            .unwrap();
        tokio::spawn(send(req))
    }

    async fn get(&self, host: &str, path: &str) -> Answer {
        let req = Request::get(format!("http://{}{path}", self.addr))
            .header("host", host)
            .body(Full::new(Bytes::new()))
            .unwrap();
        send(req).await
    }

    async fn metrics(&self) -> String {
        let response = self
            .resolver
            .admin_router()
            .oneshot(
                Request::get("/metrics")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }
}

type Answer = (StatusCode, http::HeaderMap, String);

fn config() -> ProxyConfig {
    let mut c = ProxyConfig::default();
    c.connect.attempts = 3;
    c.connect.backoff = Duration::from_millis(10);
    c
}

fn http1() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn send(req: Request<Full<Bytes>>) -> Answer {
    let response = http1().request(req).await.expect("the resolver answers");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

async fn backend() -> SocketAddr {
    start_backend("127.0.0.1:0").await
}

/// A loopback port nothing listens on.
fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn a_held_request_signals_demand_and_is_forwarded_the_moment_an_endpoint_is_ready() {
    let h = Harness::start("cold", config()).await;
    h.add_service("web", json!({}), json!({}));
    let host = h.host("web");
    let request = h.spawn_get("web", "/path?q=1");
    h.wait_held("web", 1).await;
    let demand = eventually("a demand signal", WAIT, async || {
        h.demand.signals().first().cloned()
    })
    .await;
    let (who, when) = demand.split_once('=').unwrap();
    assert_eq!(
        who, "cold/es-web",
        "the annotation goes on the ElasticService"
    );
    let when: k8s_openapi::jiff::Timestamp = when.parse().expect("RFC 3339");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!((i64::try_from(now).unwrap() - when.as_second()).abs() < 10);
    assert!(!request.is_finished(), "held, not answered");

    let backend = backend().await;
    h.make_ready("web", backend);
    let (status, headers, body) = tokio::time::timeout(WAIT, request).await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, HELLO);
    assert_eq!(headers["x-seen-uri"], "/path?q=1");
    assert_eq!(headers["x-seen-host"], host.as_str(), "Host kept");
    assert_eq!(headers["x-seen-xfh"], host.as_str());
    assert_eq!(headers["x-seen-xff"], "127.0.0.1");
    assert_eq!(headers["x-seen-xfp"], "http");
    let held: f64 = headers[COLD_START_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(held > 0.0, "{held}");
    assert_eq!(h.held("web"), 0);
    let metrics = h.metrics().await;
    for line in [
        r#"wasmop_resolver_requests_queued_total{namespace="cold",service="web"} 1"#,
        r#"wasmop_resolver_requests_forwarded_total{namespace="cold",service="web",path="cold"} 1"#,
        r#"wasmop_resolver_held_requests{namespace="cold",service="web"} 0"#,
        r#"wasmop_resolver_cold_start_seconds_count{namespace="cold",service="web"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

#[tokio::test]
async fn the_warm_path_keeps_method_headers_body_and_appends_x_forwarded_for() {
    let h = Harness::start("warm", config()).await;
    h.add_service("web", json!({}), json!({}));
    h.make_ready("web", backend().await);
    let req = Request::post(format!("http://{}/echo", h.addr))
        .header("host", "web.warm:80")
        .header("x-custom", "kept")
        .header("x-forwarded-for", "203.0.113.7")
        .header("x-forwarded-host", "shop.example.com")
        .header("connection", "keep-alive, x-drop")
        .header("x-drop", "hop-by-hop")
        .body(Full::new(Bytes::from("the request body")))
        .unwrap();
    let (status, headers, body) = send(req).await;
    assert_eq!(status, 200);
    assert_eq!(body, "the request body");
    assert_eq!(headers["x-seen-method"], "POST");
    assert_eq!(headers["x-seen-custom"], "kept");
    assert_eq!(headers["x-seen-host"], "web.warm:80");
    assert_eq!(headers["x-seen-xff"], "203.0.113.7, 127.0.0.1");
    assert_eq!(
        headers["x-seen-xfh"], "shop.example.com",
        "an earlier proxy's value is kept"
    );
    assert!(!headers.contains_key(COLD_START_HEADER));
    assert!(h.demand.signals().is_empty(), "no demand on the warm path");
    let metrics = h.metrics().await;
    assert!(metrics.contains(
        r#"wasmop_resolver_requests_forwarded_total{namespace="warm",service="web",path="warm"} 1"#
    ));
}

#[tokio::test]
async fn a_full_queue_answers_503_with_retry_after() {
    let mut c = config();
    c.queue_size = 2;
    let h = Harness::start("full", c).await;
    h.add_service("web", json!({}), json!({}));
    let host = h.host("web");
    let held: Vec<_> = (0..2).map(|_| h.spawn_get("web", "/")).collect();
    h.wait_held("web", 2).await;
    let (status, headers, body) = h.get(&host, "/").await;
    assert_eq!(status, 503);
    assert_eq!(headers["retry-after"], "5");
    assert!(
        body.contains("2 requests are already held") && body.contains("--queue-size"),
        "{body}"
    );
    // The held ones are still answered once the service is up.
    h.make_ready("web", backend().await);
    for r in held {
        assert_eq!(r.await.unwrap().0, 200);
    }
}

#[tokio::test]
async fn a_request_held_past_the_timeout_answers_504() {
    let mut c = config();
    c.timeout = Duration::from_millis(300);
    let h = Harness::start("timeout", c).await;
    h.add_service("web", json!({}), json!({}));
    let (status, _, body) = h.get(&h.host("web"), "/").await;
    assert_eq!(status, 504);
    assert!(
        body.contains("no ready endpoint within 300ms (--timeout)"),
        "{body}"
    );
    assert_eq!(h.held("web"), 0, "the queue is left");
    assert!(h.metrics().await.contains(
        r#"wasmop_resolver_requests_rejected_total{namespace="timeout",service="web",reason="timeout"} 1"#
    ));
}

#[tokio::test]
async fn a_forward_failure_answers_502_after_the_connection_retries() {
    let h = Harness::start("broken", config()).await;
    h.add_service("web", json!({}), json!({}));
    let dead = closed_port();
    h.make_ready("web", dead);
    let (status, _, body) = h.get(&h.host("web"), "/").await;
    assert_eq!(status, 502);
    assert!(body.contains("after 3 attempts"), "{body}");
    assert!(
        body.contains(&dead.to_string()) && body.contains("refused"),
        "{body}"
    );
    let failures = format!(
        "wasmop_resolver_connect_failures_total{{namespace=\"{}\",service=\"web\"}} 3\n",
        h.ns
    );
    let metrics = h.metrics().await;
    assert!(metrics.contains(&failures), "{failures} not in\n{metrics}");
}

#[tokio::test]
async fn refused_connections_are_retried_until_the_backend_listens() {
    let mut c = config();
    c.connect.attempts = 30;
    let h = Harness::start("retry", c).await;
    h.add_service("web", json!({}), json!({}));
    let port = closed_port();
    h.make_ready("web", port);
    let request = h.spawn_get("web", "/");
    // The backend listens only once the resolver has been refused.
    let refused = format!(
        "wasmop_resolver_connect_failures_total{{namespace=\"{}\",service=\"web\"}}",
        h.ns
    );
    eventually("a refused connection attempt", WAIT, async || {
        h.metrics().await.contains(&refused).then_some(())
    })
    .await;
    start_backend(&port.to_string()).await;
    let (status, _, body) = tokio::time::timeout(WAIT, request).await.unwrap().unwrap();
    assert_eq!((status.as_u16(), body.as_str()), (200, HELLO));
}

#[tokio::test]
async fn h2c_stays_http2_end_to_end_with_trailers() {
    let h = Harness::start("h2c", config()).await;
    h.add_service("grpc", json!({}), json!({}));
    h.make_ready("grpc", backend().await);
    let stream = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    let frames = futures::stream::iter([
        Ok::<_, Infallible>(Frame::data(Bytes::from("ping"))),
        Ok(Frame::trailers(trailers)),
    ]);
    let req = Request::post(format!("http://{}/echo", h.host("grpc")))
        .header("te", "trailers")
        .body(StreamBody::new(frames))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(
        response.headers()["x-seen-version"],
        "HTTP/2.0",
        "h2c to the backend"
    );
    assert_eq!(
        response.headers()["x-seen-uri"],
        format!("http://{}/echo", h.host("grpc")).as_str(),
        ":authority is the Service's host"
    );
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    assert_eq!(collected.to_bytes(), "ping");
}

#[tokio::test]
async fn bodies_stream_both_ways_without_buffering() {
    let h = Harness::start("stream", config()).await;
    h.add_service("web", json!({}), json!({}));
    h.make_ready("web", backend().await);
    let stream = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
    let req = Request::post("/echo")
        .header("host", h.host("web"))
        .body(StreamBody::new(tokio_stream(rx)))
        .unwrap();
    tx.send(Ok(Frame::data(Bytes::from("one")))).await.unwrap();
    let mut body = sender.send_request(req).await.unwrap().into_body();
    // The first chunk comes back while the request is still open.
    let first = tokio::time::timeout(WAIT, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "one");
    tx.send(Ok(Frame::data(Bytes::from("two")))).await.unwrap();
    let second = tokio::time::timeout(WAIT, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.into_data().unwrap(), "two");
    drop(tx);
    assert!(body.collect().await.unwrap().to_bytes().is_empty());
}

fn tokio_stream<T>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn probe_rules_are_answered_locally_only_while_at_zero() {
    let h = Harness::start("probe", config()).await;
    h.add_service(
        "web",
        json!({"probeResponse": [{"match": {"path": {"value": "/healthz"}}, "response": {"status": 200, "body": "ok"}}]}),
        json!({}),
    );
    let host = h.host("web");
    let (status, _, body) = h.get(&host, "/healthz").await;
    assert_eq!((status.as_u16(), body.as_str()), (200, "ok"));
    let head = Request::head(format!("http://{}/healthz", h.addr))
        .header("host", &host)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, _, body) = send(head).await;
    assert_eq!((status.as_u16(), body.as_str()), (200, ""));
    assert!(
        h.demand.signals().is_empty(),
        "probes do not wake the service"
    );
    h.make_ready("web", backend().await);
    let (_, _, body) = h.get(&host, "/healthz").await;
    assert_eq!(body, HELLO, "once up, probes reach the workload");
}

#[tokio::test]
async fn hosts_that_name_no_known_service_get_clear_errors() {
    let h = Harness::start("hosts", config()).await;
    h.add_service("web", json!({}), json!({}));
    let (status, _, body) = h.get("web", "/").await;
    assert_eq!(status, 400);
    assert!(body.contains("names no namespace"), "{body}");
    let (status, _, body) = h.get("10.96.0.1", "/").await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = h.get("other.hosts", "/").await;
    assert_eq!(status, 404);
    assert!(
        body.contains("no ElasticService for Service other in namespace hosts"),
        "{body}"
    );
    let (status, _, body) = h.get("web.hosts:81", "/").await;
    assert_eq!(status, 404);
    assert!(body.contains("has no TCP port 81"), "{body}");
}

#[tokio::test]
async fn a_configured_host_header_names_the_target() {
    let mut c = config();
    c.host_header = Some(http::HeaderName::from_static("x-envoy-decorator-operation"));
    let h = Harness::start("istio", c).await;
    h.add_service("web", json!({}), json!({}));
    h.make_ready("web", backend().await);
    let req = Request::get(format!("http://{}/", h.addr))
        .header("host", "shop.example.com")
        .header(
            "x-envoy-decorator-operation",
            "web.istio.svc.cluster.local:80/*",
        )
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, headers, _) = send(req).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-seen-host"], "shop.example.com");
}

#[tokio::test]
async fn removing_the_elastic_service_while_held_answers_503() {
    let h = Harness::start("gone", config()).await;
    h.add_service("web", json!({}), json!({}));
    let request = h.spawn_get("web", "/");
    h.wait_held("web", 1).await;
    let es = fixtures::elastic_service("gone", "web", json!({}), json!({}));
    h.catalog().elastic_service_event(Event::Delete(es));
    let (status, headers, body) = tokio::time::timeout(WAIT, request).await.unwrap().unwrap();
    assert_eq!(status, 503);
    assert!(headers.contains_key("retry-after"));
    assert!(
        body.contains("was removed while the request was held"),
        "{body}"
    );
}

#[tokio::test]
async fn in_serve_mode_clients_are_asked_to_reconnect() {
    let h = Harness::start("serve", config()).await;
    h.add_service("web", json!({}), json!({"mode": "serve"}));
    h.make_ready("web", backend().await);
    let (status, headers, _) = h.get(&h.host("web"), "/").await;
    assert_eq!(status, 200);
    assert_eq!(headers["connection"], "close");
}

#[tokio::test]
async fn a_burst_of_200_held_requests_is_answered_in_full() {
    let mut c = config();
    c.release_concurrency = 16;
    let h = Harness::start("burst", c).await;
    h.add_service("web", json!({}), json!({}));
    let host = h.host("web");
    let client = http1();
    let requests: Vec<_> = (0..200)
        .map(|i| {
            let (client, addr, host) = (client.clone(), h.addr, host.clone());
            tokio::spawn(async move {
                let req = Request::post(format!("http://{addr}/echo"))
                    .header("host", host)
                    .body(Full::new(Bytes::from(format!("request {i}"))))
                    .unwrap();
                let response = client.request(req).await.unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, body, i)
            })
        })
        .collect();
    h.wait_held("web", 200).await;
    h.make_ready("web", backend().await);
    for r in requests {
        let (status, body, i) = tokio::time::timeout(WAIT, r).await.unwrap().unwrap();
        assert_eq!(status, 200);
        assert_eq!(body, format!("request {i}"));
    }
    assert_eq!(h.demand.signals().len(), 1, "one signal for the burst");
}

#[tokio::test]
async fn the_dial_map_rewrites_addresses_and_refuses_what_it_does_not_cover() {
    let mut c = config();
    c.connect.map = PrefixMap::new(vec!["127.1.0.0/16=127.0.0.0/16".parse().unwrap()]);
    let h = Harness::start("dialmap", c).await;
    h.add_service("web", json!({}), json!({}));
    h.add_service("api", json!({}), json!({}));
    // "The pod" 127.1.2.3 is reached at 127.0.2.3, where the backend listens.
    let backend = start_backend("127.0.2.3:0").await;
    h.make_ready(
        "web",
        SocketAddr::new("127.1.2.3".parse().unwrap(), backend.port()),
    );
    let (status, _, body) = h.get(&h.host("web"), "/").await;
    assert_eq!((status.as_u16(), body.as_str()), (200, HELLO));
    h.make_ready("api", backend);
    let (status, _, body) = h.get(&h.host("api"), "/").await;
    assert_eq!(status, 502);
    assert!(body.contains("not covered by --dial-prefix-map"), "{body}");
}

#[tokio::test]
async fn readiness_waits_for_the_first_listing() {
    let resolver = Resolver::new(
        config(),
        Catalog::new(),
        Arc::new(RecordedDemand::default()),
    );
    let ready = async |r: &Resolver| {
        r.admin_router()
            .oneshot(
                Request::get("/readyz")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap()
            .status()
    };
    assert_eq!(ready(&resolver).await, 503);
    resolver.catalog().mark_synced();
    assert_eq!(ready(&resolver).await, 200);
}

/// A raw connection to the resolver at `addr`.
async fn raw(addr: SocketAddr) -> tokio::net::TcpStream {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Reads until `done` holds for what was read, or the peer closes; bounded by [`WAIT`].
async fn read_until(stream: &mut tokio::net::TcpStream, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(WAIT, async {
        while !done(&seen) {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the resolver answers or closes in time");
    seen
}

#[tokio::test]
async fn the_protocol_is_told_by_the_first_bytes_even_when_they_come_in_pieces() {
    use tokio::io::AsyncWriteExt;
    let h = Harness::start("pieces", config()).await;
    h.add_service("web", json!({}), json!({}));
    h.make_ready("web", backend().await);

    // HTTP/1.1 whose first segment is a single byte.
    let mut stream = raw(h.addr).await;
    stream.write_all(b"G").await.unwrap();
    let rest = format!("ET / HTTP/1.1\r\nhost: {}\r\n\r\n", h.host("web"));
    stream.write_all(rest.as_bytes()).await.unwrap();
    let answer = read_until(&mut stream, |seen| seen.ends_with(HELLO.as_bytes())).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");

    // The h2c preface in two segments, then an empty SETTINGS frame: the resolver answers
    // with its own SETTINGS frame (type 4 on stream 0), as an HTTP/2 server does.
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut stream = raw(h.addr).await;
    stream.write_all(&preface[..10]).await.unwrap();
    stream.write_all(&preface[10..]).await.unwrap();
    stream
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    let frame = read_until(&mut stream, |seen| seen.len() >= 9).await;
    assert!(frame.len() >= 9, "no frame: {frame:?}");
    assert_eq!(
        (frame[3], &frame[5..9]),
        (4, &[0u8, 0, 0, 0][..]),
        "{frame:?}"
    );
}

#[tokio::test]
async fn a_client_that_goes_away_while_held_leaves_the_queue() {
    use tokio::io::AsyncWriteExt;
    let h = Harness::start("gone-client", config()).await;
    h.add_service("web", json!({}), json!({}));
    let mut stream = raw(h.addr).await;
    let request = format!("GET / HTTP/1.1\r\nhost: {}\r\n\r\n", h.host("web"));
    stream.write_all(request.as_bytes()).await.unwrap();
    h.wait_held("web", 1).await;
    drop(stream);
    h.wait_held("web", 0).await;
}

#[tokio::test]
async fn shutdown_closes_idle_connections_at_once_and_lets_held_requests_finish() {
    use tokio::io::AsyncReadExt;
    let catalog = Catalog::new();
    catalog.mark_synced();
    let resolver = Resolver::new(config(), catalog, Arc::new(RecordedDemand::default()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = resolver.clone();
    let grace = Duration::from_secs(30);
    let served = tokio::spawn(async move {
        serving
            .serve(
                listener,
                async {
                    let _ = stopped.await;
                },
                grace,
            )
            .await
    });
    let h = Harness {
        ns: "shutdown".into(),
        addr,
        resolver,
        demand: Arc::new(RecordedDemand::default()),
    };
    h.add_service("web", json!({}), json!({}));
    let mut idle = raw(addr).await;
    let held = h.spawn_get("web", "/");
    h.wait_held("web", 1).await;

    stop.send(()).unwrap();
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(WAIT, idle.read(&mut byte))
        .await
        .expect("the idle connection is closed at once");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    assert!(h.resolver.is_stopping());
    assert!(!held.is_finished(), "the held request is still held");

    h.make_ready("web", backend().await);
    let (status, _, body) = tokio::time::timeout(WAIT, held).await.unwrap().unwrap();
    assert_eq!((status, body.as_str()), (StatusCode::OK, HELLO));
    tokio::time::timeout(WAIT, served)
        .await
        .expect("serve returns once the last connection has finished, well within the grace")
        .unwrap()
        .unwrap();
}

/// Reads what the peer sends until it closes the connection: (what it sent, how long it took).
/// Panics when it is still open after `bound`.
async fn read_to_close(stream: &mut tokio::net::TcpStream, bound: Duration) -> (Vec<u8>, Duration) {
    use tokio::io::AsyncReadExt;
    let start = std::time::Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(bound, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the connection is still open after {bound:?}; it sent {:?}",
            String::from_utf8_lossy(&seen)
        )
    });
    (seen, start.elapsed())
}

/// An HTTP/2 frame: 9-byte header (length, type, flags, stream) and payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The h2c preface followed by an empty SETTINGS frame.
fn h2_start() -> Vec<u8> {
    let mut start = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    start.extend(h2_frame(4, 0, 0, &[]));
    start
}

#[tokio::test]
async fn connections_that_send_nothing_stall_in_a_head_or_idle_are_closed() {
    use tokio::io::AsyncWriteExt;
    let timeout = Duration::from_millis(300);
    let mut c = config();
    c.header_read_timeout = timeout;
    let h = Harness::start("stall", c).await;
    h.add_service("web", json!({}), json!({}));
    h.make_ready("web", backend().await);
    let bound = Duration::from_secs(5);
    let host = h.host("web");

    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("nothing sent", Vec::new()),
        ("half a request line", b"GET /pa".to_vec()),
        (
            "a head without its final line",
            format!("GET / HTTP/1.1\r\nhost: {host}\r\n").into_bytes(),
        ),
        ("a part of the h2c preface", b"PRI * HTTP/2.0\r\n".to_vec()),
        ("the h2c preface and nothing more", h2_start()),
    ];
    // HEADERS without END_HEADERS, its CONTINUATION never sent.
    let mut headers = h2_start();
    headers.extend(h2_frame(1, 0x1, 1, &[0x82, 0x86, 0x84]));
    cases.push(("h2c request headers cut short", headers));
    for (what, sent) in cases {
        let mut stream = raw(h.addr).await;
        stream.write_all(&sent).await.unwrap();
        let (_, took) = read_to_close(&mut stream, bound).await;
        assert!(
            took >= timeout - Duration::from_millis(50),
            "{what}: closed after {took:?}"
        );
    }

    // A keep-alive connection is closed once it has been idle that long after its answer.
    let mut stream = raw(h.addr).await;
    let request = format!("GET / HTTP/1.1\r\nhost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (answer, _) = read_to_close(&mut stream, bound).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with(HELLO),
        "{answer}"
    );

    // So is an h2c connection after its last stream.
    let stream = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = Request::get(format!("http://{host}/"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.unwrap();
    tokio::time::timeout(bound, conn)
        .await
        .expect("the idle h2c connection is closed")
        .unwrap()
        .expect("with GOAWAY, not an error");
}

#[tokio::test]
async fn a_request_held_longer_than_the_header_read_timeout_keeps_its_connection() {
    let mut c = config();
    c.header_read_timeout = Duration::from_millis(200);
    let h = Harness::start("longheld", c).await;
    h.add_service("web", json!({}), json!({}));
    let http1 = h.spawn_get("web", "/");
    let stream = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::get(format!("http://{}/", h.host("web")))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let h2 = tokio::spawn(async move { sender.send_request(req).await });
    h.wait_held("web", 2).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    h.make_ready("web", backend().await);
    let (status, _, body) = tokio::time::timeout(WAIT, http1).await.unwrap().unwrap();
    assert_eq!((status.as_u16(), body.as_str()), (200, HELLO));
    let response = tokio::time::timeout(WAIT, h2)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// A backend whose `/big` answer is far more than socket buffers hold; `ok` elsewhere.
async fn big_backend() -> SocketAddr {
    static CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let body = if req.uri().path() == "/big" {
                            let chunks = futures::stream::iter((0..1024).map(|_| {
                                Ok::<_, Infallible>(Frame::data(Bytes::from_static(&CHUNK)))
                            }));
                            http_body_util::Either::Left(StreamBody::new(chunks))
                        } else {
                            http_body_util::Either::Right(Full::new(Bytes::from_static(b"ok")))
                        };
                        Ok::<_, Infallible>(http::Response::new(body))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_client_that_never_reads_its_answer_keeps_no_release_slot() {
    use tokio::io::AsyncWriteExt;
    let mut c = config();
    c.release_concurrency = 1;
    let h = Harness::start("slowreader", c).await;
    h.add_service("web", json!({}), json!({}));
    let backend = big_backend().await;
    // Held, released into the only slot, answered with 64 MiB that it never reads.
    let mut stalled = raw(h.addr).await;
    let request = format!("GET /big HTTP/1.1\r\nhost: {}\r\n\r\n", h.host("web"));
    stalled.write_all(request.as_bytes()).await.unwrap();
    h.wait_held("web", 1).await;
    h.make_ready("web", backend);
    let forwarded = r#"wasmop_resolver_requests_forwarded_total{namespace="slowreader",service="web",path="cold"} 1"#;
    eventually("the stalled request's answer", WAIT, async || {
        h.metrics().await.contains(forwarded).then_some(())
    })
    .await;

    // At zero again: the next requests are held, and need the slot once it is ready.
    h.catalog()
        .endpoint_slice_event(Event::Delete(fixtures::ready_slice(&h.ns, "web", backend)));
    let others: Vec<_> = (0..3).map(|_| h.spawn_get("web", "/")).collect();
    h.wait_held("web", 3).await;
    h.make_ready("web", backend);
    for other in others {
        let (status, _, body) = tokio::time::timeout(WAIT, other)
            .await
            .expect("the slot is not kept by the client that does not read")
            .unwrap();
        assert_eq!((status.as_u16(), body.as_str()), (200, "ok"));
    }
    drop(stalled);
}

#[tokio::test]
async fn on_shutdown_every_held_request_is_answered_503_with_retry_after() {
    use tokio::io::AsyncWriteExt;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let grace = Duration::from_millis(500);
    let (h, served) = Harness::start_until(
        "drain",
        config(),
        async {
            let _ = stopped.await;
        },
        grace,
    )
    .await;
    h.add_service("web", json!({}), json!({}));
    h.add_service("api", json!({}), json!({}));
    let mut clients = Vec::new();
    for service in ["web", "web", "api"] {
        let mut stream = raw(h.addr).await;
        let request = format!("GET / HTTP/1.1\r\nhost: {}\r\n\r\n", h.host(service));
        stream.write_all(request.as_bytes()).await.unwrap();
        clients.push(stream);
    }
    let stream = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::get(format!("http://{}/", h.host("api")))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let h2 = tokio::spawn(async move { sender.send_request(req).await });
    h.wait_held("web", 2).await;
    h.wait_held("api", 2).await;

    let stopped_at = std::time::Instant::now();
    stop.send(()).unwrap();
    for mut client in clients {
        let (answer, _) = read_to_close(&mut client, WAIT).await;
        let took = stopped_at.elapsed();
        let answer = String::from_utf8_lossy(&answer).to_lowercase();
        assert!(
            answer.starts_with("http/1.1 503 service unavailable\r\n"),
            "{answer}"
        );
        assert!(answer.contains("\r\nretry-after: 5\r\n"), "{answer}");
        assert!(answer.contains("shutting down"), "{answer}");
        assert!(
            took >= grace - Duration::from_millis(100),
            "held through the grace: {took:?}"
        );
    }
    let response = tokio::time::timeout(WAIT, h2)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    tokio::time::timeout(WAIT, served)
        .await
        .expect("serve returns once the answers are out")
        .unwrap()
        .unwrap();
    assert_eq!(h.resolver.queues().held_total(), 0);
    assert!(h.metrics().await.contains(
        r#"wasmop_resolver_requests_rejected_total{namespace="drain",service="api",reason="shutdown"} 2"#
    ));
}

#[tokio::test]
async fn max_held_caps_held_requests_across_services() {
    let mut c = config();
    c.queue_size = 2;
    c.max_held = 3;
    let h = Harness::start("maxheld", c).await;
    for service in ["web", "api", "new"] {
        h.add_service(service, json!({}), json!({}));
    }
    let held: Vec<_> = ["web", "web", "api"]
        .iter()
        .map(|s| h.spawn_get(s, "/"))
        .collect();
    h.wait_held("web", 2).await;
    h.wait_held("api", 1).await;
    // A service with an empty queue is refused at once: the cap is across all services.
    let (status, headers, body) = tokio::time::timeout(WAIT, h.get(&h.host("new"), "/"))
        .await
        .expect("refused at once, not held");
    assert_eq!(status, 503);
    assert_eq!(headers["retry-after"], "5");
    assert!(body.contains("--max-held"), "{body}");
    assert!(h.metrics().await.contains(
        r#"wasmop_resolver_requests_rejected_total{namespace="maxheld",service="new",reason="max_held"} 1"#
    ));
    // Warm services are not held, so not capped.
    h.make_ready("new", backend().await);
    assert_eq!(h.get(&h.host("new"), "/").await.0, 200);
    // Room again once some are answered; --queue-size still applies per service.
    h.make_ready("api", backend().await);
    h.make_ready("web", backend().await);
    for r in held {
        assert_eq!(tokio::time::timeout(WAIT, r).await.unwrap().unwrap().0, 200);
    }
    assert_eq!(h.resolver.queues().held_total(), 0);
}

#[tokio::test]
async fn endpoint_slices_of_other_managers_are_not_forwarded_to() {
    let h = Harness::start("forged", config()).await;
    h.add_service("web", json!({}), json!({}));
    let elsewhere = backend().await;
    // A namespace user's slice for the private Service, pointing where it likes.
    for manager in ["someone-else", ""] {
        h.catalog()
            .endpoint_slice_event(Event::Apply(fixtures::slice_managed_by(
                manager, &h.ns, "web", elsewhere,
            )));
        let request = h.spawn_get("web", "/");
        h.wait_held("web", 1).await;
        assert!(!request.is_finished());
        // The EndpointSlice controller's slice is what counts.
        h.make_ready("web", backend().await);
        assert_eq!(
            tokio::time::timeout(WAIT, request)
                .await
                .unwrap()
                .unwrap()
                .0,
            200
        );
        h.catalog()
            .endpoint_slice_event(Event::Delete(fixtures::ready_slice(
                &h.ns, "web", elsewhere,
            )));
    }
    let forwarded = r#"wasmop_resolver_requests_forwarded_total{namespace="forged",service="web",path="cold"} 2"#;
    assert!(h.metrics().await.contains(forwarded));
}

#[tokio::test]
async fn ambiguous_http1_framing_is_refused_with_400_and_the_connection_closed() {
    use tokio::io::AsyncWriteExt;
    let h = Harness::start("framing", config()).await;
    h.add_service("web", json!({}), json!({}));
    h.make_ready("web", backend().await);
    let host = h.host("web");
    let good = format!("POST /echo HTTP/1.1\r\nhost: {host}\r\ncontent-length: 2\r\n\r\nhi");
    for (what, fields) in [
        (
            "Content-Length, then Transfer-Encoding",
            "content-length: 5\r\ntransfer-encoding: chunked",
        ),
        (
            "Transfer-Encoding, then Content-Length",
            "transfer-encoding: chunked\r\ncontent-length: 5",
        ),
        (
            "two equal Content-Lengths",
            "content-length: 5\r\ncontent-length: 5",
        ),
        (
            "two different Content-Lengths",
            "content-length: 5\r\ncontent-length: 6",
        ),
    ] {
        let bad = format!("POST /echo HTTP/1.1\r\nhost: {host}\r\n{fields}\r\n\r\n0\r\n\r\nhello");
        // Alone, and after a good request on the same connection.
        for sent in [bad.clone(), format!("{good}{bad}")] {
            let mut stream = raw(h.addr).await;
            stream.write_all(sent.as_bytes()).await.unwrap();
            let (answer, _) = read_to_close(&mut stream, WAIT).await;
            let answer = String::from_utf8_lossy(&answer);
            let last = answer.rfind("HTTP/1.1 ").unwrap();
            assert!(
                answer[last..].starts_with("HTTP/1.1 400 Bad Request\r\n"),
                "{what}: {answer}"
            );
            assert_eq!(
                answer.matches("HTTP/1.1 200 OK").count(),
                usize::from(sent.starts_with(&good)),
                "{what}: only the good request is forwarded: {answer}"
            );
        }
    }
    let metrics = h.metrics().await;
    let forwarded = r#"wasmop_resolver_requests_forwarded_total{namespace="framing",service="web",path="warm"} 4"#;
    assert!(metrics.contains(forwarded), "{metrics}");
}

/// A keep-alive HTTP/1.1 backend on loopback that answers 200 and counts the requests it gets.
async fn counting_backend() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async { Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new()))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, count)
}

#[tokio::test]
async fn a_pod_that_turns_unready_gets_no_more_requests_over_kept_alive_connections() {
    use std::sync::atomic::Ordering::SeqCst;
    let h = Harness::start("churn", config()).await;
    h.add_service("web", json!({}), json!({}));
    let ((one, ones), (two, twos)) = (counting_backend().await, counting_backend().await);
    // Two slices of the private Service, one ready pod each.
    let slice = |endpoint: SocketAddr, name: &str, ready: bool| {
        let mut s = fixtures::ready_slice(&h.ns, "web", endpoint);
        s.metadata.name = Some(name.into());
        s.endpoints.as_mut().unwrap()[0]
            .conditions
            .as_mut()
            .unwrap()
            .ready = Some(ready);
        s
    };
    h.catalog()
        .endpoint_slice_event(Event::Apply(slice(one, "web-one", true)));
    h.catalog()
        .endpoint_slice_event(Event::Apply(slice(two, "web-two", true)));
    // One keep-alive client: the resolver keeps a connection to each pod between requests.
    let client = http1();
    let get = async || {
        let req = Request::get(format!("http://{}/", h.addr))
            .header("host", h.host("web"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = client.request(req).await.expect("the resolver answers");
        let status = response.status();
        response.into_body().collect().await.unwrap();
        status
    };
    for _ in 0..20 {
        assert_eq!(get().await, StatusCode::OK);
    }
    let (before_one, before_two) = (ones.load(SeqCst), twos.load(SeqCst));
    assert_eq!(before_one + before_two, 20);
    assert!(
        before_one >= 5 && before_two >= 5,
        "requests spread over both ready pods: {before_one} and {before_two}"
    );

    // The second pod turns unready mid-stream: every later request goes to the first.
    h.catalog()
        .endpoint_slice_event(Event::Apply(slice(two, "web-two", false)));
    for _ in 0..20 {
        assert_eq!(get().await, StatusCode::OK);
    }
    assert_eq!(
        twos.load(SeqCst),
        before_two,
        "no request reached the unready pod"
    );
    assert_eq!(ones.load(SeqCst), before_one + 20);
}
