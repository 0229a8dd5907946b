//! Connections to a service's pods, pooled by endpoint.
//!
//! Each request is given one ready endpoint of its route, round-robin, and goes out through the
//! client of that (target, endpoint) pair, whose connections all lead to that endpoint. A pod
//! that leaves the EndpointSlice or turns unready is no longer picked, so no further request
//! reaches it over a kept-alive connection; requests already sent to it finish on their
//! connection. A client's idle connections close after 30 s, and clients of endpoints that are
//! no longer ready are dropped when a new endpoint is first used.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use super::catalog::{Catalog, Lookup, Route};
use super::host::{Target, parse_host};
use super::metrics;
use super::proxy::ConnectPolicy;

/// How long an idle pooled connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A client whose every connection goes to one endpoint.
pub(crate) type EndpointClient = Client<Connector, Incoming>;

/// The clients of HTTP/1.1 and of h2c to one endpoint.
#[derive(Clone)]
struct Clients {
    h1: EndpointClient,
    h2: EndpointClient,
}

/// The resolver's connection pools: one pair of clients per (target, endpoint) in use.
pub(crate) struct Pools {
    catalog: Arc<Catalog>,
    policy: Arc<ConnectPolicy>,
    clients: Mutex<HashMap<(Target, SocketAddr), Clients>>,
    next: AtomicUsize,
}

impl Pools {
    /// Pools that dial the endpoints `catalog` lists, as `policy` says.
    pub(crate) fn new(catalog: Arc<Catalog>, policy: ConnectPolicy) -> Self {
        Self {
            catalog,
            policy: Arc::new(policy),
            clients: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
        }
    }

    /// The endpoint the next request for `target` goes to (round-robin over the ready
    /// endpoints of `route`) and the client (HTTP/2 when `h2`) whose connections lead there;
    /// `None` when `route` has no ready endpoint.
    pub(crate) fn pick(
        &self,
        target: &Target,
        route: &Route,
        h2: bool,
    ) -> Option<(SocketAddr, EndpointClient)> {
        let n = route.endpoints.len();
        if n == 0 {
            return None;
        }
        let endpoint = route.endpoints[self.next.fetch_add(1, Ordering::Relaxed) % n];
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let key = (target.clone(), endpoint);
        if !clients.contains_key(&key) {
            clients.retain(|(t, addr), _| self.is_ready(t, *addr));
        }
        let pair = clients
            .entry(key)
            .or_insert_with(|| self.clients_to(endpoint));
        Some((endpoint, if h2 { &pair.h2 } else { &pair.h1 }.clone()))
    }

    /// How many (target, endpoint) pairs have clients (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn is_ready(&self, target: &Target, endpoint: SocketAddr) -> bool {
        is_ready(&self.catalog, target, endpoint)
    }

    fn clients_to(&self, endpoint: SocketAddr) -> Clients {
        let connector = Connector {
            catalog: self.catalog.clone(),
            policy: self.policy.clone(),
            endpoint,
        };
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(IDLE_TIMEOUT);
        Clients {
            h1: builder.build(connector.clone()),
            h2: builder.http2_only(true).build(connector),
        }
    }
}

/// Whether `endpoint` is one of the ready endpoints of `target` now.
fn is_ready(catalog: &Catalog, target: &Target, endpoint: SocketAddr) -> bool {
    matches!(catalog.lookup(target), Lookup::Found(r) if r.endpoints.binary_search(&endpoint).is_ok())
}

/// Dials one endpoint (through the dial map) for the target named in the URI, retrying failed
/// connects (refused, timed out) with backoff while the endpoint stays ready.
#[derive(Clone)]
pub(crate) struct Connector {
    catalog: Arc<Catalog>,
    policy: Arc<ConnectPolicy>,
    endpoint: SocketAddr,
}

/// Why no connection was made (the message names the endpoint and the last failure).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ConnectError(String);

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future =
        Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, ConnectError>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(self.clone().connect(uri))
    }
}

