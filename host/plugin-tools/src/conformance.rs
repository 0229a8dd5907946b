//! `wasmop plugin test`: the conformance suite of a hook, packaged for plugin authors, and the
//! requests it sends (also `wasmop plugin scaffold request`). The in-repo conformance test
//! (host/wasmop/tests/conformance.rs) runs it on every example and default plugin.
//!
//! Properties, one verdict each (their names are stable: scripts and tests match them):
//!
//! | property | holds when |
//! |---|---|
//! | `loads` | the component exports the hook's world, `info` names the hook, the settings are accepted |
//! | `answers-within-limits` | every built-in request is answered (a decision or a `plugin-error`) under the limits: no timeout, memory or output overrun, trap or exit |
//! | `well-formed-output` | every answer has the documented shape: routes a JSON array of objects, one decision per pod, a finite vote value, a reason that is not empty, a `plugin-error` with a message and a `field` (if any) under `request` or `settings` |
//! | `route-checks` | (routing) every routing answer passes the host's route checks ([`wasmop_plugin_host::route_checks::check`]) |
//! | `lease-rules` | (dr) every decision asks only for a lease write the host makes: create only without a lease, renew only our own, take over only a lease unchanged for `wait-time-seconds` × `failure-threshold` |
//! | `deterministic` | the same request answered twice gives the same answer |
//! | `rejects-malformed-settings` | `validate-settings` rejects settings that are not JSON, not an object, or hold a key no plugin knows, each with a `plugin-error` whose `field` is `settings` or under it |
//! | `fixture NAME` | the author's fixture `NAME.json` (see [`Fixture`]) gets the answer or `plugin-error` it expects |
//!
//! A call denied an outbound host counts as answered (it would reach the host with the grant);
//! the verdict says how many were.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use wasmop_plugin_host::{
    CallError, Failure, Grants, Hook, Limits, Plugin, PluginRuntime, PodDecision, RestartRequest,
    RouteRequest, StateRequest, TriggerRequest,
};

use wasmop_plugin_sdk::fixtures::subset;

use crate::wit_json;

/// One property's verdict: `ok: NAME: DETAIL` or `FAIL: NAME: DETAIL`.
#[derive(Debug)]
pub(crate) struct Verdict {
    /// The property's name (see the module's table).
    pub property: String,
    /// Whether it holds.
    pub ok: bool,
    /// What was checked, or the first case that breaks it and why.
    pub detail: String,
}

impl Verdict {
    fn new(property: impl Into<String>, result: Result<String, String>) -> Self {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        Self {
            property: property.into(),
            ok,
            detail,
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = if self.ok { "ok" } else { "FAIL" };
        write!(f, "{status}: {}: {}", self.property, self.detail)
    }
}

/// A request of `hook` parsed into the host's type, as the operator would send it.
#[derive(Clone, Debug)]
pub(crate) enum HostRequest {
    /// Routing.
    Route(RouteRequest),
    /// Scaling.
    Vote(TriggerRequest),
    /// Restart, with the number of pods in the page (0 when `pods` is not a JSON array).
    Restart(RestartRequest, usize),
    /// DR.
    Dr(StateRequest),
}

impl HostRequest {
    /// `request`, in the WIT JSON form ([`crate::wit_json`]), as a request of `hook`.
    ///
    /// # Errors
    /// The path of the first value that does not fit the WIT type, and why.
    pub(crate) fn parse(hook: Hook, request: &Value) -> Result<Self, String> {
        let host = wit_json::request_to_host(hook, request)?;
        let bad = |e: serde_json::Error| format!("request: {e}");
        Ok(match hook {
            Hook::Routing => Self::Route(serde_json::from_value(host).map_err(bad)?),
            Hook::Scaling => Self::Vote(serde_json::from_value(host).map_err(bad)?),
            Hook::Restart => {
                let request: RestartRequest = serde_json::from_value(host).map_err(bad)?;
                let pods = serde_json::from_str::<Vec<Value>>(&request.pods).map_or(0, |p| p.len());
                Self::Restart(request, pods)
            }
            Hook::Dr => Self::Dr(serde_json::from_value(host).map_err(bad)?),
        })
    }
}

/// A decision, as the host's types hold it.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A router's answer and its routes, parsed (the host has checked they are objects).
    Routes(Vec<Value>),
    /// A vote.
    Vote(wasmop_plugin_host::TriggerVote),
    /// One decision per pod.
    Decisions(Vec<PodDecision>),
    /// A DR decision.
    State(wasmop_plugin_host::StateDecision),
}

