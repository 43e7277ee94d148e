//! Hostile plugins: every misbehaviour is contained by its limit, reported with an error
//! that names the plugin and the cause, and leaves the engine (and the chain) usable.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sluice_transform::*;

/// A 300 ms CPU deadline, for the tests whose point is hitting it.
fn fast_deadline(mut spec: PluginSpec) -> PluginSpec {
    spec.limits.timeout = Duration::from_millis(300);
    spec
}

/// Runs one batch through a one-plugin chain of `spec`, expecting a batch error.
fn batch_error(spec: PluginSpec) -> TransformError {
    let name = spec.name.clone();
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).expect("chain starts");
    let err = chain
        .process(vec![rec(0, "a"), rec(1, "b")])
        .expect_err("batch must fail");
    assert_eq!(err.plugin(), Some(name.as_str()), "{err}");
    assert!(
        err.to_string().contains(&format!("plugin `{name}`")),
        "{err}"
    );
    assert!(err.is_batch_failure(), "{err}");
    // The same chain serves the next batch (it re-instantiates), and fails the same way
    // rather than wedging.
    let again = chain.process(vec![rec(2, "c")]).expect_err("still hostile");
    assert_eq!(
        std::mem::discriminant(&again),
        std::mem::discriminant(&err),
        "{again}"
    );
    assert_engine_healthy();
    err
}

fn outcomes(spec: PluginSpec) -> Vec<Outcome> {
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).expect("chain starts");
    let out = chain.process(vec![rec(0, "a")]).expect("batch runs");
    assert_engine_healthy();
    out
}

#[test]
fn infinite_loop_hits_the_cpu_deadline() {
    let started = Instant::now();
    let err = batch_error(fast_deadline(hostile("loop", &[])));
    assert!(
        matches!(err, TransformError::Timeout { timeout, call: "process", .. } if timeout == Duration::from_millis(300)),
        "{err}"
    );
    assert!(err.to_string().contains("CPU deadline"), "{err}");
    // Two deadlines of 300 ms, plus compile and control batches.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn infinite_loop_in_init_hits_the_deadline() {
    let err = TransformChain::new(
        engine(),
        "hostile",
        &[fast_deadline(hostile("init-loop", &[]))],
    )
    .unwrap_err();
    assert!(
        matches!(err, TransformError::Timeout { call: "init", .. }),
        "{err}"
    );
    assert_engine_healthy();
}

#[test]
fn memory_bomb_hits_the_memory_limit() {
    let mut spec = hostile("memory", &[]);
    spec.limits.memory_bytes = 16 << 20;
    spec.limits.timeout = Duration::from_secs(5);
    let err = batch_error(spec);
    assert!(
        matches!(err, TransformError::MemoryLimit { limit_bytes, .. } if limit_bytes == 16 << 20),
        "{err}"
    );
    assert!(err.to_string().contains("memory limit"), "{err}");
}

#[test]
fn panic_is_a_trap_with_the_panic_message() {
    let err = batch_error(hostile("panic", &[]));
    let TransformError::Trap { call, last_log, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*call, "process");
    assert!(
        last_log
            .as_deref()
            .unwrap_or("")
            .contains("panic on purpose"),
        "{err}"
    );
    assert!(!err.to_string().contains('\n'), "one line: {err}");
}

