//! A registry's schemas compiled for decoding, and the writer schemas their records carry
//! on: one [`SchemaSource`] per registry for the whole process (its client and the schemas
//! compiled from its answers, least recently used first out), shared by every connector
//! that names it. [`super::decode`] decodes records with them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use super::avro::AvroSchema;
use super::json_schema::JsonSchemaSchema;
use super::protobuf::ProtoSchema;
use super::registry::{RegistryClient, RegistryError};
use super::shape::FieldType;
use super::wire::SchemaRef;
use super::{RegisteredSchema, SchemaType};
use crate::config::SchemaRegistryConfig;
use crate::failure::FailureClass;

/// Most compiled schemas kept per registry: ids are immutable, so they never expire; past
/// this the least recently used goes first.
const MAX_COMPILED: usize = 10_000;
/// The schema a key or value was written with, kept beside the record: its fields, types,
/// optionality, defaults and logical types (`shape`), and for Protobuf the message.
#[derive(Debug)]
pub struct WriterSchema {
    /// The registry's id or GUID; `None` for a schema file or Connect's envelope.
    pub reference: Option<SchemaRef>,
    /// The format it was decoded by.
    pub format: &'static str,
    pub shape: FieldType,
    /// The Protobuf message, when it is one.
    pub message: Option<prost_reflect::MessageDescriptor>,
}

/// The schemas of one record's key and value (`None` where the format carries none).
#[derive(Debug, Clone, Default)]
pub struct RecordSchemas {
    pub key: Option<Arc<WriterSchema>>,
    pub value: Option<Arc<WriterSchema>>,
}

/// A schema compiled for decoding.
pub(super) enum Compiled {
    Avro(AvroSchema),
    Protobuf(ProtoSchema),
    Json(JsonSchemaSchema),
}

/// What a registry answered for one schema reference, compiled: the schema, or why its
/// records cannot be decoded (`schema_not_found`, or `decode_failed` for a schema that
/// does not compile).
#[derive(Clone)]
pub(super) enum Answer {
    Ready(Arc<CompiledSchema>),
    Missing(FailureClass, String),
}

/// A compiled schema and its writer schema (Protobuf's are per message, made on use).
pub(super) struct CompiledSchema {
    pub(super) reference: SchemaRef,
    pub(super) compiled: Compiled,
    /// Avro and JSON Schema: the one writer schema, made on first use (no lock per record).
    writer: OnceLock<Arc<WriterSchema>>,
    /// Protobuf: one writer schema per message-index path.
    writers: Mutex<HashMap<Vec<i32>, Arc<WriterSchema>>>,
}

impl CompiledSchema {
    pub(super) fn compile(
        reference: SchemaRef,
        registered: &RegisteredSchema,
    ) -> Result<Self, String> {
        let compiled = match registered.schema_type {
            SchemaType::Avro => Compiled::Avro(AvroSchema::from_registered(registered)?),
            SchemaType::Protobuf => Compiled::Protobuf(ProtoSchema::from_registered(registered)?),
            SchemaType::Json => Compiled::Json(JsonSchemaSchema::from_registered(registered)?),
        };
        Ok(CompiledSchema {
            reference,
            compiled,
            writer: OnceLock::new(),
            writers: Mutex::new(HashMap::new()),
        })
    }

    pub(super) fn schema_type(&self) -> SchemaType {
        match self.compiled {
            Compiled::Avro(_) => SchemaType::Avro,
            Compiled::Protobuf(_) => SchemaType::Protobuf,
            Compiled::Json(_) => SchemaType::Json,
        }
    }

    /// Decodes a payload, with its writer schema.
    pub(super) fn decode(
        &self,
        indexes: &[i32],
        payload: &[u8],
    ) -> Result<(Value, Arc<WriterSchema>), String> {
        let value = match &self.compiled {
            Compiled::Avro(schema) => schema.decode(payload)?,
            Compiled::Protobuf(schema) => schema.decode(indexes, payload)?,
            Compiled::Json(schema) => schema.decode(payload)?,
        };
        Ok((value, self.writer(indexes)?))
    }

