//! Topics created after `sluice run` subscribed: read within seconds, with librdkafka's
//! default metadata refresh (5 minutes) and other topics in the cluster, as every real
//! cluster has. One connector lists its topic, one takes it by a pattern.

use std::time::{Duration, Instant};

use crate::harness::{self, Backend, Broker, Scenario, SluiceProcess, TestDb, unique};

/// Waits until `log` holds `needle` `count` times (at most `limit`).
async fn wait_for_log(log: &std::path::Path, needle: &str, count: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(needle).count() >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} ({count}) in the log within {limit:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn topics_created_after_the_start_are_read_within_seconds() {
    harness::run_test(async {
        let broker = Broker::start();
        // The cluster holds another topic: a subscription to a missing topic among existing
        // ones is what waits for librdkafka's next full refresh.
        broker.create_topic(&unique("other"), 1).await;
        let db = TestDb::new(Backend::Sqlite);
        let listed = Scenario::new(1);
        let mut pattern = Scenario::new(1);
        pattern.topic = unique("late");
        let dir = tempfile::tempdir().expect("temp dir");
        let yaml = harness::combined_yaml(&broker.bootstrap, &[(&listed, &db), (&pattern, &db)])
            // librdkafka's default refresh: 5 minutes.
            .replace("    topic.metadata.refresh.interval.ms: 1000\n", "")
            .replace(
                &format!("topics: [{}]", pattern.topic),
                &format!("topics_regex: '{}(-[0-9]+)?'", pattern.topic),
            );
        assert!(!yaml.contains("refresh"), "{yaml}");
        let config = dir.path().join("late.yaml");
        std::fs::write(&config, yaml).expect("write config");
        let sluice = SluiceProcess::start(&config);
        // Both tasks subscribed.
        wait_for_log(&sluice.log, "to=RUNNING", 2, Duration::from_secs(60)).await;
        let created = Instant::now();
        broker.create_topic(&listed.topic, 2).await;
        broker.create_topic(&pattern.topic, 2).await;
        broker.produce(&listed.topic, 0..500).await;
        broker.produce(&pattern.topic, 0..500).await;
        // Far below the 5 minutes librdkafka alone would wait.
        let limit = Duration::from_secs(45);
        for scenario in [&listed, &pattern] {
            let left = limit.saturating_sub(created.elapsed());
            let stats = scenario
                .wait_for_rows(&broker.bootstrap, &db, 500, left)
                .await;
            harness::assert_exactly(stats, 500);
        }
        eprintln!(
            "both topics read {:?} after their creation",
            created.elapsed()
        );
        // Each task said which topics it waited for, and when it found them.
        let log = std::fs::read_to_string(&sluice.log).unwrap_or_default();
        assert_eq!(
            log.matches(
                "subscribed topics do not exist yet; sluice asks the cluster again every 5 s"
            )
            .count(),
            2,
            "{log}"
        );
        wait_for_log(
            &sluice.log,
            "the topics the task waited for exist now",
            2,
            Duration::from_secs(5),
        )
        .await;
        sluice.terminate();
    });
}
