//! Value-by-value replication (issue 43, item 1): a real Debezium 3.6 PostgreSQL source,
//! one `sluice run` per target database, each with one connector set up as docs/cdc.md
//! says (`topics_regex`, `envelope: debezium`, `key: record_key`, `evolve: add_columns`,
//! `on_truncate: truncate`), SIGKILLed once mid-stream and started again; then every
//! table of every target is compared with the source, value by value.
//!
//! One test per converter (Connect's JSON, Confluent's Avro): each runs one Debezium (one
//! topic set) and three sluice processes reading it, into PostgreSQL (a database of its own
//! on the shared server), MariaDB (likewise) and SQLite (a temporary file).
//!
//! The source history: a snapshot; inserts, updates (to NULL too), deletes, a key deleted
//! and created again, a primary-key update, a composite key (keys that differ only in case
//! or in a trailing space), a multi-table transaction, `ADD COLUMN` on two tables while
//! sluice is down, a TRUNCATE followed by new rows, a table under `REPLICA IDENTITY
//! DEFAULT` whose TOASTed text, bytea and jsonb (random, so that they do not compress; one
//! text over 64 KiB) stay unchanged while another column is updated, and values at each
//! type's edges (see [`VARIANTS`]).
//!
//! How values are compared: each column is read as text (PostgreSQL's own output, UTC for
//! instants; MariaDB's `CAST(… AS CHAR)`; SQLite's storage class and text, doubles with 17
//! digits; bytes as hex) and brought to one canonical form chosen by the *source's* type,
//! through the same code for the source and the target ([`canonical`]): integers and
//! decimals as plain decimal digits (so a numeric compares as a number), doubles by their
//! bits, booleans as `true`/`false` (MariaDB's and SQLite's 1/0), JSON and arrays through
//! PostgreSQL's `jsonb` text (so that MariaDB's and SQLite's JSON text compares as JSON),
//! instants as UTC (MariaDB's `DATETIME(6)` and SQLite's text hold UTC), dates and times
//! parsed. Nothing else is forgiven: a value that does not parse as the source's type is a
//! difference. On PostgreSQL every column must also have the source's type (an enum:
//! `text`); on MariaDB the types issue 43 names (`smallint`, `DECIMAL(p,s)`, `DATETIME(6)`
//! for `timestamptz`, `JSON` for `jsonb` and arrays). Dead letters, a process that exited
//! and a target that did not catch up are failures too. The failure message lists every
//! difference: table, key, column, source value, target value.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use super::target::{Replica, TargetDb};
use super::{ConnectWorker, Converter, LogicalPostgres, Record, TopicReader};
use crate::harness::{Backend, Broker, EVICTION_WAIT, run_test, unique};
use crate::registry::TestRegistry;

/// The source's tables, created before the connector starts.
const SCHEMA: &str = "
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'ünïcødé 🦀');
CREATE TABLE kinds (
    id bigint PRIMARY KEY,
    c_bool boolean,
    c_int2 smallint,
    c_int4 integer,
    c_int8 bigint,
    c_num numeric(20,12),
    c_numeric numeric,
    c_float8 double precision,
    c_text text,
    c_bytea bytea,
    c_jsonb jsonb,
    c_uuid uuid,
    c_ts timestamp,
    c_tstz timestamptz,
    c_date date,
    c_time time,
    c_enum mood,
    c_int_arr int[],
    c_text_arr text[]
);
CREATE TABLE pairs (
    tenant text,
    seq integer,
    note text NOT NULL,
    PRIMARY KEY (tenant, seq)
);
CREATE TABLE toasty (
    id integer PRIMARY KEY,
    n integer NOT NULL,
    body text,
    blob bytea,
    doc jsonb
);
ALTER TABLE toasty REPLICA IDENTITY DEFAULT;
CREATE TABLE doomed (id integer PRIMARY KEY, label text);
CREATE TABLE bulk (id integer PRIMARY KEY, v text, at timestamptz);
CREATE TABLE markers (id integer PRIMARY KEY, note text);
";

/// Every table of the source, as Debezium names its topic's last part.
const TABLES: [&str; 6] = ["kinds", "pairs", "toasty", "doomed", "bulk", "markers"];

/// The columns of `kinds` after `id`, in the order of [`VARIANTS`]' values.
const KINDS_COLUMNS: &str = "c_bool, c_int2, c_int4, c_int8, c_num, c_numeric, c_float8, \
    c_text, c_bytea, c_jsonb, c_uuid, c_ts, c_tstz, c_date, c_time, c_enum, c_int_arr, c_text_arr";

