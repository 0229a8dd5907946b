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
//!    - `route` reduced to the (host, default) destinations, each with `subset` set to the
//!      DynamicEnv's subset and without `weight`;
//!    - `headers.response.add[<response header>]` = the clone's unique name (other header
//!      operations kept);
//!    - every `match` entry (one empty entry if the route has none) extended with the
//!      `istioMatch` headers (same name overwritten) and source labels (merged);
//!    - no `delegate`.
//! 4. Every other route is kept unchanged and in order.
//!
//! Running [`rewrite`] on its own output gives the same output again.
//!
//! The component calls [`rewrite_text`], which reads a VirtualService of the usual shape in one
//! pass, parses only the fields these rules read and writes everything else, kept routes
//! included, as the JSON text it had: the same routes as [`rewrite`], without building a tree
//! of the VirtualService. Anything unusual (a field the rules rewrite of an unexpected type, a
//! repeated key the rules read) takes a general path field by field, which gives the same
//! routes and errors; tests check both paths against the tree version of the rules.
//!
//! The destination host matches the service host `H` in namespace `NS` when it is `H.NS`,
//! `H.NS.svc` or `H.NS.svc.cluster.local`, or the short name `H` itself. Istio reads a short name
//! in the namespace of the VirtualService, so the short name counts only when the VirtualService
//! is in `NS` (or names no namespace).

#[cfg(target_arch = "wasm32")]
mod component;

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::Write as _;

use serde_json::value::RawValue;
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
fn copy_route(
    route: &Map<String, Value>,
    targets: &[&Value],
    m: &IstioMatch,
    name: String,
    req: &RouteRequest,
    settings: &Settings,
    at: &str,
) -> Result<Value, String> {
    let mut copy = route.clone();
    copy.remove("delegate");
    copy.insert("name".to_owned(), Value::String(name));

    let mut destinations: Vec<Value> = Vec::with_capacity(targets.len());
    for target in targets {
        let mut d = (*target).clone();
        if let Value::Object(entry) = &mut d {
            entry.remove("weight");
            if let Some(Value::Object(dest)) = entry.get_mut("destination") {
                dest.insert("subset".to_owned(), Value::String(req.subset.clone()));
            }
        }
        if !destinations.contains(&d) {
            destinations.push(d);
        }
    }
    copy.insert("route".to_owned(), Value::Array(destinations));

    let headers = object_at(&mut copy, "headers", &format!("{at}.headers"))?;
    let response = object_at(headers, "response", &format!("{at}.headers.response"))?;
    let add = object_at(response, "add", &format!("{at}.headers.response.add"))?;
    add.insert(
        settings.response_header.clone(),
        Value::String(req.unique_name.clone()),
    );

    let mut matches = match copy.remove("match") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(format!("{at}.match must be an array, got {other}")),
    };
    if matches.is_empty() {
        matches.push(Value::Object(Map::new()));
    }
    for (i, entry) in matches.iter_mut().enumerate() {
        let Value::Object(entry) = entry else {
            return Err(format!("{at}.match[{i}] must be an object, got {entry}"));
        };
        if !m.headers.is_empty() {
            let h = object_at(entry, "headers", &format!("{at}.match[{i}].headers"))?;
            for hm in &m.headers {
                h.insert(hm.name.clone(), hm.value.to_istio());
            }
        }
        if !m.source_labels.is_empty() {
            let l = object_at(
                entry,
                "sourceLabels",
                &format!("{at}.match[{i}].sourceLabels"),
            )?;
            for label in &m.source_labels {
                l.insert(label.key.clone(), Value::String(label.value.clone()));
            }
        }
    }
    copy.insert("match".to_owned(), Value::Array(matches));
    Ok(Value::Object(copy))
}

/// Rewrites the VirtualService `vs` (API JSON) for one DynamicEnv subset and returns its
/// complete new `spec.http`; see the module documentation for the rules. The same as
/// [`rewrite_text`] on `vs` serialized, with the routes parsed back.
///
/// # Errors
/// A message naming the VirtualService (`namespace/name`) when it has no `spec.http` array or a
/// route to copy is malformed, or when the request's route prefix is empty or does not end
/// with `-` (it would match routes of other subsets).
pub fn rewrite(req: &RouteRequest, vs: &Value, settings: &Settings) -> Result<Vec<Value>, String> {
    let text = serde_json::to_string(vs).map_err(|e| e.to_string())?;
    let http = rewrite_text(req, &text, settings)?;
    serde_json::from_str(&http).map_err(|e| e.to_string())
}

