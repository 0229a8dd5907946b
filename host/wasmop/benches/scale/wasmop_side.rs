//! wasmop's side: `n` ElasticServices (a Deployment, a Service and a Prometheus trigger each),
//! DynamicEnvs over VirtualServices and ProxyRestartPolicies over pods in proportion, two
//! `wasmop run` instances sharing the DR lease (one active, one passive) and `wasmop
//! resolver`, each under a ServiceAccount of the benchmark's namespace bound to the chart's
//! ClusterRoles, so that the audit log tells their requests from any other test's.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube::Client;
use kube::api::ListParams;
use serde_json::{Value, json};
use wasmop_tests::dr::sa_user;
use wasmop_tests::restart::{NEW_PROXY, sidecar_template};
use wasmop_tests::{Operator, Process, routing};

use crate::common::{
    self, BENCH_LABEL, COOLDOWN_SECS, PODS_PER_POLICY, POLL, Shape, is_busy, svc_name,
};
use crate::fakes::FakePrometheus;

/// The ServiceAccounts of the three processes, in the benchmark's namespace.
pub const ACTIVE_SA: &str = "bench-active";
/// The second instance, passive while the first holds the lease.
pub const PASSIVE_SA: &str = "bench-passive";
/// The resolver.
pub const RESOLVER_SA: &str = "bench-resolver";

/// The audit users of wasmop's processes in `ns`.
pub fn users(ns: &str) -> Vec<String> {
    [ACTIVE_SA, PASSIVE_SA, RESOLVER_SA]
        .iter()
        .map(|sa| sa_user(ns, sa))
        .collect()
}

/// The ServiceAccounts and bindings of the three processes; the ClusterRoleBindings are deleted
/// on drop (the rest goes with the namespace).
pub struct Accounts {
    cluster_bindings: Vec<String>,
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for name in &self.cluster_bindings {
            let _ = wasmop_tests::kubectl()
                .args(["delete", "clusterrolebinding", name, "--ignore-not-found"])
                .output();
        }
    }
}

/// Creates the ServiceAccounts: the operator's two with the chart's ClusterRole `wasmop` and,
/// in `ns`, `wasmop-namespace`; the resolver's with `wasmop-resolver` in `ns`.
///
/// # Panics
/// When kubectl fails.
pub fn accounts(ns: &str, dir: &Path) -> Accounts {
    wasmop_tests::install_crds();
    wasmop_tests::install_operator_rbac();
    let mut yaml = String::new();
    let mut cluster_bindings = Vec::new();
    for sa in [ACTIVE_SA, PASSIVE_SA, RESOLVER_SA] {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {sa}, namespace: {ns}}}\n"
        ));
    }
    for sa in [ACTIVE_SA, PASSIVE_SA] {
        let binding = format!("{ns}-{sa}");
        yaml.push_str(&format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {sa}, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasmop-namespace}}\n\
             subjects: [{{kind: ServiceAccount, name: {sa}, namespace: {ns}}}]\n\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {binding}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasmop}}\n\
             subjects: [{{kind: ServiceAccount, name: {sa}, namespace: {ns}}}]\n"
        ));
        cluster_bindings.push(binding);
    }
    yaml.push_str(&format!(
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {RESOLVER_SA}, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasmop-resolver}}\n\
         subjects: [{{kind: ServiceAccount, name: {RESOLVER_SA}, namespace: {ns}}}]\n"
    ));
    let file = dir.join(format!("{ns}-accounts.yaml"));
    std::fs::write(&file, yaml).expect("write the accounts");
    let accounts = Accounts { cluster_bindings };
    wasmop_tests::kubectl_ok(&["apply", "-f", file.to_str().expect("a UTF-8 path")]);
    accounts
}

/// The registry: the chart's default plugins, `scaling-prometheus` granted the fake
/// Prometheus.
fn registry(prometheus: &FakePrometheus) -> Value {
    let doc = format!(
        "plugins:\n\
         - {{name: routing-istio, hook: routing, source: builtin://routing-istio}}\n\
         - {{name: scaling-prometheus, hook: scaling, source: builtin://scaling-prometheus, limits: {{timeoutMs: 5000}}, grants: {{allowedHosts: [\"{}\"]}}}}\n\
         - {{name: restart-sidecar, hook: restart, source: builtin://restart-sidecar}}\n\
         - {{name: dr-lease, hook: dr, source: builtin://dr-lease, settings: {{backend: k8s-lease, failureThreshold: 3, leaseName: wasmop, waitTimeInSeconds: 5, warmupSeconds: 0}}}}\n\
         defaults: {{routing: routing-istio, scaling: scaling-prometheus, restart: restart-sidecar, dr: dr-lease}}\n",
        prometheus.addr
    );
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": doc}})
}

