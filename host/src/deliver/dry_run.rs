//! A dry run of a connector on real records: its whole path (arrival checks, transforms,
//! schema, mapping) and the database's own refusals where they can be asked without
//! writing (in a transaction that is rolled back). Nothing is written and no offset moves.
//! `sluice dry-run` and `POST /connectors/{name}/dry-run` use it, with the plugin files and
//! settings of the configuration given, so a new plugin or mapping can be tried on the
//! records of the topic before it is deployed.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::config::ConnectorConfig;
use crate::failure::{FailureClass, Stage};
use crate::map::{RowOp, SqlValue, TableRoutes};
use crate::prepare::{PrepareError, Preparer};
use crate::record::Incoming;
use crate::sink::Sink;
use crate::validate::RecordSchema;

/// What one input record would become.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// These row operations (several when a transform made several records).
    Rows(Vec<Row>),
    /// Nothing to write: a transform dropped it, or a tombstone on a table without a key.
    Nothing,
    /// It fails, and the error policy would take it.
    Failed {
        stage: Stage,
        class: FailureClass,
        message: String,
    },
}

/// A row operation, with its columns named.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    /// Insert, upsert or update (per `sink.mode`) these columns.
    Write(Vec<(String, Value)>),
    /// Delete the row with this key (a tombstone, a change event's delete), and with
    /// `sink.version` only if its version is older.
    Delete(Vec<(String, Value)>),
    /// Delete every row of the table (a change event's truncate).
    Truncate,
}

/// No columns (a truncate's).
static NO_COLUMNS: Vec<(String, Value)> = Vec::new();

/// One input record and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Tried {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub outcome: Outcome,
}

/// A dry run's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct DryRun {
    pub records: Vec<Tried>,
    /// Why the database was not asked (it could not be reached, the table does not exist
    /// yet); `None` when it was.
    pub database_not_asked: Option<String>,
}

/// Why a dry run could not run.
#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    #[error(transparent)]
    Schema(#[from] crate::validate::SchemaError),
    #[error(transparent)]
    Transform(#[from] sluice_transform::TransformError),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The thread that ran the pipeline ended without an answer (a panic in it).
    #[error("the dry run's pipeline thread ended without an answer: {0}")]
    Worker(String),
}

/// Runs `connector`'s path on `inputs` without writing anything.
pub async fn dry_run(
    connector: &ConnectorConfig,
    engine: Option<&sluice_transform::TransformEngine>,
    inputs: Vec<Incoming>,
) -> Result<DryRun, DryRunError> {
    dry_run_on(connector, engine, inputs, None).await
}

/// As [`dry_run`], asking the database through `sink` (a running connector's pool) when
/// given, instead of connections of its own.
pub async fn dry_run_on(
    connector: &ConnectorConfig,
    engine: Option<&sluice_transform::TransformEngine>,
    inputs: Vec<Incoming>,
    sink: Option<Arc<Sink>>,
) -> Result<DryRun, DryRunError> {
    let coordinates: Vec<(String, i32, i64)> = inputs
        .iter()
        .map(|i| (i.record.topic.clone(), i.record.partition, i.record.offset))
        .collect();
    // Compiling plugins and running them is CPU work: off the async workers. The schemas
    // the records name (a registry format) are fetched from there first.
    let prepared = {
        let connector = connector.clone();
        let engine = engine.cloned();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || -> Result<_, DryRunError> {
            let schema = match &connector.schema {
                Some(path) => Some(Arc::new(RecordSchema::load(path)?)),
                None => None,
            };
            let mut preparer =
                Preparer::for_connector(&connector, engine.as_ref(), schema)?.dry_run();
            if preparer.uses_registry() {
                runtime
                    .block_on(preparer.resolve(&inputs))
                    .map_err(PrepareError::Registry)?;
            }
            Ok(preparer.prepare(inputs)?)
        })
        .await
        .map_err(|e| DryRunError::Worker(e.to_string()))??
    };
    let mut failures: Vec<Option<Outcome>> = vec![None; coordinates.len()];
    for failure in &prepared.failures {
        failures[failure.index] = Some(Outcome::Failed {
            stage: failure.stage,
            class: failure.class,
            message: failure.message.clone(),
        });
    }

    // The database's refusals, in a transaction that is rolled back.
    let database_not_asked = match refusals(connector, &prepared.ops, &prepared.routes, sink).await
    {
        Ok(refused) => {
            for (op, message) in refused {
                let input = prepared.origins[op];
                failures[input].get_or_insert(Outcome::Failed {
                    stage: Stage::Sink,
                    class: FailureClass::DatabaseRefused,
                    message,
                });
            }
            None
        }
        Err(why) => Some(why),
    };

    let versioning = connector.sink.versioning(connector.envelope);
    let version_column = versioning.as_ref().map(|v| v.column.as_str());
    let columns: Vec<&str> = connector
        .sink
        .columns()
        .iter()
        .map(|(name, _)| name.as_str())
        .chain(version_column)
        .collect();
    let keys: Vec<&str> = connector
        .sink
        .key_columns()
        .iter()
        .map(String::as_str)
        .chain(version_column)
        .collect();
    let mut rows: Vec<Vec<Row>> = vec![Vec::new(); coordinates.len()];
    for (at, (op, &input)) in prepared.ops.iter().zip(&prepared.origins).enumerate() {
        let named = |names: &[&str], values: &[SqlValue]| {
            names
                .iter()
                .zip(values)
                .map(|(n, v)| (n.to_string(), sql_json(v)))
                .collect()
        };
        // With derived columns, each operation's names are its schema's.
        let derived = prepared.routes.shape_of(at).map(|shape| {
            let columns: Vec<&str> = shape
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .chain(version_column)
                .collect();
            let keys: Vec<&str> = shape
                .key
                .iter()
                .map(|&k| shape.columns[k].name.as_str())
                .chain(version_column)
                .collect();
            (columns, keys)
        });
        let (columns, keys) = match &derived {
            Some((columns, keys)) => (columns.as_slice(), keys.as_slice()),
            None => (columns.as_slice(), keys.as_slice()),
        };
        match op {
            RowOp::Write(values) => rows[input].push(Row::Write(named(columns, values))),
            RowOp::Delete(key) => rows[input].push(Row::Delete(named(keys, key))),
            RowOp::Truncate(_) => rows[input].push(Row::Truncate),
            RowOp::Skip(_) => {}
        }
    }
    let records = coordinates
        .into_iter()
        .zip(failures.into_iter().zip(rows))
        .map(|((topic, partition, offset), (failure, rows))| Tried {
            topic,
            partition,
            offset,
            outcome: failure.unwrap_or(if rows.is_empty() {
                Outcome::Nothing
            } else {
                Outcome::Rows(rows)
            }),
        })
        .collect();
    Ok(DryRun {
        records,
        database_not_asked,
    })
}

