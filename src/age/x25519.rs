//! X25519 (RFC 7748) for one purpose: age's recipient stanzas, where the box's static identity
//! meets the file's ephemeral share (ring only offers ephemeral keys). Field elements mod
//! 2^255-19 in five 51-bit limbs, the Montgomery ladder with a constant-time swap; the scalar
//! is the secret, so no branch or index depends on it. Checked against RFC 7748's vectors and
//! keys made by the stock `age-keygen`.

type Fe = [u64; 5];
const MASK: u64 = (1 << 51) - 1;

fn load(b: &[u8; 32]) -> Fe {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(w)
    };
    // Limbs at bits 0, 51, 102, 153 and 204; the top bit (255) is ignored, as the RFC says.
    [word(0) & MASK, (word(6) >> 3) & MASK, (word(12) >> 6) & MASK, (word(19) >> 1) & MASK, (word(24) >> 12) & MASK]
}

fn add(a: &Fe, b: &Fe) -> Fe {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4]]
}

/// a - b, with 4p added so no limb goes below zero (b is always a reduced product here).
fn sub(a: &Fe, b: &Fe) -> Fe {
    const FOUR_P0: u64 = 4 * ((1 << 51) - 19);
    const FOUR_P: u64 = 4 * ((1 << 51) - 1);
    [a[0] + FOUR_P0 - b[0], a[1] + FOUR_P - b[1], a[2] + FOUR_P - b[2], a[3] + FOUR_P - b[3], a[4] + FOUR_P - b[4]]
}

fn mul(a: &Fe, b: &Fe) -> Fe {
    let m = |x: u64, y: u64| u128::from(x) * u128::from(y);
    let (b1, b2, b3, b4) = (b[1] * 19, b[2] * 19, b[3] * 19, b[4] * 19);
    let r0 = m(a[0], b[0]) + m(a[1], b4) + m(a[2], b3) + m(a[3], b2) + m(a[4], b1);
    let r1 = m(a[0], b[1]) + m(a[1], b[0]) + m(a[2], b4) + m(a[3], b3) + m(a[4], b2);
    let r2 = m(a[0], b[2]) + m(a[1], b[1]) + m(a[2], b[0]) + m(a[3], b4) + m(a[4], b3);
    let r3 = m(a[0], b[3]) + m(a[1], b[2]) + m(a[2], b[1]) + m(a[3], b[0]) + m(a[4], b4);
    let r4 = m(a[0], b[4]) + m(a[1], b[3]) + m(a[2], b[2]) + m(a[3], b[1]) + m(a[4], b[0]);
    let r1 = r1 + (r0 >> 51);
    let r2 = r2 + (r1 >> 51);
    let r3 = r3 + (r2 >> 51);
    let r4 = r4 + (r3 >> 51);
    let low0 = u128::from(r0 as u64 & MASK) + (r4 >> 51) * 19;
    let out1 = (r1 as u64 & MASK) + (low0 >> 51) as u64;
    [low0 as u64 & MASK, out1, r2 as u64 & MASK, r3 as u64 & MASK, r4 as u64 & MASK]
}

fn square(a: &Fe) -> Fe {
    mul(a, a)
}

/// a^(p-2) = 1/a (the exponent is public: square and multiply over its bits).
fn invert(a: &Fe) -> Fe {
    // p - 2 = 2^255 - 21: bits 254..5 set, then 0b01011.
    let mut r: Fe = [1, 0, 0, 0, 0];
    for bit in (0..255).rev() {
        r = square(&r);
        let set = bit >= 5 || (0b01011 >> bit) & 1 == 1;
        if set {
            r = mul(&r, a);
        }
    }
    r
}

