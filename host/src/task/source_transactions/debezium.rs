//! What Debezium writes, as `sink.transactions: source` reads it: a data event's
//! `transaction` block (and which connector wrote it), the `BEGIN` and `END` records of the
//! transaction topic, and what names one transaction among Debezium's ids.

use serde::Deserialize;

use super::{HeldError, Marker};
use crate::record::Incoming;

/// A data record's place in its source transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Membership {
    /// The transaction's key (see [`transaction_key`]).
    pub(super) id: String,
    /// `total_order`: its place among the transaction's events.
    pub(super) order: Option<u64>,
    /// What tells it from the transaction's other events: its `total_order`, or without
    /// one its coordinates. A copy Debezium sent again has the same.
    pub(super) event: EventId,
}

/// One event of a transaction, told apart from its other events (and equal to a copy of
/// itself that Debezium sent again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum EventId {
    Order(u64),
    At(i32, i64),
}

/// A data event's fields this reads, with or without Connect's `{schema, payload}`.
#[derive(Deserialize)]
pub(super) struct DataEvent {
    #[serde(default)]
    pub(super) transaction: Option<TransactionBlock>,
    #[serde(default)]
    pub(super) source: Option<SourceBlock>,
    #[serde(default)]
    pub(super) payload: Option<Box<DataEvent>>,
}

/// The `source` block's connector (`postgresql`, `mysql`, …).
#[derive(Deserialize)]
pub(super) struct SourceBlock {
    #[serde(default)]
    pub(super) connector: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct TransactionBlock {
    pub(super) id: String,
    #[serde(default)]
    pub(super) total_order: Option<u64>,
}

/// A record of the transaction topic, with or without Connect's `{schema, payload}`.
#[derive(Deserialize)]
pub(super) struct TransactionRecord {
    #[serde(default)]
    pub(super) status: Option<String>,
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) data_collections: Option<Vec<DataCollection>>,
    #[serde(default)]
    pub(super) payload: Option<Box<TransactionRecord>>,
}

#[derive(Deserialize)]
pub(super) struct DataCollection {
    pub(super) data_collection: String,
    pub(super) event_count: u64,
}

/// A record of the transaction topic read: a `BEGIN`, or an `END` with the events it
/// counts for each table whose topic (`prefix` and the table) is among `topics`.
pub(super) fn marker(
    incoming: Incoming,
    prefix: &str,
    topics: &[String],
) -> Result<Marker, HeldError> {
    let bad = |incoming: &Incoming, why: String| HeldError::NotATransactionRecord {
        topic: incoming.record.topic.clone(),
        partition: incoming.record.partition,
        offset: incoming.record.offset,
        why,
    };
    let Some(value) = incoming.record.value.as_deref() else {
        return Err(bad(&incoming, "it has no value".into()));
    };
    let parsed: TransactionRecord = match serde_json::from_slice(value) {
        Ok(parsed) => parsed,
        Err(e) => {
            return Err(bad(
                &incoming,
                format!("not JSON of a transaction record: {e}"),
            ));
        }
    };
    let parsed = match parsed.payload {
        Some(payload) if parsed.status.is_none() => *payload,
        _ => parsed,
    };
    let (Some(status), Some(id)) = (parsed.status, parsed.id) else {
        return Err(bad(&incoming, "it has no status or id".into()));
    };
    match status.as_str() {
        "BEGIN" => Ok(Marker::Alone(incoming)),
        "END" => {
            let Some(collections) = parsed.data_collections else {
                return Err(bad(
                    &incoming,
                    "an END record without data_collections".into(),
                ));
            };
            let expected = collections
                .into_iter()
                .filter(|c| {
                    let topic = format!("{prefix}{}", c.data_collection);
                    topics.contains(&topic)
                })
                .map(|c| (c.data_collection, c.event_count))
                .collect();
            Ok(Marker::End {
                incoming,
                id,
                expected,
            })
        }
        other => Err(bad(
            &incoming,
            format!("status {other:?}, not BEGIN or END"),
        )),
    }
}

/// A data event's transaction, read from its value (JSON, bare or in Connect's envelope),
/// and whether Debezium's PostgreSQL connector wrote it. A value that is not such JSON has
/// none: it passes as it is, and fails where it would.
pub(super) fn membership(incoming: &Incoming) -> Option<(Membership, bool)> {
    let event: DataEvent = serde_json::from_slice(incoming.record.value.as_deref()?).ok()?;
    let (block, source) = match event.transaction {
        Some(block) => (block, event.source),
        None => {
            let payload = event.payload?;
            (payload.transaction?, payload.source)
        }
    };
    let postgres = source
        .and_then(|s| s.connector)
        .is_some_and(|c| c == "postgresql");
    let record = &incoming.record;
    Some((
        Membership {
            id: key(postgres, &block.id).to_string(),
            order: block.total_order,
            event: match block.total_order {
                Some(order) => EventId::Order(order),
                None => EventId::At(record.partition, record.offset),
            },
        },
        postgres,
    ))
}

/// The key of transaction id `id`: under Debezium's PostgreSQL connector (`postgres`) its
/// xid, any other id whole.
pub(super) fn key(postgres: bool, id: &str) -> &str {
    if postgres { transaction_key(id) } else { id }
}

/// What identifies a transaction of Debezium's PostgreSQL connector. It writes
/// `<xid>:<lsn>`, the LSN being the last one it saw when it wrote the record: each event
/// of one transaction, and its `BEGIN` and `END`, carry another (measured with Debezium
/// 3.6: events `730:26524168`, `730:26524304`, … and `END` `730:26525128`). The xid alone
/// names the transaction (xids wrap after 2^32 transactions, far beyond what is ever held
/// or remembered). Used only once a PostgreSQL event was seen ([`key`]): Informix's ids
/// are `<txid>:<commit lsn>` too, and there the txid is reused. Any other shape is taken
/// whole.
pub(super) fn transaction_key(id: &str) -> &str {
    match id.split_once(':') {
        Some((xid, lsn))
            if !xid.is_empty()
                && !lsn.is_empty()
                && xid.bytes().all(|b| b.is_ascii_digit())
                && lsn.bytes().all(|b| b.is_ascii_digit()) =>
        {
            xid
        }
        _ => id,
    }
}
