//! The JSON Schema decoder: a record written by Confluent's JSON Schema serializer is JSON
//! text (after the frame), checked against the registered schema, and passed on as the
//! JSON it is. The schema also gives the record's shape.
//!
//! A registered schema's references are other schemas, each by the name the schema
//! `$ref`s it with (`"$ref": "address.json"`, or a full URL); they are served from memory
//! to the validator, and nothing is fetched from the network or read from files.
//!
//! Shape, from the schema's keywords:
//! - `"type": "object"` with `properties`: a `Record` (named by `title`, else `$id`, else
//!   the schema's location), its fields in the schema's order; a field is optional when it
//!   is not `required` or its type admits `null`. An object with no `properties` is a `Map`
//!   of its `additionalProperties` schema (of `Json` when that is not a schema).
//! - `integer`: `Int64`; `number`: `Float64`; `boolean`; `string`: `Date`, `Timestamp
//!   (Micros)`, `Time(Micros)` or `Uuid` by its `format` (`date`, `date-time`, `time`,
//!   `uuid`), else `String`; `array`: an `Array` of its `items`; `null`: `Null`.
//! - `$ref`s are followed (within the document, or into a reference); a schema that
//!   refers to itself is `Json` where it recurs. `anyOf`/`oneOf` of one schema and
//!   `{"type": "null"}` is that schema, optional. Anything else (no type, several types,
//!   other combinations) is `Json`. Connect's `connect.type` hints are ignored.

use std::collections::HashMap;

use serde_json::Value;

use super::RegisteredSchema;
use super::shape::{Field, FieldType, TimeUnit};

/// A compiled JSON Schema: its validator, and the shape it describes.
pub struct JsonSchemaSchema {
    validator: jsonschema::Validator,
    shape: FieldType,
}

impl std::fmt::Debug for JsonSchemaSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSchemaSchema")
            .field("shape", &self.shape)
            .finish()
    }
}

impl JsonSchemaSchema {
    /// Compiles the registry's JSON Schema text; its references are other schemas by the
    /// name they are `$ref`'d with, resolved in memory.
    pub fn from_registered(schema: &RegisteredSchema) -> Result<JsonSchemaSchema, String> {
        let root: Value = serde_json::from_str(&schema.text)
            .map_err(|e| format!("the registered JSON Schema is not JSON: {e}"))?;
        let mut documents = Documents::default();
        for (name, reference) in schema.references_in_order() {
            let document: Value = serde_json::from_str(&reference.text)
                .map_err(|e| format!("the JSON Schema's reference {name:?} is not JSON: {e}"))?;
            documents.by_name.insert(name.to_string(), document);
        }
        let validator = jsonschema::options()
            .with_retriever(documents.clone())
            .build(&root)
            .map_err(|e| format!("the JSON Schema does not compile: {e}"))?;
        let shape = Shaper {
            documents: &documents,
            // The root is "inside" itself: a `{"$ref": "#"}` within it recurs.
            stack: vec!["#".to_string()],
        }
        .shape(&root, &root, "#")
        .0;
        Ok(JsonSchemaSchema { validator, shape })
    }

    /// Parses `payload` as JSON (serde_json, with its default nesting limit of 128) and
    /// validates it. The error names the first failing keyword and where in the value:
    /// `keyword "type" at /uid: "x" is not of type "integer"`.
    pub fn decode(&self, payload: &[u8]) -> Result<Value, String> {
        let value: Value =
            serde_json::from_slice(payload).map_err(|e| format!("payload is not JSON: {e}"))?;
        if let Some(error) = self.validator.iter_errors(&value).next() {
            let schema_path = error.schema_path().to_string();
            let keyword = schema_path.rsplit('/').next().unwrap_or_default();
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            return Err(format!(
                "payload does not match the JSON Schema: keyword \"{keyword}\" at {at}: {error}"
            ));
        }
        Ok(value)
    }

    /// The shape the schema describes.
    pub fn shape(&self) -> FieldType {
        self.shape.clone()
    }
}

/// The referenced schemas, by the name the registry gives them.
#[derive(Clone, Default)]
struct Documents {
    by_name: HashMap<String, Value>,
}

