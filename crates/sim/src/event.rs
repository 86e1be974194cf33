//! The event core: a priority queue of timed events, earliest first, ties broken by the
//! order they were scheduled in (so a run never depends on how the queue's structure
//! happens to hold equal times).
//!
//! Time is integer picoseconds: at 400 Gbit/s a 1 KB packet takes 20.48 ns, and rounding
//! every serialisation to whole nanoseconds would shift link rates by up to 5%. The engine
//! still sees nanoseconds ([`to_instant`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

use sluice_core::Instant;

/// Simulated time in picoseconds.
pub type Ps = u64;

/// Picoseconds in a nanosecond.
pub const PS_PER_NS: u64 = 1_000;
/// Picoseconds in a microsecond.
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

/// Slots of the timing wheel, and picoseconds per slot (2^10: about 1 ns). The wheel spans
/// 4.2 us ahead of its cursor: link delays and serialisations land in it; timers further
/// out wait in a heap.
const SLOT_BITS: u32 = 12;
const SLOTS: u64 = 1 << SLOT_BITS;
const SLOT_MASK: u64 = SLOTS - 1;
const GRAIN_BITS: u32 = 10;
const WORDS: usize = (SLOTS / 64) as usize;
// One summary word covers the wheel's occupancy words.
const _: () = assert!(WORDS == 64);

/// An event far ahead, ordered by its key alone.
#[derive(Debug)]
struct Far<E>(u128, E);

impl<E> PartialEq for Far<E> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<E> Eq for Far<E> {}
impl<E> PartialOrd for Far<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Far<E> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// Events of type `E` in time order: a timing wheel of 1 ns slots over the next 4.2 us,
/// a binary heap beyond. Ties are broken by scheduling order, and the order never depends
/// on the structure: an event reaches a slot from the heap only as the slot enters the
/// wheel's span, before any event can be pushed into it directly, so a slot's list holds
/// its events newest first, and a stable sort by time of the reversed list when the cursor
/// reaches the slot puts them in (time, scheduling order).
///
/// Nearly every event of a fabric lands a link delay or a serialisation ahead, within the
/// wheel. The events of all slots live in one arena of list nodes with a last-in-first-out
/// free list, so a push writes into the node a pop has just freed (a cache line in use)
/// rather than into the cold buffer of a slot 1 us ahead.
#[derive(Debug)]
pub struct EventQueue<E> {
    nodes: Vec<Node<E>>,
    /// The first free node (`NIL`: none; the arena grows).
    free: u32,
    /// The newest node of each slot's list.
    heads: Vec<u32>,
    /// Bit s set: slot s is not empty.
    occupied: [u64; WORDS],
    /// Bit w set: `occupied[w]` is not zero.
    summary: u64,
    /// The absolute slot (time >> GRAIN_BITS) of the events in `current`.
    cursor: u64,
    /// The cursor's events, earliest first (ties: first scheduled first); `current[head..]`
    /// are pending. Events scheduled into it while it is served are nearly always the
    /// latest yet: they go at the back, so even 100,000 flows starting at one instant
    /// queue in linear time.
    current: Vec<(Ps, E)>,
    head: usize,
    /// Events at or beyond `cursor + SLOTS`, keyed by (time, scheduling order).
    far: BinaryHeap<Reverse<Far<E>>>,
    /// The slot of the earliest event in `far` (`u64::MAX`: none).
    far_slot: u64,
    len: usize,
    seq: u64,
    /// Events popped so far.
    pub popped: u64,
}

/// An event in a slot's list.
#[derive(Debug, Clone, Copy)]
struct Node<E> {
    at: Ps,
    /// The node scheduled before it in the same slot, or the next free node.
    next: u32,
    event: E,
}

const NIL: u32 = u32::MAX;

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            nodes: Vec::new(),
            free: NIL,
            heads: vec![NIL; SLOTS as usize],
            occupied: [0; WORDS],
            summary: 0,
            cursor: 0,
            current: Vec::new(),
            head: 0,
            far: BinaryHeap::new(),
            far_slot: u64::MAX,
            len: 0,
            seq: 0,
            popped: 0,
        }
    }
}

fn slot_of(at: Ps) -> u64 {
    at >> GRAIN_BITS
}

