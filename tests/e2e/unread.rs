//! A connector that reads nothing says so: partitions no task reads count in its lag,
//! are listed with the time since when, have their `sluice_consumer_lag` series
//! (`task="none"`), and make the connector DEGRADED past the grace, on the API, in
//! `sluice_unread_partitions` and in `sluice status`.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::admin::{admin_section, control, move_offset, sample, scrape, wait_status};
use crate::harness::{self, Scenario, SluiceProcess, free_port};

/// Waits (at most `seconds`) until the sample `name` of a scrape satisfies `check`.
async fn wait_sample(port: u16, name: &str, seconds: u64, check: impl Fn(Option<f64>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let scraped = scrape(port).await;
        if check(sample(&scraped, name)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never matched: {:?}\n{}",
            sample(&scraped, name),
            scraped
                .lines()
                .filter(|l| l.contains("lag") || l.contains("unread"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn unread(status: &Value) -> usize {
    status["unread_partitions"].as_array().map_or(0, Vec::len)
}

/// The only task of a connector fails for good at a record (`errors.policy: fail`): the
/// records behind it wait in a partition no task reads. Before: RUNNING, lag 0,
/// `partitions: []`, no lag series, and the cut batch counted whole.
#[test]
fn a_connector_that_reads_nothing_is_degraded_with_its_true_lag() {
    harness::run_test(async {
        let broker = harness::Broker::start();
        let port = free_port();
        let db = harness::TestDb::new(harness::Backend::Sqlite);
        let mut scenario = Scenario::new(1);
        scenario.extra_kafka = admin_section(port);
        scenario.extra_connector = "    errors: { policy: fail }".into();
        // A healthy connector beside it keeps the process up (a process whose every
        // connector failed for good exits).
        let healthy = Scenario::new(1);
        broker.create_topic(&scenario.topic, 1).await;
        broker.create_topic(&healthy.topic, 1).await;
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("unread.yaml");
        std::fs::write(
            &config,
            harness::combined_yaml(&broker.bootstrap, &[(&scenario, &db), (&healthy, &db)]),
        )
        .expect("write config");
        broker
            .produce_with(&scenario.topic, 0..1000, |uid| {
                if uid == 500 {
                    "not json".to_string()
                } else {
                    harness::word_event(uid)
                }
            })
            .await;
        let sluice = SluiceProcess::start(&config);
        let name = scenario.connector.clone();
        let (topic, connector) = (&scenario.topic, &scenario.connector);

        let status = wait_status(port, &name, 90, |s| {
            s["health"] == "DEGRADED" && unread(s) == 1 && s["lag"] == 500
        })
        .await;
        assert_eq!(status["connector"]["state"], "RUNNING", "{status}");
        assert_eq!(status["unread_partitions"][0]["topic"], *topic, "{status}");
        assert_eq!(status["unread_partitions"][0]["lag"], 500, "{status}");
        assert!(
            status["health_reasons"][0]
                .as_str()
                .is_some_and(|r| r.starts_with("task 0 FAILED")),
            "{status}"
        );
        assert_eq!(scenario.stats(&broker.bootstrap, &db).await.rows, 500);
        // The batch was cut at the failed record: 500 committed, not the 1,000 polled.
        assert_eq!(status["records_committed"], 500, "{status}");
        let lag_series = format!(
            "sluice_consumer_lag{{connector=\"{connector}\",task=\"none\",topic=\"{topic}\",partition=\"0\"}}"
        );
        wait_sample(port, &lag_series, 30, |v| v == Some(500.0)).await;
        // Past the grace (session.timeout.ms 6 s + 15 s): the partition counts as unread.
        let unread_series = format!("sluice_unread_partitions{{connector=\"{connector}\"}}");
        wait_sample(port, &unread_series, 60, |v| v == Some(1.0)).await;
        let status = wait_status(port, &name, 10, |s| {
            s["health_reasons"].as_array().is_some_and(|r| {
                r.iter()
                    .any(|r| r.as_str().is_some_and(|r| r.contains("no task reads")))
            })
        })
        .await;
        assert!(
            status["unread_partitions"][0]["seconds"].as_i64() >= Some(21),
            "{status}"
        );
        // `sluice status` says it too.
        let table = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["status", "--admin", &format!("http://127.0.0.1:{port}")])
            .env("SLUICE_ADMIN_TOKEN", crate::harness::admin::TOKEN)
            .output()
            .expect("sluice status");
        let table = String::from_utf8_lossy(&table.stdout).into_owned();
        assert!(table.contains("RUNNING (DEGRADED)"), "{table}");
        assert!(table.contains("degraded: task 0 FAILED"), "{table}");
        let json = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "status",
                "--format",
                "json",
                "--admin",
                &format!("http://127.0.0.1:{port}"),
            ])
            .env("SLUICE_ADMIN_TOKEN", crate::harness::admin::TOKEN)
            .output()
            .expect("sluice status --format json");
        let json: Value = serde_json::from_slice(&json.stdout).expect("JSON");
        assert_eq!(json[&name]["status"]["health"], "DEGRADED", "{json}");

        // Stopped by the operator: not degraded (nothing is expected to read).
        control(port, &name, "stop").await;
        wait_status(port, &name, 30, |s| {
            s["connector"]["state"] == "STOPPED" && s["health"] == "HEALTHY"
        })
        .await;
        move_offset(port, &name, topic, 0, 501).await;
        control(port, &name, "resume").await;
        let stats = scenario
            .wait_for_rows(&broker.bootstrap, &db, 999, Duration::from_secs(90))
            .await;
        assert_eq!(stats.rows, 999, "{stats:?}");
        // Read again: healthy, nothing unread, the `task="none"` series gone.
        wait_status(port, &name, 30, |s| {
            s["health"] == "HEALTHY" && unread(s) == 0 && s["lag"] == 0
        })
        .await;
        wait_sample(port, &lag_series, 15, |v| v.is_none()).await;
        wait_sample(port, &unread_series, 15, |v| v == Some(0.0)).await;
        assert!(sluice.terminate().success());
    });
}

/// Another member of the connector's group (a stray consumer someone ran with the same
/// group id) holds the only partition and writes nothing: sluice's task is RUNNING and
/// holds no partition. Before: RUNNING, lag 0, `partitions: []`. Now the partition is
/// listed unread with its lag, the connector is DEGRADED past the grace, and the task
/// leaves and rejoins the group (the safeguard; here the stray member keeps the partition,
/// as the assignor gives it); once the stray member leaves, the task reads everything.
///
/// The case seen in the field first, a SIGKILLed process restarted sooner than the test
/// broker evicts its dead member (`harness::EVICTION_WAIT`), did not leave a partition
/// unassigned in three tries here (the broker completed the rebalance without the dead
/// member), so a live member that reads nothing stands in for it.
#[test]
fn a_partition_another_member_holds_without_writing_is_shown_and_rejoined() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    harness::run_test(async {
        let port = free_port();
        let mut scenario = Scenario::new(1);
        scenario.extra_kafka = admin_section(port);
        let run = harness::Pipeline::new(harness::Backend::Sqlite, scenario, 1).await;
        run.produce(0..500).await;
        // The stray member joins first; its client id sorts before sluice's.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let stray = {
            let (bootstrap, group, topic) = (
                run.broker.bootstrap.clone(),
                run.scenario.group.clone(),
                run.scenario.topic.clone(),
            );
            let stop = stop.clone();
            std::thread::spawn(move || {
                let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("group.id", &group)
                    .set("client.id", "a-stray-member")
                    .set("session.timeout.ms", "6000")
                    .set("enable.auto.commit", "false")
                    .create()
                    .expect("consumer");
                consumer.subscribe(&[&topic]).expect("subscribe");
                let mut told = false;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = consumer.poll(Duration::from_millis(100));
                    let held = consumer.assignment().map_or(0, |a| a.count());
                    if held > 0 && !told {
                        let _ = held_tx.send(());
                        told = true;
                    }
                }
                // Dropped: it leaves the group.
            })
        };
        held_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the stray member got the partition");
        let sluice = run.start();
        let name = run.scenario.connector.clone();
        let status = wait_status(port, &name, 90, |s| {
            s["health"] == "DEGRADED" && unread(s) == 1 && s["lag"] == 500
        })
        .await;
        assert_eq!(status["tasks"][0]["state"], "RUNNING", "{status}");
        assert_eq!(status["partitions"], serde_json::json!([]), "{status}");
        assert!(
            status["health_reasons"][0]
                .as_str()
                .is_some_and(|r| r.starts_with("1 partition(s) no task reads")),
            "{status}"
        );
        // The safeguard: the task left and rejoined the group, and its join completed (a
        // second assignment, empty again: the stray member keeps the partition). The stray
        // member leaves only then: the test broker's coordinator can stall a group whose
        // member leaves while another one joins (a fault of the test broker, not sluice's).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = std::fs::read_to_string(&sluice.log).unwrap_or_default();
            if let Some((_, after)) =
                log.split_once("this process's tasks leave and rejoin the group")
                && after.contains("partitions assigned")
            {
                break;
            }
            assert!(Instant::now() < deadline, "no rejoin in the log:\n{log}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        stray.join().expect("stray member");
        harness::assert_exactly(run.wait_for_rows(500, 90).await, 500);
        wait_status(port, &name, 30, |s| {
            s["health"] == "HEALTHY" && unread(s) == 0 && s["lag"] == 0
        })
        .await;
        assert!(sluice.terminate().success());
    });
}
