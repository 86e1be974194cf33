//! The pacer's cost per call, measured in the real datapath (`--pacer weir`): a sample of
//! its calls is timed with the monotonic clock, the cost of a bare pair of clock readings
//! is taken off, and the results go into a histogram of 1 ns buckets.
//!
//! Why sampled: a clock reading costs 25 to 40 ns in the build VM, as much as the calls
//! themselves, so timing every call would slow the loop it measures. One call in
//! [`SAMPLE_EVERY`] of each kind is timed. Why a histogram: the paper reports its hooks'
//! cost as a distribution ("mostly under 1,000 cycles"), and a preemption in the middle of
//! a timed call would drag a mean far from what a call costs; buckets are preallocated, so
//! recording never allocates.

use std::time::Instant;

use serde::Serialize;

/// One call in this many of each kind is timed.
pub(crate) const SAMPLE_EVERY: u32 = 16;

/// Buckets of 1 ns; the last one holds everything from `BUCKETS - 1` ns up.
const BUCKETS: usize = 4096;

/// A histogram of sampled call costs, in ns.
pub(crate) struct CallCost {
    /// Calls since the last sample.
    since: u32,
    /// The cost of a bare pair of clock readings, taken off every sample.
    offset_ns: u64,
    counts: Box<[u64]>,
    samples: u64,
    /// Calls, timed or not.
    calls: u64,
}

impl CallCost {
    /// A histogram whose samples have `offset_ns` (the clock's own cost) taken off.
    pub(crate) fn new(offset_ns: u64) -> CallCost {
        CallCost {
            since: 0,
            offset_ns,
            counts: vec![0; BUCKETS].into_boxed_slice(),
            samples: 0,
            calls: 0,
        }
    }

    /// Runs `f`, timing it if its turn to be sampled has come.
    #[inline]
    pub(crate) fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.since += 1;
        self.calls += 1;
        if self.since < SAMPLE_EVERY {
            return f();
        }
        self.since = 0;
        let t0 = Instant::now();
        let r = f();
        let ns = t0.elapsed().as_nanos() as u64;
        self.record(ns.saturating_sub(self.offset_ns));
        r
    }

    /// Counts one sample of `ns`.
    pub(crate) fn record(&mut self, ns: u64) {
        self.counts[(ns as usize).min(BUCKETS - 1)] += 1;
        self.samples += 1;
    }

    /// The smallest `ns` with at least `q` of the samples at or below it (`None`: no
    /// samples). The last bucket stands for "at least `BUCKETS - 1`".
    pub(crate) fn quantile(&self, q: f64) -> Option<u64> {
        if self.samples == 0 {
            return None;
        }
        let want = ((q * self.samples as f64).ceil() as u64).clamp(1, self.samples);
        let mut seen = 0;
        for (ns, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(ns as u64);
            }
        }
        Some(BUCKETS as u64 - 1)
    }

    /// The fraction of samples below `ns`.
    pub(crate) fn below(&self, ns: u64) -> f64 {
        if self.samples == 0 {
            return 0.0;
        }
        let n: u64 = self.counts[..(ns as usize).min(BUCKETS)].iter().sum();
        n as f64 / self.samples as f64
    }

    /// Its summary.
    pub(crate) fn summary(&self) -> CostSummary {
        CostSummary {
            calls: self.calls,
            samples: self.samples,
            median_ns: self.quantile(0.5).unwrap_or(0),
            p90_ns: self.quantile(0.9).unwrap_or(0),
            p99_ns: self.quantile(0.99).unwrap_or(0),
            under_500ns: self.below(500),
        }
    }
}

/// The median cost of a bare pair of clock readings over `n` pairs: what a timed sample
/// costs besides the call.
pub(crate) fn clock_pair_ns(n: usize) -> u64 {
    let mut h = CallCost::new(0);
    for _ in 0..n {
        let t0 = Instant::now();
        h.record(t0.elapsed().as_nanos() as u64);
    }
    h.quantile(0.5).unwrap_or(0)
}

/// A histogram's summary, for the report and the JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CostSummary {
    /// Calls made.
    pub calls: u64,
    /// Calls timed.
    pub samples: u64,
    /// Their median cost, ns.
    pub median_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// The fraction under 500 ns (1,000 cycles at 2 GHz, the paper's yardstick).
    pub under_500ns: f64,
}

