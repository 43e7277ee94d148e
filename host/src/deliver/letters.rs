//! A message of a dead-letter topic taken apart: the record it says it was (its
//! `sluice.source.*` headers give the coordinates, the context headers sluice added are
//! dropped), its signature, and the connector it names; or why it is not a letter to
//! redrive. Whether it is genuine is decided after, by `redrive_topic.rs`.

use crate::kafka::dead_letter_headers as header;
use crate::record::Record;

/// Why a message of the dead-letter topic is not taken as a letter to redrive.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Rejected {
    /// It has no `sluice.connector` header.
    NoConnector,
    /// Anything else, with why.
    NotRedrivable(String),
}

impl From<&str> for Rejected {
    fn from(why: &str) -> Self {
        Rejected::NotRedrivable(why.to_string())
    }
}

impl From<String> for Rejected {
    fn from(why: String) -> Self {
        Rejected::NotRedrivable(why)
    }
}

/// A letter taken apart: the record it says it was, and its signature header.
pub(super) struct Letter {
    pub(super) original: Record,
    pub(super) signature: Option<Vec<u8>>,
    /// The connector its `sluice.connector` header names: this one, or the name it had
    /// before (`renamed_from`), whose letters it took over.
    pub(super) connector: String,
}

/// The record a dead letter was, or why it cannot be had.
pub(super) fn original_of(
    letter: &Record,
    connector: &str,
    renamed_from: Option<&str>,
) -> Result<Letter, Rejected> {
    let named = |name: &str| {
        letter
            .headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let topic = named(header::SOURCE_TOPIC)
        .ok_or("it has no sluice.source.topic header: not a dead letter sluice produced")?;
    let partition = named(header::SOURCE_PARTITION)
        .and_then(|p| p.parse::<i32>().ok())
        .ok_or("its sluice.source.partition header is missing or not a number")?;
    let offset = named(header::SOURCE_OFFSET)
        .and_then(|o| o.parse::<i64>().ok())
        .ok_or("its sluice.source.offset header is missing or not a number")?;
    let named_connector = match named(header::CONNECTOR) {
        None => return Err(Rejected::NoConnector),
        Some(name) if name == connector || Some(name) == renamed_from => name.to_string(),
        Some(other) => {
            return Err(format!("a dead letter of connector {other}").into());
        }
    };
    if named(header::ERROR_CLASS) == Some("header_not_utf8") {
        return Err(Rejected::from(
            "the record had a header name that is not UTF-8, which the dead letter keeps only lossily: it cannot be redriven as it was",
        ));
    }
    if let Some(size) = named(header::VALUE_OMITTED) {
        return Err(format!(
            "its value ({size} bytes) was too large for the dead-letter topic and was left out"
        )
        .into());
    }
    let signature = letter
        .headers
        .iter()
        .rev()
        .find(|(n, _)| n == header::SIGNATURE)
        .map(|(_, v)| v.clone().unwrap_or_default());
    let original = Record {
        topic: topic.to_string(),
        partition,
        offset,
        // The record's own time (a dead letter's is when it was produced as one).
        timestamp: match named(header::SOURCE_TIMESTAMP) {
            Some(t) => Some(
                t.parse::<i64>()
                    .map_err(|_| "its sluice.source.timestamp header is not a number")?,
            ),
            None => None,
        },
        key: letter.key.clone(),
        value: letter.value.clone(),
        headers: letter
            .headers
            .iter()
            .filter(|(n, _)| !header::ALL.contains(&n.as_str()))
            .cloned()
            .collect(),
    };
    Ok(Letter {
        original,
        signature,
        connector: named_connector,
    })
}
