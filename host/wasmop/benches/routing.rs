//! Routing benchmark: what planning DynamicEnvs costs, and how fast the controller brings
//! many of them to `ready` on a real API server.
//!
//! 1. **Plan 1,000 DynamicEnvs against VirtualServices of 50 routes.** One snapshot of 1,000
//!    bookinfo-style services, each with a Deployment, a Service, a DestinationRule and a
//!    VirtualService of 50 HTTP routes (6 of them to the default version), and 1,000
//!    DynamicEnvs with two istioMatches, each cloning one of them: one `plan()` call makes
//!    1,000 router calls (12 copies each) and plans 3,000 writes. The plan runs in a child
//!    process per router so that each one's peak memory (VmHWM, reset after setup through
//!    `/proc/self/clear_refs`) is its own: the builtin `routing-istio` component through the
//!    plugin host (2 concurrent calls, as on a 2-CPU pod) and the same logic as a native
//!    library. Both must produce the same plan. Median of [`PLAN_ROUNDS`] rounds after a
//!    warm-up; target: under 1 s through wasm, judged for both components (pooling, the
//!    default, and on-demand instances).
//! 2. **Reconcile 200 DynamicEnvs to ready** on the local control plane (`KUBECONFIG` set,
//!    e.g. `eval "$(deploy/dev/cluster.sh env)"`; skipped with a message otherwise): the
//!    `wasmop` binary under the chart's RBAC, bookinfo-style `reviews` and `details`, 200
//!    DynamicEnvs created at once, each cloning `reviews` for its own `end-user` header, all
//!    routing through the one `reviews` VirtualService. Wall time from the first create until
//!    all are `ready`, the operator's API requests per DynamicEnv from the API server's audit
//!    log (`$WASMOP_DEV_DIR/logs/audit.log`), the requests of the quiet period after, then the
//!    same for deleting them all.
//!
//! Run with `cargo bench -p wasmop --bench routing` (`scripts/bench.sh routing` also starts the
//! control plane for section 2).

#[path = "../tests/common/native_router.rs"]
mod native_router;

use std::collections::BTreeMap;
use std::io::{BufRead, Seek};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasmop_controllers::routing::{PlanConfig, Router, Snapshot, WasmRouter, plan};
use wasmop_plugin_host::registry::{LocalFetch, Registry, RegistryConfig};
use wasmop_plugin_host::{Hook, PluginRuntime, RuntimeOptions};

/// DynamicEnvs (and services) of section 1.
const DYNAMIC_ENVS: usize = 1_000;
/// Routes of each VirtualService of section 1.
const ROUTES: usize = 50;
/// Measured plans per router.
const PLAN_ROUNDS: usize = 3;
/// Target of one plan through wasm.
const PLAN_TARGET: Duration = Duration::from_secs(1);
/// DynamicEnvs of section 2.
const RECONCILED: usize = 200;
/// The routers of section 1: the native library, the component with on-demand instances
/// (`wasmop run --pooling=false`), the component with wasmtime's pooling allocator (the
/// default).
const ROUTERS: [&str; 3] = ["native", "wasm", "wasm-pooling"];
/// The child process's router (section 1).
const CHILD_ENV: &str = "WASMOP_BENCH_ROUTING_CHILD";

