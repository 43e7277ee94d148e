//! `sink.transactions: source`: the changes of one Debezium source transaction held until
//! the whole transaction has arrived, then handed to the batch buffer as one unit, which a
//! batch never splits. The batch's database transaction then holds every change of it,
//! whatever its tables and topics, with the offsets of every record it came from.
//!
//! Debezium with `provide.transaction.metadata=true` writes each data event with a
//! `transaction` block (`id`, `total_order`, `data_collection_order`), and a `BEGIN` and an
//! `END` record of each transaction on its transaction topic (`<topic.prefix>.transaction`).
//! The `END` record counts the transaction's events per table (`data_collections`). Topics
//! are read side by side, so a transaction's events and its `END` arrive in any order
//! between topics, in order within each partition.
//!
//! What this does:
//! - A data record without a `transaction` block (a snapshot's read, a tombstone) passes
//!   as soon as every record before it in its partition has passed; one between two events
//!   of a transaction (the tombstone after a delete) goes with the transaction.
//! - A record of a transaction waits. The transaction is released once its `END` is first
//!   in its partition of the transaction topic, every event it counts for a table this
//!   connector reads has arrived, and each of them is first in its partition (a
//!   transaction committed earlier that shares a partition goes first). The unit holds the
//!   events in the source's order (`total_order`), then the `END` record.
//! - A `BEGIN` record carries nothing sluice needs: it passes alone, first in its
//!   partition.
//! - A table of the transaction whose topic (`<topic.prefix>.<data_collection>`, Debezium's
//!   naming) the connector does not read is left out of the count.
//!
//! What is held is bounded ([`MAX_HELD_BYTES`]): a transaction that does not fit fails the
//! task with [`HeldError::TooLarge`], never a split. When any partition's records must be
//! read again (a revocation, an offset conflict, a batch given up), everything held is
//! dropped and every partition is read again from its stored offset (`Inner::drop_buffered`),
//! since a unit may span them all.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::record::{Incoming, Partition, RecordExt};

/// The most bytes of record payload held while their transactions are not whole: past it
/// the task fails rather than split a transaction. Documented in docs/cdc.md.
pub const MAX_HELD_BYTES: usize = 256 << 20;

/// Why held records cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    #[error(
        "sink.transactions: source holds {bytes} bytes of records waiting for their source transactions to be whole \
         (the oldest waiting: {oldest}), past the limit of {limit} bytes, and sluice never splits a source transaction. \
         Either a transaction is this large, or events it counts never arrive: this task must read every partition of \
         the connector's topics, in one process, from the same point; apply this stream with sink.transactions: batch \
         if that cannot hold"
    )]
    TooLarge {
        bytes: usize,
        limit: usize,
        oldest: String,
    },
    #[error(
        "{topic}/{partition} would move from its stored offset {stored:?} to {to} (delivery.on_offset_out_of_range \
         or on_offset_gap: the log no longer holds the records between), and under sink.transactions: source the \
         source transactions those records belonged to cannot be applied whole: sluice stops rather than write \
         them in part. To go on past them, run this connector with sink.transactions: batch until its stored \
         offsets are past the gap, then switch back"
    )]
    Moved {
        topic: String,
        partition: i32,
        stored: Option<i64>,
        to: i64,
    },
    #[error(
        "{topic}/{partition} offset {offset} is not a Debezium transaction record ({why}): \
         the transaction topic of sink.transactions: source must hold only Debezium's BEGIN and END records"
    )]
    NotATransactionRecord {
        topic: String,
        partition: i32,
        offset: i64,
        why: String,
    },
    #[error(
        "the END record of source transaction {id} counts no table whose topic this connector reads, yet {events} \
         of its events arrived on {topics}: sluice finds a table's events by Debezium's topic names \
         (<topic.prefix>.<data_collection>, the prefix from the transaction topic {transaction_topic}), and these \
         topics are named otherwise (a topic-routing SMT?); sink.transactions: source needs Debezium's names"
    )]
    NotCounted {
        id: String,
        events: u64,
        topics: String,
        transaction_topic: String,
    },
}

/// A data record's place in its source transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    /// The transaction's key (see [`transaction_key`]).
    id: String,
    /// `total_order`: its place among the transaction's events.
    order: Option<u64>,
    /// What tells it from the transaction's other events: its `total_order`, or without
    /// one its coordinates. A copy Debezium sent again has the same.
    event: EventId,
}

/// One event of a transaction, told apart from its other events (and equal to a copy of
/// itself that Debezium sent again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum EventId {
    Order(u64),
    At(i32, i64),
}

