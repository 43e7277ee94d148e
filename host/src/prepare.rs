//! One batch through the stages before the database: arrival checks, the transform chain,
//! the JSON Schema and the column mapping. Every failure belongs to one input record and
//! is kept apart ([`Failure`]); the others become row operations.
//!
//! The task uses this for every batch it consumes, and `sluice dlq redrive` for the dead
//! letters it re-submits, so both see exactly the same pipeline.

use std::sync::Arc;

use crate::config::{ColumnNameRules, ConnectorConfig, DedupIdSource, ErrorPolicy, Format};
use crate::dedup::{self, DedupKey};
use crate::failure::{Failure, FailureClass, Stage};
use crate::format::{Decoders, RecordSchemas, RegistryError, Resolved};
use crate::map::{
    DerivedShape, Deriver, MapError, RowMapper, RowOp, TableRouter, TableRoutes, TypeRules,
};
use crate::record::{Incoming, Record, RecordExt};
use crate::validate::{self, RecordSchema};

/// Why a batch could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Transform(#[from] sluice_transform::TransformError),
    /// The search for a batch's failing records ran out of its budget, and the error
    /// policy is not `dlq`: the records not told apart cannot be skipped or failed one by
    /// one without dropping innocent ones, so the task fails.
    #[error(
        "transform {plugin} failed on records of a batch that could not be told apart within `errors.isolation` ({message}); raise `errors.isolation`, fix the plugin, or use `errors.policy: dlq` to keep such records as dead letters"
    )]
    NotIsolated { plugin: String, message: String },
    /// The task's transform thread could not be started.
    #[error("cannot start the transform thread: {0}")]
    WorkerStart(std::io::Error),
    /// The task's transform thread ended while the task ran (a panic in it).
    #[error("the transform thread ended unexpectedly (see the log above for its panic)")]
    WorkerGone,
    /// The Schema Registry cannot answer: waited out when transient
    /// ([`RegistryError::is_transient`]), else the task fails.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The connector's `format` / `key_format` cannot be set up (a schema file, the
    /// registry's settings).
    #[error(transparent)]
    Format(#[from] crate::format::FormatError),
    /// A record's schema was not fetched before its batch was prepared (a bug in sluice:
    /// [`Preparer::resolve`] was not called).
    #[error("internal error: {0}")]
    Unresolved(String),
    /// A preparer for a decoding format was made without its decoders (a bug in sluice).
    #[error(
        "internal error: the connector's {0} decodes on arrival, and its preparer has no decoders"
    )]
    NoDecoders(&'static str),
}

impl PrepareError {
    /// Whether the batch is to be tried again later (with `errors.retry`), and the retry
    /// reason it counts under: the transform chain cannot run now, or the Schema Registry
    /// does not answer.
    pub fn retry_reason(&self) -> Option<&'static str> {
        match self {
            PrepareError::Transform(e) if e.is_chain_failure() => Some("transform_chain"),
            PrepareError::Registry(e) if e.is_transient() => Some("schema_registry"),
            _ => None,
        }
    }
}

/// A prepared batch.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Row operations in record order (no `Skip`).
    pub ops: Vec<RowOp>,
    /// For each operation, the index of the input record it came from.
    pub origins: Vec<usize>,
    /// With a table template: each operation's table (empty for one table).
    pub routes: TableRoutes,
    /// Failed inputs, in input order, one per input at most.
    pub failures: Vec<Failure>,
    /// Inputs that mapped to nothing to write (a tombstone on a table without key).
    pub skipped: u64,
    /// Inputs a transform dropped (answered with no record).
    pub filtered: u64,
    /// Time spent in the transform chain.
    pub transform_time: std::time::Duration,
    /// Time spent in schema checks and mapping.
    pub map_time: std::time::Duration,
    /// The input records as they arrived, when dead letters may need them.
    pub originals: Option<Vec<Record>>,
    /// With `delivery.dedup`: the producer id of each input that passed the arrival checks,
    /// in input order.
    pub dedup: Vec<DedupKey>,
    /// The schemas each input's key and value were written with, in input order, when the
    /// connector's formats carry schemas (empty otherwise). Transforms' outputs keep their
    /// input's entry.
    pub schemas: Vec<RecordSchemas>,
    /// `sink.transactions: source`: the batch holds whole source transactions, which go
    /// together or not at all (a failure under `errors.policy: fail` keeps the whole
    /// batch back, not only its partition's records from the failed one on).
    pub whole: bool,
    /// Each input's topic (an index into `topics`), partition and offset.
    coordinates: Vec<(usize, i32, i64)>,
    topics: Vec<String>,
}

