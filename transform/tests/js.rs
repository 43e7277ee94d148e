//! JavaScript plugins (plugins/js/*, built by componentize-js through `build_plugin`):
//! the word_parse twin answers what the Rust plugin answers, the filter example keeps what
//! its Rust original keeps, a scaffolded plugin builds and runs as it is (and passes its
//! own `node --test`), and the sandbox holds for JavaScript as it does for Rust: the CPU
//! deadline, the memory cap, the output bounds, and no network or file for the plugin.
//!
//! Each example is built once per change of its sources (its component is kept in
//! `plugins/js/NAME/target/`), under a lock, since the tests of this file run as processes
//! side by side. componentize-js must be installed (`scripts/setup.sh --tests` installs
//! it); without it these tests fail, naming the command.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use sluice_transform::*;

/// The component of `plugins/js/NAME`, built when its sources changed since.
fn js_plugin(name: &str) -> PathBuf {
    example_js_plugin(name).unwrap_or_else(|e| panic!("building {name}: {e}"))
}

/// A spec for a JavaScript example, with the default limits.
fn js_spec(name: &str, plugin: &str, config: &[(&str, &str)]) -> PluginSpec {
    let mut spec = spec(name, plugin, config);
    spec.path = js_plugin(plugin);
    spec
}

fn js_hostile(mode: &str, extra: &[(&str, &str)]) -> PluginSpec {
    let mut spec = js_spec(&format!("js-hostile-{mode}"), "hostile", extra);
    spec.config.insert("mode".into(), mode.into());
    spec
}

#[test]
fn the_js_word_parse_answers_what_the_rust_one_answers() {
    assert_word_parse_twin(
        |name, config| js_spec(name, "word_parse", config),
        "Error",
        "plugin.js",
    );
}

#[test]
fn the_js_filter_keeps_what_the_rust_filter_keeps() {
    let values = [
        r#"{"word":"hello","n":5,"user":{"country":"NL"},"tags":["a","b"]}"#,
        r#"{"word":"help","n":5.0,"user":{"country":"DE"},"tags":[]}"#,
        r#"{"word":"zebra","n":-1,"user":null}"#,
        r#"{"word":"é","n":"5"}"#,
        r#"{"word":"😀"}"#,
        r#"{"n":[5]}"#,
        "[1,2]",
        "null",
        "7",
    ];
    let mut batch: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| rec(i as i64, v))
        .collect();
    batch.push(Record {
        value: None,
        ..rec(99, "")
    });
    let configs: &[&[(&str, &str)]] = &[
        &[("field", "word"), ("value", "hello")],
        &[("field", "n"), ("value", "5")],
        &[("field", "n"), ("op", "ge"), ("value", "5")],
        &[("field", "word"), ("op", "gt"), ("value", "hi")],
        // By code point, as Rust compares: U+1F600 after U+FFFF, whatever UTF-16 says.
        &[("field", "word"), ("op", "gt"), ("value", "\u{fff0}")],
        &[("field", "word"), ("op", "prefix"), ("value", "hel")],
        &[("field", "tags"), ("op", "contains"), ("value", "b")],
        &[("field", "/user/country"), ("op", "ne"), ("value", "NL")],
        &[("field", "/0"), ("value", "1")],
        &[("field", "user"), ("op", "missing")],
        &[("field", "user"), ("op", "exists")],
    ];
    for config in configs {
        let rust = run_batch(spec("rust", "filter", config), batch.clone());
        let js = run_batch(js_spec("js", "filter", config), batch.clone());
        assert_eq!(rust, js, "{config:?}");
    }
    let out = run_batch(
        js_spec("js", "filter", &[("field", "n"), ("value", "5")]),
        vec![rec(0, "not json")],
    );
    assert!(failure(&out[0]).contains("is not JSON"), "{out:?}");
    for bad in [
        &[][..],
        &[("field", "a"), ("op", "like"), ("value", "1")],
        &[("field", "a")],
    ] {
        let rust = check_plugin(engine(), &spec("rust", "filter", bad));
        let js = check_plugin(engine(), &js_spec("js", "filter", bad));
        assert!(rust.is_err() && js.is_err(), "{bad:?}: {rust:?} {js:?}");
    }
}

