//! The DR loop over a fake backend and a fake clock (tokio's paused time): every branch of
//! the decision as the host carries it out, the hold and the demotion bound, compare-and-swap
//! conflicts, lost answers, hanging backends, failing plugins, and the run loop's handling of
//! bad and changed settings.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::backend::{BackendError, LeaseBackend, NoBackend, Observed, Record, Version};
use super::config::DrConfig;
use super::machine::{Checker, Clock, Machine, Notify, Status, TickOutcome};
use wasmop_kernel::gate::WriteGate;
use wasmop_plugin_host::{DrState, LeaseAction, StateDecision, StateRequest};

const T0: i64 = 1_700_000_000_000;

/// Wall time = a base + tokio's (paused) elapsed time + a per-instance skew.
struct FakeClock {
    start: Instant,
    skew_ms: AtomicI64,
}

impl FakeClock {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            skew_ms: AtomicI64::new(0),
        })
    }

    fn skewed(ms: i64) -> Arc<Self> {
        let c = Self::new();
        c.skew_ms.store(ms, Ordering::Relaxed);
        c
    }
}

impl Clock for FakeClock {
    fn wall_ms(&self) -> i64 {
        T0 + i64::try_from(self.start.elapsed().as_millis()).unwrap()
            + self.skew_ms.load(Ordering::Relaxed)
    }
}

/// One write in the store's history.
#[derive(Clone, Debug)]
struct Write {
    by: String,
    action: LeaseAction,
    at: Instant,
}

#[derive(Default)]
struct Store {
    record: Option<Record>,
    version: u64,
    history: Vec<Write>,
}

/// A record store shared by the instances; each instance has its own [`FakeBackend`] handle,
/// which can be cut off or made to lose answers.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Store>>);

impl Shared {
    fn handle(&self, who: &str) -> Arc<FakeBackend> {
        Arc::new(FakeBackend {
            store: self.clone(),
            who: who.into(),
            cut: AtomicBool::new(false),
            hang: AtomicBool::new(false),
            lose_answer: AtomicBool::new(false),
            interfere: Mutex::new(None),
        })
    }

    fn record(&self) -> Option<Record> {
        self.0.lock().unwrap().record.clone()
    }

    fn history(&self) -> Vec<Write> {
        self.0.lock().unwrap().history.clone()
    }

    /// Someone outside the instances writes the record (a human, another tool).
    fn set(&self, record: Record) {
        let mut s = self.0.lock().unwrap();
        s.record = Some(record);
        s.version += 1;
    }
}

struct FakeBackend {
    store: Shared,
    who: String,
    /// Every call fails, as an unreachable backend.
    cut: AtomicBool,
    /// Every call hangs.
    hang: AtomicBool,
    /// The next write succeeds, but its answer is an error.
    lose_answer: AtomicBool,
    /// Written by someone else between this instance's read and its next write.
    interfere: Mutex<Option<Record>>,
}