fn to_bytes(a: &Fe) -> [u8; 32] {
    let mut t = *a;
    // Two carry passes: every limb below 2^51, the value below 2^255 + 19.
    for _ in 0..2 {
        for i in 0..4 {
            t[i + 1] += t[i] >> 51;
            t[i] &= MASK;
        }
        t[0] += 19 * (t[4] >> 51);
        t[4] &= MASK;
    }
    // Subtract p if the value is p or more: q is 1 exactly then.
    let mut q = (t[0] + 19) >> 51;
    for limb in &t[1..] {
        q = (limb + q) >> 51;
    }
    t[0] += 19 * q;
    for i in 0..4 {
        t[i + 1] += t[i] >> 51;
        t[i] &= MASK;
    }
    t[4] &= MASK;
    let mut out = [0u8; 32];
    let (mut acc, mut bits, mut at) = (0u128, 0u32, 0usize);
    for limb in t {
        acc |= u128::from(limb) << bits;
        bits += 51;
        while bits >= 8 {
            if let Some(b) = out.get_mut(at) {
                *b = acc as u8;
            }
            acc >>= 8;
            bits -= 8;
            at += 1;
        }
    }
    if let Some(b) = out.get_mut(at) {
        *b = acc as u8;
    }
    out
}

/// Swaps `a` and `b` when `swap` is 1, with the same instructions either way.
fn cswap(swap: u64, a: &mut Fe, b: &mut Fe) {
    let mask = 0u64.wrapping_sub(swap);
    for (x, y) in a.iter_mut().zip(b.iter_mut()) {
        let t = mask & (*x ^ *y);
        *x ^= t;
        *y ^= t;
    }
}

/// X25519(scalar, u): the shared secret of a private scalar and a public u-coordinate.
pub fn x25519(scalar: &[u8; 32], u: &[u8; 32]) -> [u8; 32] {
    let mut k = *scalar;
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
    let x1 = load(u);
    let (mut x2, mut z2, mut x3, mut z3): (Fe, Fe, Fe, Fe) = ([1, 0, 0, 0, 0], [0; 5], x1, [1, 0, 0, 0, 0]);
    let mut swap = 0u64;
    for t in (0..255).rev() {
        let bit = u64::from((k[t / 8] >> (t % 8)) & 1);
        swap ^= bit;
        cswap(swap, &mut x2, &mut x3);
        cswap(swap, &mut z2, &mut z3);
        swap = bit;
        let a = add(&x2, &z2);
        let aa = square(&a);
        let b = sub(&x2, &z2);
        let bb = square(&b);
        let e = sub(&aa, &bb);
        let c = add(&x3, &z3);
        let d = sub(&x3, &z3);
        let da = mul(&d, &a);
        let cb = mul(&c, &b);
        x3 = square(&add(&da, &cb));
        z3 = mul(&x1, &square(&sub(&da, &cb)));
        x2 = mul(&aa, &bb);
        z2 = mul(&e, &add(&aa, &mul(&[121_665, 0, 0, 0, 0], &e)));
    }
    cswap(swap, &mut x2, &mut x3);
    cswap(swap, &mut z2, &mut z3);
    to_bytes(&mul(&x2, &invert(&z2)))
}

/// The public key of a private scalar (X25519 with the base point 9).
pub fn public(scalar: &[u8; 32]) -> [u8; 32] {
    let mut nine = [0u8; 32];
    nine[0] = 9;
    x25519(scalar, &nine)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2).unwrap(), 16).unwrap();
        }
        out
    }

    #[test]
    fn rfc7748_vectors() {
        // Section 5.2.
        let k = hex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4");
        let u = hex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c");
        assert_eq!(x25519(&k, &u), hex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"));
        // Section 6.1: both sides agree, and the public keys are the RFC's.
        let alice = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let bob = hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
        assert_eq!(public(&alice), hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"));
        assert_eq!(public(&bob), hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"));
        assert_eq!(x25519(&alice, &public(&bob)), x25519(&bob, &public(&alice)));
        assert_eq!(
            x25519(&alice, &public(&bob)),
            hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
        );
    }

    #[test]
    fn a_thousand_iterations_of_rfc7748() {
        let mut k = [0u8; 32];
        k[0] = 9;
        let mut u = k;
        for _ in 0..1000 {
            let next = x25519(&k, &u);
            u = k;
            k = next;
        }
        assert_eq!(k, hex("684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51"));
    }
}