/// A record waiting in its partition's queue.
#[derive(Debug)]
struct Held {
    incoming: Incoming,
    /// `None`: no transaction block; it passes once it is first.
    transaction: Option<Membership>,
}

/// A record of the transaction topic.
#[derive(Debug)]
enum Marker {
    /// A `BEGIN`, or an `END` of a transaction applied already (Debezium sends again
    /// after a crash of its worker): it passes alone.
    Alone(Incoming),
    End {
        incoming: Incoming,
        id: String,
        /// The events to wait for: per table this connector reads, how many.
        expected: Vec<(String, u64)>,
    },
}

/// The records of a connector whose transactions are not whole yet.
#[derive(Debug)]
pub(super) struct SourceTransactions {
    /// The transaction topic.
    topic: String,
    /// `<topic.prefix>.`: a data topic's name is this and its table (`data_collection`).
    prefix: String,
    /// The connector's topics: a table whose topic is not among them is not counted.
    topics: Vec<String>,
    /// Each data partition's records, in offset order.
    queues: HashMap<Partition, VecDeque<Held>>,
    /// Each partition of the transaction topic's records, in offset order.
    markers: HashMap<i32, VecDeque<Marker>>,
    /// Per transaction key: per table, which of its events have arrived (copies once).
    arrived: HashMap<String, HashMap<String, HashSet<EventId>>>,
    /// A data event of Debezium's PostgreSQL connector was seen: transaction ids are keyed
    /// by their xid (see [`transaction_key`]).
    postgres: bool,
    /// The ids of transactions applied, the newest last (at most [`RELEASED_KEPT`]): an
    /// event or `END` of one that arrives again (Debezium sends again after a crash of its
    /// worker) passes alone, as the upsert it is writes nothing new.
    released: HashSet<String>,
    released_order: VecDeque<String>,
    /// Payload bytes held.
    bytes: usize,
    limit: usize,
    /// Something changed that may let an `END` go: a record of the transaction topic
    /// arrived, an event of a transaction whose `END` is first in its partition, or a unit
    /// went. Without it the `END`s are not looked at again.
    dirty: bool,
    /// The oldest thing held that cannot go (its coordinates), and since when.
    waiting: Option<((String, i32, i64), Instant)>,
}

/// How many applied transactions' ids are remembered, for events Debezium sends again.
const RELEASED_KEPT: usize = 10_000;

/// A data event's fields this reads, with or without Connect's `{schema, payload}`.
#[derive(Deserialize)]
struct DataEvent {
    #[serde(default)]
    transaction: Option<TransactionBlock>,
    #[serde(default)]
    source: Option<SourceBlock>,
    #[serde(default)]
    payload: Option<Box<DataEvent>>,
}

/// The `source` block's connector (`postgresql`, `mysql`, …).
#[derive(Deserialize)]
struct SourceBlock {
    #[serde(default)]
    connector: Option<String>,
}

#[derive(Deserialize)]
struct TransactionBlock {
    id: String,
    #[serde(default)]
    total_order: Option<u64>,
}

/// A record of the transaction topic, with or without Connect's `{schema, payload}`.
#[derive(Deserialize)]
struct TransactionRecord {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    data_collections: Option<Vec<DataCollection>>,
    #[serde(default)]
    payload: Option<Box<TransactionRecord>>,
}

#[derive(Deserialize)]
struct DataCollection {
    data_collection: String,
    event_count: u64,
}

impl SourceTransactions {
    /// Holds the records of `topics`, whose transaction topic is `topic`.
    pub(super) fn new(topic: &str, topics: &[String]) -> Self {
        Self::with_limit(topic, topics, MAX_HELD_BYTES)
    }

    fn with_limit(topic: &str, topics: &[String], limit: usize) -> Self {
        let prefix = topic
            .strip_suffix("transaction")
            .unwrap_or(topic)
            .to_string();
        SourceTransactions {
            topic: topic.to_string(),
            prefix,
            topics: topics.to_vec(),
            queues: HashMap::new(),
            markers: HashMap::new(),
            arrived: HashMap::new(),
            postgres: false,
            released: HashSet::new(),
            released_order: VecDeque::new(),
            bytes: 0,
            limit,
            dirty: false,
            waiting: None,
        }
    }

