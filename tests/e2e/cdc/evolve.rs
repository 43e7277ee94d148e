//! `sink.evolve: [widen, relax]` on a table sluice did not create, fed Connect JSON rows
//! whose schema changes as a source's does: an integer column widened twice, a `NOT NULL`
//! column made nullable when its field turns optional and then disappears, a change of
//! kind refused; every statement recorded in `sluice_schema_changes` with the record that
//! needed it. And two processes that meet the same widening at once make it once.
//!
//! SQLite's SQL differs: its columns take any width (nothing to widen) and it cannot relax
//! in place (`validate` refuses `relax` there), so a NULL into its `NOT NULL` column fails
//! that record alone.

use serde_json::{Value, json};

use crate::formats::{FormatRun, hex, read_rows, run_script};
use crate::harness::admin::{admin_section, sample, scrape};
use crate::harness::{Backend, free_port, unique};

/// A row field of a Connect schema: (name, type, optional).
type RowField = (&'static str, &'static str, bool);

const SMALL: &[RowField] = &[
    ("id", "int64", false),
    ("qty", "int16", false),
    ("note", "string", false),
];
const INT: &[RowField] = &[
    ("id", "int64", false),
    ("qty", "int32", false),
    ("note", "string", false),
];
const BIG: &[RowField] = &[
    ("id", "int64", false),
    ("qty", "int64", false),
    ("note", "string", false),
];
/// `note` turns optional.
const NOTE_OPTIONAL: &[RowField] = &[
    ("id", "int64", false),
    ("qty", "int64", false),
    ("note", "string", true),
];
/// `note` turns optional, `qty` as small as it began.
const SMALL_NOTE_OPTIONAL: &[RowField] = &[
    ("id", "int64", false),
    ("qty", "int16", false),
    ("note", "string", true),
];
/// `qty` changes kind.
const QTY_AS_TEXT: &[RowField] = &[
    ("id", "int64", false),
    ("qty", "string", false),
    ("note", "string", true),
];
/// `note` is gone.
const NO_NOTE: &[RowField] = &[("id", "int64", false), ("qty", "int64", false)];

/// One record of `produce.py`'s raw serializer: a Connect JSON key and row.
fn record(fields: &[RowField], row: Value) -> Value {
    let key = json!({
        "schema": {"type": "struct", "name": "Key", "optional": false,
                   "fields": [{"type": "int64", "optional": false, "field": "id"}]},
        "payload": {"id": row["id"]}
    });
    let value = json!({
        "schema": {
            "type": "struct", "optional": false, "name": "Row",
            "fields": fields
                .iter()
                .map(|(name, kind, optional)| json!({"type": kind, "optional": optional, "field": name}))
                .collect::<Vec<_>>()
        },
        "payload": row
    });
    json!({"raw_key_hex": hex(&key), "raw_value_hex": hex(&value)})
}

/// The table as an operator made it, before sluice: `qty` a `SMALLINT`, `note` required.
fn create_table(table: &str) -> String {
    format!(
        "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, qty SMALLINT NOT NULL, note TEXT NOT NULL)"
    )
}

/// (column, type, nullable) of `qty` and `note`, as the catalog says.
async fn columns(run: &FormatRun) -> Vec<Vec<Option<String>>> {
    let from = match run.db.kind {
        Backend::Sqlite => format!(
            "(SELECT name AS column_name, lower(type) AS data_type, \
             CASE WHEN \"notnull\" = 0 THEN 'YES' ELSE 'NO' END AS is_nullable \
             FROM pragma_table_info('{}') WHERE name IN ('qty', 'note')) AS c",
            run.table
        ),
        Backend::MariaDb => format!(
            "information_schema.columns WHERE table_schema = DATABASE() AND table_name = '{}' \
             AND column_name IN ('qty', 'note')",
            run.table
        ),
        Backend::Postgres => format!(
            "information_schema.columns WHERE table_name = '{}' AND column_name IN ('qty', 'note')",
            run.table
        ),
    };
    read_rows(
        &run.db,
        &from,
        &[
            ("column_name", "text"),
            ("data_type", "text"),
            ("is_nullable", "text"),
        ],
    )
    .await
}

