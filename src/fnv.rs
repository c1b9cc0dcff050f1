//! FNV-1a, the one non-cryptographic hash atoll uses: 128-bit for static pod UIDs (kubelet's
//! current algorithm) and the names of cached files, 64-bit for cheap change detection and
//! spreading. Never for anything an attacker could gain from colliding.

const OFFSET_64: u64 = 0xcbf29ce484222325;
const PRIME_64: u64 = 0x100000001b3;
const OFFSET_128: u128 = 0x6c62272e07bb014262b821756295c58d;
const PRIME_128: u128 = 0x0000000001000000000000000000013B;

/// FNV-1a, 64-bit, continuing from `h` (start with [`start_64`]).
pub fn add_64(h: u64, data: &[u8]) -> u64 {
    data.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME_64))
}

pub const fn start_64() -> u64 {
    OFFSET_64
}

/// FNV-1a, 64-bit.
pub fn fnv1a_64(data: &[u8]) -> u64 {
    add_64(OFFSET_64, data)
}

/// FNV-1a, 128-bit.
pub fn fnv1a_128(data: &[u8]) -> u128 {
    data.iter().fold(OFFSET_128, |h, &b| (h ^ u128::from(b)).wrapping_mul(PRIME_128))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values() {
        assert_eq!(fnv1a_128(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fnv1a_128(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
        assert_eq!(fnv1a_64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(add_64(fnv1a_64(b"ab"), b"c"), fnv1a_64(b"abc"));
    }
}