    /// Whether nothing is held.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.queues.values().all(VecDeque::is_empty)
            && self.markers.values().all(VecDeque::is_empty)
    }

    /// Takes a record, in its partition's offset order.
    pub(super) fn offer(&mut self, incoming: Incoming) -> Result<(), HeldError> {
        let size = incoming.record.payload_bytes() as usize;
        if incoming.record.topic == self.topic {
            let marker = self.marker(incoming)?;
            let partition = match &marker {
                Marker::Alone(i) | Marker::End { incoming: i, .. } => i.record.partition,
            };
            self.markers.entry(partition).or_default().push_back(marker);
            self.dirty = true;
        } else {
            let transaction = membership(&incoming).and_then(|(member, postgres)| {
                self.postgres |= postgres;
                (!self.released.contains(&member.id)).then_some(member)
            });
            if let Some(member) = &transaction {
                let table = self.table_of(&incoming.record.topic).to_string();
                self.arrived
                    .entry(member.id.clone())
                    .or_default()
                    .entry(table)
                    .or_default()
                    .insert(member.event);
                let postgres = self.postgres;
                self.dirty |= self.markers.values().any(|q| {
                    matches!(q.front(), Some(Marker::End { id, .. }) if key(postgres, id) == member.id)
                });
            }
            let partition = (incoming.record.topic.clone(), incoming.record.partition);
            self.queues.entry(partition).or_default().push_back(Held {
                incoming,
                transaction,
            });
        }
        self.bytes += size;
        if self.bytes > self.limit {
            return Err(HeldError::TooLarge {
                bytes: self.bytes,
                limit: self.limit,
                oldest: self.oldest_waiting(),
            });
        }
        Ok(())
    }

    /// The units that can go now, in an order that keeps each partition's: each a
    /// transaction's events in the source's order and its `END`, or one record.
    pub(super) fn release(&mut self) -> Result<Vec<Vec<Incoming>>, HeldError> {
        let mut units = Vec::new();
        loop {
            let before = units.len();
            for queue in self.queues.values_mut() {
                while queue.front().is_some_and(|h| {
                    h.transaction
                        .as_ref()
                        .is_none_or(|m| self.released.contains(&m.id))
                }) {
                    if let Some(held) = queue.pop_front() {
                        self.bytes -= held.incoming.record.payload_bytes() as usize;
                        units.push(vec![held.incoming]);
                    }
                }
            }
            if self.dirty || units.len() > before {
                let partitions: Vec<i32> = self.markers.keys().copied().collect();
                for partition in partitions {
                    while let Some(unit) = self.release_front(partition)? {
                        units.push(unit);
                    }
                }
            }
            self.dirty = false;
            if units.len() == before {
                break;
            }
        }
        let blocker = self.blocker();
        if blocker.as_ref() != self.waiting.as_ref().map(|(b, _)| b) {
            self.waiting = blocker.map(|b| (b, Instant::now()));
        }
        Ok(units)
    }

    /// The first record of the transaction topic's `partition`, and its transaction's
    /// events, when they can go.
    fn release_front(&mut self, partition: i32) -> Result<Option<Vec<Incoming>>, HeldError> {
        let Some(front) = self.markers.get(&partition).and_then(VecDeque::front) else {
            return Ok(None);
        };
        let id = match front {
            Marker::Alone(_) => None,
            Marker::End { id, .. } if self.released.contains(key(self.postgres, id)) => None,
            Marker::End { id, expected, .. } => {
                let id = key(self.postgres, id);
                let arrived = self.arrived.get(id);
                if expected.is_empty()
                    && let Some(arrived) = arrived.filter(|a| !a.is_empty())
                {
                    return Err(HeldError::NotCounted {
                        id: id.to_string(),
                        events: arrived.values().map(|e| e.len() as u64).sum(),
                        topics: arrived
                            .keys()
                            .map(|table| format!("{}{table}", self.prefix))
                            .collect::<Vec<_>>()
                            .join(", "),
                        transaction_topic: self.topic.clone(),
                    });
                }
                let whole = expected.iter().all(|(table, count)| {
                    arrived
                        .and_then(|a| a.get(table))
                        .map_or(0, |e| e.len() as u64)
                        >= *count
                });
                // Every event it counts first in its partition (after the transactions
                // before it there), table by table.
                if !whole
                    || expected
                        .iter()
                        .any(|(table, count)| self.first_of(table, id) < *count)
                {
                    return Ok(None);
                }
                Some((id.to_string(), expected.clone()))
            }
        };
        let Some(marker) = self
            .markers
            .get_mut(&partition)
            .and_then(VecDeque::pop_front)
        else {
            return Ok(None);
        };
        let marker = match marker {
            Marker::Alone(incoming) | Marker::End { incoming, .. } => incoming,
        };
        let mut unit = Vec::new();
        if let Some((id, expected)) = id {
            let mut events: Vec<(u64, Incoming)> = Vec::new();
            for (table, _) in &expected {
                for (partition, queue) in self.queues.iter_mut() {
                    if table_of(&self.prefix, &partition.0) != table {
                        continue;
                    }
                    // Every event of the transaction first in the partition, copies Debezium
                    // sent again among them (an upsert written twice writes nothing new). A
                    // record without a transaction between two of them (the tombstone after
                    // a delete) goes with them, right after the record before it.
                    let mut members = run_of(queue, &id);
                    let mut order = 0;
                    while members > 0 {
                        let Some(held) = queue.pop_front() else {
                            break;
                        };
                        if let Some(member) = &held.transaction {
                            order = member.order.unwrap_or(order);
                            members -= 1;
                        }
                        events.push((order, held.incoming));
                    }
                }
            }
            // Stable: records of one order keep their partition's order.
            events.sort_by_key(|(order, _)| *order);
            self.arrived.remove(&id);
            self.remember(id);
            unit.extend(events.into_iter().map(|(_, incoming)| incoming));
        }
        unit.push(marker);
        for incoming in &unit {
            self.bytes -= incoming.record.payload_bytes() as usize;
        }
        Ok(Some(unit))
    }

    /// Records that transaction `id` was applied.
    fn remember(&mut self, id: String) {
        if self.released.insert(id.clone()) {
            self.released_order.push_back(id);
        }
        while self.released_order.len() > RELEASED_KEPT {
            if let Some(old) = self.released_order.pop_front() {
                self.released.remove(&old);
            }
        }
    }

    /// How many of transaction `id`'s events of `table` are first in their partitions
    /// (copies once).
    fn first_of(&self, table: &str, id: &str) -> u64 {
        let mut first = HashSet::new();
        for (_, queue) in self
            .queues
            .iter()
            .filter(|(partition, _)| table_of(&self.prefix, &partition.0) == table)
        {
            for held in queue {
                match &held.transaction {
                    Some(member) if member.id == id => {
                        first.insert(member.event);
                    }
                    Some(_) => break,
                    None => {}
                }
            }
        }
        first.len() as u64
    }

    /// The oldest thing held that cannot go: the earliest `END` first in its partition,
    /// else the first held event of a transaction.
    fn blocker(&self) -> Option<(String, i32, i64)> {
        let end = self
            .markers
            .values()
            .filter_map(VecDeque::front)
            .map(|m| match m {
                Marker::Alone(i) | Marker::End { incoming: i, .. } => &i.record,
            })
            .min_by_key(|r| r.offset);
        let event = || {
            self.queues
                .values()
                .filter_map(VecDeque::front)
                .map(|h| &h.incoming.record)
                .min_by_key(|r| (r.topic.clone(), r.partition))
        };
        end.or_else(event)
            .map(|r| (r.topic.clone(), r.partition, r.offset))
    }

    /// Forgets everything held: it is read again from the stored offsets.
    pub(super) fn clear(&mut self) {
        self.queues.clear();
        self.markers.clear();
        self.arrived.clear();
        // What was released may not have committed: read again, it is held again, as
        // after a restart.
        self.released.clear();
        self.released_order.clear();
        self.bytes = 0;
        self.dirty = false;
        self.waiting = None;
    }

    /// How long the oldest thing held has waited, and what it waits for; `None` when
    /// nothing is held.
    pub(super) fn stuck(&self) -> Option<(Duration, String)> {
        let (_, since) = self.waiting.as_ref()?;
        Some((since.elapsed(), self.oldest_waiting()))
    }

    /// What the first held transaction waits for, in words.
    fn oldest_waiting(&self) -> String {
        let first_end = self
            .markers
            .values()
            .filter_map(|q| match q.front()? {
                Marker::End {
                    incoming,
                    id,
                    expected,
                } => Some((incoming.record.offset, id.as_str(), expected)),
                Marker::Alone(_) => None,
            })
            .min_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        if let Some((_, id, expected)) = first_end {
            let id = key(self.postgres, id);
            let arrived = self.arrived.get(id);
            let missing: Vec<String> = expected
                .iter()
                .filter_map(|(table, count)| {
                    let got = arrived
                        .and_then(|a| a.get(table))
                        .map_or(0, |e| e.len() as u64);
                    (got < *count).then(|| format!("{} of {count} events of {table}", count - got))
                })
                .collect();
            if missing.is_empty() {
                return format!(
                    "transaction {id}, whole, behind another transaction's events in its partitions"
                );
            }
            // What is held besides, by transaction: events Debezium counted under another
            // id, or a partition read from elsewhere, show here.
            let mut others: Vec<String> = self
                .arrived
                .iter()
                .filter(|(other, _)| other.as_str() != id)
                .take(3)
                .map(|(other, tables)| {
                    format!(
                        "{other} ({} events)",
                        tables.values().map(HashSet::len).sum::<usize>()
                    )
                })
                .collect();
            others.sort();
            let held = self.queues.values().map(VecDeque::len).sum::<usize>();
            return format!(
                "transaction {id}, missing {}; {held} records held{}",
                missing.join(", "),
                if others.is_empty() {
                    String::new()
                } else {
                    format!(", of transactions {}", others.join(", "))
                }
            );
        }
        let first = self
            .queues
            .values()
            .filter_map(|q| q.front())
            .filter_map(|h| Some((h.transaction.as_ref()?, &h.incoming.record)))
            .next();
        match first {
            Some((member, record)) => format!(
                "transaction {} (at {}), whose END record has not arrived on {}",
                member.id,
                record.coordinates(),
                self.topic
            ),
            None => "nothing".into(),
        }
    }

    /// The table (Debezium's `data_collection`) a data topic carries.
    fn table_of<'t>(&self, topic: &'t str) -> &'t str {
        table_of(&self.prefix, topic)
    }

    /// A record of the transaction topic read.
    fn marker(&self, incoming: Incoming) -> Result<Marker, HeldError> {
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
                        let topic = format!("{}{}", self.prefix, c.data_collection);
                        self.topics.contains(&topic)
                    })
                    .map(|c| (c.data_collection, c.event_count))
                    .collect();
                Ok(Marker::End {
                    incoming,
                    id: transaction_key(&id).to_string(),
                    expected,
                })
            }
            other => Err(bad(
                &incoming,
                format!("status {other:?}, not BEGIN or END"),
            )),
        }
    }
}