/// Rows of `kinds` (SQL literals, after `id`): each type at its edges.
const VARIANTS: [[&str; 18]; 5] = [
    // The highs.
    [
        "true",
        "32767",
        "2147483647",
        "9223372036854775807",
        "99999999.999999999999",
        "123456789012345678901234567890.123456789012345678901234567890",
        "1.7976931348623157e308",
        "'emoji 🦀, a family 👩‍👩‍👧‍👦, a flag 🇺🇦'",
        "'\\x00ff00'",
        r#"'{"a": [1, 2.5, null], "b": {"c": "d"}}'"#,
        "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
        "'9999-12-31 23:59:59.999999'",
        "'9999-12-31 23:59:59.999999+00'",
        "'9999-12-31'",
        "'23:59:59.999999'",
        "'happy'",
        "'{2147483647,-2147483648,NULL}'",
        r#"'{"🦀","","NULL",NULL,"a,b","q\"uote","back\\slash"}'"#,
    ],
    // The lows, and empty values.
    [
        "false",
        "-32768",
        "-2147483648",
        "-9223372036854775808",
        "-99999999.999999999999",
        "-123456789012345678901234567890.123456789012345678901234567890",
        "2.2250738585072014e-308",
        "''",
        "'\\x'",
        "'[]'",
        "'00000000-0000-0000-0000-000000000000'",
        "'1900-01-01 00:00:00'",
        "'1900-01-01 00:00:00+00'",
        "'1900-01-01'",
        "'00:00:00'",
        "'sad'",
        "'{}'",
        "'{}'",
    ],
    // Around the epoch, the smallest decimals, a JSON null.
    [
        "NULL",
        "0",
        "0",
        "-9223372036854775807",
        "0.000000000001",
        "0.000000000000000000000000000001",
        "-1.5e-10",
        "'combining: e\u{301} n\u{303} A\u{30a}; RTL: עברית; BOM: \u{feff}; zero width: a\u{200b}b'",
        "'\\xdeadbeef00'",
        "'null'",
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
        "'1969-12-31 23:59:59.999999'",
        "'1969-12-31 23:59:59.999999+00'",
        "'1969-12-31'",
        "'12:00:00.000001'",
        "'ünïcødé 🦀'",
        "'{0}'",
        "'{\"y z\"}'",
    ],
    // Quoting, a zone that is not UTC, a JSON string.
    [
        "true",
        "1",
        "-1",
        "1",
        "-0.000000000001",
        "42",
        "0.1",
        "'quotes '' \" \\ tab\t newline\n cr\r end'",
        "'\\x00'",
        "'\"text 🦀\"'",
        "'123e4567-e89b-12d3-a456-426614174000'",
        "'1969-07-20 20:17:40'",
        "'2024-02-29 13:14:15.123456+05:30'",
        "'1970-01-01'",
        "'23:59:59.999999'",
        "'ok'",
        "'{1,NULL,-3}'",
        "'{\"x\",\"y z\",NULL}'",
    ],
    // Exact JSON numbers, spaces at the ends of a text.
    [
        "false",
        "12345",
        "123456789",
        "1234567890123456789",
        "12345678.123456789012",
        "0.1",
        "3.141592653589793",
        "' leading and trailing spaces '",
        "'\\xffffffff'",
        r#"'{"pi": 3.141592653589793238462643383279, "big": 123456789012345678901234567890, "tiny": -1e-30, "s": "q\"uote \\ 🦀", "nested": {"a": [1, 2.5, null, true, false]}}'"#,
        "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'",
        "'2000-02-29 00:00:00.000001'",
        "'1999-12-31 23:59:59.5-08'",
        "'2000-02-29'",
        "'00:00:00.000001'",
        "'ünïcødé 🦀'",
        "'{-1,0,1}'",
        "'{\"\",\" \"}'",
    ],
];

/// `INSERT INTO kinds` of `variant` under `id`.
fn kinds_row(id: i64, variant: usize) -> String {
    format!(
        "INSERT INTO kinds (id, {KINDS_COLUMNS}) VALUES ({id}, {})",
        VARIANTS[variant].join(", ")
    )
}

/// `UPDATE kinds SET` every column to `variant`'s value, for `id`.
fn kinds_update(id: i64, variant: usize) -> String {
    let sets: Vec<String> = KINDS_COLUMNS
        .split(", ")
        .zip(VARIANTS[variant])
        .map(|(column, value)| format!("{column} = {value}"))
        .collect();
    format!("UPDATE kinds SET {} WHERE id = {id}", sets.join(", "))
}

/// `n` × 32 random hex characters: text that pglz cannot shrink enough to keep in line.
fn random_text(n: usize) -> String {
    format!("(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, {n}))")
}

/// `n` × 16 random bytes.
fn random_bytes(n: usize) -> String {
    format!(
        "(SELECT decode(string_agg(md5(random()::text), ''), 'hex') FROM generate_series(1, {n}))"
    )
}

/// A jsonb array of `n` random strings.
fn random_json(n: usize) -> String {
    format!("(SELECT to_jsonb(array_agg(md5(random()::text))) FROM generate_series(1, {n}))")
}

/// The rows that exist before the connector starts: its snapshot.
fn snapshot() -> Vec<String> {
    let mut sql: Vec<String> = (0..4).map(|v| kinds_row(v as i64 + 1, v)).collect();
    sql.push("INSERT INTO kinds (id) VALUES (5)".into());
    sql.push(
        "INSERT INTO pairs VALUES ('acme', 1, 'snapshot'), ('ACME', 1, 'upper case'), \
         ('acme ', 1, 'a trailing space'), ('ümlaut', 1, 'a unicode key')"
            .into(),
    );
    sql.push(format!(
        "INSERT INTO toasty VALUES (1, 0, {}, {}, {})",
        random_text(500),
        random_bytes(300),
        random_json(300)
    ));
    sql.push(
        "INSERT INTO doomed SELECT g, 'before the truncate ' || g FROM generate_series(1, 5) g"
            .into(),
    );
    sql
}

/// Bulk rows inserted while sluice runs: it is SIGKILLed while it writes them.
const BULK_ROWS: i64 = 1000;
/// The bulk rows a target holds when its process is killed.
const KILL_AT_BULK_ROWS: i64 = 200;