impl Documents {
    /// The referenced document a URI (or `$ref` without its fragment) names: by its name
    /// exactly, or a URI ending in `/<name>` (a relative `$ref` resolved against a base;
    /// the longest such name wins).
    fn find(&self, uri: &str) -> Option<&Value> {
        let uri = uri.split('#').next().unwrap_or_default();
        self.by_name.get(uri).or_else(|| {
            self.by_name
                .iter()
                .filter(|(name, _)| {
                    uri.strip_suffix(name.as_str())
                        .is_some_and(|b| b.ends_with('/'))
                })
                // The longest name that fits: `v2/address.json` before `address.json`.
                .max_by_key(|(name, _)| name.len())
                .map(|(_, document)| document)
        })
    }
}

impl jsonschema::Retrieve for Documents {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        self.find(uri.as_str()).cloned().ok_or_else(|| {
            let names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            format!(
                "{uri} is not one of the schema's registry references ({names:?}); sluice fetches no schema from the network"
            )
            .into()
        })
    }
}

/// Walks a schema for its shape, following `$ref`s and noting those it is inside.
struct Shaper<'a> {
    documents: &'a Documents,
    stack: Vec<String>,
}

impl Shaper<'_> {
    /// The shape of `schema` (found at `location` in `document`), and whether it admits
    /// `null`.
    fn shape(&mut self, document: &Value, schema: &Value, location: &str) -> (FieldType, bool) {
        let Value::Object(keywords) = schema else {
            return (FieldType::Json, false);
        };
        if let Some(Value::String(reference)) = keywords.get("$ref") {
            return self.reference(document, reference);
        }
        for combinator in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = keywords.get(combinator) {
                let non_null: Vec<&Value> = branches.iter().filter(|b| !is_null_type(b)).collect();
                return match non_null.as_slice() {
                    [only] if branches.len() == 2 => (
                        self.shape(document, only, &format!("{location}/{combinator}"))
                            .0,
                        true,
                    ),
                    _ => (FieldType::Json, false),
                };
            }
        }
        let (types, nullable) = match keywords.get("type") {
            Some(Value::String(t)) => (vec![t.as_str()], t == "null"),
            Some(Value::Array(ts)) => {
                let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
                let nullable = names.contains(&"null");
                (
                    names.into_iter().filter(|t| *t != "null").collect(),
                    nullable,
                )
            }
            _ if keywords.contains_key("properties") => (vec!["object"], false),
            _ => (Vec::new(), false),
        };
        let field_type = match types.as_slice() {
            [] if nullable => FieldType::Null,
            ["object"] => self.object(document, keywords, location),
            ["array"] => match keywords.get("items") {
                Some(items @ Value::Object(_)) => FieldType::Array(Box::new(
                    self.shape(document, items, &format!("{location}/items")).0,
                )),
                _ => FieldType::Array(Box::new(FieldType::Json)),
            },
            ["integer"] => FieldType::Int64,
            ["number"] => FieldType::Float64,
            ["boolean"] => FieldType::Boolean,
            ["null"] => FieldType::Null,
            ["string"] => match keywords.get("format").and_then(Value::as_str) {
                Some("date") => FieldType::Date,
                Some("date-time") => FieldType::Timestamp(TimeUnit::Micros),
                Some("time") => FieldType::Time(TimeUnit::Micros),
                Some("uuid") => FieldType::Uuid,
                _ => FieldType::String,
            },
            _ => FieldType::Json,
        };
        (field_type, nullable)
    }

    fn object(
        &mut self,
        document: &Value,
        keywords: &serde_json::Map<String, Value>,
        location: &str,
    ) -> FieldType {
        let Some(Value::Object(properties)) = keywords.get("properties") else {
            return match keywords.get("additionalProperties") {
                Some(values @ Value::Object(_)) => FieldType::Map(Box::new(
                    self.shape(
                        document,
                        values,
                        &format!("{location}/additionalProperties"),
                    )
                    .0,
                )),
                _ => FieldType::Map(Box::new(FieldType::Json)),
            };
        };
        let required: Vec<&str> = match keywords.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut fields = Vec::with_capacity(properties.len());
        for (name, property) in properties {
            let at = format!("{location}/properties/{}", pointer_escape(name));
            let (field_type, nullable) = self.shape(document, property, &at);
            fields.push(Field {
                name: name.clone(),
                field_type,
                optional: nullable || !required.contains(&name.as_str()),
                default: property.get("default").cloned(),
            });
        }
        let name = keywords
            .get("title")
            .or_else(|| keywords.get("$id"))
            .and_then(Value::as_str)
            .unwrap_or(location)
            .to_string();
        FieldType::Record { name, fields }
    }

    /// A `$ref`'s target: a JSON pointer within `document` (`#/$defs/x`), or a reference
    /// by name with an optional pointer (`address.json#/$defs/street`).
    fn reference(&mut self, document: &Value, reference: &str) -> (FieldType, bool) {
        if self.stack.iter().any(|r| r == reference) || self.stack.len() > 64 {
            return (FieldType::Json, false);
        }
        let (target_name, pointer) = match reference.split_once('#') {
            Some((name, pointer)) => (name, pointer),
            None => (reference, ""),
        };
        let target_document = if target_name.is_empty() {
            Some(document)
        } else {
            self.documents.find(target_name)
        };
        let Some(target_document) = target_document else {
            return (FieldType::Json, false);
        };
        let Some(target) = target_document.pointer(pointer) else {
            return (FieldType::Json, false);
        };
        self.stack.push(reference.to_string());
        let shape = self.shape(target_document, target, reference);
        self.stack.pop();
        shape
    }
}

