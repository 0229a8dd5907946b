//! Scale benchmark: what wasmop costs the API server, and itself, with many objects that sit
//! still, side by side with KubeElasti (issue 63).
//!
//! On the local control plane (`KUBECONFIG` set, e.g. `eval "$(deploy/dev/cluster.sh env)"`;
//! skipped with a message otherwise), for each size N (`WASMOP_BENCH_SCALE_SIZES`, default
//! `100,1000`), one side after the other, each in namespaces of its own that are deleted
//! afterwards:
//!
//! - **KubeElasti** (built by `scripts/peers.sh kubeelasti`; skipped with a message when absent):
//!   its chart's accounts and RBAC, N ElastiServices each with a Deployment, a Service and a
//!   Prometheus trigger, and its operator and resolver (`elasti_side.rs`, `netns.rs`).
//! - **wasmop**: N ElasticServices of the same shape, 200 DynamicEnvs over 50 VirtualServices
//!   and 50 ProxyRestartPolicies over 10,000 pods at N = 1,000 (scaled down in proportion for a
//!   smaller N, at least one of each; none with `WASMOP_BENCH_SCALE_NO_POLICIES=1`, which
//!   leaves out the policies and their pods), two `wasmop run` instances sharing the DR lease
//!   and `wasmop resolver` (`wasmop_side.rs`).
//!
//! Every fifth service is busy (its trigger votes up, one replica); the others are idle, at
//! zero. Both operators poll every 30 s, with a cooldown of 60 s, against one fake Prometheus
//! on loopback, and both resolvers forward to one backend (`fakes.rs`). Each side reports:
//!
//! 1. **Converge**: from the start of its operator until every object is in its steady state.
//! 2. **Steady state** (`WASMOP_BENCH_STEADY_SECS`, default 600), from [`SETTLE`] after
//!    convergence on: from the API server's audit log, requests per minute by verb and resource
//!    and writes per object per hour (budget 0; Lease writes, the DR or leader-election
//!    heartbeat, apart) of its processes' users; from /proc, each process's CPU seconds per
//!    minute and resident memory.
//! 3. **Change to write**: the time from changing one object to the operator's first write for
//!    it (audit log), over `WASMOP_BENCH_TRIALS` (default 100) changes: an ElasticService's
//!    `cooldownPeriod`, one at a time; an idle service's metric turning busy at the fake
//!    Prometheus, one every 2 s.
//! 4. **Cold start**: a request through the resolver for an idle service at zero, until its 200
//!    from the backend, one at a time, each on another service.
//!
//! Then how each figure grows from the smallest size to the largest, and the goals of the
//! issue as PASS or MISS lines, from the largest size. Run with `make bench-scale`
//! (`scripts/bench.sh scale`, which builds KubeElasti and runs the benchmark on a control plane
//! of its own); it always exits 0.

mod audit;
mod common;
mod elasti_side;
mod fakes;
mod netns;
mod wasmop_side;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::common::{
    BenchNamespace, COOLDOWN_SECS, Latencies, POLL, Shape, cpu_seconds, create_all, is_busy,
    load_average, metric, rss_mib, svc_name,
};
use crate::fakes::{Backend, FakePrometheus, HELLO};

/// How long a side may take to converge.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(1200);
/// How long the workloads of a side may take to become ready.
const WORKLOADS_TIMEOUT: Duration = Duration::from_secs(1800);
/// One cold-start request at most.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Between two metric changes.
const TRIGGER_SPACING: Duration = Duration::from_secs(2);
/// From convergence to the steady-state window: the first votes after a start, and the
/// cooldown they start, are behind by then.
const SETTLE: Duration = Duration::from_secs(COOLDOWN_SECS + 30);

/// What one side measured at one size.
#[derive(Debug, Default)]
struct Side {
    /// Seconds from its start until converged; `None` when it did not within the timeout.
    converge: Option<f64>,
    /// What converged and what did not, when it did not.
    converge_note: String,
    /// Writes (Leases apart) from convergence to the steady-state window, by `verb resource`.
    settle_writes: common::Counts,
    /// The custom resources it reconciles.
    objects: usize,
    /// Its requests in the steady-state window.
    window: audit::Window,
    /// CPU seconds per minute in the window, per process.
    cpu: Vec<(String, f64)>,
    /// Resident memory at the window's end, MiB, per process.
    rss: Vec<(String, f64)>,
    /// Fake Prometheus queries per minute in the window.
    queries: f64,
    spec_change: Latencies,
    trigger_change: Latencies,
    cold_start: Latencies,
    /// Processes that exited during the run.
    exited: Vec<String>,
}