impl Answer {
    /// The decision in the WIT JSON form, routes written out as JSON.
    pub(crate) fn to_wit(&self) -> Value {
        let (hook, host) = match self {
            Answer::Routes(routes) => return json!({ "http": routes }),
            Answer::Vote(v) => (Hook::Scaling, serde_json::to_value(v)),
            Answer::Decisions(d) => (Hook::Restart, serde_json::to_value(d)),
            Answer::State(s) => (Hook::Dr, serde_json::to_value(s)),
        };
        wit_json::answer_to_wit(hook, &host.unwrap_or(Value::Null))
    }

    /// The reasons the answer gives (none for routes).
    fn reasons(&self) -> Vec<&str> {
        match self {
            Answer::Routes(_) => Vec::new(),
            Answer::Vote(v) => vec![v.reason.as_str()],
            Answer::Decisions(d) => d.iter().map(|d| d.reason.as_str()).collect(),
            Answer::State(s) => vec![s.reason.as_str()],
        }
    }
}

/// One call of `plugin` with `request`, under its limits and grants.
///
/// # Errors
/// The host's [`CallError`]: the plugin's `plugin-error` or the sandbox failure.
pub(crate) async fn call(plugin: &Arc<Plugin>, request: &HostRequest) -> Result<Answer, CallError> {
    Ok(match request {
        HostRequest::Route(r) => Answer::Routes(plugin.route_parsed(r.clone()).await?.1),
        HostRequest::Vote(r) => Answer::Vote(plugin.vote(r.clone()).await?),
        HostRequest::Restart(r, pods) => {
            Answer::Decisions(plugin.evaluate(r.clone(), *pods).await?)
        }
        HostRequest::Dr(r) => Answer::State(plugin.check(r.clone()).await?),
    })
}