impl FakeBackend {
    async fn reachable(&self) -> Result<(), BackendError> {
        if self.hang.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
        if self.cut.load(Ordering::Relaxed) {
            return Err(BackendError::Unavailable("connection refused".into()));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl LeaseBackend for FakeBackend {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn describe(&self) -> String {
        "fake record".into()
    }

    async fn read(&self) -> Result<Option<Observed>, BackendError> {
        self.reachable().await?;
        let s = self.store.0.lock().unwrap();
        Ok(s.record.clone().map(|record| Observed {
            record,
            version: Version::Opaque(s.version),
        }))
    }

    async fn write(
        &self,
        action: LeaseAction,
        read: Option<&Observed>,
        record: &Record,
        _expiry_seconds: u32,
    ) -> Result<(), BackendError> {
        self.reachable().await?;
        if let Some(other) = self.interfere.lock().unwrap().take() {
            self.store.set(other);
        }
        let mut s = self.store.0.lock().unwrap();
        let current = s.record.as_ref().map(|_| Version::Opaque(s.version));
        if current != read.map(|o| o.version.clone()) {
            return Err(BackendError::Conflict);
        }
        s.record = Some(record.clone());
        s.version += 1;
        s.history.push(Write {
            by: self.who.clone(),
            action,
            at: Instant::now(),
        });
        if self.lose_answer.swap(false, Ordering::Relaxed) {
            return Err(BackendError::Unavailable("connection reset".into()));
        }
        Ok(())
    }
}

/// The default plugin's logic, called natively.
struct NativeDrLease;

#[async_trait::async_trait]
impl Checker for NativeDrLease {
    async fn check(&self, r: StateRequest) -> Result<StateDecision, String> {
        let lease = r.lease.map(|l| dr_lease::Lease {
            owner: l.owner,
            updated_time: l.updated_time,
        });
        let d = dr_lease::decide(&dr_lease::Tick {
            identity: &r.identity,
            now: r.now,
            lease: lease.as_ref(),
            wait_time_seconds: r.wait_time_seconds,
            failure_threshold: r.failure_threshold,
            started_at: r.started_at,
            warmup_seconds: r.warmup_seconds,
        })?;
        Ok(StateDecision {
            state: match d.state {
                dr_lease::State::Active => DrState::Active,
                dr_lease::State::Passive => DrState::Passive,
            },
            action: match d.action {
                dr_lease::Action::None => LeaseAction::None,
                dr_lease::Action::Create => LeaseAction::Create,
                dr_lease::Action::Renew => LeaseAction::Renew,
                dr_lease::Action::Takeover => LeaseAction::Takeover,
            },
            reason: d.reason,
        })
    }
}

/// A checker with a fixed answer, or an error.
struct Fixed(Result<(DrState, LeaseAction), String>);

#[async_trait::async_trait]
impl Checker for Fixed {
    async fn check(&self, _r: StateRequest) -> Result<StateDecision, String> {
        self.0.clone().map(|(state, action)| StateDecision {
            state,
            action,
            reason: "fixed".into(),
        })
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl Notify for Events {
    async fn event(&self, _warning: bool, reason: &str, _note: String) {
        self.0.lock().unwrap().push(reason.into());
    }
}

struct Instance {
    machine: Machine,
    gate: Arc<WriteGate>,
    backend: Arc<FakeBackend>,
    events: Arc<Events>,
}

fn config(x: u32, y: u32, warmup: u32) -> DrConfig {
    DrConfig::parse(
        Some(&json!({"waitTimeInSeconds": x, "failureThreshold": y, "warmupSeconds": warmup})),
        "builtin://dr-lease",
    )
    .unwrap()
}

fn instance(shared: &Shared, who: &str, config: DrConfig, clock: Arc<FakeClock>) -> Instance {
    let gate = WriteGate::new(false);
    let backend = shared.handle(who);
    let events = Arc::new(Events::default());
    let started = clock.wall_ms();
    let machine = Machine::new(
        gate.clone(),
        backend.clone(),
        config,
        who.into(),
        started,
        clock,
        events.clone(),
        Arc::new(Status::default()),
    );
    Instance {
        machine,
        gate,
        backend,
        events,
    }
}

impl Instance {
    async fn tick(&mut self) -> TickOutcome {
        self.machine.tick(&NativeDrLease).await
    }

    fn events(&self) -> Vec<String> {
        self.events.0.lock().unwrap().clone()
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(start_paused = true)]
async fn an_absent_lease_is_created_and_held_for_y_x_minus_half_x() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    assert!(!a.gate.is_active(), "an instance starts passive");
    let t = Instant::now();
    let out = a.tick().await;
    assert_eq!(
        out,
        TickOutcome::Decided {
            action: LeaseAction::Create,
            written: Some(Ok(()))
        }
    );
    assert!(a.gate.is_active());
    assert_eq!(a.gate.deadline(), Some(t + secs(2.5)), "hold = y·x − x/2");
    let r = shared.record().unwrap();
    assert_eq!((r.owner.as_str(), r.updated_ms), ("a", T0));
    assert_eq!(r.notes, format!("Created at {}", T0 / 1000));
    assert_eq!(a.events(), ["DRActive"]);

    // Renewals move the hold and keep the notes.
    tokio::time::advance(secs(1.0)).await;
    assert_eq!(
        a.tick().await,
        TickOutcome::Decided {
            action: LeaseAction::Renew,
            written: Some(Ok(()))
        }
    );
    assert_eq!(a.gate.deadline(), Some(t + secs(3.5)));
    assert_eq!(shared.record().unwrap().notes, r.notes);
    assert_eq!(a.events(), ["DRActive"], "a renewal is no transition");
}

#[tokio::test(start_paused = true)]
async fn a_second_instance_stays_passive_and_writes_nothing() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::new());
    a.tick().await;
    for _ in 0..10 {
        tokio::time::advance(secs(0.3)).await;
        assert_eq!(
            b.tick().await,
            TickOutcome::Decided {
                action: LeaseAction::None,
                written: None
            }
        );
        tokio::time::advance(secs(0.7)).await;
        a.tick().await;
        assert!(a.gate.is_active() && !b.gate.is_active());
    }
    assert!(shared.history().iter().all(|w| w.by == "a"));
    assert!(b.events().is_empty());
}

/// The active stops (SIGKILL: no last write). The passive takes over after y·x, within
/// (y+1)·x, and only after the stopped one's gate had closed by itself.
#[tokio::test(start_paused = true)]
async fn the_passive_takes_over_after_the_active_stops_and_never_overlaps() {
    for (x, y, offset) in [(1, 3, 0.4), (1, 2, 0.9), (5, 3, 0.1), (2, 5, 1.5)] {
        let shared = Shared::default();
        let mut a = instance(&shared, "a", config(x, y, 0), FakeClock::new());
        let mut b = instance(&shared, "b", config(x, y, 0), FakeClock::new());
        a.tick().await;
        tokio::time::advance(secs(offset)).await;
        b.tick().await;
        tokio::time::advance(secs(f64::from(x) - offset)).await;
        a.tick().await;
        let last_write = Instant::now();
        let a_deadline = a.gate.deadline().unwrap();
        // `a` is gone; `b` ticks every x.
        tokio::time::advance(secs(offset)).await;
        let took_over = loop {
            let out = b.tick().await;
            if b.gate.is_active() {
                assert_eq!(
                    out,
                    TickOutcome::Decided {
                        action: LeaseAction::Takeover,
                        written: Some(Ok(()))
                    }
                );
                break Instant::now();
            }
            tokio::time::advance(secs(f64::from(x))).await;
        };
        let expiry = secs(f64::from(x * y));
        let waited = took_over - last_write;
        assert!(waited > expiry, "x={x} y={y}: took over after {waited:?}");
        assert!(
            waited <= expiry + secs(f64::from(x)),
            "x={x} y={y}: {waited:?}"
        );
        assert!(
            a_deadline < took_over,
            "the stopped instance's hold ended first"
        );
        let takeover = shared.history().last().cloned().unwrap();
        assert_eq!(
            (takeover.by.as_str(), takeover.action),
            ("b", LeaseAction::Takeover)
        );
        assert!(
            takeover.at > a_deadline,
            "the takeover write came after the old hold"
        );
        assert!(!a.gate.is_active());
        assert_eq!(b.events(), ["DRActive"]);
        assert_eq!(shared.record().unwrap().owner, "b");
    }
}

/// The active cannot reach the backend: it keeps ticking, fails to renew, and closes its gate
/// x/2 before the passive may take over, also with the passive's clock 400 ms ahead.
#[tokio::test(start_paused = true)]
async fn an_active_cut_off_demotes_itself_before_a_takeover_is_legal() {
    for skew in [0, 400] {
        let shared = Shared::default();
        let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
        let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::skewed(skew));
        a.tick().await;
        let last_write = Instant::now();
        a.backend.cut.store(true, Ordering::Relaxed);
        let mut demoted = None;
        let mut took_over = None;
        for step in 1..=60 {
            tokio::time::advance(secs(0.1)).await;
            if step % 10 == 0 {
                assert!(matches!(
                    a.tick().await,
                    TickOutcome::ReadFailed(_) | TickOutcome::Decided { .. }
                ));
            }
            if step % 10 == 3 {
                b.tick().await;
            }
            a.machine.expire_if_due().await;
            if demoted.is_none() && !a.gate.is_active() {
                demoted = Some(Instant::now());
            }
            if took_over.is_none() && b.gate.is_active() {
                took_over = Some(Instant::now());
                assert!(!a.gate.is_active(), "both active at once (skew {skew} ms)");
            }
        }
        let (demoted, took_over) = (demoted.unwrap(), took_over.unwrap());
        assert!(
            demoted - last_write <= secs(2.5),
            "{:?}",
            demoted - last_write
        );
        assert!(took_over - demoted >= secs(0.5) - Duration::from_millis(skew as u64));
        assert!(shared.history().iter().filter(|w| w.by == "a").count() == 1);
        assert_eq!(
            a.events(),
            ["DRActive"],
            "no Event once the lease may be gone"
        );
    }
}

/// A backend call that never returns does not keep the gate open: the tick gives up after x,
/// and the gate refuses at the end of the hold on its own.
#[tokio::test(start_paused = true)]
async fn a_hanging_backend_does_not_keep_the_gate_open() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    a.tick().await;
    let deadline = a.gate.deadline().unwrap();
    a.backend.hang.store(true, Ordering::Relaxed);
    let gate = a.gate.clone();
    let ticking = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        for _ in 0..4 {
            outcomes.push(a.tick().await);
        }
        outcomes
    });
    tokio::time::sleep_until(deadline - secs(0.01)).await;
    assert!(gate.is_active());
    tokio::time::sleep_until(deadline).await;
    assert!(!gate.is_active(), "the hold ended while a read hung");
    let outcomes = ticking.await.unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, TickOutcome::ReadFailed(e) if e.contains("within 1 s")))
    );
}

