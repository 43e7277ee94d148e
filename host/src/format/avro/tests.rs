//! Decoding vectors written by fastavro 1.13.1 (`schemaless_writer`, a reference
//! implementation) with the schemas given here, hand-made block encodings, and failures.

use serde_json::json;

use super::AvroSchema;

pub(super) fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// A zig-zag varint, written independently of the decoder.
pub(super) fn long(value: i64) -> Vec<u8> {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        if n < 0x80 {
            out.push(n as u8);
            return out;
        }
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
}

pub(super) fn schema(text: &str) -> AvroSchema {
    AvroSchema::parse(text, &[]).unwrap()
}

pub(super) const PRIMS: &str = r#"{"type": "record", "name": "Prims", "fields": [
    {"name": "n", "type": "null"}, {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"}, {"name": "i_min", "type": "int"}, {"name": "i_max", "type": "int"},
    {"name": "l", "type": "long"}, {"name": "l_min", "type": "long"}, {"name": "l_max", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
    {"name": "by", "type": "bytes"}, {"name": "s", "type": "string"}]}"#;
pub(super) const PRIMS_DATUM: &str = "0101ffffffff0ffeffffff0f9693d89fee47ffffffffffffffffff01feffffffffffffffff\
    01cdcccc3d182d4454fb2109400600ff101468c3a96c6c6f20e29c93";

pub(super) const ORDER: &str = r#"{"type": "record", "name": "Order", "namespace": "com.acme", "fields": [
    {"name": "id", "type": "long"},
    {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "street", "type": "string"}, {"name": "zip", "type": ["null", "string"]}]}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line",
        "namespace": "com.acme.lines", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
    {"name": "note", "type": ["string", "null"]},
    {"name": "billing", "type": ["null", "Address"]},
    {"name": "any", "type": ["null", "int", "Address", "string", "com.acme.lines.Line"]}]}"#;
pub(super) const ORDER_DATUM: &str = "540e4d61696e205374000406412d310406422d320500040278020279030002001a6c6561\
    766520617420646f6f720206456c6d020a313233343504064f616b00";

pub(super) const TREE: &str = r#"{"type": "record", "name": "Tree", "fields": [
    {"name": "value", "type": "int"},
    {"name": "children", "type": {"type": "array", "items": "Tree"}},
    {"name": "next", "type": ["null", "Tree"]}]}"#;

