//! `errors.dlq` as the file spells it: a destination (`topic` or `table`) and, for a topic,
//! the keys that sign its dead letters (`signing_key`). `ErrorsConfig` (`errors.rs`) keeps
//! the destination and the keys apart, so that code asking where dead letters go matches
//! on [`DeadLetterDestination`] alone.

use serde::{Deserialize, Deserializer};

use super::Secret;

/// The dead-letter destination: `{ topic: NAME }` or `{ table: NAME }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterDestination {
    /// A Kafka topic (on the connector's cluster): the original key, value and headers,
    /// with `sluice.*` context headers; acknowledged before the batch's offsets commit.
    Topic(String),
    /// A table in the sink database, written in the batch's transaction (created when
    /// missing).
    Table(String),
}

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
pub(super) struct DeadLetterSection {
    pub(super) destination: DeadLetterDestination,
    pub(super) signing_key: SigningKeys,
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