impl Side {
    fn cpu_total(&self) -> f64 {
        self.cpu.iter().map(|(_, v)| v).sum()
    }

    fn rss_total(&self) -> f64 {
        self.rss.iter().map(|(_, v)| v).sum()
    }
}

/// Both sides at one size.
struct SizeResult {
    shape: Shape,
    wasmop: Result<Side, String>,
    elasti: Result<Side, String>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Ok(spec) = std::env::var(netns::CHILD_ENV) {
        netns::child(&spec);
        return;
    }
    println!("wasmop scale benchmark");
    println!(
        "cpus: {}, load average at start: {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    if std::env::var_os("KUBECONFIG").is_none() {
        println!(
            "skipped: KUBECONFIG is not set. Start the local control plane and point at it first:\n  deploy/dev/cluster.sh up && eval \"$(deploy/dev/cluster.sh env)\""
        );
        return;
    }
    if !audit::path().exists() {
        println!(
            "skipped: no audit log found by `deploy/dev/cluster.sh logs` (is KUBECONFIG the deploy/dev control plane, with the same WASMOP_DEV_DIR?)"
        );
        return;
    }
    let sizes: Vec<usize> = std::env::var("WASMOP_BENCH_SCALE_SIZES")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect();
    let steady = Duration::from_secs(env_or("WASMOP_BENCH_STEADY_SECS", 600));
    let no_policies = std::env::var("WASMOP_BENCH_SCALE_NO_POLICIES").is_ok_and(|v| v == "1");
    let trials: usize = env_or("WASMOP_BENCH_TRIALS", 100);
    let peer = elasti_side::find();
    match &peer {
        Ok(dir) => println!("KubeElasti: {}", dir.display()),
        Err(e) => println!("KubeElasti side skipped: {e}"),
    }
    println!(
        "sizes {sizes:?}; poll interval {} s, cooldown {COOLDOWN_SECS} s, steady-state window {} s, {trials} trials",
        POLL.as_secs(),
        steady.as_secs()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let results: Vec<SizeResult> = rt.block_on(async {
        let client = wasmop_tests::client().await;
        let dir = common::scratch_dir();
        let prometheus = FakePrometheus::start(&dir).await;
        let backend = Backend::start(&dir);
        let mut results = Vec::new();
        for &n in &sizes {
            let mut shape = Shape::of(n);
            if no_policies {
                shape.policies = 0;
            }
            println!(
                "\n== N = {n}: {} ElasticServices (ElastiServices), {} DynamicEnvs over {} VirtualServices, {} ProxyRestartPolicies over {} pods ==",
                shape.services,
                shape.dynamic_envs,
                shape.virtual_services,
                shape.policies,
                shape.policy_pods()
            );
            let ctx = Ctx {
                client: &client,
                shape,
                steady,
                trials,
                prometheus: &prometheus,
                backend: &backend,
                dir: &dir,
            };
            let elasti = match &peer {
                Ok(peer) => guarded("KubeElasti", run_elasti(&ctx, peer)).await,
                Err(e) => Err(e.clone()),
            };
            let wasmop = guarded("wasmop", run_wasmop(&ctx)).await;
            let result = SizeResult {
                shape,
                wasmop,
                elasti,
            };
            print_size(&result);
            results.push(result);
        }
        results
    });
    print_growth(&results);
    print_goals(&results);
    println!("\nload average at end: {}", load_average());
}

/// Runs one side, turning a panic into an error message.
async fn guarded(
    what: &str,
    side: impl std::future::Future<Output = Side>,
) -> Result<Side, String> {
    AssertUnwindSafe(side).catch_unwind().await.map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".into());
        println!("{what} FAILED: {msg}");
        msg
    })
}

/// What both sides of one size share.
struct Ctx<'a> {
    client: &'a Client,
    shape: Shape,
    steady: Duration,
    trials: usize,
    prometheus: &'a FakePrometheus,
    backend: &'a Backend,
    dir: &'a Path,
}