/// Changes streamed while sluice runs (each statement its own transaction).
fn before_the_kill() -> Vec<String> {
    vec![
        kinds_row(6, 3),
        kinds_row(7, 4),
        kinds_row(8, 2),
        "UPDATE kinds SET c_num = -0.000000000001, c_tstz = '1969-12-31 23:59:59.999999+00', \
         c_text = 'updated 🦀', c_int_arr = '{7,NULL}', c_bool = NOT c_bool WHERE id = 1"
            .into(),
        "UPDATE kinds SET c_text = NULL, c_bytea = NULL, c_jsonb = NULL WHERE id = 6".into(),
        "DELETE FROM kinds WHERE id = 4".into(),
        "UPDATE kinds SET id = 300 WHERE id = 3".into(),
        "INSERT INTO pairs VALUES ('acme', 2, 'streamed')".into(),
        "UPDATE pairs SET note = 'changed' WHERE tenant = 'ACME' AND seq = 1".into(),
        "UPDATE pairs SET seq = 20 WHERE tenant = 'acme' AND seq = 2".into(),
        "DELETE FROM pairs WHERE tenant = 'acme '".into(),
        format!(
            "BEGIN; {}; UPDATE pairs SET note = 'by a transaction' WHERE tenant = 'acme' AND seq = 1; \
             DELETE FROM doomed WHERE id = 1; UPDATE toasty SET n = n + 100 WHERE id = 1; COMMIT",
            kinds_row(9, 0)
        ),
        // Over 64 KiB: more than MySQL's TEXT holds.
        format!(
            "INSERT INTO toasty VALUES (2, 0, {}, {}, {})",
            random_text(2200),
            random_bytes(300),
            random_json(300)
        ),
        // Unchanged TOASTed values: Debezium sends its placeholder for them.
        "UPDATE toasty SET n = n + 1".into(),
        format!(
            "INSERT INTO bulk SELECT g, 'bulk ' || g, '2020-01-01 00:00:00+00'::timestamptz + g * interval '1 second' \
             FROM generate_series(1, {BULK_ROWS}) g"
        ),
    ]
}

/// Changes made while sluice is down.
fn while_down() -> Vec<String> {
    vec![
        "ALTER TABLE kinds ADD COLUMN c_added text".into(),
        "UPDATE kinds SET c_added = 'added to ' || id WHERE id IN (1, 6)".into(),
        "INSERT INTO kinds (id, c_int4, c_added) VALUES (10, 10, 'born with it')".into(),
        "ALTER TABLE pairs ADD COLUMN weight numeric(10,3)".into(),
        "UPDATE pairs SET weight = 1.5 WHERE tenant = 'ACME'".into(),
        "TRUNCATE doomed".into(),
        "INSERT INTO doomed VALUES (10, 'after the truncate')".into(),
        "DELETE FROM bulk WHERE id % 3 = 0".into(),
        "UPDATE bulk SET v = 'updated ' || id WHERE id % 3 = 1".into(),
        "UPDATE toasty SET n = n + 10 WHERE id = 1".into(),
        "UPDATE toasty SET body = 'now small', n = n + 1 WHERE id = 2".into(),
    ]
}

/// Changes after the restart, and the marker that ends the history.
fn after_the_restart() -> Vec<String> {
    vec![
        "DELETE FROM kinds WHERE id = 7".into(),
        kinds_row(7, 1),
        kinds_update(8, 0),
        kinds_update(5, 4),
        "UPDATE toasty SET n = 0 WHERE id = 1".into(),
        "INSERT INTO pairs (tenant, seq, note, weight) VALUES ('new', 1, 'after the restart', 99.999)".into(),
        "INSERT INTO markers VALUES (1, 'the end')".into(),
    ]
}

#[test]
fn real_debezium_replicates_value_by_value_json() {
    run_test(replicate(Conv::Json))
}

#[test]
fn real_debezium_replicates_value_by_value_avro() {
    run_test(replicate(Conv::Avro))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Conv {
    Json,
    Avro,
}

impl Conv {
    fn name(self) -> &'static str {
        match self {
            Conv::Json => "json",
            Conv::Avro => "avro",
        }
    }

    /// sluice's `format` for it.
    fn format(self) -> &'static str {
        match self {
            Conv::Json => "connect_json",
            Conv::Avro => "avro",
        }
    }
}

