//! Sender-side SRPT: the queue pair whose next message has the fewest bytes left goes first.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Scheduler, Served};
use crate::Instant;

/// Shortest remaining processing time first across a host's queue pairs, as a Homa sender
/// transmits (Montazeri et al., SIGCOMM 2018: a sender with several messages sends the one
/// with the fewest bytes left first); under round robin a short message shares its host's
/// link with every long one the host is sending, which is where most of a short flow's
/// tail slowdown came from in the Homa repro (`docs/repro.md`).
///
/// A queue pair's key is what the engine said of it after its last packet
/// ([`Served::left`]): the payload bytes its next message has left to send, 0 when it owes
/// its peer a packet (ACKs, grants, READ responses go before any message). A queue pair
/// woken before it ever sent keeps the key its last visit left (0 for a new one): it sends
/// one packet, and is ranked from then on. Ties go to the queue pair that waited longest.
///
/// One heap entry per held queue pair (the engine wakes a queue pair only while it is not
/// held), so a visit costs a pop and a push, O(log n), without allocating once the heap
/// has grown to the most queue pairs held at once. A removed queue pair's entry is left in
/// the heap and skipped when it comes up (its generation moved on).
#[derive(Debug, Clone, Default)]
pub struct Srpt {
    /// Held queue pairs: (bytes left, order of arrival, queue pair, generation).
    ready: BinaryHeap<Reverse<(u32, u64, u32, u32)>>,
    /// Per queue pair index: its key and its generation (bumped when it is removed or a
    /// new queue pair takes the index).
    left: Vec<u32>,
    generation: Vec<u32>,
    order: u64,
}

impl Srpt {
    /// The slot of queue pair `qp`, grown on first sight (once per index, not per visit).
    fn slot(&mut self, qp: u32) -> usize {
        let at = qp as usize;
        if self.left.len() <= at {
            self.left.resize(at + 1, 0);
            self.generation.resize(at + 1, 0);
        }
        at
    }

    fn push(&mut self, qp: u32) {
        let at = self.slot(qp);
        self.order += 1;
        self.ready.push(Reverse((
            self.left[at],
            self.order,
            qp,
            self.generation[at],
        )));
    }

    /// Forgets queue pair `qp`: its entry, if any, is stale from now on.
    fn forget(&mut self, qp: u32) {
        let at = self.slot(qp);
        self.left[at] = 0;
        self.generation[at] = self.generation[at].wrapping_add(1);
    }
}

impl Scheduler for Srpt {
    fn reset(&mut self, qp: u32) {
        self.forget(qp);
    }

    fn wake(&mut self, qp: u32) {
        self.push(qp);
    }

    fn next(&mut self, _now: Instant) -> Option<u32> {
        while let Some(Reverse((_, _, qp, generation))) = self.ready.pop() {
            if self.generation.get(qp as usize) == Some(&generation) {
                return Some(qp);
            }
        }
        None
    }

    fn served(&mut self, qp: u32, _now: Instant, sent: Option<Served>, more: bool) {
        let at = self.slot(qp);
        if let Some(s) = sent {
            self.left[at] = s.left;
        }
        if more {
            self.push(qp);
        }
    }

    fn remove(&mut self, qp: u32) {
        self.forget(qp);
    }
}

#[cfg(test)]
mod tests {
    use sluice_wire::Opcode;

    use super::*;

    const NOW: Instant = Instant::ZERO;

    fn packet(left: u32) -> Served {
        Served::new(Opcode::RC_RDMA_WRITE_MIDDLE, 1024).with_left(left)
    }

    /// Serves `s` until it holds nothing: each queue pair's message of `len[qp]` bytes goes
    /// out 1024 bytes a visit. Returns the order of visits.
    fn drain(s: &mut Srpt, len: &mut [u32]) -> Vec<u32> {
        std::iter::from_fn(|| {
            let qp = s.next(NOW)?;
            let l = &mut len[qp as usize];
            *l = l.saturating_sub(1024);
            s.served(qp, NOW, Some(packet(*l)), *l > 0);
            Some(qp)
        })
        .collect()
    }

    #[test]
    fn the_shortest_remaining_message_goes_first_once_each_has_been_seen() {
        let mut s = Srpt::default();
        let mut len = [8 * 1024, 2 * 1024, 4 * 1024];
        for qp in 0..3 {
            s.wake(qp);
        }
        // New queue pairs have no key yet: one packet each in the order woken, then by
        // what is left (1 KB, 3 KB, 7 KB).
        assert_eq!(
            drain(&mut s, &mut len),
            [0, 1, 2, 1, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn a_shorter_message_arriving_preempts_a_long_one_and_responses_go_first() {
        // Queue pair 0 is well into a long message.
        let mut t = Srpt::default();
        t.wake(0);
        t.next(NOW);
        t.served(0, NOW, Some(packet(100_000)), true);
        t.wake(1);
        t.next(NOW);
        // 1, new, sends a packet of a 3 KB message and is held (a law's gate), 2 KB left;
        // woken again (a grant), it ranks by what it had left, before 0.
        t.served(1, NOW, Some(packet(2048)), false);
        t.wake(1);
        assert_eq!(t.next(NOW), Some(1));
        t.served(1, NOW, Some(packet(1024)), true);
        // 2 owes its peer an ACK (0 left): it goes before both.
        t.wake(2);
        t.next(NOW); // new: first visit
        t.served(2, NOW, Some(packet(0)), true);
        assert_eq!(t.next(NOW), Some(2));
        t.served(2, NOW, Some(packet(0)), false);
        assert_eq!(t.next(NOW), Some(1));
        t.served(1, NOW, Some(packet(0)), false);
        assert_eq!(t.next(NOW), Some(0));
    }

    #[test]
    fn a_removed_or_reset_queue_pair_is_not_served_and_its_index_starts_afresh() {
        let mut s = Srpt::default();
        for qp in 0..3 {
            s.wake(qp);
        }
        s.remove(1);
        assert_eq!(s.next(NOW), Some(0));
        s.served(0, NOW, Some(packet(500)), true);
        // Index 1 reused by a new queue pair: a fresh key of 0.
        s.reset(1);
        s.wake(1);
        let order: Vec<u32> = std::iter::from_fn(|| {
            let qp = s.next(NOW)?;
            s.served(qp, NOW, Some(packet(0)), false);
            Some(qp)
        })
        .collect();
        assert_eq!(order, [2, 1, 0]);
    }

    #[test]
    fn many_queue_pairs_finish_in_srpt_order_whatever_the_wake_order() {
        // A seeded shuffle of 64 message lengths: after each has sent its first packet,
        // messages complete strictly shortest first.
        let mut rng = crate::rng::Rng::new(5);
        for _ in 0..8 {
            let n = 64u32;
            let mut len: Vec<u32> = (0..n).map(|_| 1024 * (2 + rng.below(60) as u32)).collect();
            let mut s = Srpt::default();
            let mut order: Vec<u32> = (0..n).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
            for &qp in &order {
                s.wake(qp);
            }
            let original = len.clone();
            let visits = drain(&mut s, &mut len);
            let mut finished: Vec<u32> = Vec::new();
            let mut seen = vec![0u32; n as usize];
            for &qp in &visits {
                seen[qp as usize] += 1;
                if seen[qp as usize] * 1024 >= original[qp as usize] {
                    finished.push(qp);
                }
            }
            assert_eq!(finished.len(), n as usize);
            for w in finished.windows(2) {
                assert!(
                    original[w[0] as usize] <= original[w[1] as usize],
                    "{} finished before {}",
                    original[w[0] as usize],
                    original[w[1] as usize]
                );
            }
        }
    }
}
