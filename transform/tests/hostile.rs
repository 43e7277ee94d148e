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
                got: Some(10000),
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

fn budget(max_failed_calls: usize) -> Isolation {
    Isolation {
        max_failed_calls,
        max_time: Duration::from_secs(120),
    }
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
    let out = chain.process_isolating(batch, budget(16)).unwrap();
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
        .process_isolating((0..64).map(|i| rec(i, "x")).collect(), budget(3))
        .unwrap();
    assert_eq!(out.len(), 64);
    assert!(
        out.iter()
            .all(|o| matches!(o, Outcome::Failed { .. } | Outcome::NotIsolated { .. }))
    );
    assert!(out.iter().any(|o| matches!(o, Outcome::NotIsolated { .. })));
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

/// 1 % of a batch spins: a batch that ran out of its deadline is retried record by record,
/// so each spinning record costs one deadline (halving paid one at every level).
#[test]
fn spinning_records_cost_one_deadline_each() {
    let mut spinning = hostile("loop", &[("on", "spin")]);
    spinning.limits.timeout = Duration::from_millis(200);
    let mut chain = TransformChain::new(engine(), "hostile", &[spinning]).unwrap();
    let batch: Vec<_> = (0..400)
        .map(|i| rec(i, if i % 100 == 37 { "spin" } else { "ok" }))
        .collect();
    let started = Instant::now();
    let out = chain
        .process_isolating(batch, Isolation::default())
        .unwrap();
    let elapsed = started.elapsed();
    let stats = chain.stats();
    println!(
        "SPIN-1PCT 400 records, 4 spinning, deadline 200 ms: {elapsed:?}, {} failed calls, {} calls",
        stats[0].batch_failures,
        stats[0].calls + stats[0].batch_failures
    );
    for (i, o) in out.iter().enumerate() {
        if i % 100 == 37 {
            assert!(
                matches!(o, Outcome::Failed { message, .. } if message.contains("CPU deadline")),
                "{i}: {o:?}"
            );
        } else {
            assert_eq!(values(o), vec!["ok".to_string()], "{i}");
        }
    }
    // The whole batch, then each spinning record alone: five deadlines.
    assert_eq!(stats[0].batch_failures, 5, "{stats:?}");

    // The baseline, in the same run: the search sluice did before, halving every failing
    // batch (no budget reached here), on a fresh chain of the same plugin.
    let mut spinning = hostile("loop", &[("on", "spin")]);
    spinning.limits.timeout = Duration::from_millis(200);
    let mut chain = TransformChain::new(engine(), "hostile", &[spinning]).unwrap();
    let batch: Vec<_> = (0..400)
        .map(|i| rec(i, if i % 100 == 37 { "spin" } else { "ok" }))
        .collect();
    let started = Instant::now();
    let halved = halving(&mut chain, batch);
    println!(
        "SPIN-1PCT baseline (halving): {:?}, {} failed calls",
        started.elapsed(),
        chain.stats()[0].batch_failures
    );
    assert_eq!(halved, out.len());
}

/// The isolation sluice did before: split every failing batch in halves down to single
/// records. Returns how many outcomes it found.
fn halving(chain: &mut TransformChain, batch: Vec<Record>) -> usize {
    match chain.process(batch.clone()) {
        Ok(outcomes) => outcomes.len(),
        Err(_) if batch.len() <= 1 => batch.len(),
        Err(_) => {
            let mut first = batch;
            let second = first.split_off(first.len() / 2);
            halving(chain, first) + halving(chain, second)
        }
    }
}

/// The search has a wall-clock budget: a plugin that spins on everything is given up on
/// after `max_time`, its records reported as not isolated.
#[test]
fn isolation_stops_at_its_time_budget() {
    let mut spinning = hostile("loop", &[]);
    spinning.limits.timeout = Duration::from_millis(100);
    let mut chain = TransformChain::new(engine(), "hostile", &[spinning]).unwrap();
    let budget = Isolation {
        max_failed_calls: 10_000,
        max_time: Duration::from_millis(700),
    };
    let out = chain
        .process_isolating((0..50).map(|i| rec(i, "x")).collect(), budget)
        .unwrap();
    assert_eq!(out.len(), 50);
    let not_isolated = out
        .iter()
        .filter(|o| matches!(o, Outcome::NotIsolated { .. }))
        .count();
    let failed_alone = out
        .iter()
        .filter(
            |o| matches!(o, Outcome::Failed { message, .. } if message.contains("CPU deadline")),
        )
        .count();
    assert_eq!(not_isolated + failed_alone, 50, "{out:?}");
    assert!(not_isolated >= 40, "most were not reached: {not_isolated}");
    assert!(
        matches!(&out[49], Outcome::NotIsolated { reason, .. } if reason.contains("spent isolating")),
        "{:?}",
        out[49]
    );
    // Failed calls bounded by the time budget: the batch, then one per record until it ran out.
    assert!(chain.stats()[0].batch_failures <= 10, "{:?}", chain.stats());
}

/// A plugin whose `init` starts to spin (on re-instantiation after a trap) is a chain
/// failure: not a record's fault, so it is not isolated or dead-lettered.
#[test]
fn init_that_spins_later_is_a_chain_failure() {
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 1000;
    let mut spec = hostile(
        "init-loop-after",
        &[("after", &after.to_string()), ("on", "boom")],
    );
    spec.limits.timeout = Duration::from_millis(200);
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).expect("init runs in time");
    std::thread::sleep(Duration::from_millis(1100));
    let err = chain
        .process_isolating(vec![rec(0, "boom"), rec(1, "ok")], Isolation::default())
        .expect_err("re-instantiation times out in init");
    assert!(
        matches!(err, TransformError::Timeout { call: "init", .. }),
        "{err}"
    );
    assert!(err.is_chain_failure() && !err.is_batch_failure(), "{err}");
}