impl Connector {
    async fn connect(self, uri: Uri) -> Result<TokioIo<TcpStream>, ConnectError> {
        let authority = uri.authority().map_or("", |a| a.as_str());
        let target = parse_host(authority)
            .map_err(|e| ConnectError(e.to_string()))?
            .target;
        let (policy, addr) = (&*self.policy, self.endpoint);
        let dialed = policy
            .map
            .dial_addr(addr)
            .map_err(|e| ConnectError(e.to_string()))?;
        let via = if dialed == addr {
            String::new()
        } else {
            format!(" (dialed as {dialed})")
        };
        let attempts = policy.attempts.max(1);
        let mut delay = policy.backoff;
        let mut last = String::new();
        for attempt in 1..=attempts {
            if attempt > 1 && !is_ready(&self.catalog, &target, addr) {
                return Err(ConnectError(format!(
                    "endpoint {addr} of {target} is no longer ready after {} attempts; last: {last}",
                    attempt - 1
                )));
            }
            match tokio::time::timeout(policy.connect_timeout, TcpStream::connect(dialed)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(TokioIo::new(stream));
                }
                Ok(Err(e)) => last = format!("{addr}{via}: {e}"),
                Err(_) => {
                    last = format!("{addr}{via}: no answer within {:?}", policy.connect_timeout);
                }
            }
            metrics::connect_failed(&target.namespace, &target.service);
            if attempt < attempts {
                tokio::time::sleep(delay).await;
                delay = delay.mul_f64(1.4).min(policy.max_backoff);
            }
        }
        Err(ConnectError(format!(
            "no connection to endpoint {addr} of {target} after {attempts} attempts; last: {last}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use kube::runtime::watcher::Event;

    fn target(service: &str) -> Target {
        Target {
            namespace: "a".into(),
            service: service.into(),
            port: None,
        }
    }

    fn route(catalog: &Catalog, service: &str) -> Route {
        match catalog.lookup(&target(service)) {
            Lookup::Found(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn endpoints_are_taken_in_turn_and_clients_of_departed_ones_are_dropped() {
        let catalog = Catalog::new();
        catalog.mark_synced();
        for service in ["web", "api"] {
            catalog.elastic_service_event(Event::Apply(fixtures::elastic_service(
                "a",
                service,
                serde_json::json!({}),
                serde_json::json!({}),
            )));
            catalog.service_event(Event::Apply(fixtures::public_service("a", service)));
        }
        let (one, two): (SocketAddr, SocketAddr) = (
            "10.0.0.1:8080".parse().unwrap(),
            "10.0.0.2:8080".parse().unwrap(),
        );
        let mut both = fixtures::ready_slice("a", "web", one);
        both.endpoints.as_mut().unwrap()[0]
            .addresses
            .push(two.ip().to_string());
        catalog.endpoint_slice_event(Event::Apply(both));
        let pools = Pools::new(catalog.clone(), ConnectPolicy::default());
        let web = route(&catalog, "web");
        let picked: Vec<SocketAddr> = (0..4)
            .map(|_| pools.pick(&target("web"), &web, false).unwrap().0)
            .collect();
        assert_eq!(picked, [one, two, one, two]);
        assert_eq!(pools.len(), 2);

        // `web` loses its endpoints; the first new endpoint of `api` drops their clients.
        catalog.endpoint_slice_event(Event::Delete(fixtures::ready_slice("a", "web", one)));
        assert!(
            pools
                .pick(&target("web"), &route(&catalog, "web"), false)
                .is_none()
        );
        let three: SocketAddr = "10.0.0.3:8080".parse().unwrap();
        catalog.endpoint_slice_event(Event::Apply(fixtures::ready_slice("a", "api", three)));
        let (picked, _) = pools
            .pick(&target("api"), &route(&catalog, "api"), true)
            .unwrap();
        assert_eq!(picked, three);
        assert_eq!(pools.len(), 1);
    }
}
