//! Plugin conformance: every example plugin (examples/plugins, five languages) and every default
//! plugin (plugins/*) passes `wasmop plugin test`, the conformance suite plugin authors run
//! (host/plugin-tools/src/conformance.rs), and makes real decisions through the host under the
//! production limits (the defaults of `limits:`: 64 MiB, 250 ms, 1 MiB of output).
//!
//! The examples are built by examples/plugins/build.sh into `<target>/example-plugins` (rebuilt
//! only when their sources change); its toolchains come from scripts/setup.sh. Compiled
//! components are cached in `<target>/example-plugins/compile-cache`, shared with the CLI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use wasmop_plugin_host::{
    CallError, Failure, Hook, Plugin, PluginRuntime, PluginSpec, RuntimeOptions,
};
use wasmop_tests::prometheus::QueryStub;

/// One component under test: file, hook, the name its `info` gives, and its settings.
struct Component {
    file: PathBuf,
    hook: Hook,
    name: &'static str,
    settings: Value,
}

use wasmop_tests::target_dir;

fn cache_dir() -> PathBuf {
    target_dir().join("example-plugins").join("compile-cache")
}

/// The example plugins' directory, built once per test run.
fn examples() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| wasmop_tests::example_plugins(&target_dir(), &[]))
}

fn components() -> Vec<Component> {
    let ex = |file: &str| examples().join(file);
    let default = |file: &str| wasmop_tests::components_dir().join(file);
    vec![
        Component {
            file: ex("retry-router.wasm"),
            hook: Hook::Routing,
            name: "retry-router",
            settings: json!({"attempts": 3}),
        },
        Component {
            file: ex("schedule-scaler.wasm"),
            hook: Hook::Scaling,
            name: "schedule-scaler",
            settings: json!({"holidays": ["2026-12-25"]}),
        },
        Component {
            file: ex("annotation-restart.wasm"),
            hook: Hook::Restart,
            name: "annotation-restart",
            settings: json!({}),
        },
        Component {
            file: ex("business-hours-dr.wasm"),
            hook: Hook::Dr,
            name: "business-hours-dr",
            settings: json!({"utcOffsetMinutes": 60, "startHour": 8, "endHour": 18}),
        },
        Component {
            file: ex("max-age-restart.wasm"),
            hook: Hook::Restart,
            name: "max-age-restart",
            settings: json!({"maxAge": "24h"}),
        },
        Component {
            file: default("routing_istio.wasm"),
            hook: Hook::Routing,
            name: "routing-istio",
            settings: json!({}),
        },
        Component {
            file: default("scaling_prometheus.wasm"),
            hook: Hook::Scaling,
            name: "scaling-prometheus",
            settings: json!({}),
        },
        Component {
            file: default("restart_sidecar.wasm"),
            hook: Hook::Restart,
            name: "restart-sidecar",
            settings: json!({}),
        },
        Component {
            file: default("dr_lease.wasm"),
            hook: Hook::Dr,
            name: "dr-lease",
            settings: json!({}),
        },
        Component {
            file: default("dr_none.wasm"),
            hook: Hook::Dr,
            name: "none",
            settings: json!({}),
        },
    ]
}

fn component(name: &str) -> Component {
    components()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no component {name}"))
}

/// The author's fixtures of the component `name`, if its sources carry some: the `fixtures`
/// directory of its example (`examples/plugins/*/fixtures`, in the format `plugin test` and the
/// Rust SDK's harness share) or of its default plugin (`plugins/*/fixtures`).
fn fixtures(name: &str) -> Option<PathBuf> {
    let root = wasmop_tests::repo_root();
    let dir = match name {
        "retry-router" => root.join("examples/plugins/rust-retry-router"),
        "schedule-scaler" => root.join("examples/plugins/python-schedule-scaler"),
        "annotation-restart" => root.join("examples/plugins/js-annotation-restart"),
        "business-hours-dr" => root.join("examples/plugins/c-business-hours-dr"),
        "max-age-restart" => root.join("examples/plugins/go-max-age-restart"),
        "none" => root.join("plugins/dr-none"),
        other => root.join("plugins").join(other),
    }
    .join("fixtures");
    dir.is_dir().then_some(dir)
}

