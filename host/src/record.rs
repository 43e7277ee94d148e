//! The record as it travels from the source to the sink: the plugin host's own type, so a
//! batch passes through the transforms without a copy.

pub use sluice_transform::Record;

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
