//! Schema text to nodes: each type of the schema becomes a [`Node`], named types are
//! defined as they are met (so a record can refer to itself from inside its fields), and
//! every reference to a name becomes the index of its node.
//!
//! The references' texts are compiled first, with the same names, so the schema can use
//! the named types they define. Logical types are kept only on the underlying types the
//! specification gives them, with valid parameters; anything else drops the logical type
//! and keeps the underlying type, as the specification says.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::super::shape::TimeUnit;
use super::names;
use super::{Branch, Node, NodeId, RecordField};

/// Nodes, and the index of the schema's own, from the schema text and its references'.
pub(super) fn parse(text: &str, references: &[&str]) -> Result<(Vec<Node>, NodeId), String> {
    let mut compiler = Compiler::new();
    for (i, reference) in references.iter().enumerate() {
        json(reference)
            .and_then(|schema| compiler.compile(&schema, ""))
            .map_err(|e| format!("reference {} of {}: {e}", i + 1, references.len()))?;
    }
    let root = compiler.compile(&json(text)?, "")?;
    Ok((compiler.finish(), root))
}

/// Schema text as JSON. A file may start with a byte order mark; a bare primitive name
/// (`string`, not `"string"`) is taken as that name.
fn json(text: &str) -> Result<Value, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(text).or_else(|e| match text.trim() {
        bare if names::is_primitive(bare) => Ok(Value::String(bare.to_owned())),
        _ => Err(format!("the schema is not JSON: {e}")),
    })
}

/// The nodes made so far and the named types defined so far.
struct Compiler {
    nodes: Vec<Node>,
    /// The full name of each node that is a named type (parallel to `nodes`).
    named: Vec<Option<String>>,
    by_name: HashMap<String, NodeId>,
}

/// The primitive types' nodes come first, at these indexes, shared by every use.
const PRIMITIVE_NODES: [Node; 8] = [
    Node::Null,
    Node::Boolean,
    Node::Int,
    Node::Long,
    Node::Float,
    Node::Double,
    Node::Bytes,
    Node::String,
];

impl Compiler {
    fn new() -> Compiler {
        Compiler {
            nodes: PRIMITIVE_NODES.to_vec(),
            named: vec![None; PRIMITIVE_NODES.len()],
            by_name: HashMap::new(),
        }
    }

    fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.named.push(None);
        self.nodes.len() - 1
    }

    /// Defines the named type `full` (its node to be set once built, so that its insides
    /// can refer to it).
    fn define(&mut self, full: &str) -> Result<NodeId, String> {
        if self.by_name.contains_key(full) {
            return Err(format!("the type `{full}` is defined twice"));
        }
        let id = self.push(Node::Null);
        if let Some(slot) = self.named.get_mut(id) {
            *slot = Some(full.to_owned());
        }
        self.by_name.insert(full.to_owned(), id);
        Ok(id)
    }

    fn set(&mut self, id: NodeId, node: Node) {
        if let Some(slot) = self.nodes.get_mut(id) {
            *slot = node;
        }
    }

    /// Compiles one schema written inside the namespace `space`.
    fn compile(&mut self, schema: &Value, space: &str) -> Result<NodeId, String> {
        match schema {
            Value::String(name) => self.reference(name, space),
            Value::Array(branches) => self.union(branches, space),
            Value::Object(object) => self.object(object, space),
            other => Err(format!(
                "expected a schema (a type name, an object with a `type`, or a union list), \
                 found `{other}`"
            )),
        }
    }

    /// A type name: a primitive, or a named type defined before this point.
    fn reference(&mut self, name: &str, space: &str) -> Result<NodeId, String> {
        if let Some(id) = names::PRIMITIVES.iter().position(|p| *p == name) {
            return Ok(id);
        }
        let candidates = names::candidates(name, space);
        if let Some(id) = candidates.iter().find_map(|c| self.by_name.get(c)) {
            return Ok(*id);
        }
        let mut known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        known.sort_unstable();
        let known = match known.len() {
            0 => "no named type is defined before it".to_owned(),
            n if n <= 8 => format!("the named types defined before it: {}", known.join(", ")),
            n => format!(
                "{n} named types are defined before it, among them {}",
                known.get(..8).unwrap_or_default().join(", ")
            ),
        };
        Err(format!(
            "unknown type `{}`: not a primitive type, and {known}",
            candidates.join("` or `")
        ))
    }

    /// A schema object: `{"type": …, …}`.
    fn object(&mut self, object: &Map<String, Value>, space: &str) -> Result<NodeId, String> {
        let kind = match object.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            // `{"type": {…}}` or `{"type": [...]}`: the schema inside.
            Some(inner @ (Value::Object(_) | Value::Array(_))) => {
                return self.compile(inner, space);
            }
            Some(other) => return Err(format!("a schema's `type` is `{other}`, not a name")),
            None => return Err("a schema object has no `type`".into()),
        };
        match kind {
            "record" | "error" => self.record(object, space),
            "enum" => self.enumeration(object, space),
            "fixed" => self.fixed(object, space),
            "array" => {
                let items = object.get("items").ok_or("an array has no `items`")?;
                let items = self
                    .compile(items, space)
                    .map_err(|e| format!("array items: {e}"))?;
                Ok(self.push(Node::Array { items, item_min: 0 }))
            }
            "map" => {
                let values = object.get("values").ok_or("a map has no `values`")?;
                let values = self
                    .compile(values, space)
                    .map_err(|e| format!("map values: {e}"))?;
                Ok(self.push(Node::Map {
                    values,
                    value_min: 0,
                }))
            }
            primitive if names::is_primitive(primitive) => {
                match primitive_logical(object, primitive) {
                    Some(node) => Ok(self.push(node)),
                    None => self.reference(primitive, space),
                }
            }
            // A named type by name; attributes beside it do not change it.
            name => self.reference(name, space),
        }
    }

    fn record(&mut self, object: &Map<String, Value>, space: &str) -> Result<NodeId, String> {
        let full = full_name(object, space, "record")?;
        let list = object
            .get("fields")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("record `{full}` has no `fields` list"))?;
        let id = self.define(&full)?;
        let inner = names::namespace_of(&full).to_owned();
        let mut fields: Vec<RecordField> = Vec::with_capacity(list.len());
        // The names so far, to find a duplicate without a scan per field.
        let mut seen: HashSet<&str> = HashSet::with_capacity(list.len());
        for (i, field) in list.iter().enumerate() {
            let name = field
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("field {i} of record `{full}` has no `name`"))?;
            let at = format!("field `{name}` of record `{full}`");
            names::check_simple(name).map_err(|e| format!("{at}: {e}"))?;
            if !seen.insert(name) {
                return Err(format!("record `{full}` has two fields `{name}`"));
            }
            let schema = field
                .get("type")
                .ok_or_else(|| format!("{at} has no `type`"))?;
            let node = self
                .compile(schema, &inner)
                .map_err(|e| format!("{at}: {e}"))?;
            fields.push(RecordField {
                name: name.to_owned(),
                node,
                default: field.get("default").cloned(),
            });
        }
        // Debezium's decimal of a column without a fixed scale: `{scale: int, value: bytes}`.
        let variable_scale = full == "io.debezium.data.VariableScaleDecimal"
            && fields.len() == 2
            && fields[0].name == "scale"
            && fields[1].name == "value"
            && matches!(self.nodes.get(fields[0].node), Some(Node::Int))
            && matches!(self.nodes.get(fields[1].node), Some(Node::Bytes));
        if variable_scale {
            self.set(id, Node::VariableScaleDecimal);
        } else {
            self.set(id, Node::Record { name: full, fields });
        }
        Ok(id)
    }

    fn enumeration(&mut self, object: &Map<String, Value>, space: &str) -> Result<NodeId, String> {
        let full = full_name(object, space, "enum")?;
        let list = object
            .get("symbols")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("enum `{full}` has no `symbols` list"))?;
        let mut symbols: Vec<String> = Vec::with_capacity(list.len());
        let mut seen: HashSet<&str> = HashSet::with_capacity(list.len());
        for symbol in list {
            let symbol = symbol
                .as_str()
                .ok_or_else(|| format!("enum `{full}` has a symbol `{symbol}` not a string"))?;
            names::check_simple(symbol).map_err(|e| format!("enum `{full}`: {e}"))?;
            if !seen.insert(symbol) {
                return Err(format!("enum `{full}` has the symbol `{symbol}` twice"));
            }
            symbols.push(symbol.to_owned());
        }
        let id = self.define(&full)?;
        self.set(
            id,
            Node::Enum {
                name: full,
                symbols,
            },
        );
        Ok(id)
    }

    fn fixed(&mut self, object: &Map<String, Value>, space: &str) -> Result<NodeId, String> {
        let full = full_name(object, space, "fixed")?;
        let size = object
            .get("size")
            .and_then(Value::as_u64)
            .and_then(|size| usize::try_from(size).ok())
            .ok_or_else(|| format!("fixed `{full}` has no `size` (a whole number of bytes)"))?;
        let id = self.define(&full)?;
        let logical = object.get("logicalType").and_then(Value::as_str);
        let node = match (logical, size) {
            (Some("decimal"), _) => match decimal_parameters(object, Some(size)) {
                Some((precision, scale)) => Node::Decimal {
                    precision: Some(precision),
                    scale,
                    size: Some(size),
                },
                None => Node::Fixed { name: full, size },
            },
            (Some("uuid"), 16) => Node::UuidFixed,
            (Some("duration"), 12) => Node::Duration { name: full },
            _ => Node::Fixed { name: full, size },
        };
        self.set(id, node);
        Ok(id)
    }

    fn union(&mut self, list: &[Value], space: &str) -> Result<NodeId, String> {
        if list.is_empty() {
            return Err("a union with no branches".into());
        }
        let mut branches: Vec<Branch> = Vec::with_capacity(list.len());
        let mut seen: HashSet<String> = HashSet::with_capacity(list.len());
        for (i, schema) in list.iter().enumerate() {
            let node = self
                .compile(schema, space)
                .map_err(|e| format!("union branch {i}: {e}"))?;
            let name = self.branch_name(node).ok_or_else(|| {
                format!("union branch {i} is a union; a union may not hold one directly")
            })?;
            if !seen.insert(name.clone()) {
                return Err(format!("a union has two `{name}` branches"));
            }
            branches.push(Branch { name, node });
        }
        // By name: a record still being built (a recursive one) is a placeholder node.
        let null_at = branches.iter().position(|b| b.name == "null");
        let node = match (null_at, branches.as_slice()) {
            (Some(0), [_, other]) => Node::Nullable {
                null_index: 0,
                inner: other.node,
            },
            (Some(1), [other, _]) => Node::Nullable {
                null_index: 1,
                inner: other.node,
            },
            _ => Node::Union(branches),
        };
        Ok(self.push(node))
    }

    /// The name Avro's JSON encoding gives a union branch: a named type's full name, else
    /// the underlying type's name. None for a union (which no union may hold).
    fn branch_name(&self, id: NodeId) -> Option<String> {
        if let Some(Some(full)) = self.named.get(id) {
            return Some(full.clone());
        }
        let name = match self.nodes.get(id)? {
            Node::Null => "null",
            Node::Boolean => "boolean",
            Node::Int | Node::Short | Node::Date | Node::Time(TimeUnit::Millis) => "int",
            Node::Long | Node::Time(_) | Node::Timestamp(_) | Node::LocalTimestamp(_) => "long",
            Node::Float => "float",
            Node::Double => "double",
            Node::Bytes | Node::Decimal { .. } => "bytes",
            Node::String | Node::Uuid | Node::ZonedTimestamp | Node::JsonText => "string",
            Node::Array { .. } => "array",
            Node::Map { .. } => "map",
            // Named types have their full name above.
            Node::Fixed { name, .. }
            | Node::Enum { name, .. }
            | Node::Record { name, .. }
            | Node::Duration { name } => name,
            Node::UuidFixed
            | Node::VariableScaleDecimal
            | Node::Nullable { .. }
            | Node::Union(_) => return None,
        };
        Some(name.to_owned())
    }

    /// The nodes, each array's and map's least item size filled in.
    fn finish(mut self) -> Vec<Node> {
        let mut least = vec![None; self.nodes.len()];
        for id in 0..self.nodes.len() {
            let inner = match self.nodes.get(id) {
                Some(Node::Array { items, .. }) => *items,
                Some(Node::Map { values, .. }) => *values,
                _ => continue,
            };
            let min = least_size(&self.nodes, inner, &mut least, 0);
            match self.nodes.get_mut(id) {
                Some(Node::Array { item_min, .. }) => *item_min = min,
                Some(Node::Map { value_min, .. }) => *value_min = min,
                _ => {}
            }
        }
        self.nodes
    }
}

