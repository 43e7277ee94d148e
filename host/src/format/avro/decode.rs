//! Avro's binary encoding, read with a cursor over the datum's bytes into
//! `serde_json::Value` in sluice's decoded forms (docs/formats.md).
//!
//! Integers are zig-zag varints (10 bytes at most); floats are little-endian; bytes and
//! strings are a length then the bytes; arrays and maps are blocks, each a count (negative:
//! its absolute value, then the block's size in bytes) until a count of 0; a union is the
//! branch's index then its value. Every length and count is checked against the bytes
//! left before anything is allocated for it, and nesting is bounded, so no datum can make
//! the decoder allocate or recurse much beyond its own size.

use std::fmt::Write as _;
use std::io::Write as _;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Number, Value};

use super::super::shape::TimeUnit;
use super::super::temporal;
use super::{Node, NodeId};

/// Most records, arrays and maps nested inside each other in one datum (a recursive
/// schema has no depth of its own).
pub const MAX_DEPTH: usize = 128;

/// Most array items that take no bytes (nulls, empty records) in one datum: their count
/// cannot be checked against the bytes left.
pub const MAX_EMPTY_ITEMS: usize = 100_000;

/// Most items reserved for at once: a count is checked against the bytes left, but one
/// item's `Value` is far larger than its fewest bytes, so a false count would still make a
/// large allocation; past this the array grows as its items come.
const RESERVE_AT_MOST: usize = 4096;

/// Decodes one datum written with the schema of `nodes` (root `root`); every byte must
/// belong to it.
pub(super) fn decode(nodes: &[Node], root: NodeId, datum: &[u8]) -> Result<Value, String> {
    let mut decoder = Decoder {
        nodes,
        bytes: datum,
        pos: 0,
        depth: 0,
        empty_items: MAX_EMPTY_ITEMS,
    };
    let value = decoder.value(root).map_err(|failure| failure.message())?;
    if decoder.pos != datum.len() {
        let left = datum.len().saturating_sub(decoder.pos);
        return Err(format!(
            "{left} byte{} left after the datum's end at byte {} of {} (written with another \
             schema?)",
            if left == 1 { " is" } else { "s are" },
            decoder.pos,
            datum.len()
        ));
    }
    Ok(value)
}

/// Why a datum did not decode: what, at which byte, inside which fields, items or keys.
struct Failure {
    message: String,
    at: usize,
    /// Innermost first.
    path: Vec<Step>,
}

enum Step {
    Field(String),
    Index(usize),
    Key(String),
}

impl Failure {
    fn within(mut self: Box<Self>, step: Step) -> Box<Self> {
        self.path.push(step);
        self
    }

    fn message(&self) -> String {
        let mut path = String::new();
        for step in self.path.iter().rev() {
            match step {
                Step::Field(name) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(name);
                }
                Step::Index(i) => {
                    let _ = write!(path, "[{i}]");
                }
                Step::Key(key) => {
                    let _ = write!(path, "[{key:?}]");
                }
            }
        }
        if path.is_empty() {
            format!("{} (at byte {})", self.message, self.at)
        } else {
            format!("at `{path}`: {} (at byte {})", self.message, self.at)
        }
    }
}

type Decoded<T> = Result<T, Box<Failure>>;

struct Decoder<'a> {
    nodes: &'a [Node],
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    empty_items: usize,
}

impl<'a> Decoder<'a> {
    fn fail(&self, message: impl Into<String>) -> Box<Failure> {
        Box::new(Failure {
            message: message.into(),
            at: self.pos,
            path: Vec::new(),
        })
    }

