//! `mask`: redacts or hashes JSON fields of the record value.
//!
//! Config:
//!
//! | key           | meaning                                                             |
//! |---------------|---------------------------------------------------------------------|
//! | `fields`      | required; comma-separated fields: a top-level name (`email`) or a JSON Pointer (`/user/email`) |
//! | `mode`        | `redact` (default): replace with `replacement`; `hash`: replace with the hex SHA-256 of `salt` + the field's JSON text |
//! | `replacement` | redact mode: the replacement string (default `***`)                 |
//! | `salt`        | hash mode: prepended before hashing (default empty)                 |
//!
//! Fields that are absent are left alone; a value that is not a JSON object is a
//! per-record error; tombstones pass through unchanged.

use sha2::{Digest, Sha256};
use sluice_plugin_sdk::serde_json::Value;
use sluice_plugin_sdk::{Config, Error, Outcome, Record, Transform};

/// How a field is masked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Redact(String),
    Hash(String),
}

/// The plugin: the JSON Pointers to mask and how.
pub struct Mask {
    pointers: Vec<String>,
    mode: Mode,
}

/// `email` -> `/email`; `/a/b` stays. `~` and `/` in a plain name are escaped.
fn to_pointer(field: &str) -> String {
    if field.starts_with('/') {
        field.to_owned()
    } else {
        format!("/{}", field.replace('~', "~0").replace('/', "~1"))
    }
}

impl Transform for Mask {
    fn init(config: &Config) -> Result<Self, Error> {
        config.deny_unknown(&["fields", "mode", "replacement", "salt"])?;
        let pointers: Vec<String> = config
            .require("fields")?
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(to_pointer)
            .collect();
        if pointers.is_empty() {
            return Err(Error::new("config `fields` names no field"));
        }
        let mode = match config.get_or("mode", "redact") {
            "redact" => Mode::Redact(config.get_or("replacement", "***").to_owned()),
            "hash" => Mode::Hash(config.get_or("salt", "").to_owned()),
            other => {
                return Err(Error::new(format!(
                    "config `mode` must be `redact` or `hash`, got {other:?}"
                )));
            }
        };
        Ok(Mask { pointers, mode })
    }

    fn transform(&mut self, record: Record) -> Result<Outcome, Error> {
        let Some(mut json) = record.value_json()? else {
            return Ok(Outcome::Emit(record));
        };
        if !json.is_object() {
            return Err(Error::new("mask: value is not a JSON object"));
        }
        for pointer in &self.pointers {
            if let Some(field) = json.pointer_mut(pointer) {
                *field = match &self.mode {
                    Mode::Redact(replacement) => Value::String(replacement.clone()),
                    Mode::Hash(salt) => Value::String(hash(salt, field)),
                };
            }
        }
        Ok(Outcome::Emit(record.with_json(&json)))
    }
}

/// Hex SHA-256 of `salt` followed by the field's JSON text (so `"1"` and `1` differ).
fn hash(salt: &str, field: &Value) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(field.to_string().as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

sluice_plugin_sdk::export_transform!(Mask);

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_plugin_sdk::serde_json;

    fn run(config: &[(&str, &str)], value: &str) -> Result<Value, Error> {
        let mut t = Mask::init(&Config::from_pairs(config.iter().copied()))?;
        let out = t.transform(Record::from_value(value))?;
        Ok(serde_json::from_slice(out.records()[0].value.as_deref().unwrap()).unwrap())
    }

    #[test]
    fn redacts_top_level_and_nested_fields() {
        let v = run(
            &[("fields", "email, /card/number, absent")],
            r#"{"email":"a@b.c","name":"Ann","card":{"number":"4111","exp":"12/30"}}"#,
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"email":"***","name":"Ann","card":{"number":"***","exp":"12/30"}})
        );
    }

    #[test]
    fn hashes_with_salt_deterministically() {
        let cfg = [("fields", "email"), ("mode", "hash"), ("salt", "s")];
        let a = run(&cfg, r#"{"email":"a@b.c"}"#).unwrap();
        let b = run(&cfg, r#"{"email":"a@b.c","x":1}"#).unwrap();
        assert_eq!(a["email"], b["email"]);
        assert_eq!(a["email"].as_str().unwrap().len(), 64);
        let unsalted = run(
            &[("fields", "email"), ("mode", "hash")],
            r#"{"email":"a@b.c"}"#,
        )
        .unwrap();
        assert_ne!(a["email"], unsalted["email"]);
    }

    #[test]
    fn errors() {
        assert!(run(&[], "{}").unwrap_err().message().contains("fields"));
        assert!(run(&[("fields", "a"), ("mode", "x")], "{}").is_err());
        assert!(
            run(&[("fields", "a")], "not json")
                .unwrap_err()
                .message()
                .contains("not JSON")
        );
        assert!(
            run(&[("fields", "a")], "[1]")
                .unwrap_err()
                .message()
                .contains("object")
        );
    }

    #[test]
    fn tombstones_pass_through() {
        let mut t = Mask::init(&Config::from_pairs([("fields", "a")])).unwrap();
        let mut r = Record::from_value("");
        r.value = None;
        assert_eq!(t.transform(r.clone()).unwrap(), Outcome::Emit(r));
    }
}
