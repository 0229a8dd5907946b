//! Example `routing` plugin: a percentage canary for DynamicEnv subsets.
//!
//! For every HTTP route of the VirtualService whose only destination is the service host at
//! its default version, [`route`] inserts, before that route:
//!
//! 1. one copy per `istioMatch` (the DynamicEnv's header and source-label conditions, merged
//!    into each of the route's `match` entries) that sends **all** matching requests to the
//!    subset, so testers always reach it;
//! 2. one canary copy with the route's own `match` that splits the remaining requests:
//!    `percent` % to the subset, the rest to the default version.
//!
//! Copies are named `<route prefix><n>` (header copies) and `<route prefix>canary-<n>`, so the
//! host recognises them as this plugin's earlier output and they are replaced on the next call:
//! running [`route`] on its own output gives the same output. Routes with several or weighted
//! destinations are left alone (a canary on top of an existing split is ambiguous). The
//! subset's destination carries the response header `responseHeader` (default
//! `x-dynamic-env`) naming the clone, so a client can tell which version answered.
//!
//! Settings: `{"percent": 0..=100, "responseHeader": "<header name>"}`, both optional
//! (defaults 10 and `x-dynamic-env`).

#[cfg(any(target_arch = "wasm32", test))]
mod component;

use serde_json::{Map, Value, json};

/// The share of unmatched requests sent to the subset when the settings name none.
pub const DEFAULT_PERCENT: u32 = 10;
/// The response header naming the clone when the settings name none.
pub const DEFAULT_RESPONSE_HEADER: &str = "x-dynamic-env";

/// The plugin settings (its `settings:` in the `wasmop-plugins` ConfigMap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `percent`: share (0–100) of the requests that match no `istioMatch` sent to the subset.
    pub percent: u32,
    /// `responseHeader`: added to the subset's responses, with the clone's unique name.
    pub response_header: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            percent: DEFAULT_PERCENT,
            response_header: DEFAULT_RESPONSE_HEADER.into(),
        }
    }
}

/// A settings problem: the message and the offending key as a dotted path.
pub type SettingsError = (String, &'static str);

impl Settings {
    /// Parses the settings JSON object; absent keys take their defaults.
    ///
    /// # Errors
    /// The message and field of the first problem: not an object, an unknown key, `percent`
    /// not an integer in 0..=100, `responseHeader` not a header name.
    pub fn parse(settings: &str) -> Result<Self, SettingsError> {
        let obj = match serde_json::from_str::<Value>(settings) {
            Ok(Value::Object(obj)) => obj,
            Ok(other) => {
                return Err((
                    format!("settings must be a JSON object, got {other}"),
                    "settings",
                ));
            }
            Err(e) => return Err((format!("settings are not valid JSON: {e}"), "settings")),
        };
        let mut out = Self::default();
        for (key, value) in &obj {
            match key.as_str() {
                "percent" => {
                    out.percent = value
                        .as_u64()
                        .filter(|p| *p <= 100)
                        .and_then(|p| u32::try_from(p).ok())
                        .ok_or_else(|| {
                            (
                                format!("percent must be an integer from 0 to 100, got {value}"),
                                "settings.percent",
                            )
                        })?;
                }
                "responseHeader" => {
                    out.response_header = value
                        .as_str()
                        .filter(|h| is_header_name(h))
                        .ok_or_else(|| {
                            (
                                format!("responseHeader must be an HTTP header name, got {value}"),
                                "settings.responseHeader",
                            )
                        })?
                        .to_owned();
                }
                other => {
                    return Err((
                        format!(
                            "unknown settings key {other:?}; the keys are \"percent\" and \"responseHeader\""
                        ),
                        "settings",
                    ));
                }
            }
        }
        Ok(out)
    }
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// One `istioMatch` of the DynamicEnv: header conditions (name, Istio `StringMatch` JSON) and
/// source labels, ANDed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Match {
    /// Header name and its Istio `StringMatch`, e.g. `{"exact": "jason"}`.
    pub headers: Vec<(String, Value)>,
    /// Source label key and value.
    pub source_labels: Vec<(String, String)>,
}

/// What the host asks for (the fields of the WIT `route-request` this plugin uses).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// The clone's unique name (value of the response header).
    pub unique_name: String,
    /// The DestinationRule subset of the DynamicEnv.
    pub subset: String,
    /// The service host, short name (e.g. `reviews`).
    pub host: String,
    /// The service's namespace.
    pub namespace: String,
    /// The base version's subset (e.g. `shared`).
    pub default_version: String,
    /// The DynamicEnv's matches.
    pub matches: Vec<Match>,
    /// Name prefix of every route this subset owns (ends with `-`).
    pub route_prefix: String,
}