#[tokio::test(start_paused = true)]
async fn someone_else_writing_demotes_at_once() {
    // Between ticks: the record now names someone else.
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    a.tick().await;
    shared.set(Record {
        owner: "b".into(),
        updated_ms: T0,
        notes: String::new(),
    });
    tokio::time::advance(secs(1.0)).await;
    a.tick().await;
    assert!(!a.gate.is_active());
    assert_eq!(
        shared.history().len(),
        1,
        "no write over someone else's lease"
    );

    // Between a read and the renewal: the compare-and-swap fails.
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    a.tick().await;
    *a.backend.interfere.lock().unwrap() = Some(Record {
        owner: "b".into(),
        updated_ms: T0 + 1000,
        notes: String::new(),
    });
    tokio::time::advance(secs(1.0)).await;
    assert_eq!(
        a.tick().await,
        TickOutcome::Decided {
            action: LeaseAction::Renew,
            written: Some(Err(BackendError::Conflict))
        }
    );
    assert!(
        !a.gate.is_active(),
        "a lost compare-and-swap demotes at once"
    );
    assert_eq!(shared.record().unwrap().owner, "b");
}

#[tokio::test(start_paused = true)]
async fn racing_creators_get_one_winner() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    // Both read "absent"; b's create lands first.
    *a.backend.interfere.lock().unwrap() = Some(Record {
        owner: "b".into(),
        updated_ms: T0,
        notes: String::new(),
    });
    assert_eq!(
        a.tick().await,
        TickOutcome::Decided {
            action: LeaseAction::Create,
            written: Some(Err(BackendError::Conflict))
        }
    );
    assert!(!a.gate.is_active());
    assert_eq!(shared.record().unwrap().owner, "b");
    assert!(shared.history().is_empty(), "a wrote nothing");
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_is_confirmed_by_the_next_read() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    a.backend.lose_answer.store(true, Ordering::Relaxed);
    let t = Instant::now();
    assert!(matches!(
        a.tick().await,
        TickOutcome::Decided {
            action: LeaseAction::Create,
            written: Some(Err(BackendError::Unavailable(_)))
        }
    ));
    assert!(!a.gate.is_active(), "no answer, no gate");
    tokio::time::advance(secs(1.0)).await;
    a.tick().await;
    assert!(a.gate.is_active());
    assert_eq!(
        a.gate.deadline(),
        Some(t + secs(1.0) + secs(2.5)),
        "held from the renewal"
    );
    assert_eq!(shared.history().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn skip_lease_pod_keeps_everyone_passive() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::new());
    a.tick().await;
    shared.set(Record {
        owner: dr_lease::SKIP_LEASE_POD.into(),
        updated_ms: 0,
        notes: String::new(),
    });
    for _ in 0..20 {
        tokio::time::advance(secs(1.0)).await;
        a.tick().await;
        b.tick().await;
        assert!(!a.gate.is_active() && !b.gate.is_active());
    }
    assert_eq!(
        shared.history().len(),
        1,
        "nobody writes over SKIP-LEASE-POD"
    );
}