impl Prepared {
    /// How many input records the batch has.
    pub fn inputs(&self) -> usize {
        self.coordinates.len()
    }

    /// A failure of input `index`.
    pub fn failure(
        &self,
        index: usize,
        stage: Stage,
        class: FailureClass,
        message: String,
    ) -> Failure {
        let (topic, partition, offset) = self.coordinates[index];
        Failure {
            index,
            topic: self.topics[topic].clone(),
            partition,
            offset,
            stage,
            class,
            message,
        }
    }

    /// Takes what input `index` mapped to: an operation, a counted skip, or its failure
    /// (handed back).
    fn take_mapped(
        &mut self,
        index: usize,
        record: &Record,
        mapped: Result<Mapped, (Stage, FailureClass, String)>,
    ) -> Option<Failure> {
        match mapped {
            Ok((RowOp::Skip(why), _, _)) => {
                tracing::debug!(record = %record.coordinates(), why, "record skipped");
                self.skipped += 1;
                None
            }
            Ok((op, table, shape)) => {
                self.ops.push(op);
                self.origins.push(index);
                if let Some(table) = table {
                    self.routes.push(table);
                }
                if let Some(shape) = shape {
                    let (topic, partition, offset) = self.coordinates[index];
                    let topics = &self.topics;
                    self.routes
                        .push_shape(shape, || (topics[topic].to_string(), partition, offset));
                }
                None
            }
            Err((stage, class, message)) => Some(self.failure(index, stage, class, message)),
        }
    }

    /// Input `index`'s partition and offset, with its topic.
    pub fn position(&self, index: usize) -> (&str, i32, i64) {
        let (topic, partition, offset) = self.coordinates[index];
        (&self.topics[topic], partition, offset)
    }
}

/// What a record mapped to: its operation, its table when the connector has a table
/// template or derived columns, and with derived columns the shape its values are in.
type Mapped = (RowOp, Option<Arc<str>>, Option<Arc<DerivedShape>>);

/// Runs batches through the stages before the sink, for one task.
pub struct Preparer {
    chain: Option<sluice_transform::TransformChain>,
    schema: Option<Arc<RecordSchema>>,
    mapper: RowMapper,
    /// With a table template: each record's table.
    router: Option<TableRouter>,
    /// With derived columns: each record's columns, from its schema.
    deriver: Option<Deriver>,
    /// With derived columns and one table: its name, the route of every operation.
    fixed_table: Option<Arc<str>>,
    format: Format,
    max_record_bytes: u64,
    keep_originals: bool,
    policy: ErrorPolicy,
    isolation: sluice_transform::Isolation,
    dedup: Option<DedupIdSource>,
    /// The connector's decoders, when a format decodes on arrival.
    decoders: Option<Arc<Decoders>>,
    /// `format` or `key_format`, when one of them decodes on arrival.
    decoding: Option<&'static str>,
    /// The schemas of the next batch, fetched by [`Preparer::resolve`].
    resolved: Resolved,
    /// `sink.transactions: source`: the transaction topic, whose BEGIN and END records
    /// are in a batch for their offsets only (skipped, counted).
    transaction_topic: Option<String>,
}

