//! Source transactions applied whole (issue 46, item 1): a real Debezium 3.6 PostgreSQL
//! source with `provide.transaction.metadata=true`, whose transactions change `orders` and
//! `order_lines` together; one `sluice run` per target database with
//! `sink.transactions: source`, into tables an operator made, with a foreign key from
//! `order_lines` to `orders` (on PostgreSQL and MariaDB, added once the snapshot is
//! applied: a snapshot is not one transaction; SQLite has none).
//!
//! Each order row says how many lines it has (`lines`), and every source transaction keeps
//! that true: an order is inserted with its lines, a line is added with the count raised
//! (the line first), an order is deleted with its lines (the lines first), two orders
//! change in one transaction. A reader beside each replica reads, over and over, every
//! order with the count of its lines in one statement (one snapshot): a commit that holds
//! part of a source transaction shows an order whose count is not its lines. The replica
//! is SIGKILLed mid-stream and started again.
//!
//! It fails on a commit seen half-applied, a dead letter (a foreign key refused a row
//! written out of the source's order), a replica that differs from the source at the end,
//! and a reader that saw too few commits to judge. With `sink.transactions: batch` (the
//! default) the reader sees half-applied transactions and PostgreSQL's and MariaDB's
//! foreign keys refuse rows (checked by hand while building this).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::target::{Replica, TargetDb};
use super::{ConnectWorker, Converter, LogicalPostgres};
use crate::harness::{Backend, Broker, EVICTION_WAIT, run_test, unique};

/// The source's tables.
const SCHEMA: &str = "
CREATE TABLE orders (id bigint PRIMARY KEY, lines integer NOT NULL, note text);
CREATE TABLE order_lines (
    order_id bigint NOT NULL REFERENCES orders (id),
    line integer NOT NULL,
    qty integer NOT NULL,
    PRIMARY KEY (order_id, line)
);
";

/// Orders at which the replicas are SIGKILLed (rows in the target's `orders`).
const KILL_AT_ORDERS: i64 = 15;

/// The same tables in a target, with the version column sluice keeps under
/// `envelope: debezium`. The foreign key comes once the snapshot is applied
/// ([`foreign_key`]): a snapshot is not one transaction.
fn target_ddl(kind: Backend) -> Vec<&'static str> {
    match kind {
        Backend::MariaDb => vec![
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, `lines` INT NOT NULL, note TEXT, _sluice_version VARCHAR(100)) ENGINE=InnoDB",
            "CREATE TABLE order_lines (order_id BIGINT NOT NULL, line INT NOT NULL, qty INT NOT NULL, \
             _sluice_version VARCHAR(100), PRIMARY KEY (order_id, line)) ENGINE=InnoDB",
        ],
        _ => vec![
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, lines INTEGER NOT NULL, note TEXT, _sluice_version TEXT)",
            "CREATE TABLE order_lines (order_id BIGINT NOT NULL, line INTEGER NOT NULL, \
             qty INTEGER NOT NULL, _sluice_version TEXT, PRIMARY KEY (order_id, line))",
        ],
    }
}

/// The foreign key from `order_lines` to `orders` (SQLite cannot add one to a table, and
/// its connections would leave it unchecked).
fn foreign_key(kind: Backend) -> Option<&'static str> {
    match kind {
        Backend::Sqlite => None,
        _ => Some(
            "ALTER TABLE order_lines ADD CONSTRAINT order_lines_order FOREIGN KEY (order_id) REFERENCES orders (id)",
        ),
    }
}

/// Orders with their lines, before the connector starts (its snapshot: events without
/// transaction metadata).
fn snapshot() -> Vec<String> {
    (1..=2).map(|id| new_order(id, 2)).collect()
}

/// `BEGIN; order `id` with `lines` lines; COMMIT`.
fn new_order(id: i64, lines: i64) -> String {
    let mut sql = format!("BEGIN; INSERT INTO orders VALUES ({id}, {lines}, 'new');");
    for line in 1..=lines {
        sql.push_str(&format!(
            " INSERT INTO order_lines VALUES ({id}, {line}, {});",
            id * 10 + line
        ));
    }
    sql.push_str(" COMMIT;");
    sql
}

