//! A certificate authority made for one test, and TLS server configurations it signs, for
//! servers on loopback that the code under test must (or must not) trust.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A self-signed CA; its key stays in memory.
pub struct TestCa {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    pem: String,
}

impl TestCa {
    /// A new CA whose common name is `name`.
    ///
    /// # Panics
    /// When rcgen cannot make the key or the certificate.
    pub fn new(name: &str) -> Self {
        let key = rcgen::KeyPair::generate().expect("a CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).expect("a CA certificate").pem();
        Self { params, key, pem }
    }

    /// The CA certificate in PEM, as `--extra-ca-file` holds it.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for `names` (DNS names or IP addresses) signed by this CA and its
    /// key, both PEM, for a server that reads them from files.
    ///
    /// # Panics
    /// When rcgen refuses the names.
    pub fn server_pem(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("a server key");
        let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let cert = rcgen::CertificateParams::new(names)
            .expect("server params")
            .signed_by(&key, &rcgen::Issuer::from_params(&self.params, &self.key))
            .expect("a server certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// A server configuration (rustls on ring) presenting a certificate for `names` (DNS names
    /// or IP addresses) signed by this CA.
    ///
    /// # Panics
    /// When rcgen or rustls refuses the names or the certificate.
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().expect("a server key");
        let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let cert = rcgen::CertificateParams::new(names)
            .expect("server params")
            .signed_by(&key, &rcgen::Issuer::from_params(&self.params, &self.key))
            .expect("a server certificate");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("a server configuration");
        Arc::new(config)
    }
}

/// An HTTPS server on `127.0.0.1` (a task of the current Tokio runtime) answering every request
/// `200` with `body`, keeping connections alive; returns its port and the count of connections
/// it accepted.
///
/// # Panics
/// When no loopback port can be bound.
pub async fn serve(config: Arc<rustls::ServerConfig>, body: Vec<u8>) -> (u16, Arc<AtomicUsize>) {
    let body = bytes::Bytes::from(body);
    serve_with(config, move || {
        hyper::Response::new(http_body_util::Full::new(body.clone()))
    })
    .await
}

/// As [`serve`], answering every request `302 Found` with `Location: location` (a URL, or a
/// path on this server); returns its port.
///
/// # Panics
/// When no loopback port can be bound.
pub async fn redirect(config: Arc<rustls::ServerConfig>, location: &str) -> u16 {
    let location = location.to_owned();
    let (port, _) = serve_with(config, move || {
        hyper::Response::builder()
            .status(hyper::StatusCode::FOUND)
            .header(hyper::header::LOCATION, location.as_str())
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("a redirect")
    })
    .await;
    port
}

/// An HTTPS server on `127.0.0.1` answering every request with `respond()`.
async fn serve_with<F>(config: Arc<rustls::ServerConfig>, respond: F) -> (u16, Arc<AtomicUsize>)
where
    F: Fn() -> hyper::Response<http_body_util::Full<bytes::Bytes>> + Clone + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the TLS server");
    let port = listener.local_addr().expect("its address").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (acceptor, respond) = (acceptor.clone(), respond.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let answer = hyper::service::service_fn(move |_| {
                    let response = respond();
                    async move { Ok::<_, std::convert::Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), answer)
                    .await;
            });
        }
    });
    (port, accepted)
}

/// An HTTPS server on `127.0.0.1` that answers every request with `head` (a status line and
/// headers, e.g. a `Content-Length` it never sends) and then keeps the connection open, sending
/// nothing, until the client closes it; returns its port.
///
/// # Panics
/// When no loopback port can be bound.
pub async fn serve_head(config: Arc<rustls::ServerConfig>, head: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the TLS server");
    let port = listener.local_addr().expect("its address").port();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let head = head.to_owned();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, head) = (acceptor.clone(), head.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                if tls.write_all(head.as_bytes()).await.is_err() || tls.flush().await.is_err() {
                    return;
                }
                // Until the client goes away.
                while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    port
}
