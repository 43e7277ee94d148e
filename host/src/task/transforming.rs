//! The batch being transformed: the preparer (transform chain, schema, mapping) runs on a
//! thread of its own, so the task thread goes on polling Kafka while a plugin works, or
//! while the search for a batch's failing records spends its deadlines. The consumer stays
//! in its group however long a batch takes; its partitions pause when the buffer is full
//! behind it (backpressure).
//!
//! One batch is transformed at a time, and it may be transformed while the batch before it
//! is being written. Its result waits (`ready`) until that write settles; the compare-and-
//! set offsets are taken then, from what committed.
//!
//! A batch whose partitions moved while it was transformed (revoked, or sent back to their
//! stored offsets after a conflict or a given-up write) is *stale* for them: its result is
//! thrown away, and its other partitions are read again from their stored offsets too, so
//! no record is skipped or written twice.
//!
//! This file is the thread's side ([`Worker`]) and the batch it holds ([`Transforming`]);
//! the actor's side of the hand-over (cutting, collecting, starting the write) is in
//! `hand_over.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use super::wake::Wake;
use crate::prepare::{PrepareError, Prepared, Preparer};
use crate::record::{Incoming, Partition};

/// What the worker answers for one batch. On a chain failure (not a record's fault) the
/// batch comes back, to be tried again.
pub(super) type Answer = Result<Prepared, (PrepareError, Option<Vec<Incoming>>)>;

/// The thread that owns the task's [`Preparer`].
pub(super) struct Worker {
    batches: Option<mpsc::Sender<Vec<Incoming>>>,
    /// Raised when the task no longer wants the answer: a search for failing records
    /// stops at its next call instead of spending its whole budget.
    cancel: Arc<AtomicBool>,
    answers: mpsc::Receiver<Answer>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Starts the worker thread, in the caller's span (the task's).
    /// `wake` is rung after each answer.
    /// `runtime` runs the Schema Registry's requests of a batch (the thread blocks on them).
    pub(super) fn start(
        mut preparer: Preparer,
        name: String,
        wake: Arc<Wake>,
        runtime: tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let (batches, requests) = mpsc::channel::<Vec<Incoming>>();
        let (answer, answers) = mpsc::channel::<Answer>();
        let cancel = Arc::new(AtomicBool::new(false));
        preparer.set_cancel(cancel.clone());
        let span = tracing::Span::current();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            let _entered = span.entered();
            for batch in requests {
                // The schemas the batch names, first: a registry that does not answer
                // hands the whole batch back, untouched, to be tried again.
                if preparer.uses_registry()
                    && let Err(error) = runtime.block_on(preparer.resolve(&batch))
                {
                    let error = PrepareError::Registry(error);
                    let again = error.retry_reason().is_some().then_some(batch);
                    if answer.send(Err((error, again))).is_err() {
                        break;
                    }
                    wake.ring();
                    continue;
                }
                // Kept to be tried again if the chain cannot run (cloned only with
                // transforms: without them nothing fails that is not a record's).
                let copy = preparer.has_transforms().then(|| batch.clone());
                let result = preparer.prepare(batch).map_err(|error| {
                    let again = error.retry_reason().is_some();
                    (error, if again { copy } else { None })
                });
                if answer.send(result).is_err() {
                    // The task ended and does not want the answer.
                    break;
                }
                wake.ring();
            }
        })?;
        Ok(Worker {
            batches: Some(batches),
            cancel,
            answers,
            thread: Some(thread),
        })
    }

    /// Hands a batch over.
    pub(super) fn send(&self, batch: Vec<Incoming>) -> Result<(), PrepareError> {
        self.batches
            .as_ref()
            .and_then(|b| b.send(batch).ok())
            .ok_or_else(Self::gone)
    }

    /// The answer for the batch handed over, if it is there.
    pub(super) fn try_answer(&self) -> Result<Option<Answer>, PrepareError> {
        match self.answers.try_recv() {
            Ok(answer) => Ok(Some(answer)),
            Err(mpsc::TryRecvError::Empty) => Ok(None),
            Err(mpsc::TryRecvError::Disconnected) => Err(Self::gone()),
        }
    }

    fn gone() -> PrepareError {
        PrepareError::WorkerGone
    }
}

impl Drop for Worker {
    /// Closes the worker's queue and raises the cancel flag; a batch it is still
    /// transforming is abandoned (its records are read again from the stored offsets), and
    /// the thread ends after the guest call it is in (at most one deadline). Not joined: a
    /// stop must not wait for a plugin's deadline.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.batches = None;
        if let Some(thread) = self.thread.take()
            && thread.is_finished()
        {
            let _ = thread.join();
        }
    }
}

/// The batch handed to the worker, from when it is cut until it is written.
pub(super) struct Transforming {
    /// The last offset of each partition in the batch.
    pub(super) last: HashMap<Partition, i64>,
    /// Records in the batch.
    pub(super) records: u64,
    /// The Kafka timestamps of its records (those that have one), for
    /// `sluice_record_latency_seconds` at commit.
    pub(super) timestamps: Vec<i64>,
    /// Partitions that moved since the batch was cut: the result is stale for them.
    pub(super) stale: Vec<Partition>,
    /// The worker's answer, waiting for the write before it to settle.
    pub(super) ready: Option<Prepared>,
}

impl Transforming {
    /// Marks the batch stale for those of `partitions` that it holds.
    pub(super) fn moved(&mut self, partitions: &[Partition]) {
        for partition in partitions {
            if self.last.contains_key(partition) && !self.stale.contains(partition) {
                self.stale.push(partition.clone());
            }
        }
    }

    /// Its partitions that did not move (they must be read again if the batch is thrown
    /// away).
    pub(super) fn unmoved(&self) -> Vec<Partition> {
        self.last
            .keys()
            .filter(|p| !self.stale.contains(p))
            .cloned()
            .collect()
    }
}
