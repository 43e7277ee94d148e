//! Transforms that fail in ways no single record explains: a plugin that fails on everything,
//! records that spin past the deadline, a search that runs out of its budget, a chain that
//! cannot be instantiated again.

use super::*;

/// A plugin that fails on every record cannot be isolated record by record: the task fails
/// instead of skipping good records.
async fn plugin_failing_everything_fails_the_task_even_under_skip(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let config = run.config(&unique("conn"), "{ policy: skip }", false, "");
    with_hostile(&config, "broken", "{ mode: panic }");
    run.broker
        .produce_with(&run.topic, 0..2000, |uid| {
            format!("{{\"uid\":{uid},\"word\":\"w\"}}")
        })
        .await;
    let (code, stderr) = run_to_exit(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("could not be told apart"), "{stderr}");
    let (stats, _) = run.stats(&config).await;
    assert_eq!(stats.rows, 0, "{stats:?}");
}
for_each_database!(plugin_failing_everything_fails_the_task_even_under_skip: sqlite = Sqlite);

/// A plugin that spins on 2 % of the records, with a deadline that makes the isolation of
/// one batch last longer than the consumer's `max.poll.interval.ms`: transforms run off the
/// polling thread, so the consumer stays in its group; each spinning record costs one
/// deadline and becomes a dead letter, and every other record lands once.
async fn spinning_records_are_dead_letters_and_the_consumer_stays(db: Backend) {
    const N: u64 = 1000;
    let spins = |uid: u64| uid % 50 == 37;
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let errors = format!("{{ policy: dlq, dlq: {{ table: {dlq} }} }}");
    let config = run.config(
        &unique("conn"),
        &errors,
        false,
        "    max.poll.interval.ms: 6000\n",
    );
    with_hostile_limited(
        &config,
        "spin",
        "{ mode: loop, on: SPIN }",
        Some("{ timeout: 1s }"),
    );
    run.broker
        .produce_with(&run.topic, 0..N, |uid| {
            if spins(uid) {
                "SPIN".to_string()
            } else {
                format!("{{\"uid\":{uid},\"word\":\"w\"}}")
            }
        })
        .await;
    let spinning = (0..N).filter(|&u| spins(u)).count() as i64;
    let started = Instant::now();
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, dead) = run
        .wait_for(&config, N as i64 - spinning, spinning, 180)
        .await;
    let elapsed = started.elapsed();
    let log_path = sluice.log.clone();
    let status = sluice.terminate();
    println!(
        "SPIN-E2E db={} records={N} spinning={spinning} deadline=1s drained in {elapsed:?}",
        run.db.name()
    );
    assert!(status.success(), "sluice exited with {status}");
    assert_eq!(stats.rows, N as i64 - spinning, "{stats:?}");
    assert_eq!(stats.duplicates(), 0, "{stats:?}");
    assert_eq!(dead, spinning, "one dead letter per spinning record");
    let log = std::fs::read_to_string(&log_path).expect("sluice log");
    assert!(
        !log.contains("maximum poll interval"),
        "the consumer was thrown out of its group: {}",
        log_path.display()
    );
}
for_each_database!(spinning_records_are_dead_letters_and_the_consumer_stays: postgres = Postgres, sqlite = Sqlite);

/// A search for failing records that runs out of its budget (`errors.isolation`): under
/// `dlq`, the records it did not reach are dead letters of class `transform_not_isolated`
/// (nothing lost, nothing dropped); under `fail`, the task fails saying why.
async fn records_not_isolated_are_dead_letters_under_dlq(db: Backend) {
    const N: u64 = 500;
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let errors =
        format!("{{ policy: dlq, dlq: {{ table: {dlq} }}, isolation: {{ max_failed_calls: 2 }} }}");
    let config = run.config(&unique("conn"), &errors, false, "");
    with_hostile(&config, "trap", "{ mode: panic, on: TRAP }");
    let value = |uid: u64| {
        if uid % 100 == 17 {
            "TRAP".to_string()
        } else {
            format!("{{\"uid\":{uid},\"word\":\"w\"}}")
        }
    };
    run.broker.produce_with(&run.topic, 0..N, value).await;
    let sluice = harness::SluiceProcess::start(&config);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (stats, dead) = loop {
        let (stats, dead) = run.stats(&config).await;
        if stats.rows + dead >= N as i64 || Instant::now() > deadline {
            break (stats, dead);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    assert_eq!(
        stats.rows + dead,
        N as i64,
        "every record is a row or a dead letter"
    );
    assert_eq!(stats.duplicates(), 0, "{stats:?}");
    assert_eq!(
        db,
        Backend::Sqlite,
        "the classes are read with SQLite's driver"
    );
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(run.db.url.trim_start_matches("sqlite://"));
    let pool = sqlx::SqlitePool::connect_with(options)
        .await
        .expect("connect");
    let classes: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT error_class, COUNT(*) FROM {dlq} GROUP BY error_class ORDER BY error_class"
    )))
    .fetch_all(&pool)
    .await
    .expect("dead-letter classes");
    pool.close().await;
    assert!(
        classes.iter().any(|(c, _)| c == "transform_not_isolated"),
        "{classes:?}"
    );
    assert!(
        classes
            .iter()
            .all(|(c, _)| c == "transform" || c == "transform_not_isolated"),
        "{classes:?}"
    );

    // The same under `fail`: the task fails, naming the budget.
    let run = PoisonRun::new(db, 1).await;
    let config = run.config(
        &unique("conn"),
        "{ policy: fail, isolation: { max_failed_calls: 2 } }",
        false,
        "",
    );
    with_hostile(&config, "trap", "{ mode: panic, on: TRAP }");
    run.broker.produce_with(&run.topic, 0..N, value).await;
    let (code, stderr) = run_to_exit(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("errors.isolation"), "{stderr}");
}
for_each_database!(records_not_isolated_are_dead_letters_under_dlq: sqlite = Sqlite);

