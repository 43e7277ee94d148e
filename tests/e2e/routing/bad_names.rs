//! Records with no table a template can make: dead letters of class `table_name`, never a
//! stall.

use super::*;

/// Table names the database cannot take are dead letters (class `table_name`), never a
/// stall: with `table: "{topic}"`, a topic name longer than the database's longest table
/// name (PostgreSQL 63 bytes, MariaDB 64 characters; SQLite has no limit and writes it),
/// and topics `<p>.Orders` and `<p>.orders` (one table, names compared without case: the
/// topic seen second has no table); with `table_from`, a topic the pattern does not match.
/// The other topics land, and every topic's stored offset moves past all its records.
async fn bad_table_names_are_dead_letters_not_stalls(kind: Backend) {
    const N: u64 = 20;
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, q) = (unique("rt"), unique("rq"));
    let (by_topic, by_pattern) = (unique("route"), unique("route"));
    let dlq = unique("route_dlq");
    let fine = format!("{p}.fine");
    let (upper, lower) = (format!("{p}.Orders"), format!("{p}.orders"));
    // Kafka takes topic names up to 249 characters.
    let long = format!("{p}.{}", "l".repeat(110));
    let (keep, drop) = (format!("{q}.keep_one"), format!("{q}.drop_two"));
    let all = [&fine, &upper, &lower, &long, &keep, &drop];
    for topic in all {
        broker.create_topic(topic, 1).await;
        produce(&broker, topic, 0..N).await;
    }
    let config = write_config(
        dir.path(),
        &by_topic,
        &(kafka_yaml(&broker)
            + &json_connector(
                &by_topic,
                &pattern(&p),
                "table: \"{topic}\"",
                1000,
                &dlq,
                &db,
            )
            + &json_connector(
                &by_pattern,
                &pattern(&q),
                &format!("table_from: {{ topic: \"^{q}\\\\.keep_(.*)$\", to: \"{q}_{{1}}\" }}"),
                1000,
                &dlq,
                &db,
            )),
    );
    let sluice = SluiceProcess::start(&config);
    let n = N as i64;
    wait_for_offsets(
        &db,
        &by_topic,
        &[
            (fine.as_str(), n),
            (upper.as_str(), n),
            (lower.as_str(), n),
            (long.as_str(), n),
        ],
        60,
        &sluice,
    )
    .await;
    wait_for_offsets(
        &db,
        &by_pattern,
        &[(keep.as_str(), n), (drop.as_str(), n)],
        30,
        &sluice,
    )
    .await;

    let letters = letters(&db, &dlq).await;
    let mut failed: BTreeMap<(&str, &str), Vec<i64>> = BTreeMap::new();
    for (connector, topic, offset, class, message) in &letters {
        assert_eq!(
            class, "table_name",
            "{connector} {topic}@{offset}: {message}"
        );
        failed
            .entry((connector.as_str(), topic.as_str()))
            .or_default()
            .push(*offset);
        let expected = if topic == &long {
            match kind {
                Backend::Postgres => "63 at most",
                _ => "64 at most",
            }
        } else if topic == &drop {
            "does not match"
        } else {
            "both map to table"
        };
        assert!(message.contains(expected), "{topic}@{offset}: {message}");
    }
    // One of the two topics of one table is seen first and lands; the other does not.
    let loser = failed
        .keys()
        .map(|(_, topic)| *topic)
        .find(|t| *t == upper || *t == lower)
        .unwrap_or_else(|| panic!("no dead letters of {upper} or {lower}: {letters:?}"))
        .to_string();
    let winner = if loser == upper { &lower } else { &upper };
    let every: Vec<i64> = (0..n).collect();
    let mut expected = BTreeMap::from([
        ((by_topic.as_str(), loser.as_str()), every.clone()),
        ((by_pattern.as_str(), drop.as_str()), every.clone()),
    ]);
    if kind != Backend::Sqlite {
        expected.insert((by_topic.as_str(), long.as_str()), every.clone());
    }
    assert_eq!(failed, expected, "dead letters by connector and topic");

    assert_table_holds(&db, &by_topic, &fine, &fine, N).await;
    assert_table_holds(&db, &by_topic, winner, winner, N).await;
    let mut tables = BTreeSet::from([fine.clone(), winner.clone()]);
    if kind == Backend::Sqlite {
        assert_table_holds(&db, &by_topic, &long, &long, N).await;
        tables.insert(long.clone());
    }
    assert_eq!(
        tables_named_like(&db, &p).await,
        tables,
        "the tables of {p}.*"
    );
    let kept = format!("{q}_one");
    assert_table_holds(&db, &by_pattern, &kept, &keep, N).await;
    assert_eq!(tables_named_like(&db, &q).await, BTreeSet::from([kept]));
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(bad_table_names_are_dead_letters_not_stalls);

/// A table the database will not let sluice write fails its records alone (class
/// `table_name`, a dead letter here), and the other tables' rows go on: on PostgreSQL and
/// MariaDB a table of that name made by hand with other columns, on SQLite a name SQLite
/// keeps for itself (`sqlite_…`), which it refuses to create.
async fn a_table_the_database_refuses_fails_its_records_alone(kind: Backend) {
    const N: u64 = 20;
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let dir = tempfile::tempdir().expect("temp dir");
    let p = unique("rt");
    let tag = unique("t");
    let name = unique("route");
    let dlq = unique("route_dlq");
    let clash_name = match kind {
        Backend::Sqlite => "sqlite",
        _ => "clash",
    };
    let (fine, clash) = (format!("{p}.fine"), format!("{p}.{clash_name}"));
    let clash_table = format!("{clash_name}_{tag}");
    if kind != Backend::Sqlite {
        crate::cdc::execute(&db, &format!("CREATE TABLE {clash_table} (other INT)")).await;
    }
    for topic in [&fine, &clash] {
        broker.create_topic(topic, 1).await;
        produce(&broker, topic, 0..N).await;
    }
    let config = write_config(
        dir.path(),
        &name,
        &(kafka_yaml(&broker)
            + &json_connector(
                &name,
                &pattern(&p),
                &format!("table_from: {{ topic: \"^{p}\\\\.(.*)$\", to: \"{{1}}_{tag}\" }}"),
                7,
                &dlq,
                &db,
            )),
    );
    let sluice = SluiceProcess::start(&config);
    let n = N as i64;
    wait_for_offsets(
        &db,
        &name,
        &[(fine.as_str(), n), (clash.as_str(), n)],
        60,
        &sluice,
    )
    .await;
    let letters = letters(&db, &dlq).await;
    let offsets: Vec<i64> = letters.iter().map(|l| l.2).collect();
    assert_eq!(offsets, (0..n).collect::<Vec<_>>(), "{letters:?}");
    for (_, topic, offset, class, message) in &letters {
        assert_eq!(topic, &clash, "{topic}@{offset}: {message}");
        assert_eq!(class, "table_name", "{topic}@{offset}: {message}");
        assert!(
            message.contains(&format!("table {clash_table} cannot be written")),
            "{topic}@{offset}: {message}"
        );
    }
    assert_table_holds(&db, &name, &format!("fine_{tag}"), &fine, N).await;
    if kind != Backend::Sqlite {
        crate::cdc::execute(&db, &format!("DROP TABLE {clash_table}")).await;
    }
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(a_table_the_database_refuses_fails_its_records_alone);
