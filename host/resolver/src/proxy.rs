//! The request path of the resolver: find the target, answer, hold or forward.
//!
//! ```text
//! request ─► Host ─► catalog ─► ready endpoint? ── yes ──────────────────────────► forward (warm)
//!                                    │ no
//!                                    ├─ probeResponse rule matches ─► local answer
//!                                    └─ hold (bounded per service) ─► demand annotation
//!                                           │ EndpointSlice watch wakes it
//!                                           └─► release slot ─► forward (cold)
//! ```
//!
//! Every request gets an answer: the backend's, a probe answer, or a clear error: 400 (the Host
//! names no Service), 404 (no ElasticService, Service or port), 502 (forwarding failed after
//! the connection retries), 503 with `Retry-After` (the service's queue or all queues full,
//! the service was removed while held, or the resolver is shutting down), 504 (held past
//! `--timeout`). Bodies and trailers stream both ways; HTTP/2
//! requests (h2c) go to the backend over h2c, HTTP/1 requests over HTTP/1.1, as upstream
//! (docs/resolver.md).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{CONNECTION, HOST, HeaderName, HeaderValue, RETRY_AFTER, TE};
use http::{HeaderMap, Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::catalog::{Catalog, Lookup, Route};
use super::demand::{self, DemandSink};
use super::dial::PrefixMap;
use super::host::{ParsedHost, Target, parse_host};
use super::metrics;
use super::pool::Pools;
use super::queue::{QueueFull, Queues};

/// The body of every answer: the backend's, streamed, or a local one.
pub(crate) type ProxyBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// The response header that tells how long a request was held, in seconds (e.g. `1.042`), as
/// the KEDA HTTP add-on's `X-KEDA-HTTP-Cold-Start`.
pub const COLD_START_HEADER: &str = "x-wasmop-cold-start";

/// How the resolver dials endpoints: upstream retried 15 times from 50 ms, ×1.4 each time
/// (docs/resolver.md).
#[derive(Clone, Debug)]
pub struct ConnectPolicy {
    /// Connection attempts per new connection (at least 1).
    pub attempts: u32,
    /// Wait after the first failed attempt; it grows ×1.4 up to `max_backoff`.
    pub backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// Time allowed for one TCP connect.
    pub connect_timeout: Duration,
    /// `--dial-prefix-map` (development and tests only).
    pub map: PrefixMap,
}

impl Default for ConnectPolicy {
    fn default() -> Self {
        Self {
            attempts: 15,
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            map: PrefixMap::default(),
        }
    }
}

/// Settings of the request path (the flags of `wasmop resolver`, see `ResolverOptions`).
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Header read for the target before `Host` (e.g. `x-envoy-decorator-operation`).
    pub host_header: Option<HeaderName>,
    /// Requests held per service at most; more get 503.
    pub queue_size: usize,
    /// Requests held across all services at most; more get 503.
    pub max_held: usize,
    /// Time allowed for a request head to arrive, from the connection's start or the end of its
    /// last request; a connection that sends nothing, part of a head, or sits idle for this
    /// long is closed (HTTP/1 and h2c).
    pub header_read_timeout: Duration,
    /// How long a request is held for a ready endpoint before 504.
    pub timeout: Duration,
    /// `Retry-After` of 503 answers (rounded up to whole seconds).
    pub retry_after: Duration,
    /// Held requests of one service forwarded at the same time at most.
    pub release_concurrency: usize,
    /// Demand annotations per service at most once per this interval.
    pub demand_interval: Duration,
    /// How endpoints are dialed.
    pub connect: ConnectPolicy,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            host_header: None,
            queue_size: 1000,
            max_held: 10_000,
            header_read_timeout: Duration::from_secs(30),
            timeout: Duration::from_secs(120),
            retry_after: Duration::from_secs(5),
            release_concurrency: 100,
            demand_interval: Duration::from_secs(2),
            connect: ConnectPolicy::default(),
        }
    }
}

/// The resolver's request path; cheap to clone.
#[derive(Clone)]
pub struct Resolver {
    shared: Arc<Shared>,
}

