//! The default `dr` plugin: decides, once per tick, whether this instance is active or passive
//! and which lease write it makes. The rules follow Admiral's DynamoDB state checker
//! (reference/dr.md §1), with its boundaries made exact:
//!
//! | lease read | in warm-up | decision |
//! |---|---|---|
//! | absent | any | passive, `none` while warming up; otherwise active + `create` |
//! | owner `SKIP-LEASE-POD` | any | passive, `none` (manual all-passive switch) |
//! | owner empty | no | active + `takeover` |
//! | owner is self | yes | passive, `none` (no renewal, so a peer may take over) |
//! | owner is self | no | active + `renew` |
//! | other owner, `now - updated > y × x` | no | active + `takeover` |
//! | other owner, otherwise | any | passive, `none` |
//!
//! A lease last written exactly `y × x` seconds ago is still held: takeover happens only
//! after it (Admiral's strict `updatedTime < now - x*y`). "Active" takes effect only if the
//! write succeeds; the host stays passive when the compare-and-swap fails.

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

/// Validates the plugin settings: a JSON object, currently without keys of its own.
///
/// # Errors
/// A message naming the problem when `settings` is not a JSON object.
pub fn validate_settings(settings: &str) -> Result<(), String> {
    match serde_json::from_str::<serde_json::Value>(settings) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(other) => Err(format!("settings must be a JSON object, got {other}")),
        Err(e) => Err(format!("settings are not valid JSON: {e}")),
    }
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

    #[test]
    fn absent_lease_is_created() {
        let d = decide(&tick(None, T0)).unwrap();
        assert_eq!((d.state, d.action), (State::Active, Action::Create));
    }

    #[test]
    fn skip_lease_pod_keeps_everyone_passive() {
        let l = lease(SKIP_LEASE_POD, T0 - 10_000_000);
        let d = decide(&tick(Some(&l), T0)).unwrap();
        assert_eq!((d.state, d.action), (State::Passive, Action::None));
        assert!(d.reason.contains(SKIP_LEASE_POD));
    }

    #[test]
    fn empty_owner_is_taken() {
        let l = lease("", T0);
        let d = decide(&tick(Some(&l), T0)).unwrap();
        assert_eq!((d.state, d.action), (State::Active, Action::Takeover));
    }

    #[test]
    fn own_lease_is_renewed() {
        let l = lease("me", T0 - 1000);
        let d = decide(&tick(Some(&l), T0)).unwrap();
        assert_eq!((d.state, d.action), (State::Active, Action::Renew));
    }

    #[test]
    fn foreign_lease_boundary_is_exclusive() {
        let expiry = i64::from(X * Y) * 1000;
        let l = lease("other", T0);
        let at = decide(&tick(Some(&l), T0 + expiry)).unwrap();
        assert_eq!(
            (at.state, at.action),
            (State::Passive, Action::None),
            "exactly y*x is still held"
        );
        let after = decide(&tick(Some(&l), T0 + expiry + 1)).unwrap();
        assert_eq!(
            (after.state, after.action),
            (State::Active, Action::Takeover)
        );
    }

    #[test]
    fn warm_up_blocks_create_renew_and_takeover() {
        let mut t = tick(None, T0 + 5_000);
        t.warmup_seconds = 10;
        assert_eq!(decide(&t).unwrap().action, Action::None);
        let own = lease("me", T0);
        t.lease = Some(&own);
        assert_eq!(decide(&t).unwrap().state, State::Passive);
        let stale = lease("other", T0 - 10_000_000);
        t.lease = Some(&stale);
        assert_eq!(decide(&t).unwrap().action, Action::None);
        t.now = T0 + 10_000;
        assert_eq!(
            decide(&t).unwrap().action,
            Action::Takeover,
            "warm-up ends at exactly its length"
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
    fn settings_must_be_an_object() {
        assert!(validate_settings("{}").is_ok());
        assert!(validate_settings("[]").unwrap_err().contains("JSON object"));
        assert!(
            validate_settings("{")
                .unwrap_err()
                .contains("not valid JSON")
        );
    }
}
