//! PostgreSQL's inserts go through `COPY` (`host/src/sink/db/postgres/copy.rs`), its upserts through
//! `COPY` while their keys are new and `UNNEST … ON CONFLICT` otherwise: every column type
//! at its edges reads back as written by either, text with COPY's own special characters
//! included; upserts of present keys update them, of new ones insert them, and a table
//! whose key is not its plain unique index is never written by COPY; a table made by hand
//! with other types than sluice's takes the rows, and refuses the values it refused
//! before, one row at a time. No broker needed.

use crate::harness;

use harness::{Backend, TestDb};
use sluice::config::{self, Config};
use sluice::map::{RowOp, SqlValue};
use sluice::sink::{Sink, WriteBatch};

use crate::fuzz_decode_map::TYPES;

fn connector(table: &str, mode: &str, url: &str, create: bool) -> sluice::config::ConnectorConfig {
    let columns: String = TYPES
        .iter()
        .map(|t| format!("        c_{t}: {{ from: /c{t}, type: {t} }}\n"))
        .collect();
    let text = format!(
        "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: {table}\n    topics: [t]\n    sink:\n      url: \"{url}\"\n      table: {table}\n      mode: {mode}\n      key: [c_bigint]\n      columns:\n{columns}      create_table: {create}\n"
    );
    let config: Config = config::load_str(&text, &|_| None).expect("config is valid");
    config.connectors.into_iter().next().expect("connector")
}

fn timestamp(micros: i64) -> SqlValue {
    SqlValue::Timestamp(
        chrono::DateTime::from_timestamp_micros(micros)
            .expect("timestamp")
            .naive_utc(),
    )
}

/// A row of every type, in TYPES order, keyed by `key`.
fn row(key: i64, text: &str, double: f64) -> Vec<SqlValue> {
    vec![
        SqlValue::Int(key),
        SqlValue::Int(i64::from(i32::MIN)),
        SqlValue::Double(double),
        SqlValue::Text("-12345678901234567890.000000001".into()),
        SqlValue::Text(text.into()),
        SqlValue::Bool(true),
        timestamp(1_704_164_645_123_456),
        timestamp(-1_000_000),
        SqlValue::Text("2024-02-29".into()),
        SqlValue::Text("{\"a\":[1,\"x\\ty\"],\"b\":null}".into()),
        SqlValue::Bytes(vec![0, 255, b'\\', b'\n', b'\t']),
        SqlValue::Text("123e4567-e89b-12d3-a456-426614174000".into()),
    ]
}

/// Every column of row `key` as PostgreSQL prints it (timestamptz in UTC).
async fn read_back(pool: &sqlx::PgPool, table: &str, key: i64) -> Vec<Option<String>> {
    let select: Vec<String> = TYPES
        .iter()
        .map(|t| match *t {
            "timestamptz" => format!("(c_{t} AT TIME ZONE 'UTC')::text"),
            _ => format!("c_{t}::text"),
        })
        .collect();
    let row: sqlx::postgres::PgRow = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {} FROM {table} WHERE c_bigint = $1",
        select.join(", ")
    )))
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("row");
    use sqlx::Row;
    (0..TYPES.len())
        .map(|i| row.try_get::<Option<String>, _>(i).expect("text"))
        .collect()
}

/// Rows in `table`.
async fn count(pool: &sqlx::PgPool, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .expect("count")
}

/// The indices of `ops` the database refuses, found by the sink's probe.
async fn refused_at(sink: &Sink, ops: &[RowOp]) -> Vec<usize> {
    let refused = sink
        .find_refused(ops, &Default::default())
        .await
        .expect("probe");
    refused.iter().map(|(i, _)| *i).collect()
}

fn expected(key: i64, text: &str, double: &str) -> Vec<Option<String>> {
    [
        key.to_string().as_str(),
        "-2147483648",
        double,
        "-12345678901234567890.000000001",
        text,
        "true",
        "2024-01-02 03:04:05.123456",
        "1969-12-31 23:59:59",
        "2024-02-29",
        "{\"a\": [1, \"x\\ty\"], \"b\": null}",
        "\\x00ff5c0a09",
        "123e4567-e89b-12d3-a456-426614174000",
    ]
    .iter()
    .map(|s| Some(s.to_string()))
    .collect()
}

/// Text that COPY's text format must escape, or could take for its own markers.
const AWKWARD: &str = "tab\there\nnew line\r\\back\\slash \\N \\. é ☃";

