//! Kubernetes resource quantities (`100m`, `0.1`, `1Gi`, `1e3`), compared by exact value.
//!
//! The grammar is Kubernetes' own:
//!
//! ```text
//! quantity  = [sign] number suffix
//! number    = digits | digits "." [digits] | "." digits
//! suffix    = "" | decimalSI | binarySI | ("e" | "E") [sign] digits
//! decimalSI = "m" | "k" | "M" | "G" | "T" | "P" | "E"
//! binarySI  = "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
//! ```
//!
//! A parsed value is kept as `± m × 2^p × 5^q` with `m` sharing no factor with 10. That form is
//! unique for every rational number of this kind, so two quantities are equal exactly when their
//! forms are: `100m` == `0.1`, `1Gi` == `1024Mi`, `128974848` == `123Mi`, `1e3` == `1k`.
//! Unlike Kubernetes, values finer than `1n` are not rounded up; they compare as written.

use std::fmt;
use std::str::FromStr;

/// Largest decimal exponent accepted (`1e1000` and beyond are refused, not approximated).
const MAX_EXPONENT: i64 = 1000;

/// Most significant digits a quantity may have (what fits in a `u128`).
const MAX_DIGITS: usize = 38;

/// A parsed Kubernetes quantity. Equality is by value, whatever the spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quantity {
    negative: bool,
    /// Coprime to 10, or 0 for zero (then every other field is at its default).
    mantissa: u128,
    pow2: i64,
    pow5: i64,
}

/// Why a string is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseQuantityError {
    input: String,
    why: &'static str,
}

impl fmt::Display for ParseQuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a Kubernetes quantity: {}",
            self.input, self.why
        )
    }
}

impl std::error::Error for ParseQuantityError {}

impl Quantity {
    /// Parses a quantity such as `100m`, `1.5Gi`, `+2e-3` or `128974848`.
    ///
    /// # Errors
    /// The input does not follow the quantity grammar, or has more than 38 significant digits
    /// or an exponent beyond ±1000.
    pub fn parse(s: &str) -> Result<Self, ParseQuantityError> {
        let fail = |why| ParseQuantityError {
            input: s.to_owned(),
            why,
        };
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if frac.contains('.') {
            return Err(fail("more than one decimal point"));
        }
        if int.is_empty() && frac.is_empty() {
            return Err(fail("no digits"));
        }
        let (suffix_pow2, suffix_pow10) =
            parse_suffix(suffix).ok_or_else(|| fail("unknown suffix"))?;

        let digits: String = int.chars().chain(frac.chars()).collect();
        let digits = digits.trim_start_matches('0');
        let significant = digits.trim_end_matches('0');
        if significant.is_empty() {
            return Ok(Self::ZERO);
        }
        if significant.len() > MAX_DIGITS {
            return Err(fail("too many significant digits"));
        }
        let trailing_zeros = (digits.len() - significant.len()) as i64;
        let pow10 = suffix_pow10 + trailing_zeros - frac.len() as i64;
        let mut mantissa: u128 = significant
            .parse()
            .map_err(|_| fail("too many significant digits"))?;
        let (mut twos, mut fives) = (0i64, 0i64);
        while mantissa.is_multiple_of(2) {
            mantissa /= 2;
            twos += 1;
        }
        while mantissa.is_multiple_of(5) {
            mantissa /= 5;
            fives += 1;
        }
        Ok(Self {
            negative,
            mantissa,
            pow2: suffix_pow2 + pow10 + twos,
            pow5: pow10 + fives,
        })
    }

    /// The quantity zero (what an absent request or limit counts as).
    pub const ZERO: Self = Self {
        negative: false,
        mantissa: 0,
        pow2: 0,
        pow5: 0,
    };

    /// Whether this is zero, however it was written (`0`, `0m`, `-0.0Gi`).
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }
}

impl FromStr for Quantity {
    type Err = ParseQuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// `(power of 2, power of 10)` for a suffix, or `None` if it is not one.
fn parse_suffix(suffix: &str) -> Option<(i64, i64)> {
    Some(match suffix {
        "" => (0, 0),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 6
            {
                return None;
            }
            let value: i64 = exponent.parse().ok()?;
            if value.abs() > MAX_EXPONENT {
                return None;
            }
            (0, value)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn equal_spellings() {
        for (a, b) in [
            ("100m", "0.1"),
            ("1Gi", "1024Mi"),
            ("128974848", "123Mi"),
            ("1e3", "1k"),
            ("1E3", "1000"),
            ("1.5Gi", "1536Mi"),
            ("0.5", "500m"),
            ("2", "2000m"),
            ("1M", "1000k"),
            ("1e-3", "1m"),
            ("+1", "1"),
            ("1.", "1"),
            (".5", "0.5"),
            ("007", "7"),
            ("1Ki", "1024"),
            ("1E", "1e18"),
            ("1Ei", "1024Pi"),
            ("0", "0m"),
            ("-0", "0Gi"),
            ("0.000", "0e5"),
        ] {
            assert_eq!(q(a), q(b), "{a} == {b}");
        }
    }

    #[test]
    fn different_values() {
        for (a, b) in [
            ("100m", "1"),
            ("1Gi", "1G"),
            ("1Mi", "1M"),
            ("-1", "1"),
            ("1m", "1M"),
            ("123Mi", "128974849"),
        ] {
            assert_ne!(q(a), q(b), "{a} != {b}");
        }
    }

    #[test]
    fn zero_is_zero() {
        assert!(q("0").is_zero());
        assert!(q("-0.0Gi").is_zero());
        assert!(!q("1m").is_zero());
        assert_eq!(Quantity::ZERO, q("0Ki"));
    }

    #[test]
    fn bad_quantities() {
        for s in [
            "", "abc", "1.2.3", "m", "1 m", "1Kb", "1mi", "1e", "1e+", "1e3.5", "1KiB", " 1",
            "--1", "1e99999", "1x",
        ] {
            assert!(Quantity::parse(s).is_err(), "{s:?} should not parse");
        }
        let long = "1".repeat(39);
        assert!(
            Quantity::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("significant digits")
        );
        assert!(Quantity::parse(&format!("{long}0000")).is_err());
        assert!(
            Quantity::parse(&format!("1{}", "0".repeat(60))).is_ok(),
            "trailing zeros are not significant"
        );
    }

    #[test]
    fn error_names_the_input() {
        let e = "12lots".parse::<Quantity>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"12lots\" is not a Kubernetes quantity: unknown suffix"
        );
        let e = "lots".parse::<Quantity>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"lots\" is not a Kubernetes quantity: no digits"
        );
    }
}
