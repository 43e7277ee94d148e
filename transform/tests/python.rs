//! Python plugins (plugins/python/*, built by componentize-py through `build_plugin`):
//! the word_parse twin answers what the Rust plugin answers, the mask example hashes with
//! its salt, a scaffolded plugin builds and runs as it is, and the sandbox holds for
//! Python as it does for Rust: the CPU deadline, the memory cap, the output bounds, and
//! no file, socket or process for the plugin.
//!
//! Each example is built once per change of its sources (its component is kept in
//! `plugins/python/NAME/target/`), under a lock, since the tests of this file run as
//! processes side by side. componentize-py must be installed (`scripts/setup.sh --tests`
//! installs it); without it these tests fail, naming the command.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use sluice_transform::*;

/// The component of `plugins/python/NAME`, built when its sources changed since.
fn python_plugin(name: &str) -> PathBuf {
    example_python_plugin(name).unwrap_or_else(|e| panic!("building {name}: {e}"))
}

/// A spec for a Python example, with the default limits (a Python plugin runs within
/// them: the interpreter starts from the snapshot componentize-py made).
fn python_spec(name: &str, plugin: &str, config: &[(&str, &str)]) -> PluginSpec {
    let mut spec = spec(name, plugin, config);
    spec.path = python_plugin(plugin);
    spec
}

fn python_hostile(mode: &str, extra: &[(&str, &str)]) -> PluginSpec {
    let mut spec = python_spec(&format!("py-hostile-{mode}"), "hostile", extra);
    spec.config.insert("mode".into(), mode.into());
    spec
}

#[test]
fn the_python_word_parse_answers_what_the_rust_one_answers() {
    assert_word_parse_twin(
        |name, config| python_spec(name, "word_parse", config),
        "ValueError",
        "plugin.py",
    );
}