/// The operations the database refuses, asked in a transaction that is rolled back; `Err`
/// says why the database was not asked. Nothing is created: a table that does not exist
/// yet (`create_table` makes it at the connector's first start) is not asked.
async fn refusals(
    connector: &ConnectorConfig,
    ops: &[RowOp],
    routes: &TableRoutes,
    running: Option<Arc<Sink>>,
) -> Result<Vec<(usize, String)>, String> {
    let (sink, own) = match running {
        Some(sink) => (sink, false),
        None => (
            Arc::new(
                Sink::connect(connector)
                    .await
                    .map_err(|e| format!("cannot reach the database: {e}"))?,
            ),
            true,
        ),
    };
    let result = async {
        sink.check_table().await.map_err(|e| {
            format!(
                "table {} cannot be read ({e}); the database's own checks were not run",
                connector.sink.table_label()
            )
        })?;
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        sink.find_refused(ops, routes)
            .await
            .map_err(|e| format!("the database could not be asked: {e}"))
    }
    .await;
    if own {
        sink.close().await;
    }
    result
}

/// A column value as JSON: numbers and booleans as themselves, timestamps and text as
/// strings, bytes as `{"base64": …}`.
pub fn sql_json(value: &SqlValue) -> Value {
    use base64::Engine;
    match value {
        SqlValue::Null => Value::Null,
        SqlValue::Int(v) => json!(v),
        SqlValue::Double(v) => json!(v),
        SqlValue::Bool(v) => json!(v),
        SqlValue::Text(v) => json!(v),
        SqlValue::Bytes(v) => {
            json!({"base64": base64::engine::general_purpose::STANDARD.encode(v)})
        }
        SqlValue::Timestamp(t) => json!(crate::sink::dialect::timestamp_text(t)),
        // Left out of the write: the stored value stays.
        SqlValue::Unavailable => json!({"unavailable": true}),
    }
}

impl Tried {
    /// The JSON answer for one record: its coordinates and `rows` (each
    /// `{"write": {column: value}}` or `{"delete": {key: value}}`), `nothing`, or `failure`
    /// (`{"stage", "class", "message"}`).
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("topic".into(), json!(self.topic));
        out.insert("partition".into(), json!(self.partition));
        out.insert("offset".into(), json!(self.offset));
        match &self.outcome {
            Outcome::Rows(rows) => {
                let rows: Vec<Value> = rows
                    .iter()
                    .map(|row| {
                        let (kind, columns) = match row {
                            Row::Write(c) => ("write", c),
                            Row::Delete(c) => ("delete", c),
                            Row::Truncate => ("truncate", &NO_COLUMNS),
                        };
                        let columns: Map<String, Value> = columns.iter().cloned().collect();
                        json!({ kind: columns })
                    })
                    .collect();
                out.insert("rows".into(), json!(rows));
            }
            Outcome::Nothing => {
                out.insert("rows".into(), json!([]));
            }
            Outcome::Failed {
                stage,
                class,
                message,
            } => {
                out.insert(
                    "failure".into(),
                    json!({"stage": stage.to_string(), "class": class.to_string(), "message": message}),
                );
            }
        }
        Value::Object(out)
    }

    /// One line for a person: `topic/partition@offset -> …`.
    pub fn line(&self) -> String {
        let at = format!("{}/{}@{}", self.topic, self.partition, self.offset);
        match &self.outcome {
            Outcome::Nothing => format!(
                "{at} -> nothing to write (dropped by a transform, or a tombstone on a table without a key)"
            ),
            Outcome::Failed {
                stage,
                class,
                message,
            } => format!("{at} -> FAILED at {stage} [{class}]: {message}"),
            Outcome::Rows(rows) => {
                let shown: Vec<String> = rows
                    .iter()
                    .map(|row| {
                        let (kind, columns) = match row {
                            Row::Write(c) => ("write", c),
                            Row::Delete(c) => ("delete", c),
                            Row::Truncate => ("truncate", &NO_COLUMNS),
                        };
                        let cols: Vec<String> =
                            columns.iter().map(|(n, v)| format!("{n}={v}")).collect();
                        format!("{kind} {}", cols.join(" "))
                    })
                    .collect();
                format!("{at} -> {}", shown.join("; "))
            }
        }
    }
}
