//! Property tests: arbitrary bytes against real schemas and arbitrary schema text never
//! panic and never allocate beyond the datum; values written by an independent encoder
//! (any block split) decode to themselves.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::AvroSchema;
use super::tests::{ORDER, PRIMS, TREE, long};

/// Schemas of every kind of node, for arbitrary bytes.
fn schemas() -> Vec<AvroSchema> {
    let texts = [
        PRIMS,
        ORDER,
        TREE,
        r#"{"type": "array", "items": "null"}"#,
        r#"{"type": "array", "items": {"type": "record", "name": "E", "fields": []}}"#,
        r#"{"type": "map", "values": ["null", "double", {"type": "array", "items": "float"}]}"#,
        r#"{"type": "record", "name": "L", "fields": [
            {"name": "a", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 3}},
            {"name": "b", "type": {"type": "fixed", "name": "F", "size": 5, "logicalType": "decimal", "precision": 9}},
            {"name": "c", "type": {"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}},
            {"name": "d", "type": {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}},
            {"name": "e", "type": {"type": "int", "logicalType": "date"}},
            {"name": "f", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "g", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "h", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
            {"name": "i", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "j", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "k", "type": {"type": "enum", "name": "K", "symbols": ["X", "Y"]}}]}"#,
    ];
    texts
        .iter()
        .map(|t| AvroSchema::parse(t, &[]).unwrap())
        .collect()
}

/// Schema-like JSON: the names come from a small pool, so that references, redefinitions
/// and recursion all happen.
fn schema_json() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        Just("A"),
        Just("B"),
        Just("n.A"),
        Just("m.C"),
        Just("int"),
        Just("")
    ];
    let primitive = prop_oneof![
        Just("null"),
        Just("boolean"),
        Just("int"),
        Just("long"),
        Just("float"),
        Just("double"),
        Just("bytes"),
        Just("string"),
    ];
    let logical = prop_oneof![
        Just("decimal"),
        Just("uuid"),
        Just("date"),
        Just("time-millis"),
        Just("time-micros"),
        Just("timestamp-millis"),
        Just("timestamp-nanos"),
        Just("local-timestamp-micros"),
        Just("duration"),
    ];
    let leaf = prop_oneof![
        primitive.clone().prop_map(|p| json!(p)),
        name.clone().prop_map(|n| json!(n)),
        (primitive, logical.clone(), 0u32..45, 0u32..45).prop_map(|(p, l, precision, scale)| {
            json!({"type": p, "logicalType": l, "precision": precision, "scale": scale})
        }),
        (name.clone(), 0u64..20, logical, 0u32..45).prop_map(|(n, size, l, precision)| {
            json!({"type": "fixed", "name": n, "size": size, "logicalType": l,
                   "precision": precision})
        }),
        (
            name.clone(),
            vec(prop_oneof![Just("X"), Just("Y"), Just("1")], 0..3)
        )
            .prop_map(|(n, symbols)| json!({"type": "enum", "name": n, "symbols": symbols})),
        Just(json!(7)),
    ];
    leaf.prop_recursive(4, 40, 4, move |inner| {
        let field_name = prop_oneof![Just("a"), Just("b"), Just("c")];
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            inner
                .clone()
                .prop_map(|items| json!({"type": "array", "items": items})),
            inner
                .clone()
                .prop_map(|values| json!({"type": "map", "values": values})),
            (
                name.clone(),
                proptest::option::of(prop_oneof![Just("n"), Just("")]),
                vec((field_name, inner), 0..4)
            )
                .prop_map(|(n, namespace, fields)| {
                    let fields: Vec<Value> = fields
                        .into_iter()
                        .map(|(f, t)| json!({"name": f, "type": t, "default": null}))
                        .collect();
                    let mut record = Map::new();
                    record.insert("type".into(), json!("record"));
                    record.insert("name".into(), json!(n));
                    if let Some(namespace) = namespace {
                        record.insert("namespace".into(), json!(namespace));
                    }
                    record.insert("fields".into(), Value::Array(fields));
                    Value::Object(record)
                }),
        ]
    })
}