/// Source transactions from order `from` on, `count` of them, each keeping every order's
/// `lines` equal to its lines: new orders (1 to 6 lines, so that some are larger than a
/// batch), lines added to an earlier order, an earlier order deleted, two orders at once.
fn transactions(from: i64, count: i64, alive: &mut BTreeSet<(i64, i64)>) -> Vec<String> {
    let mut out = Vec::new();
    for n in from..from + count {
        let id = n;
        let lines = 1 + n % 6;
        out.push(new_order(id, lines));
        alive.insert((id, lines));
        if n % 3 == 0
            && let Some(&(earlier, had)) = alive.iter().next()
        {
            // The line first, then the count: a reader of half of it sees one too many.
            out.push(format!(
                "BEGIN; INSERT INTO order_lines VALUES ({earlier}, {line}, 1); \
                 UPDATE orders SET lines = lines + 1, note = 'grown' WHERE id = {earlier}; COMMIT;",
                line = had + 1
            ));
            alive.remove(&(earlier, had));
            alive.insert((earlier, had + 1));
        }
        if n % 5 == 0
            && let Some(&(doomed, had)) = alive.iter().nth(1)
        {
            // The lines first: the foreign key asks it, here and on the replica.
            out.push(format!(
                "BEGIN; DELETE FROM order_lines WHERE order_id = {doomed}; DELETE FROM orders WHERE id = {doomed}; COMMIT;"
            ));
            alive.remove(&(doomed, had));
        }
        if n % 7 == 0 {
            // Two orders in one transaction, lines of one before the other's order.
            let (a, b) = (100_000 + n, 200_000 + n);
            out.push(format!(
                "BEGIN; INSERT INTO orders VALUES ({a}, 2, 'pair'); INSERT INTO orders VALUES ({b}, 1, 'pair'); \
                 INSERT INTO order_lines VALUES ({b}, 1, 1); INSERT INTO order_lines VALUES ({a}, 1, 1); \
                 INSERT INTO order_lines VALUES ({a}, 2, 1); COMMIT;"
            ));
            alive.insert((a, 2));
            alive.insert((b, 1));
        }
    }
    out
}

#[test]
fn real_debezium_source_transactions_commit_whole() {
    run_test(source_transactions())
}

