//! The bounded stop: a stop that hangs must not keep the process.

/// How a stop ended.
#[derive(Debug, PartialEq)]
pub(super) enum Stopped {
    /// Every task closed; the failures of those that had failed.
    Finished(Vec<String>),
    /// Another SIGINT / SIGTERM came first.
    SecondSignal,
    /// The limit passed first.
    OutOfTime,
}

/// Runs `stop` until it finishes, `signal` resolves, or `limit` passes.
pub(super) async fn bounded_stop(
    stop: impl std::future::Future<Output = Vec<String>>,
    signal: impl std::future::Future<Output = ()>,
    limit: std::time::Duration,
) -> Stopped {
    tokio::select! {
        failures = stop => Stopped::Finished(failures),
        () = signal => Stopped::SecondSignal,
        () = tokio::time::sleep(limit) => Stopped::OutOfTime,
    }
}

#[cfg(test)]
mod tests {
    use std::future::{pending, ready};
    use std::time::{Duration, Instant};

    use super::{Stopped, bounded_stop};

    #[tokio::test]
    async fn a_stop_that_finishes_reports_its_failures() {
        let stopped = bounded_stop(
            ready(vec!["connector c task 0: boom".to_string()]),
            pending(),
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(
            stopped,
            Stopped::Finished(vec!["connector c task 0: boom".into()])
        );
    }

    #[tokio::test]
    async fn a_stop_that_hangs_ends_at_the_limit() {
        let started = Instant::now();
        let stopped = bounded_stop(pending(), pending(), Duration::from_millis(100)).await;
        assert_eq!(stopped, Stopped::OutOfTime);
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_second_signal_cuts_a_hanging_stop_short() {
        let stopped = bounded_stop(pending(), ready(()), Duration::from_secs(60)).await;
        assert_eq!(stopped, Stopped::SecondSignal);
    }
}
