//! The process's end of a connector: the handle that starts its runner, sends it commands
//! and reads the view of its state the runner publishes (both in `messages.rs`).

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use super::connector::Runner;
use super::context::Context;
use super::coverage::Coverage;
use super::history::History;
use super::messages::{Command, ConnectorView};
use crate::config::ConnectorConfig;
use crate::metrics::ConnectorMetrics;
use crate::sink::control::Target;

/// The process's end of a connector.
pub struct ConnectorHandle {
    pub name: String,
    pub config: Arc<ConnectorConfig>,
    pub metrics: Arc<ConnectorMetrics>,
    /// Its throughput over the last minutes (the status page's chart).
    pub history: Arc<History>,
    /// The partitions of its topics that no task reads.
    pub coverage: Arc<Coverage>,
    /// What a reload compares: the connector's section, its plugins' contents, the
    /// `kafka:` section.
    pub(super) fingerprint: String,
    commands: mpsc::UnboundedSender<Command>,
    view: watch::Receiver<ConnectorView>,
    runner: Mutex<Option<tokio::task::JoinHandle<Vec<String>>>>,
}

impl ConnectorHandle {
    /// Starts the connector's runner.
    pub(super) fn start(
        context: Arc<Context>,
        config: Arc<ConnectorConfig>,
        metrics: Arc<ConnectorMetrics>,
        fingerprint: String,
    ) -> Arc<Self> {
        let (commands, receiver) = mpsc::unbounded_channel();
        let (view_tx, view) = watch::channel(ConnectorView::new());
        let span = tracing::error_span!("connector", connector = %config.name);
        let history = Arc::new(History::new());
        let coverage = Arc::new(Coverage::default());
        let runner = Runner {
            coverage: coverage.clone(),
            context,
            config: config.clone(),
            metrics: metrics.clone(),
            history: history.clone(),
            commands: receiver,
            own_commands: commands.downgrade(),
            view: view_tx,
            target: Target::Running,
            pending_target: None,
            pending_restart: None,
            restart_seen: None,
            sink: None,
            policy: None,
            cleaners: Vec::new(),
            schema: None,
            failure: None,
            slots: Vec::new(),
            last_sync: None,
            others: Vec::new(),
        };
        let join = tokio::spawn(tracing::Instrument::instrument(runner.run(), span));
        Arc::new(Self {
            name: config.name.clone(),
            config,
            metrics,
            history,
            coverage,
            fingerprint,
            commands,
            view,
            runner: Mutex::new(Some(join)),
        })
    }

    /// The connector as its runner last left it.
    pub fn view(&self) -> ConnectorView {
        self.view.borrow().clone()
    }

    /// Resolves at the runner's next change of the view.
    pub async fn changed(&self) {
        next_change(&self.view).await;
    }

    /// Sends a command; a runner that has ended ignores it.
    pub fn send(&self, command: Command) {
        let _ = self.commands.send(command);
    }

    /// Stops the connector's tasks and waits for its runner: the failures of its tasks,
    /// as `connector X task N: error` lines.
    pub async fn shutdown(&self) -> Vec<String> {
        self.send(Command::Shutdown);
        let join = self.runner.lock().ok().and_then(|mut r| r.take());
        match join {
            Some(join) => join.await.unwrap_or_else(|error| {
                vec![format!("connector {}: runner ended: {error}", self.name)]
            }),
            None => Vec::new(),
        }
    }
}

/// Resolves at the next change of `view` after this call. A clone of a receiver starts at
/// the version its original has seen, and `view()` never marks one seen: without marking
/// the clone, every call after the first change resolved at once, and
/// `Supervisor::all_failed` spun a whole core for the life of the process.
async fn next_change<T>(view: &watch::Receiver<T>) {
    let mut view = view.clone();
    view.mark_unchanged();
    if view.changed().await.is_err() {
        // The runner ended: its view never changes again (not "changed at once", which
        // would spin the same way).
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod change_tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_seen_before_is_not_a_change_again() {
        let (sender, view) = watch::channel(0);
        sender.send_replace(1);
        // The change before the call does not count...
        let early = tokio::time::timeout(Duration::from_millis(50), next_change(&view)).await;
        assert!(early.is_err(), "resolved without a change");
        // ...one after it does.
        let waiting = tokio::spawn({
            let view = view.clone();
            async move { next_change(&view).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        sender.send_replace(2);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("resolved at the change")
            .expect("task");
        // A view whose runner ended does not change any more.
        drop(sender);
        let ended = tokio::time::timeout(Duration::from_millis(50), next_change(&view)).await;
        assert!(ended.is_err(), "resolved for a runner that ended");
    }
}
