//! The JSON form of the hooks' WIT types that the author tools read and print (`plugin run`,
//! `plugin test` fixtures, `plugin scaffold request`): records are objects whose keys are the
//! WIT field names (`dynamic-env`, kebab-case as the WIT package `wasmop:plugin` writes
//! them), an `enum` case is its WIT name as a string (`"up"`), a `variant` case with a payload
//! is an object of one key (`{"exact": "jason"}`), an `option` is `null` or its value, a
//! `list` an array. A `string` field that carries JSON text (a routing request's
//! `virtual-service`, a trigger's `metadata`, a restart request's `desired`, `applied` and
//! `pods`, a router's `http`) is read as the JSON it holds or as a string holding it, and
//! printed as the JSON it holds.
//!
//! The host's Rust types serialize differently (`dynamic_env`, `{"Exact": …}`, `"Up"`): this
//! module converts between the two, guided by a description of each WIT type, so that a
//! misspelt or Rust-shaped input is refused with the path of the offending value.

use serde_json::{Map, Value};
use wasmop_plugin_host::Hook;

/// A WIT type, as far as the hooks' requests and answers use them.
#[derive(Debug)]
enum Ty {
    /// `string`.
    Str,
    /// A `string` holding JSON text.
    JsonText,
    /// `u32`.
    U32,
    /// `s64`.
    S64,
    /// `f64`.
    F64,
    /// `bool`.
    Bool,
    /// `option<T>`.
    Option(&'static Ty),
    /// `list<T>`.
    List(&'static Ty),
    /// `record`: WIT field names and types, in WIT order.
    Record(&'static [(&'static str, Ty)]),
    /// `variant` whose every case carries a `string` (`string-match`): the WIT case names.
    Variant(&'static [&'static str]),
    /// `enum`: the WIT case names.
    Enum(&'static [&'static str]),
}

const STRING_MATCH: Ty = Ty::Variant(&["exact", "prefix", "regex"]);
const HEADER_MATCH: Ty = Ty::Record(&[("name", Ty::Str), ("value", STRING_MATCH)]);
const LABEL: Ty = Ty::Record(&[("key", Ty::Str), ("value", Ty::Str)]);
const ISTIO_MATCH: Ty = Ty::Record(&[
    ("headers", Ty::List(&HEADER_MATCH)),
    ("source-labels", Ty::List(&LABEL)),
]);
const ROUTE_REQUEST: Ty = Ty::Record(&[
    ("dynamic-env", Ty::Str),
    ("unique-name", Ty::Str),
    ("subset", Ty::Str),
    ("host", Ty::Str),
    ("namespace", Ty::Str),
    ("default-version", Ty::Str),
    ("matches", Ty::List(&ISTIO_MATCH)),
    ("route-prefix", Ty::Str),
    ("virtual-service", Ty::JsonText),
]);
const ROUTE_RESPONSE: Ty = Ty::Record(&[("http", Ty::JsonText)]);
const TRIGGER_REQUEST: Ty = Ty::Record(&[
    ("elastic-service", Ty::Str),
    ("trigger-type", Ty::Str),
    ("metadata", Ty::JsonText),
    ("cooldown-seconds", Ty::U32),
    ("now", Ty::S64),
]);
const TRIGGER_VOTE: Ty = Ty::Record(&[
    ("vote", Ty::Enum(&["up", "down"])),
    ("value", Ty::Option(&Ty::F64)),
    ("reason", Ty::Str),
]);
const RESTART_REQUEST: Ty = Ty::Record(&[
    ("policy", Ty::Str),
    ("desired", Ty::JsonText),
    ("applied", Ty::JsonText),
    ("pods", Ty::JsonText),
]);
const POD_DECISION: Ty = Ty::Record(&[("restart", Ty::Bool), ("reason", Ty::Str)]);
const POD_DECISIONS: Ty = Ty::List(&POD_DECISION);
const LEASE_RECORD: Ty = Ty::Record(&[
    ("owner", Ty::Str),
    ("updated-time", Ty::S64),
    ("notes", Ty::Str),
]);
const STATE_REQUEST: Ty = Ty::Record(&[
    ("identity", Ty::Str),
    ("now", Ty::S64),
    ("lease", Ty::Option(&LEASE_RECORD)),
    ("wait-time-seconds", Ty::U32),
    ("failure-threshold", Ty::U32),
    ("started-at", Ty::S64),
    ("warmup-seconds", Ty::U32),
]);
const STATE_DECISION: Ty = Ty::Record(&[
    ("state", Ty::Enum(&["active", "passive"])),
    ("action", Ty::Enum(&["none", "create", "renew", "takeover"])),
    ("reason", Ty::Str),
]);
/// `plugin-error`, the error case of every call.
const PLUGIN_ERROR: Ty = Ty::Record(&[("message", Ty::Str), ("field", Ty::Option(&Ty::Str))]);

/// The WIT name of `hook`'s request record.
pub(crate) fn request_type_name(hook: Hook) -> &'static str {
    match hook {
        Hook::Routing => "route-request",
        Hook::Scaling => "trigger-request",
        Hook::Restart => "restart-request",
        Hook::Dr => "state-request",
    }
}

