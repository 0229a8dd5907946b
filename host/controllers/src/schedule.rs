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

/// Parses a Go duration such as `24h`, `1h30m`, `90m` or `1.5h` (positive).
///
/// # Errors
/// Anything else, described.
pub fn parse_duration(s: &str) -> Result<SignedDuration, String> {
    let bad = || format!("duration {s:?} must be a positive Go duration such as 8h, 90m or 1h30m");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, after) = rest.split_at(num_len);
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let seconds = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        total += value * seconds;
        rest = next;
    }
    if total > 0.0 && total.is_finite() {
        SignedDuration::try_from_secs_f64(total).map_err(|_| bad())
    } else {
        Err(bad())
    }
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
        assert_eq!(parse_duration("90s"), Ok(SignedDuration::from_secs(90)));
        assert_eq!(
            parse_duration("1500ms"),
            Ok(SignedDuration::from_millis(1500))
        );
        for bad in ["", "h", "5", "-1h", "1x", "1h-5m"] {
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
