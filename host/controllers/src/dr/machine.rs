//! One instance's DR state: each [`Machine::tick`] reads the lease record, asks the state
//! checker for (state, action), makes the write with compare-and-swap on what was read, and
//! opens or closes the write gate.
//!
//! The rules the host adds to the plugin's decision:
//! - **Active only after its own write.** The gate opens when a `create`, `renew` or
//!   `takeover` write succeeds (or when a read shows the record this instance wrote last, e.g.
//!   a write whose answer was lost), and only until the **hold** runs out:
//!   `y × x − x/2` after the write's timestamp was taken, on this instance's monotonic clock
//!   ([`super::config::DrConfig::hold`]). Each successful renewal moves the hold.
//! - **Demotion before any takeover is legal.** A peer may take over only when its wall clock is
//!   more than `y × x` past the record's timestamp; the hold ends `x/2` earlier, so an instance
//!   that cannot renew (backend unreachable, plugin failing) closes its gate before that, and
//!   the [`wasmop_kernel::gate::Writer`] abandons writes still in flight at that moment.
//! - **Someone else wrote: stop at once.** A read that shows a record this instance did not
//!   write while it holds the lease (a takeover, a manual `SKIP-LEASE-POD`, a deleted Lease),
//!   or a compare-and-swap conflict, closes the gate immediately.
//! - **The record names this instance, but another process wrote it** (an earlier run under
//!   the same name, or a second instance given the same `podIdentifier`): the plugin is shown
//!   the owner as `<identity> (not written by this process)`, so the default plugin treats it as
//!   a peer's lease and takes over only once it expired.
//! - `active` with action `none` keeps a lease this instance holds (without moving the hold),
//!   opens the gate with the `none` backend (no shared record), and is refused otherwise.
//! - **Every write is the host's to allow**, whatever the plugin answers ([`Machine::allowed`]):
//!   `create` only when no record exists, `renew` only of a record this process wrote,
//!   `takeover` only of a peer's record that has not changed for `y × x` on this instance's own
//!   monotonic clock, counted from when it first read that record (as client-go's leader
//!   election counts from its observed time), and no write at all over a record owned by
//!   [`SKIP_LEASE_POD`]. A hostile or buggy state checker, or wall clocks skewed between
//!   instances, can then never make two writers; a refused write is a `refused` tick and
//!   changes nothing.
//! - A failed read, plugin call or write changes nothing: a holder stays active until its hold
//!   runs out, then becomes passive.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::time::Instant;

use super::backend::{BackendError, LeaseBackend, Observed, Record};
use super::config::DrConfig;
use super::metrics;
use wasmop_kernel::gate::WriteGate;
use wasmop_plugin_host::{DrState, LeaseAction, LeaseRecord, StateDecision, StateRequest};

/// The owner Admiral's operators write by hand to keep every instance passive.
pub const SKIP_LEASE_POD: &str = "SKIP-LEASE-POD";