#[test]
fn every_column_type_reads_back_as_written() {
    harness::run_test(async {
        let db = TestDb::new(Backend::Postgres);
        let table = harness::unique("copy_types");
        let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
        for (mode, keys) in [("insert", [1i64, 2, 3]), ("upsert", [2, 3, 4])] {
            let sink = Sink::connect(&connector(&table, mode, &db.url, true))
                .await
                .expect("sink");
            sink.prepare().await.expect("prepare");
            // Inserts into the table sluice made go through COPY, and upserts try it first
            // (keys 2 and 3 are there: these upserts end with ON CONFLICT).
            assert!(sink.writes_with_copy(), "{mode}");
            let mut ops: Vec<RowOp> = keys
                .iter()
                .map(|&k| RowOp::Write(row(k, &format!("{AWKWARD} {mode} {k}"), 0.1)))
                .collect();
            // Edges: the extremes of bigint and double, and a row of NULLs but its key.
            ops.push(RowOp::Write(row(i64::MAX, AWKWARD, 1e300)));
            ops.push(RowOp::Write(row(i64::MIN, AWKWARD, f64::MIN_POSITIVE)));
            let mut nulls = vec![SqlValue::Null; TYPES.len()];
            nulls[0] = SqlValue::Int(100);
            ops.push(RowOp::Write(nulls));
            sink.write(&WriteBatch {
                ops,
                ..WriteBatch::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
            for &k in &keys {
                assert_eq!(
                    read_back(&pool, &table, k).await,
                    expected(k, &format!("{AWKWARD} {mode} {k}"), "0.1"),
                    "{mode} row {k}"
                );
            }
            assert_eq!(
                read_back(&pool, &table, i64::MAX).await,
                expected(i64::MAX, AWKWARD, "1e+300")
            );
            assert_eq!(
                read_back(&pool, &table, i64::MIN).await,
                expected(i64::MIN, AWKWARD, "2.2250738585072014e-308")
            );
            let mut none = vec![None; TYPES.len()];
            none[0] = Some("100".to_string());
            assert_eq!(read_back(&pool, &table, 100).await, none);
            if mode == "insert" {
                // Inserting the same keys again is refused, row by row.
                let again = [RowOp::Write(row(1, "again", 0.5))];
                assert_eq!(refused_at(&sink, &again).await, vec![0]);
            }
            sink.close().await;
        }
        assert_eq!(
            count(&pool, &table).await,
            7,
            "keys 1..4, 100 and the two extremes, each once"
        );
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&pool)
            .await;
    });
}

/// A table made by hand with narrower types than sluice's (INTEGER for bigint, VARCHAR(12)
/// for text, json for jsonb) and a column sluice does not write, with its default. COPY
/// would parse values with the columns' input functions where UNNEST assigned them with
/// casts, so inserts into it go through UNNEST: the rows land, and a value too long for
/// its column is refused alone.
#[test]
fn a_table_made_by_hand_takes_the_rows_and_refuses_what_does_not_fit() {
    harness::run_test(async {
        let db = TestDb::new(Backend::Postgres);
        let table = harness::unique("copy_hand");
        let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (c_bigint INTEGER PRIMARY KEY, c_int SMALLINT, c_double REAL, \
             c_numeric NUMERIC(40, 9), c_text VARCHAR(12), c_bool BOOLEAN, c_timestamp TIMESTAMP(3), \
             c_timestamptz TIMESTAMPTZ, c_date DATE, c_json JSON, c_bytes BYTEA, c_uuid UUID, \
             created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )))
        .execute(&pool)
        .await
        .expect("create");
        let fitting = |k: i64, text: &str| {
            let mut r = row(k, text, 0.5);
            r[1] = SqlValue::Int(7);
            r
        };
        for mode in ["insert", "upsert"] {
            let sink = Sink::connect(&connector(&table, mode, &db.url, false))
                .await
                .expect("sink");
            sink.prepare().await.expect("prepare");
            assert!(
                !sink.writes_with_copy(),
                "{mode}: other types than sluice's"
            );
            let base = if mode == "insert" { 0 } else { 10 };
            sink.write(&WriteBatch {
                ops: (1..=3)
                    .map(|k| RowOp::Write(fitting(base + k, &format!("{mode} {k}"))))
                    .collect(),
                ..WriteBatch::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
            let ops = vec![
                RowOp::Write(fitting(base + 4, "fits")),
                RowOp::Write(fitting(base + 5, "far too long for twelve")),
                RowOp::Write(fitting(base + 6, "fits too")),
            ];
            assert_eq!(refused_at(&sink, &ops).await, vec![1], "{mode}");
            sink.close().await;
        }
        let rows: Vec<(i32, String, String, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT c_bigint, c_text, c_timestamp::text, created_at IS NOT NULL FROM {table} ORDER BY c_bigint"
        )))
        .fetch_all(&pool)
        .await
        .expect("rows");
        assert_eq!(rows.len(), 6, "{rows:?}");
        assert_eq!(
            rows[0],
            (1, "insert 1".into(), "2024-01-02 03:04:05.123".into(), true)
        );
        assert_eq!(rows[3].1, "upsert 1");
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&pool)
            .await;
    });
}