/// `wasmop plugin test FILE --hook H --settings S [--fixtures DIR]`: (exit ok, stdout +
/// stderr).
fn plugin_test(c: &Component) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmop"));
    cmd.args(["plugin", "test"]).arg(&c.file).args([
        "--hook",
        c.hook.as_str(),
        "--settings",
        &c.settings.to_string(),
    ]);
    if let Some(dir) = fixtures(c.name) {
        cmd.arg("--fixtures").arg(dir);
    }
    let out = cmd
        .env("WASMOP_CACHE_DIR", cache_dir())
        .output()
        .expect("run wasmop plugin test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The verdict of `wasmop plugin test` on `c`: it loads and passes every property.
fn conforms(c: &Component) -> Result<(), String> {
    let (ok, text) = plugin_test(c);
    let loads = format!("ok: loads: {} ", c.name);
    if !text.contains(&loads) {
        return Err(format!("{}: expected `{loads}`:\n{text}", c.name));
    }
    let failed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL: "))
        .filter_map(|l| l.split(':').next())
        .collect();
    if !ok || !failed.is_empty() {
        return Err(format!(
            "{}: wasmop plugin test failed {failed:?}:\n{text}",
            c.name
        ));
    }
    Ok(())
}

/// Every component passes `wasmop plugin test`, the conformance suite authors run, with its
/// settings and its own fixtures if it has some. Runs once, before
/// the calls below, so that each component is compiled once (into the shared cache) rather than
/// by every test at the same time; one component at a time, so that the large ones (Python,
/// JavaScript) do not share the cores while they compile under `wasmop run`'s compile timeout.
fn checked() -> &'static Result<(), String> {
    static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
    CHECKED.get_or_init(|| {
        examples();
        let failures: Vec<String> = components()
            .iter()
            .filter_map(|c| conforms(c).err())
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("\n"))
        }
    })
}

#[test]
#[ignore = "builds the example plugins with the toolchains of scripts/setup.sh: run with make test"]
fn every_plugin_passes_wasmop_plugin_test() {
    if let Err(e) = checked() {
        panic!("{e}");
    }
}

/// The component loaded as a registry entry with production limits and no grants.
async fn load(name: &str, edit: impl FnOnce(&mut PluginSpec)) -> Arc<Plugin> {
    checked().as_ref().expect("plugin check passed");
    let c = component(name);
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(cache_dir()),
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let mut spec = PluginSpec::new(name, c.hook, &format!("file://{}", c.file.display()));
    spec.settings = Some(c.settings.clone());
    edit(&mut spec);
    assert_eq!(
        spec.limits,
        wasmop_plugin_host::Limits::default(),
        "production limits"
    );
    let bytes = std::fs::read(&c.file).expect("read the component");
    runtime.load(&spec, &bytes).await.expect("load")
}

/// One call with `request` (the hook's WIT request record as JSON, as `wasmop plugin run`
/// takes it); the decision as JSON.
async fn call(p: &Arc<Plugin>, request: Value) -> Result<Value, CallError> {
    let hook = p.spec().hook;
    let out = match hook {
        Hook::Routing => {
            serde_json::to_value(p.route(serde_json::from_value(request).unwrap()).await?)
        }
        Hook::Scaling => {
            serde_json::to_value(p.vote(serde_json::from_value(request).unwrap()).await?)
        }
        Hook::Restart => {
            // The page size the host expects decisions for; 0 when `pods` is not a list.
            let pods = serde_json::from_str::<Vec<Value>>(request["pods"].as_str().unwrap())
                .map_or(0, |p| p.len());
            serde_json::to_value(
                p.evaluate(serde_json::from_value(request).unwrap(), pods)
                    .await?,
            )
        }
        Hook::Dr => serde_json::to_value(p.check(serde_json::from_value(request).unwrap()).await?),
    };
    Ok(out.expect("decision as JSON"))
}

