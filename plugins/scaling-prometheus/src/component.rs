//! Export glue for the `scaler` world, and the blocking `wasi:http` GET it votes with.
use wasip2::clocks::monotonic_clock;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingResponse, Method, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::poll;
use wasip2::io::streams::StreamError;
use wasmop_plugin_sdk::scaler::wasmop::plugin::scaling::Vote as V;
use wasmop_plugin_sdk::scaler::{Guest, TriggerRequest, TriggerVote};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

use crate::{Error, Settings, TransportError, Trigger};

struct Plugin;

fn plugin_error(e: Error) -> PluginError {
    match &e.field {
        Some(field) => PluginError::at(field, e.detail()),
        None => PluginError::new(e.detail()),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "scaling-prometheus",
            env!("CARGO_PKG_VERSION"),
            Hook::Scaling,
        )
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::validate_settings(&settings)
            .map(drop)
            .map_err(plugin_error)
    }

    fn vote(settings: String, r: TriggerRequest) -> Result<TriggerVote, PluginError> {
        vote(&settings, &r).map_err(plugin_error)
    }
}

fn vote(settings: &str, r: &TriggerRequest) -> Result<TriggerVote, Error> {
    let settings = crate::validate_settings(settings)?;
    crate::check_trigger_type(&r.trigger_type)?;
    let trigger = Trigger::parse(&r.metadata)?;

    let health_query = crate::health_query(&trigger.uptime_filter, r.cooldown_seconds);
    let health = query(&trigger, &settings, &health_query, "metadata.uptimeFilter")?;
    crate::check_health(health, &trigger.uptime_filter, r.cooldown_seconds)?;
    let value = query(&trigger, &settings, &trigger.query, "metadata.query")?;
    let vote = crate::decide(value, trigger.threshold);
    wasmop_plugin_sdk::log!(Debug, "{}: {}", r.elastic_service, vote.reason);
    Ok(TriggerVote {
        vote: match vote.vote {
            crate::Direction::Up => V::Up,
            crate::Direction::Down => V::Down,
        },
        value: vote.value,
        reason: vote.reason,
    })
}

/// Runs one instant query and reads its value; errors about the query's result (including a
/// status other than 200, e.g. Prometheus' 400 for a bad query) name `field`.
fn query(trigger: &Trigger, settings: &Settings, promql: &str, field: &str) -> Result<f64, Error> {
    let url = crate::query_url(&trigger.server_address, promql);
    let (status, body) = get(trigger, settings, &url)?;
    if status != 200 {
        return Err(Error::field(
            field,
            crate::status_error(&url, status, &body),
        ));
    }
    let body = String::from_utf8_lossy(&body);
    crate::parse_value(&body)
        .map_err(|e| Error::field(field, format_args!("{e} (query: {promql})")))
}

/// A blocking `GET url` with the trigger's headers: the response status and body.
fn get(trigger: &Trigger, settings: &Settings, url: &str) -> Result<(u16, Vec<u8>), Error> {
    let server = trigger.server_address.as_str();
    let transport = |e: TransportError| {
        Error::field(
            "metadata.serverAddress",
            crate::transport_error(server, &e, settings.timeout_ms),
        )
    };
    let url_parts = crate::split_url(url).map_err(|e| Error::field("metadata.serverAddress", e))?;

    let entries: Vec<(String, Vec<u8>)> = trigger
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    let headers = Fields::from_list(&entries).map_err(|e| {
        Error::field(
            "metadata.headers",
            format_args!("the host rejected the headers: {e:?}"),
        )
    })?;
    let request = OutgoingRequest::new(headers);
    let invalid = |what: &str| {
        Error::field(
            "metadata.serverAddress",
            format_args!("the host rejected the {what} of {url}"),
        )
    };
    request
        .set_method(&Method::Get)
        .map_err(|()| invalid("method"))?;
    request
        .set_scheme(Some(if url_parts.https {
            &Scheme::Https
        } else {
            &Scheme::Http
        }))
        .map_err(|()| invalid("scheme"))?;
    request
        .set_authority(Some(url_parts.authority))
        .map_err(|()| invalid("authority"))?;
    request
        .set_path_with_query(Some(url_parts.path_with_query))
        .map_err(|()| invalid("path"))?;

    let timeout_ns = settings.timeout_ms.saturating_mul(1_000_000);
    let options = RequestOptions::new();
    // An error means the host does not support that timeout; the deadline below still applies.
    let _ = options.set_connect_timeout(Some(timeout_ns));
    let _ = options.set_first_byte_timeout(Some(timeout_ns));
    let _ = options.set_between_bytes_timeout(Some(timeout_ns));

    let future =
        outgoing_handler::handle(request, Some(options)).map_err(|e| transport(classify(&e)))?;
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
    let body = read_body(&response).map_err(transport)?;
    Ok((status, body))
}

/// Reads the whole body, failing past [`crate::MAX_BODY_BYTES`]; stops there without reading on.
fn read_body(response: &IncomingResponse) -> Result<Vec<u8>, TransportError> {
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
                    if out.len() + chunk.len() > crate::MAX_BODY_BYTES {
                        return Err(TransportError::Other(format!(
                            "the response body exceeds {} MiB",
                            crate::MAX_BODY_BYTES / (1024 * 1024)
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

fn classify(e: &ErrorCode) -> TransportError {
    match e {
        ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => TransportError::Denied,
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

wasmop_plugin_sdk::scaler::export_scaler!(Plugin);
