//! The decode stage: a record's key and value, in the connector's `format` and
//! `key_format`, become JSON text on arrival, with the schema they were written with kept
//! beside them (docs/formats.md). It runs before transforms, dedup and the mapping, so
//! nothing further down reads Avro, Protobuf, JSON Schema or Connect's envelope.
//!
//! - [`wire`]: the Confluent wire format's frame (magic byte, schema id or GUID, Protobuf
//!   message indexes);
//! - [`registry`]: the Schema Registry client and its cache of schemas by id;
//! - [`avro`], [`protobuf`], [`json_schema`], [`connect_json`]: one decoder per format;
//! - [`shape`]: every format's schema in one vocabulary; [`temporal`]: the decoded forms
//!   of dates, times, instants and decimals.

pub mod avro;
mod compiled;
pub mod connect_json;
mod decode;
pub mod json_schema;
pub mod protobuf;
pub mod registry;
pub mod shape;
pub mod temporal;
pub mod wire;

pub use compiled::{RecordSchemas, SchemaSource, WriterSchema};
pub use decode::{DecodeFailure, Decoded, Decoders, FormatError, Resolved, load_avro_file};
pub use registry::RegistryError;

use std::sync::Arc;

/// The kind of schema a registry holds (its `schemaType`; absent means Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    /// As the registry's `schemaType` spells it.
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }
}

/// A schema as the registry gave it: its type and text, and the schemas it references
/// (resolved, each with what it references in turn).
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredSchema {
    pub schema_type: SchemaType,
    pub text: String,
    pub references: Vec<Reference>,
}

/// One reference of a registered schema: the name it is imported or referred to by (a
/// Protobuf import path, an Avro full name, a JSON Schema `$ref` URL), and the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i32,
    pub schema: Arc<RegisteredSchema>,
}

impl RegisteredSchema {
    /// Every schema this one references, directly or not, each once, the referenced before
    /// those that refer to them (the order Avro named types must be defined in).
    pub fn references_in_order(&self) -> Vec<(&str, &RegisteredSchema)> {
        fn visit<'a>(schema: &'a RegisteredSchema, out: &mut Vec<(&'a str, &'a RegisteredSchema)>) {
            for reference in &schema.references {
                if out.iter().any(|(name, _)| *name == reference.name) {
                    continue;
                }
                visit(&reference.schema, out);
                if !out.iter().any(|(name, _)| *name == reference.name) {
                    out.push((reference.name.as_str(), &reference.schema));
                }
            }
        }
        let mut out = Vec::new();
        visit(self, &mut out);
        out
    }
}