/// Wall and monotonic time. Tests use tokio's paused clock plus an offset.
pub trait Clock: Send + Sync {
    /// Unix milliseconds.
    fn wall_ms(&self) -> i64;
    /// tokio's monotonic clock (the write gate's deadlines are on it).
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// The system's clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn wall_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// The state checker: the `dr` plugin in production.
#[async_trait::async_trait]
pub trait Checker: Send + Sync {
    /// One tick's decision.
    ///
    /// # Errors
    /// Why no decision was made (the plugin's error, a trap, a timeout...).
    async fn check(&self, request: StateRequest) -> Result<StateDecision, String>;
}

#[async_trait::async_trait]
impl Checker for Arc<wasmop_plugin_host::Plugin> {
    async fn check(&self, request: StateRequest) -> Result<StateDecision, String> {
        wasmop_plugin_host::Plugin::check(self, request)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Records the DR Events (through the write gate: only an active instance records any).
#[async_trait::async_trait]
pub trait Notify: Send + Sync {
    /// Publishes an Event `reason` with `note`.
    async fn event(&self, warning: bool, reason: &str, note: String);
}

/// What `/dr` shows: this instance's view of the lease.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusSnapshot {
    /// `active` or `passive`.
    pub state: String,
    /// This instance's identity.
    pub identity: String,
    /// Where the lease record is, for people (e.g. `Lease ns/wasmop`,
    /// `DynamoDB table admiral-lease, lease …`).
    pub backend: String,
    /// The backend's kind, for programs: `k8s-lease`, `dynamodb` or `none` (the values of the
    /// DR settings' `backend`).
    pub backend_kind: String,
    /// The owner last read, if the record exists.
    pub holder: Option<String>,
    /// When the owner last wrote it (Unix ms), as last read.
    pub holder_updated_ms: Option<i64>,
    /// x, seconds.
    pub wait_time_seconds: u32,
    /// y.
    pub failure_threshold: u32,
    /// How long a lease write keeps this instance active, milliseconds.
    pub hold_ms: u64,
    /// Milliseconds until the hold runs out, while active with a lease.
    pub hold_left_ms: Option<u64>,
    /// The last decision's reason or transition.
    pub reason: String,
    /// The last error (config, read, plugin, write), cleared by a successful tick.
    pub error: Option<String>,
    /// Why `wasmop-plugins` is not usable while the loop keeps its last good configuration.
    pub registry_error: Option<String>,
}

/// The shared, latest [`StatusSnapshot`].
#[derive(Debug, Default)]
pub struct Status(Mutex<StatusSnapshot>);

impl Status {
    /// A copy of the current snapshot.
    pub fn snapshot(&self) -> StatusSnapshot {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes the snapshot.
    pub fn update(&self, f: impl FnOnce(&mut StatusSnapshot)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// The last lease write this instance attempted: the record and when its timestamp was taken.
#[derive(Clone, Debug)]
struct Attempt {
    record: Record,
    at: Instant,
}

/// How a tick ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TickOutcome {
    /// A decision was made and carried out (whatever the write's outcome).
    Decided {
        /// The action the plugin chose.
        action: LeaseAction,
        /// Whether the lease write (if any) succeeded.
        written: Option<Result<(), BackendError>>,
    },
    /// The record could not be read.
    ReadFailed(String),
    /// The plugin gave no decision.
    PluginFailed(String),
    /// The plugin asked for a write the host does not allow (see [`Machine::allowed`]);
    /// nothing was written.
    Refused {
        /// The action the plugin chose.
        action: LeaseAction,
        /// Why the host refused it.
        reason: String,
    },
}

/// One instance's DR state machine over one backend and configuration.
pub struct Machine {
    gate: Arc<WriteGate>,
    backend: Arc<dyn LeaseBackend>,
    config: DrConfig,
    identity: String,
    started_at_ms: i64,
    clock: Arc<dyn Clock>,
    notify: Arc<dyn Notify>,
    status: Arc<Status>,
    active: bool,
    deadline: Option<Instant>,
    /// The last write attempted (its answer may have been lost).
    last_attempt: Option<Attempt>,
    /// The last write that succeeded.
    last_written: Option<Attempt>,
    /// The record last read and when this instance first read it unchanged (monotonic).
    observed: Option<(Record, Instant)>,
}

impl Machine {
    /// A passive machine for `identity` (already resolved from `podIdentifier` or
    /// `--identity`), started at `started_at_ms` (the warm-up counts from it).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gate: Arc<WriteGate>,
        backend: Arc<dyn LeaseBackend>,
        config: DrConfig,
        identity: String,
        started_at_ms: i64,
        clock: Arc<dyn Clock>,
        notify: Arc<dyn Notify>,
        status: Arc<Status>,
    ) -> Self {
        gate.set_active(false);
        let m = Self {
            gate,
            backend,
            config,
            identity,
            started_at_ms,
            clock,
            notify,
            status,
            active: false,
            deadline: None,
            last_attempt: None,
            last_written: None,
            observed: None,
        };
        m.publish(|s| s.reason = "starting: passive until a lease write succeeds".into());
        m
    }

    /// The configuration in force.
    pub fn config(&self) -> &DrConfig {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LeaseBackend> {
        &self.backend
    }

    /// This instance's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this instance holds the lease now (active, and before its hold ran out).
    pub fn holding(&self) -> bool {
        self.active && self.deadline.is_none_or(|d| self.clock.now() < d)
    }

    /// When the current hold runs out, while active with a lease.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.filter(|_| self.active)
    }

    fn publish(&self, f: impl FnOnce(&mut StatusSnapshot)) {
        let now = self.clock.now();
        self.status.update(|s| {
            s.state = if self.holding() { "active" } else { "passive" }.into();
            s.identity.clone_from(&self.identity);
            s.backend = self.backend.describe();
            s.backend_kind = self.backend.kind().into();
            s.wait_time_seconds = self.config.wait_time_seconds;
            s.failure_threshold = self.config.failure_threshold;
            s.hold_ms = u64::try_from(self.config.hold().as_millis()).unwrap_or(u64::MAX);
            s.hold_left_ms = self
                .deadline()
                .map(|d| u64::try_from(d.saturating_duration_since(now).as_millis()).unwrap_or(0));
            f(s);
        });
    }

    /// Applies new timings (x, y, warm-up) of the same backend and identity, keeping the state;
    /// a hold is shortened if the new `y × x − x/2` ends sooner.
    pub(crate) fn reconfigure(&mut self, config: DrConfig) {
        self.config = config;
        if let (Some(d), Some(a)) = (self.deadline, &self.last_written) {
            let shorter = d.min(a.at + self.config.hold());
            self.deadline = Some(shorter);
            if self.active {
                self.gate.set_active_until(shorter);
            }
        }
        self.publish(|_| {});
    }

    /// Closes the gate if the hold ran out; returns whether it did.
    pub async fn expire_if_due(&mut self) -> bool {
        if self.active && !self.holding() {
            let note = format!(
                "the lease was not renewed within {} ms (y × x − x/2); passive before any peer may take over",
                self.config.hold().as_millis()
            );
            self.demote("expired", note, false).await;
            return true;
        }
        false
    }

    /// Becomes passive for `cause`. A `voluntary` demotion of an instance that still holds the
    /// lease records an Event first (the gate is still open and no peer can have taken over);
    /// otherwise only a log line and the metrics tell.
    pub async fn demote(&mut self, cause: &str, note: String, voluntary: bool) {
        if !self.active {
            self.publish(|s| s.reason.clone_from(&note));
            return;
        }
        if voluntary && self.holding() {
            self.notify
                .event(
                    false,
                    "DRPassive",
                    format!("{}: passive: {note}", self.identity),
                )
                .await;
        }
        self.gate.set_active(false);
        self.active = false;
        self.deadline = None;
        metrics::transition(false, cause);
        tracing::warn!(identity = %self.identity, backend = %self.backend.describe(), cause, "DR: now passive (writes refused): {note}");
        self.publish(|s| s.reason = format!("passive ({cause}): {note}"));
    }

    /// Becomes (or stays) active until `deadline` (`None`: without a lease, backend `none`).
    async fn promote(&mut self, deadline: Option<Instant>, cause: &str, note: String) {
        if let Some(d) = deadline
            && d <= self.clock.now()
        {
            // The write took longer than the hold: it is already over.
            self.demote(
                "expired",
                format!("{note}, but the write took longer than the hold"),
                false,
            )
            .await;
            return;
        }
        match deadline {
            Some(d) => self.gate.set_active_until(d),
            None => self.gate.set_active(true),
        };
        self.deadline = deadline;
        if self.active {
            self.publish(|s| s.reason.clone_from(&note));
            return;
        }
        self.active = true;
        metrics::transition(true, cause);
        tracing::info!(identity = %self.identity, backend = %self.backend.describe(), cause, "DR: now active (writes allowed): {note}");
        self.publish(|s| s.reason = format!("active ({cause}): {note}"));
        self.notify
            .event(
                false,
                "DRActive",
                format!("{}: active: {note}", self.identity),
            )
            .await;
    }

    fn failed(&self, outcome: &str, error: String) {
        metrics::tick(outcome);
        let left = self
            .deadline()
            .map(|d| d.saturating_duration_since(self.clock.now()));
        match left {
            Some(left) if self.active => tracing::warn!(
                identity = %self.identity,
                "DR: {error}; still active for {} ms unless a renewal succeeds",
                left.as_millis()
            ),
            _ => tracing::warn!(identity = %self.identity, "DR: {error}"),
        }
        self.publish(|s| s.error = Some(error));
    }

    /// One tick: read, decide, write, open or close the gate.
    pub async fn tick(&mut self, checker: &dyn Checker) -> TickOutcome {
        self.expire_if_due().await;
        let x = self.config.interval();
        let read = match tokio::time::timeout(x, self.backend.read()).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                let e = e.to_string();
                self.failed("read_error", e.clone());
                return TickOutcome::ReadFailed(e);
            }
            Err(_) => {
                let e = format!(
                    "no answer from {} within {} s",
                    self.backend.describe(),
                    x.as_secs()
                );
                self.failed("read_error", e.clone());
                return TickOutcome::ReadFailed(e);
            }
        };
        let record = read.as_ref().map(|o| &o.record);
        let now = self.clock.now();
        match (record, &self.observed) {
            (Some(r), Some((seen, _))) if seen == r => {}
            (Some(r), _) => self.observed = Some((r.clone(), now)),
            (None, _) => self.observed = None,
        }
        self.publish(|s| {
            s.holder = record.map(|r| r.owner.clone());
            s.holder_updated_ms = record.map(|r| r.updated_ms);
        });
        // A record this instance wrote: its last successful write, or its last attempt.
        let mine = record.filter(|_| self.backend.shared()).and_then(|r| {
            [&self.last_written, &self.last_attempt]
                .into_iter()
                .flatten()
                .find(|a| a.record == *r)
                .map(|a| a.at)
        });
        let ours = mine.is_some();
        if self.backend.shared() && self.active && !ours {
            let note = match record {
                Some(r) => format!(
                    "the lease record was written by someone else (owner {:?})",
                    r.owner
                ),
                None => "the lease record is gone".to_owned(),
            };
            self.demote("conflict", note, false).await;
        }
        if let Some(at) = mine
            && !self.active
        {
            let deadline = at + self.config.hold();
            if deadline > self.clock.now() {
                self.promote(
                    Some(deadline),
                    "renew",
                    "the read confirms this instance's last lease write".into(),
                )
                .await;
            }
        }
        let decision = match self.decide(checker, read.as_ref(), ours).await {
            Ok(d) => d,
            Err(e) => {
                self.failed("plugin_error", e.clone());
                return TickOutcome::PluginFailed(e);
            }
        };
        if let Err(reason) = self.allowed(decision.action, read.as_ref().map(|o| &o.record), ours) {
            metrics::tick("refused");
            let action = action_label(decision.action);
            tracing::warn!(identity = %self.identity, action, "DR: the state checker asked for a {action} the host does not allow: {reason}; nothing written");
            self.publish(|s| s.error = Some(format!("{action} refused: {reason}")));
            return TickOutcome::Refused {
                action: decision.action,
                reason,
            };
        }
        let outcome = self.act(decision, read.as_ref()).await;
        match &outcome {
            TickOutcome::Decided {
                written: Some(Err(BackendError::Unavailable(_))),
                ..
            } => {}
            TickOutcome::Decided {
                written: Some(Err(BackendError::Conflict)),
                ..
            } => metrics::tick("conflict"),
            _ => {
                metrics::tick("ok");
                self.publish(|s| s.error = None);
            }
        }
        outcome
    }

