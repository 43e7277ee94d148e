//! The baselines, measured in the same run on the same records: COPY, a bare drain, a
//! per-row INSERT consumer, a bare sqlx loop into SQLite.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::harness::{self, Backend, TestDb};
use crate::report::Figure;

/// A bare librdkafka consumer reading every partition from the start, no group join, with
/// prefetch raised (`queued.min.messages`): the source's limit.
pub(crate) fn bare_drain(bootstrap: &str, topic: &str, partitions: i32, n: u64) -> Figure {
    use sluice::config::defaults;
    // sluice's own fetch settings (kafka/consumer.rs), not librdkafka's defaults (a 1 s
    // fetch backoff would halve the source's pace): the same source sluice reads.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", harness::unique("bench-drain"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", defaults::ISOLATION_LEVEL)
        .set("queued.min.messages", defaults::QUEUED_MIN_MESSAGES)
        .set(
            "queued.max.messages.kbytes",
            defaults::QUEUED_MAX_MESSAGES_KBYTES,
        )
        .set("fetch.queue.backoff.ms", defaults::FETCH_QUEUE_BACKOFF_MS)
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&assignment).expect("assign");
    // Timed from the first record, as sluice's rows/s is from its first commit.
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut seen = 0;
    while seen < n && last.elapsed() < Duration::from_secs(10) {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            seen += 1;
            last = Instant::now();
            first.get_or_insert(last);
        }
    }
    let elapsed = last.saturating_duration_since(first.unwrap_or(last));
    Figure::baseline(
        "baseline: bare librdkafka drain",
        n,
        seen,
        elapsed,
        "assign from the start, sluice's fetch settings, timed from the first record",
    )
}

/// The rows sluice writes for `n` word events, as CSV (partition and offset as in the
/// topic do not matter to the database's pace; they are the uid's).
pub(crate) fn copy_file(dir: &Path, n: u64) -> PathBuf {
    use std::io::Write;
    let path = dir.join("rows.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("csv"));
    for uid in 0..n {
        let t = chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + uid as i64)
            .expect("ts")
            .naive_utc();
        writeln!(
            out,
            "{uid},w{},{}+00,{},{uid}",
            uid % 97,
            t.format("%Y-%m-%d %H:%M:%S%.6f"),
            uid % 4
        )
        .expect("write csv");
    }
    out.flush().expect("flush csv");
    path
}

pub(crate) fn psql(url: &str, sql: &str) -> std::process::Output {
    Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
        .output()
        .expect("psql runs")
}

/// `psql \copy` of the same rows into the table shape sluice writes, with or without its
/// primary key: the database's pace.
pub(crate) fn psql_copy(url: &str, csv: &Path, n: u64, keyed: bool) -> Figure {
    let table = harness::unique("bench_copy");
    let key = if keyed { " PRIMARY KEY" } else { "" };
    let created = psql(
        url,
        &format!(
            "CREATE TABLE {table} (uid BIGINT{key}, word TEXT, produced_at TIMESTAMPTZ, src_partition INTEGER, src_offset BIGINT)"
        ),
    );
    assert!(created.status.success(), "create: {created:?}");
    let started = Instant::now();
    let copied = psql(
        url,
        &format!("\\copy {table} FROM '{}' WITH (FORMAT csv)", csv.display()),
    );
    let elapsed = started.elapsed();
    assert!(copied.status.success(), "copy: {copied:?}");
    let _ = psql(url, &format!("DROP TABLE {table}"));
    Figure::baseline(
        if keyed {
            "baseline: psql \\copy, primary key"
        } else {
            "baseline: psql \\copy, no key"
        },
        n,
        n,
        elapsed,
        "the same rows, same columns",
    )
}

