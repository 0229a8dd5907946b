//! E2E: the install. The Helm chart lints clean and renders to the committed deploy/manifests
//! (and mounts an extra CA as `--extra-ca-file` when asked);
//! its workloads run non-root on a read-only root filesystem with resources set; the rendered
//! manifests install on the local control plane with strict server-side field validation; the
//! operator runs from them as a local process under the chart's ServiceAccount and loads the
//! chart's plugin registry; and the chart's RBAC is least privilege, asked of the API server:
//! everything the operator and the resolver need is allowed, a list of what they must not have
//! is denied, and the chart grants nothing beyond what they need; with `operator.watchNamespace`
//! the namespaced rights are Roles of that namespace, asked of the API server with the chart
//! rendered for a throwaway namespace; the user roles aggregated into `view` and `edit` write
//! no cluster-scoped kind. A plugin written in C is
//! loaded by that operator from a `configmap://` source and its own settings check decides
//! whether the registry entry serves.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::Value;
use wasmop_plugin_host::sha256_hex;
use wasmop_tests::{
    Operator, eventually, install_crds, install_operator_rbac, kubectl_ok, with_temp_ns,
};

const NS: &str = "wasmop-system";
const TIMEOUT: Duration = Duration::from_secs(60);

/// deploy/manifests/wasmop.yaml as JSON documents.
fn rendered() -> Vec<Value> {
    let text = std::fs::read_to_string(wasmop_tests::manifests_dir().join("wasmop.yaml"))
        .expect("read deploy/manifests/wasmop.yaml");
    documents(&text)
}

/// The YAML documents of `text` as JSON, empty ones left out.
fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// `helm template` of the chart (release `wasmop`, namespace `wasmop-system`) with `args`, in
/// which `$0` is deploy/helm.
fn helm_template(args: &str) -> String {
    helm_template_release("wasmop", NS, args)
}

/// `helm template RELEASE` of the chart in `namespace` with `args`, in which `$0` is
/// deploy/helm.
///
/// # Panics
/// When helm fails (it is installed by scripts/setup.sh).
fn helm_template_release(release: &str, namespace: &str, args: &str) -> String {
    let chart = wasmop_tests::repo_root().join("deploy/helm");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            r#". "$0/helm-version.sh" && "$HELM" template {release} "$0/wasmop" --namespace {namespace} {args}"#
        ))
        .arg(&chart)
        .output()
        .expect("run helm template");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn of_kind(docs: &[Value], kind: &str) -> Vec<Value> {
    docs.iter().filter(|d| d["kind"] == kind).cloned().collect()
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn chart_lints_and_renders_to_the_committed_manifests() {
    let out = std::process::Command::new(wasmop_tests::repo_root().join("deploy/helm/render.sh"))
        .arg("--check")
        .output()
        .expect("run deploy/helm/render.sh");
    assert!(
        out.status.success(),
        "helm lint or the render gate failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rendered manifests parse strictly (no key twice in a mapping, which kustomize and
/// strict YAML readers refuse), and the registry the chart ships checks clean entry by entry.
#[test]
fn the_rendered_registry_checks_clean() {
    let manifests = wasmop_tests::repo_root().join("deploy/manifests/wasmop.yaml");
    let text = std::fs::read_to_string(&manifests).unwrap();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        if let Err(e) = <Value as serde::Deserialize>::deserialize(doc) {
            panic!("{}: {e}", manifests.display());
        }
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmop"))
        .args(["plugin", "check-registry"])
        .arg(&manifests)
        .env("WASMOP_CACHE_DIR", wasmop_tests::operator_cache_dir())
        .output()
        .expect("run wasmop plugin check-registry");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for entry in [
        "routing-istio",
        "scaling-prometheus",
        "restart-sidecar",
        "dr-lease",
    ] {
        assert!(stdout.contains(&format!("ok: {entry} (")), "{stdout}");
    }
}

/// The chart's schema takes `host` or `host:port` in `grants.allowedHosts` and refuses a URL,
/// as the operator does (whose ConfigMap check would otherwise fall back to the builtins).
#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_chart_refuses_a_url_as_an_allowed_host() {
    let chart = wasmop_tests::repo_root().join("deploy/helm");
    let lint = |host: &str| {
        let values = std::env::temp_dir().join(format!(
            "wasmop-lint-{}-{}.yaml",
            std::process::id(),
            host.len()
        ));
        std::fs::write(
            &values,
            format!(
                "registry:\n  plugins:\n    - {{name: p, hook: scaling, source: builtin://scaling-prometheus, \
                 grants: {{allowedHosts: [\"{host}\"]}}}}\n"
            ),
        )
        .unwrap();
        std::process::Command::new("bash")
            .arg("-c")
            .arg(r#". "$0/helm-version.sh" && "$HELM" lint --strict --quiet "$0/wasmop" -f "$1""#)
            .arg(&chart)
            .arg(&values)
            .output()
            .expect("run helm lint")
    };
    let ok = lint("prometheus.monitoring:9090");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let url = lint("http://prometheus.monitoring:9090");
    assert!(!url.status.success());
    let said = String::from_utf8_lossy(&url.stdout);
    assert!(
        said.contains("/registry/plugins/0/grants/allowedHosts/0")
            && said.contains("does not match pattern"),
        "{said}"
    );
}

/// An `oci://` entry's `pullSecret` (of `registry.plugins` or `dr.stateChecker`) and
/// `registry.pullSecrets` grant the operator `get` on exactly those Secrets, by name, in the
/// release namespace; the default values grant no Secret at all.
#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_chart_grants_the_pull_secrets_it_names_and_no_other() {
    let secrets_rules = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| matches!(d["kind"].as_str(), Some("Role" | "ClusterRole")))
            .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
            .filter(|rule| {
                rule["resources"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|r| r == "secrets"))
            })
            .collect()
    };
    assert_eq!(
        secrets_rules(&rendered()),
        Vec::<Value>::new(),
        "no Secret by default"
    );

    let values =
        std::env::temp_dir().join(format!("wasmop-pull-secrets-{}.yaml", std::process::id()));
    std::fs::write(
        &values,
        "registry:\n  pullSecrets: [extra-creds, ghcr-creds]\n  plugins:\n    - {name: canary, hook: routing, \
         source: 'oci://ghcr.io/org/canary:v1', sha256: '00', pullSecret: ghcr-creds}\n\
         dr:\n  stateChecker: {name: hours, source: 'oci://r.example/dr@sha256:0000000000000000000000000000000000000000000000000000000000000000', \
         pullSecret: dr-creds}\n",
    )
    .unwrap();
    let docs = documents(&helm_template(&format!("-f {}", values.display())));
    let role = of_kind(&docs, "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "wasmop-pull-secrets")
        .expect("Role wasmop-pull-secrets");
    assert_eq!(role["metadata"]["namespace"], NS);
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"],
            "resourceNames": ["dr-creds", "extra-creds", "ghcr-creds"], "verbs": ["get"]}])
    );
    assert_eq!(
        secrets_rules(&docs),
        role["rules"].as_array().unwrap().clone(),
        "nothing else"
    );
    let binding = of_kind(&docs, "RoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["name"] == "wasmop-pull-secrets")
        .expect("RoleBinding wasmop-pull-secrets");
    assert_eq!(binding["metadata"]["namespace"], NS);
    assert_eq!(binding["roleRef"]["name"], "wasmop-pull-secrets");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "wasmop", "namespace": NS}])
    );
}