    /// Whether the host allows `action` over `record` (the record just read; `ours`: this
    /// process wrote it), whatever the state checker decided.
    ///
    /// # Errors
    /// Why not, for the log, the metrics and `/dr`.
    pub fn allowed(
        &self,
        action: LeaseAction,
        record: Option<&Record>,
        ours: bool,
    ) -> Result<(), String> {
        if !self.backend.shared() || action == LeaseAction::None {
            return Ok(());
        }
        if let Some(r) = record
            && r.owner == SKIP_LEASE_POD
        {
            return Err(format!(
                "the lease is owned by {SKIP_LEASE_POD}, which keeps every instance passive"
            ));
        }
        match (action, record) {
            (LeaseAction::Create, None) => Ok(()),
            (LeaseAction::Create, Some(r)) => Err(format!(
                "the lease exists (owner {:?}): only an absent lease is created",
                r.owner
            )),
            (LeaseAction::Renew, Some(_)) if ours => Ok(()),
            (LeaseAction::Renew, _) => {
                Err("only a lease this instance wrote itself is renewed".into())
            }
            (LeaseAction::Takeover, None) => Err("there is no lease to take over".into()),
            (LeaseAction::Takeover, Some(r)) => {
                let expiry = self.config.interval() * self.config.failure_threshold;
                let unchanged = self
                    .observed
                    .as_ref()
                    .filter(|(seen, _)| seen == r)
                    .map(|(_, since)| self.clock.now().saturating_duration_since(*since));
                match unchanged {
                    Some(d) if d >= expiry => Ok(()),
                    Some(d) => Err(format!(
                        "the lease of {:?} has been unchanged for {} ms by this instance's clock, \
                         less than y × x = {} ms",
                        r.owner,
                        d.as_millis(),
                        expiry.as_millis()
                    )),
                    None => Err("the lease was not read unchanged before".into()),
                }
            }
            (LeaseAction::None, _) => Ok(()),
        }
    }