/// A consumer in a group that inserts each record in its own statement (autocommit) and
/// commits its offsets to Kafka every 1,000 records: the pipelines of the field articles.
/// Runs for at most `budget`; the rate is over the rows it wrote.
pub(crate) async fn per_row_insert(
    bootstrap: &str,
    topic: &str,
    url: &str,
    n: u64,
    budget: Duration,
) -> Figure {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect");
    let table = harness::unique("bench_per_row");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (uid BIGINT PRIMARY KEY, word TEXT, produced_at TIMESTAMPTZ, src_partition INTEGER, src_offset BIGINT)"
    )))
    .execute(&pool)
    .await
    .expect("create");
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", harness::unique("bench-per-row"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let insert = format!(
        "INSERT INTO {table} VALUES ($1, $2, to_timestamp($3::float8 / 1000), $4, $5) ON CONFLICT DO NOTHING"
    );
    let mut rows = 0u64;
    let mut started = None;
    let deadline = Instant::now() + budget + Duration::from_secs(30);
    while rows < n && Instant::now() < deadline {
        let Ok(Ok(message)) = tokio::time::timeout(Duration::from_secs(10), consumer.recv()).await
        else {
            break;
        };
        let started = *started.get_or_insert_with(Instant::now);
        let value: serde_json::Value =
            serde_json::from_slice(message.payload().unwrap_or_default()).expect("json");
        sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
            .bind(value["uid"].as_i64())
            .bind(value["word"].as_str().map(str::to_string))
            .bind(value["produced_at"].as_i64())
            .bind(message.partition())
            .bind(message.offset())
            .execute(&pool)
            .await
            .expect("insert");
        rows += 1;
        if rows.is_multiple_of(1000) {
            consumer
                .commit_consumer_state(CommitMode::Async)
                .expect("commit");
            if started.elapsed() >= budget {
                break;
            }
        }
    }
    let elapsed = started.map_or(Duration::ZERO, |s| s.elapsed());
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&pool)
        .await;
    Figure {
        holes: 0,
        ..Figure::baseline(
            "baseline: per-row INSERT, offsets to Kafka",
            n,
            rows,
            elapsed,
            &format!("stopped after {:.0} s", budget.as_secs_f64()),
        )
    }
}

/// A bare sqlx loop into SQLite, for the SQLite runs to be read beside: the rows sluice
/// writes, into the table sluice creates for them (the same statement), one prepared
/// `INSERT … ON CONFLICT (uid) DO UPDATE` per row and 5,000 rows to a transaction (sluice's
/// batch, `BEGIN IMMEDIATE` as sluice's), on a file opened as sluice opens one (WAL,
/// `synchronous = FULL`). No Kafka: SQLite's own pace for sluice's work.
pub(crate) async fn sqlite_loop(n: u64) -> Figure {
    use std::str::FromStr;

    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    let db = TestDb::new(Backend::Sqlite);
    let options = SqliteConnectOptions::from_str(&db.url)
        .expect("sqlite url")
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .expect("open sqlite");
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS words (\"uid\" INTEGER NOT NULL, \"word\" TEXT, \"produced_at\" TEXT, \
         \"src_partition\" INTEGER, \"src_offset\" INTEGER, PRIMARY KEY (\"uid\"))",
    )
    .execute(&pool)
    .await
    .expect("create");
    let upsert = "INSERT INTO words (\"uid\", \"word\", \"produced_at\", \"src_partition\", \"src_offset\") \
                  VALUES (?, ?, ?, ?, ?) ON CONFLICT (\"uid\") DO UPDATE SET \"word\" = excluded.\"word\", \
                  \"produced_at\" = excluded.\"produced_at\", \"src_partition\" = excluded.\"src_partition\", \
                  \"src_offset\" = excluded.\"src_offset\"";
    let started = Instant::now();
    let mut uid = 0u64;
    while uid < n {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.expect("begin");
        let end = (uid + 5000).min(n);
        for row in uid..end {
            let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + row as i64)
                .expect("ts")
                .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string();
            sqlx::query(upsert)
                .bind(row as i64)
                .bind(format!("w{}", row % 97))
                .bind(at)
                .bind((row % 4) as i64)
                .bind(row as i64)
                .execute(&mut *tx)
                .await
                .expect("upsert");
        }
        tx.commit().await.expect("commit");
        uid = end;
    }
    let elapsed = started.elapsed();
    pool.close().await;
    Figure::baseline(
        "baseline: bare sqlx loop into SQLite, upsert",
        n,
        n,
        elapsed,
        "the same rows and table, a prepared upsert per row, 5,000 to a transaction",
    )
}
