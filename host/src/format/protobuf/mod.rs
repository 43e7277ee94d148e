//! The Protobuf decoder: a registered `.proto` schema, compiled with protox into a
//! descriptor pool, decodes a record's payload (the bytes after the Confluent frame and its
//! message indexes) into JSON, and describes the message in sluice's vocabulary.
//!
//! - [`builtin`]: the imports a schema may use without registering them;
//! - [`json`]: a decoded message as JSON (sluice's forms, not Protobuf's JSON mapping);
//! - [`shape`]: a message as a [`FieldType`].
//!
//! A schema's imports are its registry references (the import path each is referenced
//! by), then the built-ins; nothing is read from files. The schema and each reference may
//! be `.proto` text or a base64 `FileDescriptorProto` (Confluent's Python serializer
//! registers those).

mod builtin;
mod json;
mod shape;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use base64::Engine as _;
use prost_reflect::prost::Message as _;
use prost_reflect::prost_types::FileDescriptorProto;
use prost_reflect::{DescriptorPool, DynamicMessage, FileDescriptor, MessageDescriptor};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use super::RegisteredSchema;
use super::shape::FieldType;

/// The name the registered schema's own text is compiled under (it has no path of its
/// own); chosen so that no import path a producer would use collides with it.
const MAIN_FILE: &str = "sluice/registered-schema.proto";

/// A compiled Protobuf schema: its descriptor pool (the schema, its imports and the
/// well-known types) and the file whose messages the Confluent message indexes name.
pub struct ProtoSchema {
    pool: DescriptorPool,
    file: FileDescriptor,
}

impl std::fmt::Debug for ProtoSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtoSchema")
            .field("package", &self.file.package_name())
            .field("messages", &self.file.messages().len())
            .finish()
    }
}

/// Opens imports from memory: the registry references by import path, then the built-ins.
struct MemoryResolver {
    files: HashMap<String, Source>,
}

/// A registered schema's text: `.proto` source (what registries answer), or a base64
/// `FileDescriptorProto` (what Confluent's Python serializer registers), kept encoded so
/// that its extension options (`confluent.field_meta`) survive.
enum Source {
    Text(String),
    Descriptor(Vec<u8>),
}

impl Source {
    /// Reads a schema's text as the file `name`. Text that is base64 of a
    /// `FileDescriptorProto` is that descriptor, renamed to `name` (the path it is
    /// imported by) by appending a `name` field, which Protobuf's last-one-wins rule for
    /// singular fields makes the name. Anything else is `.proto` source (which is never
    /// valid base64: it has spaces, `;` or braces).
    fn read(name: &str, text: &str) -> Source {
        let descriptor = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()
            .filter(|bytes| !bytes.is_empty())
            .filter(|bytes| FileDescriptorProto::decode(bytes.as_slice()).is_ok());
        match descriptor {
            Some(mut bytes) => {
                let renamed = FileDescriptorProto {
                    name: Some(name.to_string()),
                    ..Default::default()
                };
                renamed.encode(&mut bytes).unwrap_or_default();
                Source::Descriptor(bytes)
            }
            None => Source::Text(text.to_string()),
        }
    }
}

impl FileResolver for MemoryResolver {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.files.get(name) {
            Some(Source::Text(source)) => return File::from_source(name, source),
            Some(Source::Descriptor(bytes)) => {
                return File::decode_file_descriptor_proto(bytes.as_slice()).map_err(|e| {
                    protox::Error::new(format!("{name} is not a valid FileDescriptorProto: {e}"))
                });
            }
            None => {}
        }
        match builtin::source(name) {
            Some(source) => File::from_source(name, source),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

impl ProtoSchema {
    /// Compiles the registry's `.proto` text (or base64 `FileDescriptorProto`); its
    /// `references` are the imports
    /// ([`RegisteredSchema::references_in_order`]: (import path, schema)). The imports
    /// `google/protobuf/*.proto` (well-known types), `confluent/meta.proto`,
    /// `confluent/type/decimal.proto` and `google/type/date.proto` are built in.
    pub fn from_registered(schema: &RegisteredSchema) -> Result<ProtoSchema, String> {
        let mut files = HashMap::new();
        for (name, reference) in schema.references_in_order() {
            files.insert(name.to_string(), Source::read(name, &reference.text));
        }
        files.insert(MAIN_FILE.to_string(), Source::read(MAIN_FILE, &schema.text));
        let mut resolver = ChainFileResolver::new();
        resolver.add(MemoryResolver { files });
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_source_info(false);
        compiler
            .open_file(MAIN_FILE)
            .map_err(|e| compile_error(&e))?;
        let pool = compiler.descriptor_pool();
        let file = pool
            .get_file_by_name(MAIN_FILE)
            .ok_or_else(|| "the compiled Protobuf schema lost its own file".to_string())?;
        Ok(ProtoSchema { pool, file })
    }

    /// The message the Confluent message-index list names: `[]` or `[0]` is the file's
    /// first message; `[i]` the i-th top-level message; `[i, j]` the j-th message nested in
    /// it, and so on. Nested messages are counted as Confluent's Java serializer and
    /// deserializer count them, over the messages the `.proto` declares: the map-entry
    /// messages a descriptor synthesizes for `map<…>` fields are skipped.
    pub fn message(&self, indexes: &[i32]) -> Result<MessageDescriptor, String> {
        let (first, nested) = match indexes.split_first() {
            Some((first, nested)) => (*first, nested),
            None => (0, &[][..]),
        };
        let mut message = nth(self.file.messages(), first).ok_or_else(|| {
            format!(
                "message index {first} names no top-level message: the schema has {} (indexes {indexes:?})",
                self.file.messages().len()
            )
        })?;
        for index in nested {
            let parent = message.full_name().to_string();
            let declared = || message.child_messages().filter(|m| !m.is_map_entry());
            let count = declared().count();
            message = nth(declared(), *index).ok_or_else(|| {
                format!(
                    "message index {index} names no message nested in {parent}: it has {count} (indexes {indexes:?})"
                )
            })?;
        }
        Ok(message)
    }

    /// Decodes `payload` as the message `indexes` names into JSON (see [`json`] for the
    /// forms).
    pub fn decode(&self, indexes: &[i32], payload: &[u8]) -> Result<serde_json::Value, String> {
        let descriptor = self.message(indexes)?;
        let message = DynamicMessage::decode(descriptor.clone(), payload).map_err(|e| {
            format!(
                "payload is not a valid Protobuf {}: {e}",
                descriptor.full_name()
            )
        })?;
        json::message(&self.pool, &message)
    }

    /// The shape of the message `indexes` names.
    pub fn shape(&self, indexes: &[i32]) -> Result<FieldType, String> {
        let descriptor = self.message(indexes)?;
        Ok(shape::message(&self.pool, &descriptor))
    }
}

/// The `index`-th item, refusing a negative index.
fn nth<T>(mut items: impl Iterator<Item = T>, index: i32) -> Option<T> {
    usize::try_from(index).ok().and_then(|i| items.nth(i))
}

/// A compile error as a user can act on it: which file, and what protox said.
fn compile_error(error: &protox::Error) -> String {
    let file = match error.file() {
        Some(MAIN_FILE) | None => "the registered schema".to_string(),
        Some(name) => format!("its import {name:?}"),
    };
    format!("the Protobuf schema does not compile: {error} (in {file})")
}
