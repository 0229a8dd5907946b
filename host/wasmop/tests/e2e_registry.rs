//! E2E: the plugin registry is hot-reloaded while `wasmop run` runs under the chart's RBAC
//! (deploy/manifests): a good new version takes effect; a bad one leaves the last good version
//! serving, with a Warning Event on the ConfigMap and `PluginReady=False` on the DynamicEnv
//! using it. A source created after the entry naming it is picked up by the retry; one whose
//! download hangs holds back neither the other plugins nor a fix. The gauges
//! on `/metrics` follow. `--extra-ca-file` is trusted for `https://` sources, and a file
//! holding no certificate stops the operator at start.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use wasmop_api::dynamicenv::DynamicEnv;
use wasmop_plugin_host::sha256_hex;
use wasmop_tests::tls::{self, TestCa};
use wasmop_tests::{
    Operator, Process, eventually, free_port, http_get, install_crds, install_operator_rbac,
    service_account_kubeconfig, with_temp_ns,
};

const OPERATOR_NS: &str = "wasmop-system";
const TIMEOUT: Duration = Duration::from_secs(60);

fn component(file: &str) -> Vec<u8> {
    std::fs::read(wasmop_tests::components_dir().join(file)).unwrap()
}

fn registry_doc(sha256: &str) -> String {
    format!(
        "plugins:\n  - name: custom-routing\n    hook: routing\n    source: configmap://wasmop-plugin-bin/router.wasm\n    sha256: \"{sha256}\"\ndefaults: {{routing: custom-routing}}\n"
    )
}

async fn apply_cm(client: &Client, cm: ConfigMap) {
    let ns = cm.metadata.namespace.clone().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let name = cm.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("wasmop-e2e").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

fn configmap(ns: &str, name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some(ns.into());
    cm
}

async fn set_component(client: &Client, ns: &str, bytes: &[u8]) {
    let mut cm = configmap(ns, "wasmop-plugin-bin");
    cm.binary_data = Some([("router.wasm".to_owned(), ByteString(bytes.to_vec()))].into());
    apply_cm(client, cm).await;
}

async fn set_registry(client: &Client, ns: &str, doc: &str) {
    let mut cm = configmap(ns, "wasmop-plugins");
    cm.data = Some([("plugins.yaml".to_owned(), doc.to_owned())].into());
    apply_cm(client, cm).await;
}

/// Waits for an Event with `reason` on ConfigMap `wasmop-plugins` in `ns` whose note contains
/// `note` (`""`: any note).
async fn registry_event(client: &Client, ns: &str, reason: &str, note: &str) -> Event {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let what = format!("a {reason} Event on wasmop-plugins saying {note:?}");
    eventually(&what, TIMEOUT, async || {
        let list = events
            .list(&ListParams::default().fields("involvedObject.name=wasmop-plugins"))
            .await
            .ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.message.as_deref().is_some_and(|m| m.contains(note))
        })
    })
    .await
}

/// The `/plugins` entry of `name`.
fn plugin_entry(addr: &str, name: &str) -> Option<Value> {
    let (status, body) = http_get(addr, "/plugins")?;
    if status != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
}

/// The value of the sample `series` (name and labels as `/metrics` prints them).
fn metric(addr: &str, series: &str) -> Option<String> {
    let (status, body) = http_get(addr, "/metrics")?;
    if status != 200 {
        return None;
    }
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
}

const CUSTOM_ROUTING_READY: &str = r#"wasmop_plugin_ready{plugin="custom-routing",hook="routing"}"#;
const CONFIG_RELOAD_SUCCESSFUL: &str = "wasmop_plugins_config_last_reload_successful";

