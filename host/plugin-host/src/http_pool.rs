//! Keep-alive connections for plugins' `wasi:http` requests, over `http://` and `https://`.
//!
//! wasmtime-wasi-http's default sender opens a new connection (and for `https://` a new TLS
//! session) for every request. A scaling plugin asks Prometheus two queries per trigger per
//! poll, so that default opens two connections to the same server per trigger every poll, each
//! left in `TIME_WAIT`. KubeElasti's Prometheus scaler queries with a Go `http.Client` on the
//! default transport, which keeps connections alive, and so does this pool: hyper's pooled
//! client, shared by every call of a `PluginRuntime`, keyed by scheme and authority. A
//! connection is reused only by a request to the same scheme and authority, which the sandbox
//! lets through only when that authority is granted to the calling plugin.
//!
//! `https://` servers are verified as the default sender verifies them (the webpki roots,
//! HTTP/1.1 without ALPN, the name or IP address of the authority), plus the CA certificates of
//! `wasmop run --extra-ca-file`, so that a plugin can reach an in-cluster service signed by the
//! cluster's own CA.
//!
//! The request options keep their meaning with one approximation: the connect and first-byte
//! timeouts bound the response head together (a reused connection has no connect phase), and
//! past them the guest sees `connection-read-timeout`; the between-bytes timeout bounds each
//! wait for a body frame, as in the default sender.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_http::timeout::{TimeoutBody, TimeoutError};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// How long an idle connection is kept: the value of Go's `http.DefaultTransport`, which
/// KubeElasti's Prometheus queries use.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// A timeout the guest did not set: the default sender's 600 s.
const UNSET_TIMEOUT: Duration = Duration::from_secs(600);

/// The shared pool; cloning it is cheap and shares the connections.
#[derive(Clone, Debug)]
pub(crate) struct HttpPool(Client<HttpsConnector<HttpConnector>, WasiBody>);

impl HttpPool {
    /// A pool that keeps at most `max_idle_per_host` idle connections per scheme and authority,
    /// each for [`IDLE_TIMEOUT`], and trusts the webpki roots plus the PEM certificates of
    /// `extra_ca_pem` for `https://`. Requests need a Tokio runtime; building the pool does not.
    ///
    /// # Errors
    /// `extra_ca_pem` holds no PEM certificate, a malformed one, or one rustls refuses as a
    /// trust anchor.
    pub fn new(max_idle_per_host: usize, extra_ca_pem: Option<&[u8]>) -> Result<Self, String> {
        let webpki = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = tls_config(webpki, extra_ca_pem)?;
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        Ok(Self(
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(IDLE_TIMEOUT)
                .pool_max_idle_per_host(max_idle_per_host.max(1))
                .pool_timer(TokioTimer::new())
                .build(connector),
        ))
    }

    /// Sends `request` (an absolute `http://` or `https://` URI) on an idle connection to its
    /// scheme and authority, or a new one, under the guest's `options`.
    ///
    /// # Errors
    /// The `wasi:http` error the guest sees: `connection-refused` or a DNS error when it cannot
    /// connect, `TLS-certificate-error` when the server's certificate is not trusted for its
    /// name, `TLS-alert-received` when the server ends the handshake, `TLS-protocol-error` for
    /// another TLS failure, `connection-read-timeout` when the head does not arrive in time,
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

/// A TLS client configuration (rustls on ring, no client certificate) trusting `roots` plus the
/// PEM certificates of `extra_ca_pem`.
///
/// # Errors
/// `extra_ca_pem` holds no PEM certificate, a malformed one, or one rustls refuses as a trust
/// anchor.
pub(crate) fn tls_config(
    mut roots: rustls::RootCertStore,
    extra_ca_pem: Option<&[u8]>,
) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    if let Some(pem) = extra_ca_pem {
        let before = roots.len();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("extra CA certificates (--extra-ca-file): {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("extra CA certificates (--extra-ca-file): {e}"))?;
        }
        if roots.len() == before {
            return Err(
                "extra CA certificates (--extra-ca-file): no PEM certificate found \
                        (expected -----BEGIN CERTIFICATE----- blocks)"
                    .into(),
            );
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS setup: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

/// The `wasi:http` error for a failed request, as the default sender classifies it: a connect
/// failure by its I/O error (refused, DNS, timed out), anything else as a protocol error. TLS
/// failures are told apart by rustls' error, where the default sender reports each as
/// `TLS-protocol-error`.
fn client_error(e: hyper_util::client::legacy::Error) -> Error {
    tracing::debug!("plugin HTTP request failed: {e:?}");
    if let Some(tls) = causes(&e).find_map(|c| c.downcast_ref::<rustls::Error>()) {
        return tls_error(tls);
    }
    for c in causes(&e) {
        if e.is_connect()
            && let Some(io) = c.downcast_ref::<std::io::Error>()
        {
            // wasmtime tells DNS failures apart; the sandbox's hook classifies the rest.
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
    }
    if e.is_connect() {
        Error::ConnectionRefused
    } else {
        Error::HttpProtocolError
    }
}

/// `e` and its causes, outermost first. An I/O error's `source()` skips the error it wraps
/// (TLS failures arrive as rustls' error inside two of them), so that one is taken instead.
pub(crate) fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |c| {
        match c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        }
    })
}

/// The `wasi:http` error for a failed TLS handshake.
fn tls_error(e: &rustls::Error) -> Error {
    match e {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            Error::TlsCertificateError
        }
        rustls::Error::AlertReceived(alert) => Error::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => Error::TlsProtocolError,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_failures_keep_their_kind() {
        let untrusted = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert!(matches!(tls_error(&untrusted), Error::TlsCertificateError));
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
        assert!(matches!(
            tls_error(&alert),
            Error::TlsAlertReceived { alert_id: Some(40), alert_message: Some(ref m) } if m == "HandshakeFailure"
        ));
        let other = rustls::Error::DecryptError;
        assert!(matches!(tls_error(&other), Error::TlsProtocolError));
    }

    #[test]
    fn causes_look_inside_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        let wrapped =
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls));
        let found = causes(&wrapped).find_map(|c| c.downcast_ref::<rustls::Error>());
        assert!(
            matches!(found, Some(rustls::Error::InvalidCertificate(_))),
            "{found:?}"
        );
    }

    #[test]
    fn an_extra_ca_without_certificates_is_refused() {
        let e = tls_config(rustls::RootCertStore::empty(), Some(b"not PEM")).unwrap_err();
        assert!(e.contains("no PEM certificate found"), "{e}");
        let e = tls_config(
            rustls::RootCertStore::empty(),
            Some(b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"),
        )
        .unwrap_err();
        assert!(
            e.starts_with("extra CA certificates (--extra-ca-file): "),
            "{e}"
        );
        assert!(tls_config(rustls::RootCertStore::empty(), None).is_ok());
    }
}