impl Preparer {
    /// A preparer for `connector`, with its transform chain (already instantiated) and
    /// compiled schema.
    pub fn new(
        connector: &ConnectorConfig,
        chain: Option<sluice_transform::TransformChain>,
        schema: Option<Arc<RecordSchema>>,
    ) -> Self {
        Self {
            chain,
            schema,
            mapper: RowMapper::new(
                &connector.sink,
                connector.format.clone(),
                connector.envelope,
            ),
            router: TableRouter::for_connector(connector),
            deriver: connector.sink.derives_columns().then(|| {
                Deriver::new(
                    RowMapper::new(
                        &connector.sink,
                        connector.format.clone(),
                        connector.envelope,
                    ),
                    connector.sink.derive.clone(),
                    connector.sink.key.clone(),
                    connector.envelope,
                    connector
                        .sink
                        .versioning(connector.envelope)
                        .map(|v| v.column),
                )
                .for_database(
                    ColumnNameRules::for_scheme(connector.sink.url.scheme()),
                    TypeRules::for_scheme(connector.sink.url.scheme()),
                )
            }),
            fixed_table: connector
                .sink
                .derives_columns()
                .then(|| connector.sink.fixed_table().map(Arc::from))
                .flatten(),
            format: connector.format.mapped(),
            max_record_bytes: connector.max_record_bytes.0,
            keep_originals: connector.errors.policy == ErrorPolicy::Dlq,
            policy: connector.errors.policy,
            isolation: sluice_transform::Isolation {
                max_failed_calls: connector.errors.isolation.max_failed_calls,
                max_time: connector.errors.isolation.max_time.0,
            },
            dedup: connector.delivery.dedup.as_ref().map(|d| d.id.clone()),
            decoders: None,
            decoding: if connector.format.decodes() {
                Some("format")
            } else if connector.key_format.as_ref().is_some_and(|f| f.decodes()) {
                Some("key_format")
            } else {
                None
            },
            resolved: Resolved::default(),
            transaction_topic: connector.transaction_topic().map(str::to_string),
        }
    }

    /// Decodes keys and values on arrival with `decoders` (those of
    /// [`Decoders::for_connector`]); a connector whose formats decode needs them.
    pub fn with_decoders(mut self, decoders: Option<Arc<Decoders>>) -> Self {
        self.decoders = decoders;
        self
    }

    /// Whether [`Preparer::resolve`] has anything to fetch (a format with a registry).
    pub fn uses_registry(&self) -> bool {
        self.decoders.as_ref().is_some_and(|d| d.uses_registry())
    }

    /// Fetches the schemas `batch` names, for the next [`Preparer::prepare`]: call it
    /// before each batch when [`Preparer::uses_registry`]. `Err` when the registry cannot
    /// answer; nothing of the batch has been used then.
    pub async fn resolve(&mut self, batch: &[Incoming]) -> Result<(), RegistryError> {
        if let Some(decoders) = &self.decoders {
            self.resolved = decoders.resolve(batch).await?;
        }
        Ok(())
    }

    /// A preparer for `connector` with its transform chain instantiated on `engine` (its
    /// own stores: one preparer per task, or per redrive), and its decoders.
    pub fn for_connector(
        connector: &ConnectorConfig,
        engine: Option<&sluice_transform::TransformEngine>,
        schema: Option<Arc<RecordSchema>>,
    ) -> Result<Self, PrepareError> {
        let decoders = Decoders::for_connector(connector)?;
        let chain = match engine {
            Some(engine) if !connector.transforms.is_empty() => {
                let specs: Vec<_> = connector.transforms.iter().map(|t| t.spec()).collect();
                Some(sluice_transform::TransformChain::new(
                    engine,
                    &connector.name,
                    &specs,
                )?)
            }
            _ => None,
        };
        Ok(Self::new(connector, chain, schema).with_decoders(decoders))
    }

    /// A flag that, once raised, ends a search for a batch's failing records early (the
    /// owner is stopping and will not use the answer).
    pub fn set_cancel(&mut self, cancel: Arc<std::sync::atomic::AtomicBool>) {
        if let Some(chain) = self.chain.as_mut() {
            chain.set_cancel(cancel);
        }
    }

    /// Tells `observer` of every plugin call (for metrics).
    pub fn set_observer(&mut self, observer: sluice_transform::CallObserver) {
        if let Some(chain) = self.chain.as_mut() {
            chain.set_observer(observer);
        }
    }

