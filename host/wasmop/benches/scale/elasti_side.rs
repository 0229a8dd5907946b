//! KubeElasti, as `scripts/peers.sh kubeelasti` builds it: its chart's accounts, RBAC,
//! Services and Deployments (whose kwok pods stand for its operator and resolver pods), `n`
//! ElastiServices of the same shape as wasmop's ElasticServices, and its real operator and
//! resolver processes in a network namespace of their own (`netns.rs`: both listen on every
//! interface), reaching the API server, the fake Prometheus and the backend through forwarded
//! loopback ports.

use std::path::{Path, PathBuf};

use kube::Client;
use kube::api::ListParams;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;

use crate::common::{self, COOLDOWN_SECS, POLL, Shape, is_busy, svc_name};
use crate::fakes::{Backend, FakePrometheus};
use crate::netns::{Netns, Proc, ServiceAccount, Spec};

/// The chart's operator ServiceAccount (release `elasti`).
pub const OPERATOR_SA: &str = "elasti-operator-controller-manager";
/// The chart's resolver ServiceAccount.
pub const RESOLVER_SA: &str = "elasti-resolver";
/// The namespace `scripts/peers.sh` renders the chart for.
const PLACEHOLDER: &str = "elasti-bench-placeholder";
/// Kinds of the rendered chart the benchmark applies (its CRD is applied apart, once).
const CHART_KINDS: [&str; 7] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "Deployment",
];
/// The resolver's internal port: the chart's 8013 is the operator's port too, and here both
/// share one network namespace.
const RESOLVER_INTERNAL_PORT: u16 = 8014;

/// The build of `scripts/peers.sh kubeelasti`: `$WASMOP_KUBEELASTI_DIR`, else the newest
/// `${WASMOP_CACHE:-~/.cache/wasmop}/peers/kubeelasti-*` holding both binaries.
///
/// # Errors
/// When there is none, saying how to build it.
pub fn find() -> Result<PathBuf, String> {
    let complete = |d: &Path| {
        [
            "bin/elasti-operator",
            "bin/elasti-resolver",
            "crd.yaml",
            "chart.yaml",
        ]
        .iter()
        .all(|f| d.join(f).is_file())
    };
    if let Some(dir) = std::env::var_os("WASMOP_KUBEELASTI_DIR").map(PathBuf::from) {
        return if complete(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "WASMOP_KUBEELASTI_DIR={} is not a build of scripts/peers.sh kubeelasti",
                dir.display()
            ))
        };
    }
    let cache = std::env::var_os("WASMOP_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/wasmop"),
        PathBuf::from,
    );
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache.join("peers"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("kubeelasti-"))
                && complete(p)
        })
        .collect();
    found.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    found
        .pop()
        .ok_or_else(|| "no KubeElasti build: run scripts/peers.sh kubeelasti".to_owned())
}

/// The audit users of KubeElasti's processes in `ns`.
pub fn users(ns: &str) -> Vec<String> {
    vec![
        wasmop_tests::dr::sa_user(ns, OPERATOR_SA),
        wasmop_tests::dr::sa_user(ns, RESOLVER_SA),
    ]
}

/// The name KubeElasti gives the private Service of Service `service`.
pub fn private_service(service: &str) -> String {
    let hash = hex::encode(sha2::Sha256::digest(service.as_bytes()));
    format!("elasti-{service}-pvt-{}", &hash[..10])
}

/// The cluster-scoped objects the chart created; deleted on drop.
pub struct ClusterObjects(Vec<(String, String)>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = wasmop_tests::kubectl()
                .args(["delete", kind, name, "--ignore-not-found", "--wait=false"])
                .output();
        }
    }
}

