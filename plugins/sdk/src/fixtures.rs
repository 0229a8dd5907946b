//! A fixture harness: runs a plugin's hook function on JSON request files and compares its
//! answers with the expected ones, from the plugin's own `cargo test` (natively: no host, no
//! component build).
//!
//! ```text
//! // src/component.rs of a routing plugin
//! impl Guest for Plugin { fn route(settings: String, r: RouteRequest) -> … { … } … }
//! #[cfg(target_arch = "wasm32")]
//! wasmop_plugin_sdk::router::export_router!(Plugin);
//!
//! #[test]
//! fn fixtures() {
//!     wasmop_plugin_sdk::fixtures::check_dir(
//!         concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"),
//!         Plugin::route,
//!     );
//! }
//! ```
//!
//! A fixture is one `.json` file:
//!
//! ```json
//! {
//!   "settings": {"percent": 20},
//!   "request": {"dynamic-env": "shop/alice", "unique-name": "...", "matches": [], "...": "..."},
//!   "expect": {"http": [{"name": "reviews-alice-0"}]}
//! }
//! ```
//!
//! - `settings` (optional, default `{}`): the plugin's settings object (or a string holding it).
//! - `request`: the hook's request in the WIT's own JSON form: record fields by their WIT names
//!   (`dynamic-env`, `cooldown-seconds`), enum cases as WIT strings (`"up"`), a `variant` case as
//!   an object of one key (`{"exact": "jason"}`), an `option` as `null` or its value. A `string`
//!   field that carries JSON (`virtual-service`, `metadata`, `desired`, `applied`, `pods`) may
//!   be given as that JSON or as a string holding it. Unknown or missing fields are errors.
//! - `expect`: the answer in the same form (a router's `http` as the JSON array it holds; the
//!   restart hook's answer as the array of decisions), compared as a *subset*: an object
//!   matches when each key it lists matches (leave out `reason` to not pin the wording), an
//!   array when it has the same length and each element matches, a number or string when
//!   equal.
//! - `expect-error` instead of `expect`: the call must fail with a `plugin-error`;
//!   `{"field": "settings.percent", "message": "0 to 100"}` pins its field and a substring of
//!   its message (both optional).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::PluginError;
use crate::restart_predicate::wasmop::plugin::restart::{PodDecision, RestartRequest};
use crate::router::wasmop::plugin::routing::{
    HeaderMatch, IstioMatch, Label, RouteRequest, RouteResponse, StringMatch,
};
use crate::scaler::wasmop::plugin::scaling::{TriggerRequest, TriggerVote, Vote};
use crate::state_checker::wasmop::plugin::dr::{
    Action, LeaseRecord, State, StateDecision, StateRequest,
};

/// A hook's request type, read from the WIT JSON form (see the module docs).
pub trait FromWitJson: Sized {
    /// Reads `v`; `at` is its path for error messages (e.g. `request`).
    ///
    /// # Errors
    /// A message naming the path of the first value of the wrong shape, e.g.
    /// `request.matches[0].headers[0].value: expected one of exact, prefix, regex`.
    fn from_wit_json(v: &Value, at: &str) -> Result<Self, String>;
}

/// A hook's answer type, written in the WIT JSON form (see the module docs).
pub trait ToWitJson {
    /// The answer as JSON, fields by their WIT names.
    fn to_wit_json(&self) -> Value;
}

