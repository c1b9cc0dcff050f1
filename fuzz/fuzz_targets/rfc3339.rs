//! Fuzzes RFC 3339 timestamps (`rfc3339`), which come from the network (`sinceTime`) and the
//! runtime's log lines: arbitrary text must parse or be refused without a panic, a timestamp
//! that parses in UTC must print back to an equal instant, and any instant atoll prints must
//! parse back to itself.
#![no_main]

use atoll::rfc3339::{format_micros, format_nanos, format_seconds, parse_nanos, parse_seconds};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};

/// The last second of year 9999: what four year digits can hold.
const MAX_SECS: u64 = 253_402_300_799;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let nanos = parse_nanos(s);
        if let Some(n) = nanos {
            // Printed again (in UTC), the instant reads back the same.
            let secs = n.div_euclid(1_000_000_000);
            if (0..=i128::from(MAX_SECS)).contains(&secs) {
                let t = UNIX_EPOCH + Duration::new(secs as u64, n.rem_euclid(1_000_000_000) as u32);
                assert_eq!(parse_nanos(&format_nanos(t)), Some(n), "{s:?}");
            }
        }
        if let Some(t) = parse_seconds(s) {
            let n = nanos.expect("what parse_seconds reads, parse_nanos reads");
            assert_eq!(t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i128, n.div_euclid(1_000_000_000));
        }
    }
    // Any instant atoll prints parses back.
    if let Some(bytes) = data.get(..12) {
        let secs = u64::from_le_bytes(bytes[..8].try_into().unwrap()) % (MAX_SECS + 1);
        let sub = u32::from_le_bytes(bytes[8..].try_into().unwrap()) % 1_000_000_000;
        let t = UNIX_EPOCH + Duration::new(secs, sub);
        let n = i128::from(secs) * 1_000_000_000 + i128::from(sub);
        assert_eq!(parse_nanos(&format_nanos(t)), Some(n));
        assert_eq!(parse_seconds(&format_seconds(t)), Some(UNIX_EPOCH + Duration::from_secs(secs)));
        assert_eq!(parse_nanos(&format_micros(t)), Some(n - i128::from(sub % 1000)));
    }
});
