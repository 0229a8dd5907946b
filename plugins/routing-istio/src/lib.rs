//! The default `routing` plugin: rewrites the HTTP routes of one Istio `VirtualService` so that
//! requests matching a DynamicEnv's `istioMatches` reach that DynamicEnv's subset of one service.
//!
//! [`rewrite`] returns the complete new `spec.http` list:
//!
//! 1. Every route whose `name` starts with the request's route prefix is dropped: it is this
//!    subset's earlier output. The prefix ends with `-` and is unique per DynamicEnv and
//!    deployment, so DynamicEnvs whose names prefix each other never touch each other's routes.
//! 2. Before each remaining route that has a destination to the service host with
//!    `subset == defaultVersion`, one copy per `istioMatch` is inserted, in spec order.
//! 3. A copy is a deep copy of that route with:
//!    - `name` = `<route prefix><index>`, the index counting copies in this VirtualService from 0;
//!    - `route` reduced to one destination: the (host, default) destination with the largest
//!      `weight` (the first on a tie), with `subset` set to the DynamicEnv's subset, without
//!      `weight`, and with `headers.response.add[<response header>]` = the clone's unique name
//!      on that destination (its other header operations kept);
//!    - every `match` entry (one empty entry if the route has none) extended with the
//!      `istioMatch` headers and source labels, so that the copy matches no request its
//!      original would not: where the entry already has a condition on the same header, the
//!      narrower of the two is kept (an `exact` or `prefix` value that starts with the other's
//!      prefix, or two equal conditions); an entry whose condition cannot be narrowed so (two
//!      different `exact` values, different regexes, another value of the same source label),
//!      or whose `withoutHeaders` excludes every value the `istioMatch` allows, is left out of
//!      the copy, and a copy left without entries is not made;
//!    - no `delegate`.
//! 4. Every other route is kept unchanged and in order.
//!
//! Running [`rewrite`] on its own output gives the same output again.
//!
//! src/component.rs is the glue to the `router` world: it parses the VirtualService, calls
//! [`rewrite`] and answers the routes as JSON text.
//!
//! The destination host matches the service host `H` in namespace `NS` when it is `H.NS`,
//! `H.NS.svc` or `H.NS.svc.cluster.local`, or the short name `H` itself. Istio reads a short name
//! in the namespace of the VirtualService, so the short name counts only when the VirtualService
//! is in `NS` (or names no namespace).

#[cfg(target_arch = "wasm32")]
mod component;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The response header added to every copy unless the settings name another one.
pub const DEFAULT_RESPONSE_HEADER: &str = "x-dynamic-env";

/// How a header value is compared, as Istio's `StringMatch`: exactly one way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StringMatch {
    /// The value equals this string.
    Exact(String),
    /// The value starts with this string.
    Prefix(String),
    /// The value matches this RE2 regular expression.
    Regex(String),
}

impl StringMatch {
    /// The Istio JSON form: `{"exact": v}`, `{"prefix": v}` or `{"regex": v}`.
    #[must_use]
    pub fn to_istio(&self) -> Value {
        let (kind, v) = match self {
            Self::Exact(v) => ("exact", v),
            Self::Prefix(v) => ("prefix", v),
            Self::Regex(v) => ("regex", v),
        };
        let mut m = Map::new();
        m.insert(kind.to_owned(), Value::String(v.clone()));
        Value::Object(m)
    }
}

/// One header condition of an `istioMatch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderMatch {
    /// The header name.
    pub name: String,
    /// How its value is compared.
    pub value: StringMatch,
}

/// A Kubernetes label `key=value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    /// The label key.
    pub key: String,
    /// The label value.
    pub value: String,
}

/// One entry of the DynamicEnv's `spec.istioMatches`: its headers and source labels are ANDed;
/// separate entries are ORed (one route copy each).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IstioMatch {
    /// Header conditions, in spec order.
    #[serde(default)]
    pub headers: Vec<HeaderMatch>,
    /// Source label conditions, in spec order.
    #[serde(default)]
    pub source_labels: Vec<Label>,
}

/// One VirtualService rewrite for one subset and one service host (the WIT `route-request`
/// without the VirtualService itself, which [`rewrite`] takes as parsed JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteRequest {
    /// `namespace/name` of the DynamicEnv.
    pub dynamic_env: String,
    /// The clone's unique name: the value of the response header added to every copy.
    pub unique_name: String,
    /// The DestinationRule subset the copies route to.
    pub subset: String,
    /// The service host this subset serves (short name, e.g. `reviews`).
    pub host: String,
    /// The namespace of that service.
    pub namespace: String,
    /// The `version` label value of the base workload (e.g. `shared`).
    pub default_version: String,
    /// The DynamicEnv's matches in spec order.
    pub matches: Vec<IstioMatch>,
    /// The name prefix of every route this subset owns; it ends with `-`.
    pub route_prefix: String,
}

/// The plugin settings, from its entry in the `wasmop-plugins` ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `responseHeader`: the response header added to every copy, naming the clone.
    pub response_header: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            response_header: DEFAULT_RESPONSE_HEADER.to_owned(),
        }
    }
}

