//! The exposition of every family: names, labels, values.

use std::sync::Arc;

use super::*;

#[test]
fn names_labels_and_values_show_in_the_exposition() {
    let metrics = Arc::new(Metrics::new());
    let words = metrics.connector("words");
    for _ in 0..7 {
        words.consumed(0).inc();
    }
    for _ in 0..3 {
        words.consumed(1).inc();
    }
    words.rows_written.inc_by(9);
    words.set_lag(1, "events", 2, 41);
    words.set_task_state(0, "RUNNING");
    words.observe_stage(BatchStage::Write, Duration::from_millis(3));
    words.retried("database");
    (words.plugin_observer())("parse", Duration::from_millis(2), Some("trap"));
    assert_eq!(words.consumed_total(), 10);
    let text = metrics.render();
    for line in [
        "sluice_records_consumed_total{connector=\"words\",task=\"0\"} 7",
        "sluice_rows_written_total{connector=\"words\"} 9",
        "sluice_consumer_lag{connector=\"words\",task=\"1\",topic=\"events\",partition=\"2\"} 41",
        "sluice_task_state{connector=\"words\",task=\"0\",state=\"RUNNING\"} 1",
        "sluice_task_state{connector=\"words\",task=\"0\",state=\"FAILED\"} 0",
        "sluice_retries_total{connector=\"words\",reason=\"database\"} 1",
        "sluice_plugin_failures_total{connector=\"words\",plugin=\"parse\",kind=\"trap\"} 1",
        "sluice_batch_duration_seconds_count{connector=\"words\",stage=\"write\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    words.clear_lag(1, "events", 2);
    assert!(!metrics.render().contains("sluice_consumer_lag{"));
    assert!(text.ends_with("# EOF\n"));
}
