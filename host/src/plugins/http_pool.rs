//! Keep-alive connections for plugins' `wasi:http` requests over `http://`.
//!
//! wasmtime-wasi-http's default sender opens a new connection for every request. A scaling
//! plugin asks Prometheus two queries per trigger per poll, so that default opens two
//! connections to the same server per trigger every poll, each left in `TIME_WAIT`. KubeElasti's
//! Prometheus scaler queries with a Go `http.Client` on the default transport, which keeps
//! connections alive, and so does this pool: hyper's pooled client, shared by every call of a
//! [`super::PluginRuntime`], keyed by scheme and authority. A connection is reused only by a request to the same authority, which the
//! sandbox lets through only when that authority is granted to the calling plugin.
//! `https://` requests keep the default sender (a TLS connection each).
//!
//! The request options keep their meaning with one approximation: the connect and first-byte
//! timeouts bound the response head together (a reused connection has no connect phase), and
//! past them the guest sees `connection-read-timeout`; the between-bytes timeout bounds each
//! wait for a body frame, as in the default sender.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_http::timeout::{TimeoutBody, TimeoutError};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// How long an idle connection is kept: the value of Go's `http.DefaultTransport`, which
/// KubeElasti's Prometheus queries use.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// A timeout the guest did not set: the default sender's 600 s.
const UNSET_TIMEOUT: Duration = Duration::from_secs(600);

/// The shared pool; cloning it is cheap and shares the connections.
#[derive(Clone, Debug)]
pub struct HttpPool(Client<HttpConnector, WasiBody>);

impl HttpPool {
    /// A pool that keeps at most `max_idle_per_host` idle connections per authority, each for
    /// [`IDLE_TIMEOUT`]. Requests need a Tokio runtime; building the pool does not.
    pub fn new(max_idle_per_host: usize) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self(
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(IDLE_TIMEOUT)
                .pool_max_idle_per_host(max_idle_per_host.max(1))
                .pool_timer(TokioTimer::new())
                .build(connector),
        )
    }

    /// Sends `request` (an absolute `http://` URI) on an idle connection to its authority, or
    /// a new one, under the guest's `options`.
    ///
    /// # Errors
    /// The `wasi:http` error the guest sees: `connection-refused` or a DNS error when it cannot
    /// connect, `connection-read-timeout` when the head does not arrive in time,
    /// `HTTP-protocol-error` for a malformed response.
    pub async fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<http::Response<WasiBody>, Error> {
        let options = options.unwrap_or_default();
        let timeout = |t: Option<Duration>| t.unwrap_or(UNSET_TIMEOUT);
        let head =
            timeout(options.connect_timeout).saturating_add(timeout(options.first_byte_timeout));
        let response = tokio::time::timeout(head, self.0.request(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)?
            .map_err(client_error)?;
        let between = timeout(options.between_bytes_timeout);
        Ok(response.map(|body| {
            TimeoutBody::new(between, body)
                .map_err(body_error)
                .boxed_unsync()
        }))
    }
}

/// The `wasi:http` error for a failed request, as the default sender classifies it: a connect
/// failure by its I/O error (refused, DNS, timed out), anything else as a protocol error.
fn client_error(e: hyper_util::client::legacy::Error) -> Error {
    tracing::debug!("plugin HTTP request failed: {e:?}");
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = cause {
        if e.is_connect()
            && let Some(io) = c.downcast_ref::<std::io::Error>()
        {
            return match io.kind() {
                std::io::ErrorKind::TimedOut => Error::ConnectionTimeout,
                kind => Error::Connect(std::io::Error::new(kind, io.to_string())),
            };
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            return if h.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::HttpProtocolError
            };
        }
        cause = c.source();
    }
    if e.is_connect() {
        Error::ConnectionRefused
    } else {
        Error::HttpProtocolError
    }
}

/// The `wasi:http` error for a failed body read.
fn body_error(e: Box<dyn std::error::Error + Send + Sync>) -> Error {
    if e.is::<TimeoutError>() {
        return Error::ConnectionReadTimeout;
    }
    match e.downcast::<hyper::Error>() {
        Ok(h) if h.is_timeout() => Error::HttpResponseTimeout,
        Ok(h) => Error::Hyper(*h),
        Err(_) => Error::HttpProtocolError,
    }
}
