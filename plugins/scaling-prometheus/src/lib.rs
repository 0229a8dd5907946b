//! The default `scaling` plugin: votes for one ElasticService trigger of type `prometheus`.
//!
//! Each vote makes two Prometheus instant queries (`GET <serverAddress>/api/v1/query`), as the
//! upstream poller does (docs/scaling.md, "Scaling up and down"):
//!
//! 1. The health query [`health_query`]: `min_over_time((max(up{<uptimeFilter>}) or vector(0))[<cooldown>s:])`.
//!    Unless it equals exactly 1 (the scrape target selected by `uptimeFilter` was up for the
//!    whole cooldown), the plugin returns an error naming `metadata.uptimeFilter` and does not
//!    run the trigger query: the metrics cannot be trusted, so there is no vote. The host then
//!    leaves the service where it is (upstream's "NoScale"); a blind spot in the metrics never
//!    scales a service to zero, nor wakes every service at zero.
//! 2. The trigger query (`metadata.query`), which must return exactly one finite value. A value
//!    below `metadata.threshold` votes **down** (the service may go to zero), anything else
//!    votes **up**. No series, several series, NaN and ±Inf are errors with a message that
//!    says what to change.
//!
//! Trigger metadata (the trigger's `metadata` object):
//!
//! | key | | meaning |
//! |---|---|---|
//! | `query` | required | PromQL returning one series (aggregate it, e.g. with `sum()`) |
//! | `serverAddress` | required | `http://` or `https://host[:port][/path]` |
//! | `threshold` | required | a JSON number or a numeric string (`0.5` or `"0.5"`) |
//! | `uptimeFilter` | optional | label matchers for `up{...}`, default `container="prometheus"` |
//! | `headers` | optional | object of header name → value added to both requests |
//!
//! Plugin settings (`settings`): `{"timeoutMs": 5000}`; `timeoutMs` bounds the connect, the
//! wait for the response head and each wait between body bytes of every request.
//!
//! Every request goes to `serverAddress`, whose host must be listed in the plugin's
//! `grants.allowedHosts`. An `https://` server must present a certificate the host trusts for
//! its name: one from a public CA (the webpki roots) or from a CA of `wasmop run --extra-ca-file`.

#[cfg(target_arch = "wasm32")]
mod component;

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;
use wasmop_plugin_sdk::http::split_scheme;
pub use wasmop_plugin_sdk::http::{TransportError, UrlParts, percent_encode, split_url};

/// The only trigger type this plugin votes for.
pub const TRIGGER_TYPE: &str = "prometheus";

/// `uptimeFilter` when the metadata does not set one (as upstream).
pub const DEFAULT_UPTIME_FILTER: &str = r#"container="prometheus""#;

/// The health window, in seconds, when the ElasticService's cooldown is 0 (as upstream).
pub const DEFAULT_HEALTH_WINDOW_SECONDS: u32 = 900;

/// `settings.timeoutMs` when not set (upstream's 5 s query timeout).
pub const DEFAULT_TIMEOUT_MS: u64 = 5000;

/// The largest response body read from Prometheus.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How many bytes of an unexpected response body an error message quotes.
pub const BODY_EXCERPT_BYTES: usize = 200;

/// A decision the plugin refuses to make, or input it rejects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What is wrong and, where possible, what to do about it. When `field` is set, the
    /// message starts with it (`metadata.threshold: ...`).
    pub message: String,
    /// The offending input as a dotted path (e.g. `metadata.threshold`), when known.
    pub field: Option<String>,
}

impl Error {
    /// An error about `field`; the message is prefixed with the field's path.
    pub fn field(field: impl Into<String>, message: impl fmt::Display) -> Self {
        let field = field.into();
        Self {
            message: format!("{field}: {message}"),
            field: Some(field),
        }
    }

    /// An error not tied to one input.
    pub fn general(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            field: None,
        }
    }

    /// The message without its `field: ` prefix: the WIT `plugin-error`'s message, which the
    /// host shows after the field (`plugin error at metadata.threshold: is required`).
    pub fn detail(&self) -> &str {
        self.field
            .as_deref()
            .and_then(|f| self.message.strip_prefix(f))
            .and_then(|m| m.strip_prefix(": "))
            .unwrap_or(&self.message)
    }
}

