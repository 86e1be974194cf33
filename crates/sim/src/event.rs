//! The event core: a priority queue of timed events, earliest first, ties broken by the
//! order they were scheduled in (so a run never depends on how the heap happens to order
//! equal keys).
//!
//! Time is integer picoseconds: at 400 Gbit/s a 1 KB packet takes 20.48 ns, and rounding
//! every serialisation to whole nanoseconds would shift link rates by up to 5%. The engine
//! still sees nanoseconds ([`to_instant`]).

use sluice_core::Instant;

/// Simulated time in picoseconds.
pub type Ps = u64;

pub const PS_PER_NS: u64 = 1_000;
pub const PS_PER_US: u64 = 1_000_000;

/// The engine's view of simulated time (nanoseconds, rounded down).
pub fn to_instant(t: Ps) -> Instant {
    Instant::from_nanos(t / PS_PER_NS)
}

/// The first picosecond at or after engine time `at`.
pub fn from_instant(at: Instant) -> Ps {
    at.as_nanos().saturating_mul(PS_PER_NS)
}

/// Picoseconds `bytes` take on a link of `bps` bits per second (rounded up, so a link never
/// runs faster than its rate).
pub fn serialisation_ps(bytes: u64, bps: u64) -> Ps {
    (u128::from(bytes) * 8 * 1_000_000_000_000).div_ceil(u128::from(bps.max(1))) as Ps
}

/// Events of type `E` in time order: a radix heap (Ahuja, Mehlhorn, Orlin, Tarjan 1990)
/// over the unique key (time, scheduling order) packed into a `u128`.
///
/// A radix heap needs what a simulator guarantees: nothing is scheduled before the event
/// being handled. It keeps keys in buckets by the highest bit in which they differ from the
/// last key popped; popping refills bucket 0 from the first non-empty bucket. Each event
/// moves down a few buckets in its life instead of sifting through a binary heap's levels
/// on every pop, which was most of the simulator's time.
#[derive(Debug)]
pub struct EventQueue<E> {
    buckets: Vec<Vec<(u128, E)>>,
    /// The bucket being redistributed, kept to reuse its allocation.
    spare: Vec<(u128, E)>,
    /// Bit b - 1 set: bucket b (1..=128) is not empty. Finding the first non-empty bucket
    /// is then one instruction rather than a scan of 128.
    occupied: u128,
    /// The key last popped: every key pending is at or after it.
    last: u128,
    len: usize,
    seq: u64,
    /// Events popped so far.
    pub popped: u64,
    /// The most events pending at once.
    pub peak_len: usize,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            buckets: (0..=128).map(|_| Vec::new()).collect(),
            spare: Vec::new(),
            occupied: 0,
            last: 0,
            len: 0,
            seq: 0,
            popped: 0,
            peak_len: 0,
        }
    }
}

/// The bucket of `key` relative to `last`: 0 if equal, else one more than the index of the
/// highest bit where they differ.
fn bucket(key: u128, last: u128) -> usize {
    (128 - (key ^ last).leading_zeros()) as usize
}

impl<E> EventQueue<E> {
    /// Schedules `event` at `at`. An event scheduled before the last one popped runs next
    /// (the simulator never does that: it would be a bug).
    pub fn push(&mut self, at: Ps, event: E) {
        self.seq += 1;
        let key = ((u128::from(at) << 64) | u128::from(self.seq)).max(self.last);
        debug_assert!(at >= (self.last >> 64) as u64, "scheduled in the past");
        self.put(key, event);
        self.len += 1;
        self.peak_len = self.peak_len.max(self.len);
    }

    fn put(&mut self, key: u128, event: E) {
        let b = bucket(key, self.last);
        if b > 0 {
            self.occupied |= 1 << (b - 1);
        }
        self.buckets[b].push((key, event));
    }

    /// The earliest event, if any is due at or before `until`.
    pub fn pop_until(&mut self, until: Ps) -> Option<(Ps, E)> {
        if self.buckets[0].is_empty() {
            if self.occupied == 0 {
                return None;
            }
            let i = self.occupied.trailing_zeros() as usize + 1;
            self.occupied &= !(1 << (i - 1));
            std::mem::swap(&mut self.spare, &mut self.buckets[i]);
            let mut spare = std::mem::take(&mut self.spare);
            self.last = spare.iter().map(|(k, _)| *k).min()?;
            // Every key of bucket i lands in a lower bucket relative to the new minimum.
            for (key, event) in spare.drain(..) {
                self.put(key, event);
            }
            self.spare = spare;
        }
        let (key, _) = self.buckets[0].last()?;
        let at = (key >> 64) as Ps;
        if at > until {
            return None;
        }
        let (_, event) = self.buckets[0].pop()?;
        self.len -= 1;
        self.popped += 1;
        Some((at, event))
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_schedule_order() {
        let mut q = EventQueue::default();
        q.push(5, 'a');
        q.push(3, 'b');
        q.push(5, 'c');
        q.push(3, 'd');
        q.push(9, 'e');
        let mut out = Vec::new();
        while let Some((at, e)) = q.pop_until(8) {
            out.push((at, e));
        }
        assert_eq!(out, [(3, 'b'), (3, 'd'), (5, 'a'), (5, 'c')]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.popped, 4);
    }

    proptest::proptest! {
        /// Any interleaving of pushes (never before the last pop) and pops gives the order
        /// of a reference binary heap on (time, scheduling order).
        #[test]
        fn pops_in_time_then_schedule_order(ops in proptest::collection::vec((0u64..3, 0u64..1_000_000), 1..400)) {
            use std::cmp::Reverse;
            use std::collections::BinaryHeap;
            let mut q = EventQueue::default();
            let mut reference = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for (op, dt) in ops {
                if op == 0 {
                    while let Some((at, id)) = q.pop_until(u64::MAX) {
                        let Reverse((rat, rseq)) = reference.pop().unwrap();
                        proptest::prop_assert_eq!((at, id), (rat, rseq));
                        now = at;
                        if id % 3 == 0 { break; }
                    }
                } else {
                    // Mostly near-future times, with ties.
                    let at = now + if op == 1 { dt % 7 } else { dt };
                    seq += 1;
                    q.push(at, seq);
                    reference.push(Reverse((at, seq)));
                }
            }
            proptest::prop_assert_eq!(q.len(), reference.len());
        }
    }

    #[test]
    fn serialisation_is_exact_in_picoseconds() {
        // 1,000 bytes at 100 Gbit/s: 80 ns; at 400 Gbit/s: 20 ns; 1 byte at 3 bit/s rounds up.
        assert_eq!(serialisation_ps(1000, 100_000_000_000), 80_000);
        assert_eq!(serialisation_ps(1024, 400_000_000_000), 20_480);
        assert_eq!(serialisation_ps(1, 3), 2_666_666_666_667);
        assert_eq!(to_instant(1_999).as_nanos(), 1);
        assert_eq!(from_instant(Instant::from_nanos(2)), 2_000);
    }
}