#[tokio::test(start_paused = true)]
async fn warm_up_keeps_a_fresh_instance_passive() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 5), FakeClock::new());
    for _ in 0..5 {
        a.tick().await;
        assert!(!a.gate.is_active());
        tokio::time::advance(secs(1.0)).await;
    }
    a.tick().await;
    assert!(a.gate.is_active(), "active once the warm-up is over");
    assert_eq!(shared.history().len(), 1);
}

/// A record naming this identity that this process did not write (an earlier run, a twin with
/// the same podIdentifier) is a peer's lease: taken over only once expired.
#[tokio::test(start_paused = true)]
async fn the_same_identity_in_another_process_is_a_peer() {
    let shared = Shared::default();
    let mut old = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    old.tick().await;
    let written = Instant::now();
    let mut new = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    loop {
        tokio::time::advance(secs(1.0)).await;
        new.tick().await;
        if new.gate.is_active() {
            break;
        }
    }
    assert!(Instant::now() - written > secs(3.0));
    assert_eq!(shared.history().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failing_plugin_keeps_the_hold_only_until_it_runs_out() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    a.tick().await;
    let failing = Fixed(Err("trapped".into()));
    tokio::time::advance(secs(1.0)).await;
    assert_eq!(
        a.machine.tick(&failing).await,
        TickOutcome::PluginFailed("trapped".into())
    );
    assert!(a.gate.is_active(), "still within the hold");
    tokio::time::advance(secs(1.6)).await;
    a.machine.tick(&failing).await;
    assert!(!a.gate.is_active());
    assert_eq!(shared.history().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn active_without_a_write_needs_the_none_backend() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    let says_active = Fixed(Ok((DrState::Active, LeaseAction::None)));
    a.machine.tick(&says_active).await;
    assert!(!a.gate.is_active(), "no lease write, no gate");

    let gate = WriteGate::new(false);
    let mut single = Machine::new(
        gate.clone(),
        Arc::new(NoBackend),
        DrConfig::parse(None, "builtin://none").unwrap(),
        "solo".into(),
        T0,
        FakeClock::new(),
        Arc::new(Events::default()),
        Arc::new(Status::default()),
    );
    single.tick(&says_active).await;
    assert!(gate.is_active());
    assert_eq!(gate.deadline(), None, "no lease, no deadline");
    tokio::time::advance(secs(3600.0)).await;
    assert!(gate.is_active());
    single
        .tick(&Fixed(Ok((DrState::Passive, LeaseAction::None))))
        .await;
    assert!(!gate.is_active());
}

#[tokio::test(start_paused = true)]
async fn a_shorter_hold_applies_to_the_current_lease() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(2, 5, 0), FakeClock::new());
    let t = Instant::now();
    a.tick().await;
    assert_eq!(a.gate.deadline(), Some(t + secs(9.0)));
    a.machine.reconfigure(config(1, 3, 0));
    assert_eq!(a.machine.deadline(), Some(t + secs(2.5)));
    assert_eq!(
        a.gate.deadline(),
        Some(t + secs(2.5)),
        "the gate's deadline too"
    );
    a.machine.reconfigure(config(2, 5, 0));
    assert_eq!(
        a.gate.deadline(),
        Some(t + secs(2.5)),
        "a longer hold waits for a write"
    );
}