/// Items written as blocks of the given sizes (the rest in one last block), each block
/// with a negative count and its size when `negative` says.
fn blocks(items: &[Vec<u8>], sizes: &[usize], negative: &[bool]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = items;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes
            .get(i)
            .copied()
            .unwrap_or(rest.len())
            .clamp(1, rest.len());
        let (block, after) = rest.split_at(n);
        let body: Vec<u8> = block.concat();
        if negative.get(i).copied().unwrap_or(false) {
            out.extend(long(-(n as i64)));
            out.extend(long(body.len() as i64));
        } else {
            out.extend(long(n as i64));
        }
        out.extend(body);
        rest = after;
        i += 1;
    }
    out.push(0);
    out
}

fn string(text: &str) -> Vec<u8> {
    [long(text.len() as i64), text.as_bytes().to_vec()].concat()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_bytes_never_panic(datum in vec(any::<u8>(), 0..400)) {
        for schema in schemas() {
            if let Ok(value) = schema.decode(&datum) {
                prop_assert!(serde_json::to_string(&value).is_ok());
            }
        }
    }

    #[test]
    fn arbitrary_schemas_never_panic(
        schema in schema_json(),
        datum in vec(any::<u8>(), 0..200),
    ) {
        let text = schema.to_string();
        if let Ok(parsed) = AvroSchema::parse(&text, &[]) {
            let _ = parsed.shape();
            let _ = parsed.decode(&datum);
        }
        // And as a reference of a schema that uses its names.
        let _ = AvroSchema::parse(r#"["null", "A", "n.A"]"#, &[&text]);
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}", datum in vec(any::<u8>(), 0..50)) {
        if let Ok(parsed) = AvroSchema::parse(&text, &[&text]) {
            let _ = parsed.shape();
            let _ = parsed.decode(&datum);
        }
    }

    #[test]
    fn arrays_and_maps_in_any_blocks_decode(
        numbers in vec(any::<i64>(), 0..40),
        sizes in vec(1usize..8, 0..10),
        negative in vec(any::<bool>(), 0..10),
    ) {
        let items: Vec<Vec<u8>> = numbers.iter().map(|n| long(*n)).collect();
        let array = AvroSchema::parse(r#"{"type": "array", "items": "long"}"#, &[]).unwrap();
        prop_assert_eq!(array.decode(&blocks(&items, &sizes, &negative)).unwrap(), json!(numbers));

        let entries: Vec<Vec<u8>> = numbers
            .iter()
            .enumerate()
            .map(|(i, n)| [string(&format!("k{i}")), string(&n.to_string())].concat())
            .collect();
        let expected: Map<String, Value> = numbers
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("k{i}"), json!(n.to_string())))
            .collect();
        let map = AvroSchema::parse(r#"{"type": "map", "values": "string"}"#, &[]).unwrap();
        prop_assert_eq!(
            map.decode(&blocks(&entries, &sizes, &negative)).unwrap(),
            Value::Object(expected)
        );
    }

    #[test]
    fn records_decode_to_what_was_written(
        id in any::<i32>(),
        name in ".{0,20}",
        score in proptest::option::of(any::<f64>().prop_filter("finite", |f| f.is_finite())),
        ratio in any::<f32>().prop_filter("finite", |f| f.is_finite()),
        flag in any::<bool>(),
    ) {
        let schema = AvroSchema::parse(
            r#"{"type": "record", "name": "R", "fields": [
                {"name": "id", "type": "int"}, {"name": "name", "type": "string"},
                {"name": "score", "type": ["double", "null"]}, {"name": "ratio", "type": "float"},
                {"name": "flag", "type": "boolean"}]}"#,
            &[],
        )
        .unwrap();
        let mut datum = [long(i64::from(id)), string(&name)].concat();
        match score {
            Some(score) => datum.extend([vec![0], score.to_le_bytes().to_vec()].concat()),
            None => datum.push(2),
        }
        datum.extend(ratio.to_le_bytes());
        datum.push(u8::from(flag));
        let value = schema.decode(&datum).unwrap();
        prop_assert_eq!(&value["id"], &json!(id));
        prop_assert_eq!(&value["name"], &json!(name));
        prop_assert_eq!(&value["score"], &json!(score));
        prop_assert_eq!(&value["flag"], &json!(flag));
        // The float reads back as the same f32.
        let ratio_back = value["ratio"].as_f64().unwrap() as f32;
        prop_assert_eq!(ratio_back.to_bits(), ratio.to_bits());
    }
}
