//! DR benchmark: forced failovers against the local control plane, and the cost of one
//! decision (native vs the `dr-lease` component).
//!
//! Two DR loops (the `machine` of `wasmop run`, the builtin `dr-lease` component deciding, a
//! real Lease on the API server) run in this process with x = 1 s, y = 3. Each round a fresh
//! instance joins as the passive one, out of phase with the active one by a different amount,
//! and the active loop is stopped dead (its task aborted: no last write, as a SIGKILL) at a
//! different point of its tick; the time until the other is active is measured from the stop
//! and from the stopped one's last renewal. Every lease write is checked: a write by an instance while another was
//! active is a write by the passive instance (must be 0).
//!
//! Run: `deploy/dev/cluster.sh up && eval "$(deploy/dev/cluster.sh env)" &&
//! cargo bench -p wasmop-controllers --bench dr`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use wasmop_controllers::dr::backend::{BackendError, LeaseBackend, Observed, Record};
use wasmop_controllers::dr::config::DrConfig;
use wasmop_controllers::dr::k8s_lease::KubernetesLease;
use wasmop_controllers::dr::machine::{Checker, Clock, Machine, Notify, Status, SystemClock};
use wasmop_kernel::gate::WriteGate;
use wasmop_plugin_host::registry::{LocalFetch, Registry, RegistryConfig};
use wasmop_plugin_host::{
    Hook, LeaseAction, LeaseRecord, PluginRuntime, RuntimeOptions, StateRequest,
};

const ROUNDS: usize = 20;
const X: u32 = 1;
const Y: u32 = 3;
const DECISIONS: usize = 2000;

/// The gates of every instance, to tell whether someone else is active at a write.
#[derive(Default)]
struct Gates(Mutex<Vec<(String, Arc<WriteGate>)>>);

impl Gates {
    fn someone_else_active(&self, me: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|(who, g)| who != me && g.is_active())
    }
}

/// The Lease backend, counting writes and those made while another instance was active.
struct Counted {
    inner: KubernetesLease,
    me: String,
    gates: Arc<Gates>,
    writes: Arc<AtomicU64>,
    passive_writes: Arc<AtomicU64>,
    last_write: Arc<Mutex<Option<Instant>>>,
}

#[async_trait::async_trait]
impl LeaseBackend for Counted {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn read(&self) -> Result<Option<Observed>, BackendError> {
        self.inner.read().await
    }
    async fn write(
        &self,
        action: LeaseAction,
        read: Option<&Observed>,
        record: &Record,
        expiry_seconds: u32,
    ) -> Result<(), BackendError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        if self.gates.someone_else_active(&self.me) {
            self.passive_writes.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "{} wrote ({action:?}) while another instance was active",
                self.me
            );
        }
        let sent = Instant::now();
        let result = self.inner.write(action, read, record, expiry_seconds).await;
        if result.is_ok() {
            *self.last_write.lock().unwrap() = Some(sent);
        }
        result
    }
}

struct Quiet;

#[async_trait::async_trait]
impl Notify for Quiet {
    async fn event(&self, _warning: bool, _reason: &str, _note: String) {}
}

struct Instance {
    gate: Arc<WriteGate>,
    task: tokio::task::JoinHandle<()>,
    ticked: Arc<AtomicBool>,
    last_write: Arc<Mutex<Option<Instant>>>,
}

struct Bench {
    client: Client,
    ns: String,
    checker: Arc<dyn Checker>,
    gates: Arc<Gates>,
    writes: Arc<AtomicU64>,
    passive_writes: Arc<AtomicU64>,
}