/// The built-in requests of `hook`, by name, in the WIT JSON form: what the operator sends in
/// the usual cases. The first is the one `plugin scaffold request` prints.
pub(crate) fn builtin_requests(hook: Hook) -> Vec<(&'static str, Value)> {
    const MON_10_UTC1: i64 = 1_795_424_400_000; // Mon 2026-11-23 10:00 at UTC+01:00
    match hook {
        Hook::Routing => {
            let vs = |hosts: Value, http: Value| {
                json!({
                    "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
                    "metadata": {"name": "reviews", "namespace": "shop"},
                    "spec": {"hosts": hosts, "http": http}
                })
            };
            let default = json!({"name": "default",
                "route": [{"destination": {"host": "reviews", "subset": "shared"}}]});
            let request = |matches: Value, virtual_service: Value| {
                json!({
                    "dynamic-env": "shop/feature-x", "unique-name": "reviews-shop-feature-x",
                    "subset": "feature-x", "host": "reviews", "namespace": "shop",
                    "default-version": "shared", "matches": matches,
                    "route-prefix": "de-feature-x-1a2b3c-", "virtual-service": virtual_service
                })
            };
            let one_header = json!([{"headers": [{"name": "end-user", "value": {"exact": "jason"}}],
                                     "source-labels": []}]);
            vec![
                (
                    "one-header-match",
                    request(one_header.clone(), vs(json!(["reviews"]), json!([default]))),
                ),
                (
                    "header-and-label-matches",
                    request(
                        json!([
                            {"headers": [{"name": "x-env", "value": {"prefix": "feature-x"}}],
                             "source-labels": [{"key": "app", "value": "productpage"}]},
                            {"headers": [{"name": "cookie", "value": {"regex": "^(.*;)?env=feature-x(;.*)?$"}}],
                             "source-labels": []}
                        ]),
                        vs(
                            json!(["reviews"]),
                            json!([
                                {"name": "de-feature-x-1a2b3c-0",
                                 "match": [{"headers": {"x-env": {"prefix": "feature-x"}},
                                            "sourceLabels": {"app": "productpage"}}],
                                 "route": [{"destination": {"host": "reviews", "subset": "feature-x"}}]},
                                {"name": "canary", "match": [{"headers": {"x-canary": {"exact": "1"}}}],
                                 "route": [{"destination": {"host": "reviews", "subset": "v3"}}]},
                                default
                            ]),
                        ),
                    ),
                ),
                (
                    "fully-qualified-host",
                    request(
                        one_header,
                        vs(
                            json!(["reviews.shop.svc.cluster.local"]),
                            json!([{"name": "default", "route": [
                                {"destination": {"host": "reviews.shop.svc.cluster.local", "subset": "shared"},
                                 "weight": 100}]}]),
                        ),
                    ),
                ),
            ]
        }
        Hook::Scaling => vec![
            (
                "prometheus-trigger",
                json!({
                    "elastic-service": "shop/reviews", "trigger-type": "prometheus",
                    "metadata": {
                        "query": "sum(rate(istio_requests_total{destination_service_name=\"reviews\"}[1m]))",
                        "serverAddress": "http://prometheus.monitoring:9090", "threshold": "0.5"
                    },
                    "cooldown-seconds": 300, "now": MON_10_UTC1
                }),
            ),
            (
                "cron-trigger",
                json!({
                    "elastic-service": "shop/reviews", "trigger-type": "cron",
                    "metadata": {"timezone": "Europe/Berlin", "start": "0 8 * * 1-5",
                                 "end": "0 18 * * 1-5", "desiredReplicas": "1"},
                    "cooldown-seconds": 300, "now": MON_10_UTC1
                }),
            ),
        ],
        Hook::Restart => {
            let pod = |name: &str, proxy: &str| {
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "shop",
                                 "creationTimestamp": "2026-11-01T00:00:00Z",
                                 "annotations": {"sidecar.istio.io/status": "{\"containers\":[\"istio-proxy\"]}"}},
                    "spec": {"containers": [
                        {"name": "reviews", "image": "docker.io/istio/examples-bookinfo-reviews-v1:1.20.3"},
                        {"name": "istio-proxy", "image": proxy,
                         "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                       "limits": {"cpu": "2", "memory": "1Gi"}}}
                    ]},
                    "status": {"phase": "Running", "startTime": "2026-11-01T00:00:00Z"}
                })
            };
            let desired = json!({
                "image": "docker.io/istio/proxyv2:1.27.1",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"cpu": "2", "memory": "1Gi"}}
            });
            vec![
                (
                    "page-of-two-pods",
                    json!({
                        "policy": "shop/proxy-upgrade", "desired": desired, "applied": null,
                        "pods": [pod("reviews-v1-7d9f-abcde", "docker.io/istio/proxyv2:1.26.0"),
                                 pod("reviews-v1-7d9f-fghij", "docker.io/istio/proxyv2:1.27.1")]
                    }),
                ),
                (
                    "empty-page",
                    json!({"policy": "shop/proxy-upgrade", "desired": desired,
                           "applied": desired, "pods": []}),
                ),
            ]
        }
        Hook::Dr => {
            let tick = |now: i64, lease: Value, started_at: i64| {
                json!({
                    "identity": "eu-west-1", "now": now, "lease": lease,
                    "wait-time-seconds": 15, "failure-threshold": 3,
                    "started-at": started_at, "warmup-seconds": 60
                })
            };
            let lease = |owner: &str, updated: i64| json!({"owner": owner, "updated-time": updated, "notes": ""});
            let (now, up) = (MON_10_UTC1, MON_10_UTC1 - 3_600_000);
            vec![
                ("no-lease", tick(now, Value::Null, up)),
                ("own-lease", tick(now, lease("eu-west-1", now - 15_000), up)),
                (
                    "peer-holds-lease",
                    tick(now, lease("us-east-1", now - 10_000), up),
                ),
                (
                    "peer-lease-expired",
                    tick(now, lease("us-east-1", now - 600_000), up),
                ),
                ("warming-up", tick(now, Value::Null, now - 5_000)),
            ]
        }
    }
}

