//! RFC 3339 timestamps (`2026-08-21T10:00:00Z`, `2026-08-21T12:00:00.5+02:00`), as Kubernetes
//! writes them and `restartAfter` carries them.
//!
//! Accepted: `YYYY-MM-DD`, then `T`, `t` or a space, then `hh:mm:ss`, optional fraction (digits
//! past the ninth are dropped), then `Z`, `z` or `±hh:mm`. Second 60 (a leap second) is refused,
//! as Go's `time.Parse` refuses it.

use std::fmt;

/// An instant in UTC with nanosecond precision; ordered in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    secs: i64,
    nanos: u32,
}

/// Why a string is not an RFC 3339 timestamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseTimestampError {
    input: String,
    why: &'static str,
}

impl fmt::Display for ParseTimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an RFC 3339 timestamp: {}",
            self.input, self.why
        )
    }
}

impl std::error::Error for ParseTimestampError {}

impl Timestamp {
    /// Parses an RFC 3339 date-time with a mandatory offset.
    ///
    /// # Errors
    /// The input is not of the form above, or a field is out of range.
    pub fn parse(s: &str) -> Result<Self, ParseTimestampError> {
        let fail = |why| ParseTimestampError {
            input: s.to_owned(),
            why,
        };
        let b = s.as_bytes();
        if b.len() < 20 {
            return Err(fail("too short"));
        }
        let expect = |at: usize, allowed: &[u8], why| {
            if allowed.contains(&b[at]) {
                Ok(())
            } else {
                Err(fail(why))
            }
        };
        expect(4, b"-", "expected '-' after the year")?;
        expect(7, b"-", "expected '-' after the month")?;
        expect(10, b"Tt ", "expected 'T' between date and time")?;
        expect(13, b":", "expected ':' after the hour")?;
        expect(16, b":", "expected ':' after the minute")?;
        let year = digits(&b[0..4]).ok_or_else(|| fail("bad year"))?;
        let month = digits(&b[5..7])
            .filter(|m| (1..=12).contains(m))
            .ok_or_else(|| fail("bad month"))?;
        let day = digits(&b[8..10])
            .filter(|d| (1..=days_in_month(year, month)).contains(d))
            .ok_or_else(|| fail("bad day"))?;
        let hour = digits(&b[11..13])
            .filter(|h| *h < 24)
            .ok_or_else(|| fail("bad hour"))?;
        let minute = digits(&b[14..16])
            .filter(|m| *m < 60)
            .ok_or_else(|| fail("bad minute"))?;
        let second = digits(&b[17..19])
            .filter(|s| *s < 60)
            .ok_or_else(|| fail("bad second"))?;

        let mut at = 19;
        let mut nanos = 0u32;
        if b[at] == b'.' {
            let start = at + 1;
            let end = start + b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
            if end == start {
                return Err(fail("empty fraction"));
            }
            for (i, c) in b[start..end].iter().take(9).enumerate() {
                nanos += u32::from(c - b'0') * 10u32.pow(8 - i as u32);
            }
            at = end;
        }
        let offset_secs = match &b[at..] {
            [b'Z' | b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let h = digits(&[*h1, *h2])
                    .filter(|h| *h < 24)
                    .ok_or_else(|| fail("bad offset hour"))?;
                let m = digits(&[*m1, *m2])
                    .filter(|m| *m < 60)
                    .ok_or_else(|| fail("bad offset minute"))?;
                let secs = i64::from(h * 3600 + m * 60);
                if *sign == b'-' { -secs } else { secs }
            }
            _ => return Err(fail("expected 'Z' or an offset like +02:00 at the end")),
        };
        let days = days_from_civil(i64::from(year), month, day);
        let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset_secs;
        Ok(Self { secs, nanos })
    }

    /// Seconds since 1970-01-01T00:00:00Z.
    pub fn unix_seconds(&self) -> i64 {
        self.secs
    }

    /// Nanoseconds past [`Self::unix_seconds`].
    pub fn subsec_nanos(&self) -> u32 {
        self.nanos
    }
}

/// The value of a run of ASCII digits, `None` if any byte is not one.
fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

fn is_leap(year: u32) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn known_instants() {
        assert_eq!(t("1970-01-01T00:00:00Z").unix_seconds(), 0);
        assert_eq!(t("2000-03-01T00:00:00Z").unix_seconds(), 951_868_800);
        assert_eq!(t("2024-02-29T12:34:56Z").unix_seconds(), 1_709_210_096);
        assert_eq!(t("1969-12-31T23:59:59Z").unix_seconds(), -1);
        assert_eq!(t("2026-08-21T10:00:00.25Z").subsec_nanos(), 250_000_000);
        assert_eq!(
            t("2026-08-21T10:00:00.1234567891Z").subsec_nanos(),
            123_456_789
        );
    }

    #[test]
    fn offsets_and_separators_normalise_to_utc() {
        let utc = t("2026-08-21T10:00:00Z");
        assert_eq!(t("2026-08-21T12:00:00+02:00"), utc);
        assert_eq!(t("2026-08-21T07:30:00-02:30"), utc);
        assert_eq!(t("2026-08-21t10:00:00z"), utc);
        assert_eq!(t("2026-08-21 10:00:00+00:00"), utc);
    }

    #[test]
    fn ordering_is_by_instant() {
        assert!(t("2026-08-21T10:00:00Z") < t("2026-08-21T10:00:00.000000001Z"));
        assert!(t("2026-08-21T11:59:59+02:00") < t("2026-08-21T10:00:00Z"));
        assert!(t("2025-12-31T23:59:59Z") < t("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn malformed_timestamps() {
        for s in [
            "",
            "2026-08-21",
            "2026-08-21T10:00:00",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-08-21T24:00:00Z",
            "2026-08-21T10:60:00Z",
            "2026-08-21T10:00:60Z",
            "2026-08-21T10:00:00.Z",
            "2026-08-21T10:00:00+0200",
            "2026-08-21T10:00:00+24:00",
            "2026/08/21T10:00:00Z",
            "2026-08-21X10:00:00Z",
            "2026-08-21T10:00:00ZZ",
            "2026-0a-21T10:00:00Z",
        ] {
            assert!(Timestamp::parse(s).is_err(), "{s:?} should not parse");
        }
        assert!(
            t("2000-02-29T00:00:00Z").unix_seconds() > 0,
            "2000 is a leap year"
        );
    }
}
