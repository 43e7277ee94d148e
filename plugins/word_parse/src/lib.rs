//! `word_parse`: turns word events `#<uid>*<word>@<timestamp>` (record value, UTF-8)
//! into JSON `{"uid":42,"word":"hello","produced_at":1700000000123}`.
//!
//! Config: `separator` (default `*`), the text between the uid and the word.
//! A malformed event is a per-record error; a tombstone (null value) is dropped.

mod parse;

use sluice_plugin_sdk::{Config, Error, Outcome, Record, Transform};

/// The plugin: holds the configured separator.
pub struct WordParse {
    separator: String,
}

impl Transform for WordParse {
    fn init(config: &Config) -> Result<Self, Error> {
        config.deny_unknown(&["separator"])?;
        let separator = config.get_or("separator", "*");
        if separator.is_empty() || separator.contains(['#', '@']) {
            return Err(Error::new(format!(
                "config `separator` must be non-empty and contain neither '#' nor '@', got {separator:?}"
            )));
        }
        Ok(WordParse {
            separator: separator.to_owned(),
        })
    }

    fn transform(&mut self, record: Record) -> Result<Outcome, Error> {
        let Some(value) = record.value.as_deref() else {
            return Ok(Outcome::Discard);
        };
        let json = parse::parse_word_event(value, &self.separator)?.to_json();
        Ok(Outcome::Emit(record.with_value(json)))
    }
}

sluice_plugin_sdk::export_transform!(WordParse);

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: &[(&str, &str)], value: &str) -> Result<Outcome, Error> {
        WordParse::init(&Config::from_pairs(config.iter().copied()))?
            .transform(Record::from_value(value))
    }

    #[test]
    fn maps_an_event_to_json() {
        let out = run(&[], "#42*hello@1700000000123").unwrap();
        assert_eq!(
            out.records()[0].value_str().unwrap(),
            Some(r#"{"uid":42,"word":"hello","produced_at":1700000000123}"#)
        );
    }

    #[test]
    fn honours_the_separator() {
        let out = run(&[("separator", "|")], "#1|x@2").unwrap();
        assert_eq!(
            out.records()[0].value_str().unwrap(),
            Some(r#"{"uid":1,"word":"x","produced_at":2}"#)
        );
        assert!(run(&[("separator", "|")], "#1*x@2").is_err());
    }

    #[test]
    fn rejects_bad_config() {
        assert!(run(&[("separator", "")], "").is_err());
        assert!(
            run(&[("sep", "*")], "")
                .unwrap_err()
                .message()
                .contains("unknown config key")
        );
    }

    #[test]
    fn malformed_is_a_record_error_and_tombstones_are_dropped() {
        assert!(
            run(&[], "hello")
                .unwrap_err()
                .message()
                .contains("malformed word event")
        );
        let mut t = WordParse::init(&Config::default()).unwrap();
        let mut tomb = Record::from_value("");
        tomb.value = None;
        assert_eq!(t.transform(tomb).unwrap(), Outcome::Discard);
    }
}
