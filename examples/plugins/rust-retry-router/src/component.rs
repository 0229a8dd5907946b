//! Export glue for the `router` world (wasmop-plugin-sdk bindings). The `Guest` implementation
//! also builds natively, so that `cargo test` runs it on the JSON requests of `fixtures/`.
use wasmop_plugin_sdk::router::wasmop::plugin::routing::StringMatch;
use wasmop_plugin_sdk::router::{Guest, RouteRequest, RouteResponse};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

struct Plugin;

fn istio(v: StringMatch) -> serde_json::Value {
    match v {
        StringMatch::Exact(s) => serde_json::json!({ "exact": s }),
        StringMatch::Prefix(s) => serde_json::json!({ "prefix": s }),
        StringMatch::Regex(s) => serde_json::json!({ "regex": s }),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("retry-router", env!("CARGO_PKG_VERSION"), Hook::Routing)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        crate::Settings::parse(&settings)
            .map(drop)
            .map_err(|(m, f)| PluginError::at(f, m))
    }

    fn route(settings: String, request: RouteRequest) -> Result<RouteResponse, PluginError> {
        let settings = crate::Settings::parse(&settings).map_err(|(m, f)| PluginError::at(f, m))?;
        let vs: serde_json::Value = serde_json::from_str(&request.virtual_service)
            .map_err(|e| PluginError::at("request.virtual-service", format!("not JSON: {e}")))?;
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
            .map_err(|e| PluginError::at("request.virtual-service", e))?;
        wasmop_plugin_sdk::log!(
            Debug,
            "{}: {} routes, {} retries to subset {}",
            request.dynamic_env,
            http.len(),
            settings.attempts,
            req.subset
        );
        let http = serde_json::to_string(&http)
            .map_err(|e| PluginError::new(format!("cannot serialize the routes: {e}")))?;
        Ok(RouteResponse { http })
    }
}

#[cfg(target_arch = "wasm32")]
wasmop_plugin_sdk::router::export_router!(Plugin);

/// Each `fixtures/*.json` (settings, a request, the expected routes or error) through `route`.
#[test]
fn fixtures() {
    let checked = wasmop_plugin_sdk::fixtures::check_dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"),
        Plugin::route,
    );
    assert_eq!(checked, 2);
}