#[test]
fn the_python_mask_hashes_fields_with_its_salt() {
    use sha2::{Digest, Sha256};
    let spec = python_spec(
        "mask",
        "mask",
        &[("fields", "email, /user/phone"), ("salt", "pepper")],
    );
    let batch = vec![
        rec(
            0,
            r#"{"email":"a@example.com","user":{"phone":"+44 20"},"n":1}"#,
        ),
        rec(1, r#"{"n":2}"#),
        rec(2, "[1,2]"),
        rec(3, "not json"),
        Record {
            value: None,
            ..rec(4, "")
        },
    ];
    let out = run_batch(spec, batch);
    let hash = |json: &str| {
        let digest = Sha256::digest(format!("pepper{json}").as_bytes());
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(
        values(&out[0]),
        vec![format!(
            r#"{{"email":"{}","user":{{"phone":"{}"}},"n":1}}"#,
            hash(r#""a@example.com""#),
            hash(r#""+44 20""#)
        )]
    );
    assert_eq!(values(&out[1]), vec![r#"{"n":2}"#]);
    assert!(failure(&out[2]).contains("not an object"), "{out:?}");
    assert!(failure(&out[3]).contains("is not JSON"), "{out:?}");
    assert_eq!(values(&out[4]), vec!["<null>"], "a tombstone passes");
    let unsalted = check_plugin(
        engine(),
        &python_spec("mask", "mask", &[("fields", "email")]),
    )
    .expect_err("no salt");
    assert!(
        unsalted.to_string().contains("`salt` is required"),
        "{unsalted}"
    );
}

#[test]
fn a_scaffolded_python_plugin_builds_and_passes_its_sample() {
    let dir = tempfile::tempdir().expect("dir");
    let plugin = scaffold_plugin("my-py", dir.path(), PluginLanguage::Python).expect("scaffold");
    assert_eq!(
        PluginLanguage::of_dir(&plugin).expect("language"),
        PluginLanguage::Python
    );
    assert!(
        scaffold_plugin("my-py", dir.path(), PluginLanguage::Python).is_err(),
        "refuses to overwrite"
    );
    let wasm = build_plugin(&plugin).expect("builds as it is");
    assert!(wasm.ends_with("target/my_py.wasm"), "{}", wasm.display());
    let spec = PluginSpec {
        path: wasm,
        ..spec("my-py", "unused", &[("prefix", "> ")])
    };
    let cases = test_plugin(engine(), &spec, &plugin.join("sample.jsonl")).expect("sample");
    assert_eq!(values(&cases[0].outcome), vec!["> HELLO"]);
    assert_eq!(
        values(&cases[1].outcome),
        vec![r#"> {"JSON":"VALUES ARE SERIALIZED"}"#]
    );
    assert_eq!(cases[2].outcome, Outcome::Records(vec![]));
    let unknown = check_plugin(
        engine(),
        &PluginSpec {
            config: [("colour".to_string(), "red".to_string())].into(),
            ..spec
        },
    )
    .expect_err("unknown key");
    assert!(
        unknown.to_string().contains("unknown config key(s) colour"),
        "{unknown}"
    );
}

#[test]
fn a_python_exception_is_that_records_error_with_its_line() {
    let batch: Vec<Record> = (0..3000).map(|i| rec(i, "x")).collect();
    let out = run_batch(python_hostile("raise-every", &[]), batch);
    for (i, o) in out.iter().enumerate() {
        if i % 1000 == 0 {
            let message = failure(o);
            assert!(
                message.starts_with(&format!(
                    "RuntimeError: record {i} fails on purpose (plugin.py, line "
                )),
                "{message}"
            );
        } else {
            assert_eq!(values(o), vec!["x"], "record {i}");
        }
    }
    let err = check_plugin(engine(), &python_hostile("no-such-mode", &[])).expect_err("refused");
    assert!(
        err.to_string().contains("unknown mode 'no-such-mode'"),
        "{err}"
    );
    assert!(err.to_string().contains("(plugin.py, line "), "{err}");
}

#[test]
fn nothing_is_granted_to_a_python_plugin() {
    // Something listens here: the connection must fail for want of a grant, not a peer.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = listener.local_addr().expect("addr").to_string();
    // What each call meets: `create_connection` fails at its name lookup, a raw connect
    // is refused, no file is there, and `os` has no `system`.
    let cases = [
        (python_hostile("socket", &[("addr", &addr)]), "Error: "),
        (
            python_hostile("connect", &[("addr", &addr)]),
            "PermissionError: ",
        ),
        (python_hostile("file", &[]), "FileNotFoundError: "),
        (
            python_hostile("file", &[("path", "pyproject.toml")]),
            "FileNotFoundError: ",
        ),
        (python_hostile("system", &[]), "AttributeError: "),
    ];
    for (spec, expected) in cases {
        let name = spec.name.clone();
        let out = run_batch(spec, vec![rec(0, "a")]);
        let message = failure(&out[0]);
        assert!(
            message.contains(expected) && message.contains("(plugin.py, line "),
            "{name}: {message}"
        );
    }
    // Printing is no escape and no failure: the lines go to the host's log.
    assert_eq!(
        values(&run_batch(python_hostile("print", &[]), vec![rec(0, "a")])[0]),
        vec!["a"]
    );
    // `import socket` itself succeeds (the plugin imports it at its top), and the echo runs.
    assert_eq!(
        values(&run_batch(python_hostile("echo", &[]), vec![rec(0, "a")])[0]),
        vec!["a"]
    );
}

#[test]
fn an_endless_python_loop_hits_the_cpu_deadline() {
    let mut spec = python_hostile("loop", &[]);
    spec.limits.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = batch_error(spec);
    assert!(
        matches!(
            err,
            TransformError::Timeout {
                call: "process",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn unbounded_python_allocation_stops_at_the_memory_cap() {
    let mut spec = python_hostile("memory", &[]);
    spec.limits.timeout = Duration::from_secs(10);
    let mut chain = TransformChain::new(engine(), "python", &[spec]).expect("chain starts");
    match chain.process(vec![rec(0, "a")]) {
        // CPython meets the cap as a failed allocation: a MemoryError, the record's error.
        Ok(out) => assert!(failure(&out[0]).starts_with("MemoryError"), "{out:?}"),
        Err(err) => assert!(matches!(err, TransformError::MemoryLimit { .. }), "{err}"),
    }
    assert_engine_healthy();
}

#[test]
fn deep_python_recursion_fails_inside_the_plugin() {
    let out = run_batch(python_hostile("recursion", &[]), vec![rec(0, "a")]);
    assert!(failure(&out[0]).starts_with("RecursionError"), "{out:?}");
}

#[test]
fn a_huge_python_output_hits_the_output_bound() {
    let mut spec = python_hostile("big", &[("size", "1048576")]);
    spec.limits.max_output_bytes = 512 << 10;
    let err = batch_error(spec);
    assert!(
        matches!(err, TransformError::OutputLimit { what: "bytes", .. }),
        "{err}"
    );
}