/// Sorts by time, stably: by insertion for a slot's usual few events, mostly in order
/// already.
fn sort_by_time<E: Copy>(v: &mut [(Ps, E)]) {
    if v.len() > 32 {
        v.sort_by_key(|e| e.0);
        return;
    }
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && v[j - 1].0 > x.0 {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

impl<E: Copy> EventQueue<E> {
    /// Schedules `event` at `at`, which must not be before the last event popped (the
    /// simulator never schedules into the past).
    #[inline]
    pub fn push(&mut self, at: Ps, event: E) {
        self.seq += 1;
        self.len += 1;
        let slot = slot_of(at);
        if slot > self.cursor && slot < self.cursor + SLOTS {
            self.link(slot, at, event);
        } else {
            self.push_other(at, event);
        }
    }

    /// Adds an event to the list of wheel slot `slot` (after the cursor, within the span).
    #[inline]
    fn link(&mut self, slot: u64, at: Ps, event: E) {
        let s = (slot & SLOT_MASK) as usize;
        let node = Node {
            at,
            next: self.heads[s],
            event,
        };
        let n = match self.nodes.get_mut(self.free as usize) {
            Some(free) => {
                let n = self.free;
                self.free = free.next;
                *free = node;
                n
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.heads[s] = n;
        self.occupied[s / 64] |= 1 << (s % 64);
        self.summary |= 1 << (s / 64);
    }

    /// An event into the slot being served or beyond the wheel's span.
    #[cold]
    fn push_other(&mut self, at: Ps, event: E) {
        if slot_of(at) <= self.cursor {
            self.insert_current(at, event);
        } else {
            let key = (u128::from(at) << 64) | u128::from(self.seq);
            self.far.push(Reverse(Far(key, event)));
            self.far_slot = self.far_slot.min(slot_of(at));
        }
    }

    /// Into the slot being served: after every pending event of its time or earlier (it is
    /// the latest scheduled of its time so far).
    fn insert_current(&mut self, at: Ps, event: E) {
        let i = self.head + self.current[self.head..].partition_point(|&(t, _)| t <= at);
        self.current.insert(i, (at, event));
    }

    /// Moves slot `s`'s events into `current` (all served), in order, freeing their nodes.
    fn take_slot(&mut self, s: usize) {
        self.current.clear();
        self.head = 0;
        let mut n = std::mem::replace(&mut self.heads[s], NIL);
        self.occupied[s / 64] &= !(1 << (s % 64));
        if self.occupied[s / 64] == 0 {
            self.summary &= !(1 << (s / 64));
        }
        while let Some(node) = self.nodes.get_mut(n as usize) {
            self.current.push((node.at, node.event));
            let next = node.next;
            node.next = self.free;
            self.free = n;
            n = next;
        }
        // The list is newest first: reversed, it is in scheduling order, which the stable
        // sort keeps among equal times.
        self.current.reverse();
        sort_by_time(&mut self.current);
    }

    /// The first occupied slot after the cursor, within the wheel: the rest of the
    /// cursor's word, then the summary's next word (wrapping), then the cursor's word's
    /// slots before it (a full turn ahead).
    fn next_slot(&self) -> Option<u64> {
        let start = (self.cursor + 1) & SLOT_MASK;
        let (w0, b0) = ((start / 64) as usize, start % 64);
        let found = |w: usize, bits: u64| {
            let s = w as u64 * 64 + u64::from(bits.trailing_zeros());
            self.cursor + 1 + ((s + SLOTS - start) & SLOT_MASK)
        };
        let rest = self.occupied[w0] & (!0u64 << b0);
        if rest != 0 {
            return Some(found(w0, rest));
        }
        let after = self.summary & (!1u64).checked_shl(w0 as u32).unwrap_or(0);
        let before = self.summary & ((1u64 << w0) - 1);
        match (after, before) {
            (0, 0) => {
                let below = self.occupied[w0] & !(!0u64 << b0);
                (below != 0).then(|| found(w0, below))
            }
            (0, w) | (w, _) => {
                let w = w.trailing_zeros() as usize;
                Some(found(w, self.occupied[w]))
            }
        }
    }

    /// The earliest event, if any is due at or before `until`.
    #[inline]
    pub fn pop_until(&mut self, until: Ps) -> Option<(Ps, E)> {
        if self.head == self.current.len() && !self.advance(until) {
            return None;
        }
        let &(at, event) = self.current.get(self.head)?;
        if at > until {
            return None;
        }
        self.head += 1;
        self.len -= 1;
        self.popped += 1;
        Some((at, event))
    }

    /// Moves the cursor to the next slot with events, if it starts at or before `until`;
    /// false if there is none.
    #[inline(never)]
    fn advance(&mut self, until: Ps) -> bool {
        // The wheel's next slot comes before anything in the heap.
        let next = match self.next_slot() {
            Some(near) => near.min(self.far_slot),
            None if self.far_slot != u64::MAX => self.far_slot,
            None => return false,
        };
        if next << GRAIN_BITS > until {
            return false;
        }
        self.cursor = next;
        self.take_slot((next & SLOT_MASK) as usize);
        if self.far_slot < self.cursor + SLOTS {
            self.take_far();
        }
        true
    }

    /// Moves what the wheel now reaches in from the heap, in key order.
    fn take_far(&mut self) {
        loop {
            let Some(top) = self.far.peek_mut() else {
                break;
            };
            let at = ((top.0).0 >> 64) as Ps;
            let slot = slot_of(at);
            if slot >= self.cursor + SLOTS {
                self.far_slot = slot;
                return;
            }
            let Reverse(Far(_, event)) = PeekMut::pop(top);
            if slot == self.cursor {
                self.insert_current(at, event);
            } else {
                self.link(slot, at, event);
            }
        }
        self.far_slot = u64::MAX;
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of pending events.
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
        fn pops_in_time_then_schedule_order(ops in proptest::collection::vec((0u64..3, 0u64..1_000_000), 1..600)) {
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
                    // Ties, the wheel's span, and far beyond it (the heap).
                    let at = now + match op { 1 => dt % 7, _ => dt * (1 + dt % 3) * 1000 };
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
