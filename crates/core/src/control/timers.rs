//! The law timers of one controller: at most one live timer per queue pair, fired in
//! (time, queue pair) order.
//!
//! A binary heap over every armed timer cost O(log n) cache misses per firing and per
//! arming: with 16,384 queue pairs each arming a timer between its events (Homa's RESEND,
//! the receiver-driven law's credit tick), the heap's pops were 42% of a law's time (the
//! laws bench under `perf`). Here timers go into a wheel of `SLOTS` slots of `2^SHIFT` ns
//! each (4.2 ms in all): arming is a push onto a slot's list, and finding the next timer
//! is a scan of an occupancy bitmap (16 words at most). The earliest occupied slot is
//! moved, live entries only, into a small heap (`ready`) that orders it exactly, so the
//! order is the heap's, (time, queue pair), and the timers are the same. Timers armed in
//! the past go to `ready` at once; timers beyond the wheel's horizon wait in `far` (a heap:
//! rare, the laws' timers are at most a few ms out). The slots are allocated at the first
//! timer (24 KiB): a simulated host whose law arms none pays nothing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Instant;

/// log2 of a slot's width in ns (4.096 µs).
const SHIFT: u32 = 12;
/// Slots in the wheel (a power of two): 1,024 x 4.096 µs = 4.19 ms ahead.
const SLOTS: usize = 1024;
const WORDS: usize = SLOTS / 64;

type Entry = Reverse<(Instant, u32)>;

fn tick(at: Instant) -> u64 {
    at.as_nanos() >> SHIFT
}

/// The timers; liveness is the caller's: an entry counts while `live(qp, at)` says so
/// (a re-armed or cancelled queue pair's older entries are skipped, as the heap did).
#[derive(Debug)]
pub(crate) struct Timers {
    /// The first tick the wheel holds: every wheel entry's tick is in `base..base + SLOTS`,
    /// every `ready` entry's below `base`, every `far` entry's at or past `base + SLOTS`
    /// when it was pushed.
    base: u64,
    slots: Vec<Vec<(Instant, u32)>>,
    occupied: [u64; WORDS],
    /// Slots with their bit set in `occupied`: with none (a law that arms no timers, or
    /// none now), finding the next timer costs no scan, as the heap's empty peek did not.
    occupied_slots: u32,
    ready: BinaryHeap<Entry>,
    far: BinaryHeap<Entry>,
}

impl Timers {
    pub(crate) fn new() -> Self {
        Timers {
            base: 0,
            slots: Vec::new(),
            occupied: [0; WORDS],
            occupied_slots: 0,
            ready: BinaryHeap::new(),
            far: BinaryHeap::new(),
        }
    }

    /// Arms `qp`'s timer at `at` (the caller records it as the live one).
    pub(crate) fn push(&mut self, at: Instant, qp: u32) {
        let t = tick(at);
        if t < self.base {
            self.ready.push(Reverse((at, qp)));
        } else if t - self.base < SLOTS as u64 {
            if self.slots.is_empty() {
                self.slots = vec![Vec::new(); SLOTS];
            }
            let i = (t % SLOTS as u64) as usize;
            self.slots[i].push((at, qp));
            let word = &mut self.occupied[i / 64];
            self.occupied_slots += u32::from(*word & (1 << (i % 64)) == 0);
            *word |= 1 << (i % 64);
        } else {
            self.far.push(Reverse((at, qp)));
        }
    }

    /// The earliest live timer, left in place.
    #[inline]
    pub(crate) fn peek(&mut self, live: impl Fn(u32, Instant) -> bool) -> Option<(Instant, u32)> {
        // The common case of a law that arms no timers, asked before every event.
        if self.ready.is_empty() && self.occupied_slots == 0 && self.far.is_empty() {
            return None;
        }
        loop {
            while let Some(&Reverse((at, qp))) = self.ready.peek() {
                if live(qp, at) {
                    return Some((at, qp));
                }
                self.ready.pop();
            }
            if let Some(i) = self.first_occupied() {
                // Every slot from `base` to this one is empty: the wheel moves past it.
                let ahead = (i + SLOTS - (self.base % SLOTS as u64) as usize) % SLOTS;
                self.base += ahead as u64 + 1;
                self.occupied[i / 64] &= !(1 << (i % 64));
                self.occupied_slots -= 1;
                let ready = &mut self.ready;
                for (at, qp) in self.slots[i].drain(..) {
                    if live(qp, at) {
                        ready.push(Reverse((at, qp)));
                    }
                }
            } else if let Some(&Reverse((at, _))) = self.far.peek() {
                // The wheel is empty: it jumps to the earliest far timer.
                self.base = self.base.max(tick(at));
            } else {
                return None;
            }
            self.pull_far(&live);
        }
    }

    /// Takes out the timer `peek` just returned (the caller disarms it).
    pub(crate) fn take_peeked(&mut self) {
        self.ready.pop();
    }

    /// The earliest live timer, taken out (the caller disarms it).
    #[cfg(test)]
    fn pop(&mut self, live: impl Fn(u32, Instant) -> bool) -> Option<(Instant, u32)> {
        let first = self.peek(live)?;
        self.take_peeked();
        Some(first)
    }

