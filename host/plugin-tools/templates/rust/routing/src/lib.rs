//! {{name}}: a `routing` plugin. Requests that match one of the DynamicEnv's istioMatches go to
//! its subset: before each route to the service's default version, one copy per istioMatch,
//! narrowed by it and sent to the subset (README.md says what the host checks).

use serde_json::{Map, Value, json};
use wasmop_plugin_sdk::router::wasmop::plugin::routing::{IstioMatch, StringMatch};
use wasmop_plugin_sdk::router::{Guest, RouteRequest, RouteResponse};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

/// The plugin's settings, from its registry entry.
#[derive(Debug, Default)]
pub struct Settings {}

impl Settings {
    /// Parses the settings JSON object.
    ///
    /// # Errors
    /// Not a JSON object, or a key the plugin does not know, at `settings`.
    pub fn parse(text: &str) -> Result<Self, PluginError> {
        let Ok(Value::Object(settings)) = serde_json::from_str::<Value>(text) else {
            return Err(PluginError::at(
                "settings",
                "settings must be a JSON object",
            ));
        };
        if let Some(key) = settings.keys().next() {
            return Err(PluginError::at(
                "settings",
                format!("unknown settings key {key:?}: this plugin takes no settings yet"),
            ));
        }
        Ok(Self {})
    }
}

/// Istio's JSON form of a header condition: `{"exact": "jason"}`.
fn istio(value: &StringMatch) -> Value {
    match value {
        StringMatch::Exact(v) => json!({ "exact": v }),
        StringMatch::Prefix(v) => json!({ "prefix": v }),
        StringMatch::Regex(v) => json!({ "regex": v }),
    }
}

/// Whether destination `host` names the request's service: `host`, `host.namespace`,
/// `host.namespace.svc` or `host.namespace.svc.cluster.local`; the short name only when the
/// VirtualService is in the service's namespace (Istio reads it in the VirtualService's).
fn is_service(host: &str, r: &RouteRequest, vs_namespace: &str) -> bool {
    let long = format!("{}.{}", r.host, r.namespace);
    (host == r.host && (vs_namespace.is_empty() || vs_namespace == r.namespace))
        || host == long
        || host == format!("{long}.svc")
        || host == format!("{long}.svc.cluster.local")
}

/// `entry` (a route's `match` entry) narrowed by `m`, or `None` when it already has another
/// condition on one of `m`'s headers or source labels.
fn narrow(entry: &Map<String, Value>, m: &IstioMatch) -> Option<Value> {
    let mut entry = entry.clone();
    let conditions = m
        .headers
        .iter()
        .map(|h| ("headers", h.name.as_str(), istio(&h.value)))
        .chain(
            m.source_labels
                .iter()
                .map(|l| ("sourceLabels", l.key.as_str(), json!(l.value))),
        );
    for (field, key, want) in conditions {
        let map = entry.entry(field).or_insert_with(|| json!({}));
        let map = map.as_object_mut()?;
        match map.get(key) {
            Some(have) if *have != want => return None,
            _ => {
                map.insert(key.to_owned(), want);
            }
        }
    }
    Some(Value::Object(entry))
}

/// The complete new `spec.http` of the VirtualService.
///
/// # Errors
/// The VirtualService is not JSON, or its `spec.http` is not a list of objects.
pub fn route(r: &RouteRequest) -> Result<Vec<Value>, PluginError> {
    let vs: Value = serde_json::from_str(&r.virtual_service)
        .map_err(|e| PluginError::at("request.virtual-service", format!("not JSON: {e}")))?;
    let vs_namespace = vs
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let routes = match vs.pointer("/spec/http") {
        None => &Vec::new(),
        Some(Value::Array(routes)) => routes,
        Some(_) => {
            return Err(PluginError::at(
                "request.virtual-service",
                "spec.http is not a list",
            ));
        }
    };
    let (mut out, mut copies) = (Vec::new(), 0);
    for route in routes {
        let Value::Object(fields) = route else {
            return Err(PluginError::at(
                "request.virtual-service",
                "spec.http holds a route that is not an object",
            ));
        };
        let name = fields.get("name").and_then(Value::as_str).unwrap_or("");
        if name.starts_with(&r.route_prefix) {
            continue; // this plugin's earlier output: made again below
        }
        // The route's destination to the service at its default version, if it has one.
        let default = fields
            .get("route")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| d.get("destination"))
            .find(|d| {
                d.get("host")
                    .and_then(Value::as_str)
                    .is_some_and(|h| is_service(h, r, vs_namespace))
                    && d.get("subset").and_then(Value::as_str) == Some(&r.default_version)
            });
        if let Some(destination) = default {
            let mut destination = destination.clone();
            destination["subset"] = json!(r.subset);
            let entries = match fields.get("match").and_then(Value::as_array) {
                Some(entries) if !entries.is_empty() => entries.clone(),
                _ => vec![json!({})],
            };
            for m in &r.matches {
                let narrowed: Vec<Value> = entries
                    .iter()
                    .filter_map(|e| narrow(e.as_object()?, m))
                    .collect();
                if narrowed.is_empty() {
                    continue;
                }
                let mut copy = fields.clone();
                copy.insert("name".into(), json!(format!("{}{copies}", r.route_prefix)));
                copies += 1;
                copy.insert("match".into(), Value::Array(narrowed));
                copy.insert("route".into(), json!([{ "destination": destination }]));
                out.push(Value::Object(copy));
            }
        }
        out.push(route.clone());
    }
    Ok(out)
}