/// `sluice_schema_changes` of `table`: (step, source offset, statement), in order.
async fn changes(run: &FormatRun, table: &str) -> Vec<(String, Option<i64>, String)> {
    let mut rows = read_rows(
        &run.db,
        &format!("sluice_schema_changes WHERE table_name = '{table}'"),
        &[
            ("id", "bigint"),
            ("step", "text"),
            ("source_offset", "bigint"),
            ("statement", "text"),
        ],
    )
    .await;
    // In the order they were made: by id as a number (the rows come ordered as text).
    rows.sort_by_key(|r| r[0].as_deref().and_then(|id| id.parse::<i64>().ok()));
    rows.into_iter()
        .map(|r| {
            (
                r[1].clone().unwrap_or_default(),
                r[2].as_deref().and_then(|o| o.parse().ok()),
                r[3].clone().unwrap_or_default(),
            )
        })
        .collect()
}

async fn evolve_widens_and_relaxes_a_table_sluice_did_not_create(kind: Backend) {
    let run = FormatRun::new(kind).await;
    super::execute(&run.db, &create_table(&run.table)).await;
    let evolve = match kind {
        Backend::Sqlite => "      evolve: [widen]",
        _ => "      evolve: [widen, relax]",
    };
    let config = run.config_with(
        "connect_json",
        evolve,
        "record_key",
        "    key_format: connect_json",
    );
    let port = free_port();
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{}\n{text}", admin_section(port))).expect("config");
    // The first record alone: the table is read and cached before the changes arrive,
    // so that each change replaces the cached table the writes fit their rows to.
    run.produce(
        json!({"serializer": "raw"}),
        vec![record(SMALL, json!({"id": 1, "qty": 5, "note": "a"}))],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(1, 0, 120, &sluice).await;
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            record(INT, json!({"id": 2, "qty": 70_000, "note": "b"})),
            record(BIG, json!({"id": 3, "qty": 5_000_000_000i64, "note": "c"})),
            record(NOTE_OPTIONAL, json!({"id": 4, "qty": 1, "note": null})),
            record(QTY_AS_TEXT, json!({"id": 5, "qty": "x", "note": "e"})),
            record(NO_NOTE, json!({"id": 6, "qty": 2})),
        ],
    )
    .await;
    let text = |id: i64, qty: &str, note: Option<&str>| {
        vec![
            Some(id.to_string()),
            Some(qty.to_string()),
            note.map(str::to_string),
        ]
    };
    let read = [("id", "bigint"), ("qty", "bigint"), ("note", "text")];
    if kind == Backend::Sqlite {
        // Any width lands as it is, and so does text: a `SMALLINT` column is not a type
        // sluice creates on SQLite, so the database converts what it is given (its
        // flexible typing keeps `x`). The NULLs into `note` are the database's refusals.
        run.wait_for(4, 2, 120, &sluice).await;
        assert_eq!(
            run.rows(&read).await,
            vec![
                text(1, "5", Some("a")),
                text(2, "70000", Some("b")),
                text(3, "5000000000", Some("c")),
                text(5, "x", Some("e")),
            ]
        );
        let letters = run.letters().await;
        let classes: Vec<(i64, &str)> = letters.iter().map(|l| (l.0, l.2.as_str())).collect();
        assert_eq!(
            classes,
            vec![(3, "database_refused"), (5, "database_refused")],
            "{letters:?}"
        );
        assert!(changes(&run, &run.table).await.is_empty());
    } else {
        run.wait_for(5, 1, 120, &sluice).await;
        assert_eq!(
            run.rows(&read).await,
            vec![
                text(1, "5", Some("a")),
                text(2, "70000", Some("b")),
                text(3, "5000000000", Some("c")),
                text(4, "1", None),
                text(6, "2", None),
            ]
        );
        let letters = run.letters().await;
        assert_eq!(letters.len(), 1, "{letters:?}");
        assert_eq!(
            (letters[0].0, letters[0].2.as_str()),
            (4, "schema_incompatible")
        );
        assert!(
            letters[0].3.contains("qty") && letters[0].3.contains("type change"),
            "{letters:?}"
        );
        let made = changes(&run, &run.table).await;
        let steps: Vec<(&str, Option<i64>)> =
            made.iter().map(|(s, o, _)| (s.as_str(), *o)).collect();
        assert_eq!(
            steps,
            vec![("widen", Some(1)), ("widen", Some(2)), ("relax", Some(3))],
            "{made:?}"
        );
        assert!(
            made[1].2.to_ascii_lowercase().contains("bigint"),
            "{made:?}"
        );
        let catalog = columns(&run).await;
        let of = |name: &str| {
            catalog
                .iter()
                .find(|c| c[0].as_deref() == Some(name))
                .cloned()
                .unwrap_or_else(|| panic!("no column {name}: {catalog:?}"))
        };
        assert_eq!(of("qty")[1].as_deref(), Some("bigint"), "{catalog:?}");
        assert_eq!(of("qty")[2].as_deref(), Some("NO"), "{catalog:?}");
        assert_eq!(of("note")[2].as_deref(), Some("YES"), "{catalog:?}");
        let metrics = scrape(port).await;
        for (step, n) in [("widen", 2.0), ("relax", 1.0)] {
            let name = format!(
                "sluice_schema_changes_total{{connector=\"{}\",step=\"{step}\"}}",
                run.connector
            );
            assert_eq!(sample(&metrics, &name), Some(n), "{metrics}");
        }
    }
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(evolve_widens_and_relaxes_a_table_sluice_did_not_create);

