//! The checks of a connector's sink that its JSON Schema cannot express: derived columns
//! (`sink.columns` left out, `key: record_key`, `sink.derive`, `sink.evolve`) and change
//! events (`envelope`, `sink.version`, `sink.on_truncate`). Called from
//! [`super::semantic`].

use std::collections::HashSet;

use crate::db_kind::DbKind;

use super::ConnectorConfig;
use super::WriteMode;
use super::names::valid_identifier;
use super::problem::Problem;

/// Column types the sink's database cannot hold as sluice writes them: arrays outside
/// PostgreSQL, and `numeric(p,s)` wider than MySQL's and MariaDB's DECIMAL (65 digits,
/// 30 after the point), which would round values in silence.
pub(super) fn column_type_problems(
    connector: &ConnectorConfig,
    at: &dyn Fn(&str) -> String,
) -> Vec<Problem> {
    let sink = &connector.sink;
    let scheme = sink.url.scheme();
    let kind = DbKind::from_scheme(scheme);
    let arrays = kind.is_some_and(DbKind::has_arrays);
    let decimal_bound = kind.and_then(DbKind::decimal_bound);
    let named = sink
        .columns()
        .iter()
        .map(|(name, c)| (format!("sink.columns.{name}.type"), c.column_type))
        .chain(
            sink.derive
                .types
                .iter()
                .map(|(name, t)| (format!("sink.derive.types.{name}"), *t)),
        );
    let mut problems = Vec::new();
    for (path, column_type) in named {
        match column_type {
            super::ColumnType::Array(_) if !arrays => problems.push(Problem::new(
                at(&path),
                format!(
                    "{column_type} is a PostgreSQL array, and this sink is {scheme}: use json (a JSON array)"
                ),
            )),
            super::ColumnType::Decimal { precision, scale } => {
                if let Some((most, most_scale)) = decimal_bound
                    && (precision > most || scale > most_scale)
                {
                    problems.push(Problem::new(
                        at(&path),
                        format!(
                            "{column_type} is wider than {scheme}'s DECIMAL takes ({most} digits, {most_scale} after the point): narrow it, or write the values as text"
                        ),
                    ))
                }
            }
            _ => {}
        }
    }
    problems
}

/// Derived columns (`sink.columns` left out), `key: record_key`, `sink.derive` and
/// `sink.evolve`: each needs a schema to read, and works only where columns are derived.
pub(super) fn derive_problems(
    connector: &ConnectorConfig,
    at: &dyn Fn(&str) -> String,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let sink = &connector.sink;
    if !sink.derives_columns() {
        if sink.key == super::SinkKey::RecordKey {
            problems.push(Problem::new(
                at("sink.key"),
                "key: record_key takes the key from the record key's schema, with columns derived from the value's schema: leave sink.columns out, or name the key columns ([id])",
            ));
        }
        if !sink.derive.is_empty() {
            problems.push(Problem::new(
                at("sink.derive"),
                "derive adjusts columns derived from the value's schema: it needs sink.columns left out",
            ));
        }
        if !sink.evolve.is_none() {
            problems.push(Problem::new(
                at("sink.evolve"),
                "evolve changes tables whose columns are derived from the value's schema: it needs sink.columns left out",
            ));
        }
        return problems;
    }
    if sink.evolve.relax
        && let Some(kind) = DbKind::from_scheme(sink.url.scheme())
        && !kind.relaxes_not_null()
    {
        problems.push(Problem::new(
            at("sink.evolve"),
            format!(
                "relax: {kind} cannot make a NOT NULL column nullable without rebuilding the table; leave relax out (a NULL into such a column fails its record alone) or rebuild the table by hand"
            ),
        ));
    }
    if !connector.format.decodes() {
        problems.push(Problem::new(
            at("sink.columns"),
            format!(
                "left out, the columns come from each value's schema, and format {} carries none: use avro, protobuf, json_schema or connect_json, or list the columns",
                connector.format.name()
            ),
        ));
    }
    if !connector.transforms.is_empty() {
        problems.push(Problem::new(
            at("sink.columns"),
            "left out, the columns come from each value's schema, which no longer describes a transform's output: list the columns",
        ));
    }
    if sink.key == super::SinkKey::RecordKey
        && !connector.key_format.as_ref().is_some_and(|f| f.decodes())
    {
        problems.push(Problem::new(
            at("sink.key"),
            "key: record_key reads the key's schema: set key_format to avro, protobuf, json_schema or connect_json",
        ));
    }
    let mut targets = HashSet::new();
    for (field, column) in &sink.derive.rename {
        if !valid_identifier(column) {
            problems.push(Problem::new(
                at(&format!("sink.derive.rename.{field}")),
                "a column name is letters, digits and _, not starting with a digit",
            ));
        }
        if !targets.insert(column.to_ascii_lowercase()) {
            problems.push(Problem::new(
                at(&format!("sink.derive.rename.{field}")),
                format!(
                    "\"{column}\" is the new name of two fields (column names are case-insensitive)"
                ),
            ));
        }
    }
    for field in &sink.derive.include {
        if sink.derive.exclude.contains(field) {
            problems.push(Problem::new(
                at("sink.derive.exclude"),
                format!("\"{field}\" is both included and excluded"),
            ));
        }
    }
    problems
}

