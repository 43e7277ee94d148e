//! The checks of a configuration that its JSON Schema cannot express: cross-references,
//! names, URLs, sources of columns, error policies, plugin limits.

use std::collections::HashSet;

use crate::db_kind::DbKind;

use super::names::{valid_identifier, valid_table_name};
use super::problem::Problem;
use super::sink_checks;
use super::{
    ColumnConfig, Config, ConnectorConfig, DeadLetterDestination, ErrorPolicy, WriteMode, bounds,
};

const METADATA_SOURCES: &[&str] = &[
    "$topic",
    "$partition",
    "$offset",
    "$timestamp",
    "$now",
    "$key",
    "$value",
];

/// What the schema cannot say: cross-references, names, URLs.
pub(super) fn semantic_problems(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    if let Some(registry) = &config.kafka.schema_registry {
        problems.extend(super::formats::registry_problems(
            registry,
            "kafka.schema_registry",
        ));
    }
    if config.kafka.brokers.trim().is_empty() {
        problems.push(Problem::new(
            "kafka.brokers",
            "must name at least one broker, or `embedded`",
        ));
    }
    if let Some(reset) = config.kafka.properties.get("auto.offset.reset")
        && !matches!(
            reset.as_str(),
            "earliest" | "smallest" | "beginning" | "latest" | "largest" | "end"
        )
    {
        problems.push(Problem::new(
            "kafka.properties.auto.offset.reset",
            format!(
                "\"{reset}\": use earliest or latest (where a partition with no stored offset starts); a stored offset the log no longer has is delivery.on_offset_out_of_range's"
            ),
        ));
    }
    if let Some(admin) = &config.admin
        && admin.listen.parse::<std::net::SocketAddr>().is_err()
    {
        problems.push(Problem::new(
            "admin.listen",
            format!(
                "\"{}\" is not an address and port (e.g. 127.0.0.1:8083, or 0.0.0.0:8083 to listen on every interface)",
                admin.listen
            ),
        ));
    }
    if let Some(token) = config.admin.as_ref().and_then(|a| a.token.as_ref())
        && token.expose().trim().is_empty()
    {
        problems.push(Problem::new(
            "admin.token",
            "is empty (an unset variable?): leave token out to serve without one",
        ));
    }
    if let Some(admin) = &config.admin {
        super::admin::admin_problems(admin, &mut problems);
        admin_problems(admin, &mut problems);
    }
    if !(1..=bounds::POOL_SIZE_MAX).contains(&config.pool.size) {
        problems.push(Problem::new(
            "pool.size",
            format!(
                "{} is not between 1 and {}: each pooled consumer is a Kafka client with its own connections and threads",
                config.pool.size,
                bounds::POOL_SIZE_MAX
            ),
        ));
    }
    if config.pool.borrow_timeout.0.is_zero() {
        problems.push(Problem::new("pool.borrow_timeout", "must be longer than 0"));
    }
    if !(1..=bounds::DATABASE_MAX_CONNECTIONS_MAX).contains(&config.databases.max_connections) {
        problems.push(Problem::new(
            "databases.max_connections",
            format!(
                "{} is not between 1 and {}",
                config.databases.max_connections,
                bounds::DATABASE_MAX_CONNECTIONS_MAX
            ),
        ));
    }
    for (index, connector) in config.connectors.iter().enumerate() {
        let at = |rest: &str| format!("connectors[{index}].{rest}");
        if !names.insert(connector.name.as_str()) {
            problems.push(Problem::new(
                at("name"),
                format!("duplicate connector name \"{}\": names key the stored offsets and must be unique", connector.name),
            ));
        }
        if let Some(old) = &connector.renamed_from {
            if *old == connector.name {
                problems.push(Problem::new(
                    at("renamed_from"),
                    "names the connector itself: give the name it had before",
                ));
            } else if config.connectors.iter().any(|c| c.name == *old) {
                problems.push(Problem::new(
                    at("renamed_from"),
                    format!("connector {old} is still in the file: a rename replaces it (remove {old}, or drop renamed_from)"),
                ));
            }
        }
        if connector.tasks == 0 {
            problems.push(Problem::new(at("tasks"), "must be at least 1"));
        }
        if connector.batch.max_records == 0 {
            problems.push(Problem::new(at("batch.max_records"), "must be at least 1"));
        }
        if let Some(dedup) = &connector.delivery.dedup
            && dedup.window.0.is_zero()
        {
            problems.push(Problem::new(
                at("delivery.dedup.window"),
                "must be longer than 0: ids are remembered this long (on record timestamps)",
            ));
        }
        let sink = &connector.sink;
        match url_scheme(sink.url.expose()) {
            Some(scheme) if DbKind::from_scheme(scheme).is_some() => {}
            Some(other) => problems.push(Problem::new(
                at("sink.url"),
                format!(
                    "unsupported database \"{other}\" in {}: use {}",
                    sink.url.redacted(),
                    DbKind::suggested_schemes()
                ),
            )),
            None => problems.push(Problem::new(
                at("sink.url"),
                format!(
                    "\"{}\" is not a database URL: use {}",
                    sink.url.redacted(),
                    DbKind::suggested_schemes()
                ),
            )),
        }
        problems.extend(super::routing::routing_problems(
            connector,
            url_scheme(sink.url.expose()),
            &at,
        ));
        let mut seen = HashSet::new();
        for (name, column) in sink.columns() {
            let column_at = at(&format!("sink.columns.{name}"));
            if !valid_identifier(name) {
                problems.push(Problem::new(
                    &column_at,
                    "a column name is letters, digits and _, not starting with a digit",
                ));
            }
            if !seen.insert(name.to_ascii_lowercase()) {
                problems.push(Problem::new(
                    &column_at,
                    "defined twice (column names are case-insensitive)",
                ));
            }
            problems.extend(source_problem(
                column,
                &column_at,
                &connector.format.mapped(),
            ));
            if column.from == "$key"
                && let Some(format) = connector.key_format.as_ref().filter(|f| f.decodes())
                && column.column_type != super::ColumnType::Json
            {
                problems.push(Problem::new(
                    format!("{column_at}.type"),
                    format!(
                        "key_format: {} decodes the key to a JSON document: read $key with type json, or point into the key with a key column that a tombstone reads (not as {})",
                        format.name(),
                        column.column_type.name()
                    ),
                ));
            }
        }
        let mut transform_names = HashSet::new();
        for (t, transform) in connector.transforms.iter().enumerate() {
            if !transform_names.insert(transform.name.as_str()) {
                problems.push(Problem::new(
                    at(&format!("transforms[{t}].name")),
                    format!("duplicate transform name \"{}\"", transform.name),
                ));
            }
            if transform.limits.max_output_records == 0 {
                problems.push(Problem::new(
                    at(&format!("transforms[{t}].limits.max_output_records")),
                    "must be at least 1",
                ));
            }
            if let Err(message) = check_plugin_timeout(transform.limits.timeout.0) {
                problems.push(Problem::new(
                    at(&format!("transforms[{t}].limits.timeout")),
                    message,
                ));
            }
            if let Err(message) = check_plugin_memory(transform.limits.memory.0) {
                problems.push(Problem::new(
                    at(&format!("transforms[{t}].limits.memory")),
                    message,
                ));
            }
        }
        if sink.columns.as_ref().is_some_and(|c| c.0.is_empty()) {
            problems.push(Problem::new(
                at("sink.columns"),
                "define at least one column, or leave columns out to derive them from the value's schema",
            ));
        }
        problems.extend(sink_checks::derive_problems(connector, &at));
        problems.extend(sink_checks::column_type_problems(connector, &at));
        if !sink.derives_columns() {
            for (k, key) in sink.key_columns().iter().enumerate() {
                if !sink.columns().iter().any(|(name, _)| name == key) {
                    problems.push(Problem::new(
                        at(&format!("sink.key[{k}]")),
                        format!("column \"{key}\" is not defined in columns"),
                    ));
                }
            }
        }
        if matches!(sink.mode, WriteMode::Upsert | WriteMode::Update) && !sink.has_key() {
            problems.push(Problem::new(
                at("sink.mode"),
                format!(
                    "mode {:?} needs sink.key: the columns that identify a row",
                    sink.mode
                )
                .to_lowercase(),
            ));
        }
        if sink.mode == WriteMode::Update
            && !sink.derives_columns()
            && sink.columns().len() == sink.key_columns().len()
        {
            problems.push(Problem::new(
                at("sink.mode"),
                "mode update needs at least one column that is not in the key",
            ));
        }
        problems.extend(errors_problems(connector, &at));
        problems.extend(sink_checks::envelope_problems(connector, &at));
        problems.extend(sink_checks::synchronous_commit_problems(connector, &at));
        problems.extend(sink_checks::transactions_problems(connector, &at));
        if connector.sink.transactions == super::Transactions::Source
            && config
                .kafka
                .properties
                .get("auto.offset.reset")
                .is_some_and(|r| matches!(r.as_str(), "latest" | "largest" | "end"))
        {
            problems.push(Problem::new(
                at("sink.transactions"),
                "source reads a transaction's events and its END record from the same point: kafka.properties.auto.offset.reset: latest starts each topic wherever its end is at the time, so a transaction may be cut at the start; leave it at earliest",
            ));
        }
        if connector.schema.is_some() && connector.format.mapped() != super::Format::Json {
            problems.push(Problem::new(
                at("schema"),
                "a JSON Schema needs format: json, or a format that decodes on arrival (avro, protobuf, json_schema, connect_json)",
            ));
        }
        problems.extend(super::formats::format_problems(
            connector,
            config.kafka.schema_registry.as_ref(),
            &at,
        ));
        if connector.max_record_bytes.0 == 0 {
            problems.push(Problem::new(at("max_record_bytes"), "must be at least 1"));
        }
        for (t, topic) in connector.topics.iter().enumerate() {
            if let Err(why) = topic_name_problem(topic) {
                problems.push(Problem::new(at(&format!("topics[{t}]")), why));
            }
        }
    }
    problems
}