fn plugin_ready(de: &DynamicEnv) -> Option<Condition> {
    de.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "PluginReady")
        .cloned()
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn registry_changes_take_effect_and_bad_versions_keep_the_last_good_one() {
    install_crds();
    install_operator_rbac();
    with_temp_ns("registry", |client: Client, ns: String| async move {
        let router_v1 = component("routing_istio.wasm");
        let router_v2 = component("wasmop_hostile_fixture.wasm");
        let (d1, d2) = (sha256_hex(&router_v1), sha256_hex(&router_v2));
        set_component(&client, &ns, &router_v1).await;
        set_registry(&client, &ns, &registry_doc(&d1)).await;

        // The compile cache holds an hour-old artifact of a component no entry uses (left by an
        // earlier version of the registry), which the first reload removes, and a file of
        // someone else's, which it leaves.
        let cache = wasmop_tests::dump_dir().join(format!("cache-{ns}"));
        std::fs::create_dir_all(&cache).unwrap();
        let stale = [format!("{}-{}.cwasm", "0".repeat(64), "0".repeat(16)), format!("{}-{}.cwasm.sha256", "0".repeat(64), "0".repeat(16))];
        for name in stale.iter().chain([&"notes.txt".to_owned()]) {
            let f = std::fs::File::create(cache.join(name)).unwrap();
            f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600)).unwrap();
        }

        wasmop_tests::bind_operator_namespace(&ns);
        let kubeconfig = service_account_kubeconfig(OPERATOR_NS, "wasmop");
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_wasmop"));
        cmd.args(["run", "--namespace", &ns, "--watch-namespace", &ns, "--listen", &addr, "--identity", &format!("e2e-{ns}")])
            .env("KUBECONFIG", &kubeconfig)
            .env("WASMOP_CACHE_DIR", &cache);
        let mut operator = Process::spawn(cmd, wasmop_tests::dump_dir().join(format!("{ns}-operator.log")));

        let v1 = eventually("custom-routing v1 loaded", TIMEOUT, async || {
            assert!(operator.alive(), "the operator exited:\n{}", operator.log());
            plugin_entry(&addr, "custom-routing").filter(|p| p["ready"] == true)
        })
        .await;
        assert_eq!(v1["servingDigest"], d1.as_str());
        eventually("the unused artifact pruned", TIMEOUT, async || {
            (!stale.iter().any(|name| cache.join(name).exists())).then_some(())
        })
        .await;
        assert!(cache.join("notes.txt").exists(), "not the cache's file: left alone");
        let cached = std::fs::read_dir(&cache).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&d1)).count();
        assert_eq!(cached, 2, "v1's artifact and its digest stay");
        // The gauges are set once the reload is done, just after /plugins shows it.
        eventually("wasmop_plugin_ready 1", TIMEOUT, async || metric(&addr, CUSTOM_ROUTING_READY).filter(|v| v == "1")).await;
        assert_eq!(metric(&addr, CONFIG_RELOAD_SUCCESSFUL).as_deref(), Some("1"));

        // A DynamicEnv using the plugin gets PluginReady=True.
        let des: Api<DynamicEnv> = Api::namespaced(client.clone(), &ns);
        let de: DynamicEnv = serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv", "metadata": {"name": "de"},
            "spec": {"istioMatches": [{"headers": {"end-user": {"exact": "jason"}}}],
                     "subsets": [{"name": "reviews", "namespace": ns, "containers": [{"containerName": "app"}]}],
                     "plugin": "custom-routing"}
        }))
        .unwrap();
        des.create(&PostParams::default(), &de).await.unwrap();
        let ready = eventually("PluginReady=True on the DynamicEnv", TIMEOUT, async || {
            plugin_ready(&des.get("de").await.ok()?).filter(|c| c.status == "True")
        })
        .await;
        assert_eq!(ready.reason, "Loaded");

        // A good new version takes effect without a restart.
        let pid = operator.id();
        set_component(&client, &ns, &router_v2).await;
        set_registry(&client, &ns, &registry_doc(&d2)).await;
        eventually("custom-routing v2 serving", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing").filter(|p| p["ready"] == true && p["servingDigest"] == d2.as_str())
        })
        .await;
        assert!(operator.alive() && operator.id() == pid, "no restart");

        // A bad version (its sha256 does not match) leaves v2 serving, with an Event and a condition.
        set_registry(&client, &ns, &registry_doc(&"0".repeat(64))).await;
        let failed = eventually("custom-routing reports LoadFailed", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing").filter(|p| p["reason"] == "LoadFailed")
        })
        .await;
        assert_eq!(failed["ready"], false);
        assert_eq!(failed["servingDigest"], d2.as_str(), "the last good version keeps serving");
        assert!(failed["message"].as_str().unwrap().contains("sha256 mismatch"), "{failed}");
        eventually("wasmop_plugin_ready 0", TIMEOUT, async || metric(&addr, CUSTOM_ROUTING_READY).filter(|v| v == "0")).await;

        let event = registry_event(&client, &ns, "PluginLoadFailed", "sha256 mismatch").await;
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        let log = operator.log();
        let warnings = log.lines().filter(|l| l.contains(" WARN ") && l.contains("sha256 mismatch"));
        assert_eq!(warnings.count(), 1, "the failure is logged once:\n{log}");

        // A new cause of the same failure is an Event of its own, not a repeat of the first.
        let missing = registry_doc(&"0".repeat(64)).replace("router.wasm", "missing.wasm");
        set_registry(&client, &ns, &missing).await;
        registry_event(&client, &ns, "PluginLoadFailed", "missing.wasm").await;

        let cond = eventually("PluginReady=False on the DynamicEnv", TIMEOUT, async || {
            plugin_ready(&des.get("de").await.ok()?).filter(|c| c.status == "False")
        })
        .await;
        assert_eq!(cond.reason, "LoadFailed");
        assert!(cond.message.contains("keeps serving"), "{}", cond.message);
        assert!(operator.alive(), "a bad plugin never takes the operator down");
    })
    .await;
}

