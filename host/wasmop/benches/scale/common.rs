//! What both sides share: the shape of a size, namespaces, workload objects, process figures
//! from /proc, percentiles and one HTTP/1.1 request over any stream.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Every `BUSY_EVERY`th service's trigger votes up; the others are idle, at zero.
pub const BUSY_EVERY: usize = 5;
/// The cooldown of every ElasticService and ElastiService, in seconds.
pub const COOLDOWN_SECS: u64 = 60;
/// How often both operators evaluate their triggers.
pub const POLL: Duration = Duration::from_secs(30);
/// Pods per ProxyRestartPolicy (one Deployment each).
pub const PODS_PER_POLICY: usize = 200;
/// The label the benchmark puts on the custom resources it creates (the operator's
/// `--selector`) and on the namespaces it creates.
pub const BENCH_LABEL: &str = "wasmop.dev/bench";

/// How many objects of each kind a size has: `n` ElasticServices (ElastiServices), and the
/// other kinds scaled from 1,000 ElasticServices : 200 DynamicEnvs over 50 VirtualServices :
/// 50 ProxyRestartPolicies over 10,000 pods.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// ElasticServices, each with a Deployment and a Service.
    pub services: usize,
    /// DynamicEnvs.
    pub dynamic_envs: usize,
    /// VirtualServices (each with a Deployment, a Service and a DestinationRule).
    pub virtual_services: usize,
    /// ProxyRestartPolicies, each over a Deployment of [`PODS_PER_POLICY`] pods.
    pub policies: usize,
}

impl Shape {
    /// The shape of size `n`.
    pub fn of(n: usize) -> Self {
        Self {
            services: n,
            dynamic_envs: (200 * n / 1000).max(1),
            virtual_services: (50 * n / 1000).max(1),
            policies: (50 * n / 1000).max(1),
        }
    }

    /// Pods selected by the policies.
    pub fn policy_pods(&self) -> usize {
        self.policies * PODS_PER_POLICY
    }

    /// The custom resources wasmop reconciles.
    pub fn wasmop_objects(&self) -> usize {
        self.services + self.dynamic_envs + self.policies
    }

    /// Indices of the idle services (at zero), in order.
    pub fn idle(&self) -> Vec<usize> {
        (0..self.services).filter(|i| !is_busy(*i)).collect()
    }
}

/// The name of service `i` (its Deployment, Service and ElasticService or ElastiService).
pub fn svc_name(i: usize) -> String {
    format!("svc-{i:04}")
}

/// Whether service `i`'s trigger votes up from the start.
pub fn is_busy(i: usize) -> bool {
    i.is_multiple_of(BUSY_EVERY)
}

/// The metric of service `i` of `side` (`wasmop` or `elasti`) at the fake Prometheus.
pub fn metric(side: &str, i: usize) -> String {
    format!("load_{side}_{i:04}")
}

/// The `Api` of kind `api_version`/`kind` in `ns` (all namespaces for a cluster-scoped kind
/// when `ns` is `None`).
pub fn dynamic_api(
    client: &Client,
    ns: Option<&str>,
    api_version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Creates `objects` (JSON with apiVersion and kind) in `ns`, 16 at a time.
///
/// # Panics
/// When the API server refuses one.
pub async fn create_all(client: &Client, ns: Option<&str>, objects: Vec<Value>) {
    futures::stream::iter(objects)
        .map(|obj| {
            let client = client.clone();
            async move {
                let api = dynamic_api(
                    &client,
                    ns,
                    obj["apiVersion"].as_str().expect("apiVersion"),
                    obj["kind"].as_str().expect("kind"),
                );
                let obj: DynamicObject = serde_json::from_value(obj).expect("an object");
                api.create(&PostParams::default(), &obj)
                    .await
                    .unwrap_or_else(|e| {
                        panic!(
                            "create {}: {e}",
                            obj.metadata.name.as_deref().unwrap_or("?")
                        )
                    });
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

/// Deployment `name` of `replicas` pods labelled `app=<name>` and `bench-backend=true` (the
/// pods the backend answers for).
pub fn service_deployment(name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name, "bench-backend": "true"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}}
    })
}

/// Service `name` on port 80 to `target_port` of the pods of Deployment `name`.
pub fn service(name: &str, target_port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name},
                 "ports": [{"name": "http", "port": 80, "targetPort": target_port}]}
    })
}

/// The trigger metadata of service `i` of `side` (the same for both operators).
pub fn trigger(side: &str, i: usize, prometheus_url: &str) -> Value {
    json!({"type": "prometheus", "metadata": {
        "query": format!("sum({})", metric(side, i)),
        "serverAddress": prometheus_url,
        "threshold": "1",
        "uptimeFilter": "job=\"bench\"",
    }})
}

