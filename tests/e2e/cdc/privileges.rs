//! A table the database does not let sluice create (PostgreSQL 42501, MariaDB 1142): the
//! task fails for good, naming the privilege, and nothing is written; no record is
//! dead-lettered for it (it is not a record's fault). The connecting user may write
//! sluice's own tables, and may only read the schema (database) the template's tables go
//! to.

use std::time::Duration;

use sluice::supervisor::Supervisor;

use super::{execute, execute_grants};
use crate::harness::{self, Backend, Broker, TestDb, unique};

/// A Connect JSON value with its schema.
fn value(uid: u64) -> String {
    serde_json::json!({
        "schema": {"type": "struct", "optional": false, "fields": [
            {"field": "uid", "type": "int64", "optional": false},
            {"field": "word", "type": "string", "optional": true}
        ]},
        "payload": {"uid": uid, "word": format!("w{uid}")}
    })
    .to_string()
}

/// Makes a user that may write sluice's tables but only read `target`; returns its URL.
async fn user_without_create(db: &TestDb, user: &str, target: &str) -> String {
    match db.kind {
        Backend::Postgres => {
            execute_grants(
                db,
                &[
                    format!("CREATE ROLE {user} LOGIN"),
                    format!("GRANT CREATE, USAGE ON SCHEMA public TO {user}"),
                    format!("CREATE SCHEMA {target}"),
                    format!("GRANT USAGE ON SCHEMA {target} TO {user}"),
                    format!("GRANT ALL ON ALL TABLES IN SCHEMA public TO {user}"),
                ],
            )
            .await;
            format!("postgres://{user}@127.0.0.1:5432/test")
        }
        Backend::MariaDb => {
            execute(db, &format!("CREATE DATABASE {target}")).await;
            for host in ["%", "localhost", "127.0.0.1"] {
                for sql in [
                    format!("CREATE USER '{user}'@'{host}'"),
                    format!("GRANT ALL ON test.* TO '{user}'@'{host}'"),
                    format!("GRANT SELECT ON {target}.* TO '{user}'@'{host}'"),
                ] {
                    execute(db, &sql).await;
                }
            }
            format!("mysql://{user}@127.0.0.1:3306/test")
        }
        Backend::Sqlite => unreachable!("SQLite has no privileges"),
    }
}

/// Runs the file's one connector in this process until it, or each of its tasks, has
/// failed for good (at most 90 s), and returns what it showed then.
async fn run_until_failed(yaml: &str, broker: &Broker) -> sluice::supervisor::ConnectorView {
    let config = sluice::config::load_str(yaml, &|_| None).expect("a valid config");
    let supervisor = Supervisor::start(&config, &broker.bootstrap)
        .await
        .expect("start");
    tokio::time::timeout(Duration::from_secs(90), supervisor.all_failed())
        .await
        .expect("it fails for good");
    let view = supervisor.connectors()[0].view();
    supervisor.shutdown().await;
    view
}

async fn drop_user(db: &TestDb, user: &str, target: &str) {
    match db.kind {
        Backend::Postgres => {
            execute_grants(
                db,
                &[
                    format!("DROP SCHEMA {target} CASCADE"),
                    format!("DROP OWNED BY {user}"),
                    format!("DROP ROLE {user}"),
                ],
            )
            .await;
        }
        Backend::MariaDb => {
            execute(db, &format!("DROP DATABASE {target}")).await;
            for host in ["%", "localhost", "127.0.0.1"] {
                execute(db, &format!("DROP USER '{user}'@'{host}'")).await;
            }
        }
        Backend::Sqlite => {}
    }
}

async fn create_refused_fails_the_task(kind: Backend) {
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let topic = unique("np_topic");
    broker.create_topic(&topic, 1).await;
    harness::produce_values(&broker.bootstrap, &topic, 0..5, value, None).await;
    let user = unique("np_user");
    let target = unique("np_target");
    let url = user_without_create(&db, &user, &target).await;
    let connector = unique("np");
    let dead_letters = unique("np_dlq");
    let yaml = format!(
        r#"kafka:
  brokers: "{brokers}"
connectors:
  - name: {connector}
    topics: [{topic}]
    format: connect_json
    errors:
      policy: dlq
      dlq: {{ table: {dead_letters} }}
      retry: {{ initial: 100ms, max: 1s, max_elapsed: 5m }}
    sink:
      url: "{url}"
      table: "{{topic}}"
      schema: {target}
      mode: upsert
      key: [uid]
      create_table: true
"#,
        brokers = broker.bootstrap,
    );
    let task = run_until_failed(&yaml, &broker).await.tasks[0].clone();
    assert_eq!(task.state, "FAILED", "{task:?}");
    assert!(!task.transient, "{task:?}");
    let trace = task.trace.unwrap_or_default();
    assert!(
        trace.contains("refused the privilege") && trace.contains("create table"),
        "{trace}"
    );
    // No record was blamed: no dead letter, no offset moved.
    let letters = format!("SELECT COUNT(*) FROM {dead_letters}");
    let sql = sqlx::AssertSqlSafe(letters);
    let dead: i64 = with_pool!(&db, pool => sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&pool)
        .await
        .expect("count dead letters"));
    assert_eq!(dead, 0);
    assert_eq!(super::stored_offset(&db, &connector, &topic, 0).await, None);
    drop_user(&db, &user, &target).await;
}

#[test]
fn create_refused_fails_the_task_postgres() {
    harness::run_test(create_refused_fails_the_task(Backend::Postgres));
}

#[test]
fn create_refused_fails_the_task_mariadb() {
    harness::run_test(create_refused_fails_the_task(Backend::MariaDb));
}

/// A table the database does not let sluice read (PostgreSQL 42501 on the column check):
/// the connector fails naming the privilege, not a missing table.
async fn read_refused_names_the_privilege(kind: Backend) {
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let topic = unique("np_topic");
    broker.create_topic(&topic, 1).await;
    let user = unique("np_user");
    let target = unique("np_target");
    let url = user_without_create(&db, &user, &target).await;
    // Made by the administrator, unreadable by the user.
    let table = format!("{target}.words");
    execute(
        &db,
        &format!("CREATE TABLE {table} (uid BIGINT PRIMARY KEY, word TEXT)"),
    )
    .await;
    let connector = unique("np");
    let yaml = format!(
        r#"kafka:
  brokers: "{brokers}"
connectors:
  - name: {connector}
    topics: [{topic}]
    sink:
      url: "{url}"
      table: {table}
      mode: upsert
      key: [uid]
      columns:
        uid: {{ from: /uid, type: bigint }}
        word: {{ from: /word, type: text }}
"#,
        brokers = broker.bootstrap,
    );
    let view = run_until_failed(&yaml, &broker).await;
    let trace = view.trace.unwrap_or_default();
    assert!(
        trace.contains("refused the privilege") && !trace.contains("is missing"),
        "{trace}"
    );
    drop_user(&db, &user, &target).await;
}

#[test]
fn read_refused_names_the_privilege_postgres() {
    harness::run_test(read_refused_names_the_privilege(Backend::Postgres));
}