/// A `configmap://` source created after the registry names it is loaded by the operator's
/// retry, without a change to `wasmop-plugins`.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_source_created_after_the_registry_loads_without_a_registry_change() {
    install_crds();
    install_operator_rbac();
    with_temp_ns("retry", |client: Client, ns: String| async move {
        let router = component("routing_istio.wasm");
        let digest = sha256_hex(&router);
        set_registry(&client, &ns, &registry_doc(&digest)).await;

        let mut operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        let addr = operator.addr.clone();

        let missing = eventually(
            "custom-routing not loaded: its ConfigMap is missing",
            TIMEOUT,
            async || {
                assert!(
                    operator.process.alive(),
                    "the operator exited:\n{}",
                    operator.process.log()
                );
                plugin_entry(&addr, "custom-routing").filter(|p| p["reason"] == "NotLoaded")
            },
        )
        .await;
        assert!(
            missing["message"]
                .as_str()
                .unwrap()
                .contains("ConfigMap wasmop-plugin-bin not found (retried with backoff)"),
            "{missing}"
        );

        set_component(&client, &ns, &router).await;
        let loaded = eventually("custom-routing loaded by a retry", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing").filter(|p| p["ready"] == true)
        })
        .await;
        assert_eq!(loaded["servingDigest"], digest.as_str());
        let loaded = registry_event(&client, &ns, "PluginsLoaded", "custom-routing").await;
        assert_eq!(loaded.message.as_deref(), Some("loaded custom-routing"));
        eventually("wasmop_plugin_ready 1", TIMEOUT, async || {
            metric(&addr, CUSTOM_ROUTING_READY).filter(|v| v == "1")
        })
        .await;
        let log = operator.process.log();
        let warnings = log
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains("wasmop-plugin-bin not found"));
        assert_eq!(
            warnings.count(),
            1,
            "a retry that fails as before is not logged again:\n{log}"
        );
    })
    .await;
}

