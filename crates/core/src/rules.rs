//! The requester's and responder's sequence rules as methods of their state, each small
//! enough to test alone: where a request's PSN stands, when an ACK is due, that a gap is
//! NAK'd once, that an opcode continues the message in progress, how far the window lets a
//! requester go, where it resends from, and the bounded queue of single resends.

use sluice_wire::{Operation, Psn};

use crate::qp::{InProgress, ReadRepair, Requester, Responder, SendOp};

/// Where a request's PSN stands against the PSN the responder expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The expected PSN: take it.
    InOrder,
    /// This many PSNs past it: a gap before it.
    Ahead(u32),
    /// Before it: a duplicate of a request already taken.
    Duplicate,
}

/// NAK'd PSNs a selective-repeat requester queues for resending.
pub(crate) const RESEND_LIMIT: usize = 64;

/// Room in a responder's queue of owed responses, beyond the answers to new READs and
/// atomics, for NAKs and for responses replayed to duplicate requests.
pub(crate) const EXTRA_SLOTS: usize = 8;

impl Responder {
    /// Where request `psn` stands (PSN arithmetic modulo 2^24: half the space ahead, half
    /// behind).
    #[inline]
    pub(crate) fn arrival(&self, psn: Psn) -> Arrival {
        match self.epsn.distance_to(psn) {
            0 => Arrival::InOrder,
            d if d > 0 => Arrival::Ahead(d as u32),
            _ => Arrival::Duplicate,
        }
    }

    /// A new request was taken: the expected PSN moves on, a gap after it may be NAK'd
    /// again, and an ACK is due when the request asked for one or `ack_every` (0: never by
    /// count) requests have been taken since the last ACK. ACKs coalesce: one covers every
    /// request before it leaves.
    #[inline]
    pub(crate) fn took_request(&mut self, ack_req: bool, ack_every: u32) {
        self.epsn = self.epsn.next();
        self.nak_sent = false;
        self.unacked = self.unacked.saturating_add(1);
        if ack_req || (ack_every > 0 && self.unacked >= ack_every) {
            self.ack_due = true;
        }
    }

    /// Whether the gap at the expected PSN is still to be NAK'd: true once per value of
    /// the expected PSN (later packets past the same gap say nothing new).
    pub(crate) fn claim_gap_nak(&mut self) -> bool {
        !std::mem::replace(&mut self.nak_sent, true)
    }

    /// The coalesced ACK leaves: nothing is owed until the next request.
    pub(crate) fn ack_sent(&mut self) {
        self.ack_due = false;
        self.unacked = 0;
    }

    /// Whether one more READ response or atomic ACK may be owed: a requester with more
    /// READs and atomics outstanding than `max_dest_rd_atomic` breaks the protocol.
    pub(crate) fn room_for_new_request(&self, max_dest_rd_atomic: u8) -> bool {
        let new = self
            .responses
            .iter()
            .filter(|r| r.answers_new_request())
            .count();
        new < usize::from(max_dest_rd_atomic)
    }

    /// Whether a NAK or a replayed response (for a duplicate request) may still be queued.
    pub(crate) fn room_for_extra(&self) -> bool {
        let extra = self
            .responses
            .iter()
            .filter(|r| !r.answers_new_request())
            .count();
        extra < EXTRA_SLOTS
    }

    /// Duplicate handling: whether `psn` falls in a READ this responder took and still
    /// keeps (it may then serve the READ again; one it no longer keeps is not answered).
    pub(crate) fn read_was_taken(&self, psn: Psn) -> bool {
        self.resources.iter().any(|r| {
            let d = r.first_psn.distance_to(psn);
            r.atomic_original.is_none() && d >= 0 && (d as u32) < r.span
        })
    }

    /// Duplicate handling: the original value an atomic at `psn` returned, if it is still
    /// kept, to answer the duplicate with (an atomic is never executed twice).
    pub(crate) fn atomic_result(&self, psn: Psn) -> Option<u64> {
        self.resources
            .iter()
            .find(|r| r.first_psn == psn)
            .and_then(|r| r.atomic_original)
    }

