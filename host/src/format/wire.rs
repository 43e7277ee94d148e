//! The Confluent wire format: how a schema-registry serializer frames a key or value.
//!
//! - Magic byte 0, then the schema id as 4 big-endian bytes, then the payload.
//! - Magic byte 1, then the schema's 16-byte GUID, then the payload.
//! - Either may travel in the record's `__value_schema_id` / `__key_schema_id` header
//!   instead (newer serializers' "header" mode): the header holds the frame, and the key or
//!   value is the bare payload. The header wins when both are there, as Confluent's own
//!   deserializer decides.
//! - For Protobuf, the frame goes on with the message-index list: a zigzag varint count,
//!   then that many zigzag varints, the path to the message in its `.proto` file
//!   (top-level index, then nested). The single byte 0 (count 0) means the first message.

use std::fmt;

/// The header that carries a value's frame in header mode.
pub const VALUE_SCHEMA_ID_HEADER: &str = "__value_schema_id";
/// The header that carries a key's frame in header mode.
pub const KEY_SCHEMA_ID_HEADER: &str = "__key_schema_id";

/// Most message indexes a frame may list: deeper nesting than this is no real `.proto`.
const MAX_MESSAGE_INDEXES: usize = 64;

/// How a schema is named in a frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SchemaRef {
    /// A registry's global schema id (magic byte 0).
    Id(u32),
    /// A registry's schema GUID (magic byte 1), as canonical lowercase text.
    Guid(String),
}

impl fmt::Display for SchemaRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaRef::Id(id) => write!(f, "schema id {id}"),
            SchemaRef::Guid(guid) => write!(f, "schema guid {guid}"),
        }
    }
}

/// A parsed frame: which schema, which message (Protobuf), and the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    pub schema: SchemaRef,
    /// The message-index path (Protobuf only; `[0]` for the first message).
    pub message_indexes: Vec<i32>,
    pub payload: &'a [u8],
}

/// Reads the frame of `data`, or of `header` when the record carries one (then `data` is
/// the whole payload). `protobuf` says whether a message-index list follows the schema.
/// The error says what is wrong, for a `bad_frame` failure.
pub fn parse<'a>(
    data: &'a [u8],
    header: Option<&[u8]>,
    protobuf: bool,
) -> Result<Frame<'a>, String> {
    match header {
        Some(header) => {
            let (schema, message_indexes, rest) =
                parse_prefix(header, protobuf).map_err(|e| format!("schema id header: {e}"))?;
            if !rest.is_empty() {
                return Err(format!(
                    "schema id header: {} bytes after the schema reference",
                    rest.len()
                ));
            }
            Ok(Frame {
                schema,
                message_indexes,
                payload: data,
            })
        }
        None => {
            let (schema, message_indexes, payload) = parse_prefix(data, protobuf)?;
            Ok(Frame {
                schema,
                message_indexes,
                payload,
            })
        }
    }
}

type Prefix<'a> = (SchemaRef, Vec<i32>, &'a [u8]);

fn parse_prefix(data: &[u8], protobuf: bool) -> Result<Prefix<'_>, String> {
    let Some((&magic, rest)) = data.split_first() else {
        return Err("empty: no magic byte".into());
    };
    let (schema, mut rest) = match magic {
        0 => {
            let Some((id, rest)) = rest.split_first_chunk::<4>() else {
                return Err(format!(
                    "{} bytes: too short for magic byte 0 and a 4-byte schema id",
                    data.len()
                ));
            };
            (SchemaRef::Id(u32::from_be_bytes(*id)), rest)
        }
        1 => {
            let Some((guid, rest)) = rest.split_first_chunk::<16>() else {
                return Err(format!(
                    "{} bytes: too short for magic byte 1 and a 16-byte schema guid",
                    data.len()
                ));
            };
            (SchemaRef::Guid(guid_text(guid)), rest)
        }
        other => {
            return Err(format!(
                "magic byte {other}, not 0 or 1: not written by a schema-registry serializer"
            ));
        }
    };
    let mut indexes = Vec::new();
    if protobuf {
        let count = zigzag(&mut rest).map_err(|e| format!("message-index count: {e}"))?;
        let count = usize::try_from(count)
            .ok()
            .filter(|c| *c <= MAX_MESSAGE_INDEXES)
            .ok_or_else(|| {
                format!("message-index count {count} is not 0 to {MAX_MESSAGE_INDEXES}")
            })?;
        if count == 0 {
            indexes.push(0);
        }
        for _ in 0..count {
            let index = zigzag(&mut rest).map_err(|e| format!("message index: {e}"))?;
            let index = i32::try_from(index)
                .ok()
                .filter(|i| *i >= 0)
                .ok_or_else(|| format!("message index {index} is negative or too large"))?;
            indexes.push(index);
        }
    }
    Ok((schema, indexes, rest))
}