// -------------------------------------------------------------------------------------------
/// A state checker that always claims the lease (a lease thief): its writes are the host's to
/// allow.
fn thief(action: LeaseAction) -> Fixed {
    Fixed(Ok((DrState::Active, action)))
}

/// While the holder renews every x, a thief whose clock runs a minute ahead (by its wall clock
/// the lease expired long ago) asks for a takeover, a renewal and a create every tick: the
/// host refuses every one, writes nothing and never opens its gate.
#[tokio::test(start_paused = true)]
async fn a_lease_thief_never_writes_over_a_renewed_lease_whatever_its_clock_says() {
    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::skewed(60_000));
    a.tick().await;
    for round in 0..30 {
        tokio::time::advance(secs(0.5)).await;
        let action = [
            LeaseAction::Takeover,
            LeaseAction::Renew,
            LeaseAction::Create,
        ][round % 3];
        let out = b.machine.tick(&thief(action)).await;
        assert!(
            matches!(out, TickOutcome::Refused { action: a, .. } if a == action),
            "round {round}: {out:?}"
        );
        assert!(
            !b.gate.is_active(),
            "round {round}: the thief's gate opened"
        );
        if round % 2 == 1 {
            a.tick().await;
        }
    }
    assert!(
        shared.history().iter().all(|w| w.by == "a"),
        "only the holder wrote: {:?}",
        shared.history()
    );
    assert!(a.gate.is_active());
}