/// The namespaced objects of `shape` in `ns`, and the cluster-scoped policies.
pub fn objects(
    shape: &Shape,
    ns: &str,
    prometheus: &FakePrometheus,
    backend_port: u16,
) -> (Vec<Value>, Vec<Value>) {
    let label = json!({BENCH_LABEL: ns});
    let mut out = vec![registry(prometheus)];
    // kwok pods standing for the resolver's: the endpoints of the proxy-mode slices.
    let mut resolver_pods = common::service_deployment("wasmop-resolver-pods", 1);
    resolver_pods["spec"]["template"]["metadata"]["labels"] =
        json!({"app": "wasmop-resolver-pods", "app.kubernetes.io/name": "wasmop-resolver"});
    resolver_pods["spec"]["selector"]["matchLabels"] = json!({"app": "wasmop-resolver-pods"});
    out.push(resolver_pods);
    for i in 0..shape.services {
        let name = svc_name(i);
        out.push(common::service_deployment(&name, i32::from(is_busy(i))));
        out.push(common::service(&name, backend_port));
        out.push(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
            "metadata": {"name": name, "labels": label},
            "spec": {"service": name, "minTargetReplicas": 1, "cooldownPeriod": COOLDOWN_SECS,
                     "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "triggers": [common::trigger("wasmop", i, &prometheus.url())]}
        }));
    }
    for k in 0..shape.virtual_services {
        let app = format!("vs-{k:02}");
        out.extend([
            routing::deployment(&app),
            routing::service(&app),
            routing::destination_rule(&app),
            routing::virtual_service(&app),
        ]);
    }
    for j in 0..shape.dynamic_envs {
        let app = format!("vs-{:02}", j % shape.virtual_services);
        out.push(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv",
            "metadata": {"name": format!("de-{j:03}"), "labels": label},
            "spec": {"istioMatches": [{"headers": {"end-user": {"exact": format!("user-{j}")}}}],
                     "subsets": [{"name": app, "namespace": ns,
                                  "containers": [{"containerName": app,
                                                  "image": "docker.io/istio/examples-bookinfo-reviews-v3:1.20.3"}]}]}
        }));
    }
    let mut policies = Vec::new();
    for p in 0..shape.policies {
        let app = format!("sc-{p:02}");
        out.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app},
            "spec": {"replicas": PODS_PER_POLICY, "selector": {"matchLabels": {"app": app}},
                     "template": sidecar_template(&app, NEW_PROXY, json!({}))}
        }));
        policies.push(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "ProxyRestartPolicy",
            "metadata": {"name": format!("{ns}-{app}"), "labels": label},
            "spec": {"proxy": {"image": NEW_PROXY},
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                     "podSelector": {"matchLabels": {"app": app}}}
        }));
    }
    (out, policies)
}

/// Deletes the ProxyRestartPolicies of `ns` (cluster-scoped) on drop.
pub struct Policies(pub String);

impl Drop for Policies {
    fn drop(&mut self) {
        let _ = wasmop_tests::kubectl()
            .args(["delete", "proxyrestartpolicies", "-l"])
            .arg(format!("{BENCH_LABEL}={}", self.0))
            .args(["--wait=false", "--ignore-not-found"])
            .output();
    }
}

/// wasmop's processes, running.
pub struct Running {
    /// The instance that took the lease first.
    pub active: Operator,
    /// The other.
    pub passive: Operator,
    /// `wasmop resolver`.
    pub resolver: Process,
    /// Its proxy address.
    pub resolver_addr: SocketAddr,
}

const BIN: &str = env!("CARGO_BIN_EXE_wasmop");