/// The fewest bytes a value of node `id` takes, or less (a type met again inside itself,
/// or nested deeper than 64, counts 0): a lower bound, which is all a length check needs.
fn least_size(nodes: &[Node], id: NodeId, memo: &mut [Option<usize>], depth: usize) -> usize {
    if let Some(Some(known)) = memo.get(id) {
        return *known;
    }
    if depth > 64 {
        return 0;
    }
    if let Some(slot) = memo.get_mut(id) {
        // Meanwhile (recursion): nothing.
        *slot = Some(0);
    }
    let size = match nodes.get(id) {
        None | Some(Node::Null) => 0,
        Some(Node::Float) => 4,
        Some(Node::Double) => 8,
        Some(Node::Fixed { size, .. })
        | Some(Node::Decimal {
            size: Some(size), ..
        }) => *size,
        Some(Node::UuidFixed) => 16,
        Some(Node::Duration { .. }) => 12,
        Some(Node::Record { fields, .. }) => fields.iter().fold(0usize, |sum, f| {
            sum.saturating_add(least_size(nodes, f.node, memo, depth + 1))
        }),
        // A varint, a length, a count or a branch index: one byte at least.
        Some(_) => 1,
    };
    if let Some(slot) = memo.get_mut(id) {
        *slot = Some(size);
    }
    size
}