async fn source_transactions() {
    let broker = Broker::start();
    let pg = LogicalPostgres::start().await;
    pg.execute(SCHEMA).await;
    for sql in snapshot() {
        pg.execute(&sql).await;
    }
    let mut worker = ConnectWorker::start(&broker.bootstrap, &pg, Converter::Json);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut replicas = Vec::new();
    for kind in [Backend::Postgres, Backend::MariaDb, Backend::Sqlite] {
        let db = TargetDb::create(kind).await;
        for sql in target_ddl(kind) {
            db.execute(sql).await;
        }
        replicas.push(replica(db, &broker.bootstrap, &worker, dir.path()));
    }
    for replica in &mut replicas {
        replica.start();
    }
    let streaming = worker.wait_streaming(Duration::from_secs(120)).await;
    eprintln!("Debezium streams after {streaming:?}");
    // The snapshot's events carry no transaction: they are applied as they come, so the
    // readers start once each replica holds the snapshot.
    let snapshot = state(&SourceDb(&pg)).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    for replica in &mut replicas {
        while state(&replica.db).await != snapshot {
            assert!(
                !replica.exited() && Instant::now() < deadline,
                "[{}] did not apply the snapshot{}\n{}",
                replica.db.name(),
                replica.exit_note(),
                replica.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Some(sql) = foreign_key(replica.db.kind()) {
            replica.db.execute(sql).await;
        }
    }

    // A reader per replica, until the end.
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for replica in &replicas {
        let db = replica.db.clone_handle();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move { read_until(db, stop).await }));
    }

    let mut alive: BTreeSet<(i64, i64)> = [(1, 2), (2, 2)].into();
    let mut problems: Vec<String> = Vec::new();
    for sql in transactions(10, 30, &mut alive) {
        pg.execute(&sql).await;
    }
    // SIGKILL each replica once it holds some orders.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut killed = vec![false; replicas.len()];
    while killed.iter().any(|k| !k) {
        for (i, replica) in replicas.iter_mut().enumerate() {
            if killed[i] {
                continue;
            }
            let orders = replica.db.count("orders").await;
            if orders >= KILL_AT_ORDERS || Instant::now() > deadline {
                if orders < KILL_AT_ORDERS {
                    problems.push(format!(
                        "[{}] held {orders} orders after 90 s, not {KILL_AT_ORDERS}: killed anyway{}\n{}",
                        replica.db.name(),
                        replica.exit_note(),
                        replica.log_tail(15)
                    ));
                }
                replica.kill();
                killed[i] = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last_kill = Instant::now();
    for sql in transactions(40, 15, &mut alive) {
        pg.execute(&sql).await;
    }
    // Tansu 0.6.0 keeps a SIGKILLed member's partitions until its session expired.
    tokio::time::sleep_until((last_kill + EVICTION_WAIT).into()).await;
    for replica in &mut replicas {
        replica.start();
    }
    for sql in transactions(55, 15, &mut alive) {
        pg.execute(&sql).await;
    }

    // Each replica catches up with the source.
    let source = state(&SourceDb(&pg)).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    for replica in &mut replicas {
        loop {
            let target = state(&replica.db).await;
            if target == source {
                break;
            }
            if replica.exited() || Instant::now() > deadline {
                let missing: Vec<_> = source.difference(&target).take(10).collect();
                let extra: Vec<_> = target.difference(&source).take(10).collect();
                problems.push(format!(
                    "[{}] differs from the source ({}): missing {missing:?}, extra {extra:?}{}\n{}",
                    replica.db.name(),
                    if replica.exited() {
                        "its process exited"
                    } else {
                        "120 s passed"
                    },
                    replica.exit_note(),
                    replica.log_tail(15)
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut reads = Vec::new();
    for (reader, replica) in readers.into_iter().zip(&replicas) {
        let seen = reader.await.expect("reader");
        for half in seen.half_applied.iter().take(10) {
            problems.push(format!(
                "[{}] a commit held part of a source transaction: {half}",
                replica.db.name()
            ));
        }
        if seen.reads < 20 {
            problems.push(format!(
                "[{}] the reader saw {} states: too few to judge",
                replica.db.name(),
                seen.reads
            ));
        }
        reads.push(format!(
            "{}={}/{}",
            replica.db.name(),
            seen.reads,
            seen.distinct
        ));
        for letter in replica.db.dead_letters(&replica.dlq).await {
            problems.push(format!("[{}] dead letter: {letter}", replica.db.name()));
        }
    }
    for replica in &mut replicas {
        replica.kill();
    }
    for replica in &replicas {
        replica.db.drop_now().await;
    }
    crate::harness::record_summary(&format!(
        "DEBEZIUM-TRANSACTIONS orders={} reads(all/distinct)={} problems={}",
        source.iter().filter(|r| r.0 == "order").count(),
        reads.join(" "),
        problems.len()
    ));
    assert!(
        problems.is_empty(),
        "source transactions were not applied whole ({} problems):\n{}\nthe worker's log ({}):\n{}",
        problems.len(),
        problems.join("\n"),
        worker.log.display(),
        worker.log_tail(20)
    );
}

/// The replica into `db`: docs/cdc.md's "Source transactions, applied whole", with small
/// batches (a transaction of 7 events is larger than one) and dead letters in a table.
fn replica(
    db: TargetDb,
    bootstrap: &str,
    worker: &ConnectWorker,
    dir: &std::path::Path,
) -> Replica {
    let connector = unique(&format!("dbztx_{}", db.name()));
    let dlq = format!("dead_letters_{}", db.name());
    let text = format!(
        r#"kafka:
  brokers: "{bootstrap}"
  properties:
    session.timeout.ms: 6000
    heartbeat.interval.ms: 500
    topic.metadata.refresh.interval.ms: 1000
connectors:
  - name: {connector}
    topics: ["{orders}", "{lines}", "{transaction}"]
    group: {group}
    format: connect_json
    key_format: connect_json
    envelope: debezium
    batch: {{ max_records: 4, linger: 20ms }}
    errors:
      policy: dlq
      dlq: {{ table: {dlq} }}
      retry: {{ initial: 100ms, max: 1s, max_elapsed: 5m }}
    sink:
      url: "{url}"
      table: "{{source.table}}"
      mode: upsert
      key: record_key
      transactions: source
"#,
        orders = worker.topic("orders"),
        lines = worker.topic("order_lines"),
        transaction = worker.transaction_topic(),
        group = unique("dbztx-group"),
        url = db.url(),
    );
    Replica::new(db, connector, dlq, &text, dir)
}

/// What a reader saw.
#[derive(Default)]
struct Seen {
    /// Reads that succeeded.
    reads: u64,
    /// Distinct states among them.
    distinct: usize,
    /// Orders whose `lines` was not their count of lines, as read.
    half_applied: Vec<String>,
}

/// Reads every order with the count of its lines, in one statement, until `stop`.
async fn read_until(db: TargetDb, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    let mut states: BTreeSet<Vec<Vec<Option<String>>>> = BTreeSet::new();
    let sql = format!(
        "SELECT {}, {}, {} FROM orders o ORDER BY o.id",
        db.as_text("o.id"),
        db.as_text(&db.quote("lines")),
        db.as_text("(SELECT COUNT(*) FROM order_lines l WHERE l.order_id = o.id)")
    );
    while !stop.load(Ordering::Relaxed) {
        // The tables exist from the start; a read fails only while the database is busy.
        if let Ok(rows) = db.query(&sql).await {
            seen.reads += 1;
            for row in &rows {
                if row.get(1) != row.get(2) {
                    seen.half_applied.push(format!(
                        "order {:?} says {:?} lines and has {:?}",
                        row.first().cloned().flatten(),
                        row.get(1).cloned().flatten(),
                        row.get(2).cloned().flatten()
                    ));
                }
            }
            states.insert(rows);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    seen.distinct = states.len();
    seen
}

/// A database the final state is read from.
trait Rows {
    async fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>>;
    fn text(&self, expr: &str) -> String;
    fn lines_column(&self) -> String;
}

struct SourceDb<'a>(&'a LogicalPostgres);

impl Rows for SourceDb<'_> {
    async fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        use sqlx::Row;
        sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_all(self.0.pool())
            .await
            .expect("read the source")
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.get::<Option<String>, _>(i))
                    .collect()
            })
            .collect()
    }
    fn text(&self, expr: &str) -> String {
        format!("({expr})::text")
    }
    fn lines_column(&self) -> String {
        "lines".into()
    }
}

impl Rows for TargetDb {
    async fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        self.query(sql).await.unwrap_or_default()
    }
    fn text(&self, expr: &str) -> String {
        self.as_text(expr)
    }
    fn lines_column(&self) -> String {
        self.quote("lines")
    }
}

/// Every order (id, lines, note) and line (order, line, qty), as text.
async fn state(db: &impl Rows) -> BTreeSet<(&'static str, Vec<Option<String>>)> {
    let orders = db
        .rows(&format!(
            "SELECT {}, {}, note FROM orders",
            db.text("id"),
            db.text(&db.lines_column())
        ))
        .await;
    let lines = db
        .rows(&format!(
            "SELECT {}, {}, {} FROM order_lines",
            db.text("order_id"),
            db.text("line"),
            db.text("qty")
        ))
        .await;
    orders
        .into_iter()
        .map(|r| ("order", r))
        .chain(lines.into_iter().map(|r| ("line", r)))
        .collect()
}