    pub(super) fn writer(&self, indexes: &[i32]) -> Result<Arc<WriterSchema>, String> {
        let made = |format, shape, message| {
            Arc::new(WriterSchema {
                reference: Some(self.reference.clone()),
                format,
                shape,
                message,
            })
        };
        let schema = match &self.compiled {
            Compiled::Avro(schema) => {
                return Ok(self
                    .writer
                    .get_or_init(|| made("avro", schema.shape(), None))
                    .clone());
            }
            Compiled::Json(schema) => {
                return Ok(self
                    .writer
                    .get_or_init(|| made("json_schema", schema.shape(), None))
                    .clone());
            }
            Compiled::Protobuf(schema) => schema,
        };
        let mut writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(writer) = writers.get(indexes) {
            return Ok(writer.clone());
        }
        let writer = made(
            "protobuf",
            schema.shape(indexes)?,
            Some(schema.message(indexes)?),
        );
        writers.insert(indexes.to_vec(), writer.clone());
        Ok(writer)
    }
}

/// One registry, shared by every connector of the process that uses it: its client and
/// the schemas compiled from its answers.
pub struct SchemaSource {
    client: RegistryClient,
    compiled: Mutex<super::registry::Lru<SchemaRef, Answer>>,
}

type Sources = Mutex<Vec<(SchemaRegistryConfig, Arc<SchemaSource>)>>;

/// Every registry the process has asked, once each.
fn sources() -> &'static Sources {
    static SOURCES: OnceLock<Sources> = OnceLock::new();
    SOURCES.get_or_init(|| Mutex::new(Vec::new()))
}

impl SchemaSource {
    /// The process's source for `config`, made the first time it is asked for.
    pub fn shared(config: &SchemaRegistryConfig) -> Result<Arc<SchemaSource>, String> {
        let mut sources = sources().lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, source)) = sources.iter().find(|(c, _)| c == config) {
            return Ok(source.clone());
        }
        let mut client = RegistryClient::new(config)?;
        client.set_observer(crate::metrics::schema_registry_observer());
        let source = Arc::new(SchemaSource {
            client,
            compiled: Mutex::new(super::registry::Lru::new(MAX_COMPILED)),
        });
        sources.push((config.clone(), source.clone()));
        Ok(source)
    }

    pub(super) fn cached(&self, reference: &SchemaRef) -> Option<Answer> {
        self.compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(reference)
            .cloned()
    }

    /// The answer for `reference`, fetched and compiled if it is not cached.
    pub(super) async fn answer(&self, reference: &SchemaRef) -> Result<Answer, RegistryError> {
        if let Some(answer) = self.cached(reference) {
            return Ok(answer);
        }
        let fetched = match reference {
            SchemaRef::Id(id) => self.client.schema_by_id(*id).await,
            SchemaRef::Guid(guid) => self.client.schema_by_guid(guid).await,
        };
        let answer = match fetched {
            Ok(registered) => match CompiledSchema::compile(reference.clone(), &registered) {
                Ok(compiled) => Answer::Ready(Arc::new(compiled)),
                Err(message) => Answer::Missing(
                    FailureClass::DecodeFailed,
                    format!("{reference} from the registry does not compile: {message}"),
                ),
            },
            // Not cached: an id that is absent now (a replica behind its primary) may be
            // there for the next batch; only what a schema id names is immutable.
            Err(RegistryError::NotFound { what }) => {
                return Ok(Answer::Missing(
                    FailureClass::SchemaNotFound,
                    format!(
                        "{what} is not in the schema registry {}",
                        self.client.describe()
                    ),
                ));
            }
            Err(RegistryError::Unusable { what, message }) => Answer::Missing(
                FailureClass::DecodeFailed,
                format!(
                    "{what}: the schema registry {} answered a schema that cannot be used: {message}",
                    self.client.describe()
                ),
            ),
            Err(error) => return Err(error),
        };
        self.compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(reference.clone(), answer.clone());
        let cached: usize = sources()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, source)| source.client.cached())
            .sum();
        crate::metrics::set_cached_schemas(cached);
        Ok(answer)
    }
}