fn plugin_error(e: &CallError) -> (&str, Option<&str>) {
    match &e.failure {
        Failure::Plugin { message, field } => (message.as_str(), field.as_deref()),
        other => panic!("expected a plugin-error, got {other}"),
    }
}

fn route_request(vs: &Value) -> Value {
    json!({
        "dynamic_env": "shop/feature-x", "unique_name": "reviews-shop-feature-x",
        "subset": "feature-x", "host": "reviews", "namespace": "shop", "default_version": "shared",
        "matches": [{"headers": [{"name": "end-user", "value": {"Exact": "jason"}}], "source_labels": []}],
        "route_prefix": "de-feature-x-1a2b3c-", "virtual_service": vs.to_string()
    })
}

fn reviews_vs() -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "reviews", "namespace": "shop"},
        "spec": {"hosts": ["reviews"], "http": [
            {"name": "default", "route": [{"destination": {"host": "reviews", "subset": "shared"}}]}
        ]}
    })
}

#[tokio::test]
#[ignore = "builds the example plugins with the toolchains of scripts/setup.sh: run with make test"]
async fn rust_retry_router_sends_matches_to_the_subset_with_retries() {
    let p = load("retry-router", |_| {}).await;
    let out = call(&p, route_request(&reviews_vs())).await.unwrap();
    let http: Value = serde_json::from_str(out["http"].as_str().unwrap()).unwrap();
    assert_eq!(http.as_array().unwrap().len(), 2, "{http}");
    assert_eq!(http[0]["name"], "de-feature-x-1a2b3c-0");
    assert_eq!(
        http[0]["match"][0]["headers"]["end-user"],
        json!({"exact": "jason"})
    );
    assert_eq!(
        http[0]["route"],
        json!([{"destination": {"host": "reviews", "subset": "feature-x"},
                "headers": {"response": {"add": {"x-dynamic-env": "reviews-shop-feature-x"}}}}])
    );
    assert_eq!(http[0]["retries"]["attempts"], 3, "the settings' attempts");
    assert_eq!(http[0]["retries"]["perTryTimeout"], "2s", "the default");
    assert_eq!(http[1]["name"], "default", "the original route stays last");

    let e = call(&p, route_request(&json!({"spec": {}})))
        .await
        .unwrap_err();
    assert_eq!(plugin_error(&e).1, Some("request.virtual-service"), "{e}");
}

fn trigger(metadata: Value, now: i64) -> Value {
    json!({"elastic_service": "shop/api", "trigger_type": "schedule",
           "metadata": metadata.to_string(), "cooldown_seconds": 300, "now": now})
}

#[tokio::test]
#[ignore = "builds the example plugins with the toolchains of scripts/setup.sh: run with make test"]
async fn python_schedule_scaler_votes_by_time_of_day() {
    let p = load("schedule-scaler", |_| {}).await;
    let office = json!({"windows": ["Mon-Fri 08:00-18:00"], "utcOffset": "+01:00"});
    // Unix ms of local times at UTC+01:00.
    let cases = [
        (1_795_424_400_000_i64, "Up", "Mon 10:00"),
        (
            1_795_417_200_000,
            "Up",
            "Mon 08:00, the window's first minute",
        ),
        (1_795_417_140_000, "Down", "Mon 07:59"),
        (1_795_460_400_000, "Down", "Mon 20:00"),
        (1_795_856_400_000, "Down", "Sat 10:00"),
        (
            1_798_189_200_000,
            "Down",
            "Fri 25 Dec, a holiday in the settings",
        ),
    ];
    for (now, want, when) in cases {
        let v = call(&p, trigger(office.clone(), now)).await.unwrap();
        assert_eq!(v["vote"], want, "{when}: {v}");
        assert!(v["reason"].as_str().unwrap().contains("2026-"), "{v}");
    }
    let night = json!({"windows": ["Fri 22:00-02:00"], "utcOffset": "+01:00"});
    // Sat 2026-11-28 01:00 local is inside Friday's window past midnight.
    let v = call(&p, trigger(night, 1_795_824_000_000)).await.unwrap();
    assert_eq!(v["vote"], "Up", "{v}");

    let e = call(&p, trigger(json!({"windows": ["Mon-Fri 8-18"]}), 0))
        .await
        .unwrap_err();
    assert_eq!(
        plugin_error(&e).1,
        Some("request.metadata.windows[0]"),
        "{e}"
    );
    let mut other = trigger(office, 0);
    other["trigger_type"] = json!("prometheus");
    let e = call(&p, other).await.unwrap_err();
    assert_eq!(plugin_error(&e).1, Some("request.trigger-type"), "{e}");
}

