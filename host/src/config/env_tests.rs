//! Values that come from `${VAR}`: shown as the file wrote them everywhere a configuration
//! is shown, typed by the field they fill, and still compared by their text on reload.

use super::{ConfigError, load_str};

const FILE: &str = r#"
kafka:
  brokers: ${BROKERS}
  properties:
    sasl.username: app
    sasl.password: ${KAFKA_PASSWORD}
    ssl.key.password: hunter2-literal
    client.id: ${CLIENT_ID}
connectors:
  - name: words
    topics: [words]
    tasks: ${TASKS:-2}
    transforms:
      - name: mask
        plugin: mask.wasm
        config: { fields: /word, mode: hash, salt: "${MASK_SALT}", note: "pepper-${MASK_SALT}" }
    sink:
      url: postgres://app:${PW}@db/test?sslmode=require
      table: words
      columns: { uid: { from: /uid, type: bigint } }
"#;

fn env(name: &str) -> Option<String> {
    Some(
        match name {
            "BROKERS" => "kafka-1.internal:9092",
            "KAFKA_PASSWORD" => "env-sasl-secret",
            "CLIENT_ID" => "00123",
            "MASK_SALT" => "env-salt-value",
            "PW" => "env-db-password",
            _ => return None,
        }
        .to_string(),
    )
}

/// Every text the environment gave in [`env`].
const ENV_TEXTS: &[&str] = &[
    "kafka-1.internal",
    "env-sasl-secret",
    "env-salt-value",
    "env-db-password",
];

fn assert_no_env_text(shown: &str) {
    for text in ENV_TEXTS.iter().chain(&["hunter2"]) {
        assert!(!shown.contains(text), "{text} shows in {shown}");
    }
}

