//! Export glue for the `scaler` world, and the `GET` it votes with (the SDK's `wasi:http` client).
use std::time::Duration;

use wasmop_plugin_sdk::http;
use wasmop_plugin_sdk::scaler::wasmop::plugin::scaling::Vote as V;
use wasmop_plugin_sdk::scaler::{Guest, TriggerRequest, TriggerVote};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

use crate::{Error, Settings, Trigger};

struct Plugin;

fn plugin_error(e: Error) -> PluginError {
    match &e.field {
        Some(field) => PluginError::at(crate::request_field(field), e.detail()),
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
    let mut request = http::Request::get(url)
        .timeout(Duration::from_millis(settings.timeout_ms))
        .max_body_bytes(crate::MAX_BODY_BYTES);
    for (name, value) in &trigger.headers {
        request = request.header(name, value);
    }
    let response = request.send().map_err(|e| match e {
        http::Error::Headers(_) => Error::field("metadata.headers", e),
        http::Error::Transport(e) => Error::field(
            "metadata.serverAddress",
            crate::transport_error(&trigger.server_address, &e, settings.timeout_ms),
        ),
        http::Error::Url(_) | http::Error::Rejected { .. } => {
            Error::field("metadata.serverAddress", e)
        }
    })?;
    Ok((response.status, response.body))
}

wasmop_plugin_sdk::scaler::export_scaler!(Plugin);