#[test]
fn every_primitive() {
    let value = schema(PRIMS).decode(&hex(PRIMS_DATUM)).unwrap();
    // As text: the fields in the schema's order, the float at its own shortest decimal.
    assert_eq!(
        serde_json::to_string(&value).unwrap(),
        r#"{"n":null,"b":true,"i":-1,"i_min":-2147483648,"i_max":2147483647,"l":1234567890123,"l_min":-9223372036854775808,"l_max":9223372036854775807,"f":0.1,"d":3.141592653589793,"by":{"base64":"AP8Q"},"s":"héllo ✓"}"#
    );
    for (text, datum, expected) in [
        (r#""null""#, vec![], json!(null)),
        (r#""boolean""#, vec![0], json!(false)),
        (r#""string""#, vec![0], json!("")),
        (r#""bytes""#, vec![0], json!({"base64": ""})),
        (r#"{"type": "float"}"#, vec![0, 0, 0x80, 0xbf], json!(-1.0)),
    ] {
        assert_eq!(schema(text).decode(&datum).unwrap(), expected, "{text}");
    }
}

#[test]
fn nan_and_infinities_are_strings() {
    let text = r#"{"type": "record", "name": "F", "fields": [
        {"name": "a", "type": "float"}, {"name": "b", "type": "float"}, {"name": "c", "type": "float"},
        {"name": "x", "type": "double"}, {"name": "y", "type": "double"}, {"name": "z", "type": "double"}]}"#;
    let datum = hex("0000c07f0000807f000080ff000000000000f87f000000000000f07f000000000000f0ff");
    assert_eq!(
        schema(text).decode(&datum).unwrap(),
        json!({"a": "NaN", "b": "Infinity", "c": "-Infinity",
               "x": "NaN", "y": "Infinity", "z": "-Infinity"})
    );
}

#[test]
fn every_logical_type() {
    let text = r#"{"type": "record", "name": "L", "namespace": "t", "fields": [
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "dec_neg", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "dec38", "type": {"type": "fixed", "name": "D38", "size": 16, "logicalType": "decimal", "precision": 38}},
        {"name": "dec38_neg", "type": "D38"},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "date_old", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "tsu_old", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "ltu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}]}"#;
    let datum = hex(
        "0404e204fb1e4b3b4ca85a86c47a098a223fffffffffb4c4b357a5793b85f675ddc0000000014831323365\
         343536372d653839622d313264332d613435362d34323636313431373430303096b402c78e03aab2992ba8\
         98b1bed102f6a1abfef962808981828389850601f6a1abfef9628089818283898506",
    );
    let nines = "9".repeat(38);
    assert_eq!(
        schema(text).decode(&datum).unwrap(),
        json!({
            "dec": "12.50", "dec_neg": "-12.50",
            "dec38": nines, "dec38_neg": format!("-{nines}"),
            "u": "123e4567-e89b-12d3-a456-426614174000",
            "date": "2024-01-01", "date_old": "1900-03-01",
            "tm": "12:34:56.789000", "tu": "12:34:56.789012",
            "tsm": "2023-11-14T22:13:20.123Z", "tsu": "2023-11-14T22:13:20.123456Z",
            "tsu_old": "1969-12-31T23:59:59.999999Z",
            "ltm": "2023-11-14 22:13:20.123000", "ltu": "2023-11-14 22:13:20.123456",
        })
    );
    // Written by fastavro as their underlying types (long, long, fixed 16, fixed 12).
    let text = r#"{"type": "record", "name": "R", "fields": [
        {"name": "tsn", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
        {"name": "ltn", "type": {"type": "long", "logicalType": "local-timestamp-nanos"}},
        {"name": "uf", "type": {"type": "fixed", "name": "U16", "size": 16, "logicalType": "uuid"}},
        {"name": "dur", "type": {"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}}]}"#;
    let datum = hex("aab4aed8c7bfce972f01123e4567e89b12d3a4564266141740000e000000030000007b5c2605");
    assert_eq!(
        schema(text).decode(&datum).unwrap(),
        json!({
            "tsn": "2023-11-14T22:13:20.123456789Z",
            "ltn": "1969-12-31 23:59:59.999999999",
            "uf": "123e4567-e89b-12d3-a456-426614174000",
            "dur": {"months": 14, "days": 3, "millis": 86_400_123},
        })
    );
}

#[test]
fn logical_types_on_wrong_types_or_bad_parameters_are_ignored() {
    for (text, datum, expected) in [
        (
            r#"{"type": "int", "logicalType": "timestamp-millis"}"#,
            long(5),
            json!(5),
        ),
        (
            r#"{"type": "long", "logicalType": "date"}"#,
            long(5),
            json!(5),
        ),
        (
            r#"{"type": "string", "logicalType": "no-such-type"}"#,
            vec![2, b'a'],
            json!("a"),
        ),
        (
            r#"{"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 3}"#,
            vec![2, 1],
            json!({"base64": "AQ=="}),
        ),
        (
            r#"{"type": "bytes", "logicalType": "decimal", "scale": 1}"#,
            vec![2, 1],
            json!({"base64": "AQ=="}),
        ),
        // Two bytes hold 4 digits at most (32767).
        (
            r#"{"type": "fixed", "name": "F", "size": 2, "logicalType": "decimal", "precision": 5}"#,
            vec![0, 1],
            json!({"base64": "AAE="}),
        ),
        (
            r#"{"type": "fixed", "name": "F", "size": 2, "logicalType": "decimal", "precision": 4}"#,
            vec![0x7f, 0xff],
            json!("32767"),
        ),
        (
            r#"{"type": "fixed", "name": "F", "size": 2, "logicalType": "uuid"}"#,
            vec![0, 1],
            json!({"base64": "AAE="}),
        ),
    ] {
        assert_eq!(schema(text).decode(&datum).unwrap(), expected, "{text}");
    }
}

#[test]
fn nested_records_namespaces_and_unions() {
    let order = schema(ORDER);
    assert_eq!(
        order.decode(&hex(ORDER_DATUM)).unwrap(),
        json!({
            "id": 42, "address": {"street": "Main St", "zip": null},
            "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": -3}],
            "tags": {"x": 1, "y": -2}, "status": "PAID", "note": "leave at door",
            "billing": {"street": "Elm", "zip": "12345"},
            "any": {"com.acme.Address": {"street": "Oak", "zip": null}},
        })
    );
    assert_eq!(
        order.decode(&hex("0100020239000000020000")).unwrap(),
        json!({
            "id": -1, "address": {"street": "", "zip": "9"}, "lines": [], "tags": {},
            "status": "NEW", "note": null, "billing": null, "any": null,
        })
    );
    assert_eq!(
        order.decode(&hex("000273000000040200020e")).unwrap()["any"],
        json!({"int": 7})
    );
}

#[test]
fn blocks_positive_and_negative() {
    // [1, 2] in a block of 2, [3, 4, 5] in a block of -3 with its size, then the end.
    let mut datum = long(2);
    datum.extend(long(1).into_iter().chain(long(2)));
    let items: Vec<u8> = [3, 4, 5].into_iter().flat_map(long).collect();
    datum.extend(
        long(-3)
            .into_iter()
            .chain(long(items.len() as i64))
            .chain(items),
    );
    datum.push(0);
    let array = schema(r#"{"type": "array", "items": "long"}"#);
    assert_eq!(array.decode(&datum).unwrap(), json!([1, 2, 3, 4, 5]));

    let mut datum = long(-1);
    datum.extend(long(4).into_iter().chain([2, b'a', 2, b'x']));
    datum.extend(long(2).into_iter().chain([2, b'b', 2, b'y', 2, b'c', 0]));
    datum.push(0);
    let map = schema(r#"{"type": "map", "values": "string"}"#);
    assert_eq!(
        map.decode(&datum).unwrap(),
        json!({"a": "x", "b": "y", "c": ""})
    );
}

#[test]
fn recursive_schema() {
    let tree = schema(TREE);
    assert_eq!(
        tree.decode(&hex("02040400000602080000000000020a0000"))
            .unwrap(),
        json!({"value": 1, "children": [
            {"value": 2, "children": [], "next": null},
            {"value": 3, "children": [{"value": 4, "children": [], "next": null}], "next": null}],
            "next": {"value": 5, "children": [], "next": null}})
    );
    // A list 100 deep decodes; 200 deep is refused, not a stack overflow.
    let list = schema(
        r#"{"type": "record", "name": "List", "fields": [
            {"name": "next", "type": ["List", "null"]}]}"#,
    );
    let deep = |n: usize| [vec![0; n], vec![2]].concat();
    assert!(list.decode(&deep(100)).is_ok());
    let error = list.decode(&deep(200)).unwrap_err();
    assert!(error.contains("nested deeper than 128"), "{error}");
}

#[test]
fn references_define_named_types() {
    let address = r#"{"type": "record", "name": "Address", "namespace": "com.acme",
        "fields": [{"name": "street", "type": "string"}]}"#;
    let customer = r#"{"type": "record", "name": "com.acme.Customer",
        "fields": [{"name": "home", "type": "Address"}]}"#;
    let order = r#"{"type": "record", "name": "Order", "fields": [
        {"name": "customer", "type": "com.acme.Customer"},
        {"name": "ship_to", "type": "com.acme.Address"}]}"#;
    let parsed = AvroSchema::parse(order, &[address, customer]).unwrap();
    assert_eq!(
        parsed.decode(&[2, b'a', 2, b'b']).unwrap(),
        json!({"customer": {"home": {"street": "a"}}, "ship_to": {"street": "b"}})
    );
    let error = AvroSchema::parse(order, &[address]).unwrap_err();
    assert!(
        error.contains("unknown type `com.acme.Customer`"),
        "{error}"
    );
    let error = AvroSchema::parse(order, &[customer, address]).unwrap_err();
    assert!(error.starts_with("reference 1 of 2: "), "{error}");
}

