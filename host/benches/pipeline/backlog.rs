//! The backlog, produced before the runs as producers write it.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

/// The word event `uid` as the field writes it (the plugin's input).
pub(crate) fn raw_event(uid: u64) -> String {
    format!("#{uid}*w{}@{}", uid % 97, 1_700_000_000_000u64 + uid)
}

/// Produces `n` records as producers write a backlog: lz4 batches of up to 10,000.
pub(crate) async fn produce_backlog(
    bootstrap: &str,
    topic: &str,
    n: u64,
    value: fn(u64) -> String,
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.codec", "lz4")
        .set("batch.num.messages", "10000")
        .set("batch.size", "1000000")
        .set("linger.ms", "50")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .expect("producer");
    let mut pending = Vec::with_capacity(100_000);
    for uid in 0..n {
        let key = uid.to_string();
        let payload = value(uid);
        pending.push(
            producer
                .send_result(FutureRecord::to(topic).key(&key).payload(&payload))
                .expect("enqueue"),
        );
        if pending.len() >= 100_000 {
            for f in pending.drain(..) {
                f.await.expect("delivery").expect("delivered");
            }
        }
    }
    for f in pending {
        f.await.expect("delivery").expect("delivered");
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}
