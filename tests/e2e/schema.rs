//! sluice's own tables across versions: a database left by an earlier sluice (schema
//! version 1, before names compared exactly) is migrated at start; one at a newer version
//! is refused. Each test gets a database of its own, dropped at the end.

use std::collections::HashMap;

use sluice::config::{self, ConnectorConfig};
use sluice::sink::schema::SCHEMA_VERSION;
use sluice::sink::{OffsetAdvance, Sink, SinkError, WriteBatch};
use sqlx::Connection;

use crate::harness::{Backend, TestDb, unique};

/// A database of its own for one test: a new database on the PostgreSQL or MariaDB
/// server, a new file for SQLite.
struct FreshDb {
    kind: Backend,
    url: String,
    server: String,
    name: String,
    _file: Option<TestDb>,
}

impl FreshDb {
    async fn new(kind: Backend) -> FreshDb {
        let shared = TestDb::new(kind);
        let name = unique("sluice_schema");
        match kind {
            Backend::Sqlite => FreshDb {
                kind,
                url: shared.url.clone(),
                server: String::new(),
                name,
                _file: Some(shared),
            },
            _ => {
                let (base, _) = shared.url.rsplit_once('/').expect("a database in the URL");
                let server = shared.url.clone();
                run_on(kind, &server, &format!("CREATE DATABASE {name}")).await;
                FreshDb {
                    kind,
                    url: format!("{base}/{name}"),
                    server,
                    name,
                    _file: None,
                }
            }
        }
    }

    async fn run(&self, sql: &str) {
        run_on(self.kind, &self.url, sql).await
    }

    async fn drop(self) {
        if self.kind != Backend::Sqlite {
            run_on(
                self.kind,
                &self.server,
                &format!("DROP DATABASE {}", self.name),
            )
            .await;
        }
    }
}

async fn run_on(kind: Backend, url: &str, sql: &str) {
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    let result = match kind {
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await.expect("connect");
            sqlx::raw_sql(sql).execute(&mut c).await.map(|_| ())
        }
        Backend::MariaDb => {
            let mut c = sqlx::MySqlConnection::connect(url).await.expect("connect");
            sqlx::raw_sql(sql).execute(&mut c).await.map(|_| ())
        }
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&format!("{url}?mode=rwc"))
                .await
                .expect("connect");
            sqlx::raw_sql(sql).execute(&mut c).await.map(|_| ())
        }
    };
    result.unwrap_or_else(|e| panic!("{e}"));
}

/// A connector on `url` reading two topics whose names differ only in case, with its
/// dead letters in a table.
fn connector(url: &str, topics: &[&str]) -> ConnectorConfig {
    let text = format!(
        "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: {}\n    topics: [{}]\n    \
         errors: {{ policy: dlq, dlq: {{ table: dead_letters }} }}\n    \
         sink: {{ url: \"{url}\", table: words, create_table: true, columns: {{ uid: {{ from: /uid, type: bigint }} }} }}\n",
        unique("conn"),
        topics.join(", ")
    );
    let config = config::load_str(&text, &|_| None).expect("valid config");
    config.connectors.into_iter().next().expect("one connector")
}

/// The offsets table and the dead-letter table as sluice created them before schema
/// versions (MariaDB's text compared case-insensitively then).
fn version_one_tables(kind: Backend) -> &'static str {
    match kind {
        Backend::Postgres => {
            "CREATE TABLE sluice_offsets (connector TEXT NOT NULL, topic TEXT NOT NULL, \
             \"partition\" INTEGER NOT NULL, next_offset BIGINT NOT NULL, \
             updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (connector, topic, \"partition\"))"
        }
        Backend::MariaDb => {
            "CREATE TABLE sluice_offsets (connector VARCHAR(255) NOT NULL, topic VARCHAR(255) NOT NULL, \
             `partition` INT NOT NULL, next_offset BIGINT NOT NULL, \
             updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (connector, topic, `partition`)) \
             CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci; \
             CREATE TABLE dead_letters (connector VARCHAR(255) NOT NULL, source_topic VARCHAR(255) NOT NULL, \
             source_partition INT NOT NULL, source_offset BIGINT NOT NULL, record_key LONGBLOB, record_value LONGBLOB, \
             record_headers JSON, stage TEXT, error_class TEXT, error_message TEXT, failed_at DATETIME(6), \
             PRIMARY KEY (connector, source_topic, source_partition, source_offset)) \
             CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
        }
        Backend::Sqlite => {
            "CREATE TABLE sluice_offsets (connector TEXT NOT NULL, topic TEXT NOT NULL, \
             \"partition\" INTEGER NOT NULL, next_offset INTEGER NOT NULL, \
             updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), PRIMARY KEY (connector, topic, \"partition\"))"
        }
    }
}

