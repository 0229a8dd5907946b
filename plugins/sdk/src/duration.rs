//! Go durations (`24h`, `1h30m`, `90m`, `1.5h`, `500ms`), as Kubernetes objects and plugin
//! settings write lengths of time.

use std::time::Duration;

/// Parses a positive Go duration: one or more `<number><unit>` terms, the number a decimal
/// (`1.5`), the unit one of `h`, `m`, `s`, `ms`, `us` (or `µs`) and `ns`, e.g. `24h`, `1h30m`,
/// `1.5h`, `90s`, `1500ms`. Unlike Go, a sign, `0` and a zero total are refused: every caller so
/// far wants a positive length.
///
/// # Errors
/// Anything else, or a total that does not fit a [`Duration`]: a message that quotes `s` and
/// gives examples (`duration "1x" must be a positive Go duration such as 8h, 90m or 1h30m`).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
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
        Duration::try_from_secs_f64(total).map_err(|_| bad())
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("24h"), Ok(Duration::from_secs(24 * 3600)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(90 * 60)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(90 * 60)));
        assert_eq!(parse_go_duration(" 90s "), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("2us3ns"), Ok(Duration::from_nanos(2003)));
        assert_eq!(parse_go_duration("1µs"), Ok(Duration::from_micros(1)));
        for bad in ["", "h", "5", "-1h", "1x", "1h-5m", "0s", "1..5s", "1e400h"] {
            let e = parse_go_duration(bad).unwrap_err();
            assert!(e.contains("must be a positive Go duration"), "{bad}: {e}");
        }
    }
}