/// [`rewrite`] on the VirtualService's JSON text, not checked yet, returning the new
/// `spec.http` as JSON text: the component's entry point. Only what the rules read is parsed:
/// `metadata.name` and `.namespace`, and of each route its `name` and `route`; a route with
/// copies also has its `headers` and `match` parsed. Every other field is copied as the JSON
/// text it had, and so is every field of a kept route. As in a parsed tree, the last value of a
/// repeated key counts. A VirtualService of the usual shape (`metadata` an object, `spec.http`
/// an array of objects, no repeated key among the fields the rules read) is read in one pass;
/// any other text takes the general path, which gives the same routes and the same errors.
///
/// # Errors
/// As [`rewrite`], and a message saying the text is not valid JSON.
pub fn rewrite_text(req: &RouteRequest, vs: &str, settings: &Settings) -> Result<String, String> {
    if let Ok(fast) = serde_json::from_str::<FastVs<'_>>(vs)
        && let Some(result) = rewrite_fast(req, &fast, settings)
    {
        return result;
    }
    let raw: &RawValue = serde_json::from_str(vs)
        .map_err(|e| format!("the VirtualService is not valid JSON: {e}"))?;
    rewrite_general(req, raw, settings)
}

/// A VirtualService of the usual shape, borrowed from its JSON text (see [`rewrite_text`]).
#[derive(Deserialize)]
struct FastVs<'a> {
    #[serde(borrow, default)]
    metadata: Option<FastMeta<'a>>,
    #[serde(borrow)]
    spec: FastSpec<'a>,
}

#[derive(Deserialize)]
struct FastMeta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct FastSpec<'a> {
    #[serde(borrow)]
    http: Vec<FieldList<'a>>,
}

/// The one-pass path of [`rewrite_text`]; `None` when the VirtualService has a shape it leaves
/// to the general path (a field the rules rewrite that is not an object or array where one is
/// expected), which then gives the same routes or the error naming the field.
fn rewrite_fast(
    req: &RouteRequest,
    vs: &FastVs<'_>,
    settings: &Settings,
) -> Option<Result<String, String>> {
    let meta = vs.metadata.as_ref();
    let (name, namespace) = (
        meta.and_then(|m| m.name.as_deref()),
        meta.and_then(|m| m.namespace.as_deref()),
    );
    let id = format!("{}/{}", namespace.unwrap_or("?"), name.unwrap_or("?"));
    if let Err(e) = check_prefix(req, &id) {
        return Some(Err(e));
    }
    let vs_ns = namespace.filter(|ns| !ns.is_empty());
    let copy = CopyText::new(req, settings);

    let size: usize = vs.spec.http.iter().map(FieldList::len_hint).sum();
    let mut out = Vec::with_capacity(size * (1 + req.matches.len()) + 2);
    out.push(b'[');
    let mut index = 0usize;
    for route in &vs.spec.http {
        if as_str(route.get("name")).is_some_and(|n| n.starts_with(&req.route_prefix)) {
            continue;
        }
        let targets = default_destinations(route.get("route"), req, vs_ns)?;
        if !targets.is_empty() && !req.matches.is_empty() {
            write_copies(&mut out, route, &targets, req, &copy, &mut index)?;
        }
        push_separator(&mut out);
        write_fields(&mut out, route.last_values());
        out.push(b'}');
    }
    out.push(b']');
    Some(Ok(
        String::from_utf8(out).expect("JSON text and serde_json output are UTF-8")
    ))
}

/// Object fields to set: (key, JSON text of the value).
type SetFields = Vec<(String, Vec<u8>)>;

/// The parts of every copy that depend only on the request, as JSON text, worked out once.
struct CopyText {
    /// `"<route prefix>`: a copy's name without its index and closing quote.
    name_start: Vec<u8>,
    /// The response header and `"<unique name>"`.
    header: (String, Vec<u8>),
    /// `"<subset>"`.
    subset: Vec<u8>,
    /// Per istioMatch: its headers and source labels as (key, JSON value), a repeated key
    /// only once with its last value.
    matches: Vec<(SetFields, SetFields)>,
}

impl CopyText {
    fn new(req: &RouteRequest, settings: &Settings) -> Self {
        let json = |s: &str| serde_json::to_vec(s).expect("a string serializes");
        let mut name_start = json(&req.route_prefix);
        name_start.pop();
        let last_wins = |items: SetFields| -> SetFields {
            let mut out: SetFields = Vec::with_capacity(items.len());
            for (k, v) in items {
                match out.iter_mut().find(|(e, _)| *e == k) {
                    Some(slot) => slot.1 = v,
                    None => out.push((k, v)),
                }
            }
            out
        };
        let matches = req
            .matches
            .iter()
            .map(|m| {
                let headers = m
                    .headers
                    .iter()
                    .map(|h| {
                        let (kind, v) = match &h.value {
                            StringMatch::Exact(v) => ("{\"exact\":", v),
                            StringMatch::Prefix(v) => ("{\"prefix\":", v),
                            StringMatch::Regex(v) => ("{\"regex\":", v),
                        };
                        let mut text = kind.as_bytes().to_vec();
                        text.extend_from_slice(&json(v));
                        text.push(b'}');
                        (h.name.clone(), text)
                    })
                    .collect();
                let labels = m
                    .source_labels
                    .iter()
                    .map(|l| (l.key.clone(), json(&l.value)))
                    .collect();
                (last_wins(headers), last_wins(labels))
            })
            .collect();
        Self {
            name_start,
            header: (settings.response_header.clone(), json(&req.unique_name)),
            subset: json(&req.subset),
            matches,
        }
    }
}

