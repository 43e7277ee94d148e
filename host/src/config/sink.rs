//! `connectors[].sink` and `connectors[].envelope`: the table a connector writes, its
//! columns and their portable types, how rows are written, and the change events and
//! versions that make writes conditional.

use serde::{Deserialize, Deserializer};

use super::routing::{TableFrom, TableTemplate};
use super::units::HumanDuration;
use super::{ColumnType, SecretUrl, defaults};

/// The table a connector writes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// `postgres://…`, `mysql://…` (MariaDB too) or `sqlite://FILE`; it prints with its
    /// password and secret query parameters as `***`.
    pub url: SecretUrl,
    /// The table: a name, optionally `schema.table`; or a template of one identifier per
    /// record (`{topic}`, `{source.schema}`, `{source.table}`, `{source.db}`), dots kept.
    /// Exactly one of `table` and `table_from`.
    #[serde(default)]
    pub table: Option<TableTemplate>,
    /// The table from the topic's name: `{ topic: PATTERN, to: "replica_{1}" }`.
    #[serde(default)]
    pub table_from: Option<TableFrom>,
    /// With a template (`table` with placeholders, or `table_from`): the schema (MySQL: the
    /// database) its tables are in; without it, the connection's default.
    #[serde(default)]
    pub schema: Option<String>,
    /// How rows are written.
    #[serde(default)]
    pub mode: WriteMode,
    /// Key columns: the primary key of a created table, the conflict target of `upsert`,
    /// the match of `update` and of tombstone deletes. A list of column names, or
    /// `record_key`: the fields of the record key's schema (derived columns only).
    #[serde(default)]
    pub key: SinkKey,
    /// Columns in table order: name -> where its value comes from and its type. Left
    /// out, each table's columns are derived from the records' value schemas (the row's
    /// schema under an envelope): see `derive` and `evolve`.
    #[serde(default)]
    pub columns: Option<IndexedColumns>,
    /// With derived columns: which fields become columns, under which names and types.
    #[serde(default)]
    pub derive: DeriveConfig,
    /// With derived columns: what a field the table lacks does.
    #[serde(default)]
    pub evolve: Evolve,
    /// Create the table when it does not exist: from `columns`, or with derived columns
    /// from the first record's schema.
    #[serde(default)]
    pub create_table: bool,
    /// Versioned writes: every upsert and delete changes a row only if the row's stored
    /// version is older, so that a replay or a late record never goes back in time. Under
    /// `envelope: debezium` it is on by default (`{ from: $position }`).
    #[serde(default)]
    pub version: Option<VersionConfig>,
    /// What a truncate event (`op: t` under `envelope: debezium`) does to the table.
    #[serde(default)]
    pub on_truncate: OnTruncate,
    /// Under `envelope: debezium`: the text Debezium writes for a value it did not read
    /// (its `unavailable.value.placeholder`; an unchanged TOASTed column under
    /// `REPLICA IDENTITY DEFAULT`). A column holding it (as text, as its bytes, or as an
    /// array of it) is left out of that row's write, which then updates the stored row;
    /// a row that is not stored fails alone. Default `__debezium_unavailable_value`.
    #[serde(default)]
    pub unavailable_value: Option<String>,
    /// PostgreSQL, `exactly_once` only: `off` commits each batch without waiting for its
    /// write-ahead log to reach disk (`SET LOCAL synchronous_commit = off`). A database
    /// crash may then lose the last commits, rows and offsets together, and they are
    /// read again: exactly-once holds for the table, not for what sluice did outside it.
    #[serde(default)]
    pub synchronous_commit: SynchronousCommit,
    /// What one database transaction holds: `batch` (a batch of records, as they come) or
    /// `source` (under `envelope: debezium` with Debezium's transaction metadata: every
    /// change of a source transaction together, whatever its tables, in the source's
    /// order). docs/cdc.md ("Source transactions") says what `source` asks of the
    /// connector.
    #[serde(default)]
    pub transactions: Transactions,
}

/// `sink.transactions`: what one database transaction of the sink holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transactions {
    /// A batch: records as they come, cut by `batch.max_records`, `max_bytes` and
    /// `linger` (the default).
    #[default]
    Batch,
    /// Source transactions, whole: a batch holds whole transactions only (one larger than
    /// `batch.max_records` is a batch of its own), written in the source's order.
    Source,
}

/// `sink.synchronous_commit`: whether a batch's commit waits for the database's disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SynchronousCommit {
    /// The commit returns once the database has the transaction on disk (the default).
    #[default]
    On,
    /// PostgreSQL's `synchronous_commit = off` for the batch's transaction.
    Off,
}

impl SinkConfig {
    /// Debezium's placeholder for a value it did not read (`unavailable_value`).
    pub fn unavailable_value(&self) -> &str {
        self.unavailable_value
            .as_deref()
            .unwrap_or(defaults::UNAVAILABLE_VALUE)
    }