/// One zigzag varint (at most 10 bytes), advancing `data`.
fn zigzag(data: &mut &[u8]) -> Result<i64, String> {
    let mut value: u64 = 0;
    for shift in 0..10 {
        let Some((&byte, rest)) = data.split_first() else {
            return Err("the frame ends inside a varint".into());
        };
        *data = rest;
        value |= u64::from(byte & 0x7f) << (shift * 7);
        if byte & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err("a varint longer than 10 bytes".into())
}

/// 16 bytes as a UUID's canonical text (8-4-4-4-12, lowercase).
pub fn guid_text(bytes: &[u8; 16]) -> String {
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn magic_zero_with_an_id() {
        let frame = parse(&[0, 0, 0, 1, 2, 9, 9], None, false).unwrap();
        assert_eq!(frame.schema, SchemaRef::Id(258));
        assert!(frame.message_indexes.is_empty());
        assert_eq!(frame.payload, &[9, 9]);
    }

    #[test]
    fn protobuf_message_indexes() {
        // The single byte 0: the first message.
        let first = parse(&[0, 0, 0, 0, 7, 0, 42], None, true).unwrap();
        assert_eq!(first.message_indexes, vec![0]);
        assert_eq!(first.payload, &[42]);
        // Count 2 (zigzag 4), then 1 (2) and 0 (0): the first nested message of the second.
        let nested = parse(&[0, 0, 0, 0, 7, 4, 2, 0, 42], None, true).unwrap();
        assert_eq!(nested.message_indexes, vec![1, 0]);
        assert_eq!(nested.payload, &[42]);
        assert!(parse(&[0, 0, 0, 0, 7, 4, 2], None, true).is_err());
        // A negative count (zigzag 1 = -1).
        assert!(parse(&[0, 0, 0, 0, 7, 1], None, true).is_err());
    }

    #[test]
    fn magic_one_with_a_guid_in_the_header() {
        let mut header = vec![1u8];
        header.extend(0x10..0x20u8);
        let frame = parse(b"payload", Some(&header), false).unwrap();
        assert_eq!(
            frame.schema,
            SchemaRef::Guid("10111213-1415-1617-1819-1a1b1c1d1e1f".into())
        );
        assert_eq!(frame.payload, b"payload");
        // The same frame as a prefix.
        let mut prefixed = header.clone();
        prefixed.extend_from_slice(b"xy");
        assert_eq!(parse(&prefixed, None, false).unwrap().payload, b"xy");
        // A header with more than the frame.
        header.push(5);
        assert!(parse(b"p", Some(&header), false).is_err());
    }

    #[test]
    fn bad_frames_say_why() {
        assert!(parse(&[], None, false).unwrap_err().contains("empty"));
        assert!(
            parse(&[0, 0, 1], None, false)
                .unwrap_err()
                .contains("too short")
        );
        assert!(parse(&[1, 0, 1], None, false).unwrap_err().contains("guid"));
        let json = parse(b"{\"a\":1}", None, false).unwrap_err();
        assert!(json.contains("magic byte 123"), "{json}");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64), protobuf: bool, header: Option<Vec<u8>>) {
            if let Ok(frame) = parse(&data, header.as_deref(), protobuf) {
                prop_assert!(frame.payload.len() <= data.len());
            }
        }
    }
}
