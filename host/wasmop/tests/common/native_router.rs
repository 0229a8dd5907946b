//! The default routing plugin's logic (`plugins/routing-istio`) as a native [`Router`]: the
//! baseline of the routing benchmark and the router of the plan tests. Shared by
//! tests/routing_plan.rs and benches/routing.rs.

use serde_json::Value;
use wasmop_controllers::routing::Router;
use wasmop_plugin_host::{FailurePolicy, RouteRequest, StringMatch};

/// The default plugin's logic (`plugins/routing-istio`) called as a native library: the
/// baseline of the benchmarks and the plan tests. Same input and output as the component,
/// JSON parsing included.
#[derive(Default)]
pub struct Native {
    /// The plugin settings.
    pub settings: routing_istio::Settings,
}

#[async_trait::async_trait]
impl Router for Native {
    /// The builtin's name, so that a plan with it reads as one with the component.
    fn name(&self) -> &str {
        "routing-istio"
    }

    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Fail
    }

    async fn route(&self, r: RouteRequest) -> Result<Vec<Value>, String> {
        use routing_istio as ri;
        let req = ri::RouteRequest {
            dynamic_env: r.dynamic_env,
            unique_name: r.unique_name,
            subset: r.subset,
            host: r.host,
            namespace: r.namespace,
            default_version: r.default_version,
            matches: r
                .matches
                .into_iter()
                .map(|m| ri::IstioMatch {
                    headers: m
                        .headers
                        .into_iter()
                        .map(|h| ri::HeaderMatch {
                            name: h.name,
                            value: match h.value {
                                StringMatch::Exact(v) => ri::StringMatch::Exact(v),
                                StringMatch::Prefix(v) => ri::StringMatch::Prefix(v),
                                StringMatch::Regex(v) => ri::StringMatch::Regex(v),
                            },
                        })
                        .collect(),
                    source_labels: m
                        .source_labels
                        .into_iter()
                        .map(|l| ri::Label {
                            key: l.key,
                            value: l.value,
                        })
                        .collect(),
                })
                .collect(),
            route_prefix: r.route_prefix,
        };
        // What the component runs, JSON text in and out included.
        let vs: Value = serde_json::from_str(&r.virtual_service).map_err(|e| e.to_string())?;
        let http = ri::rewrite(&req, &vs, &self.settings)?;
        serde_json::from_str(&Value::Array(http).to_string()).map_err(|e| e.to_string())
    }
}