struct Shared {
    config: ProxyConfig,
    catalog: Arc<Catalog>,
    queues: Queues,
    sink: Arc<dyn DemandSink>,
    pools: Pools,
    phase: watch::Sender<Phase>,
}

/// How far a shutdown has come (`Resolver::serve`); each phase includes the ones before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Accepting and answering.
    Serving,
    /// Unready, no longer accepting; open connections are asked to close once their requests
    /// are answered, and held requests are still forwarded if an endpoint turns ready.
    Stopping,
    /// The grace period is over: requests still held are answered 503 with `Retry-After`.
    Answering,
    /// Connections still open are closed.
    Closed,
}

impl Resolver {
    /// A resolver answering from `catalog` and signalling demand to `sink`.
    pub fn new(config: ProxyConfig, catalog: Arc<Catalog>, sink: Arc<dyn DemandSink>) -> Self {
        metrics::init();
        let pools = Pools::new(catalog.clone(), config.connect.clone());
        Self {
            shared: Arc::new(Shared {
                queues: Queues::new(
                    config.queue_size,
                    config.release_concurrency,
                    config.max_held,
                ),
                config,
                catalog,
                sink,
                pools,
                phase: watch::Sender::new(Phase::Serving),
            }),
        }
    }

    /// The catalog it answers from.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.shared.catalog
    }

    /// Its queues (held request counts).
    pub fn queues(&self) -> &Queues {
        &self.shared.queues
    }

    /// Whether it is shutting down (readiness fails so that no new traffic is sent to it).
    pub fn is_stopping(&self) -> bool {
        *self.shared.phase.borrow() >= Phase::Stopping
    }

    /// Moves the shutdown on to `phase` (never back).
    pub(crate) fn set_phase(&self, phase: Phase) {
        self.shared.phase.send_if_modified(|p| {
            let later = phase > *p;
            if later {
                *p = phase;
            }
            later
        });
    }

    /// A receiver of the shutdown's phase.
    pub(crate) fn phase(&self) -> watch::Receiver<Phase> {
        self.shared.phase.subscribe()
    }

    /// The request path's settings.
    pub(crate) fn config(&self) -> &ProxyConfig {
        &self.shared.config
    }

    fn host_of<'r>(&self, req: &'r Request<Incoming>) -> Option<&'r str> {
        let header = |name: &HeaderName| req.headers().get(name).and_then(|v| v.to_str().ok());
        self.shared
            .config
            .host_header
            .as_ref()
            .and_then(header)
            .or_else(|| header(&HOST))
            .or_else(|| req.uri().authority().map(|a| a.as_str()))
    }

    /// Answers one request from `peer`.
    ///
    /// The future owns the resolver handle, so that it is the only one to own the request:
    /// while a request is held, its future is its whole state, and only the waiting part of
    /// `Resolver::hold` adds to it. Forwarding is boxed, so a held request does not carry
    /// its state until it is released.
    pub async fn handle(self, req: Request<Incoming>, peer: SocketAddr) -> Response<ProxyBody> {
        let arrived = Instant::now();
        let arrived_at = SystemTime::now();
        let parsed = match parse_host(self.host_of(&req).unwrap_or("")) {
            Ok(p) => p,
            Err(e) => {
                metrics::rejected("", "", "bad_host");
                return text(StatusCode::BAD_REQUEST, e.to_string());
            }
        };
        let catalog = &self.shared.catalog;
        let deadline = arrived + self.shared.config.timeout;
        if !catalog.is_synced() {
            let mut phase = self.phase();
            tokio::select! {
                () = catalog.wait_synced() => {}
                () = tokio::time::sleep_until(deadline.into()) => {
                    metrics::rejected("", "", "not_synced");
                    return self.retry_later(
                        "the resolver has not yet listed ElasticServices, Services and EndpointSlices (see its log)".into(),
                    );
                }
                () = answering(&mut phase) => return self.shutting_down("", ""),
            }
        }
        let target = &parsed.target;
        let route = match catalog.lookup(target) {
            Lookup::Found(route) => route,
            other => return not_found(target, &other),
        };
        if !route.endpoints.is_empty() {
            return Box::pin(self.forward(req, &parsed, &route, peer, None)).await;
        }
        if let Some((status, body)) =
            route
                .elastic
                .probes
                .answer(req.method(), req.uri(), req.headers())
        {
            metrics::probe(&target.namespace, &target.service);
            return local(status, body);
        }
        match self.hold(&parsed.target, &route, arrived, arrived_at).await {
            // Boxed: a held request's future stays small until it is forwarded.
            Ok((route, slot)) => {
                Box::pin(self.forward(req, &parsed, &route, peer, Some((arrived, slot)))).await
            }
            Err(answer) => answer,
        }
    }

    /// 503 with `Retry-After` for a request still held when the shutdown's grace is over.
    fn shutting_down(&self, ns: &str, svc: &str) -> Response<ProxyBody> {
        metrics::rejected(ns, svc, "shutdown");
        self.retry_later(
            "this resolver replica is shutting down and the request was not yet forwarded (--shutdown-grace); retry".into(),
        )
    }

    /// 503 with `Retry-After`.
    fn retry_later(&self, message: String) -> Response<ProxyBody> {
        let mut response = text(StatusCode::SERVICE_UNAVAILABLE, message);
        let secs = self.shared.config.retry_after.as_secs_f64().ceil().max(1.0);
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs as u64));
        response
    }

    /// Holds a request for `target` until it has a ready endpoint, then waits for a release
    /// slot: the route to forward to and the slot, or the answer when it is not forwarded
    /// (queue full, timeout, service gone).
    async fn hold(
        &self,
        target: &Target,
        route: &Route,
        arrived: Instant,
        arrived_at: SystemTime,
    ) -> Result<(Route, OwnedSemaphorePermit), Response<ProxyBody>> {
        let shared = &self.shared;
        let (ns, svc) = (target.namespace.as_str(), target.service.as_str());
        let admitted = match shared.queues.admit(ns, svc, arrived_at) {
            Ok(a) => a,
            Err(QueueFull::Service { held }) => {
                metrics::rejected(ns, svc, "queue_full");
                return Err(self.retry_later(format!(
                    "{held} requests are already held for {target} while it scales up from zero (--queue-size); retry later"
                )));
            }
            Err(QueueFull::Resolver { held }) => {
                metrics::rejected(ns, svc, "max_held");
                return Err(self.retry_later(format!(
                    "{held} requests are already held across all services (--max-held); {target} is scaled to zero, retry later"
                )));
            }
        };
        let queue = admitted.held.queue().clone();
        if admitted.start_demand {
            tokio::spawn(demand::run(
                queue.clone(),
                shared.catalog.clone(),
                shared.sink.clone(),
                shared.config.demand_interval,
            ));
        }
        tracing::debug!(%target, held = queue.len(), "holding a request until an endpoint is ready");
        let mut phase = self.phase();
        let mut public = shared.catalog.subscribe(ns, svc);
        let mut private_name = route.elastic.private_service.clone();
        let mut private = shared.catalog.subscribe(ns, &private_name);
        let deadline = tokio::time::Instant::from_std(arrived + shared.config.timeout);
        let route = loop {
            match shared.catalog.lookup(target) {
                Lookup::Found(r) if !r.endpoints.is_empty() => break r,
                Lookup::Found(r) => {
                    if r.elastic.private_service != private_name {
                        private_name.clone_from(&r.elastic.private_service);
                        private = shared.catalog.subscribe(ns, &private_name);
                    }
                }
                _ => {
                    metrics::rejected(ns, svc, "gone");
                    return Err(self.retry_later(format!(
                        "the ElasticService or Service of {target} was removed while the request was held; retry"
                    )));
                }
            }
            tokio::select! {
                changed = public.changed() => if changed.is_err() {
                    public = shared.catalog.subscribe(ns, svc);
                },
                changed = private.changed() => if changed.is_err() {
                    private = shared.catalog.subscribe(ns, &private_name);
                },
                () = answering(&mut phase) => return Err(self.shutting_down(ns, svc)),
                () = tokio::time::sleep_until(deadline) => {
                    metrics::rejected(ns, svc, "timeout");
                    return Err(text(
                        StatusCode::GATEWAY_TIMEOUT,
                        format!(
                            "{target} had no ready endpoint within {:?} (--timeout) of the request's arrival; it was held and not forwarded",
                            shared.config.timeout
                        ),
                    ));
                }
            }
        };
        let slot = tokio::select! {
            slot = queue.release() => slot,
            () = answering(&mut phase) => return Err(self.shutting_down(ns, svc)),
        };
        drop(admitted.held);
        Ok((route, slot))
    }

    async fn forward(
        &self,
        mut req: Request<Incoming>,
        parsed: &ParsedHost,
        route: &Route,
        peer: SocketAddr,
        cold: Option<(Instant, OwnedSemaphorePermit)>,
    ) -> Response<ProxyBody> {
        let target = &parsed.target;
        let (ns, svc) = (target.namespace.as_str(), target.service.as_str());
        let h2 = req.version() == Version::HTTP_2;
        if let Err(e) = prepare_request(&mut req, &parsed.authority, peer, h2) {
            metrics::rejected(ns, svc, "forward_failed");
            return text(
                StatusCode::BAD_GATEWAY,
                format!("cannot forward to {target}: {e}"),
            );
        }
        let Some((endpoint, client)) = self.shared.pools.pick(target, route, h2) else {
            metrics::rejected(ns, svc, "forward_failed");
            return text(
                StatusCode::BAD_GATEWAY,
                format!("cannot forward to {target}: it has no ready endpoint"),
            );
        };
        let (sent, held) = match cold {
            None => (client.request(req).await, None),
            Some((arrived, slot)) => (
                until_head(client.request(req), slot, self.shared.config.timeout).await,
                Some(arrived.elapsed()),
            ),
        };
        match sent {
            Ok(response) => {
                metrics::forwarded(ns, svc, held);
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers, false);
                if let Some(held) = held
                    && let Ok(v) = HeaderValue::from_str(&format!("{:.3}", held.as_secs_f64()))
                {
                    parts.headers.insert(COLD_START_HEADER, v);
                }
                if route.elastic.serve_mode && !h2 {
                    // The public Service no longer routes to the resolver: make the client
                    // reconnect, so that its next request goes to the workload directly.
                    parts
                        .headers
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                Response::from_parts(parts, body.boxed_unsync())
            }
            Err(e) => {
                metrics::rejected(ns, svc, "forward_failed");
                tracing::warn!(%target, %endpoint, "forwarding failed: {}", chain(&e));
                text(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "cannot forward the request to {target} (endpoint {endpoint}): {}",
                        chain(&e)
                    ),
                )
            }
        }
    }
}

