//! Avro: a writer schema, parsed once into a tree of nodes, decodes binary datums straight
//! into `serde_json::Value` in sluice's decoded forms (docs/formats.md), and describes
//! itself in sluice's vocabulary ([`FieldType`]).
//!
//! - [`parse`]: schema text (and the texts of the schemas it references) to nodes, named
//!   types resolved by [`names`];
//! - [`decode`]: the binary encoding, read with a cursor over the bytes;
//! - [`default`]: a field's default in the decoded form, for the shape.
//!
//! The nodes live in one `Vec` and refer to each other by index, so a datum is decoded
//! without a single name lookup, and a recursive type (a record that holds itself through
//! a union or an array) is just an index back to an earlier node.

mod decode;
mod default;
mod names;
mod parse;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod tests;

use serde_json::Value;

use super::RegisteredSchema;
use super::shape::{Field, FieldType, TimeUnit};

/// An Avro schema, parsed, its named types resolved, ready to decode datums written with it.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    /// Every node; children by index into this.
    nodes: Vec<Node>,
    /// The node of the schema itself (the references' named types are nodes too).
    root: NodeId,
}

/// Index of a node in [`AvroSchema::nodes`].
type NodeId = usize;

/// One type of a parsed schema. Logical types the schema gave on a fitting underlying type
/// are nodes of their own; those on a wrong type, or with bad parameters, were dropped
/// (as the specification says), leaving the underlying type.
#[derive(Debug, Clone)]
enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed {
        name: String,
        size: usize,
    },
    Enum {
        name: String,
        symbols: Vec<String>,
    },
    /// `item_min`: the fewest bytes one item takes, so a block count can be checked against
    /// the bytes left before anything is allocated.
    Array {
        items: NodeId,
        item_min: usize,
    },
    /// `value_min`: the fewest bytes one value takes (its key takes one more at least).
    Map {
        values: NodeId,
        value_min: usize,
    },
    Record {
        name: String,
        fields: Vec<RecordField>,
    },
    /// `["null", T]` or `[T, "null"]`: decoded as T's form or null.
    Nullable {
        null_index: i64,
        inner: NodeId,
    },
    /// Any other union, decoded as `{"<branch name>": value}` (null for a null branch).
    Union(Vec<Branch>),
    /// `decimal` on `bytes` (`size` None) or on a `fixed` of `size` bytes; `precision`
    /// `None` for Connect's `Decimal` without `connect.decimal.precision`.
    Decimal {
        precision: Option<u32>,
        scale: u32,
        size: Option<usize>,
    },
    /// `uuid` on `string`, or a `string` Confluent's converter names `io.debezium.data.Uuid`:
    /// the text as written.
    Uuid,
    /// An `int` Confluent's converter marks `connect.type` `int16` or `int8` (Connect's
    /// 16- and 8-bit integers): decoded as an `int`.
    Short,
    /// A `string` named `io.debezium.time.ZonedTimestamp`: an instant as ISO 8601 text
    /// with its offset, decoded as that text.
    ZonedTimestamp,
    /// A `string` named `io.debezium.data.Json`: a JSON document as text, decoded as that
    /// text.
    JsonText,
    /// `uuid` on `fixed(16)`: the 16 bytes as canonical lowercase text.
    UuidFixed,
    /// `date` on `int`.
    Date,
    /// `time-millis` on `int`, `time-micros` on `long`.
    Time(TimeUnit),
    /// `timestamp-*` on `long`.
    Timestamp(TimeUnit),
    /// `local-timestamp-*` on `long`.
    LocalTimestamp(TimeUnit),
    /// `duration` on `fixed(12)`: months, days, milliseconds (little-endian u32 each).
    Duration {
        name: String,
    },
    /// Debezium's `io.debezium.data.VariableScaleDecimal`, a record of `scale` (int) and
    /// `value` (bytes, the unscaled two's complement): decoded as the decimal's text.
    VariableScaleDecimal,
}

/// A field of a record node.
#[derive(Debug, Clone)]
struct RecordField {
    name: String,
    node: NodeId,
    /// The schema's `default`, as written (converted for the shape by [`default`]).
    default: Option<Value>,
}

/// A branch of a union node: the name Avro's JSON encoding gives it (a primitive name,
/// `array`, `map`, or a named type's full name) and its node.
#[derive(Debug, Clone)]
struct Branch {
    name: String,
    node: NodeId,
}

/// How deep [`AvroSchema::shape`] expands types, and how many it expands in all, before it
/// gives [`FieldType::Json`] instead: a schema whose named types refer to each other
/// many times over would otherwise expand to a shape exponentially large.
const SHAPE_DEPTH: usize = 64;
const SHAPE_BUDGET: usize = 100_000;

impl AvroSchema {
    /// The schema `text` (Avro JSON: a primitive name string, record, enum, array, map,
    /// fixed, union list), after the `references` define their named types, in order
    /// (each is schema text that defines named types, referenced by full name).
    pub fn parse(text: &str, references: &[&str]) -> Result<AvroSchema, String> {
        let (nodes, root) = parse::parse(text, references)?;
        Ok(AvroSchema { nodes, root })
    }