fn is_null_type(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::format::{Reference, SchemaType};

    fn registered(text: &str, references: Vec<(&str, &str)>) -> RegisteredSchema {
        RegisteredSchema {
            schema_type: SchemaType::Json,
            text: text.to_string(),
            references: references
                .into_iter()
                .map(|(name, text)| Reference {
                    name: name.to_string(),
                    subject: name.to_string(),
                    version: 1,
                    schema: Arc::new(registered(text, Vec::new())),
                })
                .collect(),
        }
    }

    const ADDRESS: &str = r#"{
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Address",
        "type": "object",
        "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
        "required": ["street"]
    }"#;

    const ORDER: &str = r##"{
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "amount": {"type": "number"},
            "paid": {"type": "boolean", "default": false},
            "note": {"type": ["string", "null"]},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "clock": {"type": "string", "format": "time"},
            "uid": {"type": "string", "format": "uuid"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "extra": {},
            "ship_to": {"$ref": "address.json"},
            "bill_to": {"$ref": "#/definitions/local"},
            "maybe": {"oneOf": [{"type": "null"}, {"type": "integer"}]}
        },
        "required": ["id", "note", "day"],
        "definitions": {"local": {"type": "object", "properties": {"x": {"type": "integer"}}}}
    }"##;

    fn order() -> JsonSchemaSchema {
        JsonSchemaSchema::from_registered(&registered(ORDER, vec![("address.json", ADDRESS)]))
            .unwrap()
    }

    #[test]
    fn valid_values_pass_through() {
        let schema = order();
        let payload = br#"{"id": 1, "note": null, "day": "2024-01-01",
            "ship_to": {"street": "Main", "zip": "12345"}, "tags": ["a"]}"#;
        let value = schema.decode(payload).unwrap();
        assert_eq!(value["ship_to"]["zip"], json!("12345"));
        assert_eq!(value["id"], json!(1));
    }

    #[test]
    fn invalid_values_name_keyword_and_path() {
        let schema = order();
        let err = schema
            .decode(br#"{"id": "x", "note": null, "day": "2024-01-01"}"#)
            .unwrap_err();
        assert!(err.contains("keyword \"type\" at /id"), "{err}");
        let err = schema
            .decode(br#"{"id": 1, "note": null, "day": "2024-01-01", "ship_to": {"street": "s", "zip": "1"}}"#)
            .unwrap_err();
        assert!(err.contains("keyword \"pattern\" at /ship_to/zip"), "{err}");
        // Formats are asserted, as Confluent's own validator does.
        let err = schema
            .decode(br#"{"id": 1, "note": null, "day": "d"}"#)
            .unwrap_err();
        assert!(err.contains("keyword \"format\" at /day"), "{err}");
        let err = schema.decode(br#"{"id": 1}"#).unwrap_err();
        assert!(err.contains("keyword \"required\" at /"), "{err}");
        let err = schema.decode(b"{not json").unwrap_err();
        assert!(err.contains("payload is not JSON"), "{err}");
        // Nesting beyond serde_json's limit is an error, not a stack overflow.
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(schema.decode(deep.as_bytes()).is_err());
    }

    #[test]
    fn shape_of_an_object() {
        let FieldType::Record { name, fields } = order().shape() else {
            panic!("not a record");
        };
        assert_eq!(name, "Order");
        let field = |n: &str| fields.iter().find(|f| f.name == n).unwrap().clone();
        assert_eq!(field("id").field_type, FieldType::Int64);
        assert!(!field("id").optional);
        assert_eq!(field("amount").field_type, FieldType::Float64);
        assert!(field("amount").optional);
        assert_eq!(field("paid").field_type, FieldType::Boolean);
        assert_eq!(field("paid").default, Some(json!(false)));
        assert_eq!(field("note").field_type, FieldType::String);
        assert!(field("note").optional, "required but nullable");
        assert_eq!(field("day").field_type, FieldType::Date);
        assert_eq!(
            field("at").field_type,
            FieldType::Timestamp(TimeUnit::Micros)
        );
        assert_eq!(field("clock").field_type, FieldType::Time(TimeUnit::Micros));
        assert_eq!(field("uid").field_type, FieldType::Uuid);
        assert_eq!(
            field("tags").field_type,
            FieldType::Array(Box::new(FieldType::String))
        );
        assert_eq!(
            field("counts").field_type,
            FieldType::Map(Box::new(FieldType::Int64))
        );
        assert_eq!(field("extra").field_type, FieldType::Json);
        assert_eq!(field("maybe").field_type, FieldType::Int64);
        assert!(field("maybe").optional);
        let FieldType::Record {
            name,
            fields: address,
        } = field("ship_to").field_type
        else {
            panic!("ship_to is not a record");
        };
        assert_eq!(name, "Address");
        assert!(!address[0].optional && address[1].optional);
        assert_eq!(
            field("bill_to").field_type.fields()[0].field_type,
            FieldType::Int64
        );
    }

    #[test]
    fn recursive_schemas_and_missing_references() {
        let text = r##"{"type": "object", "properties": {
            "v": {"type": "string"}, "next": {"$ref": "#"}}}"##;
        let schema = JsonSchemaSchema::from_registered(&registered(text, Vec::new())).unwrap();
        assert_eq!(schema.shape().fields()[1].field_type, FieldType::Json);
        assert!(schema.decode(br#"{"next": {"next": {"v": 1}}}"#).is_err());
        // A $ref the registry did not supply fails to compile, and nothing is fetched.
        let text = r#"{"$ref": "https://example.com/missing.json"}"#;
        let err = JsonSchemaSchema::from_registered(&registered(text, Vec::new())).unwrap_err();
        assert!(
            err.contains("does not compile") && err.contains("missing.json"),
            "{err}"
        );
        let err = JsonSchemaSchema::from_registered(&registered("{", Vec::new())).unwrap_err();
        assert!(err.contains("not JSON"), "{err}");
        let err = JsonSchemaSchema::from_registered(&registered(r#"{"type": 5}"#, Vec::new()))
            .unwrap_err();
        assert!(err.contains("does not compile"), "{err}");
    }

    #[test]
    fn references_by_full_url() {
        let text = r#"{"$id": "https://example.com/schemas/order.json", "type": "object",
            "properties": {"a": {"$ref": "address.json"}}}"#;
        let schema =
            JsonSchemaSchema::from_registered(&registered(text, vec![("address.json", ADDRESS)]))
                .unwrap();
        assert!(schema.decode(br#"{"a": {"street": 1}}"#).is_err());
        assert!(schema.decode(br#"{"a": {"street": "s"}}"#).is_ok());
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(
            text in "\\PC{0,120}",
            payload in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            if let Ok(schema) = JsonSchemaSchema::from_registered(&registered(&text, Vec::new())) {
                let _ = schema.decode(&payload);
                let _ = schema.shape();
            }
            let _ = order().decode(&payload);
        }

        #[test]
        fn arbitrary_json_schemas_never_panic(
            key in prop::sample::select(vec!["type", "properties", "$ref", "items", "anyOf", "format", "required"]),
            value in prop::sample::select(vec![r#""object""#, r##""#""##, "[]", "{}", "5", r##"{"a":{"$ref":"#"}}"##, r#"["null",{"type":"null"}]"#]),
        ) {
            let text = format!("{{\"{key}\": {value}}}");
            if let Ok(schema) = JsonSchemaSchema::from_registered(&registered(&text, Vec::new())) {
                let _ = schema.decode(b"{\"a\": [1, {\"b\": null}]}");
                let _ = schema.shape();
            }
        }
    }
}