    /// A failure of the value that starts at byte `start`.
    fn fail_at(&self, start: usize, message: impl Into<String>) -> Box<Failure> {
        let mut failure = self.fail(message);
        failure.at = start;
        failure
    }

    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &str) -> Decoded<&'a [u8]> {
        let bytes: &'a [u8] = self.bytes;
        match self
            .pos
            .checked_add(n)
            .and_then(|end| bytes.get(self.pos..end))
        {
            Some(taken) => {
                self.pos += n;
                Ok(taken)
            }
            None => Err(self.fail(format!(
                "{what} needs {n} bytes, but {} are left",
                self.left()
            ))),
        }
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Decoded<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// A zig-zag varint of 64 bits.
    fn long(&mut self) -> Decoded<i64> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&byte) = self.bytes.get(self.pos) else {
                return Err(self.fail("the datum ends inside a number"));
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(self.fail("a number longer than 64 bits (a varint of over 10 bytes)"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(self.fail("a number longer than 64 bits (a varint of over 10 bytes)"))
    }

    fn int(&mut self) -> Decoded<i32> {
        let start = self.pos;
        let value = self.long()?;
        i32::try_from(value)
            .map_err(|_| self.fail_at(start, format!("{value} is out of an int's range")))
    }

    /// A length prefix, checked against the bytes left.
    fn length(&mut self, what: &str) -> Decoded<usize> {
        let length = self.long()?;
        match usize::try_from(length) {
            Ok(n) if n <= self.left() => Ok(n),
            Ok(n) => Err(self.fail(format!("{what} of {n} bytes, but {} are left", self.left()))),
            Err(_) => Err(self.fail(format!("{what} of negative length {length}"))),
        }
    }

    fn string(&mut self) -> Decoded<String> {
        let n = self.length("a string")?;
        let start = self.pos;
        let bytes = self.take(n, "a string")?;
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(text.to_owned()),
            Err(e) => Err(self.fail_at(start, format!("a string that is not UTF-8: {e}"))),
        }
    }

    fn enter(&mut self) -> Decoded<()> {
        if self.depth >= MAX_DEPTH {
            return Err(self.fail(format!(
                "records, arrays and maps nested deeper than {MAX_DEPTH}"
            )));
        }
        self.depth += 1;
        Ok(())
    }

    /// The count of the next block of items each at least `least` bytes (0: no more).
    fn block(&mut self, least: usize) -> Decoded<usize> {
        let count = self.long()?;
        if count < 0 {
            let size = self.long()?;
            if usize::try_from(size).map_or(true, |size| size > self.left()) {
                return Err(self.fail(format!(
                    "a block of {size} bytes, but {} are left",
                    self.left()
                )));
            }
        }
        let count = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
        match self.left().checked_div(least) {
            Some(most) if count > most => {
                return Err(self.fail(format!(
                    "a block of {count} items of {least} bytes or more, but {} bytes are left",
                    self.left()
                )));
            }
            Some(_) => {}
            // Items of no bytes: counted against the datum's allowance.
            None if count > self.empty_items => {
                return Err(self.fail(format!(
                    "more than {MAX_EMPTY_ITEMS} items that take no bytes (nulls, empty records)"
                )));
            }
            None => self.empty_items -= count,
        }
        Ok(count)
    }

    fn value(&mut self, id: NodeId) -> Decoded<Value> {
        let nodes = self.nodes;
        let Some(node) = nodes.get(id) else {
            return Err(self.fail(format!("no schema node {id}")));
        };
        let start = self.pos;
        Ok(match node {
            Node::Null => Value::Null,
            Node::Boolean => match self.take(1, "a boolean")? {
                [0] => Value::Bool(false),
                [1] => Value::Bool(true),
                other => {
                    return Err(
                        self.fail_at(start, format!("a boolean byte {other:?}, not 0 or 1"))
                    );
                }
            },
            Node::Int | Node::Short => Value::from(self.int()?),
            Node::Long => Value::from(self.long()?),
            Node::Float => float(f32::from_le_bytes(self.fixed("a float")?)),
            Node::Double => double(f64::from_le_bytes(self.fixed("a double")?)),
            Node::Bytes => {
                let n = self.length("bytes")?;
                base64(self.take(n, "bytes")?)
            }
            Node::String | Node::Uuid | Node::ZonedTimestamp | Node::JsonText => {
                Value::String(self.string()?)
            }
            Node::Fixed { size, .. } => base64(self.take(*size, "a fixed")?),
            Node::Enum { symbols, name } => {
                let index = self.int()?;
                let symbol = usize::try_from(index).ok().and_then(|i| symbols.get(i));
                match symbol {
                    Some(symbol) => Value::String(symbol.clone()),
                    None => {
                        return Err(self.fail_at(
                            start,
                            format!(
                                "enum `{name}` index {index}, but it has {} symbols",
                                symbols.len()
                            ),
                        ));
                    }
                }
            }
            Node::Array { items, item_min } => self.array(*items, *item_min)?,
            Node::Map { values, value_min } => self.map(*values, *value_min)?,
            Node::Record { fields, .. } => {
                self.enter()?;
                let mut object = Map::with_capacity(fields.len());
                for field in fields {
                    let value = self
                        .value(field.node)
                        .map_err(|e| e.within(Step::Field(field.name.clone())))?;
                    object.insert(field.name.clone(), value);
                }
                self.depth -= 1;
                Value::Object(object)
            }
            Node::Nullable { null_index, inner } => match self.long()? {
                index if index == *null_index => Value::Null,
                index if index == 1 - *null_index => self.value(*inner)?,
                index => {
                    return Err(
                        self.fail_at(start, format!("union branch {index} of a union of 2"))
                    );
                }
            },
            Node::Union(branches) => {
                let index = self.long()?;
                let Some(branch) = usize::try_from(index).ok().and_then(|i| branches.get(i)) else {
                    return Err(self.fail_at(
                        start,
                        format!("union branch {index} of a union of {}", branches.len()),
                    ));
                };
                match nodes.get(branch.node) {
                    Some(Node::Null) => Value::Null,
                    _ => {
                        let value = self.value(branch.node)?;
                        let mut wrapped = Map::with_capacity(1);
                        wrapped.insert(branch.name.clone(), value);
                        Value::Object(wrapped)
                    }
                }
            }
            Node::Decimal { scale, size, .. } => {
                let unscaled = match size {
                    Some(size) => self.take(*size, "a decimal")?,
                    None => {
                        let n = self.length("a decimal")?;
                        self.take(n, "a decimal")?
                    }
                };
                Value::String(
                    temporal::decimal(unscaled, *scale).map_err(|e| self.fail_at(start, e))?,
                )
            }
            Node::VariableScaleDecimal => {
                let scale = self.int()?;
                let n = self.length("a decimal")?;
                let unscaled = self.take(n, "a decimal")?;
                let scale = u32::try_from(scale).map_err(|_| {
                    self.fail_at(start, format!("a negative decimal scale {scale}"))
                })?;
                Value::String(
                    temporal::decimal(unscaled, scale).map_err(|e| self.fail_at(start, e))?,
                )
            }
            Node::UuidFixed => Value::String(uuid_text(&self.fixed("a uuid")?)),
            Node::Duration { .. } => duration(&self.fixed("a duration")?),
            Node::Date => {
                let days = self.int()?;
                self.form(start, temporal::date(i64::from(days)))?
            }
            Node::Time(TimeUnit::Millis) => {
                let millis = self.int()?;
                self.form(start, temporal::time(i64::from(millis), TimeUnit::Millis))?
            }
            Node::Time(unit) => {
                let value = self.long()?;
                self.form(start, temporal::time(value, *unit))?
            }
            Node::Timestamp(unit) => {
                let value = self.long()?;
                self.form(start, temporal::timestamp(value, *unit))?
            }
            Node::LocalTimestamp(unit) => {
                let value = self.long()?;
                self.form(start, temporal::local_timestamp(value, *unit))?
            }
        })
    }

    /// A decoded form, or why the value has none (out of range).
    fn form(&self, start: usize, text: Result<String, String>) -> Decoded<Value> {
        text.map(Value::String).map_err(|e| self.fail_at(start, e))
    }

    fn array(&mut self, items: NodeId, least: usize) -> Decoded<Value> {
        self.enter()?;
        let mut count = self.block(least)?;
        let mut array = Vec::with_capacity(count.min(RESERVE_AT_MOST));
        while count > 0 {
            array.reserve(count.min(RESERVE_AT_MOST));
            for _ in 0..count {
                let index = array.len();
                let value = self
                    .value(items)
                    .map_err(|e| e.within(Step::Index(index)))?;
                array.push(value);
            }
            count = self.block(least)?;
        }
        self.depth -= 1;
        Ok(Value::Array(array))
    }

    fn map(&mut self, values: NodeId, least: usize) -> Decoded<Value> {
        self.enter()?;
        // Each entry: a key (a length at least) and a value.
        let least = least.saturating_add(1);
        let mut count = self.block(least)?;
        let mut object = Map::with_capacity(count.min(RESERVE_AT_MOST));
        while count > 0 {
            for _ in 0..count {
                let key = self.string()?;
                match self.value(values) {
                    Ok(value) => object.insert(key, value),
                    Err(e) => return Err(e.within(Step::Key(key))),
                };
            }
            count = self.block(least)?;
        }
        self.depth -= 1;
        Ok(Value::Object(object))
    }
}

