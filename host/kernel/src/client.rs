//! The Kubernetes client of every wasmop process: kube's client, whose requests answered 429
//! (Too Many Requests), 503 or 504 are retried with exponential backoff, after the server's
//! `Retry-After` when it asks for longer, at most [`RETRIES`] times, and counted in
//! `wasmop_api_retries_total{code}`.
//!
//! kube retries the same codes by default, without a count; [`client`] replaces that layer by
//! the same policy (`kube::client::retry::RetryPolicy`) with bounds of its own and the count.

use std::sync::LazyLock;
use std::time::Duration;

use http::{Request, Response};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};

/// The first wait before a retry; it doubles (with jitter) up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two attempts, unless the server's `Retry-After` asks for longer.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Retries of one request at most; then the 429, 503 or 504 is the request's answer (about a
/// minute of waits in all without `Retry-After`).
pub const RETRIES: u32 = 8;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: u16,
}

static RETRIED: LazyLock<Family<CodeLabels, Counter>> = LazyLock::new(|| {
    let family = Family::<CodeLabels, Counter>::default();
    crate::metrics::register(
        "api_retries",
        "Requests to the Kubernetes API retried after a 429, 503 or 504 answer, by that code",
        family.clone(),
    );
    family
});

/// A client from the environment (in a pod, its ServiceAccount; elsewhere `KUBECONFIG`), as
/// `kube::Client::try_default`, with the counted retries of this module.
///
/// # Errors
/// No configuration can be inferred, or the client cannot be built from it (e.g. a bad
/// certificate).
pub async fn client() -> Result<Client, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    client_from(config, default_policy())
}

/// The retry policy of [`client`]: [`MIN_BACKOFF`], [`MAX_BACKOFF`], [`RETRIES`], honouring
/// `Retry-After`.
pub fn default_policy() -> RetryPolicy {
    RetryPolicy::new(MIN_BACKOFF, MAX_BACKOFF, RETRIES, true)
        .expect("the minimum backoff is below the maximum")
}

/// A client of `config` whose 429, 503 and 504 answers are retried by `policy` and counted.
///
/// # Errors
/// The client cannot be built from `config` (e.g. a bad certificate).
pub fn client_from(mut config: Config, policy: RetryPolicy) -> Result<Client, kube::Error> {
    LazyLock::force(&RETRIED);
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config)?;
    // The retry layer clones its service for each attempt; a buffer makes the boxed stack
    // cloneable.
    let builder = builder
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(Counted(policy)));
    Ok(builder.build())
}

/// `RetryPolicy` that counts each retry it grants.
#[derive(Clone)]
struct Counted(RetryPolicy);

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for Counted {
    type Future = <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::Future;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        let code = result.as_ref().ok().map(|r| r.status().as_u16());
        let wait = self.0.retry(req, result)?;
        let code = code.unwrap_or_default();
        RETRIED.get_or_create(&CodeLabels { code }).inc();
        tracing::debug!(
            code,
            method = %req.method(),
            uri = %req.uri(),
            "the API server answered {code}; retrying after a backoff"
        );
        Some(wait)
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(
            &mut self.0,
            req,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;

    use super::*;

    /// An API server on loopback that answers the first `busy` requests 429 (with
    /// `Retry-After: retry_after` when set) and the rest with a ConfigMap; counts requests.
    async fn api_server(
        busy: usize,
        retry_after: Option<&'static str>,
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_req| {
                        let n = counted.fetch_add(1, Ordering::SeqCst);
                        let mut response = if n < busy {
                            let mut r = Response::new(Full::new(Bytes::from_static(
                                br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"too many requests"}"#,
                            )));
                            *r.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                            if let Some(after) = retry_after {
                                r.headers_mut()
                                    .insert("retry-after", after.parse().unwrap());
                            }
                            r
                        } else {
                            Response::new(Full::new(Bytes::from_static(
                                br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n"}}"#,
                            )))
                        };
                        response
                            .headers_mut()
                            .insert("content-type", "application/json".parse().unwrap());
                        async { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (addr, seen)
    }

    fn configmaps(addr: SocketAddr, policy: RetryPolicy) -> Api<ConfigMap> {
        let config = Config::new(format!("http://{addr}").parse().unwrap());
        Api::namespaced(client_from(config, policy).unwrap(), "n")
    }

    fn retried_429() -> f64 {
        let text = crate::metrics::encode();
        text.lines()
            .find_map(|l| l.strip_prefix(r#"wasmop_api_retries_total{code="429"} "#))
            .map_or(0.0, |v| v.parse().unwrap())
    }

    #[tokio::test]
    async fn a_429_is_retried_after_the_servers_retry_after_and_counted() {
        let (addr, seen) = api_server(1, Some("1")).await;
        let before = retried_429();
        let started = Instant::now();
        let cm = configmaps(addr, default_policy()).get("c").await.unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("c"));
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "waited for Retry-After: {:?}",
            started.elapsed()
        );
        assert!(retried_429() >= before + 1.0);
    }

    #[tokio::test]
    async fn retries_back_off_and_stop_at_the_bound() {
        let (addr, seen) = api_server(usize::MAX, None).await;
        let policy = RetryPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
            3,
            true,
        )
        .unwrap();
        let started = Instant::now();
        let err = configmaps(addr, policy).get("c").await.unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 429),
            "the last 429 is the answer: {err:?}"
        );
        assert_eq!(
            seen.load(Ordering::SeqCst),
            4,
            "one request and three retries"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(20),
            "the retries waited: {:?}",
            started.elapsed()
        );
    }
}
