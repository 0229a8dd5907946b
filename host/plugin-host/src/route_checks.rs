//! What the host checks in a router's answer before any of it is written: the plugin decides
//! the routes of one DynamicEnv subset, and nothing else.
//!
//! - Every route not named with the request's route prefix is one of the input's routes,
//!   unchanged and in the same relative order (the plugin owns only its own routes).
//! - Every route named with the prefix
//!   1. matches only requests of the DynamicEnv: each of its `match` entries carries every
//!      header and source label condition of at least one of the DynamicEnv's `istioMatches`
//!      (a route without `match` matches everything and is refused);
//!   2. sends traffic only to the request's service with the DynamicEnv's subset: each
//!      `route[].destination` names the request's host (short name in the VirtualService's
//!      namespace, or `host.ns`, `host.ns.svc`, `host.ns.svc.cluster.local`) and its subset;
//!   3. has a `mirror`, `mirrors`, `redirect`, `delegate` or `directResponse` only as one of the
//!      input's routes has it, the same (a copy may keep what it copied, not add a new target).
//!
//! An answer that breaks any rule is invalid output: the VirtualService is left as it was and
//! the DynamicEnv reports the reason (docs/routing.md, "Router answers").
//!
//! The routing controller (host/controllers/src/routing/answer.rs re-exports this module) and
//! `wasmop plugin test` run the same code; it needs no Kubernetes client, only the routes as
//! JSON.

use serde_json::{Map, Value};

use crate::{IstioMatch, RouteRequest, StringMatch};

/// The fields of an `HTTPRoute` that send a request somewhere other than `route[]`.
const OTHER_TARGETS: [&str; 5] = [
    "mirror",
    "mirrors",
    "redirect",
    "delegate",
    "directResponse",
];

/// Checks `answer`, the router's new `spec.http` for `request`, against `input`, the routes it
/// was given (the `spec.http` of the request's VirtualService), for a VirtualService in
/// namespace `vs_namespace`. The routing controller checks every answer with it, and so does
/// `wasmop plugin test`.
///
/// # Errors
/// The first rule the answer breaks, naming the route, as one sentence (e.g. `route
/// "de-x-canary" (spec.http[0]) has no match: it would catch every request, …`).
pub fn check(
    request: &RouteRequest,
    vs_namespace: &str,
    input: &[Value],
    answer: &[Value],
) -> Result<(), String> {
    let prefix = request.route_prefix.as_str();
    let owned = |r: &&Value| route_name(r).is_some_and(|n| n.starts_with(prefix));
    if !answer
        .iter()
        .filter(|r| !owned(r))
        .eq(input.iter().filter(|r| !owned(r)))
    {
        return Err(format!(
            "it changed routes it does not own: every route not named {prefix}* must stay as \
             it was, in order"
        ));
    }
    for (i, route) in answer.iter().enumerate().filter(|(_, r)| owned(r)) {
        let name = route_name(route).unwrap_or_default();
        let at = |why: String| format!("route {name:?} (spec.http[{i}]) {why}");
        let Value::Object(route) = route else {
            return Err(at("is not an object".into()));
        };
        check_matches(route, &request.matches).map_err(at)?;
        check_destinations(route, request, vs_namespace).map_err(at)?;
        check_other_targets(route, input).map_err(at)?;
    }
    Ok(())
}

/// Rule 1: every `match` entry carries one of `matches` whole.
fn check_matches(route: &Map<String, Value>, matches: &[IstioMatch]) -> Result<(), String> {
    let entries = match route.get("match") {
        Some(Value::Array(entries)) if !entries.is_empty() => entries,
        _ => {
            return Err(
                "has no match: it would catch every request, not only the DynamicEnv's".into(),
            );
        }
    };
    for (j, entry) in entries.iter().enumerate() {
        if !matches.iter().any(|m| carries(entry, m)) {
            return Err(format!(
                "match[{j}] carries none of the DynamicEnv's istioMatches: it would catch \
                 requests that are not the DynamicEnv's"
            ));
        }
    }
    Ok(())
}

/// Whether the `match` entry `entry` has every header and source label condition of `m`.
fn carries(entry: &Value, m: &IstioMatch) -> bool {
    let headers = m.headers.iter().all(|h| {
        entry
            .get("headers")
            .and_then(|hs| hs.get(&h.name))
            .is_some_and(|v| *v == string_match(&h.value))
    });
    let labels = m.source_labels.iter().all(|l| {
        entry
            .get("sourceLabels")
            .and_then(|ls| ls.get(&l.key))
            .and_then(Value::as_str)
            == Some(l.value.as_str())
    });
    headers && labels
}

