//! The queue of received payloads waiting for a queue pair's deferred stages
//! ([`crate::policy::Service::deferred`]), bounded by the receive credit
//! ([`crate::engine::ServiceCredit`]): RoCE BALBOA's network request crediting, where a
//! packet the credit cannot cover is dropped rather than held, and the sender's
//! retransmission brings it again once the stage caught up.
//!
//! Buffers are reused: a payload is copied into a spare one (grown to the largest payload
//! once), so a warm queue allocates nothing. There are never more buffers than the credit's
//! packets, nor more queued bytes than its bytes.

use std::collections::VecDeque;

use sluice_wire::{Psn, RoceHeaders};

use crate::engine::ServiceCredit;

/// A received payload waiting for its queue pair's deferred stages.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// The queue pair's index.
    pub(crate) index: u32,
    /// The packet's headers, as it came.
    pub(crate) headers: RoceHeaders,
    /// The payload as the in-line stages left it.
    pub(crate) bytes: Vec<u8>,
}

/// Received payloads waiting for deferred stages, oldest first.
#[derive(Debug, Default)]
pub(crate) struct DeferredQueue {
    waiting: VecDeque<Waiting>,
    spare: Vec<Vec<u8>>,
    bytes: u64,
    /// Received payloads, and their bytes, out with asynchronous stages
    /// ([`crate::policy::Service::asynchronous`]): they count against the same credit
    /// (sent payloads take none).
    out: (u32, u64),
    /// Sent payloads, and their bytes, out with asynchronous stages: they take no credit,
    /// but are out all the same ([`DeferredQueue::depth`]: a driver waits for them).
    sent: (u32, u64),
    /// The most bytes ever queued (or out).
    pub(crate) peak_bytes: u64,
}

impl DeferredQueue {
    /// Whether a payload of `len` bytes fits within `credit` now.
    pub(crate) fn admits(&self, credit: ServiceCredit, len: usize) -> bool {
        self.waiting.len() + (self.out.0 as usize) < credit.packets as usize
            && self.bytes + self.out.1 + len as u64 <= credit.bytes
    }

    /// [`DeferredQueue::admits`], and if `reserve`, with room for another payload of `len`
    /// bytes left: a stage beside a deferred one leaves that one its room.
    pub(crate) fn admits_beside(&self, credit: ServiceCredit, len: usize, reserve: bool) -> bool {
        if !reserve {
            return self.admits(credit, len);
        }
        self.waiting.len() + (self.out.0 as usize) + 1 < credit.packets as usize
            && self.bytes + self.out.1 + 2 * len as u64 <= credit.bytes
    }

    /// A payload of `len` bytes handed to an asynchronous stage (the caller checked
    /// [`DeferredQueue::admits`]).
    pub(crate) fn went_out(&mut self, len: usize) {
        self.out.0 += 1;
        self.out.1 += len as u64;
        self.peak_bytes = self.peak_bytes.max(self.bytes + self.out.1);
    }

    /// A sent payload of `len` bytes handed to an asynchronous stage (no credit taken).
    pub(crate) fn sent_out(&mut self, len: usize) {
        self.sent.0 += 1;
        self.sent.1 += len as u64;
    }

    /// A sent payload of `len` bytes an asynchronous stage returned.
    pub(crate) fn sent_back(&mut self, len: usize) {
        self.sent.0 = self.sent.0.saturating_sub(1);
        self.sent.1 = self.sent.1.saturating_sub(len as u64);
    }

    /// `(payloads, bytes)` received (`credited`) and `sent` out with asynchronous stages
    /// no longer owed (their queue pair went).
    pub(crate) fn no_longer_owed(&mut self, credited: (u64, u64), sent: (u64, u64)) {
        let less = |n: u32, by: u64| n.saturating_sub(u32::try_from(by).unwrap_or(u32::MAX));
        self.out = (
            less(self.out.0, credited.0),
            self.out.1.saturating_sub(credited.1),
        );
        self.sent = (
            less(self.sent.0, sent.0),
            self.sent.1.saturating_sub(sent.1),
        );
    }

    /// A payload of `len` bytes an asynchronous stage returned.
    pub(crate) fn came_back(&mut self, len: usize) {
        self.out.0 = self.out.0.saturating_sub(1);
        self.out.1 = self.out.1.saturating_sub(len as u64);
    }

    /// Queues a copy of `payload` for queue pair `index` (the caller checked
    /// [`DeferredQueue::admits`]).
    pub(crate) fn push(&mut self, index: u32, headers: &RoceHeaders, payload: &[u8]) {
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(payload);
        self.bytes += payload.len() as u64;
        self.peak_bytes = self.peak_bytes.max(self.bytes + self.out.1);
        self.waiting.push_back(Waiting {
            index,
            headers: *headers,
            bytes,
        });
    }

    /// The oldest waiting payload; give its buffer back with [`DeferredQueue::recycle`].
    pub(crate) fn pop(&mut self) -> Option<Waiting> {
        let w = self.waiting.pop_front()?;
        self.bytes -= w.bytes.len() as u64;
        Some(w)
    }