/// A COPY cancelled while it waits for the server (here on a row lock another transaction
/// holds; in production the write's time bound or a revocation giving the batch up) must
/// not leave its connection in the pool halfway through the exchange: every write after
/// it succeeds, and nothing of the cancelled one is kept.
#[test]
fn a_copy_cancelled_while_waiting_leaves_no_broken_connection_behind() {
    harness::run_test(async {
        let db = TestDb::new(Backend::Postgres);
        let table = harness::unique("copy_cancel");
        let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
        let sink = Sink::connect(&connector(&table, "insert", &db.url, true))
            .await
            .expect("sink");
        sink.prepare().await.expect("prepare");
        assert!(sink.writes_with_copy());
        // Another transaction holds key 500.
        let mut other = pool.begin().await.expect("begin");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} (c_bigint) VALUES (500)"
        )))
        .execute(&mut *other)
        .await
        .expect("hold key 500");
        let waiting = tokio::time::timeout(
            std::time::Duration::from_millis(800),
            sink.write(&WriteBatch {
                ops: vec![RowOp::Write(row(500, "waits", 1.0))],
                ..WriteBatch::default()
            }),
        )
        .await;
        assert!(
            waiting.is_err(),
            "the COPY should wait on the lock: {waiting:?}"
        );
        other.rollback().await.expect("rollback");
        // Enough writes to take every connection the pool holds again.
        for k in 0..6 {
            sink.write(&WriteBatch {
                ops: vec![RowOp::Write(row(1000 + k, "after", 1.0))],
                ..WriteBatch::default()
            })
            .await
            .unwrap_or_else(|e| panic!("write {k} after the cancelled COPY: {e}"));
        }
        let counts: (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FILTER (WHERE c_bigint >= 1000), COUNT(*) FILTER (WHERE c_bigint = 500) FROM {table}"
        )))
        .fetch_one(&pool)
        .await
        .expect("counts");
        assert_eq!(counts, (6, 0));
        sink.close().await;
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&pool)
            .await;
    });
}

/// COPY only where the table takes it as it takes an INSERT: a table made by hand with
/// exactly sluice's types (and a column sluice does not write, with its default) takes
/// COPY; a view over it (COPY refuses views), and the table once it has row-level
/// security, are written with UNNEST. The rows land every time.
#[test]
fn copy_only_where_the_table_takes_it() {
    harness::run_test(async {
        let db = TestDb::new(Backend::Postgres);
        let table = harness::unique("copy_where");
        let view = format!("{table}_view");
        let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
        let run = |sql: String| {
            let pool = pool.clone();
            async move {
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&pool)
                    .await
                    .expect("statement");
            }
        };
        run(format!(
            "CREATE TABLE {table} (c_bigint BIGINT PRIMARY KEY, c_int INTEGER, c_double DOUBLE PRECISION, \
             c_numeric NUMERIC, c_text TEXT, c_bool BOOLEAN, c_timestamp TIMESTAMP, \
             c_timestamptz TIMESTAMPTZ, c_date DATE, c_json JSONB, c_bytes BYTEA, c_uuid UUID, \
             created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        ))
        .await;
        run(format!("CREATE VIEW {view} AS SELECT * FROM {table}")).await;
        let mut key = 0;
        let mut write_through = |target: String, copy: bool| {
            let url = db.url.clone();
            key += 1;
            let k = key;
            async move {
                let sink = Sink::connect(&connector(&target, "insert", &url, false))
                    .await
                    .expect("sink");
                sink.prepare().await.expect("prepare");
                assert_eq!(sink.writes_with_copy(), copy, "{target}");
                sink.write(&WriteBatch {
                    ops: vec![RowOp::Write(row(k, "lands", 1.0))],
                    ..WriteBatch::default()
                })
                .await
                .unwrap_or_else(|e| panic!("{target}: {e}"));
                sink.close().await;
            }
        };
        write_through(table.clone(), true).await;
        write_through(view.clone(), false).await;
        run(format!("ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")).await;
        write_through(table.clone(), false).await;
        let rows: Vec<(i64, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT c_bigint, created_at IS NOT NULL FROM {table} ORDER BY c_bigint"
        )))
        .fetch_all(&pool)
        .await
        .expect("rows");
        assert_eq!(rows, vec![(1, true), (2, true), (3, true)]);
        run(format!("DROP VIEW {view}")).await;
        run(format!("DROP TABLE {table}")).await;
    });
}