/// Whether `dest` names the service: the short name, `host.ns`, `host.ns.svc` or
/// `host.ns.svc.cluster.local`.
fn is_service(dest: &str, req: &Request) -> bool {
    dest == req.host
        || dest
            .strip_prefix(&format!("{}.{}", req.host, req.namespace))
            .is_some_and(|rest| matches!(rest, "" | ".svc" | ".svc.cluster.local"))
}

/// The destination host of a route whose only destination is (service, default version).
fn sole_default_destination<'a>(route: &'a Map<String, Value>, req: &Request) -> Option<&'a str> {
    let [entry] = route.get("route")?.as_array()?.as_slice() else {
        return None;
    };
    let dest = entry.get("destination")?;
    let host = dest.get("host")?.as_str()?;
    (dest.get("subset")?.as_str()? == req.default_version && is_service(host, req)).then_some(host)
}

fn subset_destination(
    host: &str,
    req: &Request,
    settings: &Settings,
    weight: Option<u32>,
) -> Value {
    let mut d = json!({
        "destination": {"host": host, "subset": req.subset},
        "headers": {"response": {"add": {settings.response_header.as_str(): req.unique_name}}},
    });
    if let Some(w) = weight {
        d["weight"] = json!(w);
    }
    d
}

/// The route's `match` list with `m` merged into every entry (one empty entry if it has none).
fn merged_matches(route: &Map<String, Value>, m: &Match) -> Value {
    let entries = route
        .get("match")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .cloned()
        .unwrap_or_else(|| vec![json!({})]);
    Value::Array(
        entries
            .into_iter()
            .map(|mut entry| {
                let obj = entry.as_object_mut().expect("match entries are objects");
                let headers = obj
                    .entry("headers")
                    .or_insert_with(|| json!({}))
                    .as_object_mut();
                if let Some(headers) = headers {
                    for (name, value) in &m.headers {
                        headers.insert(name.clone(), value.clone());
                    }
                }
                if !m.source_labels.is_empty() {
                    let labels = obj
                        .entry("sourceLabels")
                        .or_insert_with(|| json!({}))
                        .as_object_mut();
                    if let Some(labels) = labels {
                        for (k, v) in &m.source_labels {
                            labels.insert(k.clone(), json!(v));
                        }
                    }
                }
                entry
            })
            .collect(),
    )
}