/// Once the holder stops, a takeover is allowed only after the record stayed unchanged for
/// y × x on the taker's own monotonic clock, counted from its first read of that record: a
/// wall clock a minute behind (or ahead) changes nothing.
#[tokio::test(start_paused = true)]
async fn a_takeover_waits_y_x_of_the_takers_own_observation() {
    for skew in [-60_000, 60_000] {
        let shared = Shared::default();
        let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
        let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::skewed(skew));
        a.tick().await;
        // `a` stops at once; `b` first reads the record now.
        tokio::time::advance(secs(0.2)).await;
        let first_read = Instant::now();
        let took_over = loop {
            let out = b.machine.tick(&thief(LeaseAction::Takeover)).await;
            if b.gate.is_active() {
                assert_eq!(
                    out,
                    TickOutcome::Decided {
                        action: LeaseAction::Takeover,
                        written: Some(Ok(()))
                    }
                );
                break Instant::now();
            }
            assert!(
                matches!(&out, TickOutcome::Refused { reason, .. } if reason.contains("unchanged")),
                "{out:?}"
            );
            tokio::time::advance(secs(0.25)).await;
        };
        let waited = took_over - first_read;
        assert!(
            waited >= secs(3.0) && waited < secs(3.25),
            "skew {skew}: took over {waited:?} after the first read"
        );
        assert!(!a.gate.is_active(), "the old holder's hold ran out first");
    }
}

/// The same with a real component (tests/fixtures/hostile-dr, which claims the lease on every
/// tick) called through the plugin host, as the DR loop calls it.
#[tokio::test(start_paused = true)]
async fn the_lease_thief_component_is_refused_by_the_host() {
    use wasmop_plugin_host::{Hook, PluginRuntime, PluginSpec, RuntimeOptions};
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 1,
        pooling: false,
        extra_ca_pem: None,
    })
    .unwrap();
    let file = wasmop_tests::components_dir().join("wasmop_hostile_dr.wasm");
    let bytes = std::fs::read(&file).expect("the hostile-dr fixture is built by plugin-host");
    let spec = PluginSpec::new("thief", Hook::Dr, &format!("file://{}", file.display()));
    let thief = runtime
        .load(&spec, &bytes)
        .await
        .expect("the fixture loads");

    let shared = Shared::default();
    let mut a = instance(&shared, "a", config(1, 3, 0), FakeClock::new());
    let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::skewed(60_000));
    a.tick().await;
    for round in 0..10 {
        tokio::time::advance(secs(1.0)).await;
        a.tick().await;
        let out = b.machine.tick(&thief).await;
        assert!(
            matches!(
                out,
                TickOutcome::Refused {
                    action: LeaseAction::Takeover,
                    ..
                }
            ),
            "round {round}: {out:?}"
        );
        assert!(!b.gate.is_active());
    }
    assert!(shared.history().iter().all(|w| w.by == "a"));
}

