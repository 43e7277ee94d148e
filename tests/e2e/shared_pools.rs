//! Many connectors in one process share one pool of connections per database
//! (`databases.max_connections`): they all drain, exactly once, and the process never
//! holds more connections than the setting allows. A database that refuses more
//! connections is waited out, never taken for a missing table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use crate::harness::{self, Backend, Broker, Scenario, SluiceProcess, TestDb, unique};

const PARTITIONS: i32 = 2;

/// The scenarios' connectors in one file, each writing through `url`, with
/// `databases: { max_connections: max }`.
fn combined_yaml(brokers: &str, scenarios: &[Scenario], url: &TestDb, max: u32) -> String {
    let pairs: Vec<(&Scenario, &TestDb)> = scenarios.iter().map(|s| (s, url)).collect();
    harness::combined_yaml(brokers, &pairs) + &format!("databases:\n  max_connections: {max}\n")
}

/// `count` scenarios of `tasks` tasks, each with a topic of `records` records.
async fn connectors(broker: &Broker, count: usize, tasks: u32, records: u64) -> Vec<Scenario> {
    let scenarios: Vec<Scenario> = (0..count).map(|_| Scenario::new(tasks)).collect();
    for scenario in &scenarios {
        broker.create_topic(&scenario.topic, PARTITIONS).await;
        broker.produce(&scenario.topic, 0..records).await;
    }
    scenarios
}

/// Every scenario's table holds exactly the ids `0..records`, within 120 s.
async fn assert_all_delivered(broker: &Broker, db: &TestDb, scenarios: &[Scenario], records: u64) {
    for scenario in scenarios {
        let stats = scenario
            .wait_for_rows(
                &broker.bootstrap,
                db,
                records as i64,
                Duration::from_secs(120),
            )
            .await;
        harness::assert_exactly(stats, records as i64);
    }
}