/// A float as JSON: its shortest decimal (`0.1`, not `0.10000000149011612` as widening to
/// f64 would give); NaN and the infinities as the strings `"NaN"`, `"Infinity"`,
/// `"-Infinity"`.
fn float(value: f32) -> Value {
    if !value.is_finite() {
        return double(f64::from(value));
    }
    let mut buffer = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let shortest = match write!(cursor, "{value}") {
        Ok(()) => {
            let written = usize::try_from(cursor.position()).unwrap_or(0);
            std::str::from_utf8(buffer.get(..written).unwrap_or_default())
                .ok()
                .and_then(|text| text.parse::<f64>().ok())
        }
        Err(_) => value.to_string().parse::<f64>().ok(),
    };
    double(shortest.unwrap_or(f64::from(value)))
}

/// A double as JSON; NaN and the infinities as strings (JSON has no such numbers).
fn double(value: f64) -> Value {
    match Number::from_f64(value) {
        Some(number) => Value::Number(number),
        None if value.is_nan() => Value::String("NaN".into()),
        None if value > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}
/// Bytes in the decoded form, `{"base64": "…"}`.
pub(super) fn base64(bytes: &[u8]) -> Value {
    let mut object = Map::with_capacity(1);
    object.insert("base64".into(), Value::String(STANDARD.encode(bytes)));
    Value::Object(object)
}

/// 16 bytes as a UUID's canonical text, `8-4-4-4-12` lowercase hex digits.
pub(super) fn uuid_text(bytes: &[u8; 16]) -> String {
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        for nibble in [byte >> 4, byte & 0x0f] {
            text.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
        }
    }
    text
}

