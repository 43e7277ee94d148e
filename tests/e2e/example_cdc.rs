//! `examples/cdc-replication`: its `run.sh` as the README runs it (the embedded Kafka and
//! SQLite), and its connector, producer and checker unchanged against a real broker into
//! PostgreSQL and MariaDB, with sluice SIGKILLed while batches span the three tables.
//!
//! Test-broker workarounds (Tansu 0.6.0's faults, DESIGN.md), here only: the producer sends
//! one record per producer batch (`-X batch.num.messages=1`: its memory storage answers a
//! fetch that starts inside a batch with the next batch), and sluice starts again only
//! after the example's session timeout has passed since the SIGKILL ([`eviction_wait`]: a
//! killed member keeps its partitions until its session expired).

use std::time::{Duration, Instant};

use crate::examples::{OwnDatabase, root, run_py, sluice_bin, spawn_py};
use crate::harness::{self, Backend, Broker, SluiceProcess};

/// How long a SIGKILLed member of the example's group keeps its partitions on the test
/// broker: the example's own `session.timeout.ms` (longer than the suite's, which
/// [`harness::EVICTION_WAIT`] is made for), and the same margin. Restarted sooner, the
/// new process was assigned no partition and the replica stayed behind.
fn eviction_wait() -> Duration {
    let text = std::fs::read_to_string(root().join("examples/cdc-replication/connectors.yaml"))
        .expect("the example's connectors.yaml");
    let session = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("session.timeout.ms:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    harness::EVICTION_WAIT.max(session + Duration::from_secs(2))
}

/// The history's size: enough for several batches on each side of the SIGKILL.
const ORDERS: &str = "300";
const SEED: &str = "11";

/// `examples/cdc-replication/run.sh`: the first look, on the embedded Kafka and SQLite.
#[test]
fn cdc_replication_first_look() {
    let run = root().join("examples/cdc-replication/run.sh");
    let output = std::process::Command::new(&run)
        .arg("120")
        .env("SLUICE", sluice_bin())
        .env_remove("DATABASE_URL")
        .env_remove("KAFKA_BROKERS")
        .output()
        .expect("run.sh");
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "run.sh failed:\n{text}");
    assert!(
        text.contains("VERDICT: the replica equals the source"),
        "{text}"
    );
}

/// The connector against a real broker, into `kind`: SIGKILLed once rows flow, started
/// again, and the replica equals the source.
async fn replicate_through_a_sigkill(kind: Backend) {
    let python = crate::examples::python();
    let broker = Broker::start();
    for table in ["customers", "orders", "order_lines"] {
        broker
            .create_topic(&format!("shop.public.{table}"), 2)
            .await;
    }
    let db = OwnDatabase::create(kind).await;
    let config = root().join("examples/cdc-replication/connectors.yaml");
    let env = [
        ("KAFKA_BROKERS", broker.bootstrap.as_str()),
        ("DATABASE_URL", db.url.as_str()),
    ];
    let mut producer = spawn_py(
        &python,
        "cdc-replication/produce.py",
        &[
            "--brokers",
            &broker.bootstrap,
            "--orders",
            ORDERS,
            "--seed",
            SEED,
            "--rate",
            "150",
            "-X",
            "batch.num.messages=1",
        ],
    );
    let sluice = SluiceProcess::start_with_env(&config, &env);
    // SIGKILL once rows flow into the last table the history fills.
    let deadline = Instant::now() + Duration::from_secs(90);
    while rows(kind, &db.url, "order_lines").await < 100 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        rows(kind, &db.url, "order_lines").await >= 100,
        "no rows reached order_lines within 90 s (log {})",
        sluice.log.display()
    );
    sluice.kill();
    tokio::time::sleep(eviction_wait()).await;
    let sluice = SluiceProcess::start_with_env(&config, &env);
    let produced = tokio::task::spawn_blocking(move || producer.wait())
        .await
        .expect("join")
        .expect("producer");
    assert!(produced.success(), "the producer failed");
    let (ok, out) = run_py(
        &python,
        "cdc-replication/check.py",
        &[
            "--url", &db.url, "--orders", ORDERS, "--seed", SEED, "--wait", "120",
        ],
    );
    assert!(ok, "check.py (log {}): {out}", sluice.log.display());
    assert!(
        out.contains("VERDICT: the replica equals the source"),
        "{out}"
    );
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    db.drop_now().await;
}

/// Rows of `table` (0 while it does not exist).
async fn rows(kind: Backend, url: &str, table: &str) -> i64 {
    use sqlx::Connection;
    let sql = sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"));
    match kind {
        Backend::Postgres => match sqlx::PgConnection::connect(url).await {
            Ok(mut conn) => sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&mut conn)
                .await
                .unwrap_or(0),
            Err(_) => 0,
        },
        Backend::MariaDb => match sqlx::MySqlConnection::connect(url).await {
            Ok(mut conn) => sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&mut conn)
                .await
                .unwrap_or(0),
            Err(_) => 0,
        },
        Backend::Sqlite => unreachable!("the SIGKILL run uses a server database"),
    }
}

#[test]
fn cdc_replication_into_postgres_through_a_sigkill() {
    harness::run_test(replicate_through_a_sigkill(Backend::Postgres));
}

#[test]
fn cdc_replication_into_mariadb_through_a_sigkill() {
    harness::run_test(replicate_through_a_sigkill(Backend::MariaDb));
}