    /// Whether batches go through a transform chain.
    pub fn has_transforms(&self) -> bool {
        self.chain.is_some()
    }

    /// For a dry run: the table router claims no table for the running connector (see
    /// [`TableRouter::dry`]).
    pub fn dry_run(mut self) -> Self {
        self.router = self.router.take().map(TableRouter::dry);
        self
    }

    /// Keeps (or not) the input records for dead letters; `dlq redrive` needs them always.
    pub fn keep_originals(mut self, keep: bool) -> Self {
        self.keep_originals = keep;
        self
    }

    /// Prepares one batch. `Err` only when the transform chain itself cannot run (a plugin
    /// that can no longer be instantiated): no record is to blame for that.
    pub fn prepare(&mut self, incoming: Vec<Incoming>) -> Result<Prepared, PrepareError> {
        let mut prepared = Prepared {
            whole: self.transaction_topic.is_some(),
            ..Prepared::default()
        };
        // Which inputs failed; their failures, in the order found.
        let mut failed = vec![false; incoming.len()];
        let mut failures: Vec<Failure> = Vec::new();
        prepared.coordinates.reserve(incoming.len());
        for item in &incoming {
            let r = &item.record;
            let topic = match prepared.topics.iter().rposition(|t| *t == r.topic) {
                Some(t) => t,
                None => {
                    prepared.topics.push(r.topic.clone());
                    prepared.topics.len() - 1
                }
            };
            prepared.coordinates.push((topic, r.partition, r.offset));
        }
        if self.keep_originals {
            prepared.originals = Some(incoming.iter().map(|i| i.record.clone()).collect());
        }

        let decoders = match (&self.decoders, self.decoding) {
            (Some(decoders), _) => Some(decoders.clone()),
            (None, Some(setting)) => return Err(PrepareError::NoDecoders(setting)),
            (None, None) => None,
        };
        let resolved = std::mem::take(&mut self.resolved);
        // Without transforms, a value decoded on arrival is mapped right away, from the
        // decoded document (its JSON text is not parsed again, and is written only when
        // something reads it: dedup, a `$value` column).
        let map_on_arrival = decoders.is_some() && self.chain.is_none();
        let write_text = !map_on_arrival || self.dedup.is_some() || self.mapper.reads_value();
        if decoders.is_some() {
            prepared.schemas = vec![RecordSchemas::default(); incoming.len()];
        }
        let mapping = std::time::Instant::now();

        // Arrival checks: a failing record goes no further.
        let mut passing = Vec::with_capacity(incoming.len());
        let mut passing_index = Vec::with_capacity(incoming.len());
        if map_on_arrival {
            prepared.ops.reserve(incoming.len());
            prepared.origins.reserve(incoming.len());
        }
        let read_at = now_millis();
        for (index, mut item) in incoming.into_iter().enumerate() {
            if self.transaction_topic.as_deref() == Some(item.record.topic.as_str()) {
                tracing::debug!(record = %item.record.coordinates(), "a source transaction's BEGIN or END record");
                prepared.skipped += 1;
                continue;
            }
            let mut problem = match item.defect {
                Some(defect) => Some((FailureClass::HeaderNotUtf8, defect)),
                None => validate::check_size(&item.record, self.max_record_bytes)
                    .err()
                    .map(|m| (FailureClass::RecordTooLarge, m)),
            };
            let mut decoded_value = None;
            if let (None, Some(decoders)) = (&problem, &decoders) {
                match decoders.decode(&mut item.record, &resolved, write_text) {
                    Ok(decoded) => {
                        prepared.schemas[index] = decoded.schemas;
                        decoded_value = decoded.value;
                    }
                    Err(failure) if failure.unresolved => {
                        return Err(PrepareError::Unresolved(failure.message));
                    }
                    Err(failure) => problem = Some((failure.class, failure.message)),
                }
            }
            if let (None, Some(source)) = (&problem, &self.dedup) {
                match dedup::read_id(source, &item.record) {
                    Ok(id) => prepared.dedup.push(DedupKey {
                        input: index,
                        id,
                        timestamp: item.record.timestamp.unwrap_or(read_at).min(read_at),
                        topic: item.record.topic.clone(),
                        partition: item.record.partition,
                        offset: item.record.offset,
                    }),
                    Err(message) => problem = Some((FailureClass::MissingId, message)),
                }
            }
            match problem {
                Some((class, message)) => {
                    failed[index] = true;
                    failures.push(prepared.failure(index, Stage::Source, class, message));
                }
                None if map_on_arrival => {
                    let mapped =
                        self.map_one(&item.record, decoded_value, &prepared.schemas, index);
                    if let Some(failure) = prepared.take_mapped(index, &item.record, mapped) {
                        failed[index] = true;
                        failures.push(failure);
                    }
                }
                None => {
                    passing.push(item.record);
                    passing_index.push(index);
                }
            }
        }

        // Transforms: one guest call per plugin, a failing batch split until the records
        // that make it fail are found.
        let outputs: Vec<(usize, Record)> = match self.chain.as_mut() {
            None => passing_index.into_iter().zip(passing).collect(),
            Some(chain) => {
                let started = std::time::Instant::now();
                let outcomes = chain.process_isolating(passing, self.isolation)?;
                prepared.transform_time = started.elapsed();
                let mut outputs = Vec::with_capacity(outcomes.len());
                for (outcome, index) in outcomes.into_iter().zip(passing_index) {
                    match outcome {
                        sluice_transform::Outcome::Records(records) => {
                            if records.is_empty() {
                                prepared.filtered += 1;
                            }
                            outputs.extend(records.into_iter().map(|r| (index, r)));
                        }
                        sluice_transform::Outcome::NotIsolated { plugin, reason } => {
                            if self.policy != ErrorPolicy::Dlq {
                                return Err(PrepareError::NotIsolated {
                                    plugin,
                                    message: reason,
                                });
                            }
                            failed[index] = true;
                            failures.push(prepared.failure(
                                index,
                                Stage::Transform,
                                FailureClass::TransformNotIsolated,
                                format!("transform {plugin}: not isolated: {reason}"),
                            ));
                        }
                        sluice_transform::Outcome::Failed { plugin, message } => {
                            failed[index] = true;
                            failures.push(prepared.failure(
                                index,
                                Stage::Transform,
                                FailureClass::Transform,
                                format!("transform {plugin}: {message}"),
                            ));
                        }
                    }
                }
                outputs
            }
        };

        // Schema and mapping, output by output (decoded values were mapped on arrival).
        let mapping = if map_on_arrival {
            mapping
        } else {
            std::time::Instant::now()
        };
        prepared.ops.reserve(outputs.len());
        prepared.origins.reserve(outputs.len());
        for (index, record) in &outputs {
            let index = *index;
            if failed[index] {
                continue;
            }
            let mapped = self.map_one(record, None, &prepared.schemas, index);
            if let Some(failure) = prepared.take_mapped(index, record, mapped) {
                failed[index] = true;
                failures.push(failure);
            }
        }
        failures.sort_by_key(|f| f.index);
        prepared.failures = failures;
        if !prepared.failures.is_empty() {
            // An input with several outputs fails as a whole.
            let keep: Vec<bool> = prepared.origins.iter().map(|&o| !failed[o]).collect();
            let (ops, origins): (Vec<RowOp>, Vec<usize>) = std::mem::take(&mut prepared.ops)
                .into_iter()
                .zip(std::mem::take(&mut prepared.origins))
                .filter(|(_, origin)| !failed[*origin])
                .unzip();
            prepared.ops = ops;
            prepared.origins = origins;
            prepared.routes.retain(&keep);
        }
        prepared.map_time = mapping.elapsed();
        Ok(prepared)
    }

