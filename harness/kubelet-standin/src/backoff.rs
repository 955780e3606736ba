//! Restart back-off (pure): the kubelet's crash-loop schedule, with configurable bounds.
//!
//! Delay after the n-th consecutive failed run is `initial * 2^(n-1)`, capped at `max`; the
//! count resets when a container ran for at least `reset_after` before exiting.

use std::time::Duration;

/// Back-off bounds; [`Backoff::kubelet`] is the kubelet's 10 s → 5 min schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::kubelet()
    }
}

impl Backoff {
    /// The kubelet's defaults.
    pub fn kubelet() -> Self {
        Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }

    /// Delay before the next start after `consecutive_failures` (>= 1) failed runs.
    pub fn delay(&self, consecutive_failures: u32) -> Duration {
        if consecutive_failures == 0 {
            return Duration::ZERO;
        }
        let shift = (consecutive_failures - 1).min(20);
        self.initial
            .checked_mul(1u32 << shift)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// The failure count after a run of `ran_for` (the run itself counted as a failure).
    pub fn next_count(&self, previous: u32, ran_for: Duration) -> u32 {
        if ran_for >= self.reset_after {
            1
        } else {
            previous.saturating_add(1)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let b = Backoff::kubelet();
        assert_eq!(b.delay(0), Duration::ZERO);
        assert_eq!(b.delay(1), Duration::from_secs(10));
        assert_eq!(b.delay(2), Duration::from_secs(20));
        assert_eq!(b.delay(5), Duration::from_secs(160));
        assert_eq!(b.delay(6), Duration::from_secs(300));
        assert_eq!(b.delay(100), Duration::from_secs(300));
        assert_eq!(b.next_count(4, Duration::from_secs(1)), 5);
        assert_eq!(b.next_count(4, Duration::from_secs(601)), 1);
    }
}