/// An Avro `duration`'s 12 bytes (three little-endian u32: months, days, milliseconds) in
/// the decoded form `{"months": n, "days": n, "millis": n}`.
pub(super) fn duration(bytes: &[u8; 12]) -> Value {
    let mut object = Map::with_capacity(3);
    for (name, le) in ["months", "days", "millis"]
        .into_iter()
        .zip(bytes.chunks_exact(4))
    {
        let part = <[u8; 4]>::try_from(le).map_or(0, u32::from_le_bytes);
        object.insert(name.into(), Value::from(part));
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder(bytes: &[u8]) -> Decoder<'_> {
        Decoder {
            nodes: &[],
            bytes,
            pos: 0,
            depth: 0,
            empty_items: MAX_EMPTY_ITEMS,
        }
    }

    #[test]
    fn varints_at_their_limits() {
        for (bytes, expected) in [
            (vec![0x00], 0),
            (vec![0x01], -1),
            (vec![0x02], 1),
            (vec![0x7f], -64),
            (vec![0x80, 0x01], 64),
            (
                vec![0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                i64::MAX,
            ),
            (
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                i64::MIN,
            ),
        ] {
            let mut d = decoder(&bytes);
            assert_eq!(d.long().ok(), Some(expected), "{bytes:x?}");
            assert_eq!(d.pos, bytes.len());
        }
        // A redundant but valid encoding of 0 in 10 bytes; an 11th byte is refused.
        let mut long_zero = vec![0x80; 9];
        long_zero.push(0x00);
        assert_eq!(decoder(&long_zero).long().ok(), Some(0));
        assert!(decoder(&[0x80; 10]).long().is_err());
        assert!(decoder(&[]).long().is_err());
    }

    #[test]
    fn floats_at_their_shortest() {
        assert_eq!(float(0.1), json_number(0.1));
        assert_eq!(float(-1.5e-7), json_number(-1.5e-7));
        assert_eq!(float(f32::MAX), json_number(3.4028235e38));
        assert_eq!(float(f32::MIN_POSITIVE / 8.0), json_number(1.469368e-39));
        assert_eq!(float(f32::NAN), Value::String("NaN".into()));
        assert_eq!(float(f32::NEG_INFINITY), Value::String("-Infinity".into()));
        assert_eq!(double(f64::INFINITY), Value::String("Infinity".into()));
    }

    fn json_number(value: f64) -> Value {
        Value::Number(Number::from_f64(value).unwrap())
    }

    #[test]
    fn uuids_and_durations() {
        let bytes: [u8; 16] = core::array::from_fn(|i| (i as u8) * 17);
        assert_eq!(uuid_text(&bytes), "00112233-4455-6677-8899-aabbccddeeff");
        let mut raw = [0u8; 12];
        raw[0] = 1;
        raw[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        raw[8] = 2;
        assert_eq!(
            duration(&raw),
            serde_json::json!({"months": 1, "days": 4_294_967_295u32, "millis": 2})
        );
    }
}
