//! Export glue for the `router` world.
use wasmop_plugin_sdk::router::wasmop::plugin::routing as w;
use wasmop_plugin_sdk::router::wasmop::plugin::types::Hook;
use wasmop_plugin_sdk::router::{Guest, PluginError, PluginInfo, RouteRequest, RouteResponse};

struct Plugin;

fn err(message: String, field: Option<&str>) -> PluginError {
    PluginError {
        message,
        field: field.map(str::to_owned),
    }
}

fn string_match(v: w::StringMatch) -> crate::StringMatch {
    match v {
        w::StringMatch::Exact(s) => crate::StringMatch::Exact(s),
        w::StringMatch::Prefix(s) => crate::StringMatch::Prefix(s),
        w::StringMatch::Regex(s) => crate::StringMatch::Regex(s),
    }
}

fn istio_match(m: w::IstioMatch) -> crate::IstioMatch {
    crate::IstioMatch {
        headers: m
            .headers
            .into_iter()
            .map(|h| crate::HeaderMatch {
                name: h.name,
                value: string_match(h.value),
            })
            .collect(),
        source_labels: m
            .source_labels
            .into_iter()
            .map(|l| crate::Label {
                key: l.key,
                value: l.value,
            })
            .collect(),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "routing-istio".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            hook: Hook::Routing,
        }
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::validate_settings(&settings).map_err(|e| err(e, Some("settings")))
    }

    fn route(settings: String, request: RouteRequest) -> Result<RouteResponse, PluginError> {
        let settings = crate::Settings::parse(&settings).map_err(|e| err(e, Some("settings")))?;
        let req = crate::RouteRequest {
            dynamic_env: request.dynamic_env,
            unique_name: request.unique_name,
            subset: request.subset,
            host: request.host,
            namespace: request.namespace,
            default_version: request.default_version,
            matches: request.matches.into_iter().map(istio_match).collect(),
            route_prefix: request.route_prefix,
        };
        let http = crate::rewrite_text(&req, &request.virtual_service, &settings).map_err(|e| {
            // Only the text itself can be invalid JSON: name the field then.
            let not_json =
                serde_json::from_str::<serde::de::IgnoredAny>(&request.virtual_service).is_err();
            err(e, not_json.then_some("request.virtual-service"))
        })?;
        Ok(RouteResponse { http })
    }
}

wasmop_plugin_sdk::router::export_router!(Plugin);