/// A named type's full name, from its `name` and `namespace` inside `space`.
fn full_name(object: &Map<String, Value>, space: &str, kind: &str) -> Result<String, String> {
    let name = object
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("a {kind} has no `name`"))?;
    let namespace = match object.get("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(namespace)) => Some(namespace.as_str()),
        Some(other) => {
            return Err(format!(
                "{kind} `{name}` has a `namespace` `{other}`, not a string"
            ));
        }
    };
    names::full_name(name, namespace, space)
}

/// The node of a logical type on a primitive, if it is one the specification gives on
/// that primitive with valid parameters.
fn primitive_logical(object: &Map<String, Value>, primitive: &str) -> Option<Node> {
    if let Some(node) = connect_logical(object, primitive) {
        return Some(node);
    }
    let logical = object.get("logicalType").and_then(Value::as_str)?;
    let node = match (primitive, logical) {
        ("bytes", "decimal") => {
            let (precision, scale) = decimal_parameters(object, None)?;
            Node::Decimal {
                precision: Some(precision),
                scale,
                size: None,
            }
        }
        ("string", "uuid") => Node::Uuid,
        ("int", "date") => Node::Date,
        ("int", "time-millis") => Node::Time(TimeUnit::Millis),
        ("long", "time-micros") => Node::Time(TimeUnit::Micros),
        ("long", "timestamp-millis") => Node::Timestamp(TimeUnit::Millis),
        ("long", "timestamp-micros") => Node::Timestamp(TimeUnit::Micros),
        ("long", "timestamp-nanos") => Node::Timestamp(TimeUnit::Nanos),
        ("long", "local-timestamp-millis") => Node::LocalTimestamp(TimeUnit::Millis),
        ("long", "local-timestamp-micros") => Node::LocalTimestamp(TimeUnit::Micros),
        ("long", "local-timestamp-nanos") => Node::LocalTimestamp(TimeUnit::Nanos),
        _ => return None,
    };
    Some(node)
}