/// A plugin that keeps a little more memory at every batch reaches its cap; the chain
/// comes back with a fresh instance.
#[test]
fn memory_grown_slowly_across_batches_hits_the_cap() {
    let mut spec = hostile("grow", &[("size", &(4 << 20).to_string())]);
    spec.limits.memory_bytes = 32 << 20;
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).unwrap();
    let mut calls = 0;
    let err = loop {
        calls += 1;
        assert!(calls < 20, "never reached the cap");
        match chain.process(vec![rec(calls, "x")]) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            err,
            TransformError::MemoryLimit {
                call: "process",
                ..
            }
        ),
        "{err}"
    );
    assert!(calls >= 3, "the cap was hit after {calls} calls");
    chain
        .process(vec![rec(100, "x")])
        .expect("a fresh instance serves the next batch");
}

#[test]
fn a_bad_cabi_realloc_fails_the_batch_not_the_host() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    let mut made = HandMade::new(Answer::Empty);
    made.bad_realloc = Some(0xFFFF_FF00);
    let spec = handmade_spec("bad-realloc", made.write(dir.path(), "bad_realloc"));
    let err = batch_error(spec);
    assert!(matches!(err, TransformError::Malformed { .. }), "{err}");
}

#[test]
fn a_trap_in_post_return_fails_the_batch() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    let mut made = HandMade::new(Answer::Empty);
    made.trap_in_post_return = true;
    let spec = handmade_spec("post-trap", made.write(dir.path(), "post_trap"));
    let err = batch_error(spec);
    assert!(matches!(err, TransformError::Trap { .. }), "{err}");
}

#[test]
fn a_well_behaved_handmade_plugin_works() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    let spec = handmade_spec(
        "empty",
        HandMade::new(Answer::Empty).write(dir.path(), "empty"),
    );
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).unwrap();
    let out = chain.process(vec![rec(0, "a"), rec(1, "b")]).unwrap();
    assert_eq!(out.len(), 2);
    assert!(matches!(&out[0], Outcome::Records(r) if r.len() == 1 && r[0].offset == 0));
}

/// Millions of empty headers on one record, or a million empty records: each counts at
/// its host overhead, so both are output limits rather than hundreds of MB of host heap.
#[test]
fn empty_headers_and_empty_records_count() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();

    let spec = handmade_spec(
        "headers",
        HandMade::new(Answer::EmptyHeaders { headers: 3_000_000 }).write(dir.path(), "headers"),
    );
    let err = batch_error(spec);
    assert!(
        matches!(err, TransformError::OutputLimit { what: "bytes", .. }),
        "{err}"
    );

    let spec = handmade_spec(
        "some-headers",
        HandMade::new(Answer::EmptyHeaders {
            headers: MAX_HEADERS_PER_RECORD as u32 + 1,
        })
        .write(dir.path(), "some_headers"),
    );
    let err = batch_error(spec);
    assert!(
        matches!(
            err,
            TransformError::OutputLimit {
                what: "headers in one record",
                ..
            }
        ),
        "{err}"
    );

    let records =
        HandMade::new(Answer::EmptyRecords { records: 1_000_000 }).write(dir.path(), "records");
    let err = batch_error(handmade_spec("records", records.clone()));
    assert!(
        matches!(err, TransformError::OutputLimit { what: "bytes", .. }),
        "{err}"
    );

    // The documented record cap is reachable: with room for a million records' host
    // structures, a million empty records pass, and one more is over the record cap.
    let mut roomy = handmade_spec("records", records);
    roomy.limits.max_output_bytes = 1_000_001 * RECORD_OVERHEAD_BYTES + (1 << 20);
    let mut chain = TransformChain::new(engine(), "hostile", &[roomy.clone()]).unwrap();
    let out = chain
        .process(vec![rec(0, "a")])
        .expect("a million records fit");
    assert!(matches!(&out[0], Outcome::Records(r) if r.len() == 1_000_000));
    drop(out);
    let over = HandMade::new(Answer::EmptyRecords { records: 1_000_001 })
        .write(dir.path(), "records_over");
    let mut spec = roomy;
    spec.path = over;
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).unwrap();
    let err = chain
        .process(vec![rec(0, "a")])
        .expect_err("over the record cap");
    assert!(
        matches!(
            err,
            TransformError::OutputLimit {
                what: "records",
                limit: 1_000_000,
                ..
            }
        ),
        "{err}"
    );
}

