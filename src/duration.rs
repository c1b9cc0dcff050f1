//! Go's `time.Duration` format, as kubelet's config and flags take durations: `20s`,
//! `1m30s`, `1.5h`, `250ms`, `0`.

use std::time::Duration;

/// Parses a Go `time.Duration` string as kubelet's config and flags accept it:
/// a sequence of decimal numbers with units `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`,
/// e.g. `20s`, `1m30s`, `1.5h`, `0`. Negative durations are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if text.starts_with('-') {
        return Err(format!("duration {s:?} is negative"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(format!("duration {s:?}: expected a number at {rest:?}"));
        }
        let value: f64 = num.parse().map_err(|_| format!("duration {s:?}: bad number {num:?}"))?;
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("duration {s:?}: missing unit after {num} (use s, m, h, ms)")),
            other => return Err(format!("duration {s:?}: unknown unit {other:?}")),
        };
        total += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|_| format!("duration {s:?} is out of range"))
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
        assert!(parse_duration("20").unwrap_err().contains("missing unit"));
        assert!(parse_duration("5d").unwrap_err().contains("unknown unit \"d\""));
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").unwrap_err().contains("expected a number"));
        assert!(parse_duration("1..2s").unwrap_err().contains("bad number"));
    }
}