#[test]
fn a_scaffolded_js_plugin_builds_and_passes_its_sample_and_its_own_test() {
    let dir = tempfile::tempdir().expect("dir");
    let plugin = scaffold_plugin("my-js", dir.path(), PluginLanguage::Js).expect("scaffold");
    assert_eq!(
        PluginLanguage::of_dir(&plugin).expect("language"),
        PluginLanguage::Js
    );
    assert!(
        scaffold_plugin("my-js", dir.path(), PluginLanguage::Js).is_err(),
        "refuses to overwrite"
    );
    let wasm = build_plugin(&plugin).expect("builds as it is");
    assert!(wasm.ends_with("target/my_js.wasm"), "{}", wasm.display());
    let spec = PluginSpec {
        path: wasm,
        ..spec("my-js", "unused", &[("prefix", "> ")])
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
        unknown
            .to_string()
            .contains("Error: unknown config key(s) colour"),
        "{unknown}"
    );
    assert!(
        unknown.to_string().contains("(plugin.js, line "),
        "{unknown}"
    );
    // Its own unit test, in Node, against the SDK its package.json names (no registry:
    // the SDK is a `file:` dependency).
    let npm = |args: &[&str]| {
        let out = std::process::Command::new("npm")
            .args(args)
            .current_dir(&plugin)
            .output()
            .expect("npm runs");
        assert!(
            out.status.success(),
            "npm {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    npm(&["install", "--offline", "--no-audit", "--no-fund"]);
    npm(&["test"]);
}

#[test]
fn a_js_throw_is_that_records_error_with_its_line() {
    let batch: Vec<Record> = (0..3000).map(|i| rec(i, "x")).collect();
    let out = run_batch(js_hostile("raise-every", &[]), batch);
    for (i, o) in out.iter().enumerate() {
        if i % 1000 == 0 {
            let message = failure(o);
            assert!(
                message.starts_with(&format!(
                    "RangeError: record {i} fails on purpose (plugin.js, line "
                )),
                "{message}"
            );
        } else {
            assert_eq!(values(o), vec!["x"], "record {i}");
        }
    }
    let err = check_plugin(engine(), &js_hostile("no-such-mode", &[])).expect_err("refused");
    assert!(
        err.to_string().contains("unknown mode 'no-such-mode'"),
        "{err}"
    );
    assert!(err.to_string().contains("(plugin.js, line "), "{err}");
    // A wrong answer is the record's error, not a trap.
    let out = run_batch(js_hostile("wrong", &[]), vec![rec(0, "a")]);
    assert!(
        failure(&out[0]).starts_with("TypeError: transform returned a string"),
        "{out:?}"
    );
}

#[test]
fn nothing_is_granted_to_a_js_plugin() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = listener.local_addr().expect("addr").to_string();
    for (spec, expected) in [
        (
            js_hostile("fetch", &[("addr", &addr)]),
            "TypeError: fetch is not available",
        ),
        (js_hostile("require", &[]), "ReferenceError: "),
    ] {
        let name = spec.name.clone();
        let out = run_batch(spec, vec![rec(0, "a")]);
        let message = failure(&out[0]);
        assert!(
            message.starts_with(expected) && message.contains("(plugin.js, line "),
            "{name}: {message}"
        );
    }
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(listener.accept().is_err(), "nothing connected");
    // Printing is no escape and no failure: the lines go to the host's log.
    assert_eq!(
        values(&run_batch(js_hostile("print", &[]), vec![rec(0, "a")])[0]),
        vec!["a"]
    );
}

#[test]
fn an_endless_js_loop_hits_the_cpu_deadline() {
    let mut spec = js_hostile("loop", &[]);
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
fn unbounded_js_allocation_stops_at_the_memory_cap() {
    let mut spec = js_hostile("memory", &[]);
    spec.limits.timeout = Duration::from_secs(10);
    let mut chain = TransformChain::new(engine(), "js", &[spec]).expect("chain starts");
    match chain.process(vec![rec(0, "a")]) {
        // SpiderMonkey may meet the cap as a failed allocation it reports.
        Ok(out) => assert!(failure(&out[0]).contains("memory"), "{out:?}"),
        Err(err) => assert!(
            matches!(
                err,
                TransformError::MemoryLimit { .. } | TransformError::Trap { .. }
            ),
            "{err}"
        ),
    }
    assert_engine_healthy();
}

#[test]
fn deep_js_recursion_fails_inside_the_plugin() {
    let out = run_batch(js_hostile("recursion", &[]), vec![rec(0, "a")]);
    assert!(failure(&out[0]).starts_with("InternalError"), "{out:?}");
}

#[test]
fn a_huge_js_output_hits_the_output_bound() {
    let mut spec = js_hostile("big", &[("size", "1048576")]);
    spec.limits.max_output_bytes = 512 << 10;
    let err = batch_error(spec);
    assert!(
        matches!(err, TransformError::OutputLimit { what: "bytes", .. }),
        "{err}"
    );
}
