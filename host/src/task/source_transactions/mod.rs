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
//!
//! Its parts: the gate itself (here), what Debezium writes and how one transaction is named
//! among its ids (`debezium.rs`), why held records cannot go on (`error.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::record::{Incoming, Partition, RecordExt};
use debezium::{EventId, Membership, key, membership};
pub use error::HeldError;

mod debezium;
mod error;
#[cfg(test)]
mod tests;

/// The most bytes of record payload held while their transactions are not whole: past it
/// the task fails rather than split a transaction. Documented in docs/cdc.md.
pub const MAX_HELD_BYTES: usize = 256 << 20;

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
            let marker = debezium::marker(incoming, &self.prefix, &self.topics)?;
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
                oldest: self.waiting_for(),
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

    /// How long the oldest thing held that cannot go has waited; `None` when nothing
    /// waits. Cheap: the task's loop asks it every turn.
    pub(super) fn waited(&self) -> Option<Duration> {
        self.waiting.as_ref().map(|(_, since)| since.elapsed())
    }

    /// What the first held transaction waits for, in words (for a warning or an error).
    pub(super) fn waiting_for(&self) -> String {
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