fn advance(topic: &str, expected: Option<i64>, next: i64) -> WriteBatch {
    WriteBatch {
        offsets: vec![OffsetAdvance {
            topic: topic.into(),
            partition: 0,
            expected,
            next,
        }],
        ..WriteBatch::default()
    }
}

/// A database from before schema versions, with a stored offset for `Orders`: sluice
/// migrates it, keeps the offset, and from then on `Orders` and `orders` are two topics
/// with an offset each (on MariaDB they shared one row before).
async fn migrates_version_one(kind: Backend) {
    let db = FreshDb::new(kind).await;
    db.run(version_one_tables(kind)).await;
    let connector = connector(&db.url, &["Orders", "orders"]);
    db.run(&format!(
        "INSERT INTO sluice_offsets (connector, topic, {}, next_offset) VALUES ('{}', 'Orders', 0, 5)",
        if kind == Backend::MariaDb { "`partition`" } else { "\"partition\"" },
        connector.name
    ))
    .await;

    let sink = Sink::connect(&connector).await.expect("connect");
    sink.prepare().await.expect("migrate and prepare");
    let version = sink
        .query_integers("SELECT MAX(version) FROM sluice_schema".into(), 1)
        .await
        .expect("read the version");
    assert_eq!(version, [Some(SCHEMA_VERSION)]);

    assert_eq!(
        sink.control().read_offsets("Orders").await.unwrap(),
        HashMap::from([(0, 5)])
    );
    assert_eq!(
        sink.control().read_offsets("orders").await.unwrap(),
        HashMap::new()
    );
    sink.write(&advance("orders", None, 7))
        .await
        .expect("orders gets a row of its own");
    sink.write(&advance("Orders", Some(5), 6))
        .await
        .expect("Orders moves on");
    assert_eq!(
        sink.control().read_offsets("Orders").await.unwrap(),
        HashMap::from([(0, 6)])
    );
    assert_eq!(
        sink.control().read_offsets("orders").await.unwrap(),
        HashMap::from([(0, 7)])
    );

    if kind == Backend::MariaDb {
        let inexact = sink
            .query_integers(
                "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
                 AND TABLE_NAME IN ('sluice_offsets', 'dead_letters') \
                 AND COLUMN_NAME IN ('connector', 'topic', 'source_topic') AND COLLATION_NAME <> 'utf8mb4_bin'"
                    .into(),
                1,
            )
            .await
            .expect("collations");
        assert_eq!(
            inexact,
            [Some(0)],
            "names compare exactly after the migration"
        );
    }
    // A second start finds the current version and changes nothing.
    sink.prepare().await.expect("prepare again");
    assert_eq!(
        sink.control().read_offsets("orders").await.unwrap(),
        HashMap::from([(0, 7)])
    );
    sink.close().await;
    db.drop().await;
}
for_each_database!(migrates_version_one);

/// A database that a newer sluice has migrated is refused, with both versions named.
async fn refuses_a_newer_schema(kind: Backend) {
    let db = FreshDb::new(kind).await;
    let connector = connector(&db.url, &["t"]);
    let sink = Sink::connect(&connector).await.expect("connect");
    sink.prepare().await.expect("prepare");
    db.run("UPDATE sluice_schema SET version = 99").await;
    match sink.prepare().await {
        Err(SinkError::SchemaTooNew { found: 99, known }) => assert_eq!(known, SCHEMA_VERSION),
        other => panic!("expected a refusal, got {other:?}"),
    }
    sink.close().await;
    db.drop().await;
}
for_each_database!(refuses_a_newer_schema);