/// A plugin whose `init` starts to spin when it is instantiated again (after a trap) is not
/// a record's fault: the batch waits and is tried again with `errors.retry`, nothing is
/// dead-lettered or skipped for it, and past `max_elapsed` the task fails naming `init`
/// (a transient failure: it waits for its restart, `errors.restart`).
async fn a_chain_that_cannot_restart_is_retried_not_blamed_on_records(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let errors = format!(
        "{{ policy: dlq, dlq: {{ table: {dlq} }}, retry: {{ initial: 100ms, max: 500ms, max_elapsed: 3s }}, restart: {{ initial: 10m, max: 10m }} }}"
    );
    let config = run.config(&unique("conn"), &errors, false, "");
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis()
    };
    // `init` runs in time when the task starts, and spins once this moment has passed.
    let after = now_ms() + 8000;
    with_hostile_limited(
        &config,
        "flaky",
        &format!("{{ mode: init-loop-after, after: \"{after}\", on: TRAP }}"),
        Some("{ timeout: 300ms }"),
    );
    let good = |uid: u64| format!("{{\"uid\":{uid},\"word\":\"w\"}}");
    run.broker.produce_with(&run.topic, 0..100, good).await;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, _) = run.wait_for(&config, 100, 0, 60).await;
    assert_eq!(stats.rows, 100, "{stats:?}");
    while now_ms() < after + 500 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A trap makes the chain start a fresh instance, whose `init` now spins.
    run.broker
        .produce_with(&run.topic, 100..110, |uid| {
            if uid == 100 {
                "TRAP".to_string()
            } else {
                good(uid)
            }
        })
        .await;
    // Past `max_elapsed` the task fails, for a transient reason: it waits for its restart
    // (errors.restart, ten minutes here) while the process stays up; a stop then exits 1.
    let log_path = sluice.log.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .contains("task failed for a transient reason")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the task does not fail: {}",
            log_path.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = sluice.terminate();
    assert_eq!(status.code(), Some(1), "a stop after a failure exits 1");
    let log = std::fs::read_to_string(&log_path).expect("sluice log");
    assert!(
        log.contains("the transform chain cannot run"),
        "{}",
        log_path.display()
    );
    assert!(
        log.contains("CPU deadline") && log.contains("in init"),
        "{}",
        log_path.display()
    );
    let (stats, dead) = run.stats(&config).await;
    assert_eq!(
        stats.rows, 100,
        "nothing of the batch was written: {stats:?}"
    );
    assert_eq!(dead, 0, "no record is blamed for the chain");
}
for_each_database!(a_chain_that_cannot_restart_is_retried_not_blamed_on_records: sqlite = Sqlite);

/// The isolation search with a Python plugin (plugins/python/hostile): records on which it
/// spins cost one CPU deadline each and become dead letters; every other record lands once,
/// through the same `sluice run` path as a Rust plugin's.
async fn a_python_plugin_spinning_on_some_records_is_isolated(db: Backend) {
    const N: u64 = 300;
    let spins = |uid: u64| uid % 50 == 37;
    let plugin = sluice_transform::example_python_plugin("hostile")
        .unwrap_or_else(|e| panic!("building the Python hostile plugin: {e}"));
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let errors = format!("{{ policy: dlq, dlq: {{ table: {dlq} }} }}");
    let config = run.config(&unique("conn"), &errors, false, "");
    with_plugin_limited(
        &config,
        "py-spin",
        &plugin,
        "{ mode: loop, on: SPIN }",
        Some("{ timeout: 1s }"),
    );
    run.broker
        .produce_with(&run.topic, 0..N, |uid| {
            if spins(uid) {
                "SPIN".to_string()
            } else {
                format!("{{\"uid\":{uid},\"word\":\"w\"}}")
            }
        })
        .await;
    let spinning = (0..N).filter(|&u| spins(u)).count() as i64;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, dead) = run
        .wait_for(&config, N as i64 - spinning, spinning, 180)
        .await;
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    assert_eq!(stats.rows, N as i64 - spinning, "{stats:?}");
    assert_eq!(stats.duplicates(), 0, "{stats:?}");
    assert_eq!(dead, spinning, "one dead letter per spinning record");
}
for_each_database!(a_python_plugin_spinning_on_some_records_is_isolated: postgres = Postgres, sqlite = Sqlite);
