//! A blocking HTTP client over `wasi:http` (0.2), for plugins whose world the host links it to
//! (the `scaler` world: the host lets a plugin reach only the hosts of its
//! `grants.allowedHosts`).
//!
//! ```text
//! use std::time::Duration;
//! use wasmop_plugin_sdk::http::{self, Request};
//!
//! let response = Request::get("http://prometheus.monitoring:9090/api/v1/query?query=up")
//!     .header("Accept", "application/json")
//!     .timeout(Duration::from_secs(5))
//!     .send()?;                        // Err(http::Error) when no response came
//! if response.status == 200 { /* response.body: the whole body, at most 4 MiB by default */ }
//! ```
//!
//! Everything builds natively too, so that a plugin's `Guest` implementation runs in its own
//! `cargo test`; there, without a host, [`Request::send`] fails with
//! [`TransportError::Other`].

use std::fmt;
use std::time::Duration;

/// The default cap on a response body: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The default timeout of each phase of a request (connect, first byte, between bytes) and of
/// the wait for the response head: 5 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A `GET` request to send with [`Request::send`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    url: String,
    headers: Vec<(String, String)>,
    timeout: Duration,
    max_body_bytes: usize,
}

/// A response: its status and its whole body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code, e.g. 200.
    pub status: u16,
    /// The body's bytes, at most the request's `max_body_bytes`.
    pub body: Vec<u8>,
}

/// Why a request was not sent, or got no (complete) response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The URL is not `http://` or `https://` with a host, described (from [`split_url`]).
    Url(String),
    /// The host refused the request's headers (e.g. a forbidden or malformed one), described.
    Headers(String),
    /// The host refused a part of the request: `"method"`, `"scheme"`, `"authority"` or
    /// `"path"` (of the URL named by the message).
    Rejected {
        /// Which part.
        part: &'static str,
        /// The request's URL.
        url: String,
    },
    /// No response: the connection, TLS, a timeout, or a body over the cap.
    Transport(TransportError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(why) => f.write_str(why),
            Self::Headers(why) => write!(f, "the host rejected the headers: {why}"),
            Self::Rejected { part, url } => write!(f, "the host rejected the {part} of {url}"),
            Self::Transport(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Why a request produced no response, as far as a plugin needs to tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The host refused the request (its host is not granted, or the address is prohibited).
    Denied,
    /// The connection was refused.
    ConnectionRefused,
    /// The host name did not resolve.
    Dns,
    /// A timeout expired (connect, response head, or between body bytes).
    Timeout,
    /// The server's TLS certificate is not trusted for its name.
    UntrustedCertificate,
    /// The TLS handshake failed otherwise, described.
    Tls(String),
    /// Anything else, described (e.g. a body over the cap).
    Other(String),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied => f.write_str("the host denied the request (is its host granted?)"),
            Self::ConnectionRefused => f.write_str("the connection was refused"),
            Self::Dns => f.write_str("the host name did not resolve"),
            Self::Timeout => f.write_str("the request timed out"),
            Self::UntrustedCertificate => f.write_str("the server's certificate is not trusted"),
            Self::Tls(what) => write!(f, "the TLS handshake failed: {what}"),
            Self::Other(what) => f.write_str(what),
        }
    }
}

impl Request {
    /// A `GET` of `url` (`http://` or `https://`), without headers, with the
    /// [`DEFAULT_TIMEOUT`] and a body cap of [`DEFAULT_MAX_BODY_BYTES`].
    pub fn get(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// Adds a header (repeat a name to send it several times).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Bounds the connect, the wait for the response head and each wait between body bytes.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Caps the response body: a longer one fails with [`TransportError::Other`].
    #[must_use]
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.max_body_bytes = max;
        self
    }

    /// The request's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// The parts of an `http://` or `https://` URL that a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// Whether the scheme is `https`.
    pub https: bool,
    /// `host[:port]`.
    pub authority: &'a str,
    /// The path with query, `/` when empty.
    pub path_with_query: &'a str,
}

/// `url`'s scheme prefix in lower case (`http://` or `https://`, matched in any case) and the
/// rest; `None` for another scheme.
pub fn split_scheme(url: &str) -> Option<(&'static str, &str)> {
    ["http://", "https://"].into_iter().find_map(|scheme| {
        url.get(..scheme.len())
            .filter(|s| s.eq_ignore_ascii_case(scheme))
            .map(|_| (scheme, &url[scheme.len()..]))
    })
}

