//! One JSON value to one column type: what each portable type accepts, and the one
//! spelling of each value a database compares (decimals, UUIDs, times).

use base64::Engine as _;
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use serde_json::Value;

use super::SqlValue;
use crate::config::ColumnType;

/// How much of a bad value an error message quotes.
const MAX_TEXT_FOR_ERRORS: usize = 60;

fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > MAX_TEXT_FOR_ERRORS {
        let mut end = MAX_TEXT_FOR_ERRORS;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    } else {
        text
    }
}

/// Converts one JSON value to a column type. JSON null is SQL NULL for every type.
pub fn convert(value: &Value, column_type: ColumnType) -> Result<SqlValue, String> {
    if value.is_null() {
        return Ok(SqlValue::Null);
    }
    let mismatch = || format!("{} does not fit type {}", show(value), column_type.name());
    match column_type {
        ColumnType::Smallint | ColumnType::Int | ColumnType::Bigint => {
            let n = match value {
                Value::Number(n) => n.as_i64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                        .map(|f| f as i64)
                }),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            }
            .ok_or_else(mismatch)?;
            let fits = match column_type {
                ColumnType::Smallint => i16::try_from(n).is_ok(),
                ColumnType::Int => i32::try_from(n).is_ok(),
                _ => true,
            };
            if !fits {
                return Err(format!("{n} is out of range for type {column_type}"));
            }
            Ok(SqlValue::Int(n))
        }
        ColumnType::Double => match value {
            // `+ 0.0` turns -0.0 into 0.0: equal keys must look equal to the batch's dedupe.
            Value::Number(n) => n
                .as_f64()
                .map(|f| SqlValue::Double(f + 0.0))
                .ok_or_else(mismatch),
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(|f| SqlValue::Double(f + 0.0))
                .ok_or_else(mismatch),
            _ => Err(mismatch()),
        },
        ColumnType::Numeric => match value {
            Value::Number(n) if is_decimal(&n.to_string()) => {
                Ok(SqlValue::Text(canonical_decimal(&n.to_string())))
            }
            Value::String(s) if is_decimal(s.trim()) => {
                Ok(SqlValue::Text(canonical_decimal(s.trim())))
            }
            _ => Err(mismatch()),
        },
        ColumnType::Decimal { precision, scale } => {
            let text = match value {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.trim().to_string(),
                _ => return Err(mismatch()),
            };
            if !is_decimal(&text) {
                return Err(mismatch());
            }
            let canonical = canonical_decimal(&text);
            decimal_fits(&canonical, precision, scale)?;
            Ok(SqlValue::Text(canonical))
        }
        ColumnType::Array(element) => match value {
            Value::Array(items) => array_literal(items, element.scalar()).map(SqlValue::Text),
            _ => Err(format!("{} is not an array", show(value))),
        },
        ColumnType::Text => Ok(SqlValue::Text(match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })),
        ColumnType::Bool => match value {
            Value::Bool(b) => Ok(SqlValue::Bool(*b)),
            Value::String(s) if s == "true" => Ok(SqlValue::Bool(true)),
            Value::String(s) if s == "false" => Ok(SqlValue::Bool(false)),
            Value::Number(n) if n.as_i64() == Some(0) => Ok(SqlValue::Bool(false)),
            Value::Number(n) if n.as_i64() == Some(1) => Ok(SqlValue::Bool(true)),
            _ => Err(mismatch()),
        },
        ColumnType::Timestamp | ColumnType::Timestamptz => parse_timestamp(value)
            .map(SqlValue::Timestamp)
            .ok_or_else(|| {
                format!(
                    "{} is not a timestamp: use milliseconds since the epoch or RFC 3339 text",
                    show(value)
                )
            }),
        ColumnType::Date => match value {
            Value::String(s) if NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() => {
                Ok(SqlValue::Text(s.clone()))
            }
            _ => Err(format!("{} is not a date: use YYYY-MM-DD", show(value))),
        },
        ColumnType::Time => match value {
            Value::String(s) => parse_time(s).map(SqlValue::Text).ok_or_else(|| {
                format!(
                    "{} is not a time of day: use HH:MM:SS[.ffffff]",
                    show(value)
                )
            }),
            _ => Err(format!(
                "{} is not a time of day: use HH:MM:SS[.ffffff]",
                show(value)
            )),
        },
        ColumnType::Json => Ok(SqlValue::Text(value.to_string())),
        ColumnType::Bytes => match value {
            Value::String(s) => Ok(SqlValue::Bytes(s.as_bytes().to_vec())),
            _ => Err(mismatch()),
        },
        ColumnType::Uuid => match value {
            Value::String(s) if is_uuid(s) => Ok(SqlValue::Text(s.to_ascii_lowercase())),
            _ => Err(format!("{} is not a UUID", show(value))),
        },
    }
}