/// `envelope`, `sink.version` and `sink.on_truncate`: a change event is written by key, a
/// version comes from a place the record has.
pub(super) fn envelope_problems(
    connector: &ConnectorConfig,
    at: &dyn Fn(&str) -> String,
) -> Vec<Problem> {
    use super::Envelope;
    let mut problems = Vec::new();
    let sink = &connector.sink;
    let envelope = connector.envelope;
    if envelope != Envelope::None {
        if sink.mode != WriteMode::Upsert {
            problems.push(Problem::new(
                at("sink.mode"),
                format!(
                    "envelope: {} writes each change by key: it needs mode: upsert (and sink.key)",
                    envelope.name()
                ),
            ));
        }
        if connector.format.mapped() != super::Format::Json {
            problems.push(Problem::new(
                at("envelope"),
                format!(
                    "envelope: {} reads a JSON document: use format json, connect_json, avro, protobuf or json_schema",
                    envelope.name()
                ),
            ));
        }
    }
    if sink.on_truncate != super::OnTruncate::Fail && envelope != Envelope::Debezium {
        problems.push(Problem::new(
            at("sink.on_truncate"),
            "only a Debezium change event truncates a table: on_truncate needs envelope: debezium",
        ));
    }
    if let Some(version) = &sink.version {
        if sink.mode != WriteMode::Upsert {
            problems.push(Problem::new(
                at("sink.version"),
                "versions make upserts and deletes conditional: sink.version needs mode: upsert",
            ));
        }
        match version.from.as_str() {
            "$offset" | "$timestamp" => {}
            "$position" if envelope == Envelope::Debezium => {}
            "$position" => problems.push(Problem::new(
                at("sink.version.from"),
                "$position is a Debezium change event's source position: it needs envelope: debezium; use $offset, $timestamp or a JSON pointer",
            )),
            pointer if pointer.starts_with('/') => {}
            other => problems.push(Problem::new(
                at("sink.version.from"),
                format!(
                    "\"{other}\" is not a version source: write $position, $offset, $timestamp or a JSON pointer such as /source/lsn"
                ),
            )),
        }
        if version.remember_deletes.0.is_zero() {
            problems.push(Problem::new(
                at("sink.version.remember_deletes"),
                "must be more than 0: a delete must be remembered at least as long as a replay may reach back",
            ));
        }
    }
    // The version column in effect (under envelope: debezium, the default one too). MySQL
    // and SQLite take column names without regard to case.
    if let Some(version) = sink.versioning(envelope) {
        if version.column.is_empty() {
            problems.push(Problem::new(at("sink.version.column"), "names no column"));
        } else if sink
            .columns()
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(&version.column))
        {
            problems.push(Problem::new(
                at("sink.version.column"),
                format!(
                    "\"{}\" is one of sink.columns: sluice writes the version column itself (sink.version.column, default _sluice_version); name another column",
                    version.column
                ),
            ));
        }
    }
    problems
}

