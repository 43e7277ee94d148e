//! `topics_regex` and `{topic}`: every matching topic in its own table, one created mid-run
//! too, and nothing else.

use super::*;

/// `topics_regex` with `table: "{topic}"`: the topics `<p>.a` and `<p>.b` (with records
/// before sluice starts) and `<p>.c` (created while it runs) each land in the table of
/// their own name, dots kept, each record once; topics the pattern does not match (another
/// prefix, the prefix not at the start, `.` taken literally) make no table. The stored
/// offsets are each partition's record count, and `sluice offsets show` lists the three
/// topics.
async fn pattern_picks_up_every_matching_topic_and_writes_each_table(kind: Backend) {
    const N: u64 = 30;
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let dir = tempfile::tempdir().expect("temp dir");
    let p = unique("rt");
    let connector = unique("route");
    let dlq = unique("route_dlq");
    let [a, b, c] = [format!("{p}.a"), format!("{p}.b"), format!("{p}.c")];
    // Not matched by ^<p>\..*: another prefix, the prefix inside the name, `X` for the `.`.
    let others = [
        format!("{}.z", unique("rx")),
        format!("x{p}.a"),
        format!("{p}Xa"),
    ];
    for topic in [&a, &b].into_iter().chain(&others) {
        broker.create_topic(topic, 2).await;
        produce(&broker, topic, 0..N).await;
    }
    let config = write_config(
        dir.path(),
        &connector,
        &(kafka_yaml(&broker)
            + &json_connector(
                &connector,
                &pattern(&p),
                "table: \"{topic}\"",
                1000,
                &dlq,
                &db,
            )),
    );
    let sluice = SluiceProcess::start(&config);
    wait_for_rows(
        &db,
        &[(a.as_str(), N as i64), (b.as_str(), N as i64)],
        60,
        &sluice,
    )
    .await;

    // A topic created while sluice runs is found at a metadata refresh.
    broker.create_topic(&c, 2).await;
    produce(&broker, &c, 0..N).await;
    wait_for_rows(
        &db,
        &[
            (a.as_str(), N as i64),
            (b.as_str(), N as i64),
            (c.as_str(), N as i64),
        ],
        60,
        &sluice,
    )
    .await;
    for topic in [&a, &b, &c] {
        assert_table_holds(&db, &connector, topic, topic, N).await;
    }
    assert_eq!(
        tables_named_like(&db, &p).await,
        BTreeSet::from([a.clone(), b.clone(), c.clone()]),
        "the tables of the run (a table of a topic the pattern does not match?)"
    );
    assert_eq!(
        count(&db, &others[0]).await,
        None,
        "a table for {}",
        others[0]
    );
    assert_eq!(
        letters(&db, &dlq).await,
        Vec::<Letter>::new(),
        "dead letters"
    );
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");

    let shown = offsets_shown(&config, &connector);
    let topics: BTreeSet<&str> = shown.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(
        topics,
        BTreeSet::from([a.as_str(), b.as_str(), c.as_str()]),
        "{shown:?}"
    );
    for (topic, partition, next) in &shown {
        assert_eq!(
            stored_offset(&db, &connector, topic, *partition).await,
            Some(*next),
            "sluice offsets show: {topic}/{partition}"
        );
    }
    let total: i64 = shown.iter().map(|(_, _, next)| next).sum();
    assert_eq!(total, 3 * N as i64, "{shown:?}");
}
for_each_database!(pattern_picks_up_every_matching_topic_and_writes_each_table: mariadb = MariaDb);

/// `sluice dry-run` of a `topics_regex` connector without `--topic` has no first topic to
/// read: it says to name one (exit 2) instead of reading a topic named "".
#[test]
fn a_dry_run_of_a_pattern_asks_for_a_topic() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        "dry",
        &format!(
            "kafka: {{ brokers: \"127.0.0.1:1\" }}\nconnectors:\n  - name: dry\n    topics_regex: \"^shop\\\\..*\"\n    sink:\n      url: \"sqlite://{}\"\n      table: \"{{topic}}\"\n      columns: {{ id: {{ from: /id, type: bigint }} }}\n",
            dir.path().join("dry.db").display()
        ),
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["dry-run", "--connector", "dry", "--config"])
        .arg(&config)
        .output()
        .expect("run sluice dry-run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("reads the topics matching ^shop\\..*: name one with --topic"),
        "{stderr}"
    );
}
