//! The chart's values, rendered: each value of deploy/helm/wasmop/values.yaml that a platform
//! team sets (accounts, names, image, labels, security contexts, scheduling, volumes, the CRDs,
//! the Prometheus Operator's objects, the dashboard) does what docs/install.md says, asked of
//! `helm template` with `--set`; every value is documented in docs/install.md; the dashboard
//! and the alerts read metrics the code registers. With the local control plane, the chart
//! rendered with deploy/helm/lint-values/platform.yaml passes the API server's strict field
//! validation, and a real `helm install` creates the CRDs and `helm uninstall` keeps them.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

const NS: &str = "wasmop-system";

fn helm_dir() -> PathBuf {
    wasmop_tests::repo_root().join("deploy/helm")
}

/// Runs helm (deploy/helm/helm-version.sh) with `args` (a shell fragment in which `$0` is
/// deploy/helm and `$CHART` the chart).
fn helm(args: &str) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            r#". "$0/helm-version.sh" && CHART="$0/wasmop" && "$HELM" {args}"#
        ))
        .arg(helm_dir())
        .output()
        .expect("run helm")
}

/// `helm template RELEASE` of the chart in `wasmop-system` with `args`.
///
/// # Panics
/// When helm fails (it is installed by scripts/setup.sh).
fn template_release(release: &str, args: &str) -> Vec<Value> {
    let out = helm(&format!(
        r#"template {release} "$CHART" --namespace {NS} {args}"#
    ));
    assert!(
        out.status.success(),
        "helm template {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).unwrap())
}

fn template(args: &str) -> Vec<Value> {
    template_release("wasmop", args)
}

/// The YAML documents of `text` as JSON, empty ones left out.
fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| {
            let names: Vec<String> = docs
                .iter()
                .map(|d| format!("{} {}", d["kind"], d["metadata"]["name"]))
                .collect();
            panic!("no {kind} {name} in {names:?}")
        })
}

fn names(docs: &[Value], kind: &str) -> BTreeSet<String> {
    of_kind(docs, kind)
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

fn pod(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]
}

/// The operator and the resolver Deployments of a release named `wasmop`.
fn both(docs: &[Value]) -> [&Value; 2] {
    [
        find(docs, "Deployment", "wasmop"),
        find(docs, "Deployment", "wasmop-resolver"),
    ]
}

