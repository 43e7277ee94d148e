//! Durations (`50ms`, `2s`, `5m`, `1h`) and byte sizes (`4MiB`, `512KB`, `1024`) as written in
//! `connectors.yaml`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// A duration written as a number followed by a unit: `ms`, `s`, `m` or `h` (`250ms`, `2s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

/// A size in bytes: a plain integer, or a number with a unit `B`, `KB`, `MB`, `GB` (powers of
/// 1000) or `KiB`, `MiB`, `GiB` (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// Parses `"50ms"`, `"2s"`, `"1.5s"`, `"5m"`, `"1h"`, `"7d"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("\"{text}\" has no unit: write it as 500ms, 2s, 5m, 1h or 7d"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| {
        format!("\"{text}\" is not a duration: write it as 500ms, 2s, 5m, 1h or 7d")
    })?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86400.0,
        other => {
            return Err(format!(
                "\"{text}\" has an unknown unit \"{other}\": use ms, s, m, h or d"
            ));
        }
    };
    if !seconds.is_finite() || seconds > 1e9 {
        return Err(format!("\"{text}\" is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses `"4MiB"`, `"512KB"`, `"1024"`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("\"{text}\" is not a size: write it as 1048576, 512KiB or 4MiB"))?;
    let factor: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "\"{text}\" has an unknown unit \"{other}\": use B, KB, MB, GB, KiB, MiB or GiB"
            ));
        }
    };
    let bytes = number * factor;
    if !bytes.is_finite() || bytes > u64::MAX as f64 / 2.0 {
        return Err(format!("\"{text}\" is out of range"));
    }
    Ok(bytes.round() as u64)
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text)
            .map(HumanDuration)
            .map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as 1048576, 512KiB or 4MiB")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map(ByteSize).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert!(
            parse_duration("5 days")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4MiB"), Ok(4 * 1024 * 1024));
        assert_eq!(parse_size("512KB"), Ok(512_000));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }
}