/// Runs `logic` (a hook function of the plugin's `Guest` implementation, e.g. `Plugin::route`)
/// on every `*.json` fixture of `dir`, in name order, and returns how many passed.
///
/// # Panics
/// When `dir` holds no fixture, or any fixture cannot be read or does not give its expected
/// answer: the message lists every failing file with what differed.
pub fn check_dir<Req, Ans>(
    dir: impl AsRef<Path>,
    mut logic: impl FnMut(String, Req) -> Result<Ans, PluginError>,
) -> usize
where
    Req: FromWitJson,
    Ans: ToWitJson,
{
    let dir = dir.as_ref();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read the fixtures directory {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.json fixture in {}", dir.display());
    let mut failures = String::new();
    for file in &files {
        if let Err(e) = check_file(file, &mut logic) {
            let _ = writeln!(failures, "{}: {e}", file.display());
        }
    }
    assert!(
        failures.is_empty(),
        "fixtures failed ({} of {}):\n{failures}",
        failures.lines().count(),
        files.len()
    );
    files.len()
}

/// Runs `logic` on the fixture `file` and compares its answer with the expected one.
///
/// # Errors
/// The file cannot be read or is not a fixture (the message says which key is wrong), or the
/// answer differs from `expect` (the message gives the path of the first difference and the
/// whole answer), or the call did not fail as `expect-error` says.
pub fn check_file<Req, Ans>(
    file: &Path,
    logic: impl FnOnce(String, Req) -> Result<Ans, PluginError>,
) -> Result<(), String>
where
    Req: FromWitJson,
    Ans: ToWitJson,
{
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read: {e}"))?;
    let fixture: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let fields = fixture
        .as_object()
        .ok_or("a fixture must be a JSON object")?;
    for key in fields.keys() {
        if !["settings", "request", "expect", "expect-error"].contains(&key.as_str()) {
            return Err(format!(
                "unknown key `{key}`; the keys are settings, request, expect, expect-error"
            ));
        }
    }
    let settings = match fields.get("settings") {
        None => "{}".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    let request = Req::from_wit_json(
        fields
            .get("request")
            .ok_or("the fixture has no `request`")?,
        "request",
    )?;
    let answer = logic(settings, request);
    match (fields.get("expect"), fields.get("expect-error"), answer) {
        (Some(want), None, Ok(got)) => {
            let got = got.to_wit_json();
            subset("expect", want, &got).map_err(|e| format!("{e}; the answer was {got}"))
        }
        (Some(_), None, Err(e)) => Err(format!("expected an answer, got {}", error_text(&e))),
        (None, Some(want), Err(e)) => expect_error(want, &e),
        (None, Some(_), Ok(got)) => Err(format!(
            "expected a plugin-error, got the answer {}",
            got.to_wit_json()
        )),
        _ => Err("the fixture needs exactly one of `expect` and `expect-error`".into()),
    }
}

fn error_text(e: &PluginError) -> String {
    match &e.field {
        Some(field) => format!("the plugin-error {:?} at {field}", e.message),
        None => format!("the plugin-error {:?}", e.message),
    }
}

fn expect_error(want: &Value, got: &PluginError) -> Result<(), String> {
    let want = want
        .as_object()
        .ok_or("`expect-error` must be an object with `field` and/or `message`")?;
    for key in want.keys() {
        if key != "field" && key != "message" {
            return Err(format!("expect-error: unknown key `{key}`"));
        }
    }
    if let Some(field) = want.get("field") {
        let field = field
            .as_str()
            .ok_or("expect-error.field must be a string")?;
        if got.field.as_deref() != Some(field) {
            return Err(format!(
                "expected an error at {field}, got {}",
                error_text(got)
            ));
        }
    }
    if let Some(message) = want.get("message") {
        let message = message
            .as_str()
            .ok_or("expect-error.message must be a string")?;
        if !got.message.contains(message) {
            return Err(format!(
                "expected an error whose message contains {message:?}, got {}",
                error_text(got)
            ));
        }
    }
    Ok(())
}

/// Whether `got` matches the pattern `want` as the module docs say (`expect` is compared so):
/// each key an object lists, arrays element by element at the same length, numbers by value
/// (`1` matches `1.0`), anything else when equal. `at` names the root in the error.
///
/// # Errors
/// The first difference, at its path from `at` (`expect.http[0].name: expected …, got …`).
pub fn subset(at: &str, want: &Value, got: &Value) -> Result<(), String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (key, w) in w {
                let g = g
                    .get(key)
                    .ok_or_else(|| format!("{at}.{key}: missing from the answer"))?;
                subset(&format!("{at}.{key}"), w, g)?;
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(g)) => {
            if w.len() != g.len() {
                return Err(format!(
                    "{at}: expected {} elements, got {}",
                    w.len(),
                    g.len()
                ));
            }
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                subset(&format!("{at}[{i}]"), w, g)?;
            }
            Ok(())
        }
        (Value::Number(w), Value::Number(g)) if w.as_f64() == g.as_f64() => Ok(()),
        (w, g) if w == g => Ok(()),
        (w, g) => Err(format!("{at}: expected {w}, got {g}")),
    }
}

/// A record's fields, read by their WIT names; unknown names are refused.
struct Record<'a> {
    at: &'a str,
    map: &'a Map<String, Value>,
}