/// Refuses a canonical decimal that `numeric(precision,scale)` would round or overflow:
/// the databases round extra fractional digits without a word.
fn decimal_fits(canonical: &str, precision: u16, scale: u16) -> Result<(), String> {
    let digits = canonical.trim_start_matches('-');
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let whole = if whole == "0" { 0 } else { whole.len() };
    if fraction.len() > usize::from(scale) {
        return Err(format!(
            "{canonical} does not fit numeric({precision},{scale}): {} digits after the point, and the column keeps {scale}",
            fraction.len()
        ));
    }
    if whole > usize::from(precision - scale) {
        return Err(format!(
            "{canonical} does not fit numeric({precision},{scale}): {whole} digits before the point, and the column keeps {}",
            precision - scale
        ));
    }
    Ok(())
}

/// A JSON array as a PostgreSQL array literal of `element` values (`{1,NULL,3}`,
/// `{"a","b \"c\""}`), each converted as a column of that type would be.
fn array_literal(items: &[Value], element: ColumnType) -> Result<String, String> {
    let mut out = String::with_capacity(2 + items.len() * 4);
    out.push('{');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let quoted = |out: &mut String, text: &str| {
            out.push('"');
            for c in text.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        };
        match convert(item, element).map_err(|e| format!("element {i}: {e}"))? {
            SqlValue::Null => out.push_str("NULL"),
            SqlValue::Int(n) => out.push_str(&n.to_string()),
            SqlValue::Double(f) => out.push_str(&format!("{f:e}")),
            SqlValue::Bool(b) => out.push(if b { 't' } else { 'f' }),
            SqlValue::Text(text) => quoted(&mut out, &text),
            SqlValue::Timestamp(t) => {
                let mut text = t.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
                // An instant is UTC: without the offset PostgreSQL reads it in the
                // session's time zone.
                if element == ColumnType::Timestamptz {
                    text.push_str("+00");
                }
                quoted(&mut out, &text)
            }
            SqlValue::Bytes(_) | SqlValue::Unavailable => {
                return Err(format!("element {i}: {} is no {element}", show(item)));
            }
        }
    }
    out.push('}');
    Ok(out)
}

/// The text of `{"base64": "…"}`, the shape of bytes decoded on arrival.
fn base64_of(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get("base64")?.as_str(),
        _ => None,
    }
}

/// A value decoded on arrival into a `bytes` or `text` column: bytes (`{"base64": …}`)
/// are their bytes, or their base64 text; `None` for every other value.
pub(super) fn decoded_bytes(
    value: &Value,
    column_type: ColumnType,
) -> Option<Result<SqlValue, String>> {
    let text = base64_of(value)?;
    match column_type {
        ColumnType::Bytes => Some(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map(SqlValue::Bytes)
                .map_err(|e| format!("{} is not base64: {e}", show(value))),
        ),
        ColumnType::Text => Some(Ok(SqlValue::Text(text.to_string()))),
        _ => None,
    }
}

/// `HH:MM:SS[.f…]` as `HH:MM:SS.ffffff`: the databases keep microseconds, so further digits
/// are cut (not rounded, as PostgreSQL and MySQL would round differently).
fn parse_time(text: &str) -> Option<String> {
    let time = chrono::NaiveTime::parse_from_str(text.trim(), "%H:%M:%S%.f").ok()?;
    Some(time.format("%H:%M:%S%.6f").to_string())
}

fn parse_timestamp(value: &Value) -> Option<NaiveDateTime> {
    match value {
        Value::Number(n) => DateTime::from_timestamp_millis(n.as_i64()?).map(|t| t.naive_utc()),
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .map(|t| t.naive_utc())
            .ok()
            .or_else(|| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").ok())
            .or_else(|| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok()),
        _ => None,
    }
}

fn is_decimal(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    let mut parts = digits.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let fraction = parts.next().unwrap_or("");
    (!whole.is_empty() || !fraction.is_empty())
        && whole.chars().all(|c| c.is_ascii_digit())
        && fraction.chars().all(|c| c.is_ascii_digit())
}

/// One spelling per decimal value (`+01.50` and `1.5` are the same key to a database):
/// no sign for zero or `+`, no leading zeros, no trailing fractional zeros.
fn canonical_decimal(s: &str) -> String {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let whole = whole.trim_start_matches('0');
    let fraction = fraction.trim_end_matches('0');
    let whole = if whole.is_empty() { "0" } else { whole };
    let body = if fraction.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{fraction}")
    };
    if negative && body != "0" {
        format!("-{body}")
    } else {
        body
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}
