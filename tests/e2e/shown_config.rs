//! A value that comes from `${VAR}` is shown as the file wrote it, never as its text, by the
//! admin API of a running process; and it reaches the plugin as the text it is, typed by
//! the field it fills (a plugin's config is strings: `0x1F` stays `0x1F`).

use std::time::Duration;

use hyper::StatusCode;
use serde_json::Value;
use sluice::admin::client::AdminClient;

use crate::harness::{self, Backend, Pipeline, Scenario, free_port};

const TOKEN: &str = "shown-token-0123";
/// The mask plugin's salt, from the environment: no answer may show it.
const SALT: &str = "hunter2-salt-from-the-environment";
/// What the mask plugin writes in place of each word, from the environment.
const REPLACEMENT: &str = "0x1F";

async fn get(port: u16, path: &str) -> Value {
    let client =
        AdminClient::new(&format!("http://127.0.0.1:{port}"), Some(TOKEN.into())).expect("client");
    let answer = client.get(path).await.expect("request");
    assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
    assert!(
        !answer.body.contains("hunter2"),
        "{path} shows the salt: {}",
        answer.body
    );
    answer.json()
}

/// Rows whose word is `word`.
async fn rows_with_word(run: &Pipeline, word: &str) -> i64 {
    let config = run.scenario.config(&run.broker.bootstrap, &run.db);
    let sink = sluice::sink::Sink::connect(&config.connectors[0])
        .await
        .expect("connect");
    let big = if sink.dialect() == sluice::sink::Dialect::MySql {
        "SIGNED"
    } else {
        "BIGINT"
    };
    let sql = format!(
        "SELECT CAST(COUNT(*) AS {big}) FROM {} WHERE {} = '{word}'",
        sink.dialect().quote_table(sink.table_name()),
        sink.dialect().quote_one("word"),
    );
    let count = sink.query_integers(sql, 1).await.expect("count")[0].unwrap_or(0);
    sink.close().await;
    count
}

async fn a_value_from_the_environment_shows_as_written(db: Backend) {
    let port = free_port();
    let mut scenario = Scenario::new(1);
    scenario.extra_kafka = format!("admin:\n  listen: \"127.0.0.1:{port}\"\n  token: {TOKEN}");
    scenario.transforms = format!(
        "    transforms:\n      - name: mask\n        plugin: {}\n        config: {{ fields: word, salt: \"${{MASK_SALT:-none}}\", replacement: \"${{MASK_REPLACEMENT:-none}}\" }}\n",
        sluice_transform::example_plugin_path("mask").display()
    );
    let name = scenario.connector.clone();
    let run = Pipeline::new(db, scenario, 2).await;
    run.produce(0..200).await;
    let sluice = harness::SluiceProcess::start_with_env(
        &run.config,
        &[("MASK_SALT", SALT), ("MASK_REPLACEMENT", REPLACEMENT)],
    );
    harness::assert_exactly(run.wait_for_rows(200, 120).await, 200);

    for path in [
        format!("/connectors/{name}/config"),
        format!("/connectors/{name}"),
    ] {
        let body = get(port, &path).await;
        let config = if path.ends_with("/config") {
            &body
        } else {
            &body["config"]
        };
        let plugin = &config["transforms"][0]["config"];
        assert_eq!(plugin["salt"], "${MASK_SALT:-none}", "{path}: {body}");
        assert_eq!(
            plugin["replacement"], "${MASK_REPLACEMENT:-none}",
            "{path}: {body}"
        );
        assert_eq!(plugin["fields"], "word", "{path}: {body}");
    }
    let listing = get(port, "/connectors?expand=info").await;
    assert_eq!(
        listing[&name]["info"]["config"]["transforms"][0]["config"]["salt"],
        "${MASK_SALT:-none}"
    );

    // The plugin got the text as the environment holds it, not a number made of it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rows_with_word(&run, REPLACEMENT).await, 200);
    assert!(sluice.terminate().success());
}
for_each_database!(a_value_from_the_environment_shows_as_written: postgres = Postgres);

/// A plugin that refuses its config may quote it: `sluice validate` shows a value from the
/// environment there as its reference too.
#[test]
fn a_plugin_quoting_a_value_from_the_environment_shows_its_reference() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("connectors.yaml");
    std::fs::write(
        &path,
        format!(
            r#"kafka: {{ brokers: localhost:9092 }}
connectors:
  - name: masked
    topics: [words]
    transforms:
      - name: mask
        plugin: {}
        config: {{ fields: word, mode: "${{MASK_MODE}}" }}
    sink:
      url: sqlite://x.db
      table: words
      columns: {{ uid: {{ from: /uid, type: bigint }} }}
"#,
            sluice_transform::example_plugin_path("mask").display()
        ),
    )
    .expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["validate", "--config"])
        .arg(&path)
        .env("MASK_MODE", "hunter2-mode-from-the-environment")
        .output()
        .expect("run sluice validate");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        !stdout.contains("hunter2") && !stderr.contains("hunter2"),
        "{stdout}{stderr}"
    );
    assert!(
        stderr.contains("connectors[0].transforms[0].plugin") && stderr.contains("${MASK_MODE}"),
        "{stderr}"
    );
}