fn pod(name: &str, annotations: Value, start_time: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
           "spec": {"containers": [{"name": "app", "image": "app:1"}]},
           "status": {"phase": "Running", "startTime": start_time}})
}

fn restart_request(pods: &[Value]) -> Value {
    json!({"policy": "nightly", "desired": "{}", "applied": "null",
           "pods": Value::Array(pods.to_vec()).to_string()})
}

fn restarts(decisions: &Value) -> Vec<bool> {
    decisions
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["restart"].as_bool().unwrap())
        .collect()
}

#[tokio::test]
#[ignore = "builds the example plugins with the toolchains of scripts/setup.sh: run with make test"]
async fn javascript_annotation_restart_restarts_pods_started_before_the_request() {
    let p = load("annotation-restart", |_| {}).await;
    let key = "example.com/restart-requested-at";
    let pods = [
        pod(
            "before",
            json!({key: "2026-11-20T12:00:00Z"}),
            "2026-11-01T00:00:00Z",
        ),
        pod(
            "after",
            json!({key: "2026-11-20T12:00:00Z"}),
            "2026-11-21T00:00:00Z",
        ),
        pod("unannotated", json!({}), "2020-01-01T00:00:00Z"),
        pod("garbled", json!({key: "yesterday"}), "2020-01-01T00:00:00Z"),
    ];
    let d = call(&p, restart_request(&pods)).await.unwrap();
    assert_eq!(restarts(&d), [true, false, false, false], "{d}");
    assert_eq!(
        d[0]["reason"],
        "shop/before: restart requested at 2026-11-20T12:00:00Z, pod started at 2026-11-01T00:00:00Z"
    );
    assert!(
        d[3]["reason"]
            .as_str()
            .unwrap()
            .contains("not an RFC 3339 time"),
        "{d}"
    );

    let mut bad = restart_request(&[]);
    bad["pods"] = json!("{}");
    let e = call(&p, bad).await.unwrap_err();
    assert_eq!(plugin_error(&e).1, Some("request.pods"), "{e}");
}

#[tokio::test]
#[ignore = "builds the example plugins with the toolchains of scripts/setup.sh: run with make test"]
async fn go_max_age_restart_restarts_pods_older_than_the_maximum() {
    let p = load("max-age-restart", |_| {}).await;
    let pods = [
        pod("old", json!({}), "2020-01-01T00:00:00Z"),
        pod(
            "pinned",
            json!({"example.com/max-age-exempt": "true"}),
            "2020-01-01T00:00:00Z",
        ),
        pod("fresh", json!({}), "2999-01-01T00:00:00Z"),
    ];
    let d = call(&p, restart_request(&pods)).await.unwrap();
    assert_eq!(restarts(&d), [true, false, false], "{d}");
    assert!(
        d[0]["reason"]
            .as_str()
            .unwrap()
            .contains("longer than maxAge 24h0m0s"),
        "{d}"
    );
    assert!(
        d[2]["reason"]
            .as_str()
            .unwrap()
            .contains("is in the future"),
        "{d}"
    );
    let e = call(
        &p,
        json!({"policy": "p", "desired": "{}", "applied": "null", "pods": "[1]"}),
    )
    .await
    .unwrap_err();
    assert_eq!(plugin_error(&e).1, Some("request.pods"), "{e}");
}

fn tick(now: i64, lease: Value) -> Value {
    json!({"identity": "eu-1", "now": now, "lease": lease, "wait_time_seconds": 15,
           "failure_threshold": 3, "started_at": 0, "warmup_seconds": 0})
}

