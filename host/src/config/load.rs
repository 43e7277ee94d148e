//! From a file to a checked [`Config`]: YAML parse, `${ENV}` interpolation, the JSON Schema,
//! deserialization, then the semantic checks the schema cannot express. Every problem found
//! is reported, each with the path of the value it is about.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use super::interpolate::{interpolate, refused_types, show_as_written, type_whole_values};
use super::problem::{Problem, render_path};
use super::redact::shown_document;
use super::scrub::Scrubber;
use super::semantic::semantic_problems;
use super::{Config, is_secret_key, yaml};

/// The JSON Schema of `connectors.yaml`, compiled into the binary.
pub const SCHEMA: &str = include_str!("../../../schemas/connectors.schema.json");

/// A configuration that cannot be used, with every problem found.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{}", .problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n"))]
    Invalid { problems: Vec<Problem> },
}

impl ConfigError {
    /// One line per problem, prefixed by the file name, as `sluice validate` prints them.
    pub fn lines(&self, file: &str) -> Vec<String> {
        match self {
            ConfigError::Read { .. } => vec![self.to_string()],
            ConfigError::Invalid { problems } => problems
                .iter()
                .map(|p| {
                    if p.path.is_empty() {
                        format!("{file}: {}", p.message)
                    } else {
                        format!("{file}: {p}")
                    }
                })
                .collect(),
        }
    }
}

/// Reads and checks a configuration file, with the process environment for `${VAR}`.
/// Relative plugin paths are resolved against the file's directory.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: path.display().to_string(),
        source,
    })?;
    let mut config = load_str(&text, &|name| std::env::var(name).ok())?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for connector in &mut config.connectors {
        for transform in &mut connector.transforms {
            if transform.plugin.is_relative() {
                transform.plugin = base.join(&transform.plugin);
            }
        }
        if let Some(schema) = connector.schema.as_mut()
            && schema.is_relative()
        {
            *schema = base.join(&*schema);
        }
        for format in std::iter::once(&mut connector.format).chain(connector.key_format.as_mut()) {
            if let super::Format::AvroFile { schema } = format
                && schema.is_relative()
            {
                *schema = base.join(&*schema);
            }
        }
        if let Some(tls) = connector
            .schema_registry
            .as_mut()
            .and_then(|r| r.tls.as_mut())
        {
            relative_to(base, tls);
        }
    }
    if let Some(tls) = config
        .kafka
        .schema_registry
        .as_mut()
        .and_then(|r| r.tls.as_mut())
    {
        relative_to(base, tls);
    }
    if let Some(tls) = config.admin.as_mut().and_then(|a| a.tls.as_mut()) {
        for path in [&mut tls.cert, &mut tls.key]
            .into_iter()
            .chain(tls.ca.as_mut())
        {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }
    let mut problems = record_schema_problems(&config);
    problems.extend(admin_tls_problems(&config));
    problems.extend(format_file_problems(&config));
    if !problems.is_empty() {
        return Err(ConfigError::Invalid { problems });
    }
    Ok(config)
}

/// A registry's TLS files, relative to the configuration file's directory.
fn relative_to(base: &Path, tls: &mut super::RegistryTls) {
    for path in [&mut tls.ca, &mut tls.cert, &mut tls.key]
        .into_iter()
        .flatten()
    {
        if path.is_relative() {
            *path = base.join(&*path);
        }
    }
}