/// A `route[]` entry to (host, default version) and the fields of its `destination`.
struct Target<'a> {
    entry: FieldList<'a>,
    destination: FieldList<'a>,
}

/// The (host, default version) entries of a route's `route` list, each destination read once;
/// empty when it has none or is not a list. `None`: an entry of another shape (left to the
/// general path).
fn default_destinations<'a>(
    route: Option<&'a RawValue>,
    req: &RouteRequest,
    vs_ns: Option<&str>,
) -> Option<Vec<Target<'a>>> {
    let Some(route) = route.filter(|r| r.get().starts_with('[')) else {
        return Some(Vec::new());
    };
    let entries = serde_json::from_str::<Vec<FieldList<'a>>>(route.get()).ok()?;
    let mut targets = Vec::new();
    for entry in entries {
        let Some(d) = entry
            .get("destination")
            .filter(|d| d.get().starts_with('{'))
        else {
            continue;
        };
        let destination: FieldList<'a> = serde_json::from_str(d.get()).ok()?;
        let field = |k: &str| as_str(destination.get(k));
        if is_default_target(
            field("host").as_deref(),
            field("subset").as_deref(),
            req,
            vs_ns,
        ) {
            targets.push(Target { entry, destination });
        }
    }
    Some(targets)
}

/// A JSON object's fields: absent and `null` read as no fields; `None` for another type.
fn object_or_empty(raw: Option<&RawValue>) -> Option<FieldList<'_>> {
    match raw {
        None => Some(FieldList(Vec::new())),
        Some(r) if r.get() == "null" => Some(FieldList(Vec::new())),
        Some(r) if r.get().starts_with('{') => serde_json::from_str(r.get()).ok(),
        Some(_) => None,
    }
}

