//! The classification of database errors (`sluice::sink::classify`) against the real
//! servers: each class provoked for real, on PostgreSQL, MariaDB and SQLite. A transient
//! error is waited out, a refusal isolates the refused rows, anything else fails the task.

use std::time::Duration;

use sluice::sink::{ErrorClass, classify};
use sqlx::Connection;

use crate::harness::{self, Backend, TestDb, unique};

/// Runs `sql` on `conn`, which must succeed.
macro_rules! run {
    ($conn:expr, $sql:expr) => {
        sqlx::raw_sql(sqlx::AssertSqlSafe($sql.to_string()))
            .execute(&mut *$conn)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", $sql))
    };
}

/// With `b` holding row 2 of `table` in a transaction and `a` holding row 1: `a` asks for
/// row 2, then `b` for row 1. One of them deadlocks, and that is transient.
macro_rules! deadlock {
    ($a:expr, $b:expr, $table:expr, $what:expr) => {{
        let wants_two = format!("UPDATE {} SET word = 'x' WHERE id = 2", $table);
        let wants_one = format!("UPDATE {} SET word = 'y' WHERE id = 1", $table);
        let (first, second) = tokio::join!(
            sqlx::raw_sql(sqlx::AssertSqlSafe(wants_two)).execute(&mut *$a),
            async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                sqlx::raw_sql(sqlx::AssertSqlSafe(wants_one))
                    .execute(&mut *$b)
                    .await
            }
        );
        let error = first.err().or(second.err()).expect("one of them deadlocks");
        check(
            (classify(&error), error.to_string()),
            ErrorClass::Transient,
            $what,
        );
    }};
}

/// Runs `sql` on `conn` and returns the class of the error it must fail with.
macro_rules! class_of {
    ($conn:expr, $sql:expr) => {{
        let error = sqlx::raw_sql(sqlx::AssertSqlSafe($sql.to_string()))
            .execute(&mut *$conn)
            .await
            .expect_err(concat!("must fail: ", stringify!($sql)));
        (classify(&error), error.to_string())
    }};
}

fn check(found: (ErrorClass, String), expected: ErrorClass, what: &str) {
    assert_eq!(found.0, expected, "{what}: {}", found.1);
}

#[test]
fn postgres() {
    harness::run_test(async {
        let url = TestDb::new(Backend::Postgres).url;
        let table = unique("classes");
        let mut a = sqlx::PgConnection::connect(&url).await.expect("connect");
        let mut b = sqlx::PgConnection::connect(&url).await.expect("connect");
        let setup = format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, word TEXT CHECK (word <> 'bad')); \
             INSERT INTO {table} VALUES (1, 'a'), (2, 'b')"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(setup))
            .execute(&mut a)
            .await
            .expect("setup");

        // A standby after a failover answers every write with 25006.
        run!(&mut a, "BEGIN READ ONLY");
        let found = class_of!(&mut a, format!("INSERT INTO {table} VALUES (3, 'c')"));
        check(
            found,
            ErrorClass::Transient,
            "read-only transaction (25006)",
        );
        run!(&mut a, "ROLLBACK");

        // Lock not available (55P03): b waits on a row a holds, past lock_timeout.
        run!(
            &mut a,
            format!("BEGIN; UPDATE {table} SET word = 'x' WHERE id = 1")
        );
        let found = class_of!(
            &mut b,
            format!("SET lock_timeout = '200ms'; UPDATE {table} SET word = 'y' WHERE id = 1")
        );
        check(found, ErrorClass::Transient, "lock timeout (55P03)");

        // Deadlock (40P01): a holds 1 and wants 2, b holds 2 and wants 1.
        run!(&mut b, "SET lock_timeout = 0");
        run!(
            &mut b,
            format!("BEGIN; UPDATE {table} SET word = 'y' WHERE id = 2")
        );
        deadlock!(&mut a, &mut b, table, "deadlock (40P01)");
        run!(&mut a, "ROLLBACK");
        run!(&mut b, "ROLLBACK");

        // Statement timeout (57014).
        let found = class_of!(
            &mut a,
            "SET statement_timeout = '100ms'; SELECT pg_sleep(2)"
        );
        check(found, ErrorClass::Transient, "statement timeout (57014)");
        run!(&mut a, "SET statement_timeout = 0");

        // Refusals: a duplicate key, a CHECK, a value out of range.
        let found = class_of!(&mut a, format!("INSERT INTO {table} VALUES (1, 'again')"));
        // sqlx's text ends with PostgreSQL's own source line; sluice shows the message
        // without it, and without the detail of an integrity error (it quotes the row).
        assert!(found.1.contains(" at line "), "{}", found.1);
        check(found, ErrorClass::Refused, "unique violation (23505)");
        let error = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} VALUES (1, 'again')"
        )))
        .execute(&mut a)
        .await
        .expect_err("a duplicate key");
        let shown = sluice::sink::shown(&error).to_string();
        assert_eq!(
            shown,
            format!(
                "error returned from database: duplicate key value violates unique constraint \"{table}_pkey\""
            )
        );
        let found = class_of!(&mut a, format!("INSERT INTO {table} VALUES (9, 'bad')"));
        check(found, ErrorClass::Refused, "check violation (23514)");
        let found = class_of!(&mut a, "SELECT CAST(99999999999 AS INTEGER)");
        check(found, ErrorClass::Refused, "out of range (22003)");

        // Permanent: a table that is not there, a syntax error.
        let found = class_of!(&mut a, "SELECT * FROM sluice_no_such_table");
        check(found, ErrorClass::Permanent, "undefined table (42P01)");
        let found = class_of!(&mut a, "SELEKT 1");
        check(found, ErrorClass::Permanent, "syntax error (42601)");

        run!(&mut a, format!("DROP TABLE {table}"));
    });
}