impl<'a> Record<'a> {
    fn new(v: &'a Value, at: &'a str, fields: &[&str]) -> Result<Self, String> {
        let map = v
            .as_object()
            .ok_or_else(|| format!("{at}: expected an object, got {v}"))?;
        for key in map.keys() {
            if !fields.contains(&key.as_str()) {
                return Err(format!(
                    "{at}: unknown field `{key}`; the fields are {}",
                    fields.join(", ")
                ));
            }
        }
        Ok(Self { at, map })
    }

    fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.at)
    }

    fn get(&self, key: &str) -> Result<&'a Value, String> {
        self.map
            .get(key)
            .ok_or_else(|| format!("{}: missing", self.path(key)))
    }

    fn string(&self, key: &str) -> Result<String, String> {
        string(self.get(key)?, &self.path(key))
    }

    /// A `string` that carries JSON: the JSON itself, or a string holding it.
    fn json_text(&self, key: &str) -> Result<String, String> {
        Ok(match self.get(key)? {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        })
    }

    fn u32(&self, key: &str) -> Result<u32, String> {
        self.get(key)?
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                format!(
                    "{}: expected an integer from 0 to 4294967295",
                    self.path(key)
                )
            })
    }

    fn s64(&self, key: &str) -> Result<i64, String> {
        self.get(key)?
            .as_i64()
            .ok_or_else(|| format!("{}: expected an integer (s64)", self.path(key)))
    }

    fn list<T>(
        &self,
        key: &str,
        item: impl Fn(&Value, &str) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let path = self.path(key);
        self.get(key)?
            .as_array()
            .ok_or_else(|| format!("{path}: expected an array"))?
            .iter()
            .enumerate()
            .map(|(i, v)| item(v, &format!("{path}[{i}]")))
            .collect()
    }
}

fn string(v: &Value, at: &str) -> Result<String, String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{at}: expected a string, got {v}"))
}

impl FromWitJson for RouteRequest {
    fn from_wit_json(v: &Value, at: &str) -> Result<Self, String> {
        let r = Record::new(
            v,
            at,
            &[
                "dynamic-env",
                "unique-name",
                "subset",
                "host",
                "namespace",
                "default-version",
                "matches",
                "route-prefix",
                "virtual-service",
            ],
        )?;
        Ok(Self {
            dynamic_env: r.string("dynamic-env")?,
            unique_name: r.string("unique-name")?,
            subset: r.string("subset")?,
            host: r.string("host")?,
            namespace: r.string("namespace")?,
            default_version: r.string("default-version")?,
            matches: r.list("matches", istio_match)?,
            route_prefix: r.string("route-prefix")?,
            virtual_service: r.json_text("virtual-service")?,
        })
    }
}

fn istio_match(v: &Value, at: &str) -> Result<IstioMatch, String> {
    let r = Record::new(v, at, &["headers", "source-labels"])?;
    Ok(IstioMatch {
        headers: r.list("headers", |v, at| {
            let h = Record::new(v, at, &["name", "value"])?;
            Ok(HeaderMatch {
                name: h.string("name")?,
                value: string_match(h.get("value")?, &h.path("value"))?,
            })
        })?,
        source_labels: r.list("source-labels", |v, at| {
            let l = Record::new(v, at, &["key", "value"])?;
            Ok(Label {
                key: l.string("key")?,
                value: l.string("value")?,
            })
        })?,
    })
}

fn string_match(v: &Value, at: &str) -> Result<StringMatch, String> {
    let bad = || format!("{at}: expected an object of one key, one of exact, prefix, regex");
    let map = v.as_object().filter(|m| m.len() == 1).ok_or_else(bad)?;
    let (case, payload) = map.iter().next().ok_or_else(bad)?;
    let payload = string(payload, &format!("{at}.{case}"))?;
    match case.as_str() {
        "exact" => Ok(StringMatch::Exact(payload)),
        "prefix" => Ok(StringMatch::Prefix(payload)),
        "regex" => Ok(StringMatch::Regex(payload)),
        _ => Err(bad()),
    }
}

impl ToWitJson for RouteResponse {
    fn to_wit_json(&self) -> Value {
        // The JSON it holds; text that is not JSON stays a string (and will not match).
        let http: Value =
            serde_json::from_str(&self.http).unwrap_or_else(|_| self.http.clone().into());
        json!({ "http": http })
    }
}

