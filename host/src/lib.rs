//! sluice: a Kafka Connect-style sink host. A record's path through this crate, one module
//! per stage:
//!
//! - [`config`]: `connectors.yaml`, checked.
//! - [`source`]: the Kafka consumer of a task, and its rebalance handling.
//! - [`validate`]: arrival checks (size, headers) and the connector's JSON Schema.
//! - [`prepare`]: a batch through transforms, schema and mapping, failures kept apart.
//! - [`map`]: a record's value and metadata to column values.
//! - [`sink`]: one database transaction per batch, rows and offsets together.
//! - [`failure`], [`dead_letter`]: a failed record, and where the `dlq` policy keeps it.
//! - [`retry`]: waiting out transient failures (`errors.retry`).
//! - [`task`]: the actor that drives one consumer through its state machine.
//! - [`supervisor`]: the connectors and tasks of one process.
//! - [`cli`]: the `sluice` command line.

pub mod cli;
pub mod config;
pub mod dead_letter;
pub mod failure;
pub mod map;
pub mod prepare;
pub mod record;
pub mod retry;
pub mod sink;
pub mod source;
pub mod supervisor;
pub mod task;
pub mod validate;