    /// Whether a packet of `operation` may come now: a SEND or WRITE continues the message
    /// of its kind in progress, or starts one (`starts`) when none is; READs and atomics
    /// come between messages only. Anything else is not a request.
    pub(crate) fn continues_message(&self, operation: Operation, starts: bool) -> bool {
        let in_send = matches!(self.in_progress, Some(InProgress::Send { .. }));
        let in_write = matches!(self.in_progress, Some(InProgress::Write { .. }));
        match operation {
            Operation::Send | Operation::SendWithImmediate if !starts => in_send,
            Operation::RdmaWrite | Operation::RdmaWriteWithImmediate if !starts => in_write,
            Operation::Send
            | Operation::SendWithImmediate
            | Operation::RdmaWrite
            | Operation::RdmaWriteWithImmediate
            | Operation::RdmaReadRequest
            | Operation::CompareSwap
            | Operation::FetchAdd => !in_send && !in_write,
            _ => false,
        }
    }
}

impl ReadRepair {
    /// READ-response repair: whether the gap at `expected` (the first missing response) is
    /// still coming: it lies in the range last asked for again, and no response past it
    /// from that asking has arrived (`first_held`, the first PSN held past the gap, is not
    /// inside the range). Then nothing is asked again.
    pub(crate) fn gap_on_its_way(&self, expected: Psn, first_held: Option<Psn>) -> bool {
        self.asked.is_some_and(|(from, until)| {
            from.distance_to(expected) >= 0
                && expected.precedes(until)
                && first_held.is_none_or(|held| !held.precedes(until))
        })
    }
}

impl Requester {
    /// Whether `window` packets are unacknowledged: nothing new may go.
    #[inline]
    pub(crate) fn window_full(&self, window: u32) -> bool {
        self.una.distance_to(self.next_psn) as u32 >= window
    }

    /// Queues `psn` to be resent alone (selective repeat), unless it already is or the
    /// queue is full (the retransmit timer then recovers it); true if queued.
    pub(crate) fn queue_resend(&mut self, psn: Psn) -> bool {
        if self.resend.contains(&psn) || self.resend.len() >= RESEND_LIMIT {
            return false;
        }
        self.resend.push_back(psn);
        true
    }

