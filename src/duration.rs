//! Go's `time.Duration` format, as kubelet's config and flags take durations: `20s`,
//! `1m30s`, `1.5h`, `250ms`, `0`.

use std::time::Duration;

/// Why a duration was refused; shown with the text as given.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    Empty,
    Negative(String),
    /// No number where one was expected (at the rest of the text).
    ExpectedNumber {
        text: String,
        at: String,
    },
    BadNumber {
        text: String,
        number: String,
    },
    MissingUnit {
        text: String,
        number: String,
    },
    UnknownUnit {
        text: String,
        unit: String,
    },
    OutOfRange(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Empty => f.write_str("empty duration"),
            Error::Negative(s) => write!(f, "duration {s:?} is negative"),
            Error::ExpectedNumber { text, at } => write!(f, "duration {text:?}: expected a number at {at:?}"),
            Error::BadNumber { text, number } => write!(f, "duration {text:?}: bad number {number:?}"),
            Error::MissingUnit { text, number } => {
                write!(f, "duration {text:?}: missing unit after {number} (use s, m, h, ms)")
            }
            Error::UnknownUnit { text, unit } => write!(f, "duration {text:?}: unknown unit {unit:?}"),
            Error::OutOfRange(s) => write!(f, "duration {s:?} is out of range"),
        }
    }
}

impl std::error::Error for Error {}

/// Parses a Go `time.Duration` string as kubelet's config and flags accept it:
/// a sequence of decimal numbers with units `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`,
/// e.g. `20s`, `1m30s`, `1.5h`, `0`. Negative durations are refused.
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    let text = s.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(Error::Empty);
    }
    if text.starts_with('-') {
        return Err(Error::Negative(s.into()));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(Error::ExpectedNumber { text: s.into(), at: rest.into() });
        }
        let value: f64 = num.parse().map_err(|_| Error::BadNumber { text: s.into(), number: num.into() })?;
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(Error::MissingUnit { text: s.into(), number: num.into() }),
            other => return Err(Error::UnknownUnit { text: s.into(), unit: other.into() }),
        };
        total += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|_| Error::OutOfRange(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_kubelet() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert!(parse_duration("20").unwrap_err().to_string().contains("missing unit"));
        assert!(parse_duration("5d").unwrap_err().to_string().contains("unknown unit \"d\""));
        assert!(parse_duration("-1s").unwrap_err().to_string().contains("negative"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").unwrap_err().to_string().contains("expected a number"));
        assert!(parse_duration("1..2s").unwrap_err().to_string().contains("bad number"));
    }
}