    /// The configured columns; none when they are derived from the records' schemas.
    pub fn columns(&self) -> &[(String, ColumnConfig)] {
        self.columns.as_ref().map_or(&[], |c| c.0.as_slice())
    }

    /// Whether each table's columns come from the records' schemas (`columns` left out).
    pub fn derives_columns(&self) -> bool {
        self.columns.is_none()
    }

    /// The key columns named in the file (none for `key: record_key`).
    pub fn key_columns(&self) -> &[String] {
        match &self.key {
            SinkKey::Columns(columns) => columns,
            SinkKey::RecordKey => &[],
        }
    }

    /// Whether rows have a key (named, or the record key's fields).
    pub fn has_key(&self) -> bool {
        matches!(self.key, SinkKey::RecordKey) || !self.key_columns().is_empty()
    }

    /// The table as the file names it: `table`, or `table_from.to` (for logs and
    /// messages).
    pub fn table_label(&self) -> String {
        match (&self.table, &self.table_from) {
            (Some(table), _) => table.as_str().to_string(),
            (None, Some(from)) => from.to.as_str().to_string(),
            (None, None) => String::new(),
        }
    }

    /// The one table every record goes to, when `table` has no placeholders.
    pub fn fixed_table(&self) -> Option<&str> {
        match (&self.table, &self.table_from) {
            (Some(table), None) if !table.is_template() => Some(table.as_str()),
            _ => None,
        }
    }

    /// The template each record's table is made from, when tables are per record.
    pub fn table_template(&self) -> Option<&TableTemplate> {
        match (&self.table, &self.table_from) {
            (_, Some(from)) => Some(&from.to),
            (Some(table), None) if table.is_template() => Some(table),
            _ => None,
        }
    }

    /// The versioning in effect: `sink.version`, or under `envelope: debezium` the source
    /// position in the default column.
    pub fn versioning(&self, envelope: Envelope) -> Option<VersionConfig> {
        match (&self.version, envelope) {
            (Some(version), _) => Some(version.clone()),
            (None, Envelope::Debezium) => Some(VersionConfig::default()),
            (None, _) => None,
        }
    }
}

/// `sink.key`: the key columns by name, or the record key's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkKey {
    Columns(Vec<String>),
    /// `record_key`: the fields of the record key's schema, in its order.
    RecordKey,
}

impl Default for SinkKey {
    fn default() -> Self {
        SinkKey::Columns(Vec::new())
    }
}

impl<'de> Deserialize<'de> for SinkKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = SinkKey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of column names, or record_key")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<SinkKey, E> {
                match text {
                    "record_key" => Ok(SinkKey::RecordKey),
                    other => Err(E::custom(format!(
                        "\"{other}\" is not a key: write a list of column names ([id]) or record_key"
                    ))),
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SinkKey, A::Error> {
                let mut columns = Vec::new();
                while let Some(column) = seq.next_element::<String>()? {
                    columns.push(column);
                }
                Ok(SinkKey::Columns(columns))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `sink.derive`: adjusts the columns derived from a schema. Field names are the
/// schema's; `types` names columns (after `rename`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeriveConfig {
    /// Only these fields become columns (all when empty).
    #[serde(default)]
    pub include: Vec<String>,
    /// These fields do not become columns.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Field name -> column name.
    #[serde(default)]
    pub rename: std::collections::BTreeMap<String, String>,
    /// Column name -> portable type, in place of the type derived from the schema.
    #[serde(default)]
    pub types: std::collections::BTreeMap<String, ColumnType>,
}

impl DeriveConfig {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &DeriveConfig::default()
    }
}

/// `sink.evolve`: which changes of a record's schema sluice applies to a derived table
/// before the batch that first carries them. `connectors.yaml` takes a list of steps, or
/// one name: `none` (the default) means `[]`, `add_columns` means `[add_columns]`. A change
/// no step listed allows fails the schema's records alone (class `schema_incompatible`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evolve {
    /// A new optional field (or one with a default) adds a nullable column.
    pub add_columns: bool,
    /// A column whose field's type grows is altered to the wider type, where the database
    /// does it without losing a value: integer widths, decimal precision with the same
    /// scale.
    pub widen: bool,
    /// A `NOT NULL` column outside the key becomes nullable when the schema stops carrying
    /// its field or makes it optional.
    pub relax: bool,
}

/// One step of `sink.evolve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum EvolveStep {
    AddColumns,
    Widen,
    Relax,
}

impl Evolve {
    /// Nothing is applied.
    pub const NONE: Evolve = Evolve {
        add_columns: false,
        widen: false,
        relax: false,
    };

