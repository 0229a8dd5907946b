//! Time helpers shared by the scaling and restart controllers: Go durations (`8h`, `1h30m`), the
//! intervals of their flags, and the latest start of a five-field cron schedule (UTC).

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The latest time at or before `now` that the five-field cron `schedule` (UTC) fires,
/// looking back at most 366 days.
///
/// # Errors
/// An invalid schedule.
pub(crate) fn last_start(schedule: &str, now: Timestamp) -> Result<Option<Timestamp>, String> {
    use std::str::FromStr as _;
    if schedule.split_whitespace().count() != 5 {
        return Err(format!(
            "schedule {schedule:?} must have five fields (minute hour day-of-month month day-of-week)"
        ));
    }
    let cron =
        croner::Cron::from_str(schedule).map_err(|e| format!("schedule {schedule:?}: {e}"))?;
    let now_chrono = chrono::DateTime::<chrono::Utc>::from_timestamp(
        now.as_second(),
        u32::try_from(now.subsec_nanosecond()).unwrap_or(0),
    )
    .ok_or_else(|| format!("time {now} is out of range"))?;
    let earliest = now_chrono - chrono::Duration::days(366);
    match cron.find_previous_occurrence(&now_chrono, true) {
        Ok(t) if t >= earliest => Timestamp::from_second(t.timestamp())
            .map(Some)
            .map_err(|e| format!("schedule {schedule:?}: {e}")),
        Ok(_) => Ok(None),
        Err(croner::errors::CronError::TimeSearchLimitExceeded) => Ok(None),
        Err(e) => Err(format!("schedule {schedule:?}: {e}")),
    }
}

/// Parses a Go duration such as `24h`, `1h30m`, `90m` or `1.5h` (positive): the plugin SDK's
/// parser, which plugins share ([`wasmop_plugin_sdk::duration::parse_go_duration`]).
///
/// # Errors
/// Anything else, described.
pub fn parse_duration(s: &str) -> Result<SignedDuration, String> {
    let d = wasmop_plugin_sdk::duration::parse_go_duration(s)?;
    SignedDuration::try_from(d).map_err(|_| format!("duration {s:?} is too long"))
}

/// Parses a flag's interval: a positive Go duration such as `30s`, `500ms`, `1m30s` or `10h`.
///
/// # Errors
/// Anything else, described.
pub fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    d.try_into()
        .map_err(|_| format!("{s:?} is not a positive duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("24h"), Ok(SignedDuration::from_hours(24)));
        assert_eq!(parse_duration("1h30m"), Ok(SignedDuration::from_mins(90)));
        assert_eq!(parse_duration("1.5h"), Ok(SignedDuration::from_mins(90)));
        for bad in ["", "-1h", "1x"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flag_intervals() {
        use std::time::Duration;
        assert_eq!(parse_interval("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_interval("10h"), Ok(Duration::from_secs(36000)));
        for bad in ["0s", "soon", "often"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
