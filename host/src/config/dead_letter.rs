//! `errors.dlq` as the file spells it: a destination (`topic` or `table`) and, for a topic,
//! the keys that sign its dead letters (`signing_key`). [`ErrorsConfig`] keeps the
//! destination and the keys apart, so that code asking where dead letters go matches on
//! [`DeadLetterDestination`] alone.

use serde::{Deserialize, Deserializer};

use super::Secret;
use super::connector::{
    DeadLetterDestination, ErrorPolicy, ErrorsConfig, IsolationConfig, RestartConfig, RetryConfig,
};

/// The fewest bytes a signing key may have: a shorter one is guessed too easily.
pub const MIN_SIGNING_KEY_BYTES: usize = 16;

/// The keys of `errors.dlq.signing_key`, one or a list: dead letters are signed with the
/// first, and a signature made with any of them verifies (so keys can rotate: the new key
/// first, the old one after it until its letters are redriven). Empty when not set.
/// `Debug` prints each as `***`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SigningKeys(Vec<Secret>);

impl SigningKeys {
    /// The keys, the signing one first.
    pub fn keys(&self) -> &[Secret] {
        &self.0
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for SigningKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(Secret),
            Many(Vec<Secret>),
        }
        let keys = match OneOrMany::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom("signing_key must be a string or a list of strings")
        })? {
            OneOrMany::One(key) => vec![key],
            OneOrMany::Many(keys) => keys,
        };
        if keys.is_empty() {
            return Err(serde::de::Error::custom(
                "signing_key is an empty list: give at least one key, or leave signing_key out",
            ));
        }
        // Which key, never the key itself.
        for (index, key) in keys.iter().enumerate() {
            if key.expose().len() < MIN_SIGNING_KEY_BYTES {
                return Err(serde::de::Error::custom(format!(
                    "signing key {} of {} has {} bytes, fewer than the {MIN_SIGNING_KEY_BYTES} a key needs (an unset variable gives an empty one)",
                    index + 1,
                    keys.len(),
                    key.expose().len()
                )));
            }
        }
        Ok(Self(keys))
    }
}

/// `errors.dlq` as written: exactly one of `topic` and `table`, and `signing_key` with a
/// topic.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadLetterFields {
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    table: Option<String>,
    #[serde(default)]
    signing_key: Option<SigningKeys>,
}

/// `errors.dlq`, checked: where dead letters go, and the keys that sign them.
#[derive(Deserialize)]
#[serde(try_from = "DeadLetterFields")]
struct DeadLetterSection {
    destination: DeadLetterDestination,
    signing_key: SigningKeys,
}

impl TryFrom<DeadLetterFields> for DeadLetterSection {
    type Error = String;

    fn try_from(fields: DeadLetterFields) -> Result<Self, String> {
        let destination = match (fields.topic, fields.table) {
            (Some(topic), None) => DeadLetterDestination::Topic(topic),
            (None, Some(table)) => {
                if fields.signing_key.is_some() {
                    return Err("signing_key signs the letters of a dead-letter topic; a dead-letter table is written in the rows' transaction and needs none: remove signing_key".into());
                }
                DeadLetterDestination::Table(table)
            }
            (Some(_), Some(_)) => {
                return Err("has both topic and table: dead letters go to one of them".into());
            }
            (None, None) => {
                return Err(
                    "needs a destination: dlq: { topic: NAME } or dlq: { table: NAME }".into(),
                );
            }
        };
        Ok(Self {
            destination,
            signing_key: fields.signing_key.unwrap_or_default(),
        })
    }
}

/// `errors` as written; see [`ErrorsConfig`] for what each field means.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ErrorsSection {
    #[serde(default)]
    policy: ErrorPolicy,
    #[serde(default)]
    dlq: Option<DeadLetterSection>,
    #[serde(default)]
    retry: RetryConfig,
    #[serde(default)]
    isolation: IsolationConfig,
    #[serde(default)]
    restart: RestartConfig,
}

impl From<ErrorsSection> for ErrorsConfig {
    fn from(section: ErrorsSection) -> Self {
        let (dlq, dlq_signing_key) = match section.dlq {
            Some(dlq) => (Some(dlq.destination), dlq.signing_key),
            None => (None, SigningKeys::default()),
        };
        ErrorsConfig {
            policy: section.policy,
            dlq,
            dlq_signing_key,
            retry: section.retry,
            isolation: section.isolation,
            restart: section.restart,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Result<ErrorsConfig, String> {
        serde_yaml_ng::from_str::<ErrorsConfig>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn one_key_or_a_list() {
        let one =
            errors("{ policy: dlq, dlq: { topic: d, signing_key: 0123456789abcdef } }").unwrap();
        assert_eq!(one.dlq, Some(DeadLetterDestination::Topic("d".into())));
        assert_eq!(one.dlq_signing_key.keys().len(), 1);
        let two = errors(
            "{ policy: dlq, dlq: { topic: d, signing_key: [new-key-0123456789, old-key-0123456789] } }",
        )
        .unwrap();
        let keys: Vec<&str> = two
            .dlq_signing_key
            .keys()
            .iter()
            .map(|k| k.expose())
            .collect();
        assert_eq!(keys, ["new-key-0123456789", "old-key-0123456789"]);
        let none = errors("{ policy: dlq, dlq: { table: t } }").unwrap();
        assert!(none.dlq_signing_key.is_empty());
        assert_eq!(none.dlq, Some(DeadLetterDestination::Table("t".into())));
    }

    #[test]
    fn bad_keys_are_refused_without_printing_them() {
        let short = errors("{ dlq: { topic: d, signing_key: short-secret } }").unwrap_err();
        assert!(short.contains("fewer than the 16"), "{short}");
        assert!(!short.contains("short-secret"), "{short}");
        let empty = errors("{ dlq: { topic: d, signing_key: \"\" } }").unwrap_err();
        assert!(empty.contains("0 bytes"), "{empty}");
        let list = errors("{ dlq: { topic: d, signing_key: [] } }").unwrap_err();
        assert!(list.contains("empty list"), "{list}");
        let table = errors("{ dlq: { table: t, signing_key: 0123456789abcdef } }").unwrap_err();
        assert!(table.contains("remove signing_key"), "{table}");
        let both = errors("{ dlq: { topic: d, table: t } }").unwrap_err();
        assert!(both.contains("has both topic and table"), "{both}");
        let unknown = errors("{ dlq: { topic: d, sign: x } }").unwrap_err();
        assert!(unknown.contains("unknown field"), "{unknown}");
    }

    #[test]
    fn keys_are_redacted_in_printed_configuration() {
        let section = serde_json::json!({
            "errors": { "dlq": { "topic": "d",
                "signing_key": ["new-key-0123456789", "old-key-0123456789"] } }
        });
        let printed = super::super::redact_document(&section).to_string();
        assert!(!printed.contains("key-0123456789"), "{printed}");
        assert!(printed.contains("\"signing_key\":\"***\""), "{printed}");
        let one = serde_json::json!({ "dlq": { "signing_key": "0123456789abcdef" } });
        let printed = super::super::redact_document(&one).to_string();
        assert!(!printed.contains("0123456789abcdef"), "{printed}");
    }

    #[test]
    fn keys_debug_print_masked() {
        let config = errors("{ dlq: { topic: d, signing_key: 0123456789abcdef } }").unwrap();
        let printed = format!("{config:?}");
        assert!(!printed.contains("0123456789abcdef"), "{printed}");
    }
}