/// Kafka's rule for a topic name: 1 to 249 characters of `[a-zA-Z0-9._-]`, and not `.` or
/// `..`. Checked here so that no client is ever handed a name it refuses (or cannot pass
/// to librdkafka at all, such as one holding a NUL).
pub(super) fn topic_name_problem(topic: &str) -> Result<(), String> {
    let rule = "a Kafka topic name is 1 to 249 characters of letters, digits, '.', '_' and '-', and not \".\" or \"..\"";
    if topic.is_empty() {
        return Err(format!("is empty: {rule}"));
    }
    if topic.len() > bounds::TOPIC_NAME_MAX {
        return Err(format!("is {} bytes long: {rule}", topic.len()));
    }
    if topic == "." || topic == ".." {
        return Err(format!(
            "\"{topic}\" is not a valid Kafka topic name: {rule}"
        ));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
    {
        return Err(format!(
            "\"{}\" is not a valid Kafka topic name ({c:?} is not allowed): {rule}",
            topic.escape_debug()
        ));
    }
    Ok(())
}

fn errors_problems(connector: &ConnectorConfig, at: &dyn Fn(&str) -> String) -> Vec<Problem> {
    let mut problems = Vec::new();
    let errors = &connector.errors;
    match (&errors.policy, &errors.dlq) {
        (ErrorPolicy::Dlq, None) => problems.push(Problem::new(
            at("errors.dlq"),
            "policy dlq needs a destination: dlq: { topic: NAME } or dlq: { table: NAME }",
        )),
        (policy, Some(_)) if *policy != ErrorPolicy::Dlq => problems.push(Problem::new(
            at("errors.dlq"),
            format!(
                "a dead-letter destination is set but policy is {}: set policy: dlq or remove dlq",
                policy.name()
            ),
        )),
        _ => {}
    }
    if let Some(dlq) = &errors.dlq {
        match dlq {
            DeadLetterDestination::Topic(topic) => {
                if let Err(why) = topic_name_problem(topic) {
                    problems.push(Problem::new(at("errors.dlq.topic"), why));
                } else if connector.reads_topic(topic) {
                    problems.push(Problem::new(
                        at("errors.dlq.topic"),
                        format!("\"{topic}\" is also a source topic of this connector"),
                    ));
                }
            }
            DeadLetterDestination::Table(table) => {
                if !valid_table_name(table) {
                    problems.push(Problem::new(
                        at("errors.dlq.table"),
                        format!("\"{table}\" is not a table name: use letters, digits and _, optionally schema.table"),
                    ));
                } else if connector
                    .sink
                    .fixed_table()
                    .is_some_and(|t| table.eq_ignore_ascii_case(t))
                {
                    problems.push(Problem::new(
                        at("errors.dlq.table"),
                        "the dead-letter table must not be the sink table",
                    ));
                }
            }
        }
    }
    let retry = &errors.retry;
    if retry.initial.0.is_zero() {
        problems.push(Problem::new(
            at("errors.retry.initial"),
            "must be more than 0",
        ));
    }
    if retry.initial.0 > retry.max.0 {
        problems.push(Problem::new(
            at("errors.retry.max"),
            format!("must be at least initial ({:?})", retry.initial.0),
        ));
    }
    let isolation = &errors.isolation;
    if isolation.max_time.0.is_zero() {
        problems.push(Problem::new(
            at("errors.isolation.max_time"),
            "must be more than 0: it is the time allowed to find the records that fail a batch",
        ));
    }
    if isolation.max_failed_calls == 0 {
        problems.push(Problem::new(
            at("errors.isolation.max_failed_calls"),
            "must be at least 1: the call that failed the batch counts",
        ));
    }
    let restart = &errors.restart;
    if restart.initial.0.is_zero() {
        problems.push(Problem::new(
            at("errors.restart.initial"),
            "must be more than 0",
        ));
    }
    if restart.initial.0 > restart.max.0 {
        problems.push(Problem::new(
            at("errors.restart.max"),
            format!("must be at least initial ({:?})", restart.initial.0),
        ));
    }
    problems
}

/// A plugin's CPU deadline per call lies in [`bounds::PLUGIN_TIMEOUT_MIN`] ..=
/// [`bounds::PLUGIN_TIMEOUT_MAX`].
pub fn check_plugin_timeout(timeout: std::time::Duration) -> Result<(), String> {
    let (min, max) = (bounds::PLUGIN_TIMEOUT_MIN, bounds::PLUGIN_TIMEOUT_MAX);
    if timeout < min {
        Err(format!(
            "{} is shorter than {}, the shortest deadline sluice can keep (epoch ticks are milliseconds)",
            human_duration(timeout),
            human_duration(min)
        ))
    } else if timeout > max {
        Err(format!(
            "{} is longer than {}, the longest deadline of one call: a batch that computes longer holds its partitions through rebalances; make batches smaller (batch.max_records) instead",
            human_duration(timeout),
            human_duration(max)
        ))
    } else {
        Ok(())
    }
}

/// A plugin's memory cap lies in [`bounds::PLUGIN_MEMORY_MIN`] ..=
/// [`bounds::PLUGIN_MEMORY_MAX`].
pub fn check_plugin_memory(bytes: u64) -> Result<(), String> {
    let (min, max) = (bounds::PLUGIN_MEMORY_MIN, bounds::PLUGIN_MEMORY_MAX);
    if bytes < min {
        Err(format!(
            "{} is less than {}, the least memory a component starts with",
            human_size(bytes),
            human_size(min)
        ))
    } else if bytes > max {
        Err(format!(
            "{} is more than {}, the most a 32-bit WebAssembly memory can hold",
            human_size(bytes),
            human_size(max)
        ))
    } else {
        Ok(())
    }
}

/// `300s` -> `5m`, `1500ms` -> `1500ms`: the way the file writes durations.
fn human_duration(duration: std::time::Duration) -> String {
    let ms = duration.as_millis();
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}ms", duration.as_secs_f64() * 1000.0);
    }
    for (factor, unit) in [(3_600_000, "h"), (60_000, "m"), (1000, "s")] {
        if ms > 0 && ms.is_multiple_of(factor) {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

/// `4294967296` -> `4GiB`: the way the file writes sizes.
fn human_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (factor, unit) in UNITS {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return format!("{}{unit}", bytes / factor);
        }
    }
    format!("{bytes} bytes")
}