/// Upserts by optimistic COPY: runs of new keys are inserted, a run that meets present keys
/// falls back to `ON CONFLICT` (present keys updated, new ones inserted, nothing twice),
/// while runs keep meeting present keys too, and a refused row is found alone. A key that
/// is not exactly one of the table's unique, immediate indexes (a deferrable primary key,
/// a unique index over more columns) never takes COPY: a present key could not be relied
/// on to stop it.
#[test]
fn upserts_copy_new_keys_and_fall_back_on_present_ones() {
    harness::run_test(async {
        let db = TestDb::new(Backend::Postgres);
        let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
        let table = harness::unique("copy_upsert");
        let sink = Sink::connect(&connector(&table, "upsert", &db.url, true))
            .await
            .expect("sink");
        sink.prepare().await.expect("prepare");
        assert!(sink.writes_with_copy());
        let write = |keys: std::ops::Range<i64>, text: &'static str| {
            let sink = &sink;
            async move {
                sink.write(&WriteBatch {
                    ops: keys.map(|k| RowOp::Write(row(k, text, 1.0))).collect(),
                    ..WriteBatch::default()
                })
                .await
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            }
        };
        write(0..100, "first").await;
        write(100..200, "second").await;
        // Half present, half new, in several runs in a row (COPY tried, then skipped).
        for (n, from) in [50i64, 150, 190, 240, 290].into_iter().enumerate() {
            write(from..from + 100, ["a", "b", "c", "d", "e"][n]).await;
        }
        let rows: Vec<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT c_bigint, c_text FROM {table} ORDER BY c_bigint"
        )))
        .fetch_all(&pool)
        .await
        .expect("rows");
        assert_eq!(rows.len(), 390, "keys 0..390, each once");
        let text_of = |k: usize| rows[k].1.as_str();
        assert_eq!(
            [0, 49, 50, 149, 150, 189, 190, 239, 240, 289, 290, 389].map(text_of),
            [
                "first", "first", "a", "a", "b", "b", "c", "c", "d", "d", "e", "e"
            ]
        );
        // A refused row (text with a NUL byte) among new keys is found alone.
        let mut bad = row(1000, "x", 1.0);
        bad[4] = SqlValue::Text("nul \u{0} byte".into());
        let ops = vec![
            RowOp::Write(row(999, "fine", 1.0)),
            RowOp::Write(bad),
            RowOp::Write(row(1001, "fine", 1.0)),
        ];
        assert_eq!(refused_at(&sink, &ops).await, vec![1]);
        sink.close().await;

        for (name, ddl) in [
            (
                "deferrable primary key",
                "c_bigint BIGINT PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE",
            ),
            (
                "unique index over the key and more",
                "c_bigint BIGINT, UNIQUE (c_bigint, c_int)",
            ),
        ] {
            let other = harness::unique("copy_upsert_hand");
            let columns = "c_int INTEGER, c_double DOUBLE PRECISION, c_numeric NUMERIC, \
                c_text TEXT, c_bool BOOLEAN, c_timestamp TIMESTAMP, c_timestamptz TIMESTAMPTZ, \
                c_date DATE, c_json JSONB, c_bytes BYTEA, c_uuid UUID";
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "CREATE TABLE {other} ({columns}, {ddl})"
            )))
            .execute(&pool)
            .await
            .expect("create");
            let sink = Sink::connect(&connector(&other, "upsert", &db.url, false))
                .await
                .expect("sink");
            sink.prepare().await.expect("prepare");
            assert!(!sink.writes_with_copy(), "{name}");
            sink.close().await;
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {other}")))
                .execute(&pool)
                .await;
        }
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&pool)
            .await;
    });
}