#[test]
fn mariadb() {
    harness::run_test(async {
        let url = TestDb::new(Backend::MariaDb).url;
        let table = unique("classes");
        let mut a = sqlx::MySqlConnection::connect(&url).await.expect("connect");
        let mut b = sqlx::MySqlConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, word VARCHAR(4) CHECK (word <> 'bad'))"
        )))
        .execute(&mut a)
        .await
        .expect("create");
        run!(
            &mut a,
            format!("INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
        );

        // A read-only transaction (a replica after a failover answers alike): 1792.
        run!(&mut a, "START TRANSACTION READ ONLY");
        let found = class_of!(&mut a, format!("INSERT INTO {table} VALUES (3, 'c')"));
        check(found, ErrorClass::Transient, "read-only transaction (1792)");
        run!(&mut a, "ROLLBACK");

        // Lock wait timeout (1205).
        run!(&mut a, "START TRANSACTION");
        run!(
            &mut a,
            format!("UPDATE {table} SET word = 'x' WHERE id = 1")
        );
        run!(&mut b, "SET SESSION innodb_lock_wait_timeout = 1");
        let found = class_of!(
            &mut b,
            format!("UPDATE {table} SET word = 'y' WHERE id = 1")
        );
        check(found, ErrorClass::Transient, "lock wait timeout (1205)");

        // Deadlock (1213): a holds 1 and wants 2, b holds 2 and wants 1.
        run!(&mut b, "SET SESSION innodb_lock_wait_timeout = 20");
        run!(&mut b, "START TRANSACTION");
        run!(
            &mut b,
            format!("UPDATE {table} SET word = 'y' WHERE id = 2")
        );
        deadlock!(&mut a, &mut b, table, "deadlock (1213)");
        run!(&mut a, "ROLLBACK");
        run!(&mut b, "ROLLBACK");

        // MariaDB's statement time limit (1969).
        run!(&mut a, "SET SESSION max_statement_time = 0.1");
        let found = class_of!(&mut a, "SELECT SLEEP(2)");
        check(found, ErrorClass::Transient, "statement time limit (1969)");
        run!(&mut a, "SET SESSION max_statement_time = 0");

        // Refusals: a duplicate key, a CHECK, a value too long (strict mode).
        let found = class_of!(&mut a, format!("INSERT INTO {table} VALUES (1, 'z')"));
        check(found, ErrorClass::Refused, "duplicate key (1062)");
        let found = class_of!(&mut a, format!("INSERT INTO {table} VALUES (9, 'bad')"));
        check(found, ErrorClass::Refused, "check constraint (4025)");
        run!(&mut a, "SET SESSION sql_mode = 'STRICT_ALL_TABLES'");
        let found = class_of!(&mut a, format!("INSERT INTO {table} VALUES (8, 'toolong')"));
        check(found, ErrorClass::Refused, "data too long (1406)");

        // Permanent: a table that is not there, a syntax error.
        let found = class_of!(&mut a, "SELECT * FROM sluice_no_such_table");
        check(found, ErrorClass::Permanent, "no such table (1146)");
        let found = class_of!(&mut a, "SELEKT 1");
        check(found, ErrorClass::Permanent, "syntax error (1064)");

        run!(&mut a, format!("DROP TABLE {table}"));
    });
}

#[test]
fn sqlite() {
    harness::run_test(async {
        let db = TestDb::new(Backend::Sqlite);
        let options = |busy: Duration| {
            use std::str::FromStr;
            sqlx::sqlite::SqliteConnectOptions::from_str(&db.url)
                .expect("sqlite url")
                .create_if_missing(true)
                .busy_timeout(busy)
        };
        let mut a = sqlx::SqliteConnection::connect_with(&options(Duration::from_secs(5)))
            .await
            .expect("connect");
        let mut b = sqlx::SqliteConnection::connect_with(&options(Duration::ZERO))
            .await
            .expect("connect");
        run!(
            &mut a,
            "CREATE TABLE classes (id INTEGER PRIMARY KEY, word TEXT NOT NULL CHECK (word <> 'bad')); \
             INSERT INTO classes VALUES (1, 'a')"
        );

        // Busy (5): another connection holds the write lock.
        run!(&mut a, "BEGIN IMMEDIATE");
        let found = class_of!(&mut b, "BEGIN IMMEDIATE");
        check(found, ErrorClass::Transient, "busy (5)");
        run!(&mut a, "ROLLBACK");

        // Refusals: primary key, CHECK, NOT NULL (CONSTRAINT and its extended codes).
        let found = class_of!(&mut a, "INSERT INTO classes VALUES (1, 'again')");
        check(found, ErrorClass::Refused, "primary key (1555)");
        let found = class_of!(&mut a, "INSERT INTO classes VALUES (2, 'bad')");
        check(found, ErrorClass::Refused, "check (275)");
        let found = class_of!(&mut a, "INSERT INTO classes VALUES (3, NULL)");
        check(found, ErrorClass::Refused, "not null (1299)");

        // Permanent: a table that is not there.
        let found = class_of!(&mut a, "SELECT * FROM no_such_table");
        check(found, ErrorClass::Permanent, "no such table (1)");
    });
}