/// Istio's JSON form of a string match: `{"exact": v}`, `{"prefix": v}` or `{"regex": v}`.
fn string_match(m: &StringMatch) -> Value {
    let (kind, v) = match m {
        StringMatch::Exact(v) => ("exact", v),
        StringMatch::Prefix(v) => ("prefix", v),
        StringMatch::Regex(v) => ("regex", v),
    };
    Value::Object(Map::from_iter([(
        kind.to_owned(),
        Value::String(v.clone()),
    )]))
}

/// Rule 2: every destination is the request's service and subset.
fn check_destinations(
    route: &Map<String, Value>,
    request: &RouteRequest,
    vs_namespace: &str,
) -> Result<(), String> {
    let Some(destinations) = route.get("route") else {
        return Ok(());
    };
    let Value::Array(destinations) = destinations else {
        return Err("has a `route` that is not a list".into());
    };
    let service = Some((request.namespace.clone(), request.host.clone()));
    for (k, d) in destinations.iter().enumerate() {
        let host = d.pointer("/destination/host").and_then(Value::as_str);
        let subset = d.pointer("/destination/subset").and_then(Value::as_str);
        if host.and_then(|h| service_of_host(h, vs_namespace)) != service {
            return Err(format!(
                "sends route[{k}] to host {}, not to {}.{}",
                host.unwrap_or("(none)"),
                request.host,
                request.namespace
            ));
        }
        if subset != Some(request.subset.as_str()) {
            return Err(format!(
                "sends route[{k}] to subset {}, not to the DynamicEnv's subset {}",
                subset.unwrap_or("(none)"),
                request.subset
            ));
        }
    }
    Ok(())
}

/// Rule 3: a mirror, redirect, delegation or direct response only as an input route has it.
fn check_other_targets(route: &Map<String, Value>, input: &[Value]) -> Result<(), String> {
    for field in OTHER_TARGETS {
        if let Some(v) = route.get(field)
            && !input.iter().any(|r| r.get(field) == Some(v))
        {
            return Err(format!(
                "has a {field} that none of the VirtualService's routes has"
            ));
        }
    }
    Ok(())
}

/// The routes of `answer` (a checked answer for `request`) that send traffic to the request's
/// service at its default version but are not preceded by a copy for every istioMatch, one
/// note each: `route "NAME" (spec.http[I]) has no copy for istioMatches[J, …]`. The default
/// plugin leaves a copy out when it would match requests its route does not (a condition on the
/// same header or source label that cannot be narrowed, a `withoutHeaders` that excludes the
/// DynamicEnv's value) or only requests an earlier route already takes (docs/routing.md,
/// "Routes that get no copy"); the DynamicEnv's status lists these notes.
pub fn uncopied(request: &RouteRequest, vs_namespace: &str, answer: &[Value]) -> Vec<String> {
    let prefix = request.route_prefix.as_str();
    let service = Some((request.namespace.clone(), request.host.clone()));
    let to_default = |route: &Value| {
        route
            .get("route")
            .and_then(Value::as_array)
            .is_some_and(|ds| {
                ds.iter().any(|d| {
                    let host = d.pointer("/destination/host").and_then(Value::as_str);
                    let subset = d.pointer("/destination/subset").and_then(Value::as_str);
                    host.and_then(|h| service_of_host(h, vs_namespace)) == service
                        && subset == Some(request.default_version.as_str())
                })
            })
    };
    let mut notes = Vec::new();
    let mut copies: Vec<&Value> = Vec::new();
    for (i, route) in answer.iter().enumerate() {
        if route_name(route).is_some_and(|n| n.starts_with(prefix)) {
            copies.push(route);
            continue;
        }
        if to_default(route) {
            let missing: Vec<String> = (0..request.matches.len())
                .filter(|&j| {
                    !copies.iter().any(|c| {
                        c.get("match")
                            .and_then(Value::as_array)
                            .is_some_and(|es| es.iter().any(|e| carries(e, &request.matches[j])))
                    })
                })
                .map(|j| j.to_string())
                .collect();
            if !missing.is_empty() {
                let name = route_name(route).map_or_else(String::new, |n| format!("{n:?} "));
                notes.push(format!(
                    "route {name}(spec.http[{i}]) has no copy for istioMatches[{}]",
                    missing.join(", ")
                ));
            }
        }
        copies.clear();
    }
    notes
}

