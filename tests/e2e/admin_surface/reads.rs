//! What it reads: its connectors' topics only, 16 MiB answers, dry runs at once, one
//! Kafka client for the offsets calls.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use sluice::admin::client::AdminClient;

use super::*;
use crate::harness::{self, Backend, Broker, SluiceProcess, TestDb, free_port};

/// A connector on the real broker with a dead-letter topic, and the admin API.
fn broker_config(
    dir: &Path,
    bootstrap: &str,
    db: &TestDb,
    topic: &str,
    dlq: &str,
    port: u16,
) -> PathBuf {
    let path = dir.join("connectors.yaml");
    let table = harness::unique("surface");
    std::fs::write(
        &path,
        format!(
            r#"kafka: {{ brokers: "{bootstrap}" }}
admin: {{ listen: "127.0.0.1:{port}", token: surface-0123 }}
connectors:
  - name: reader
    topics: [{topic}]
    group: {group}
    format: string
    sink:
      url: "{url}"
      table: {table}
      columns: {{ v: {{ from: $value, type: text }} }}
      create_table: true
    errors: {{ policy: dlq, dlq: {{ topic: {dlq} }} }}
"#,
            group = harness::unique("group"),
            url = db.url,
        ),
    )
    .expect("write config");
    path
}

async fn produce_raw(bootstrap: &str, topic: &str, values: &[Vec<u8>]) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.max.bytes", "2000000")
        .set("linger.ms", "0")
        .create()
        .expect("producer");
    for value in values {
        producer
            .send(
                FutureRecord::<(), _>::to(topic).partition(0).payload(value),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
    }
}

/// The records endpoint and dry-run read the connector's topic and its dead-letter topic
/// (200) and nothing else (403, the same whether the topic exists or not); a read of large
/// records stops at 16 MiB and says where to go on.
async fn the_admin_api_reads_only_its_connectors_topics(db: Backend) {
    let broker = Broker::start();
    let db = TestDb::new(db);
    let topic = harness::unique("surface");
    let dlq = format!("{topic}-dlq");
    let foreign = harness::unique("connect-configs");
    for t in [&topic, &dlq, &foreign] {
        broker.create_topic(t, 1).await;
    }
    produce_raw(
        &broker.bootstrap,
        &foreign,
        &[br#"{"connection.password":"hunter2"}"#.to_vec()],
    )
    .await;
    produce_raw(&broker.bootstrap, &dlq, &[b"dead".to_vec()]).await;
    // 20 records of 900 kB: 18 MB, more than one answer holds.
    let big: Vec<Vec<u8>> = (0..20u8).map(|i| vec![b'a' + i % 26; 900_000]).collect();
    produce_raw(&broker.bootstrap, &topic, &big).await;

    let dir = tempfile::tempdir().expect("dir");
    let port = free_port();
    let config = broker_config(dir.path(), &broker.bootstrap, &db, &topic, &dlq, port);
    let _sluice = SluiceProcess::start(&config);
    let client = AdminClient::new(&format!("127.0.0.1:{port}"), Some("surface-0123".into()))
        .expect("client");
    wait_ready(&client).await;

    let records = |t: &str, query: &str| format!("/topics/{t}/partitions/0/records?{query}");
    let forbidden = client
        .get(&records(&foreign, "offset=0"))
        .await
        .expect("get");
    assert_eq!(
        forbidden.status,
        StatusCode::FORBIDDEN,
        "{}",
        forbidden.body
    );
    assert!(!forbidden.body.contains("hunter2"));
    let missing = client
        .get(&records("no-such-topic", "offset=0"))
        .await
        .expect("get");
    assert_eq!(missing.status, StatusCode::FORBIDDEN, "{}", missing.body);
    assert_eq!(
        forbidden.body.replace(&foreign, "T"),
        missing.body.replace("no-such-topic", "T"),
        "a 403 tells nothing of whether the topic exists"
    );
    let dead = client.get(&records(&dlq, "offset=0")).await.expect("get");
    assert_eq!(dead.status, StatusCode::OK, "{}", dead.body);
    assert_eq!(dead.json()[0]["value"], "dead");
    let dry_foreign = client
        .request(
            Method::POST,
            "/connectors/reader/dry-run",
            Some(json!({"topic": foreign, "offset": 0, "limit": 1})),
        )
        .await
        .expect("dry-run");
    assert_eq!(
        dry_foreign.status,
        StatusCode::FORBIDDEN,
        "{}",
        dry_foreign.body
    );

    // Large records: cut at 16 MiB, with where to go on.
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let answer = client
            .get(&records(&topic, "offset=0&limit=20"))
            .await
            .expect("get");
        if answer.status == StatusCode::OK || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert!(
        first.body.len() <= 16 * 1024 * 1024,
        "an answer of {} bytes",
        first.body.len()
    );
    let got = first.json().as_array().expect("array").len();
    assert!((1..20).contains(&got), "{got} records in the first answer");
    assert_eq!(
        first
            .headers
            .get("x-sluice-truncated")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let next: usize = first
        .headers
        .get("x-sluice-next-offset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("next offset");
    assert_eq!(next, got);
    let rest = client
        .get(&records(&topic, &format!("offset={next}&limit=20")))
        .await
        .expect("get");
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.body);
    assert_eq!(rest.json().as_array().expect("array").len(), 20 - got);
    assert!(rest.headers.get("x-sluice-truncated").is_none());
    println!(
        "ADMIN-SURFACE 20 records of 900 kB: {got} in the first answer ({} bytes), {} in the second",
        first.body.len(),
        20 - got
    );

    let dry = client
        .request(
            Method::POST,
            "/connectors/reader/dry-run",
            Some(json!({"topic": topic, "offset": 0, "limit": 20})),
        )
        .await
        .expect("dry-run");
    assert_eq!(
        dry.status,
        StatusCode::OK,
        "{}",
        &dry.body[..dry.body.len().min(300)]
    );
    assert!(
        dry.body.len() <= 16 * 1024 * 1024,
        "a dry run of {} bytes",
        dry.body.len()
    );
    let body = dry.json();
    assert_eq!(body["truncated"], true);
    let records = body["records"].as_array().expect("records").len();
    assert_eq!(body["next_offset"], records);

    // At most 2 dry runs at once: of 6 sent together, some are refused with 503.
    let body = json!({"topic": topic, "offset": 0, "limit": 20});
    let answers = futures_util::future::join_all((0..6).map(|_| {
        client.request(
            Method::POST,
            "/connectors/reader/dry-run",
            Some(body.clone()),
        )
    }))
    .await;
    let codes: Vec<u16> = answers
        .into_iter()
        .map(|a| a.expect("dry-run").status.as_u16())
        .collect();
    assert!(codes.iter().all(|c| *c == 200 || *c == 503), "{codes:?}");
    assert!(codes.contains(&200) && codes.contains(&503), "{codes:?}");
}
for_each_database!(the_admin_api_reads_only_its_connectors_topics: sqlite = Sqlite);

/// The client ports of every TCP connection to `port` on this machine, in any state
/// (`TIME_WAIT` too: a connection closed a moment ago still shows).
fn client_ports_to(port: u16) -> std::collections::BTreeSet<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port_of = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let local = port_of(fields.next()?)?;
            let remote = port_of(fields.next()?)?;
            if remote == port {
                Some(local)
            } else if local == port {
                Some(remote)
            } else {
                None
            }
        })
        .collect()
}

