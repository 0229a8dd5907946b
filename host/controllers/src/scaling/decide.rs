//! The poller's decision for one ElasticService, as a pure function of its spec, status, the
//! time and the trigger votes (docs/scaling.md):
//!
//! 1. No triggers: hold (the service is only woken on demand).
//! 2. Within `cooldownPeriod` of the resource's creation: hold.
//! 3. `enabledPeriod` set and `now` outside its window (or the window is invalid): up; the
//!    service may go to zero only inside the window.
//! 4. A failed vote: hold with `failurePolicy: Fail` (upstream's "NoScale" on an error);
//!    counted as up with `Ignore`.
//! 5. Any up vote: up.
//! 6. All votes down: down once `cooldownPeriod` has passed since the last activity
//!    (`status.lastScaledUpTime`, which every scale-up and every up decision moves), else hold.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::schedule::{last_start, parse_duration};
use wasmop_api::elasticservice::EnabledPeriod;
use wasmop_plugin_host::FailurePolicy;

/// `cooldownPeriod` when the spec says 0 (as upstream).
pub const DEFAULT_COOLDOWN_SECONDS: i64 = 900;

/// The cooldown of a spec's `cooldownPeriod` in seconds (0 means [`DEFAULT_COOLDOWN_SECONDS`]).
pub fn cooldown(cooldown_period: i32) -> SignedDuration {
    match i64::from(cooldown_period) {
        s if s <= 0 => SignedDuration::from_secs(DEFAULT_COOLDOWN_SECONDS),
        s => SignedDuration::from_secs(s),
    }
}

/// What one trigger said.
#[derive(Clone, Debug, PartialEq)]
pub enum Vote {
    /// Keep (or bring) the service up.
    Up,
    /// The service is idle.
    Down,
    /// The plugin call failed (the reason says why).
    Failed,
}

impl Vote {
    /// `up`, `down` or `error`, as in `status.triggerVotes[].vote`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Vote::Up => "up",
            Vote::Down => "down",
            Vote::Failed => "error",
        }
    }
}

/// One trigger's vote with what it measured and why.
#[derive(Clone, Debug, PartialEq)]
pub struct TriggerOutcome {
    /// The trigger's `type`.
    pub trigger_type: String,
    /// The vote.
    pub vote: Vote,
    /// The measured value, if any.
    pub value: Option<f64>,
    /// The plugin's explanation, or the error.
    pub reason: String,
}

/// Everything but the votes that the decision depends on.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The current time.
    pub now: Timestamp,
    /// `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// The last activity: `status.lastScaledUpTime` (or later, as this process knows it).
    pub last_active: Option<Timestamp>,
    /// The effective cooldown ([`cooldown`]).
    pub cooldown: SignedDuration,
    /// `spec.enabledPeriod`.
    pub enabled_period: Option<&'a EnabledPeriod>,
    /// How many triggers the spec has.
    pub triggers: usize,
}

/// The poller's verdict, with a reason that names triggers and votes but not the plugin's
/// words (a measured value changes at every poll; the reason goes into the `Triggers` condition,
/// which then changes only when the verdict does).
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Scale to `minTargetReplicas` (if below) and record activity now.
    Up(String),
    /// Scale to zero.
    Down(String),
    /// Leave the replicas alone.
    Hold(String),
}

/// The decision that needs no votes (steps 1–3), if any: the poller then makes no plugin call.
pub(crate) fn precheck(i: &Inputs<'_>) -> Option<Decision> {
    if i.triggers == 0 {
        return Some(Decision::Hold(
            "no triggers: the service is scaled up on demand only".into(),
        ));
    }
    let warm_until = i.created + i.cooldown;
    if i.now < warm_until {
        return Some(Decision::Hold(format!(
            "within the cooldown of {}s since creation (until {warm_until:.0})",
            i.cooldown.as_secs()
        )));
    }
    match i.enabled_period.map(|p| window_open(p, i.now)) {
        None | Some(Ok(true)) => None,
        Some(Ok(false)) => Some(Decision::Up(
            "outside enabledPeriod: the service stays up".into(),
        )),
        Some(Err(e)) => Some(Decision::Up(format!(
            "invalid enabledPeriod ({e}): the service stays up"
        ))),
    }
}

/// The vote an up decision rests on, with its index: the first up vote, or failed one (which
/// counts as up under failurePolicy Ignore; under Fail a failed vote holds before this is asked).
pub(crate) fn cited(votes: &[TriggerOutcome]) -> Option<(usize, &TriggerOutcome)> {
    votes
        .iter()
        .enumerate()
        .find(|(_, v)| matches!(v.vote, Vote::Up | Vote::Failed))
}

