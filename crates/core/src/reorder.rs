//! Selective-repeat receive state: which PSNs past the expected one arrived, and their
//! packets, kept until the gap before them fills.
//!
//! The tracking of PSNs sits behind [`ReceiveTracker`], so that a shared bitmap pool (LEFT)
//! can replace the per-queue-pair bitmap without touching the responder.

use sluice_wire::{Psn, RoceHeaders};

/// Which PSNs past a queue pair's expected PSN have been received. Offsets count from the
/// expected PSN: offset 1 is the PSN after it (offset 0 is never out of order).
pub trait ReceiveTracker: std::fmt::Debug {
    /// The largest offset that can be recorded.
    fn capacity(&self) -> u32;
    /// Records `offset`; false if it was recorded already or is past the capacity.
    fn insert(&mut self, offset: u32) -> bool;
    fn contains(&self, offset: u32) -> bool;
    /// The expected PSN moved forward by `n`: offsets shift down by `n`.
    fn advance(&mut self, n: u32);
    fn is_empty(&self) -> bool;
}

/// A per-queue-pair bitmap of 256 PSNs (as IRN keeps one per connection).
#[derive(Debug, Clone, Default)]
pub struct Bitmap256 {
    words: [u64; 4],
}

impl ReceiveTracker for Bitmap256 {
    fn capacity(&self) -> u32 {
        255
    }

    fn insert(&mut self, offset: u32) -> bool {
        if offset == 0 || offset > self.capacity() || self.contains(offset) {
            return false;
        }
        self.words[(offset / 64) as usize] |= 1 << (offset % 64);
        true
    }

    fn contains(&self, offset: u32) -> bool {
        offset <= self.capacity() && self.words[(offset / 64) as usize] & (1 << (offset % 64)) != 0
    }

    fn advance(&mut self, n: u32) {
        if n >= 256 {
            self.words = [0; 4];
            return;
        }
        // Shift the 256-bit value right by n.
        let (word_shift, bit_shift) = ((n / 64) as usize, n % 64);
        let mut out = [0u64; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let src = i + word_shift;
            if src < 4 {
                *o = self.words[src] >> bit_shift;
                if bit_shift > 0 && src + 1 < 4 {
                    *o |= self.words[src + 1] << (64 - bit_shift);
                }
            }
        }
        self.words = out;
    }

    fn is_empty(&self) -> bool {
        self.words == [0; 4]
    }
}

/// Payload buffers a reorder buffer keeps for reuse.
const SPARE_BUFFERS: usize = 16;

/// A packet received ahead of a gap.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) psn: Psn,
    pub(crate) headers: RoceHeaders,
    /// The payload bytes (empty for a length-only payload, whose length is `len`).
    pub(crate) bytes: Vec<u8>,
    pub(crate) len: u32,
    pub(crate) real: bool,
}

/// The packets a selective-repeat responder holds, at most `limit` of them.
#[derive(Debug)]
pub(crate) struct ReorderBuffer {
    pub(crate) tracker: Box<dyn ReceiveTracker>,
    pub(crate) held: Vec<Held>,
    /// Payload buffers of released packets, reused (no allocation per held packet once warm).
    spare: Vec<Vec<u8>>,
    pub(crate) limit: usize,
}

impl ReorderBuffer {
    pub(crate) fn new(limit: usize) -> ReorderBuffer {
        ReorderBuffer {
            tracker: Box::new(Bitmap256::default()),
            held: Vec::new(),
            spare: Vec::new(),
            limit,
        }
    }

    /// Holds a packet `offset` PSNs past the expected one; false if it cannot be held
    /// (a duplicate, too far ahead, or the buffer is full).
    pub(crate) fn hold(
        &mut self,
        offset: u32,
        psn: Psn,
        headers: &RoceHeaders,
        payload: Option<&[u8]>,
        len: u32,
    ) -> bool {
        if self.held.len() >= self.limit || !self.tracker.insert(offset) {
            return false;
        }
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        if let Some(p) = payload {
            bytes.extend_from_slice(p);
        }
        self.held.push(Held {
            psn,
            headers: *headers,
            bytes,
            len,
            real: payload.is_some(),
        });
        true
    }

    /// Takes the held packet with this PSN, if any.
    pub(crate) fn take(&mut self, psn: Psn) -> Option<Held> {
        let at = self.held.iter().position(|h| h.psn == psn)?;
        Some(self.held.swap_remove(at))
    }

    /// Gives a payload buffer back for reuse (a few are kept; a queue pair that stops
    /// reordering gives the rest of its memory back).
    pub(crate) fn recycle(&mut self, bytes: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(bytes);
        }
    }

    pub(crate) fn clear(&mut self) {
        for h in self.held.drain(..) {
            if self.spare.len() < SPARE_BUFFERS {
                self.spare.push(h.bytes);
            }
        }
        self.tracker.advance(u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_records_and_shifts() {
        let mut b = Bitmap256::default();
        assert!(b.insert(1) && b.insert(70) && b.insert(255));
        assert!(!b.insert(70) && !b.insert(0) && !b.insert(256));
        b.advance(1);
        assert!(b.contains(69) && b.contains(254) && !b.contains(70));
        // The packet 70 PSNs ahead is now the expected one (offset 0).
        b.advance(69);
        assert!(b.contains(0) && b.contains(185) && !b.contains(1));
        b.advance(186);
        assert!(b.is_empty());
    }
}