#[test]
fn unreachable_is_a_trap() {
    let err = batch_error(hostile("unreachable", &[]));
    assert!(matches!(err, TransformError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("unreachable"), "{err}");
}

#[test]
fn deep_recursion_is_a_stack_overflow_trap() {
    let err = batch_error(hostile("recursion", &[]));
    assert!(matches!(err, TransformError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("stack"), "{err}");
}

#[test]
fn a_trap_fails_the_batch_and_the_chain_recovers() {
    let mut chain = TransformChain::new(
        engine(),
        "hostile",
        &[
            spec("parse", "word_parse", &[]),
            hostile(
                "panic",
                &[("on", "{\"uid\":2,\"word\":\"boom\",\"produced_at\":0}")],
            ),
        ],
    )
    .unwrap();
    let err = chain
        .process(vec![rec(0, "#1*ok@0"), rec(1, "#2*boom@0")])
        .unwrap_err();
    assert_eq!(err.plugin(), Some("hostile-panic"));
    // The bad record isolated (as the task does by splitting), the rest goes through
    // with a fresh instance.
    let out = chain.process(vec![rec(0, "#1*ok@0")]).unwrap();
    assert_eq!(
        values(&out[0]),
        vec![r#"{"uid":1,"word":"ok","produced_at":0}"#]
    );
}

#[test]
fn filesystem_is_not_reachable() {
    let out = outcomes(hostile("file", &[]));
    match &out[0] {
        Outcome::Failed { plugin, message } => {
            assert_eq!(plugin, "hostile-file");
            assert!(message.contains("open /etc/passwd failed"), "{message}");
        }
        other => panic!("the plugin read a host file: {other:?}"),
    }
    // Relative paths and the current directory are not granted either.
    let out = outcomes(hostile("file", &[("path", "Cargo.toml")]));
    assert!(matches!(&out[0], Outcome::Failed { .. }), "{out:?}");
}

#[test]
fn environment_is_empty() {
    // SAFETY: set before any plugin reads it; this test binary's other tests do not
    // depend on this variable.
    unsafe { std::env::set_var("SLUICE_TEST_SECRET", "hunter2") };
    let out = outcomes(hostile("env", &[]));
    assert_eq!(values(&out[0]), vec!["vars=0 home=false"]);
}

#[test]
fn network_is_not_reachable() {
    // Something listens here on these machines (PostgreSQL); a local listener proves it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let out = outcomes(hostile("socket", &[("addr", &addr)]));
    match &out[0] {
        Outcome::Failed { message, .. } => assert!(message.contains("connect"), "{message}"),
        other => panic!("the plugin opened a socket: {other:?}"),
    }
}

#[test]
fn too_many_output_records_hit_the_cap() {
    let mut spec = hostile("flood", &[("count", "5000")]);
    spec.limits.max_output_records = 1000;
    let err = batch_error(spec);
    assert!(
        matches!(
            err,
            TransformError::OutputLimit {
                what: "records",
                limit: 1000,
                got: 10000,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn too_many_output_bytes_hit_the_cap() {
    let mut spec = hostile("big", &[("size", "1048576")]);
    spec.limits.max_output_bytes = 512 << 10;
    let err = batch_error(spec);
    assert!(
        matches!(err, TransformError::OutputLimit { what: "bytes", .. }),
        "{err}"
    );
}

#[test]
fn wrong_outcome_count_is_malformed() {
    let err = batch_error(hostile("short", &[]));
    assert!(matches!(err, TransformError::Malformed { .. }), "{err}");
    assert!(
        err.to_string().contains("1 outcomes for 2 input records"),
        "{err}"
    );
}

#[test]
fn failing_init_is_reported() {
    let err = TransformChain::new(engine(), "hostile", &[hostile("init-fail", &[])]).unwrap_err();
    assert!(matches!(err, TransformError::Init { .. }), "{err}");
    assert!(
        err.to_string().contains("init refuses this config"),
        "{err}"
    );
    assert!(!err.is_batch_failure());
    let err = check_plugin(engine(), &hostile("no-such-mode", &[])).unwrap_err();
    assert!(err.to_string().contains("unknown mode"), "{err}");
    assert_engine_healthy();
}

#[test]
fn stdio_and_log_spam_are_contained() {
    assert_eq!(values(&outcomes(hostile("print", &[]))[0]), vec!["a"]);
    // 100k host calls: give it time on a loaded machine; the point is that it completes
    // and the lines past the cap are dropped (see tests/logging.rs).
    let mut spam = hostile("log-spam", &[("count", "100000")]);
    spam.limits.timeout = Duration::from_secs(10);
    assert_eq!(values(&outcomes(spam)[0]), vec!["a"]);
}

#[test]
fn bad_files_are_reported() {
    let missing = PluginSpec {
        path: "/nonexistent/x.wasm".into(),
        ..spec("ghost", "word_parse", &[])
    };
    let err = check_plugin(engine(), &missing).unwrap_err();
    assert!(matches!(err, TransformError::Read { .. }), "{err}");
    assert!(err.to_string().contains("plugin `ghost`"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x01\0\0\0garbage").unwrap();
    let err = check_plugin(
        engine(),
        &PluginSpec {
            path: junk,
            ..spec("junk", "word_parse", &[])
        },
    )
    .unwrap_err();
    assert!(matches!(err, TransformError::Invalid { .. }), "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");

    // A component of another world.
    let other = PluginSpec {
        ..spec("other", "abi_bench", &[])
    };
    let err = check_plugin(engine(), &other).unwrap_err();
    assert!(matches!(err, TransformError::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("sluice:transform@0.1.0"), "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
    assert_engine_healthy();
}

#[test]
fn process_isolating_finds_the_poison_record() {
    let boom = "{\"uid\":2,\"word\":\"boom\",\"produced_at\":0}";
    let mut chain = TransformChain::new(
        engine(),
        "hostile",
        &[
            spec("parse", "word_parse", &[]),
            hostile("panic", &[("on", boom)]),
        ],
    )
    .unwrap();
    let batch: Vec<_> = (0..8)
        .map(|i| {
            rec(
                i,
                &format!("#{}*{}@0", i, if i == 5 { "boom" } else { "ok" }),
            )
        })
        .map(|mut r| {
            if r.offset == 5 {
                r.value = Some(b"#2*boom@0".to_vec());
            }
            r
        })
        .collect();
    let out = chain.process_isolating(batch, 16).unwrap();
    assert_eq!(out.len(), 8);
    for (i, o) in out.iter().enumerate() {
        if i == 5 {
            assert!(
                matches!(o, Outcome::Failed { plugin, message } if plugin == "hostile-panic" && message.contains("trapped")),
                "{o:?}"
            );
        } else {
            assert_eq!(
                values(o),
                vec![format!("{{\"uid\":{i},\"word\":\"ok\",\"produced_at\":0}}")]
            );
        }
    }
    let stats = chain.stats();
    assert_eq!(stats[1].plugin, "hostile-panic");
    assert!(stats[1].batch_failures >= 3, "{stats:?}");
    assert!(stats[1].instantiations >= 4, "{stats:?}");
    assert_eq!(stats[0].records_in, stats[0].records_out);

    // Every record poisonous and a small budget: gives up quickly, nothing stalls.
    let mut chain =
        TransformChain::new(engine(), "hostile", &[fast_deadline(hostile("loop", &[]))]).unwrap();
    let started = Instant::now();
    let out = chain
        .process_isolating((0..64).map(|i| rec(i, "x")).collect(), 3)
        .unwrap();
    assert_eq!(out.len(), 64);
    assert!(out.iter().all(|o| matches!(o, Outcome::Failed { .. })));
    assert!(out.iter().any(
        |o| matches!(o, Outcome::Failed { message, .. } if message.starts_with("not isolated: "))
    ));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn sleeping_is_denied_not_waited_for() {
    let started = Instant::now();
    let err = batch_error(hostile("sleep", &[]));
    assert!(matches!(err, TransformError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("tried to sleep"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn exit_is_a_trap() {
    let err = batch_error(hostile("exit", &[]));
    assert!(matches!(err, TransformError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("called exit("), "{err}");
}

#[test]
fn plugins_cannot_rewrite_offsets() {
    let mut chain = TransformChain::new(
        engine(),
        "hostile",
        &[
            hostile("rewrite-meta", &[]),
            spec("parse", "word_parse", &[]),
        ],
    )
    .unwrap();
    let mut input = Record::from_value("other-topic", 3, 77, "#1*a@2");
    input.timestamp = Some(5);
    let out = chain.process(vec![rec(10, "#1*a@2"), input]).unwrap();
    let Outcome::Records(a) = &out[0] else {
        panic!("{out:?}")
    };
    let Outcome::Records(b) = &out[1] else {
        panic!("{out:?}")
    };
    assert_eq!(
        (a[0].topic.as_str(), a[0].partition, a[0].offset),
        ("words", 0, 10)
    );
    assert_eq!(
        (
            b[0].topic.as_str(),
            b[0].partition,
            b[0].offset,
            b[0].timestamp
        ),
        ("other-topic", 3, 77, Some(5))
    );
}

#[test]
fn a_hung_plugin_does_not_stall_other_chains() {
    // Chain A spins until its 1.5 s deadline on another thread; chain B, in the same
    // engine, keeps transforming meanwhile.
    let mut looping = hostile("loop", &[]);
    looping.limits.timeout = Duration::from_millis(1500);
    let mut a = TransformChain::new(engine(), "a", &[looping]).unwrap();
    let mut b = TransformChain::new(engine(), "b", &[spec("parse", "word_parse", &[])]).unwrap();
    let started = Instant::now();
    let hung = std::thread::spawn(move || {
        let err = a.process(vec![rec(0, "x")]).unwrap_err();
        (err, started.elapsed())
    });
    let mut batches = 0;
    while batches < 20 {
        let out = b.process(vec![rec(batches, "#1*ok@2")]).unwrap();
        assert_eq!(
            values(&out[0]),
            vec![r#"{"uid":1,"word":"ok","produced_at":2}"#]
        );
        batches += 1;
    }
    let b_done = started.elapsed();
    let (err, a_done) = hung.join().unwrap();
    assert!(matches!(err, TransformError::Timeout { .. }), "{err}");
    assert!(
        b_done < a_done,
        "chain b finished at {b_done:?}, after the hung chain a ({a_done:?})"
    );
    assert!(a_done >= Duration::from_millis(1400), "{a_done:?}");
}
