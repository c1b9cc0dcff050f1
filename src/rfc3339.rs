//! RFC 3339 timestamps in UTC (`2026-11-22T19:16:30.123456789Z`), as Kubernetes writes
//! `kubernetes.io/config.seen`, without a date library.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats `t` with nanoseconds (Go's RFC3339Nano drops trailing zeros; so does this).
pub fn format_nanos(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, day) = civil_from_days(days);
    let mut s = format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60);
    let nanos = d.subsec_nanos();
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Formats `t` to the second, as Kubernetes' `metav1.Time` (`2026-11-22T19:16:30Z`).
pub fn format_seconds(t: SystemTime) -> String {
    let whole = UNIX_EPOCH + std::time::Duration::from_secs(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs());
    format_nanos(whole)
}

/// Formats `t` with exactly six fractional digits, as Kubernetes' `metav1.MicroTime`
/// (a Lease's `renewTime`).
pub fn format_micros(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let whole = format_seconds(t);
    format!("{}.{:06}Z", whole.trim_end_matches('Z'), d.subsec_micros())
}

/// Parses a UTC timestamp `YYYY-MM-DDTHH:MM:SS[.frac]Z` (what atoll writes) to the second.
pub fn parse_seconds(s: &str) -> Option<SystemTime> {
    if !s.ends_with('Z') {
        return None;
    }
    let secs = u64::try_from(parse_nanos(s)?.div_euclid(1_000_000_000)).ok()?;
    Some(UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (Go's RFC3339Nano, what runtimes write in
/// CRI log lines) to nanoseconds since the epoch.
pub fn parse_nanos(s: &str) -> Option<i128> {
    // Read as bytes: every field is ASCII, so any other byte (a multi-byte character
    // anywhere) is an error, never a slice across a character.
    let b = s.as_bytes();
    let (date, rest) = b.split_at_checked(19)?;
    let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1, b'T' | b't', h0, h1, b':', n0, n1, b':', s0, s1] = *date else {
        return None;
    };
    let (y, m, d) = (digits(&[y0, y1, y2, y3])?, digits(&[m0, m1])?, digits(&[d0, d1])?);
    let (hh, mm, ss) = (digits(&[h0, h1])?, digits(&[n0, n1])?, digits(&[s0, s1])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let (frac, zone) = match rest.strip_prefix(b".") {
        Some(r) => r.split_at(r.iter().position(|c| !c.is_ascii_digit()).unwrap_or(r.len())),
        None => (&[][..], rest),
    };
    if rest.starts_with(b".") && (frac.is_empty() || frac.len() > 9) {
        return None;
    }
    // Nine digits, the missing ones zeros: `.5` is 500000000 nanoseconds.
    let nanos = frac.iter().chain(std::iter::repeat(&b'0')).take(9).fold(0i64, |n, c| n * 10 + i64::from(c - b'0'));
    let offset = match *zone {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), oh0, oh1, b':', om0, om1] => {
            let o = digits(&[oh0, oh1])? * 3600 + digits(&[om0, om1])? * 60;
            if sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    // days_from_civil (the inverse of civil_from_days).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss - offset;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// The value of a run of ASCII decimal digits (at most four here), or `None` for anything else.
fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |n, &c| c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0')))
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_nanos(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::new(1_795_373_717, 599_741_188);
        assert_eq!(format_nanos(t), "2026-11-22T18:55:17.599741188Z");
        let leap = UNIX_EPOCH + Duration::new(951_782_400, 500_000_000); // 2000-02-29
        assert_eq!(format_nanos(leap), "2000-02-29T00:00:00.5Z");
        assert_eq!(format_nanos(UNIX_EPOCH + Duration::from_secs(4_102_444_799)), "2099-12-31T23:59:59Z");
        assert_eq!(format_seconds(t), "2026-11-22T18:55:17Z");
    }

    #[test]
    fn parses_what_it_formats() {
        for secs in [0u64, 951_782_400, 1_795_373_717, 4_102_444_799] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_seconds(&format_seconds(t)), Some(t));
        }
        assert_eq!(parse_seconds("2026-11-22T18:55:17.5Z"), Some(UNIX_EPOCH + Duration::from_secs(1_795_373_717)));
        assert_eq!(parse_seconds("2026-13-22T18:55:17Z"), None);
        assert_eq!(parse_seconds("yesterday"), None);
    }

    #[test]
    fn parses_runtime_log_timestamps_with_any_offset() {
        let base = 1_795_373_717i128 * 1_000_000_000;
        assert_eq!(parse_nanos("2026-11-22T18:55:17.599741188Z"), Some(base + 599_741_188));
        assert_eq!(parse_nanos("2026-11-22T18:55:17.5Z"), Some(base + 500_000_000));
        assert_eq!(parse_nanos("2026-11-22T18:55:17Z"), Some(base));
        assert_eq!(parse_nanos("2026-11-22T19:55:17.000000001+01:00"), Some(base + 1));
        assert_eq!(parse_nanos("2026-11-22T13:25:17-05:30"), Some(base));
        for bad in [
            "2026-11-22T18:55:17.Z",
            "2026-11-22T18:55:17.1234567890Z",
            "2026-11-22T18:55:17",
            "2026-11-22T18:55:17+0100",
            "2026-11-22T18:5x:17Z",
            "2026-11-22T18:55:17+01:0",
            "+026-11-22T18:55:17Z",
        ] {
            assert_eq!(parse_nanos(bad), None, "{bad}");
        }
    }

    #[test]
    fn multi_byte_characters_anywhere_are_an_error_not_a_panic() {
        // Each puts a character of two to four bytes where an ASCII field or separator is
        // expected (a `sinceTime` from the network); the old parser sliced across them.
        for bad in [
            "2024-01-01T00:00:00+0é:00",
            "2024-01-01T00:00:00+0é:0",
            "2024-01-01T00:00:00é:00:0",
            "2024-01-01T00:00:00+00é0",
            "2024-01-01T00:00:00+é0:00",
            "2024-01-01T00:00:00+00:é0",
            "2024-01-01T00:00:00+00é00",
            "2024-01-01T00:00:00é",
            "2024-01-01T00:00:0é:00Z",
            "2024-01-01T00:00:00.é",
            "2024-01-01T00:00:00.12€",
            "2024-01-01T00:00:00.1😀Z",
            "2024-01-01T00:00:00😀00",
            "é024-01-01T00:00:00Z",
            "2024-01-01T00:00:00+😀:",
            "2024-01-01T00:00:00Zé",
            "2024-01-01T00:00:00ééé",
            "éééééééééééééééééééé",
        ] {
            assert_eq!(parse_nanos(bad), None, "{bad}");
            assert_eq!(parse_seconds(bad), None, "{bad}");
        }
    }
}
