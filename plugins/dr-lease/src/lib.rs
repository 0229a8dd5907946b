//! The default `dr` plugin: decides, once per tick, whether this instance is active or passive
//! and which lease write it makes. The rules follow Admiral's DynamoDB state checker
//! (docs/dr.md), with its boundaries made exact. The first matching row wins:
//!
//! | # | lease read | decision |
//! |---|---|---|
//! | 1 | absent, this instance warming up | passive, `none` |
//! | 2 | absent | active, `create` |
//! | 3 | owner `SKIP-LEASE-POD` | passive, `none` (manual all-passive switch) |
//! | 4 | any other owner, this instance warming up | passive, `none` (its own lease is not renewed, so a peer may take over) |
//! | 5 | owner empty | active, `takeover` |
//! | 6 | owner is this instance | active, `renew` |
//! | 7 | another owner, `now - updatedTime > y × x` | active, `takeover` |
//! | 8 | another owner, otherwise | passive, `none` |
//!
//! Exact boundaries, in milliseconds of the tick's `now`:
//! - **Takeover** (row 7) happens only **after** `y × x` seconds: a lease last written
//!   exactly `y × x × 1000` ms ago is still held, one written `y × x × 1000 + 1` ms ago is
//!   taken over (Admiral's strict `updatedTime < now - x*y`). A record stamped in the future
//!   (clock skew) is held.
//! - **Warm-up** covers `now - startedAt < warmupSeconds × 1000`: at exactly `warmupSeconds`
//!   after the start the instance may create, renew and take over.
//!
//! Departures from Admiral: an empty owner (row 5) is taken with a compare-and-swap and makes
//! the instance active at once (Admiral wrote it without becoming active, before its warm-up
//! check); "active" means "active if the write succeeds": the host opens its write gate only
//! when the compare-and-swap write succeeds, so no re-read tick is needed.

#[cfg(target_arch = "wasm32")]
mod component;

/// The owner value that keeps every instance passive (Admiral's manual switch).
pub const SKIP_LEASE_POD: &str = "SKIP-LEASE-POD";

/// The lease record as read from the backend; times in Unix milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Current holder.
    pub owner: String,
    /// When the holder last wrote it (Unix ms).
    pub updated_time: i64,
}

/// One tick's input; times in Unix milliseconds, durations as named.
#[derive(Clone, Debug)]
pub struct Tick<'a> {
    /// This instance's identity.
    pub identity: &'a str,
    /// Current time (Unix ms).
    pub now: i64,
    /// The record read this tick, `None` if absent.
    pub lease: Option<&'a Lease>,
    /// `waitTimeInSeconds` (x).
    pub wait_time_seconds: u32,
    /// `failureThreshold` (y).
    pub failure_threshold: u32,
    /// When this instance started (Unix ms).
    pub started_at: i64,
    /// Warm-up during which this instance stays passive, in seconds.
    pub warmup_seconds: u32,
}

/// The role this instance takes if its write (if any) succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Holds the lease and writes.
    Active,
    /// Watches only.
    Passive,
}

/// The lease write to make, compare-and-swap on what was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// No write.
    None,
    /// Create the absent lease with this instance as owner.
    Create,
    /// Refresh this instance's own lease.
    Renew,
    /// Replace an expired or empty owner with this instance.
    Takeover,
}

/// The decision and a human-readable reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The state to take.
    pub state: State,
    /// The write to make.
    pub action: Action,
    /// Why, for logs and Events.
    pub reason: String,
}

fn decision(state: State, action: Action, reason: impl Into<String>) -> Decision {
    Decision {
        state,
        action,
        reason: reason.into(),
    }
}

/// Validates the plugin settings: the DR settings (docs/dr.md), with no keys of its own.
///
/// # Errors
/// A `plugin-error` at `settings` when they are not a JSON object, or at `settings.KEY` for a
/// key the DR settings do not have.
pub fn validate_settings(settings: &str) -> Result<(), wasmop_plugin_sdk::PluginError> {
    wasmop_plugin_sdk::dr_settings::validate(settings).map(drop)
}

