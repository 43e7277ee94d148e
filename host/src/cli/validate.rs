//! `sluice validate`: the file checked as `run` would load it, plugins started, secrets hidden.

use std::io::Write;
use std::path::Path;

use crate::config::{self, Config, ConfigError, Problem, Scrubber};
use crate::server::{EXIT_FAILURE, EXIT_INVALID, load_checked, write_config_error};

pub fn validate(path: &Path, connect: bool) -> u8 {
    let code = validate_to(path, &mut std::io::stdout(), &mut std::io::stderr());
    if code != 0 || !connect {
        return code;
    }
    // Loaded again: validate_to has shown it valid.
    let Ok(config) = load_checked(path) else {
        return EXIT_INVALID;
    };
    println!("reaching what the file names:");
    if super::reach::reach(&config, &mut std::io::stdout()) {
        0
    } else {
        EXIT_FAILURE
    }
}

/// `sluice validate`, writing its summary to `out` and its problems to `err`. A value that
/// came from `${VAR}` shows as the file wrote it; literal secrets as `***`: URL passwords
/// and secret query parameters, values of secret properties.
fn validate_to(path: &Path, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let checked = load_checked(path)
        .map_err(|error| {
            write_config_error(err, path, &error);
            EXIT_INVALID
        })
        .and_then(|config| {
            if config.connectors.iter().all(|c| c.transforms.is_empty()) {
                return Ok(config);
            }
            let engine =
                sluice_transform::TransformEngine::new(sluice_transform::EngineOptions::default())
                    .map_err(|e| {
                        let _ = writeln!(
                            err,
                            "{}: cannot start the plugin engine: {e}",
                            path.display()
                        );
                        EXIT_FAILURE
                    })?;
            let problems = plugin_problems(&config, &engine);
            if problems.is_empty() {
                Ok(config)
            } else {
                write_config_error(err, path, &ConfigError::Invalid { problems });
                Err(EXIT_INVALID)
            }
        });
    let config = match checked {
        Ok(config) => config,
        Err(code) => return code,
    };
    let _ = writeln!(
        out,
        "{}: valid, {} connector(s)",
        path.display(),
        config.connectors.len()
    );
    let properties: Vec<String> = config
        .kafka
        .properties
        .redacted()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    // A string of the file as it is shown (`${VAR}` as written), or `fallback` (a default).
    let shown = |pointer: String, fallback: &str| {
        config
            .shown
            .0
            .pointer(&pointer)
            .and_then(serde_json::Value::as_str)
            .unwrap_or(fallback)
            .to_string()
    };
    let _ = writeln!(
        out,
        "  kafka: {}{}",
        shown("/kafka/brokers".into(), &config.kafka.brokers),
        if properties.is_empty() {
            String::new()
        } else {
            format!(" ({})", properties.join(", "))
        }
    );
    for (i, c) in config.connectors.iter().enumerate() {
        let topics = match &c.topics_regex {
            Some(pattern) => format!(
                "topics matching {}",
                shown(format!("/connectors/{i}/topics_regex"), pattern.as_str())
            ),
            None => format!(
                "topics [{}]",
                c.topics
                    .iter()
                    .enumerate()
                    .map(|(k, topic)| shown(format!("/connectors/{i}/topics/{k}"), topic))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let _ = writeln!(
            out,
            "  {}: {} -> {} table {} ({:?}, {}, {} task(s), group {})",
            shown(format!("/connectors/{i}/name"), &c.name),
            topics,
            c.sink.url,
            shown(format!("/connectors/{i}/sink/table"), &c.sink.table_label()),
            c.sink.mode,
            if c.sink.derives_columns() {
                "columns from the schema".to_string()
            } else {
                format!("{} column(s)", c.sink.columns().len())
            },
            c.tasks,
            shown(format!("/connectors/{i}/group"), &c.group_id())
        );
        for t in &c.transforms {
            let _ = writeln!(
                out,
                "    transform {}: {} (init ok)",
                t.name,
                t.plugin.display()
            );
        }
    }
    for warning in registry_warnings(&config) {
        let _ = writeln!(err, "{}: warning: {warning}", path.display());
    }
    0
}

/// Loads every plugin of every connector, checks that it implements the interface and runs
/// its `init` with its config: what `sluice validate` adds to the checks of `run`'s load. A
/// message quotes no secret of the file ([`Scrubber::of_config`]).
fn plugin_problems(config: &Config, engine: &sluice_transform::TransformEngine) -> Vec<Problem> {
    let scrubber = Scrubber::of_config(config);
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

/// Asks each Schema Registry the connectors read from whether it answers: one that cannot
/// be reached, or refuses the credentials, is a warning (validate works offline).
fn registry_warnings(config: &config::Config) -> Vec<String> {
    let mut registries: Vec<&config::SchemaRegistryConfig> = Vec::new();
    for connector in &config.connectors {
        if let Some(registry) = connector.registry_in_use()
            && !registries.contains(&registry)
        {
            registries.push(registry);
        }
    }
    let probe = async {
        let mut warnings = Vec::new();
        for registry in registries {
            let client = match crate::format::registry::RegistryClient::new(registry) {
                Ok(client) => client,
                Err(message) => {
                    warnings.push(message);
                    continue;
                }
            };
            if let Err(error) = client.probe().await {
                warnings.push(format!(
                    "the Schema Registry does not answer as one ({error}); connectors that read its schemas wait for it when they run"
                ));
            }
        }
        warnings
    };
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => tokio::task::block_in_place(|| handle.block_on(probe)),
        Err(_) => match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(probe),
            Err(e) => vec![format!("cannot ask the Schema Registry: {e}")],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{EXIT_INVALID, validate_to};

    /// Runs `sluice validate` in-process on `text`: (exit code, stdout, stderr).
    fn validate_text(text: &str) -> (u8, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("connectors.yaml");
        std::fs::write(&path, text).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = validate_to(&path, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn an_unreachable_registry_is_a_warning_and_a_bad_url_an_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let file = |url: &str| {
            format!(
                "kafka:\n  brokers: localhost:9092\n  schema_registry: {{ url: \"{url}\", username: u, password: hunter2-registry }}\nconnectors:\n  - name: a\n    topics: [a]\n    format: avro\n    sink:\n      url: sqlite://a.db\n      table: a\n      columns:\n        id: {{ from: /id, type: bigint }}\n"
            )
        };
        let (code, out, err) = validate_text(&file(&format!("http://127.0.0.1:{port}")));
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            err.contains("warning") && err.contains("Schema Registry"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
        let (code, _, err) = validate_text(&file("registry:8081"));
        assert_eq!(code, EXIT_INVALID, "{err}");
        assert!(err.contains("kafka.schema_registry.url"), "{err}");
        // Avro without any registry: an error at the format.
        let none = file("http://x").replace(
            "  schema_registry: { url: \"http://x\", username: u, password: hunter2-registry }\n",
            "",
        );
        let (code, _, err) = validate_text(&none);
        assert_eq!(code, EXIT_INVALID, "{err}");
        assert!(err.contains("connectors[0].format"), "{err}");
        // An Avro key read as text: the decoded key is a document.
        let key_as_text = file(&format!("http://127.0.0.1:{port}")).replace(
            "    format: avro\n",
            "    format: avro\n    key_format: avro\n",
        ) + "        k: { from: $key, type: text }\n";
        let (code, _, err) = validate_text(&key_as_text);
        assert_eq!(code, EXIT_INVALID, "{err}");
        assert!(
            err.contains("connectors[0].sink.columns.k.type") && err.contains("key_format"),
            "{err}"
        );
        // A schema file that does not parse.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.avsc"), "{\"type\": \"record\"}").unwrap();
        let text = file("http://x").replace(
            "    format: avro\n",
            &format!(
                "    format: {{ avro: {{ schema: \"{}\" }} }}\n",
                dir.path().join("bad.avsc").display()
            ),
        );
        let (code, _, err) = validate_text(&text);
        assert_eq!(code, EXIT_INVALID, "{err}");
        assert!(err.contains("connectors[0].format.avro.schema"), "{err}");
    }

    const SECRETS: &str = r#"
kafka:
  brokers: localhost:9092
  properties:
    security.protocol: SASL_SSL
    sasl.username: app
    sasl.password: hunter2-sasl
    ssl.key.password: hunter2-key
connectors:
  - name: userinfo
    topics: [a]
    sink:
      url: postgres://app:hunter2-userinfo@db:5432/test?sslmode=require
      table: a
      columns: { v: { from: /v, type: text } }
  - name: query
    topics: [b]
    sink:
      url: postgres://app@db/test?sslkey=/etc/k.pem&password=hunter2-query
      table: b
      columns: { v: { from: /v, type: text } }
"#;

    fn assert_no_secret(text: &str) {
        assert!(!text.contains("hunter2"), "a secret is shown:\n{text}");
    }

    #[test]
    fn validate_prints_no_secret_of_a_good_file() {
        let (code, out, err) = validate_text(SECRETS);
        assert_eq!(code, 0, "{err}");
        assert_no_secret(&out);
        assert_no_secret(&err);
        assert!(out.contains("sasl.password=***"), "{out}");
        assert!(out.contains("sasl.username=app"), "{out}");
        assert!(
            out.contains("postgres://app:***@db:5432/test?sslmode=require"),
            "{out}"
        );
        assert!(out.contains("?sslkey=/etc/k.pem&password=***"), "{out}");
    }

    #[test]
    fn validate_prints_no_secret_of_a_bad_file() {
        for bad in [
            // A bad field next to the URL.
            SECRETS.replace("      table: a\n", "      table: a\n      tabel: x\n"),
            // A value that fails beside it, after the schema.
            SECRETS.replace("table: b", "table: \"b c\""),
            // An unsupported scheme: the URL is quoted in the message.
            SECRETS.replace("postgres://app@db", "oracle://app@db"),
            // The sink as a list: a schema error about the whole value.
            SECRETS.replace(
                "    sink:\n      url: postgres://app:",
                "    sink:\n    - url: postgres://app:",
            ),
            // connectors as a mapping: the schema's message would print all of it.
            SECRETS
                .replace(
                    "connectors:\n  - name: userinfo",
                    "connectors:\n  first:\n    name: userinfo",
                )
                .replace("  - name: query", "  second:\n    name: query"),
            // An unclosed ${ in the URL: the message quotes the string.
            SECRETS.replace("?sslmode=require", "?sslmode=${MODE"),
            // A secret property of the wrong type.
            SECRETS.replace(
                "sasl.password: hunter2-sasl",
                "sasl.password: [hunter2-sasl]",
            ),
        ] {
            let (code, out, err) = validate_text(&bad);
            assert_eq!(code, EXIT_INVALID, "{bad}\n{out}{err}");
            assert!(!err.is_empty());
            assert_no_secret(&out);
            assert_no_secret(&err);
        }
    }
}
