//! Bandwidth estimates from transmit events, as SCR's fairness scheduler measures a flow: the
//! bytes of each event over the time since the previous one, smoothed by an EWMA.

use crate::Instant;

/// One flow's (a queue pair's or a tenant's) sending rate, in bytes per nanosecond,
/// estimated from its transmit events.
///
/// Each event's bytes over the time since the previous event is one sample, and the
/// estimate moves `gain` of the way towards it (SCR §5.1). An event may stand for several
/// packets (a coalesced event): its bytes are summed over the interval, so the sample is the
/// same. Events in the same nanosecond are summed into the next sample rather than divided
/// by zero. The first event only starts the clock: it has no interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateEstimate {
    /// The estimate, bytes per nanosecond.
    rate: f64,
    /// The previous event's time in ns, or [`NEVER`] before the first.
    last: u64,
    /// Bytes of events at `last` not yet in a sample.
    pending: u64,
}

/// No event yet.
const NEVER: u64 = u64::MAX;

impl Default for RateEstimate {
    fn default() -> Self {
        RateEstimate::starting_at(0.0)
    }
}

impl RateEstimate {
    /// An estimate that starts at `rate` bytes per nanosecond (a flow assumed to use what it
    /// was given until its events say otherwise).
    pub fn starting_at(rate: f64) -> RateEstimate {
        RateEstimate {
            rate,
            last: NEVER,
            pending: 0,
        }
    }

    /// The estimate, bytes per nanosecond.
    #[inline]
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// An event at `now` of `bytes` sent since the previous one; the estimate moves `gain`
    /// (in `0..=1`) of the way to this interval's rate.
    #[inline]
    pub fn sample(&mut self, now: Instant, bytes: u64, gain: f64) {
        let now = now.as_nanos();
        let last = self.last;
        if last == NEVER {
            self.last = now;
        } else if now > last {
            let sample = (self.pending + bytes) as f64 / (now - last) as f64;
            self.rate += gain * (sample - self.rate);
            self.pending = 0;
            self.last = now;
        } else {
            self.pending += bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn a_steady_flow_is_estimated_at_its_rate() {
        let mut e = RateEstimate::default();
        for i in 0..200 {
            e.sample(at(i * 100), 1000, 0.125);
        }
        assert!((e.rate() - 10.0).abs() < 1e-6, "{}", e.rate());
    }

    #[test]
    fn coalesced_events_and_events_in_the_same_nanosecond_count_their_bytes() {
        // Four packets of 500 B every 200 ns, once reported one by one (two per instant)
        // and once coalesced into an event per 400 ns: both 5 B/ns.
        let (mut single, mut coalesced) = (RateEstimate::default(), RateEstimate::default());
        for i in 0..400u64 {
            single.sample(at(i / 2 * 200), 500, 0.25);
            if i % 4 == 3 {
                coalesced.sample(at((i / 4) * 400), 2000, 0.25);
            }
        }
        assert!((single.rate() - 5.0).abs() < 1e-6, "{}", single.rate());
        assert!(
            (coalesced.rate() - 5.0).abs() < 1e-6,
            "{}",
            coalesced.rate()
        );
    }

    #[test]
    fn the_estimate_follows_a_slower_flow_down_by_its_gain() {
        let mut e = RateEstimate::starting_at(10.0);
        e.sample(at(0), 0, 0.5);
        e.sample(at(1000), 2000, 0.5);
        assert!((e.rate() - 6.0).abs() < 1e-9, "{}", e.rate());
    }
}
