//! `sluice validate --connect` reaches what the file names and says which part fails: the
//! broker, the database, the table, the right to write it (PostgreSQL). Nothing changes.

use std::process::Command;

use crate::harness::{self, Broker, free_port, unique};

fn file(brokers: &str, url: &str, topic: &str, table: &str, create: bool) -> String {
    format!(
        "kafka: {{ brokers: \"{brokers}\" }}\nconnectors:\n  - name: reach\n    topics: [{topic}, {topic}_later]\n    sink:\n      url: \"{url}\"\n      table: {table}\n      mode: upsert\n      key: [id]\n      columns:\n        id: {{ from: /id, type: bigint }}\n      create_table: {create}\n"
    )
}

/// (exit code, stdout).
fn validate(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("connectors.yaml");
    std::fs::write(&path, text).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["validate", "--connect", "--config"])
        .arg(&path)
        .output()
        .expect("run sluice validate --connect");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

#[test]
fn validate_connect_says_which_part_fails() {
    harness::run_test(async {
        let broker = Broker::start();
        let topic = unique("reach");
        broker.create_topic(&topic, 3).await;
        let pg = harness::TestDb::new(harness::Backend::Postgres).url;
        let table = unique("reach").replace('-', "_");

        // Everything answers; the table is made at the first start; a topic not there yet
        // is said, not failed.
        let (code, out) = validate(&file(&broker.bootstrap, &pg, &topic, &table, true));
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains(&format!("reach: ok: kafka: 1 broker(s) answered; {topic}: 3 partition(s), {topic}_later: does not exist yet")), "{out}");
        assert!(out.contains("reach: ok: database: reached; table"), "{out}");
        assert!(out.contains("create_table makes it"), "{out}");

        // No table and no create_table: the table fails.
        let (code, out) = validate(&file(&broker.bootstrap, &pg, &topic, &table, false));
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains(&format!("reach: FAILED: database: table {table}")),
            "{out}"
        );

        // A table the user may read but not write.
        let role = unique("reader").replace('-', "_");
        // Grants on a table of `public` race other tests' grants on all of them.
        crate::cdc::postgres_grants(
            &pg,
            &[
                format!("CREATE TABLE {table} (id BIGINT PRIMARY KEY)"),
                format!("CREATE ROLE {role} LOGIN"),
                format!("GRANT SELECT ON {table} TO {role}"),
            ],
        )
        .await;
        let as_reader = pg.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
        let (code, out) = validate(&file(&broker.bootstrap, &as_reader, &topic, &table, false));
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains("may not insert into it (GRANT INSERT, UPDATE ON it)"),
            "{out}"
        );
        // With the rights: ok.
        crate::cdc::postgres_grants(&pg, &[format!("GRANT INSERT, UPDATE ON {table} TO {role}")])
            .await;
        let (code, out) = validate(&file(&broker.bootstrap, &as_reader, &topic, &table, false));
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("may be inserted into and updated"), "{out}");

        // A database that does not answer, and a broker that does not.
        let nothing = format!("127.0.0.1:{}", free_port());
        let (code, out) = validate(&file(
            &broker.bootstrap,
            &format!("postgres://postgres@{nothing}/test"),
            &topic,
            &table,
            true,
        ));
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains("reach: FAILED: database: cannot connect"),
            "{out}"
        );
        let (code, out) = validate(&file(&nothing, &pg, &topic, &table, true));
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains(&format!("reach: FAILED: kafka: no answer from {nothing}")),
            "{out}"
        );

        crate::cdc::postgres_grants(
            &pg,
            &[format!("DROP TABLE {table}"), format!("DROP ROLE {role}")],
        )
        .await;
    });
}