/// The Kafka Connect and Debezium semantic types that Confluent's `AvroConverter` names in
/// `connect.name` on a primitive (Debezium writes its times this way, without an Avro
/// logical type): a `MicroTimestamp` is microseconds, never read as milliseconds. A
/// `logicalType` beside it is the same type; `connect.name` decides.
fn connect_logical(object: &Map<String, Value>, primitive: &str) -> Option<Node> {
    if primitive == "int"
        && matches!(
            object.get("connect.type").and_then(Value::as_str),
            Some("int16" | "int8")
        )
        && !object.contains_key("connect.name")
    {
        return Some(Node::Short);
    }
    let name = object.get("connect.name").and_then(Value::as_str)?;
    let node = match (primitive, name) {
        ("string", "io.debezium.data.Uuid") => Node::Uuid,
        ("string", "io.debezium.time.ZonedTimestamp") => Node::ZonedTimestamp,
        ("string", "io.debezium.data.Json") => Node::JsonText,
        ("int", "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date") => Node::Date,
        ("int", "io.debezium.time.Time" | "org.apache.kafka.connect.data.Time") => {
            Node::Time(TimeUnit::Millis)
        }
        ("long", "io.debezium.time.MicroTime") => Node::Time(TimeUnit::Micros),
        ("long", "io.debezium.time.NanoTime") => Node::Time(TimeUnit::Nanos),
        ("long", "org.apache.kafka.connect.data.Timestamp") => Node::Timestamp(TimeUnit::Millis),
        ("long", "io.debezium.time.Timestamp") => Node::LocalTimestamp(TimeUnit::Millis),
        ("long", "io.debezium.time.MicroTimestamp") => Node::LocalTimestamp(TimeUnit::Micros),
        ("long", "io.debezium.time.NanoTimestamp") => Node::LocalTimestamp(TimeUnit::Nanos),
        ("bytes", "org.apache.kafka.connect.data.Decimal") => {
            // `connect.parameters.scale` (text), as Connect writes it; precision from
            // `connect.decimal.precision` when given.
            let parameters = object.get("connect.parameters").and_then(Value::as_object);
            let number = |key: &str| {
                parameters
                    .and_then(|p| p.get(key))
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<u32>().ok())
            };
            let scale = number("scale").or_else(|| {
                object
                    .get("scale")
                    .and_then(Value::as_u64)
                    .and_then(|s| u32::try_from(s).ok())
            })?;
            if scale > crate::format::temporal::MAX_DECIMAL_SCALE {
                return None;
            }
            // Connect's own parameter says whether the source stated a precision: without
            // it, the Avro `precision` is the converter's default, not the source's.
            let precision = number("connect.decimal.precision").map(|p| p.max(scale).max(1));
            Node::Decimal {
                precision,
                scale,
                size: None,
            }
        }
        _ => return None,
    };
    Some(node)
}