fn main() {
    if let Ok(router) = std::env::var(CHILD_ENV) {
        child(&router);
        return;
    }
    println!("wasmop routing benchmark");
    println!(
        "cpus: {}, load average at start: {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    // `WASMOP_BENCH_ROUTING_ONLY=reconcile`: section 2 alone; `=wasmop|upstream`: section 2 for
    // that side alone (to profile it).
    let only = std::env::var("WASMOP_BENCH_ROUTING_ONLY").ok();
    if only.is_none() {
        plan_section();
    }
    reconcile_section(only.as_deref());
    println!("\nload average at end: {}", load_average());
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

/// `field` (e.g. `VmHWM:`) of /proc/self/status in MiB.
fn proc_mib(field: &str) -> f64 {
    proc_mib_of("self", field)
}

/// `field` of /proc/`pid`/status in MiB (`pid` a number or `self`).
fn proc_mib_of(pid: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// CPU time (user + system) of this process so far, in seconds (`/proc/self/stat`, USER_HZ 100).
fn cpu_seconds() -> f64 {
    cpu_seconds_of("self")
}

/// CPU time (user + system) of process `pid` (a number or `self`) so far, in seconds.
fn cpu_seconds_of(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

// ---- section 1 -----------------------------------------------------------------------------

/// The snapshot of section 1: `n` services with VirtualServices of `routes` routes and one
/// DynamicEnv per service.
fn snapshot(n: usize, routes: usize) -> Snapshot {
    let mut s = Snapshot::default();
    for i in 0..n {
        let app = format!("svc-{i:04}");
        let add = |s: &mut Snapshot, v: Value| {
            assert!(s.add(v).unwrap());
        };
        add(
            &mut s,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": app, "namespace": "bench", "labels": {"app": app}},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"app": app}},
                            "template": {"metadata": {"labels": {"app": app, "version": "shared"}},
                                         "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                                                  "env": [{"name": "A", "value": "1"}]}]}}}}),
        );
        add(
            &mut s,
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": app, "namespace": "bench"},
                   "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}}),
        );
        add(
            &mut s,
            json!({"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
                   "metadata": {"name": app, "namespace": "bench"},
                   "spec": {"host": app, "subsets": [{"name": "shared", "labels": {"version": "shared"}},
                                                     {"name": "v2", "labels": {"version": "v2"}}]}}),
        );
        let http: Vec<Value> = (0..routes)
            .map(|r| {
                let subset = if r == routes - 1 || r % 10 == 0 {
                    "shared"
                } else {
                    "v2"
                };
                let mut route = json!({
                    "name": format!("r{r}"),
                    "route": [{"destination": {"host": app, "subset": subset, "port": {"number": 80}}}],
                    "timeout": "5s",
                    "retries": {"attempts": 2, "perTryTimeout": "2s"}
                });
                if r != routes - 1 {
                    route["match"] = json!([{"uri": {"prefix": format!("/api/v1/resource-{r}")},
                                             "headers": {"x-tenant": {"exact": format!("t{r}")}}}]);
                }
                route
            })
            .collect();
        add(
            &mut s,
            json!({"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
                   "metadata": {"name": app, "namespace": "bench"},
                   "spec": {"hosts": [app], "http": http}}),
        );
        add(
            &mut s,
            json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv",
                   "metadata": {"name": format!("de-{i:04}"), "namespace": "bench"},
                   "spec": {"istioMatches": [{"headers": {"end-user": {"exact": format!("user-{i}")}}},
                                             {"sourceLabels": {"app": "tester"}}],
                            "subsets": [{"name": app, "namespace": "bench",
                                         "containers": [{"containerName": "app", "image": "registry.invalid/app:2"}]}]}}),
        );
    }
    s
}

/// sha256 of the plan's JSON, streamed.
fn plan_digest(p: &wasmop_controllers::routing::Plan) -> String {
    use sha2::Digest;
    struct Sink(sha2::Sha256);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut sink = Sink(sha2::Sha256::new());
    serde_json::to_writer(&mut sink, p).expect("serialize the plan");
    hex::encode(sink.0.finalize())
}

/// The child process of section 1: plans with `router` (`wasm` or `native`) and prints one
/// JSON line.
fn child(router: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cache = std::env::temp_dir().join(format!("wasmop-bench-routing-{}", std::process::id()));
    let router: Arc<dyn Router> = match router {
        "wasm" | "wasm-pooling" => {
            let runtime = PluginRuntime::new(RuntimeOptions {
                cache_dir: Some(cache.clone()),
                max_concurrent_calls: 2,
                pooling: router == "wasm-pooling",
                extra_ca_pem: None,
            })
            .expect("runtime");
            let registry = Registry::new(runtime);
            rt.block_on(registry.apply(RegistryConfig::default(), &LocalFetch::default()));
            Arc::new(WasmRouter(
                registry
                    .resolve(Hook::Routing, None)
                    .expect("routing-istio"),
            ))
        }
        _ => Arc::new(native_router::Native::default()),
    };
    let cfg = PlanConfig::default();
    let warm = snapshot(20, ROUTES);
    rt.block_on(plan(&warm, &router, &cfg));
    let s = snapshot(DYNAMIC_ENVS, ROUTES);
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let baseline = proc_mib("VmRSS:");
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut digest = String::new();
    for _ in 0..PLAN_ROUNDS {
        let (started, cpu_before) = (Instant::now(), cpu_seconds());
        let p = rt.block_on(plan(&s, &router, &cfg));
        times.push(started.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - cpu_before);
        assert_eq!(
            p.writes.len(),
            3 * DYNAMIC_ENVS,
            "a clone, a rule and routes each"
        );
        assert!(p.ir.errors().next().is_none(), "no errors");
        digest = plan_digest(&p);
    }
    let peak = proc_mib("VmHWM:");
    let _ = std::fs::remove_dir_all(&cache);
    println!(
        "{}",
        json!({"times": times, "cpu": cpu, "baseline_mib": baseline, "peak_mib": peak, "digest": digest})
    );
}

fn plan_section() {
    println!(
        "\n1. plan {DYNAMIC_ENVS} DynamicEnvs against VirtualServices of {ROUTES} routes (2 istioMatches each: {DYNAMIC_ENVS} router calls, 12 copies per call)"
    );
    let mut results = BTreeMap::new();
    for router in ROUTERS {
        let out = Command::new(std::env::current_exe().expect("this binary"))
            .env(CHILD_ENV, router)
            .output()
            .expect("run the child");
        assert!(
            out.status.success(),
            "{router} child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let v: Value = serde_json::from_str(line.trim()).expect("the child's report");
        results.insert(router, v);
    }
    for router in ROUTERS {
        assert_eq!(
            results["native"]["digest"], results[router]["digest"],
            "{router} and native plan the same"
        );
    }
    println!(
        "| router | median plan | min | CPU time (median) | per router call | peak RSS | peak − before plan |"
    );
    println!("|---|---|---|---|---|---|---|");
    let median = |v: &Value| {
        let mut t: Vec<f64> = v["times"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        t.sort_by(f64::total_cmp);
        (t[t.len() / 2], t[0])
    };
    for router in ROUTERS {
        let v = &results[router];
        let (med, min) = median(v);
        let peak = v["peak_mib"].as_f64().unwrap();
        let base = v["baseline_mib"].as_f64().unwrap();
        let mut cpu: Vec<f64> = v["cpu"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        cpu.sort_by(f64::total_cmp);
        println!(
            "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} µs | {:.0} MiB | {:.0} MiB |",
            match router {
                "wasm" => "routing-istio component (wasm, `--pooling=false`)",
                "wasm-pooling" => "the same with pooling (the default)",
                _ => "routing-istio as a native library",
            },
            med * 1e3,
            min * 1e3,
            cpu[cpu.len() / 2] * 1e3,
            med * 1e6 / DYNAMIC_ENVS as f64,
            peak,
            peak - base
        );
    }
    // The verdict judges both components, the default (pooling) first.
    let (native, _) = median(&results["native"]);
    for (router, label) in [
        ("wasm-pooling", "pooling (the default)"),
        ("wasm", "`--pooling=false`"),
    ] {
        let (wasm, _) = median(&results[router]);
        println!(
            "{label}: wasm/native {:.1}×; target {} ms through wasm: {}",
            wasm / native,
            PLAN_TARGET.as_millis(),
            if wasm < PLAN_TARGET.as_secs_f64() {
                "PASS"
            } else {
                "MISS"
            }
        );
    }
}

// ---- section 2 -----------------------------------------------------------------------------

/// Routes of the VirtualService of section 2; [`DEFAULT_ROUTES`] of them go to the default
/// version and get a copy per DynamicEnv.
const SIDE_ROUTES: usize = 50;
/// Routes of [`side_routes`] to the default version.
const DEFAULT_ROUTES: usize = 6;
/// How long a step may take before the side is reported as not done.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a VirtualService edited by another tool may take to get its routes back.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(120);
/// The quiet period after all are ready.
const QUIET: Duration = Duration::from_secs(60);

/// The `SIDE_ROUTES` routes of VirtualService `reviews`: by path and tenant to `v2`, every
/// tenth and the last (no match) to the default version `shared`, as in section 1.
fn side_routes() -> Value {
    let app = "reviews";
    Value::Array(
        (0..SIDE_ROUTES)
            .map(|r| {
                let last = r == SIDE_ROUTES - 1;
                let subset = if last || r % 10 == 0 { "shared" } else { "v2" };
                let mut route = json!({
                    "name": format!("r{r}"),
                    "route": [{"destination": {"host": app, "subset": subset}}],
                    "timeout": "5s"
                });
                if !last {
                    route["match"] = json!([{"uri": {"prefix": format!("/api/v1/resource-{r}")},
                                             "headers": {"x-tenant": {"exact": format!("t{r}")}}}]);
                }
                route
            })
            .collect(),
    )
}

/// Requests by user `user` in the audit log from `from` (a byte offset) to its end, by
/// `verb resource[/subresource]`, in every namespace and cluster-wide: an operator's watches
/// and lists of every namespace are its cost too.
fn audit_requests(log: &std::path::Path, from: u64, user: &str) -> (u64, BTreeMap<String, u64>) {
    let mut f = std::fs::File::open(log).expect("the audit log");
    f.seek(std::io::SeekFrom::Start(from)).unwrap();
    let mut by = BTreeMap::new();
    let mut total = 0;
    for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
        let Ok(e) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" || e["user"]["username"] != user {
            continue;
        }
        let resource = match e["objectRef"]["subresource"].as_str() {
            Some(sub) => format!(
                "{}/{sub}",
                e["objectRef"]["resource"].as_str().unwrap_or("?")
            ),
            None => e["objectRef"]["resource"]
                .as_str()
                .unwrap_or("?")
                .to_owned(),
        };
        *by.entry(format!("{} {resource}", e["verb"].as_str().unwrap_or("?")))
            .or_insert(0) += 1;
        total += 1;
    }
    (total, by)
}

fn audit_log() -> Option<std::path::PathBuf> {
    let root = wasmop_tests::repo_root();
    let out = Command::new(root.join("deploy/dev/cluster.sh"))
        .arg("logs")
        .output()
        .ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let log = std::path::PathBuf::from(dir).join("audit.log");
    log.exists().then_some(log)
}

fn log_offset(log: &std::path::Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// The two operators of section 2.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Wasmop,
    /// Riskified's Dynamic Environment, from `WASMOP_RISKIFIED_DIR` (scripts/peers.sh).
    Upstream,
}

impl Side {
    fn api_version(self) -> &'static str {
        match self {
            Side::Wasmop => "wasmop.dev/v1alpha1",
            Side::Upstream => "riskified.com/v1alpha1",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Side::Wasmop => "wasmop",
            Side::Upstream => "upstream",
        }
    }
}

/// What one side measured; `None` for a step not done within its timeout.
#[derive(Default)]
struct Figures {
    ready_s: Option<f64>,
    requests_per_de: f64,
    quiet_requests: u64,
    cpu_s: f64,
    peak_rss_mib: f64,
    restore_s: Option<f64>,
    delete_s: Option<f64>,
}

fn reconcile_section(only: Option<&str>) {
    println!(
        "\n2. reconcile {RECONCILED} DynamicEnvs over a VirtualService of {SIDE_ROUTES} routes on the local control plane, side by side with upstream"
    );
    if std::env::var_os("KUBECONFIG").is_none() {
        println!(
            "skipped: KUBECONFIG is not set. Start the local control plane and point at it first:\n  deploy/dev/cluster.sh up && eval \"$(deploy/dev/cluster.sh env)\""
        );
        return;
    }
    let Some(log) = audit_log() else {
        println!(
            "skipped: no audit log found by `deploy/dev/cluster.sh logs` (is KUBECONFIG the deploy/dev control plane, with the same WASMOP_DEV_DIR?)"
        );
        return;
    };
    let upstream = std::env::var_os("WASMOP_RISKIFIED_DIR").map(std::path::PathBuf::from);
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let mut results = Vec::new();
    for side in [Side::Wasmop, Side::Upstream] {
        if only.is_some_and(|o| o != side.name() && o != "reconcile") {
            continue;
        }
        if side == Side::Upstream && upstream.is_none() {
            println!(
                "\nupstream: skipped, WASMOP_RISKIFIED_DIR is not set (scripts/bench.sh routing builds it with scripts/peers.sh riskified)"
            );
            continue;
        }
        let (log, upstream) = (log.clone(), upstream.clone());
        let figures = rt.block_on(async move {
            let out = std::sync::Arc::new(std::sync::Mutex::new(Figures::default()));
            let slot = out.clone();
            wasmop_tests::with_temp_ns(
                &format!("bench-{}", side.name()),
                |client, ns| async move {
                    let f = run_side(side, client, ns, log, upstream).await;
                    *slot.lock().unwrap() = f;
                },
            )
            .await;
            std::mem::take(&mut *out.lock().unwrap())
        });
        results.push((side, figures));
        if side == Side::Upstream {
            remove_upstream();
        }
    }
    if let [(_, w), (_, u)] = results.as_slice() {
        print_ratios(w, u);
    }
}

fn secs(v: Option<f64>, timeout: Duration) -> String {
    v.map_or_else(
        || format!("> {} s", timeout.as_secs()),
        |s| format!("{s:.1} s"),
    )
}

fn print_ratios(w: &Figures, u: &Figures) {
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        (Some(_), None) => "< 1 (upstream did not finish)".into(),
        _ => "n/a".into(),
    };
    println!("\nside by side, wasmop / upstream (goal: at or below 1 on every row)");
    println!(
        "  {:<52} {:>12} {:>12} {:>8}",
        "figure", "wasmop", "upstream", "ratio"
    );
    let row = |name: &str, a: String, b: String, r: String| {
        println!("  {name:<52} {a:>12} {b:>12} {r:>8}");
    };
    row(
        "time until all are ready",
        secs(w.ready_s, STEP_TIMEOUT),
        secs(u.ready_s, STEP_TIMEOUT),
        ratio(w.ready_s, u.ready_s),
    );
    row(
        "API requests per DynamicEnv until ready",
        format!("{:.1}", w.requests_per_de),
        format!("{:.1}", u.requests_per_de),
        ratio(Some(w.requests_per_de), Some(u.requests_per_de)),
    );
    row(
        "API requests in the quiet minute after",
        w.quiet_requests.to_string(),
        u.quiet_requests.to_string(),
        ratio(Some(w.quiet_requests as f64), Some(u.quiet_requests as f64)),
    );
    row(
        "operator CPU seconds, start to end of the quiet minute",
        format!("{:.1}", w.cpu_s),
        format!("{:.1}", u.cpu_s),
        ratio(Some(w.cpu_s), Some(u.cpu_s)),
    );
    row(
        "operator peak RSS (MiB)",
        format!("{:.0}", w.peak_rss_mib),
        format!("{:.0}", u.peak_rss_mib),
        ratio(Some(w.peak_rss_mib), Some(u.peak_rss_mib)),
    );
    row(
        "VirtualService edited by another tool: routes back",
        secs(w.restore_s, RESTORE_TIMEOUT),
        secs(u.restore_s, RESTORE_TIMEOUT),
        ratio(w.restore_s, u.restore_s),
    );
    row(
        "delete all, until gone",
        secs(w.delete_s, STEP_TIMEOUT),
        secs(u.delete_s, STEP_TIMEOUT),
        ratio(w.delete_s, u.delete_s),
    );
}

async fn count_ready(api: &kube::Api<kube::api::DynamicObject>) -> (usize, usize) {
    let list = api
        .list(&kube::api::ListParams::default())
        .await
        .expect("list DynamicEnvs");
    let ready = list
        .items
        .iter()
        .filter(|o| o.data["status"]["state"] == "ready")
        .count();
    (list.items.len(), ready)
}

/// Waits until `check` holds, polling every 250 ms; the time it took, or `None` after `timeout`.
async fn time_until(timeout: Duration, mut check: impl AsyncFnMut() -> bool) -> Option<f64> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if check().await {
            return Some(started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// Removes what [`start_upstream`] made outside the side's namespace, so that the cluster
/// serves one `dynamicenv` again (kubectl's short name would find upstream's CRD too).
fn remove_upstream() {
    for what in [
        "crd/dynamicenvs.riskified.com",
        "clusterrolebinding/riskified-bench-manager",
        "clusterrole/manager-role",
        "namespace/riskified-bench",
    ] {
        wasmop_tests::kubectl_ok(&["delete", "--ignore-not-found", "--wait=true", what]);
    }
}

/// Starts upstream's operator (`dir/bin/manager`, webhooks off, every namespace) as
/// ServiceAccount `riskified-bench/manager` bound to its own ClusterRole.
fn start_upstream(dir: &std::path::Path, ns: &str) -> wasmop_tests::Process {
    let rbac = "apiVersion: v1\nkind: Namespace\nmetadata: {name: riskified-bench}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: manager, namespace: riskified-bench}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: riskified-bench-manager}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: manager-role}\n\
         subjects: [{kind: ServiceAccount, name: manager, namespace: riskified-bench}]\n";
    let file = wasmop_tests::dump_dir().join("riskified-bench-rbac.yaml");
    std::fs::write(&file, rbac).expect("write the RBAC");
    for f in [dir.join("crd.yaml"), dir.join("role.yaml"), file] {
        wasmop_tests::kubectl_ok(&[
            "apply",
            "--server-side",
            "--field-manager=wasmop-bench",
            "-f",
            f.to_str().expect("a UTF-8 path"),
        ]);
    }
    wasmop_tests::kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/dynamicenvs.riskified.com",
    ]);
    let kubeconfig = wasmop_tests::service_account_kubeconfig("riskified-bench", "manager");
    let mut cmd = Command::new(dir.join("bin/manager"));
    cmd.args([
        &format!(
            "--metrics-bind-address=127.0.0.1:{}",
            wasmop_tests::free_port()
        ),
        &format!(
            "--health-probe-bind-address=127.0.0.1:{}",
            wasmop_tests::free_port()
        ),
    ])
    .env("KUBECONFIG", kubeconfig)
    .env("ENABLE_WEBHOOKS", "false");
    wasmop_tests::Process::spawn(
        cmd,
        wasmop_tests::dump_dir().join(format!("{ns}-upstream.log")),
    )
}

async fn run_side(
    side: Side,
    client: kube::Client,
    ns: String,
    log: std::path::PathBuf,
    upstream: Option<std::path::PathBuf>,
) -> Figures {
    use futures::StreamExt;
    use wasmop_tests::routing;
    println!("\n{}", side.name());
    routing::bookinfo(&client, &ns, false).await;
    let vs = json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "reviews"},
        "spec": {"hosts": ["reviews"], "http": side_routes()}
    });
    routing::create(&client, &ns, vs).await;
    let (mut process, _operator, user) = match side {
        Side::Wasmop => {
            let op = wasmop_tests::Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
            (None, Some(op), "system:serviceaccount:wasmop-system:wasmop")
        }
        Side::Upstream => {
            let dir = upstream.expect("WASMOP_RISKIFIED_DIR");
            (
                Some(start_upstream(&dir, &ns)),
                None,
                "system:serviceaccount:riskified-bench:manager",
            )
        }
    };
    let pid = process
        .as_ref()
        .map_or_else(|| _operator.as_ref().unwrap().process.id(), |p| p.id())
        .to_string();
    let api = routing::dynamic_api(&client, &ns, side.api_version(), "DynamicEnv");
    let mut f = Figures::default();

    let offset = log_offset(&log);
    let started = Instant::now();
    futures::stream::iter(0..RECONCILED)
        .map(|i| {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                let mut de = routing::dynamic_env(
                    &format!("de-{i:03}"),
                    &ns,
                    &format!("user-{i}"),
                    "docker.io/istio/examples-bookinfo-reviews-v3:1.20.3",
                    false,
                );
                de["apiVersion"] = json!(side.api_version());
                routing::create(&client, &ns, de).await;
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    println!(
        "{RECONCILED} DynamicEnvs created in {:.1} s (16 at a time)",
        started.elapsed().as_secs_f64()
    );
    f.ready_s = time_until(STEP_TIMEOUT, async || {
        count_ready(&api).await == (RECONCILED, RECONCILED)
    })
    .await
    .map(|_| started.elapsed().as_secs_f64());
    match f.ready_s {
        Some(t) => println!("all ready {t:.1} s after the first create"),
        None => println!(
            "NOT all ready after {STEP_TIMEOUT:?}: {:?}",
            count_ready(&api).await
        ),
    }
    let ready_offset = log_offset(&log);
    let (requests, by) = audit_requests(&log, offset, user);
    f.requests_per_de = requests as f64 / RECONCILED as f64;
    let expected = SIDE_ROUTES + RECONCILED * DEFAULT_ROUTES;
    let routes = routing::vs_http(&client, &ns, "reviews")
        .await
        .as_array()
        .map_or(0, Vec::len);
    println!("VirtualService reviews: {routes} routes (expected {expected})");
    println!(
        "operator API requests until all ready: {requests} ({:.1} per DynamicEnv)",
        f.requests_per_de
    );
    for (what, n) in &by {
        println!("  {n:>6}  {what}");
    }

    // The quiet minute: nothing changes, so nothing should be written.
    tokio::time::sleep(QUIET).await;
    let (quiet, quiet_by) = audit_requests(&log, ready_offset, user);
    f.quiet_requests = quiet;
    f.cpu_s = cpu_seconds_of(&pid);
    f.peak_rss_mib = proc_mib_of(&pid, "VmHWM:");
    println!("operator API requests in the {QUIET:?} after: {quiet} {quiet_by:?}");
    println!(
        "operator process so far: {:.1} CPU s, peak RSS {:.0} MiB",
        f.cpu_s, f.peak_rss_mib
    );

    // Another tool puts the VirtualService back to its own routes (as `kubectl apply` of the
    // file it came from would).
    let vs_api = routing::dynamic_api(&client, &ns, "networking.istio.io/v1", "VirtualService");
    vs_api
        .patch(
            "reviews",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"http": side_routes()}})),
        )
        .await
        .expect("edit the VirtualService");
    f.restore_s = time_until(RESTORE_TIMEOUT, async || {
        routing::vs_http(&client, &ns, "reviews")
            .await
            .as_array()
            .map_or(0, Vec::len)
            == routes
    })
    .await;
    println!(
        "routes back after another tool's edit: {}",
        secs(f.restore_s, RESTORE_TIMEOUT)
    );

    let offset = log_offset(&log);
    api.delete_collection(
        &kube::api::DeleteParams::default(),
        &kube::api::ListParams::default(),
    )
    .await
    .expect("delete the DynamicEnvs");
    f.delete_s = time_until(STEP_TIMEOUT, async || count_ready(&api).await.0 == 0).await;
    let (requests, by) = audit_requests(&log, offset, user);
    let restored = routing::vs_http(&client, &ns, "reviews").await == side_routes();
    println!(
        "all {RECONCILED} deleted in {}, VirtualService restored exactly: {restored}; operator API requests: {requests} ({:.1} per DynamicEnv)",
        secs(f.delete_s, STEP_TIMEOUT),
        requests as f64 / RECONCILED as f64
    );
    for (what, n) in &by {
        println!("  {n:>6}  {what}");
    }
    if let Some(p) = process.as_mut() {
        assert!(p.alive(), "upstream's operator exited:\n{}", p.log());
    }
    f
}