impl FromWitJson for TriggerRequest {
    fn from_wit_json(v: &Value, at: &str) -> Result<Self, String> {
        let r = Record::new(
            v,
            at,
            &[
                "elastic-service",
                "trigger-type",
                "metadata",
                "cooldown-seconds",
                "now",
            ],
        )?;
        Ok(Self {
            elastic_service: r.string("elastic-service")?,
            trigger_type: r.string("trigger-type")?,
            metadata: r.json_text("metadata")?,
            cooldown_seconds: r.u32("cooldown-seconds")?,
            now: r.s64("now")?,
        })
    }
}

impl ToWitJson for TriggerVote {
    fn to_wit_json(&self) -> Value {
        json!({
            "vote": match self.vote { Vote::Up => "up", Vote::Down => "down" },
            "value": self.value,
            "reason": self.reason,
        })
    }
}

impl FromWitJson for RestartRequest {
    fn from_wit_json(v: &Value, at: &str) -> Result<Self, String> {
        let r = Record::new(v, at, &["policy", "desired", "applied", "pods"])?;
        Ok(Self {
            policy: r.string("policy")?,
            desired: r.json_text("desired")?,
            applied: r.json_text("applied")?,
            pods: r.json_text("pods")?,
        })
    }
}

impl ToWitJson for Vec<PodDecision> {
    fn to_wit_json(&self) -> Value {
        self.iter()
            .map(|d| json!({ "restart": d.restart, "reason": d.reason }))
            .collect()
    }
}

impl FromWitJson for StateRequest {
    fn from_wit_json(v: &Value, at: &str) -> Result<Self, String> {
        let r = Record::new(
            v,
            at,
            &[
                "identity",
                "now",
                "lease",
                "wait-time-seconds",
                "failure-threshold",
                "started-at",
                "warmup-seconds",
            ],
        )?;
        let lease = match r.get("lease")? {
            Value::Null => None,
            v => {
                let at = r.path("lease");
                let l = Record::new(v, &at, &["owner", "updated-time", "notes"])?;
                Some(LeaseRecord {
                    owner: l.string("owner")?,
                    updated_time: l.s64("updated-time")?,
                    notes: l.string("notes")?,
                })
            }
        };
        Ok(Self {
            identity: r.string("identity")?,
            now: r.s64("now")?,
            lease,
            wait_time_seconds: r.u32("wait-time-seconds")?,
            failure_threshold: r.u32("failure-threshold")?,
            started_at: r.s64("started-at")?,
            warmup_seconds: r.u32("warmup-seconds")?,
        })
    }
}