/// The WIT path of an [`Error::field`]: the paths the plugin's own functions use are relative
/// to the trigger (`type`, `metadata.query`) or are `settings…`; the `plugin-error` it answers
/// names the field of the `trigger-request` (`request.trigger-type`, `request.metadata.query`)
/// or of the settings, as every plugin does (docs/plugins.md, "Errors").
pub fn request_field(field: &str) -> String {
    if field == "settings" || field.starts_with("settings.") {
        field.to_owned()
    } else if field == "type" {
        "request.trigger-type".to_owned()
    } else {
        format!("request.{field}")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The plugin settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Per-request timeout in milliseconds (connect, response head, and between body bytes).
    pub timeout_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            timeout_ms: DEFAULT_TIMEOUT_MS,
        }
    }
}

/// Validates and reads the plugin settings: a JSON object with the optional key `timeoutMs`
/// (a positive whole number of milliseconds, default 5000).
///
/// # Errors
/// Invalid JSON, a non-object, an invalid `timeoutMs`, or unknown keys (all of them named).
pub fn validate_settings(settings: &str) -> Result<Settings, Error> {
    let map = match serde_json::from_str::<Value>(settings) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(Error::field(
                "settings",
                format_args!("must be a JSON object, got {other}"),
            ));
        }
        Err(e) => {
            return Err(Error::field(
                "settings",
                format_args!("not valid JSON: {e}"),
            ));
        }
    };
    let unknown: Vec<String> = map
        .keys()
        .filter(|k| k.as_str() != "timeoutMs")
        .map(|k| format!("{k:?}"))
        .collect();
    if !unknown.is_empty() {
        let s = if unknown.len() == 1 { "" } else { "s" };
        return Err(Error::field(
            "settings",
            format_args!(
                "unknown key{s} {}; the only setting is timeoutMs",
                unknown.join(", ")
            ),
        ));
    }
    let timeout_ms = match map.get("timeoutMs") {
        None => DEFAULT_TIMEOUT_MS,
        Some(v) => match v.as_u64() {
            Some(ms) if ms > 0 => ms,
            _ => {
                return Err(Error::field(
                    "settings.timeoutMs",
                    format_args!("must be a positive whole number of milliseconds, got {v}"),
                ));
            }
        },
    };
    Ok(Settings { timeout_ms })
}

/// Checks that the trigger is of the type this plugin votes for.
///
/// # Errors
/// Any type other than [`TRIGGER_TYPE`].
pub fn check_trigger_type(trigger_type: &str) -> Result<(), Error> {
    if trigger_type == TRIGGER_TYPE {
        Ok(())
    } else {
        Err(Error::field(
            "type",
            format_args!(
                "trigger type {trigger_type:?} is not handled by scaling-prometheus, which handles {TRIGGER_TYPE:?}"
            ),
        ))
    }
}

/// One `prometheus` trigger, read from its metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger {
    /// The PromQL query; it must return one series.
    pub query: String,
    /// `http://authority[/path]` or `https://authority[/path]`, the scheme in lower case,
    /// without a trailing `/`.
    pub server_address: String,
    /// A value below this votes down.
    pub threshold: f64,
    /// Label matchers for `up{...}` in the health query.
    pub uptime_filter: String,
    /// Extra request headers, name → value.
    pub headers: BTreeMap<String, String>,
}