fn source_problem(column: &ColumnConfig, at: &str, format: &super::Format) -> Option<Problem> {
    let from = column.from.as_str();
    if from.starts_with('$') {
        if !METADATA_SOURCES.contains(&from) {
            return Some(Problem::new(
                format!("{at}.from"),
                format!(
                    "unknown source \"{from}\": use a JSON pointer (/field) or one of {}",
                    METADATA_SOURCES.join(", ")
                ),
            ));
        }
        return None;
    }
    if !from.starts_with('/') {
        return Some(Problem::new(
            format!("{at}.from"),
            format!("\"{from}\" is not a JSON pointer: write /{from}"),
        ));
    }
    if *format != super::Format::Json {
        return Some(Problem::new(
            format!("{at}.from"),
            "a JSON pointer needs format: json (or a format that decodes on arrival); with string or bytes use $value",
        ));
    }
    None
}

fn url_scheme(url: &str) -> Option<&str> {
    let end = url.find("://")?;
    let scheme = &url[..end];
    (!scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)))
    .then_some(scheme)
}

/// The admin listener's own checks: a listener that other hosts reach needs a token, a
/// read token is a token of its own.
fn admin_problems(admin: &super::AdminConfig, problems: &mut Vec<Problem>) {
    if let Ok(addr) = admin.listen.parse::<std::net::SocketAddr>()
        && !addr.ip().is_loopback()
        && admin.token.is_none()
        && admin.read_token.is_none()
    {
        problems.push(Problem::new(
            "admin.listen",
            format!(
                "{} is reachable from other hosts, and admin has no token: anyone who reaches it could stop connectors and change their offsets. Set admin.token (e.g. token: ${{SLUICE_ADMIN_TOKEN}}), or listen on 127.0.0.1",
                admin.listen
            ),
        ));
    }
    if let Some(read_token) = &admin.read_token {
        if read_token.expose().trim().is_empty() {
            problems.push(Problem::new(
                "admin.read_token",
                "is empty (an unset variable?): leave read_token out to serve without one",
            ));
        } else if admin
            .token
            .as_ref()
            .is_some_and(|t| t.expose() == read_token.expose())
        {
            problems.push(Problem::new(
                "admin.read_token",
                "is the same as admin.token: a read token must differ, or it allows everything",
            ));
        }
    }
}
