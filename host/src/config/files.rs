//! The files a configuration refers to: relative paths resolved against its directory,
//! and each file read as its user will read it (a JSON Schema, an `.avsc`, TLS PEM, a
//! plugin), so a broken one is a problem at `validate`, not at the first record.

use std::path::Path;

use serde_json::Value;

use super::problem::Problem;
use super::scrub::Scrubber;
use super::{Config, is_secret_key};

/// Every referenced file that does not read as its user reads it.
pub(super) fn referenced_file_problems(config: &Config) -> Vec<Problem> {
    let mut problems = record_schema_problems(config);
    problems.extend(admin_tls_problems(config));
    problems.extend(format_file_problems(config));
    problems
}

/// Resolves the relative paths of a configuration loaded from `path` against the file's
/// directory: plugins, `schema:` files, `.avsc` files, TLS files.
pub(super) fn resolve_relative_paths(config: &mut Config, path: &Path) {
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