    /// A buffer [`DeferredQueue::pop`] gave, to reuse.
    pub(crate) fn recycle(&mut self, bytes: Vec<u8>) {
        self.spare.push(bytes);
    }

    /// Forgets what waits for queue pair `index` (destroyed or reset: its slot's next queue
    /// pair must not see it).
    pub(crate) fn forget(&mut self, index: u32) {
        let mut freed = 0;
        let spare = &mut self.spare;
        self.waiting.retain_mut(|w| {
            if w.index != index {
                return true;
            }
            freed += w.bytes.len() as u64;
            spare.push(std::mem::take(&mut w.bytes));
            false
        });
        self.bytes -= freed;
    }

    /// Payloads and bytes waiting (queued, or out with asynchronous stages, sent ones
    /// included).
    pub(crate) fn depth(&self) -> (usize, u64) {
        (
            self.waiting.len() + self.out.0 as usize + self.sent.0 as usize,
            self.bytes + self.out.1 + self.sent.1,
        )
    }
}

/// What one queue pair lost to the receive credit since the credit last came back, so that
/// the transport asks for it again as soon as the credit frees, not at its retransmission
/// timeout: a tail dropped past the credit (a READ's last responses, a WRITE's or SEND's
/// last packets) has nothing behind it to reveal the gap.
///
/// Each side is asked once per episode: a drop is recorded, and when the credit comes
/// back, the responder answers RC's "no room" (an RNR NAK at its expected PSN, which any
/// requester takes as "go back there and send everything again after the wait"), and the
/// requester re-issues the oldest waiting READ from its first missing response. Under
/// go-back-N a gap the transport already asked for after every drop (the responder's
/// sequence NAK, the requester's READ re-request) brings the dropped packets back: then
/// nothing more is asked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CreditDrops {
    /// Requests dropped (the queue pair's responder): the PSN after the furthest.
    requests_until: Option<Psn>,
    /// A request was dropped after the responder had NAK'd its expected PSN as missing.
    request_after_nak: bool,
    /// READ responses dropped (the requester): the PSN of the last.
    response_at: Option<Psn>,
    /// A response at `response_at` was dropped after a re-request from it went.
    response_after_retry: bool,
}

