//! A record that failed, where and why: what the error policy (`fail`, `skip`, `dlq`)
//! acts on, and the dead letter it becomes under `dlq`.

use std::fmt;

use crate::record::Record;

/// Declares a fieldless enum whose variants have stable names (as stored in dead letters
/// and logged), with `name()` and `Display` giving that name.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident => $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// The name as stored and logged.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum! {
    /// The stage of the record's path where it failed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Stage {
        /// On arrival: too large, a header name that is not UTF-8, a key or value that does
        /// not decode in its format, no `delivery.dedup` id.
        Source => "source",
        /// A transform rejected it, or trapped on it.
        Transform => "transform",
        /// The connector's JSON Schema refused the transformed value.
        Validate => "validate",
        /// It does not map to the columns: not JSON, too deep, a value that does not fit.
        Map => "map",
        /// The database refused its row: a constraint, a length, a value out of range.
        Sink => "sink",
    }
}

named_enum! {
    /// What kind of failure it was: a short machine-readable class, stored in the
    /// dead-letter table's `error_class`, the `sluice.error.class` header and every log line.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum FailureClass {
        /// Larger than the connector's `max_record_bytes`.
        RecordTooLarge => "record_too_large",
        /// A header name that is not UTF-8.
        HeaderNotUtf8 => "header_not_utf8",
        /// No usable producer id where `delivery.dedup.id` says it is.
        MissingId => "missing_id",
        /// A transform rejected the record, or trapped, timed out or ran out of memory on it.
        Transform => "transform",
        /// A batch failed in a transform and the search for the records that make it fail
        /// ran out of its budget (`errors.isolation`) before it reached this one: it was not
        /// found to fail, only not told apart from those that do. Worth a redrive.
        TransformNotIsolated => "transform_not_isolated",
        /// The connector's JSON Schema refused the transformed value.
        SchemaInvalid => "schema_invalid",
        /// A key or value in the Confluent wire format names a schema id (or GUID) that the
        /// Schema Registry does not have (404, error code 40403).
        SchemaNotFound => "schema_not_found",
        /// A key or value is not a Confluent wire-format frame: a magic byte other than 0
        /// or 1, too short for its schema id, a broken Protobuf message-index list.
        BadFrame => "bad_frame",
        /// A key or value does not decode with its schema (Avro, Protobuf, JSON Schema, a
        /// Connect envelope), or its schema does not compile.
        DecodeFailed => "decode_failed",
        /// The value is not JSON (or is nested too deep) where `format: json` needs it.
        InvalidJson => "invalid_json",
        /// The value is not UTF-8 where `format: string` needs it.
        NotUtf8 => "not_utf8",
        /// A value or key that does not fit its column.
        ColumnValue => "column_value",
        /// Under `envelope: debezium | opencdc`, a value that is not such a change event
        /// (no `op`/`operation`, an unknown one, no row where the operation needs one).
        NotAChangeEvent => "not_a_change_event",
        /// `sink.version` finds no version in the record (none where it points, not an
        /// integer or a timestamp, a Debezium event without its source position).
        MissingVersion => "missing_version",
        /// A truncate event under `sink.on_truncate: fail`.
        Truncate => "truncate",
        /// A table template (`sink.table: "{topic}"`, `sink.table_from`) makes no table
        /// for the record: a source field the event lacks, a topic the pattern does not
        /// match, a name the database cannot take, or a table another topic writes.
        TableName => "table_name",
        /// With derived columns (`sink.columns` left out): the record's schema gives
        /// columns the table cannot take (a field it lacks under `sink.evolve: none`, a
        /// type change, a new required field without a default, another key), or none at
        /// all (no schema, no record type, no key field).
        SchemaIncompatible => "schema_incompatible",
        /// With derived columns: a field's name is no column name the sink's database
        /// takes (empty, too long, a control character, a trailing space where refused, a
        /// system column's name), or the schema has more fields than a table takes.
        ColumnName => "column_name",
        /// The database refused the row: a constraint, a length, a value out of range.
        DatabaseRefused => "database_refused",
    }
}

/// One failed input record of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Index of the input record in its batch.
    pub index: usize,
    /// `topic/partition@offset`.
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub stage: Stage,
    pub class: FailureClass,
    /// What went wrong, for a person.
    pub message: String,
}

impl Failure {
    /// `topic/partition@offset`.
    pub fn coordinates(&self) -> String {
        format!("{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "record {} failed at {} ({}): {}",
            self.coordinates(),
            self.stage,
            self.class,
            self.message
        )
    }
}

/// Longest error message a dead letter keeps (a database's message can quote a whole row).
const MAX_MESSAGE_CHARS: usize = 4000;

/// A failed record with its cause, ready to store (the sink's dead-letter table) or produce
/// (the dead-letter topic).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The record as it arrived from Kafka.
    pub record: Record,
    pub stage: Stage,
    pub class: FailureClass,
    pub message: String,
}

impl DeadLetter {
    /// The dead letter of `failure`, whose original input is `record`.
    pub fn new(record: Record, failure: &Failure) -> Self {
        // A NUL is refused in PostgreSQL text; messages can quote anything (a plugin's).
        let mut message = failure.message.replace('\0', "\\0");
        if message.chars().count() > MAX_MESSAGE_CHARS {
            message = message.chars().take(MAX_MESSAGE_CHARS).collect::<String>() + "…";
        }
        DeadLetter {
            record,
            stage: failure.stage,
            class: failure.class,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut() {
        let failure = Failure {
            index: 0,
            topic: "t".into(),
            partition: 0,
            offset: 0,
            stage: Stage::Sink,
            class: FailureClass::DatabaseRefused,
            message: "x".repeat(10_000),
        };
        let letter = DeadLetter::new(Record::from_value("t", 0, 0, "v"), &failure);
        assert_eq!(letter.message.chars().count(), MAX_MESSAGE_CHARS + 1);
    }
}
