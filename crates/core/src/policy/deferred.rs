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

use sluice_wire::RoceHeaders;

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
    /// Payloads, and their bytes, out with asynchronous stages
    /// ([`crate::policy::Service::asynchronous`]): they count against the same credit.
    out: (u32, u64),
    /// The most bytes ever queued (or out).
    pub(crate) peak_bytes: u64,
}

impl DeferredQueue {
    /// Whether a payload of `len` bytes fits within `credit` now.
    pub(crate) fn admits(&self, credit: ServiceCredit, len: usize) -> bool {
        self.waiting.len() + (self.out.0 as usize) < credit.packets as usize
            && self.bytes + self.out.1 + len as u64 <= credit.bytes
    }

    /// A payload of `len` bytes handed to an asynchronous stage (the caller checked
    /// [`DeferredQueue::admits`]).
    pub(crate) fn went_out(&mut self, len: usize) {
        self.out.0 += 1;
        self.out.1 += len as u64;
        self.peak_bytes = self.peak_bytes.max(self.bytes + self.out.1);
    }

    /// `bytes` out with asynchronous stages no longer owed (their queue pair went).
    pub(crate) fn came_back_bytes(&mut self, bytes: u64) {
        self.out.1 = self.out.1.saturating_sub(bytes);
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

    /// Payloads and bytes waiting (queued, or out with asynchronous stages).
    pub(crate) fn depth(&self) -> (usize, u64) {
        (
            self.waiting.len() + self.out.0 as usize,
            self.bytes + self.out.1,
        )
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
}