impl Trigger {
    /// Parses the trigger's `metadata` object (JSON).
    ///
    /// # Errors
    /// A message naming the offending field (`metadata.<key>`) when the metadata is not a JSON
    /// object, a required key is missing or a value is invalid. Unknown keys are ignored.
    pub fn parse(metadata: &str) -> Result<Self, Error> {
        let map = match serde_json::from_str::<Value>(metadata) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(Error::field(
                    "metadata",
                    format_args!("must be a JSON object, got {other}"),
                ));
            }
            Err(e) => {
                return Err(Error::field(
                    "metadata",
                    format_args!("not valid JSON: {e}"),
                ));
            }
        };
        let query = required_string(&map, "query")?;
        let server_address = parse_server_address(&required_string(&map, "serverAddress")?)?;
        let threshold = parse_threshold(map.get("threshold"))?;
        let uptime_filter = match map.get("uptimeFilter") {
            None | Some(Value::Null) => DEFAULT_UPTIME_FILTER.to_owned(),
            Some(Value::String(s)) if s.trim().is_empty() => DEFAULT_UPTIME_FILTER.to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::field(
                    "metadata.uptimeFilter",
                    format_args!("must be a string, got {other}"),
                ));
            }
        };
        let headers = parse_headers(map.get("headers"))?;
        Ok(Self {
            query,
            server_address,
            threshold,
            uptime_filter,
            headers,
        })
    }

    /// The `host[:port]` part of the server address.
    pub fn authority(&self) -> &str {
        split_url(&self.server_address).map_or("", |url| url.authority)
    }
}

fn required_string(map: &serde_json::Map<String, Value>, key: &str) -> Result<String, Error> {
    let field = format!("metadata.{key}");
    match map.get(key) {
        None | Some(Value::Null) => Err(Error::field(field, "is required")),
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(Error::field(field, "is required and must not be empty"))
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(Error::field(
            field,
            format_args!("must be a string, got {other}"),
        )),
    }
}

fn parse_threshold(v: Option<&Value>) -> Result<f64, Error> {
    const FIELD: &str = "metadata.threshold";
    let t = match v {
        None | Some(Value::Null) => return Err(Error::field(FIELD, "is required")),
        Some(Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| Error::field(FIELD, format_args!("{n} is not a number")))?,
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| Error::field(FIELD, format_args!("{s:?} is not a number")))?,
        Some(other) => {
            return Err(Error::field(
                FIELD,
                format_args!("must be a number or a numeric string, got {other}"),
            ));
        }
    };
    if t.is_finite() {
        Ok(t)
    } else {
        Err(Error::field(
            FIELD,
            format_args!(
                "{} is not a finite number",
                v.map(Value::to_string).unwrap_or_default()
            ),
        ))
    }
}

/// Validates `serverAddress` and returns it normalised: scheme in lower case, no trailing `/`.
fn parse_server_address(raw: &str) -> Result<String, Error> {
    const FIELD: &str = "metadata.serverAddress";
    let s = raw.trim();
    let Some((scheme, rest)) = split_scheme(s) else {
        return Err(Error::field(
            FIELD,
            format_args!(
                "{raw:?} must be an http:// or https:// URL such as http://prometheus.monitoring:9090"
            ),
        ));
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let bad = |why: &str| Err(Error::field(FIELD, format_args!("{raw:?} {why}")));
    if authority.is_empty() {
        return bad("has no host");
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain spaces or control characters");
    }
    if s.contains(['?', '#']) {
        return bad("must not contain a query or fragment");
    }
    if authority.contains('@') {
        return bad("must not contain credentials; pass them in metadata.headers");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some(end) = v6.find(']') else {
            return bad("has an invalid IPv6 host");
        };
        let port = match &v6[end + 1..] {
            "" => None,
            after => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return bad("has an invalid IPv6 host"),
            },
        };
        (&v6[..end], port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return bad("has no host");
    }
    let port_ok = |p: &str| {
        p.bytes().all(|b| b.is_ascii_digit()) && matches!(p.parse::<u16>(), Ok(n) if n > 0)
    };
    if port.is_some_and(|p| !port_ok(p)) {
        return bad("has an invalid port");
    }
    Ok(format!("{scheme}{authority}{}", path.trim_end_matches('/')))
}

fn parse_headers(v: Option<&Value>) -> Result<BTreeMap<String, String>, Error> {
    let map = match v {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(Error::field(
                "metadata.headers",
                format_args!("must be an object of header name to value, got {other}"),
            ));
        }
    };
    let mut headers = BTreeMap::new();
    for (name, value) in map {
        let field = format!("metadata.headers.{name}");
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(Error::field(
                field,
                format_args!("{name:?} is not a valid header name"),
            ));
        }
        let Value::String(value) = value else {
            return Err(Error::field(
                field,
                format_args!("must be a string, got {value}"),
            ));
        };
        if value.chars().any(|c| c == '\r' || c == '\n' || c == '\0') {
            return Err(Error::field(field, "must not contain CR, LF or NUL"));
        }
        headers.insert(name.clone(), value.clone());
    }
    Ok(headers)
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The health query: `min_over_time((max(up{<uptime_filter>}) or vector(0))[<window>s:])`, where
/// the window is the cooldown, or [`DEFAULT_HEALTH_WINDOW_SECONDS`] when the cooldown is 0.
pub fn health_query(uptime_filter: &str, cooldown_seconds: u32) -> String {
    let window = if cooldown_seconds == 0 {
        DEFAULT_HEALTH_WINDOW_SECONDS
    } else {
        cooldown_seconds
    };
    format!("min_over_time((max(up{{{uptime_filter}}}) or vector(0))[{window}s:])")
}