/// `metrics.prometheusRule.enabled` renders a PrometheusRule whose alerts read the registry
/// gauges the operator exports, with `{{ $labels }}` left for Prometheus.
#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_chart_renders_alerts_on_the_registry_gauges() {
    let docs = documents(&helm_template(
        r#"-f "$0/lint-values/prometheus-rule.yaml""#,
    ));
    let rules = of_kind(&docs, "PrometheusRule");
    assert_eq!(rules.len(), 1, "one PrometheusRule");
    assert_eq!(rules[0]["metadata"]["labels"]["release"], "prometheus");
    let alerts = rules[0]["spec"]["groups"][0]["rules"].as_array().unwrap();
    // One reload's worth of gauges, as the operator sets them.
    let metrics = wasmop_plugin_host::metrics::PluginMetrics::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("wasmop");
    metrics.register(&mut registry);
    metrics.registry_state([("x", Some(wasmop_plugin_host::Hook::Routing), true)], true);
    let mut exported = String::new();
    prometheus_client::encoding::text::encode(&mut exported, &registry).unwrap();
    for (alert, metric) in [
        ("WasmopPluginNotReady", "wasmop_plugin_ready"),
        (
            "WasmopPluginsConfigNotInUse",
            "wasmop_plugins_config_last_reload_successful",
        ),
    ] {
        let rule = alerts
            .iter()
            .find(|r| r["alert"] == alert)
            .unwrap_or_else(|| panic!("no alert {alert}"));
        assert_eq!(rule["expr"], format!("{metric} == 0"));
        assert_eq!(rule["for"], "10m");
        assert!(
            exported.contains(&format!("# TYPE {metric} gauge")),
            "the operator exports {metric}:\n{exported}"
        );
    }
    let summary = alerts[0]["annotations"]["summary"].as_str().unwrap();
    assert!(summary.contains("{{ $labels.plugin }}"), "{summary}");

    // Off by default: the committed manifests have none.
    let text =
        std::fs::read_to_string(wasmop_tests::repo_root().join("deploy/manifests/wasmop.yaml"))
            .unwrap();
    assert!(of_kind(&documents(&text), "PrometheusRule").is_empty());
}

/// `operator.extraCA` mounts the ConfigMap key read-only and passes the file it becomes as
/// `--extra-ca-file`.
#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_chart_mounts_an_extra_ca_and_passes_it_to_the_operator() {
    let text = helm_template(
        "--set operator.extraCA.configMap=cluster-ca --set operator.extraCA.key=root.pem",
    );
    let operator = documents(&text)
        .into_iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "wasmop")
        .expect("the operator Deployment");
    let pod = &operator["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let file = args
        .iter()
        .find_map(|a| a.strip_prefix("--extra-ca-file="))
        .unwrap_or_else(|| panic!("no --extra-ca-file in {args:?}"));
    let extra_ca = |list: &Value| {
        list.as_array()
            .and_then(|l| l.iter().find(|v| v["name"] == "extra-ca"))
            .cloned()
    };
    let mount = extra_ca(&container["volumeMounts"]).expect("the extra CA is mounted");
    assert_eq!(mount["readOnly"], true);
    let volume = extra_ca(&pod["volumes"]).expect("the extra CA volume");
    assert_eq!(volume["configMap"]["name"], "cluster-ca");
    let item = &volume["configMap"]["items"][0];
    assert_eq!(item["key"], "root.pem");
    assert_eq!(
        format!(
            "{}/{}",
            mount["mountPath"].as_str().unwrap(),
            item["path"].as_str().unwrap()
        ),
        file,
        "--extra-ca-file names the mounted key"
    );
}

