//! Fuzzes the small value parsers fed by manifests, config files and flags: Go durations
//! (`duration`), resource quantities (`pod::quantity`) and base64 (`base64`, kubeconfig
//! `*-data`, keys and signatures). Beyond not panicking: a quantity prints to a text that
//! parses to an equal quantity printing the same; base64 decodes what it encodes, and what it
//! decodes encodes to a text that decodes the same.
#![no_main]

use atoll::pod::quantity::Quantity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let b64 = atoll::base64::encode(data);
    assert_eq!(atoll::base64::decode(&b64).as_deref(), Ok(data));
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = atoll::duration::parse_duration(text);
    if let Ok(q) = Quantity::parse(text) {
        let printed = q.to_string();
        let again = Quantity::parse(&printed).unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}: {e}"));
        assert_eq!(again, q, "{text:?} printed as {printed:?}");
        assert_eq!(again.to_string(), printed);
        let _ = (q.milli_value(), q.value(), q.is_zero(), q.is_negative(), q.divided_ceil(&again));
    }
    if let Ok(bytes) = atoll::base64::decode(text) {
        assert_eq!(atoll::base64::decode(&atoll::base64::encode(&bytes)), Ok(bytes));
    }
});