/// The pacer's cost in one run: each kind of call, and the cost per application post.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PacerCost {
    /// `Weir::post`.
    pub post: CostSummary,
    /// `Weir::poll_doorbell` (called when a credit fell due: nearly always a doorbell).
    pub doorbell: CostSummary,
    /// `Weir::on_completion`, with the clock synchronisation when due.
    pub completion: CostSummary,
    /// The median cost of a bare pair of clock readings, taken off every sample, ns.
    pub clock_pair_ns: u64,
    /// Per application post: each kind's median weighted by its calls per post (a
    /// doorbell rung by `post` itself is in the post's cost, not a `poll_doorbell`), ns.
    pub per_post_ns: f64,
}

/// The three kinds of calls' histograms.
pub(crate) struct PacerTimers {
    pub(crate) post: CallCost,
    pub(crate) doorbell: CallCost,
    pub(crate) completion: CallCost,
    offset_ns: u64,
}

impl PacerTimers {
    /// Histograms with the clock's cost measured once, now.
    pub(crate) fn new() -> PacerTimers {
        let offset_ns = clock_pair_ns(10_000);
        PacerTimers {
            post: CallCost::new(offset_ns),
            doorbell: CallCost::new(offset_ns),
            completion: CallCost::new(offset_ns),
            offset_ns,
        }
    }

    /// The run's cost.
    pub(crate) fn summary(&self) -> PacerCost {
        let (p, d, c) = (
            self.post.summary(),
            self.doorbell.summary(),
            self.completion.summary(),
        );
        let posts = p.calls.max(1) as f64;
        PacerCost {
            post: p,
            doorbell: d,
            completion: c,
            clock_pair_ns: self.offset_ns,
            per_post_ns: [p, d, c]
                .iter()
                .map(|k| k.median_ns as f64 * k.calls as f64 / posts)
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_fractions_of_recorded_samples() {
        let mut h = CallCost::new(0);
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.summary(), CostSummary::default());
        for ns in 1..=100 {
            h.record(ns);
        }
        h.record(1_000_000);
        assert_eq!(h.quantile(0.5), Some(51));
        assert_eq!(h.quantile(0.0), Some(1));
        assert_eq!(h.quantile(1.0), Some(BUCKETS as u64 - 1));
        assert!((h.below(51) - 50.0 / 101.0).abs() < 1e-12);
        assert!((h.below(500) - 100.0 / 101.0).abs() < 1e-12);
        let s = h.summary();
        assert_eq!((s.samples, s.median_ns, s.p90_ns), (101, 51, 91));
        assert_eq!(s.p99_ns, 100);
    }

    #[test]
    fn one_call_in_sample_every_is_timed_and_every_call_runs() {
        let mut h = CallCost::new(u64::MAX);
        let mut ran = 0;
        for _ in 0..SAMPLE_EVERY * 10 + 3 {
            h.time(|| ran += 1);
        }
        assert_eq!(ran, SAMPLE_EVERY * 10 + 3);
        assert_eq!((h.samples, h.calls), (10, u64::from(SAMPLE_EVERY) * 10 + 3));
        // The offset takes off everything (saturating): all in the 0 bucket.
        assert_eq!(h.quantile(1.0), Some(0));
    }

    #[test]
    fn per_post_weights_each_call_by_how_often_it_comes() {
        let mut t = PacerTimers::new();
        t.offset_ns = 7;
        for _ in 0..3 {
            t.post.record(20);
            t.doorbell.record(10);
            t.completion.record(30);
        }
        // 100 posts, 200 doorbells polled (and 100 rung by the posts), 300 CQEs.
        (t.post.calls, t.doorbell.calls, t.completion.calls) = (100, 200, 300);
        let c = t.summary();
        assert_eq!(c.per_post_ns, 20.0 + 10.0 * 2.0 + 30.0 * 3.0);
        assert_eq!(c.doorbell.calls, 200);
        assert_eq!(c.clock_pair_ns, 7);
        assert_eq!(c.post.median_ns, 20);
    }
}