#[test]
#[ignore = "builds the release binary: run with make test"]
fn the_release_build_links_static_and_the_dockerfile_runs_it() {
    let out =
        std::process::Command::new(wasmop_tests::repo_root().join("scripts/build-release.sh"))
            .arg("--check")
            .output()
            .expect("run scripts/build-release.sh --check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ok: static-pie links"), "{text}");
}

#[test]
fn workloads_run_non_root_read_only_with_resources() {
    let docs = rendered();
    let deployments = of_kind(&docs, "Deployment");
    let names: BTreeSet<&str> = deployments
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["wasmop", "wasmop-resolver"]));
    for d in &deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_ne!(pod["securityContext"]["runAsUser"], 0, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        for c in pod["containers"].as_array().unwrap() {
            let sc = &c["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{name}"
            );
            assert!(c["resources"]["requests"]["cpu"].is_string(), "{name}");
            assert!(c["resources"]["requests"]["memory"].is_string(), "{name}");
            assert!(c["resources"]["limits"]["memory"].is_string(), "{name}");
            assert!(
                c["readinessProbe"].is_object() && c["livenessProbe"].is_object(),
                "{name}"
            );
        }
    }
    let operator = &deployments
        .iter()
        .find(|d| d["metadata"]["name"] == "wasmop")
        .unwrap();
    assert_eq!(operator["spec"]["replicas"], 2, "active and passive (DR)");
    let mounts = &operator["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    assert!(
        mounts
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/var/cache/wasmop"),
        "the compile cache is writable on a read-only root: {mounts}"
    );
    // The cache refuses a directory others can write, as an emptyDir's root is: a subdirectory.
    let env = &operator["spec"]["template"]["spec"]["containers"][0]["env"];
    let cache = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "WASMOP_CACHE_DIR")
        .and_then(|e| e["value"].as_str())
        .expect("WASMOP_CACHE_DIR");
    assert!(cache.starts_with("/var/cache/wasmop/"), "{cache}");
    let pdbs: BTreeSet<String> = of_kind(&docs, "PodDisruptionBudget")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        pdbs,
        BTreeSet::from(["wasmop".into(), "wasmop-resolver".into()])
    );
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn rendered_chart_installs_and_the_operator_runs_under_its_service_account() {
    install_crds();
    install_operator_rbac();
    let client = wasmop_tests::client().await;
    for name in ["wasmop", "wasmop-resolver"] {
        let d = Api::<Deployment>::namespaced(client.clone(), NS)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("Deployment {name}: {e}"));
        assert_eq!(
            d.spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .service_account_name
                .as_deref(),
            Some(name)
        );
    }
    for name in ["wasmop-metrics", "wasmop-resolver"] {
        Api::<Service>::namespaced(client.clone(), NS)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("Service {name}: {e}"));
    }
    for name in ["wasmop", "wasmop-resolver"] {
        Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("PodDisruptionBudget {name}: {e}"));
    }
    let registry = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get("wasmop-plugins")
        .await
        .expect("the chart's plugin registry");

    with_temp_ns("install", |client: Client, ns: String| async move {
        // The chart's registry in the test's operator namespace.
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("wasmop-plugins".into());
        cm.data = registry.data.clone();
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        let operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        let plugins = eventually("every registry entry ready", TIMEOUT, async || {
            let (status, body) = operator.get("/plugins")?;
            let v: Value = serde_json::from_str(&body).ok()?;
            let ready: BTreeSet<String> = v["plugins"]
                .as_array()?
                .iter()
                .filter(|p| p["ready"] == true)
                .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            (status == 200 && ready.len() >= 4).then_some(ready)
        })
        .await;
        for name in [
            "routing-istio",
            "scaling-prometheus",
            "restart-sidecar",
            "dr-lease",
        ] {
            assert!(plugins.contains(name), "{name} not ready: {plugins:?}");
        }
        let log = operator.process.log();
        // A refused request shows as kube's `reason: "Forbidden", code: 403` (a bare "403"
        // also matches timestamps and digests).
        assert!(
            !log.to_lowercase().contains("forbidden") && !log.contains("code: 403"),
            "{log}"
        );
    })
    .await;
}

/// The registry document of the C example `business-hours-dr` from ConfigMap
/// `wasmop-plugin-bin`, as the DR state checker with `settings` (JSON).
fn business_hours_registry(digest: &str, settings: &str) -> ConfigMap {
    let doc = format!(
        "plugins:\n  - name: business-hours\n    hook: dr\n    source: configmap://wasmop-plugin-bin/business-hours-dr.wasm\n    sha256: \"{digest}\"\n    settings: {settings}\n    failurePolicy: Fail\ndefaults: {{dr: business-hours}}\n"
    );
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("wasmop-plugins".into());
    cm.data = Some([("plugins.yaml".to_owned(), doc)].into());
    cm
}

