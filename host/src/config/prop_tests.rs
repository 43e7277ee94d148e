//! Random configurations through loading and through what a reload compares: never a
//! panic, and a value from the environment never shows. Each document starts from a valid
//! file and has fields of the schema replaced by random values (strings, unicode, numbers
//! small and huge, flags, null, `${…}` references, nesting); some have their text cut or
//! spliced too, for the parser.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{ConfigError, load_str};

/// What `${SECRET}` resolves to: letters only, so no numeric or boolean field can take it,
/// and long enough to be hunted for in messages.
const SECRET_TEXT: &str = "zqenvsecretzq";

fn base() -> Value {
    json!({
        "kafka": { "brokers": "localhost:9092", "properties": { "session.timeout.ms": 6000 } },
        "pool": { "size": 2 },
        "connectors": [{
            "name": "words",
            "topics": ["words"],
            "tasks": 2,
            "transforms": [{ "name": "mask", "plugin": "mask.wasm", "config": { "fields": "word" } }],
            "sink": {
                "url": "sqlite://x.db",
                "table": "words",
                "mode": "upsert",
                "key": ["uid"],
                "columns": { "uid": { "from": "/uid", "type": "bigint" } }
            },
            "errors": { "policy": "dlq", "dlq": { "topic": "words-dlq" } }
        }]
    })
}

/// Fields of the schema (and a few beside it), as JSON pointers into [`base`].
const FIELDS: &[&str] = &[
    "",
    "/kafka",
    "/kafka/brokers",
    "/kafka/properties",
    "/kafka/properties/sasl.password",
    "/kafka/properties/client.id",
    "/admin",
    "/admin/listen",
    "/admin/token",
    "/pool",
    "/pool/size",
    "/pool/borrow_timeout",
    "/pool/idle",
    "/connectors",
    "/connectors/0",
    "/connectors/1",
    "/connectors/0/name",
    "/connectors/0/topics",
    "/connectors/0/topics/0",
    "/connectors/0/group",
    "/connectors/0/tasks",
    "/connectors/0/format",
    "/connectors/0/batch",
    "/connectors/0/batch/max_records",
    "/connectors/0/batch/max_bytes",
    "/connectors/0/batch/linger",
    "/connectors/0/transforms",
    "/connectors/0/transforms/0/name",
    "/connectors/0/transforms/0/config/salt",
    "/connectors/0/transforms/0/config/api_token",
    "/connectors/0/transforms/0/limits/memory",
    "/connectors/0/transforms/0/limits/timeout",
    "/connectors/0/transforms/0/limits/max_output_records",
    "/connectors/0/max_record_bytes",
    "/connectors/0/sink/url",
    "/connectors/0/sink/table",
    "/connectors/0/sink/mode",
    "/connectors/0/sink/key",
    "/connectors/0/sink/columns/uid/from",
    "/connectors/0/sink/columns/uid/type",
    "/connectors/0/sink/columns/word",
    "/connectors/0/sink/create_table",
    "/connectors/0/delivery/guarantee",
    "/connectors/0/delivery/dedup",
    "/connectors/0/delivery/dedup/id",
    "/connectors/0/delivery/dedup/window",
    "/connectors/0/delivery/on_offset_gap",
    "/connectors/0/errors/policy",
    "/connectors/0/errors/dlq",
    "/connectors/0/errors/dlq/topic",
    "/connectors/0/errors/dlq/table",
    "/connectors/0/errors/retry/initial",
    "/connectors/0/errors/retry/max",
    "/connectors/0/errors/retry/max_elapsed",
    "/connectors/0/errors/isolation/max_failed_calls",
    "/connectors/0/errors/restart/initial",
    "/connectors/0/schema",
];

/// Texts that mean something to some field, or to interpolation.
const TEXTS: &[&str] = &[
    "${SECRET}",
    "${SECRET:-x}",
    "${NUMBER}",
    "${UNSET}",
    "${UNSET:-0x1F}",
    "${UNSET:-12e4}",
    "pre-${SECRET}-post",
    "postgres://u:${SECRET}@h/db?password=${SECRET}",
    "postgres://u:hunter2@h/db",
    "$${SECRET}",
    "${",
    "${}",
    "${a-b}",
    "12e4",
    "0x1F",
    "00123",
    "~",
    "null",
    "",
    "a: b # c",
    ".",
    "..",
    "a\u{0}b",
    "1s",
    "0ms",
    "0.5ms",
    "99999999999999999999d",
    "4GiB",
    "99999999999999999999GiB",
    "embedded",
    "sqlite://x.db",
    "mysql://root@127.0.0.1/test",
    "dlq",
    "upsert",
    "$offset",
    "header:id",
    "/uid",
    "words",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u32..5000).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        Just(Value::Null),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(TEXTS).prop_map(|t| Value::String(t.to_string())),
        "[a-z]{0,3}".prop_map(|t| Value::String(t.repeat(100))),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_.]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Sets `pointer` in `document`, making the mappings on the way; a list takes an index