/// The `router` world's exports.
pub struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), Hook::Routing)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        Settings::parse(&settings).map(drop)
    }

    fn route(settings: String, request: RouteRequest) -> Result<RouteResponse, PluginError> {
        let _settings = Settings::parse(&settings)?;
        let http = route(&request)?;
        wasmop_plugin_sdk::log!(
            Debug,
            "{}: {} routes for subset {}",
            request.dynamic_env,
            http.len(),
            request.subset
        );
        let http = serde_json::to_string(&http)
            .map_err(|e| PluginError::new(format!("cannot write the routes: {e}")))?;
        Ok(RouteResponse { http })
    }
}

#[cfg(target_arch = "wasm32")]
wasmop_plugin_sdk::router::export_router!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_plugin_sdk::router::wasmop::plugin::routing::HeaderMatch;

    fn request(http: Value) -> RouteRequest {
        RouteRequest {
            dynamic_env: "shop/feature-x".into(),
            unique_name: "reviews-shop-feature-x".into(),
            subset: "feature-x".into(),
            host: "reviews".into(),
            namespace: "shop".into(),
            default_version: "shared".into(),
            matches: vec![IstioMatch {
                headers: vec![HeaderMatch {
                    name: "end-user".into(),
                    value: StringMatch::Exact("jason".into()),
                }],
                source_labels: vec![],
            }],
            route_prefix: "de-feature-x-".into(),
            virtual_service: json!({"metadata": {"namespace": "shop"}, "spec": {"http": http}})
                .to_string(),
        }
    }

    #[test]
    fn a_copy_of_the_default_route_goes_to_the_subset() {
        let default = json!({"name": "default", "match": [{"uri": {"prefix": "/"}}],
            "route": [{"destination": {"host": "reviews", "subset": "shared"}}]});
        let http = route(&request(json!([default]))).unwrap();
        assert_eq!(
            http,
            [
                json!({"name": "de-feature-x-0",
                       "match": [{"uri": {"prefix": "/"}, "headers": {"end-user": {"exact": "jason"}}}],
                       "route": [{"destination": {"host": "reviews", "subset": "feature-x"}}]}),
                default
            ]
        );
        // Its own output gives the same routes.
        let again = request(Value::Array(http.clone()));
        assert_eq!(route(&again).unwrap(), http);
    }

    #[test]
    fn other_routes_stay_and_conflicting_entries_are_left_out() {
        let other =
            json!({"name": "v3", "route": [{"destination": {"host": "reviews", "subset": "v3"}}]});
        let conflict = json!({"name": "bob", "match": [{"headers": {"end-user": {"exact": "bob"}}}],
            "route": [{"destination": {"host": "reviews", "subset": "shared"}}]});
        let http = route(&request(json!([other, conflict]))).unwrap();
        assert_eq!(http, [other, conflict]);
    }

    #[test]
    fn settings_take_no_keys() {
        assert!(Settings::parse("{}").is_ok());
        let e = Settings::parse(r#"{"colour": 1}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("settings"));
        assert!(Settings::parse("[]").is_err());
    }

    /// Each `fixtures/*.json` (settings, a request, the answer or plugin-error it expects)
    /// through `Plugin::route`, as `{{cli}} test --fixtures fixtures` runs them on the
    /// component.
    #[test]
    fn fixtures() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
        assert!(wasmop_plugin_sdk::fixtures::check_dir(dir, Plugin::route) > 0);
    }
}
