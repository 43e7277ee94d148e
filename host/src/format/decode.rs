//! One connector's decoders: its `key_format` and `format`, the registry they fetch
//! schemas from, and the schemas compiled from what it answered.
//!
//! Decoding is two steps, so a registry that does not answer never costs a record:
//!
//! 1. [`Decoders::resolve`] (async) reads the frames of a batch and fetches the schemas it
//!    names that are not compiled yet. A registry that is down is an `Err` for the whole
//!    batch: the task waits it out with `errors.retry` and nothing is dead-lettered. An id
//!    the registry does not know is kept as that id's answer, for its records alone.
//! 2. [`Decoders::decode`] (sync, on the transform thread) decodes one record with what
//!    step 1 resolved: its key and value become JSON text, and the schemas they were
//!    written with are handed back to stay beside the record.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::avro::AvroSchema;
use super::compiled::{Answer, RecordSchemas, SchemaSource, WriterSchema};
use super::registry::RegistryError;
use super::wire::{self, SchemaRef};
use super::{SchemaType, connect_json};
use crate::config::{ConnectorConfig, Format, SchemaRegistryConfig};
use crate::failure::FailureClass;
use crate::record::{Incoming, Record};

/// Most Connect schemas (by their text) kept per connector.
const MAX_CONNECT_SCHEMAS: usize = 1_000;

/// Why a connector's decoders cannot be set up: a problem with the configuration, named by
/// its path.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {message}")]
    Config { path: String, message: String },
}

/// How one side (key or value) is decoded.
enum SideDecoder {
    /// Confluent's wire format, schemas from a registry.
    Registry {
        expected: SchemaType,
        format: &'static str,
        source: Arc<SchemaSource>,
    },
    /// Bare Avro datums with the schema of a file.
    AvroFile {
        schema: AvroSchema,
        writer: Arc<WriterSchema>,
    },
    /// Kafka Connect's envelope, schemas by their text.
    ConnectJson {
        writers: Mutex<super::registry::Lru<String, Arc<WriterSchema>>>,
    },
}

/// Which side of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Key,
    Value,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Key => "key",
            Side::Value => "value",
        }
    }

    fn header(self) -> &'static str {
        match self {
            Side::Key => wire::KEY_SCHEMA_ID_HEADER,
            Side::Value => wire::VALUE_SCHEMA_ID_HEADER,
        }
    }
}

/// One record decoded: the schemas of its key and value, and the value itself when it was
/// decoded (its JSON text is in the record now).
#[derive(Debug, Default)]
pub struct Decoded {
    pub schemas: RecordSchemas,
    pub value: Option<Value>,
}

/// A batch's schemas, resolved by [`Decoders::resolve`] for [`Decoders::decode`].
#[derive(Default)]
pub struct Resolved {
    answers: HashMap<SchemaRef, Answer>,
}

/// A record that cannot be decoded: its failure class and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeFailure {
    pub class: FailureClass,
    pub message: String,
    /// Not the record's fault: its schema was not resolved for the batch (a caller that
    /// skipped [`Decoders::resolve`], a bug in sluice). The batch fails, nothing is
    /// dead-lettered for it.
    pub unresolved: bool,
}

/// A connector's decoders.
pub struct Decoders {
    key: Option<SideDecoder>,
    value: Option<SideDecoder>,
}

impl Decoders {
    /// The decoders of `connector` (with its `schema_registry`, which the `kafka:`
    /// section's fills in when loaded). `None` when neither its `format` nor its
    /// `key_format` decodes on arrival.
    pub fn for_connector(
        connector: &ConnectorConfig,
    ) -> Result<Option<Arc<Decoders>>, FormatError> {
        let registry = connector.schema_registry.as_ref();
        let value = SideDecoder::new(&connector.format, registry, "format")?;
        let key = match &connector.key_format {
            Some(format) => SideDecoder::new(format, registry, "key_format")?,
            None => None,
        };
        if key.is_none() && value.is_none() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Decoders { key, value })))
    }

    /// Whether a decoder waits on a registry (the batch may have to wait for it).
    pub fn uses_registry(&self) -> bool {
        [&self.key, &self.value]
            .into_iter()
            .flatten()
            .any(|d| matches!(d, SideDecoder::Registry { .. }))
    }

    /// Fetches the schemas `batch` names that are not compiled yet. `Err` only for a
    /// registry that cannot answer (transient, or refusing sluice: see
    /// [`RegistryError::is_transient`]); a malformed frame or an unknown id is left for
    /// [`Decoders::decode`] to fail that record alone.
    pub async fn resolve(&self, batch: &[Incoming]) -> Result<Resolved, RegistryError> {
        let mut resolved = Resolved::default();
        for (side, decoder) in [(Side::Key, &self.key), (Side::Value, &self.value)] {
            let Some(SideDecoder::Registry {
                source, expected, ..
            }) = decoder
            else {
                continue;
            };
            for incoming in batch {
                let Some(reference) = frame_of(&incoming.record, side, *expected)
                    .ok()
                    .flatten()
                    .map(|f| f.schema)
                else {
                    continue;
                };
                if resolved.answers.contains_key(&reference) {
                    continue;
                }
                let answer = source.answer(&reference).await?;
                resolved.answers.insert(reference, answer);
            }
        }
        Ok(resolved)
    }

    /// Decodes `record`'s key and value in place, to JSON text, and returns the schemas
    /// they were written with and the decoded value (so the mapping need not parse the
    /// text again). With `value_text` false the value's JSON text is not written (nothing
    /// reads it: the mapping takes the decoded value); the key's always is. A tombstone
    /// (no value) and a null key stay as they are.
    pub fn decode(
        &self,
        record: &mut Record,
        resolved: &Resolved,
        value_text: bool,
    ) -> Result<Decoded, DecodeFailure> {
        let mut decoded = Decoded::default();
        if let Some(decoder) = &self.key {
            decoded.schemas.key = decoder
                .decode(record, Side::Key, resolved, true)?
                .map(|(w, _)| w);
        }
        if let Some(decoder) = &self.value
            && let Some((writer, value)) =
                decoder.decode(record, Side::Value, resolved, value_text)?
        {
            decoded.schemas.value = Some(writer);
            decoded.value = Some(value);
        }
        Ok(decoded)
    }
}

