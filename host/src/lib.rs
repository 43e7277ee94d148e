//! sluice: a Kafka Connect-style sink host. The crate's rooms follow a record's path, and
//! each room imports only the rooms listed before it (`docs/architecture.md` holds the
//! list; `tests/layering.rs` checks it against the code):
//!
//! - [`logging`]: the process's log output (text, or JSON with span fields flattened), and
//!   the rate limit of a warning that repeats.
//! - [`db_kind`]: which database a sink URL names, and what sluice knows of each kind
//!   before it connects (schemes, name limits, column bounds).
//! - [`record`], [`failure`]: the types every stage speaks: a record as it arrives, a
//!   record that failed and the dead letter it becomes.
//! - [`metrics`]: the process's Prometheus metrics (every stage counts into them).
//! - [`config`]: `connectors.yaml`, read and checked as text; [`validate`] (arrival checks
//!   and the connector's JSON Schema) is what the config check compiles and the pipeline
//!   applies.
//! - [`format`]: the decode stage: the Confluent frame, the Schema Registry, one decoder
//!   per format.
//! - [`retry`]: waiting out transient failures (`errors.retry`).
//! - [`map`]: a record's value and metadata to column values.
//! - [`dedup`]: producer-duplicate detection (`delivery.dedup`): a record's id as it
//!   arrived, and which of a batch's ids are duplicates.
//! - [`prepare`]: a batch through arrival checks, transforms, schema and mapping, failures
//!   kept apart.
//! - [`sink`]: database I/O: one transaction per batch with rows, offsets (the
//!   compare-and-set) and the dead-letter table.
//! - [`kafka`]: the task's consumer and its rebalance callback, the dead-letter producer,
//!   the embedded cluster.
//! - [`pool`]: the seek-consumer pool: assign-mode consumers lent for one read at a
//!   partition and position (`inspect`, `dry-run`, the admin API's record reads).
//! - [`reset`]: an operator's offsets reset, and what it forgets with the offsets.
//! - [`deliver`]: the error policy applied to a prepared batch and the batch written,
//!   refused rows isolated; used by the task and by `sluice dlq redrive`.
//! - [`task`]: the actor that drives one consumer through its state machine.
//! - [`supervisor`]: the connectors of one process, each under a runner of its own that
//!   restarts failed tasks and applies the operator's pause, resume, stop and restart.
//! - [`admin`]: the admin HTTP server: Kafka Connect's REST API shapes, `/metrics`,
//!   `/healthz`, `/readyz`, `/reload`.
//! - [`server`]: the `sluice run` process: signals, reload, the admin listener's start, the
//!   bounded stop, and the files a configuration names read before it runs.
//! - [`cli`]: the `sluice` command line: argument parsing and one file per command.
//!
//! `docs/architecture.md` says who owns which thread and where each guarantee is kept.

pub mod admin;
pub mod cli;
pub mod config;
pub mod db_kind;
pub mod dedup;
pub mod deliver;
pub mod failure;
pub mod format;
pub mod kafka;
pub mod logging;
pub mod map;
pub mod metrics;
pub mod pool;
pub mod prepare;
pub mod record;
pub mod reset;
pub mod retry;
pub mod server;
pub mod sink;
pub mod supervisor;
pub mod task;
pub mod validate;
pub mod verify;