fn yaml_file(path: &str) -> Value {
    let text = std::fs::read_to_string(wasmop_tests::repo_root().join(path)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn service_accounts_take_annotations_or_come_from_outside_the_chart() {
    let docs = template("");
    for name in ["wasmop", "wasmop-resolver"] {
        let sa = find(&docs, "ServiceAccount", name);
        assert!(sa["metadata"].get("annotations").is_none(), "{sa}");
    }

    let docs = template(
        "--set 'serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/dr' \
         --set 'resolver.serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account=r@p.iam'",
    );
    assert_eq!(
        find(&docs, "ServiceAccount", "wasmop")["metadata"]["annotations"],
        json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/dr"})
    );
    assert_eq!(
        find(&docs, "ServiceAccount", "wasmop-resolver")["metadata"]["annotations"],
        json!({"iam.gke.io/gcp-service-account": "r@p.iam"})
    );

    // Accounts made elsewhere: none rendered, and the pods and every binding use them.
    let docs = template(
        "--set serviceAccount.create=false --set serviceAccount.name=ops-dr \
         --set resolver.serviceAccount.create=false --set resolver.serviceAccount.name=ops-resolver",
    );
    assert!(of_kind(&docs, "ServiceAccount").is_empty());
    let [operator, resolver] = both(&docs);
    assert_eq!(pod(operator)["serviceAccountName"], "ops-dr");
    assert_eq!(pod(resolver)["serviceAccountName"], "ops-resolver");
    let mut subjects = BTreeSet::new();
    for binding in of_kind(&docs, "RoleBinding")
        .into_iter()
        .chain(of_kind(&docs, "ClusterRoleBinding"))
    {
        for s in binding["subjects"].as_array().unwrap() {
            assert_eq!(s["kind"], "ServiceAccount", "{binding}");
            assert_eq!(s["namespace"], NS, "{binding}");
            subjects.insert(s["name"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(
        subjects,
        BTreeSet::from(["ops-dr".into(), "ops-resolver".into()])
    );

    // A name of its own for an account the chart creates.
    let docs = template("--set serviceAccount.name=dr-operator");
    find(&docs, "ServiceAccount", "dr-operator");
    assert_eq!(
        pod(find(&docs, "Deployment", "wasmop"))["serviceAccountName"],
        "dr-operator"
    );
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn name_overrides_rename_the_objects_but_not_what_the_code_looks_for() {
    let docs = template("--set fullnameOverride=platform-dr");
    assert_eq!(
        names(&docs, "Deployment"),
        BTreeSet::from(["platform-dr".into(), "platform-dr-resolver".into()])
    );
    assert_eq!(
        names(&docs, "Service"),
        BTreeSet::from(["platform-dr-metrics".into(), "platform-dr-resolver".into()])
    );
    assert!(names(&docs, "ClusterRole").contains("platform-dr-namespace"));
    // The operator looks for its registry by this name, and the scaling controller for the
    // resolver pods by this label.
    find(&docs, "ConfigMap", "wasmop-plugins");
    let resolver = find(&docs, "Deployment", "platform-dr-resolver");
    assert_eq!(
        resolver["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        "wasmop-resolver"
    );

    let docs = template_release("blue", "--set nameOverride=dr");
    let operator = find(&docs, "Deployment", "blue-dr");
    find(&docs, "Deployment", "blue-dr-resolver");
    find(&docs, "ServiceAccount", "blue-dr");
    assert_eq!(
        operator["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "dr"
    );
    // A release whose name holds the name is the prefix itself.
    let docs = template_release("dr-east", "--set nameOverride=dr");
    find(&docs, "Deployment", "dr-east");
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_image_takes_a_registry_and_a_digest_that_wins_over_the_tag() {
    let image = |args: &str| -> Vec<String> {
        let docs = template(args);
        both(&docs)
            .iter()
            .map(|d| {
                pod(d)["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(image(""), ["wasmop:0.1.0", "wasmop:0.1.0"]);
    assert_eq!(
        image(
            "--set image.registry=registry.example.com:5000 --set image.repository=ops/wasmop --set image.tag=1.2.3"
        ),
        ["registry.example.com:5000/ops/wasmop:1.2.3"; 2]
    );
    let digest = format!("sha256:{}", "ab".repeat(32));
    assert_eq!(
        image(&format!(
            "--set image.registry=registry.example.com --set image.tag=1.2.3 --set image.digest={digest}"
        )),
        [
            format!("registry.example.com/wasmop@{digest}"),
            format!("registry.example.com/wasmop@{digest}")
        ]
    );
    // The schema refuses a digest that is not one.
    let out = helm(r#"lint --strict --quiet "$CHART" --set image.digest=1.2.3"#);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/image/digest"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn pod_labels_annotations_priority_and_spread_reach_both_pods() {
    let docs = template(
        "--set operator.podLabels.team=dr --set resolver.podLabels.team=edge \
         --set 'operator.podLabels.app\\.kubernetes\\.io/name=other' \
         --set operator.podAnnotations.a=b --set resolver.podAnnotations.c=d \
         --set operator.priorityClassName=system-cluster-critical \
         --set resolver.priorityClassName=edge-critical \
         --set-json 'operator.topologySpreadConstraints=[{\"maxSkew\":1,\"topologyKey\":\"topology.kubernetes.io/zone\",\"whenUnsatisfiable\":\"ScheduleAnyway\"}]' \
         --set-json 'resolver.topologySpreadConstraints=[{\"maxSkew\":2,\"topologyKey\":\"topology.kubernetes.io/zone\",\"whenUnsatisfiable\":\"DoNotSchedule\"}]'",
    );
    let [operator, resolver] = both(&docs);
    let meta = |d: &Value| d["spec"]["template"]["metadata"].clone();
    assert_eq!(meta(operator)["labels"]["team"], "dr");
    assert_eq!(meta(resolver)["labels"]["team"], "edge");
    // Pod labels never override the selector's.
    assert_eq!(meta(operator)["labels"]["app.kubernetes.io/name"], "wasmop");
    assert_eq!(meta(operator)["annotations"], json!({"a": "b"}));
    assert_eq!(meta(resolver)["annotations"], json!({"c": "d"}));
    assert_eq!(
        pod(operator)["priorityClassName"],
        "system-cluster-critical"
    );
    assert_eq!(pod(resolver)["priorityClassName"], "edge-critical");
    assert_eq!(pod(operator)["topologySpreadConstraints"][0]["maxSkew"], 1);
    assert_eq!(pod(resolver)["topologySpreadConstraints"][0]["maxSkew"], 2);

    let docs = template("");
    for d in both(&docs) {
        assert!(pod(d).get("priorityClassName").is_none());
        assert!(pod(d).get("topologySpreadConstraints").is_none());
        assert!(
            d["spec"]["template"]["metadata"]
                .get("annotations")
                .is_none()
        );
    }
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn security_contexts_keep_their_defaults_and_let_a_key_be_left_out() {
    let docs = template("");
    for d in both(&docs) {
        assert_eq!(
            pod(d)["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                   "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
        );
        assert_eq!(
            pod(d)["containers"][0]["securityContext"],
            json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                   "privileged": false, "capabilities": {"drop": ["ALL"]}})
        );
    }
    // OpenShift's restricted SCC: it assigns the user, group and fsGroup.
    let docs = template(
        "--set podSecurityContext.runAsUser=null --set podSecurityContext.runAsGroup=null \
         --set podSecurityContext.fsGroup=null --set securityContext.runAsUser=null \
         --set securityContext.capabilities.add={NET_BIND_SERVICE}",
    );
    for d in both(&docs) {
        assert_eq!(
            pod(d)["securityContext"],
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
        );
        let sc = &pod(d)["containers"][0]["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(
            sc["capabilities"],
            json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})
        );
    }
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn extra_volumes_are_mounted_beside_the_charts_own() {
    let docs = template(
        "--set-json 'operator.extraVolumes=[{\"name\":\"plugins\",\"configMap\":{\"name\":\"my-plugins\"}}]' \
         --set-json 'operator.extraVolumeMounts=[{\"name\":\"plugins\",\"mountPath\":\"/opt/plugins\",\"readOnly\":true}]' \
         --set-json 'resolver.extraVolumes=[{\"name\":\"certs\",\"secret\":{\"secretName\":\"edge\"}}]' \
         --set-json 'resolver.extraVolumeMounts=[{\"name\":\"certs\",\"mountPath\":\"/etc/edge\"}]'",
    );
    let [operator, resolver] = both(&docs);
    let volume_names = |d: &Value| -> Vec<String> {
        pod(d)["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        volume_names(operator),
        ["compile-cache", "tmp", "plugin-data", "plugins"]
    );
    let mounts = pod(operator)["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(mounts.len(), 4, "{mounts:?}");
    assert_eq!(
        mounts[3],
        json!({"name": "plugins", "mountPath": "/opt/plugins", "readOnly": true})
    );
    assert_eq!(volume_names(resolver), ["certs"]);
    assert_eq!(
        pod(resolver)["containers"][0]["volumeMounts"],
        json!([{"name": "certs", "mountPath": "/etc/edge"}])
    );
    // By default the resolver has no volume at all.
    let docs = template("");
    assert!(pod(both(&docs)[1]).get("volumes").is_none());
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn replicas_spread_over_nodes_unless_an_affinity_is_given() {
    let docs = template("");
    let [operator, resolver] = both(&docs);
    for d in [operator, resolver] {
        let preferred = &pod(d)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
        let term = &preferred[0]["podAffinityTerm"];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname", "{d}");
        assert_eq!(
            term["labelSelector"]["matchLabels"], d["spec"]["selector"]["matchLabels"],
            "the term selects this Deployment's pods"
        );
        assert!(
            pod(d)["affinity"]["podAntiAffinity"]
                .get("requiredDuringSchedulingIgnoredDuringExecution")
                .is_none(),
            "soft only"
        );
    }
    let given = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}]}}});
    let docs = template(&format!("--set-json 'operator.affinity={given}'"));
    assert_eq!(
        pod(both(&docs)[0])["affinity"],
        given,
        "replaced, not merged"
    );
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn disruption_budgets_only_with_more_than_one_replica() {
    let pdbs = |args: &str| names(&template(args), "PodDisruptionBudget");
    assert_eq!(
        pdbs(""),
        BTreeSet::from(["wasmop".into(), "wasmop-resolver".into()])
    );
    assert_eq!(
        pdbs("--set resolver.replicas=1"),
        BTreeSet::from(["wasmop".into()])
    );
    assert_eq!(
        pdbs("--set operator.replicas=1 --set resolver.replicas=3"),
        BTreeSet::from(["wasmop-resolver".into()])
    );
    assert!(
        pdbs("--set resolver.podDisruptionBudget.enabled=false --set operator.replicas=1")
            .is_empty()
    );
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_crds_are_rendered_from_crds_and_kept_on_uninstall() {
    let docs = template("");
    let crds = of_kind(&docs, "CustomResourceDefinition");
    let dir = wasmop_tests::crds_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(crds.len(), files.len(), "one per file of crds/");
    for file in files {
        let want: Value = serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let name = want["metadata"]["name"].as_str().unwrap().to_owned();
        let mut got = (*crds
            .iter()
            .find(|c| c["metadata"]["name"] == name.as_str())
            .unwrap_or_else(|| panic!("CRD {name} is not rendered")))
        .clone();
        assert_eq!(
            got["metadata"]["annotations"],
            json!({"helm.sh/resource-policy": "keep"}),
            "{name}"
        );
        assert_eq!(
            got["metadata"]["labels"]["app.kubernetes.io/part-of"],
            "wasmop"
        );
        // Otherwise the file as it is.
        let meta = got["metadata"].as_object_mut().unwrap();
        meta.remove("annotations");
        meta.remove("labels");
        assert_eq!(got, want, "{name} differs from {}", file.display());
    }
    assert!(
        of_kind(
            &template("--set crds.install=false"),
            "CustomResourceDefinition"
        )
        .is_empty()
    );
    // deploy/manifests/ leaves them to crds/.
    let manifests =
        std::fs::read_to_string(wasmop_tests::manifests_dir().join("wasmop.yaml")).unwrap();
    assert!(of_kind(&documents(&manifests), "CustomResourceDefinition").is_empty());
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn monitors_select_the_metrics_endpoints_of_their_own_release() {
    let docs = template("");
    assert!(of_kind(&docs, "ServiceMonitor").is_empty() && of_kind(&docs, "PodMonitor").is_empty());

    let docs = template(
        "--set metrics.serviceMonitor.enabled=true --set metrics.serviceMonitor.interval=15s \
         --set metrics.serviceMonitor.labels.release=prometheus \
         --set metrics.resolverPodMonitor.enabled=true --set metrics.resolverPodMonitor.scrapeTimeout=5s",
    );
    let monitor = find(&docs, "ServiceMonitor", "wasmop");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!([NS])
    );
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    let selected: Vec<&Value> = of_kind(&docs, "Service")
        .into_iter()
        .filter(|s| {
            selector
                .iter()
                .all(|(k, v)| &s["metadata"]["labels"][k] == v)
        })
        .collect();
    assert_eq!(selected.len(), 1, "the operator's metrics Service only");
    assert_eq!(selected[0]["metadata"]["name"], "wasmop-metrics");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "15s");
    assert_eq!(selected[0]["spec"]["ports"][0]["name"], endpoint["port"]);

    let pods = find(&docs, "PodMonitor", "wasmop-resolver");
    let selector = pods["spec"]["selector"]["matchLabels"].as_object().unwrap();
    let [operator, resolver] = both(&docs);
    let selects = |d: &Value| {
        selector
            .iter()
            .all(|(k, v)| &d["spec"]["template"]["metadata"]["labels"][k] == v)
    };
    assert!(selects(resolver) && !selects(operator));
    let endpoint = &pods["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["scrapeTimeout"], "5s");
    let ports = pod(resolver)["containers"][0]["ports"].as_array().unwrap();
    let admin = ports
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .expect("a named port");
    assert_eq!(
        admin["containerPort"], 8013,
        "the admin port serves /metrics"
    );

    // No resolver, no PodMonitor; no metrics Service, no ServiceMonitor to select it.
    let docs =
        template("--set metrics.resolverPodMonitor.enabled=true --set resolver.enabled=false");
    assert!(of_kind(&docs, "PodMonitor").is_empty());
    let out = helm(&format!(
        r#"template wasmop "$CHART" --namespace {NS} --set metrics.serviceMonitor.enabled=true --set metrics.service.enabled=false"#
    ));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs metrics.service.enabled"));
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_dashboard_is_a_configmap_for_grafanas_sidecar() {
    assert!(names(&template(""), "ConfigMap") == BTreeSet::from(["wasmop-plugins".into()]));
    let docs = template(
        "--set metrics.grafanaDashboard.enabled=true --set metrics.grafanaDashboard.namespace=monitoring \
         --set metrics.grafanaDashboard.labels.grafana_folder=ops",
    );
    let cm = find(&docs, "ConfigMap", "wasmop-dashboard");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["labels"]["grafana_folder"], "ops");
    let dashboard: Value = serde_json::from_str(cm["data"]["wasmop.json"].as_str().unwrap())
        .expect("the dashboard is JSON");
    assert_eq!(dashboard, dashboard_file());
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_alerts_cover_the_registry_dr_and_the_resolver() {
    let alerts = |args: &str| -> BTreeSet<String> {
        let docs = template(&format!("--set metrics.prometheusRule.enabled=true {args}"));
        let rule = find(&docs, "PrometheusRule", "wasmop");
        rule["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .map(|r| {
                assert!(
                    r["expr"].as_str().is_some_and(|e| e.contains("wasmop_")),
                    "{r}"
                );
                r["alert"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    let all = alerts("");
    for alert in [
        "WasmopPluginNotReady",
        "WasmopPluginsConfigNotInUse",
        "WasmopNoActiveInstance",
        "WasmopDRFlapping",
        "WasmopResolverRejections",
    ] {
        assert!(all.contains(alert), "{alert} in {all:?}");
    }
    assert!(!alerts("--set resolver.enabled=false").contains("WasmopResolverRejections"));
}

#[test]
#[ignore = "needs helm from scripts/setup.sh: run with make test"]
fn the_notes_name_the_release_and_say_who_manages_the_crds() {
    let notes = |args: &str| -> String {
        let out = helm(&format!(
            r#"install --dry-run=client blue "$CHART" --namespace ops {args}"#
        ));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        text[text.find("NOTES:").expect("NOTES")..].to_owned()
    };
    let text = notes("");
    assert!(
        text.contains("port-forward deploy/blue-wasmop 8080"),
        "{text}"
    );
    assert!(
        text.contains("CRDs: created and upgraded with this release"),
        "{text}"
    );
    // Every pointer works without the sources: commands, no paths into a checkout.
    assert!(text.contains("kubectl explain dynamicenvs.spec"), "{text}");
    assert!(text.contains("helm -n ops get values blue --all"), "{text}");
    assert!(!text.contains("docs/"), "{text}");
    let text = notes("--set crds.install=false --set fullnameOverride=dr");
    assert!(text.contains("port-forward deploy/dr 8080"), "{text}");
    assert!(text.contains("crds.install=false"), "{text}");
}

fn dashboard_file() -> Value {
    let path = helm_dir().join("wasmop/files/grafana-dashboard.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The sample names of the process registry once a sample of each family reachable from here
/// is recorded, as the text format names them (`_total` for counters; `_bucket`, `_sum`,
/// `_count` for histograms).
fn exported_samples() -> BTreeSet<String> {
    // Registered by their first use: DR, resolver, kernel; the plugin host's into the process
    // registry, as `wasmop run` does.
    wasmop_controllers::dr::metrics::config_valid(true);
    wasmop_controllers::dr::metrics::tick("ok");
    wasmop_controllers::dr::metrics::transition(false, "decision");
    wasmop_resolver::metrics::init();
    wasmop_resolver::metrics::queued("ns", "svc");
    wasmop_resolver::metrics::forwarded("ns", "svc", Some(std::time::Duration::ZERO));
    wasmop_resolver::metrics::rejected("ns", "svc", "timeout");
    wasmop_resolver::metrics::demand(true);
    wasmop_kernel::metrics::write("patch", "Deployment", "ok");
    wasmop_kernel::metrics::reconcile("routing", std::time::Duration::ZERO, "ok");
    let plugins = wasmop_plugin_host::metrics::PluginMetrics::default();
    plugins.reload("p", true);
    plugins.registry_state([("p", Some(wasmop_plugin_host::Hook::Routing), true)], true);
    wasmop_kernel::metrics::register_with(|r| plugins.register(r));
    let text = wasmop_kernel::metrics::encode();
    let mut samples = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => {
                samples.insert(format!("{}_total", name.trim_end_matches("_total")));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    samples.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                samples.insert(name.to_owned());
            }
        }
    }
    samples
}

/// The families the code registers (`register("NAME", …)` in host/*/src), with the prefix.
fn registered_families() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (at, _) in text.match_indices("register(") {
                    let rest = text[at + "register(".len()..].trim_start();
                    if let Some(name) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) {
                        out.insert(format!("wasmop_{name}"));
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for krate in std::fs::read_dir(wasmop_tests::repo_root().join("host")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            walk(&src, &mut out);
        }
    }
    out
}

/// Whether `name` is a sample the code exports: exactly as the process registry names it when
/// its family has samples here, else a registered family with a sample suffix.
fn is_exported(name: &str, samples: &BTreeSet<String>, families: &BTreeSet<String>) -> bool {
    if samples.contains(name) {
        return true;
    }
    let base = ["_total", "_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name);
    let sampled = samples.iter().any(|s| {
        s == base
            || ["_total", "_bucket"]
                .iter()
                .any(|x| s.strip_suffix(x) == Some(base))
    });
    !sampled && (families.contains(base) || families.contains(name))
}

/// The `wasmop_…` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("wasmop_") {
        let start = i + at;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |e| start + e);
        if boundary {
            out.insert(text[start..end].to_owned());
        }
        i = end;
    }
    out
}

/// Every metric the dashboard and the PrometheusRule read is one the code registers, and the
/// dashboard covers plugin calls, reconciles, writes, the DR state and the resolver.
#[test]
fn the_dashboard_and_the_alerts_read_metrics_the_code_exports() {
    let exported = exported_samples();
    assert!(exported.contains("wasmop_reconcile_total"), "{exported:?}");
    let dashboard = dashboard_file();
    let mut exprs = String::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push_str(target["expr"].as_str().unwrap());
            exprs.push('\n');
        }
    }
    let read = metric_names(&exprs);
    for covered in [
        "wasmop_plugin_calls_total",
        "wasmop_reconcile_total",
        "wasmop_writes_total",
        "wasmop_dr_active",
        "wasmop_resolver_requests_rejected_total",
    ] {
        assert!(read.contains(covered), "the dashboard shows {covered}");
    }
    let rules =
        std::fs::read_to_string(helm_dir().join("wasmop/templates/prometheusrule.yaml")).unwrap();
    let rule_exprs: String = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
        .collect::<Vec<_>>()
        .join("\n");
    let read_by_rules = metric_names(&rule_exprs);
    assert!(
        read_by_rules.contains("wasmop_dr_active"),
        "{read_by_rules:?}"
    );
    let families = registered_families();
    assert!(families.contains("wasmop_plugin_calls"), "{families:?}");
    let unknown: Vec<&String> = read
        .union(&read_by_rules)
        .filter(|m| !is_exported(m, &exported, &families))
        .collect();
    assert!(
        unknown.is_empty(),
        "read but not exported: {unknown:?}\nsamples: {exported:?}\nfamilies: {families:?}"
    );
    // The panels' data source and namespace are variables of the dashboard.
    assert!(
        exprs
            .lines()
            .all(|e| e.contains("namespace=~\"$namespace\"")),
        "{exprs}"
    );
}

/// The leaf values of values.yaml: a key whose value is not a map the schema describes key by
/// key (a scalar, a list, or a free-form map such as podAnnotations or dr.settings).
fn leaves(value: &Value, schema: &Value, root: &Value, path: &str, out: &mut Vec<String>) {
    let schema = match schema["$ref"].as_str() {
        Some(r) => &root["definitions"][r.trim_start_matches("#/definitions/")],
        None => schema,
    };
    match (value.as_object(), schema["properties"].as_object()) {
        (Some(map), Some(props)) if !map.is_empty() => {
            for (key, v) in map {
                let child = props
                    .get(key)
                    .unwrap_or_else(|| panic!("{path}.{key} is not in values.schema.json"));
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaves(v, child, root, &p, out);
            }
        }
        _ => out.push(path.to_owned()),
    }
}

/// docs/install.md's values table lists every leaf of values.yaml, each with a default, and
/// nothing that is not a value.
#[test]
fn every_value_is_documented_with_its_default() {
    let values = yaml_file("deploy/helm/wasmop/values.yaml");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(helm_dir().join("wasmop/values.schema.json")).unwrap(),
    )
    .unwrap();
    let mut all = Vec::new();
    leaves(&values, &schema, &schema, "", &mut all);
    assert!(all.contains(&"image.digest".to_owned()), "{all:?}");

    let docs = std::fs::read_to_string(wasmop_tests::repo_root().join("docs/install.md")).unwrap();
    let section = &docs[docs.find("\n## Values\n").expect("a Values section")..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    let mut documented = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(
            cells.len() >= 3 && !cells[1].trim().is_empty(),
            "a row without a default: {row}"
        );
        for name in cells[0].split('`').skip(1).step_by(2) {
            documented.insert(name.to_owned());
        }
    }
    let missing: Vec<&String> = all.iter().filter(|v| !documented.contains(*v)).collect();
    assert!(
        missing.is_empty(),
        "values missing from docs/install.md's values table: {missing:?}"
    );
    let stray: Vec<&String> = documented.iter().filter(|d| !all.contains(d)).collect();
    assert!(stray.is_empty(), "documented but not values: {stray:?}");

    // The chart's README (`helm show readme`) names a few of them; each is a value.
    let readme = std::fs::read_to_string(helm_dir().join("wasmop/README.md")).unwrap();
    let named: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|row| {
            row.split(" | ")
                .next()
                .unwrap()
                .split('`')
                .skip(1)
                .step_by(2)
        })
        .collect();
    assert!(named.contains(&"dr.settings.backend"), "{named:?}");
    let stray: Vec<&&str> = named
        .iter()
        .filter(|n| !all.iter().any(|v| v == **n))
        .collect();
    assert!(
        stray.is_empty(),
        "the chart README names what is not a value: {stray:?}"
    );
}

/// The Prometheus Operator's kinds, whose CRDs the local control plane does not have
/// (kubeconform checks them in deploy/helm/render.sh).
const MONITORING_KINDS: [&str; 3] = ["ServiceMonitor", "PodMonitor", "PrometheusRule"];

/// deploy/helm/lint-values/platform.yaml (a registry pinned by digest, IRSA, names, scheduling,
/// volumes, the CRDs as templates) passes the API server's strict field validation, in a dry
/// run of a server-side apply.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh) and helm: run with make test or make e2e"]
async fn the_platform_values_pass_the_api_servers_strict_validation() {
    wasmop_tests::with_temp_ns("chart-platform", |_client, ns: String| async move {
        let out = helm(&format!(
            r#"template wasmop "$CHART" --namespace {ns} -f "$0/lint-values/platform.yaml""#
        ));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let docs = documents(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(of_kind(&docs, "CustomResourceDefinition").len(), 3);
        let yaml: String = docs
            .iter()
            .filter(|d| !MONITORING_KINDS.contains(&d["kind"].as_str().unwrap_or_default()))
            .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
            .collect();
        let file = wasmop_tests::dump_dir().join(format!("{ns}-platform.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let applied = wasmop_tests::kubectl_ok(&[
            "apply",
            "--server-side",
            "--dry-run=server",
            "--validate=strict",
            "--force-conflicts",
            "--field-manager=wasmop-e2e",
            "-f",
            &file.to_string_lossy(),
        ]);
        for object in [
            "deployment.apps/dr-operator ",
            "deployment.apps/dr-operator-resolver ",
            "serviceaccount/dr-operator ",
            "configmap/dr-operator-dashboard ",
            "customresourcedefinition.apiextensions.k8s.io/dynamicenvs.wasmop.dev ",
        ] {
            assert!(applied.contains(object), "{object}: {applied}");
        }
    })
    .await;
}

/// A real `helm install` creates (here: adopts) the CRDs with the release, and `helm uninstall`
/// removes the release's objects but keeps the CRDs.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh) and helm: run with make test or make e2e"]
async fn helm_uninstall_keeps_the_crds_it_installed() {
    wasmop_tests::install_crds();
    wasmop_tests::with_temp_ns("chart-helm", |client: kube::Client, ns: String| async move {
        let release = format!("wasmop-{}", ns.trim_start_matches("e2e-"));
        let crds = [
            "dynamicenvs.wasmop.dev",
            "elasticservices.wasmop.dev",
            "proxyrestartpolicies.wasmop.dev",
        ];
        // The CRDs exist already (crds/, applied by the other tests): helm adopts objects that
        // carry its ownership marks.
        for crd in crds {
            wasmop_tests::kubectl_ok(&[
                "annotate", "--overwrite", "crd", crd,
                &format!("meta.helm.sh/release-name={release}"),
                &format!("meta.helm.sh/release-namespace={ns}"),
            ]);
            wasmop_tests::kubectl_ok(&[
                "label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm",
            ]);
        }
        let install = helm(&format!(
            r#"install {release} "$CHART" --namespace {ns} --set operator.replicas=1 \
               --set resolver.enabled=false --set admissionPolicy.enabled=false \
               --set rbac.aggregateToDefaultRoles=false"#
        ));
        let crds_api = kube::Api::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >::all(client.clone());
        let mut installed = Vec::new();
        for crd in crds {
            installed.push(crds_api.get(crd).await.unwrap());
        }
        let deployment_installed = kube::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
            client.clone(),
            &ns,
        )
        .get_opt(&release)
        .await
        .unwrap()
        .is_some();
        let uninstall = helm(&format!("uninstall {release} --namespace {ns} --wait"));
        assert!(
            install.status.success(),
            "helm install: {}",
            String::from_utf8_lossy(&install.stderr)
        );
        assert!(deployment_installed, "the release's operator Deployment");
        for crd in &installed {
            let annotations = crd.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                annotations.get("helm.sh/resource-policy").map(String::as_str),
                Some("keep"),
                "{:?}",
                crd.metadata.name
            );
            assert_eq!(
                annotations.get("meta.helm.sh/release-name"),
                Some(&release),
                "the release owns it"
            );
        }
        assert!(
            uninstall.status.success(),
            "helm uninstall: {}",
            String::from_utf8_lossy(&uninstall.stderr)
        );
        let said = String::from_utf8_lossy(&uninstall.stdout);
        assert!(said.contains("kept due to the resource policy"), "{said}");
        for crd in crds {
            let kept = crds_api.get(crd).await.expect("the CRD is kept");
            assert!(kept.metadata.deletion_timestamp.is_none(), "{crd}");
        }
        let gone = kube::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client, &ns)
            .get_opt(&release)
            .await
            .unwrap();
        assert!(gone.is_none(), "the release's Deployment is deleted");
    })
    .await;
}
