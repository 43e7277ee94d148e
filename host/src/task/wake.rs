//! The task thread's alarm: the write on the runtime and the transform thread ring it when
//! they finish, so that a task whose partitions are paused (backpressure, an operator's
//! pause, an outage waited out) reaps the result at once instead of at its next poll
//! timeout.
//!
//! A paused consumer's `poll` returns nothing, so before this the loop slept a whole poll
//! interval (50 ms) between a write's end and the next batch's start: with a backlog, the
//! pace of a task was one batch per interval or two, whatever the database could take.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// A flag and a condition variable: [`Wake::ring`] sets the flag, [`Wake::wait`] returns
/// when it is set (or after a timeout) and clears it. A ring before the wait is not lost.
#[derive(Debug, Default)]
pub(super) struct Wake {
    rung: Mutex<bool>,
    bell: Condvar,
}

impl Wake {
    /// Rings: a waiting (or the next) [`Wake::wait`] returns.
    pub(super) fn ring(&self) {
        let mut rung = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        *rung = true;
        self.bell.notify_all();
    }

    /// Waits until rung, at most `timeout`; returns whether it was rung.
    pub(super) fn wait(&self, timeout: Duration) -> bool {
        let rung = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        let (mut rung, _) = self
            .bell
            .wait_timeout_while(rung, timeout, |rung| !*rung)
            .unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *rung, false)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_ring_before_the_wait_is_kept_and_a_wait_without_one_times_out() {
        let wake = Wake::default();
        wake.ring();
        assert!(wake.wait(Duration::from_secs(5)));
        let started = Instant::now();
        assert!(!wake.wait(Duration::from_millis(20)));
        assert!(started.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_ring_from_another_thread_ends_the_wait_early() {
        let wake = Arc::new(Wake::default());
        let ringer = wake.clone();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            ringer.ring();
        });
        assert!(wake.wait(Duration::from_secs(10)));
        assert!(started.elapsed() < Duration::from_secs(10));
        thread.join().expect("ringer");
    }
}