impl ToWitJson for StateDecision {
    fn to_wit_json(&self) -> Value {
        json!({
            "state": match self.state { State::Active => "active", State::Passive => "passive" },
            "action": match self.action {
                Action::None => "none",
                Action::Create => "create",
                Action::Renew => "renew",
                Action::Takeover => "takeover",
            },
            "reason": self.reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy state checker: active when it holds the lease, an error for a bad setting.
    fn toy(settings: String, r: StateRequest) -> Result<StateDecision, PluginError> {
        if settings.contains("bad") {
            return Err(PluginError::at("settings.mode", "mode must be strict"));
        }
        let held = r.lease.as_ref().is_some_and(|l| l.owner == r.identity);
        Ok(StateDecision {
            state: if held { State::Active } else { State::Passive },
            action: if held { Action::Renew } else { Action::None },
            reason: format!("tick at {}", r.now),
        })
    }

    fn write(dir: &Path, name: &str, fixture: &Value) -> PathBuf {
        let file = dir.join(name);
        std::fs::write(&file, fixture.to_string()).unwrap();
        file
    }

    fn request(owner: Value) -> Value {
        json!({
            "identity": "a", "now": 5, "lease": owner, "wait-time-seconds": 10,
            "failure-threshold": 3, "started-at": 0, "warmup-seconds": 0
        })
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wasmop-sdk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn passes_matching_answers_and_errors() {
        let dir = temp_dir("pass");
        let lease = json!({"owner": "a", "updated-time": 1, "notes": ""});
        write(
            &dir,
            "held.json",
            &json!({"request": request(lease), "expect": {"state": "active", "action": "renew"}}),
        );
        write(
            &dir,
            "bad.json",
            &json!({"settings": {"mode": "bad"}, "request": request(Value::Null),
                    "expect-error": {"field": "settings.mode", "message": "strict"}}),
        );
        std::fs::write(dir.join("notes.txt"), "not a fixture").unwrap();
        assert_eq!(check_dir(&dir, toy), 2);
    }

    #[test]
    fn reports_the_first_difference_with_its_path() {
        let dir = temp_dir("diff");
        let file = write(
            &dir,
            "free.json",
            &json!({"request": request(Value::Null), "expect": {"state": "active"}}),
        );
        let e = check_file(&file, toy).unwrap_err();
        assert!(
            e.starts_with(r#"expect.state: expected "active", got "passive""#),
            "{e}"
        );
        let file = write(
            &dir,
            "err.json",
            &json!({"request": request(Value::Null), "expect-error": {}}),
        );
        let e = check_file(&file, toy).unwrap_err();
        assert!(
            e.starts_with("expected a plugin-error, got the answer"),
            "{e}"
        );
        let file = write(
            &dir,
            "field.json",
            &json!({"settings": "bad", "request": request(Value::Null),
                    "expect-error": {"field": "settings.other"}}),
        );
        let e = check_file(&file, toy).unwrap_err();
        assert!(e.contains("expected an error at settings.other"), "{e}");
    }

    #[test]
    #[should_panic(expected = "fixtures failed (1 of 1)")]
    fn check_dir_panics_on_a_failing_fixture() {
        let dir = temp_dir("panic");
        write(
            &dir,
            "free.json",
            &json!({"request": request(Value::Null), "expect": {"action": "create"}}),
        );
        check_dir(&dir, toy);
    }

    #[test]
    #[should_panic(expected = "no *.json fixture")]
    fn check_dir_panics_on_an_empty_directory() {
        check_dir(temp_dir("empty"), toy);
    }

    #[test]
    fn reads_the_wit_json_form_and_refuses_rust_shapes() {
        let vs = json!({"apiVersion": "networking.istio.io/v1", "spec": {"http": []}});
        let mut route = json!({
            "dynamic-env": "shop/alice", "unique-name": "u", "subset": "s", "host": "h",
            "namespace": "n", "default-version": "shared", "route-prefix": "p-",
            "virtual-service": vs,
            "matches": [{"headers": [{"name": "end-user", "value": {"exact": "jason"}}],
                         "source-labels": [{"key": "app", "value": "web"}]}]
        });
        let r = RouteRequest::from_wit_json(&route, "request").unwrap();
        assert_eq!(r.virtual_service, vs.to_string());
        assert!(matches!(&r.matches[0].headers[0].value, StringMatch::Exact(s) if s == "jason"));
        assert_eq!(r.matches[0].source_labels[0].value, "web");

        route["matches"][0]["headers"][0]["value"] = json!({"Exact": "jason"});
        let e = RouteRequest::from_wit_json(&route, "request").unwrap_err();
        assert_eq!(
            e,
            "request.matches[0].headers[0].value: expected an object of one key, one of exact, \
             prefix, regex"
        );
        route["dynamic_env"] = json!("x");
        let e = RouteRequest::from_wit_json(&route, "request").unwrap_err();
        assert!(e.starts_with("request: unknown field `dynamic_env`"), "{e}");

        let t = json!({"elastic-service": "a/b", "trigger-type": "prometheus",
                       "metadata": "{\"query\":\"up\"}", "cooldown-seconds": -1, "now": 0});
        let e = TriggerRequest::from_wit_json(&t, "request").unwrap_err();
        assert!(
            e.starts_with("request.cooldown-seconds: expected an integer"),
            "{e}"
        );
    }

    #[test]
    fn writes_answers_in_the_wit_json_form() {
        let vote = TriggerVote {
            vote: Vote::Down,
            value: Some(0.5),
            reason: "idle".into(),
        };
        assert_eq!(
            vote.to_wit_json(),
            json!({"vote": "down", "value": 0.5, "reason": "idle"})
        );
        let routes = RouteResponse {
            http: r#"[{"name":"r"}]"#.into(),
        };
        assert_eq!(routes.to_wit_json(), json!({"http": [{"name": "r"}]}));
        let pods = vec![PodDecision {
            restart: true,
            reason: "old".into(),
        }];
        assert_eq!(
            pods.to_wit_json(),
            json!([{"restart": true, "reason": "old"}])
        );
        assert!(subset("expect", &json!({"value": 1}), &json!({"value": 1.0})).is_ok());
    }
}
