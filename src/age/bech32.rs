//! Bech32 (BIP 173) as age writes its keys: `AGE-SECRET-KEY-1…` identities and `age1…`
//! recipients. Decoding checks the checksum; the data is never in an error.

const CHARSET: &[u8; 32] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";

fn polymod(values: impl Iterator<Item = u8>) -> u32 {
    const GEN: [u32; 5] = [0x3b6a_57b2, 0x2650_8e6d, 0x1ea1_19fa, 0x3d42_33dd, 0x2a14_62b3];
    let mut chk = 1u32;
    for v in values {
        let top = chk >> 25;
        chk = ((chk & 0x01ff_ffff) << 5) ^ u32::from(v);
        for (i, g) in GEN.iter().enumerate() {
            if (top >> i) & 1 == 1 {
                chk ^= g;
            }
        }
    }
    chk
}

fn expand(hrp: &str) -> Vec<u8> {
    let mut v: Vec<u8> = hrp.bytes().map(|b| b >> 5).collect();
    v.push(0);
    v.extend(hrp.bytes().map(|b| b & 31));
    v
}

/// 8-bit bytes ↔ 5-bit groups.
fn regroup(data: &[u8], from: u32, to: u32, pad: bool) -> Option<Vec<u8>> {
    let (mut acc, mut bits, mut out) = (0u32, 0u32, Vec::new());
    for &v in data {
        acc = (acc << from) | u32::from(v);
        bits += from;
        while bits >= to {
            bits -= to;
            out.push(((acc >> bits) & ((1 << to) - 1)) as u8);
        }
        acc &= (1 << bits) - 1;
    }
    if pad && bits > 0 {
        out.push(((acc << (to - bits)) & ((1 << to) - 1)) as u8);
    } else if !pad && (bits >= from || acc != 0) {
        return None;
    }
    Some(out)
}

/// (human-readable part in lower case, data).
/// What is wrong is said in bech32's terms, never with the text (it may be a secret key).
pub fn decode(text: &str) -> Result<(String, Vec<u8>), &'static str> {
    let lower = text.to_ascii_lowercase();
    if text != lower && text != text.to_ascii_uppercase() {
        return Err("mixed case");
    }
    let (hrp, data) = lower.rsplit_once('1').ok_or("no separator")?;
    if hrp.is_empty() || data.len() < 6 {
        return Err("too short");
    }
    let values: Vec<u8> = data
        .bytes()
        .map(|c| CHARSET.iter().position(|x| *x == c).map(|p| p as u8))
        .collect::<Option<_>>()
        .ok_or("a character outside bech32's alphabet")?;
    if polymod(expand(hrp).into_iter().chain(values.iter().copied())) != 1 {
        return Err("the checksum does not match");
    }
    let bytes = regroup(&values[..values.len() - 6], 5, 8, false).ok_or("bad padding")?;
    Ok((hrp.to_string(), bytes))
}

pub fn encode(hrp: &str, data: &[u8]) -> String {
    let values = regroup(data, 8, 5, true).unwrap_or_default();
    let chk = polymod(expand(hrp).into_iter().chain(values.iter().copied()).chain([0u8; 6])) ^ 1;
    let mut out = format!("{hrp}1");
    for v in values.iter().copied().chain((0..6).map(|i| ((chk >> (5 * (5 - i))) & 31) as u8)) {
        out.push(char::from(CHARSET[usize::from(v)]));
    }
    out
}