impl Bench {
    /// Starts a DR loop as `identity`, ticking every x as `wasmop run` does.
    fn start(&self, identity: &str) -> Instance {
        let gate = WriteGate::new(false);
        self.gates
            .0
            .lock()
            .unwrap()
            .push((identity.to_owned(), gate.clone()));
        let last_write = Arc::new(Mutex::new(None));
        let backend = Arc::new(Counted {
            inner: KubernetesLease::new(self.client.clone(), &self.ns, "bench"),
            me: identity.to_owned(),
            gates: self.gates.clone(),
            writes: self.writes.clone(),
            passive_writes: self.passive_writes.clone(),
            last_write: last_write.clone(),
        });
        let config = DrConfig::parse(
            Some(&serde_json::json!({"waitTimeInSeconds": X, "failureThreshold": Y})),
            "builtin://dr-lease",
        )
        .unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let mut machine = Machine::new(
            gate.clone(),
            backend,
            config,
            identity.to_owned(),
            clock.wall_ms(),
            clock,
            Arc::new(Quiet),
            Arc::new(Status::default()),
        );
        let checker = self.checker.clone();
        let ticked = Arc::new(AtomicBool::new(false));
        let t = ticked.clone();
        let task = tokio::spawn(async move {
            loop {
                let next = tokio::time::Instant::now() + Duration::from_secs(u64::from(X));
                machine.tick(checker.as_ref()).await;
                t.store(true, Ordering::Relaxed);
                loop {
                    let deadline = machine.deadline();
                    tokio::select! {
                        () = tokio::time::sleep_until(next) => break,
                        () = async {
                            match deadline {
                                Some(d) => tokio::time::sleep_until(d).await,
                                None => std::future::pending().await,
                            }
                        } => { machine.expire_if_due().await; }
                    }
                }
            }
        });
        Instance {
            gate,
            task,
            ticked,
            last_write,
        }
    }
}

async fn wait_for(what: &str, timeout: Duration, f: impl Fn() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!(
            "bench dr: KUBECONFIG is not set. This benchmark needs the local control plane:\n  \
             deploy/dev/cluster.sh up && eval \"$(deploy/dev/cluster.sh env)\" && cargo bench -p wasmop-controllers --bench dr"
        );
        std::process::exit(2);
    }
    let client = Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    let ns = format!("wasmop-bench-dr-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(ns.clone());
    namespaces
        .create(&PostParams::default(), &n)
        .await
        .expect("create the bench namespace (is the control plane up?)");

    // The builtin dr-lease component, through the registry, as `wasmop run` calls it.
    let runtime = PluginRuntime::new(RuntimeOptions::default()).unwrap();
    let registry = Registry::new(runtime);
    let report = registry
        .apply(RegistryConfig::default(), &LocalFetch::default())
        .await;
    assert!(report.failed.is_empty(), "{report:?}");
    let plugin = registry.resolve(Hook::Dr, None).expect("dr-lease");
    let checker: Arc<dyn Checker> = Arc::new(plugin.clone());

    let decision_cost = decision_cost(&plugin).await;

    let bench = Bench {
        client: client.clone(),
        ns: ns.clone(),
        checker,
        gates: Arc::default(),
        writes: Arc::default(),
        passive_writes: Arc::default(),
    };
    let mut active = bench.start("bench-0");
    wait_for(
        "the first instance to be active",
        Duration::from_secs(10),
        || active.gate.is_active(),
    )
    .await;
    let mut failovers = Vec::new();
    let mut since_renewal: Vec<Duration> = Vec::new();
    for round in 1..=ROUNDS {
        // The new instance ticks out of phase with the active one by a different amount each
        // round, so the takeover lands anywhere in (y·x, (y+1)·x] after the last renewal.
        tokio::time::sleep(Duration::from_millis((round as u64 * 457) % 1000)).await;
        let passive = bench.start(&format!("bench-{round}"));
        wait_for(
            "the new instance's first tick",
            Duration::from_secs(10),
            || passive.ticked.load(Ordering::Relaxed),
        )
        .await;
        assert!(!passive.gate.is_active());
        // Stop the active at a different point of its tick each round.
        tokio::time::sleep(Duration::from_millis(1000 + (round as u64 * 373) % 1000)).await;
        assert!(
            active.gate.is_active(),
            "round {round}: the active lost its lease"
        );
        active.task.abort();
        let killed = Instant::now();
        let _ = (&mut active.task).await;
        let renewed = active.last_write.lock().unwrap().expect("the active wrote");
        wait_for("the takeover", Duration::from_secs(15), || {
            passive.gate.is_active()
        })
        .await;
        let took = killed.elapsed();
        let after_renewal = renewed.elapsed();
        eprintln!(
            "round {round:>2}: failover {:>5} ms after the stop, {:>5} ms after the last renewal",
            took.as_millis(),
            after_renewal.as_millis()
        );
        failovers.push(took);
        since_renewal.push(after_renewal);
        active = passive;
    }
    active.task.abort();
    let _ = namespaces.delete(&ns, &DeleteParams::background()).await;

    let mut sorted = failovers.clone();
    sorted.sort();
    let under_5s = sorted
        .iter()
        .filter(|d| **d < Duration::from_secs(5))
        .count();
    println!();
    println!(
        "DR failover, k8s-lease on the local control plane, x = {X} s, y = {Y} ({ROUNDS} forced failovers)"
    );
    println!(
        "  failover (stop of the active -> the other active): min {} ms, p50 {} ms, p90 {} ms, max {} ms",
        sorted[0].as_millis(),
        percentile(&sorted, 0.5).as_millis(),
        percentile(&sorted, 0.9).as_millis(),
        sorted[sorted.len() - 1].as_millis()
    );
    since_renewal.sort();
    println!(
        "  after the last renewal: min {} ms, max {} ms (takeover only after y*x = {} ms; at most (y+1)*x = {} ms plus latency)",
        since_renewal[0].as_millis(),
        since_renewal[since_renewal.len() - 1].as_millis(),
        Y * X * 1000,
        (Y + 1) * X * 1000
    );
    println!("  under 5 s: {under_5s}/{ROUNDS} (target: all)");
    println!(
        "  lease writes: {} in all, by a passive instance while another was active: {} (must be 0)",
        bench.writes.load(Ordering::Relaxed),
        bench.passive_writes.load(Ordering::Relaxed)
    );
    println!(
        "  one decision: native {:.2} µs, dr-lease component {:.1} µs p50 / {:.1} µs p99 ({DECISIONS} calls each)",
        decision_cost.native_us, decision_cost.wasm_p50_us, decision_cost.wasm_p99_us
    );
    if under_5s < ROUNDS || bench.passive_writes.load(Ordering::Relaxed) > 0 {
        std::process::exit(1);
    }
}

