//! JSON parsed with every number's original text kept, so that a Connect `Decimal`
//! written with `decimal.format: NUMERIC` (a JSON number such as `12.50`, or
//! `12345678901234567890.123`) decodes exactly: serde_json (without its
//! `arbitrary_precision` feature, which sluice does not enable because it changes every
//! `Value` in the process) would make it an `f64` and lose digits beyond 15 to 17.
//!
//! How: before serde_json parses the text, a scanner rewrites it token by token: every
//! string gets an `s` after its opening quote, every number becomes a string `"n<text>"`.
//! The result is JSON exactly when the input is (a number where a key belongs becomes an
//! `n` key, refused later), serde_json parses it with its usual checks and nesting limit,
//! and a tagged string tells what it was. [`token`] reads one tagged value, [`untag`]
//! gives the plain `Value` back.

use serde_json::{Map, Number, Value};

/// The text with its strings and numbers tagged (see the module's doc).
fn tag(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + text.len() / 4 + 16);
    let mut bytes = text.iter().copied().peekable();
    while let Some(byte) = bytes.next() {
        match byte {
            b'"' => {
                out.extend_from_slice(b"\"s");
                while let Some(c) = bytes.next() {
                    out.push(c);
                    if c == b'\\' {
                        if let Some(escaped) = bytes.next() {
                            out.push(escaped);
                        }
                    } else if c == b'"' {
                        break;
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                out.extend_from_slice(b"\"n");
                out.push(byte);
                while let Some(c) =
                    bytes.next_if(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                {
                    out.push(c);
                }
                out.push(b'"');
            }
            other => out.push(other),
        }
    }
    out
}

/// Parses JSON text into its tagged form.
pub fn parse(text: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(&tag(text)).map_err(|tagged_error| {
        // The position in the caller's text, not in the rewritten one.
        match serde_json::from_slice::<Value>(text) {
            Err(e) => format!("not JSON: {e}"),
            Ok(_) => format!("not JSON: {tagged_error}"),
        }
    })
}

/// A tagged value read back.
pub enum Token<'a> {
    Null,
    Bool(bool),
    /// A number's text as written.
    Number(&'a str),
    String(&'a str),
    Array(&'a [Value]),
    Object(&'a Map<String, Value>),
}

/// What a tagged value is.
pub fn token(value: &Value) -> Result<Token<'_>, String> {
    Ok(match value {
        Value::Null => Token::Null,
        Value::Bool(b) => Token::Bool(*b),
        Value::String(s) => match (s.strip_prefix('s'), s.strip_prefix('n')) {
            (Some(text), _) => Token::String(text),
            (_, Some(number)) => Token::Number(number),
            _ => return Err("not JSON: an untagged string".into()),
        },
        Value::Array(items) => Token::Array(items),
        Value::Object(map) => Token::Object(map),
        Value::Number(_) => return Err("not JSON: an untagged number".into()),
    })
}

/// A member of a tagged object by its plain key.
pub fn get<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(&format!("s{key}"))
}

/// The plain value of a tagged one: numbers as serde_json numbers (exact for integers that
/// fit 64 bits, `f64` otherwise), keys and strings as written.
pub fn untag(value: &Value) -> Result<Value, String> {
    Ok(match token(value)? {
        Token::Null => Value::Null,
        Token::Bool(b) => Value::Bool(b),
        Token::Number(text) => Value::Number(number(text)?),
        Token::String(text) => Value::String(text.to_string()),
        Token::Array(items) => Value::Array(items.iter().map(untag).collect::<Result<_, _>>()?),
        Token::Object(map) => {
            let mut plain = Map::new();
            for (key, item) in map {
                let key = key
                    .strip_prefix('s')
                    .ok_or_else(|| format!("not JSON: a number {key:?} where a key belongs"))?;
                plain.insert(key.to_string(), untag(item)?);
            }
            Value::Object(plain)
        }
    })
}

/// A number's text as a serde_json number, checked against JSON's number grammar.
pub fn number(text: &str) -> Result<Number, String> {
    serde_json::from_str::<Number>(text).map_err(|_| format!("not JSON: {text:?} is not a number"))
}

/// Most digits of an exact decimal (beyond any database's `NUMERIC`; see
/// `temporal::MAX_DECIMAL_BYTES`), so that `1e999999999` is refused, not expanded.
const MAX_DIGITS: usize = 400;

/// A JSON number's text as an exact decimal string with `scale` digits after the point:
/// `12.5` at scale 2 is `12.50`, `1.5E+3` at scale 0 is `1500`. A number with non-zero
/// digits beyond `scale` is refused, not rounded.
pub fn decimal_text(text: &str, scale: u32) -> Result<String, String> {
    number(text)?;
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => {
            let e: i64 = e
                .trim_start_matches('+')
                .parse()
                .map_err(|_| format!("decimal {text} has an exponent out of range"))?;
            (m, e)
        }
        None => (unsigned, 0),
    };
    let (int_digits, frac_digits) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int_digits}{frac_digits}");
    // The value is digits × 10^shift; the unscaled value at `scale` is digits × 10^(shift+scale).
    let shift = exponent
        .checked_sub(i64::try_from(frac_digits.len()).unwrap_or(i64::MAX))
        .and_then(|s| s.checked_add(i64::from(scale)))
        .ok_or_else(|| format!("decimal {text} is out of range"))?;
    if shift >= 0 {
        let zeros = usize::try_from(shift).unwrap_or(usize::MAX);
        if zeros.saturating_add(digits.len()) > MAX_DIGITS {
            return Err(format!(
                "decimal {text} at scale {scale} has more than {MAX_DIGITS} digits"
            ));
        }
        digits.extend(std::iter::repeat_n('0', zeros));
    } else {
        let drop = usize::try_from(shift.unsigned_abs()).unwrap_or(usize::MAX);
        let keep = digits.len().saturating_sub(drop);
        if digits
            .get(keep..)
            .is_some_and(|tail| tail.bytes().any(|b| b != b'0'))
        {
            return Err(format!(
                "decimal {text} has more than {scale} digits after the point"
            ));
        }
        digits.truncate(keep);
    }
    let digits = digits.trim_start_matches('0');
    let scale = usize::try_from(scale).unwrap_or(usize::MAX);
    if scale > MAX_DIGITS {
        return Err(format!("decimal scale {scale} is larger than {MAX_DIGITS}"));
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let point = padded.len() - scale;
    let (whole, fraction) = padded.split_at(point);
    let sign = if negative && !digits.is_empty() {
        "-"
    } else {
        ""
    };
    Ok(if scale == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_text() {
        let value =
            parse(br#"{"a": [12345678901234567890.123, -1e3, "x\"1"], "b": null}"#).unwrap();
        let Token::Object(map) = token(&value).unwrap() else {
            panic!()
        };
        let Token::Array(items) = token(get(map, "a").unwrap()).unwrap() else {
            panic!()
        };
        assert!(matches!(
            token(&items[0]).unwrap(),
            Token::Number("12345678901234567890.123")
        ));
        assert!(matches!(token(&items[2]).unwrap(), Token::String("x\"1")));
        assert_eq!(
            untag(&value).unwrap(),
            serde_json::json!({"a": [12345678901234567890.123, -1000.0, "x\"1"], "b": null})
        );
        assert!(parse(b"{1: 2}").is_ok_and(|v| untag(&v).is_err()));
        assert!(parse(b"[01]").is_ok_and(|v| untag(&v).is_err()));
        assert!(parse(b"[1 2]").is_err());
        assert!(parse(b"\"unterminated").is_err());
    }

    #[test]
    fn decimal_texts_are_exact() {
        assert_eq!(decimal_text("12.5", 2).unwrap(), "12.50");
        assert_eq!(decimal_text("-12.50", 2).unwrap(), "-12.50");
        assert_eq!(decimal_text("0", 3).unwrap(), "0.000");
        assert_eq!(decimal_text("-0.0", 1).unwrap(), "0.0");
        assert_eq!(decimal_text("1.5E+3", 0).unwrap(), "1500");
        assert_eq!(decimal_text("1E-7", 7).unwrap(), "0.0000001");
        assert_eq!(decimal_text("5", 0).unwrap(), "5");
        assert_eq!(
            decimal_text("12345678901234567890.123", 3).unwrap(),
            "12345678901234567890.123"
        );
        assert_eq!(decimal_text("1.2300", 2).unwrap(), "1.23");
        assert!(decimal_text("1.234", 2).is_err());
        assert!(decimal_text("1e999999999", 0).is_err());
        assert!(decimal_text("1e-999999999", 0).is_err());
        assert_eq!(decimal_text("0e-999999999", 0).unwrap(), "0");
        assert!(decimal_text("1", u32::MAX).is_err());
        assert!(decimal_text("abc", 0).is_err());
    }
}
