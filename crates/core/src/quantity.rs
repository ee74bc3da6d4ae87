//! Resource quantities: memory in bytes, CPUs in thousandths of a core, durations in seconds.
//!
//! Memory accepts `4GiB`, `512MiB`, `1.5GiB`, `2G` (decimal) or a plain number of bytes, in JSON as a
//! string or an integer. CPUs accept a fractional number of cores (`0.5`, `2`). Durations accept
//! `90s`, `30m`, `2h`, `1d`, `1h30m` or a plain number of seconds.

use crate::CoreError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

/// Thousandths of a CPU core (`1500` = one and a half cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CpuMilli(pub u64);

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const TIB: u64 = 1 << 40;

const UNITS: &[(&str, u64)] = &[
    ("KiB", KIB),
    ("MiB", MIB),
    ("GiB", GIB),
    ("TiB", TIB),
    ("Ki", KIB),
    ("Mi", MIB),
    ("Gi", GIB),
    ("Ti", TIB),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("K", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("B", 1),
];

impl Bytes {
    /// Parses `4GiB`, `1.5 GiB`, `2G`, `1024`.
    pub fn parse(input: &str) -> Result<Self, CoreError> {
        let err = |reason: &str| CoreError::Quantity { input: input.to_owned(), reason: reason.to_owned() };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let unit = unit.trim();
        if num.is_empty() {
            return Err(err("expected a number such as 4GiB"));
        }
        let factor = if unit.is_empty() {
            1
        } else {
            UNITS
                .iter()
                .find(|(u, _)| u.eq_ignore_ascii_case(unit) && (u.len() > 1 || unit == *u || unit.len() == 1))
                .map(|(_, f)| *f)
                .ok_or_else(|| err("unknown unit (use B, KiB, MiB, GiB, TiB, K, M, G, T)"))?
        };
        if let Ok(n) = num.parse::<u64>() {
            return n.checked_mul(factor).map(Bytes).ok_or_else(|| err("too large"));
        }
        let f: f64 = num.parse().map_err(|_| err("not a number"))?;
        let v = f * factor as f64;
        if !v.is_finite() || v >= u64::MAX as f64 {
            return Err(err("too large"));
        }
        Ok(Bytes(v.round() as u64))
    }

    /// The value in bytes.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Bytes {
    /// The largest binary unit the value reaches: exact (`4GiB`, `1536MiB` stays `1.50GiB`) or with
    /// two decimals; bytes below 1KiB.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, factor) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
            if self.0 >= factor {
                return if self.0 % factor == 0 {
                    write!(f, "{}{unit}", self.0 / factor)
                } else {
                    write!(f, "{:.2}{unit}", self.0 as f64 / factor as f64)
                };
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Signed(i64),
            Float(f64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Bytes(n)),
            Raw::Signed(n) => Err(serde::de::Error::custom(format!("memory must not be negative, got {n}"))),
            Raw::Float(f) if f >= 0.0 && f.fract() == 0.0 => Ok(Bytes(f as u64)),
            Raw::Float(_) => {
                Err(serde::de::Error::custom("memory must be a whole number of bytes or a string like \"4GiB\""))
            }
            Raw::Str(s) => Bytes::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

impl CpuMilli {
    /// Converts a number of cores (`0.5`) to milli-CPUs, refusing negatives, NaN and sub-milli precision.
    pub fn from_cores(cores: f64) -> Result<Self, CoreError> {
        if !cores.is_finite() || cores < 0.0 {
            return Err(CoreError::invalid(
                "resources.cpus",
                format!("must be a non-negative number of cores, got {cores}"),
            ));
        }
        if cores > 1_000_000.0 {
            return Err(CoreError::invalid("resources.cpus", "too large"));
        }
        Ok(CpuMilli((cores * 1000.0).round() as u64))
    }

    /// The value as a number of cores.
    pub fn cores(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

impl fmt::Display for CpuMilli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 { write!(f, "{}", self.0 / 1000) } else { write!(f, "{}", self.cores()) }
    }
}

/// A duration in whole seconds (a run-time limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seconds(pub u64);

impl Seconds {
    /// Parses `90s`, `30m`, `2h`, `1d`, `1h30m`, `3600`.
    pub fn parse(input: &str) -> Result<Self, CoreError> {
        let err = |reason: &str| CoreError::Quantity { input: input.to_owned(), reason: reason.to_owned() };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        if let Ok(n) = s.parse::<u64>() {
            return Ok(Seconds(n));
        }
        let mut total: u64 = 0;
        let mut rest = s;
        while !rest.is_empty() {
            let split = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            if split == 0 {
                return Err(err("expected a number such as 2h or 90m"));
            }
            let n: u64 = rest[..split].parse().map_err(|_| err("too large"))?;
            let unit = rest[split..].chars().next().ok_or_else(|| err("missing unit (s, m, h or d)"))?;
            let factor = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                _ => return Err(err("unknown unit (use s, m, h or d)")),
            };
            total = n.checked_mul(factor).and_then(|v| total.checked_add(v)).ok_or_else(|| err("too large"))?;
            rest = &rest[split + 1..];
        }
        Ok(Seconds(total))
    }
}

impl fmt::Display for Seconds {
    /// `1d2h`, `2h`, `1h30m`, `90s` → `1m30s`; `0s` for zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("0s");
        }
        let mut left = self.0;
        for (unit, factor) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
            if left >= factor {
                write!(f, "{}{unit}", left / factor)?;
                left %= factor;
            }
        }
        Ok(())
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Signed(i64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Seconds(n)),
            Raw::Signed(n) => Err(serde::de::Error::custom(format!("a duration must not be negative, got {n}"))),
            Raw::Str(s) => Seconds::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// The OpenAPI schemas of the quantities, written as strings with a unit (or plain integers).
#[cfg(feature = "openapi")]
mod schema {
    use super::{Bytes, Seconds};
    use utoipa::openapi::schema::{Schema, SchemaType, Type};
    use utoipa::openapi::{ObjectBuilder, RefOr};

    fn string_schema(description: &str, example: &str) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::new(Type::String))
            .description(Some(description))
            .examples([serde_json::json!(example)])
            .into()
    }

    impl utoipa::PartialSchema for Bytes {
        fn schema() -> RefOr<Schema> {
            string_schema("bytes: \"4GiB\", \"512MiB\", \"2G\" or an integer number of bytes", "4GiB")
        }
    }
    impl utoipa::ToSchema for Bytes {}

    impl utoipa::PartialSchema for Seconds {
        fn schema() -> RefOr<Schema> {
            string_schema("duration: \"90s\", \"30m\", \"2h\", \"1d\", \"1h30m\" or an integer number of seconds", "2h")
        }
    }
    impl utoipa::ToSchema for Seconds {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations() {
        assert_eq!(Seconds::parse("90s").unwrap(), Seconds(90));
        assert_eq!(Seconds::parse("2h").unwrap(), Seconds(7200));
        assert_eq!(Seconds::parse("1h30m").unwrap(), Seconds(5400));
        assert_eq!(Seconds::parse("1d").unwrap(), Seconds(86_400));
        assert_eq!(Seconds::parse(" 3600 ").unwrap(), Seconds(3600));
        for bad in ["", "h", "2x", "1.5h", "-1h", "99999999999999999999d", "2h30"] {
            assert!(Seconds::parse(bad).is_err(), "{bad} should fail");
        }
        assert_eq!(Seconds(5400).to_string(), "1h30m");
        assert_eq!(Seconds(90).to_string(), "1m30s");
        let d: Seconds = serde_json::from_str("\"30m\"").unwrap();
        assert_eq!(d, Seconds(1800));
        assert_eq!(serde_json::from_str::<Seconds>("60").unwrap(), Seconds(60));
        assert!(serde_json::from_str::<Seconds>("-60").is_err());
    }

    #[test]
    fn parses_units() {
        assert_eq!(Bytes::parse("4GiB").unwrap(), Bytes(4 * GIB));
        assert_eq!(Bytes::parse("4gib").unwrap(), Bytes(4 * GIB));
        assert_eq!(Bytes::parse("1.5GiB").unwrap(), Bytes(3 * GIB / 2));
        assert_eq!(Bytes::parse("2G").unwrap(), Bytes(2_000_000_000));
        assert_eq!(Bytes::parse("512 MiB").unwrap(), Bytes(512 * MIB));
        assert_eq!(Bytes::parse("141GiB").unwrap(), Bytes(141 * GIB));
        assert_eq!(Bytes::parse("1024").unwrap(), Bytes(1024));
        assert_eq!(Bytes::parse("16Gi").unwrap(), Bytes(16 * GIB));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "GiB", "4XB", "-1GiB", "1..2G", "99999999999999TiB"] {
            assert!(Bytes::parse(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn json_forms() {
        let b: Bytes = serde_json::from_str("\"4GiB\"").unwrap();
        assert_eq!(b, Bytes(4 * GIB));
        let b: Bytes = serde_json::from_str("1048576").unwrap();
        assert_eq!(b, Bytes(MIB));
        assert!(serde_json::from_str::<Bytes>("-5").is_err());
        assert_eq!(serde_json::to_string(&Bytes(4 * GIB)).unwrap(), "\"4GiB\"");
    }

    #[test]
    fn cpus() {
        assert_eq!(CpuMilli::from_cores(0.5).unwrap(), CpuMilli(500));
        assert_eq!(CpuMilli::from_cores(2.0).unwrap().to_string(), "2");
        assert_eq!(CpuMilli(1500).to_string(), "1.5");
        assert!(CpuMilli::from_cores(-1.0).is_err());
        assert!(CpuMilli::from_cores(f64::NAN).is_err());
    }

    proptest! {
        #[test]
        fn seconds_round_trip(n in 0u64..(1u64 << 40)) {
            prop_assert_eq!(Seconds::parse(&Seconds(n).to_string()).unwrap(), Seconds(n));
        }

        #[test]
        fn display_round_trips(n in 0u64..(1u64 << 50)) {
            let b = Bytes(n);
            let back = Bytes::parse(&b.to_string()).unwrap();
            if b.to_string().contains('.') {
                // two decimals of GiB: within 0.5% of the value
                prop_assert!((back.0 as f64 - n as f64).abs() <= n as f64 * 0.005);
            } else {
                prop_assert_eq!(back, b);
            }
        }
    }
}