/// Applies the rendered chart's [`CHART_KINDS`] in `ns` (its Deployments' pods are kwok's).
///
/// # Panics
/// When kubectl fails.
pub fn install_chart(peer: &Path, ns: &str, dir: &Path) -> ClusterObjects {
    let text = std::fs::read_to_string(peer.join("chart.yaml"))
        .expect("read chart.yaml")
        .replace(PLACEHOLDER, ns);
    let mut kept = Vec::new();
    let mut cluster = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let Ok(v) = Value::deserialize(doc) else {
            continue;
        };
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        if !CHART_KINDS.contains(&kind.as_str()) {
            continue;
        }
        if kind.starts_with("Cluster") {
            cluster.push((
                kind.to_lowercase(),
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ));
        }
        kept.push(v);
    }
    let file = dir.join(format!("{ns}-chart.json"));
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": kept}))
            .expect("JSON"),
    )
    .expect("write the chart");
    let objects = ClusterObjects(cluster);
    wasmop_tests::kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=wasmop-bench",
        "-f",
        file.to_str().expect("a UTF-8 path"),
    ]);
    objects
}

/// The Deployments, Services and ElastiServices of `shape` for namespace `ns`.
pub fn objects(shape: &Shape, prometheus_url: &str, backend_port: u16) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0..shape.services {
        let name = svc_name(i);
        out.push(common::service_deployment(&name, i32::from(is_busy(i))));
        out.push(common::service(&name, backend_port));
        out.push(json!({
            "apiVersion": "elasti.truefoundry.com/v1alpha1", "kind": "ElastiService",
            "metadata": {"name": name},
            "spec": {"service": name, "minTargetReplicas": 1, "cooldownPeriod": COOLDOWN_SECS,
                     "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "triggers": [common::trigger("elasti", i, prometheus_url)]}
        }));
    }
    out
}

/// KubeElasti's operator and resolver, running.
pub struct Running {
    netns: Netns,
    /// The unix socket forwarded to the resolver's proxy port.
    pub proxy: PathBuf,
    /// The operator's process id.
    pub operator_pid: u32,
    /// The resolver's process id.
    pub resolver_pid: u32,
}

impl Running {
    /// Whether the namespace's child still runs.
    pub fn alive(&mut self) -> bool {
        self.netns.alive()
    }

    /// The child's log.
    pub fn log(&self) -> String {
        self.netns.log()
    }
}

