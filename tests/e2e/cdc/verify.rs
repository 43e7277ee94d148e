//! `sluice verify` and `POST /connectors/{name}/verify` on a Debezium stream (the script
//! of `cdc::events`: creates, updates, a delete and its tombstone, late changes the
//! version guard refuses, a key created again, records that fail): the replica is proven equal while sluice runs, then
//! one row changed by hand, one deleted and one added behind sluice's back are each found
//! by key, and the scratch table is gone afterwards.
//!
//! On all three databases: the scratch copy, the snapshot and the comparison are each
//! database's own SQL. The broker keeps its log in SQLite: verify asks it where each
//! partition's log ends, which Tansu 0.6.0's memory storage answers wrong (a known fault
//! of the test broker; Kafka answers it right).

use hyper::Method;
use serde_json::{Value, json};

use super::events::COLUMNS;
use crate::formats::{FormatRun, read_rows};
use crate::harness::admin::{admin_section, send};
use crate::harness::{Backend, free_port};

fn verify(config: &std::path::Path, connector: &str, format: &str) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["verify", "-c"])
        .arg(config)
        .args(["--connector", connector, "--format", format])
        .output()
        .expect("run sluice verify");
    (
        output.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// The ids of a report's keys of one kind.
fn ids(report: &Value, kind: &str) -> Vec<String> {
    report[kind]
        .as_array()
        .unwrap_or_else(|| panic!("no {kind}: {report}"))
        .iter()
        .map(|k| k["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// How far the table's own sequence of `rid` has gone (PostgreSQL's `serial`, MariaDB's
/// `AUTO_INCREMENT`; SQLite's `INTEGER PRIMARY KEY` takes the largest rowid plus one).
async fn sequence(run: &FormatRun) -> Vec<Vec<Option<String>>> {
    match run.db.kind {
        Backend::Postgres => {
            read_rows(
                &run.db,
                &format!("{}_rid_seq", run.table),
                &[("last_value", "bigint")],
            )
            .await
        }
        Backend::MariaDb => read_rows(
            &run.db,
            &format!(
                "information_schema.tables WHERE table_schema = DATABASE() AND table_name = '{}'",
                run.table
            ),
            &[("auto_increment", "bigint")],
        )
        .await,
        Backend::Sqlite => Vec::new(),
    }
}

async fn verify_finds_what_changed_behind_sluices_back(kind: Backend) {
    // Verify reads the log's end from the broker: Tansu's memory storage answers it wrong.
    let run = FormatRun::persistent(kind).await;
    let t = run.topic.clone();
    let config = run.config(
        "connect_json",
        COLUMNS,
        "[id]",
        "    key_format: connect_json\n    envelope: debezium",
    );
    // The table as an operator makes it: a surrogate key from a sequence, the record's key
    // unique beside it, a column sluice does not write with a default.
    let table = &run.table;
    let ddl = match kind {
        Backend::Postgres => vec![format!(
            "CREATE TABLE {table} (rid BIGSERIAL PRIMARY KEY, id BIGINT NOT NULL UNIQUE, name TEXT, \
             updated_at TIMESTAMP, _sluice_version TEXT, created_at TIMESTAMP NOT NULL DEFAULT now())"
        )],
        Backend::MariaDb => vec![format!(
            "CREATE TABLE {table} (rid BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT NOT NULL UNIQUE, \
             `name` TEXT, updated_at DATETIME(6), _sluice_version VARCHAR(100), \
             created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )],
        Backend::Sqlite => vec![
            format!(
                "CREATE TABLE {table} (rid INTEGER PRIMARY KEY, id INTEGER NOT NULL, name TEXT, \
                 updated_at TEXT, _sluice_version TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            ),
            format!("CREATE UNIQUE INDEX {table}_by_id ON {table} (id)"),
        ],
    };
    for sql in &ddl {
        super::execute(&run.db, sql).await;
    }
    let port = free_port();
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{}\n{text}", admin_section(port))).expect("config");
    let records = super::events::script(&t);
    let produced = records.len() as i64;
    run.produce(json!({"serializer": "raw"}), records).await;
    let sluice = run.start(&config);
    run.wait_for(3, 2, 120, &sluice).await;
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, produced, 60).await;

    // Equal, while sluice runs.
    let drawn = sequence(&run).await;
    let (code, out) = verify(&config, &run.connector, "json");
    assert_eq!(code, Some(0), "{out}");
    let report: Value = serde_json::from_str(out.lines().next().unwrap_or("")).expect("json");
    assert_eq!(report["equal"], true, "{report}");
    assert_eq!(report["whole_log"], true, "{report}");
    assert_eq!(report["records"], produced, "{report}");
    assert_eq!(report["failed_records"], 2, "{report}");
    assert_eq!(
        (
            report["table_rows"].as_i64(),
            report["folded_rows"].as_i64()
        ),
        (Some(3), Some(3)),
        "{report}"
    );

    // The fold's rows drew no value from the table's own sequence.
    assert_eq!(
        sequence(&run).await,
        drawn,
        "verify moved the table's sequence"
    );

    // Behind sluice's back: 1 changed (in case only: MariaDB's default collation takes
    // `ANNA` for `anna`), 3 deleted, 99 added.
    let name = match kind {
        Backend::MariaDb => "`name`",
        _ => "\"name\"",
    };
    super::execute(
        &run.db,
        &format!("UPDATE {table} SET {name} = 'ANNA' WHERE id = 1"),
    )
    .await;
    super::execute(&run.db, &format!("DELETE FROM {table} WHERE id = 3")).await;
    super::execute(
        &run.db,
        &format!("INSERT INTO {table} (id, {name}) VALUES (99, 'intruder')"),
    )
    .await;

    let (code, out) = verify(&config, &run.connector, "json");
    assert_eq!(code, Some(1), "{out}");
    let report: Value = serde_json::from_str(out.lines().next().unwrap_or("")).expect("json");
    assert_eq!(report["equal"], false, "{report}");
    assert_eq!(ids(&report, "differing"), vec!["1"], "{report}");
    assert_eq!(ids(&report, "missing"), vec!["3"], "{report}");
    assert_eq!(ids(&report, "extra"), vec!["99"], "{report}");

    // The text names each key; the admin API answers the same.
    let (code, out) = verify(&config, &run.connector, "text");
    assert_eq!(code, Some(1), "{out}");
    for line in [
        "missing: 1 row(s)",
        "  id=3",
        "extra: 1 row(s)",
        "  id=99",
        "differing: 1 row(s)",
        "  id=1",
        "DIFFERENT",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    let path = format!("/connectors/{}/verify", run.connector);
    let (status, answer) = send(port, Method::POST, &path, None).await;
    assert_eq!(status.as_u16(), 200, "{answer}");
    assert_eq!(ids(&answer, "differing"), vec!["1"], "{answer}");
    assert_eq!(ids(&answer, "extra"), vec!["99"], "{answer}");

    // No scratch table, nor its tombstones, is left.
    let left = match kind {
        Backend::Sqlite => read_rows(
            &run.db,
            "sqlite_master WHERE type = 'table' AND name LIKE 'sluice_verify_%'",
            &[("name", "text")],
        )
        .await,
        Backend::MariaDb => read_rows(
            &run.db,
            "information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'sluice_verify_%'",
            &[("table_name", "text")],
        )
        .await,
        Backend::Postgres => read_rows(
            &run.db,
            "information_schema.tables WHERE table_name LIKE 'sluice_verify_%'",
            &[("table_name", "text")],
        )
        .await,
    };
    assert!(left.is_empty(), "{left:?}");
    let kept = read_rows(
        &run.db,
        "sluice_tombstones WHERE table_name LIKE 'sluice_verify_%'",
        &[("table_name", "text")],
    )
    .await;
    assert!(kept.is_empty(), "{kept:?}");
    let status = sluice.terminate();
    assert!(status.success(), "{status:?}");
}

for_each_database!(verify_finds_what_changed_behind_sluices_back);

/// With derived columns the compared columns are the table's own, as its catalog lists
/// them after `add_columns` grew it mid-stream: the fold of the early records (without
/// the later fields) into the grown copy gives the same rows. The SQL is the same as
/// above; one database.
async fn verify_compares_a_derived_table_by_its_catalog(kind: Backend) {
    let run = FormatRun::persistent(kind).await;
    let config = run.config_with(
        "connect_json",
        "      evolve: add_columns",
        "record_key",
        "    key_format: connect_json\n    envelope: debezium",
    );
    let history = super::derived::history();
    let produced = history.len() as i64;
    run.produce(json!({"serializer": "raw"}), history).await;
    let sluice = run.start(&config);
    run.wait_for(3, 2, 120, &sluice).await;
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, produced, 60).await;
    let (code, out) = verify(&config, &run.connector, "json");
    assert_eq!(code, Some(0), "{out}");
    let report: Value = serde_json::from_str(out.lines().next().unwrap_or("")).expect("json");
    assert_eq!(report["key"], json!(["id"]), "{report}");
    let columns: Vec<&str> = report["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        columns.contains(&"email") && columns.contains(&"_sluice_version"),
        "{report}"
    );
    assert_eq!(report["failed_records"], 2, "{report}");

    super::execute(
        &run.db,
        &format!("UPDATE {} SET email = 'z@x' WHERE id = 3", run.table),
    )
    .await;
    let (code, out) = verify(&config, &run.connector, "json");
    assert_eq!(code, Some(1), "{out}");
    let report: Value = serde_json::from_str(out.lines().next().unwrap_or("")).expect("json");
    assert_eq!(ids(&report, "differing"), vec!["3"], "{report}");
    assert!(
        ids(&report, "missing").is_empty() && ids(&report, "extra").is_empty(),
        "{report}"
    );
    let status = sluice.terminate();
    assert!(status.success(), "{status:?}");
}

for_each_database!(verify_compares_a_derived_table_by_its_catalog: postgres = Postgres);