/// A source whose download hangs (a server that accepts and never answers, as behind a
/// firewall that drops the packets, until the 60 s download timeout) holds back neither the
/// operator's start with the other plugins nor a fix of the entry: the entry is `Loading`
/// meanwhile, and a new version of the ConfigMap replaces the load in progress.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_hanging_source_holds_back_neither_the_other_plugins_nor_a_fix() {
    install_crds();
    install_operator_rbac();
    with_temp_ns("hanging", |client: Client, ns: String| async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let digest = sha256_hex(&component("routing_istio.wasm"));
        let entry = |source: &str| {
            format!(
                "plugins:\n  - name: remote-routing\n    hook: routing\n    source: {source}\n    sha256: \"{digest}\"\n"
            )
        };
        let hanging = format!("https://127.0.0.1:{port}/router.wasm");
        set_registry(&client, &ns, &entry(&hanging)).await;

        let mut operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        let addr = operator.addr.clone();
        let remote = plugin_entry(&addr, "remote-routing").expect("remote-routing listed");
        assert_eq!(remote["reason"], "Loading", "{remote}");
        assert_eq!(remote["ready"], false, "{remote}");
        let builtin = plugin_entry(&addr, "routing-istio").expect("routing-istio listed");
        assert_eq!(builtin["ready"], true, "the builtins serve meanwhile: {builtin}");

        // A change that leaves plugins.yaml as it is (a label) lets the load go on; well within
        // the download's 60 s, the fix replaces it.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let label = json!({"metadata": {"labels": {"team": "payments"}}});
        cms.patch("wasmop-plugins", &PatchParams::default(), &Patch::Merge(&label))
            .await
            .unwrap();
        set_registry(&client, &ns, &entry("builtin://routing-istio")).await;
        let fixed = eventually("the fixed entry loads", Duration::from_secs(30), async || {
            assert!(
                operator.process.alive(),
                "the operator exited:\n{}",
                operator.process.log()
            );
            plugin_entry(&addr, "remote-routing").filter(|p| p["ready"] == true)
        })
        .await;
        assert_eq!(fixed["reason"], "Loaded", "{fixed}");
        registry_event(&client, &ns, "PluginsLoaded", "remote-routing").await;
        let log = operator.process.log();
        assert!(
            log.contains("plugins still loading after 5s") && log.contains("remote-routing"),
            "the log names what is still loading:\n{log}"
        );
        let replaced = log
            .matches("changed while plugins were loading; loading its new version instead")
            .count();
        assert_eq!(replaced, 1, "the fix replaced the load, the label did not:\n{log}");
        silent.abort();
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_missing_or_malformed_registry_falls_back_to_the_builtins() {
    install_crds();
    install_operator_rbac();
    with_temp_ns("fallback", |client: Client, ns: String| async move {
        wasmop_tests::bind_operator_namespace(&ns);

        let kubeconfig = service_account_kubeconfig(OPERATOR_NS, "wasmop");
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_wasmop"));
        cmd.args([
            "run",
            "--namespace",
            &ns,
            "--watch-namespace",
            &ns,
            "--listen",
            &addr,
        ])
        .env("KUBECONFIG", &kubeconfig);
        let mut operator = Process::spawn(
            cmd,
            wasmop_tests::dump_dir().join(format!("{ns}-operator.log")),
        );

        let config_error = |addr: &str| -> Option<(String, bool)> {
            let (status, body) = http_get(addr, "/plugins")?;
            let v: Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
            let builtins_ready = v["plugins"]
                .as_array()?
                .iter()
                .filter(|p| p["ready"] == true)
                .count()
                == wasmop_plugin_host::builtin::BUILTINS.len();
            Some((v["configError"].as_str()?.to_owned(), builtins_ready))
        };
        let (missing, ready) = eventually("the missing ConfigMap reported", TIMEOUT, async || {
            assert!(operator.alive(), "the operator exited:\n{}", operator.log());
            config_error(&addr)
        })
        .await;
        assert!(
            missing.contains("not found; using the builtin defaults"),
            "{missing}"
        );
        assert!(ready, "the four builtins serve");
        eventually(
            "wasmop_plugins_config_last_reload_successful 0",
            TIMEOUT,
            async || metric(&addr, CONFIG_RELOAD_SUCCESSFUL).filter(|v| v == "0"),
        )
        .await;
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        eventually(
            "a PluginsConfigMissing Event on the namespace",
            TIMEOUT,
            async || {
                let list = events
                    .list(&ListParams::default().fields(&format!("involvedObject.name={ns}")))
                    .await
                    .ok()?;
                list.items
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("PluginsConfigMissing"))
            },
        )
        .await;

        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("wasmop-plugins".into());
        cm.data = Some(
            [(
                "plugins.yaml".to_owned(),
                "plugins: [{name: x, hook: nope}]".to_owned(),
            )]
            .into(),
        );
        cms.create(&PostParams::default(), &cm).await.unwrap();
        let (invalid, ready) =
            eventually("the malformed ConfigMap reported", TIMEOUT, async || {
                config_error(&addr).filter(|(e, _)| e.contains("is invalid"))
            })
            .await;
        assert!(
            invalid.contains("hook"),
            "the error names the problem: {invalid}"
        );
        assert!(ready, "the builtins keep serving");
        registry_event(&client, &ns, "PluginsConfigInvalid", "").await;

        // Fixed, the ConfigMap is in use again; deleted, the builtins stand in once more.
        cm.data = Some([("plugins.yaml".to_owned(), "plugins: []".to_owned())].into());
        cms.replace("wasmop-plugins", &PostParams::default(), &cm)
            .await
            .unwrap();
        eventually("the fixed ConfigMap in use", TIMEOUT, async || {
            let (status, body) = http_get(&addr, "/plugins")?;
            let v: Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
            v["configError"].is_null().then_some(())
        })
        .await;
        eventually(
            "wasmop_plugins_config_last_reload_successful 1",
            TIMEOUT,
            async || metric(&addr, CONFIG_RELOAD_SUCCESSFUL).filter(|v| v == "1"),
        )
        .await;
        cms.delete("wasmop-plugins", &Default::default())
            .await
            .unwrap();
        let (deleted, _) = eventually("the deleted ConfigMap reported", TIMEOUT, async || {
            config_error(&addr).filter(|(e, _)| e.contains("was deleted"))
        })
        .await;
        assert!(deleted.contains("using the builtin defaults"), "{deleted}");
        eventually(
            "wasmop_plugins_config_last_reload_successful 0 again",
            TIMEOUT,
            async || metric(&addr, CONFIG_RELOAD_SUCCESSFUL).filter(|v| v == "0"),
        )
        .await;
    })
    .await;
}