/// A record someone changes (a renewal, a hand edit) starts the count again.
#[tokio::test(start_paused = true)]
async fn a_changed_record_starts_the_takeover_count_again() {
    let shared = Shared::default();
    let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::new());
    let owner = |updated_ms| Record {
        owner: "gone".into(),
        updated_ms,
        notes: String::new(),
    };
    shared.set(owner(0));
    b.machine.tick(&thief(LeaseAction::Takeover)).await;
    tokio::time::advance(secs(2.5)).await;
    shared.set(owner(1));
    tokio::time::advance(secs(0.1)).await;
    b.machine.tick(&thief(LeaseAction::Takeover)).await;
    tokio::time::advance(secs(2.9)).await;
    let out = b.machine.tick(&thief(LeaseAction::Takeover)).await;
    assert!(matches!(out, TickOutcome::Refused { .. }), "{out:?}");
    tokio::time::advance(secs(0.1)).await;
    let out = b.machine.tick(&thief(LeaseAction::Takeover)).await;
    assert_eq!(
        out,
        TickOutcome::Decided {
            action: LeaseAction::Takeover,
            written: Some(Ok(()))
        }
    );
}

/// `SKIP-LEASE-POD` is the host's rule too: a state checker that wants the lease anyway is
/// refused, however long the record stays.
#[tokio::test(start_paused = true)]
async fn skip_lease_pod_is_honoured_by_the_host() {
    let shared = Shared::default();
    let mut b = instance(&shared, "b", config(1, 3, 0), FakeClock::new());
    shared.set(Record {
        owner: super::machine::SKIP_LEASE_POD.into(),
        updated_ms: 0,
        notes: String::new(),
    });
    for _ in 0..10 {
        let out = b.machine.tick(&thief(LeaseAction::Takeover)).await;
        assert!(
            matches!(&out, TickOutcome::Refused { reason, .. } if reason.contains("SKIP-LEASE-POD")),
            "{out:?}"
        );
        tokio::time::advance(secs(1.0)).await;
    }
    assert!(shared.history().is_empty());
    assert!(!b.gate.is_active());
}

// The run loop: settings from the registry, bad settings, reloads.

mod run_loop {
    use super::*;
    use wasmop_plugin_host::registry::{LocalFetch, RegistryConfig};

    use crate::Context;

    /// A context whose API server is unreachable (any request fails) with the builtins loaded
    /// from `yaml`.
    async fn context(yaml: &str) -> Arc<Context> {
        let ctx = crate::test_support::unreachable_context_as("solo");
        reload(&ctx, yaml).await;
        ctx
    }

    async fn reload(ctx: &Context, yaml: &str) {
        let report = ctx
            .plugins
            .apply(RegistryConfig::parse(yaml).unwrap(), &LocalFetch::default())
            .await;
        assert!(report.failed.is_empty(), "{report:?}");
        ctx.plugins.reloaded();
    }

    fn dr_entry(settings: &str) -> String {
        format!(
            "plugins:\n  - {{name: dr, hook: dr, source: 'builtin://dr-lease', settings: {settings}}}\ndefaults: {{dr: dr}}\n"
        )
    }

    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        for _ in 0..200 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn bad_settings_leave_the_instance_passive_and_a_reload_fixes_them() {
        let ctx = context(&dr_entry("{waitTimeInSeconds: 0}")).await;
        let status = Arc::new(Status::default());
        let task = tokio::spawn(super::super::run(
            ctx.clone(),
            status.clone(),
            super::super::Options::default(),
        ));
        until("the settings error", || {
            status
                .snapshot()
                .error
                .is_some_and(|e| e.contains("waitTimeInSeconds is 0"))
        })
        .await;
        assert!(!ctx.kernel.gate().is_active());
        assert_eq!(status.snapshot().state, "passive");

        // The same instance, the backend unreachable (the API server at a closed port).
        reload(&ctx, &dr_entry("{waitTimeInSeconds: 1}")).await;
        until("the backend error", || {
            status
                .snapshot()
                .error
                .is_some_and(|e| e.contains("cannot read Lease"))
        })
        .await;
        assert!(!ctx.kernel.gate().is_active());

        // Single instance: the `none` state checker and backend.
        reload(
            &ctx,
            "plugins:\n  - {name: solo, hook: dr, source: 'builtin://none'}\ndefaults: {dr: solo}\n",
        )
        .await;
        until("active", || ctx.kernel.gate().is_active()).await;
        assert_eq!(ctx.kernel.gate().deadline(), None);
        let s = status.snapshot();
        assert_eq!((s.state.as_str(), s.identity.as_str()), ("active", "solo"));
        assert_eq!(s.error, None);

        // Back to bad settings: passive again, without a restart.
        reload(&ctx, &dr_entry("{dynamoDB: {region: us-east-1}}")).await;
        until("passive", || !ctx.kernel.gate().is_active()).await;
        assert!(
            status
                .snapshot()
                .error
                .unwrap()
                .contains("tableName is required")
        );
        assert!(!task.is_finished(), "the loop never ends on bad settings");
        task.abort();
    }

