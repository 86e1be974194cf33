//! Which PSNs of one stream a capture holds: a set of ranges over PSNs unwrapped past 2^24.

use std::collections::BTreeMap;

use sluice_wire::Psn;

/// PSNs seen on one stream, with wrap-around undone relative to the first PSN seen.
#[derive(Debug, Clone, Default)]
pub struct PsnRanges {
    /// Disjoint, non-adjacent ranges `start ..= end` of unwrapped PSNs.
    ranges: BTreeMap<i64, i64>,
    last: Option<(Psn, i64)>,
    packets: u64,
    distinct: u64,
}

impl PsnRanges {
    /// Records one packet with this PSN. A PSN is unwrapped to the position nearest the
    /// previous packet's, as a receiver would place it.
    pub fn record(&mut self, psn: Psn) {
        let at = match self.last {
            None => 0,
            Some((prev, prev_at)) => prev_at + i64::from(prev.distance_to(psn)),
        };
        self.last = Some((psn, at));
        self.packets += 1;
        if self.insert(at) {
            self.distinct += 1;
        }
    }

    fn insert(&mut self, x: i64) -> bool {
        if let Some((_, &end)) = self.ranges.range(..=x).next_back() {
            if x <= end {
                return false;
            }
        }
        let mut start = x;
        let mut end = x;
        if let Some((&s, &e)) = self.ranges.range(..x).next_back() {
            if e == x - 1 {
                start = s;
            }
        }
        if let Some(e) = self.ranges.remove(&(x + 1)) {
            end = e;
        }
        self.ranges.insert(start, end);
        true
    }

    /// Packets recorded, duplicates included.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Packets whose PSN had been seen before (retransmissions or duplicates).
    pub fn duplicates(&self) -> u64 {
        self.packets - self.distinct
    }

    fn to_psn(&self, at: i64) -> Psn {
        let (psn, psn_at) = self.last.expect("only called when packets were recorded");
        Psn::new((i64::from(psn.value()) + (at - psn_at)).rem_euclid(1 << 24) as u32)
    }

    /// The lowest and highest PSN in sequence order.
    pub fn span(&self) -> Option<(Psn, Psn)> {
        let first = *self.ranges.keys().next()?;
        let last = *self.ranges.values().next_back()?;
        Some((self.to_psn(first), self.to_psn(last)))
    }

    /// PSNs between the lowest and highest that were never seen.
    pub fn missing(&self) -> u64 {
        match (self.ranges.keys().next(), self.ranges.values().next_back()) {
            (Some(&first), Some(&last)) => (last - first + 1) as u64 - self.distinct,
            _ => 0,
        }
    }

    /// The first `limit` holes, as inclusive PSN ranges.
    pub fn gaps(&self, limit: usize) -> Vec<(Psn, Psn)> {
        self.ranges
            .iter()
            .zip(self.ranges.iter().skip(1))
            .take(limit)
            .map(|((_, &end), (&next, _))| (self.to_psn(end + 1), self.to_psn(next - 1)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_gaps_and_duplicates_across_the_wrap() {
        let mut r = PsnRanges::default();
        for psn in [0xFF_FFFD, 0xFF_FFFE, 0xFF_FFFF, 0, 3, 3, 2, 6] {
            r.record(Psn::new(psn));
        }
        assert_eq!(r.packets(), 8);
        assert_eq!(r.duplicates(), 1);
        assert_eq!(r.span(), Some((Psn::new(0xFF_FFFD), Psn::new(6))));
        assert_eq!(r.missing(), 3); // 1, 4, 5
        assert_eq!(
            r.gaps(10),
            vec![(Psn::new(1), Psn::new(1)), (Psn::new(4), Psn::new(5))]
        );
    }

    #[test]
    fn retransmission_from_behind_fills_in() {
        let mut r = PsnRanges::default();
        for psn in [10, 11, 14, 12, 13] {
            r.record(Psn::new(psn));
        }
        assert_eq!((r.missing(), r.duplicates()), (0, 0));
        assert!(r.gaps(10).is_empty());
    }
}
