//! The control store on each database, in-process (no broker): a connector's target state
//! and restart requests in `sluice_control`, as the admin API writes them and every
//! process reads them. Their upserts are each database's own statements, so the contract
//! runs on all three, like the rest of the sink's in-process suite (docs/testing.md).

use crate::harness;

use harness::{Backend, Scenario, TestDb};
use sluice::sink::Sink;
use sluice::sink::control::{ControlRow, Target};

async fn sink_of(db: &TestDb, connector: &str) -> Sink {
    let mut scenario = Scenario::new(1);
    scenario.connector = connector.to_string();
    let config = scenario.config("unused:9092", db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    sink
}

/// A target and restart requests go in and come back as written, each request counted
/// once, for the connector that wrote them only: a name that differs only in case is
/// another connector.
async fn targets_and_restarts_round_trip(db: Backend) {
    let db = TestDb::new(db);
    let name = harness::unique("ctl");
    let sink = sink_of(&db, &name).await;
    let other = sink_of(&db, &name.to_uppercase()).await;
    assert_eq!(
        sink.control().read_control().await.expect("read"),
        None,
        "never set"
    );

    sink.control()
        .write_target(Target::Paused)
        .await
        .expect("pause");
    let paused = ControlRow {
        target: Target::Paused,
        ..ControlRow::default()
    };
    assert_eq!(
        sink.control().read_control().await.expect("read"),
        Some(paused)
    );

    assert_eq!(
        sink.control()
            .request_restart(true, false)
            .await
            .expect("restart"),
        1
    );
    assert_eq!(
        sink.control().read_control().await.expect("read"),
        Some(ControlRow {
            target: Target::Paused,
            restart_seq: 1,
            restart_tasks: true,
            restart_only_failed: false,
        }),
        "a restart request keeps the target"
    );
    assert_eq!(
        sink.control()
            .request_restart(false, true)
            .await
            .expect("restart"),
        2
    );
    sink.control()
        .write_target(Target::Running)
        .await
        .expect("resume");
    assert_eq!(
        sink.control().read_control().await.expect("read"),
        Some(ControlRow {
            target: Target::Running,
            restart_seq: 2,
            restart_tasks: false,
            restart_only_failed: true,
        }),
        "a target keeps the restart requests"
    );

    assert_eq!(
        other.control().read_control().await.expect("read"),
        None,
        "{} read {name}'s row",
        name.to_uppercase()
    );
    // A restart request before any target: the connector is taken to be running.
    assert_eq!(
        other
            .control()
            .request_restart(true, true)
            .await
            .expect("restart"),
        1
    );
    assert_eq!(
        other
            .control()
            .read_control()
            .await
            .expect("read")
            .map(|row| row.target),
        Some(Target::Running)
    );
    assert_eq!(
        sink.control()
            .read_control()
            .await
            .expect("read")
            .map(|row| row.restart_seq),
        Some(2),
        "another connector's request counted for {name}"
    );
}
for_each_database!(targets_and_restarts_round_trip);