/// An author's fixture, a file `NAME.json` in `--fixtures DIR`, in the format of the Rust
/// SDK's fixture harness (`wasmop_plugin_sdk::fixtures`), so that one file serves a plugin's
/// own `cargo test` and `plugin test`:
///
/// ```json
/// {
///   "settings": {"utcOffsetMinutes": 60},
///   "request": {"identity": "eu-1", "now": 1795424400000, "lease": null, "…": "…"},
///   "expect": {"state": "active", "action": "create"}
/// }
/// ```
///
/// - `request`: the hook's request in the WIT JSON form ([`crate::wit_json`]), as `plugin run
///   --input` takes it.
/// - `expect`: the answer in the same form, as a pattern: an object matches when each key it
///   gives matches (so `reason` may be left out), an array when it has as many items and each
///   matches, anything else when equal (numbers by value).
/// - `expect-error` instead of `expect`: the call must fail with a `plugin-error`; `{"field":
///   "request.pods", "message": "JSON array"}` pins its field (equal) and a part of its message
///   (contained), both optional.
/// - `settings` (optional): an object, or a string holding one; `--settings` when absent
///   (`{}` unless given, as in the SDK's harness). They go through `validate-settings` first:
///   a `plugin-error` there is the fixture's outcome, as if the call had returned it.
///
/// Any other key is refused.
#[derive(Debug)]
pub(crate) struct Fixture {
    /// The settings to load the plugin with; `None` for `--settings`.
    pub settings: Option<Value>,
    /// The request, in the WIT JSON form.
    pub request: Value,
    /// What the call must give.
    pub expect: Expect,
}

/// What a fixture expects.
#[derive(Debug)]
pub(crate) enum Expect {
    /// A decision matching this pattern (`expect`).
    Answer(Value),
    /// A `plugin-error` (`expect-error`): its field, if given, and a part of its message.
    Error {
        /// The field it must name.
        field: Option<String>,
        /// A part of its message.
        message: Option<String>,
    },
}

impl Fixture {
    /// The keys a fixture may have.
    const KEYS: [&str; 4] = ["settings", "request", "expect", "expect-error"];

    /// Reads a fixture from its JSON text.
    ///
    /// # Errors
    /// Not JSON, not an object, a key not in [`Fixture::KEYS`], no `request`, not exactly one
    /// of `expect` and `expect-error`, an `expect-error` of another shape, or settings that are
    /// not JSON.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(mut fields) = v else {
            return Err("a fixture must be a JSON object".into());
        };
        if let Some(key) = fields.keys().find(|k| !Self::KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown key `{key}`; the keys are {}",
                Self::KEYS.join(", ")
            ));
        }
        let settings = match fields.remove("settings") {
            None => None,
            Some(Value::String(text)) => Some(
                serde_json::from_str(&text)
                    .map_err(|e| format!("settings: a string that is not JSON: {e}"))?,
            ),
            Some(v) => Some(v),
        };
        let request = fields
            .remove("request")
            .ok_or("the fixture has no `request`")?;
        let expect = match (fields.remove("expect"), fields.remove("expect-error")) {
            (Some(want), None) => Expect::Answer(want),
            (None, Some(Value::Object(want))) => {
                let text = |key: &str| match want.get(key) {
                    None => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(format!("expect-error.{key} must be a string")),
                };
                if let Some(key) = want.keys().find(|k| *k != "field" && *k != "message") {
                    return Err(format!(
                        "expect-error: unknown key `{key}`; the keys are field, message"
                    ));
                }
                Expect::Error {
                    field: text("field")?,
                    message: text("message")?,
                }
            }
            (None, Some(_)) => {
                return Err(
                    "`expect-error` must be an object with `field` and/or `message`".into(),
                );
            }
            _ => return Err("the fixture needs exactly one of `expect` and `expect-error`".into()),
        };
        Ok(Self {
            settings,
            request,
            expect,
        })
    }
}

/// What `plugin test` runs: the plugin, its hook, settings, limits and grants, and the author's
/// fixture directory.
pub(crate) struct Suite<'a> {
    /// The runtime to load it in.
    pub runtime: &'a Arc<PluginRuntime>,
    /// A component file or `builtin://NAME`.
    pub plugin: &'a str,
    /// The hook it is for.
    pub hook: Hook,
    /// Its settings.
    pub settings: Value,
    /// Its limits.
    pub limits: Limits,
    /// Its grants.
    pub grants: Grants,
    /// `--fixtures DIR`.
    pub fixtures: Option<&'a Path>,
}

/// Settings no plugin can take, each with why: `validate-settings` must refuse them.
const MALFORMED_SETTINGS: [(&str, &str); 3] = [
    ("{\"unterminated", "not JSON"),
    ("[1, 2]", "a JSON array, not an object"),
    (
        "{\"wasmop-conformance-no-such-setting\": true}",
        "an object with a key no plugin knows",
    ),
];