/// `sink.synchronous_commit: off`: PostgreSQL only, and only where the offsets are in the
/// same transaction as the rows (`exactly_once`), so that a commit the database loses takes
/// both with it.
pub(super) fn synchronous_commit_problems(
    connector: &ConnectorConfig,
    at: &dyn Fn(&str) -> String,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    if connector.sink.synchronous_commit != super::SynchronousCommit::Off {
        return problems;
    }
    let url = connector.sink.url.expose();
    if !DbKind::from_url(url).is_some_and(DbKind::commits_asynchronously) {
        problems.push(Problem::new(
            at("sink.synchronous_commit"),
            "off is PostgreSQL's synchronous_commit: this sink is another database; leave it out",
        ));
    }
    if connector.delivery.guarantee != super::Guarantee::ExactlyOnce {
        problems.push(Problem::new(
            at("sink.synchronous_commit"),
            "off needs delivery.guarantee: exactly_once: under at_least_once the offsets are committed to Kafka, and a commit the database loses after Kafka has its offsets loses its rows for good",
        ));
    }
    problems
}

/// `sink.transactions: source`: what applying whole source transactions asks of the
/// connector. One consumer must read every partition of every topic (a transaction spans
/// them), the transaction topic is found by Debezium's naming, and its metadata is read
/// from JSON before decoding.
pub(super) fn transactions_problems(
    connector: &ConnectorConfig,
    at: &dyn Fn(&str) -> String,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    if connector.sink.transactions != super::Transactions::Source {
        return problems;
    }
    let mut refuse = |why: String| problems.push(Problem::new(at("sink.transactions"), why));
    if connector.envelope != super::Envelope::Debezium {
        refuse("source applies Debezium's source transactions: it needs envelope: debezium".into());
    }
    if connector.delivery.guarantee != super::Guarantee::ExactlyOnce {
        refuse("source commits a transaction's rows with the offsets of every record it came from: it needs delivery.guarantee: exactly_once".into());
    }
    if connector.tasks != 1 {
        refuse(format!(
            "source needs one task reading every partition of every topic (a transaction spans them): set tasks: 1 (it is {}), and run the connector in one process",
            connector.tasks
        ));
    }
    if !matches!(
        connector.format,
        super::Format::Json | super::Format::ConnectJson
    ) {
        refuse("source reads Debezium's transaction metadata from JSON before decoding: it needs format json or connect_json (Connect's JsonConverter)".into());
    }
    if connector.topics_regex.is_some() {
        refuse("source needs the topics listed (topics), its transaction topic among them: topics_regex cannot name it".into());
        return problems;
    }
    let transaction_topics: Vec<&String> = connector
        .topics
        .iter()
        .filter(|t| t.ends_with(".transaction"))
        .collect();
    match transaction_topics.as_slice() {
        [topic] => {
            let prefix = topic.strip_suffix("transaction").unwrap_or(topic);
            for other in connector.topics.iter().filter(|t| t != topic) {
                if !other.starts_with(prefix) {
                    refuse(format!(
                        "source finds a table's events by Debezium's topic names (<topic.prefix>.<schema>.<table>): topic {other} does not start with {prefix} as the transaction topic {topic} says"
                    ));
                }
            }
        }
        [] => refuse("source needs Debezium's transaction topic (<topic.prefix>.transaction, written with provide.transaction.metadata=true) among topics".into()),
        many => refuse(format!(
            "source reads one transaction topic: topics names {}",
            many.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
    problems
}