    /// Far timers now within the wheel's horizon move into it (dead ones are dropped).
    fn pull_far(&mut self, live: &impl Fn(u32, Instant) -> bool) {
        while let Some(&Reverse((at, qp))) = self.far.peek() {
            if tick(at) >= self.base + SLOTS as u64 {
                break;
            }
            self.far.pop();
            if live(qp, at) {
                self.push(at, qp);
            }
        }
    }

    /// The first occupied slot from `base` on, circularly.
    fn first_occupied(&self) -> Option<usize> {
        if self.occupied_slots == 0 {
            return None;
        }
        let start = (self.base % SLOTS as u64) as usize;
        let (w0, b0) = (start / 64, start % 64);
        // The start word from the start bit, the words after it, then the ones before
        // (the start word's low bits last).
        let head = self.occupied[w0] & (!0u64 << b0);
        if head != 0 {
            return Some(w0 * 64 + head.trailing_zeros() as usize);
        }
        for k in 1..=WORDS {
            let w = (w0 + k) % WORDS;
            let bits = if w == w0 {
                self.occupied[w] & !(!0u64 << b0)
            } else {
                self.occupied[w]
            };
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The structure this replaces: one heap, entries skipped once dead.
    #[derive(Default)]
    struct Model {
        heap: BinaryHeap<Entry>,
    }

    impl Model {
        fn pop(&mut self, live: impl Fn(u32, Instant) -> bool) -> Option<(Instant, u32)> {
            while let Some(Reverse((at, qp))) = self.heap.pop() {
                if live(qp, at) {
                    return Some((at, qp));
                }
            }
            None
        }
        fn peek(&mut self, live: impl Fn(u32, Instant) -> bool) -> Option<(Instant, u32)> {
            while let Some(&Reverse((at, qp))) = self.heap.peek() {
                if live(qp, at) {
                    return Some((at, qp));
                }
                self.heap.pop();
            }
            None
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Arm queue pair `qp` `ahead` ns from now (negative: in the past).
        Arm {
            qp: u32,
            ahead: i64,
        },
        Cancel {
            qp: u32,
        },
        /// Time moves on by `by` ns, then everything due fires (in order).
        Advance {
            by: u64,
        },
        Peek,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..40, prop_oneof![
                -5_000i64..5_000,
                0i64..10_000_000,
                Just(0i64),
            ]).prop_map(|(qp, ahead)| Op::Arm { qp, ahead }),
            1 => (0u32..40).prop_map(|qp| Op::Cancel { qp }),
            3 => prop_oneof![0u64..3_000, 0u64..6_000_000].prop_map(|by| Op::Advance { by }),
            1 => Just(Op::Peek),
        ]
    }

    proptest! {
        /// Fires the same timers in the same order, and names the same next one, as a
        /// heap does, whatever the arming: in the past, at once, within the wheel, past
        /// its horizon, re-armed, cancelled.
        #[test]
        fn fires_what_a_heap_fires_in_its_order(start in 0u64..1 << 40, ops in proptest::collection::vec(op(), 1..400)) {
            let mut live: Vec<Option<Instant>> = vec![None; 40];
            let mut wheel = Timers::new();
            let mut model = Model::default();
            let mut now = start;
            for op in ops {
                match op {
                    Op::Arm { qp, ahead } => {
                        let at = Instant::from_nanos(now.saturating_add_signed(ahead));
                        live[qp as usize] = Some(at);
                        wheel.push(at, qp);
                        model.heap.push(Reverse((at, qp)));
                    }
                    Op::Cancel { qp } => live[qp as usize] = None,
                    Op::Peek => {
                        let is = |q: u32, at| live[q as usize] == Some(at);
                        prop_assert_eq!(wheel.peek(is), model.peek(is));
                    }
                    Op::Advance { by } => {
                        now += by;
                        loop {
                            let is = |q: u32, at| live[q as usize] == Some(at);
                            let (w, m) = (wheel.peek(is), model.peek(is));
                            prop_assert_eq!(w, m);
                            match w {
                                Some((at, qp)) if at.as_nanos() <= now => {
                                    prop_assert_eq!(wheel.pop(is), model.pop(is));
                                    live[qp as usize] = None;
                                }
                                _ => break,
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_timer_past_the_horizon_fires_in_order_with_the_wheels() {
        let mut t = Timers::new();
        let at = |ns| Instant::from_nanos(ns);
        let live = |_: u32, _: Instant| true;
        t.push(at(50_000_000), 1); // beyond 4.19 ms
        t.push(at(2_000), 2);
        t.push(at(2_000), 0);
        t.push(at(1_000_000), 3);
        let order: Vec<_> = std::iter::from_fn(|| t.pop(live)).collect();
        assert_eq!(
            order,
            [
                (at(2_000), 0),
                (at(2_000), 2),
                (at(1_000_000), 3),
                (at(50_000_000), 1)
            ]
        );
        // Armed now in the past of the wheel (before base): fired first.
        t.push(at(10), 4);
        t.push(at(60_000_000), 5);
        assert_eq!(t.pop(live), Some((at(10), 4)));
        assert_eq!(t.pop(live), Some((at(60_000_000), 5)));
        assert_eq!(t.pop(live), None);
    }
}
