//! The batch buffer: records polled but not yet handed to the sink, in arrival order. A
//! batch is cut from its front when it holds `max_records` or `max_bytes`, or `linger`
//! after its first record arrived. Records pushed as one unit (a source transaction under
//! `sink.transactions: source`) are never cut apart: a unit larger than a batch is a batch
//! of its own.

use std::time::{Duration, Instant};

use crate::record::{Incoming, Partition};

/// Records waiting for their batch.
#[derive(Debug, Default)]
pub(super) struct Buffer {
    records: Vec<Incoming>,
    /// In step with `records`: the record and the next one belong to one unit, which a
    /// batch does not cut.
    joined: Vec<bool>,
    /// Payload bytes of `records`.
    bytes: usize,
    /// When the oldest record arrived.
    started: Option<Instant>,
}

impl Buffer {
    pub(super) fn push(&mut self, incoming: Incoming) {
        self.bytes += incoming.record.payload_bytes() as usize;
        self.started.get_or_insert_with(Instant::now);
        self.records.push(incoming);
        self.joined.push(false);
    }

    /// Pushes records that a batch must hold together or not at all.
    pub(super) fn push_unit(&mut self, unit: Vec<Incoming>) {
        let last = unit.len();
        for (at, incoming) in unit.into_iter().enumerate() {
            self.push(incoming);
            if at + 1 < last
                && let Some(joined) = self.joined.last_mut()
            {
                *joined = true;
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Holds a batch's worth: `max_records` records or `max_bytes` bytes, times `batches`.
    pub(super) fn holds(&self, batches: usize, max_records: usize, max_bytes: usize) -> bool {
        self.records.len() >= max_records.saturating_mul(batches)
            || self.bytes >= max_bytes.saturating_mul(batches)
    }

    /// The oldest record has waited `linger`.
    pub(super) fn lingered(&self, linger: Duration) -> bool {
        self.started.is_some_and(|t| t.elapsed() >= linger)
    }

    /// How long the oldest record has waited.
    pub(super) fn waited(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// The oldest records, up to `max_records` and `max_bytes`, in whole units (at least
    /// the first unit).
    pub(super) fn take_batch(&mut self, max_records: usize, max_bytes: usize) -> Vec<Incoming> {
        let mut take = 0;
        let mut bytes = 0;
        while take < self.records.len() {
            // The unit starting at `take`.
            let mut end = take;
            let mut size = 0;
            loop {
                size += self.records[end].record.payload_bytes() as usize;
                end += 1;
                if end == self.records.len() || !self.joined[end - 1] {
                    break;
                }
            }
            if take > 0 && (end > max_records || bytes + size > max_bytes) {
                break;
            }
            take = end;
            bytes += size;
        }
        self.joined.drain(..take);
        let batch = self.records.drain(..take).collect();
        self.bytes = self.bytes.saturating_sub(bytes);
        if self.records.is_empty() {
            self.started = None;
        }
        batch
    }

    /// Puts a batch back at the front, in its order (its transform chain could not run;
    /// the batch is tried again once the chain is back), as one unit: it goes again as the
    /// batch it was.
    pub(super) fn put_back(&mut self, mut batch: Vec<Incoming>) {
        if batch.is_empty() {
            return;
        }
        let mut joined = vec![true; batch.len()];
        joined[batch.len() - 1] = false;
        joined.append(&mut self.joined);
        self.joined = joined;
        self.bytes += batch
            .iter()
            .map(|i| i.record.payload_bytes() as usize)
            .sum::<usize>();
        batch.append(&mut self.records);
        self.records = batch;
        self.started = Some(
            self.started
                .map_or_else(Instant::now, |s| s.min(Instant::now())),
        );
    }

    /// Drops every record of `partitions` (they are read again from the stored offsets).
    pub(super) fn drop_partitions(&mut self, partitions: &[Partition]) {
        let before = self.records.len();
        let kept: Vec<bool> = self
            .records
            .iter()
            .map(|i| {
                !partitions
                    .iter()
                    .any(|(t, p)| *t == i.record.topic && *p == i.record.partition)
            })
            .collect();
        let mut at = 0;
        self.records.retain(|_| {
            at += 1;
            kept[at - 1]
        });
        let mut at = 0;
        self.joined.retain(|_| {
            at += 1;
            kept[at - 1]
        });
        if self.records.len() != before {
            self.bytes = self
                .records
                .iter()
                .map(|i| i.record.payload_bytes() as usize)
                .sum();
            if self.records.is_empty() {
                self.started = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn incoming(partition: i32, offset: i64, value: &str) -> Incoming {
        Record::from_value("t", partition, offset, value).into()
    }

    #[test]
    fn batches_are_cut_by_count_and_bytes_from_the_front() {
        let mut buffer = Buffer::default();
        for offset in 0..5 {
            buffer.push(incoming(0, offset, "0123456789"));
        }
        assert!(buffer.holds(1, 5, usize::MAX));
        assert!(!buffer.holds(2, 5, usize::MAX));
        let first = buffer.take_batch(2, usize::MAX);
        assert_eq!(
            first.iter().map(|i| i.record.offset).collect::<Vec<_>>(),
            [0, 1]
        );
        // 25 bytes take two records of 10; a record larger than max_bytes still goes alone.
        assert_eq!(buffer.take_batch(100, 25).len(), 2);
        assert_eq!(buffer.take_batch(100, 1).len(), 1);
        assert!(buffer.is_empty());
        assert!(!buffer.lingered(Duration::ZERO));
    }

    #[test]
    fn a_unit_is_never_cut_and_goes_alone_when_larger_than_a_batch() {
        let mut buffer = Buffer::default();
        buffer.push(incoming(0, 0, "a"));
        buffer.push_unit((1..5).map(|o| incoming(0, o, "b")).collect());
        buffer.push(incoming(0, 5, "c"));
        let offsets =
            |batch: Vec<Incoming>| -> Vec<i64> { batch.iter().map(|i| i.record.offset).collect() };
        // Two records a batch: the first record alone, since the unit does not fit beside it.
        assert_eq!(offsets(buffer.take_batch(2, usize::MAX)), [0]);
        assert_eq!(offsets(buffer.take_batch(2, usize::MAX)), [1, 2, 3, 4]);
        assert_eq!(offsets(buffer.take_batch(2, usize::MAX)), [5]);
        // A batch put back goes again whole.
        buffer.push_unit(vec![incoming(0, 6, "d"), incoming(0, 7, "d")]);
        let batch = buffer.take_batch(10, usize::MAX);
        buffer.push(incoming(0, 8, "e"));
        buffer.put_back(batch);
        assert_eq!(offsets(buffer.take_batch(1, usize::MAX)), [6, 7]);
        assert_eq!(offsets(buffer.take_batch(1, 1)), [8]);
        assert!(buffer.is_empty());
    }

    #[test]
    fn dropping_a_partition_keeps_the_others_and_their_bytes() {
        let mut buffer = Buffer::default();
        buffer.push(incoming(0, 0, "aaaa"));
        buffer.push(incoming(1, 0, "bb"));
        buffer.push(incoming(0, 1, "cccc"));
        buffer.drop_partitions(&[("t".into(), 0)]);
        assert!(buffer.holds(1, 1, usize::MAX));
        assert!(!buffer.holds(1, 2, 3));
        assert!(buffer.lingered(Duration::ZERO));
        buffer.drop_partitions(&[("t".into(), 1)]);
        assert!(buffer.is_empty());
        assert!(!buffer.lingered(Duration::ZERO));
    }
}
