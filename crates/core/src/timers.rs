//! One timer per queue pair, in a heap of deadlines.
//!
//! A queue pair's timer is queued once, at the earliest time it was asked for, and not moved
//! when what it waits for moves later or goes (an ACK pushes the retransmit deadline on, or
//! leaves nothing outstanding): that would cost a heap operation per ACK. A stale entry is
//! dropped or moved when it reaches the top ([`Timers::settle`]), or skipped when it falls
//! due ([`Timers::pop_due`]). At most one entry per queue pair is live: the one whose time
//! `queued` records.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Instant;

/// The timers of an engine's queue pairs, by index.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// (deadline, index); entries whose deadline is not `queued[index]` are stale.
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
    queued: Vec<Option<Instant>>,
}

impl Timers {
    /// Room for the timer of queue pair `index` (indexes are dense, added in order).
    pub(crate) fn add(&mut self, index: u32) {
        debug_assert_eq!(index as usize, self.queued.len());
        self.queued.push(None);
    }

    /// Queue pair `index` is gone: its entry, if any, becomes stale.
    pub(crate) fn clear(&mut self, index: u32) {
        self.queued[index as usize] = None;
    }

    /// Makes sure the timer of queue pair `index` fires no later than `at`.
    pub(crate) fn arm(&mut self, index: u32, at: Instant) {
        let queued = &mut self.queued[index as usize];
        if queued.is_none_or(|q| at < q) {
            *queued = Some(at);
            self.heap.push(Reverse((at, index)));
        }
    }

    /// The earliest entry's time: never later than any live timer (it may be stale).
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.heap.peek().map(|&Reverse((at, _))| at)
    }

    /// The earliest time a timer has something to do, `need(index)` saying when queue pair
    /// `index` really needs it (`None`: not at all): entries at the top that are stale, or
    /// earlier than needed, are dropped or moved to the need first.
    pub(crate) fn settle(
        &mut self,
        mut need: impl FnMut(u32) -> Option<Instant>,
    ) -> Option<Instant> {
        while let Some(&Reverse((at, index))) = self.heap.peek() {
            if self.queued[index as usize] != Some(at) {
                self.heap.pop();
                continue;
            }
            match need(index) {
                Some(t) if t <= at => return Some(at),
                Some(t) => {
                    self.heap.pop();
                    self.queued[index as usize] = Some(t);
                    self.heap.push(Reverse((t, index)));
                }
                None => {
                    self.heap.pop();
                    self.queued[index as usize] = None;
                }
            }
        }
        None
    }

    /// The next queue pair whose timer is due at `now`, taken off (stale entries skipped).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<u32> {
        while let Some(&Reverse((at, index))) = self.heap.peek() {
            if at > now {
                return None;
            }
            self.heap.pop();
            if self.queued[index as usize] == Some(at) {
                self.queued[index as usize] = None;
                return Some(index);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    fn timers(n: u32) -> Timers {
        let mut t = Timers::default();
        (0..n).for_each(|i| t.add(i));
        t
    }

    #[test]
    fn a_timer_fires_once_at_the_earliest_time_asked() {
        let mut t = timers(2);
        t.arm(0, at(30));
        t.arm(0, at(10)); // earlier: replaces
        t.arm(0, at(20)); // later: ignored
        t.arm(1, at(15));
        assert_eq!(t.earliest(), Some(at(10)));
        assert_eq!(t.pop_due(at(9)), None);
        assert_eq!(t.pop_due(at(15)), Some(0));
        assert_eq!(t.pop_due(at(15)), Some(1));
        // The stale 30 us entry of queue pair 0 never fires.
        assert_eq!(t.pop_due(at(100)), None);
    }

    #[test]
    fn a_cleared_timer_never_fires() {
        let mut t = timers(1);
        t.arm(0, at(10));
        t.clear(0);
        assert_eq!(t.pop_due(at(100)), None);
        // Re-armed after clearing (a new queue pair at the index): fires at its own time.
        t.arm(0, at(50));
        assert_eq!(t.pop_due(at(40)), None);
        assert_eq!(t.pop_due(at(50)), Some(0));
    }

    #[test]
    fn settling_moves_an_early_entry_to_the_need_and_drops_one_needed_no_more() {
        let mut t = timers(3);
        t.arm(0, at(10));
        t.arm(1, at(20));
        t.arm(2, at(30));
        // 0 needs its timer at 25 now, 1 not at all, 2 at its time.
        let need = |i: u32| match i {
            0 => Some(at(25)),
            1 => None,
            _ => Some(at(30)),
        };
        assert_eq!(t.settle(need), Some(at(25)));
        assert_eq!(t.pop_due(at(24)), None);
        assert_eq!(t.pop_due(at(25)), Some(0));
        assert_eq!(t.pop_due(at(29)), None, "queue pair 1's entry was dropped");
        assert_eq!(t.pop_due(at(30)), Some(2));
        assert_eq!(t.settle(need), None);
    }
}