/// Two processes, each with its own connector and topic into one table, meet the same
/// widening in the same moment: each takes the table's lock and reads the table again
/// under it, so the column is widened once, recorded once, and every row lands.
async fn two_processes_racing_widen_once(kind: Backend) {
    let run = FormatRun::new(kind).await;
    super::execute(&run.db, &create_table(&run.table)).await;
    let second_topic = unique("formats");
    run.broker.create_topic(&second_topic, 1).await;
    let first = run.config_with(
        "connect_json",
        "      evolve: [widen]",
        "record_key",
        "    key_format: connect_json",
    );
    let text = std::fs::read_to_string(&first).expect("config");
    let second = first.with_file_name("second.yaml");
    std::fs::write(
        &second,
        text.replace(&format!("[{}]", run.topic), &format!("[{second_topic}]"))
            .replace(
                &format!("name: {}", run.connector),
                &format!("name: {}_2", run.connector),
            ),
    )
    .expect("write the second config");
    let records = |base: i64| {
        let mut records: Vec<Value> = (0..50)
            .map(|i| record(SMALL, json!({"id": base + i, "qty": i, "note": "s"})))
            .collect();
        records.extend(
            (50..100).map(|i| record(INT, json!({"id": base + i, "qty": 70_000 + i, "note": "i"}))),
        );
        records
    };
    run.produce(json!({"serializer": "raw"}), records(0)).await;
    let mut spec = json!({"serializer": "raw", "brokers": run.broker.bootstrap, "topic": second_topic,
                          "registry": run.registry.url()});
    spec["records"] = Value::Array(records(1_000));
    let produced = run_script("tests/e2e/formats/produce.py", spec).await;
    assert!(produced.status.success(), "{produced:?}");
    let a = run.start(&first);
    let b = run.start(&second);
    run.wait_for(200, 0, 120, &a).await;
    let made = changes(&run, &run.table).await;
    let widened: Vec<&(String, Option<i64>, String)> =
        made.iter().filter(|(step, _, _)| step == "widen").collect();
    match kind {
        Backend::Sqlite => assert!(made.is_empty(), "{made:?}"),
        _ => assert_eq!(widened.len(), 1, "widened once: {made:?}"),
    }
    for process in [a, b] {
        let status = process.terminate();
        assert!(status.success(), "sluice exited with {status}");
    }
}
for_each_database!(two_processes_racing_widen_once: postgres = Postgres, mariadb = MariaDb);

