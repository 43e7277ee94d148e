//! The status page in Chromium shows a connector that reads nothing (its only task failed
//! for good) as DEGRADED, with the reason and the partition no task reads, beside a
//! healthy connector that is not.

use std::path::Path;
use std::process::Command;

use super::{CHROMIUM, TOKEN, browser_tools, wait_json, wait_up};
use crate::harness::{self, Scenario, SluiceProcess, free_port};

#[test]
fn the_page_in_chromium_shows_a_degraded_connector() {
    let deps = browser_tools();
    harness::run_test(async {
        let broker = harness::Broker::start();
        let port = free_port();
        let db = harness::TestDb::new(harness::Backend::Sqlite);
        let mut failing = Scenario::new(1);
        failing.extra_kafka = format!("admin:\n  listen: \"127.0.0.1:{port}\"\n  token: {TOKEN}");
        failing.extra_connector = "    errors: { policy: fail }".into();
        let healthy = Scenario::new(1);
        broker.create_topic(&failing.topic, 1).await;
        broker.create_topic(&healthy.topic, 1).await;
        broker
            .produce_with(&failing.topic, 0..300, |uid| {
                if uid == 100 {
                    "not json".to_string()
                } else {
                    harness::word_event(uid)
                }
            })
            .await;
        broker.produce(&healthy.topic, 0..100).await;
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("degraded.yaml");
        std::fs::write(
            &config,
            harness::combined_yaml(&broker.bootstrap, &[(&failing, &db), (&healthy, &db)]),
        )
        .expect("write config");
        let sluice = SluiceProcess::start(&config);
        wait_up(port).await;
        let name = failing.connector.clone();
        wait_json(port, &format!("/connectors/{name}/status"), 90, |s| {
            s["health"] == "DEGRADED"
                && s["unread_partitions"]
                    .as_array()
                    .is_some_and(|u| u.len() == 1)
        })
        .await;
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page");
        std::fs::create_dir_all(&shots).expect("screenshot dir");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/e2e/status_page/degraded.cjs");
        let output = tokio::task::spawn_blocking(move || {
            Command::new("node")
                .arg(script)
                .env("PLAYWRIGHT_CORE", &deps)
                .env("CHROMIUM", CHROMIUM)
                .env("URL", format!("http://127.0.0.1:{port}/"))
                .env("TOKEN", TOKEN)
                .env("FAILING", &name)
                .env("HEALTHY", &healthy.connector)
                .env("SHOTS", &shots)
                .output()
        })
        .await
        .expect("join")
        .expect("run node");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("DEGRADED_SHOWN"),
            "the browser script: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        // A task failed for good: `sluice run` reports it as it exits (code 1).
        assert_eq!(sluice.terminate().code(), Some(1));
    });
}