impl CreditDrops {
    /// Nothing recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.requests_until.is_none() && self.response_at.is_none()
    }

    /// The request at `psn` was dropped; `nak_sent`: the responder had NAK'd its expected
    /// PSN as missing already.
    pub(crate) fn request(&mut self, psn: Psn, nak_sent: bool) {
        let end = psn.next();
        if self.requests_until.is_none_or(|u| u.precedes(end)) {
            self.requests_until = Some(end);
        }
        self.request_after_nak |= nak_sent;
    }

    /// The READ response at `psn` was dropped; `retried`: the requester had re-requested
    /// from it already.
    pub(crate) fn response(&mut self, psn: Psn, retried: bool) {
        if self.response_at != Some(psn) {
            self.response_after_retry = false;
        }
        self.response_at = Some(psn);
        self.response_after_retry |= retried;
    }

    /// Whether the responder, expecting `epsn`, must ask for dropped requests again: some
    /// are not taken yet, and no gap NAK (go-back-N: `nak_sent`) went after them all.
    pub(crate) fn ask_requests(&self, epsn: Psn, nak_sent: bool, go_back_n: bool) -> bool {
        self.requests_until.is_some_and(|u| epsn.precedes(u))
            && !(go_back_n && nak_sent && !self.request_after_nak)
    }

    /// Whether the requester, whose oldest waiting READ expects `expected` next, must ask
    /// for dropped responses again: the last is not taken yet, and no re-request from it
    /// (go-back-N: `retried`) went after it was dropped.
    pub(crate) fn ask_responses(&self, expected: Psn, retried: bool, go_back_n: bool) -> bool {
        self.response_at.is_some_and(|at| !at.precedes(expected))
            && !(go_back_n && retried && !self.response_after_retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers() -> RoceHeaders {
        RoceHeaders {
            bth: sluice_wire::Bth::new(
                sluice_wire::Opcode::RC_SEND_ONLY,
                1,
                sluice_wire::Psn::new(0),
            ),
            ccx: None,
            ext: sluice_wire::ExtHeaders::default(),
        }
    }

    #[test]
    fn the_credit_bounds_packets_and_bytes() {
        let credit = ServiceCredit {
            packets: 3,
            bytes: 100,
        };
        let mut q = DeferredQueue::default();
        assert!(q.admits(credit, 100) && !q.admits(credit, 101));
        q.push(0, &headers(), &[1; 60]);
        assert!(q.admits(credit, 40) && !q.admits(credit, 41));
        q.push(0, &headers(), &[2; 10]);
        q.push(1, &headers(), &[3; 10]);
        assert!(!q.admits(credit, 0), "three packets is the bound");
        assert_eq!(q.depth(), (3, 80));
        let w = q.pop().unwrap();
        assert_eq!((w.index, &w.bytes[..]), (0, &[1u8; 60][..]));
        q.recycle(w.bytes);
        q.forget(0);
        assert_eq!(q.depth(), (1, 10));
        assert_eq!(q.pop().unwrap().bytes, [3; 10]);
        assert_eq!(q.depth(), (0, 0));
        assert_eq!(q.peak_bytes, 80);
    }

    #[test]
    fn payloads_out_with_a_stage_count_against_the_credit() {
        let credit = ServiceCredit {
            packets: 2,
            bytes: 100,
        };
        let mut q = DeferredQueue::default();
        q.went_out(70);
        assert!(q.admits(credit, 30) && !q.admits(credit, 31));
        q.push(0, &headers(), &[1; 30]);
        assert!(!q.admits(credit, 0), "two packets is the bound");
        assert_eq!(q.depth(), (2, 100));
        q.came_back(70);
        assert_eq!(q.depth(), (1, 30));
        assert_eq!(q.peak_bytes, 100);
    }

    #[test]
    fn what_a_queue_pair_gone_had_out_comes_back() {
        let credit = ServiceCredit {
            packets: 2,
            bytes: 100,
        };
        let mut q = DeferredQueue::default();
        q.went_out(40);
        q.went_out(50);
        assert!(!q.admits(credit, 0));
        q.no_longer_owed((1, 40), (0, 0));
        assert_eq!(q.depth(), (1, 50));
        assert!(q.admits(credit, 50) && !q.admits(credit, 51));
        // More than is out (a stage that returned less than it was offered): none left.
        q.no_longer_owed((5, 500), (0, 0));
        assert_eq!(q.depth(), (0, 0));
    }

    #[test]
    fn sent_payloads_out_take_no_credit_but_are_waited_for() {
        let credit = ServiceCredit {
            packets: 1,
            bytes: 100,
        };
        let mut q = DeferredQueue::default();
        q.sent_out(100);
        q.sent_out(100);
        assert!(q.admits(credit, 100), "the credit is the receive side's");
        assert_eq!(q.depth(), (2, 200), "a driver still waits for them");
        q.sent_back(100);
        assert_eq!(q.depth(), (1, 100));
        q.no_longer_owed((0, 0), (1, 100));
        assert_eq!(q.depth(), (0, 0));
        assert_eq!(q.peak_bytes, 0, "the peak is what the credit bounds");
    }

    #[test]
    fn buffers_are_reused() {
        let mut q = DeferredQueue::default();
        q.push(0, &headers(), &[7; 4096]);
        let w = q.pop().unwrap();
        let at = w.bytes.as_ptr();
        q.recycle(w.bytes);
        q.push(0, &headers(), &[8; 100]);
        let w = q.pop().unwrap();
        assert_eq!(w.bytes.as_ptr(), at);
        assert_eq!(w.bytes, [8; 100]);
    }

    #[test]
    fn a_stage_beside_a_deferred_one_leaves_it_room() {
        let credit = ServiceCredit {
            packets: 2,
            bytes: 100,
        };
        let mut q = DeferredQueue::default();
        assert!(q.admits_beside(credit, 10, true));
        q.went_out(10);
        // One packet's room left: the deferred stage's.
        assert!(!q.admits_beside(credit, 10, true));
        assert!(q.admits_beside(credit, 10, false));
        assert!(q.admits(credit, 10));
        // Bytes too.
        let q = DeferredQueue::default();
        assert!(q.admits_beside(credit, 50, true));
        assert!(!q.admits_beside(credit, 51, true));
        assert!(q.admits_beside(credit, 51, false));
    }

    #[test]
    fn credit_drops_ask_once_unless_the_gap_was_asked_for_after_them() {
        let p = Psn::new;
        let mut d = CreditDrops::default();
        assert!(d.is_empty());
        assert!(!d.ask_requests(p(5), false, true));
        d.request(p(5), false);
        d.request(p(3), false);
        assert!(!d.is_empty());
        // Not taken yet, no NAK: asked (both recoveries).
        assert!(d.ask_requests(p(5), false, true));
        assert!(d.ask_requests(p(5), false, false));
        // Taken since: nothing.
        assert!(!d.ask_requests(p(6), false, true));
        // Go-back-N, a gap NAK after the drop: it brings the request back.
        assert!(!d.ask_requests(p(5), true, true));
        // Selective repeat resends only the NAK'd PSN: asked anyway.
        assert!(d.ask_requests(p(5), true, false));
        // A drop after the NAK: the NAK does not cover it.
        d.request(p(5), true);
        assert!(d.ask_requests(p(5), true, true));

        let mut r = CreditDrops::default();
        r.response(p(9), false);
        assert!(r.ask_responses(p(9), false, true));
        assert!(!r.ask_responses(p(10), false, true), "taken since");
        assert!(!r.ask_responses(p(9), true, true), "re-requested after");
        r.response(p(9), true);
        assert!(r.ask_responses(p(9), true, true), "dropped again after");
        // A later response dropped forgets the earlier's re-request.
        r.response(p(11), false);
        assert!(!r.ask_responses(p(11), true, true));
        assert!(r.ask_responses(p(11), true, false));
    }
}