/// The decision for `votes` (one per trigger, in spec order) under `policy`.
pub fn decide(i: &Inputs<'_>, votes: &[TriggerOutcome], policy: FailurePolicy) -> Decision {
    if let Some(d) = precheck(i) {
        return d;
    }
    if policy == FailurePolicy::Fail
        && let Some((n, v)) = votes
            .iter()
            .enumerate()
            .find(|(_, v)| v.vote == Vote::Failed)
    {
        return Decision::Hold(format!(
            "trigger {n} ({}) failed; not scaling (failurePolicy Fail)",
            v.trigger_type
        ));
    }
    if let Some((n, v)) = cited(votes) {
        return Decision::Up(match v.vote {
            Vote::Failed => format!(
                "trigger {n} ({}) failed and counts as up (failurePolicy Ignore)",
                v.trigger_type
            ),
            _ => format!("trigger {n} ({}) votes up", v.trigger_type),
        });
    }
    if votes.len() < i.triggers {
        return Decision::Hold(format!("{} of {} triggers voted", votes.len(), i.triggers));
    }
    if let Some(last) = i.last_active {
        let until = last + i.cooldown;
        if i.now < until {
            return Decision::Hold(format!(
                "all triggers vote down; cooldown of {}s since the last activity runs until {until:.0}",
                i.cooldown.as_secs()
            ));
        }
    }
    Decision::Down(format!(
        "all {} triggers vote down and the cooldown of {}s is over",
        votes.len(),
        i.cooldown.as_secs()
    ))
}