/// The API server's `host:port` and CA (PEM) from the admin kubeconfig.
fn api_server() -> (String, String) {
    let server = wasmop_tests::kubectl_ok(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let ca = wasmop_tests::kubectl_ok(&[
        "config",
        "view",
        "--minify",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let ca = base64_decode(ca.trim());
    let authority = server
        .trim()
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned();
    (authority, ca)
}

/// Standard base64 to text (the kubeconfig's CA).
fn base64_decode(s: &str) -> String {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => continue,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The token of a kubeconfig written by deploy/dev/sa-kubeconfig.sh.
fn token_of(kubeconfig: &Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("read the kubeconfig");
    let v: Value = serde_yaml::from_str(&text).expect("a kubeconfig");
    v["users"][0]["user"]["token"]
        .as_str()
        .expect("a token")
        .to_owned()
}

/// Starts KubeElasti's operator (the chart's arguments: `--leader-elect`, probes on :8081,
/// no metrics server; `POLLING_INTERVAL` = [`POLL`]) and resolver (the chart's defaults) for
/// `shape` in `ns`, each as its chart ServiceAccount.
///
/// # Panics
/// When the namespace's child does not start them.
pub async fn start(
    peer: &Path,
    ns: &str,
    shape: &Shape,
    prometheus: &FakePrometheus,
    backend: &Backend,
    dir: &Path,
) -> Running {
    let (api, ca_pem) = api_server();
    let api_socket = common::socket_path(dir, &format!("{ns}-api.sock"));
    crate::fakes::forward_unix_to_tcp(&api_socket, api.clone());
    let operator_kubeconfig = wasmop_tests::service_account_kubeconfig(ns, OPERATOR_SA);
    let resolver_kubeconfig = wasmop_tests::service_account_kubeconfig(ns, RESOLVER_SA);
    let proxy = common::socket_path(dir, &format!("{ns}-proxy.sock"));

    let mut hosts = String::from("127.0.0.1 localhost\n");
    hosts.push_str(&format!(
        "127.0.0.1 elasti-operator-controller-service.{ns}.svc.cluster.local\n"
    ));
    for i in 0..shape.services {
        hosts.push_str(&format!(
            "127.0.0.2 {}.{ns}.svc.cluster.local\n",
            private_service(&svc_name(i))
        ));
    }
    let (api_host, api_port) = api.rsplit_once(':').expect("host:port");
    let common_env: Vec<(String, String)> = [
        ("KUBERNETES_CLUSTER_DOMAIN", "cluster.local".to_owned()),
        ("ELASTI_OPERATOR_NAMESPACE", ns.to_owned()),
        (
            "ELASTI_OPERATOR_DEPLOYMENT_NAME",
            "elasti-operator-controller-manager".to_owned(),
        ),
        (
            "ELASTI_OPERATOR_SERVICE_NAME",
            "elasti-operator-controller-service".to_owned(),
        ),
        ("ELASTI_OPERATOR_PORT", "8013".to_owned()),
        ("ELASTI_RESOLVER_NAMESPACE", ns.to_owned()),
        (
            "ELASTI_RESOLVER_DEPLOYMENT_NAME",
            "elasti-resolver".to_owned(),
        ),
        (
            "ELASTI_RESOLVER_SERVICE_NAME",
            "elasti-resolver-service".to_owned(),
        ),
        ("ELASTI_RESOLVER_PORT", RESOLVER_INTERNAL_PORT.to_string()),
        ("ELASTI_RESOLVER_PROXY_PORT", "8012".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut operator_env = common_env.clone();
    operator_env.extend([
        (
            "KUBECONFIG".to_owned(),
            operator_kubeconfig.display().to_string(),
        ),
        (
            "POLLING_INTERVAL".to_owned(),
            format!("{}s", POLL.as_secs()),
        ),
    ]);
    let mut resolver_env = common_env;
    resolver_env.extend([
        ("KUBERNETES_SERVICE_HOST".to_owned(), api_host.to_owned()),
        ("KUBERNETES_SERVICE_PORT".to_owned(), api_port.to_owned()),
    ]);
    let spec = Spec {
        outward: vec![
            (api.clone(), api_socket),
            (prometheus.addr.to_string(), prometheus.unix.clone()),
            ("127.0.0.2:80".to_owned(), backend.unix.clone()),
        ],
        inward: vec![(proxy.clone(), "127.0.0.1:8012".to_owned())],
        hosts,
        service_account: Some(ServiceAccount {
            token: token_of(&resolver_kubeconfig),
            ca_pem,
            namespace: ns.to_owned(),
        }),
        processes: vec![
            Proc {
                bin: peer.join("bin/elasti-operator"),
                args: [
                    "--leader-elect",
                    "--health-probe-bind-address=:8081",
                    "--metrics-bind-address=0",
                ]
                .map(str::to_owned)
                .to_vec(),
                env: operator_env,
                log: dir.join(format!("{ns}-elasti-operator.log")),
            },
            Proc {
                bin: peer.join("bin/elasti-resolver"),
                args: Vec::new(),
                env: resolver_env,
                log: dir.join(format!("{ns}-elasti-resolver.log")),
            },
        ],
        pids: dir.join(format!("{ns}-elasti.pids")),
        hosts_file: dir.join(format!("{ns}-hosts")),
    };
    let netns = Netns::start(&spec, dir, &format!("{ns}-netns")).await;
    let (operator_pid, resolver_pid) = (netns.pids[0], netns.pids[1]);
    Running {
        netns,
        proxy,
        operator_pid,
        resolver_pid,
    }
}

/// (converged, total): ElastiServices whose `status.mode` is `serve` for a busy service and
/// `proxy` for an idle one.
pub async fn converged(client: &Client, ns: &str) -> (usize, usize) {
    let api = common::dynamic_api(
        client,
        Some(ns),
        "elasti.truefoundry.com/v1alpha1",
        "ElastiService",
    );
    let Ok(list) = api.list(&ListParams::default()).await else {
        return (0, 0);
    };
    let ok = list
        .items
        .iter()
        .filter(|o| {
            let i: usize = o
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix("svc-")?.parse().ok())
                .unwrap_or(usize::MAX);
            let want = if is_busy(i) { "serve" } else { "proxy" };
            o.data["status"]["mode"] == want
        })
        .count();
    (ok, list.items.len())
}