    /// Checks and maps one record (input `index`, of `schemas`); `decoded` is its value
    /// already decoded on arrival.
    fn map_one(
        &self,
        record: &Record,
        decoded: Option<serde_json::Value>,
        schemas: &[RecordSchemas],
        index: usize,
    ) -> Result<Mapped, (Stage, FailureClass, String)> {
        let map_failure = |e: MapError| {
            let class = match e {
                MapError::Decode(_) => FailureClass::InvalidJson,
                MapError::NotUtf8 => FailureClass::NotUtf8,
                MapError::Column { .. } => FailureClass::ColumnValue,
                MapError::NotAChangeEvent(_) => FailureClass::NotAChangeEvent,
                MapError::MissingVersion(_) => FailureClass::MissingVersion,
                MapError::Truncate => FailureClass::Truncate,
                MapError::TableName(_) => FailureClass::TableName,
                MapError::SchemaIncompatible(_) => FailureClass::SchemaIncompatible,
                MapError::ColumnName(_) => FailureClass::ColumnName,
            };
            (Stage::Map, class, e.to_string())
        };
        // With derived columns, the record's schema says which columns it has.
        let shape = match &self.deriver {
            Some(deriver) => {
                let none = RecordSchemas::default();
                let schemas = schemas.get(index).unwrap_or(&none);
                Some(deriver.shape(schemas).map_err(map_failure)?)
            }
            None => None,
        };
        let mapper = shape.as_ref().map_or(&self.mapper, |s| s.mapper());
        let parsed = match decoded {
            Some(document) => Some(document),
            None if self.schema.is_some() && self.format == Format::Json => {
                RowMapper::parse(record).map_err(map_failure)?
            }
            None => None,
        };
        if let (Some(schema), Some(document)) = (&self.schema, &parsed) {
            schema
                .check(document)
                .map_err(|m| (Stage::Validate, FailureClass::SchemaInvalid, m))?;
        }
        // What the table template reads, while the value is at hand; the table itself
        // once the record mapped (a record that fails for that claims no table). A value
        // still unread is read once: the source block the mapper meets names the table.
        let (op, read) = match &self.router {
            Some(router) if parsed.is_none() && router.reads_source() => {
                let (op, block) = mapper.map_parsed_with_source(record, None);
                let read = match block {
                    Some(block) => router.read_source_block(record, block),
                    None => router.read(record, None),
                };
                (op, Some(read))
            }
            router => {
                let read = router.as_ref().map(|r| r.read(record, parsed.as_ref()));
                (mapper.map_parsed(record, parsed), read)
            }
        };
        let op = op.map_err(map_failure)?;
        if matches!(op, RowOp::Skip(_)) {
            return Ok((op, None, None));
        }
        let (Some(router), Some(read)) = (&self.router, read) else {
            let table = shape.as_ref().and(self.fixed_table.clone());
            return Ok((op, table, shape));
        };
        match read.and_then(|read| router.table_with(record, read)) {
            Ok(table) => Ok((op, Some(table), shape)),
            Err(why) => Err(map_failure(MapError::TableName(why))),
        }
    }
}