/// Whether `now` is inside the window of `period`: the latest start (`schedule`, five-field
/// cron in UTC) at or before `now`, plus `duration`, is after `now` (as upstream).
///
/// # Errors
/// An invalid schedule or duration, described.
pub(crate) fn window_open(period: &EnabledPeriod, now: Timestamp) -> Result<bool, String> {
    let length = parse_duration(&period.duration)?;
    let start = last_start(&period.schedule, now)?;
    Ok(start.is_some_and(|s| now < s + length))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn inputs(now: &str) -> Inputs<'static> {
        Inputs {
            now: ts(now),
            created: ts("2026-01-01T00:00:00Z"),
            last_active: None,
            cooldown: cooldown(300),
            enabled_period: None,
            triggers: 2,
        }
    }

    fn vote(vote: Vote) -> TriggerOutcome {
        TriggerOutcome {
            trigger_type: "prometheus".into(),
            vote,
            value: Some(1.0),
            reason: "because".into(),
        }
    }

    const LATER: &str = "2026-01-02T12:00:00Z";

    #[test]
    fn cooldown_zero_means_900_seconds() {
        assert_eq!(cooldown(0), SignedDuration::from_secs(900));
        assert_eq!(cooldown(-5), SignedDuration::from_secs(900));
        assert_eq!(cooldown(30), SignedDuration::from_secs(30));
    }

    #[test]
    fn no_triggers_hold() {
        let mut i = inputs(LATER);
        i.triggers = 0;
        assert!(
            matches!(decide(&i, &[], FailurePolicy::Fail), Decision::Hold(r) if r.starts_with("no triggers"))
        );
    }

    #[test]
    fn cooldown_counts_from_creation() {
        let i = inputs("2026-01-01T00:04:59Z");
        let d = decide(
            &i,
            &[vote(Vote::Down), vote(Vote::Down)],
            FailurePolicy::Fail,
        );
        assert_eq!(
            d,
            Decision::Hold(
                "within the cooldown of 300s since creation (until 2026-01-01T00:05:00Z)".into()
            )
        );
        assert!(precheck(&i).is_some(), "no plugin call needed");
        let i = inputs("2026-01-01T00:05:00Z");
        assert!(precheck(&i).is_none());
        assert!(matches!(
            decide(
                &i,
                &[vote(Vote::Down), vote(Vote::Down)],
                FailurePolicy::Fail
            ),
            Decision::Down(_)
        ));
    }

    #[test]
    fn cooldown_counts_from_the_last_activity() {
        let mut i = inputs(LATER);
        i.last_active = Some(ts("2026-01-02T11:56:00Z"));
        let down = [vote(Vote::Down), vote(Vote::Down)];
        assert_eq!(
            decide(&i, &down, FailurePolicy::Fail),
            Decision::Hold("all triggers vote down; cooldown of 300s since the last activity runs until 2026-01-02T12:01:00Z".into())
        );
        i.last_active = Some(ts("2026-01-02T11:55:00Z"));
        assert_eq!(
            decide(&i, &down, FailurePolicy::Fail),
            Decision::Down("all 2 triggers vote down and the cooldown of 300s is over".into())
        );
    }

    #[test]
    fn any_up_vote_scales_up() {
        let i = inputs(LATER);
        assert_eq!(
            decide(&i, &[vote(Vote::Down), vote(Vote::Up)], FailurePolicy::Fail),
            Decision::Up("trigger 1 (prometheus) votes up".into())
        );
    }

    #[test]
    fn missing_votes_hold() {
        let i = inputs(LATER);
        assert_eq!(
            decide(&i, &[vote(Vote::Down)], FailurePolicy::Fail),
            Decision::Hold("1 of 2 triggers voted".into())
        );
    }

    #[test]
    fn failed_votes_follow_the_failure_policy() {
        let i = inputs(LATER);
        let mut failed = vote(Vote::Failed);
        failed.reason = "connection refused".into();
        let votes = [vote(Vote::Down), failed];
        assert_eq!(
            decide(&i, &votes, FailurePolicy::Fail),
            Decision::Hold(
                "trigger 1 (prometheus) failed; not scaling (failurePolicy Fail)".into()
            )
        );
        assert_eq!(
            decide(&i, &votes, FailurePolicy::Ignore),
            Decision::Up(
                "trigger 1 (prometheus) failed and counts as up (failurePolicy Ignore)".into()
            )
        );
        // A failure before an up vote under Fail still holds: no decision on partial data.
        let votes = [votes[1].clone(), vote(Vote::Up)];
        assert!(matches!(
            decide(&i, &votes, FailurePolicy::Fail),
            Decision::Hold(_)
        ));
    }

    fn period(schedule: &str, duration: &str) -> EnabledPeriod {
        EnabledPeriod {
            schedule: schedule.into(),
            duration: duration.into(),
        }
    }

    #[test]
    fn enabled_window_with_cron_and_duration() {
        // Weekdays 09:00 UTC for 8 hours.
        let p = period("0 9 * * 1-5", "8h");
        // 2026-01-02 is a Friday.
        assert_eq!(window_open(&p, ts("2026-01-02T08:59:59Z")), Ok(false));
        assert_eq!(window_open(&p, ts("2026-01-02T09:00:00Z")), Ok(true));
        assert_eq!(window_open(&p, ts("2026-01-02T16:59:59Z")), Ok(true));
        assert_eq!(window_open(&p, ts("2026-01-02T17:00:00Z")), Ok(false));
        // Saturday: the last start is Friday 09:00, long over.
        assert_eq!(window_open(&p, ts("2026-01-03T10:00:00Z")), Ok(false));
        // A window that crosses midnight.
        let night = period("0 22 * * *", "1h30m");
        assert_eq!(window_open(&night, ts("2026-01-03T23:29:00Z")), Ok(true));
        assert_eq!(window_open(&night, ts("2026-01-03T23:31:00Z")), Ok(false));
        // The default: every day from midnight for 24h, always open.
        let all = period("0 0 * * *", "24h");
        assert_eq!(window_open(&all, ts("2026-01-03T13:00:00Z")), Ok(true));
    }

    #[test]
    fn outside_the_window_the_service_stays_up() {
        let p = period("0 9 * * *", "1h");
        let mut i = inputs(LATER);
        i.enabled_period = Some(&p);
        let down = [vote(Vote::Down), vote(Vote::Down)];
        assert_eq!(
            decide(&i, &down, FailurePolicy::Fail),
            Decision::Up("outside enabledPeriod: the service stays up".into())
        );
        assert!(precheck(&i).is_some(), "no plugin call needed");
        let inside = period("0 12 * * *", "1h");
        i.enabled_period = Some(&inside);
        assert!(matches!(
            decide(&i, &down, FailurePolicy::Fail),
            Decision::Down(_)
        ));
    }

    #[test]
    fn an_invalid_window_keeps_the_service_up() {
        for (schedule, duration, why) in [
            ("0 9 * *", "1h", "must have five fields"),
            ("0 99 * * *", "1h", "schedule \"0 99 * * *\""),
            ("0 9 * * *", "1d", "must be a positive Go duration"),
            ("0 9 * * *", "0s", "must be a positive Go duration"),
        ] {
            let p = period(schedule, duration);
            let mut i = inputs(LATER);
            i.enabled_period = Some(&p);
            match decide(&i, &[], FailurePolicy::Fail) {
                Decision::Up(r) => assert!(
                    r.starts_with("invalid enabledPeriod") && r.contains(why),
                    "{r}"
                ),
                other => panic!("{schedule} {duration}: {other:?}"),
            }
        }
    }
}