    /// Where the cursor goes to send from `psn`: the index of the request holding it, the
    /// byte offset in that request and the PSN to send next (a READ re-requests what is
    /// still missing; an atomic is resent whole). A PSN held by no started request sends
    /// on from the first request not yet started, at `max_sent`.
    pub(crate) fn cursor_for(&self, psn: Psn, mtu: u32) -> (usize, u32, Psn) {
        for (i, w) in self.sq.iter().enumerate() {
            if !w.started {
                return (i, 0, self.max_sent);
            }
            let d = w.first_psn.distance_to(psn);
            if d >= 0 && (d as u32) < w.span {
                return match w.op {
                    SendOp::Read { .. } => (i, w.read_done, w.first_psn.add(w.read_done / mtu)),
                    SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => (i, 0, w.first_psn),
                    _ => (i, d as u32 * mtu, psn),
                };
            }
        }
        (self.sq.len(), 0, self.max_sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::{RecvWqe, SendWqe, SgList};

    fn responder(epsn: u32) -> Responder {
        Responder {
            epsn: Psn::new(epsn),
            ..Responder::default()
        }
    }

    #[test]
    fn arrival_is_judged_modulo_the_psn_space() {
        let r = responder(0xFF_FFFE);
        assert_eq!(r.arrival(Psn::new(0xFF_FFFE)), Arrival::InOrder);
        // Across the wrap: 0xFFFFFE -> 0xFFFFFF -> 0 -> 1.
        assert_eq!(r.arrival(Psn::new(1)), Arrival::Ahead(3));
        assert_eq!(r.arrival(Psn::new(0xFF_FFF0)), Arrival::Duplicate);
        // Half the space ahead is ahead; beyond it, behind.
        assert_eq!(r.arrival(Psn::new(0x7F_FFFD)), Arrival::Ahead(0x7F_FFFF));
        assert_eq!(r.arrival(Psn::new(0x7F_FFFF)), Arrival::Duplicate);
    }

    #[test]
    fn acks_coalesce_until_asked_for_or_counted() {
        let mut r = responder(5);
        r.took_request(false, 3);
        r.took_request(false, 3);
        assert!(!r.ack_due, "two of three");
        r.took_request(false, 3);
        assert!(r.ack_due, "the third");
        assert_eq!(r.epsn, Psn::new(8));
        r.ack_sent();
        assert!(!r.ack_due);
        r.took_request(true, 3);
        assert!(r.ack_due, "asked for");
        r.ack_sent();
        for _ in 0..100 {
            r.took_request(false, 0);
        }
        assert!(!r.ack_due, "0: only when asked");
    }

    #[test]
    fn a_gap_is_naked_once_until_a_request_moves_the_expected_psn() {
        let mut r = responder(7);
        assert!(r.claim_gap_nak());
        assert!(!r.claim_gap_nak());
        assert!(!r.claim_gap_nak());
        r.took_request(false, 0);
        assert!(r.claim_gap_nak(), "a new expected PSN, a new gap");
    }

    #[test]
    fn an_opcode_must_continue_the_message_in_progress() {
        use Operation as O;
        let idle = responder(0);
        for op in [
            O::Send,
            O::RdmaWrite,
            O::RdmaReadRequest,
            O::CompareSwap,
            O::FetchAdd,
        ] {
            assert!(idle.continues_message(op, true), "{op:?} starts");
        }
        assert!(
            !idle.continues_message(O::Send, false),
            "a SEND MIDDLE with none begun"
        );
        assert!(!idle.continues_message(O::RdmaWrite, false));
        assert!(
            !idle.continues_message(O::Acknowledge, true),
            "not a request"
        );
        let mut in_write = responder(0);
        in_write.in_progress = Some(InProgress::Write {
            rkey: 1,
            va: 0,
            remaining: 4096,
            total: 8192,
        });
        assert!(in_write.continues_message(O::RdmaWriteWithImmediate, false));
        assert!(
            !in_write.continues_message(O::Send, false),
            "a SEND inside a WRITE"
        );
        assert!(
            !in_write.continues_message(O::RdmaWrite, true),
            "a new WRITE inside one"
        );
        assert!(!in_write.continues_message(O::RdmaReadRequest, true));
        let mut in_send = responder(0);
        in_send.in_progress = Some(InProgress::Send {
            wqe: RecvWqe {
                wr_id: 0,
                sgl: SgList::new(&[]).unwrap(),
                len: 0,
            },
            received: 0,
        });
        assert!(in_send.continues_message(O::SendWithImmediate, false));
        assert!(!in_send.continues_message(O::RdmaWrite, false));
    }

    #[test]
    fn duplicates_are_answered_from_what_was_kept() {
        use crate::qp::ResponderResource;
        let mut r = responder(100);
        r.resources.push_back(ResponderResource {
            first_psn: Psn::new(90),
            span: 4,
            atomic_original: None,
        });
        r.resources.push_back(ResponderResource {
            first_psn: Psn::new(95),
            span: 1,
            atomic_original: Some(7),
        });
        // A READ's PSNs, first to last; not the atomic's, not past the READ's span.
        assert!(r.read_was_taken(Psn::new(90)) && r.read_was_taken(Psn::new(93)));
        assert!(!r.read_was_taken(Psn::new(94)) && !r.read_was_taken(Psn::new(89)));
        assert!(!r.read_was_taken(Psn::new(95)), "an atomic is not a READ");
        assert_eq!(r.atomic_result(Psn::new(95)), Some(7));
        assert_eq!(r.atomic_result(Psn::new(90)), None, "a READ has no result");
        assert_eq!(r.atomic_result(Psn::new(96)), None);
    }

    #[test]
    fn owed_responses_are_bounded_apart_for_new_requests_and_extras() {
        use crate::qp::Response;
        let read = |replay| Response::Read {
            psn: Psn::new(0),
            rkey: 0,
            va: 0,
            remaining: 0,
            first: true,
            replay,
        };
        let mut r = responder(0);
        for _ in 0..2 {
            r.responses.push_back(read(false));
        }
        assert!(r.room_for_new_request(3) && !r.room_for_new_request(2));
        for _ in 0..EXTRA_SLOTS - 1 {
            r.responses.push_back(read(true));
        }
        assert!(r.room_for_extra(), "replays count apart from new requests");
        r.responses.push_back(read(true));
        assert!(!r.room_for_extra());
        assert!(
            r.room_for_new_request(3),
            "and do not take a new request's room"
        );
    }

    #[test]
    fn a_read_gap_asked_for_again_is_not_asked_while_on_its_way() {
        let p = Psn::new;
        let mut repair = ReadRepair::default();
        assert!(!repair.gap_on_its_way(p(10), None), "never asked");
        repair.asked = Some((p(10), p(14)));
        assert!(repair.gap_on_its_way(p(10), None));
        assert!(
            repair.gap_on_its_way(p(12), Some(p(14))),
            "part arrived, the rest coming"
        );
        assert!(
            !repair.gap_on_its_way(p(12), Some(p(13))),
            "a later one of it arrived first"
        );
        assert!(
            !repair.gap_on_its_way(p(14), None),
            "past the range asked for"
        );
        assert!(!repair.gap_on_its_way(p(9), None), "before it");
    }

    fn wqe(op: SendOp, first_psn: u32, span: u32, len: u32) -> SendWqe {
        SendWqe {
            wr_id: 0,
            op,
            len,
            first_psn: Psn::new(first_psn),
            span,
            read_done: 0,
            signaled: true,
            fence: false,
            solicited: false,
            started: true,
            responded: false,
            flags: crate::policy::ServiceFlags::NONE,
            sgl: SgList::new(&[]).unwrap(),
            inline: None,
        }
    }

    #[test]
    fn the_window_counts_unacknowledged_packets_across_the_wrap() {
        let r = Requester {
            una: Psn::new(0xFF_FFF0),
            next_psn: Psn::new(0x10),
            ..Requester::default()
        };
        assert!(!r.window_full(33));
        assert!(r.window_full(32));
    }

    #[test]
    fn a_resend_is_queued_once_and_the_queue_is_bounded() {
        let mut r = Requester::default();
        assert!(r.queue_resend(Psn::new(9)));
        assert!(!r.queue_resend(Psn::new(9)));
        for p in 10..(10 + RESEND_LIMIT as u32 - 1) {
            assert!(r.queue_resend(Psn::new(p)));
        }
        assert!(!r.queue_resend(Psn::new(1000)), "full");
        assert_eq!(r.resend.len(), RESEND_LIMIT);
    }

    #[test]
    fn the_cursor_goes_to_the_request_and_offset_of_a_psn() {
        let write = SendOp::Write {
            remote_addr: 0,
            rkey: 0,
        };
        let read = SendOp::Read {
            remote_addr: 0,
            rkey: 0,
        };
        let mut r = Requester {
            max_sent: Psn::new(110),
            ..Requester::default()
        };
        r.sq.push_back(wqe(write, 100, 4, 4 * 1024));
        let mut rd = wqe(read, 104, 4, 4 * 1024);
        rd.read_done = 2048;
        r.sq.push_back(rd);
        r.sq.push_back(wqe(write, 108, 2, 2048));
        let mut unstarted = wqe(write, 0, 0, 10);
        unstarted.started = false;
        r.sq.push_back(unstarted);
        // The third packet of the WRITE: its offset.
        assert_eq!(r.cursor_for(Psn::new(102), 1024), (0, 2048, Psn::new(102)));
        // Any PSN of the READ (its first, just past the WRITE's last, included): re-request
        // what is missing, from its first missing response.
        assert_eq!(r.cursor_for(Psn::new(104), 1024), (1, 2048, Psn::new(106)));
        assert_eq!(r.cursor_for(Psn::new(107), 1024), (1, 2048, Psn::new(106)));
        assert_eq!(r.cursor_for(Psn::new(109), 1024), (2, 1024, Psn::new(109)));
        // Past every started request: on from the first not started.
        assert_eq!(r.cursor_for(Psn::new(120), 1024), (3, 0, Psn::new(110)));
    }
}
