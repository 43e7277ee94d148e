//! Waiting out a transient failure: one value per thing being retried (a batch's write,
//! a read of stored offsets, the first connection), with the connector's `errors.retry`
//! deciding how long each wait is and when to give up.

use std::time::{Duration, Instant};

use crate::config::RetryConfig;

/// A failure being waited out: since when, how many attempts failed, and when the next
/// one is due. `Option<Retrying>` is `None` while nothing has failed.
#[derive(Debug, Clone, Copy)]
pub struct Retrying {
    since: Instant,
    attempts: u32,
    /// `None` once the due attempt has been started ([`Retrying::start_if_due`]).
    next: Option<Instant>,
}

impl Retrying {
    /// Records one more failed attempt in `state` (the first when it is `None`): `Ok` with
    /// the wait before the next attempt, or `Err` with how long it has been failing once
    /// that is past `max_elapsed`.
    pub fn failed(
        state: &mut Option<Retrying>,
        config: &RetryConfig,
    ) -> Result<Duration, Duration> {
        let now = Instant::now();
        let retrying = state.get_or_insert(Retrying {
            since: now,
            attempts: 0,
            next: None,
        });
        let elapsed = now.duration_since(retrying.since);
        if elapsed > config.max_elapsed.0 {
            return Err(elapsed);
        }
        let wait = config.backoff(retrying.attempts);
        retrying.attempts += 1;
        retrying.next = Some(now + wait);
        Ok(wait)
    }

    /// Failed attempts so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Waiting for the next attempt's time (not started yet).
    pub fn waiting(&self) -> bool {
        self.next.is_some()
    }

    /// Whether the next attempt may be made now.
    pub fn is_due(&self) -> bool {
        self.next.is_none_or(|at| Instant::now() >= at)
    }

    /// True when an attempt is due and not started yet; it counts as started from here.
    pub fn start_if_due(&mut self) -> bool {
        match self.next {
            Some(at) if Instant::now() >= at => {
                self.next = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::units::HumanDuration;

    fn config(initial_ms: u64, max_elapsed_ms: u64) -> RetryConfig {
        RetryConfig {
            initial: HumanDuration(Duration::from_millis(initial_ms)),
            max: HumanDuration(Duration::from_millis(initial_ms * 4)),
            max_elapsed: HumanDuration(Duration::from_millis(max_elapsed_ms)),
        }
    }

    #[test]
    fn waits_grow_until_max_elapsed_then_give_up() {
        let config = config(100, 60_000);
        let mut state = None;
        let first = Retrying::failed(&mut state, &config).expect("first wait");
        assert!(first >= Duration::from_millis(100) && first <= Duration::from_millis(120));
        let second = Retrying::failed(&mut state, &config).expect("second wait");
        assert!(second >= Duration::from_millis(200), "{second:?}");
        assert_eq!(state.map(|r| r.attempts()), Some(2));
        // Failing for longer than max_elapsed ends the retries, with how long it was.
        let mut old = state.expect("retrying");
        old.since -= Duration::from_secs(61);
        let mut state = Some(old);
        let elapsed = Retrying::failed(&mut state, &config).expect_err("past max_elapsed");
        assert!(elapsed > Duration::from_secs(61));
    }

    #[test]
    fn an_attempt_is_due_after_its_wait_and_started_once() {
        let config = config(50, 60_000);
        let mut state = None;
        Retrying::failed(&mut state, &config).expect("wait");
        let mut retrying = state.expect("retrying");
        assert!(!retrying.is_due());
        assert!(!retrying.start_if_due());
        std::thread::sleep(Duration::from_millis(70));
        assert!(retrying.is_due());
        assert!(retrying.start_if_due());
        // Started: not due again until the next failure schedules it.
        assert!(!retrying.start_if_due());
        assert!(retrying.is_due());
    }
}
