//! The gate of `sink.transactions: source`, record by record.

use super::debezium::transaction_key;
use super::*;
use crate::record::Record;

const TX: &str = "db.transaction";

fn topics() -> Vec<String> {
    ["db.public.orders", "db.public.lines", TX]
        .map(String::from)
        .to_vec()
}

fn event(topic: &str, offset: i64, tx: Option<(&str, u64)>) -> Incoming {
    let value = match tx {
        Some((id, order)) => format!(
            r#"{{"op":"c","after":{{"id":{offset}}},"transaction":{{"id":"{id}","total_order":{order},"data_collection_order":1}}}}"#
        ),
        None => format!(r#"{{"op":"r","after":{{"id":{offset}}},"transaction":null}}"#),
    };
    Record::from_value(topic, 0, offset, value).into()
}

fn begin(offset: i64, id: &str) -> Incoming {
    Record::from_value(
        TX,
        0,
        offset,
        format!(r#"{{"status":"BEGIN","id":"{id}","event_count":null,"data_collections":null}}"#),
    )
    .into()
}

fn end(offset: i64, id: &str, counts: &[(&str, u64)]) -> Incoming {
    let collections: Vec<String> = counts
        .iter()
        .map(|(c, n)| format!(r#"{{"data_collection":"{c}","event_count":{n}}}"#))
        .collect();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    // Connect's envelope, as the JSON converter writes it with schemas.
    Record::from_value(
        TX,
        0,
        offset,
        format!(
            r#"{{"schema":{{"type":"struct"}},"payload":{{"status":"END","id":"{id}","event_count":{total},"data_collections":[{}]}}}}"#,
            collections.join(",")
        ),
    )
    .into()
}

fn coordinates(units: &[Vec<Incoming>]) -> Vec<Vec<(String, i64)>> {
    units
        .iter()
        .map(|u| {
            u.iter()
                .map(|i| (i.record.topic.clone(), i.record.offset))
                .collect()
        })
        .collect()
}

fn gate() -> SourceTransactions {
    SourceTransactions::new(TX, &topics())
}

#[test]
fn a_transaction_goes_whole_once_its_end_and_every_event_arrived_in_any_order() {
    let mut gate = gate();
    // The END arrives first, then the events, the lines' before the order's.
    gate.offer(begin(0, "t1")).unwrap();
    gate.offer(end(1, "t1", &[("public.orders", 1), ("public.lines", 2)]))
        .unwrap();
    assert_eq!(
        coordinates(&gate.release().unwrap()),
        [[(TX.to_string(), 0)]],
        "BEGIN goes alone, the transaction waits"
    );
    gate.offer(event("db.public.lines", 0, Some(("t1", 2))))
        .unwrap();
    gate.offer(event("db.public.lines", 1, Some(("t1", 3))))
        .unwrap();
    assert!(gate.release().unwrap().is_empty());
    assert!(gate.waited().is_some());
    assert!(
        gate.waiting_for()
            .contains("1 of 1 events of public.orders")
    );
    gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    let units = gate.release().unwrap();
    assert_eq!(
        coordinates(&units),
        [[
            ("db.public.orders".to_string(), 0),
            ("db.public.lines".to_string(), 0),
            ("db.public.lines".to_string(), 1),
            (TX.to_string(), 1)
        ]],
        "one unit, in total_order, END last"
    );
    assert!(gate.is_empty());
    assert_eq!(gate.bytes, 0);
    assert!(gate.waited().is_none());
}

#[test]
fn postgres_ids_match_by_xid_whatever_lsn_each_record_carries() {
    // Debezium 3.6's PostgreSQL connector, as measured: each record's id ends with the
    // LSN it last saw.
    let postgres = |topic: &str, id: &str, order: u64| -> Incoming {
        Record::from_value(
            topic,
            0,
            0,
            format!(
                r#"{{"op":"c","source":{{"connector":"postgresql"}},"transaction":{{"id":"{id}","total_order":{order}}}}}"#
            ),
        )
        .into()
    };
    let mut gate = gate();
    gate.offer(begin(0, "730:26524000")).unwrap();
    gate.offer(postgres("db.public.orders", "730:26524168", 1))
        .unwrap();
    gate.offer(postgres("db.public.lines", "730:26524304", 2))
        .unwrap();
    gate.offer(end(
        1,
        "730:26525128",
        &[("public.orders", 1), ("public.lines", 1)],
    ))
    .unwrap();
    let units = gate.release().unwrap();
    assert_eq!(units.len(), 2, "BEGIN alone, then the whole transaction");
    assert_eq!(units[1].len(), 3);
    assert!(gate.is_empty());
    // Another connector's ids are taken whole, even `<digits>:<digits>` ones
    // (Informix's `<txid>:<commit lsn>`, whose txids are reused).
    let mut other = SourceTransactions::new(TX, &topics());
    other
        .offer(event("db.public.lines", 0, Some(("5:1000", 1))))
        .unwrap();
    other
        .offer(end(0, "5:2000", &[("public.lines", 1)]))
        .unwrap();
    assert!(
        other.release().unwrap().is_empty(),
        "5:1000 and 5:2000 are two transactions"
    );
    // And one such transaction, its events and END under one id, goes whole.
    let mut informix = SourceTransactions::new(TX, &topics());
    informix
        .offer(event("db.public.lines", 0, Some(("5:2000", 1))))
        .unwrap();
    informix
        .offer(end(0, "5:2000", &[("public.lines", 1)]))
        .unwrap();
    let units = informix.release().unwrap();
    assert_eq!(coordinates(&units).len(), 1);
    assert_eq!(units[0].len(), 2, "the event and its END");
    // Ids that are not `<digits>:<digits>` are taken whole: two GTIDs of one server
    // are two transactions.
    assert_eq!(transaction_key("730:26525128"), "730");
    assert_eq!(
        transaction_key("3e11fa47-71ca-11e1-9e33-c80aa9429562:23"),
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
    );
    assert_eq!(
        transaction_key("mysql-bin.000003:154"),
        "mysql-bin.000003:154"
    );
    assert_eq!(transaction_key("25:3:7"), "25:3:7");
    assert_eq!(transaction_key("t1"), "t1");
}

#[test]
fn records_without_a_transaction_pass_once_first_in_their_partition() {
    let mut gate = gate();
    gate.offer(event("db.public.orders", 0, None)).unwrap();
    gate.offer(event("db.public.orders", 1, Some(("t1", 1))))
        .unwrap();
    // A tombstone behind the held event waits for it.
    let mut tombstone = Record::from_value("db.public.orders", 0, 2, "");
    tombstone.value = None;
    gate.offer(tombstone.into()).unwrap();
    assert_eq!(
        coordinates(&gate.release().unwrap()),
        [[("db.public.orders".to_string(), 0)]]
    );
    gate.offer(end(0, "t1", &[("public.orders", 1)])).unwrap();
    assert_eq!(
        coordinates(&gate.release().unwrap()),
        [
            vec![("db.public.orders".to_string(), 1), (TX.to_string(), 0)],
            vec![("db.public.orders".to_string(), 2)]
        ]
    );
}

#[test]
fn a_tombstone_between_a_transactions_deletes_goes_with_them() {
    let mut gate = gate();
    let tombstone = |offset| {
        let mut record = Record::from_value("db.public.lines", 0, offset, "");
        record.value = None;
        Incoming::from(record)
    };
    gate.offer(event("db.public.lines", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(tombstone(1)).unwrap();
    gate.offer(event("db.public.lines", 2, Some(("t1", 2))))
        .unwrap();
    gate.offer(tombstone(3)).unwrap();
    gate.offer(event("db.public.orders", 0, Some(("t1", 3))))
        .unwrap();
    gate.offer(end(0, "t1", &[("public.lines", 2), ("public.orders", 1)]))
        .unwrap();
    let lines = |o: i64| ("db.public.lines".to_string(), o);
    assert_eq!(
        coordinates(&gate.release().unwrap()),
        [
            vec![
                lines(0),
                lines(1),
                lines(2),
                ("db.public.orders".to_string(), 0),
                (TX.to_string(), 0)
            ],
            vec![lines(3)]
        ],
        "the tombstone between goes with the transaction, the one after alone"
    );
    assert!(gate.is_empty());
}

#[test]
fn events_debezium_sends_again_pass_alone_once_their_transaction_is_applied() {
    let mut gate = gate();
    // t1's two lines, then Debezium's worker crashed and sent them and the END again.
    gate.offer(event("db.public.lines", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(event("db.public.lines", 1, Some(("t1", 2))))
        .unwrap();
    gate.offer(event("db.public.lines", 2, Some(("t1", 1))))
        .unwrap();
    gate.offer(event("db.public.lines", 3, Some(("t1", 2))))
        .unwrap();
    gate.offer(end(0, "t1", &[("public.lines", 2)])).unwrap();
    gate.offer(end(1, "t1", &[("public.lines", 2)])).unwrap();
    let lines = |o: i64| ("db.public.lines".to_string(), o);
    assert_eq!(
        coordinates(&gate.release().unwrap()),
        [
            vec![lines(0), lines(2), lines(1), lines(3), (TX.to_string(), 0)],
            vec![(TX.to_string(), 1)],
        ],
        "the copies first in the partition go with the END, in total_order; the second END alone"
    );
    // A copy arriving after it went passes alone too.
    gate.offer(event("db.public.lines", 4, Some(("t1", 1))))
        .unwrap();
    assert_eq!(coordinates(&gate.release().unwrap()), [[lines(4)]]);
    assert!(gate.is_empty());
}

#[test]
fn a_copy_never_stands_in_for_an_event_that_has_not_arrived() {
    // The lines table on two partitions: t1 has one line on each. Debezium sent the
    // first again before the second arrived.
    let mut gate = gate();
    let on = |partition: i32, offset: i64, order: u64| {
        let mut incoming = event("db.public.lines", offset, Some(("t1", order)));
        incoming.record.partition = partition;
        incoming
    };
    gate.offer(on(0, 0, 1)).unwrap();
    gate.offer(on(0, 1, 1)).unwrap();
    gate.offer(end(0, "t1", &[("public.lines", 2)])).unwrap();
    assert!(
        gate.release().unwrap().is_empty(),
        "one of two events arrived"
    );
    gate.offer(on(1, 0, 2)).unwrap();
    let units = gate.release().unwrap();
    assert_eq!(units.len(), 1);
    assert_eq!(units[0].len(), 4, "both lines, the copy and the END");
    assert!(gate.is_empty());
}

#[test]
fn what_was_released_is_held_again_when_read_again_after_a_clear() {
    // t1 went to the buffer, then a revocation dropped everything: read again, it must
    // go whole again, not record by record.
    let mut gate = gate();
    gate.offer(event("db.public.lines", 0, Some(("t1", 2))))
        .unwrap();
    gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
        .unwrap();
    assert_eq!(gate.release().unwrap().len(), 1);
    gate.clear();
    gate.offer(event("db.public.lines", 0, Some(("t1", 2))))
        .unwrap();
    assert!(
        gate.release().unwrap().is_empty(),
        "the line waits for its order and END"
    );
    gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
        .unwrap();
    let units = gate.release().unwrap();
    assert_eq!(coordinates(&units).len(), 1);
    assert_eq!(
        coordinates(&units)[0][0],
        ("db.public.orders".to_string(), 0),
        "the order before its line"
    );
}

#[test]
fn an_end_that_counts_none_of_the_tables_whose_events_arrived_fails() {
    let mut gate = gate();
    // Topics renamed by a routing SMT: the event comes on a topic Debezium did not name.
    gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(end(0, "t1", &[("public.renamed", 1)])).unwrap();
    let error = gate.release().unwrap_err().to_string();
    assert!(error.contains("counts no table"), "{error}");
}

#[test]
fn a_later_transaction_waits_for_the_earlier_one_sharing_its_partition() {
    let mut gate = gate();
    gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(event("db.public.orders", 1, Some(("t2", 1))))
        .unwrap();
    gate.offer(event("db.public.lines", 0, Some(("t2", 2))))
        .unwrap();
    gate.offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
        .unwrap();
    gate.offer(end(1, "t2", &[("public.orders", 1), ("public.lines", 1)]))
        .unwrap();
    // t1 still misses its line; t2 is whole but comes after t1 everywhere.
    assert!(gate.release().unwrap().is_empty());
    assert!(gate.waited().is_some(), "stuck");
    let why = gate.waiting_for();
    assert!(
        why.contains("transaction t1, missing 1 of 1 events of public.lines"),
        "{why}"
    );
    // t1's line arrives behind t2's in the lines partition? It cannot: a partition keeps
    // the source's commit order. It arrives first.
    let mut gate2 = SourceTransactions::new(TX, &topics());
    gate2
        .offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    gate2
        .offer(event("db.public.lines", 0, Some(("t1", 2))))
        .unwrap();
    gate2
        .offer(event("db.public.orders", 1, Some(("t2", 1))))
        .unwrap();
    gate2
        .offer(end(0, "t1", &[("public.orders", 1), ("public.lines", 1)]))
        .unwrap();
    gate2
        .offer(end(1, "t2", &[("public.orders", 1), ("public.lines", 1)]))
        .unwrap();
    assert_eq!(
        gate2.release().unwrap().len(),
        1,
        "t1 goes; t2 waits for its line"
    );
    gate2
        .offer(event("db.public.lines", 1, Some(("t2", 2))))
        .unwrap();
    assert_eq!(
        coordinates(&gate2.release().unwrap()),
        [[
            ("db.public.orders".to_string(), 1),
            ("db.public.lines".to_string(), 1),
            (TX.to_string(), 1)
        ]]
    );
}

#[test]
fn tables_the_connector_does_not_read_are_not_waited_for() {
    let mut gate = gate();
    gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(end(0, "t1", &[("public.orders", 1), ("public.audit", 5)]))
        .unwrap();
    assert_eq!(gate.release().unwrap().len(), 1);
    // A transaction of other tables only: its END goes alone.
    gate.offer(end(1, "t2", &[("public.audit", 1)])).unwrap();
    assert_eq!(
        coordinates(&gate.release().unwrap()),
        [[(TX.to_string(), 1)]]
    );
}

#[test]
fn a_transaction_past_the_limit_fails_instead_of_splitting() {
    let mut gate = SourceTransactions::with_limit(TX, &topics(), 300);
    let mut failed = None;
    for offset in 0..10 {
        if let Err(e) = gate.offer(event(
            "db.public.orders",
            offset,
            Some(("big", offset as u64)),
        )) {
            failed = Some(e);
            break;
        }
    }
    let message = failed.expect("past the limit").to_string();
    assert!(message.contains("past the limit of 300 bytes"), "{message}");
    assert!(message.contains("transaction big"), "{message}");
}

#[test]
fn a_record_on_the_transaction_topic_that_is_not_one_fails() {
    let mut gate = gate();
    let error = gate
        .offer(Record::from_value(TX, 0, 7, r#"{"status":"COMMIT","id":"x"}"#).into())
        .unwrap_err();
    assert!(error.to_string().contains("offset 7"), "{error}");
    assert!(
        gate.offer(Record::from_value(TX, 0, 8, "not json").into())
            .is_err()
    );
}

#[test]
fn clearing_forgets_everything_held() {
    let mut gate = gate();
    gate.offer(event("db.public.orders", 0, Some(("t1", 1))))
        .unwrap();
    gate.offer(begin(0, "t1")).unwrap();
    gate.clear();
    assert!(gate.is_empty());
    assert!(gate.release().unwrap().is_empty());
    assert_eq!(gate.bytes, 0);
}