/// All linear memories of a plugin together stay under `limits.memory`.
#[test]
fn memories_are_capped_together() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    let mut made = HandMade::new(Answer::Empty);
    // The answer's structures need about 18 MiB; a second memory of 12 MiB is within the
    // cap alone, not together.
    made.extra_memory_pages = Some(192);
    let mut spec = handmade_spec("two-memories", made.write(dir.path(), "two_memories"));
    spec.limits.memory_bytes = made.pages_needed() as u64 * 65536 + (4 << 20);
    let err = TransformChain::new(engine(), "hostile", &[spec]).expect_err("over the cap");
    assert!(matches!(err, TransformError::MemoryLimit { .. }), "{err}");
}

/// A wait on the clock is denied whatever WASI 0.2 patch version the plugin was built
/// against (the linker matches 0.2.x imports to the version wasmtime-wasi links; the
/// denial must be on that one).
#[test]
fn waiting_on_the_clock_is_denied_at_other_wasi_versions() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    for version in ["0.2.0", "0.2.3", "0.2.6"] {
        let mut made = HandMade::new(Answer::Empty);
        made.wait_on_clock = Some(version);
        let name = format!("waits-{}", version.replace('.', "_"));
        let mut spec = handmade_spec(&name, made.write(dir.path(), &name));
        spec.limits.timeout = Duration::from_millis(500);
        let mut chain = TransformChain::new(engine(), "hostile", &[spec]).expect("loads");
        let started = Instant::now();
        let err = chain
            .process(vec![rec(0, "a")])
            .expect_err("the wait is denied");
        assert!(
            matches!(&err, TransformError::Trap { trap, .. } if trap.contains("sleep or wait")),
            "{version}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{version}: waited"
        );
    }
}

/// Every WASI resource a plugin holds takes a slot in the host: a loop of `get-stdout()`
/// that drops none of the streams fails at the cap instead of growing host memory.
#[test]
fn leaked_host_resources_hit_the_cap() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    let mut made = HandMade::new(Answer::Empty);
    made.leak_stdout = Some(1_000_000);
    let spec = handmade_spec("leaks", made.write(dir.path(), "leaks"));
    let err = batch_error(spec);
    assert!(
        matches!(&err, TransformError::Trap { trap, .. } if trap.contains("1024 host resources")),
        "{err}"
    );
}

/// Tables are capped too (all of a plugin's tables together): a table of millions of
/// elements is refused when the plugin is instantiated.
#[test]
fn huge_tables_are_refused() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    let mut made = HandMade::new(Answer::Empty);
    made.table_elements = Some(4_000_000);
    let spec = handmade_spec("big-table", made.write(dir.path(), "big_table"));
    let err = TransformChain::new(engine(), "hostile", &[spec]).expect_err("over the cap");
    assert!(
        matches!(
            &err,
            TransformError::Trap {
                call: "instantiate",
                ..
            }
        ),
        "{err}"
    );
}

/// A plugin's own error text cannot pass for a record the search did not reach: "not
/// isolated" is its own outcome, never a message.
#[test]
fn a_plugin_error_cannot_pose_as_not_isolated() {
    use common::handmade::{Answer, HandMade};
    let dir = tempfile::tempdir().unwrap();
    let spec = handmade_spec(
        "spoof",
        HandMade::new(Answer::Error("not isolated: spoofed by the plugin"))
            .write(dir.path(), "spoof"),
    );
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).unwrap();
    let out = chain
        .process_isolating(vec![rec(0, "a"), rec(1, "b")], Isolation::default())
        .unwrap();
    for o in &out {
        assert!(
            matches!(o, Outcome::Failed { message, .. } if message == "not isolated: spoofed by the plugin"),
            "{o:?}"
        );
    }
}

/// A search stops at the chain's cancel flag: what it did not reach is not isolated.
#[test]
fn isolation_stops_when_cancelled() {
    let mut spinning = hostile("loop", &[]);
    spinning.limits.timeout = Duration::from_millis(100);
    let mut chain = TransformChain::new(engine(), "hostile", &[spinning]).unwrap();
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    chain.set_cancel(cancel.clone());
    let raise = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(350));
        cancel.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let out = chain
        .process_isolating(
            (0..100).map(|i| rec(i, "x")).collect(),
            Isolation::default(),
        )
        .unwrap();
    raise.join().unwrap();
    assert!(
        matches!(&out[99], Outcome::NotIsolated { reason, .. } if reason.contains("cancelled")),
        "{:?}",
        out[99]
    );
    assert!(chain.stats()[0].batch_failures < 20, "{:?}", chain.stats());
}

/// A plugin spec's `Debug` shows its config's keys, never their values.
#[test]
fn plugin_spec_debug_hides_config_values() {
    let spec = spec("parse", "word_parse", &[("api_token", "hunter2")]);
    let shown = format!("{spec:?}");
    assert!(
        shown.contains("api_token") && !shown.contains("hunter2"),
        "{shown}"
    );
}
