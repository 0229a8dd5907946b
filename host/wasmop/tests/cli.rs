//! The plugin-author CLI: `wasmop plugin check` gives a verdict and an exit code;
//! `wasmop plugin run` makes one call and prints its result as JSON.

use std::process::{Command, Output};

fn wasmop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasmop"))
        .args(args)
        .env(
            "WASMOP_CACHE_DIR",
            std::env::temp_dir().join(format!("wasmop-cli-test-{}", std::process::id())),
        )
        .output()
        .unwrap()
}

fn component(file: &str) -> String {
    wasmop_tests::components_dir()
        .join(file)
        .display()
        .to_string()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn check_takes_the_compile_timeout_of_wasmop_run() {
    let cache = std::env::temp_dir().join(format!("wasmop-cli-compile-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_wasmop"))
        .args([
            "plugin",
            "check",
            &component("dr_none.wasm"),
            "--hook",
            "dr",
        ])
        .args(["--compile-timeout", "1ms"])
        .env("WASMOP_CACHE_DIR", &cache)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&cache);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("compiling it took longer than 1ms (wasmop run --compile-timeout)"),
        "{}",
        text(&out)
    );
}

#[test]
fn check_finds_the_world_and_validates_settings() {
    let ok = wasmop(&["plugin", "check", &component("routing_istio.wasm")]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(
        text(&ok).contains("is a routing plugin (routing-istio"),
        "{}",
        text(&ok)
    );

    let wrong = wasmop(&[
        "plugin",
        "check",
        &component("dr_lease.wasm"),
        "--hook",
        "routing",
    ]);
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("does not export the router world"),
        "{}",
        text(&wrong)
    );

    let bad = wasmop(&[
        "plugin",
        "check",
        &component("routing_istio.wasm"),
        "--settings",
        r#"{"colour":"red"}"#,
    ]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert_says(
        &bad,
        "not a usable wasmop plugin:\n  routing: settings rejected",
    );
    assert!(
        !text(&bad).contains("does not export"),
        "only the hook whose world it exports is reported: {}",
        text(&bad)
    );
}

/// What is not a component is said once, in words, whatever the hook; builtins are checked
/// by name.
#[test]
fn check_says_what_a_file_is_when_it_is_no_component() {
    let dir = std::env::temp_dir().join(format!("wasmop-cli-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let core = dir.join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let out = wasmop(&["plugin", "check", core.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_says(
        &out,
        "core.wasm is not a usable wasmop plugin: a core WebAssembly module, not a component",
    );
    assert_eq!(
        text(&out).matches("core WebAssembly module").count(),
        1,
        "said once, not per hook: {}",
        text(&out)
    );

    let junk = dir.join("notes.wasm");
    std::fs::write(&junk, "hello").unwrap();
    let out = wasmop(&["plugin", "check", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_says(
        &out,
        "notes.wasm is not a usable wasmop plugin: not a WebAssembly file",
    );
    assert!(!text(&out).contains("0x"), "no parser dump: {}", text(&out));

    let out = wasmop(&["plugin", "check", "builtin://restart-sidecar"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_says(&out, "builtin://restart-sidecar is a restart plugin");
    let out = wasmop(&["plugin", "check", "builtin://nope"]);
    assert!(!out.status.success());
    assert_says(&out, r#"unknown builtin "nope" (known: routing-istio,"#);
}

/// `validate-settings` runs under the limits and grants given as flags, as an entry's would:
/// a plugin that reads a file its entry grants is checked with that grant.
#[test]
fn check_runs_validate_settings_under_the_entry_flags() {
    let dir = std::env::temp_dir().join(format!("wasmop-cli-check-grants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("marker"), "x").unwrap();
    let fixture = component("wasmop_hostile_fixture.wasm");
    let check = |settings: &str, flags: &[&str]| {
        let mut args = vec!["plugin", "check", &fixture, "--hook", "routing"];
        args.extend(["--settings", settings]);
        args.extend(flags);
        wasmop(&args)
    };
    let reads = r#"{"read":"/data/marker"}"#;

    let denied = check(reads, &[]);
    assert_eq!(denied.status.code(), Some(1), "{}", text(&denied));
    assert_says(&denied, "settings rejected");
    assert_says(&denied, "read /data/marker");

    let root = ["--plugin-data-root", dir.to_str().unwrap()];
    let granted = check(
        reads,
        &[&root[..], &["--read-only-dir", dir.to_str().unwrap()]].concat(),
    );
    assert!(granted.status.success(), "{}", text(&granted));
    assert_says(&granted, "settings accepted");

    let slow = check(r#"{"loop":true}"#, &["--timeout-ms", "120"]);
    assert_eq!(slow.status.code(), Some(1), "{}", text(&slow));
    assert_says(&slow, "timed out after 120 ms (limits.timeoutMs)");

    let gone = dir.join("missing");
    let gone = gone.to_str().unwrap();
    let missing = check("{}", &[&root[..], &["--read-only-dir", gone]].concat());
    assert!(!missing.status.success(), "{}", text(&missing));
    assert_says(
        &missing,
        &format!("--read-only-dir {gone}: {gone} cannot be read"),
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--read-only-dir` follows the operator's rule under `--plugin-data-root` (by default the
/// current directory): a relative directory inside it is granted, and `..`, a symlink leading
/// out of it, a directory elsewhere and the ServiceAccount token's directory are refused before
/// anything runs, each with its reason.
#[test]
fn read_only_dir_stays_under_the_plugin_data_root() {
    let base = std::env::temp_dir().join(format!("wasmop-cli-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    std::fs::create_dir_all(root.join("data")).unwrap();
    std::fs::write(root.join("data/marker"), "x").unwrap();
    std::fs::create_dir_all(base.join("outside")).unwrap();
    std::os::unix::fs::symlink("../outside", root.join("up")).unwrap();
    let fixture = component("wasmop_hostile_fixture.wasm");
    let check = |flags: &[&str]| {
        let mut args = vec!["plugin", "check", &fixture, "--hook", "routing"];
        args.extend(["--settings", r#"{"read":"/data/marker"}"#]);
        args.extend(flags);
        Command::new(env!("CARGO_BIN_EXE_wasmop"))
            .args(&args)
            .current_dir(&root)
            .env_remove("WASMOP_PLUGIN_DATA_ROOT")
            .output()
            .unwrap()
    };

    let granted = check(&["--read-only-dir", "data"]);
    assert!(granted.status.success(), "{}", text(&granted));
    assert_says(&granted, "settings accepted");

    let refused = |flags: &[&str], why: &str| {
        let out = check(flags);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert_says(&out, why);
    };
    refused(
        &["--read-only-dir", "data/../../outside"],
        "`..` is not allowed",
    );
    refused(
        &["--read-only-dir", "up"],
        "up is a symlink to ../outside, which leads out of the plugin data root",
    );
    let outside = base.join("outside");
    refused(
        &["--read-only-dir", outside.to_str().unwrap()],
        "outside the plugin data root; a plugin may read only directories under the plugin \
         data root",
    );
    refused(
        &[
            "--read-only-dir",
            "/var/run/secrets/kubernetes.io/serviceaccount",
        ],
        "refused: /var/run/secrets holds the pod's ServiceAccount token",
    );
    refused(
        &["--plugin-data-root", "/", "--read-only-dir", "/etc"],
        "--plugin-data-root /: the plugin data root / is refused: / is the whole file system",
    );

    // check-registry applies the rule to every entry, under its own --plugin-data-root.
    let registry = base.join("plugins.yaml");
    std::fs::write(
        &registry,
        format!(
            "plugins:\n\
             - {{name: reader, hook: routing, source: 'builtin://routing-istio', \
                 grants: {{readOnlyDir: '{}/data'}}}}\n\
             - {{name: token, hook: routing, source: 'builtin://routing-istio', \
                 grants: {{readOnlyDir: /var/run/secrets/kubernetes.io/serviceaccount}}}}\n",
            root.display()
        ),
    )
    .unwrap();
    let out = wasmop(&[
        "plugin",
        "check-registry",
        registry.to_str().unwrap(),
        "--plugin-data-root",
        root.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_says(&out, "ok: reader (routing)");
    assert_says(
        &out,
        "FAIL: token (routing): grants.readOnlyDir \"/var/run/secrets/kubernetes.io/serviceaccount\": \
         refused: /var/run/secrets holds the pod's ServiceAccount token",
    );
    std::fs::remove_dir_all(&base).ok();
}

#[test]
fn run_prints_the_decision_as_json() {
    let dir = std::env::temp_dir().join(format!("wasmop-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("tick.json");
    std::fs::write(
        &input,
        r#"{"identity":"me","now":100000,"lease":{"owner":"other","updated-time":0,"notes":""},
            "wait-time-seconds":1,"failure-threshold":3,"started-at":0,"warmup-seconds":0}"#,
    )
    .unwrap();
    let out = wasmop(&[
        "plugin",
        "run",
        "--hook",
        "dr",
        "--plugin",
        "builtin://dr-lease",
        "--input",
        input.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["action"], "takeover", "{v}");
    assert_eq!(v["state"], "active", "{v}");

    let missing = wasmop(&[
        "plugin",
        "run",
        "--hook",
        "routing",
        "--plugin",
        &component("wasmop_hostile_fixture.wasm"),
        "--input",
        "/nonexistent.json",
    ]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("/nonexistent.json"),
        "{}",
        text(&missing)
    );
}

/// `wasmop run --max-concurrent-calls` (env `WASMOP_MAX_CONCURRENT_CALLS`) takes 1 to 256 and
/// says so before anything else.
#[test]
fn run_takes_the_call_concurrency_as_a_flag_or_env_within_its_range() {
    for args in [
        ["run", "--max-concurrent-calls", "0"],
        ["run", "--max-concurrent-calls", "257"],
    ] {
        let o = wasmop(&args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert_says(&o, "invalid value");
        assert_says(&o, "--max-concurrent-calls <N>");
        assert_says(&o, "in 1..=256");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_wasmop"))
        .arg("run")
        .env("WASMOP_MAX_CONCURRENT_CALLS", "0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_says(&o, "in 1..=256");
}

/// Asserts that the command's output (stdout and stderr) contains `needle`.
#[track_caller]
fn assert_says(o: &Output, needle: &str) {
    assert!(text(o).contains(needle), "{}", text(o));
}

/// Runs `plugin run` for `hook` with `request` (JSON written to a file of its own) and `args`.
fn run(hook: &str, plugin: &str, request: &serde_json::Value, args: &[&str]) -> Output {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("wasmop-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join(format!("request-{n}.json"));
    std::fs::write(&input, request.to_string()).unwrap();
    let mut all = vec![
        "plugin",
        "run",
        "--hook",
        hook,
        "--plugin",
        plugin,
        "--input",
        input.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    wasmop(&all)
}

/// Fields that cross as JSON text (here a routing request's `virtual-service`) may be given
/// in the input file as JSON objects: the answer is the same as with the text.
#[test]
fn run_takes_json_fields_as_objects_or_as_text() {
    let vs = serde_json::json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "reviews", "namespace": "shop"},
        "spec": {"hosts": ["reviews"], "http": [
            {"name": "default", "route": [{"destination": {"host": "reviews", "subset": "shared"}}]}
        ]},
    });
    let request = |virtual_service: serde_json::Value| {
        serde_json::json!({
            "dynamic-env": "shop/feature-42", "unique-name": "reviews-feature-42",
            "subset": "reviews-feature-42", "host": "reviews", "namespace": "shop",
            "default-version": "shared", "route-prefix": "de-shop-feature-42-",
            "matches": [{"headers": [{"name": "end-user", "value": {"exact": "jason"}}],
                         "source-labels": []}],
            "virtual-service": virtual_service,
        })
    };
    let plugin = "builtin://routing-istio";
    let as_object = run("routing", plugin, &request(vs.clone()), &[]);
    assert!(as_object.status.success(), "{}", text(&as_object));
    let as_text = run("routing", plugin, &request(vs.to_string().into()), &[]);
    assert!(as_text.status.success(), "{}", text(&as_text));
    assert_eq!(as_object.stdout, as_text.stdout);
    let v: serde_json::Value = serde_json::from_slice(&as_object.stdout).unwrap();
    // The routes are printed as JSON, not as the text the WIT carries them in.
    let http = v["http"].as_array().expect("`http` printed as an array");
    assert_eq!(
        http.len(),
        2,
        "the DynamicEnv's route, then the default: {v}"
    );
    assert_eq!(http[1]["name"], "default", "{v}");
}

/// What a plugin writes to stderr shows in `plugin run`'s debug log, also when the call
/// succeeds.
#[test]
fn run_shows_the_plugins_stderr_in_the_debug_log() {
    let fixture = component("wasmop_hostile_fixture.wasm");
    let chatty = hostile("stderr", "1,ok");
    let quiet = run("routing", &fixture, &chatty, &[]);
    assert!(quiet.status.success(), "{}", text(&quiet));
    // Without --log, `plugin` commands log warnings only: stdout is the answer, stderr is quiet.
    assert!(quiet.stderr.is_empty(), "{}", text(&quiet));
    let debug = run("routing", &fixture, &chatty, &["--log", "wasmop=debug"]);
    assert!(debug.status.success(), "{}", text(&debug));
    assert_says(&debug, "plugin stderr (its tail): yyyy");
}

/// A request for the hostile fixture: `behaviour` with its argument.
fn hostile(behaviour: &str, argument: &str) -> serde_json::Value {
    serde_json::json!({
        "dynamic-env": "ns/de", "unique-name": "u", "subset": behaviour, "host": argument,
        "namespace": "ns", "default-version": "v1", "matches": [], "route-prefix": "p-",
        "virtual-service": "{}",
    })
}

/// `plugin run` takes an entry's grants and limits (`--read-only-dir`, `--timeout-ms`,
/// `--memory-mib`, `--max-output-kib`); without them it runs as an entry that sets none.
#[test]
fn run_takes_the_grants_and_limits_of_a_registry_entry() {
    let fixture = component("wasmop_hostile_fixture.wasm");
    let data = std::env::temp_dir().join(format!("wasmop-cli-data-{}", std::process::id()));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("hello.txt"), "hello").unwrap();
    let data = data.to_str().unwrap();

    let read = hostile("read", "/data/hello.txt");
    let denied = run("routing", &fixture, &read, &[]);
    assert!(!denied.status.success(), "{}", text(&denied));
    assert_says(&denied, "read /data/hello.txt");
    let granted = run(
        "routing",
        &fixture,
        &read,
        &["--plugin-data-root", data, "--read-only-dir", data],
    );
    assert!(granted.status.success(), "{}", text(&granted));
    let v: serde_json::Value = serde_json::from_slice(&granted.stdout).unwrap();
    assert_eq!(v["http"], serde_json::json!([]), "{v}");
    let missing = run(
        "routing",
        &fixture,
        &read,
        &[
            "--plugin-data-root",
            "/nonexistent-dir",
            "--read-only-dir",
            "/nonexistent-dir",
        ],
    );
    assert_says(
        &missing,
        "--read-only-dir /nonexistent-dir: the plugin data root /nonexistent-dir cannot be opened",
    );

    let started = std::time::Instant::now();
    let slow = run(
        "routing",
        &fixture,
        &hostile("loop", ""),
        &["--timeout-ms", "50"],
    );
    assert_says(&slow, "timed out after 50 ms (limits.timeoutMs)");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    let big = run(
        "routing",
        &fixture,
        &hostile("oom", ""),
        &["--memory-mib", "8"],
    );
    assert_says(&big, "exceeded 8 MiB (limits.memoryMiB)");

    let answer = hostile("answer", &format!("[{}{{}}]", "{},".repeat(700)));
    let capped = run("routing", &fixture, &answer, &["--max-output-kib", "1"]);
    assert_says(
        &capped,
        "output of 2 KiB exceeds 1 KiB (limits.maxOutputKiB)",
    );
    let served = run("routing", &fixture, &answer, &[]);
    assert!(served.status.success(), "{}", text(&served));

    let zero = run("routing", &fixture, &answer, &["--memory-mib", "0"]);
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero));
}

/// A scaling vote reaches Prometheus only with `--allow-host`, and the refusal says so; an
/// `https://` Prometheus is trusted with `--extra-ca-file`, as by `wasmop run`.
#[test]
fn run_reaches_granted_hosts_and_says_which_flag_grants_a_denied_one() {
    use wasmop_tests::prometheus::QueryStub;
    let vote = |server: &str| {
        serde_json::json!({
            "elastic-service": "ns/es",
            "trigger-type": "prometheus",
            "metadata": serde_json::json!({
                "query": "sum(rate(http_requests_total[1m]))",
                "serverAddress": server,
                "threshold": "0.5",
            }).to_string(),
            "cooldown-seconds": 60,
            "now": 0,
        })
    };
    let prometheus = QueryStub::start("0.2");
    let addr = prometheus.addr.as_str();
    let request = vote(&format!("http://{addr}"));
    let plugin = "builtin://scaling-prometheus";

    let denied = run("scaling", plugin, &request, &[]);
    assert!(!denied.status.success(), "{}", text(&denied));
    assert_says(
        &denied,
        &format!(
            "denied outbound request to {addr} (not in grants.allowedHosts); to grant it, \
             pass --allow-host {addr}"
        ),
    );
    assert_eq!(prometheus.served(), 0);

    // A URL is not a host entry: said at once, before any request.
    let url = format!("http://{addr}");
    let as_url = run("scaling", plugin, &request, &["--allow-host", &url]);
    assert!(!as_url.status.success(), "{}", text(&as_url));
    assert_says(
        &as_url,
        &format!("--allow-host \"{url}\" is a URL; write host or host:port"),
    );
    assert_eq!(prometheus.served(), 0);

    let granted = run("scaling", plugin, &request, &["--allow-host", addr]);
    assert!(granted.status.success(), "{}", text(&granted));
    let v: serde_json::Value = serde_json::from_slice(&granted.stdout).unwrap();
    assert_eq!(v["vote"], "down", "{v}");
    assert_eq!(v["value"], 0.2, "{v}");
    assert_eq!(prometheus.served(), 2);

    let ca = wasmop_tests::tls::TestCa::new("wasmop cli test CA");
    let tls = QueryStub::start_tls("0.2", ca.server_config(&["localhost"]));
    let (_, port) = tls.addr.rsplit_once(':').unwrap();
    let authority = format!("localhost:{port}");
    let request = vote(&format!("https://{authority}"));
    let ca_file = std::env::temp_dir().join(format!("wasmop-cli-ca-{}.pem", std::process::id()));
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let untrusted = run("scaling", plugin, &request, &["--allow-host", &authority]);
    assert_says(&untrusted, "is not trusted");
    let trusted = run(
        "scaling",
        plugin,
        &request,
        &[
            "--allow-host",
            &authority,
            "--extra-ca-file",
            ca_file.to_str().unwrap(),
        ],
    );
    assert!(trusted.status.success(), "{}", text(&trusted));
    assert_eq!(tls.served(), 2);
}

/// `plugin check-registry` reads a registry as the operator does: one verdict per entry, the
/// ConfigMaps of the file as `configmap://` sources, and an invalid document refused.
#[test]
fn check_registry_gives_a_verdict_per_entry() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::ConfigMap;
    let dir = std::env::temp_dir().join(format!("wasmop-cli-registry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dr = std::fs::read(component("dr_lease.wasm")).unwrap();
    let router = component("routing_istio.wasm");
    let router_sha = wasmop_plugin_host::sha256_hex(&std::fs::read(&router).unwrap());
    let dr_sha = wasmop_plugin_host::sha256_hex(&dr);
    let entries = format!(
        "plugins:\n\
         - {{name: picky, hook: routing, source: 'builtin://routing-istio', settings: {{colour: red}}}}\n\
         - {{name: shipped, hook: dr, source: 'configmap://bins/dr.wasm', sha256: {dr_sha}}}\n\
         - {{name: elsewhere, hook: dr, source: 'configmap://other/x.wasm', sha256: {dr_sha}}}\n\
         - {{name: local, hook: routing, source: 'file://{router}', sha256: {router_sha}}}\n\
         defaults: {{dr: shipped}}\n"
    );
    let mut registry = ConfigMap::default();
    registry.metadata.name = Some("wasmop-plugins".into());
    registry.data = Some([("plugins.yaml".to_owned(), entries)].into());
    let mut bins = ConfigMap::default();
    bins.metadata.name = Some("bins".into());
    bins.binary_data = Some([("dr.wasm".to_owned(), ByteString(dr))].into());
    let manifest = dir.join("registry.yaml");
    std::fs::write(
        &manifest,
        format!(
            "{}---\n{}",
            serde_yaml::to_string(&registry).unwrap(),
            serde_yaml::to_string(&bins).unwrap()
        ),
    )
    .unwrap();
    let out = wasmop(&["plugin", "check-registry", manifest.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(
        lines[0].starts_with("FAIL: picky (routing): settings rejected: ")
            && lines[0].contains("colour"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("ok: shipped (dr): dr-lease 0.1.0 (sha256:"),
        "{stdout}"
    );
    assert_eq!(
        lines[2],
        format!(
            "skip: elsewhere (dr): configmap://other/x.wasm is read in the cluster; put \
             ConfigMap other (binaryData key x.wasm) in {} to check it here",
            manifest.display()
        )
    );
    assert!(
        lines[3].starts_with("ok: local (routing): routing-istio 0.1.0"),
        "{stdout}"
    );
    assert_eq!(
        lines[4],
        "defaults: routing → routing-istio, scaling → scaling-prometheus, restart → \
         restart-sidecar, dr → shipped"
    );

    // A plain plugins.yaml whose entries all load passes.
    let plain = dir.join("plugins.yaml");
    std::fs::write(
        &plain,
        format!(
            "plugins: [{{name: local, hook: routing, source: 'file://{router}', sha256: {router_sha}}}]\n"
        ),
    )
    .unwrap();
    let ok = wasmop(&["plugin", "check-registry", plain.to_str().unwrap()]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert_says(&ok, "ok: local (routing)");

    // An invalid document is refused as the operator would refuse it.
    std::fs::write(&plain, "plugins: [{name: x, hook: nope}]\n").unwrap();
    let bad = wasmop(&["plugin", "check-registry", plain.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert_says(
        &bad,
        "the operator would serve the builtin defaults instead",
    );
    assert_says(&bad, "hook");
}

/// `plugin check-registry` refuses an `after:` that names the entry itself, no routing entry,
/// or closes a cycle, entry by entry, with the reason; and `wasmop plan --registry` says why it
/// cannot plan with such an entry.
#[test]
fn check_registry_refuses_self_references_and_cycles_of_after() {
    let dir = temp_dir("after");
    let file = dir.join("plugins.yaml");
    let entry = |name: &str, after: &str| {
        format!(
            "- {{name: {name}, hook: routing, source: 'builtin://routing-istio', after: {after}}}\n"
        )
    };
    std::fs::write(
        &file,
        format!(
            "plugins:\n{}{}{}{}{}",
            entry("refined", "routing-istio"),
            entry("itself", "itself"),
            entry("a", "b"),
            entry("b", "a"),
            entry("lease", "dr-lease"),
        ),
    )
    .unwrap();
    let out = wasmop(&["plugin", "check-registry", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("ok: refined (routing): routing-istio 0.1.0 (sha256:")
            && lines[0].ends_with("; builds on routing-istio; settings accepted"),
        "{stdout}"
    );
    assert_eq!(
        lines[1],
        "FAIL: itself (routing): invalid plugins.yaml entry: after: itself is the entry itself; \
         name the routing entry whose answer it refines, e.g. after: routing-istio"
    );
    assert_eq!(
        lines[2],
        "FAIL: a (routing): invalid plugins.yaml entry: after: a → b → a is a cycle: entries \
         cannot build on each other; remove after from one of them"
    );
    assert!(
        lines[3].starts_with(
            "FAIL: b (routing): invalid plugins.yaml entry: after: b → a → b is a cycle"
        ),
        "{stdout}"
    );
    assert!(
        lines[4].starts_with(
            "FAIL: lease (routing): invalid plugins.yaml entry: after: dr-lease is a dr plugin"
        ),
        "{stdout}"
    );

    // `wasmop plan` with one of them has no router to plan with, and says why.
    let input = wasmop_tests::repo_root().join("tests/fixtures/routing/simple/input");
    let plan = |entry: &str| {
        wasmop(&[
            "plan",
            "-f",
            input.to_str().unwrap(),
            "--registry",
            file.to_str().unwrap(),
            "--entry",
            entry,
        ])
    };
    let out = plan("a");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_says(
        &out,
        "plugin \"a\" is not loaded: invalid plugins.yaml entry: after: a → b → a is a cycle",
    );
    let ok = plan("refined");
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(
        String::from_utf8_lossy(&ok.stdout)
            .contains("decidedBy:\n    - routing-istio\n    - refined"),
        "{}",
        text(&ok)
    );
    // --registry takes the place of --plugin and --settings.
    let both = wasmop(&[
        "plan",
        "-f",
        input.to_str().unwrap(),
        "--registry",
        file.to_str().unwrap(),
        "--settings",
        "{}",
    ]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
    assert_says(&both, "cannot be used with");
}

#[test]
fn log_lines_are_json_objects_with_log_format_json() {
    let plan = |format: &str| {
        Command::new(env!("CARGO_BIN_EXE_wasmop"))
            .args(["--log", "debug", "--log-format", format, "plan", "-f"])
            .arg(wasmop_tests::repo_root().join("tests/fixtures/routing/simple/input"))
            .output()
            .unwrap()
    };
    let json = plan("json");
    assert!(json.status.success(), "{}", text(&json));
    let lines: Vec<&str> = std::str::from_utf8(&json.stderr).unwrap().lines().collect();
    assert!(!lines.is_empty(), "debug logs on stderr");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v["timestamp"].is_string()
                && matches!(v["level"].as_str(), Some("DEBUG" | "INFO"))
                && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
    let plain = plan("text");
    let first = std::str::from_utf8(&plain.stderr)
        .unwrap()
        .lines()
        .next()
        .unwrap_or_default();
    assert!(
        (first.contains(" DEBUG ") || first.contains(" INFO ")) && !first.starts_with('{'),
        "{first}"
    );
    let bad = plan("xml");
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("possible values: text, json"),
        "{}",
        text(&bad)
    );
}

/// `wasmop` with `stdin` as its standard input.
fn wasmop_stdin(args: &[&str], stdin: &str) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmop"))
        .args(args)
        .env(
            "WASMOP_CACHE_DIR",
            std::env::temp_dir().join(format!("wasmop-cli-test-{}", std::process::id())),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A directory of its own under the temp dir, empty.
fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmop-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `plugin scaffold request` prints, for each hook, a request that `plugin run --input -`
/// takes from stdin and a default plugin answers, in the WIT names.
#[test]
fn scaffold_request_prints_what_run_takes_on_stdin() {
    for (hook, plugin, key) in [
        ("routing", "builtin://routing-istio", "http"),
        ("restart", "builtin://restart-sidecar", ""),
        ("dr", "builtin://dr-lease", "action"),
    ] {
        let scaffold = wasmop(&["plugin", "scaffold", "request", "--hook", hook]);
        assert!(scaffold.status.success(), "{}", text(&scaffold));
        let request = String::from_utf8(scaffold.stdout).unwrap();
        assert!(
            !request.contains('_'),
            "WIT names, no Rust field names: {request}"
        );
        let out = wasmop_stdin(
            &[
                "plugin", "run", "--hook", hook, "--plugin", plugin, "--input", "-",
            ],
            &request,
        );
        assert!(out.status.success(), "{hook}: {}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if key.is_empty() {
            assert_eq!(v[0]["restart"], true, "the outdated proxy restarts: {v}");
            assert_eq!(v[1]["restart"], false, "the current one stays: {v}");
        } else {
            assert!(!v[key].is_null(), "{hook}: {v}");
        }
    }
    let dr = wasmop(&["plugin", "scaffold", "request", "--hook", "dr"]);
    let out = wasmop_stdin(
        &[
            "plugin",
            "run",
            "--hook",
            "dr",
            "--plugin",
            "builtin://dr-lease",
            "--input",
            "-",
        ],
        &String::from_utf8_lossy(&dr.stdout),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["action"].as_str()),
        (Some("active"), Some("create")),
        "enum cases printed as WIT writes them: {v}"
    );
}

/// The Rust shapes of the host's types (`wait_time_seconds`, `{"Exact": …}`) are refused, with
/// the path of the value and the WIT name to use.
#[test]
fn run_refuses_rust_shaped_input_naming_the_wit_name() {
    let run_dr = |input: &str| {
        wasmop_stdin(
            &[
                "plugin",
                "run",
                "--hook",
                "dr",
                "--plugin",
                "builtin://dr-lease",
                "--input",
                "-",
            ],
            input,
        )
    };
    let old = run_dr(
        r#"{"identity":"me","now":1,"lease":null,"wait_time_seconds":1,"failure_threshold":3,
            "started_at":0,"warmup_seconds":0}"#,
    );
    assert_eq!(old.status.code(), Some(1), "{}", text(&old));
    assert_says(
        &old,
        "stdin: not a dr request (a state-request with its WIT field names; `wasmop plugin \
         scaffold request --hook dr` prints one): request: unknown field `failure_threshold`; \
         fields have their WIT names: `failure-threshold`",
    );
    let missing = run_dr(r#"{"identity":"me"}"#);
    assert_says(&missing, "request.now: missing");
    let garbled = run_dr("{");
    assert_says(&garbled, "stdin: not JSON");

    let mut route = hostile("ok", "");
    route["matches"] = serde_json::json!([{"headers": [{"name": "h", "value": {"Exact": "j"}}],
                                           "source-labels": []}]);
    let out = run(
        "routing",
        &component("wasmop_hostile_fixture.wasm"),
        &route,
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_says(
        &out,
        "request.matches[0].headers[0].value: `Exact` is not a case; expected one of exact, \
         prefix, regex",
    );
}

/// `plugin run --repeat N` makes N calls and prints p50, p99 and the peak linear memory under
/// the limits on stderr, the answer on stdout.
#[test]
fn run_repeat_prints_call_times_and_peak_memory() {
    let scaffold = wasmop(&["plugin", "scaffold", "request", "--hook", "routing"]);
    let out = wasmop_stdin(
        &[
            "plugin",
            "run",
            "--hook",
            "routing",
            "--plugin",
            "builtin://routing-istio",
            "--input",
            "-",
            "--repeat",
            "20",
        ],
        &String::from_utf8_lossy(&scaffold.stdout),
    );
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["http"].is_array(), "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().last().unwrap_or_default();
    assert!(
        line.starts_with("20 calls: p50 ")
            && line.contains(" ms, p99 ")
            && line.contains("(limits.timeoutMs 250 ms); peak linear memory ")
            && line.ends_with(" MiB (limits.memoryMiB 64 MiB)"),
        "{stderr}"
    );
    let peak: f64 = line
        .split("peak linear memory ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a peak in MiB: {line}"));
    assert!(peak > 0.0 && peak < 64.0, "{line}");

    // Under a smaller memory limit the peak is reported against it; a call that fails says
    // which one.
    let oom = run(
        "routing",
        &component("wasmop_hostile_fixture.wasm"),
        &hostile("oom", ""),
        &["--repeat", "3", "--memory-mib", "8"],
    );
    assert_eq!(oom.status.code(), Some(1), "{}", text(&oom));
    assert_says(&oom, "exceeded 8 MiB (limits.memoryMiB)");
    let zero = run(
        "dr",
        "builtin://dr-lease",
        &serde_json::json!({}),
        &["--repeat", "0"],
    );
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero));
}

/// `plugin test` passes a conforming default plugin, one line per property, and fails a broken
/// one naming the property it breaks.
#[test]
fn test_names_each_property_and_fails_a_broken_plugin_on_it() {
    let ok = wasmop(&[
        "plugin",
        "test",
        "builtin://routing-istio",
        "--hook",
        "routing",
    ]);
    assert!(ok.status.success(), "{}", text(&ok));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    let properties: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok: "))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(
        properties,
        [
            "loads",
            "answers-within-limits",
            "well-formed-output",
            "route-checks",
            "deterministic",
            "rejects-malformed-settings"
        ],
        "{stdout}"
    );
    assert_says(
        &ok,
        "passed: builtin://routing-istio has the 6 properties of a routing plugin",
    );

    let fixture = component("wasmop_hostile_fixture.wasm");
    let test = |settings: &str, flags: &[&str]| {
        let mut args = vec!["plugin", "test", &fixture, "--hook", "routing"];
        args.extend(["--settings", settings]);
        args.extend(flags);
        wasmop(&args)
    };
    // A router whose own route has no `match`: the host's route checks refuse it.
    let catch_all = test(r#"{"answer":"catch-all"}"#, &[]);
    assert_eq!(catch_all.status.code(), Some(1), "{}", text(&catch_all));
    assert_says(
        &catch_all,
        "FAIL: route-checks: built-in request one-header-match: route \"de-feature-x-1a2b3c-0\" \
         (spec.http[0]) has no match: it would catch every request",
    );
    assert_says(&catch_all, "ok: answers-within-limits:");
    // One that sends its route to another service.
    let elsewhere = test(r#"{"answer":"other-service"}"#, &[]);
    assert_says(&elsewhere, "FAIL: route-checks: built-in request");
    assert_says(&elsewhere, "not to reviews.shop");
    // One that never answers.
    let spins = test(r#"{"behaviour":"loop"}"#, &["--timeout-ms", "50"]);
    assert_eq!(spins.status.code(), Some(1), "{}", text(&spins));
    assert_says(
        &spins,
        "FAIL: answers-within-limits: built-in request one-header-match: timed out after 50 ms \
         (limits.timeoutMs)",
    );
    // It takes every settings string, even one that is not JSON.
    assert_says(
        &spins,
        "FAIL: rejects-malformed-settings: accepted settings {\"unterminated (not JSON)",
    );
    assert_says(&spins, "FAILED: 3 of 6 properties of a routing plugin");

    // A DR plugin that takes over every lease it sees: the host would refuse the writes.
    let thief = wasmop(&[
        "plugin",
        "test",
        &component("wasmop_hostile_dr.wasm"),
        "--hook",
        "dr",
    ]);
    assert_eq!(thief.status.code(), Some(1), "{}", text(&thief));
    assert_says(
        &thief,
        "FAIL: lease-rules: built-in request own-lease: asks to take over a lease renewed 15000 \
         ms ago, less than wait-time-seconds × failure-threshold (45000 ms); the host would \
         refuse the write",
    );
    let lease = wasmop(&["plugin", "test", "builtin://dr-lease", "--hook", "dr"]);
    assert_says(&lease, "ok: lease-rules: 5 decisions");

    // A component of another hook fails `loads` alone.
    let wrong = wasmop(&["plugin", "test", "builtin://dr-lease", "--hook", "routing"]);
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    assert_says(&wrong, "FAIL: loads: ");
    assert_says(&wrong, "does not export the router world");
    assert_says(&wrong, "FAILED: 1 of 1 properties");
}

/// `plugin test --fixtures DIR` checks the author's own requests against the decisions they
/// expect, as patterns; a fixture that is not one is a failure of its own.
#[test]
fn test_checks_the_authors_fixtures() {
    let dir = temp_dir("fixtures");
    let tick = |lease: serde_json::Value, wait: u32| {
        serde_json::json!({"identity": "eu-1", "now": 1_000_000, "lease": lease,
                           "wait-time-seconds": wait, "failure-threshold": 3, "started-at": 0,
                           "warmup-seconds": 0})
    };
    let write = |name: &str, v: serde_json::Value| {
        std::fs::write(dir.join(name), v.to_string()).unwrap();
    };
    write(
        "a-no-lease.json",
        serde_json::json!({"request": tick(serde_json::Value::Null, 15),
                           "expect": {"state": "active", "action": "create"}}),
    );
    write(
        "b-zero-wait.json",
        serde_json::json!({"request": tick(serde_json::Value::Null, 0),
                           "expect-error": {"message": "must be at least 1"}}),
    );
    write(
        "c-wrong.json",
        serde_json::json!({"request": tick(serde_json::json!({"owner": "us-1", "updated-time": 999_000, "notes": ""}), 15),
                           "expect": {"state": "active"}}),
    );
    std::fs::write(dir.join("d-garbled.json"), r#"{"request": {}}"#).unwrap();
    write(
        "e-no-field.json",
        serde_json::json!({"request": tick(serde_json::Value::Null, 0),
                           "expect-error": {"field": "request.wait-time-seconds"}}),
    );
    // Settings of its own, which the plugin's validate-settings rejects: that is its outcome.
    write(
        "f-settings.json",
        serde_json::json!({"settings": "[1]", "request": tick(serde_json::Value::Null, 15),
                           "expect-error": {"message": "settings must be a JSON object"}}),
    );
    std::fs::write(dir.join("notes.txt"), "not a fixture").unwrap();
    let out = wasmop(&[
        "plugin",
        "test",
        "builtin://dr-lease",
        "--hook",
        "dr",
        "--fixtures",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fixtures: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(": fixture "))
        .collect();
    assert_eq!(fixtures.len(), 6, "{stdout}");
    assert_eq!(fixtures[0], "ok: fixture a-no-lease: the expected answer");
    assert_eq!(
        fixtures[1],
        "ok: fixture b-zero-wait: the expected plugin-error"
    );
    assert!(
        fixtures[2].starts_with(
            "FAIL: fixture c-wrong: expect.state: expected \"active\", got \"passive\"; the \
             answer was {"
        ),
        "{stdout}"
    );
    assert!(
        fixtures[3]
            == "FAIL: fixture d-garbled: the fixture needs exactly one of `expect` and \
                       `expect-error`",
        "{stdout}"
    );
    assert_eq!(
        fixtures[4],
        "FAIL: fixture e-no-field: expected a plugin-error at request.wait-time-seconds, got \
         {\"field\":null,\"message\":\"waitTimeInSeconds must be at least 1\"}",
        "{stdout}"
    );
    assert_eq!(
        fixtures[5],
        "ok: fixture f-settings: the expected plugin-error"
    );
    // 3 fixtures, and dr-lease's own rejects-malformed-settings until it names the field.
    assert_says(&out, " of 12 properties of a dr plugin");

    let empty = temp_dir("fixtures-empty");
    let out = wasmop(&[
        "plugin",
        "test",
        "builtin://dr-lease",
        "--hook",
        "dr",
        "--fixtures",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_says(&out, "no *.json files in it");
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&empty).ok();
}

/// `plugin check -o json` and `check-registry -o json` print one JSON object.
#[test]
fn check_and_check_registry_print_json() {
    let ok = wasmop(&["plugin", "check", "builtin://dr-lease", "-o", "json"]);
    assert!(ok.status.success(), "{}", text(&ok));
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["hook"], "dr", "{v}");
    assert_eq!(v["name"], "dr-lease", "{v}");
    assert_eq!(v["world"], "state-checker", "{v}");
    assert_eq!(v["sha256"].as_str().map(str::len), Some(64), "{v}");

    let bad = wasmop(&[
        "plugin",
        "check",
        "builtin://routing-istio",
        "--settings",
        r#"{"colour":"red"}"#,
        "--output",
        "json",
    ]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    let v: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["failures"][0]["hook"], "routing", "{v}");
    assert!(
        v["failures"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("settings rejected"),
        "{v}"
    );

    let dir = temp_dir("registry-json");
    let file = dir.join("plugins.yaml");
    std::fs::write(
        &file,
        "plugins:\n\
         - {name: picky, hook: routing, source: 'builtin://routing-istio', settings: {colour: red}}\n\
         - {name: lease, hook: dr, source: 'builtin://dr-lease'}\n\
         - {name: remote, hook: dr, source: 'configmap://bins/dr.wasm', sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"}\n\
         defaults: {dr: lease}\n",
    )
    .unwrap();
    let out = wasmop(&[
        "plugin",
        "check-registry",
        file.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    let statuses: Vec<(&str, &str)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [("picky", "fail"), ("lease", "ok"), ("remote", "skip")],
        "{v}"
    );
    assert_eq!(v["defaults"]["dr"], "lease", "{v}");
    assert_eq!(v["defaults"]["routing"], "routing-istio", "{v}");

    std::fs::write(&file, "plugins: [{name: x, hook: nope}]\n").unwrap();
    let invalid = wasmop(&[
        "plugin",
        "check-registry",
        file.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(invalid.status.code(), Some(1), "{}", text(&invalid));
    let v: serde_json::Value = serde_json::from_slice(&invalid.stdout).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("the operator would serve the builtin defaults instead"),
        "{v}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A `configmap://` source whose ConfigMap holds more than the API server's 1 MiB is refused,
/// with `oci://` as the way out; one just under the limit loads.
#[test]
fn check_registry_refuses_a_configmap_over_one_mib() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::ConfigMap;
    let dr = std::fs::read(component("dr_lease.wasm")).unwrap();
    let sha = wasmop_plugin_host::sha256_hex(&dr);
    let manifest = |padding: usize| {
        let mut registry = ConfigMap::default();
        registry.metadata.name = Some("wasmop-plugins".into());
        registry.data = Some(
            [(
                "plugins.yaml".to_owned(),
                format!(
                    "plugins: [{{name: big, hook: dr, source: 'configmap://bins/dr.wasm', \
                     sha256: {sha}}}]\n"
                ),
            )]
            .into(),
        );
        let mut bins = ConfigMap::default();
        bins.metadata.name = Some("bins".into());
        bins.binary_data = Some(
            [
                ("dr.wasm".to_owned(), ByteString(dr.clone())),
                ("padding".to_owned(), ByteString(vec![0; padding])),
            ]
            .into(),
        );
        format!(
            "{}---\n{}",
            serde_yaml::to_string(&registry).unwrap(),
            serde_yaml::to_string(&bins).unwrap()
        )
    };
    let dir = temp_dir("registry-size");
    let file = dir.join("registry.yaml");
    let limit = 1 << 20;
    std::fs::write(&file, manifest(limit - dr.len())).unwrap();
    let fits = wasmop(&["plugin", "check-registry", file.to_str().unwrap()]);
    assert!(fits.status.success(), "{}", text(&fits));
    assert_says(&fits, "ok: big (dr)");

    std::fs::write(&file, manifest(limit - dr.len() + 1)).unwrap();
    let over = wasmop(&["plugin", "check-registry", file.to_str().unwrap()]);
    assert_eq!(over.status.code(), Some(1), "{}", text(&over));
    assert_says(
        &over,
        "FAIL: big (dr): ConfigMap bins holds 1048577 bytes (1.0 MiB), over the 1 MiB (1048576 \
         bytes) the API server allows a ConfigMap",
    );
    assert_says(
        &over,
        "wasmop plugin push FILE oci://REGISTRY/REPOSITORY:TAG",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `wasmop completion SHELL` prints a completion script that knows the subcommands.
#[test]
fn completion_prints_a_script_per_shell() {
    for (shell, marker) in [
        ("bash", "_wasmop()"),
        ("zsh", "#compdef wasmop"),
        ("fish", "complete -c wasmop"),
    ] {
        let out = wasmop(&["completion", shell]);
        assert!(out.status.success(), "{}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("check-registry"), "{shell}");
    }
    let nope = wasmop(&["completion", "cmd"]);
    assert_eq!(nope.status.code(), Some(2), "{}", text(&nope));
}
