//! Fuzzes age files (`age::Identity::decrypt`, binary and armored: header, stanzas, MAC,
//! payload chunks) against a fixed identity, age identities (`Identity::parse`) and their
//! bech32 text. Beyond not panicking: bech32 that decodes encodes back to the same text
//! (lowercased), and data encodes and decodes to itself.
#![no_main]

use atoll::age::{bech32_decode, bech32_encode, Identity};
use libfuzzer_sys::fuzz_target;

/// The unit tests' identity (made with age-keygen 1.1.1; test data only). The seeds hold
/// files encrypted to it, so mutations reach the payload.
const IDENTITY: &str = "AGE-SECRET-KEY-1L2ZQ9KSAW3E3JXREPM6TZPHCJ9ACFVEK2EWF3APNCNQU5D7AG0WSYVWMQN";

fuzz_target!(|data: &[u8]| {
    let id = Identity::parse(IDENTITY).expect("the fixed identity parses");
    let _ = id.decrypt(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Identity::parse(text);
        if let Ok((hrp, bytes)) = bech32_decode(text) {
            assert_eq!(bech32_encode(&hrp, &bytes), text.to_ascii_lowercase(), "{text:?}");
        }
    }
    if let Some((&n, rest)) = data.split_first() {
        let hrp = String::from_utf8_lossy(&rest[..usize::from(n % 16).min(rest.len())]).to_ascii_lowercase();
        let payload = &rest[usize::from(n % 16).min(rest.len())..];
        if !hrp.is_empty() && hrp.bytes().all(|c| (33..=126).contains(&c)) && hrp.len() + payload.len() < 60 {
            let text = bech32_encode(&hrp, payload);
            assert_eq!(bech32_decode(&text), Ok((hrp.clone(), payload.to_vec())), "{text:?}");
        }
    }
});
