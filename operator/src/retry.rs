//! Back-off of transient controller errors: capped exponential with jitter, on the pass's clock
//! (so tests inject time). A transient error (a conflict, a timeout, an unreachable server, an
//! API server answering 5xx) is retried after [`delay`]; while a controller backs off, a pass woken
//! by a cache change does not retry it early. A permanent error (the API refused the object as
//! invalid or forbidden, a render failed) is not retried on a timer of its own: its Degraded
//! condition names the input, and a change of any input wakes the next pass.

use std::time::Duration;

use time::OffsetDateTime;

/// Delay after the first failure.
pub const FIRST: Duration = Duration::from_millis(500);
/// Longest delay.
pub const CAP: Duration = Duration::from_secs(10);

/// Whether an error can go away by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Retried with back-off.
    Transient,
    /// Waits for an input to change.
    Permanent,
}

/// The delay after `failures` consecutive failures (1 = the first): [`FIRST`] doubled per
/// failure, capped at [`CAP`], less up to a quarter by `jitter` (in `0.0..1.0`), so replicas and
/// controllers that failed together do not retry in step.
pub fn delay(failures: u32, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let full = FIRST.saturating_mul(1 << doublings).min(CAP);
    full.mul_f64(1.0 - 0.25 * jitter.clamp(0.0, 1.0))
}

/// Jitter taken from the clock's sub-second part: varied in production, fixed under a test's
/// injected clock.
pub fn jitter_of(now: OffsetDateTime) -> f64 {
    f64::from(now.nanosecond() % 1_000_000) / 1_000_000.0
}

/// One controller's consecutive transient failures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backoff {
    pub failures: u32,
    /// Not retried before this.
    pub until: Option<OffsetDateTime>,
    /// The last error's category and message (its condition stays while the controller waits).
    pub last: Option<(crate::category::Category, String)>,
}

impl Backoff {
    /// Records a failure at `now` and returns the delay before the next try.
    pub fn fail(&mut self, now: OffsetDateTime) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let d = delay(self.failures, jitter_of(now));
        self.until = Some(now + d);
        d
    }

    /// How long the controller must still wait at `now`, if at all.
    pub fn remaining(&self, now: OffsetDateTime) -> Option<Duration> {
        let until = self.until?;
        (until > now).then(|| Duration::try_from(until - now).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
            + time::Duration::milliseconds(ms)
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let got: Vec<Duration> = (1..=9).map(|n| delay(n, 0.0)).collect();
        let ms: Vec<u128> = got.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            [500, 1000, 2000, 4000, 8000, 10000, 10000, 10000, 10000]
        );
        assert_eq!(delay(u32::MAX, 0.0), CAP);
    }

    #[test]
    fn jitter_takes_off_at_most_a_quarter() {
        assert_eq!(delay(3, 1.0), Duration::from_millis(1500));
        assert_eq!(delay(3, 0.5), Duration::from_millis(1750));
        assert_eq!(delay(3, 7.0), Duration::from_millis(1500), "clamped");
    }

    #[test]
    fn a_backoff_holds_until_its_delay_passed() {
        let mut b = Backoff::default();
        assert_eq!(b.remaining(at(0)), None, "never failed");
        let first = b.fail(at(0));
        assert_eq!(first, Duration::from_millis(500));
        assert_eq!(b.remaining(at(200)), Some(Duration::from_millis(300)));
        assert_eq!(b.remaining(at(500)), None);
        let second = b.fail(at(600));
        assert_eq!(second, Duration::from_millis(1000));
        assert_eq!(b.remaining(at(1599)), Some(Duration::from_millis(1)));
    }
}