    async fn decide(
        &self,
        checker: &dyn Checker,
        read: Option<&Observed>,
        ours: bool,
    ) -> Result<StateDecision, String> {
        let lease = read.map(|o| LeaseRecord {
            owner: if o.record.owner == self.identity && !ours {
                format!("{} (not written by this process)", self.identity)
            } else {
                o.record.owner.clone()
            },
            updated_time: o.record.updated_ms,
            notes: o.record.notes.clone(),
        });
        let request = StateRequest {
            identity: self.identity.clone(),
            now: self.clock.wall_ms(),
            lease,
            wait_time_seconds: self.config.wait_time_seconds,
            failure_threshold: self.config.failure_threshold,
            started_at: self.started_at_ms,
            warmup_seconds: self.config.warmup_seconds,
        };
        let x = self.config.interval();
        match tokio::time::timeout(x, checker.check(request)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "the state checker gave no answer within {} s",
                x.as_secs()
            )),
        }
    }

    async fn act(&mut self, d: StateDecision, read: Option<&Observed>) -> TickOutcome {
        let active = d.state == DrState::Active;
        if d.action == LeaseAction::None {
            if !active {
                self.demote("decision", d.reason.clone(), true).await;
            } else if !self.backend.shared() {
                self.promote(None, "none", d.reason.clone()).await;
            } else if self.holding() {
                self.publish(|s| s.reason.clone_from(&d.reason));
            } else {
                self.publish(|s| {
                    s.reason = format!(
                        "passive: the state checker said active without a lease write ({}); the gate opens only after a successful write",
                        d.reason
                    );
                });
            }
            return TickOutcome::Decided {
                action: d.action,
                written: None,
            };
        }
        let (wall, at) = (self.clock.wall_ms(), self.clock.now());
        let record = Record {
            owner: self.identity.clone(),
            updated_ms: self.backend.stamp(wall),
            notes: match (d.action, read) {
                (LeaseAction::Create, _) | (_, None) => {
                    format!("Created at {}", wall.div_euclid(1000))
                }
                (_, Some(o)) => o.record.notes.clone(),
            },
        };
        self.last_attempt = Some(Attempt {
            record: record.clone(),
            at,
        });
        let expiry = self.config.wait_time_seconds * self.config.failure_threshold;
        let x = self.config.interval();
        let result = match tokio::time::timeout(
            x,
            self.backend.write(d.action, read, &record, expiry),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(BackendError::Unavailable(format!(
                "no answer from {} within {} s",
                self.backend.describe(),
                x.as_secs()
            ))),
        };
        let action = action_label(d.action);
        metrics::lease_write(
            self.backend.kind(),
            action,
            result.as_ref().err().map_or("ok", BackendError::label),
        );
        if result.is_ok() {
            self.last_written = self.last_attempt.clone();
            self.publish(|s| {
                s.holder = Some(record.owner.clone());
                s.holder_updated_ms = Some(record.updated_ms);
            });
        }
        match &result {
            Ok(()) if active => {
                let deadline = self.backend.shared().then(|| at + self.config.hold());
                self.promote(deadline, action, d.reason.clone()).await;
            }
            Ok(()) => self.demote("decision", d.reason.clone(), true).await,
            Err(BackendError::Conflict) => {
                self.demote(
                    "conflict",
                    format!("{action} failed: the lease changed since it was read"),
                    false,
                )
                .await;
            }
            Err(BackendError::Unavailable(e)) => {
                self.failed("write_error", format!("{action} failed: {e}"));
            }
        }
        TickOutcome::Decided {
            action: d.action,
            written: Some(result),
        }
    }
}

/// The name of a lease action in logs and metrics.
pub(crate) fn action_label(action: LeaseAction) -> &'static str {
    match action {
        LeaseAction::None => "none",
        LeaseAction::Create => "create",
        LeaseAction::Renew => "renew",
        LeaseAction::Takeover => "takeover",
    }
}
