//! Rows the database refuses: found under savepoints (the probe), each record one dead
//! letter however many rows it made, deferred constraints checked at once.

use super::*;

/// A transform that makes two rows of every record: when the database refuses a record's
/// rows, the record is one dead letter, not two (two dead letters with one key would make
/// PostgreSQL refuse the whole batch).
async fn refused_record_with_two_rows_is_one_dead_letter(db: Backend) {
    const N: u64 = 300;
    let run = PoisonRun::new(db, 2).await;
    let dlq = unique("dead");
    let config = run.config(
        &unique("conn"),
        &format!("{{ policy: dlq, dlq: {{ table: {dlq} }} }}"),
        false,
        "",
    );
    with_hostile(&config, "twice", "{ mode: flood, count: \"2\" }");
    // Only the database refuses anything here: 30-character words.
    let refused = (0..N).filter(|u| u % 100 == 47).count() as i64;
    run.broker
        .produce_with(&run.topic, 0..N, |uid| {
            if uid % 100 == 47 {
                value(uid)
            } else {
                format!("{{\"uid\":{uid},\"word\":\"w\"}}")
            }
        })
        .await;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, dead) = run.wait_for(&config, N as i64 - refused, refused, 90).await;
    assert!(sluice.terminate().success());
    assert_eq!(
        (stats.rows, dead),
        (N as i64 - refused, refused),
        "{stats:?}"
    );
    assert_eq!(stats.duplicates(), 0);
}
for_each_database!(refused_record_with_two_rows_is_one_dead_letter);

fn row(uid: i64, word: &str, secret: &str) -> sluice::map::RowOp {
    use sluice::map::{RowOp, SqlValue};
    RowOp::Write(vec![
        SqlValue::Int(uid),
        SqlValue::Text(word.to_string()),
        SqlValue::Text(secret.to_string()),
    ])
}

/// The probe finds exactly the rows the database refuses, under savepoints, and keeps
/// nothing.
async fn refused_rows_are_found_and_nothing_is_kept(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let config = run.config(&unique("conn"), "{ policy: skip }", false, "");
    let sink = run.sink(&config).await;
    let long = "x".repeat(30);
    let ops = vec![
        row(1, "a", "s1"),
        row(2, &long, "s2"),
        row(3, "b", "s3"),
        row(4, &long, "s4"),
        row(5, "c", "s5"),
    ];
    let refused = sink
        .find_refused(&ops, &Default::default())
        .await
        .expect("probe");
    let indices: Vec<usize> = refused.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, vec![1, 3], "{refused:?}");
    assert!(refused.iter().all(|(_, message)| !message.is_empty()));
    assert_eq!(sequence_stats(&sink, "uid").await.expect("stats").rows, 0);
    sink.close().await;
}
for_each_database!(refused_rows_are_found_and_nothing_is_kept);

/// A deferred constraint fails only at COMMIT, which the probe never runs: it checks
/// constraints immediately, so the refused row is still found.
async fn deferred_constraints_are_checked_by_the_probe(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let pool = sqlx::PgPool::connect(&run.db.url).await.expect("connect");
    let ddl = format!(
        "ALTER TABLE {} ADD CONSTRAINT {}_secret UNIQUE (secret) DEFERRABLE INITIALLY DEFERRED",
        run.table, run.table
    );
    sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(&pool)
        .await
        .expect("alter");
    pool.close().await;
    let config = run.config(&unique("conn"), "{ policy: skip }", false, "");
    let sink = run.sink(&config).await;
    let ops = vec![
        row(1, "a", "same"),
        row(2, "b", "other"),
        row(3, "c", "same"),
    ];
    let refused = sink
        .find_refused(&ops, &Default::default())
        .await
        .expect("probe");
    assert_eq!(
        refused.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![2],
        "{refused:?}"
    );
    sink.close().await;
}
for_each_database!(deferred_constraints_are_checked_by_the_probe: postgres = Postgres);
