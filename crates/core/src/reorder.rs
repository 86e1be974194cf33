//! Selective-repeat receive state: which PSNs past the expected one arrived, and their
//! packets, kept until the gap before them fills.
//!
//! The tracking of PSNs sits behind the [`ReceiveTracker`] policy.

use sluice_wire::{Psn, RoceHeaders};

use crate::policy::ReceiveTracker;

/// Payload buffers a reorder buffer keeps for reuse.
const SPARE_BUFFERS: usize = 16;

/// A packet received ahead of a gap.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) psn: Psn,
    pub(crate) headers: RoceHeaders,
    /// The payload bytes (empty for a length-only payload, whose length is `len`, and for a
    /// WRITE packet placed already).
    pub(crate) bytes: Vec<u8>,
    pub(crate) len: u32,
    pub(crate) real: bool,
}

/// The first packet of a WRITE held ahead of a gap, its RETH checked: the packets after it
/// in the same WRITE can be placed before it executes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldWrite {
    pub(crate) psn: Psn,
    pub(crate) rkey: u32,
    pub(crate) va: u64,
    pub(crate) len: u32,
}

/// What became of a packet offered to [`ReorderBuffer::hold`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Held until the gap before it fills.
    Held,
    /// Held already: a duplicate, dropped.
    Duplicate,
    /// Not held: too far ahead, no shared tracker memory left, or the buffer is full.
    /// The requester must send it again.
    Refused,
}

/// The packets a selective-repeat responder holds, at most as many as its tracker records.
#[derive(Debug)]
pub(crate) struct ReorderBuffer {
    pub(crate) tracker: Box<dyn ReceiveTracker>,
    pub(crate) held: Vec<Held>,
    /// Payload buffers of released packets, reused (no allocation per held packet once warm).
    spare: Vec<Vec<u8>>,
    pub(crate) limit: usize,
    /// The last WRITE whose first packet was held (one is enough for a WRITE reordered
    /// within itself; a packet of an earlier one is copied as before).
    pub(crate) write: Option<HeldWrite>,
    /// The PSN after the furthest packet refused for landing past the tracker's capacity
    /// (the requester's window is larger than this tracker holds: a peer whose tracker is
    /// larger than ours), until the responder has asked for it all again.
    pub(crate) refused_until: Option<Psn>,
}

impl ReorderBuffer {
    pub(crate) fn new(tracker: Box<dyn ReceiveTracker>) -> ReorderBuffer {
        ReorderBuffer {
            limit: tracker.capacity() as usize,
            tracker,
            held: Vec::new(),
            spare: Vec::new(),
            write: None,
            refused_until: None,
        }
    }

    /// Holds a packet `offset` PSNs past the expected one, arrived at `now` (the tracker
    /// records it with the time: LEFT's gather FIFOs wait by it), or says why not. Its
    /// payload is copied if given; `None` keeps only its length (a length-only payload, or a
    /// WRITE packet the caller places itself once this says `Held`).
    pub(crate) fn hold(
        &mut self,
        offset: u32,
        psn: Psn,
        headers: &RoceHeaders,
        payload: Option<&[u8]>,
        len: u32,
        now: crate::Instant,
    ) -> Hold {
        if self.held.len() >= self.limit {
            self.refused_past_capacity(psn);
            return Hold::Refused;
        }
        match self.tracker.record_at(offset, now) {
            crate::policy::Recorded::New => {}
            crate::policy::Recorded::Already => return Hold::Duplicate,
            crate::policy::Recorded::OutOfRange => {
                self.refused_past_capacity(psn);
                return Hold::Refused;
            }
            crate::policy::Recorded::Exhausted => return Hold::Refused,
        }
        let mut bytes = Vec::new();
        if let Some(p) = payload {
            bytes = self.spare.pop().unwrap_or_default();
            bytes.clear();
            bytes.extend_from_slice(p);
        }
        self.held.push(Held {
            psn,
            headers: *headers,
            bytes,
            len,
            real: payload.is_some(),
        });
        Hold::Held
    }

    /// `psn` was refused for want of room past the gap: remembered, so that once what is
    /// held has run out the responder asks for everything from the expected PSN again.
    fn refused_past_capacity(&mut self, psn: Psn) {
        let end = psn.next();
        if self.refused_until.is_none_or(|r| r.distance_to(end) > 0) {
            self.refused_until = Some(end);
        }
    }

    /// Whether [`ReorderBuffer::hold`] would hold a packet `offset` PSNs past the expected
    /// one now, as new: there is room, and it is neither beyond the tracker's reach nor
    /// held already. (A tracker out of shared memory may still refuse it.)
    pub(crate) fn would_hold(&self, offset: u32) -> bool {
        self.held.len() < self.limit
            && offset <= self.tracker.capacity()
            && !self.tracker.contains(offset)
    }

    /// Whether packets at or after `epsn` were refused for want of room (and not yet asked
    /// for again); forgets them.
    pub(crate) fn take_refused(&mut self, epsn: Psn) -> bool {
        self.refused_until
            .take()
            .is_some_and(|r| epsn.distance_to(r) > 0)
    }

    /// Takes the held packet with this PSN, if any.
    pub(crate) fn take(&mut self, psn: Psn) -> Option<Held> {
        let at = self.held.iter().position(|h| h.psn == psn)?;
        Some(self.held.swap_remove(at))
    }

    /// Gives a payload buffer back for reuse (a few are kept; a queue pair that stops
    /// reordering gives the rest of its memory back).
    pub(crate) fn recycle(&mut self, bytes: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && bytes.capacity() > 0 {
            self.spare.push(bytes);
        }
    }

    pub(crate) fn clear(&mut self) {
        for h in self.held.drain(..) {
            if self.spare.len() < SPARE_BUFFERS && h.bytes.capacity() > 0 {
                self.spare.push(h.bytes);
            }
        }
        self.write = None;
        self.refused_until = None;
        self.tracker.advance(u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(psn: u32) -> RoceHeaders {
        RoceHeaders {
            bth: sluice_wire::Bth::new(sluice_wire::Opcode::RC_SEND_ONLY, 1, Psn::new(psn)),
            ccx: None,
            ext: sluice_wire::ExtHeaders::default(),
        }
    }

    /// `would_hold` says what `hold` then does (the engine asks it before offering a request
    /// to a deferred stage): new within reach and room, not what is held already, nothing
    /// past the tracker's reach or once the buffer is full.
    #[test]
    fn would_hold_foretells_hold() {
        let mut r = ReorderBuffer::new(Box::new(crate::policy::OffsetList::new(4)));
        let now = crate::Instant::ZERO;
        let hold = |r: &mut ReorderBuffer, offset: u32| {
            let foretold = r.would_hold(offset);
            let did = r.hold(
                offset,
                Psn::new(offset),
                &headers(offset),
                Some(&[1]),
                1,
                now,
            );
            assert_eq!(foretold, did == Hold::Held, "{offset}: {did:?}");
            did
        };
        assert_eq!(hold(&mut r, 5), Hold::Refused, "past the reach");
        assert_eq!(hold(&mut r, 2), Hold::Held);
        assert_eq!(hold(&mut r, 2), Hold::Duplicate);
        for offset in [1, 3, 4] {
            assert_eq!(hold(&mut r, offset), Hold::Held);
        }
        assert!(!r.would_hold(3), "full");
    }
}
