//! Time as the engine sees it: integer nanoseconds, always passed in by the caller.
//!
//! The engine never reads a clock. The real datapath passes a monotonic clock's reading; the
//! simulator passes simulated time. Both are nanoseconds since an arbitrary epoch.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since the caller's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The caller's epoch (0 ns).
    pub const ZERO: Instant = Instant(0);

    /// The instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time since `earlier`, zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturates at the end of time (585 years), which no timer reaches.
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;

    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_nanos(1_000);
        assert_eq!((t + Duration::from_nanos(500)).as_nanos(), 1_500);
        assert_eq!(t - Instant::from_nanos(2_000), Duration::ZERO);
        assert_eq!((t + Duration::MAX).as_nanos(), u64::MAX);
    }
}