impl Suite<'_> {
    /// Runs every property of the hook, then every fixture; one [`Verdict`] each. A plugin that
    /// does not load gets the `loads` verdict alone.
    ///
    /// # Errors
    /// The component file cannot be read, or `--fixtures` cannot be listed.
    pub(crate) async fn run(&self) -> anyhow::Result<Vec<Verdict>> {
        let plugin = match crate::commands::load_for_cli(
            self.runtime,
            self.hook,
            self.plugin,
            self.settings.clone(),
            self.limits.clone(),
            self.grants.clone(),
        )
        .await
        {
            Ok(p) => p,
            Err(e) if e.downcast_ref::<wasmop_plugin_host::LoadError>().is_some() => {
                return Ok(vec![Verdict::new("loads", Err(e.to_string()))]);
            }
            Err(e) => return Err(e),
        };
        let (name, version) = plugin.info();
        let mut verdicts = vec![Verdict::new(
            "loads",
            Ok(format!(
                "{name} {version} exports the {} world; settings accepted",
                self.hook.world()
            )),
        )];

        // Each built-in request twice: the second answer for `deterministic`.
        let mut calls = Vec::new();
        for (case, request) in builtin_requests(self.hook) {
            let parsed = HostRequest::parse(self.hook, &request)
                .map_err(|e| anyhow::anyhow!("built-in request {case}: {e}"))?;
            let started = Instant::now();
            let first = call(&plugin, &parsed).await;
            let elapsed = started.elapsed();
            let second = call(&plugin, &parsed).await;
            calls.push(Call {
                case,
                request: parsed,
                first,
                second,
                elapsed,
            });
        }
        verdicts.push(Verdict::new("answers-within-limits", answers(&calls)));
        verdicts.push(Verdict::new("well-formed-output", well_formed(&calls)));
        if self.hook == Hook::Routing {
            verdicts.push(Verdict::new("route-checks", route_checks(&calls)));
        }
        if self.hook == Hook::Dr {
            verdicts.push(Verdict::new("lease-rules", lease_rules(&calls)));
        }
        verdicts.push(Verdict::new("deterministic", deterministic(&calls)));
        verdicts.push(Verdict::new(
            "rejects-malformed-settings",
            rejects_malformed_settings(&plugin).await,
        ));
        if let Some(dir) = self.fixtures {
            verdicts.extend(self.fixtures(&plugin, dir).await?);
        }
        Ok(verdicts)
    }

    /// One verdict per `*.json` in `dir`, in name order.
    async fn fixtures(&self, plugin: &Arc<Plugin>, dir: &Path) -> anyhow::Result<Vec<Verdict>> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list --fixtures {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        if files.is_empty() {
            anyhow::bail!("--fixtures {}: no *.json files in it", dir.display());
        }
        let mut verdicts = Vec::new();
        for file in files {
            let name = file
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            verdicts.push(Verdict::new(
                format!("fixture {name}"),
                self.fixture(plugin, &file).await,
            ));
        }
        Ok(verdicts)
    }

    /// The verdict of one fixture file. `loaded` is the plugin loaded with `--settings`: a
    /// fixture's own settings go through its `validate-settings` first, and a rejection is the
    /// fixture's outcome, as the call's rejection of them is in the SDK's harness.
    async fn fixture(&self, loaded: &Arc<Plugin>, file: &Path) -> Result<String, String> {
        let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read it: {e}"))?;
        let fixture = Fixture::parse(&text)?;
        let request = HostRequest::parse(self.hook, &fixture.request)?;
        let outcome = match fixture.settings {
            None => call(loaded, &request).await,
            Some(settings) => match loaded.validate_settings(settings.to_string()).await {
                Err(e) => Err(e),
                Ok(()) => {
                    let plugin = crate::commands::load_for_cli(
                        self.runtime,
                        self.hook,
                        self.plugin,
                        settings,
                        self.limits.clone(),
                        self.grants.clone(),
                    )
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                    call(&plugin, &request).await
                }
            },
        };
        match (&fixture.expect, outcome) {
            (Expect::Answer(want), Ok(answer)) => {
                let got = answer.to_wit();
                subset("expect", want, &got)
                    .map(|()| "the expected answer".to_owned())
                    .map_err(|why| format!("{why}; the answer was {got}"))
            }
            (Expect::Answer(_), Err(e)) => Err(format!("expected an answer, got: {e}")),
            (Expect::Error { field, message }, Err(e)) => {
                let Failure::Plugin {
                    message: got_message,
                    field: got_field,
                } = &e.failure
                else {
                    return Err(format!("expected a plugin-error, got: {e}"));
                };
                let got = || wit_json::plugin_error(got_message, got_field.as_deref()).to_string();
                if field.is_some() && got_field != field {
                    return Err(format!(
                        "expected a plugin-error at {}, got {}",
                        field.as_deref().unwrap_or_default(),
                        got()
                    ));
                }
                if let Some(part) = message
                    && !got_message.contains(part.as_str())
                {
                    return Err(format!(
                        "expected a plugin-error whose message contains {part:?}, got {}",
                        got()
                    ));
                }
                Ok("the expected plugin-error".to_owned())
            }
            (Expect::Error { .. }, Ok(answer)) => Err(format!(
                "expected a plugin-error, got the answer {}",
                answer.to_wit()
            )),
        }
    }
}

