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

/// The series the dashboard and the alert rules need and only a scrape sets or an event
/// creates: readiness, the record latency, gaps by policy, the process's CPU and memory.
#[test]
fn readiness_latency_gaps_and_the_process_show_in_the_exposition() {
    let metrics = Arc::new(Metrics::new());
    let words = metrics.connector("words");
    let text = metrics.render();
    assert!(text.contains("sluice_ready 0\n"), "{text}");
    // The latency histogram is there from the start, empty.
    assert!(
        text.contains("sluice_record_latency_seconds_count{connector=\"words\"} 0"),
        "{text}"
    );
    words.gap_policy("warn");
    assert!(
        metrics
            .render()
            .contains("sluice_offset_gaps_total{connector=\"words\",policy=\"warn\"} 0")
    );
    words.offset_gap("warn");
    words.offset_gap("warn");
    assert_eq!(words.offset_gaps.get(), 2);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    // Two seconds old, and one from a clock ahead of this host's (counted as 0).
    words.observe_latency(&[now_ms - 2_000, now_ms + 60_000]);
    metrics.set_ready(true);
    let text = metrics.render();
    for line in [
        "sluice_ready 1",
        "sluice_offset_gaps_total{connector=\"words\",policy=\"warn\"} 2",
        "sluice_record_latency_seconds_count{connector=\"words\"} 2",
        "sluice_record_latency_seconds_bucket{le=\"0.005\",connector=\"words\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
    };
    let sum = value("sluice_record_latency_seconds_sum{connector=\"words\"}");
    assert!((2.0..10.0).contains(&sum), "{sum}");
    if cfg!(target_os = "linux") {
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert_eq!(text.matches("# EOF").count(), 1);
}

#[test]
fn proc_stat_is_parsed_past_a_command_name_with_spaces_and_parentheses() {
    // proc(5): pid (comm) state ppid … utime(14) stime(15) … rss(24) …
    let stat = "4242 (sluice (a) b) S 1 4242 4242 0 -1 4194560 5000 0 0 0 \
                250 50 0 0 20 0 12 0 1234 987654321 3000 18446744073709551615";
    let usage = super::process::parse(stat, 100, 4096).expect("parsed");
    assert_eq!(usage.cpu_seconds, 3.0);
    assert_eq!(usage.resident_bytes, 3000 * 4096);
    assert_eq!(super::process::parse("garbage", 100, 4096), None);
    assert_eq!(super::process::parse(stat, 0, 4096), None);
}
