//! Debezium change events routed by `{source.table}`.

use super::*;

/// A change event of Debezium's PostgreSQL connector (plain JSON, no schema wrapper) of
/// the source table `table`; `table: None` leaves the source block without its table.
fn change(table: Option<&str>, op: &str, lsn: i64, before: Value, after: Value) -> String {
    let mut source = json!({
        "version": "2.7.0.Final", "connector": "postgresql", "name": "shop",
        "ts_ms": 1_700_000_000_000i64 + lsn, "snapshot": "false", "db": "shop",
        "sequence": format!("[null,\"{lsn}\"]"), "schema": "public",
        "txId": 500 + lsn, "lsn": lsn, "xmin": null
    });
    if let Some(table) = table {
        source["table"] = json!(table);
    }
    json!({
        "before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000i64 + lsn,
        "source": source
    })
    .to_string()
}

/// Debezium change events of the source tables `customers` and `orders` (each in its topic,
/// as Debezium writes them), `table: "<tag>_{source.table}"`: creates, updates, deletes with
/// their tombstones, a key created again after its delete. Each table ends at its history's
/// final state; an event whose source block names no table is a `table_name` dead letter.
async fn debezium_events_route_by_source_table(kind: Backend) {
    let broker = Broker::start();
    let db = TestDb::new(kind);
    let dir = tempfile::tempdir().expect("temp dir");
    let p = unique("rt");
    let tag = unique("cdc");
    let connector = unique("route");
    let dlq = unique("route_dlq");
    let (customers, orders) = (format!("{p}.customers"), format!("{p}.orders"));
    for topic in [&customers, &orders] {
        broker.create_topic(topic, 1).await;
    }
    let key = |id: i64| json!({ "id": id }).to_string();
    let row = |id: i64, name: &str| json!({"id": id, "name": name});
    let c = |table: &str, op: &str, lsn: i64, before: Value, after: Value| {
        Some(change(Some(table), op, lsn, before, after))
    };
    let customer_history = vec![
        (key(1), c("customers", "c", 10, Value::Null, row(1, "ann"))),
        (key(2), c("customers", "c", 11, Value::Null, row(2, "bob"))),
        (key(3), c("customers", "c", 12, Value::Null, row(3, "cy"))),
        (
            key(1),
            c("customers", "u", 13, row(1, "ann"), row(1, "anna")),
        ),
        (key(2), c("customers", "d", 14, row(2, "bob"), Value::Null)),
        (key(2), None),
        (
            key(3),
            c("customers", "u", 15, row(3, "cy"), row(3, "cyrus")),
        ),
        (key(4), c("customers", "c", 16, Value::Null, row(4, "dee"))),
    ];
    let order_history = vec![
        (key(10), c("orders", "c", 20, Value::Null, row(10, "book"))),
        (key(11), c("orders", "c", 21, Value::Null, row(11, "pen"))),
        (
            key(10),
            c("orders", "u", 22, row(10, "book"), row(10, "book x2")),
        ),
        (key(11), c("orders", "d", 23, row(11, "pen"), Value::Null)),
        (key(11), None),
        (key(12), c("orders", "c", 24, Value::Null, row(12, "ink"))),
        // Offset 6: a source block without its table.
        (
            key(13),
            Some(change(None, "c", 25, Value::Null, row(13, "lost"))),
        ),
        (key(12), c("orders", "d", 26, row(12, "ink"), Value::Null)),
        (key(12), None),
        (
            key(12),
            c("orders", "c", 27, Value::Null, row(12, "ink again")),
        ),
    ];
    produce_in_order(&broker, &customers, &customer_history).await;
    produce_in_order(&broker, &orders, &order_history).await;
    let yaml = format!(
        r#"  - name: {connector}
    topics_regex: "{regex}"
    group: {connector}
    envelope: debezium
    batch: {{ max_records: 100, linger: 20ms }}
    errors:
      policy: dlq
      dlq: {{ table: {dlq} }}
      retry: {{ initial: 100ms, max: 1s, max_elapsed: 5m }}
    sink:
      url: "{url}"
      table: "{tag}_{{source.table}}"
      mode: upsert
      key: [id]
      columns:
        id: {{ from: /id, type: bigint }}
        name: {{ from: /name, type: text }}
      create_table: true
"#,
        regex = pattern(&p),
        url = db.url,
    );
    let config = write_config(dir.path(), &connector, &(kafka_yaml(&broker) + &yaml));
    let sluice = SluiceProcess::start(&config);
    let want = [
        (customers.as_str(), customer_history.len() as i64),
        (orders.as_str(), order_history.len() as i64),
    ];
    wait_for_offsets(&db, &connector, &want, 60, &sluice).await;
    let columns = [("id", "bigint"), ("name", "text")];
    let rows = |pairs: &[(i64, &str)]| -> Vec<Vec<Option<String>>> {
        pairs
            .iter()
            .map(|(id, name)| vec![Some(id.to_string()), Some(name.to_string())])
            .collect()
    };
    let (customer_table, order_table) = (format!("{tag}_customers"), format!("{tag}_orders"));
    assert_eq!(
        read_rows(&db, &quote(&db, &customer_table), &columns).await,
        rows(&[(1, "anna"), (3, "cyrus"), (4, "dee")]),
        "table {customer_table}"
    );
    assert_eq!(
        read_rows(&db, &quote(&db, &order_table), &columns).await,
        rows(&[(10, "book x2"), (12, "ink again")]),
        "table {order_table}"
    );
    assert_eq!(
        tables_named_like(&db, &tag).await,
        BTreeSet::from([customer_table, order_table])
    );
    let letters = letters(&db, &dlq).await;
    let found: Vec<(&str, i64, &str)> = letters
        .iter()
        .map(|l| (l.1.as_str(), l.2, l.3.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![(orders.as_str(), 6, "table_name")],
        "{letters:?}"
    );
    assert!(letters[0].4.contains("source.table"), "{letters:?}");
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(debezium_events_route_by_source_table: sqlite = Sqlite);
