//! The end-to-end suites, one test binary: each suite is a module, and all share one
//! [`harness`] (broker, databases, `sluice` processes). One binary links librdkafka, sqlx
//! and wasmtime once instead of once per suite.
//!
//! - [`pipeline`]: records through `sluice run` into each database, exactly once.
//! - [`offset_integrity`]: stored offsets the log no longer has, records that skip offsets.
//! - [`offsets_cas`]: the compare-and-set on stored offsets, two writers racing.
//! - [`dedup`]: producer duplicates (`delivery.dedup`) skipped across batches, partitions,
//!   a SIGKILL and two writers at once; ids cleaned up past their window.
//! - [`faults`]: SIGKILLs, database and broker outages, a broker restart, a rebalance storm.
//! - [`operate`]: the admin API (Kafka Connect's shapes), metrics, supervision, reload.
//! - [`pool`]: the seek-consumer pool under concurrent reads, timeouts and a broker
//!   restart; `sluice inspect`, `sluice dry-run` and their admin API endpoints; the
//!   latency of a pooled read beside a consumer per read (`POOL-BENCH`).
//! - [`poison`]: poisoned records under each error policy, dead letters and their redrive.
//! - [`pg_copy`]: PostgreSQL's inserts through `COPY`: every column type at its edges,
//!   COPY's special characters, a table made by hand with narrower types.
//! - [`schema`]: sluice's own tables migrated from an earlier version, a newer one refused.
//! - [`config_corpus`]: `sluice validate` over a corpus of broken files.
//! - [`dlq_topic`]: `sluice dlq redrive` of a dead-letter topic: each record once, however
//!   often and however many redrives run.
//! - [`examples`]: the scenarios of `examples/` run as their READMEs run them, faults too.
//! - [`error_classes`]: database errors classified as transient, refused or permanent, each
//!   provoked for real.
//! - [`fuzz_decode_map`]: property tests of decoding and mapping arbitrary records.
//!
//! Run one suite with `cargo nextest run --test e2e -E 'test(/^faults::/)'`.

#[macro_use]
mod harness;

mod config_corpus;
mod dedup;
mod dlq_topic;
mod error_classes;
mod examples;
mod faults;
mod fuzz_decode_map;
mod offset_integrity;
mod offsets_cas;
mod operate;
mod pg_copy;
mod pipeline;
mod poison;
mod pool;
mod schema;
mod shown_config;
