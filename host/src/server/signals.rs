//! The signals a `sluice run` process answers: SIGINT / SIGTERM stop it, SIGHUP reloads.

/// Resolves at the first SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// SIGHUP, as a stream of reload requests (none where there are no signals).
pub fn hangup_signal() -> tokio::sync::mpsc::Receiver<()> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hangup) => {
                tokio::spawn(async move {
                    while hangup.recv().await.is_some() {
                        if tx.send(()).await.is_err() {
                            break;
                        }
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; reload through POST /reload")
            }
        }
    }
    #[cfg(not(unix))]
    drop(tx);
    rx
}