/// Reads what the formats read at start: an `.avsc` file must parse, a registry's TLS
/// files must hold usable PEM.
fn format_file_problems(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (c, connector) in config.connectors.iter().enumerate() {
        for (setting, format) in [
            ("format", Some(&connector.format)),
            ("key_format", connector.key_format.as_ref()),
        ] {
            if let Some(super::Format::AvroFile { schema }) = format
                && let Err(message) = crate::format::load_avro_file(schema)
            {
                problems.push(Problem::new(
                    format!("connectors[{c}].{setting}.avro.schema"),
                    message,
                ));
            }
        }
        if let Some(registry) = &connector.schema_registry
            && registry.tls.is_some()
            && let Err(message) = crate::format::registry::RegistryClient::new(registry)
        {
            let path = if Some(registry) == config.kafka.schema_registry.as_ref() {
                "kafka.schema_registry".to_string()
            } else {
                format!("connectors[{c}].schema_registry")
            };
            let problem = Problem::new(path, message);
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    problems
}

/// Reads `admin.tls`'s certificate and key as the server will: a file that is missing or
/// holds no usable PEM is a problem at `validate`, not at the first connection.
fn admin_tls_problems(config: &Config) -> Vec<Problem> {
    let Some(tls) = config.admin.as_ref().and_then(|a| a.tls.as_ref()) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    if let Err(e) = crate::admin::tls::server_config(tls) {
        problems.push(Problem::new(e.field(), e.to_string()));
    }
    if let Some(ca) = &tls.ca
        && let Err(e) = crate::admin::tls::client_config(Some(ca))
    {
        problems.push(Problem::new("admin.tls.ca", e.to_string()));
    }
    problems
}

/// Reads and compiles each connector's `schema:` file.
fn record_schema_problems(config: &Config) -> Vec<Problem> {
    config
        .connectors
        .iter()
        .enumerate()
        .filter_map(|(c, connector)| {
            let path = connector.schema.as_ref()?;
            crate::validate::RecordSchema::load(path)
                .err()
                .map(|e| Problem::new(format!("connectors[{c}].schema"), e.to_string()))
        })
        .collect()
}

/// Loads every plugin of every connector, checks that it implements the interface and runs
/// its `init` with its config: what `sluice validate` adds to the file checks.
pub fn plugin_problems(
    config: &Config,
    engine: &sluice_transform::TransformEngine,
) -> Vec<Problem> {
    let scrubber = config_scrubber(config);
    let mut problems = Vec::new();
    for (c, connector) in config.connectors.iter().enumerate() {
        for (t, transform) in connector.transforms.iter().enumerate() {
            if let Err(error) = sluice_transform::check_plugin(engine, &transform.spec()) {
                problems.push(Problem::new(
                    format!("connectors[{c}].transforms[{t}].plugin"),
                    scrubber.scrub(&error.to_string()),
                ));
            }
        }
    }
    problems
}

/// The secrets of a loaded configuration, for messages built outside loading (a plugin's
/// `init` may quote its config): values that came from `${…}` show as the file wrote them.
fn config_scrubber(config: &Config) -> Scrubber {
    let mut scrubber = Scrubber::default();
    let maps = std::iter::once(&config.kafka.properties).chain(
        config
            .connectors
            .iter()
            .flat_map(|c| c.transforms.iter().map(|t| &t.config)),
    );
    for map in maps {
        for (value, shown) in map.shown_values() {
            scrubber.add_shown(value, shown);
        }
    }
    for connector in &config.connectors {
        scrubber.add_shown(connector.sink.url.expose(), &connector.sink.url.redacted());
    }
    let mut document = serde_json::Map::new();
    let secrets = |map: &super::Properties| {
        map.expose()
            .iter()
            .filter(|(key, _)| is_secret_key(key))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect::<serde_json::Map<_, _>>()
    };
    document.insert(
        "kafka".into(),
        Value::Object(secrets(&config.kafka.properties)),
    );
    let connectors = config
        .connectors
        .iter()
        .map(|connector| {
            let transforms: Vec<Value> = connector
                .transforms
                .iter()
                .map(|t| Value::Object(secrets(&t.config)))
                .collect();
            serde_json::json!({
                "url": connector.sink.url.expose(),
                "transforms": transforms,
            })
        })
        .collect();
    document.insert("connectors".into(), Value::Array(connectors));
    scrubber.add_document(&Value::Object(document));
    scrubber
}

/// Checks configuration text; `lookup` resolves `${VAR}`. No message of the error quotes
/// a secret of the file: URLs show as [`redact_url`] prints them, values of secret keys as
/// `***`.
pub fn load_str(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut scrubber = Scrubber::default();
    check_str(text, lookup, &mut scrubber).map_err(|problems| ConfigError::Invalid {
        problems: problems
            .into_iter()
            .map(|p| Problem::new(p.path, scrubber.scrub(&p.message)))
            .collect(),
    })
}

fn check_str(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    scrubber: &mut Scrubber,
) -> Result<Config, Vec<Problem>> {
    let parsed: serde_yaml_ng::Value = match serde_yaml_ng::from_str(text) {
        Ok(serde_yaml_ng::Value::Null) => {
            return Err(vec![Problem::new("", "the file is empty")]);
        }
        Ok(parsed) => parsed,
        Err(error) => {
            let message = match error.location() {
                Some(at) => format!(
                    "line {}, column {}: {}",
                    at.line(),
                    at.column(),
                    strip_location(&error.to_string())
                ),
                None => format!("not valid YAML: {error}"),
            };
            return Err(vec![Problem::new("", message)]);
        }
    };

    let mut problems = Vec::new();
    let Some(mut document) = yaml::to_json(parsed, &mut problems) else {
        return Err(problems);
    };
    let written = document.clone();
    let origins = interpolate(&mut document, lookup, &mut problems);
    if !problems.is_empty() {
        // The messages quote the strings as written.
        scrubber.add_document(&written);
        return Err(problems);
    }
    drop(written);

    let expected = refused_types(&document, &origins);
    let typed = type_whole_values(&mut document, &origins, &expected, &mut problems);
    let refused: Vec<String> = problems.iter().map(|p| p.path.clone()).collect();
    scrubber.add_origins(&document, &origins, &typed);
    scrubber.add_document(&document);
    problems.extend(
        schema_problems(&document)
            .into_iter()
            .filter(|p| !refused.contains(&p.path)),
    );
    if !problems.is_empty() {
        return Err(problems);
    }

    let mut config: Config = match serde_path_to_error::deserialize(&document) {
        Ok(config) => config,
        Err(error) => {
            let path = render_serde_path(error.path());
            return Err(vec![Problem::new(path, error.into_inner().to_string())]);
        }
    };
    show_as_written(&mut config, &origins);
    // A connector without a registry of its own uses the `kafka:` section's.
    for connector in &mut config.connectors {
        if connector.schema_registry.is_none() {
            connector
                .schema_registry
                .clone_from(&config.kafka.schema_registry);
        }
    }

    problems.extend(semantic_problems(&config));
    config.shown = super::Document(shown_document(&document, &origins, scrubber));
    config.document = super::Document(document);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// The built-in schema, compiled once.
pub(super) fn validator() -> Result<&'static jsonschema::Validator, &'static str> {
    static VALIDATOR: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| {
            let schema: Value = serde_json::from_str(SCHEMA).map_err(|e| e.to_string())?;
            jsonschema::validator_for(&schema).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(String::as_str)
}

fn schema_problems(document: &Value) -> Vec<Problem> {
    let validator = match validator() {
        Ok(v) => v,
        Err(e) => {
            return vec![Problem::new(
                "",
                format!("internal: the built-in schema is broken: {e}"),
            )];
        }
    };
    let mut problems: Vec<Problem> = validator
        .iter_errors(document)
        .map(|error| {
            let pointer = error.instance_path().to_string();
            Problem::new(pointer_to_path(&pointer), schema_message(&error))
        })
        .collect();
    problems.dedup();
    problems
}

/// The schema's message, said the way a user of the file thinks of it.
fn schema_message(error: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    let value = error.instance();
    match error.kind() {
        Kind::Enum { options } => {
            let options: Vec<String> = options
                .as_array()
                .map(|o| o.iter().map(|v| v.to_string()).collect())
                .unwrap_or_default();
            format!("{value} is not one of {}", options.join(", "))
        }
        Kind::Pattern { pattern } if pattern.contains("(ms|s|m|h|d)") => {
            format!(
                "{value} is not a duration: write a number and a unit, ms, s, m, h or d (50ms, 2s, 5m, 7d)"
            )
        }
        Kind::Pattern { pattern } if pattern.starts_with("^(header:") => {
            format!("{value} is not an id source: write header:NAME or a JSON pointer such as /id")
        }
        Kind::Pattern { pattern } if pattern.contains("KiB") => {
            format!(
                "{value} is not a size: write bytes, or a number and a unit (512KiB, 4MiB, 1GB)"
            )
        }
        Kind::OneOfNotValid { .. }
            if error.schema_path().to_string().contains("size")
                || error.instance_path().to_string().ends_with("max_bytes") =>
        {
            format!(
                "{value} is not a size: write bytes, or a number and a unit (512KiB, 4MiB, 1GB)"
            )
        }
        Kind::AdditionalProperties { unexpected } => {
            format!(
                "unknown field{} {}",
                if unexpected.len() > 1 { "s" } else { "" },
                unexpected.join(", ")
            )
        }
        // A mapping or a list of the wrong type said in full would bury the message (and
        // could hold a secret): name its kind instead.
        Kind::Type { .. } => match value.as_ref() {
            Value::Object(_) => error.to_string().replace(&value.to_string(), "a mapping"),
            Value::Array(_) => error.to_string().replace(&value.to_string(), "a list"),
            _ => error.to_string(),
        },
        _ => error.to_string(),
    }
}

/// `/connectors/1/sink/key/0` -> `connectors[1].sink.key[0]`.
pub fn pointer_to_path(pointer: &str) -> String {
    let mut segments = Vec::new();
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.chars().all(|c| c.is_ascii_digit()) {
            segments.push(format!("[{segment}]"));
        } else {
            segments.push(segment);
        }
    }
    render_path(&segments)
}

fn render_serde_path(path: &serde_path_to_error::Path) -> String {
    let segments: Vec<String> = path
        .iter()
        .filter_map(|segment| match segment {
            serde_path_to_error::Segment::Seq { index } => Some(format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect();
    render_path(&segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
kafka: { brokers: "localhost:9092", properties: { session.timeout.ms: 10000 } }
connectors:
  - name: words
    topics: [words]
    sink:
      url: sqlite://words.db
      table: words
      mode: upsert
      key: [uid]
      columns:
        uid: { from: /uid, type: bigint }
        word: { from: /word, type: text }
"#;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn problems(text: &str) -> Vec<String> {
        match load_str(text, &no_env) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid { problems }) => {
                problems.iter().map(|p| p.to_string()).collect()
            }
            Err(other) => vec![other.to_string()],
        }
    }

    #[test]
    fn good_file_loads_with_defaults() {
        let config = load_str(GOOD, &no_env).expect("valid");
        let c = &config.connectors[0];
        assert_eq!(c.group_id(), "sluice-words");
        assert_eq!(c.tasks, 1);
        assert_eq!(c.sink.columns.0[0].0, "uid");
        assert_eq!(config.kafka.properties["session.timeout.ms"], "10000");
    }

    #[test]
    fn columns_keep_the_file_order() {
        let text = GOOD.replace("        uid: { from: /uid, type: bigint }\n        word: { from: /word, type: text }", "        word: { from: /word, type: text }\n        uid: { from: /uid, type: bigint }\n        a: { from: $offset, type: bigint }");
        let config = load_str(&text, &no_env).expect("valid");
        let names: Vec<&str> = config.connectors[0]
            .sink
            .columns
            .0
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(names, ["word", "uid", "a"]);
    }

    #[test]
    fn unknown_key_column_is_named() {
        let text = GOOD.replace("key: [uid]", "key: [id]");
        assert_eq!(
            problems(&text),
            vec!["connectors[0].sink.key[0]: column \"id\" is not defined in columns"]
        );
    }

    #[test]
    fn every_problem_is_reported() {
        let text = GOOD
            .replace("key: [uid]", "key: [id, uid2]")
            .replace("sqlite://", "oracle://");
        let found = problems(&text);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("connectors[0].sink.url: unsupported database \"oracle\""));
    }

    #[test]
    fn passwords_stay_hidden() {
        let text = GOOD.replace("sqlite://words.db", "oracle://u:hunter2@h/db");
        let found = problems(&text).join("\n");
        assert!(!found.contains("hunter2"), "{found}");
    }

    const SECRETS: &str = r#"
kafka:
  brokers: localhost:9092
  properties: { sasl.username: app, sasl.password: hunter2-sasl, sasl.oauthbearer.client.secret: hunter2-oidc }
connectors:
  - name: words
    topics: [words]
    transforms:
      - name: t
        plugin: t.wasm
        config: { api_token: hunter2-token, field: uid }
    sink:
      url: postgres://app:hunter2-userinfo@db/test?password=hunter2-query&sslmode=require
      table: words
      columns: { uid: { from: /uid, type: bigint } }
"#;

    #[test]
    fn debug_of_a_config_shows_no_secret() {
        let config = load_str(SECRETS, &no_env).expect("valid");
        let shown = format!("{config:?} {config:#?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("postgres://app:***@db/test?password=***&sslmode=require"));
        assert!(shown.contains("sasl.username") && shown.contains("field"));
        // The values themselves are there for the clients that need them.
        assert_eq!(config.kafka.properties["sasl.password"], "hunter2-sasl");
        assert!(
            config.connectors[0]
                .sink
                .url
                .expose()
                .contains("hunter2-userinfo")
        );
        assert_eq!(
            config.connectors[0].transforms[0].spec().config["api_token"],
            "hunter2-token"
        );
    }

    #[test]
    fn failed_loads_show_no_secret() {
        for bad in [
            SECRETS.replace("      table: words", "      table: words\n      tabel: x"),
            SECRETS.replace("table: words", "table: \"no good\""),
            SECRETS
                .replace("columns: {", "columns: [")
                .replace("bigint } }", "bigint } ]"),
            SECRETS.replace("sslmode=require", "sslmode=${MODE"),
            SECRETS.replace(
                "sasl.password: hunter2-sasl",
                "sasl.password: [hunter2-sasl]",
            ),
            SECRETS.replace("  - name: words", "  words:"),
        ] {
            let error = load_str(&bad, &no_env).expect_err(&bad);
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("hunter2"), "{bad}\n{shown}");
        }
    }

    #[test]
    fn merge_keys_share_settings_and_unknown_fields_still_fail() {
        let text = r#"
kafka: { brokers: localhost:9092 }
connectors:
  - name: a
    topics: [a]
    sink: &sink
      url: sqlite://x.db
      table: a
      columns: { uid: { from: /uid, type: bigint }, word: { from: /word, type: text } }
  - name: b
    topics: [b]
    sink:
      <<: *sink
      table: b
"#;
        let config = load_str(text, &no_env).expect("valid");
        let b = &config.connectors[1].sink;
        assert_eq!(b.table, "b");
        assert_eq!(b.url.expose(), "sqlite://x.db");
        let names: Vec<&str> = b.columns.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["uid", "word"]);
        assert_eq!(
            problems(&text.replace("      table: b\n", "      table: b\n      tabel: c\n")),
            vec!["connectors[1].sink: unknown field tabel"]
        );
        assert_eq!(
            problems(&text.replace(
                "      <<: *sink",
                "      <<: 5\n      url: sqlite://y.db\n      columns: {}"
            )),
            vec![
                "connectors[1].sink.<<: the merge key << takes a mapping or a list of mappings (an alias such as *defaults, or [*a, *b]), not a number"
            ]
        );
    }

    #[test]
    fn syntax_errors_keep_their_line() {
        let found = problems("kafka: { brokers: localhost:9092 }\nconnectors:\n  - name: [a\n");
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("line "), "{found:?}");
    }

    #[test]
    fn plugin_limits_are_range_checked() {
        let with = |limits: &str| {
            GOOD.replace(
                "    sink:",
                &format!(
                    "    transforms: [{{ name: t, plugin: t.wasm, limits: {limits} }}]\n    sink:"
                ),
            )
        };
        assert!(problems(&with("{ timeout: 1ms, memory: 1MiB }")).is_empty());
        assert!(problems(&with("{ timeout: 5m, memory: 4GiB }")).is_empty());
        assert_eq!(
            problems(&with("{ timeout: 0.5ms }")),
            vec![
                "connectors[0].transforms[0].limits.timeout: 0.5ms is shorter than 1ms, the shortest deadline sluice can keep (epoch ticks are milliseconds)"
            ]
        );
        let found = problems(&with("{ timeout: 301s, memory: 4097MiB }"));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0]
                .starts_with("connectors[0].transforms[0].limits.timeout: 301s is longer than 5m"),
            "{found:?}"
        );
        assert!(
            found[1].starts_with(
                "connectors[0].transforms[0].limits.memory: 4097MiB is more than 4GiB"
            ),
            "{found:?}"
        );
        assert_eq!(
            problems(&with("{ memory: 1023KiB }")),
            vec![
                "connectors[0].transforms[0].limits.memory: 1023KiB is less than 1MiB, the least memory a component starts with"
            ]
        );
    }

    #[test]
    fn isolation_defaults_and_checks() {
        let config = load_str(GOOD, &no_env).expect("valid");
        let isolation = &config.connectors[0].errors.isolation;
        assert_eq!(isolation.max_time.0, std::time::Duration::from_secs(300));
        assert_eq!(isolation.max_failed_calls, 64);
        let with = |isolation: &str| format!("{GOOD}    errors: {{ isolation: {isolation} }}\n");
        let config =
            load_str(&with("{ max_time: 30s, max_failed_calls: 8 }"), &no_env).expect("valid");
        let isolation = &config.connectors[0].errors.isolation;
        assert_eq!(isolation.max_time.0, std::time::Duration::from_secs(30));
        assert_eq!(isolation.max_failed_calls, 8);
        assert_eq!(
            problems(&with("{ max_time: 0s }")),
            vec![
                "connectors[0].errors.isolation.max_time: must be more than 0: it is the time allowed to find the records that fail a batch"
            ]
        );
        let found = problems(&with("{ max_failed_calls: 0 }"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(
                "connectors[0].errors.isolation.max_failed_calls: 0 is less than the minimum of 1"
            ),
            "{found:?}"
        );
        assert_eq!(
            problems(&with("{ max_calls: 3 }")),
            vec!["connectors[0].errors.isolation: unknown field max_calls"]
        );
    }

    #[test]
    fn paths() {
        assert_eq!(
            pointer_to_path("/connectors/1/sink/key/0"),
            "connectors[1].sink.key[0]"
        );
        assert_eq!(pointer_to_path(""), "");
    }

    #[test]
    fn an_open_listener_needs_a_token_and_a_read_token_its_own_value() {
        let with = |admin: &str| problems(&format!("{GOOD}\nadmin: {admin}\n"));
        let open = with("{ listen: \"0.0.0.0:8083\" }");
        assert_eq!(open.len(), 1, "{open:?}");
        assert!(
            open[0].starts_with("admin.listen: 0.0.0.0:8083 is reachable"),
            "{open:?}"
        );
        assert!(with("{ listen: \"[::]:8083\" }")[0].starts_with("admin.listen"));
        assert!(with("{ listen: \"127.0.0.1:8083\" }").is_empty());
        assert!(with("{ listen: \"[::1]:8083\" }").is_empty());
        assert!(with("{ listen: \"0.0.0.0:8083\", token: t-0123456789abcdef }").is_empty());
        assert!(with("{ listen: \"0.0.0.0:8083\", read_token: r-0123456789abcdef }").is_empty());
        // Off loopback, a read token is as long as a token must be.
        assert_eq!(with("{ listen: \"0.0.0.0:8083\", read_token: r }").len(), 1);
        let same = with("{ listen: \"127.0.0.1:8083\", token: t, read_token: t }");
        assert!(
            same.len() == 1 && same[0].starts_with("admin.read_token: is the same"),
            "{same:?}"
        );
    }
}