fn request_ty(hook: Hook) -> &'static Ty {
    match hook {
        Hook::Routing => &ROUTE_REQUEST,
        Hook::Scaling => &TRIGGER_REQUEST,
        Hook::Restart => &RESTART_REQUEST,
        Hook::Dr => &STATE_REQUEST,
    }
}

fn answer_ty(hook: Hook) -> &'static Ty {
    match hook {
        Hook::Routing => &ROUTE_RESPONSE,
        Hook::Scaling => &TRIGGER_VOTE,
        Hook::Restart => &POD_DECISIONS,
        Hook::Dr => &STATE_DECISION,
    }
}

/// `request`, `hook`'s request record in the WIT JSON form, in the shape the host's Rust type
/// deserializes (snake_case fields, PascalCase cases, JSON text fields as strings).
///
/// # Errors
/// The first value that does not fit the WIT type, as `request.PATH: why` (e.g.
/// `request.matches[0].headers[0].value: expected one of exact, prefix, regex`).
pub(crate) fn request_to_host(hook: Hook, request: &Value) -> Result<Value, String> {
    to_host(request_ty(hook), request, "request")
}

/// `answer`, the host's Rust form of `hook`'s answer (as `serde_json::to_value` writes it), in
/// the WIT JSON form; JSON text fields are written out as the JSON they hold when they parse.
pub(crate) fn answer_to_wit(hook: Hook, answer: &Value) -> Value {
    to_wit(answer_ty(hook), answer)
}

/// A `plugin-error` in the WIT JSON form: `{"message": …, "field": … | null}`.
pub(crate) fn plugin_error(message: &str, field: Option<&str>) -> Value {
    to_wit(
        &PLUGIN_ERROR,
        &serde_json::json!({"message": message, "field": field}),
    )
}

