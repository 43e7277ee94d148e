//! The decoded forms of dates, times, instants and decimals, shared by every decoder, so an
//! Avro `timestamp-micros`, a Connect `Timestamp` and a Protobuf `Timestamp` reach the
//! mapping as the same text (docs/formats.md).

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, SecondsFormat};

use super::shape::TimeUnit;

/// Most bytes of an unscaled decimal: 128 bytes hold more than 300 digits, beyond every
/// database's `NUMERIC` (PostgreSQL keeps up to 131072 digits before the point, but no
/// producer writes such values); a longer one is a decode failure, not a slow record.
pub const MAX_DECIMAL_BYTES: usize = 128;

/// Largest scale of a decimal: more digits after the point than any database keeps
/// (PostgreSQL: 16383; MySQL: 30), and a bound on the text a hostile schema can make one
/// small value into.
pub const MAX_DECIMAL_SCALE: u32 = 400;

/// Days since 1970-01-01 as `YYYY-MM-DD`.
pub fn date(days: i64) -> Result<String, String> {
    NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|epoch| epoch.checked_add_signed(Duration::try_days(days)?))
        .map(|d| d.format("%Y-%m-%d").to_string())
        .ok_or_else(|| format!("date {days} days from 1970-01-01 is out of range"))
}

/// A time of day since midnight, in `unit`, as `HH:MM:SS.ffffff`.
pub fn time(value: i64, unit: TimeUnit) -> Result<String, String> {
    let nanos = in_nanos(value, unit).filter(|n| (0..86_400_000_000_000).contains(n));
    let Some(nanos) = nanos else {
        return Err(format!(
            "time of day {value} ({unit:?}) is not within a day"
        ));
    };
    let secs = u32::try_from(nanos / 1_000_000_000).map_err(|e| e.to_string())?;
    let frac = u32::try_from(nanos % 1_000_000_000).map_err(|e| e.to_string())?;
    let time = NaiveTime::from_num_seconds_from_midnight_opt(secs, frac)
        .ok_or_else(|| format!("time of day {value} is out of range"))?;
    Ok(match unit {
        TimeUnit::Nanos => time.format("%H:%M:%S%.9f").to_string(),
        _ => time.format("%H:%M:%S%.6f").to_string(),
    })
}

/// An instant since the epoch, in `unit`, as RFC 3339 UTC with the unit's digits.
pub fn timestamp(value: i64, unit: TimeUnit) -> Result<String, String> {
    let instant = instant(value, unit)?;
    Ok(instant.to_rfc3339_opts(seconds_format(unit), true))
}

/// A wall-clock date and time (no zone), in `unit` since 1970-01-01 00:00, as
/// `YYYY-MM-DD HH:MM:SS.ffffff` (nine digits for nanoseconds).
pub fn local_timestamp(value: i64, unit: TimeUnit) -> Result<String, String> {
    let instant = instant(value, unit)?.naive_utc();
    Ok(match unit {
        TimeUnit::Nanos => instant.format("%Y-%m-%d %H:%M:%S%.9f").to_string(),
        _ => instant.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
    })
}

/// Seconds and nanoseconds since the epoch (Protobuf's `Timestamp`) as RFC 3339 UTC with
/// nine digits.
pub fn timestamp_parts(seconds: i64, nanos: i32) -> Result<String, String> {
    let nanos = u32::try_from(nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| format!("timestamp nanos {nanos} is out of range"))?;
    DateTime::from_timestamp(seconds, nanos)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Nanos, true))
        .ok_or_else(|| format!("timestamp {seconds}s is out of range"))
}

fn seconds_format(unit: TimeUnit) -> SecondsFormat {
    match unit {
        TimeUnit::Millis => SecondsFormat::Millis,
        TimeUnit::Micros => SecondsFormat::Micros,
        TimeUnit::Nanos => SecondsFormat::Nanos,
    }
}

fn in_nanos(value: i64, unit: TimeUnit) -> Option<i64> {
    match unit {
        TimeUnit::Millis => value.checked_mul(1_000_000),
        TimeUnit::Micros => value.checked_mul(1_000),
        TimeUnit::Nanos => Some(value),
    }
}

fn instant(value: i64, unit: TimeUnit) -> Result<DateTime<chrono::Utc>, String> {
    let per_second: i64 = match unit {
        TimeUnit::Millis => 1_000,
        TimeUnit::Micros => 1_000_000,
        TimeUnit::Nanos => 1_000_000_000,
    };
    let secs = value.div_euclid(per_second);
    let frac = value.rem_euclid(per_second) * (1_000_000_000 / per_second);
    u32::try_from(frac)
        .ok()
        .and_then(|frac| DateTime::from_timestamp(secs, frac))
        .ok_or_else(|| format!("instant {value} ({unit:?}) is out of range"))
}