impl Settings {
    /// Parses the settings JSON object; absent keys take their defaults.
    ///
    /// # Errors
    /// A message naming the problem when `settings` is not a JSON object, has a key other than
    /// `responseHeader`, or `responseHeader` is not a valid HTTP header name.
    pub fn parse(settings: &str) -> Result<Self, String> {
        let obj = match serde_json::from_str::<Value>(settings) {
            Ok(Value::Object(obj)) => obj,
            Ok(other) => return Err(format!("settings must be a JSON object, got {other}")),
            Err(e) => return Err(format!("settings are not valid JSON: {e}")),
        };
        let mut out = Self::default();
        for (key, value) in &obj {
            match key.as_str() {
                "responseHeader" => {
                    let Value::String(name) = value else {
                        return Err(format!(
                            "settings.responseHeader must be a string, got {value}"
                        ));
                    };
                    if !is_header_name(name) {
                        return Err(format!(
                            "settings.responseHeader {name:?} is not a valid HTTP header name \
                             (letters, digits and !#$%&'*+-.^_`|~ only)"
                        ));
                    }
                    out.response_header.clone_from(name);
                }
                other => {
                    return Err(format!(
                        "unknown settings key {other:?}; the only key is \"responseHeader\""
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// An RFC 9110 field name: a non-empty token.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Validates the plugin settings; see [`Settings::parse`].
///
/// # Errors
/// A message naming the offending key or value.
pub fn validate_settings(settings: &str) -> Result<(), String> {
    Settings::parse(settings).map(drop)
}

/// Whether destination host `dest` is the request's service host, for a VirtualService in
/// namespace `vs_ns` (short names resolve in the VirtualService's namespace).
fn host_matches(dest: &str, req: &RouteRequest, vs_ns: Option<&str>) -> bool {
    let Some(rest) = dest.strip_prefix(req.host.as_str()) else {
        return false;
    };
    if rest.is_empty() {
        return vs_ns.is_none_or(|ns| ns == req.namespace);
    }
    rest.strip_prefix('.')
        .and_then(|r| r.strip_prefix(req.namespace.as_str()))
        .is_some_and(|r| matches!(r, "" | ".svc" | ".svc.cluster.local"))
}

/// Whether a destination with these `host` and `subset` strings is (host, default version).
fn is_default_target(
    host: Option<&str>,
    subset: Option<&str>,
    req: &RouteRequest,
    vs_ns: Option<&str>,
) -> bool {
    subset == Some(req.default_version.as_str())
        && host.is_some_and(|h| host_matches(h, req, vs_ns))
}

/// Whether a `route[]` entry (an `HTTPRouteDestination`) goes to (host, default version).
fn is_default_destination(entry: &Value, req: &RouteRequest, vs_ns: Option<&str>) -> bool {
    let Some(dest) = entry.get("destination") else {
        return false;
    };
    let field = |k: &str| dest.get(k).and_then(Value::as_str);
    is_default_target(field("host"), field("subset"), req, vs_ns)
}

/// The object under `key` of `map`, created when absent or null.
fn object_at<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a mut Map<String, Value>, String> {
    let slot = map.entry(key.to_owned()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => Ok(m),
        other => Err(format!("{path} must be an object, got {other}")),
    }
}

/// One copy of `route` for one istioMatch; `targets` are its (host, default) destinations.
/// `None` when no entry of its `match` can be narrowed to the istioMatch.
fn copy_route(
    route: &Map<String, Value>,
    targets: &[&Value],
    m: &IstioMatch,
    name: String,
    req: &RouteRequest,
    settings: &Settings,
    at: &str,
) -> Result<Option<Value>, String> {
    let mut copy = route.clone();
    copy.remove("delegate");
    copy.insert("name".to_owned(), Value::String(name));

    // One destination: the default-version destination with the largest weight (the first on
    // a tie). Several destinations without weights are not a valid route, and all of them
    // would now lead to the same subset.
    let weight = |d: &Value| d.get("weight").and_then(Value::as_i64).unwrap_or(0);
    let Some(chosen) = targets
        .iter()
        .enumerate()
        .max_by_key(|(i, d)| (weight(d), std::cmp::Reverse(*i)))
        .map(|(_, d)| (*d).clone())
    else {
        return Err(format!("{at} has no destination to copy"));
    };
    let mut chosen = chosen;
    let Value::Object(entry) = &mut chosen else {
        return Err(format!("{at}.route entries must be objects"));
    };
    entry.remove("weight");
    if let Some(Value::Object(dest)) = entry.get_mut("destination") {
        dest.insert("subset".to_owned(), Value::String(req.subset.clone()));
    }
    // The response header goes on the destination, as upstream puts it.
    let headers = object_at(entry, "headers", &format!("{at}.route[].headers"))?;
    let response = object_at(
        headers,
        "response",
        &format!("{at}.route[].headers.response"),
    )?;
    let add = object_at(
        response,
        "add",
        &format!("{at}.route[].headers.response.add"),
    )?;
    add.insert(
        settings.response_header.clone(),
        Value::String(req.unique_name.clone()),
    );
    copy.insert("route".to_owned(), Value::Array(vec![chosen]));

    let mut matches = match copy.remove("match") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(format!("{at}.match must be an array, got {other}")),
    };
    if matches.is_empty() {
        matches.push(Value::Object(Map::new()));
    }
    let mut narrowed = Vec::with_capacity(matches.len());
    for (i, entry) in matches.into_iter().enumerate() {
        let Value::Object(mut entry) = entry else {
            return Err(format!("{at}.match[{i}] must be an object, got {entry}"));
        };
        if narrow_entry(&mut entry, m, &format!("{at}.match[{i}]"))? {
            narrowed.push(Value::Object(entry));
        }
    }
    if narrowed.is_empty() {
        return Ok(None);
    }
    let matches = narrowed;
    copy.insert("match".to_owned(), Value::Array(matches));
    Ok(Some(Value::Object(copy)))
}

/// A condition as Istio's `StringMatch` JSON: `None` for one that is not `exact`, `prefix`
/// or `regex` of a string (e.g. `{}`, which Istio reads as "present").
fn string_match(v: &Value) -> Option<StringMatch> {
    let obj = v.as_object()?;
    let (kind, value) = obj.iter().next().filter(|_| obj.len() == 1)?;
    let value = value.as_str()?.to_owned();
    match kind.as_str() {
        "exact" => Some(StringMatch::Exact(value)),
        "prefix" => Some(StringMatch::Prefix(value)),
        "regex" => Some(StringMatch::Regex(value)),
        _ => None,
    }
}

/// Whether every value `a` allows, `b` allows too.
fn implies(a: &StringMatch, b: &StringMatch) -> bool {
    match (a, b) {
        (a, b) if a == b => true,
        (StringMatch::Exact(x) | StringMatch::Prefix(x), StringMatch::Prefix(p)) => {
            x.starts_with(p.as_str())
        }
        _ => false,
    }
}

/// Narrows one `match` entry of a copy by `m` so that it allows no request the entry did not;
/// false when that cannot be expressed or allows nothing (the entry is left out).
fn narrow_entry(entry: &mut Map<String, Value>, m: &IstioMatch, at: &str) -> Result<bool, String> {
    if !m.headers.is_empty() {
        let excluded = entry.get("withoutHeaders").and_then(Value::as_object);
        for hm in &m.headers {
            // Istio reads `{}` (or any condition the DynamicEnv's implies) under withoutHeaders
            // as excluding every value the DynamicEnv allows.
            let excludes_all = excluded
                .and_then(|w| w.get(&hm.name))
                .is_some_and(|c| string_match(c).is_none_or(|c| implies(&hm.value, &c)));
            if excludes_all {
                return Ok(false);
            }
        }
        let h = object_at(entry, "headers", &format!("{at}.headers"))?;
        for hm in &m.headers {
            let keep = match h.get(&hm.name) {
                None => hm.value.to_istio(),
                Some(existing) => match string_match(existing) {
                    // `{}`: the header is present, which the DynamicEnv's condition implies.
                    None if existing.as_object().is_some_and(Map::is_empty) => hm.value.to_istio(),
                    Some(e) if implies(&hm.value, &e) => hm.value.to_istio(),
                    Some(e) if implies(&e, &hm.value) => existing.clone(),
                    _ => return Ok(false),
                },
            };
            h.insert(hm.name.clone(), keep);
        }
    }
    if !m.source_labels.is_empty() {
        let l = object_at(entry, "sourceLabels", &format!("{at}.sourceLabels"))?;
        for label in &m.source_labels {
            match l.get(&label.key).and_then(Value::as_str) {
                Some(v) if v != label.value => return Ok(false),
                _ => {
                    l.insert(label.key.clone(), Value::String(label.value.clone()));
                }
            }
        }
    }
    Ok(true)
}

/// Rejects a route prefix that could match routes of other subsets.
fn check_prefix(req: &RouteRequest, id: &str) -> Result<(), String> {
    if req.route_prefix.is_empty() || !req.route_prefix.ends_with('-') {
        return Err(format!(
            "route prefix {:?} for VirtualService {id} must be non-empty and end with '-'",
            req.route_prefix
        ));
    }
    Ok(())
}

/// The copies of route `obj`, one per istioMatch, not named yet; none when it has no (host,
/// default) destination.
fn copies(
    obj: &Map<String, Value>,
    req: &RouteRequest,
    vs_ns: Option<&str>,
    settings: &Settings,
    at: &str,
) -> Result<Vec<Value>, String> {
    let targets: Vec<&Value> = obj
        .get("route")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter(|d| is_default_destination(d, req, vs_ns))
                .collect()
        })
        .unwrap_or_default();
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(req.matches.len());
    for m in &req.matches {
        // Named when it is kept (`rewrite`).
        if let Some(copy) = copy_route(obj, &targets, m, String::new(), req, settings, at)? {
            out.push(copy);
        }
    }
    Ok(out)
}

/// `namespace/name` of a VirtualService, for messages.
fn vs_id(vs: &Value) -> String {
    let field = |k: &str| {
        vs.get("metadata")
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("?")
    };
    format!("{}/{}", field("namespace"), field("name"))
}

/// Rewrites the VirtualService `vs` (API JSON) for one DynamicEnv subset and returns its
/// complete new `spec.http`; see the module documentation for the rules.
///
/// # Errors
/// A message naming the VirtualService (`namespace/name`) when it has no `spec.http` array or a
/// route to copy is malformed, or when the request's route prefix is empty or does not end
/// with `-` (it would match routes of other subsets).
pub fn rewrite(req: &RouteRequest, vs: &Value, settings: &Settings) -> Result<Vec<Value>, String> {
    let id = vs_id(vs);
    check_prefix(req, &id)?;
    let spec = match vs.get("spec") {
        Some(Value::Object(spec)) => spec,
        Some(_) => return Err(format!("VirtualService {id}: spec is not an object")),
        None => return Err(format!("VirtualService {id} has no spec")),
    };
    let http = match spec.get("http") {
        Some(Value::Array(http)) => http,
        Some(_) => return Err(format!("VirtualService {id}: spec.http is not an array")),
        None => {
            return Err(format!(
                "VirtualService {id} has no spec.http (no HTTP routes)"
            ));
        }
    };
    let vs_ns = vs
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty());

    let mut out = Vec::with_capacity(http.len() * (1 + req.matches.len()));
    let mut index = 0usize;
    // Match entries of the routes before, as Istio compares them (JSON without `name`): an
    // entry seen before can never be reached again.
    let mut seen: Vec<Value> = Vec::new();
    let key = |m: &Value| {
        let mut m = m.clone();
        if let Value::Object(o) = &mut m {
            o.remove("name");
        }
        m
    };
    for (i, route) in http.iter().enumerate() {
        let Value::Object(obj) = route else {
            out.push(route.clone());
            continue;
        };
        if obj
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with(&req.route_prefix))
        {
            continue;
        }
        let at = format!("VirtualService {id}: spec.http[{i}]");
        for mut copy in copies(obj, req, vs_ns, settings, &at)? {
            // A copy whose every entry an earlier route already matches is never reached
            // (Istio: "all matches used by prior rules"); such entries are dropped, and such a
            // copy is not made.
            if let Some(Value::Array(matches)) = copy.get_mut("match") {
                matches.retain(|m| !seen.contains(&key(m)));
                if matches.is_empty() {
                    continue;
                }
                seen.extend(matches.iter().map(key));
            }
            copy["name"] = Value::String(format!("{}{index}", req.route_prefix));
            index += 1;
            out.push(copy);
        }
        if let Some(Value::Array(matches)) = obj.get("match") {
            seen.extend(matches.iter().map(key));
        }
        out.push(route.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PREFIX: &str = "dynamic-environment-default-de-sample-reviews-";

    fn header(name: &str, value: StringMatch) -> HeaderMatch {
        HeaderMatch {
            name: name.into(),
            value,
        }
    }

    fn label(key: &str, value: &str) -> Label {
        Label {
            key: key.into(),
            value: value.into(),
        }
    }

    fn jason() -> IstioMatch {
        IstioMatch {
            headers: vec![header("end-user", StringMatch::Exact("jason".into()))],
            source_labels: vec![],
        }
    }

    fn req(matches: Vec<IstioMatch>) -> RouteRequest {
        RouteRequest {
            dynamic_env: "default/de-sample".into(),
            unique_name: "reviews-default-de-sample".into(),
            subset: "reviews-default-de-sample".into(),
            host: "reviews".into(),
            namespace: "default".into(),
            default_version: "shared".into(),
            matches,
            route_prefix: PREFIX.into(),
        }
    }

    fn vs(http: Value) -> Value {
        json!({
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "reviews", "namespace": "default"},
            "spec": {"hosts": ["reviews"], "http": http},
        })
    }

    fn run(r: &RouteRequest, http: Value) -> Vec<Value> {
        rewrite(r, &vs(http), &Settings::default()).unwrap()
    }

    fn dest(host: &str, subset: &str) -> Value {
        json!({"destination": {"host": host, "subset": subset}})
    }

    /// A copied destination: `host` at the DynamicEnv's subset, with the response header.
    fn copied(host: &str) -> Value {
        json!({"destination": {"host": host, "subset": "reviews-default-de-sample"},
               "headers": {"response": {"add": {"x-dynamic-env": "reviews-default-de-sample"}}}})
    }

    #[test]
    fn single_match_on_weighted_route() {
        let main = json!({
            "name": "main",
            "timeout": "5s",
            "retries": {"attempts": 3},
            "route": [
                {"destination": {"host": "reviews", "subset": "shared", "port": {"number": 9080}}, "weight": 80},
                {"destination": {"host": "reviews", "subset": "v2"}, "weight": 20},
            ],
        });
        let out = run(&req(vec![jason()]), json!([main.clone()]));
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            json!({
                "name": format!("{PREFIX}0"),
                "timeout": "5s",
                "retries": {"attempts": 3},
                "match": [{"headers": {"end-user": {"exact": "jason"}}}],
                "route": [{"destination": {
                    "host": "reviews", "subset": "reviews-default-de-sample", "port": {"number": 9080}
                }, "headers": {"response": {"add": {"x-dynamic-env": "reviews-default-de-sample"}}}}],
            })
        );
        assert_eq!(out[1], main, "the original route is kept unchanged");
    }

    #[test]
    fn one_copy_per_istio_match_in_spec_order() {
        let matches = vec![
            jason(),
            IstioMatch {
                headers: vec![header("x-team", StringMatch::Prefix("pay".into()))],
                source_labels: vec![label("app", "productpage")],
            },
            IstioMatch {
                headers: vec![header("x-id", StringMatch::Regex("^a.*".into()))],
                source_labels: vec![],
            },
        ];
        let out = run(
            &req(matches),
            json!([{"route": [dest("reviews", "shared")]}]),
        );
        assert_eq!(out.len(), 4);
        let names: Vec<_> = out[..3]
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                format!("{PREFIX}0"),
                format!("{PREFIX}1"),
                format!("{PREFIX}2")
            ]
        );
        assert_eq!(
            out[0]["match"],
            json!([{"headers": {"end-user": {"exact": "jason"}}}])
        );
        assert_eq!(
            out[1]["match"],
            json!([{"headers": {"x-team": {"prefix": "pay"}}, "sourceLabels": {"app": "productpage"}}])
        );
        assert_eq!(
            out[2]["match"],
            json!([{"headers": {"x-id": {"regex": "^a.*"}}}])
        );
        assert_eq!(out[3], json!({"route": [dest("reviews", "shared")]}));
    }