/// Waits until every Deployment in `ns` has all its replicas ready; returns how long it took.
///
/// # Panics
/// When they are not within `timeout`.
pub async fn wait_deployments_ready(client: &Client, ns: &str, timeout: Duration) -> Duration {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let started = std::time::Instant::now();
    let mut last = (0, 0);
    while started.elapsed() < timeout {
        if let Ok(list) = api.list(&ListParams::default()).await {
            let want: i32 = list
                .items
                .iter()
                .map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))
                .sum();
            let ready: i32 = list
                .items
                .iter()
                .map(|d| {
                    d.status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0)
                })
                .sum();
            last = (ready, want);
            if ready == want {
                return started.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    panic!(
        "Deployments of {ns} not ready after {timeout:?}: {} of {} pods",
        last.0, last.1
    );
}

/// A namespace of the benchmark. [`BenchNamespace::delete`] releases the finalizers left on
/// the custom resources of both operators (stopped by then) and deletes it; dropping it without
/// that does the same with kubectl, more slowly.
pub struct BenchNamespace {
    /// Its name.
    pub name: String,
    deleted: bool,
}

/// Kinds whose finalizers a stopped operator leaves behind: (apiVersion, kind).
const FINALIZED: [(&str, &str); 3] = [
    ("wasmop.dev/v1alpha1", "ElasticService"),
    ("wasmop.dev/v1alpha1", "DynamicEnv"),
    ("elasti.truefoundry.com/v1alpha1", "ElastiService"),
];

impl BenchNamespace {
    /// Creates namespace `bench-<hint>-<unique>`.
    ///
    /// # Panics
    /// When the API server refuses it.
    pub async fn create(client: &Client, hint: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let name = format!("bench-{hint}-{:x}", (nanos >> 12) & 0xff_ffff);
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {BENCH_LABEL: "true"}}
        }))
        .expect("a namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create the namespace");
        Self {
            name,
            deleted: false,
        }
    }

    /// Releases the finalizers of [`FINALIZED`] kinds in it (16 at a time) and deletes it
    /// without waiting.
    pub async fn delete(mut self, client: &Client) {
        for (api_version, kind) in FINALIZED {
            let api = dynamic_api(client, Some(&self.name), api_version, kind);
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            futures::stream::iter(list.items)
                .map(|o| {
                    let api = api.clone();
                    async move {
                        let name = o.metadata.name.unwrap_or_default();
                        let _ = api
                            .patch(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                            )
                            .await;
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await;
        }
        let _ = Api::<Namespace>::all(client.clone())
            .delete(&self.name, &DeleteParams::background())
            .await;
        self.deleted = true;
    }
}

impl Drop for BenchNamespace {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        wasmop_tests::release_finalizers(&self.name);
        if let Ok(out) = wasmop_tests::kubectl()
            .args([
                "get",
                "elastiservices.elasti.truefoundry.com",
                "-n",
                &self.name,
            ])
            .args(["-o", "name"])
            .output()
        {
            for object in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = wasmop_tests::kubectl()
                    .args(["patch", object, "-n", &self.name, "--type=merge"])
                    .args(["-p", r#"{"metadata":{"finalizers":null}}"#])
                    .output();
            }
        }
        let _ = wasmop_tests::kubectl()
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .output();
    }
}

/// CPU time (user + system) of process `pid` so far, in seconds (USER_HZ 100).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Resident memory of process `pid`, in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
}

/// The machine's load average.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

/// Latencies in seconds: count, p50 and p99 (nearest rank), and how many trials failed.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    /// The successful trials, in seconds.
    pub samples: Vec<f64>,
    /// Trials without an answer (or write) in time.
    pub failed: usize,
    /// Why the figure does not apply, when it does not.
    pub not_applicable: Option<String>,
}

impl Latencies {
    /// The `q` quantile (0..=1) by nearest rank.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut s = self.samples.clone();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
        Some(s[rank - 1])
    }

    /// "p50 / p99 (n, failed)" in milliseconds, or why not.
    pub fn describe(&self) -> String {
        if let Some(why) = &self.not_applicable {
            return format!("n/a: {why}");
        }
        match (self.quantile(0.5), self.quantile(0.99)) {
            (Some(p50), Some(p99)) => format!(
                "p50 {:.0} ms, p99 {:.0} ms ({} trials{})",
                p50 * 1e3,
                p99 * 1e3,
                self.samples.len(),
                if self.failed > 0 {
                    format!(", {} failed", self.failed)
                } else {
                    String::new()
                }
            ),
            _ => format!("no successful trial ({} failed)", self.failed),
        }
    }
}

/// A scratch directory for this run's sockets, specs and logs: `target/e2e-dumps/bench-scale-<pid>`.
pub fn scratch_dir() -> PathBuf {
    let dir = wasmop_tests::dump_dir().join(format!("bench-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// A unix socket path under `dir` short enough for `sockaddr_un` (108 bytes); falls back to
/// the temporary directory.
pub fn socket_path(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    if p.as_os_str().len() < 100 {
        return p;
    }
    let short = std::env::temp_dir().join(format!("wasmop-bench-{}", std::process::id()));
    std::fs::create_dir_all(&short).expect("create the socket directory");
    short.join(name)
}

/// Counts by key, in key order.
pub type Counts = BTreeMap<String, u64>;