/// The `/plugins` entry `business-hours` once `pred` holds for it.
async fn business_hours_entry(
    operator: &Operator,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, TIMEOUT, async || {
        let (status, body) = operator.get("/plugins")?;
        let v: Value = serde_json::from_str(&body).ok()?;
        let entry = v["plugins"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == "business-hours")?;
        (status == 200 && pred(entry)).then(|| entry.clone())
    })
    .await
}

/// Settings of the C example that put "now" inside (`open`) or outside its business hours,
/// whatever the time of day: the UTC offset makes the local time about noon, and the window is
/// the whole day or its first hour. The host's DR keys make the lease ticks fast.
fn business_hours_settings(open: bool) -> String {
    let utc_hour = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600)
        % 24;
    let offset = (12 - utc_hour as i64) * 60;
    let end = if open { 24 } else { 1 };
    format!(
        r#"{{"utcOffsetMinutes": {offset}, "startHour": 0, "endHour": {end}, "weekdaysOnly": false, "waitTimeInSeconds": 1, "failureThreshold": 2}}"#
    )
}

/// `/health/ready?checkifreadonly=true` of `operator`: 200 active, 502 passive.
async fn wait_dr_state(operator: &Operator, active: bool) {
    let want = if active { 200 } else { 502 };
    eventually(
        &format!("the C plugin's decision: checkifreadonly answers {want}"),
        TIMEOUT,
        async || (operator.get("/health/ready?checkifreadonly=true")?.0 == want).then_some(()),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_c_plugin_from_a_configmap_decides_the_dr_state_and_its_settings_check_holds() {
    let dir = wasmop_tests::example_plugins(&wasmop_tests::target_dir(), &["c-business-hours-dr"]);
    let wasm = std::fs::read(dir.join("business-hours-dr.wasm")).expect("the C example");
    let digest = sha256_hex(&wasm);
    with_temp_ns("install-c", |client: Client, ns: String| async move {
        let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
        let mut bin = ConfigMap::default();
        bin.metadata.name = Some("wasmop-plugin-bin".into());
        bin.binary_data = Some([("business-hours-dr.wasm".to_owned(), ByteString(wasm))].into());
        cms.create(&PostParams::default(), &bin)
            .await
            .expect("the component fits a ConfigMap");
        let apply = async |settings: &str| {
            cms.patch(
                "wasmop-plugins",
                &PatchParams::apply("wasmop-e2e").force(),
                &Patch::Apply(&business_hours_registry(&digest, settings)),
            )
            .await
            .unwrap();
        };
        apply(&business_hours_settings(true)).await;

        let operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        let loaded =
            business_hours_entry(&operator, "business-hours loaded", |p| p["ready"] == true).await;
        assert_eq!(loaded["servingDigest"], digest.as_str(), "{loaded}");

        // Inside business hours the C plugin runs the lease state machine: this instance
        // creates the Lease and becomes active.
        wait_dr_state(&operator, true).await;
        let lease = Api::<Lease>::namespaced(client.clone(), &ns)
            .get("wasmop")
            .await
            .expect("the DR Lease");
        assert_eq!(
            lease.spec.and_then(|s| s.holder_identity).as_deref(),
            Some(format!("wasmop-{ns}").as_str())
        );

        // Outside business hours it answers passive and stops renewing: the instance steps
        // down and refuses writes.
        apply(&business_hours_settings(false)).await;
        wait_dr_state(&operator, false).await;
        eventually("/dr to give the plugin's reason", TIMEOUT, async || {
            let (_, dr) = operator.get("/dr")?;
            dr.contains("outside business hours").then_some(())
        })
        .await;

        // Settings the C code rejects: the entry fails with its message; the last good one
        // serves and keeps the instance passive.
        apply(r#"{"utcOffsetMinutes": 60, "startHour": 18, "endHour": 8}"#).await;
        let failed = business_hours_entry(&operator, "business-hours rejects its settings", |p| {
            p["reason"] == "LoadFailed"
        })
        .await;
        assert_eq!(failed["ready"], false, "{failed}");
        let message = failed["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("startHour must be before endHour"),
            "{failed}"
        );
        assert_eq!(
            failed["servingDigest"],
            digest.as_str(),
            "the last good version serves"
        );
        assert_eq!(
            operator
                .get("/health/ready?checkifreadonly=true")
                .map(|r| r.0),
            Some(502)
        );
        let log = operator.process.log();
        assert!(!log.contains("forbidden"), "{log}");
    })
    .await;
}

/// The chart's two ServiceAccounts, in the release namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Account {
    Operator,
    Resolver,
}

/// Where a need applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    /// The release namespace: the registry, the DR lease, the resolver pods, and Events about
    /// them.
    OperatorNamespace,
    /// Where the operator watches: every namespace, or `operator.watchNamespace` only.
    Watched,
    /// Namespace `default`, where Events about a cluster-scoped object (a
    /// ProxyRestartPolicy) are written.
    Default,
    /// Cluster-scoped kinds.
    Cluster,
}

use Account::{Operator as OPERATOR, Resolver as RESOLVER};

/// What each account needs, from what the code reads and writes: (account, scope, API group,
/// resource[/subresource], verbs). A rule the chart grants must be listed here, and everything
/// listed must be allowed by the API server.
const NEEDS: &[(Account, Scope, &str, &str, &[&str])] = &[
    // The plugin registry (wasmop-plugins, configmap:// sources) and the DR lease.
    (
        OPERATOR,
        Scope::OperatorNamespace,
        "",
        "configmaps",
        &["get", "list", "watch"],
    ),
    (
        OPERATOR,
        Scope::OperatorNamespace,
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    ),
    // Scaling: the resolver pods, whose IPs the public Services point at in proxy mode
    // (watched: listed and watched).
    (
        OPERATOR,
        Scope::OperatorNamespace,
        "",
        "pods",
        &["get", "list", "watch"],
    ),
    // Events on the registry ConfigMap and the DR lease, on the objects it reconciles, and on
    // ProxyRestartPolicies (cluster-scoped, so in namespace default).
    (
        OPERATOR,
        Scope::OperatorNamespace,
        "events.k8s.io",
        "events",
        &["create", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "events.k8s.io",
        "events",
        &["create", "patch"],
    ),
    (
        OPERATOR,
        Scope::Default,
        "events.k8s.io",
        "events",
        &["create", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "wasmop.dev",
        "dynamicenvs",
        &["get", "list", "watch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "wasmop.dev",
        "dynamicenvs/status",
        &["patch"],
    ),
    // Scaling: ElasticServices (finalizer by patch), the private Services and resolver
    // EndpointSlices they own (server-side apply), the public Services and their slices, the
    // workloads' scale subresource and KEDA's pause annotations.
    (
        OPERATOR,
        Scope::Watched,
        "wasmop.dev",
        "elasticservices",
        &["get", "list", "watch", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "wasmop.dev",
        "elasticservices/status",
        &["patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "",
        "services",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "discovery.k8s.io",
        "endpointslices",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "apps",
        "deployments/scale",
        &["get", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "apps",
        "statefulsets/scale",
        &["get", "patch"],
    ),
    // Scaling reads the replicas of StatefulSet targets from a watch cache.
    (
        OPERATOR,
        Scope::Watched,
        "apps",
        "statefulsets",
        &["list", "watch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "argoproj.io",
        "rollouts/scale",
        &["get", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "keda.sh",
        "scaledobjects",
        &["get", "patch"],
    ),
    // Restart: ProxyRestartPolicies (cluster-scoped) and their status, pods listed page by
    // page and deleted for a bare ReplicaSet or ReplicationController to re-create, namespaces
    // for the selectors, workloads read and rolled out by a pod-template patch, ReplicaSets
    // read (pod -> Deployment) and bare ones marked, ReplicationControllers marked.
    (
        OPERATOR,
        Scope::Cluster,
        "wasmop.dev",
        "proxyrestartpolicies",
        &["list", "watch"],
    ),
    (
        OPERATOR,
        Scope::Cluster,
        "wasmop.dev",
        "proxyrestartpolicies/status",
        &["patch"],
    ),
    (OPERATOR, Scope::Watched, "", "pods", &["list", "delete"]),
    (OPERATOR, Scope::Cluster, "", "namespaces", &["list"]),
    (
        OPERATOR,
        Scope::Watched,
        "apps",
        "daemonsets",
        &["get", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "apps",
        "statefulsets",
        &["get", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "apps",
        "replicasets",
        &["get", "patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "",
        "replicationcontrollers",
        &["get", "patch"],
    ),
    // Routing: the DynamicEnv finalizer; clone Deployments beside their bases (server-side
    // apply) and their deletion; DestinationRules likewise; VirtualServices read and their
    // spec.http patched (never created, replaced or deleted). Restart reads and patches
    // Deployments too.
    (
        OPERATOR,
        Scope::Watched,
        "wasmop.dev",
        "dynamicenvs",
        &["patch"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "apps",
        "deployments",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "networking.istio.io",
        "destinationrules",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        OPERATOR,
        Scope::Watched,
        "networking.istio.io",
        "virtualservices",
        &["get", "list", "watch", "patch"],
    ),
    // The resolver: where a request goes, and the demand annotation.
    (
        RESOLVER,
        Scope::Watched,
        "wasmop.dev",
        "elasticservices",
        &["get", "list", "watch", "patch"],
    ),
    (
        RESOLVER,
        Scope::Watched,
        "",
        "services",
        &["get", "list", "watch"],
    ),
    (
        RESOLVER,
        Scope::Watched,
        "discovery.k8s.io",
        "endpointslices",
        &["get", "list", "watch"],
    ),
];

/// What neither account may do: (namespace, or None for cluster-wide; group; resource; verbs).
/// `wasmop-system` stands for the release namespace.
const DENIED: &[(Option<&str>, &str, &str, &[&str])] = &[
    (None, "", "secrets", &["get", "list", "watch"]),
    (Some(NS), "", "secrets", &["get", "list", "watch", "create"]),
    (Some("default"), "", "pods/exec", &["create", "get"]),
    (Some("default"), "", "pods/attach", &["create"]),
    (Some("default"), "", "pods/portforward", &["create"]),
    (Some(NS), "", "serviceaccounts/token", &["create"]),
    (
        None,
        "rbac.authorization.k8s.io",
        "clusterroles",
        &["create", "update", "patch", "delete", "bind", "escalate"],
    ),
    (
        None,
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        &["create", "update", "patch", "delete"],
    ),
    (
        Some(NS),
        "rbac.authorization.k8s.io",
        "roles",
        &["create", "update", "bind", "escalate"],
    ),
    (
        Some(NS),
        "rbac.authorization.k8s.io",
        "rolebindings",
        &["create", "update", "patch"],
    ),
    (None, "", "nodes", &["create", "update", "patch", "delete"]),
    (None, "", "namespaces", &["create", "delete"]),
    (
        None,
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
    ),
    (
        Some(NS),
        "",
        "configmaps",
        &["create", "update", "patch", "delete"],
    ),
    // Routing writes Deployments by server-side apply and deletion only (restart patches
    // them), never replaces one, and never creates, replaces or deletes a VirtualService.
    (None, "apps", "deployments", &["update"]),
    (
        None,
        "networking.istio.io",
        "virtualservices",
        &["create", "update", "delete"],
    ),
    (
        None,
        "networking.istio.io",
        "gateways",
        &["create", "patch", "delete"],
    ),
    (Some("default"), "", "configmaps", &["get", "list"]),
    (
        Some("default"),
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    ),
    (None, "wasmop.dev", "dynamicenvs", &["create", "delete"]),
    (None, "wasmop.dev", "elasticservices", &["create", "delete"]),
    // Restart: pods are listed and deleted, workloads patched; nothing more (routing's
    // Deployment rights are above).
    (
        None,
        "wasmop.dev",
        "proxyrestartpolicies",
        &["create", "update", "delete"],
    ),
    (None, "", "pods", &["create", "update", "patch", "watch"]),
    (None, "", "pods/eviction", &["create"]),
    (None, "apps", "daemonsets", &["create", "update", "delete"]),
    (
        None,
        "apps",
        "statefulsets",
        &["create", "update", "delete"],
    ),
    (None, "apps", "replicasets", &["create", "delete"]),
    (None, "batch", "jobs", &["get", "create", "delete"]),
    (None, "", "namespaces", &["get", "update", "patch"]),
];

/// A namespace no need points at, where a namespaced need must not be granted.
const ELSEWHERE: &str = "e2e-elsewhere";

/// One install of the chart: its release namespace, the prefix of its object names, and
/// `operator.watchNamespace`.
struct Release {
    namespace: String,
    fullname: String,
    watch: Option<String>,
}

impl Release {
    /// deploy/manifests: release `wasmop` in `wasmop-system`, every namespace watched.
    fn default_manifests() -> Self {
        Self {
            namespace: NS.into(),
            fullname: "wasmop".into(),
            watch: None,
        }
    }

    fn account(&self, account: Account) -> String {
        match account {
            Account::Operator => self.fullname.clone(),
            Account::Resolver => format!("{}-resolver", self.fullname),
        }
    }

    /// The namespace of `scope` in this install; `None` for every namespace (cluster-wide).
    fn namespace_of(&self, scope: Scope) -> Option<String> {
        match scope {
            Scope::OperatorNamespace => Some(self.namespace.clone()),
            Scope::Watched => self.watch.clone(),
            Scope::Default => Some("default".into()),
            Scope::Cluster => None,
        }
    }

    /// Every need as (account, namespace or None, group, resource, verb).
    fn needs(&self) -> BTreeSet<Grant> {
        NEEDS
            .iter()
            .flat_map(|&(a, scope, g, r, verbs)| {
                verbs.iter().map(move |&v| {
                    (
                        a,
                        self.namespace_of(scope),
                        g.to_owned(),
                        r.to_owned(),
                        v.to_owned(),
                    )
                })
            })
            .collect()
    }
}

/// (account, namespace or None for cluster-wide, group, resource, verb).
type Grant = (Account, Option<String>, String, String, String);

/// What the RBAC objects among `docs` grant the release's two accounts, from the bindings.
///
/// # Panics
/// On a rule with a wildcard, `resourceNames` or `nonResourceURLs`, a binding to anyone else
/// or to a missing role, a role bound twice or not at all (aggregated user roles aside, which
/// must not be bound), or a RoleBinding to a Role of another namespace.
fn grants(docs: &[Value], release: &Release) -> BTreeSet<Grant> {
    let accounts = [Account::Operator, Account::Resolver];
    let mut granted = BTreeSet::new();
    let mut bound = BTreeSet::new();
    for binding in of_kind(docs, "ClusterRoleBinding")
        .into_iter()
        .chain(of_kind(docs, "RoleBinding"))
    {
        let namespace = binding["metadata"]["namespace"].as_str().map(str::to_owned);
        let subjects = binding["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), 1, "one subject per binding: {binding}");
        assert_eq!(subjects[0]["kind"], "ServiceAccount", "{binding}");
        assert_eq!(
            subjects[0]["namespace"],
            release.namespace.as_str(),
            "{binding}"
        );
        let account = *accounts
            .iter()
            .find(|&&a| subjects[0]["name"] == release.account(a).as_str())
            .unwrap_or_else(|| panic!("a binding to an account of another chart: {binding}"));
        let (kind, name) = (
            binding["roleRef"]["kind"].as_str().unwrap(),
            binding["roleRef"]["name"].as_str().unwrap(),
        );
        // A Role is found in the binding's namespace, a ClusterRole anywhere.
        let role_namespace = (kind == "Role").then(|| namespace.clone().unwrap());
        let role = of_kind(docs, kind)
            .into_iter()
            .find(|r| {
                r["metadata"]["name"] == name
                    && r["metadata"]["namespace"].as_str().map(str::to_owned) == role_namespace
            })
            .unwrap_or_else(|| panic!("{binding} binds a {kind} the chart does not have"));
        assert!(
            bound.insert((kind.to_owned(), name.to_owned(), role_namespace)),
            "{kind} {name} is bound twice"
        );
        for rule in role["rules"].as_array().unwrap() {
            assert!(rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none());
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        let (g, r, v) = (
                            g.as_str().unwrap(),
                            r.as_str().unwrap(),
                            v.as_str().unwrap(),
                        );
                        assert!(
                            g != "*" && r != "*" && v != "*",
                            "wildcard in {name}: {rule}"
                        );
                        granted.insert((
                            account,
                            namespace.clone(),
                            g.to_owned(),
                            r.to_owned(),
                            v.to_owned(),
                        ));
                    }
                }
            }
        }
    }
    for role in of_kind(docs, "ClusterRole")
        .into_iter()
        .chain(of_kind(docs, "Role"))
    {
        let kind = role["kind"].as_str().unwrap().to_owned();
        let name = role["metadata"]["name"].as_str().unwrap().to_owned();
        let namespace = role["metadata"]["namespace"].as_str().map(str::to_owned);
        let aggregated = role["metadata"]["labels"].as_object().is_some_and(|l| {
            l.keys()
                .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
        });
        assert_eq!(
            bound.contains(&(kind, name.clone(), namespace)),
            !aggregated,
            "{name}: every role is bound once, except the aggregated user roles, never bound"
        );
    }
    // Every ServiceAccount of the chart is one of the two accounts asked about.
    let service_accounts: BTreeSet<String> = of_kind(docs, "ServiceAccount")
        .iter()
        .map(|sa| sa["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        service_accounts,
        accounts.iter().map(|&a| release.account(a)).collect()
    );
    granted
}

/// Checks that the chart grants the release's accounts exactly what they need: each grant is a
/// need in the same namespace (or cluster-wide), and each need is granted there or
/// cluster-wide.
fn assert_grants_are_the_needs(docs: &[Value], release: &Release) {
    let granted = grants(docs, release);
    let needed = release.needs();
    let beyond: Vec<String> = granted
        .difference(&needed)
        .map(|(a, ns, g, r, v)| {
            format!(
                "{} may {v} {} in {}, which no code needs",
                release.account(*a),
                display(g, r),
                ns.as_deref().unwrap_or("every namespace")
            )
        })
        .collect();
    assert!(beyond.is_empty(), "{}", beyond.join("\n"));
    let missing: Vec<String> = needed
        .iter()
        .filter(|(a, ns, g, r, v)| {
            !granted.contains(&(*a, ns.clone(), g.clone(), r.clone(), v.clone()))
                && !granted.contains(&(*a, None, g.clone(), r.clone(), v.clone()))
        })
        .map(|(a, ns, g, r, v)| {
            format!(
                "{} needs {v} {} in {}",
                release.account(*a),
                display(g, r),
                ns.as_deref().unwrap_or("every namespace")
            )
        })
        .collect();
    assert!(missing.is_empty(), "not granted:\n{}", missing.join("\n"));
}

/// Whether the API server lets ServiceAccount `release/account` do `verb` on `resource`
/// (`resource/subresource`) of `group` in `namespace` (None: in every namespace, or a
/// cluster-scoped kind).
async fn allowed(
    client: &Client,
    release: &Release,
    account: Account,
    namespace: Option<&str>,
    group: &str,
    resource: &str,
    verb: &str,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let ns = &release.namespace;
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{ns}:{}",
                release.account(account)
            )),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: namespace.map(str::to_owned),
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("create a SubjectAccessReview")
        .status
        .expect("a review status")
        .allowed
}

fn display(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// Asks the API server, for the installed `release`: every need is allowed where it applies;
/// a need of one namespace is allowed neither in [`ELSEWHERE`] nor in every namespace at once
/// (unless it is also needed there); nothing of [`DENIED`] is allowed.
async fn assert_api_server_allows_the_needs_only(client: &Client, release: &Release) {
    let needed = release.needs();
    let needed_at = |a: Account, ns: Option<&str>, g: &str, r: &str, v: &str| {
        needed.contains(&(a, ns.map(str::to_owned), g.into(), r.into(), v.into()))
    };
    let mut wrong = Vec::new();
    for (account, ns, g, r, v) in &needed {
        let name = release.account(*account);
        if !allowed(client, release, *account, ns.as_deref(), g, r, v).await {
            wrong.push(format!(
                "{name} cannot {v} {} in {} (needed)",
                display(g, r),
                ns.as_deref().unwrap_or("every namespace")
            ));
        }
        if ns.is_none() {
            continue;
        }
        for other in [Some(ELSEWHERE), None] {
            if !needed_at(*account, None, g, r, v)
                && !needed_at(*account, other, g, r, v)
                && allowed(client, release, *account, other, g, r, v).await
            {
                wrong.push(format!(
                    "{name} can {v} {} in {}",
                    display(g, r),
                    other.unwrap_or("every namespace")
                ));
            }
        }
    }
    for account in [Account::Operator, Account::Resolver] {
        for &(ns, group, resource, verbs) in DENIED {
            let ns = ns.map(|n| {
                if n == NS {
                    release.namespace.as_str()
                } else {
                    n
                }
            });
            for &verb in verbs {
                if allowed(client, release, account, ns, group, resource, verb).await {
                    wrong.push(format!(
                        "{} can {verb} {} in {}",
                        release.account(account),
                        display(group, resource),
                        ns.unwrap_or("the cluster")
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC is not as it must be:\n{}",
        wrong.join("\n")
    );
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn rbac_allows_what_the_operator_and_resolver_need_and_nothing_more() {
    install_operator_rbac();
    let client = wasmop_tests::client().await;
    assert_api_server_allows_the_needs_only(&client, &Release::default_manifests()).await;
}

#[test]
fn the_chart_grants_nothing_beyond_the_needs() {
    assert_grants_are_the_needs(&rendered(), &Release::default_manifests());
}

/// The user roles aggregated into the built-in `view` and `edit` reach wasmop's custom
/// resources only: `view` reads them, `edit` writes the namespaced DynamicEnvs and
/// ElasticServices, and nobody but a cluster administrator writes ProxyRestartPolicies, which
/// are cluster-scoped and restart pods in any namespace.
#[test]
fn the_aggregated_user_roles_write_no_cluster_scoped_kind() {
    let docs = rendered();
    let role = |name: &str| -> Value {
        of_kind(&docs, "ClusterRole")
            .into_iter()
            .find(|r| r["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("ClusterRole {name}"))
    };
    let rules = |role: &Value| -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for rule in role["rules"].as_array().unwrap() {
            assert_eq!(
                rule["apiGroups"],
                serde_json::json!(["wasmop.dev"]),
                "{rule}"
            );
            for r in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    out.insert((r.as_str().unwrap().into(), v.as_str().unwrap().into()));
                }
            }
        }
        out
    };
    let view = role("wasmop-view");
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert!(
        rules(&view)
            .iter()
            .all(|(_, v)| ["get", "list", "watch"].contains(&v.as_str())),
        "{view}"
    );
    let edit = role("wasmop-edit");
    assert_eq!(
        edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    let written: BTreeSet<String> = rules(&edit).into_iter().map(|(r, _)| r).collect();
    assert_eq!(
        written,
        BTreeSet::from(["dynamicenvs".into(), "elasticservices".into()]),
        "{edit}"
    );
}

/// With `operator.watchNamespace`, everything namespaced is granted by Roles of the watched
/// namespace (and of the release namespace, and Events in `default`); the one ClusterRole
/// bound to the operator holds only cluster-scoped kinds, the resolver has none; both are told
/// the namespace. Asked of the API server with the chart installed as release
/// `wasmop-<suffix>` in a throwaway namespace, watching a second one.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh) and helm: run with make test or make e2e"]
async fn with_watch_namespace_rbac_is_granted_in_that_namespace_only() {
    with_temp_ns("rbac-watch", |client: Client, ns: String| async move {
        let watched = format!("{ns}-apps");
        let release = Release {
            namespace: ns.clone(),
            fullname: format!("wasmop-{}", ns.trim_start_matches("e2e-")),
            watch: Some(watched.clone()),
        };
        let text = helm_template_release(
            &release.fullname,
            &ns,
            &format!(
                "--set operator.watchNamespace={watched} \
                 --set admissionPolicy.enabled=false --set rbac.aggregateToDefaultRoles=false"
            ),
        );
        let docs = documents(&text);
        let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ClusterRole").collect();
        assert_eq!(
            roles.len(),
            2,
            "wasmop-namespace and the small cluster role"
        );
        assert_grants_are_the_needs(&docs, &release);
        // Both processes are told what they watch.
        for name in [release.account(OPERATOR), release.account(RESOLVER)] {
            let deployment = docs
                .iter()
                .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name.as_str())
                .unwrap_or_else(|| panic!("Deployment {name}"));
            let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
            assert!(
                args.as_array()
                    .unwrap()
                    .contains(&Value::String(format!("--watch-namespace={watched}"))),
                "{name}: {args}"
            );
        }

        // Install the accounts and their RBAC, and ask the API server.
        let rbac: Vec<&Value> = docs
            .iter()
            .filter(|d| {
                [
                    "ServiceAccount",
                    "ClusterRole",
                    "ClusterRoleBinding",
                    "Role",
                    "RoleBinding",
                ]
                .contains(&d["kind"].as_str().unwrap_or_default())
            })
            .collect();
        let file = wasmop_tests::dump_dir().join(format!("{ns}-rbac-watch.yaml"));
        let yaml: String = rbac
            .iter()
            .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
            .collect();
        std::fs::write(&file, yaml).unwrap();
        let file = file.to_string_lossy().into_owned();
        // The second namespace and the cluster-scoped objects are removed whatever happens.
        kubectl_ok(&["create", "namespace", &watched]);
        let asked = std::panic::AssertUnwindSafe(async {
            kubectl_ok(&[
                "apply",
                "--server-side",
                "--field-manager=wasmop-e2e",
                "-f",
                &file,
            ]);
            assert_api_server_allows_the_needs_only(&client, &release).await;
        })
        .catch_unwind()
        .await;
        let _ = wasmop_tests::kubectl()
            .args(["delete", "--ignore-not-found", "--wait=false", "-f", &file])
            .output();
        let _ = wasmop_tests::kubectl()
            .args(["delete", "namespace", &watched, "--wait=false"])
            .output();
        if let Err(panic) = asked {
            std::panic::resume_unwind(panic);
        }
    })
    .await;
}