/// Resolves once the shutdown's grace is over (or the resolver is gone).
async fn answering(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p >= Phase::Answering).await;
}

/// Waits for the backend's response head to `sent`, holding the release `slot` until it has
/// arrived or `bound` has passed, whichever is first: the slot limits what a fresh pod is
/// handed at once, and neither a client that never reads its response nor one that never
/// finishes sending its request can keep it.
async fn until_head<F: Future>(sent: F, slot: OwnedSemaphorePermit, bound: Duration) -> F::Output {
    let mut sent = std::pin::pin!(sent);
    tokio::select! {
        head = &mut sent => head,
        () = tokio::time::sleep(bound) => {
            drop(slot);
            sent.await
        }
    }
}

/// 404 for a lookup that found no route.
fn not_found(target: &Target, lookup: &Lookup) -> Response<ProxyBody> {
    let (reason, message) = match lookup {
        Lookup::NoElasticService => (
            "unknown_service",
            format!(
                "no ElasticService for Service {} in namespace {} is known to the resolver",
                target.service, target.namespace
            ),
        ),
        Lookup::NoService => (
            "unknown_service",
            format!(
                "Service {} in namespace {} does not exist",
                target.service, target.namespace
            ),
        ),
        Lookup::NoPort { available } => (
            "unknown_port",
            format!(
                "Service {} in namespace {} has no TCP port {} (it has {available:?}); name the port in the Host, e.g. {}.{}:{}",
                target.service,
                target.namespace,
                target.port.unwrap_or(80),
                target.service,
                target.namespace,
                available.first().copied().unwrap_or(80)
            ),
        ),
        Lookup::Found(_) => ("unknown_service", String::new()),
    };
    // Unknown services count without labels: the Host is the client's to choose.
    if reason == "unknown_port" {
        metrics::rejected(&target.namespace, &target.service, reason);
    } else {
        metrics::rejected("", "", reason);
    }
    text(StatusCode::NOT_FOUND, message)
}