/// `wasmop run --extra-ca-file`: an `https://` source whose server that CA signed loads; a file
/// holding no certificate stops the operator at start with an error naming the flag.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn the_extra_ca_file_is_trusted_for_https_sources() {
    install_crds();
    install_operator_rbac();
    with_temp_ns("extra-ca", |client: Client, ns: String| async move {
        let ca = TestCa::new("wasmop e2e CA");
        let router = component("routing_istio.wasm");
        let digest = sha256_hex(&router);
        let (port, _) = tls::serve(ca.server_config(&["localhost"]), router).await;
        set_registry(
            &client,
            &ns,
            &format!(
                "plugins:\n  - name: remote-routing\n    hook: routing\n    source: https://localhost:{port}/router.wasm\n    sha256: \"{digest}\"\n"
            ),
        )
        .await;
        let dump = wasmop_tests::dump_dir();
        let (good_ca, bad_ca) = (dump.join(format!("{ns}-ca.pem")), dump.join(format!("{ns}-bad-ca.pem")));
        std::fs::write(&good_ca, ca.pem()).unwrap();
        std::fs::write(&bad_ca, "not a certificate\n").unwrap();

        wasmop_tests::bind_operator_namespace(&ns);
        let kubeconfig = service_account_kubeconfig(OPERATOR_NS, "wasmop");
        let operator = |ca_file: &std::path::Path, addr: &str, log: &str| {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_wasmop"));
            cmd.args(["run", "--namespace", &ns, "--watch-namespace", &ns, "--listen", addr])
                .arg(format!("--extra-ca-file={}", ca_file.display()))
                .env("KUBECONFIG", &kubeconfig);
            Process::spawn(cmd, dump.join(format!("{ns}-{log}.log")))
        };

        let addr = format!("127.0.0.1:{}", free_port());
        let mut trusting = operator(&good_ca, &addr, "operator");
        let entry = eventually("remote-routing loaded from https://", TIMEOUT, async || {
            assert!(trusting.alive(), "the operator exited:\n{}", trusting.log());
            plugin_entry(&addr, "remote-routing").filter(|p| p["ready"] == true)
        })
        .await;
        assert_eq!(entry["servingDigest"], digest.as_str());

        let mut refusing = operator(&bad_ca, &format!("127.0.0.1:{}", free_port()), "bad-ca");
        let log = eventually("the operator refuses the CA file", TIMEOUT, async || {
            (!refusing.alive()).then(|| refusing.log())
        })
        .await;
        assert!(
            log.contains("extra CA certificates (--extra-ca-file): no PEM certificate found"),
            "{log}"
        );
    })
    .await;
}