/// Version 10's heartbeat figures: written and read back as they were, on a database
/// migrated from version 1; a row as a process of version 9 writes it (no figures column
/// in its statement, during a rolling upgrade) reads back without figures, and figures
/// that do not parse are figures not shared, not an error.
async fn heartbeats_carry_figures(kind: Backend) {
    use sluice::sink::control::{Heartbeat, PartitionLag, TaskFigures};
    let db = FreshDb::new(kind).await;
    db.run(version_one_tables(kind)).await;
    let connector = connector(&db.url, &["t"]);
    let sink = Sink::connect(&connector).await.expect("connect");
    sink.prepare().await.expect("migrate and prepare");
    let figures = TaskFigures {
        partitions: vec![
            PartitionLag {
                topic: "Orders".into(),
                partition: 0,
                lag: 12,
            },
            PartitionLag {
                topic: "orders".into(),
                partition: 3,
                lag: i64::MAX,
            },
        ],
        process_rows_per_second: 1234.5,
    };
    let beats = [
        Heartbeat {
            task: 0,
            state: "RUNNING",
            trace: None,
            figures: figures.clone(),
        },
        Heartbeat {
            task: 1,
            state: "FAILED",
            trace: Some("a trace".into()),
            figures: TaskFigures::default(),
        },
    ];
    sink.control()
        .write_heartbeats("worker-a", &beats)
        .await
        .expect("write heartbeats");
    db.run(&format!(
        "INSERT INTO sluice_task_status (connector, worker, task, state, trace, updated_at) \
         VALUES ('{0}', 'worker-old', 0, 'RUNNING', NULL, 1); \
         INSERT INTO sluice_task_status (connector, worker, task, state, trace, updated_at, figures) \
         VALUES ('{0}', 'worker-odd', 0, 'RUNNING', NULL, 1, 'not json')",
        connector.name
    ))
    .await;
    let rows = sink
        .control()
        .read_heartbeats()
        .await
        .expect("read heartbeats");
    let seen: Vec<(&str, i32, Option<&TaskFigures>)> = rows
        .iter()
        .map(|r| (r.worker.as_str(), r.task, r.figures.as_ref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("worker-a", 0, Some(&figures)),
            ("worker-a", 1, Some(&TaskFigures::default())),
            ("worker-odd", 0, None),
            ("worker-old", 0, None),
        ]
    );
    assert_eq!(rows[1].trace.as_deref(), Some("a trace"));
    sink.close().await;
    db.drop().await;
}
for_each_database!(heartbeats_carry_figures);

/// A database left by each earlier version of sluice (2 to the one before the current;
/// version 1 has its own test above, as it predates `sluice_schema`), with an offset
/// stored and, from version 4 on, a heartbeat: migrated at start, the offset kept and
/// compared-and-set from where it was, the old heartbeat read back without figures and a
/// new one written. A migration step that needs an earlier one to have run in the same
/// start, or that fails on tables an earlier version left, fails here.
async fn migrates_from_every_earlier_version(kind: Backend) {
    let quoted_partition = if kind == Backend::MariaDb {
        "`partition`"
    } else {
        "\"partition\""
    };
    for version in 2..SCHEMA_VERSION {
        let db = FreshDb::new(kind).await;
        let connector = connector(&db.url, &["Orders"]);
        let sink = Sink::connect(&connector).await.expect("connect");
        let left = sink
            .maintenance()
            .migrate_to(version)
            .await
            .expect("the earlier version");
        assert_eq!((left.from, left.to), (0, version));
        db.run(&format!(
            "INSERT INTO sluice_offsets (connector, topic, {quoted_partition}, next_offset) \
             VALUES ('{}', 'Orders', 0, 5)",
            connector.name
        ))
        .await;
        if version >= 4 {
            db.run(&format!(
                "INSERT INTO sluice_task_status (connector, worker, task, state, trace, updated_at) \
                 VALUES ('{}', 'worker-old', 0, 'RUNNING', NULL, 1)",
                connector.name
            ))
            .await;
        }

        sink.prepare()
            .await
            .unwrap_or_else(|e| panic!("migrating from version {version}: {e}"));
        let now = sink
            .query_integers("SELECT MAX(version) FROM sluice_schema".into(), 1)
            .await
            .expect("read the version");
        assert_eq!(now, [Some(SCHEMA_VERSION)], "from version {version}");
        assert_eq!(
            sink.control().read_offsets("Orders").await.unwrap(),
            HashMap::from([(0, 5)]),
            "the offset stored at version {version}"
        );
        sink.write(&advance("Orders", Some(5), 6))
            .await
            .unwrap_or_else(|e| panic!("compare-and-set after version {version}: {e}"));
        assert_eq!(
            sink.control().read_offsets("Orders").await.unwrap(),
            HashMap::from([(0, 6)])
        );
        sink.control()
            .write_heartbeats(
                "worker-new",
                &[sluice::sink::control::Heartbeat {
                    task: 0,
                    state: "RUNNING",
                    trace: None,
                    figures: Default::default(),
                }],
            )
            .await
            .unwrap_or_else(|e| panic!("a heartbeat after version {version}: {e}"));
        let workers: Vec<(String, bool)> = sink
            .control()
            .read_heartbeats()
            .await
            .expect("read heartbeats")
            .into_iter()
            .map(|row| (row.worker, row.figures.is_some()))
            .collect();
        let mut expected = vec![("worker-new".to_string(), true)];
        if version >= 4 {
            expected.push(("worker-old".to_string(), false));
        }
        assert_eq!(workers, expected, "heartbeats after version {version}");
        sink.close().await;
        db.drop().await;
    }
}
for_each_database!(migrates_from_every_earlier_version);
