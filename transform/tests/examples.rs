//! The example plugins through the host API.

mod common;

use std::time::Instant;

use common::*;
use sluice_transform::*;

#[test]
fn word_parse_maps_filters_and_fails_per_record() {
    let mut chain =
        TransformChain::new(engine(), "words", &[spec("parse", "word_parse", &[])]).unwrap();
    let mut tomb = rec(3, "");
    tomb.value = None;
    tomb.key = Some(b"k".to_vec());
    let out = chain
        .process(vec![
            rec(1, "#42*hello@1700000000123"),
            rec(2, "garbage"),
            tomb,
        ])
        .unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(
        values(&out[0]),
        vec![r#"{"uid":42,"word":"hello","produced_at":1700000000123}"#]
    );
    match &out[1] {
        Outcome::Failed { plugin, message } => {
            assert_eq!(plugin, "parse");
            assert!(message.contains("malformed word event"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(out[2], Outcome::Records(vec![]));
    // Metadata survives the round trip.
    let out = chain.process(vec![rec(9, "#1*a@2")]).unwrap();
    let Outcome::Records(rs) = &out[0] else {
        panic!()
    };
    assert_eq!(
        (rs[0].topic.as_str(), rs[0].partition, rs[0].offset),
        ("words", 0, 9)
    );
}

#[test]
fn word_parse_separator_config_and_bad_config() {
    let mut chain = TransformChain::new(
        engine(),
        "words",
        &[spec("parse", "word_parse", &[("separator", "::")])],
    )
    .unwrap();
    let out = chain.process(vec![rec(0, "#7::hi@5")]).unwrap();
    assert_eq!(
        values(&out[0]),
        vec![r#"{"uid":7,"word":"hi","produced_at":5}"#]
    );

    let err =
        check_plugin(engine(), &spec("parse", "word_parse", &[("separator", "")])).unwrap_err();
    assert!(matches!(err, TransformError::Init { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("plugin `parse` rejected its config"),
        "{err}"
    );
    check_plugin(engine(), &spec("parse", "word_parse", &[])).unwrap();
}

#[test]
fn chain_feeds_plugins_in_order_and_keeps_alignment() {
    let specs = [
        spec("parse", "word_parse", &[]),
        spec(
            "only-long",
            "filter",
            &[("field", "uid"), ("op", "ge"), ("value", "10")],
        ),
        spec("mask", "mask", &[("fields", "word")]),
    ];
    let mut chain = TransformChain::new(engine(), "words", &specs).unwrap();
    assert_eq!(
        chain.plugins().collect::<Vec<_>>(),
        ["parse", "only-long", "mask"]
    );
    let out = chain
        .process(vec![
            rec(0, "#42*secret@1"),
            rec(1, "#3*short@2"),
            rec(2, "bad"),
            rec(3, "#11*x@3"),
        ])
        .unwrap();
    assert_eq!(
        values(&out[0]),
        vec![r#"{"produced_at":1,"uid":42,"word":"***"}"#]
    );
    assert_eq!(out[1], Outcome::Records(vec![]));
    assert!(matches!(&out[2], Outcome::Failed { plugin, .. } if plugin == "parse"));
    assert_eq!(
        values(&out[3]),
        vec![r#"{"produced_at":3,"uid":11,"word":"***"}"#]
    );
    assert!(chain.process(vec![]).unwrap().is_empty());
}

#[test]
fn mask_hashes_and_filter_matches() {
    let mut chain = TransformChain::new(
        engine(),
        "users",
        &[
            spec(
                "nl-only",
                "filter",
                &[("field", "/user/country"), ("value", "NL")],
            ),
            spec(
                "hash",
                "mask",
                &[("fields", "email"), ("mode", "hash"), ("salt", "pepper")],
            ),
        ],
    )
    .unwrap();
    let out = chain
        .process(vec![
            rec(0, r#"{"email":"a@b.c","user":{"country":"NL"}}"#),
            rec(1, r#"{"email":"d@e.f","user":{"country":"DE"}}"#),
            rec(2, "not json"),
        ])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&values(&out[0])[0]).unwrap();
    assert_eq!(v["email"].as_str().unwrap().len(), 64);
    assert_eq!(out[1], Outcome::Records(vec![]));
    assert!(
        matches!(&out[2], Outcome::Failed { plugin, message } if plugin == "nl-only" && message.contains("not JSON"))
    );
}

#[test]
fn account_parse_parses_transactions() {
    let mut chain = TransformChain::new(
        engine(),
        "accounts",
        &[spec("acct", "account_parse", &[("key_by_account", "true")])],
    )
    .unwrap();
    let out = chain
        .process(vec![
            rec(0, "acct-7:+125.50@1700000000123"),
            rec(1, "acct-7:125@1"),
        ])
        .unwrap();
    assert_eq!(
        values(&out[0]),
        vec![r#"{"account":"acct-7","amount":"125.50","produced_at":1700000000123}"#]
    );
    let Outcome::Records(rs) = &out[0] else {
        panic!()
    };
    assert_eq!(rs[0].key.as_deref(), Some(&b"acct-7"[..]));
    assert!(matches!(&out[1], Outcome::Failed { message, .. } if message.contains("'+' or '-'")));
}

#[test]
fn compiled_components_are_cached_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions {
        cache_dir: Some(dir.path().to_owned()),
    };
    let first = TransformEngine::new(opts.clone()).unwrap();
    let cache = first.cache_dir().unwrap().to_owned();
    assert!(cache.starts_with(dir.path()));
    let started = Instant::now();
    check_plugin(&first, &spec("acct", "account_parse", &[])).unwrap();
    let cold = started.elapsed();
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].extension().is_some_and(|e| e == "cwasm"));
    let mtime = std::fs::metadata(&entries[0]).unwrap().modified().unwrap();

    // A "restart": a new engine with the same cache dir does not compile again.
    let second = TransformEngine::new(opts).unwrap();
    let started = Instant::now();
    check_plugin(&second, &spec("acct", "account_parse", &[])).unwrap();
    let warm = started.elapsed();
    assert_eq!(
        std::fs::metadata(&entries[0]).unwrap().modified().unwrap(),
        mtime
    );
    eprintln!("account_parse load: cold {cold:?}, from disk cache {warm:?}");

    // A corrupt cache entry is ignored and replaced.
    // Rewritten in place while the engines above are alive, as a careless cleaner might:
    // sluice reads cache files into memory (no mmap), so this cannot crash it.
    std::fs::write(&entries[0], b"garbage").unwrap();
    let third = TransformEngine::new(EngineOptions {
        cache_dir: Some(dir.path().to_owned()),
    })
    .unwrap();
    check_plugin(&third, &spec("acct", "account_parse", &[])).unwrap();
    assert!(std::fs::metadata(&entries[0]).unwrap().len() > 1000);
}

#[test]
fn unusable_cache_dir_falls_back_to_memory() {
    let file = tempfile::NamedTempFile::new().unwrap();
    // A regular file where the directory should be.
    let engine = TransformEngine::new(EngineOptions {
        cache_dir: Some(file.path().to_owned()),
    })
    .unwrap();
    assert!(engine.cache_dir().is_none());
    check_plugin(&engine, &spec("parse", "word_parse", &[])).unwrap();
}

#[test]
fn test_plugin_runs_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"key\":\"k\",\"value\":\"#1*a@2\",\"headers\":{\"h\":\"v\"}}\n\n{\"value\":{\"not\":\"a word\"}}\n{\"value\":null}\n",
    )
    .unwrap();
    let cases = test_plugin(engine(), &spec("parse", "word_parse", &[]), &input).unwrap();
    assert_eq!(cases.len(), 3);
    assert_eq!(cases[0].line, 1);
    assert_eq!(cases[0].input.value.as_deref(), Some(&b"#1*a@2"[..]));
    assert_eq!(
        values(&cases[0].outcome),
        vec![r#"{"uid":1,"word":"a","produced_at":2}"#]
    );
    let shown = cases[0].to_string();
    assert!(
        shown.starts_with(
            r##"line 1: key="k" value="#1*a@2" header "h"="v" -> 1 record: [key="k" value="{\"uid\""##
        ),
        "{shown}"
    );
    // Whole, never cut.
    assert!(
        shown.contains(r#"value="{\"uid\":1,\"word\":\"a\",\"produced_at\":2}""#),
        "{shown}"
    );
    let json = cases[0].to_json();
    assert_eq!(json["outcome"], "records", "{json}");
    assert_eq!(json["input"]["headers"]["h"], "v", "{json}");
    assert_eq!(
        json["records"][0]["value"], r#"{"uid":1,"word":"a","produced_at":2}"#,
        "{json}"
    );
    assert_eq!(cases[1].to_json()["outcome"], "failed");
    assert_eq!(cases[2].to_json()["outcome"], "filtered");
    assert!(
        cases[1]
            .to_string()
            .contains("FAILED in parse: malformed word event"),
        "{}",
        cases[1]
    );
    assert!(
        cases[2].to_string().contains("filtered out"),
        "{}",
        cases[2]
    );
    assert_eq!(cases[1].line, 3);
    assert!(matches!(&cases[1].outcome, Outcome::Failed { .. }));
    assert_eq!(cases[2].outcome, Outcome::Records(vec![]));

    std::fs::write(&input, "{\"value\": 1}\nnot json\n").unwrap();
    let err = test_plugin(engine(), &spec("parse", "word_parse", &[]), &input).unwrap_err();
    assert!(err.to_string().contains("in.jsonl:2: not JSON"), "{err}");
}

#[test]
fn scaffolded_plugin_builds_and_runs() {
    // Under the target dir, keeping the scaffolded crate's own `target/` between runs so
    // that its dependencies are compiled once.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("scaffold-test");
    let kept = dir.join("kept-target");
    let crate_path = dir.join("my-upper");
    if crate_path.join("target").is_dir() {
        let _ = std::fs::remove_dir_all(&kept);
        std::fs::rename(crate_path.join("target"), &kept).unwrap();
    }
    let _ = std::fs::remove_dir_all(&crate_path);
    std::fs::create_dir_all(&dir).unwrap();
    let crate_dir = scaffold_plugin("my-upper", &dir, PluginLanguage::Rust).unwrap();
    assert_eq!(crate_dir, crate_path);
    assert!(
        scaffold_plugin("my-upper", &dir, PluginLanguage::Rust).is_err(),
        "refuses to overwrite"
    );
    assert!(scaffold_plugin("Bad Name", &dir, PluginLanguage::Rust).is_err());
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("sluice-plugin-sdk = { path = \"../"),
        "relative path: {manifest}"
    );
    assert!(manifest.contains("/plugins/sdk\" }"), "{manifest}");
    if kept.is_dir() {
        std::fs::rename(&kept, crate_dir.join("target")).unwrap();
    }
    let wasm = build_plugin(&crate_dir).unwrap();
    assert!(wasm.ends_with("my_upper.wasm"), "{}", wasm.display());
    let spec = PluginSpec {
        path: wasm,
        ..spec("upper", "unused", &[("prefix", "> ")])
    };
    let cases = test_plugin(engine(), &spec, &crate_dir.join("sample.jsonl")).unwrap();
    assert_eq!(values(&cases[0].outcome), vec!["> HELLO"]);
    assert_eq!(cases[2].outcome, Outcome::Records(vec![]));
}