/// `grants.readOnlyDir` resolves under `wasmop run --plugin-data-root`: a directory there
/// serves; the ServiceAccount token's directory fails the entry alone, as a failed load does:
/// its last good version keeps serving, with a Warning Event on the ConfigMap and
/// `PluginReady=False` on the DynamicEnv using it.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_read_only_dir_outside_the_plugin_data_root_fails_its_entry() {
    with_temp_ns("registry-dir", |client: Client, ns: String| async move {
        let root = wasmop_tests::dump_dir().join(format!("plugin-data-{ns}"));
        std::fs::create_dir_all(root.join("geo")).unwrap();
        let doc = |dir: &str| {
            format!(
                "plugins:\n  - name: custom-routing\n    hook: routing\n    source: builtin://routing-istio\n    grants: {{readOnlyDir: '{dir}'}}\ndefaults: {{routing: custom-routing}}\n"
            )
        };
        set_registry(&client, &ns, &doc(&root.join("geo").display().to_string())).await;
        let root_flag = root.display().to_string();
        let mut operator = Operator::start(
            env!("CARGO_BIN_EXE_wasmop"),
            &ns,
            &["--plugin-data-root", &root_flag],
        )
        .await;
        let addr = operator.addr.clone();
        let good = eventually("custom-routing loaded with its directory", TIMEOUT, async || {
            assert!(operator.process.alive(), "the operator exited:\n{}", operator.process.log());
            plugin_entry(&addr, "custom-routing").filter(|p| p["ready"] == true)
        })
        .await;

        let des: Api<DynamicEnv> = Api::namespaced(client.clone(), &ns);
        let de: DynamicEnv = serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv", "metadata": {"name": "de"},
            "spec": {"istioMatches": [{"headers": {"end-user": {"exact": "jason"}}}],
                     "subsets": [{"name": "reviews", "namespace": ns, "containers": [{"containerName": "app"}]}],
                     "plugin": "custom-routing"}
        }))
        .unwrap();
        des.create(&PostParams::default(), &de).await.unwrap();
        eventually("PluginReady=True on the DynamicEnv", TIMEOUT, async || {
            plugin_ready(&des.get("de").await.ok()?).filter(|c| c.status == "True")
        })
        .await;

        set_registry(&client, &ns, &doc("/var/run/secrets/kubernetes.io/serviceaccount")).await;
        let failed = eventually("custom-routing reports LoadFailed", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing").filter(|p| p["reason"] == "LoadFailed")
        })
        .await;
        assert_eq!(failed["servingDigest"], good["servingDigest"], "the last good version keeps serving");
        let message = failed["message"].as_str().unwrap();
        assert!(
            message.contains("refused: /var/run/secrets holds the pod's ServiceAccount token"),
            "{failed}"
        );
        let event = registry_event(&client, &ns, "PluginLoadFailed", "ServiceAccount token").await;
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        let cond = eventually("PluginReady=False on the DynamicEnv", TIMEOUT, async || {
            plugin_ready(&des.get("de").await.ok()?).filter(|c| c.status == "False")
        })
        .await;
        assert_eq!(cond.reason, "LoadFailed");
        assert!(cond.message.contains("ServiceAccount token"), "{}", cond.message);
        assert!(operator.process.alive(), "a refused grant never takes the operator down");
        let _ = std::fs::remove_dir_all(&root);
    })
    .await;
}

/// The chart mounts the plugin data root read-only (an emptyDir unless a volume is given) and
/// passes it as `--plugin-data-root`, so every `grants.readOnlyDir` is confined to that volume.
#[test]
fn the_chart_mounts_the_plugin_data_root_read_only() {
    let text =
        std::fs::read_to_string(wasmop_tests::repo_root().join("deploy/manifests/wasmop.yaml"))
            .unwrap();
    let operator = serde_yaml::Deserializer::from_str(&text)
        .filter_map(|doc| <Value as serde::Deserialize>::deserialize(doc).ok())
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "wasmop")
        .expect("the operator Deployment");
    let pod = &operator["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let root = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix("--plugin-data-root="))
        .expect("--plugin-data-root");
    assert_eq!(root, wasmop_plugin_host::DEFAULT_PLUGIN_DATA_ROOT);
    let named = |list: &Value| {
        list.as_array()
            .and_then(|l| l.iter().find(|v| v["name"] == "plugin-data"))
            .cloned()
    };
    let mount = named(&container["volumeMounts"]).expect("the plugin data root is mounted");
    assert_eq!(
        (mount["mountPath"].as_str(), &mount["readOnly"]),
        (Some(root), &json!(true))
    );
    let volume = named(&pod["volumes"]).expect("its volume");
    assert_eq!(volume["emptyDir"], json!({}), "{volume}");
}