/// Samples, every 50 ms until `stop`, how many connections carry `application_name`, and
/// keeps the largest count.
fn count_connections(
    db: &TestDb,
    application_name: &str,
    stop: Arc<AtomicBool>,
) -> (Arc<AtomicI64>, tokio::task::JoinHandle<()>) {
    let peak = Arc::new(AtomicI64::new(0));
    let (url, name, seen) = (db.url.clone(), application_name.to_string(), peak.clone());
    let sampler = tokio::spawn(async move {
        let pool = sqlx::PgPool::connect(&url).await.expect("connect");
        while !stop.load(Ordering::Relaxed) {
            let count: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            )
            .bind(&name)
            .fetch_one(&pool)
            .await
            .expect("pg_stat_activity");
            seen.fetch_max(count, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        pool.close().await;
    });
    (peak, sampler)
}

/// 12 connectors of 2 tasks each (24 tasks, which had 36 connections of their own before)
/// share at most 3 connections, and every one of them delivers all its records once.
async fn many_connectors_share_a_few_connections(kind: Backend) {
    const CONNECTORS: usize = 12;
    const RECORDS: u64 = 400;
    const MAX: u32 = 3;
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let application_name = unique("pools");
    let through = match kind {
        Backend::Postgres => db.with_application_name(&application_name),
        _ => db.with_url(db.url.clone()),
    };
    let scenarios = connectors(&broker, CONNECTORS, 2, RECORDS).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("connectors.yaml");
    std::fs::write(
        &config,
        combined_yaml(&broker.bootstrap, &scenarios, &through, MAX),
    )
    .expect("write config");
    let stop = Arc::new(AtomicBool::new(false));
    let sampled = (kind == Backend::Postgres)
        .then(|| count_connections(&db, &application_name, stop.clone()));
    let sluice = SluiceProcess::start(&config);
    assert_all_delivered(&broker, &db, &scenarios, RECORDS).await;
    stop.store(true, Ordering::Relaxed);
    if let Some((peak, sampler)) = sampled {
        sampler.await.expect("sampler");
        let peak = peak.load(Ordering::Relaxed);
        assert!(
            (1..=MAX as i64).contains(&peak),
            "the process held {peak} connections at once; databases.max_connections is {MAX}"
        );
    }
    drop(sluice);
}

for_each_database!(many_connectors_share_a_few_connections);

/// PostgreSQL refuses every connection of the process for a while (its role's
/// `CONNECTION LIMIT 0`: SQLSTATE 53300, as a server at its `max_connections` answers):
/// the connectors wait, saying why, and once connections are allowed again they deliver
/// everything. None fails, and none is told its table is missing.
async fn connections_refused_by_the_server_are_waited_out(kind: Backend) {
    const RECORDS: u64 = 200;
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let role = unique("pools_role");
    crate::cdc::execute_grants(
        &db,
        &[
            format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 0"),
            format!("GRANT CREATE, USAGE ON SCHEMA public TO {role}"),
            // The test's own counts create the tables when they come first.
            format!("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO {role}"),
            format!("GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"),
        ],
    )
    .await;
    let limited = db.with_url(format!("postgres://{role}@127.0.0.1:5432/test"));
    let scenarios = connectors(&broker, 2, 2, RECORDS).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("connectors.yaml");
    std::fs::write(
        &config,
        combined_yaml(&broker.bootstrap, &scenarios, &limited, 3),
    )
    .expect("write config");
    let sluice = SluiceProcess::start(&config);
    let log = || std::fs::read_to_string(&sluice.log).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !log().contains("too many connections") {
        assert!(
            std::time::Instant::now() < deadline,
            "no refused connection reported:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    crate::cdc::execute(&db, &format!("ALTER ROLE {role} CONNECTION LIMIT 3")).await;
    assert_all_delivered(&broker, &db, &scenarios, RECORDS).await;
    let text = log();
    assert!(
        !text.contains("is missing or lacks") && !text.contains("FAILED"),
        "a refused connection was taken for something else:\n{text}"
    );
    drop(sluice);
    // The tables made by the role and the default privileges go with it.
    crate::cdc::execute_grants(
        &db,
        &[
            format!("DROP OWNED BY {role}"),
            format!("ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM {role}"),
            format!("DROP ROLE {role}"),
        ],
    )
    .await;
}

for_each_database!(connections_refused_by_the_server_are_waited_out: postgres = Postgres);

/// Writes never take a pool's last connection: with `max_connections: 2` and two batches
/// stuck on row locks another session holds, the control read (a connector's target,
/// read every 2 s and given up after 3 s) still gets a connection at once; the second
/// batch waits for the first instead. Without the writers' permit both batches would
/// hold both connections, and the control read would wait for them.
async fn writes_leave_the_last_connection_to_control_reads(kind: Backend) {
    use sluice::sink::{DatabasePools, Sink, WriteBatch};
    let db = TestDb::new(kind);
    let scenario = Scenario::new(1);
    let config = scenario.config("127.0.0.1:9", &db);
    let pools = DatabasePools::new(&sluice::config::DatabasesConfig {
        max_connections: 2,
        ..Default::default()
    });
    let sink = Sink::connect_shared(&config.connectors[0], &pools)
        .await
        .expect("sink");
    sink.prepare().await.expect("prepare");
    // Another session holds keys 1 and 2.
    let other = sqlx::PgPool::connect(&db.url).await.expect("connect");
    let mut holder = other.begin().await.expect("begin");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {} (uid, word) VALUES (1, 'held'), (2, 'held')",
        scenario.table
    )))
    .execute(&mut *holder)
    .await
    .expect("hold keys");
    let batch = |uid: i64| WriteBatch {
        ops: vec![harness::scenario_row(uid)],
        ..WriteBatch::default()
    };
    let (one, two) = (batch(1), batch(2));
    let writes = async { tokio::join!(sink.write(&one), sink.write(&two)) };
    let control = async {
        // Both writes have started and wait on the locks (or the permit).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let read =
            tokio::time::timeout(Duration::from_secs(2), sink.control().read_control()).await;
        holder.rollback().await.expect("release the keys");
        read
    };
    let ((first, second), read) = tokio::join!(writes, control);
    assert!(
        matches!(read, Ok(Ok(_))),
        "the control read found no connection while two writes waited: {read:?}"
    );
    first.expect("first write");
    second.expect("second write");
    sink.close().await;
    other.close().await;
}

for_each_database!(writes_leave_the_last_connection_to_control_reads: postgres = Postgres);
