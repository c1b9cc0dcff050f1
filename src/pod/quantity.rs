//! Kubernetes resource quantities (`250m`, `1.5`, `64Mi`, `1G`, `1e3`), parsed exactly.
//!
//! A quantity is held as an exact decimal: `mantissa × 10^exponent`, with binary suffixes
//! (`Ki` … `Ei`) multiplied out into the mantissa. Nothing goes through floating point, so
//! `0.1` is exactly one tenth and `1Mi` is exactly 1048576. Rounding happens only where
//! Kubernetes rounds: a quantity is rounded up (away from zero) to a whole number of nanos when
//! parsed, as `resource.ParseQuantity` does, and [`Quantity::milli_value`] and
//! [`Quantity::value`] round up.
//! It serialises to a canonical string, so `0.5` and `500m` hash and compare the same.

use crate::pod::{Invalid, InvalidKind as Kind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// An exact resource quantity.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
    format: Format,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.mantissa == other.mantissa && self.exponent == other.exponent
    }
}
impl Eq for Quantity {}

/// Largest magnitude accepted: well past any real resource (about 9.2e18 × 10^18).
const MAX_DIGITS: usize = 38;

impl Quantity {
    /// Parses the Kubernetes quantity grammar: sign, digits with an optional fraction, then
    /// either a suffix (`n u m k M G T P E`, `Ki Mi Gi Ti Pi Ei`) or an exponent (`e3`, `E-2`).
    pub fn parse(s: &str) -> Result<Quantity, Invalid> {
        let bad = |why| Invalid::from(Kind::Quantity { text: s.to_string(), why });
        if s.is_empty() {
            return Err(bad("empty"));
        }
        let (negative, rest) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_end);
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad("expected a number"));
        }
        if frac_part.contains('.') {
            return Err(bad("more than one decimal point"));
        }
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > MAX_DIGITS {
            return Err(bad("too many digits"));
        }
        let mut mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| bad("bad digits"))? };
        let mut exponent = -(frac_part.len() as i32);
        let format = match suffix {
            "" => Format::DecimalSi,
            "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => {
                exponent += match suffix {
                    "n" => -9,
                    "u" => -6,
                    "m" => -3,
                    "k" => 3,
                    "M" => 6,
                    "G" => 9,
                    "T" => 12,
                    "P" => 15,
                    _ => 18,
                };
                Format::DecimalSi
            }
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                let power = match suffix {
                    "Ki" => 1,
                    "Mi" => 2,
                    "Gi" => 3,
                    "Ti" => 4,
                    "Pi" => 5,
                    _ => 6,
                };
                mantissa = mantissa.checked_mul(1i128 << (10 * power)).ok_or_else(|| bad("too large"))?;
                Format::BinarySi
            }
            _ if suffix.starts_with(['e', 'E']) => {
                let e = suffix.get(1..).unwrap_or_default();
                let valid = !e.is_empty()
                    && e.trim_start_matches(['+', '-']).len() <= 3
                    && e.trim_start_matches(['+', '-']).chars().all(|c| c.is_ascii_digit())
                    && e.len() - e.trim_start_matches(['+', '-']).len() <= 1;
                if !valid {
                    return Err(bad("bad exponent"));
                }
                exponent += e.parse::<i32>().map_err(|_| bad("bad exponent"))?;
                Format::DecimalExponent
            }
            other => {
                return Err(Invalid::from(Kind::QuantitySuffix { text: s.to_string(), suffix: other.to_string() }))
            }
        };
        if negative {
            mantissa = -mantissa;
        }
        let (mantissa, exponent) = nano_ceil(mantissa, exponent);
        let q = Quantity::normalised(mantissa, exponent, format);
        // Past these it could not be written back in a form that parses (`e` takes three
        // digits; a binary suffix multiplied out can leave more digits than were written).
        if q.exponent > 999 || q.mantissa.unsigned_abs() >= 10u128.pow(MAX_DIGITS as u32) {
            return Err(bad("too large"));
        }
        Ok(q)
    }

    fn normalised(mut mantissa: i128, mut exponent: i32, format: Format) -> Quantity {
        if mantissa == 0 {
            return Quantity { mantissa: 0, exponent: 0, format };
        }
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        Quantity { mantissa, exponent, format }
    }

    /// `v × 10^exponent` (bytes: exponent 0; millicores: -3), a fraction's zeros dropped.
    pub fn new(v: i64, exponent: i32) -> Quantity {
        let (mut mantissa, mut exponent) = (i128::from(v), exponent);
        while exponent < 0 && mantissa != 0 && mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        Quantity { mantissa, exponent, format: Format::DecimalSi }
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// The value scaled by 10^`scale`, rounded up (towards +∞), saturating at i64's range.
    fn scaled_ceil(&self, scale: i32) -> i64 {
        let e = self.exponent + scale;
        let v: i128 = if e >= 0 {
            if e > 38 {
                return if self.mantissa > 0 { i64::MAX } else { i64::MIN };
            }
            self.mantissa.saturating_mul(10i128.pow(e as u32))
        } else if -e > 38 {
            i128::from(self.mantissa > 0)
        } else {
            let d = 10i128.pow((-e) as u32);
            let q = self.mantissa / d;
            if self.mantissa % d != 0 && self.mantissa > 0 {
                q + 1
            } else {
                q
            }
        };
        v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// Thousandths, rounded up (Kubernetes' `MilliValue`): `250m` → 250, `1` → 1000.
    pub fn milli_value(&self) -> i64 {
        self.scaled_ceil(3)
    }

    /// Whole units, rounded up (Kubernetes' `Value`): `64Mi` → 67108864, `100m` → 1.
    pub fn value(&self) -> i64 {
        self.scaled_ceil(0)
    }

    /// The value in units of `divisor`, rounded up (resourceFieldRef's rule); `None` for a
    /// zero divisor.
    pub fn divided_ceil(&self, divisor: &Quantity) -> Option<i64> {
        if divisor.is_zero() {
            return None;
        }
        // self / divisor = (m1 / m2) × 10^(e1 - e2)
        let e = self.exponent - divisor.exponent;
        let (mut num, mut den) = (self.mantissa, divisor.mantissa);
        if e >= 0 {
            num = num.checked_mul(10i128.checked_pow(e as u32)?)?;
        } else {
            den = den.checked_mul(10i128.checked_pow((-e) as u32)?)?;
        }
        if den < 0 {
            num = -num;
            den = -den;
        }
        let q = num / den;
        let q = if num % den != 0 && num > 0 { q + 1 } else { q };
        Some(q.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    }
}

/// `mantissa × 10^exponent` rounded away from zero to a whole number of nanos (10^-9).
fn nano_ceil(mantissa: i128, exponent: i32) -> (i128, i32) {
    if exponent >= -9 || mantissa == 0 {
        return (mantissa, exponent);
    }
    let away = mantissa.signum();
    let Some(unit) = 10i128.checked_pow((-9 - exponent).unsigned_abs()) else {
        return (away, -9); // smaller than one nano: one nano
    };
    let whole = mantissa / unit;
    (if mantissa % unit == 0 { whole } else { whole + away }, -9)
}

impl fmt::Display for Quantity {
    /// Canonical form: binary suffixes for binary quantities that divide evenly, else the
    /// largest decimal suffix that keeps the number whole, else a plain decimal fraction.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mantissa == 0 {
            return write!(f, "0");
        }
        if self.format == Format::BinarySi && self.exponent >= 0 && self.exponent <= 18 {
            if let Some(whole) = self.mantissa.checked_mul(10i128.pow(self.exponent as u32)) {
                for (power, suffix) in [(6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")] {
                    let unit = 1i128 << (10 * power);
                    if whole % unit == 0 {
                        return write!(f, "{}{suffix}", whole / unit);
                    }
                }
                if whole.unsigned_abs() < 1024 {
                    return write!(f, "{whole}");
                }
            }
        }
        if self.format == Format::DecimalExponent && self.exponent > 0 && self.exponent % 3 == 0 {
            return write!(f, "{}e{}", self.mantissa, self.exponent);
        }
        // Decimal SI: the suffix whose power is the largest multiple of 3 not above the exponent.
        let e3 = self.exponent.div_euclid(3) * 3;
        let suffix = match e3 {
            18.. => None,
            15 => Some("P"),
            12 => Some("T"),
            9 => Some("G"),
            6 => Some("M"),
            3 => Some("k"),
            0 => Some(""),
            -3 => Some("m"),
            -6 => Some("u"),
            -9 => Some("n"),
            _ => None,
        };
        // The mantissa times 10^`k`, unless that takes more digits than a quantity may have
        // (or leaves i128: 38 digits times 10^2 can).
        let scaled = |k: i32| {
            let m = 10i128.checked_pow(k.unsigned_abs()).and_then(|p| self.mantissa.checked_mul(p))?;
            (m.unsigned_abs() < 10u128.pow(MAX_DIGITS as u32)).then_some(m)
        };
        match suffix {
            Some(s) => match scaled(self.exponent - e3) {
                Some(m) => write!(f, "{m}{s}"),
                None => write!(f, "{}e{}", self.mantissa, self.exponent),
            },
            None if self.exponent >= 18 => match scaled(self.exponent - 18) {
                Some(m) => write!(f, "{m}E"),
                None => write!(f, "{}e{}", self.mantissa, self.exponent),
            },
            // Below nano: never, as parsed quantities are whole nanos.
            None => write!(f, "{}e{}", self.mantissa, self.exponent),
        }
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    /// Accepts a string (`"250m"`) or a number (`2`, `0.5`), as the API server does.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as \"250m\", \"64Mi\" or 2")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Quantity::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::normalised(v.into(), 0, Format::DecimalSi))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity::normalised(v.into(), 0, Format::DecimalSi))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                if !v.is_finite() {
                    return Err(E::custom("quantity must be a finite number"));
                }
                // The shortest decimal that round-trips is what the user wrote.
                Quantity::parse(&format!("{v}")).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn cpu_quantities_in_millis() {
        assert_eq!(q("250m").milli_value(), 250);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("2").milli_value(), 2000);
        assert_eq!(q("0.1").milli_value(), 100);
        assert_eq!(q("1e3").milli_value(), 1_000_000);
        assert_eq!(q("100u").milli_value(), 1, "rounds up like Kubernetes");
        assert_eq!(q("0").milli_value(), 0);
        assert_eq!(q(".5").milli_value(), 500);
    }

    #[test]
    fn memory_quantities_in_bytes() {
        assert_eq!(q("64Mi").value(), 64 * 1024 * 1024);
        assert_eq!(q("1G").value(), 1_000_000_000);
        assert_eq!(q("1Gi").value(), 1 << 30);
        assert_eq!(q("1.5Gi").value(), 3 << 29);
        assert_eq!(q("128974848").value(), 128_974_848);
        assert_eq!(q("129e6").value(), 129_000_000);
        assert_eq!(q("123Mi").value(), 128_974_848);
        assert_eq!(q("1k").value(), 1000);
        assert_eq!(q("1Ki").value(), 1024);
        assert_eq!(q("100m").value(), 1, "fractions round up to whole units");
        assert_eq!(q("1E").value(), 1_000_000_000_000_000_000);
    }

    #[test]
    fn equal_values_in_different_spellings_are_equal_and_print_alike() {
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("0.5").to_string(), "500m");
        assert_eq!(q("1000m").to_string(), "1");
        assert_eq!(q("1.5").to_string(), "1500m");
        assert_eq!(q("1024Mi").to_string(), "1Gi");
        assert_eq!(q("1536Mi").to_string(), "1536Mi");
        assert_eq!(q("1e3").to_string(), "1e3");
        assert_eq!(q("1000").to_string(), "1k");
        assert_eq!(q("64Mi").to_string(), "64Mi");
        assert_eq!(q("-250m").to_string(), "-250m");
        assert_eq!(q("0Gi").to_string(), "0");
    }

    #[test]
    fn huge_exponents_print_without_overflow_and_parse_back() {
        // Found by fuzz/fuzz_targets/values.rs: `1e335` multiplied 10^317 into an i128 when
        // printed (a panic in debug builds, a wrapped number in release ones); `1e56` printed
        // as 39 digits and `E`, which does not parse.
        for text in
            ["1e335", "1e56", "1e998", "99999999999999999999999999999999999999e4", "12e100", "1e20", "5E", "123456789E"]
        {
            let printed = q(text).to_string();
            assert_eq!(q(&printed), q(text), "{text} printed as {printed}");
        }
        assert_eq!(q("1e335").to_string(), "1e335");
        assert!(Quantity::parse("10e999").unwrap_err().to_string().contains("too large"));
    }

    #[test]
    fn precision_below_a_nano_is_rounded_up_as_kubernetes_rounds_it() {
        // Found by fuzz/fuzz_targets/values.rs: printed exactly, this took more digits than a
        // quantity may have, so it did not parse back.
        let long = "1.55013055301000330350145033178Gi";
        let printed = q(long).to_string();
        assert_eq!(q(&printed), q(long), "{long} printed as {printed}");
        // Its digits times 2^30 would take 40 digits: refused, as it could not be written back.
        for odd in ["-3062.5Ki", "-1536", "-1023Ki"] {
            let printed = q(odd).to_string();
            assert_eq!(q(&printed), q(odd), "{odd} printed as {printed}");
            assert_eq!(q(&printed).to_string(), printed, "{odd} printed as {printed}");
        }
        let wide = "0100666666660004000000.666666666Gi";
        assert!(Quantity::parse(wide).unwrap_err().to_string().contains("too large"), "{wide}");
        for (text, want) in [
            ("0.0000000001", "1n"),
            ("-0.0000000001", "-1n"),
            ("1.0000000001", "1000000001n"),
            ("0.5n", "1n"),
            ("1e-40", "1n"),
            ("-1e-300", "-1n"),
            ("0.000000002000", "2n"),
        ] {
            assert_eq!(q(text).to_string(), want, "{text}");
        }
    }

    #[test]
    fn malformed_quantities_are_refused_with_the_reason() {
        for (bad, why) in [
            ("", "empty"),
            ("abc", "expected a number"),
            ("1.2.3", "more than one decimal point"),
            ("12Q", "unknown suffix \"Q\""),
            ("1mi", "unknown suffix \"mi\""),
            ("1e", "bad exponent"),
            ("1e++3", "bad exponent"),
            ("1 Gi", "unknown suffix \" Gi\""),
            ("99999999999999999999999999999999999999999", "too many digits"),
        ] {
            let err = Quantity::parse(bad).unwrap_err();
            assert!(err.to_string().contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn division_rounds_up_like_resource_field_refs() {
        assert_eq!(q("250m").divided_ceil(&q("1m")), Some(250));
        assert_eq!(q("250m").divided_ceil(&q("1")), Some(1));
        assert_eq!(q("64Mi").divided_ceil(&q("1Mi")), Some(64));
        assert_eq!(q("64Mi").divided_ceil(&q("1M")), Some(68));
        assert_eq!(q("1").divided_ceil(&q("0")), None);
    }

    #[test]
    fn numbers_and_strings_both_deserialize() {
        let v: Vec<Quantity> = serde_json::from_str(r#"["250m", 2, 0.5, "1Gi"]"#).unwrap();
        assert_eq!(v[0].milli_value(), 250);
        assert_eq!(v[1].milli_value(), 2000);
        assert_eq!(v[2], q("500m"));
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"["250m","2","500m","1Gi"]"#);
        assert!(serde_json::from_str::<Quantity>(r#""12Q""#).is_err());
    }
}