/// One built-in request, answered twice.
struct Call {
    case: &'static str,
    request: HostRequest,
    first: Result<Answer, CallError>,
    second: Result<Answer, CallError>,
    elapsed: Duration,
}

/// `answers-within-limits`.
fn answers(calls: &[Call]) -> Result<String, String> {
    let mut denied = 0;
    for c in calls {
        match &c.first {
            Ok(_) => {}
            Err(e) => match &e.failure {
                Failure::Plugin { .. } | Failure::InvalidOutput(_) => {}
                Failure::DeniedHost { .. } => denied += 1,
                other => return Err(format!("built-in request {}: {other}", c.case)),
            },
        }
    }
    let slowest = calls.iter().map(|c| c.elapsed).max().unwrap_or_default();
    let decided = calls.iter().filter(|c| c.first.is_ok()).count();
    let denied = if denied > 0 {
        format!("; {denied} denied an outbound host not granted (--allow-host to let them through)")
    } else {
        String::new()
    };
    Ok(format!(
        "{} built-in requests answered, {decided} with a decision, the slowest in {:.1} ms{denied}",
        calls.len(),
        slowest.as_secs_f64() * 1e3
    ))
}

/// `well-formed-output`.
fn well_formed(calls: &[Call]) -> Result<String, String> {
    for c in calls {
        let at = |why: String| format!("built-in request {}: {why}", c.case);
        match &c.first {
            Ok(answer) => {
                if let Answer::Vote(v) = answer
                    && v.value.is_some_and(|x| !x.is_finite())
                {
                    return Err(at(format!("the vote's value {:?} is not finite", v.value)));
                }
                if answer.reasons().iter().any(|r| r.trim().is_empty()) {
                    return Err(at(
                        "a reason is empty; the operator shows it in status and Events".into(),
                    ));
                }
            }
            Err(e) => match &e.failure {
                Failure::InvalidOutput(why) => return Err(at(why.clone())),
                Failure::Plugin { message, field } => {
                    if message.trim().is_empty() {
                        return Err(at("a plugin-error with an empty message".into()));
                    }
                    if let Some(field) = field
                        && !under(field, "request")
                        && !under(field, "settings")
                    {
                        return Err(at(format!(
                            "the plugin-error's field {field:?} is not a path under `request` \
                             or `settings` (e.g. `request.virtual-service`)"
                        )));
                    }
                }
                _ => {}
            },
        }
    }
    Ok(format!("{} built-in requests", calls.len()))
}