/// The Service `(namespace, name)` host `host` names when written in namespace `written_in`,
/// if it names one: a short name in the namespace it is written in (as Istio resolves short
/// names), or `name.ns`, `name.ns.svc`, `name.ns.svc.cluster.local`; wildcards and external
/// hosts name none.
pub fn service_of_host(host: &str, written_in: &str) -> Option<(String, String)> {
    if host.contains('*') || host.is_empty() {
        return None;
    }
    let host = host
        .strip_suffix(".svc.cluster.local")
        .or_else(|| host.strip_suffix(".svc"))
        .unwrap_or(host);
    match host.split_once('.') {
        None => Some((written_in.to_owned(), host.to_owned())),
        Some((name, ns)) if !ns.contains('.') && !name.is_empty() && !ns.is_empty() => {
            Some((ns.to_owned(), name.to_owned()))
        }
        _ => None,
    }
}

/// A route's `name`, if it has one.
pub fn route_name(route: &Value) -> Option<&str> {
    route.get("name").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HeaderMatch, Label};
    use serde_json::json;

    const PREFIX: &str = "dynamic-environment-abc-";

    fn request() -> RouteRequest {
        RouteRequest {
            dynamic_env: "shop/jason".into(),
            unique_name: "reviews-shop-jason".into(),
            subset: "shop-jason".into(),
            host: "reviews".into(),
            namespace: "shop".into(),
            default_version: "shared".into(),
            matches: vec![
                IstioMatch {
                    headers: vec![HeaderMatch {
                        name: "end-user".into(),
                        value: StringMatch::Exact("jason".into()),
                    }],
                    source_labels: vec![],
                },
                IstioMatch {
                    headers: vec![],
                    source_labels: vec![Label {
                        key: "track".into(),
                        value: "canary".into(),
                    }],
                },
            ],
            route_prefix: PREFIX.into(),
            virtual_service: String::new(),
        }
    }

    fn input() -> Vec<Value> {
        vec![
            json!({"name": "mirrored", "match": [{"uri": {"prefix": "/api"}}],
                   "route": [{"destination": {"host": "reviews", "subset": "shared"}}],
                   "mirror": {"host": "audit"}}),
            json!({"name": "default", "route": [{"destination": {"host": "reviews", "subset": "shared"}}]}),
        ]
    }

    /// A good copy of the default route for the first istioMatch.
    fn copy() -> Value {
        json!({"name": format!("{PREFIX}0"),
               "match": [{"headers": {"end-user": {"exact": "jason"}}}],
               "route": [{"destination": {"host": "reviews.shop.svc.cluster.local", "subset": "shop-jason"}}]})
    }

    fn answer_with(route: Value) -> Vec<Value> {
        let mut out = vec![route];
        out.extend(input());
        out
    }

    #[test]
    fn hosts_name_services_as_istio_resolves_them() {
        let reviews = Some(("default".to_owned(), "reviews".to_owned()));
        assert_eq!(service_of_host("reviews", "default"), reviews);
        assert_ne!(service_of_host("reviews", "other"), reviews);
        for h in [
            "reviews.default",
            "reviews.default.svc",
            "reviews.default.svc.cluster.local",
        ] {
            assert_eq!(
                service_of_host(h, "other"),
                Some(("default".into(), "reviews".into()))
            );
        }
        for h in ["reviews-v2", "reviews.other", "reviews.default.svc.cluster"] {
            assert_ne!(service_of_host(h, "default"), reviews, "{h}");
        }
        assert_eq!(
            service_of_host("reviews", "ns"),
            Some(("ns".into(), "reviews".into()))
        );
        assert_eq!(service_of_host("*.example.com", "ns"), None);
        assert_eq!(service_of_host("api.example.com", "ns"), None);
    }

    #[test]
    fn copies_of_the_default_plugins_shape_pass() {
        let mut by_label = copy();
        by_label["name"] = json!(format!("{PREFIX}1"));
        by_label["match"] =
            json!([{"uri": {"prefix": "/"}, "sourceLabels": {"track": "canary", "app": "x"}}]);
        let mut answer = answer_with(copy());
        answer.insert(1, by_label);
        // A copy of the mirrored route keeps its mirror.
        let mut mirrored = copy();
        mirrored["name"] = json!(format!("{PREFIX}2"));
        mirrored["mirror"] = json!({"host": "audit"});
        answer.insert(2, mirrored);
        assert_eq!(check(&request(), "shop", &input(), &answer), Ok(()));
        assert_eq!(check(&request(), "shop", &input(), &input()), Ok(()));
    }

    #[test]
    fn a_catch_all_route_is_refused() {
        let mut route = copy();
        route.as_object_mut().unwrap().remove("match");
        let e = check(&request(), "shop", &input(), &answer_with(route)).unwrap_err();
        assert!(e.contains("has no match"), "{e}");

        let mut route = copy();
        route["match"] =
            json!([{"headers": {"end-user": {"exact": "jason"}}}, {"uri": {"prefix": "/"}}]);
        let e = check(&request(), "shop", &input(), &answer_with(route)).unwrap_err();
        assert!(e.contains("match[1] carries none"), "{e}");

        // The right header name with another value, or another kind of match, is not the
        // DynamicEnv's condition.
        for header in [
            json!({"exact": "bob"}),
            json!({"prefix": "j"}),
            json!({"regex": ".*"}),
        ] {
            let mut route = copy();
            route["match"] = json!([{"headers": {"end-user": header}}]);
            assert!(check(&request(), "shop", &input(), &answer_with(route)).is_err());
        }
    }

    #[test]
    fn traffic_goes_only_to_the_request_service_and_subset() {
        for (dest, why) in [
            (
                json!({"host": "ratings", "subset": "shop-jason"}),
                "host ratings",
            ),
            (
                json!({"host": "reviews.other", "subset": "shop-jason"}),
                "host reviews.other",
            ),
            (
                json!({"host": "evil.example.com", "subset": "shop-jason"}),
                "host evil",
            ),
            (
                json!({"host": "reviews", "subset": "shared"}),
                "subset shared",
            ),
            (json!({"host": "reviews"}), "subset (none)"),
        ] {
            let mut route = copy();
            route["route"] = json!([{"destination": dest}]);
            let e = check(&request(), "shop", &input(), &answer_with(route)).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        // A short name names the service only in its own namespace.
        let mut route = copy();
        route["route"] = json!([{"destination": {"host": "reviews", "subset": "shop-jason"}}]);
        assert_eq!(
            check(&request(), "shop", &input(), &answer_with(route.clone())),
            Ok(())
        );
        assert!(check(&request(), "gateway-ns", &input(), &answer_with(route)).is_err());
    }

    #[test]
    fn new_mirrors_redirects_delegations_and_direct_responses_are_refused() {
        for (field, value) in [
            ("mirror", json!({"host": "exfiltrate.example.com"})),
            (
                "mirrors",
                json!([{"destination": {"host": "exfiltrate.example.com"}}]),
            ),
            ("redirect", json!({"authority": "evil.example.com"})),
            (
                "delegate",
                json!({"name": "other", "namespace": "kube-system"}),
            ),
            ("directResponse", json!({"status": 503})),
        ] {
            let mut route = copy();
            route[field] = value;
            let e = check(&request(), "shop", &input(), &answer_with(route)).unwrap_err();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    #[test]
    fn routes_of_others_must_stay_as_they_were() {
        let mut answer = answer_with(copy());
        answer[2]["route"][0]["destination"]["subset"] = json!("v2");
        let e = check(&request(), "shop", &input(), &answer).unwrap_err();
        assert!(e.contains("does not own"), "{e}");
        let mut swapped = answer_with(copy());
        swapped.swap(1, 2);
        assert!(check(&request(), "shop", &input(), &swapped).is_err());
        let dropped = vec![copy(), input()[1].clone()];
        assert!(check(&request(), "shop", &input(), &dropped).is_err());
    }

    #[test]
    fn routes_without_a_copy_for_every_istio_match_are_noted() {
        // A copy for istioMatches[0] before the first route, none before the second; the
        // mirror of another host is not the service's and needs none.
        let mut answer = answer_with(copy());
        answer.push(json!({"name": "other", "route": [{"destination": {"host": "ratings", "subset": "shared"}}]}));
        assert_eq!(
            uncopied(&request(), "shop", &answer),
            [
                "route \"mirrored\" (spec.http[1]) has no copy for istioMatches[1]",
                "route \"default\" (spec.http[2]) has no copy for istioMatches[0, 1]",
            ]
        );
        // One copy per istioMatch before each: nothing to note.
        let mut by_label = copy();
        by_label["name"] = json!(format!("{PREFIX}1"));
        by_label["match"] = json!([{"sourceLabels": {"track": "canary"}}]);
        let full = [
            copy(),
            by_label.clone(),
            input()[0].clone(),
            copy(),
            by_label,
            input()[1].clone(),
        ];
        assert!(uncopied(&request(), "shop", &full).is_empty());
    }
}