/// The frame of a record's key or value, `None` when it has none (null).
fn frame_of(
    record: &Record,
    side: Side,
    expected: SchemaType,
) -> Result<Option<wire::Frame<'_>>, String> {
    let data = match side {
        Side::Key => record.key.as_deref(),
        Side::Value => record.value.as_deref(),
    };
    let Some(data) = data else {
        return Ok(None);
    };
    let header = record
        .headers
        .iter()
        .rev()
        .find(|(name, _)| name == side.header())
        .and_then(|(_, value)| value.as_deref());
    wire::parse(data, header, expected == SchemaType::Protobuf).map(Some)
}

impl SideDecoder {
    fn new(
        format: &Format,
        registry: Option<&SchemaRegistryConfig>,
        path: &str,
    ) -> Result<Option<SideDecoder>, FormatError> {
        let registry_format = |expected: SchemaType, name: &'static str| {
            let Some(config) = registry else {
                return Err(FormatError::Config {
                    path: path.to_string(),
                    message: format!(
                        "{name} reads its schemas from a Schema Registry: set kafka.schema_registry (or the connector's schema_registry)"
                    ),
                });
            };
            let source = SchemaSource::shared(config).map_err(|message| FormatError::Config {
                path: "schema_registry".into(),
                message,
            })?;
            Ok(Some(SideDecoder::Registry {
                expected,
                format: name,
                source,
            }))
        };
        match format {
            Format::Json | Format::String | Format::Bytes => Ok(None),
            Format::Avro => registry_format(SchemaType::Avro, "avro"),
            Format::Protobuf => registry_format(SchemaType::Protobuf, "protobuf"),
            Format::JsonSchema => registry_format(SchemaType::Json, "json_schema"),
            Format::ConnectJson => Ok(Some(SideDecoder::ConnectJson {
                writers: Mutex::new(super::registry::Lru::new(MAX_CONNECT_SCHEMAS)),
            })),
            Format::AvroFile { schema } => {
                let schema = load_avro_file(schema).map_err(|message| FormatError::Config {
                    path: format!("{path}.avro.schema"),
                    message,
                })?;
                let writer = Arc::new(WriterSchema {
                    reference: None,
                    format: "avro",
                    shape: schema.shape(),
                    message: None,
                });
                Ok(Some(SideDecoder::AvroFile { schema, writer }))
            }
        }
    }

    fn decode(
        &self,
        record: &mut Record,
        side: Side,
        resolved: &Resolved,
        write_text: bool,
    ) -> Result<Option<(Arc<WriterSchema>, Value)>, DecodeFailure> {
        let fail = |class: FailureClass, message: String| DecodeFailure {
            class,
            message: format!("{}: {message}", side.name()),
            unresolved: false,
        };
        let (value, writer) = match self {
            SideDecoder::Registry {
                expected, format, ..
            } => {
                let frame = match frame_of(record, side, *expected) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => return Ok(None),
                    Err(message) => {
                        return Err(fail(
                            FailureClass::BadFrame,
                            format!("not in the Confluent wire format ({format}): {message}"),
                        ));
                    }
                };
                let compiled = match resolved.answers.get(&frame.schema) {
                    Some(Answer::Ready(compiled)) => compiled,
                    Some(Answer::Missing(class, message)) => {
                        return Err(fail(*class, message.clone()));
                    }
                    None => {
                        return Err(DecodeFailure {
                            unresolved: true,
                            ..fail(
                                FailureClass::SchemaNotFound,
                                format!("{} was not resolved for this batch", frame.schema),
                            )
                        });
                    }
                };
                if compiled.schema_type() != *expected {
                    return Err(fail(
                        FailureClass::DecodeFailed,
                        format!(
                            "{} is a {} schema, and the connector reads {format}",
                            frame.schema,
                            compiled.schema_type().name()
                        ),
                    ));
                }
                compiled
                    .decode(&frame.message_indexes, frame.payload)
                    .map_err(|m| {
                        fail(
                            FailureClass::DecodeFailed,
                            format!("does not match {}: {m}", frame.schema),
                        )
                    })?
            }
            SideDecoder::AvroFile { schema, writer } => {
                let Some(data) = side_data(record, side) else {
                    return Ok(None);
                };
                let value = schema.decode(data).map_err(|m| {
                    fail(
                        FailureClass::DecodeFailed,
                        format!("does not match the Avro schema file: {m}"),
                    )
                })?;
                (value, writer.clone())
            }
            SideDecoder::ConnectJson { writers } => {
                let Some(data) = side_data(record, side) else {
                    return Ok(None);
                };
                let (value, schema) =
                    connect_json::decode(data).map_err(|m| fail(FailureClass::DecodeFailed, m))?;
                (
                    value,
                    connect_writer(writers, &schema)
                        .map_err(|m| fail(FailureClass::DecodeFailed, m))?,
                )
            }
        };
        if write_text {
            let text = serde_json::to_vec(&value)
                .map_err(|e| fail(FailureClass::DecodeFailed, e.to_string()))?;
            match side {
                Side::Key => record.key = Some(text),
                Side::Value => record.value = Some(text),
            }
        }
        Ok(Some((writer, value)))
    }
}

