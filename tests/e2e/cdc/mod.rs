//! Change-data-capture streams (`envelope: debezium | opencdc`, `sink.version`), shaped as
//! Debezium and Conduit write them, replicated into each database.
//!
//! - [`events`]: a scripted Debezium history (creates, updates, a delete and its
//!   tombstone, a key created again, changes that arrive late), a replay from offset 0
//!   that changes nothing, a truncate under each `on_truncate`, values that are not
//!   change events; Conduit's OpenCDC records with a version from their metadata.
//! - [`history`]: a generated history of thousands of changes in 5 tables (`history.py`),
//!   through Connect JSON as Debezium's PostgreSQL connector writes it and through Avro as
//!   its MySQL connector does, by two processes while one is SIGKILLed five times: each
//!   table ends equal to the history's final state, and a replay changes nothing.
//! - [`derived`]: columns derived from the row's schema as it changes mid-stream, under
//!   `evolve: add_columns` and `evolve: none`.
//! - [`evolve`]: `evolve: [widen, relax]` on a table sluice did not create, each change
//!   recorded; two processes racing to the same widening make it once.
//! - [`privileges`]: a table the database does not let sluice create fails the task, not
//!   its records.
//! - [`property`]: generated histories over a few keys, delivered out of order, some events
//!   twice, in batches of any size, straight through the mapper and the sink: each table
//!   ends at the history's final state (proptest shrinks a failing case).

mod derived;
mod events;
mod evolve;
mod history;
mod privileges;
mod property;
mod verify;

use std::time::{Duration, Instant};

use crate::harness::{Backend, TestDb};

/// Runs `sql` in `db` (a statement beside the pipeline: a change by hand, a reset).
pub(crate) async fn execute(db: &TestDb, sql: &str) {
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    with_pool!(db, pool => {
        sqlx::query(sql).execute(&pool).await.expect("execute");
    });
}

/// Runs `statements` that change roles and privileges, in order. On PostgreSQL they run in
/// one transaction that first takes an advisory lock shared by every test that grants:
/// two sessions that GRANT on the same object at once (every such test grants on schema
/// `public`) fail with "tuple concurrently updated" (reproduced with two psql loops). A
/// grant on every table of `public` can still meet another test's ALTER of one of them,
/// which fails the same way: that transaction is run again, up to 20 times.
/// A grant on every table of `public` belongs last: its rows of the catalog stay locked
/// until the transaction ends, and another test's `ALTER` of one of those tables waits.
pub(crate) async fn execute_grants(db: &TestDb, statements: &[String]) {
    if db.kind != Backend::Postgres {
        for sql in statements {
            execute(db, sql).await;
        }
        return;
    }
    postgres_grants(&db.url, statements).await;
}

/// [`execute_grants`] on the PostgreSQL database at `url`.
pub(crate) async fn postgres_grants(url: &str, statements: &[String]) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result: Result<(), sqlx::Error> = async {
            let mut tx = conn.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext('sluice-tests-grants'))")
                .execute(&mut *tx)
                .await?;
            for sql in statements {
                let sql = sqlx::AssertSqlSafe(sql.clone());
                sqlx::query(sql).execute(&mut *tx).await?;
            }
            tx.commit().await
        }
        .await;
        match result {
            Ok(()) => break,
            Err(e) if attempt < 20 && e.to_string().contains("tuple concurrently updated") => {
                tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
            }
            Err(e) => panic!("{statements:?}: {e}"),
        }
    }
    let _ = conn.close().await;
}

/// The stored next offset of a connector's partition (None: none stored yet).
pub(crate) async fn stored_offset(
    db: &TestDb,
    connector: &str,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let quote = |s: &str| s.replace('\'', "''");
    let p = match db.kind {
        Backend::MariaDb => "`partition`",
        _ => "\"partition\"",
    };
    let sql = format!(
        "SELECT next_offset FROM sluice_offsets WHERE connector = '{}' AND topic = '{}' AND {p} = {partition}",
        quote(connector),
        quote(topic)
    );
    let sql = sqlx::AssertSqlSafe(sql);
    with_pool!(db, pool => sqlx::query_scalar::<_, i64>(sql)
        .fetch_optional(&pool)
        .await
        .ok()
        .flatten())
}

/// Waits until the connector's stored offset of `partition` is `next` (at most `seconds`).
pub(crate) async fn wait_for_offset(
    db: &TestDb,
    connector: &str,
    topic: &str,
    partition: i32,
    next: i64,
    seconds: u64,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let stored = stored_offset(db, connector, topic, partition).await;
        if stored == Some(next) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {seconds} s the stored offset of {topic}/{partition} is {stored:?}, not {next}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
