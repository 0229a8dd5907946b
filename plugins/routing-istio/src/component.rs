//! Export glue for the `router` world: WIT types in, [`crate::rewrite`] on the parsed
//! VirtualService, its new `spec.http` out as JSON text.
use wasmop_plugin_sdk::router::wasmop::plugin::routing as w;
use wasmop_plugin_sdk::router::{Guest, RouteRequest, RouteResponse};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("routing-istio", env!("CARGO_PKG_VERSION"), Hook::Routing)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::validate_settings(&settings).map_err(|e| PluginError::at("settings", e))
    }

    fn route(settings: String, request: RouteRequest) -> Result<RouteResponse, PluginError> {
        let settings =
            crate::Settings::parse(&settings).map_err(|e| PluginError::at("settings", e))?;
        let vs: serde_json::Value =
            serde_json::from_str(&request.virtual_service).map_err(|e| {
                PluginError::at(
                    "request.virtual-service",
                    format!("the VirtualService is not valid JSON: {e}"),
                )
            })?;
        let http = crate::rewrite(&route_request(request), &vs, &settings)?;
        Ok(RouteResponse {
            http: serde_json::Value::Array(http).to_string(),
        })
    }
}

fn route_request(r: RouteRequest) -> crate::RouteRequest {
    crate::RouteRequest {
        dynamic_env: r.dynamic_env,
        unique_name: r.unique_name,
        subset: r.subset,
        host: r.host,
        namespace: r.namespace,
        default_version: r.default_version,
        matches: r.matches.into_iter().map(istio_match).collect(),
        route_prefix: r.route_prefix,
    }
}

fn istio_match(m: w::IstioMatch) -> crate::IstioMatch {
    crate::IstioMatch {
        headers: m
            .headers
            .into_iter()
            .map(|h| crate::HeaderMatch {
                name: h.name,
                value: match h.value {
                    w::StringMatch::Exact(s) => crate::StringMatch::Exact(s),
                    w::StringMatch::Prefix(s) => crate::StringMatch::Prefix(s),
                    w::StringMatch::Regex(s) => crate::StringMatch::Regex(s),
                },
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

wasmop_plugin_sdk::router::export_router!(Plugin);