fn side_data(record: &Record, side: Side) -> Option<&[u8]> {
    match side {
        Side::Key => record.key.as_deref(),
        Side::Value => record.value.as_deref(),
    }
}

/// The writer schema of a Connect envelope's schema, cached by its text.
fn connect_writer(
    writers: &Mutex<super::registry::Lru<String, Arc<WriterSchema>>>,
    schema: &Value,
) -> Result<Arc<WriterSchema>, String> {
    let text = schema.to_string();
    let mut writers = writers.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(writer) = writers.get(&text) {
        return Ok(writer.clone());
    }
    let writer = Arc::new(WriterSchema {
        reference: None,
        format: "connect_json",
        shape: connect_json::shape(schema)?,
        message: None,
    });
    writers.insert(text, writer.clone());
    Ok(writer)
}

/// Reads and parses an `.avsc` file (`format: { avro: { schema: FILE } }`).
pub fn load_avro_file(path: &Path) -> Result<AvroSchema, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    AvroSchema::parse(&text, &[])
        .map_err(|e| format!("{} is not an Avro schema: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Urls;
    use crate::format::registry::test_registry::TestRegistry;

    fn settings(url: String) -> SchemaRegistryConfig {
        SchemaRegistryConfig {
            url: Urls(vec![url]),
            username: None,
            password: None,
            token: None,
            tls: None,
        }
    }

    const WORD: &str =
        r#"{"type": "record", "name": "W", "fields": [{"name": "id", "type": "long"}]}"#;

    /// One source per registry in the process: every connector and task that names it
    /// shares its client and compiled schemas, so a schema is fetched once.
    #[tokio::test]
    async fn a_registry_is_asked_once_per_schema_by_the_whole_process() {
        let registry = TestRegistry::start().await;
        let id = registry.register("w-value", "AVRO", WORD, serde_json::json!([]));
        let first = SchemaSource::shared(&settings(registry.url())).unwrap();
        let second = SchemaSource::shared(&settings(registry.url())).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        for source in [&first, &second, &first] {
            let answer = source.answer(&SchemaRef::Id(id)).await.unwrap();
            assert!(matches!(answer, Answer::Ready(_)));
        }
        assert_eq!(registry.requests(), 1, "{:?}", registry.log());
    }

    /// An id the registry does not have is asked again: it may be there later (a replica
    /// behind its primary), unlike what an id names, which never changes.
    #[tokio::test]
    async fn an_unknown_id_is_not_remembered() {
        let registry = TestRegistry::start().await;
        let source = SchemaSource::shared(&settings(registry.url())).unwrap();
        let missing = source.answer(&SchemaRef::Id(1)).await.unwrap();
        assert!(
            matches!(missing, Answer::Missing(FailureClass::SchemaNotFound, _)),
            "the registry is empty"
        );
        let id = registry.register("w-value", "AVRO", WORD, serde_json::json!([]));
        assert_eq!(id, 1);
        let found = source.answer(&SchemaRef::Id(1)).await.unwrap();
        assert!(matches!(found, Answer::Ready(_)), "asked again, and found");
    }
}
