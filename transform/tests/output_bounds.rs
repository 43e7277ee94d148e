//! The host's memory while it lifts a plugin's answer that points at the same bytes
//! thousands of times. Alone in its test binary: it reads the process's peak resident
//! memory, which other tests running beside it would disturb.

mod common;

use common::handmade::{Answer, HandMade};
use common::*;
use sluice_transform::*;

/// Resident memory now and at its peak since the last reset, in bytes (Linux).
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| panic!("{name} in /proc/self/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Makes the peak resident memory start again from the current one.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
}

#[test]
fn an_answer_aliasing_one_value_is_an_output_limit_within_twice_max_output_bytes() {
    let dir = tempfile::tempdir().unwrap();
    // 16 inputs × 4,096 records × 1 MiB: 64 GiB described with 1 MiB of bytes.
    let made = HandMade::new(Answer::Aliased {
        records: 4096,
        value_bytes: 1 << 20,
    });
    let guest_memory = u64::from(made.pages_needed()) * 65536;
    let mut spec = handmade_spec("alias", made.write(dir.path(), "alias"));
    let max_output_bytes: u64 = 32 << 20;
    spec.limits.max_output_bytes = max_output_bytes;
    let mut chain = TransformChain::new(engine(), "bounds", &[spec]).expect("chain starts");
    let batch: Vec<Record> = (0..16).map(|i| rec(i, "x")).collect();

    reset_peak();
    let (before, _) = rss();
    let err = chain
        .process(batch)
        .expect_err("the answer is far over the caps");
    let (_, peak) = rss();
    let growth = peak.saturating_sub(before);
    let beyond_guest = growth.saturating_sub(guest_memory);
    println!(
        "ALIAS-RSS peak growth {:.1} MiB, guest linear memory {:.1} MiB, beyond it {:.1} MiB, max_output_bytes {} MiB",
        growth as f64 / 1048576.0,
        guest_memory as f64 / 1048576.0,
        beyond_guest as f64 / 1048576.0,
        max_output_bytes >> 20
    );
    assert!(
        matches!(
            err,
            TransformError::OutputLimit {
                what: "bytes",
                limit,
                ..
            } if limit == max_output_bytes
        ),
        "{err}"
    );
    assert!(
        beyond_guest < 2 * max_output_bytes,
        "the host grew by {beyond_guest} bytes beyond the guest's memory while lifting: over twice max_output_bytes"
    );
    // The chain serves the next batch.
    let again = chain
        .process(vec![rec(99, "y")])
        .expect_err("still hostile");
    assert!(
        matches!(again, TransformError::OutputLimit { .. }),
        "{again}"
    );
}
