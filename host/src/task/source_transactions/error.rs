//! Why records held for their source transaction cannot go on.

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