#[tokio::test]
#[ignore = "builds the example plugins with the toolchains of scripts/setup.sh: run with make test"]
async fn c_business_hours_dr_holds_the_lease_only_in_business_hours() {
    let p = load("business-hours-dr", |_| {}).await;
    let (monday_10, monday_20, saturday_10) = (
        1_795_424_400_000_i64,
        1_795_460_400_000_i64,
        1_795_856_400_000_i64,
    );
    let mine = |updated: i64| json!({"owner": "eu-1", "updated_time": updated, "notes": ""});
    let theirs = |updated: i64| json!({"owner": "us-1", "updated_time": updated, "notes": ""});
    let cases = [
        (tick(monday_10, Value::Null), "Active", "Create"),
        (tick(monday_10, mine(monday_10 - 15_000)), "Active", "Renew"),
        (
            tick(monday_10, theirs(monday_10 - 10_000)),
            "Passive",
            "None",
        ),
        (
            tick(monday_10, theirs(monday_10 - 46_000)),
            "Active",
            "Takeover",
        ),
        (tick(monday_20, mine(monday_20 - 15_000)), "Passive", "None"),
        (tick(saturday_10, Value::Null), "Passive", "None"),
    ];
    for (request, state, action) in cases {
        let d = call(&p, request.clone()).await.unwrap();
        assert_eq!(
            (d["state"].as_str(), d["action"].as_str()),
            (Some(state), Some(action)),
            "{request} -> {d}"
        );
    }
    let d = call(&p, tick(monday_20, Value::Null)).await.unwrap();
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .starts_with("outside business hours (08:00-18:00 Mon-Fri UTC+01:00, now Mon 20:00)"),
        "{d}"
    );
    let mut zero = tick(monday_10, Value::Null);
    zero["wait_time_seconds"] = json!(0);
    let e = call(&p, zero).await.unwrap_err();
    assert_eq!(plugin_error(&e).1, Some("request"), "{e}");
}

#[tokio::test]
#[ignore = "builds the example plugins with the toolchains of scripts/setup.sh: run with make test"]
async fn default_plugins_decide_through_the_host() {
    let dr = load("dr-lease", |_| {}).await;
    let d = call(&dr, tick(100_000, Value::Null)).await.unwrap();
    assert_eq!(
        (d["state"].as_str(), d["action"].as_str()),
        (Some("Active"), Some("Create")),
        "{d}"
    );

    let routing = load("routing-istio", |_| {}).await;
    let out = call(&routing, route_request(&reviews_vs())).await.unwrap();
    let http: Value = serde_json::from_str(out["http"].as_str().unwrap()).unwrap();
    assert_eq!(
        http[0]["route"][0]["destination"]["subset"], "feature-x",
        "{http}"
    );
    assert_eq!(http[1]["name"], "default", "{http}");

    let restart = load("restart-sidecar", |_| {}).await;
    let mut sidecar = pod(
        "meshed",
        json!({"sidecar.istio.io/status": "{}"}),
        "2026-01-01T00:00:00Z",
    );
    sidecar["spec"]["containers"] = json!([{"name": "istio-proxy", "image": "proxyv2:1.0"}]);
    let mut request = restart_request(&[sidecar]);
    request["desired"] = json!(r#"{"image":"proxyv2:1.1"}"#);
    let d = call(&restart, request).await.unwrap();
    assert_eq!(restarts(&d), [true], "{d}");

    let prometheus = QueryStub::start("0.2");
    let scaling = load("scaling-prometheus", |s| {
        s.grants.allowed_hosts = vec![prometheus.addr.clone()];
    })
    .await;
    let metadata = json!({"query": "sum(rate(http_requests_total[1m]))",
                          "serverAddress": format!("http://{}", prometheus.addr), "threshold": "0.5"});
    let mut req = trigger(metadata, 1_795_424_400_000);
    req["trigger_type"] = json!("prometheus");
    let v = call(&scaling, req).await.unwrap();
    assert_eq!(v["vote"], "Down", "0.2 is below the threshold: {v}");
    assert_eq!(v["value"], 0.2, "{v}");
    assert_eq!(prometheus.served(), 2, "the health query and the trigger's");
}