/// A local plain-text answer (the message gets a final newline).
fn text(status: StatusCode, message: String) -> Response<ProxyBody> {
    let mut response = local(status, Bytes::from(format!("{message}\n")));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn local(status: StatusCode, body: Bytes) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(body)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response
}

/// `e` and its sources, joined by `: `.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), which a proxy does not pass on.
const HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    http::header::PROXY_AUTHENTICATE,
    http::header::PROXY_AUTHORIZATION,
    TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
];

/// Removes hop-by-hop headers and those named in `Connection`; keeps `te: trailers` when
/// `keep_te_trailers` (HTTP/2, where gRPC needs it).
fn strip_hop_by_hop(headers: &mut HeaderMap, keep_te_trailers: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    let te_trailers = keep_te_trailers
        && headers.get_all(TE).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim() == "trailers"))
        });
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    if te_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
}

/// Turns the received request into the forwarded one: hop-by-hop headers removed,
/// `X-Forwarded-For` extended with the peer, `X-Forwarded-Host` (the client's Host, unless an
/// earlier proxy set it) and `X-Forwarded-Proto` set, the URI made absolute with the target's
/// authority (the connector maps it back to the target's endpoints). HTTP/1 keeps the `Host`
/// header as received; HTTP/2 carries the authority in `:authority`.
fn prepare_request(
    req: &mut Request<Incoming>,
    authority: &str,
    peer: SocketAddr,
    h2: bool,
) -> Result<(), http::Error> {
    let original_host = req.headers().get(HOST).cloned().or_else(|| {
        req.uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    *req.uri_mut() = Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(path)
        .build()?;
    *req.version_mut() = if h2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    let headers = req.headers_mut();
    strip_hop_by_hop(headers, h2);
    let peer_ip = peer.ip().to_string();
    let forwarded_for = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .chain(std::iter::once(peer_ip.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    headers.insert("x-forwarded-for", HeaderValue::from_str(&forwarded_for)?);
    if !headers.contains_key("x-forwarded-host")
        && let Some(host) = original_host
    {
        headers.insert("x-forwarded-host", host);
    }
    if !headers.contains_key("x-forwarded-proto") {
        headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    }
    if h2 {
        headers.remove(HOST);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_named_in_connection_are_removed() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("te", "trailers, deflate"),
            ("upgrade", "websocket"),
            ("transfer-encoding", "chunked"),
            ("x-kept", "yes"),
        ] {
            h.append(k, v.parse().unwrap());
        }
        let mut h2 = h.clone();
        strip_hop_by_hop(&mut h, false);
        let names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-kept"]);
        strip_hop_by_hop(&mut h2, true);
        assert_eq!(
            h2.get("te").unwrap(),
            "trailers",
            "gRPC over h2 needs te: trailers"
        );
        assert_eq!(h2.len(), 2);
    }

    #[test]
    fn error_chains_name_every_cause() {
        let e = ConnectErrorWrap(std::io::Error::other("connection refused"));
        assert_eq!(chain(&e), "wrapped: connection refused");
    }

    #[derive(Debug)]
    struct ConnectErrorWrap(std::io::Error);
    impl std::fmt::Display for ConnectErrorWrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }
    impl std::error::Error for ConnectErrorWrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