#[test]
fn from_registered_parses_the_references_first() {
    use super::super::{Reference, RegisteredSchema, SchemaType};
    use std::sync::Arc;
    let registered = |text: &str, references: Vec<Reference>| RegisteredSchema {
        schema_type: SchemaType::Avro,
        text: text.into(),
        references,
    };
    let reference = |name: &str, schema: RegisteredSchema| Reference {
        name: name.into(),
        subject: format!("{name}-value"),
        version: 1,
        schema: Arc::new(schema),
    };
    let a = registered(r#"{"type": "fixed", "name": "x.A", "size": 1}"#, vec![]);
    let b = registered(
        r#"{"type": "record", "name": "x.B", "fields": [{"name": "a", "type": "x.A"}]}"#,
        vec![reference("x.A", a)],
    );
    let top = registered(r#"["null", "x.B"]"#, vec![reference("x.B", b)]);
    let parsed = AvroSchema::from_registered(&top).unwrap();
    assert_eq!(
        parsed.decode(&[2, 0xff]).unwrap(),
        json!({"a": {"base64": "/w=="}})
    );
}

#[test]
fn decode_failures_say_what_and_where() {
    let fails = |schema_text: &str, datum: &[u8], expected: &str| {
        let error = schema(schema_text).decode(datum).unwrap_err();
        assert!(error.contains(expected), "{schema_text}: {error}");
    };
    // Trailing bytes.
    let mut datum = hex(PRIMS_DATUM);
    datum.push(0);
    fails(
        PRIMS,
        &datum,
        "1 byte is left after the datum's end at byte 65 of 66",
    );
    // Every truncation of a valid datum fails.
    let order = schema(ORDER);
    let datum = hex(ORDER_DATUM);
    for end in 0..datum.len() {
        assert!(
            order.decode(&datum[..end]).is_err(),
            "prefix of {end} bytes"
        );
    }
    fails(
        r#""double""#,
        &[0; 7],
        "a double needs 8 bytes, but 7 are left",
    );
    // Enum and union indexes.
    let enumeration = r#"{"type": "enum", "name": "E", "symbols": ["A", "B"]}"#;
    fails(
        enumeration,
        &long(2),
        "enum `E` index 2, but it has 2 symbols",
    );
    fails(enumeration, &long(-1), "enum `E` index -1");
    fails(
        r#"["null", "string"]"#,
        &long(2),
        "union branch 2 of a union of 2",
    );
    fails(
        r#"["null", "int", "string"]"#,
        &long(-1),
        "union branch -1 of a union of 3",
    );
    fails(
        r#"["int", "string"]"#,
        &long(3),
        "union branch 3 of a union of 2",
    );
    // Bytes that are no value.
    fails(r#""boolean""#, &[2], "a boolean byte [2], not 0 or 1");
    fails(r#""string""#, &[4, 0xc3, 0x28], "not UTF-8");
    fails(
        r#""int""#,
        &long(1 << 31),
        "2147483648 is out of an int's range",
    );
    fails(r#""long""#, &[0xff; 11], "longer than 64 bits");
    fails(
        r#""long""#,
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
        "64 bits",
    );
    fails(r#""long""#, &[0x80], "ends inside a number");
    // Lengths and counts beyond the bytes left, refused before allocating.
    fails(r#""bytes""#, &long(-1), "bytes of negative length -1");
    fails(
        r#""string""#,
        &long(1 << 40),
        "a string of 1099511627776 bytes, but 0 are left",
    );
    let array = r#"{"type": "array", "items": "long"}"#;
    fails(
        array,
        &long(i64::MAX),
        "items of 1 bytes or more, but 0 bytes are left",
    );
    fails(
        array,
        &[long(i64::MIN), long(0)].concat(),
        "a block of 9223372036854775808 items",
    );
    fails(
        array,
        &[long(-2), long(100)].concat(),
        "a block of 100 bytes, but 0 are left",
    );
    let nulls = r#"{"type": "array", "items": "null"}"#;
    assert_eq!(
        schema(nulls).decode(&[6, 0]).unwrap(),
        json!([null, null, null])
    );
    fails(
        nulls,
        &[long(1 << 40), vec![0]].concat(),
        "more than 100000 items that take no bytes",
    );
    fails(
        r#"{"type": "map", "values": "null"}"#,
        &long(3),
        "items of 1 bytes or more",
    );
    // Out of range logical values.
    fails(
        r#"{"type": "int", "logicalType": "time-millis"}"#,
        &long(86_400_000),
        "not within a day",
    );
    fails(
        r#"{"type": "long", "logicalType": "timestamp-millis"}"#,
        &long(i64::MAX),
        "out of range",
    );
    fails(
        r#"{"type": "bytes", "logicalType": "decimal", "precision": 3}"#,
        &[0],
        "no bytes",
    );
    // The path to the failing value.
    let text = r#"{"type": "record", "name": "O", "fields": [{"name": "lines", "type":
        {"type": "array", "items": {"type": "record", "name": "L", "fields": [
        {"name": "tags", "type": {"type": "map", "values": "boolean"}}]}}}]}"#;
    let datum = [4, 0, 2, 2, b'k', 7, 0, 0];
    fails(
        text,
        &datum,
        "at `lines[1].tags[\"k\"]`: a boolean byte [7], not 0 or 1 (at byte 5)",
    );
}

#[test]
fn schemas_that_do_not_parse_say_why() {
    for (text, expected) in [
        ("{", "the schema is not JSON"),
        ("42", "expected a schema"),
        (
            r#"{"type": "record", "name": "A", "namespace": "n", "fields": [{"name": "b", "type": "Bogus"}]}"#,
            "field `b` of record `n.A`: unknown type `n.Bogus` or `Bogus`: not a primitive type, \
             and the named types defined before it: n.A",
        ),
        (
            r#"{"type": "record", "name": "A"}"#,
            "record `A` has no `fields` list",
        ),
        (r#"{"name": "A"}"#, "a schema object has no `type`"),
        (r#"{"type": "array"}"#, "an array has no `items`"),
        (
            r#"{"type": "fixed", "name": "F", "size": -1}"#,
            "fixed `F` has no `size`",
        ),
        (
            r#"{"type": "enum", "name": "E", "symbols": ["A", "A"]}"#,
            "the symbol `A` twice",
        ),
        (
            r#"{"type": "enum", "name": "int", "symbols": []}"#,
            "a primitive type's name",
        ),
        (
            r#"{"type": "record", "name": "a-b", "fields": []}"#,
            "a name has only letters",
        ),
        (r#"[]"#, "a union with no branches"),
        (
            r#"["int", ["null", "string"]]"#,
            "a union may not hold one directly",
        ),
        (
            r#"["int", "string", "int"]"#,
            "a union has two `int` branches",
        ),
        (
            r#"["long", {"type": "long", "logicalType": "timestamp-millis"}]"#,
            "a union has two `long` branches",
        ),
        (
            r#"{"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}, {"name": "x", "type": "int"}]}"#,
            "record `A` has two fields `x`",
        ),
        (
            r#"["null", {"type": "fixed", "name": "A", "size": 1}, {"type": "fixed", "name": "A", "size": 2}]"#,
            "union branch 2: the type `A` is defined twice",
        ),
    ] {
        let error = AvroSchema::parse(text, &[]).unwrap_err();
        assert!(error.contains(expected), "{text}: {error}");
    }
}

#[test]
fn a_schema_file_parses() {
    // As an .avsc file has it: a byte order mark, pretty-printed, docs, aliases, order,
    // defaults, a trailing newline.
    let file = "\u{feff}{\n  \"type\" : \"record\",\n  \"name\" : \"Reading\",\n  \
        \"namespace\" : \"io.example.sensors\",\n  \"doc\" : \"One reading of a sensor.\",\n  \
        \"aliases\" : [\"Measurement\"],\n  \"fields\" : [ {\n    \"name\" : \"sensor\",\n    \
        \"type\" : \"string\",\n    \"doc\" : \"Sensor id\",\n    \"order\" : \"ascending\"\n  \
        }, {\n    \"name\" : \"at\",\n    \"type\" : {\n      \"type\" : \"long\",\n      \
        \"logicalType\" : \"timestamp-millis\"\n    }\n  }, {\n    \"name\" : \"celsius\",\n    \
        \"type\" : [ \"null\", \"double\" ],\n    \"default\" : null,\n    \"aliases\" : \
        [\"temp\"]\n  } ]\n}\n";
    let parsed = AvroSchema::parse(file, &[]).unwrap();
    let datum = [
        vec![4, b's', b'1'],
        long(0),
        vec![2],
        21.5f64.to_le_bytes().to_vec(),
    ]
    .concat();
    assert_eq!(
        parsed.decode(&datum).unwrap(),
        json!({"sensor": "s1", "at": "1970-01-01T00:00:00.000Z", "celsius": 21.5})
    );
    assert_eq!(
        AvroSchema::parse("string\n", &[])
            .unwrap()
            .decode(&[0])
            .unwrap(),
        json!("")
    );
}

/// Not a test: how decoding compares with parsing the same value as JSON text
/// (`cargo test --release -- --ignored --nocapture speed`).
#[test]
#[ignore]
fn speed_against_json_parsing() {
    use std::time::Instant;
    let order = schema(ORDER);
    let datum = hex(ORDER_DATUM);
    let text = serde_json::to_vec(&order.decode(&datum).unwrap()).unwrap();
    let rounds = 200_000;
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(order.decode(std::hint::black_box(&datum)).unwrap());
    }
    let avro = start.elapsed();
    let start = Instant::now();
    for _ in 0..rounds {
        let value: serde_json::Value = serde_json::from_slice(std::hint::black_box(&text)).unwrap();
        std::hint::black_box(value);
    }
    let json = start.elapsed();
    println!(
        "avro {} bytes: {:?}/datum; json {} bytes: {:?}/datum",
        datum.len(),
        avro / rounds,
        text.len(),
        json / rounds
    );
}

/// Debezium's semantic types as Confluent's AvroConverter writes them: `connect.name` on a
/// plain `int`/`long`/`bytes`, no Avro logical type (a decimal has one beside it).
#[test]
fn debezium_semantic_types_by_connect_name() {
    let text = r#"{"type": "record", "name": "Value", "namespace": "shop.public.t", "fields": [
        {"name": "d", "type": {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}},
        {"name": "t", "type": {"type": "int", "connect.name": "io.debezium.time.Time"}},
        {"name": "mt", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTime"}},
        {"name": "ts", "type": {"type": "long", "connect.name": "io.debezium.time.Timestamp"}},
        {"name": "mts", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}},
        {"name": "nts", "type": {"type": "long", "connect.name": "io.debezium.time.NanoTimestamp"}},
        {"name": "cts", "type": {"type": "long", "connect.name": "org.apache.kafka.connect.data.Timestamp"}},
        {"name": "dec", "type": {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
            "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
            "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}},
        {"name": "dec_no_logical", "type": {"type": "bytes", "connect.parameters": {"scale": "3"},
            "connect.name": "org.apache.kafka.connect.data.Decimal"}},
        {"name": "other", "type": {"type": "long", "connect.name": "com.acme.Whatever"}}]}"#;
    let mut datum = Vec::new();
    datum.extend(super::tests::long(19723)); // 2024-01-01
    datum.extend(long(45_296_789)); // 12:34:56.789
    datum.extend(long(45_296_789_012)); // 12:34:56.789012
    datum.extend(long(1_700_000_000_123));
    datum.extend(long(1_700_000_000_123_456));
    datum.extend(long(1_700_000_000_123_456_789));
    datum.extend(long(1_700_000_000_123));
    datum.extend(long(2));
    datum.extend([0x04, 0xe2]); // 1250
    datum.extend(long(2));
    datum.extend([0x30, 0x39]); // 12345
    datum.extend(long(7));
    assert_eq!(
        schema(text).decode(&datum).unwrap(),
        json!({
            "d": "2024-01-01", "t": "12:34:56.789000", "mt": "12:34:56.789012",
            "ts": "2023-11-14 22:13:20.123000", "mts": "2023-11-14 22:13:20.123456",
            "nts": "2023-11-14 22:13:20.123456789", "cts": "2023-11-14T22:13:20.123Z",
            "dec": "12.50", "dec_no_logical": "12.345", "other": 7,
        })
    );
}

/// Debezium's `VariableScaleDecimal` (a PostgreSQL NUMERIC without a fixed scale), as the
/// AvroConverter writes it: a record of the scale and the unscaled bytes.
#[test]
fn debezium_variable_scale_decimal() {
    let text = r#"{"type": "record", "name": "Value", "fields": [
        {"name": "n", "type": {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
            "connect.doc": "Variable scaled decimal", "connect.version": 1,
            "connect.name": "io.debezium.data.VariableScaleDecimal"}},
        {"name": "m", "type": ["null", "io.debezium.data.VariableScaleDecimal"]}]}"#;
    let mut datum = Vec::new();
    datum.extend(long(2));
    datum.extend(long(2));
    datum.extend([0x04, 0xe2]); // 1250, scale 2
    datum.extend(long(1)); // the union's second branch
    datum.extend(long(0));
    datum.extend(long(1));
    datum.push(0xf9); // -7, scale 0
    assert_eq!(
        schema(text).decode(&datum).unwrap(),
        json!({"n": "12.50", "m": "-7"})
    );
    // A negative scale is not a decimal.
    let mut bad = Vec::new();
    bad.extend(long(-1));
    bad.extend(long(1));
    bad.push(1);
    bad.extend(long(0));
    assert!(schema(text).decode(&bad).is_err());
}
