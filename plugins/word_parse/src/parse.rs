//! The pure parsing logic of `word_parse`, free of any plugin plumbing so that it can be
//! unit-tested natively and reused verbatim by the host's native-vs-WASM benchmark.

use std::fmt;

/// One parsed word event, borrowing the word from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordEvent<'a> {
    /// The user id after `#`.
    pub uid: u64,
    /// The word between the separator and the last `@`.
    pub word: &'a str,
    /// Milliseconds since the Unix epoch, after the last `@`.
    pub produced_at: i64,
}

/// Why an event is malformed; the message shows what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

fn err(separator: &str, what: impl fmt::Display) -> ParseError {
    ParseError(format!(
        "malformed word event (expected #<uid>{separator}<word>@<timestamp>): {what}"
    ))
}

/// Parses `#<uid><separator><word>@<timestamp>`, e.g. `#42*hello@1700000000123`.
///
/// The word may contain `@` (the timestamp follows the last one) but not be empty.
pub fn parse_word_event<'a>(input: &'a [u8], separator: &str) -> Result<WordEvent<'a>, ParseError> {
    let text = std::str::from_utf8(input).map_err(|e| err(separator, format!("not UTF-8: {e}")))?;
    let text = text.trim_end_matches(['\n', '\r']);
    let rest = text
        .strip_prefix('#')
        .ok_or_else(|| err(separator, "does not start with '#'"))?;
    let (uid, rest) = rest.split_once(separator).ok_or_else(|| {
        err(
            separator,
            format!("no separator {separator:?} after the uid"),
        )
    })?;
    let uid: u64 = uid.parse().map_err(|e| {
        err(
            separator,
            format!("uid {uid:?} is not an unsigned integer: {e}"),
        )
    })?;
    let (word, ts) = rest
        .rsplit_once('@')
        .ok_or_else(|| err(separator, "no '@' before the timestamp"))?;
    if word.is_empty() {
        return Err(err(separator, "the word is empty"));
    }
    let produced_at: i64 = ts.parse().map_err(|e| {
        err(
            separator,
            format!("timestamp {ts:?} is not an integer: {e}"),
        )
    })?;
    Ok(WordEvent {
        uid,
        word,
        produced_at,
    })
}

impl WordEvent<'_> {
    /// `{"uid":42,"word":"hello","produced_at":1700000000123}`
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(48 + self.word.len());
        out.push_str("{\"uid\":");
        out.push_str(&self.uid.to_string());
        out.push_str(",\"word\":");
        push_json_string(&mut out, self.word);
        out.push_str(",\"produced_at\":");
        out.push_str(&self.produced_at.to_string());
        out.push('}');
        out
    }
}

/// Appends `s` as a JSON string literal (RFC 8259 escaping).
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let e = parse_word_event(b"#42*hello@1700000000123", "*").unwrap();
        assert_eq!(
            e,
            WordEvent {
                uid: 42,
                word: "hello",
                produced_at: 1700000000123
            }
        );
        assert_eq!(
            e.to_json(),
            r#"{"uid":42,"word":"hello","produced_at":1700000000123}"#
        );
    }

    #[test]
    fn custom_separator_and_at_in_word() {
        let e = parse_word_event(b"#7::a@b@5\n", "::").unwrap();
        assert_eq!(
            e,
            WordEvent {
                uid: 7,
                word: "a@b",
                produced_at: 5
            }
        );
    }

    #[test]
    fn escapes_the_word() {
        let e = parse_word_event("#1*say \"hi\"\\\u{1}@2".as_bytes(), "*").unwrap();
        assert_eq!(
            e.to_json(),
            r#"{"uid":1,"word":"say \"hi\"\\\u0001","produced_at":2}"#
        );
    }

    #[test]
    fn rejects_malformed_events() {
        for (input, needle) in [
            (&b"42*hello@1"[..], "'#'"),
            (b"#42-hello@1", "separator"),
            (b"#x*hello@1", "uid"),
            (b"#-1*hello@1", "uid"),
            (b"#42*hello", "'@'"),
            (b"#42*@1", "empty"),
            (b"#42*hello@soon", "timestamp"),
            (b"#42*h\xffi@1", "UTF-8"),
        ] {
            let e = parse_word_event(input, "*").unwrap_err();
            assert!(e.0.contains(needle), "{input:?}: {e}");
            assert!(e.0.contains("#<uid>*<word>@<timestamp>"), "{e}");
        }
    }
}