async fn replicate(conv: Conv) {
    let started = Instant::now();
    let broker = Broker::start();
    let registry = TestRegistry::start().await;
    let pg = LogicalPostgres::start().await;
    pg.execute(SCHEMA).await;
    for sql in snapshot() {
        pg.execute(&sql).await;
    }
    let converter = match conv {
        Conv::Json => Converter::Json,
        Conv::Avro => Converter::Avro {
            registry_url: registry.url(),
        },
    };
    let mut worker = ConnectWorker::start(&broker.bootstrap, &pg, converter);
    let topics: Vec<String> = TABLES.iter().map(|t| worker.topic(t)).collect();

    // One sluice process per target, started while the worker starts.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut replicas = Vec::new();
    for kind in [Backend::Postgres, Backend::MariaDb, Backend::Sqlite] {
        let db = TargetDb::create(kind).await;
        let replica = replica(
            conv,
            db,
            &broker.bootstrap,
            &registry.url(),
            &worker.topic_prefix,
            dir.path(),
        );
        replicas.push(replica);
    }
    for replica in &mut replicas {
        replica.start();
    }
    let streaming = worker.wait_streaming(Duration::from_secs(120)).await;
    eprintln!("{}: Debezium streams after {streaming:?}", conv.name());

    let mut problems: Vec<String> = Vec::new();
    for sql in before_the_kill() {
        pg.execute(&sql).await;
    }

    // SIGKILL each process once its target holds some of the bulk rows.
    let kill_deadline = Instant::now() + Duration::from_secs(90);
    let mut killed_at: Vec<Option<i64>> = vec![None; replicas.len()];
    while killed_at.iter().any(Option::is_none) {
        for (i, replica) in replicas.iter_mut().enumerate() {
            if killed_at[i].is_some() {
                continue;
            }
            let rows = replica.db.count("bulk").await;
            if rows >= KILL_AT_BULK_ROWS {
                replica.kill();
                killed_at[i] = Some(rows);
            } else if Instant::now() > kill_deadline {
                problems.push(format!(
                    "[{} × {}] the target held {rows} bulk rows after 90 s, not {KILL_AT_BULK_ROWS}: killed anyway{}",
                    conv.name(),
                    replica.db.name(),
                    replica.exit_note()
                ));
                replica.kill();
                killed_at[i] = Some(rows);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last_kill = Instant::now();
    for (replica, rows) in replicas.iter().zip(&killed_at) {
        eprintln!(
            "{} × {}: SIGKILLed with {} of {BULK_ROWS} bulk rows written",
            conv.name(),
            replica.db.name(),
            rows.unwrap_or_default()
        );
    }

    for sql in while_down() {
        pg.execute(&sql).await;
    }
    // Tansu 0.6.0 keeps a SIGKILLed member's partitions until its session expired.
    tokio::time::sleep_until((last_kill + EVICTION_WAIT).into()).await;
    for replica in &mut replicas {
        replica.start();
    }
    for sql in after_the_restart() {
        pg.execute(&sql).await;
    }

    // Everything Debezium wrote: until the marker's event.
    let mut reader = TopicReader::new(&broker.bootstrap, &topics);
    let marker_topic = worker.topic("markers");
    let wanted = marker_topic.clone();
    let complete = reader
        .read_until(Duration::from_secs(90), move |records: &[Record]| {
            records.iter().any(|r| r.topic == wanted)
        })
        .await;
    assert!(
        complete,
        "the marker's event did not reach {marker_topic} within 90 s; the worker's log ({}):\n{}",
        worker.log.display(),
        worker.log_tail(40)
    );
    // The marker's topic is fetched beside the others: read what they hold before it.
    assert!(
        reader.read_to_end(Duration::from_secs(30)).await,
        "the topics could not be read to their end within 30 s"
    );
    let records = reader.into_records();
    let mut per_topic: BTreeMap<String, i64> = BTreeMap::new();
    for record in &records {
        *per_topic.entry(record.topic.clone()).or_default() += 1;
    }
    check_source_events(&records, &worker);

    // Each target catches up: its stored offsets reach every topic's end.
    let catch_up_deadline = Instant::now() + Duration::from_secs(90);
    for replica in &mut replicas {
        loop {
            let stored = replica.db.stored_offsets(&replica.connector).await;
            let behind: Vec<String> = per_topic
                .iter()
                .filter(|(topic, end)| stored.get(*topic) != Some(*end))
                .map(|(topic, end)| format!("{topic}: stored {:?} of {end}", stored.get(topic)))
                .collect();
            if behind.is_empty() {
                break;
            }
            let exited = replica.exited();
            if exited || Instant::now() > catch_up_deadline {
                problems.push(format!(
                    "[{} × {}] did not catch up ({}): {}{}\n{}",
                    conv.name(),
                    replica.db.name(),
                    if exited {
                        "its process exited"
                    } else {
                        "90 s passed"
                    },
                    behind.join("; "),
                    replica.exit_note(),
                    replica.log_tail(15)
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let caught_up = started.elapsed();

    // Compare.
    let source = read_source(&pg).await;
    let mut json = JsonCanon::new(pg.pool().clone());
    let mut summary = Vec::new();
    let mut differences = 0;
    for replica in &mut replicas {
        let label = format!("[{} × {}]", conv.name(), replica.db.name());
        let found = compare(&source, &replica.db, &mut json).await;
        differences += found.len();
        summary.push(format!("{}={}", replica.db.name(), found.len()));
        problems.extend(found.into_iter().map(|d| format!("{label} {d}")));
        for letter in replica.db.dead_letters(&replica.dlq).await {
            problems.push(format!("{label} dead letter: {letter}"));
        }
        if replica.exited() {
            problems.push(format!(
                "{label} the sluice process exited{}\n{}",
                replica.exit_note(),
                replica.log_tail(15)
            ));
        }
    }
    for replica in &mut replicas {
        replica.kill();
    }
    for replica in &replicas {
        replica.db.drop_now().await;
    }

    let line = format!(
        "DEBEZIUM-REPLICATE converter={} streaming_after_ms={} caught_up_after_ms={} records={} \
         rows={} differences={differences} ({}) problems={}",
        conv.name(),
        streaming.as_millis(),
        caught_up.as_millis(),
        records.len(),
        source.iter().map(|t| t.rows.len()).sum::<usize>(),
        summary.join(" "),
        problems.len()
    );
    crate::harness::record_summary(&line);
    assert!(
        problems.is_empty(),
        "the replicas differ from the source ({} problems; every one below):\n{}\n",
        problems.len(),
        problems.join("\n")
    );
}

/// The history reached the broker as it must for the test to mean something: Debezium
/// sent its placeholder for the unchanged TOASTed values, a truncate (a null key with a
/// value) on `doomed`, and the events of the columns added halfway.
fn check_source_events(records: &[Record], worker: &ConnectWorker) {
    let on = |table: &str| {
        let topic = worker.topic(table);
        records
            .iter()
            .filter(move |r| r.topic == topic)
            .collect::<Vec<_>>()
    };
    let placeholder = b"__debezium_unavailable_value";
    let placeholders = on("toasty")
        .iter()
        .filter(|r| {
            r.value
                .as_ref()
                .is_some_and(|v| v.windows(placeholder.len()).any(|w| w == placeholder))
        })
        .count();
    let summary: Vec<String> = on("toasty")
        .iter()
        .map(|r| {
            let v = r.value.as_deref().unwrap_or_default();
            let text = String::from_utf8_lossy(v);
            let op = text
                .find("\"op\":")
                .map(|i| text[i..(i + 9).min(text.len())].to_string());
            format!(
                "{} bytes, {} placeholders, {:?}",
                v.len(),
                v.windows(placeholder.len())
                    .filter(|w| *w == placeholder)
                    .count(),
                op
            )
        })
        .collect();
    assert!(
        placeholders >= 3,
        "Debezium sent its placeholder in {placeholders} toasty events, expected at least 3 \
         (REPLICA IDENTITY DEFAULT, unchanged TOASTed values); the worker's log ({}); events: {summary:#?}",
        worker.log.display()
    );
    let truncates = on("doomed")
        .iter()
        .filter(|r| r.key.is_none() && r.value.is_some())
        .count();
    assert_eq!(
        truncates,
        1,
        "truncate events on doomed; the worker's log ({})",
        worker.log.display()
    );
    let added = b"born with it";
    assert!(
        on("kinds").iter().any(|r| r
            .value
            .as_ref()
            .is_some_and(|v| v.windows(added.len()).any(|w| w == added))),
        "no kinds event carries the column added halfway"
    );
}

/// The replica of `conv`'s topics into `db`: a connector set up as docs/cdc.md's "Many
/// tables from one connector" says, with dead letters in a table.
fn replica(
    conv: Conv,
    db: TargetDb,
    bootstrap: &str,
    registry: &str,
    topic_prefix: &str,
    dir: &Path,
) -> Replica {
    let connector = unique(&format!("dbzrep_{}_{}", conv.name(), db.name()));
    let dlq = format!("dead_letters_{}", db.name());
    let format = conv.format();
    let text = format!(
        r#"kafka:
  brokers: "{bootstrap}"
  properties:
    session.timeout.ms: 6000
    heartbeat.interval.ms: 500
    topic.metadata.refresh.interval.ms: 1000
  schema_registry:
    url: "{registry}"
connectors:
  - name: {connector}
    topics_regex: "^{topic_prefix}\\.public\\..*"
    group: {group}
    format: {format}
    key_format: {format}
    envelope: debezium
    batch: {{ max_records: 20, linger: 20ms }}
    errors:
      policy: dlq
      dlq: {{ table: {dlq} }}
      retry: {{ initial: 100ms, max: 1s, max_elapsed: 5m }}
    sink:
      url: "{url}"
      table: "{{source.table}}"
      mode: upsert
      key: record_key
      create_table: true
      evolve: add_columns
      on_truncate: truncate
"#,
        group = unique("dbzrep-group"),
        url = db.url(),
    );
    Replica::new(db, connector, dlq, &text, dir)
}

// ---------------------------------------------------------------------------------------
// Reading and comparing.

/// How a source column's values compare: its canonical form.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Int,
    Decimal,
    Float,
    Bool,
    Text,
    Bytes,
    /// jsonb, and arrays (as JSON).
    Json,
    Date,
    Time,
    /// `timestamp`: a wall-clock time.
    Timestamp,
    /// `timestamptz`: an instant.
    Instant,
}

/// A value as read: text, or hex of a binary column.
#[derive(Clone, Debug)]
enum Raw {
    Null,
    Text(String),
    Hex(String),
    /// A SQLite REAL: with 17 significant digits (every bit of the double), and as SQLite
    /// casts it to text (15 digits: SQLite stores a decimal text as REAL only when those
    /// read back as the same text).
    Real {
        exact: String,
        text: String,
    },
}

struct SourceColumn {
    name: String,
    /// `format_type`: `numeric(20,12)`, `timestamp with time zone`, `mood`, …
    pg_type: String,
    /// The type a PostgreSQL target must have: the source's, `text` for an enum.
    expected_pg: String,
    kind: Kind,
    array: bool,
}

struct SourceTable {
    name: String,
    columns: Vec<SourceColumn>,
    /// Indexes of the primary key's columns, in key order.
    key: Vec<usize>,
    rows: Vec<Vec<Raw>>,
}

/// A PostgreSQL column (source or target): name, `format_type`, `typcategory`, `typtype`.
type PgColumn = (String, String, String, String);

async fn pg_columns(pool: &sqlx::PgPool, table: &str) -> Vec<PgColumn> {
    sqlx::query_as::<_, PgColumn>(
        "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typcategory::text, t.typtype::text \
         FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
         WHERE a.attrelid = to_regclass(quote_ident($1)) AND a.attnum > 0 AND NOT a.attisdropped \
         ORDER BY a.attnum",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .expect("columns")
}

/// The expression that reads a PostgreSQL column as text, and whether it is hex.
fn pg_read(name: &str, pg_type: &str, category: &str) -> (String, bool) {
    let q = format!("\"{}\"", name.replace('"', "\"\""));
    if pg_type == "bytea" {
        (format!("encode({q}, 'hex')"), true)
    } else if category == "A" {
        (format!("to_jsonb({q})::text"), false)
    } else if pg_type.starts_with("timestamp") && !pg_type.contains("without") {
        (
            format!("to_char({q} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"),
            false,
        )
    } else if pg_type.starts_with("timestamp") {
        (format!("to_char({q}, 'YYYY-MM-DD HH24:MI:SS.US')"), false)
    } else {
        (format!("{q}::text"), false)
    }
}

fn kind_of(pg_type: &str, category: &str, typtype: &str) -> Kind {
    if category == "A" {
        return Kind::Json;
    }
    if typtype == "e" {
        return Kind::Text;
    }
    match pg_type {
        "smallint" | "integer" | "bigint" => Kind::Int,
        "double precision" | "real" => Kind::Float,
        "boolean" => Kind::Bool,
        "bytea" => Kind::Bytes,
        "jsonb" | "json" => Kind::Json,
        "date" => Kind::Date,
        t if t.starts_with("numeric") => Kind::Decimal,
        t if t.starts_with("timestamp") && t.contains("without") => Kind::Timestamp,
        t if t.starts_with("timestamp") => Kind::Instant,
        t if t.starts_with("time") => Kind::Time,
        _ => Kind::Text,
    }
}

/// Rows of `sql` from a PostgreSQL pool, every column text.
async fn pg_rows(pool: &sqlx::PgPool, sql: &str) -> Vec<Vec<Option<String>>> {
    use sqlx::Row;
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter()
        .map(|r| {
            (0..r.len())
                .map(|i| r.try_get::<Option<String>, _>(i).expect("text"))
                .collect()
        })
        .collect()
}

/// Every table of the source: its columns, key and rows.
async fn read_source(pg: &LogicalPostgres) -> Vec<SourceTable> {
    let pool = pg.pool();
    let mut tables = Vec::new();
    for table in TABLES {
        let columns: Vec<SourceColumn> = pg_columns(pool, table)
            .await
            .into_iter()
            .map(|(name, pg_type, category, typtype)| SourceColumn {
                kind: kind_of(&pg_type, &category, &typtype),
                expected_pg: if typtype == "e" {
                    "text".into()
                } else {
                    pg_type.clone()
                },
                array: category == "A",
                name,
                pg_type,
            })
            .collect();
        let key_names: Vec<String> = sqlx::query_scalar(
            "SELECT a.attname::text FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, n) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = to_regclass(quote_ident($1)) AND i.indisprimary ORDER BY k.n",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .expect("key");
        let key = key_names
            .iter()
            .map(|k| {
                columns
                    .iter()
                    .position(|c| &c.name == k)
                    .expect("key column")
            })
            .collect();
        let reads: Vec<(String, bool)> = columns
            .iter()
            .map(|c| {
                let category = if c.array { "A" } else { "" };
                pg_read(&c.name, &c.pg_type, category)
            })
            .collect();
        let select: Vec<&str> = reads.iter().map(|(e, _)| e.as_str()).collect();
        let rows = pg_rows(
            pool,
            &format!("SELECT {} FROM \"{table}\"", select.join(", ")),
        )
        .await
        .into_iter()
        .map(|row| {
            row.into_iter()
                .zip(&reads)
                .map(|(v, (_, hex))| raw(v, *hex))
                .collect()
        })
        .collect();
        tables.push(SourceTable {
            name: table.to_string(),
            columns,
            key,
            rows,
        });
    }
    tables
}

fn raw(value: Option<String>, hex: bool) -> Raw {
    match value {
        None => Raw::Null,
        Some(v) if hex => Raw::Hex(v.to_lowercase()),
        Some(v) => Raw::Text(v),
    }
}

/// A target table as read: its columns (name, type as the database describes it) and rows
/// by column name.
struct TargetTable {
    columns: Vec<(String, String)>,
    /// MariaDB: the columns with a `json_valid` check (the JSON type).
    json_columns: BTreeSet<String>,
    rows: Vec<HashMap<String, Raw>>,
}

/// Reads `table` from the target; `None` when it does not exist.
async fn read_target(db: &TargetDb, table: &str) -> Option<TargetTable> {
    // (name, type, read expression, hex)
    let mut columns: Vec<(String, String, String, bool)> = Vec::new();
    let mut json_columns = BTreeSet::new();
    match db.kind() {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
            for (name, pg_type, category, _) in pg_columns(&pool, table).await {
                let (expr, hex) = pg_read(&name, &pg_type, &category);
                columns.push((name, pg_type, expr, hex));
            }
            pool.close().await;
        }
        Backend::MariaDb => {
            let sql = format!(
                "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), CAST(DATA_TYPE AS CHAR) \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{table}' \
                 ORDER BY ORDINAL_POSITION"
            );
            for row in db.query(&sql).await.expect("MariaDB columns") {
                let name = row[0].clone().unwrap_or_default();
                let column_type = row[1].clone().unwrap_or_default();
                let data_type = row[2].clone().unwrap_or_default().to_lowercase();
                let q = db.quote(&name);
                let binary = data_type.contains("blob") || data_type.contains("binary");
                let expr = if binary {
                    format!("LOWER(HEX({q}))")
                } else {
                    format!("CAST({q} AS CHAR)")
                };
                columns.push((name, column_type, expr, binary));
            }
            let checks = format!(
                "SELECT CAST(CHECK_CLAUSE AS CHAR) FROM information_schema.CHECK_CONSTRAINTS \
                 WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = '{table}'"
            );
            for row in db.query(&checks).await.unwrap_or_default() {
                let clause = row[0].clone().unwrap_or_default();
                for (name, ..) in &columns {
                    if clause.contains(&format!("json_valid(`{name}`)")) {
                        json_columns.insert(name.clone());
                    }
                }
            }
        }
        Backend::Sqlite => {
            let sql = format!("SELECT name, type FROM pragma_table_info('{table}') ORDER BY cid");
            for row in db.query(&sql).await.unwrap_or_default() {
                let name = row[0].clone().unwrap_or_default();
                let declared = row[1].clone().unwrap_or_default();
                let q = db.quote(&name);
                // The storage class decides: a blob as hex, a double with all its digits.
                let expr = format!(
                    "CASE typeof({q}) WHEN 'blob' THEN 'x' || lower(hex({q})) \
                     WHEN 'real' THEN 'r' || printf('%!.17g', {q}) || ' ' || CAST({q} AS TEXT) \
                     WHEN 'null' THEN NULL ELSE 't' || CAST({q} AS TEXT) END"
                );
                columns.push((name, declared, expr, false));
            }
        }
    }
    if columns.is_empty() {
        return None;
    }
    let select: Vec<&str> = columns.iter().map(|(_, _, e, _)| e.as_str()).collect();
    let sql = format!("SELECT {} FROM {}", select.join(", "), db.quote(table));
    let rows = db
        .query(&sql)
        .await
        .unwrap_or_else(|e| panic!("{}: {sql}: {e}", db.name()));
    let sqlite = db.kind() == Backend::Sqlite;
    let rows = rows
        .into_iter()
        .map(|row| {
            row.into_iter()
                .zip(&columns)
                .map(|(value, (name, _, _, hex))| {
                    let value = match value {
                        // SQLite: the storage class's tag, then the value.
                        Some(v) if sqlite => match v.split_at(1) {
                            ("x", hex) => Raw::Hex(hex.to_string()),
                            ("r", real) => {
                                let (exact, text) = real.split_once(' ').unwrap_or((real, real));
                                Raw::Real {
                                    exact: exact.to_string(),
                                    text: text.to_string(),
                                }
                            }
                            (_, text) => Raw::Text(text.to_string()),
                        },
                        v => raw(v, *hex),
                    };
                    (name.clone(), value)
                })
                .collect()
        })
        .collect();
    Some(TargetTable {
        columns: columns.into_iter().map(|(n, t, _, _)| (n, t)).collect(),
        json_columns,
        rows,
    })
}

/// JSON text in PostgreSQL's `jsonb` form (keys sorted, numbers exact), through the source
/// cluster; remembered.
struct JsonCanon {
    pool: sqlx::PgPool,
    seen: HashMap<String, Option<String>>,
}

impl JsonCanon {
    fn new(pool: sqlx::PgPool) -> JsonCanon {
        JsonCanon {
            pool,
            seen: HashMap::new(),
        }
    }

    /// `None` when `text` is not JSON.
    async fn canonical(&mut self, text: &str) -> Option<String> {
        if let Some(done) = self.seen.get(text) {
            return done.clone();
        }
        let answer: Option<String> = sqlx::query_scalar("SELECT $1::jsonb::text")
            .bind(text)
            .fetch_one(&self.pool)
            .await
            .ok();
        self.seen.insert(text.to_string(), answer.clone());
        answer
    }
}

/// A value's canonical form under the source column's `kind`: `None` for NULL. A value
/// that does not read as that kind keeps its raw form, marked, so that it differs.
async fn canonical(kind: Kind, value: &Raw, json: &mut JsonCanon) -> Option<String> {
    let text = match value {
        Raw::Null => return None,
        Raw::Hex(hex) if kind == Kind::Bytes => return Some(format!("\\x{hex}")),
        Raw::Hex(hex) => return Some(format!("⟨bytes, not {kind:?}: \\x{hex}⟩")),
        Raw::Real { exact, .. } if kind == Kind::Float => exact,
        Raw::Real { text, .. } | Raw::Text(text) => text,
    };
    let parsed = match kind {
        Kind::Text => Some(text.clone()),
        Kind::Bytes => None,
        Kind::Int => text.trim().parse::<i128>().ok().map(|n| n.to_string()),
        Kind::Decimal => decimal(text.trim()),
        Kind::Float => text.trim().parse::<f64>().ok().map(|f| format!("{f:?}")),
        Kind::Bool => match text.trim().to_lowercase().as_str() {
            "t" | "true" | "1" => Some("true".into()),
            "f" | "false" | "0" => Some("false".into()),
            _ => None,
        },
        Kind::Json => json.canonical(text).await,
        Kind::Date => chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
            .ok()
            .map(|d| d.format("%Y-%m-%d").to_string()),
        Kind::Time => chrono::NaiveTime::parse_from_str(text.trim(), "%H:%M:%S%.f")
            .ok()
            .map(|t| t.format("%H:%M:%S%.6f").to_string()),
        Kind::Timestamp => {
            naive_datetime(text.trim()).map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f").to_string())
        }
        Kind::Instant => {
            instant(text.trim()).map(|t| t.format("%Y-%m-%d %H:%M:%S%.6fZ").to_string())
        }
    };
    Some(parsed.unwrap_or_else(|| format!("⟨not {kind:?}: {text}⟩")))
}

/// `YYYY-MM-DD HH:MM:SS[.f]`, with a space or a `T`, no zone.
fn naive_datetime(text: &str) -> Option<chrono::NaiveDateTime> {
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
}

/// An instant in UTC: RFC 3339 (`Z` or an offset), PostgreSQL's `+HH[:MM]`, or a time
/// without a zone, which is UTC (MariaDB's `DATETIME(6)`, SQLite's text).
fn instant(text: &str) -> Option<chrono::NaiveDateTime> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.naive_utc());
    }
    for f in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"] {
        if let Ok(t) = chrono::DateTime::parse_from_str(text, f) {
            return Some(t.naive_utc());
        }
    }
    naive_datetime(text)
}

/// A decimal number (`-12.340`, `1E-12`, `1.5e+3`) as plain digits without leading or
/// trailing zeros (`-12.34`, `0.000000000001`, `1500`); `None` if it is not one.
fn decimal(text: &str) -> Option<String> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mut digits: String = format!("{whole}{fraction}");
    let mut exponent = exponent - fraction.len() as i64;
    digits = digits.trim_start_matches('0').to_string();
    if digits.is_empty() {
        return Some("0".into());
    }
    while digits.ends_with('0') {
        digits.pop();
        exponent += 1;
    }
    let body = if exponent >= 0 {
        format!("{digits}{}", "0".repeat(exponent as usize))
    } else {
        let point = digits.len() as i64 + exponent;
        if point > 0 {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        } else {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        }
    };
    Some(if negative { format!("-{body}") } else { body })
}

/// Shows a value in a difference: quoted and escaped, long values around where they
/// differ from `other`.
fn show(value: &Option<String>, other: &Option<String>) -> String {
    let Some(text) = value else {
        return "NULL".into();
    };
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 160 {
        return format!("{text:?}");
    }
    let other: Vec<char> = other.as_deref().unwrap_or_default().chars().collect();
    let at = chars
        .iter()
        .zip(&other)
        .position(|(a, b)| a != b)
        .unwrap_or(other.len().min(chars.len()));
    let from = at.saturating_sub(40);
    let to = (at + 80).min(chars.len());
    let window: String = chars[from..to].iter().collect();
    format!("({} chars; from char {from}) …{window:?}…", chars.len())
}

/// The type a MariaDB target must have, where issue 43 names one: `None` elsewhere.
fn mariadb_expected(column: &SourceColumn) -> Option<String> {
    if column.array || column.pg_type == "jsonb" {
        return Some("JSON".into());
    }
    match column.pg_type.as_str() {
        "smallint" => Some("smallint".into()),
        "timestamp with time zone" => Some("datetime(6)".into()),
        t if t.starts_with("numeric(") => Some(t.replacen("numeric", "decimal", 1)),
        _ => None,
    }
}

/// Every difference between the source and `db`, one line each.
async fn compare(source: &[SourceTable], db: &TargetDb, json: &mut JsonCanon) -> Vec<String> {
    let mut out = Vec::new();
    for table in source {
        let name = &table.name;
        let Some(target) = read_target(db, name).await else {
            out.push(format!(
                "{name}: no such table in the target (the source has {} rows)",
                table.rows.len()
            ));
            continue;
        };
        // Columns and their types.
        let target_types: HashMap<&str, &str> = target
            .columns
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        let mut shared = Vec::new();
        for (i, column) in table.columns.iter().enumerate() {
            let Some(target_type) = target_types.get(column.name.as_str()) else {
                out.push(format!(
                    "{name}.{}: no such column in the target",
                    column.name
                ));
                continue;
            };
            shared.push(i);
            match db.kind() {
                Backend::Postgres if *target_type != column.expected_pg => out.push(format!(
                    "{name}.{}: type: the source's {} wants {}, the target has {target_type}",
                    column.name, column.pg_type, column.expected_pg
                )),
                Backend::MariaDb => {
                    if let Some(expected) = mariadb_expected(column) {
                        let is_json = target.json_columns.contains(&column.name);
                        let fits = if expected == "JSON" {
                            is_json
                        } else if expected == "smallint" {
                            target_type.starts_with("smallint")
                        } else {
                            *target_type == expected
                        };
                        if !fits {
                            out.push(format!(
                                "{name}.{}: type: the source's {} wants {expected}, the target has {target_type}{}",
                                column.name,
                                column.pg_type,
                                if is_json { " (JSON)" } else { "" }
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        for (column, target_type) in &target.columns {
            if column != "_sluice_version" && !table.columns.iter().any(|c| &c.name == column) {
                out.push(format!(
                    "{name}.{column}: a column the source does not have ({target_type})"
                ));
            }
        }
        if table
            .key
            .iter()
            .any(|&k| !target_types.contains_key(table.columns[k].name.as_str()))
        {
            out.push(format!(
                "{name}: the target lacks key columns; rows not compared"
            ));
            continue;
        }

        // Rows by key.
        let show_key = |key: &[Option<String>]| -> String {
            table
                .key
                .iter()
                .zip(key)
                .map(|(&k, v)| format!("{}={}", table.columns[k].name, show(v, &None)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut source_rows: BTreeMap<Vec<Option<String>>, Vec<Option<String>>> = BTreeMap::new();
        for row in &table.rows {
            let mut values = Vec::new();
            for (column, value) in table.columns.iter().zip(row) {
                values.push(canonical(column.kind, value, json).await);
            }
            let key = table.key.iter().map(|&k| values[k].clone()).collect();
            source_rows.insert(key, values);
        }
        let mut target_rows: BTreeMap<Vec<Option<String>>, Vec<Vec<Option<String>>>> =
            BTreeMap::new();
        for row in &target.rows {
            let mut values = Vec::new();
            for column in &table.columns {
                let value = match row.get(&column.name) {
                    Some(value) => canonical(column.kind, value, json).await,
                    None => None,
                };
                values.push(value);
            }
            let key = table.key.iter().map(|&k| values[k].clone()).collect();
            target_rows.entry(key).or_default().push(values);
        }
        for (key, values) in &source_rows {
            let Some(found) = target_rows.get(key) else {
                out.push(format!(
                    "{name} {{{}}}: row missing in the target",
                    show_key(key)
                ));
                continue;
            };
            if found.len() > 1 {
                out.push(format!(
                    "{name} {{{}}}: {} rows in the target",
                    show_key(key),
                    found.len()
                ));
            }
            let target_values = &found[0];
            for &i in &shared {
                if values[i] != target_values[i] {
                    out.push(format!(
                        "{name} {{{}}} {}: source {} | target {}",
                        show_key(key),
                        table.columns[i].name,
                        show(&values[i], &target_values[i]),
                        show(&target_values[i], &values[i])
                    ));
                }
            }
        }
        for (key, found) in &target_rows {
            if !source_rows.contains_key(key) {
                out.push(format!(
                    "{name} {{{}}}: {} row(s) in the target that the source does not have",
                    show_key(key),
                    found.len()
                ));
            }
        }
    }
    out
}

#[test]
fn decimals_compare_as_numbers() {
    assert_eq!(decimal("1.100000000000").as_deref(), Some("1.1"));
    assert_eq!(
        decimal("-0.000000000001").as_deref(),
        Some("-0.000000000001")
    );
    assert_eq!(decimal("1E-12").as_deref(), Some("0.000000000001"));
    assert_eq!(decimal("1.5e+3").as_deref(), Some("1500"));
    assert_eq!(decimal("-0.000").as_deref(), Some("0"));
    assert_eq!(decimal("0042").as_deref(), Some("42"));
    assert_eq!(
        decimal("12345678.123456789012").as_deref(),
        Some("12345678.123456789012")
    );
    assert_ne!(decimal("0"), decimal("0.000000000001"));
    assert_eq!(decimal("1.2.3"), None);
    assert_eq!(decimal("abc"), None);
    assert_eq!(decimal(""), None);
}

#[test]
fn instants_compare_in_utc() {
    let utc = |s: &str| instant(s).map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f").to_string());
    assert_eq!(
        utc("2024-02-29 13:14:15.123456+05:30").as_deref(),
        Some("2024-02-29 07:44:15.123456")
    );
    assert_eq!(
        utc("2024-02-29T07:44:15.123456Z"),
        utc("2024-02-29 07:44:15.123456")
    );
    assert_eq!(
        utc("1969-12-31 23:59:59.999999+00").as_deref(),
        Some("1969-12-31 23:59:59.999999")
    );
    assert_ne!(
        utc("2024-02-29 07:44:15"),
        utc("2024-02-29 07:44:15.000001")
    );
    assert_eq!(utc("not a time"), None);
}