/// Sets the fake Prometheus's metrics of `side` for `shape`: busy services busy, the rest idle.
fn reset_metrics(prometheus: &FakePrometheus, side: &str, shape: &Shape) {
    for i in 0..shape.services {
        prometheus.set_busy(&metric(side, i), is_busy(i));
    }
}

/// Sleeps until `COOLDOWN_SECS` have passed since `created` (wall clock), so that no object of
/// the side is still within its cooldown since creation when its operator starts.
async fn wait_cooldown(created: Timestamp) {
    let since = audit::secs_between(Timestamp::now(), created);
    let left = COOLDOWN_SECS as f64 + 1.0 - since;
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left)).await;
    }
}

/// Waits until `check` says every kind converged (polling every 2 s); returns the seconds since
/// `started` (and prints when each kind got there), or a note of what did not.
async fn wait_converged<F, Fut>(
    started: Instant,
    mut alive: impl FnMut() -> Result<(), String>,
    mut check: F,
) -> (Option<f64>, String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<(&'static str, usize, usize)>>,
{
    let mut last = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    while started.elapsed() < CONVERGE_TIMEOUT {
        if let Err(e) = alive() {
            return (None, e);
        }
        last = check().await;
        for (kind, ok, total) in &last {
            if ok == total && *total > 0 && done.insert(*kind) {
                println!(
                    "  {kind}: all {total} converged {:.1} s after the start",
                    started.elapsed().as_secs_f64()
                );
            }
        }
        if last.iter().all(|(_, ok, total)| ok == total && *total > 0) {
            return (Some(started.elapsed().as_secs_f64()), String::new());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let note = last
        .iter()
        .map(|(kind, ok, total)| format!("{kind} {ok}/{total}"))
        .collect::<Vec<_>>()
        .join(", ");
    (
        None,
        format!("not converged after {CONVERGE_TIMEOUT:?}: {note}"),
    )
}

/// Waits [`SETTLE`]; returns the writes of `users` (Leases apart) meanwhile, by `verb resource`.
async fn settle(users: &[String], prefix: &str) -> common::Counts {
    println!("settling for {} s", SETTLE.as_secs());
    let mut tail = audit::Tail::from_end(vec![prefix.to_owned()]);
    tokio::time::sleep(SETTLE).await;
    let mut out = common::Counts::new();
    for e in tail.read() {
        if e.is_write() && users.contains(&e.user) && e.resource != "leases" {
            *out.entry(format!("{} {}", e.verb, e.resource)).or_default() += 1;
        }
    }
    out
}

/// The steady-state window: the audit log of `users`, the CPU time and memory of `pids`, and
/// the fake Prometheus's queries, over `length`.
async fn measure_window(
    users: &[String],
    prefix: &str,
    pids: &[(String, u32)],
    length: Duration,
    prometheus: &FakePrometheus,
) -> (audit::Window, Vec<(String, f64)>, Vec<(String, f64)>, f64) {
    let mut tail = audit::Tail::from_end(vec![prefix.to_owned()]);
    let (t0, started) = (Timestamp::now(), Instant::now());
    let cpu0: Vec<f64> = pids
        .iter()
        .map(|(_, p)| cpu_seconds(*p).unwrap_or(0.0))
        .collect();
    let q0 = prometheus.queries();
    let mut entries = Vec::new();
    while started.elapsed() < length {
        let left = length.saturating_sub(started.elapsed());
        tokio::time::sleep(left.min(Duration::from_secs(20))).await;
        entries.extend(tail.read());
    }
    let (t1, minutes) = (Timestamp::now(), started.elapsed().as_secs_f64() / 60.0);
    let cpu: Vec<(String, f64)> = pids
        .iter()
        .zip(&cpu0)
        .map(|((name, p), c0)| {
            (
                name.clone(),
                (cpu_seconds(*p).unwrap_or(*c0) - c0) / minutes,
            )
        })
        .collect();
    let rss: Vec<(String, f64)> = pids
        .iter()
        .map(|(name, p)| (name.clone(), rss_mib(*p).unwrap_or(0.0)))
        .collect();
    let queries = (prometheus.queries() - q0) as f64 / minutes;
    // Requests received before the end may be logged a moment later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    entries.extend(tail.read());
    (
        audit::Window::of(&entries, users, t0, t1),
        cpu,
        rss,
        queries,
    )
}

/// Changes `spec.cooldownPeriod` of up to `trials` objects of `api`, one at a time, each time
/// waiting up to `timeout` for a write of `users` on it. Gives up when the first `give_up`
/// changes all get no write.
async fn spec_changes(
    api: &kube::Api<kube::api::DynamicObject>,
    prefix: &str,
    users: &[String],
    names: &[String],
    timeout: Duration,
    give_up: usize,
) -> Latencies {
    let mut tail = audit::Tail::from_end(vec![prefix.to_owned()]);
    let mut out = Latencies::default();
    for (n, name) in names.iter().enumerate() {
        let since = Timestamp::now();
        let patch = json!({"spec": {"cooldownPeriod": COOLDOWN_SECS + 1}});
        if api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_err()
        {
            out.failed += 1;
            continue;
        }
        match audit::first_write(&mut tail, users, name, since, timeout).await {
            Some(s) => out.samples.push(s),
            None => out.failed += 1,
        }
        if n + 1 == give_up && out.samples.is_empty() {
            out.not_applicable = Some(format!(
                "no write within {} s of a spec change ({give_up} tries)",
                timeout.as_secs()
            ));
            break;
        }
    }
    out
}

/// Turns the metrics of `indices` busy one every [`TRIGGER_SPACING`] and waits for a write of
/// `users` on each service (at most two polls and 30 s after the last change).
async fn trigger_changes(
    prometheus: &FakePrometheus,
    side: &str,
    prefix: &str,
    users: &[String],
    indices: &[usize],
) -> Latencies {
    let mut waiter = audit::Waiter::new(vec![prefix.to_owned()], users.to_vec());
    for &i in indices {
        prometheus.set_busy(&metric(side, i), true);
        waiter.pending.insert(svc_name(i), Timestamp::now());
        let next = Instant::now() + TRIGGER_SPACING;
        while Instant::now() < next {
            waiter.poll();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let deadline = Instant::now() + 2 * POLL + Duration::from_secs(30);
    while !waiter.pending.is_empty() && Instant::now() < deadline {
        waiter.poll();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Latencies {
        failed: waiter.pending.len(),
        samples: waiter.found,
        not_applicable: None,
    }
}

/// One request at a time to each idle service of `indices` through a resolver that `connect`
/// reaches: the time until its 200 with the backend's body.
async fn cold_starts<F, Fut, S>(ns: &str, indices: &[usize], mut connect: F) -> Latencies
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<S>>,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut out = Latencies::default();
    for &i in indices {
        let host = format!("{}.{ns}.svc.cluster.local", svc_name(i));
        let started = Instant::now();
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, async {
            wasmop_tests::http_get_over(connect().await?, &host).await
        })
        .await;
        match answer {
            Ok(Ok((200, body))) if body == HELLO => {
                out.samples.push(started.elapsed().as_secs_f64())
            }
            other => {
                out.failed += 1;
                if out.failed <= 3 {
                    println!("  cold start {host}: {other:?}");
                }
            }
        }
    }
    out
}

/// The idle services for the trigger changes and those for the cold starts: two disjoint
/// halves of the idle ones, at most `trials` each.
fn pools(shape: &Shape, trials: usize) -> (Vec<usize>, Vec<usize>) {
    let idle = shape.idle();
    let half = (idle.len() / 2).min(trials);
    (idle[..half].to_vec(), idle[idle.len() - half..].to_vec())
}

async fn run_elasti(ctx: &Ctx<'_>, peer: &Path) -> Side {
    let client = ctx.client;
    let ns = BenchNamespace::create(client, "elasti").await;
    let side = AssertUnwindSafe(elasti_inner(ctx, peer, &ns.name))
        .catch_unwind()
        .await;
    ns.delete(client).await;
    side.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

async fn elasti_inner(ctx: &Ctx<'_>, peer: &Path, ns: &str) -> Side {
    let (client, shape) = (ctx.client, &ctx.shape);
    println!("\n-- KubeElasti in namespace {ns}");
    let _cluster = elasti_side::install_chart(peer, ns, ctx.dir);
    reset_metrics(ctx.prometheus, "elasti", shape);
    let created = Timestamp::now();
    create_all(
        client,
        Some(ns),
        elasti_side::objects(shape, &ctx.prometheus.url(), ctx.backend.port),
    )
    .await;
    let ready = common::wait_deployments_ready(client, ns, WORKLOADS_TIMEOUT).await;
    println!(
        "objects created, workloads ready in {:.0} s",
        ready.as_secs_f64()
    );
    wait_cooldown(created).await;

    let started = Instant::now();
    let mut running =
        elasti_side::start(peer, ns, shape, ctx.prometheus, ctx.backend, ctx.dir).await;
    let running_ref = &mut running;
    let (converge, converge_note) = {
        let (client, ns) = (client.clone(), ns.to_owned());
        wait_converged(
            started,
            || {
                if running_ref.alive() {
                    Ok(())
                } else {
                    Err(format!("KubeElasti exited:\n{}", running_ref.log()))
                }
            },
            || {
                let (client, ns) = (client.clone(), ns.clone());
                async move {
                    let (ok, total) = elasti_side::converged(&client, &ns).await;
                    vec![("ElastiService", ok, total)]
                }
            },
        )
        .await
    };
    report_converge("KubeElasti", converge, &converge_note);

    let users = elasti_side::users(ns);
    let prefix = format!("system:serviceaccount:{ns}:");
    let settle_writes = settle(&users, &prefix).await;
    let pids = [
        ("operator".to_owned(), running.operator_pid),
        ("resolver".to_owned(), running.resolver_pid),
    ];
    println!("steady state for {} s", ctx.steady.as_secs());
    let (window, cpu, rss, queries) =
        measure_window(&users, &prefix, &pids, ctx.steady, ctx.prometheus).await;

    let api = common::dynamic_api(
        client,
        Some(ns),
        "elasti.truefoundry.com/v1alpha1",
        "ElastiService",
    );
    let names: Vec<String> = (0..shape.services.min(ctx.trials)).map(svc_name).collect();
    println!("spec changes");
    let spec_change = spec_changes(&api, &prefix, &users, &names, Duration::from_secs(10), 3).await;
    let (trigger_pool, cold_pool) = pools(shape, ctx.trials);
    println!("{} trigger changes", trigger_pool.len());
    let trigger_change =
        trigger_changes(ctx.prometheus, "elasti", &prefix, &users, &trigger_pool).await;
    println!("{} cold starts", cold_pool.len());
    let proxy = running.proxy.clone();
    let cold_start = cold_starts(ns, &cold_pool, || fakes::connect_unix(&proxy)).await;
    let mut exited = Vec::new();
    if !running.alive() {
        exited.push(format!("KubeElasti:\n{}", running.log()));
    }
    Side {
        converge,
        converge_note,
        settle_writes,
        objects: shape.services,
        window,
        cpu,
        rss,
        queries,
        spec_change,
        trigger_change,
        cold_start,
        exited,
    }
}

async fn run_wasmop(ctx: &Ctx<'_>) -> Side {
    let client = ctx.client;
    let ns = BenchNamespace::create(client, "wasmop").await;
    let policies = wasmop_side::Policies(ns.name.clone());
    let side = AssertUnwindSafe(wasmop_inner(ctx, &ns.name))
        .catch_unwind()
        .await;
    drop(policies);
    ns.delete(client).await;
    side.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

async fn wasmop_inner(ctx: &Ctx<'_>, ns: &str) -> Side {
    let (client, shape) = (ctx.client, &ctx.shape);
    println!("\n-- wasmop in namespace {ns}");
    let _accounts = wasmop_side::accounts(ns, ctx.dir);
    reset_metrics(ctx.prometheus, "wasmop", shape);
    let (objects, policies) = wasmop_side::objects(shape, ns, ctx.prometheus, ctx.backend.port);
    let created = Timestamp::now();
    create_all(client, Some(ns), objects).await;
    create_all(client, None, policies).await;
    let backends = ctx.backend.follow_pods(client.clone(), ns);
    let ready = common::wait_deployments_ready(client, ns, WORKLOADS_TIMEOUT).await;
    println!(
        "objects created, workloads ready in {:.0} s",
        ready.as_secs_f64()
    );
    wait_cooldown(created).await;

    let started = Instant::now();
    let mut running = wasmop_side::start(ns).await;
    let (converge, converge_note) = {
        let (active, passive) = (running.active.addr.clone(), running.passive.addr.clone());
        let (c, n) = (client.clone(), ns.to_owned());
        let policies = shape.policies;
        let running_ref = &mut running;
        wait_converged(
            started,
            || {
                for (name, process) in [
                    ("active", &mut running_ref.active.process),
                    ("passive", &mut running_ref.passive.process),
                    ("resolver", &mut running_ref.resolver),
                ] {
                    if !process.alive() {
                        return Err(format!("{name} exited:\n{}", process.log()));
                    }
                }
                Ok(())
            },
            || {
                let (c, n, active, passive) =
                    (c.clone(), n.clone(), active.clone(), passive.clone());
                async move {
                    let mut progress = wasmop_side::converged(&c, &n).await;
                    if policies == 0 {
                        progress.retain(|(kind, _, _)| *kind != "ProxyRestartPolicy");
                    }
                    let dr = usize::from(wasmop_tests::dr::readonly_check(&active) == Some(200))
                        + usize::from(wasmop_tests::dr::readonly_check(&passive) == Some(502));
                    progress.push(("DR instance", dr, 2));
                    progress
                }
            },
        )
        .await
    };
    report_converge("wasmop", converge, &converge_note);

    let users = wasmop_side::users(ns);
    let prefix = format!("system:serviceaccount:{ns}:");
    let settle_writes = settle(&users, &prefix).await;
    let pids = [
        ("active".to_owned(), running.active.process.id()),
        ("passive".to_owned(), running.passive.process.id()),
        ("resolver".to_owned(), running.resolver.id()),
    ];
    println!("steady state for {} s", ctx.steady.as_secs());
    let (window, cpu, rss, queries) =
        measure_window(&users, &prefix, &pids, ctx.steady, ctx.prometheus).await;

    let api = common::dynamic_api(client, Some(ns), "wasmop.dev/v1alpha1", "ElasticService");
    let names: Vec<String> = (0..shape.services.min(ctx.trials)).map(svc_name).collect();
    println!("{} spec changes", names.len());
    let spec_change = spec_changes(&api, &prefix, &users, &names, Duration::from_secs(30), 3).await;
    let (trigger_pool, cold_pool) = pools(shape, ctx.trials);
    println!("{} trigger changes", trigger_pool.len());
    let trigger_change =
        trigger_changes(ctx.prometheus, "wasmop", &prefix, &users, &trigger_pool).await;
    println!("{} cold starts", cold_pool.len());
    let addr = running.resolver_addr;
    let cold_start = cold_starts(ns, &cold_pool, || tokio::net::TcpStream::connect(addr)).await;
    backends.abort();
    let mut exited = Vec::new();
    for (name, process) in [
        ("active", &mut running.active.process),
        ("passive", &mut running.passive.process),
        ("resolver", &mut running.resolver),
    ] {
        if !process.alive() {
            exited.push(format!("{name}:\n{}", process.log()));
        }
    }
    Side {
        converge,
        converge_note,
        settle_writes,
        objects: shape.wasmop_objects(),
        window,
        cpu,
        rss,
        queries,
        spec_change,
        trigger_change,
        cold_start,
        exited,
    }
}

fn report_converge(who: &str, converge: Option<f64>, note: &str) {
    match converge {
        Some(s) => println!("{who} converged {s:.1} s after its start"),
        None => println!("{who}: {note}"),
    }
}

// ---- reports --------------------------------------------------------------------------------

fn fmt_opt(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.1}{unit}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
        (Some(a), Some(b)) if a == 0.0 && b == 0.0 => "1".into(),
        _ => "n/a".into(),
    }
}

/// The rows of the comparison table: (figure, value of a side).
fn figures(side: &Side) -> Vec<(&'static str, Option<f64>, String)> {
    let w = &side.window;
    let mut rows = vec![
        (
            "converge from start (s)",
            side.converge,
            fmt_opt(side.converge, " s"),
        ),
        (
            "API requests per minute, steady state",
            Some(w.per_minute()),
            format!("{:.1}", w.per_minute()),
        ),
        (
            "writes per object per hour (budget 0; Leases apart)",
            Some(w.writes_per_object_hour(side.objects)),
            format!("{:.3}", w.writes_per_object_hour(side.objects)),
        ),
        (
            "Lease writes per minute (DR, leader election)",
            Some(w.lease_writes_per_minute()),
            format!("{:.1}", w.lease_writes_per_minute()),
        ),
        (
            "CPU seconds per minute, all processes",
            Some(side.cpu_total()),
            format!("{:.2}", side.cpu_total()),
        ),
        (
            "RSS (MiB), all processes",
            Some(side.rss_total()),
            format!("{:.0}", side.rss_total()),
        ),
        (
            "RSS (MiB) per 1,000 objects reconciled",
            Some(side.rss_total() * 1000.0 / side.objects.max(1) as f64),
            format!(
                "{:.0}",
                side.rss_total() * 1000.0 / side.objects.max(1) as f64
            ),
        ),
    ];
    rows.extend(latency_rows(
        [
            "change to write, spec change, p50 (ms)",
            "change to write, spec change, p99 (ms)",
        ],
        &side.spec_change,
    ));
    rows.extend(latency_rows(
        [
            "change to write, trigger change, p50 (ms)",
            "change to write, trigger change, p99 (ms)",
        ],
        &side.trigger_change,
    ));
    rows.extend(latency_rows(
        ["cold start, p50 (ms)", "cold start, p99 (ms)"],
        &side.cold_start,
    ));
    rows
}

/// The p50 and p99 rows of one latency figure, in milliseconds; the first row describes it.
fn latency_rows(
    labels: [&'static str; 2],
    l: &common::Latencies,
) -> [(&'static str, Option<f64>, String); 2] {
    [
        (labels[0], l.quantile(0.5).map(|s| s * 1e3), l.describe()),
        (labels[1], l.quantile(0.99).map(|s| s * 1e3), String::new()),
    ]
}

fn print_side_details(name: &str, side: &Side) {
    let w = &side.window;
    if side.converge.is_none() {
        println!("\n{name}: {}", side.converge_note);
    }
    println!(
        "\n{name}: writes (Leases apart) in the {} s from convergence to the steady state: {:?}",
        SETTLE.as_secs(),
        side.settle_writes
    );
    println!(
        "\n{name}: API requests per minute in the steady state ({:.0} s), by verb and resource:",
        w.length.as_secs_f64()
    );
    for (what, per_minute) in w.per_minute_by_request() {
        println!("  {per_minute:>9.2}  {what}");
    }
    println!("  requests by user: {:?}", w.by_user);
    println!("  answers 429 (Too Many Requests): {}", w.throttled);
    let writes = w.object_writes();
    println!(
        "  writes to objects other than Leases: {} ({} objects)",
        writes.iter().map(|(_, v)| **v).sum::<u64>(),
        writes.len()
    );
    for (what, n) in writes.iter().take(10) {
        println!("    {n:>6}  {what}");
    }
    if writes.len() > 10 {
        println!("    ... and {} more", writes.len() - 10);
    }
    for (p, cpu) in &side.cpu {
        let rss = side
            .rss
            .iter()
            .find(|(q, _)| q == p)
            .map_or(0.0, |(_, r)| *r);
        println!("  {p}: {cpu:.3} CPU s per minute, RSS {rss:.0} MiB");
    }
    println!("  fake Prometheus queries per minute: {:.0}", side.queries);
    for e in &side.exited {
        println!("  EXITED during the run: {e}");
    }
}

fn print_size(r: &SizeResult) {
    println!(
        "\n==== results, N = {} ({} objects reconciled by wasmop, {} by KubeElasti) ====",
        r.shape.services,
        r.shape.wasmop_objects(),
        r.shape.services
    );
    let none = Side::default();
    let w = r.wasmop.as_ref().unwrap_or(&none);
    let k = r.elasti.as_ref().unwrap_or(&none);
    println!("| figure | wasmop | KubeElasti | wasmop / KubeElasti |");
    println!("|---|---|---|---|");
    for ((name, wv, ws), (_, kv, ks)) in figures(w).into_iter().zip(figures(k)) {
        let ws = if r.wasmop.is_ok() {
            ws
        } else {
            "failed".into()
        };
        let ks = match &r.elasti {
            Ok(_) => ks,
            Err(_) => "n/a".into(),
        };
        let rt = if r.wasmop.is_ok() && r.elasti.is_ok() {
            ratio(wv, kv)
        } else {
            "n/a".into()
        };
        println!("| {name} | {ws} | {ks} | {rt} |");
    }
    match &r.wasmop {
        Ok(side) => print_side_details("wasmop", side),
        Err(e) => println!("\nwasmop failed: {e}"),
    }
    match &r.elasti {
        Ok(side) => print_side_details("KubeElasti", side),
        Err(e) => println!("\nKubeElasti: {e}"),
    }
}

fn print_growth(results: &[SizeResult]) {
    let (Some(small), Some(large)) = (results.first(), results.last()) else {
        return;
    };
    if results.len() < 2 {
        return;
    }
    let (ns, nl) = (small.shape.services, large.shape.services);
    println!(
        "\n==== growth from N = {ns} to N = {nl} (objects × {:.0}; linear or better: ratio <= {:.0}) ====",
        nl as f64 / ns as f64,
        nl as f64 / ns as f64
    );
    println!("| figure | side | N = {ns} | N = {nl} | ratio |");
    println!("|---|---|---|---|---|");
    fn wasmop_of(r: &SizeResult) -> Option<&Side> {
        r.wasmop.as_ref().ok()
    }
    fn elasti_of(r: &SizeResult) -> Option<&Side> {
        r.elasti.as_ref().ok()
    }
    type Pick = fn(&SizeResult) -> Option<&Side>;
    for (name, pick) in [("wasmop", wasmop_of as Pick), ("KubeElasti", elasti_of)] {
        let (Some(a), Some(b)) = (pick(small), pick(large)) else {
            continue;
        };
        for ((figure, va, _), (_, vb, _)) in figures(a).into_iter().zip(figures(b)) {
            println!(
                "| {figure} | {name} | {} | {} | {} |",
                fmt_opt(va, ""),
                fmt_opt(vb, ""),
                ratio(vb, va)
            );
        }
    }
    if let (Ok(a), Ok(b)) = (&small.wasmop, &large.wasmop) {
        let limit = nl as f64 / ns as f64;
        for (figure, va, vb) in [
            (
                "API requests per minute",
                a.window.per_minute(),
                b.window.per_minute(),
            ),
            ("CPU seconds per minute", a.cpu_total(), b.cpu_total()),
            ("RSS", a.rss_total(), b.rss_total()),
        ]
        .into_iter()
        .chain(
            a.converge
                .zip(b.converge)
                .map(|(va, vb)| ("time to converge", va, vb)),
        ) {
            let r = vb / va.max(f64::MIN_POSITIVE);
            println!(
                "wasmop {figure} grows {r:.2}× for {limit:.0}× the objects (goal: linear or better): {}",
                if r <= limit { "PASS" } else { "MISS" }
            );
        }
    }
}

fn goal(what: &str, value: Option<f64>, limit: f64) {
    match value {
        Some(v) => println!(
            "{what}: {v:.3} (goal <= {limit}): {}",
            if v <= limit { "PASS" } else { "MISS" }
        ),
        None => println!("{what}: n/a (goal <= {limit}): MISS"),
    }
}

fn print_goals(results: &[SizeResult]) {
    let Some(r) = results.last() else {
        return;
    };
    println!("\n==== goals at N = {} ====", r.shape.services);
    if let Ok(w) = &r.wasmop {
        let writes = w.window.writes_per_object_hour(w.objects);
        println!(
            "wasmop writes per object per hour in the steady state: {writes:.3} (budget 0): {}",
            if writes == 0.0 { "PASS" } else { "MISS" }
        );
    }
    let (Ok(w), Ok(k)) = (&r.wasmop, &r.elasti) else {
        println!("no side-by-side goals: one side did not run");
        return;
    };
    let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    goal(
        "steady-state API requests per minute, wasmop / KubeElasti",
        div(Some(w.window.per_minute()), Some(k.window.per_minute())),
        0.2,
    );
    goal(
        "CPU seconds per minute, wasmop / KubeElasti (all processes)",
        div(Some(w.cpu_total()), Some(k.cpu_total())),
        1.0,
    );
    goal(
        "RSS, wasmop / KubeElasti (all processes)",
        div(Some(w.rss_total()), Some(k.rss_total())),
        1.0,
    );
    goal(
        "cold start p50, wasmop / KubeElasti",
        div(w.cold_start.quantile(0.5), k.cold_start.quantile(0.5)),
        0.2,
    );
    goal(
        "cold start p99, wasmop / KubeElasti",
        div(w.cold_start.quantile(0.99), k.cold_start.quantile(0.99)),
        0.2,
    );
}