    #[test]
    fn copy_indexes_run_across_routes() {
        let http = json!([
            {"name": "a", "match": [{"uri": {"prefix": "/a"}}], "route": [dest("reviews", "shared")]},
            {"name": "b", "route": [dest("reviews", "shared")]},
        ]);
        let out = run(&req(vec![jason(), IstioMatch::default()]), http);
        let names: Vec<_> = out
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                format!("{PREFIX}0"),
                format!("{PREFIX}1"),
                "a".into(),
                format!("{PREFIX}2"),
                format!("{PREFIX}3"),
                "b".into()
            ]
        );
    }

    #[test]
    fn matches_are_merged_and_never_widened() {
        let http = json!([{
            "match": [
                {
                    "uri": {"prefix": "/api"},
                    "headers": {"end-user": {"exact": "bob"}, "x-other": {"exact": "1"}},
                },
                {"uri": {"exact": "/health"}, "sourceLabels": {"team": "t"}},
                {"uri": {"exact": "/other"}, "sourceLabels": {"app": "a"}},
            ],
            "route": [dest("reviews", "shared")],
        }]);
        let m = IstioMatch {
            headers: vec![header("end-user", StringMatch::Exact("jason".into()))],
            source_labels: vec![label("app", "b")],
        };
        let out = run(&req(vec![m]), http);
        // end-user bob and jason, app a and b: no request is both, so those entries go.
        assert_eq!(
            out[0]["match"],
            json!([{
                "uri": {"exact": "/health"},
                "headers": {"end-user": {"exact": "jason"}},
                "sourceLabels": {"team": "t", "app": "b"},
            }])
        );
    }

    #[test]
    fn a_condition_on_the_same_header_keeps_the_narrower() {
        let de = |v: StringMatch| IstioMatch {
            headers: vec![header("end-user", v)],
            source_labels: vec![],
        };
        let route = |cond: Value| json!([{"match": [{"headers": {"end-user": cond}}], "route": [dest("reviews", "shared")]}]);
        let prefix = |p: &str| StringMatch::Prefix(p.into());
        let exact = |p: &str| StringMatch::Exact(p.into());
        for (original, dynamic_env, copied) in [
            (
                json!({"prefix": "j"}),
                prefix("jason"),
                Some(json!({"prefix": "jason"})),
            ),
            (
                json!({"prefix": "jason"}),
                prefix("j"),
                Some(json!({"prefix": "jason"})),
            ),
            (
                json!({"exact": "jason"}),
                prefix("ja"),
                Some(json!({"exact": "jason"})),
            ),
            (
                json!({"prefix": "ja"}),
                exact("jason"),
                Some(json!({"exact": "jason"})),
            ),
            (
                json!({"exact": "jason"}),
                exact("jason"),
                Some(json!({"exact": "jason"})),
            ),
            (json!({}), exact("jason"), Some(json!({"exact": "jason"}))),
            (
                json!({"regex": "j.*"}),
                StringMatch::Regex("j.*".into()),
                Some(json!({"regex": "j.*"})),
            ),
            (json!({"exact": "bob"}), prefix("jason"), None),
            (json!({"regex": "j.*"}), exact("jason"), None),
            (json!({"prefix": "bo"}), prefix("jason"), None),
        ] {
            let out = run(&req(vec![de(dynamic_env.clone())]), route(original.clone()));
            match copied {
                Some(c) => {
                    assert_eq!(out.len(), 2, "{original} and {dynamic_env:?}");
                    assert_eq!(out[0]["match"][0]["headers"]["end-user"], c);
                }
                None => assert_eq!(out.len(), 1, "{original} and {dynamic_env:?}: no copy"),
            }
        }
    }

    #[test]
    fn without_headers_that_exclude_the_dynamic_envs_header_leave_no_copy() {
        let m = IstioMatch {
            headers: vec![header("end-user", StringMatch::Prefix("jason".into()))],
            source_labels: vec![],
        };
        for (without, copies) in [
            (json!({}), 0),
            (json!({"prefix": "j"}), 0),
            (json!({"exact": "bob"}), 1),
        ] {
            let http = json!([
                {"match": [{"withoutHeaders": {"end-user": without}}], "route": [dest("reviews", "shared")]},
                {"name": "default", "route": [dest("reviews", "shared")]},
            ]);
            let out = run(&req(vec![m.clone()]), http);
            // The default route always gets its copy; its index follows the copies made.
            assert_eq!(out.len(), 3 + copies, "{without}: {out:#?}");
            let last_copy = &out[out.len() - 2];
            assert_eq!(last_copy["name"], format!("{PREFIX}{copies}"));
        }
    }

    #[test]
    fn route_without_match_gets_one_empty_match_with_de_conditions() {
        let m = IstioMatch {
            headers: vec![],
            source_labels: vec![label("app", "productpage"), label("v", "1")],
        };
        for http in [
            json!([{"route": [dest("reviews", "shared")]}]),
            json!([{"match": [], "route": [dest("reviews", "shared")]}]),
        ] {
            let out = run(&req(vec![m.clone()]), http);
            assert_eq!(
                out[0]["match"],
                json!([{"sourceLabels": {"app": "productpage", "v": "1"}}])
            );
        }
    }

    #[test]
    fn host_matching_by_short_and_qualified_names() {
        for host in [
            "reviews",
            "reviews.default",
            "reviews.default.svc",
            "reviews.default.svc.cluster.local",
        ] {
            let out = run(
                &req(vec![jason()]),
                json!([{"route": [dest(host, "shared")]}]),
            );
            assert_eq!(out.len(), 2, "{host} is the service host");
            assert_eq!(out[0]["route"], json!([copied(host)]));
        }
        for host in [
            "reviews.other",
            "reviews.other.svc.cluster.local",
            "reviews.default.svc.cluster",
            "reviews.default.svc.cluster.local.",
            "reviews-v2",
            "ratings",
            "review",
        ] {
            let out = run(
                &req(vec![jason()]),
                json!([{"route": [dest(host, "shared")]}]),
            );
            assert_eq!(out.len(), 1, "{host} is not the service host");
        }
    }

    #[test]
    fn short_host_resolves_in_the_virtual_service_namespace() {
        let http = json!([{"route": [dest("reviews", "shared")]}, {"route": [dest("reviews.default", "shared")]}]);
        let mut other = vs(http.clone());
        other["metadata"]["namespace"] = json!("other");
        let out = rewrite(&req(vec![jason()]), &other, &Settings::default()).unwrap();
        assert_eq!(out.len(), 3, "only the qualified destination is copied");
        assert_eq!(out[1]["route"], json!([copied("reviews.default")]));
        let mut unnamed = vs(http);
        unnamed["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        // Both destinations are the service host now; the second copy would match exactly
        // what the first does, so it is not made.
        let out = rewrite(&req(vec![jason()]), &unnamed, &Settings::default()).unwrap();
        assert_eq!(out.len(), 3, "{out:#?}");
        assert_eq!(out[0]["route"], json!([copied("reviews")]));
    }

    #[test]
    fn a_copy_an_earlier_route_already_matches_is_not_made() {
        // j-users' copy takes every jason request: default's copy would never be reached.
        let m = IstioMatch {
            headers: vec![header("end-user", StringMatch::Prefix("jason".into()))],
            source_labels: vec![],
        };
        let http = json!([
            {"name": "j-users", "match": [{"headers": {"end-user": {"prefix": "j"}}}],
             "route": [dest("reviews", "shared")]},
            {"name": "default", "route": [dest("reviews", "shared")]},
        ]);
        let out = run(&req(vec![m]), http);
        let names: Vec<&str> = out.iter().filter_map(|r| r["name"].as_str()).collect();
        assert_eq!(names, [&format!("{PREFIX}0") as &str, "j-users", "default"]);
    }

    #[test]
    fn destinations_of_other_subsets_are_not_copied() {
        let http = json!([
            {"name": "v2", "route": [dest("reviews", "v2")]},
            {"name": "nosubset", "route": [{"destination": {"host": "reviews"}}]},
        ]);
        assert_eq!(
            run(&req(vec![jason()]), http.clone()),
            http.as_array().unwrap().clone()
        );
    }

    #[test]
    fn rewrite_is_idempotent() {
        let http = json!([
            {"name": "ratings", "route": [dest("ratings", "shared")]},
            {
                "name": "api",
                "match": [{"uri": {"prefix": "/api"}}],
                "route": [
                    {"destination": {"host": "reviews", "subset": "shared"}, "weight": 50},
                    {"destination": {"host": "reviews.default.svc.cluster.local", "subset": "shared"}, "weight": 50},
                ],
            },
            {"name": "default", "route": [dest("reviews", "shared")]},
        ]);
        let r = req(vec![
            jason(),
            IstioMatch {
                headers: vec![],
                source_labels: vec![label("app", "x")],
            },
        ]);
        let once = run(&r, http);
        assert_eq!(once.len(), 3 + 4);
        let twice = run(&r, Value::Array(once.clone()));
        assert_eq!(twice, once);
    }

    #[test]
    fn stale_copies_are_replaced() {
        let http = json!([
            {"name": format!("{PREFIX}7"), "match": [{"headers": {"old": {"exact": "x"}}}], "route": [dest("reviews", "old")]},
            {"name": "default", "route": [dest("reviews", "shared")]},
        ]);
        let out = run(&req(vec![jason()]), http);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["name"], json!(format!("{PREFIX}0")));
        assert_eq!(
            out[0]["match"],
            json!([{"headers": {"end-user": {"exact": "jason"}}}])
        );
    }

    #[test]
    fn prefixes_of_dynamic_envs_whose_names_prefix_each_other_do_not_collide() {
        let a_prefix = "dynamic-environment-a-1234567890-";
        let b_prefix = "dynamic-environment-a-b-0987654321-";
        let mut a = req(vec![jason()]);
        a.route_prefix = a_prefix.into();
        a.subset = "sub-a".into();
        let mut b = req(vec![IstioMatch {
            headers: vec![header("x-b", StringMatch::Exact("1".into()))],
            source_labels: vec![],
        }]);
        b.route_prefix = b_prefix.into();
        b.subset = "sub-b".into();
        let base = json!([{"name": "default", "route": [dest("reviews", "shared")]}]);

        let with_a = run(&a, base.clone());
        let with_both = run(&b, Value::Array(with_a.clone()));
        let names: Vec<_> = with_both
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                format!("{a_prefix}0"),
                format!("{b_prefix}0"),
                "default".into()
            ],
            "b keeps a's routes"
        );
        assert_eq!(with_both[0], with_a[0]);

        let again_a = run(&a, Value::Array(with_both.clone()));
        // a's copies are regenerated just before the default route, after b's untouched ones.
        assert_eq!(
            again_a,
            vec![
                with_both[1].clone(),
                with_both[0].clone(),
                with_both[2].clone()
            ],
            "a keeps b's routes"
        );
        assert_eq!(run(&a, Value::Array(again_a.clone())), again_a);

        let mut none = a.clone();
        none.matches.clear();
        let without_a = run(&none, Value::Array(with_both.clone()));
        assert_eq!(without_a, vec![with_both[1].clone(), with_both[2].clone()]);
        let mut none = b.clone();
        none.matches.clear();
        let without_b = run(&none, Value::Array(with_both.clone()));
        assert_eq!(without_b, with_a);
    }

    #[test]
    fn a_copy_keeps_one_destination_the_heaviest() {
        let http = json!([{"route": [
            {"destination": {"host": "reviews", "subset": "shared", "port": {"number": 80}}, "weight": 30},
            {"destination": {"host": "reviews", "subset": "shared", "port": {"number": 9080}}, "weight": 60},
            {"destination": {"host": "ratings", "subset": "shared"}, "weight": 10},
        ]}]);
        let out = run(&req(vec![jason()]), http);
        assert_eq!(
            out[0]["route"],
            json!([{"destination": {"host": "reviews", "subset": "reviews-default-de-sample", "port": {"number": 9080}},
                    "headers": {"response": {"add": {"x-dynamic-env": "reviews-default-de-sample"}}}}]),
            "two destinations without weights are not a valid route"
        );
        let tie = json!([{"route": [
            {"destination": {"host": "reviews", "subset": "shared"}, "headers": {"request": {"set": {"a": "1"}}}},
            {"destination": {"host": "reviews", "subset": "shared"}, "headers": {"request": {"set": {"b": "2"}}}},
        ]}]);
        let out = run(&req(vec![jason()]), tie);
        assert_eq!(out[0]["route"].as_array().unwrap().len(), 1);
        assert_eq!(
            out[0]["route"][0]["headers"]["request"],
            json!({"set": {"a": "1"}}),
            "the first on a tie"
        );
    }

    #[test]
    fn response_header_keeps_other_header_operations() {
        let http = json!([{
            "headers": {"response": {"add": {"x-route": "r"}}},
            "route": [{
                "destination": {"host": "reviews", "subset": "shared"},
                "headers": {
                    "request": {"set": {"x-req": "1"}},
                    "response": {"set": {"x-set": "s"}, "add": {"x-add": "a"}, "remove": ["x-gone"]},
                },
            }],
        }]);
        let out = run(&req(vec![jason()]), http.clone());
        assert_eq!(
            out[0]["route"][0]["headers"],
            json!({
                "request": {"set": {"x-req": "1"}},
                "response": {
                    "set": {"x-set": "s"},
                    "add": {"x-add": "a", "x-dynamic-env": "reviews-default-de-sample"},
                    "remove": ["x-gone"],
                },
            })
        );
        assert_eq!(
            out[0]["headers"], http[0]["headers"],
            "the route's own header operations are kept as they are"
        );
        let settings = Settings::parse(r#"{"responseHeader": "x-de"}"#).unwrap();
        let out = rewrite(&req(vec![jason()]), &vs(http), &settings).unwrap();
        assert_eq!(
            out[0]["route"][0]["headers"]["response"]["add"],
            json!({"x-add": "a", "x-de": "reviews-default-de-sample"})
        );
    }

    #[test]
    fn routes_of_other_hosts_are_untouched() {
        let http = json!([
            {"name": "ratings", "route": [dest("ratings", "shared")]},
            {"name": "delegated", "delegate": {"name": "reviews-api", "namespace": "default"}},
            {"name": "redirect", "redirect": {"uri": "/x"}},
            {
                "name": "mixed",
                "mirror": {"host": "ratings"},
                "route": [
                    {"destination": {"host": "ratings", "subset": "shared"}, "weight": 30},
                    {"destination": {"host": "reviews", "subset": "shared"}, "weight": 70},
                ],
            },
        ]);
        let out = run(&req(vec![jason()]), http.clone());
        let orig = http.as_array().unwrap();
        assert_eq!(out.len(), 5);
        assert_eq!(out[..3], orig[..3]);
        assert_eq!(out[3]["route"], json!([copied("reviews")]));
        assert_eq!(
            out[3]["mirror"],
            json!({"host": "ratings"}),
            "the rest of the route is copied"
        );
        assert_eq!(out[4], orig[3]);
    }

    #[test]
    fn virtual_service_without_default_route_only_loses_prefix_routes() {
        let http = json!([
            {"name": format!("{PREFIX}0"), "route": [dest("reviews", "reviews-default-de-sample")]},
            {"name": "ratings", "route": [dest("ratings", "shared")]},
        ]);
        assert_eq!(
            run(&req(vec![jason()]), http.clone()),
            vec![http[1].clone()]
        );
    }

    #[test]
    fn malformed_virtual_services_are_errors_naming_them() {
        let r = req(vec![jason()]);
        let s = Settings::default();
        let meta = json!({"name": "reviews", "namespace": "default"});
        let no_spec = json!({"metadata": meta});
        assert!(
            rewrite(&r, &no_spec, &s)
                .unwrap_err()
                .contains("VirtualService default/reviews has no spec")
        );
        let no_http = json!({"metadata": meta, "spec": {"hosts": ["reviews"], "tcp": []}});
        let e = rewrite(&r, &no_http, &s).unwrap_err();
        assert!(
            e.contains("default/reviews") && e.contains("spec.http"),
            "{e}"
        );
        let bad_http = json!({"metadata": meta, "spec": {"http": {}}});
        assert!(
            rewrite(&r, &bad_http, &s)
                .unwrap_err()
                .contains("default/reviews: spec.http is not an array")
        );
        let bad_match = vs(json!([{"match": {}, "route": [dest("reviews", "shared")]}]));
        assert!(
            rewrite(&r, &bad_match, &s)
                .unwrap_err()
                .contains("spec.http[0].match must be an array")
        );
    }

    #[test]
    fn unsafe_route_prefixes_are_rejected() {
        let http = vs(json!([]));
        for prefix in ["", "dynamic-environment-a"] {
            let mut r = req(vec![jason()]);
            r.route_prefix = prefix.into();
            assert!(
                rewrite(&r, &http, &Settings::default())
                    .unwrap_err()
                    .contains("end with '-'")
            );
        }
    }

    #[test]
    fn settings() {
        assert_eq!(
            Settings::parse("{}").unwrap().response_header,
            DEFAULT_RESPONSE_HEADER
        );
        assert_eq!(
            Settings::parse(r#"{"responseHeader":"x-env"}"#)
                .unwrap()
                .response_header,
            "x-env"
        );
        assert!(validate_settings("{}").is_ok());
        assert!(validate_settings("[]").unwrap_err().contains("JSON object"));
        assert!(
            validate_settings("{")
                .unwrap_err()
                .contains("not valid JSON")
        );
        assert!(
            validate_settings(r#"{"responseHeaders":"x"}"#)
                .unwrap_err()
                .contains("\"responseHeaders\"")
        );
        assert!(
            validate_settings(r#"{"responseHeader":1}"#)
                .unwrap_err()
                .contains("must be a string")
        );
        for bad in ["", "x env", "x:env", "é"] {
            let e = validate_settings(&json!({"responseHeader": bad}).to_string()).unwrap_err();
            assert!(e.contains("not a valid HTTP header name"), "{bad}: {e}");
        }
    }

    #[test]
    fn request_types_read_wit_shaped_json() {
        let r: RouteRequest = serde_json::from_value(json!({
            "dynamicEnv": "default/de", "uniqueName": "u", "subset": "s", "host": "reviews",
            "namespace": "default", "defaultVersion": "shared", "routePrefix": "p-",
            "matches": [{"headers": [{"name": "end-user", "value": {"prefix": "ja"}}], "sourceLabels": [{"key": "a", "value": "b"}]}],
        }))
        .unwrap();
        assert_eq!(
            r.matches[0].headers[0].value,
            StringMatch::Prefix("ja".into())
        );
        assert_eq!(
            r.matches[0].headers[0].value.to_istio(),
            json!({"prefix": "ja"})
        );
        assert_eq!(r.matches[0].source_labels, vec![label("a", "b")]);
    }
}
