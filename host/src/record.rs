//! The record as it travels from the source to the sink.

/// One Kafka record, owned.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch, when the broker gave one.
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    /// `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Record {
    /// `topic/partition@offset`, the coordinates used in every log line and error.
    pub fn coordinates(&self) -> String {
        format!("{}/{}@{}", self.topic, self.partition, self.offset)
    }

    /// Bytes this record weighs in a batch (key, value and headers).
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
    }
}
