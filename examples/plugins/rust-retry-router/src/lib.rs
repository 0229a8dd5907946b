//! Example `routing` plugin: the DynamicEnv's testers reach its subset with retries.
//!
//! For every HTTP route of the VirtualService whose only destination is the service host at
//! its default version, [`route`] inserts, before that route, one copy per `istioMatch` (the
//! DynamicEnv's header and source-label conditions, merged into each of the route's `match`
//! entries) that sends every matching request to the subset and retries it there: a clone
//! under test is often fresh and restarts, and a tester should not see each restart as an
//! error. The copy keeps the route's other fields (`timeout`, `rewrite`, ...), with its
//! `retries` replaced.
//!
//! Copies are named `<route prefix><n>`, so the host recognises them as this plugin's earlier
//! output and they are replaced on the next call: running [`route`] on its own output gives the
//! same output. Routes with several or weighted destinations are left alone. The subset's
//! destination carries the response header `responseHeader` (default `x-dynamic-env`) naming
//! the clone, so a client can tell which version answered. Everything the plugin adds passes
//! the host's route checks: each copy carries one of the DynamicEnv's matches and sends only
//! to its subset (docs/plugins.md, "What the host checks").
//!
//! Settings: `{"attempts": 0..=10, "perTryTimeout": "<Go duration>", "responseHeader": "<header
//! name>"}`, each optional (defaults 2, `2s` and `x-dynamic-env`); `attempts: 0` turns the
//! route's retries off for the testers.

#[cfg(any(target_arch = "wasm32", test))]
mod component;

use std::time::Duration;

use serde_json::{Map, Value, json};
use wasmop_plugin_sdk::duration::parse_go_duration;

/// Retries of a tester's request when the settings name none.
pub const DEFAULT_ATTEMPTS: u32 = 2;
/// The most retries the settings may ask for.
pub const MAX_ATTEMPTS: u32 = 10;
/// The time each try may take when the settings name none.
pub const DEFAULT_PER_TRY_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest `perTryTimeout` the settings may ask for.
pub const MAX_PER_TRY_TIMEOUT: Duration = Duration::from_secs(60);
/// The response header naming the clone when the settings name none.
pub const DEFAULT_RESPONSE_HEADER: &str = "x-dynamic-env";
/// What Envoy retries on: the failures of a pod that is starting or going away.
pub const RETRY_ON: &str = "connect-failure,refused-stream,reset,unavailable,503";

/// The plugin settings (its `settings:` in the `wasmop-plugins` ConfigMap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `attempts`: retries of a tester's request (Istio's `retries.attempts`), 0 to 10.
    pub attempts: u32,
    /// `perTryTimeout`: the time each try may take, a Go duration up to 60 s.
    pub per_try_timeout: Duration,
    /// `responseHeader`: added to the subset's responses, with the clone's unique name.
    pub response_header: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            attempts: DEFAULT_ATTEMPTS,
            per_try_timeout: DEFAULT_PER_TRY_TIMEOUT,
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
    /// The message and field of the first problem: not an object, an unknown key, `attempts`
    /// not an integer in 0..=10, `perTryTimeout` not a Go duration of at most 60 s,
    /// `responseHeader` not a header name.
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
                "attempts" => {
                    out.attempts = value
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| *n <= MAX_ATTEMPTS)
                        .ok_or_else(|| {
                            (
                                format!(
                                    "attempts must be an integer from 0 to {MAX_ATTEMPTS}, got {value}"
                                ),
                                "settings.attempts",
                            )
                        })?;
                }
                "perTryTimeout" => {
                    let field = "settings.perTryTimeout";
                    let text = value.as_str().ok_or_else(|| {
                        (
                            format!("perTryTimeout must be a string such as \"2s\", got {value}"),
                            field,
                        )
                    })?;
                    out.per_try_timeout = parse_go_duration(text).map_err(|e| (e, field))?;
                    if out.per_try_timeout > MAX_PER_TRY_TIMEOUT {
                        return Err((
                            format!("perTryTimeout must be at most 60s, got {text:?}"),
                            field,
                        ));
                    }
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
                            "unknown settings key {other:?}; the keys are \"attempts\", \"perTryTimeout\" and \"responseHeader\""
                        ),
                        "settings",
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Istio's `HTTPRetry` for these settings: `attempts`, and with retries on, the
    /// `perTryTimeout` (protobuf JSON duration, e.g. `"2s"`, `"0.5s"`) and [`RETRY_ON`].
    pub fn retries(&self) -> Value {
        if self.attempts == 0 {
            return json!({"attempts": 0});
        }
        json!({
            "attempts": self.attempts,
            "perTryTimeout": format!("{}s", self.per_try_timeout.as_secs_f64()),
            "retryOn": RETRY_ON,
        })
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

fn subset_destination(host: &str, req: &Request, settings: &Settings) -> Value {
    json!({
        "destination": {"host": host, "subset": req.subset},
        "headers": {"response": {"add": {settings.response_header.as_str(): req.unique_name}}},
    })
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
    let mut out = Vec::with_capacity(http.len() * (1 + req.matches.len()));
    let mut n = 0;
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
                    json!([subset_destination(host, req, settings)]),
                );
                copy.insert("retries".into(), settings.retries());
                copy.remove("delegate");
                out.push(Value::Object(copy));
                n += 1;
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
    fn matched_requests_reach_the_subset_with_retries() {
        let settings = Settings::parse(r#"{"attempts": 3, "perTryTimeout": "500ms"}"#).unwrap();
        let http = route(&request(), &vs(), &settings).unwrap();
        let names: Vec<&str> = http.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["de-feature-x-1a2b3c-0", "api", "split", "other"],
            "one copy, before the only route to the default version"
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
        assert_eq!(
            http[0]["retries"],
            json!({"attempts": 3, "perTryTimeout": "0.5s", "retryOn": RETRY_ON})
        );
        assert_eq!(
            http[1],
            vs()["spec"]["http"][0],
            "the route itself is unchanged"
        );
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
    fn zero_attempts_turn_retries_off() {
        let settings = Settings::parse(r#"{"attempts": 0}"#).unwrap();
        let http = route(&request(), &vs(), &settings).unwrap();
        assert_eq!(http[0]["retries"], json!({"attempts": 0}));
        assert_eq!(Settings::default().retries()["perTryTimeout"], "2s");
    }

    #[test]
    fn settings_errors_name_the_field() {
        assert_eq!(Settings::parse("{}").unwrap(), Settings::default());
        for bad in [
            r#"{"attempts": 11}"#,
            r#"{"attempts": "2"}"#,
            r#"{"attempts": -1}"#,
        ] {
            assert_eq!(
                Settings::parse(bad).unwrap_err().1,
                "settings.attempts",
                "{bad}"
            );
        }
        for bad in [
            r#"{"perTryTimeout": 2}"#,
            r#"{"perTryTimeout": "2x"}"#,
            r#"{"perTryTimeout": "2m"}"#,
        ] {
            assert_eq!(
                Settings::parse(bad).unwrap_err().1,
                "settings.perTryTimeout",
                "{bad}"
            );
        }
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
