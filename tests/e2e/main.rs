//! The end-to-end suites, one test binary: each suite is a module, and all share one
//! [`harness`] (broker, databases, `sluice` processes). One binary links librdkafka, sqlx
//! and wasmtime once instead of once per suite.
//!
//! - [`pipeline`]: records through `sluice run` into each database, exactly once.
//! - [`offset_integrity`]: stored offsets the log no longer has, records that skip offsets.
//! - [`offsets_cas`]: the compare-and-set on stored offsets, two writers racing.
//! - [`control_store`]: a connector's target state and restart requests, written and read
//!   back on each database.
//! - [`dedup`]: producer duplicates (`delivery.dedup`) skipped across batches, partitions,
//!   a SIGKILL and two writers at once; ids cleaned up past their window.
//! - [`faults`]: SIGKILLs, database and broker outages, a broker restart, a rebalance storm.
//! - [`admin_surface`]: the admin API against its network: slow and too many
//!   connections, the topics it reads, answers bounded in bytes, HTTPS, the read token,
//!   the `Host` check, an address taken at reload.
//! - [`operate`]: the admin API (Kafka Connect's shapes), metrics, supervision, reload.
//! - [`status_page`]: the status page (`GET /`) served without the token under a policy
//!   that loads nothing from elsewhere, the history it draws, and the page in a real
//!   headless Chromium (pause, tokens, phone width, a process that stops answering, a
//!   connector shown DEGRADED).
//! - [`dashboards`]: the Grafana dashboard and the Prometheus alert rules of `deploy/`
//!   against a real scrape: every metric and label they use exists, after a run that
//!   provokes a gap, a dead letter, a retry and a restart.
//! - [`metrics_listen`]: `admin.metrics_listen`, metrics and probes without the token on a
//!   listener of their own; moved by a reload.
//! - [`pool`]: the seek-consumer pool under concurrent reads, timeouts and a broker
//!   restart; `sluice inspect`, `sluice dry-run` and their admin API endpoints; the
//!   latency of a pooled read beside a consumer per read (`POOL-BENCH`).
//! - [`reload_guard`]: a reload refuses renames and identity changes unless declared
//!   (`renamed_from`), a guarantee switch seeds positions, a reload in progress answers
//!   409 and does not hold up a stop.
//! - [`replay`]: an offsets reset replays: ids and markers it rewinds past are forgotten,
//!   a row written removes its record's dead letter, the CLI refuses while it runs.
//! - [`poison`]: poisoned records under each error policy, dead letters and their redrive.
//! - [`pg_copy`]: PostgreSQL's inserts through `COPY`: every column type at its edges,
//!   COPY's special characters, a table made by hand with narrower types.
//! - [`schema`]: sluice's own tables migrated from an earlier version, a newer one refused.
//! - [`config_corpus`]: `sluice validate` over a corpus of broken files.
//! - [`dlq_topic`]: `sluice dlq redrive` of a dead-letter topic: each record once, however
//!   often and however many redrives run.
//! - [`dlq_forgery`]: dead letters that cannot be forged: unsigned letters checked against
//!   their source records, signed ones (a key rotation too) against their signatures.
//! - [`examples`]: the scenarios of `examples/` run as their READMEs run them, faults too;
//!   [`example_cdc`]: `examples/cdc-replication`, into PostgreSQL and MariaDB through a
//!   SIGKILL.
//! - [`error_classes`]: database errors classified as transient, refused or permanent, each
//!   provoked for real.
//! - [`fuzz_decode_map`]: property tests of decoding and mapping arbitrary records.
//! - [`formats`]: Avro, Protobuf, JSON Schema and Connect JSON keys and values, produced
//!   by Confluent's serializers through the suite's Schema Registry ([`registry`]): every
//!   type, the registry down, unknown ids and broken frames.
//! - [`fuzz_formats`]: arbitrary bytes at every decoder: never a panic.
//! - [`late_topics`]: topics created after `sluice run` subscribed, read within seconds
//!   under librdkafka's default metadata refresh.
//! - [`demo`]: `sluice demo` as the quick start runs it: progress lines and the verdict,
//!   nothing else.
//! - [`debezium`]: a real Debezium 3.6 PostgreSQL connector in a Kafka Connect worker, on
//!   a PostgreSQL cluster of its own with logical decoding, writing to the test broker.
//! - [`cdc`]: Debezium and OpenCDC change streams (`envelope`), versioned upserts and
//!   deletes (`sink.version`): late changes, replays and truncates change nothing they must not.
//! - [`shared_pools`]: many connectors in one process share a few connections per
//!   database (`databases.max_connections`); a server that refuses more is waited out.
//! - [`routing`]: one connector, many topics and tables (`topics_regex`, `sink.table`
//!   templates, `sink.table_from`): a topic created mid-run picked up, Debezium events routed
//!   by their source table, bad table names as dead letters, a SIGKILL across tables.
//!
//! - [`unread`]: a connector that reads nothing is DEGRADED, with its true lag: partitions
//!   no task reads listed, their lag series, `sluice_unread_partitions`, `sluice status`.
//!
//! - [`validate_connect`]: `sluice validate --connect` says which of broker, database,
//!   table and write rights fails.
//!
//! Run one suite with `cargo nextest run --test e2e -E 'test(/^faults::/)'`.

#[macro_use]
mod harness;

mod admin_surface;
mod cdc;
mod config_corpus;
mod control_store;
mod dashboards;
mod debezium;
mod dedup;
mod demo;
mod dlq_forgery;
mod dlq_topic;
mod error_classes;
mod example_cdc;
mod examples;
mod faults;
mod formats;
mod fuzz_decode_map;
mod fuzz_formats;
mod late_topics;
mod metrics_listen;
mod offset_integrity;
mod offsets_cas;
mod operate;
mod pg_copy;
mod pipeline;
mod plugin_stdio;
mod poison;
mod pool;
mod registry;
mod reload_guard;
mod replay;
mod routing;
mod schema;
mod shared_pools;
mod shown_config;
mod status_page;
mod unread;
mod validate_connect;