/// Decides one tick; see the module documentation for the table it implements.
///
/// # Errors
/// `wait_time_seconds` or `failure_threshold` of 0, which would make every lease expired.
pub fn decide(t: &Tick<'_>) -> Result<Decision, String> {
    if t.wait_time_seconds == 0 {
        return Err("waitTimeInSeconds must be at least 1".into());
    }
    if t.failure_threshold == 0 {
        return Err("failureThreshold must be at least 1".into());
    }
    let warming = t.now - t.started_at < i64::from(t.warmup_seconds) * 1000;
    let Some(lease) = t.lease else {
        return Ok(if warming {
            decision(
                State::Passive,
                Action::None,
                "lease absent; still warming up",
            )
        } else {
            decision(State::Active, Action::Create, "lease absent; creating it")
        });
    };
    if lease.owner == SKIP_LEASE_POD {
        return Ok(decision(
            State::Passive,
            Action::None,
            format!("lease owner is {SKIP_LEASE_POD}: every instance stays passive"),
        ));
    }
    if warming {
        return Ok(decision(State::Passive, Action::None, "warming up"));
    }
    if lease.owner.is_empty() {
        return Ok(decision(
            State::Active,
            Action::Takeover,
            "lease has no owner; taking it",
        ));
    }
    if lease.owner == t.identity {
        return Ok(decision(
            State::Active,
            Action::Renew,
            "holding the lease; renewing",
        ));
    }
    let expiry_ms = i64::from(t.wait_time_seconds) * i64::from(t.failure_threshold) * 1000;
    let age = t.now - lease.updated_time;
    if age > expiry_ms {
        Ok(decision(
            State::Active,
            Action::Takeover,
            format!(
                "lease of {} not renewed for {age} ms (> {expiry_ms} ms); taking over",
                lease.owner
            ),
        ))
    } else {
        Ok(decision(
            State::Passive,
            Action::None,
            format!("lease held by {} (renewed {age} ms ago)", lease.owner),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: u32 = 15;
    const Y: u32 = 3;
    const T0: i64 = 1_700_000_000_000;
    const EXPIRY_MS: i64 = (X * Y) as i64 * 1000;

    /// A fake wall clock shared by the simulated instances: time moves only when told.
    struct FakeClock {
        now: i64,
    }

    impl FakeClock {
        fn advance_ms(&mut self, ms: i64) -> i64 {
            self.now += ms;
            self.now
        }
    }

    /// One simulated instance that keeps the lease in `store` as the host would: the write the
    /// decision names replaces the record (the compare-and-swap always succeeds here).
    struct Instance {
        identity: &'static str,
        started_at: i64,
        warmup_seconds: u32,
    }

    impl Instance {
        fn tick(&self, now: i64, store: &mut Option<Lease>) -> Decision {
            let d = decide(&Tick {
                identity: self.identity,
                now,
                lease: store.as_ref(),
                wait_time_seconds: X,
                failure_threshold: Y,
                started_at: self.started_at,
                warmup_seconds: self.warmup_seconds,
            })
            .unwrap();
            if d.action != Action::None {
                *store = Some(lease(self.identity, now));
            }
            d
        }
    }

    fn tick<'a>(lease: Option<&'a Lease>, now: i64) -> Tick<'a> {
        Tick {
            identity: "me",
            now,
            lease,
            wait_time_seconds: X,
            failure_threshold: Y,
            started_at: T0,
            warmup_seconds: 0,
        }
    }

    fn lease(owner: &str, updated_time: i64) -> Lease {
        Lease {
            owner: owner.into(),
            updated_time,
        }
    }

    fn outcome(t: &Tick<'_>) -> (State, Action) {
        let d = decide(t).unwrap();
        (d.state, d.action)
    }

    #[test]
    fn row1_absent_lease_while_warming_up_waits() {
        let mut t = tick(None, T0 + 1_000);
        t.warmup_seconds = 10;
        assert_eq!(outcome(&t), (State::Passive, Action::None));
    }

    #[test]
    fn row2_absent_lease_is_created() {
        let d = decide(&tick(None, T0)).unwrap();
        assert_eq!((d.state, d.action), (State::Active, Action::Create));
        assert!(d.reason.contains("absent"));
    }

    #[test]
    fn row3_skip_lease_pod_keeps_everyone_passive() {
        for updated in [T0 - 10_000_000, T0, T0 + 1_000] {
            let l = lease(SKIP_LEASE_POD, updated);
            let mut t = tick(Some(&l), T0);
            let d = decide(&t).unwrap();
            assert_eq!((d.state, d.action), (State::Passive, Action::None));
            assert!(d.reason.contains(SKIP_LEASE_POD));
            t.warmup_seconds = 60;
            assert_eq!(outcome(&t), (State::Passive, Action::None));
        }
    }

    #[test]
    fn row4_warm_up_blocks_renew_takeover_and_empty_owner() {
        for owner in ["me", "other", ""] {
            let l = lease(owner, T0 - 10_000_000);
            let mut t = tick(Some(&l), T0 + 5_000);
            t.warmup_seconds = 10;
            assert_eq!(outcome(&t), (State::Passive, Action::None), "{owner:?}");
        }
    }

    #[test]
    fn row5_empty_owner_is_taken() {
        let l = lease("", T0);
        assert_eq!(
            outcome(&tick(Some(&l), T0)),
            (State::Active, Action::Takeover)
        );
    }

    #[test]
    fn row6_own_lease_is_renewed_even_when_stale() {
        for updated in [T0 - 1_000, T0 - 10 * EXPIRY_MS, T0 + 5_000] {
            let l = lease("me", updated);
            assert_eq!(outcome(&tick(Some(&l), T0)), (State::Active, Action::Renew));
        }
    }

    #[test]
    fn row7_and_row8_takeover_only_after_y_times_x() {
        let l = lease("other", T0);
        for (now, want) in [
            (T0, (State::Passive, Action::None)),
            (T0 + EXPIRY_MS - 1, (State::Passive, Action::None)),
            (T0 + EXPIRY_MS, (State::Passive, Action::None)),
            (T0 + EXPIRY_MS + 1, (State::Active, Action::Takeover)),
            (T0 + 10 * EXPIRY_MS, (State::Active, Action::Takeover)),
        ] {
            assert_eq!(outcome(&tick(Some(&l), now)), want, "at +{} ms", now - T0);
        }
        let d = decide(&tick(Some(&l), T0 + EXPIRY_MS + 1)).unwrap();
        assert!(d.reason.contains("other") && d.reason.contains("taking over"));
    }

    #[test]
    fn row8_a_record_stamped_in_the_future_is_held() {
        let l = lease("other", T0 + 60_000);
        assert_eq!(outcome(&tick(Some(&l), T0)), (State::Passive, Action::None));
    }

    #[test]
    fn warm_up_ends_at_exactly_its_length() {
        let stale = lease("other", T0 - 10_000_000);
        let mut t = tick(Some(&stale), T0 + 10_000 - 1);
        t.warmup_seconds = 10;
        assert_eq!(outcome(&t), (State::Passive, Action::None));
        t.now = T0 + 10_000;
        assert_eq!(outcome(&t), (State::Active, Action::Takeover));
    }

    /// Two instances ticking every x on a fake clock: A creates and renews, B stays passive;
    /// A stops; B takes over at its first tick after y × x, never earlier.
    #[test]
    fn two_instances_fail_over_after_y_times_x() {
        let mut clock = FakeClock { now: T0 };
        let mut store = None;
        let a = Instance {
            identity: "a",
            started_at: T0,
            warmup_seconds: 0,
        };
        let b = Instance {
            identity: "b",
            started_at: T0,
            warmup_seconds: 0,
        };
        assert_eq!(a.tick(clock.now, &mut store).action, Action::Create);
        let offset = 400; // B ticks 400 ms after A
        for _ in 0..5 {
            let d = b.tick(clock.advance_ms(offset), &mut store);
            assert_eq!((d.state, d.action), (State::Passive, Action::None));
            let d = a.tick(clock.advance_ms(i64::from(X) * 1000 - offset), &mut store);
            assert_eq!((d.state, d.action), (State::Active, Action::Renew));
        }
        let last_renewal = clock.now;
        // A stops. B keeps ticking every x.
        let mut now = clock.advance_ms(offset);
        loop {
            let d = b.tick(now, &mut store);
            if d.action == Action::Takeover {
                assert!(now - last_renewal > EXPIRY_MS);
                assert!(now - last_renewal <= EXPIRY_MS + i64::from(X) * 1000);
                assert_eq!(d.state, State::Active);
                break;
            }
            assert!(now - last_renewal <= EXPIRY_MS, "B waited too long");
            now = clock.advance_ms(i64::from(X) * 1000);
        }
        assert_eq!(store.as_ref().unwrap().owner, "b");
        // A comes back (a fresh process with warm-up): it stays passive and B keeps the lease.
        let a2 = Instance {
            identity: "a",
            started_at: clock.now,
            warmup_seconds: 30,
        };
        let d = a2.tick(clock.advance_ms(1_000), &mut store);
        assert_eq!((d.state, d.action), (State::Passive, Action::None));
        assert_eq!(
            b.tick(clock.advance_ms(1_000), &mut store).action,
            Action::Renew
        );
    }

    #[test]
    fn zero_intervals_are_rejected() {
        let mut t = tick(None, T0);
        t.wait_time_seconds = 0;
        assert!(decide(&t).unwrap_err().contains("waitTimeInSeconds"));
        t.wait_time_seconds = 1;
        t.failure_threshold = 0;
        assert!(decide(&t).unwrap_err().contains("failureThreshold"));
    }

    #[test]
    fn settings_are_the_dr_settings() {
        assert!(validate_settings(r#"{"leaseName": "w", "waitTimeInSeconds": 5}"#).is_ok());
        let e = validate_settings(r#"{"leaseNmae": "w"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("settings.leaseNmae"));
        let e = validate_settings("[]").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("settings"));
        assert!(e.message.contains("JSON object"), "{}", e.message);
    }
}
