//! `sluice demo` as the README's quick start runs it (the repository's connectors.yaml, the
//! embedded Kafka, an SQLite file): its terminal is progress lines and the verdict, nothing
//! else; the rate is the drain's, from the first commit.

use std::path::Path;

#[test]
fn the_demo_prints_progress_and_the_verdict_only() {
    let dir = tempfile::tempdir().expect("dir");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../connectors.yaml");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["demo", "--records", "20000", "--config"])
        .arg(&config)
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", dir.path().join("demo.db").display()),
        )
        .env_remove("KAFKA_BROKERS")
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // No log line: no INFO, no time-out, no warning on a clean shutdown.
    assert_eq!(stderr, "", "the demo's log:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.iter().all(|l| l.starts_with("demo: ")), "{stdout}");
    assert_eq!(
        lines.last().copied(),
        Some("demo: VERDICT: exactly once: every event landed once, none lost"),
        "{stdout}"
    );
    assert!(
        stdout.contains("s from the first commit to the last commit ("),
        "{stdout}"
    );
    // No asking what the embedded cluster cannot answer: the first commit comes within
    // the group's first join (3 s) and a batch, not after two 5 s time-outs.
    let waiting = lines
        .iter()
        .filter(|l| l.contains("committed        0"))
        .count();
    assert!(
        waiting <= 6,
        "{waiting} progress lines before the first commit:\n{stdout}"
    );
}