/// The table (Debezium's `data_collection`) of a data topic, under `prefix`.
fn table_of<'t>(prefix: &str, topic: &'t str) -> &'t str {
    topic.strip_prefix(prefix).unwrap_or(topic)
}

/// How many of transaction `id`'s records `queue` holds before a record of another
/// transaction (records without one in between do not end the run).
fn run_of(queue: &VecDeque<Held>, id: &str) -> u64 {
    let mut count = 0;
    for held in queue {
        match &held.transaction {
            Some(member) if member.id == id => count += 1,
            Some(_) => break,
            None => {}
        }
    }
    count
}

/// A data event's transaction, read from its value (JSON, bare or in Connect's envelope),
/// and whether Debezium's PostgreSQL connector wrote it. A value that is not such JSON has
/// none: it passes as it is, and fails where it would.
fn membership(incoming: &Incoming) -> Option<(Membership, bool)> {
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
fn key(postgres: bool, id: &str) -> &str {
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
fn transaction_key(id: &str) -> &str {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    const TX: &str = "db.transaction";

    fn topics() -> Vec<String> {
        ["db.public.orders", "db.public.lines", TX]
            .map(String::from)
            .to_vec()
    }

    fn event(topic: &str, offset: i64, tx: Option<(&str, u64)>) -> Incoming {
        let value = match tx {
            Some((id, order)) => format!(
                r#"{{"op":"c","after":{{"id":{offset}}},"transaction":{{"id":"{id}","total_order":{order},"data_collection_order":1}}}}"#
            ),
            None => format!(r#"{{"op":"r","after":{{"id":{offset}}},"transaction":null}}"#),
        };
        Record::from_value(topic, 0, offset, value).into()
    }

    fn begin(offset: i64, id: &str) -> Incoming {
        Record::from_value(
            TX,
            0,
            offset,
            format!(
                r#"{{"status":"BEGIN","id":"{id}","event_count":null,"data_collections":null}}"#
            ),
        )
        .into()
    }

    fn end(offset: i64, id: &str, counts: &[(&str, u64)]) -> Incoming {
        let collections: Vec<String> = counts
            .iter()
            .map(|(c, n)| format!(r#"{{"data_collection":"{c}","event_count":{n}}}"#))
            .collect();
        let total: u64 = counts.iter().map(|(_, n)| n).sum();
        // Connect's envelope, as the JSON converter writes it with schemas.
        Record::from_value(
            TX,
            0,
            offset,
            format!(
                r#"{{"schema":{{"type":"struct"}},"payload":{{"status":"END","id":"{id}","event_count":{total},"data_collections":[{}]}}}}"#,
                collections.join(",")
            ),
        )
        .into()
    }

    fn coordinates(units: &[Vec<Incoming>]) -> Vec<Vec<(String, i64)>> {
        units
            .iter()
            .map(|u| {
                u.iter()
                    .map(|i| (i.record.topic.clone(), i.record.offset))
                    .collect()
            })
            .collect()
    }

    fn gate() -> SourceTransactions {
        SourceTransactions::new(TX, &topics())
    }

    #[test]
    fn a_transaction_goes_whole_once_its_end_and_every_event_arrived_in_any_order() {
        let mut gate = gate();
        // The END arrives first, then the events, the lines' before the order's.
        gate.offer(begin(0, "t1")).unwrap();
        gate.offer(end(1, "t1", &[("public.orders", 1), ("public.lines", 2)]))
            .unwrap();
        assert_eq!(
            coordinates(&gate.release().unwrap()),
            [[(TX.to_string(), 0)]],
            "BEGIN goes alone, the transaction waits"
        );
        gate.offer(event("db.public.lines", 0, Some(("t1", 2))))
            .unwrap();
        gate.offer(event("db.public.lines", 1, Some(("t1", 3))))
            .unwrap();
        assert!(gate.release().unwrap().is_empty());
        assert!(
            gate.stuck()
                .is_some_and(|(_, why)| why.contains("1 of 1 events of public.orders"))
        );
        gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        let units = gate.release().unwrap();
        assert_eq!(
            coordinates(&units),
            [[
                ("db.public.orders".to_string(), 0),
                ("db.public.lines".to_string(), 0),
                ("db.public.lines".to_string(), 1),
                (TX.to_string(), 1)
            ]],
            "one unit, in total_order, END last"
        );
        assert!(gate.is_empty());
        assert_eq!(gate.bytes, 0);
        assert!(gate.stuck().is_none());
    }

    #[test]
    fn postgres_ids_match_by_xid_whatever_lsn_each_record_carries() {
        // Debezium 3.6's PostgreSQL connector, as measured: each record's id ends with the
        // LSN it last saw.
        let postgres = |topic: &str, id: &str, order: u64| -> Incoming {
            Record::from_value(
                topic,
                0,
                0,
                format!(
                    r#"{{"op":"c","source":{{"connector":"postgresql"}},"transaction":{{"id":"{id}","total_order":{order}}}}}"#
                ),
            )
            .into()
        };
        let mut gate = gate();
        gate.offer(begin(0, "730:26524000")).unwrap();
        gate.offer(postgres("db.public.orders", "730:26524168", 1))
            .unwrap();
        gate.offer(postgres("db.public.lines", "730:26524304", 2))
            .unwrap();
        gate.offer(end(
            1,
            "730:26525128",
            &[("public.orders", 1), ("public.lines", 1)],
        ))
        .unwrap();
        let units = gate.release().unwrap();
        assert_eq!(units.len(), 2, "BEGIN alone, then the whole transaction");
        assert_eq!(units[1].len(), 3);
        assert!(gate.is_empty());
        // Another connector's ids are taken whole, even `<digits>:<digits>` ones
        // (Informix's `<txid>:<commit lsn>`, whose txids are reused).
        let mut other = SourceTransactions::new(TX, &topics());
        other
            .offer(event("db.public.lines", 0, Some(("5:1000", 1))))
            .unwrap();
        other
            .offer(end(0, "5:2000", &[("public.lines", 1)]))
            .unwrap();
        assert!(
            other.release().unwrap().is_empty(),
            "5:1000 and 5:2000 are two transactions"
        );
        // Ids that are not `<digits>:<digits>` are taken whole: two GTIDs of one server
        // are two transactions.
        assert_eq!(transaction_key("730:26525128"), "730");
        assert_eq!(
            transaction_key("3e11fa47-71ca-11e1-9e33-c80aa9429562:23"),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
        );
        assert_eq!(
            transaction_key("mysql-bin.000003:154"),
            "mysql-bin.000003:154"
        );
        assert_eq!(transaction_key("25:3:7"), "25:3:7");
        assert_eq!(transaction_key("t1"), "t1");
    }

    #[test]
    fn records_without_a_transaction_pass_once_first_in_their_partition() {
        let mut gate = gate();
        gate.offer(event("db.public.orders", 0, None)).unwrap();
        gate.offer(event("db.public.orders", 1, Some(("t1", 1))))
            .unwrap();
        // A tombstone behind the held event waits for it.
        let mut tombstone = Record::from_value("db.public.orders", 0, 2, "");
        tombstone.value = None;
        gate.offer(tombstone.into()).unwrap();
        assert_eq!(
            coordinates(&gate.release().unwrap()),
            [[("db.public.orders".to_string(), 0)]]
        );
        gate.offer(end(0, "t1", &[("public.orders", 1)])).unwrap();
        assert_eq!(
            coordinates(&gate.release().unwrap()),
            [
                vec![("db.public.orders".to_string(), 1), (TX.to_string(), 0)],
                vec![("db.public.orders".to_string(), 2)]
            ]
        );
    }

    #[test]
    fn a_tombstone_between_a_transactions_deletes_goes_with_them() {
        let mut gate = gate();
        let tombstone = |offset| {
            let mut record = Record::from_value("db.public.lines", 0, offset, "");
            record.value = None;
            Incoming::from(record)
        };
        gate.offer(event("db.public.lines", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(tombstone(1)).unwrap();
        gate.offer(event("db.public.lines", 2, Some(("t1", 2))))
            .unwrap();
        gate.offer(tombstone(3)).unwrap();
        gate.offer(event("db.public.orders", 0, Some(("t1", 3))))
            .unwrap();
        gate.offer(end(0, "t1", &[("public.lines", 2), ("public.orders", 1)]))
            .unwrap();
        let lines = |o: i64| ("db.public.lines".to_string(), o);
        assert_eq!(
            coordinates(&gate.release().unwrap()),
            [
                vec![
                    lines(0),
                    lines(1),
                    lines(2),
                    ("db.public.orders".to_string(), 0),
                    (TX.to_string(), 0)
                ],
                vec![lines(3)]
            ],
            "the tombstone between goes with the transaction, the one after alone"
        );
        assert!(gate.is_empty());
    }

    #[test]
    fn events_debezium_sends_again_pass_alone_once_their_transaction_is_applied() {
        let mut gate = gate();
        // t1's two lines, then Debezium's worker crashed and sent them and the END again.
        gate.offer(event("db.public.lines", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(event("db.public.lines", 1, Some(("t1", 2))))
            .unwrap();
        gate.offer(event("db.public.lines", 2, Some(("t1", 1))))
            .unwrap();
        gate.offer(event("db.public.lines", 3, Some(("t1", 2))))
            .unwrap();
        gate.offer(end(0, "t1", &[("public.lines", 2)])).unwrap();
        gate.offer(end(1, "t1", &[("public.lines", 2)])).unwrap();
        let lines = |o: i64| ("db.public.lines".to_string(), o);
        assert_eq!(
            coordinates(&gate.release().unwrap()),
            [
                vec![lines(0), lines(2), lines(1), lines(3), (TX.to_string(), 0)],
                vec![(TX.to_string(), 1)],
            ],
            "the copies first in the partition go with the END, in total_order; the second END alone"
        );
        // A copy arriving after it went passes alone too.
        gate.offer(event("db.public.lines", 4, Some(("t1", 1))))
            .unwrap();
        assert_eq!(coordinates(&gate.release().unwrap()), [[lines(4)]]);
        assert!(gate.is_empty());
    }

    #[test]
    fn a_copy_never_stands_in_for_an_event_that_has_not_arrived() {
        // The lines table on two partitions: t1 has one line on each. Debezium sent the
        // first again before the second arrived.
        let mut gate = gate();
        let on = |partition: i32, offset: i64, order: u64| {
            let mut incoming = event("db.public.lines", offset, Some(("t1", order)));
            incoming.record.partition = partition;
            incoming
        };
        gate.offer(on(0, 0, 1)).unwrap();
        gate.offer(on(0, 1, 1)).unwrap();
        gate.offer(end(0, "t1", &[("public.lines", 2)])).unwrap();
        assert!(
            gate.release().unwrap().is_empty(),
            "one of two events arrived"
        );
        gate.offer(on(1, 0, 2)).unwrap();
        let units = gate.release().unwrap();
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].len(), 4, "both lines, the copy and the END");
        assert!(gate.is_empty());
    }

    #[test]
    fn what_was_released_is_held_again_when_read_again_after_a_clear() {
        // t1 went to the buffer, then a revocation dropped everything: read again, it must
        // go whole again, not record by record.
        let mut gate = gate();
        gate.offer(event("db.public.lines", 0, Some(("t1", 2))))
            .unwrap();
        gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
            .unwrap();
        assert_eq!(gate.release().unwrap().len(), 1);
        gate.clear();
        gate.offer(event("db.public.lines", 0, Some(("t1", 2))))
            .unwrap();
        assert!(
            gate.release().unwrap().is_empty(),
            "the line waits for its order and END"
        );
        gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
            .unwrap();
        let units = gate.release().unwrap();
        assert_eq!(coordinates(&units).len(), 1);
        assert_eq!(
            coordinates(&units)[0][0],
            ("db.public.orders".to_string(), 0),
            "the order before its line"
        );
    }

    #[test]
    fn an_end_that_counts_none_of_the_tables_whose_events_arrived_fails() {
        let mut gate = gate();
        // Topics renamed by a routing SMT: the event comes on a topic Debezium did not name.
        gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(end(0, "t1", &[("public.renamed", 1)])).unwrap();
        let error = gate.release().unwrap_err().to_string();
        assert!(error.contains("counts no table"), "{error}");
    }

    #[test]
    fn a_later_transaction_waits_for_the_earlier_one_sharing_its_partition() {
        let mut gate = gate();
        gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(event("db.public.orders", 1, Some(("t2", 1))))
            .unwrap();
        gate.offer(event("db.public.lines", 0, Some(("t2", 2))))
            .unwrap();
        gate.offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
            .unwrap();
        gate.offer(end(1, "t2", &[("public.orders", 1), ("public.lines", 1)]))
            .unwrap();
        // t1 still misses its line; t2 is whole but comes after t1 everywhere.
        assert!(gate.release().unwrap().is_empty());
        let (_, why) = gate.stuck().expect("stuck");
        assert!(
            why.contains("transaction t1, missing 1 of 1 events of public.lines"),
            "{why}"
        );
        // t1's line arrives behind t2's in the lines partition? It cannot: a partition keeps
        // the source's commit order. It arrives first.
        let mut gate2 = SourceTransactions::new(TX, &topics());
        gate2
            .offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        gate2
            .offer(event("db.public.lines", 0, Some(("t1", 2))))
            .unwrap();
        gate2
            .offer(event("db.public.orders", 1, Some(("t2", 1))))
            .unwrap();
        gate2
            .offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
            .unwrap();
        gate2
            .offer(end(1, "t2", &[("public.orders", 1), ("public.lines", 1)]))
            .unwrap();
        assert_eq!(
            gate2.release().unwrap().len(),
            1,
            "t1 goes; t2 waits for its line"
        );
        gate2
            .offer(event("db.public.lines", 1, Some(("t2", 2))))
            .unwrap();
        assert_eq!(
            coordinates(&gate2.release().unwrap()),
            [[
                ("db.public.orders".to_string(), 1),
                ("db.public.lines".to_string(), 1),
                (TX.to_string(), 1)
            ]]
        );
    }

    #[test]
    fn tables_the_connector_does_not_read_are_not_waited_for() {
        let mut gate = gate();
        gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(end(0, "t1", &[("public.orders", 1), ("public.audit", 5)]))
            .unwrap();
        assert_eq!(gate.release().unwrap().len(), 1);
        // A transaction of other tables only: its END goes alone.
        gate.offer(end(1, "t2", &[("public.audit", 1)])).unwrap();
        assert_eq!(
            coordinates(&gate.release().unwrap()),
            [[(TX.to_string(), 1)]]
        );
    }

    #[test]
    fn a_transaction_past_the_limit_fails_instead_of_splitting() {
        let mut gate = SourceTransactions::with_limit(TX, &topics(), 300);
        let mut failed = None;
        for offset in 0..10 {
            if let Err(e) = gate.offer(event(
                "db.public.orders",
                offset,
                Some(("big", offset as u64)),
            )) {
                failed = Some(e);
                break;
            }
        }
        let message = failed.expect("past the limit").to_string();
        assert!(message.contains("past the limit of 300 bytes"), "{message}");
        assert!(message.contains("transaction big"), "{message}");
    }

    #[test]
    fn a_record_on_the_transaction_topic_that_is_not_one_fails() {
        let mut gate = gate();
        let error = gate
            .offer(Record::from_value(TX, 0, 7, r#"{"status":"COMMIT","id":"x"}"#).into())
            .unwrap_err();
        assert!(error.to_string().contains("offset 7"), "{error}");
        assert!(
            gate.offer(Record::from_value(TX, 0, 8, "not json").into())
                .is_err()
        );
    }

    #[test]
    fn clearing_forgets_everything_held() {
        let mut gate = gate();
        gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
            .unwrap();
        gate.offer(begin(0, "t1")).unwrap();
        gate.clear();
        assert!(gate.is_empty());
        assert!(gate.release().unwrap().is_empty());
        assert_eq!(gate.bytes, 0);
    }
}
