//! Where the oldest READ still waiting for responses sits in the send queue.
//!
//! Every READ response is matched against that READ alone (RC answers READs in order), as is
//! each one a deferred stage's receive credit judges and the re-issue when credit comes
//! back. Finding it by a pass from the front of the send queue costs a look at every
//! request ahead of it, on every response: with an unanswered atomic at the front holding
//! back retirement, as many as the window lets through (thousands of WRITEs with a large
//! window). The place is kept instead, and moved only where the send queue changes in a
//! way that can move it:
//!
//! - a READ begins ([`OldestRead::started`]): it is the oldest if none is waiting (requests
//!   begin in send-queue order, so any READ waiting already is ahead of it);
//! - the READ gets its last response ([`OldestRead::answered`]): the next one waiting is
//!   found by a pass from just after it over the requests begun, each of which is passed
//!   once in the queue's life;
//! - requests leave the front ([`OldestRead::retired`]): the place shifts by as many (a
//!   READ waiting is never retired);
//! - the queue is flushed ([`OldestRead::clear`]).
//!
//! Nothing else changes which requests are begun, READs or answered: go-back-N and
//! selective repeat move the send cursor and re-request READ data, but no READ becomes
//! unanswered again. Debug builds check the place against the pass from the front each time
//! it is read ([`OldestRead::scan`]).

use std::collections::VecDeque;

use crate::qp::{SendOp, SendWqe};

/// The place in the send queue of the oldest READ begun and not yet answered in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OldestRead {
    /// [`NONE`]: no READ is waiting. Four bytes, no `Option`: it fills a gap in the
    /// requester's second cache line (`qp::tests::the_hot_fields_share_lines`).
    at: u32,
}

/// No READ is waiting (a send queue never holds `u32::MAX` requests: `post_send` refuses
/// past `max_send_wr`, a `u32`, and the place is below the queue's length).
const NONE: u32 = u32::MAX;

impl Default for OldestRead {
    fn default() -> Self {
        OldestRead { at: NONE }
    }
}

impl OldestRead {
    /// Whether `w` is a READ begun and still waiting for responses.
    pub(crate) fn waiting(w: &SendWqe) -> bool {
        w.started && matches!(w.op, SendOp::Read { .. }) && !w.responded
    }

    /// The place of the oldest waiting READ by a pass from the front: what
    /// [`OldestRead::get`] must equal. Only checks call it: release builds keep no pass.
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn scan(sq: &VecDeque<SendWqe>) -> Option<usize> {
        sq.iter().position(Self::waiting)
    }

    /// The place of the oldest waiting READ, if any.
    #[inline]
    pub(crate) fn get(&self) -> Option<usize> {
        (self.at != NONE).then_some(self.at as usize)
    }

    /// The READ at `pos` began.
    #[inline]
    pub(crate) fn started(&mut self, pos: usize) {
        if self.at == NONE {
            self.at = pos as u32;
        } else {
            debug_assert!(
                (self.at as usize) < pos,
                "a READ at {pos} began ahead of the oldest waiting one at {}",
                self.at
            );
        }
    }

    /// The READ this names got its last response: the place moves to the next READ
    /// waiting in `sq`, if any. Requests begin in order, so the pass stops at the first one
    /// not begun.
    pub(crate) fn answered(&mut self, sq: &VecDeque<SendWqe>) {
        let Some(at) = self.get() else { return };
        debug_assert!(sq[at].responded, "the READ at {at} is still waiting");
        let from = at + 1;
        self.at = sq
            .range(from..)
            .take_while(|w| w.started)
            .position(Self::waiting)
            .map_or(NONE, |i| (from + i) as u32);
    }

    /// `n` requests left the front of the send queue (completed); none was the waiting
    /// READ.
    #[inline]
    pub(crate) fn retired(&mut self, n: usize) {
        if self.at != NONE {
            debug_assert!(
                self.at as usize >= n,
                "the waiting READ at {} retired",
                self.at
            );
            self.at -= n as u32;
        }
    }

    /// The send queue was flushed: nothing waits.
    pub(crate) fn clear(&mut self) {
        self.at = NONE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::SgList;
    use sluice_wire::Psn;

    const WRITE: SendOp = SendOp::Write {
        remote_addr: 0,
        rkey: 0,
    };
    const READ: SendOp = SendOp::Read {
        remote_addr: 0,
        rkey: 0,
    };

    fn wqe(op: SendOp, started: bool) -> SendWqe {
        SendWqe {
            wr_id: 0,
            op,
            len: 0,
            first_psn: Psn::new(0),
            span: 1,
            read_done: 0,
            signaled: true,
            fence: false,
            solicited: false,
            started,
            responded: false,
            flags: crate::policy::ServiceFlags::NONE,
            sgl: SgList::new(&[]).unwrap(),
            inline: None,
        }
    }

    #[test]
    fn follows_reads_as_they_begin_are_answered_and_retire() {
        let mut sq: VecDeque<SendWqe> = [WRITE, WRITE, READ, WRITE, READ, WRITE, READ]
            .into_iter()
            .map(|op| wqe(op, false))
            .collect();
        let mut o = OldestRead::default();
        // Requests begin in order; the first READ begun is the oldest, later ones do not
        // move it.
        for pos in 0..6 {
            sq[pos].started = true;
            if matches!(sq[pos].op, SendOp::Read { .. }) {
                o.started(pos);
            }
            assert_eq!(o.get(), OldestRead::scan(&sq), "after beginning {pos}");
        }
        assert_eq!(o.get(), Some(2));
        // The first READ answered: the next one begun (the one at 6 has not begun).
        sq[2].responded = true;
        o.answered(&sq);
        assert_eq!(o.get(), Some(4));
        // Two WRITEs and the answered READ retire from the front.
        for _ in 0..3 {
            sq.pop_front();
        }
        o.retired(3);
        assert_eq!((o.get(), OldestRead::scan(&sq)), (Some(1), Some(1)));
        // The last begun READ answered: none waits, the unbegun one is not looked at ...
        sq[1].responded = true;
        o.answered(&sq);
        assert_eq!(o.get(), None);
        // ... until it begins.
        sq[3].started = true;
        o.started(3);
        assert_eq!((o.get(), OldestRead::scan(&sq)), (Some(3), Some(3)));
        o.clear();
        assert_eq!(o.get(), None);
    }

    #[test]
    fn nothing_waiting_stays_so_through_retirement_and_answers() {
        let sq: VecDeque<SendWqe> = (0..3).map(|_| wqe(WRITE, true)).collect();
        let mut o = OldestRead::default();
        o.retired(2);
        o.answered(&sq);
        assert_eq!(o.get(), None);
        assert_eq!(OldestRead::scan(&sq), None);
    }
}