/// The instant-query URL: `<server>/api/v1/query?query=<percent-encoded promql>`.
pub fn query_url(server: &str, promql: &str) -> String {
    format!(
        "{}/api/v1/query?query={}",
        server.trim_end_matches('/'),
        percent_encode(promql)
    )
}

#[derive(Deserialize)]
struct QueryData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Value,
}

/// Reads the single value of a Prometheus instant-query response body (`resultType` `vector`
/// with exactly one series, or `scalar`).
///
/// # Errors
/// A clear message for a body that is not JSON, a `status` other than `success`, an empty
/// result, more than one series, another result type, or a value that is not a finite number.
pub fn parse_value(body: &str) -> Result<f64, String> {
    let r: Value = serde_json::from_str(body).map_err(|e| {
        format!(
            "Prometheus response is not valid JSON ({e}): {}",
            excerpt(body.as_bytes())
        )
    })?;
    match r.get("status").and_then(Value::as_str) {
        Some("success") => {}
        status => {
            let kind = r
                .get("errorType")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            let error = r
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("no error message");
            return Err(match status {
                Some(status) => {
                    format!("Prometheus query failed with status {status:?} ({kind}): {error}")
                }
                None => format!("Prometheus response has no status ({kind}): {error}"),
            });
        }
    }
    let data = r.get("data").ok_or("Prometheus response has no data")?;
    let data = QueryData::deserialize(data)
        .map_err(|e| format!("Prometheus response data is malformed: {e}"))?;
    let sample = match data.result_type.as_str() {
        "vector" => {
            let series = data
                .result
                .as_array()
                .ok_or("Prometheus vector result is not a list")?;
            match series.as_slice() {
                [] => return Err("query returned no series; check the query or that the target exports the metric".into()),
                [one] => one.get("value").ok_or("Prometheus series has no value")?.clone(),
                many => return Err(format!("query returned {} series; aggregate it to one, e.g. with sum()", many.len())),
            }
        }
        "scalar" => data.result,
        other => {
            return Err(format!(
                "query returned a {other} result; it must return an instant vector of one series or a scalar"
            ));
        }
    };
    let text = sample
        .as_array()
        .filter(|pair| pair.len() == 2)
        .and_then(|pair| pair[1].as_str())
        .ok_or_else(|| format!("Prometheus sample {sample} is not [timestamp, \"value\"]"))?;
    let value: f64 = text
        .parse()
        .map_err(|_| format!("query returned {text:?}, which is not a number"))?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(format!(
            "query returned {text}; the value must be a finite number"
        ))
    }
}

/// Quotes at most [`BODY_EXCERPT_BYTES`] of a body as text: invalid UTF-8 is replaced, a
/// character cut at the end is dropped, control characters become spaces and a cut is marked
/// with `...`.
pub fn excerpt(body: &[u8]) -> String {
    let mut head = &body[..body.len().min(BODY_EXCERPT_BYTES)];
    if let Err(e) = std::str::from_utf8(head)
        && e.error_len().is_none()
    {
        head = &head[..e.valid_up_to()];
    }
    let mut text: String = String::from_utf8_lossy(head)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if body.len() > BODY_EXCERPT_BYTES {
        text.push_str("...");
    }
    text
}