struct DecisionCost {
    native_us: f64,
    wasm_p50_us: f64,
    wasm_p99_us: f64,
}

/// One tick's decision for a held lease: natively and through the component.
async fn decision_cost(plugin: &Arc<wasmop_plugin_host::Plugin>) -> DecisionCost {
    let lease = dr_lease::Lease {
        owner: "other".into(),
        updated_time: 1_700_000_000_000,
    };
    let started = Instant::now();
    for i in 0..DECISIONS {
        let d = dr_lease::decide(&dr_lease::Tick {
            identity: "me",
            now: std::hint::black_box(1_700_000_001_000 + i as i64),
            lease: Some(&lease),
            wait_time_seconds: X,
            failure_threshold: Y,
            started_at: 0,
            warmup_seconds: 0,
        })
        .unwrap();
        std::hint::black_box(d);
    }
    let native_us = started.elapsed().as_secs_f64() * 1e6 / DECISIONS as f64;
    let mut times = Vec::with_capacity(DECISIONS);
    for i in 0..DECISIONS {
        let request = StateRequest {
            identity: "me".into(),
            now: 1_700_000_001_000 + i as i64,
            lease: Some(LeaseRecord {
                owner: "other".into(),
                updated_time: 1_700_000_000_000,
                notes: String::new(),
            }),
            wait_time_seconds: X,
            failure_threshold: Y,
            started_at: 0,
            warmup_seconds: 0,
        };
        let t = Instant::now();
        plugin.check(request).await.unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    DecisionCost {
        native_us,
        wasm_p50_us: percentile(&times, 0.5).as_secs_f64() * 1e6,
        wasm_p99_us: percentile(&times, 0.99).as_secs_f64() * 1e6,
    }
}