/// Splits an `http://` or `https://` URL (scheme in any case) into its parts.
///
/// # Errors
/// A URL of another scheme, or without an authority.
pub fn split_url(url: &str) -> Result<UrlParts<'_>, String> {
    let (scheme, rest) =
        split_scheme(url).ok_or_else(|| format!("{url:?} is not an http:// or https:// URL"))?;
    let https = scheme == "https://";
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    Ok(UrlParts {
        https,
        authority,
        path_with_query: if path.is_empty() { "/" } else { path },
    })
}

/// Percent-encodes `s` for a URL query component: RFC 3986 unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) are kept, every other byte of the UTF-8 form becomes `%XX`.
pub fn percent_encode(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
    out
}

#[cfg(not(target_arch = "wasm32"))]
impl Request {
    /// Natively there is no `wasi:http` host: fails with [`TransportError::Other`] saying so.
    /// In a component, sends the request (see the WebAssembly build's documentation).
    ///
    /// # Errors
    /// Always, natively.
    pub fn send(&self) -> Result<Response, Error> {
        Err(Error::Transport(TransportError::Other(format!(
            "GET {}: wasi:http is only available in a component (this is a native build)",
            self.url
        ))))
    }
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    use wasip2::clocks::monotonic_clock;
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        ErrorCode, Fields, IncomingResponse, Method, OutgoingRequest, RequestOptions, Scheme,
    };
    use wasip2::io::poll;
    use wasip2::io::streams::StreamError;

    use super::{Error, Request, Response, TransportError};

    impl Request {
        /// Sends the request and waits for the whole response, within the timeout for the
        /// response head (and the timeout between body bytes after it).
        ///
        /// # Errors
        /// [`Error::Url`] for a URL that is not `http(s)://host…`; [`Error::Headers`] or
        /// [`Error::Rejected`] when the host refuses the request; [`Error::Transport`] when no
        /// complete response came (a host not granted is [`TransportError::Denied`]).
        pub fn send(&self) -> Result<Response, Error> {
            let url = super::split_url(&self.url).map_err(Error::Url)?;
            let entries: Vec<(String, Vec<u8>)> = self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                .collect();
            let headers =
                Fields::from_list(&entries).map_err(|e| Error::Headers(format!("{e:?}")))?;
            let request = OutgoingRequest::new(headers);
            let rejected = |part: &'static str| Error::Rejected {
                part,
                url: self.url.clone(),
            };
            request
                .set_method(&Method::Get)
                .map_err(|()| rejected("method"))?;
            request
                .set_scheme(Some(if url.https {
                    &Scheme::Https
                } else {
                    &Scheme::Http
                }))
                .map_err(|()| rejected("scheme"))?;
            request
                .set_authority(Some(url.authority))
                .map_err(|()| rejected("authority"))?;
            request
                .set_path_with_query(Some(url.path_with_query))
                .map_err(|()| rejected("path"))?;

            let timeout_ns = u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX);
            let options = RequestOptions::new();
            // An error means the host does not support that timeout; the deadline below still
            // applies.
            let _ = options.set_connect_timeout(Some(timeout_ns));
            let _ = options.set_first_byte_timeout(Some(timeout_ns));
            let _ = options.set_between_bytes_timeout(Some(timeout_ns));

            let transport = Error::Transport;
            let future = outgoing_handler::handle(request, Some(options))
                .map_err(|e| transport(classify(&e)))?;
            {
                let ready = future.subscribe();
                let deadline = monotonic_clock::subscribe_duration(timeout_ns);
                poll::poll(&[&ready, &deadline]);
                if !ready.ready() {
                    return Err(transport(TransportError::Timeout));
                }
            }
            let response = match future.get() {
                Some(Ok(Ok(response))) => response,
                Some(Ok(Err(e))) => return Err(transport(classify(&e))),
                Some(Err(())) | None => {
                    return Err(transport(TransportError::Other(
                        "the response was not available".into(),
                    )));
                }
            };
            let status = response.status();
            let body = read_body(&response, self.max_body_bytes).map_err(transport)?;
            Ok(Response { status, body })
        }
    }

    /// Reads the whole body, failing past `max` bytes; stops there without reading on.
    fn read_body(response: &IncomingResponse, max: usize) -> Result<Vec<u8>, TransportError> {
        let body = response
            .consume()
            .map_err(|()| TransportError::Other("the response body was already taken".into()))?;
        let mut out = Vec::new();
        {
            let stream = body.stream().map_err(|()| {
                TransportError::Other("the response body stream was already taken".into())
            })?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => {
                        if out.len() + chunk.len() > max {
                            return Err(TransportError::Other(format!(
                                "the response body exceeds {}",
                                size(max)
                            )));
                        }
                        out.extend_from_slice(&chunk);
                    }
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err(match wasip2::http::types::http_error_code(&e) {
                            Some(code) => classify(&code),
                            None => TransportError::Other(format!(
                                "reading the response body failed: {}",
                                e.to_debug_string()
                            )),
                        });
                    }
                }
            }
        }
        drop(body);
        Ok(out)
    }

    /// `max` bytes in MiB when it is a whole number of them, else in bytes.
    fn size(max: usize) -> String {
        if max >= 1024 * 1024 && max.is_multiple_of(1024 * 1024) {
            format!("{} MiB", max / (1024 * 1024))
        } else {
            format!("{max} bytes")
        }
    }

    fn classify(e: &ErrorCode) -> TransportError {
        match e {
            ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => {
                TransportError::Denied
            }
            ErrorCode::ConnectionRefused => TransportError::ConnectionRefused,
            ErrorCode::DnsError(_) | ErrorCode::DnsTimeout | ErrorCode::DestinationNotFound => {
                TransportError::Dns
            }
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout => TransportError::Timeout,
            ErrorCode::TlsCertificateError => TransportError::UntrustedCertificate,
            ErrorCode::TlsProtocolError => TransportError::Tls("protocol error".into()),
            ErrorCode::TlsAlertReceived(alert) => TransportError::Tls(format!(
                "the server sent the alert {}",
                alert.alert_message.as_deref().unwrap_or("(unnamed)")
            )),
            other => TransportError::Other(format!("{other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encoding() {
        assert_eq!(
            percent_encode(r#"up{container="prometheus"}"#),
            "up%7Bcontainer%3D%22prometheus%22%7D"
        );
        assert_eq!(percent_encode("AZaz09-._~"), "AZaz09-._~");
        assert_eq!(
            percent_encode("a b+c/d?e&f=g%h#[]:@!$'(),*;"),
            "a%20b%2Bc%2Fd%3Fe%26f%3Dg%25h%23%5B%5D%3A%40%21%24%27%28%29%2C%2A%3B"
        );
        assert_eq!(percent_encode("é\n"), "%C3%A9%0A");
    }

    #[test]
    fn splits_urls() {
        let parts = |https, authority, path_with_query| {
            Ok(UrlParts {
                https,
                authority,
                path_with_query,
            })
        };
        assert_eq!(
            split_url("http://prom:9090/api/v1/query?query=up"),
            parts(false, "prom:9090", "/api/v1/query?query=up")
        );
        assert_eq!(split_url("HTTP://prom"), parts(false, "prom", "/"));
        assert_eq!(
            split_url("Https://prom.example/p"),
            parts(true, "prom.example", "/p")
        );
        assert!(
            split_url("ftp://prom")
                .unwrap_err()
                .contains("not an http:// or https:// URL")
        );
        assert!(split_url("https:///x").unwrap_err().contains("no host"));
        assert!(split_url("ht").is_err());
    }

    #[test]
    fn builder_keeps_what_it_is_given() {
        let r = Request::get("http://a/b")
            .header("X-One", "1")
            .header("X-One", "2")
            .timeout(Duration::from_millis(250))
            .max_body_bytes(10);
        assert_eq!(r.url(), "http://a/b");
        assert_eq!(
            r.headers,
            vec![("X-One".into(), "1".into()), ("X-One".into(), "2".into())]
        );
        assert_eq!(r.timeout, Duration::from_millis(250));
        assert_eq!(r.max_body_bytes, 10);
        let d = Request::get("http://a");
        assert_eq!(
            (d.timeout, d.max_body_bytes),
            (DEFAULT_TIMEOUT, DEFAULT_MAX_BODY_BYTES)
        );
    }

    #[test]
    fn natively_send_fails_without_a_host() {
        let e = Request::get("http://a/b").send().unwrap_err();
        assert!(
            e.to_string().contains("only available in a component"),
            "{e}"
        );
    }

    #[test]
    fn errors_read_as_sentences() {
        let e = Error::Rejected {
            part: "authority",
            url: "http://x".into(),
        };
        assert_eq!(e.to_string(), "the host rejected the authority of http://x");
        assert_eq!(
            Error::Transport(TransportError::Tls("protocol error".into())).to_string(),
            "the TLS handshake failed: protocol error"
        );
    }
}