/// Milliseconds since the Unix epoch, now.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn record(topic: &str, value: &str) -> Record {
        Record {
            topic: topic.into(),
            value: Some(value.as_bytes().to_vec()),
            ..Default::default()
        }
    }

    /// Under a table template, the table is claimed only for a record that maps: the one
    /// that fails leaves the name to the next record, whose spelling differs only in case.
    #[test]
    fn a_record_that_fails_to_map_claims_no_table() {
        let text = "kafka: { brokers: localhost:9092 }\nconnectors:\n  - name: route_unmapped\n    topics_regex: \"^shop\\\\..*\"\n    sink:\n      url: postgres://localhost/test\n      table: \"{topic}\"\n      columns:\n        id: { from: /id, type: bigint }\n";
        let config = load_str(text, &|_| None).unwrap();
        let mut preparer = Preparer::new(&config.connectors[0], None, None);
        let incoming = vec![
            record("shop.Orders", "not json").into(),
            record("shop.orders", r#"{"id":1}"#).into(),
        ];
        let prepared = preparer.prepare(incoming).unwrap();
        assert_eq!(prepared.failures.len(), 1, "{:?}", prepared.failures);
        assert_eq!(prepared.failures[0].index, 0);
        assert_eq!(prepared.ops.len(), 1);
        assert_eq!(&**prepared.routes.table_of(0).unwrap(), "shop.orders");
    }
}