    /// A DynamoDB entry whose endpoint refuses connections: the backend the loop runs with
    /// shows in `/dr` without any network.
    const DYNAMODB: &str = "{dynamoDB: {tableName: admiral-lease, region: us-east-1, endpoint: 'http://127.0.0.1:1'}, waitTimeInSeconds: 1}";

    async fn fall_back(ctx: &Context) {
        ctx.plugins
            .apply_fallback(
                "ConfigMap wasmop-plugins was deleted".into(),
                &LocalFetch::default(),
            )
            .await;
        ctx.plugins.reloaded();
    }

    /// Deleting or breaking `wasmop-plugins` makes the registry serve the builtin defaults,
    /// whose `dr-lease` would hold a Lease of this instance's own. The DR loop keeps the
    /// shared DynamoDB lease it was configured with instead, until a valid registry says
    /// otherwise.
    #[tokio::test]
    async fn a_missing_registry_never_changes_the_dr_backend() {
        let ctx = context(&dr_entry(DYNAMODB)).await;
        let status = Arc::new(Status::default());
        let task = tokio::spawn(super::super::run(
            ctx.clone(),
            status.clone(),
            super::super::Options::default(),
        ));
        until("the DynamoDB backend", || {
            status
                .snapshot()
                .backend
                .starts_with("DynamoDB table admiral-lease")
        })
        .await;

        fall_back(&ctx).await;
        until("the registry error shown", || {
            status
                .snapshot()
                .registry_error
                .is_some_and(|e| e.contains("was deleted") && e.contains("last good"))
        })
        .await;
        // A few ticks later the backend is still the shared one.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            status.snapshot().backend.starts_with("DynamoDB table"),
            "{}",
            status.snapshot().backend
        );
        assert_eq!(status.snapshot().backend_kind, "dynamodb");
        assert!(!ctx.kernel.gate().is_active());

        // A valid registry changes it.
        reload(
            &ctx,
            "plugins:\n  - {name: solo, hook: dr, source: 'builtin://none'}\ndefaults: {dr: solo}\n",
        )
        .await;
        until("the none backend", || ctx.kernel.gate().is_active()).await;
        assert_eq!(status.snapshot().registry_error, None);
        task.abort();
    }

    /// An instance that starts without a usable registry and is told its install uses a shared
    /// backend stays passive rather than holding a Lease of the builtin defaults.
    #[tokio::test]
    async fn an_instance_starting_without_a_registry_stays_passive_when_told_its_backend() {
        let ctx = crate::test_support::unreachable_context_as("solo");
        fall_back(&ctx).await;
        let status = Arc::new(Status::default());
        let opts = super::super::Options {
            backend: super::super::ExpectedBackend::Dynamodb,
        };
        let task = tokio::spawn(super::super::run(ctx.clone(), status.clone(), opts));
        until("the refusal", || {
            status
                .snapshot()
                .error
                .is_some_and(|e| e.contains("--dr-backend") && e.contains("was deleted"))
        })
        .await;
        assert_eq!(status.snapshot().state, "passive");
        assert!(
            !status.snapshot().backend.starts_with("Lease"),
            "no Lease of its own: {}",
            status.snapshot().backend
        );
        assert_ne!(status.snapshot().backend_kind, "k8s-lease");

        // With `auto` the builtin default applies, as on a fresh install.
        task.abort();
        let status = Arc::new(Status::default());
        let task = tokio::spawn(super::super::run(
            ctx.clone(),
            status.clone(),
            super::super::Options::default(),
        ));
        until("the builtin Lease", || {
            status
                .snapshot()
                .backend
                .starts_with("Lease wasmop-system/")
        })
        .await;
        task.abort();
    }
}
