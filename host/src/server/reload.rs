//! Reloading the configuration of a running process (SIGHUP, `POST /reload`).

use std::path::Path;

use crate::admin::{AdminServer, ReloadRequest};
use crate::config;
use crate::supervisor::Supervisor;

/// Re-reads the file and applies it: every problem of a file that does not load is
/// logged and returned, and the running configuration stays. A change of `admin:`
/// rebinds the listener.
pub(super) async fn reload(
    path: &Path,
    brokers: &str,
    supervisor: &std::sync::Arc<Supervisor>,
    admin: &mut Option<AdminServer>,
    reload_tx: &tokio::sync::mpsc::Sender<ReloadRequest>,
) -> Result<crate::supervisor::Reloaded, Vec<String>> {
    let config = match config::load_file(path) {
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
    let reloaded = supervisor
        .reload(config, &brokers)
        .await
        .map_err(|e| vec![e.to_string()])?;
    tracing::info!(started = ?reloaded.started, restarted = ?reloaded.restarted,
        stopped = ?reloaded.stopped, unchanged = ?reloaded.unchanged, "configuration reloaded");
    // The listener follows `admin:` (moved, re-keyed, stopped); an address it cannot bind
    // leaves the old one serving, and the reload's answer says so.
    *admin = crate::admin::apply(admin.take(), new_admin, supervisor, reload_tx).await;
    Ok(reloaded)
}
