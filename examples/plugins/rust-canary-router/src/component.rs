//! Export glue for the `router` world (wasmop-plugin-sdk bindings).
use wasmop_plugin_sdk::router::wasmop::plugin::log::{Level, log};
use wasmop_plugin_sdk::router::wasmop::plugin::routing::StringMatch;
use wasmop_plugin_sdk::router::wasmop::plugin::types::Hook;
use wasmop_plugin_sdk::router::{Guest, PluginError, PluginInfo, RouteRequest, RouteResponse};

struct Plugin;

fn err(message: String, field: Option<&str>) -> PluginError {
    PluginError {
        message,
        field: field.map(str::to_owned),
    }
}

fn istio(v: StringMatch) -> serde_json::Value {
    match v {
        StringMatch::Exact(s) => serde_json::json!({ "exact": s }),
        StringMatch::Prefix(s) => serde_json::json!({ "prefix": s }),
        StringMatch::Regex(s) => serde_json::json!({ "regex": s }),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "canary-router".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            hook: Hook::Routing,
        }
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::Settings::parse(&settings)
            .map(drop)
            .map_err(|(m, f)| err(m, Some(f)))
    }

    fn route(settings: String, request: RouteRequest) -> Result<RouteResponse, PluginError> {
        let settings = crate::Settings::parse(&settings).map_err(|(m, f)| err(m, Some(f)))?;
        let vs: serde_json::Value = serde_json::from_str(&request.virtual_service)
            .map_err(|e| err(format!("not JSON: {e}"), Some("request.virtual-service")))?;
        let req = crate::Request {
            unique_name: request.unique_name,
            subset: request.subset,
            host: request.host,
            namespace: request.namespace,
            default_version: request.default_version,
            matches: request
                .matches
                .into_iter()
                .map(|m| crate::Match {
                    headers: m
                        .headers
                        .into_iter()
                        .map(|h| (h.name, istio(h.value)))
                        .collect(),
                    source_labels: m
                        .source_labels
                        .into_iter()
                        .map(|l| (l.key, l.value))
                        .collect(),
                })
                .collect(),
            route_prefix: request.route_prefix,
        };
        let http = crate::route(&req, &vs, &settings)
            .map_err(|e| err(e, Some("request.virtual-service")))?;
        log(
            Level::Debug,
            &format!(
                "{}: {} routes, {}% canary to subset {}",
                request.dynamic_env,
                http.len(),
                settings.percent,
                req.subset
            ),
        );
        let http = serde_json::to_string(&http)
            .map_err(|e| err(format!("cannot serialize the routes: {e}"), None))?;
        Ok(RouteResponse { http })
    }
}

wasmop_plugin_sdk::router::export_router!(Plugin);