/// An unscaled decimal as big-endian two's complement bytes (Avro's `decimal`, Connect's
/// `Decimal`), with `scale`, as an exact decimal string: `-12.50`.
pub fn decimal(unscaled: &[u8], scale: u32) -> Result<String, String> {
    if unscaled.len() > MAX_DECIMAL_BYTES {
        return Err(format!(
            "decimal of {} bytes is longer than {MAX_DECIMAL_BYTES}",
            unscaled.len()
        ));
    }
    if unscaled.is_empty() {
        return Err("decimal with no bytes".into());
    }
    if scale > MAX_DECIMAL_SCALE {
        return Err(format!(
            "decimal scale {scale} is larger than {MAX_DECIMAL_SCALE}"
        ));
    }
    let negative = unscaled[0] & 0x80 != 0;
    // The magnitude, big-endian: the two's complement negated for a negative value.
    let mut magnitude: Vec<u8> = if negative {
        let mut bytes: Vec<u8> = unscaled.iter().map(|b| !b).collect();
        for byte in bytes.iter_mut().rev() {
            let (sum, carry) = byte.overflowing_add(1);
            *byte = sum;
            if !carry {
                break;
            }
        }
        bytes
    } else {
        unscaled.to_vec()
    };
    // Digits by repeated division by 10, least significant first.
    let mut digits = Vec::new();
    while magnitude.iter().any(|b| *b != 0) {
        let mut remainder = 0u32;
        for byte in magnitude.iter_mut() {
            let current = (remainder << 8) | u32::from(*byte);
            *byte = (current / 10) as u8;
            remainder = current % 10;
        }
        digits.push(b'0' + remainder as u8);
    }
    Ok(scaled(negative, &mut digits, scale))
}

/// An integer's digits (least significant first) with `scale` of them after the point.
fn scaled(negative: bool, digits: &mut Vec<u8>, scale: u32) -> String {
    let scale = scale as usize;
    while digits.len() <= scale {
        digits.push(b'0');
    }
    digits.reverse();
    let point = digits.len() - scale;
    let mut text = String::with_capacity(digits.len() + 2);
    if negative {
        text.push('-');
    }
    text.push_str(std::str::from_utf8(&digits[..point]).unwrap_or("0"));
    if scale > 0 {
        text.push('.');
        text.push_str(std::str::from_utf8(&digits[point..]).unwrap_or("0"));
    }
    text
}

/// An integer unscaled value (Connect's `decimal.format: NUMERIC` gives the number itself,
/// Protobuf's `confluent.type.Decimal` its bytes) with `scale` as a decimal string.
pub fn decimal_from_i128(unscaled: i128, scale: u32) -> String {
    let mut digits: Vec<u8> = unscaled.unsigned_abs().to_string().into_bytes();
    digits.reverse();
    scaled(unscaled < 0, &mut digits, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_times_and_instants() {
        assert_eq!(date(0).unwrap(), "1970-01-01");
        assert_eq!(date(19_723).unwrap(), "2024-01-01");
        assert_eq!(date(-1).unwrap(), "1969-12-31");
        assert!(date(i64::MAX).is_err());
        assert_eq!(time(0, TimeUnit::Millis).unwrap(), "00:00:00.000000");
        assert_eq!(
            time(45_296_789, TimeUnit::Millis).unwrap(),
            "12:34:56.789000"
        );
        assert_eq!(
            time(45_296_789_012, TimeUnit::Micros).unwrap(),
            "12:34:56.789012"
        );
        assert!(time(86_400_000, TimeUnit::Millis).is_err());
        assert!(time(-1, TimeUnit::Micros).is_err());
        assert_eq!(
            timestamp(1_700_000_000_123, TimeUnit::Millis).unwrap(),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            timestamp(1_700_000_000_123_456, TimeUnit::Micros).unwrap(),
            "2023-11-14T22:13:20.123456Z"
        );
        assert_eq!(
            timestamp(1_700_000_000_123_456_789, TimeUnit::Nanos).unwrap(),
            "2023-11-14T22:13:20.123456789Z"
        );
        assert_eq!(
            timestamp(-1, TimeUnit::Millis).unwrap(),
            "1969-12-31T23:59:59.999Z"
        );
        assert!(timestamp(i64::MAX, TimeUnit::Millis).is_err());
        assert_eq!(
            local_timestamp(1_700_000_000_123_456, TimeUnit::Micros).unwrap(),
            "2023-11-14 22:13:20.123456"
        );
        assert_eq!(
            timestamp_parts(1_700_000_000, 5).unwrap(),
            "2023-11-14T22:13:20.000000005Z"
        );
        assert!(timestamp_parts(0, -1).is_err());
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal(&[0x04, 0xE2], 2).unwrap(), "12.50");
        assert_eq!(decimal(&[0xFB, 0x1E], 2).unwrap(), "-12.50");
        assert_eq!(decimal(&[0x00], 0).unwrap(), "0");
        assert_eq!(decimal(&[0x01], 3).unwrap(), "0.001");
        assert_eq!(decimal(&[0xFF], 3).unwrap(), "-0.001");
        assert_eq!(decimal(&[0x80], 0).unwrap(), "-128");
        // 38 nines: PostgreSQL's and MySQL's precision limit, exact.
        let max: i128 = 99_999_999_999_999_999_999_999_999_999_999_999_999;
        let bytes = max.to_be_bytes();
        assert_eq!(
            decimal(&bytes, 10).unwrap(),
            "9999999999999999999999999999.9999999999"
        );
        assert_eq!(
            decimal(&(-max).to_be_bytes(), 0).unwrap(),
            format!("-{max}")
        );
        assert!(decimal(&[], 0).is_err());
        assert!(decimal(&[1; MAX_DECIMAL_BYTES + 1], 0).is_err());
        // A hostile scale: refused, not 200 MB of zeros.
        assert!(decimal(&[1], 200_000_000).is_err());
        assert!(decimal(&[1], MAX_DECIMAL_SCALE).is_ok());
        assert_eq!(decimal_from_i128(-1250, 2), "-12.50");
        assert_eq!(decimal_from_i128(5, 3), "0.005");
        assert_eq!(decimal_from_i128(i128::MIN, 0), i128::MIN.to_string());
    }
}