/// A change the database refuses fails the records of the schema that needed it, not the
/// task: on PostgreSQL a view over the column refuses its widening; on MariaDB a column
/// with a default cannot be restated whole, so `relax` leaves it and its records go on, a
/// NULL into it failing alone.
async fn a_change_the_database_refuses_fails_only_its_records(kind: Backend) {
    let run = FormatRun::new(kind).await;
    super::execute(&run.db, &create_table(&run.table)).await;
    let blocker = match kind {
        Backend::Postgres => format!("CREATE VIEW {0}_v AS SELECT qty FROM {0}", run.table),
        _ => format!(
            "ALTER TABLE {} MODIFY note TEXT NOT NULL DEFAULT 'n'",
            run.table
        ),
    };
    super::execute(&run.db, &blocker).await;
    let config = run.config_with(
        "connect_json",
        "      evolve: [widen, relax]",
        "record_key",
        "    key_format: connect_json",
    );
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            record(SMALL, json!({"id": 1, "qty": 5, "note": "a"})),
            record(INT, json!({"id": 2, "qty": 70_000, "note": "b"})),
            record(SMALL_NOTE_OPTIONAL, json!({"id": 3, "qty": 3, "note": "c"})),
            record(
                SMALL_NOTE_OPTIONAL,
                json!({"id": 4, "qty": 4, "note": null}),
            ),
            record(SMALL, json!({"id": 5, "qty": 6, "note": "e"})),
        ],
    )
    .await;
    let sluice = run.start(&config);
    // PostgreSQL: the widening is refused (offset 1), and relax made `note` nullable, so the
    // NULL lands. MariaDB: the widening lands, `note` cannot be relaxed (its default would
    // be lost), so its records go on and only the NULL (offset 3) fails.
    run.wait_for(4, 1, 120, &sluice).await;
    let letters = run.letters().await;
    match kind {
        Backend::Postgres => {
            assert_eq!(
                (letters[0].0, letters[0].2.as_str()),
                (1, "schema_incompatible"),
                "{letters:?}"
            );
            assert!(letters[0].3.contains("refused"), "{letters:?}");
            // The same widening in a later batch is refused again without asking the
            // database: one attempt in the log.
            run.produce(
                json!({"serializer": "raw"}),
                vec![record(INT, json!({"id": 6, "qty": 80_000, "note": "f"}))],
            )
            .await;
            run.wait_for(4, 2, 120, &sluice).await;
            let letters = run.letters().await;
            assert!(letters[1].3.contains("refused"), "{letters:?}");
            let log = std::fs::read_to_string(&sluice.log).expect("sluice log");
            let attempts = log
                .lines()
                .filter(|l| {
                    l.contains("changing a table for its records' schema") && l.contains("widen")
                })
                .count();
            assert_eq!(attempts, 1, "{log}");
        }
        _ => assert_eq!(
            (letters[0].0, letters[0].2.as_str()),
            (3, "database_refused"),
            "{letters:?}"
        ),
    }
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(a_change_the_database_refuses_fails_only_its_records: postgres = Postgres, mariadb = MariaDb);

/// MariaDB's catalog can be read in the middle of another process's change of a table: its
/// DDL commits by itself, and `information_schema` has shown a table being rebuilt for a
/// widening without its primary key (a CI run: "the table's primary key is (): a key
/// change"). A table read in such a moment does not fail its records: before refusing
/// them, sluice reads it again under the lock the other process changes it under. The test
/// plays that other process: it holds the table's evolve lock while the table has no
/// primary key yet, and adds the key before it lets go. PostgreSQL reads its catalog in
/// one snapshot, so only MariaDB's SQL meets this.
async fn a_table_read_while_another_process_changes_it_is_read_again_under_its_lock(kind: Backend) {
    use sqlx::Connection;
    let run = FormatRun::new(kind).await;
    super::execute(
        &run.db,
        &format!(
            "CREATE TABLE {} (id BIGINT NOT NULL, qty SMALLINT NOT NULL, note TEXT NOT NULL)",
            run.table
        ),
    )
    .await;
    let mut other = sqlx::MySqlConnection::connect(&run.db.url)
        .await
        .expect("connect");
    let lock = format!("sluice_evolve:{}", run.table);
    let held: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT CAST(GET_LOCK('{lock}', 5) AS SIGNED)"
    )))
    .fetch_one(&mut other)
    .await
    .expect("take the evolve lock");
    assert_eq!(held, 1, "the test holds the table's evolve lock");
    let config = run.config_with(
        "connect_json",
        "      evolve: [widen]",
        "record_key",
        "    key_format: connect_json",
    );
    run.produce(
        json!({"serializer": "raw"}),
        (0..20)
            .map(|i| record(SMALL, json!({"id": i, "qty": i, "note": "s"})))
            .collect(),
    )
    .await;
    let sluice = run.start(&config);
    // sluice read no primary key, and waits for the lock to read the table again.
    let waiting = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE ID <> CONNECTION_ID() AND INFO LIKE '%GET_LOCK(''{lock}''%'"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(waiting.clone()))
            .fetch_one(&mut other)
            .await
            .expect("read the process list");
        if n > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sluice did not wait for the table's lock before refusing its records: {}\n{}",
            sluice.log.display(),
            std::fs::read_to_string(&sluice.log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE {} ADD PRIMARY KEY (id)",
        run.table
    )))
    .execute(&mut other)
    .await
    .expect("add the key");
    sqlx::query(sqlx::AssertSqlSafe(format!("DO RELEASE_LOCK('{lock}')")))
        .execute(&mut other)
        .await
        .expect("let the lock go");
    run.wait_for(20, 0, 60, &sluice).await;
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(
    a_table_read_while_another_process_changes_it_is_read_again_under_its_lock: mariadb = MariaDb
);