/// WIT case name (`take-over`) to the Rust variant name (`TakeOver`).
fn pascal(case: &str) -> String {
    case.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Rust variant name (`TakeOver`) to the WIT case name (`take-over`).
fn kebab(variant: &str) -> String {
    let mut out = String::with_capacity(variant.len() + 2);
    for (i, c) in variant.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn to_host(ty: &Ty, v: &Value, at: &str) -> Result<Value, String> {
    let expected = |what: &str| format!("{at}: expected {what}, got {}", kind(v));
    match ty {
        Ty::Str => v.is_string().then(|| v.clone()).ok_or(expected("a string")),
        Ty::JsonText => Ok(match v {
            Value::String(_) => v.clone(),
            other => Value::String(other.to_string()),
        }),
        Ty::U32 => v
            .as_u64()
            .filter(|n| u32::try_from(*n).is_ok())
            .map(|_| v.clone())
            .ok_or(expected("an integer from 0 to 4294967295 (u32)")),
        Ty::S64 => v
            .as_i64()
            .map(|_| v.clone())
            .ok_or(expected("an integer (s64)")),
        Ty::F64 => v.is_number().then(|| v.clone()).ok_or(expected("a number")),
        Ty::Bool => v
            .is_boolean()
            .then(|| v.clone())
            .ok_or(expected("true or false")),
        Ty::Option(inner) => match v {
            Value::Null => Ok(Value::Null),
            other => to_host(inner, other, at),
        },
        Ty::List(inner) => match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| to_host(inner, item, &format!("{at}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            _ => Err(expected("an array")),
        },
        Ty::Record(fields) => {
            let Value::Object(given) = v else {
                return Err(expected("an object"));
            };
            for key in given.keys() {
                if !fields.iter().any(|(name, _)| name == key) {
                    let wit = key.replace('_', "-");
                    let hint = if fields.iter().any(|(name, _)| *name == wit) {
                        format!("; fields have their WIT names: `{wit}`")
                    } else {
                        let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
                        format!("; the fields are {}", names.join(", "))
                    };
                    return Err(format!("{at}: unknown field `{key}`{hint}"));
                }
            }
            let mut out = Map::new();
            for (name, field_ty) in *fields {
                let path = format!("{at}.{name}");
                let value = match (given.get(*name), field_ty) {
                    (Some(value), _) => to_host(field_ty, value, &path)?,
                    (None, Ty::Option(_)) => Value::Null,
                    (None, _) => return Err(format!("{path}: missing")),
                };
                out.insert(name.replace('-', "_"), value);
            }
            Ok(Value::Object(out))
        }
        Ty::Variant(cases) => {
            let what = format!("an object of one key, one of {}", cases.join(", "));
            match v {
                Value::Object(m) if m.len() == 1 => {
                    let (case, payload) = m.iter().next().expect("one key");
                    if !cases.contains(&case.as_str()) {
                        return Err(format!(
                            "{at}: `{case}` is not a case; expected one of {}",
                            cases.join(", ")
                        ));
                    }
                    let payload = to_host(&Ty::Str, payload, &format!("{at}.{case}"))?;
                    Ok(Value::Object(Map::from_iter([(pascal(case), payload)])))
                }
                _ => Err(expected(&what)),
            }
        }
        Ty::Enum(cases) => match v.as_str() {
            Some(case) if cases.contains(&case) => Ok(Value::String(pascal(case))),
            _ => Err(expected(&format!("one of {}", cases.join(", ")))),
        },
    }
}

fn to_wit(ty: &Ty, v: &Value) -> Value {
    match (ty, v) {
        (Ty::JsonText, Value::String(text)) => {
            serde_json::from_str(text).unwrap_or_else(|_| v.clone())
        }
        (Ty::Option(inner), v) if !v.is_null() => to_wit(inner, v),
        (Ty::List(inner), Value::Array(items)) => {
            Value::Array(items.iter().map(|i| to_wit(inner, i)).collect())
        }
        (Ty::Record(fields), Value::Object(given)) => {
            let mut out = Map::new();
            for (name, field_ty) in *fields {
                if let Some(value) = given.get(&name.replace('-', "_")) {
                    out.insert((*name).to_owned(), to_wit(field_ty, value));
                }
            }
            Value::Object(out)
        }
        (Ty::Variant(_), Value::Object(m)) => Value::Object(
            m.iter()
                .map(|(case, payload)| (kebab(case), payload.clone()))
                .collect(),
        ),
        (Ty::Enum(_), Value::String(case)) => Value::String(kebab(case)),
        _ => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_route_request_in_wit_names_reaches_the_host_type() {
        let wit = json!({
            "dynamic-env": "shop/x", "unique-name": "u", "subset": "x", "host": "reviews",
            "namespace": "shop", "default-version": "v1", "route-prefix": "p-",
            "matches": [{"headers": [{"name": "end-user", "value": {"exact": "jason"}}],
                         "source-labels": [{"key": "app", "value": "web"}]}],
            "virtual-service": {"spec": {"http": []}},
        });
        let host = request_to_host(Hook::Routing, &wit).unwrap();
        let request: wasmop_plugin_host::RouteRequest = serde_json::from_value(host).unwrap();
        assert_eq!(request.dynamic_env, "shop/x");
        assert!(
            matches!(&request.matches[0].headers[0].value,
                     wasmop_plugin_host::StringMatch::Exact(v) if v == "jason"),
            "{request:?}"
        );
        assert_eq!(request.virtual_service, r#"{"spec":{"http":[]}}"#);
    }

    #[test]
    fn the_rust_shapes_are_refused_with_the_wit_name() {
        let e = request_to_host(Hook::Dr, &json!({"identity": "a", "wait_time_seconds": 1}))
            .unwrap_err();
        assert_eq!(
            e,
            "request: unknown field `wait_time_seconds`; fields have their WIT names: \
             `wait-time-seconds`"
        );
        let matches = |value: Value| {
            json!({"dynamic-env": "", "unique-name": "", "subset": "", "host": "",
                   "namespace": "", "default-version": "", "route-prefix": "",
                   "virtual-service": "{}",
                   "matches": [{"headers": [{"name": "h", "value": value}], "source-labels": []}]})
        };
        let e = request_to_host(Hook::Routing, &matches(json!({"Exact": "j"}))).unwrap_err();
        assert_eq!(
            e,
            "request.matches[0].headers[0].value: `Exact` is not a case; expected one of \
             exact, prefix, regex"
        );
        let e = request_to_host(Hook::Routing, &matches(json!("j"))).unwrap_err();
        assert!(e.contains("expected an object of one key"), "{e}");
        let e = request_to_host(Hook::Dr, &json!({"identity": "a"})).unwrap_err();
        assert_eq!(e, "request.now: missing");
        let e = request_to_host(
            Hook::Scaling,
            &json!({"elastic-service": "", "trigger-type": "", "metadata": {},
                    "cooldown-seconds": -1, "now": 0}),
        )
        .unwrap_err();
        assert!(
            e.starts_with("request.cooldown-seconds: expected an integer"),
            "{e}"
        );
    }

    #[test]
    fn answers_are_printed_with_wit_names() {
        let vote = wasmop_plugin_host::TriggerVote {
            vote: wasmop_plugin_host::Vote::Up,
            value: Some(2.0),
            reason: "r".into(),
        };
        assert_eq!(
            answer_to_wit(Hook::Scaling, &serde_json::to_value(vote).unwrap()),
            json!({"vote": "up", "value": 2.0, "reason": "r"})
        );
        let decision = wasmop_plugin_host::StateDecision {
            state: wasmop_plugin_host::DrState::Active,
            action: wasmop_plugin_host::LeaseAction::Takeover,
            reason: "r".into(),
        };
        assert_eq!(
            answer_to_wit(Hook::Dr, &serde_json::to_value(decision).unwrap()),
            json!({"state": "active", "action": "takeover", "reason": "r"})
        );
        assert_eq!(
            answer_to_wit(Hook::Routing, &json!({"http": "[{\"name\":\"a\"}]"})),
            json!({"http": [{"name": "a"}]})
        );
        assert_eq!(kebab("TakeOver"), "take-over");
        assert_eq!(pascal("take-over"), "TakeOver");
    }
}