/// Which statement wrote each run, seen from inside PostgreSQL: a statement-level trigger
/// logs each `INSERT` and `UPDATE` statement on the table with the transaction's
/// `synchronous_commit`. An upsert through `COPY` is one INSERT statement; through
/// `ON CONFLICT … DO UPDATE` it is an INSERT and an UPDATE statement. So: a run below
/// `MIN_ROWS` (100) goes to `ON CONFLICT`, a run of new keys to `COPY`, a run meeting
/// present keys to `ON CONFLICT` after its `COPY` is rolled back (the failed `COPY` logs
/// nothing); and `sink.synchronous_commit: off` is the setting of every batch's
/// transaction. Two such runs in one batch (a delete between them): the second's rollback
/// reaches back only to its own savepoint, so what the first run copied stays (a savepoint
/// shared by runs, or one left open, would take the first run's rows with it).
#[test]
fn which_statement_wrote_each_run_and_with_which_commit() {
    harness::run_test(async {
        let db = TestDb::new(Backend::Postgres);
        let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
        let table = harness::unique("copy_seen");
        let log = format!("{table}_log");
        let mut config = connector(&table, "upsert", &db.url, true);
        config.sink.synchronous_commit = config::SynchronousCommit::Off;
        let sink = Sink::connect(&config).await.expect("sink");
        sink.prepare().await.expect("prepare");
        for sql in [
            format!("CREATE TABLE {log} (op TEXT, sync TEXT)"),
            format!(
                "CREATE FUNCTION {log}_f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 INSERT INTO {log} VALUES (TG_OP, current_setting('synchronous_commit')); \
                 RETURN NULL; END $$"
            ),
            format!(
                "CREATE TRIGGER {log}_t AFTER INSERT OR UPDATE ON {table} \
                 FOR EACH STATEMENT EXECUTE FUNCTION {log}_f()"
            ),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&pool)
                .await
                .expect("setup");
        }
        let write = |keys: std::ops::Range<i64>| {
            let sink = &sink;
            async move {
                sink.write(&WriteBatch {
                    ops: keys.map(|k| RowOp::Write(row(k, "x", 1.0))).collect(),
                    ..WriteBatch::default()
                })
                .await
                .expect("write");
            }
        };
        let seen = || async {
            sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(format!(
                "SELECT op, sync FROM {log} ORDER BY op"
            )))
            .fetch_all(&pool)
            .await
            .expect("log")
        };
        let ops = |rows: &[(String, String)]| {
            let count = |op: &str| rows.iter().filter(|(o, _)| o == op).count();
            (count("INSERT"), count("UPDATE"))
        };
        write(5000..5050).await;
        assert_eq!(ops(&seen().await), (1, 1), "50 rows: ON CONFLICT");
        write(0..150).await;
        assert_eq!(ops(&seen().await), (2, 1), "150 new keys: one COPY");
        write(100..250).await;
        assert_eq!(ops(&seen().await), (3, 2), "present keys: ON CONFLICT");
        // A sink of its own (the one above skips COPY for a while after the runs that met
        // present keys). One batch: keys 300..450 new (COPY), then 400..550 meeting the
        // first run's keys.
        sink.close().await;
        let sink = Sink::connect(&config).await.expect("sink");
        sink.prepare().await.expect("prepare");
        let mut both: Vec<RowOp> = (300..450)
            .map(|k| RowOp::Write(row(k, "first", 1.0)))
            .collect();
        both.push(RowOp::Delete(vec![SqlValue::Int(9999)]));
        both.extend((400..550).map(|k| RowOp::Write(row(k, "second", 1.0))));
        sink.write(&WriteBatch {
            ops: both,
            ..WriteBatch::default()
        })
        .await
        .expect("write");
        assert_eq!(
            ops(&seen().await),
            (5, 3),
            "the first run by COPY (one INSERT), the second by ON CONFLICT"
        );
        let texts: Vec<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT c_bigint, c_text FROM {table} WHERE c_bigint >= 300 AND c_bigint < 5000 \
             ORDER BY c_bigint"
        )))
        .fetch_all(&pool)
        .await
        .expect("rows");
        assert_eq!(texts.len(), 250, "keys 300..550, each once");
        let text_of = |k: usize| texts[k].1.as_str();
        assert_eq!(
            [0, 99, 100, 149, 150, 249].map(text_of),
            ["first", "first", "second", "second", "second", "second"]
        );
        let rows = seen().await;
        assert!(rows.iter().all(|(_, sync)| sync == "off"), "{rows:?}");
        assert_eq!(count(&pool, &table).await, 550);
        sink.close().await;
        for sql in [
            format!("DROP TABLE {table}"),
            format!("DROP TABLE {log}"),
            format!("DROP FUNCTION {log}_f()"),
        ] {
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await;
        }
    });
}