    /// Parse a RegisteredSchema: its references_in_order() texts first, then its text.
    pub fn from_registered(schema: &RegisteredSchema) -> Result<AvroSchema, String> {
        let ordered = schema.references_in_order();
        let mut texts = Vec::with_capacity(ordered.len());
        for (name, reference) in &ordered {
            if reference.schema_type != super::SchemaType::Avro {
                return Err(format!(
                    "reference `{name}` is a {} schema, not Avro",
                    reference.schema_type.name()
                ));
            }
            texts.push(reference.text.as_str());
        }
        AvroSchema::parse(&schema.text, &texts)
    }

    /// Decodes one datum (binary encoding, writer schema = this one). All bytes must be
    /// consumed: trailing bytes are an error.
    pub fn decode(&self, datum: &[u8]) -> Result<Value, String> {
        decode::decode(&self.nodes, self.root, datum)
    }

    /// The schema in sluice's vocabulary. A record met again inside itself (a recursive
    /// type) is given as `FieldType::Record { name, fields: vec![] }` there; types nested
    /// deeper than 64, or past the 100,000th expanded, as [`FieldType::Json`]. A
    /// `duration` is a record of `months`, `days` and `millis` (its decoded form).
    pub fn shape(&self) -> FieldType {
        let mut shaper = Shaper {
            nodes: &self.nodes,
            expanding: Vec::new(),
            depth: 0,
            budget: SHAPE_BUDGET,
        };
        shaper.shape(self.root)
    }
}

/// Builds the shape, knowing which records it is inside (for recursion).
struct Shaper<'a> {
    nodes: &'a [Node],
    expanding: Vec<NodeId>,
    depth: usize,
    budget: usize,
}

impl Shaper<'_> {
    fn shape(&mut self, id: NodeId) -> FieldType {
        if self.depth >= SHAPE_DEPTH || self.budget == 0 {
            return FieldType::Json;
        }
        self.budget -= 1;
        self.depth += 1;
        let shape = self.node(id);
        self.depth -= 1;
        shape
    }

    fn node(&mut self, id: NodeId) -> FieldType {
        let Some(node) = self.nodes.get(id) else {
            return FieldType::Json;
        };
        match node {
            Node::Null => FieldType::Null,
            Node::Boolean => FieldType::Boolean,
            Node::Int => FieldType::Int32,
            Node::Short => FieldType::Int16,
            Node::ZonedTimestamp => FieldType::Timestamp(TimeUnit::Micros),
            Node::JsonText => FieldType::JsonText,
            Node::Long => FieldType::Int64,
            Node::Float => FieldType::Float32,
            Node::Double => FieldType::Float64,
            Node::Bytes => FieldType::Bytes,
            Node::String => FieldType::String,
            Node::Fixed { name, size } => FieldType::Fixed {
                name: name.clone(),
                size: *size,
            },
            Node::Enum { name, symbols } => FieldType::Enum {
                name: name.clone(),
                symbols: symbols.clone(),
            },
            Node::Array { items, .. } => FieldType::Array(Box::new(self.shape(*items))),
            Node::Map { values, .. } => FieldType::Map(Box::new(self.shape(*values))),
            Node::Record { name, fields } => {
                if self.expanding.contains(&id) {
                    return FieldType::Record {
                        name: name.clone(),
                        fields: vec![],
                    };
                }
                self.expanding.push(id);
                let fields = fields.iter().map(|f| self.field(f)).collect();
                self.expanding.pop();
                FieldType::Record {
                    name: name.clone(),
                    fields,
                }
            }
            Node::Nullable { inner, .. } => self.shape(*inner),
            Node::Union(branches) => {
                let mut shapes = Vec::with_capacity(branches.len());
                for branch in branches {
                    if !matches!(self.nodes.get(branch.node), Some(Node::Null)) {
                        shapes.push(self.shape(branch.node));
                    }
                }
                if shapes.is_empty() {
                    FieldType::Null
                } else {
                    FieldType::Union(shapes)
                }
            }
            Node::Decimal {
                precision, scale, ..
            } => FieldType::Decimal {
                precision: *precision,
                scale: *scale,
            },
            Node::VariableScaleDecimal => FieldType::Decimal {
                precision: None,
                scale: 0,
            },
            Node::Uuid | Node::UuidFixed => FieldType::Uuid,
            Node::Date => FieldType::Date,
            Node::Time(unit) => FieldType::Time(*unit),
            Node::Timestamp(unit) => FieldType::Timestamp(*unit),
            Node::LocalTimestamp(unit) => FieldType::LocalTimestamp(*unit),
            Node::Duration { name } => FieldType::Record {
                name: name.clone(),
                fields: ["months", "days", "millis"]
                    .into_iter()
                    .map(|part| Field {
                        name: part.into(),
                        field_type: FieldType::Int64,
                        optional: false,
                        default: None,
                    })
                    .collect(),
            },
        }
    }

    fn field(&mut self, field: &RecordField) -> Field {
        let optional = match self.nodes.get(field.node) {
            Some(Node::Nullable { .. }) => true,
            Some(Node::Union(branches)) => branches
                .iter()
                .any(|b| matches!(self.nodes.get(b.node), Some(Node::Null))),
            _ => false,
        };
        Field {
            name: field.name.clone(),
            field_type: self.shape(field.node),
            optional,
            default: field
                .default
                .as_ref()
                .map(|raw| default::decoded_form(self.nodes, field.node, raw)),
        }
    }
}