#[test]
fn values_from_the_environment_show_as_written() {
    let config = load_str(FILE, &env).expect("valid");
    let section = config.redacted_section("words").expect("section");
    let shown = section.to_string();
    assert_no_env_text(&shown);
    let config_of = &section["transforms"][0]["config"];
    assert_eq!(config_of["salt"], "${MASK_SALT}", "{shown}");
    assert_eq!(config_of["note"], "pepper-${MASK_SALT}", "{shown}");
    assert_eq!(config_of["mode"], "hash");
    assert_eq!(
        section["sink"]["url"],
        "postgres://app:${PW}@db/test?sslmode=require"
    );
    assert_eq!(section["tasks"], "${TASKS:-2}");
    let kafka = config.shown.0["kafka"].to_string();
    assert_no_env_text(&kafka);
    assert!(
        kafka.contains(r#""sasl.password":"${KAFKA_PASSWORD}""#),
        "{kafka}"
    );
    assert!(kafka.contains(r#""ssl.key.password":"***""#), "{kafka}");
    assert!(kafka.contains(r#""brokers":"${BROKERS}""#), "{kafka}");

    // The typed values that hold settings (URLs, string maps) print the same way.
    let debug = format!("{config:?}");
    for text in [
        "env-sasl-secret",
        "env-salt-value",
        "env-db-password",
        "hunter2",
    ] {
        assert!(!debug.contains(text), "{text} shows in {debug}");
    }
    assert!(debug.contains("${MASK_SALT}"), "{debug}");
    assert!(debug.contains("postgres://app:${PW}@db/test"), "{debug}");
    let properties: Vec<String> = config
        .kafka
        .properties
        .redacted()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert_eq!(
        properties,
        [
            "client.id=${CLIENT_ID}",
            "sasl.password=${KAFKA_PASSWORD}",
            "sasl.username=app",
            "ssl.key.password=***"
        ]
    );

    // And the clients get the text.
    let connector = &config.connectors[0];
    assert_eq!(connector.tasks, 2);
    assert_eq!(
        connector.sink.url.expose(),
        "postgres://app:env-db-password@db/test?sslmode=require"
    );
    assert_eq!(connector.transforms[0].config["salt"], "env-salt-value");
    assert_eq!(config.kafka.properties["sasl.password"], "env-sasl-secret");
}

#[test]
fn a_secret_written_in_the_file_stays_hidden_beside_a_reference() {
    let file = FILE
        .replace("app:${PW}@db", "app:hunter2-${PW}@db")
        .replace(
            "sasl.password: ${KAFKA_PASSWORD}",
            "sasl.password: x${KAFKA_PASSWORD}",
        )
        .replace("?sslmode=require", "?sslmode=require&password=${PW}");
    let config = load_str(&file, &env).expect("valid");
    let shown = config.shown.0.to_string();
    assert_no_env_text(&shown);
    assert!(
        shown.contains("postgres://app:***@db/test?sslmode=require&password=${PW}"),
        "{shown}"
    );
    assert!(shown.contains(r#""sasl.password":"***""#), "{shown}");
}

const TYPED: &str = r#"
kafka: { brokers: localhost:9092, properties: { linger.ms: "${V}" } }
connectors:
  - name: a
    topics: [a]
    tasks: ${N}
    batch: { max_records: "${N}" }
    transforms: [{ name: t, plugin: t.wasm, config: { x: "${V}" } }]
    sink:
      url: sqlite://a.db
      table: a
      create_table: "${F}"
      columns: { v: { from: /v, type: text } }
"#;

#[test]
fn a_whole_value_is_typed_by_the_field_it_fills() {
    let texts = [
        "12e4", "0x1F", "00123", "true", "~", "null", "", "a: b # c", "-0", "1.50",
    ];
    for text in texts {
        let lookup = |name: &str| match name {
            "V" => Some(text.to_string()),
            "N" => Some("007".to_string()),
            "F" => Some("false".to_string()),
            _ => None,
        };
        let config = load_str(TYPED, &lookup).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(config.kafka.properties["linger.ms"], text);
        assert_eq!(config.connectors[0].transforms[0].config["x"], text);
        assert_eq!(config.connectors[0].tasks, 7);
        assert_eq!(config.connectors[0].batch.max_records, 7);
        assert!(!config.connectors[0].sink.create_table);
    }
}

#[test]
fn a_numeric_field_refuses_text_that_is_no_number() {
    let file = FILE.replace("tasks: ${TASKS:-2}", "tasks: ${TASKS}");
    for (text, message) in [
        (
            "abc",
            r#"connectors[0].tasks: ${TASKS} is "abc", not a whole number"#,
        ),
        (
            "2.5",
            r#"connectors[0].tasks: ${TASKS} is "2.5", not a whole number"#,
        ),
        (
            "99999999999999999999",
            r#"connectors[0].tasks: ${TASKS} is "99999999999999999999", not a whole number this field can hold (too large)"#,
        ),
        ("0", "connectors[0].tasks: 0 is less than the minimum of 1"),
        (
            "5000000000",
            "connectors[0].tasks: 5000000000 is greater than the maximum",
        ),
    ] {
        let lookup = |name: &str| {
            if name == "TASKS" {
                Some(text.to_string())
            } else {
                env(name)
            }
        };
        let Err(ConfigError::Invalid { problems }) = load_str(&file, &lookup) else {
            panic!("{text} loads");
        };
        let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert!(
            shown.len() == 1 && shown[0].starts_with(message),
            "{text}: {shown:?}"
        );
        assert_no_env_text(&shown.join("\n"));
    }
}

#[test]
fn messages_show_a_value_from_the_environment_as_its_reference() {
    let file = FILE.replace(
        "url: postgres://app:${PW}@db/test?sslmode=require",
        "url: ${DATABASE_URL}",
    );
    let lookup = |name: &str| {
        if name == "DATABASE_URL" {
            Some("oracle://app:env-db-password@db/test".to_string())
        } else {
            env(name)
        }
    };
    let error = load_str(&file, &lookup).expect_err("oracle");
    let shown = error.to_string();
    assert_no_env_text(&shown);
    assert!(shown.contains("${DATABASE_URL}"), "{shown}");
}

#[test]
fn a_rotated_secret_is_a_change_on_reload() {
    let before = load_str(FILE, &env).expect("valid");
    let rotated = |name: &str| {
        if name == "PW" {
            Some("rotated".to_string())
        } else {
            env(name)
        }
    };
    let after = load_str(FILE, &rotated).expect("valid");
    assert_ne!(
        before.connector_section("words"),
        after.connector_section("words"),
        "what a reload compares must see the new password"
    );
    assert_eq!(
        before.redacted_section("words"),
        after.redacted_section("words")
    );
}

#[test]
fn a_value_written_in_the_file_keeps_yaml_typing() {
    let file = TYPED
        .replace("linger.ms: \"${V}\"", "a: 12e4, b: 0x1F, c: \"0x1F\"")
        .replace("tasks: ${N}", "tasks: 1")
        .replace("max_records: \"${N}\"", "max_records: 1")
        .replace("create_table: \"${F}\"", "create_table: true")
        .replace("x: \"${V}\"", "x: y");
    let config = load_str(&file, &|_| None).expect("valid");
    let properties = &config.kafka.properties;
    assert_eq!(
        (
            properties["a"].as_str(),
            properties["b"].as_str(),
            properties["c"].as_str()
        ),
        ("120000.0", "31", "0x1F")
    );
}
