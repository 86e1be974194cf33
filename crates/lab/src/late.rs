//! How late the relay sent the frames it held: its delay accuracy.

/// Fine buckets of this many nanoseconds, up to `FINE * FINE_NS` (409.6 us) ...
const FINE_NS: u64 = 100;
const FINE: usize = 4096;
/// ... then coarse ones of 100 us up to 100 ms; later frames count in `over` (and `max_ns`).
const COARSE_NS: u64 = 100_000;
const BUCKETS: usize = FINE + 1000;

/// The bucket of `ns`, if inside the histogram.
fn bucket(ns: u64) -> usize {
    let fine_end = FINE as u64 * FINE_NS;
    if ns < fine_end {
        (ns / FINE_NS) as usize
    } else {
        FINE + ((ns - fine_end) / COARSE_NS) as usize
    }
}

/// The upper edge of bucket `i`.
fn upper_edge(i: usize) -> u64 {
    if i < FINE {
        (i as u64 + 1) * FINE_NS
    } else {
        FINE as u64 * FINE_NS + (i - FINE + 1) as u64 * COARSE_NS
    }
}

/// A histogram of how long after its due time each frame left (send call time minus arrival
/// stamp plus delay), in 100 ns buckets (100 us past 409.6 us); fixed size, so recording allocates nothing.
#[derive(Debug)]
pub(crate) struct Lateness {
    buckets: Box<[u64; BUCKETS]>,
    over: u64,
    count: u64,
    sum_ns: u64,
    max_ns: u64,
}

impl Lateness {
    pub(crate) fn new() -> Lateness {
        Lateness {
            buckets: Box::new([0; BUCKETS]),
            over: 0,
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }

    pub(crate) fn record(&mut self, late_ns: u64) {
        match self.buckets.get_mut(bucket(late_ns)) {
            Some(b) => *b += 1,
            None => self.over += 1,
        }
        self.count += 1;
        self.sum_ns += late_ns;
        self.max_ns = self.max_ns.max(late_ns);
    }

    pub(crate) fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count).unwrap_or(0)
    }

    pub(crate) fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// The lateness that fraction `q` of the frames did not exceed, to the bucket's upper
    /// edge (the maximum if it falls past the last bucket); 0 with no frames.
    pub(crate) fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return upper_edge(i).min(self.max_ns);
            }
        }
        self.max_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_buckets_and_the_tail_from_the_maximum() {
        let mut l = Lateness::new();
        assert_eq!(l.quantile_ns(0.5), 0);
        for ns in 0..100 {
            l.record(ns * 10); // 0 .. 990 ns
        }
        l.record(1_000_000); // 1 ms: a coarse bucket, 909.6 to 1009.6 us
        l.record(200_000_000); // 200 ms: past the buckets
        assert_eq!(l.count, 102);
        assert_eq!(l.max_ns(), 200_000_000);
        assert_eq!(l.quantile_ns(0.5), 600); // the 51st: 500 ns, in the 500-600 bucket
        assert_eq!(l.quantile_ns(0.98), 1000);
        assert_eq!(l.quantile_ns(0.99), 1_009_600);
        assert_eq!(l.quantile_ns(1.0), 200_000_000);
        assert_eq!(l.mean_ns(), (49_500 + 201_000_000) / 102);
    }
}
