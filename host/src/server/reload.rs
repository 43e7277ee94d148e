//! Reloading the configuration of a running process (SIGHUP, `POST /reload`).

use std::path::Path;

use crate::admin::metrics_listener::{self, MetricsServer};
use crate::admin::{AdminServer, ReloadRequest};
use crate::supervisor::Supervisor;

/// Re-reads the file and applies it: every problem of a file that does not load is
/// logged and returned, and the running configuration stays. A change of `admin:`
/// rebinds the listener; a new `admin.metrics_listen` is bound before anything applies
/// (an address that cannot be bound refuses the reload).
pub(super) async fn reload(
    path: &Path,
    brokers: &str,
    supervisor: &std::sync::Arc<Supervisor>,
    admin: &mut Option<AdminServer>,
    metrics: &mut Option<MetricsServer>,
    reload_tx: &tokio::sync::mpsc::Sender<ReloadRequest>,
) -> Result<crate::supervisor::Reloaded, Vec<String>> {
    let config = match super::load_checked(path) {
        Ok(config) => config,
        Err(error) => {
            let lines = error.lines(&path.display().to_string());
            for line in &lines {
                tracing::error!(problem = %line, "the new configuration is not valid; the old one runs on");
            }
            return Err(lines);
        }
    };
    // The embedded cluster lives as long as the process: a file that still says
    // `embedded` keeps it.
    let brokers = if config.kafka.is_embedded() {
        brokers.to_string()
    } else {
        config.kafka.brokers.clone()
    };
    let new_admin = config.admin.clone();
    let wanted = new_admin.as_ref().and_then(|a| a.metrics_listen.as_deref());
    let metrics_move = match metrics_listener::prepare(metrics, wanted, supervisor).await {
        Ok(prepared) => prepared,
        Err(error) => {
            tracing::error!(%error, "the new configuration's metrics listener cannot start; the old configuration runs on");
            return Err(vec![error.to_string()]);
        }
    };
    let reloaded = match supervisor.reload(config, &brokers).await {
        Ok(reloaded) => reloaded,
        Err(error) => {
            metrics_move.abandon(metrics, supervisor).await;
            return Err(match error {
                crate::supervisor::SupervisorError::Refused(problems) => problems,
                other => vec![other.to_string()],
            });
        }
    };
    metrics_move.apply(metrics, supervisor).await;
    tracing::info!(started = ?reloaded.started, restarted = ?reloaded.restarted,
        stopped = ?reloaded.stopped, unchanged = ?reloaded.unchanged, "configuration reloaded");
    // The listener follows `admin:` (moved, re-keyed, stopped); an address it cannot bind
    // leaves the old one serving, and the reload's answer says so.
    *admin = crate::admin::apply(admin.take(), new_admin, supervisor, reload_tx).await;
    Ok(reloaded)
}