/// `GET /connectors/{name}/offsets` of an at-least-once connector (the Kafka group's
/// committed offsets) reuses one Kafka client: ten calls open no new connections to the
/// broker after the first, where a client per call opens some each time.
#[test]
fn at_least_once_offsets_calls_reuse_one_kafka_client() {
    harness::run_test(async {
        let broker = Broker::start();
        let topic = harness::unique("alo");
        broker.create_topic(&topic, 2).await;
        let broker_port: u16 = broker
            .bootstrap
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("the broker's port");
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = dir.path().join("connectors.yaml");
        std::fs::write(
            &config,
            format!(
                r#"kafka: {{ brokers: "{bootstrap}" }}
admin: {{ listen: "127.0.0.1:{port}" }}
connectors:
  - name: alo
    topics: [{topic}]
    group: {group}
    format: string
    delivery: {{ guarantee: at_least_once }}
    sink:
      url: "sqlite://{db}?mode=rwc"
      table: alo
      columns: {{ v: {{ from: $value, type: text }} }}
      create_table: true
"#,
                bootstrap = broker.bootstrap,
                group = harness::unique("group"),
                db = dir.path().join("alo.db").display(),
            ),
        )
        .expect("write config");
        let _sluice = SluiceProcess::start(&config);
        let client = plain(port);
        wait_ready(&client).await;
        let offsets = || async {
            let answer = client
                .get("/connectors/alo/offsets")
                .await
                .expect("offsets");
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        };
        offsets().await;
        let before = client_ports_to(broker_port);
        for _ in 0..10 {
            offsets().await;
        }
        let new: Vec<u16> = client_ports_to(broker_port)
            .difference(&before)
            .copied()
            .collect();
        println!(
            "ADMIN-SURFACE 10 offsets calls opened {} new connections to the broker",
            new.len()
        );
        assert!(
            new.len() < 5,
            "10 offsets calls opened {} new connections to the broker: a client per call",
            new.len()
        );
    });
}