/// Whether `field` is `root` or a path under it (`root.x`, `root[0]`).
fn under(field: &str, root: &str) -> bool {
    field
        .strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

/// `route-checks`: each routing answer through the host's checks, against the routes and
/// namespace of the request's VirtualService.
fn route_checks(calls: &[Call]) -> Result<String, String> {
    let mut checked = 0;
    for c in calls {
        let (HostRequest::Route(request), Ok(Answer::Routes(routes))) = (&c.request, &c.first)
        else {
            continue;
        };
        let vs: Value = serde_json::from_str(&request.virtual_service).unwrap_or_default();
        let namespace = vs
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(&request.namespace);
        let input = vs
            .pointer("/spec/http")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        wasmop_plugin_host::route_checks::check(request, namespace, &input, routes).map_err(
            |why| {
                format!(
                    "built-in request {}: {why}; the operator would leave the VirtualService as \
                     it was",
                    c.case
                )
            },
        )?;
        checked += 1;
    }
    if checked == 0 {
        return Err("no built-in request got routes to check".into());
    }
    Ok(format!("{checked} answers"))
}

/// `lease-rules`: each DR decision asks only for a lease write the host would make, judged from
/// the request alone (the host also requires, for a takeover, that it saw the lease unchanged
/// that long itself).
fn lease_rules(calls: &[Call]) -> Result<String, String> {
    use wasmop_plugin_host::LeaseAction;
    let mut checked = 0;
    for c in calls {
        let (HostRequest::Dr(request), Ok(Answer::State(decision))) = (&c.request, &c.first) else {
            continue;
        };
        let lease = request.lease.as_ref();
        let ours = lease.is_some_and(|l| l.owner == request.identity);
        let expiry_ms =
            i64::from(request.wait_time_seconds) * i64::from(request.failure_threshold) * 1000;
        let why = match (decision.action, lease) {
            (LeaseAction::Create, Some(_)) => Some(
                "asks to create the lease, which exists: only an absent lease is created".into(),
            ),
            (LeaseAction::Renew, _) if !ours => {
                Some("asks to renew a lease it does not hold: only its own lease is renewed".into())
            }
            (LeaseAction::Takeover, None) => {
                Some("asks to take over a lease that does not exist (create it instead)".into())
            }
            (LeaseAction::Takeover, Some(l)) if request.now - l.updated_time < expiry_ms => {
                Some(format!(
                    "asks to take over a lease renewed {} ms ago, less than wait-time-seconds × \
                     failure-threshold ({expiry_ms} ms)",
                    request.now - l.updated_time
                ))
            }
            _ => None,
        };
        if let Some(why) = why {
            return Err(format!(
                "built-in request {}: {why}; the host would refuse the write",
                c.case
            ));
        }
        checked += 1;
    }
    Ok(format!("{checked} decisions"))
}

/// `deterministic`.
fn deterministic(calls: &[Call]) -> Result<String, String> {
    for c in calls {
        let show = |r: &Result<Answer, CallError>| match r {
            Ok(a) => a.to_wit().to_string(),
            Err(e) => e.failure.to_string(),
        };
        let (first, second) = (show(&c.first), show(&c.second));
        if first != second {
            return Err(format!(
                "built-in request {}: answered {first}, then {second}",
                c.case
            ));
        }
    }
    Ok(format!(
        "{} built-in requests, each answered twice",
        calls.len()
    ))
}

/// `rejects-malformed-settings`.
async fn rejects_malformed_settings(plugin: &Arc<Plugin>) -> Result<String, String> {
    for (settings, what) in MALFORMED_SETTINGS {
        match plugin.validate_settings(settings.to_owned()).await {
            Ok(()) => return Err(format!("accepted settings {settings} ({what})")),
            Err(e) => match &e.failure {
                Failure::Plugin {
                    field: Some(field), ..
                } if under(field, "settings") => {}
                Failure::Plugin { field: None, .. } => {
                    return Err(format!(
                        "rejected settings {settings} ({what}) without a field path; give \
                         `settings` or the path under it"
                    ));
                }
                _ => {
                    return Err(format!(
                        "settings {settings} ({what}): {}; expected a plugin-error with a \
                         field under `settings`",
                        e.failure
                    ));
                }
            },
        }
    }
    Ok(format!(
        "{} malformed settings rejected with a field path",
        MALFORMED_SETTINGS.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_request_fits_its_wit_type() {
        for hook in Hook::ALL {
            for (case, request) in builtin_requests(hook) {
                HostRequest::parse(hook, &request).unwrap_or_else(|e| panic!("{case}: {e}"));
            }
        }
    }

    /// A DR call answered with `first`, then `second`.
    fn dr_call(first: Result<Answer, CallError>, second: Result<Answer, CallError>) -> Call {
        let (case, request) = builtin_requests(Hook::Dr).remove(0);
        Call {
            case,
            request: HostRequest::parse(Hook::Dr, &request).unwrap(),
            first,
            second,
            elapsed: Duration::from_millis(1),
        }
    }

    fn decision(action: wasmop_plugin_host::LeaseAction, reason: &str) -> Answer {
        Answer::State(wasmop_plugin_host::StateDecision {
            state: wasmop_plugin_host::DrState::Active,
            action,
            reason: reason.into(),
        })
    }

    fn plugin_error(field: Option<&str>) -> CallError {
        CallError {
            plugin: "p".into(),
            hook: Hook::Dr,
            failure: Failure::Plugin {
                message: "no".into(),
                field: field.map(Into::into),
            },
        }
    }

    #[test]
    fn deterministic_fails_on_a_second_answer_that_differs() {
        use wasmop_plugin_host::LeaseAction::{Create, Takeover};
        let same = dr_call(Ok(decision(Create, "r")), Ok(decision(Create, "r")));
        assert!(deterministic(&[same]).is_ok());
        let differs = dr_call(Ok(decision(Create, "r")), Ok(decision(Takeover, "r")));
        let e = deterministic(&[differs]).unwrap_err();
        assert!(
            e.starts_with("built-in request no-lease: answered {")
                && e.contains(r#""action":"create""#)
                && e.contains(r#"then {"action":"takeover""#),
            "{e}"
        );
        let errors = dr_call(Err(plugin_error(None)), Ok(decision(Create, "r")));
        assert!(deterministic(&[errors]).is_err());
    }

    #[test]
    fn well_formed_wants_reasons_and_field_paths() {
        use wasmop_plugin_host::LeaseAction::Create;
        let ok = dr_call(Ok(decision(Create, "r")), Ok(decision(Create, "r")));
        assert!(well_formed(&[ok]).is_ok());
        let blank = dr_call(Ok(decision(Create, " ")), Ok(decision(Create, " ")));
        assert!(
            well_formed(&[blank])
                .unwrap_err()
                .contains("a reason is empty")
        );
        let at = |field| dr_call(Err(plugin_error(field)), Err(plugin_error(field)));
        assert!(well_formed(&[at(Some("request.lease"))]).is_ok());
        assert!(well_formed(&[at(None)]).is_ok());
        assert!(
            well_formed(&[at(Some("lease"))])
                .unwrap_err()
                .contains(r#"the plugin-error's field "lease" is not a path under `request`"#)
        );
    }

    #[test]
    fn fixtures_are_read_in_the_sdk_harness_format() {
        let f = Fixture::parse(
            r#"{"settings": "{\"percent\": 150}", "request": {},
                "expect-error": {"field": "settings.percent", "message": "from 0 to 100"}}"#,
        )
        .unwrap();
        assert_eq!(f.settings, Some(json!({"percent": 150})));
        assert!(
            matches!(&f.expect, Expect::Error { field: Some(f), message: Some(m) }
                     if f == "settings.percent" && m == "from 0 to 100"),
            "{f:?}"
        );
        let f = Fixture::parse(r#"{"request": {}, "expect": {"http": []}}"#).unwrap();
        assert!(f.settings.is_none() && matches!(f.expect, Expect::Answer(_)));
        for (text, why) in [
            ("[]", "a fixture must be a JSON object"),
            (
                r#"{"request": {}, "expect": {}, "description": ""}"#,
                "unknown key `description`; the keys are settings, request, expect, expect-error",
            ),
            (r#"{"expect": {}}"#, "the fixture has no `request`"),
            (
                r#"{"request": {}, "expect": {}, "expect-error": {}}"#,
                "the fixture needs exactly one of `expect` and `expect-error`",
            ),
            (
                r#"{"request": {}, "expect-error": {"code": 1}}"#,
                "expect-error: unknown key `code`; the keys are field, message",
            ),
        ] {
            assert_eq!(Fixture::parse(text).unwrap_err(), why, "{text}");
        }
    }

    #[test]
    fn patterns_match_by_the_keys_they_give() {
        let got = json!({"state": "active", "action": "create", "reason": "r", "n": 2.0});
        let at = "expect";
        assert_eq!(
            subset(at, &json!({"state": "active", "n": 2}), &got),
            Ok(())
        );
        assert_eq!(
            subset(at, &json!({"action": "renew"}), &got),
            Err(r#"expect.action: expected "renew", got "create""#.into())
        );
        assert_eq!(
            subset(at, &json!({"x": 1}), &got),
            Err("expect.x: missing from the answer".into())
        );
        assert_eq!(
            subset(at, &json!([{}]), &json!([{}, {}])),
            Err("expect: expected 1 elements, got 2".into())
        );
        assert!(under("settings.maxAge", "settings") && under("request[0]", "request"));
        assert!(!under("settingsX", "settings"));
    }
}