/// A decimal's precision and scale, if valid: precision at least 1 (and no more digits
/// than a `fixed` of `size` bytes holds), scale from 0 (the default) to the precision.
fn decimal_parameters(object: &Map<String, Value>, size: Option<usize>) -> Option<(u32, u32)> {
    let precision = u32::try_from(object.get("precision")?.as_u64()?).ok()?;
    let scale = match object.get("scale") {
        None => 0,
        Some(scale) => u32::try_from(scale.as_u64()?).ok()?,
    };
    if precision == 0 || scale > precision {
        return None;
    }
    if let Some(size) = size {
        // Digits of 2^(8·size − 1) − 1, the largest value of `size` bytes.
        let most = ((size as f64) * 8.0 - 1.0) * std::f64::consts::LOG10_2;
        if size == 0 || f64::from(precision) > most.floor() {
            return None;
        }
    }
    Some((precision, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_holds_so_many_decimal_digits() {
        let fits = |size: usize, precision: u32| {
            let object = serde_json::json!({"precision": precision});
            decimal_parameters(object.as_object().unwrap(), Some(size)).is_some()
        };
        // 2^7 - 1 = 127, 2^15 - 1 = 32767, 2^63 - 1 (19 digits), 2^127 - 1 (39 digits).
        for (size, most) in [(1, 2), (2, 4), (8, 18), (16, 38)] {
            assert!(fits(size, most), "{size} bytes hold {most} digits");
            assert!(
                !fits(size, most + 1),
                "{size} bytes do not hold {} digits",
                most + 1
            );
        }
        assert!(!fits(0, 1));
    }

    #[test]
    fn least_sizes_bound_counts_from_below() {
        let (nodes, root) = parse(
            r#"{"type": "record", "name": "R", "fields": [
                {"name": "a", "type": {"type": "array", "items": "R"}},
                {"name": "b", "type": {"type": "array", "items": {"type": "record",
                  "name": "P", "fields": [{"name": "x", "type": "double"},
                  {"name": "y", "type": {"type": "fixed", "name": "F", "size": 3}},
                  {"name": "z", "type": "null"}]}}},
                {"name": "c", "type": {"type": "map", "values": "null"}}]}"#,
            &[],
        )
        .unwrap();
        let Some(Node::Record { fields, .. }) = nodes.get(root) else {
            panic!("not a record");
        };
        let least: Vec<usize> = fields
            .iter()
            .map(|f| match nodes.get(f.node) {
                Some(Node::Array { item_min, .. }) => *item_min,
                Some(Node::Map { value_min, .. }) => *value_min,
                _ => usize::MAX,
            })
            .collect();
        // R: its three counts; P: 8 + 3 + 0; null: nothing (the key is added on decoding).
        assert_eq!(least, vec![3, 11, 0]);
    }

    /// A record of 200,000 fields, an enum of 200,000 symbols and a union of 200,000 named
    /// types parse, and a duplicate after all of them is still found. Each duplicate check
    /// was a scan of the names before it: minutes of CPU for one schema.
    #[test]
    fn wide_records_enums_and_unions_parse() {
        const WIDE: usize = 200_000;
        let list =
            |item: &dyn Fn(usize) -> String| (0..WIDE).map(item).collect::<Vec<_>>().join(",");
        let symbols = list(&|i| format!("\"s{i}\""));
        let branches = list(&|i| format!(r#"{{"type":"fixed","name":"F{i}","size":1}}"#));
        let fields = list(&|i| format!(r#"{{"name":"f{i}","type":"long"}}"#));
        let wide = |extra: &str| {
            format!(
                r#"{{"type":"record","name":"Wide","fields":[
                    {{"name":"e","type":{{"type":"enum","name":"E","symbols":[{symbols}]}}}},
                    {{"name":"u","type":[{branches}]}},
                    {fields}{extra}]}}"#
            )
        };
        let (nodes, root) = parse(&wide(""), &[]).unwrap();
        let Some(Node::Record { fields, .. }) = nodes.get(root) else {
            panic!("not a record");
        };
        assert_eq!(fields.len(), WIDE + 2);
        let Some(Node::Enum { symbols, .. }) = nodes.get(fields[0].node) else {
            panic!("not an enum");
        };
        assert_eq!(symbols.len(), WIDE);
        let Some(Node::Union(branches)) = nodes.get(fields[1].node) else {
            panic!("not a union");
        };
        assert_eq!(branches.len(), WIDE);
        assert_eq!(fields[WIDE + 1].name, format!("f{}", WIDE - 1));

        let error = parse(&wide(r#",{"name":"f7","type":"int"}"#), &[]).unwrap_err();
        assert!(
            error.contains("record `Wide` has two fields `f7`"),
            "{error}"
        );
    }
}