/// The error for a response whose status is not 200.
pub fn status_error(url: &str, status: u16, body: &[u8]) -> String {
    format!("GET {url} returned HTTP {status}: {}", excerpt(body))
}

/// The error message for a request to `server` (the trigger's `serverAddress`) that got no
/// response because of `e`; `timeout_ms` is the timeout in force.
pub fn transport_error(server: &str, e: &TransportError, timeout_ms: u64) -> String {
    let url = split_url(server).ok();
    let host = url.as_ref().map_or(server, |url| url.authority);
    match e {
        TransportError::Denied => format!(
            "request to serverAddress {server} was denied: its host ({host}) must be listed in \
             the plugin's grants.allowedHosts"
        ),
        // The host was granted (a host that is not is denied before any connection).
        TransportError::ConnectionRefused => {
            // The scheme's port when the address names none.
            let port = match url {
                Some(_) if without_port(host) != host => "",
                Some(UrlParts { https: true, .. }) => ":443",
                Some(_) => ":80",
                None => "",
            };
            format!(
                "connection to serverAddress {server} was refused: nothing listens on \
                 {host}{port}; check that Prometheus runs there and serves that port"
            )
        }
        TransportError::Dns => format!("could not resolve the host of serverAddress {server}"),
        TransportError::Timeout => {
            format!("request to serverAddress {server} timed out after {timeout_ms} ms")
        }
        TransportError::UntrustedCertificate => format!(
            "the TLS certificate of serverAddress {server} is not trusted: it must be valid for \
             {} and signed by a public CA or by a CA of wasmop run --extra-ca-file",
            without_port(host)
        ),
        TransportError::Tls(what) => {
            format!("the TLS handshake with serverAddress {server} failed: {what}")
        }
        TransportError::Other(what) => format!("request to serverAddress {server} failed: {what}"),
    }
}

/// `authority` without its `:port`, e.g. `prom` of `prom:9090`, `[::1]` of `[::1]:443`.
fn without_port(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Which way a trigger votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The service is in use: keep it up (or bring it back).
    Up,
    /// The service is idle.
    Down,
}

/// A trigger's vote and what it saw.
#[derive(Clone, Debug, PartialEq)]
pub struct Vote {
    /// The vote.
    pub vote: Direction,
    /// The measured value of the trigger query, when it ran.
    pub value: Option<f64>,
    /// A short explanation for the ElasticService's status.
    pub reason: String,
}

/// Checks the health query's result: `Ok` when it is exactly 1 (as upstream compares it).
///
/// # Errors
/// Any other value, as an error about `metadata.uptimeFilter` that says which scrape target
/// (`up{<uptime_filter>}`) was not up for the whole window of `window_seconds`.
pub fn check_health(health: f64, uptime_filter: &str, window_seconds: u32) -> Result<(), Error> {
    if health == 1.0 {
        return Ok(());
    }
    let window = if window_seconds == 0 {
        DEFAULT_HEALTH_WINDOW_SECONDS
    } else {
        window_seconds
    };
    Err(Error::field(
        "metadata.uptimeFilter",
        format_args!(
            "Prometheus health check failed: up{{{uptime_filter}}} was not 1 for the whole last \
             {window}s (got {health}); no vote until the scrape target has been up for a full \
             cooldown period"
        ),
    ))
}

/// The vote for a trigger value and its threshold: down when `value < threshold`, otherwise up.
pub fn decide(value: f64, threshold: f64) -> Vote {
    if value < threshold {
        Vote {
            vote: Direction::Down,
            value: Some(value),
            reason: format!("value {value} below threshold {threshold}"),
        }
    } else {
        Vote {
            vote: Direction::Up,
            value: Some(value),
            reason: format!("value {value} at or above threshold {threshold}"),
        }
    }
}

#[cfg(test)]
mod tests;
