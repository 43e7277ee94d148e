//! The files a configuration names, read as their users will read them: each connector's
//! `schema:` file compiled (`validate`), an `.avsc` file parsed and a Schema Registry's TLS
//! files loaded (`format`), `admin.tls`'s certificate, key and CA loaded (`admin`).
//!
//! `config` reads and checks the file's text, and resolves the paths it names against the
//! file's directory; it does not open them, since the code that reads them sits in rooms
//! after it. They are read here, where a file is loaded to run (`sluice run`, a reload)
//! and by `sluice validate`, so that a broken one is a problem of the configuration, with
//! the path of the setting that names it, and not a failure at the first record or the
//! first connection.

use std::path::Path;

use crate::config::{self, Config, ConfigError, Format, Problem};

/// Loads the file at `path` as `sluice run` does: [`config::load_file`] (the text read and
/// checked, relative paths resolved against the file's directory), then every file the
/// configuration names, read by [`referenced_file_problems`]. A file that does not read is
/// [`ConfigError::Invalid`] with one problem per file, as a problem of the text would be.
pub fn load_checked(path: &Path) -> Result<Config, ConfigError> {
    let config = config::load_file(path)?;
    let problems = referenced_file_problems(&config);
    if !problems.is_empty() {
        return Err(ConfigError::Invalid { problems });
    }
    Ok(config)
}

/// Every referenced file that does not read as its user reads it: the connectors' `schema:`
/// files first, then `admin.tls`, then the formats' files, each problem at the path of the
/// setting that names the file.
pub fn referenced_file_problems(config: &Config) -> Vec<Problem> {
    let mut problems = record_schema_problems(config);
    problems.extend(admin_tls_problems(config));
    problems.extend(format_file_problems(config));
    problems
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
            if let Some(Format::AvroFile { schema }) = format
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
            // A connector that inherits `kafka.schema_registry` shares its problem, once.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` as `connectors.yaml` in a new directory, beside `files` (name, text).
    fn written(text: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for (name, contents) in files {
            std::fs::write(dir.path().join(name), contents).expect("write a file");
        }
        let path = dir.path().join("connectors.yaml");
        std::fs::write(&path, text).expect("write the configuration");
        (dir, path)
    }

    const CONNECTOR: &str = "kafka: { brokers: localhost:9092 }\nconnectors:\n  - name: a\n    topics: [a]\n    schema: record.json\n    sink:\n      url: sqlite://a.db\n      table: a\n      columns:\n        id: { from: /id, type: bigint }\n";

    #[test]
    fn a_named_file_that_does_not_read_fails_the_load_but_not_the_text_check() {
        let (_dir, path) = written(CONNECTOR, &[("record.json", "{ not json")]);
        // The text alone is valid: `config` does not open the files it names.
        let loaded = config::load_file(&path).expect("the text is valid");
        let beside = path.with_file_name("record.json");
        assert_eq!(
            loaded.connectors[0].schema.as_deref(),
            Some(beside.as_path())
        );
        let Err(ConfigError::Invalid { problems }) = load_checked(&path) else {
            panic!("a schema file that does not parse loaded");
        };
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, "connectors[0].schema");
    }

    #[test]
    fn good_files_load() {
        let (_dir, path) = written(CONNECTOR, &[("record.json", "{\"type\": \"object\"}")]);
        load_checked(&path).expect("valid with its schema file");
    }
}