/// Writes one copy of `route` per istioMatch (see the module documentation) to `out`, numbered
/// from `index` on. What does not depend on the istioMatch is worked out once.
fn write_copies(
    out: &mut Vec<u8>,
    route: &FieldList<'_>,
    targets: &[Target<'_>],
    req: &RouteRequest,
    copy: &CopyText,
    index: &mut usize,
) -> Option<()> {
    // The fields every copy keeps, then `route` and `headers`, as they are in every copy.
    let mut common = Vec::with_capacity(256);
    write_fields(
        &mut common,
        route
            .last_values()
            .filter(|(k, _)| !REWRITTEN.contains(&k.as_ref()) && k.as_ref() != "delegate"),
    );
    if !common.is_empty() {
        common.push(b',');
    }

    // `route`: the targets to the subset, without weights, each once.
    common.extend_from_slice(b"\"route\":[");
    if let [target] = targets {
        write_destination(&mut common, target, &copy.subset);
    } else {
        let mut written: Vec<Value> = Vec::with_capacity(targets.len());
        for target in targets {
            let mut text = Vec::new();
            write_destination(&mut text, target, &copy.subset);
            let value: Value = serde_json::from_slice(&text).ok()?;
            if !written.contains(&value) {
                if !written.is_empty() {
                    common.push(b',');
                }
                common.extend_from_slice(&text);
                written.push(value);
            }
        }
    }
    common.push(b']');

    // `headers`: the route's, with the response header naming the clone.
    let headers = object_or_empty(route.get("headers"))?;
    let response = object_or_empty(headers.get("response"))?;
    let add = object_or_empty(response.get("add"))?;
    common.extend_from_slice(b",\"headers\":{");
    let mut n = 0;
    for (k, v) in headers
        .last_values()
        .filter(|(k, _)| k.as_ref() != "response")
    {
        comma(&mut common, &mut n);
        write_field(&mut common, k, v.get());
    }
    comma(&mut common, &mut n);
    common.extend_from_slice(b"\"response\":{");
    let mut r = 0;
    for (k, v) in response.last_values().filter(|(k, _)| k.as_ref() != "add") {
        comma(&mut common, &mut r);
        write_field(&mut common, k, v.get());
    }
    comma(&mut common, &mut r);
    common.extend_from_slice(b"\"add\":");
    write_merged(&mut common, &add, std::slice::from_ref(&copy.header));
    common.extend_from_slice(b"}}");

    // `match`: its entries, each extended per istioMatch below; one empty entry if none.
    let entries: Vec<FieldList<'_>> = match route.get("match") {
        None => Vec::new(),
        Some(m) if m.get() == "null" => Vec::new(),
        Some(m) => serde_json::from_str(m.get()).ok()?,
    };
    let empty = [FieldList(Vec::new())];
    let entries: &[FieldList<'_>] = if entries.is_empty() { &empty } else { &entries };
    let objects = |key: &str| -> Option<Vec<FieldList<'_>>> {
        entries
            .iter()
            .map(|e| object_or_empty(e.get(key)))
            .collect()
    };
    let (entry_headers, entry_labels) = (objects("headers")?, objects("sourceLabels")?);

    for (m, (headers, labels)) in req.matches.iter().zip(&copy.matches) {
        push_separator(out);
        out.extend_from_slice(&common);
        out.extend_from_slice(b",\"name\":");
        out.extend_from_slice(&copy.name_start);
        write!(out, "{index}").expect("writing to a Vec cannot fail");
        out.push(b'"');
        *index += 1;
        out.extend_from_slice(b",\"match\":[");
        for (e, entry) in entries.iter().enumerate() {
            if e > 0 {
                out.push(b',');
            }
            out.push(b'{');
            let mut fields = 0usize;
            for (k, v) in entry.last_values() {
                let replaced = (k.as_ref() == "headers" && !m.headers.is_empty())
                    || (k.as_ref() == "sourceLabels" && !m.source_labels.is_empty());
                if !replaced {
                    comma(out, &mut fields);
                    write_field(out, k, v.get());
                }
            }
            for (key, own, added) in [
                ("headers", &entry_headers[e], headers),
                ("sourceLabels", &entry_labels[e], labels),
            ] {
                if added.is_empty() {
                    continue;
                }
                comma(out, &mut fields);
                out.push(b'"');
                out.extend_from_slice(key.as_bytes());
                out.extend_from_slice(b"\":");
                write_merged(out, own, added);
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }
    Some(())
}

/// Writes a `route[]` entry sent to the subset: without `weight`, `destination.subset` set.
fn write_destination(out: &mut Vec<u8>, target: &Target<'_>, subset: &[u8]) {
    out.push(b'{');
    let mut n = 0;
    for (k, v) in target.entry.last_values() {
        match k.as_ref() {
            "weight" => {}
            "destination" => {
                comma(out, &mut n);
                write_key(out, k);
                out.extend_from_slice(b":{");
                let mut d = 0;
                for (k, v) in target
                    .destination
                    .last_values()
                    .filter(|(k, _)| k.as_ref() != "subset")
                {
                    comma(out, &mut d);
                    write_field(out, k, v.get());
                }
                comma(out, &mut d);
                out.extend_from_slice(b"\"subset\":");
                out.extend_from_slice(subset);
                out.push(b'}');
            }
            _ => {
                comma(out, &mut n);
                write_field(out, k, v.get());
            }
        }
    }
    out.push(b'}');
}

/// Writes the object `existing` with `added` (keys unquoted, each once; values as JSON text) set
/// in it, as inserting them one by one into the parsed object would.
fn write_merged(out: &mut Vec<u8>, existing: &FieldList<'_>, added: &[(String, Vec<u8>)]) {
    out.push(b'{');
    let mut n = 0usize;
    for (k, v) in existing.last_values() {
        if added.iter().any(|(a, _)| a == k.as_ref()) {
            continue;
        }
        comma(out, &mut n);
        write_field(out, k, v.get());
    }
    for (k, v) in added {
        comma(out, &mut n);
        serde_json::to_writer(&mut *out, k).expect("a string serializes");
        out.push(b':');
        out.extend_from_slice(v);
    }
    out.push(b'}');
}

/// A comma before every item but the first; `count` counts the items written.
fn comma(out: &mut Vec<u8>, count: &mut usize) {
    if *count > 0 {
        out.push(b',');
    }
    *count += 1;
}

/// Starts an array item: a comma unless it is the first, then `{`.
fn push_separator(out: &mut Vec<u8>) {
    if out.len() > 1 {
        out.push(b',');
    }
    out.push(b'{');
}

/// Writes `"key":value,…` (no braces).
fn write_fields<'v, 'k: 'v>(
    out: &mut Vec<u8>,
    fields: impl Iterator<Item = (&'v Key<'k>, &'v RawValue)>,
) {
    for (n, (key, value)) in fields.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write_field(out, key, value.get());
    }
}

/// Writes `"key":value`, the value as JSON text.
fn write_field(out: &mut Vec<u8>, key: &Key<'_>, value: &str) {
    write_key(out, key);
    out.push(b':');
    out.extend_from_slice(value.as_bytes());
}

/// Writes an object key as a JSON string. A key borrowed from the input had no escapes, so
/// its text is written as it was; an unescaped one is escaped again.
fn write_key(out: &mut Vec<u8>, key: &Key<'_>) {
    match &key.0 {
        Cow::Borrowed(k) => {
            out.push(b'"');
            out.extend_from_slice(k.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(k) => serde_json::to_writer(&mut *out, k).expect("a string serializes"),
    }
}

/// The general path of [`rewrite_text`]: any JSON value, read field by field.
fn rewrite_general(
    req: &RouteRequest,
    vs: &RawValue,
    settings: &Settings,
) -> Result<String, String> {
    let top = fields(vs);
    let meta = top
        .as_ref()
        .and_then(|t| t.get("metadata"))
        .and_then(fields);
    let text = |key: &str| meta.as_ref().and_then(|m| as_str(m.get(key)));
    let (name, namespace) = (text("name"), text("namespace"));
    let id = format!(
        "{}/{}",
        namespace.as_deref().unwrap_or("?"),
        name.as_deref().unwrap_or("?")
    );
    check_prefix(req, &id)?;
    let spec = match top.as_ref().and_then(|t| t.get("spec")) {
        Some(spec) => {
            fields(spec).ok_or_else(|| format!("VirtualService {id}: spec is not an object"))?
        }
        None => return Err(format!("VirtualService {id} has no spec")),
    };
    let http: Vec<&RawValue> = match spec.get("http") {
        Some(http) if http.get().starts_with('[') => {
            serde_json::from_str(http.get()).map_err(|e| format!("spec.http: {e}"))?
        }
        Some(_) => return Err(format!("VirtualService {id}: spec.http is not an array")),
        None => {
            return Err(format!(
                "VirtualService {id} has no spec.http (no HTTP routes)"
            ));
        }
    };
    let vs_ns = namespace.as_deref().filter(|ns| !ns.is_empty());

    let mut out = Vec::with_capacity(vs.get().len() * (1 + req.matches.len()));
    out.push(b'[');
    let mut index = 0usize;
    for (i, route) in http.into_iter().enumerate() {
        let Some(route_fields) = fields(route) else {
            push_item(&mut out, route.get().as_bytes());
            continue;
        };
        if as_str(route_fields.get("name")).is_some_and(|n| n.starts_with(&req.route_prefix)) {
            continue;
        }
        let has_target = route_fields
            .get("route")
            .filter(|r| r.get().starts_with('['))
            .and_then(|r| serde_json::from_str::<Vec<Value>>(r.get()).ok())
            .is_some_and(|list| list.iter().any(|d| is_default_destination(d, req, vs_ns)));
        if has_target {
            // The fields a copy changes, parsed; the others are written as they are.
            let mut changed = Map::new();
            for key in REWRITTEN {
                if let Some(raw) = route_fields.get(key) {
                    let value = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
                    changed.insert(key.to_owned(), value);
                }
            }
            let at = format!("VirtualService {id}: spec.http[{i}]");
            for copy in copies(&changed, req, vs_ns, settings, &mut index, &at)? {
                let Value::Object(copy) = copy else {
                    unreachable!("a copy is an object")
                };
                let mut item = Vec::new();
                let kept = route_fields
                    .last_values()
                    .filter(|(k, _)| !REWRITTEN.contains(&k.as_ref()) && k.as_ref() != "delegate")
                    .map(|(k, v)| (k.as_ref(), Raw::Text(v)));
                let rewritten = copy.iter().map(|(k, v)| (k.as_str(), Raw::Value(v)));
                write_object(&mut item, kept.chain(rewritten))?;
                push_item(&mut out, &item);
            }
        }
        push_item(&mut out, route.get().as_bytes());
    }
    out.push(b']');
    Ok(String::from_utf8(out).expect("JSON text and serde_json output are UTF-8"))
}

/// Writes the JSON object of `fields` to `out`.
fn write_object<'v>(
    out: &mut Vec<u8>,
    fields: impl Iterator<Item = (&'v str, Raw<'v>)>,
) -> Result<(), String> {
    out.push(b'{');
    for (n, (key, value)) in fields.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, key).map_err(|e| e.to_string())?;
        out.push(b':');
        match value {
            Raw::Text(raw) => out.extend_from_slice(raw.get().as_bytes()),
            Raw::Value(v) => serde_json::to_writer(&mut *out, v).map_err(|e| e.to_string())?,
        }
    }
    out.push(b'}');
    Ok(())
}

