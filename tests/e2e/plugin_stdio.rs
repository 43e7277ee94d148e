//! A plugin that writes to stdout and stderr, run by the CLI commands that call plugins
//! from inside the async runtime: WASI's stdio is null for a plugin, and writing to it
//! must not take the command down (it panicked with "Cannot start a runtime from within
//! a runtime" when the plugin ran on a runtime worker).

use std::process::Command;

fn sluice(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn plugin_test_runs_a_plugin_that_prints() {
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("samples.jsonl");
    std::fs::write(&input, "{\"value\":\"a\"}\n{\"value\":\"b\"}\n").expect("samples");
    let plugin = sluice_transform::example_plugin_path("hostile");
    let (code, out, err) = sluice(&[
        "plugin",
        "test",
        &plugin.to_string_lossy(),
        "--input",
        &input.to_string_lossy(),
        "--config",
        "mode=print",
    ]);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(code, Some(0), "{err}");
    // Both records echoed; the plugin's own prints went nowhere (null stdio).
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(!out.contains("hello on stdout"), "{out}");
    assert!(!err.contains("hello on stderr"), "{err}");
}
