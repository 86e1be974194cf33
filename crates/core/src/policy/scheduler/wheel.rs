//! When each waiting class may send: a timing wheel, so that a pacing scheduler's decision
//! costs the same with 16,384 classes waiting as with one (a heap's would grow with their
//! logarithm, and its cache misses with them).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::lists::NIL;

/// A slot's span: 2^8 = 256 ns. A class is released at the start of its slot, up to this
/// much before its bucket allows: less than three 1 KiB packets' time at 100 Gbit/s, a
/// small part of a bucket's depth.
const SHIFT: u32 = 8;
/// Slots: the wheel spans 16,384 × 256 ns, about 4.2 ms; later times wait in a heap.
const SLOTS: usize = 1 << 14;
const MASK: u64 = SLOTS as u64 - 1;
const WORDS: usize = SLOTS / 64;

/// Classes waiting for a time, by slot of 256 ns.
#[derive(Debug, Clone)]
pub(crate) struct Wheel {
    /// Each slot's first class, or [`NIL`].
    head: Vec<u32>,
    /// Each class's successor in its slot.
    next: Vec<u32>,
    /// Slots with a class, one bit each.
    occupied: Vec<u64>,
    /// Classes in the wheel.
    len: usize,
    /// Every slot up to this one (absolute: time >> SHIFT) is empty.
    drained: u64,
    /// The first occupied slot, absolute, or `u64::MAX`: kept so that asking when the next
    /// class is due, and releasing before then, scan nothing.
    first: u64,
    /// Times beyond the wheel's span.
    later: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Default for Wheel {
    fn default() -> Self {
        Wheel {
            head: vec![NIL; SLOTS],
            next: Vec::new(),
            occupied: vec![0; WORDS],
            len: 0,
            drained: 0,
            first: u64::MAX,
            later: BinaryHeap::new(),
        }
    }
}

impl Wheel {
    /// Makes room for class `class`.
    pub(crate) fn grow(&mut self, class: u32) {
        if self.next.len() <= class as usize {
            self.next.resize(class as usize + 1, NIL);
        }
    }

    /// Class `class` may send at `at` (ns): into `ready` if that is in a slot already
    /// released, else into the wheel.
    #[inline]
    pub(crate) fn insert(&mut self, at: u64, class: u32, ready: &mut VecDeque<u32>) {
        let slot = at >> SHIFT;
        if slot <= self.drained {
            ready.push_back(class);
        } else if slot - self.drained < SLOTS as u64 {
            let i = (slot & MASK) as usize;
            self.next[class as usize] = self.head[i];
            self.head[i] = class;
            self.occupied[i / 64] |= 1 << (i % 64);
            self.len += 1;
            self.first = self.first.min(slot);
        } else {
            self.later.push(Reverse((at, class)));
        }
    }

    /// The first occupied slot after `drained`, absolute, found by a scan.
    #[inline]
    fn scan(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let start = ((self.drained + 1) & MASK) as usize;
        let (w0, bit) = (start / 64, start % 64);
        let bits = self.occupied[w0] & (!0u64 << bit);
        let offset = if bits != 0 {
            bits.trailing_zeros() as usize - bit
        } else {
            (1..=WORDS)
                .find_map(|k| {
                    let w = (w0 + k) % WORDS;
                    let bits = self.occupied[w];
                    (bits != 0).then(|| k * 64 + bits.trailing_zeros() as usize - bit)
                })
                .expect("a class in the wheel")
        };
        Some(self.drained + 1 + offset as u64)
    }

    /// Releases into `ready` every class whose slot has begun by `now` (ns).
    #[inline]
    pub(crate) fn release(&mut self, now: u64, ready: &mut VecDeque<u32>) {
        let target = now >> SHIFT;
        if target <= self.drained {
            return;
        }
        if self.first > target && self.later.is_empty() {
            self.drained = target;
            return;
        }
        while let Some(slot) = self.scan() {
            if slot > target {
                break;
            }
            let i = (slot & MASK) as usize;
            let mut c = std::mem::replace(&mut self.head[i], NIL);
            self.occupied[i / 64] &= !(1 << (i % 64));
            while c != NIL {
                ready.push_back(c);
                self.len -= 1;
                c = self.next[c as usize];
            }
            self.drained = slot;
        }
        self.drained = target;
        self.first = self.scan().unwrap_or(u64::MAX);
        while let Some(&Reverse((at, c))) = self.later.peek() {
            if (at >> SHIFT) - self.drained.min(at >> SHIFT) >= SLOTS as u64 {
                break;
            }
            self.later.pop();
            self.insert(at, c, ready);
        }
    }

    /// When the next waiting class is released, ns.
    pub(crate) fn next_time(&self) -> Option<u64> {
        let wheel = (self.first != u64::MAX).then_some(self.first << SHIFT);
        let later = self.later.peek().map(|&Reverse((at, _))| at);
        match (wheel, later) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_released_at_their_slot_in_time_order_and_far_ones_wait_in_the_heap() {
        let mut w = Wheel::default();
        w.grow(9);
        let mut ready = VecDeque::new();
        w.insert(5_000, 1, &mut ready);
        w.insert(300, 2, &mut ready);
        w.insert(1 << 30, 3, &mut ready);
        w.insert(5_100, 4, &mut ready);
        assert!(ready.is_empty());
        assert_eq!(w.next_time(), Some(256));
        w.release(255, &mut ready);
        assert!(ready.is_empty());
        w.release(256, &mut ready);
        assert_eq!(Vec::from(ready.clone()), [2]);
        assert_eq!(w.next_time(), Some(19 * 256));
        w.release(4_999, &mut ready);
        assert_eq!(Vec::from(ready.clone()), [2, 4, 1]);
        assert_eq!(w.next_time(), Some(1 << 30));
        // An insert in a released slot is ready at once.
        w.insert(4_000, 5, &mut ready);
        assert_eq!(ready.back(), Some(&5));
        w.release(1 << 30, &mut ready);
        assert_eq!(ready.back(), Some(&3));
        assert_eq!(w.next_time(), None);
    }
}