/// The fields of a JSON object in document order, each value as its unparsed JSON text.
struct FieldList<'a>(Vec<(Key<'a>, &'a RawValue)>);

impl<'a> FieldList<'a> {
    /// The value of `key`; the last one when the key repeats, as in a parsed tree.
    fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| *v)
    }

    /// The fields in document order, a repeated key only at its last occurrence.
    fn last_values(&self) -> impl Iterator<Item = (&Key<'a>, &'a RawValue)> + '_ {
        self.0.iter().enumerate().filter_map(|(i, (k, v))| {
            let repeated = self.0[i + 1..].iter().any(|(later, _)| later == k);
            (!repeated).then_some((k, *v))
        })
    }

    /// About the length of the object's JSON text, for reserving output.
    fn len_hint(&self) -> usize {
        self.0
            .iter()
            .map(|(k, v)| k.as_ref().len() + v.get().len() + 4)
            .sum()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for FieldList<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = FieldList<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(8);
                while let Some(entry) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    fields.push(entry);
                }
                Ok(FieldList(fields))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// The string `raw` holds without copying it, if it is one.
fn as_str<'a>(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
    let text = raw?.get();
    // A string the parser already checked: without escapes, its text between the quotes.
    match text.strip_prefix('"')?.strip_suffix('"') {
        Some(s) if !s.contains('\\') => Some(Cow::Borrowed(s)),
        // Escapes: unescaped into a copy.
        _ => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// The route fields a copy changes (besides `delegate`, which it drops).
const REWRITTEN: [&str; 4] = ["name", "route", "headers", "match"];

/// A field value to write: JSON text as it came, or a rewritten value.
enum Raw<'a> {
    Text(&'a RawValue),
    Value(&'a Value),
}

/// Appends one array item to `out`, which starts with `[`.
fn push_item(out: &mut Vec<u8>, item: &[u8]) {
    if out.len() > 1 {
        out.push(b',');
    }
    out.extend_from_slice(item);
}

/// An object key, borrowed from the JSON text unless it has escapes.
#[derive(PartialEq, Eq)]
struct Key<'a>(Cow<'a, str>);

impl AsRef<str> for Key<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// The fields of `raw` when it is an object.
fn fields(raw: &RawValue) -> Option<FieldList<'_>> {
    raw.get()
        .starts_with('{')
        .then(|| serde_json::from_str(raw.get()).ok())
        .flatten()
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

/// The copies of route `obj`, one per istioMatch, numbered from `index` on; none when it has
/// no (host, default) destination.
fn copies(
    obj: &Map<String, Value>,
    req: &RouteRequest,
    vs_ns: Option<&str>,
    settings: &Settings,
    index: &mut usize,
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
        let name = format!("{}{index}", req.route_prefix);
        out.push(copy_route(obj, &targets, m, name, req, settings, at)?);
        *index += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle::rewrite_tree;
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
                }}],
                "headers": {"response": {"add": {"x-dynamic-env": "reviews-default-de-sample"}}},
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
    fn matches_are_merged() {
        let http = json!([{
            "match": [
                {
                    "uri": {"prefix": "/api"},
                    "headers": {"end-user": {"exact": "bob"}, "x-other": {"exact": "1"}},
                    "sourceLabels": {"app": "a", "team": "t"},
                },
                {"uri": {"exact": "/health"}},
            ],
            "route": [dest("reviews", "shared")],
        }]);
        let m = IstioMatch {
            headers: vec![header("end-user", StringMatch::Exact("jason".into()))],
            source_labels: vec![label("app", "b")],
        };
        let out = run(&req(vec![m]), http);
        assert_eq!(
            out[0]["match"],
            json!([
                {
                    "uri": {"prefix": "/api"},
                    "headers": {"end-user": {"exact": "jason"}, "x-other": {"exact": "1"}},
                    "sourceLabels": {"app": "b", "team": "t"},
                },
                {
                    "uri": {"exact": "/health"},
                    "headers": {"end-user": {"exact": "jason"}},
                    "sourceLabels": {"app": "b"},
                },
            ])
        );
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
            assert_eq!(
                out[0]["route"],
                json!([dest(host, "reviews-default-de-sample")])
            );
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
        assert_eq!(
            out[1]["route"],
            json!([dest("reviews.default", "reviews-default-de-sample")])
        );
        let mut unnamed = vs(http);
        unnamed["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert_eq!(
            rewrite(&req(vec![jason()]), &unnamed, &Settings::default())
                .unwrap()
                .len(),
            4
        );
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
    fn response_header_keeps_other_header_operations() {
        let http = json!([{
            "headers": {
                "request": {"set": {"x-req": "1"}},
                "response": {"set": {"x-set": "s"}, "add": {"x-add": "a"}, "remove": ["x-gone"]},
            },
            "route": [dest("reviews", "shared")],
        }]);
        let out = run(&req(vec![jason()]), http.clone());
        assert_eq!(
            out[0]["headers"],
            json!({
                "request": {"set": {"x-req": "1"}},
                "response": {
                    "set": {"x-set": "s"},
                    "add": {"x-add": "a", "x-dynamic-env": "reviews-default-de-sample"},
                    "remove": ["x-gone"],
                },
            })
        );
        let settings = Settings::parse(r#"{"responseHeader": "x-de"}"#).unwrap();
        let out = rewrite(&req(vec![jason()]), &vs(http), &settings).unwrap();
        assert_eq!(
            out[0]["headers"]["response"]["add"],
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
        assert_eq!(
            out[3]["route"],
            json!([dest("reviews", "reviews-default-de-sample")])
        );
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

    /// `rewrite_text` on `vs`, and the tree path on the same input.
    fn both_paths(
        r: &RouteRequest,
        vs: &str,
    ) -> (Result<String, String>, Result<Vec<Value>, String>) {
        let tree: Value = serde_json::from_str(vs).unwrap();
        (
            rewrite_text(r, vs, &Settings::default()),
            rewrite_tree(r, &tree, &Settings::default()),
        )
    }

    #[test]
    fn kept_routes_are_copied_as_their_text() {
        // Field values as sent (key order, spacing), which a parsed tree would not keep.
        let text = r#"{"metadata":{"namespace":"default","name":"reviews"},"spec":{"http":[
            {"route": [{"destination": {"subset": "v1", "host": "ratings"}}], "name": "other"},
            {"name":"main","route":[{"destination":{"host":"reviews","subset":"shared"}}]}
        ]}}"#;
        let (json, tree) = both_paths(&req(vec![jason()]), text);
        let json = json.unwrap();
        assert!(
            json.starts_with(
                r#"[{"route":[{"destination": {"subset": "v1", "host": "ratings"}}],"name":"other"},"#
            ),
            "{json}"
        );
        assert!(
            json.ends_with(r#",{"name":"main","route":[{"destination":{"host":"reviews","subset":"shared"}}]}]"#),
            "{json}"
        );
        let parsed: Vec<Value> = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, tree.unwrap(), "the same routes as the tree path");
        assert_eq!(parsed.len(), 3);
    }

    /// VirtualServices of the usual shape, varied: routes with and without matches, headers,
    /// weights, delegates, other destinations, escaped strings, earlier copies, repeated keys.
    fn usual_shapes() -> Vec<String> {
        let dests = [
            json!([{"destination": {"host": "reviews", "subset": "shared", "port": {"number": 9080}}}]),
            json!([{"destination": {"host": "reviews.default.svc.cluster.local", "subset": "shared"}, "weight": 70},
                   {"destination": {"host": "reviews", "subset": "canary"}, "weight": 30}]),
            json!([{"destination": {"host": "ratings", "subset": "shared"}}]),
            json!([{"destination": {"host": "reviews.default", "subset": "shared"}, "headers": {"request": {"set": {"a": "b"}}}}]),
            json!([]),
            json!([{"destination": {"host": "reviews", "subset": "shared"}, "weight": 50},
                   {"destination": {"host": "reviews", "subset": "shared"}, "weight": 50}]),
            json!([{"destination": {"host": "reviews", "subset": "shared", "port": {"number": 1}}, "weight": 50},
                   {"destination": {"subset": "shared", "host": "reviews.default.svc"}, "weight": 50}]),
        ];
        let mut out = Vec::new();
        for n in 0..40usize {
            let http: Vec<Value> = (0..(n % 7) + 1)
                .map(|i| {
                    let k = n + i;
                    let mut r = json!({"route": dests[k % dests.len()].clone()});
                    if k % 2 == 0 {
                        r["name"] = json!(format!("route-{k}"));
                    }
                    if k % 3 == 0 {
                        r["match"] = json!([{"uri": {"prefix": format!("/v{k}/")}}, {"headers": {"end-user": {"exact": "bob"}}}]);
                    }
                    if k % 6 == 1 {
                        r["match"] = json!([{"headers": null, "sourceLabels": {"app": "web", "team": "a"}, "ignoreUriCase": true}]);
                    }
                    if k % 13 == 5 {
                        r["match"] = Value::Null;
                        r["headers"] = Value::Null;
                    }
                    if k % 4 == 1 {
                        r["headers"] = json!({"response": {"add": {"x-old": "1"}, "remove": ["x-a"]}, "request": {"set": {"x-b": "c"}}});
                    }
                    if k % 8 == 3 {
                        r["headers"] = json!({"response": {"add": {"x-dynamic-env": "stale", "x-k": "v"}}});
                    }
                    if k % 10 == 7 {
                        r["headers"] = json!({"response": null, "request": {"add": {"x": "y"}}});
                    }
                    if k % 5 == 2 {
                        r["delegate"] = json!({"name": "d", "namespace": "default"});
                        r["timeout"] = json!("5s \u{e9} \"q\"");
                    }
                    if k % 11 == 3 {
                        r["name"] = json!(format!("{PREFIX}{k}"));
                    }
                    r
                })
                .collect();
            let mut vs = vs(Value::Array(http));
            if n % 9 == 4 {
                vs["metadata"]["labels"] = json!({"app": "reviews"});
                vs["spec"]["gateways"] = json!(["mesh"]);
            }
            out.push(vs.to_string());
        }
        // Repeated keys of fields the rules do not read, and escapes in keys and values.
        out.push(r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[{"timeout":"1s","timeout":"2s","route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#.into());
        out.push(r#"{"metadata":{"name":"re\u0076iews","namespace":"default"},"spec":{"http":[{"ti\u006deout":"1s","name":"\u006dain","route":[{"destination":{"host":"re\u0076iews","subset":"shared"}}]}]}}"#.into());
        out
    }

    #[test]
    fn one_pass_and_general_paths_agree() {
        let requests = [
            req(vec![]),
            req(vec![jason()]),
            req(vec![IstioMatch {
                headers: vec![
                    header("x-a", StringMatch::Exact("1".into())),
                    header("x-a", StringMatch::Regex("^2".into())),
                ],
                source_labels: vec![label("app", "x"), label("app", "y")],
            }]),
            req(vec![
                jason(),
                IstioMatch {
                    headers: vec![header("x-team", StringMatch::Prefix("pay".into()))],
                    source_labels: vec![label("app", "productpage")],
                },
            ]),
        ];
        let mut copied = 0;
        for r in &requests {
            for text in usual_shapes() {
                let fast: FastVs<'_> = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{text} takes the one-pass path: {e}"));
                let one_pass = rewrite_fast(r, &fast, &Settings::default())
                    .unwrap_or_else(|| panic!("{text} stays on the one-pass path"))
                    .unwrap();
                let raw: &RawValue = serde_json::from_str(&text).unwrap();
                let general = rewrite_general(r, raw, &Settings::default()).unwrap();
                let one_pass: Vec<Value> = serde_json::from_str(&one_pass).unwrap();
                let general: Vec<Value> = serde_json::from_str(&general).unwrap();
                assert_eq!(one_pass, general, "{text}");
                let tree = rewrite_tree(
                    r,
                    &serde_json::from_str(&text).unwrap(),
                    &Settings::default(),
                );
                assert_eq!(one_pass, tree.unwrap(), "{text}");
                copied += one_pass.len();
            }
        }
        assert!(copied > 200, "the shapes produce copies: {copied} routes");
    }

    #[test]
    fn both_paths_agree_on_odd_shapes() {
        let r = req(vec![jason(), jason()]);
        for text in [
            // Non-object routes, a null name and route, a route that is not an array, a
            // destination that is not an object, escaped strings, no metadata, null spec.
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[1,"x",null,[],
               {"name":null,"route":null},{"route":{}},{"route":[3,{"destination":null}]},
               {"name":"dynamic-environment-default-de-sample-reviews-\u0030","route":[]},
               {"name":"\u006dain","route":[{"destination":{"host":"re\u0076iews","subset":"shared"},"weight":5}]}]}}"#,
            r#"{"spec":{"http":[{"route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"elsewhere"},"spec":{"http":[{"route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#,
            r#"{"metadata":[],"spec":{"http":[]}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":null}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":null}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":[]}"#,
            r#"[]"#,
            // A copied route with fields kept as text, an escaped key, a delegate, null headers.
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[{"time\u006fut":"5s","delegate":{"name":"d"},"headers":null,"retries":{"attempts":3},"match":[{"uri":{"prefix":"/a"}},{"headers":{"end-user":{"exact":"bob"}}}],"route":[{"destination":{"host":"reviews","subset":"shared"},"weight":50},{"destination":{"host":"reviews.default.svc.cluster.local","subset":"shared"}}]}]}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[{"headers":{"response":[]},"route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[{"match":{},"route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#,
            // Repeated keys: the last one counts, as in a parsed tree.
            r#"{"metadata":{"name":"x","name":"reviews","namespace":"default"},"spec":{"http":[{"route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[{"name":"a","name":"dynamic-environment-default-de-sample-reviews-0","route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#,
            r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[{"route":[{"destination":{"host":"reviews","subset":"shared"}}],"route":[]}]}}"#,
        ] {
            let (json, tree) = both_paths(&r, text);
            match (json, tree) {
                (Ok(json), Ok(tree)) => {
                    let parsed: Vec<Value> = serde_json::from_str(&json).unwrap();
                    assert_eq!(parsed, tree, "{text}");
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "{text}"),
                (a, b) => panic!("{text}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn strings_are_read_with_and_without_escapes() {
        let read = |text: &str| {
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            as_str(Some(raw)).map(|s| (matches!(s, Cow::Borrowed(_)), s.into_owned()))
        };
        assert_eq!(read(r#""reviews""#), Some((true, "reviews".into())));
        assert_eq!(read(r#""""#), Some((true, String::new())));
        assert_eq!(read(r#""r\u00e9views""#), Some((false, "réviews".into())));
        assert_eq!(read(r#""a\"b\\""#), Some((false, "a\"b\\".into())));
        assert_eq!(read(r#""\\""#), Some((false, "\\".into())));
        assert_eq!(read("null"), None);
        assert_eq!(read("7"), None);
        assert_eq!(as_str(None), None);
    }

    #[test]
    fn repeated_keys_count_as_in_a_tree() {
        let text = r#"{"metadata":{"name":"reviews","namespace":"default"},"spec":{"http":[{"name":"main","route":[],"route":[{"destination":{"host":"reviews","subset":"shared"}}]}]}}"#;
        let out: Vec<Value> = serde_json::from_str(
            &rewrite_text(&req(vec![jason()]), text, &Settings::default()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            out.len(),
            2,
            "the last `route` has the default destination: {out:?}"
        );
        assert_eq!(out[0]["name"], json!(format!("{PREFIX}0")));
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

/// The rules as first written, on a parsed tree: the oracle [`rewrite_text`] is checked against.
#[cfg(test)]
mod oracle {
    use super::*;

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

    /// The rules on a VirtualService read as a whole tree: the path of VirtualServices that
    /// repeat a key.
    pub(super) fn rewrite_tree(
        req: &RouteRequest,
        vs: &Value,
        settings: &Settings,
    ) -> Result<Vec<Value>, String> {
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
            out.extend(copies(obj, req, vs_ns, settings, &mut index, &at)?);
            out.push(route.clone());
        }
        Ok(out)
    }
}
