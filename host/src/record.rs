//! The record as it travels from the source to the sink: the plugin host's own type, so a
//! batch passes through the transforms without a copy. This is the bottom of the crate:
//! every stage speaks in these types, and this module imports none of them.

pub use sluice_transform::Record;

/// A topic and partition.
pub type Partition = (String, i32);

/// What the pipeline asks of a record beyond its fields.
pub trait RecordExt {
    /// `topic/partition@offset`, the coordinates used in every log line and error.
    fn coordinates(&self) -> String;
}

impl RecordExt for Record {
    fn coordinates(&self) -> String {
        format!("{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

/// A record's headers in wire order: name, and value (`None` is a null value).
pub type Headers = Vec<(String, Option<Vec<u8>>)>;

/// A record as the source hands it over (or a redrive reads it back from the dead-letter
/// table).
#[derive(Debug, Clone)]
pub struct Incoming {
    pub record: Record,
    /// Why the record cannot be taken as it is (a header name that is not UTF-8).
    pub defect: Option<String>,
}

impl From<Record> for Incoming {
    fn from(record: Record) -> Self {
        Incoming {
            record,
            defect: None,
        }
    }
}