/// The complete new `spec.http` of `vs` (a VirtualService as JSON); see the module docs.
///
/// # Errors
/// A message when the route prefix is empty or does not end with `-`, or `spec.http` is
/// missing or not a list of objects, or a `match` entry is not an object.
pub fn route(req: &Request, vs: &Value, settings: &Settings) -> Result<Vec<Value>, String> {
    if !req.route_prefix.ends_with('-') {
        return Err(format!(
            "route prefix {:?} must end with '-'",
            req.route_prefix
        ));
    }
    let http = vs
        .pointer("/spec/http")
        .and_then(Value::as_array)
        .ok_or("the VirtualService has no spec.http list")?;
    let mut out = Vec::with_capacity(http.len() * (2 + req.matches.len()));
    let (mut n, mut canaries) = (0, 0);
    for (i, route) in http.iter().enumerate() {
        let route = route
            .as_object()
            .ok_or_else(|| format!("spec.http[{i}] is not an object"))?;
        let name = route.get("name").and_then(Value::as_str).unwrap_or("");
        if name.starts_with(&req.route_prefix) {
            continue;
        }
        if route
            .get("match")
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().any(|e| !e.is_object()))
        {
            return Err(format!(
                "spec.http[{i}].match has an entry that is not an object"
            ));
        }
        if let Some(host) = sole_default_destination(route, req) {
            for m in &req.matches {
                let mut copy = route.clone();
                copy.insert("name".into(), json!(format!("{}{n}", req.route_prefix)));
                copy.insert("match".into(), merged_matches(route, m));
                copy.insert(
                    "route".into(),
                    json!([subset_destination(host, req, settings, None)]),
                );
                copy.remove("delegate");
                out.push(Value::Object(copy));
                n += 1;
            }
            if settings.percent > 0 {
                let mut canary = route.clone();
                let base = json!({
                    "destination": {"host": host, "subset": req.default_version},
                    "weight": 100 - settings.percent,
                });
                canary.insert(
                    "name".into(),
                    json!(format!("{}canary-{canaries}", req.route_prefix)),
                );
                canary.insert(
                    "route".into(),
                    json!([
                        base,
                        subset_destination(host, req, settings, Some(settings.percent))
                    ]),
                );
                out.push(Value::Object(canary));
                canaries += 1;
            }
        }
        out.push(Value::Object(route.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            unique_name: "reviews-shop-feature-x".into(),
            subset: "feature-x".into(),
            host: "reviews".into(),
            namespace: "shop".into(),
            default_version: "shared".into(),
            matches: vec![Match {
                headers: vec![("end-user".into(), json!({"exact": "jason"}))],
                source_labels: vec![],
            }],
            route_prefix: "de-feature-x-1a2b3c-".into(),
        }
    }

    fn vs() -> Value {
        json!({
            "metadata": {"name": "reviews", "namespace": "shop"},
            "spec": {"hosts": ["reviews"], "http": [
                {"name": "api", "match": [{"uri": {"prefix": "/api"}}],
                 "route": [{"destination": {"host": "reviews.shop.svc.cluster.local", "subset": "shared"}}]},
                {"name": "split", "route": [
                    {"destination": {"host": "reviews", "subset": "shared"}, "weight": 50},
                    {"destination": {"host": "reviews", "subset": "v2"}, "weight": 50}]},
                {"name": "other", "route": [{"destination": {"host": "ratings", "subset": "shared"}}]}
            ]}
        })
    }

    #[test]
    fn matched_requests_and_a_share_of_the_rest_reach_the_subset() {
        let settings = Settings::parse(r#"{"percent": 20}"#).unwrap();
        let http = route(&request(), &vs(), &settings).unwrap();
        let names: Vec<&str> = http.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "de-feature-x-1a2b3c-0",
                "de-feature-x-1a2b3c-canary-0",
                "api",
                "split",
                "other"
            ]
        );
        assert_eq!(
            http[0]["match"],
            json!([{"uri": {"prefix": "/api"}, "headers": {"end-user": {"exact": "jason"}}}])
        );
        assert_eq!(http[0]["route"][0]["destination"]["subset"], "feature-x");
        assert_eq!(
            http[0]["route"][0]["headers"]["response"]["add"]["x-dynamic-env"],
            "reviews-shop-feature-x"
        );
        assert_eq!(http[1]["match"], json!([{"uri": {"prefix": "/api"}}]));
        assert_eq!(http[1]["route"][0]["weight"], 80);
        assert_eq!(http[1]["route"][0]["destination"]["subset"], "shared");
        assert_eq!(http[1]["route"][1]["weight"], 20);
        assert_eq!(http[1]["route"][1]["destination"]["subset"], "feature-x");
    }

    #[test]
    fn running_on_its_own_output_changes_nothing() {
        let settings = Settings::default();
        let once = route(&request(), &vs(), &settings).unwrap();
        let mut again = vs();
        again["spec"]["http"] = Value::Array(once.clone());
        assert_eq!(route(&request(), &again, &settings).unwrap(), once);
    }

    #[test]
    fn zero_percent_keeps_only_the_header_copies() {
        let settings = Settings::parse(r#"{"percent": 0}"#).unwrap();
        let http = route(&request(), &vs(), &settings).unwrap();
        assert_eq!(http.len(), 4);
        assert!(
            !http
                .iter()
                .any(|r| r["name"].as_str().unwrap().contains("canary"))
        );
    }

    #[test]
    fn settings_errors_name_the_field() {
        assert_eq!(Settings::parse("{}").unwrap(), Settings::default());
        assert_eq!(
            Settings::parse(r#"{"percent": 101}"#).unwrap_err().1,
            "settings.percent"
        );
        assert_eq!(
            Settings::parse(r#"{"percent": "5"}"#).unwrap_err().1,
            "settings.percent"
        );
        assert_eq!(
            Settings::parse(r#"{"responseHeader": "a b"}"#)
                .unwrap_err()
                .1,
            "settings.responseHeader"
        );
        assert!(
            Settings::parse(r#"{"colour": 1}"#)
                .unwrap_err()
                .0
                .contains("unknown")
        );
        assert!(Settings::parse("[]").is_err());
    }

    #[test]
    fn a_virtual_service_without_routes_is_an_error() {
        let err = route(&request(), &json!({"spec": {}}), &Settings::default()).unwrap_err();
        assert!(err.contains("spec.http"), "{err}");
    }
}