    /// Whether no step is allowed.
    pub fn is_none(self) -> bool {
        self == Evolve::NONE
    }

    /// The steps allowed, as `connectors.yaml` names them.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.add_columns, "add_columns"),
            (self.widen, "widen"),
            (self.relax, "relax"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

impl<'de> Deserialize<'de> for Evolve {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            One(String),
            Steps(Vec<EvolveStep>),
        }
        let steps = match Written::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom(
                "expected none, add_columns, or a list of add_columns, widen and relax",
            )
        })? {
            Written::One(name) if name == "none" => Vec::new(),
            Written::One(name) if name == "add_columns" => vec![EvolveStep::AddColumns],
            Written::One(name) => {
                return Err(serde::de::Error::custom(format!(
                    "unknown evolve {name:?}: one name is none or add_columns; widen and relax go in a list ([add_columns, widen, relax])"
                )));
            }
            Written::Steps(steps) => steps,
        };
        let mut evolve = Evolve::NONE;
        for step in steps {
            match step {
                EvolveStep::AddColumns => evolve.add_columns = true,
                EvolveStep::Widen => evolve.widen = true,
                EvolveStep::Relax => evolve.relax = true,
            }
        }
        Ok(evolve)
    }
}

/// `connectors[].envelope`: how a value carries a change of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// The value is the row (a tombstone deletes by key).
    #[default]
    None,
    /// Debezium's change event: `op` (`c`, `r`, `u`, `d`, `t`), `before`, `after`,
    /// `source`; the tombstone after a delete is passed over.
    Debezium,
    /// Conduit's OpenCDC record: `operation` (`create`, `snapshot`, `update`, `delete`),
    /// `payload.before`, `payload.after`, `key`, `metadata`.
    Opencdc,
}

impl Envelope {
    /// The name as `connectors.yaml` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Envelope::None => "none",
            Envelope::Debezium => "debezium",
            Envelope::Opencdc => "opencdc",
        }
    }
}

/// `sink.version`: where a record's version is, and the column that keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionConfig {
    /// `$position` (a Debezium event's source position: PostgreSQL snapshot records first,
    /// then `sequence` and `lsn`; MySQL `file`,
    /// `pos`, `row`; other connectors `ts_ms`), `$offset`, `$timestamp`, or a JSON pointer
    /// into the event (the value under `envelope: none`): a non-negative integer, or a
    /// date or timestamp. Ties go to the later record of the partition.
    #[serde(default = "version_from_default")]
    pub from: String,
    /// The column sluice keeps each row's version in (text: the version's order-keeping
    /// encoding); created with the table, and it must not be one of `columns`.
    #[serde(default = "version_column_default")]
    pub column: String,
    /// How long a deleted row's version is remembered (`sluice_tombstones`), so that an
    /// older change replayed after the delete cannot bring the row back.
    #[serde(default = "remember_deletes_default")]
    pub remember_deletes: HumanDuration,
}

fn version_from_default() -> String {
    defaults::VERSION_FROM.to_string()
}
fn version_column_default() -> String {
    defaults::VERSION_COLUMN.to_string()
}
fn remember_deletes_default() -> HumanDuration {
    HumanDuration(defaults::REMEMBER_DELETES)
}

impl Default for VersionConfig {
    fn default() -> Self {
        Self {
            from: version_from_default(),
            column: version_column_default(),
            remember_deletes: remember_deletes_default(),
        }
    }
}

/// `sink.on_truncate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTruncate {
    /// The event is a per-record failure of class `truncate`, under `errors.policy`.
    #[default]
    Fail,
    /// The table's rows are deleted in the batch's transaction (with versions: those
    /// older than the event).
    Truncate,
    /// Passed over, counted.
    Skip,
}

/// The columns of a sink, in the order the file gives them.
#[derive(Debug, Clone)]
pub struct IndexedColumns(pub Vec<(String, ColumnConfig)>);

impl<'de> Deserialize<'de> for IndexedColumns {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = IndexedColumns;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of column name to { from, type }")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<IndexedColumns, A::Error> {
                let mut columns = Vec::new();
                while let Some((name, column)) = map.next_entry::<String, ColumnConfig>()? {
                    columns.push((name, column));
                }
                Ok(IndexedColumns(columns))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// One column.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnConfig {
    /// A JSON pointer into the value (`/uid`, `/user/name`) or record metadata: `$topic`,
    /// `$partition`, `$offset`, `$timestamp`, `$now`, `$key`, `$value`.
    pub from: String,
    /// The portable column type.
    #[serde(rename = "type")]
    pub column_type: ColumnType,
}

/// How rows are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Plain insert; a duplicate key is an error.
    #[default]
    Insert,
    /// Insert, or update the row with the same key.
    Upsert,
    /// Update the row with the same key; no row, no change.
    Update,
}
