//! A SIGKILL while batches span three tables: each table has each record once.

use super::*;

/// Three topics × 300 records through `table_from` (`<tag>_a`, `_b`, `_c`), batches of at
/// most 50 records that span the tables; sluice SIGKILLed while records are coming and
/// written, then started again: every table holds each of its records once, and the stored
/// offsets are each partition's record count.
async fn sigkill_mid_stream_keeps_every_table_exactly_once(kind: Backend) {
    const N: u64 = 300;
    /// Records of each topic produced before the kill's run: sluice is consuming when
    /// the rest comes.
    const FIRST: u64 = 10;
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let dir = tempfile::tempdir().expect("temp dir");
    let p = unique("rt");
    let tag = unique("t");
    let connector = unique("route");
    let dlq = unique("route_dlq");
    let topics: Vec<String> = ["a", "b", "c"].iter().map(|s| format!("{p}.{s}")).collect();
    let tables: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|s| format!("{tag}_{s}"))
        .collect();
    for topic in &topics {
        broker.create_topic(topic, 2).await;
        produce(&broker, topic, 0..FIRST).await;
    }
    let table_from = format!("table_from: {{ topic: \"^{p}\\\\.(.*)$\", to: \"{tag}_{{1}}\" }}");
    let config = write_config(
        dir.path(),
        &connector,
        &(kafka_yaml(&broker)
            + &json_connector(&connector, &pattern(&p), &table_from, 50, &dlq, &db)),
    );
    let first = SluiceProcess::start(&config);
    let rows_of =
        |want: i64| -> Vec<(&str, i64)> { tables.iter().map(|t| (t.as_str(), want)).collect() };
    wait_for_rows(&db, &rows_of(FIRST as i64), 60, &first).await;

    // The rest, about 3 s of records into all three topics at once, while sluice is killed
    // in the middle of writing them.
    let producing = produce_round_robin(&broker, &topics, FIRST..N, 300);
    let killing = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        let total = || async {
            let mut sum = 0;
            for t in &tables {
                sum += count(&db, t).await.unwrap_or(0);
            }
            sum
        };
        while total().await < 3 * FIRST as i64 + 60 {
            assert!(
                Instant::now() < deadline,
                "no rows move\n{}",
                log_tail(&first)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(rand::random_range(200..1200))).await;
        let at_kill = total().await;
        first.kill();
        at_kill
    };
    let ((), at_kill) = tokio::join!(producing, killing);
    assert!(
        at_kill < 3 * N as i64,
        "the kill came after every row was written ({at_kill}): it tested nothing"
    );
    // Tansu 0.6.0 keeps the SIGKILLed member in the group until a join after its session
    // expired (module doc): start again only then.
    tokio::time::sleep(EVICTION_WAIT).await;
    let second = SluiceProcess::start(&config);
    wait_for_rows(&db, &rows_of(N as i64), 90, &second).await;
    for (topic, table) in topics.iter().zip(&tables) {
        assert_table_holds(&db, &connector, table, topic, N).await;
    }
    assert_eq!(
        letters(&db, &dlq).await,
        Vec::<Letter>::new(),
        "dead letters"
    );
    eprintln!("killed with {at_kill} of {} rows written", 3 * N);
    let status = second.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(sigkill_mid_stream_keeps_every_table_exactly_once: postgres = Postgres);