/// past its end as a push.
fn set(document: &mut Value, pointer: &str, value: Value) {
    let mut at = document;
    let segments: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let next = match at {
            Value::Array(items) => match segment.parse::<usize>() {
                Ok(index) if index < items.len() => &mut items[index],
                Ok(_) => {
                    items.push(Value::Null);
                    items.last_mut().expect("pushed")
                }
                Err(_) => return,
            },
            Value::Object(map) => map.entry(segment.to_string()).or_insert(Value::Null),
            other => {
                *other = json!({});
                let Value::Object(map) = other else { return };
                map.entry(segment.to_string()).or_insert(Value::Null)
            }
        };
        if last {
            *next = value;
            return;
        }
        at = next;
    }
    *at = value;
}

/// A random file: the valid one with random fields, as YAML text, maybe cut or spliced.
fn document() -> impl Strategy<Value = String> {
    (
        prop::collection::vec((prop::sample::select(FIELDS), value()), 0..5),
        prop::option::of((any::<prop::sample::Index>(), "\\PC{0,6}")),
    )
        .prop_map(|(changes, splice)| {
            let mut document = base();
            for (pointer, value) in changes {
                set(&mut document, pointer, value);
            }
            let mut text = serde_yaml_ng::to_string(&document).unwrap_or_default();
            if let Some((at, insert)) = splice {
                let mut at = at.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text.insert_str(at, &insert);
            }
            text
        })
}

fn environment(secret: &'static str) -> impl Fn(&str) -> Option<String> {
    move |name| match name {
        "SECRET" => Some(secret.to_string()),
        "NUMBER" => Some("7".to_string()),
        _ => None,
    }
}

/// Loads `text`; every way a configuration is shown must hold no text of `${SECRET}`.
fn load_and_show(text: &str, secret: &'static str) -> Option<super::Config> {
    match load_str(text, &environment(secret)) {
        Ok(config) => {
            // What is shown to people: the shown copy (the admin API's config), sections,
            // URLs and maps. (`Debug` of the typed structs prints plain string fields, such
            // as a topic name, as resolved: a known gap, kept out of this property.)
            let mut shown = format!("{}", config.shown.0);
            for connector in &config.connectors {
                let section = config.redacted_section(&connector.name);
                shown.push_str(&format!("{section:?}"));
                let _ = config.connector_section(&connector.name);
                shown.push_str(&connector.sink.url.to_string());
                for (key, value) in connector
                    .transforms
                    .iter()
                    .flat_map(|t| t.config.redacted())
                    .chain(config.kafka.properties.redacted())
                {
                    shown.push_str(&format!("{key}={value}\n"));
                }
            }
            assert!(
                !shown.contains(secret),
                "{secret} shows:\n{text}\n---\n{shown}"
            );
            Some(config)
        }
        Err(error) => {
            let shown = format!("{error}\n{error:?}\n{:?}", error.lines("f.yaml"));
            // A numeric or boolean field says what text it could not read (its text is a
            // number or a flag, or a mistake to be shown).
            let shown = shown
                .replace(&format!("is \"{secret}\", not"), "is (its text), not")
                .replace(&format!("is \\\"{secret}\\\", not"), "is (its text), not");
            assert!(
                !shown.contains(secret),
                "{secret} shows in the error:\n{text}\n---\n{shown}"
            );
            if let ConfigError::Invalid { problems } = &error {
                assert!(!problems.is_empty(), "an invalid file names no problem");
            }
            None
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_files_load_or_fail_without_panic_or_leak(old in document(), new in document()) {
        let before = load_and_show(&old, SECRET_TEXT);
        let rotated = load_and_show(&old, "zqrotatedsecretzq");
        let after = load_and_show(&new, SECRET_TEXT);
        // What a reload compares: each connector's section as checked, and `kafka:`.
        if let (Some(before), Some(rotated)) = (&before, &rotated) {
            let uses_secret = old.contains("${SECRET");
            for connector in &before.connectors {
                let same = before.connector_section(&connector.name)
                    == rotated.connector_section(&connector.name)
                    && before.document.0.get("kafka") == rotated.document.0.get("kafka");
                if !uses_secret {
                    prop_assert!(same, "a file without ${{SECRET}} changed with it");
                }
                prop_assert_eq!(
                    before.redacted_section(&connector.name),
                    rotated.redacted_section(&connector.name)
                );
            }
        }
        if let (Some(before), Some(after)) = (&before, &after) {
            for connector in &after.connectors {
                let _ = before.connector_section(&connector.name) == after.connector_section(&connector.name);
            }
        }
    }
}