/// Starts the active instance and waits until it holds the lease, then the passive one and
/// the resolver.
///
/// # Panics
/// When one does not start.
pub async fn start(ns: &str) -> Running {
    let selector = format!("{BENCH_LABEL}={ns}");
    let poll = format!("{}s", POLL.as_secs());
    let args = ["--selector", &selector, "--poll-interval", &poll];
    let env = [("WASMOP_LOG", "info")];
    let kubeconfig = wasmop_tests::service_account_kubeconfig(ns, ACTIVE_SA);
    let mut active =
        wasmop_tests::dr::start_operator(BIN, ns, ACTIVE_SA, &kubeconfig, &args, &env).await;
    active.wait_active(Duration::from_secs(60)).await;
    let kubeconfig = wasmop_tests::service_account_kubeconfig(ns, PASSIVE_SA);
    let passive =
        wasmop_tests::dr::start_operator(BIN, ns, PASSIVE_SA, &kubeconfig, &args, &env).await;
    let (resolver, resolver_addr) = resolver(ns).await;
    Running {
        active,
        passive,
        resolver,
        resolver_addr,
    }
}

/// `wasmop resolver` on loopback, watching `ns`, dialing kwok pod IPs on loopback.
async fn resolver(ns: &str) -> (Process, SocketAddr) {
    let kubeconfig = wasmop_tests::service_account_kubeconfig(ns, RESOLVER_SA);
    let addr: SocketAddr = format!("127.0.0.1:{}", wasmop_tests::free_port())
        .parse()
        .expect("an address");
    let admin = format!("127.0.0.1:{}", wasmop_tests::free_port());
    let mut cmd = Command::new(BIN);
    cmd.args(["resolver", "--watch-namespace", ns, "--timeout", "60s"])
        .args(["--listen", &addr.to_string(), "--admin-listen", &admin])
        .args(["--dial-prefix-map", "10.0.0.0/8=127.0.0.0/8"])
        .args(["--identity", RESOLVER_SA])
        .env("KUBECONFIG", kubeconfig)
        .env("WASMOP_LOG", "info");
    let mut process = Process::spawn(
        cmd,
        wasmop_tests::dump_dir().join(format!("{ns}-resolver.log")),
    );
    wasmop_tests::eventually(
        "the resolver to be ready",
        Duration::from_secs(60),
        async || {
            assert!(process.alive(), "the resolver exited:\n{}", process.log());
            wasmop_tests::http_get(&admin, "/readyz").filter(|(s, _)| *s == 200)
        },
    )
    .await;
    (process, addr)
}

/// Progress towards convergence: (kind, converged, total) for ElasticServices (`serve` when
/// busy, `proxy` when idle, and `Ready`), DynamicEnvs (`ready`) and ProxyRestartPolicies
/// (`Ready` at their generation).
pub async fn converged(client: &Client, ns: &str) -> Vec<(&'static str, usize, usize)> {
    let list = |api_version: &'static str, kind: &'static str, all: bool| {
        let client = client.clone();
        let ns = ns.to_owned();
        async move {
            let api =
                common::dynamic_api(&client, (!all).then_some(ns.as_str()), api_version, kind);
            api.list(&ListParams::default().labels(&format!("{BENCH_LABEL}={ns}")))
                .await
                .map(|l| l.items)
                .unwrap_or_default()
        }
    };
    let condition = |o: &Value, type_: &str| -> Option<Value> {
        o["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
    };
    let es = list("wasmop.dev/v1alpha1", "ElasticService", false).await;
    let es_ok = es
        .iter()
        .filter(|o| {
            let v = serde_json::to_value(o).unwrap_or_default();
            let i: usize = o
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix("svc-")?.parse().ok())
                .unwrap_or(usize::MAX);
            let want = if is_busy(i) { "serve" } else { "proxy" };
            v["status"]["mode"] == want
                && condition(&v, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .count();
    let de = list("wasmop.dev/v1alpha1", "DynamicEnv", false).await;
    let de_ok = de
        .iter()
        .filter(|o| o.data["status"]["state"] == "ready")
        .count();
    let prp = list("wasmop.dev/v1alpha1", "ProxyRestartPolicy", true).await;
    let prp_ok = prp
        .iter()
        .filter(|o| {
            o.data["status"]["state"] == "Ready"
                && o.data["status"]["observedGeneration"].as_i64() == o.metadata.generation
        })
        .count();
    vec![
        ("ElasticService", es_ok, es.len()),
        ("DynamicEnv", de_ok, de.len()),
        ("ProxyRestartPolicy", prp_ok, prp.len()),
    ]
}
