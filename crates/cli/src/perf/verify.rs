//! `--verify`: every message carries a pattern its receiver can check.
//!
//! Message `m` of queue pair `q` (its index in the run) is a sequence of 64-bit
//! little-endian words: word 0 is the message's tag, `q << 40 | m`, so that a message says
//! which one it is; word `w` after it is the message's base, a 64-bit mix (SplitMix64's
//! finaliser) of the tag, XOR `w` times an odd constant. A message whose size is not a multiple of 8 ends with the first bytes of its
//! last word, so a message's bytes depend only on its tag and their offsets and a shorter
//! message is a prefix of a longer one with the same tag. Generating or checking a word is
//! one multiplication and an XOR.
//!
//! READ data comes from the responder's memory, which no message number reaches: the
//! responder fills its receive area once with the tag [`READ_SOURCE`], and every READ
//! response is checked against it.

use sluice_core::MrInfo;

/// The tag of the memory a READ responder serves.
pub(crate) const READ_SOURCE: u64 = u64::MAX;

/// Message numbers take the tag's low 40 bits; the queue pair's index the bits above.
const MESSAGE_BITS: u32 = 40;

/// The tag of message `msg` of the queue pair at `qp_index`.
pub(crate) fn tag(qp_index: usize, msg: u64) -> u64 {
    ((qp_index as u64) << MESSAGE_BITS) | (msg & ((1 << MESSAGE_BITS) - 1))
}

/// A message's base: a 64-bit mix (SplitMix64's finaliser) of its tag, computed once.
fn base(tag: u64) -> u64 {
    let mut z = tag.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Word `w` (`w` > 0; word 0 is the tag) of the message whose base is `base`: one
/// multiplication per word (the first version mixed every word, and cost a 64 KiB WRITE
/// stream far more), yet every word differs with the message and the offset.
fn word(base: u64, w: usize) -> u64 {
    base ^ (w as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// The first 8 bytes of a message (fewer if it is shorter): its tag.
fn head(buf: &[u8]) -> usize {
    buf.len().min(8)
}

/// Fills `buf` with the message tagged `tag`.
pub(crate) fn fill(buf: &mut [u8], tag: u64) {
    let base = base(tag);
    let h = head(buf);
    buf[..h].copy_from_slice(&tag.to_le_bytes()[..h]);
    let rest = &mut buf[h..];
    let last = rest.len() / 8;
    let mut words = rest.chunks_exact_mut(8);
    for (w, chunk) in words.by_ref().enumerate() {
        chunk.copy_from_slice(&word(base, w + 1).to_le_bytes());
    }
    let tail = words.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&word(base, last + 1).to_le_bytes()[..n]);
}

/// The offset of the first byte of `buf` that differs from the message tagged `tag`.
pub(crate) fn first_mismatch(buf: &[u8], tag: u64) -> Option<usize> {
    let first_differing =
        |got: &[u8], expected: &[u8]| got.iter().zip(expected).position(|(a, b)| a != b);
    let h = head(buf);
    if let Some(i) = first_differing(&buf[..h], &tag.to_le_bytes()) {
        return Some(i);
    }
    let base = base(tag);
    let rest = &buf[h..];
    let mut words = rest.chunks_exact(8);
    for (w, chunk) in words.by_ref().enumerate() {
        let expected = word(base, w + 1).to_le_bytes();
        if chunk != expected {
            return first_differing(chunk, &expected).map(|i| h + w * 8 + i);
        }
    }
    let last = rest.len() / 8;
    first_differing(words.remainder(), &word(base, last + 1).to_le_bytes())
        .map(|i| h + last * 8 + i)
}

/// The first message that failed its check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mismatch {
    /// The queue pair number it arrived on (or was read by).
    pub(crate) qpn: u32,
    /// Its number on that queue pair, from 0.
    pub(crate) msg: u64,
    /// Its first byte that differs.
    pub(crate) offset: usize,
}

/// One end's verification: the buffers each message in flight has to itself, and what the
/// checks found.
#[derive(Debug)]
pub(crate) struct Verifier {
    /// One slot per message that may be in flight: a requester's WRITE and SEND sources and
    /// READ destinations (`tx_depth` per queue pair), a SEND-bandwidth server's receives
    /// (`rx_depth` per queue pair). Messages share the run's region otherwise, and a message
    /// could then be overwritten before it is sent or checked. `None` where one message
    /// at a time is in flight (the latency tests) or none is checked.
    pub(crate) slots: Option<Slots>,
    /// Messages sent so far on each queue pair, over every size of the run (the number of
    /// the next one).
    pub(crate) sent: Vec<u64>,
    /// Messages received so far on each queue pair (the number of the next one).
    pub(crate) received: Vec<u64>,
    /// Messages checked.
    pub(crate) checked: u64,
    /// Messages that failed their check.
    pub(crate) errors: u64,
    /// The first of them.
    pub(crate) first: Option<Mismatch>,
    /// Messages the sender said it sent that this end never checked, and how many it said
    /// (a write-bw server's count, where it can tell; see [`Verifier::expect`]).
    pub(crate) missing: Option<(u64, u64)>,
    /// Test only: flip a byte of this message (the second) of the queue pair at this index
    /// (the first) after filling it.
    pub(crate) corrupt: Option<(usize, u64)>,
}

/// A region of equal slots, `per_qp` for each queue pair.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slots {
    pub(crate) mr: MrInfo,
    pub(crate) per_qp: u32,
    pub(crate) size: u32,
}

impl Slots {
    /// The offset in the region of slot `i` (mod `per_qp`) of the queue pair at `q`.
    pub(crate) fn offset(&self, q: usize, i: u64) -> usize {
        q * self.per_qp_bytes() + self.offset_in_qp(i)
    }

    /// The offset of slot `i` (mod `per_qp`) from the start of its queue pair's slots.
    pub(crate) fn offset_in_qp(&self, i: u64) -> usize {
        (i % u64::from(self.per_qp)) as usize * self.size as usize
    }

    /// The bytes of one queue pair's slots.
    pub(crate) fn per_qp_bytes(&self) -> usize {
        self.per_qp as usize * self.size as usize
    }
}

/// The most memory `--verify`'s slots may take.
pub(crate) const MAX_SLOT_BYTES: u64 = 1 << 30;

impl Verifier {
    pub(crate) fn new(qps: usize, corrupt: Option<(usize, u64)>) -> Verifier {
        Verifier {
            slots: None,
            sent: vec![0; qps],
            received: vec![0; qps],
            checked: 0,
            errors: 0,
            first: None,
            missing: None,
            corrupt,
        }
    }

    /// Fills `buf` as the next message of the queue pair at `q` (and spoils it if it is the
    /// test's message to corrupt).
    pub(crate) fn fill_next(&mut self, buf: &mut [u8], q: usize) {
        let msg = self.sent[q];
        self.sent[q] += 1;
        fill(buf, tag(q, msg));
        if self.corrupt == Some((q, msg)) && !buf.is_empty() {
            let at = buf.len() / 2;
            buf[at] ^= 0x40;
        }
    }

    /// Checks `buf`, message `msg` of `qpn`, against the message tagged `tag`; counts it.
    pub(crate) fn check(&mut self, buf: &[u8], tag: u64, qpn: u32, msg: u64) {
        self.checked += 1;
        if let Some(offset) = first_mismatch(buf, tag) {
            self.errors += 1;
            self.first.get_or_insert(Mismatch { qpn, msg, offset });
        }
    }

    /// Counts a message that cannot be checked (it landed outside its queue pair's slots)
    /// as one that differs.
    pub(crate) fn misplaced(&mut self, qpn: u32, msg: u64, offset: usize) {
        self.checked += 1;
        self.errors += 1;
        self.first.get_or_insert(Mismatch { qpn, msg, offset });
    }

    /// The sender says it sent `sent` messages: any this end did not check are missing
    /// (a message replaced by a forged plain WRITE completes nothing here).
    pub(crate) fn expect(&mut self, sent: u64) {
        if self.checked < sent {
            self.missing = Some((sent - self.checked, sent));
        }
    }

    /// The error a run with mismatches (or missing messages) ends with.
    pub(crate) fn failure(&self) -> Option<String> {
        let Some(m) = self.first else {
            let (missing, sent) = self.missing?;
            return Some(format!(
                "{missing} of the {sent} messages the client sent were not checked: no \
                 completion came for them (is the client Sluice run with --verify? a write-bw \
                 client sends WRITE with immediate only then)"
            ));
        };
        Some(format!(
            "{} of the {} messages it checked differ from the pattern sent; the first: QP {:#x}, \
             message {}, first bad byte at offset {} (is the peer Sluice run with --verify? \
             perftest fills no pattern)",
            self.errors, self.checked, m.qpn, m.msg, m.offset
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_checks_against_its_own_tag_only() {
        for len in [0, 1, 2, 7, 8, 9, 4096, 65536 + 3] {
            let mut buf = vec![0u8; len];
            fill(&mut buf, tag(3, 17));
            assert_eq!(first_mismatch(&buf, tag(3, 17)), None, "{len}");
            if len > 0 {
                assert!(first_mismatch(&buf, tag(3, 18)).is_some(), "{len}");
                buf[len - 1] ^= 1;
                assert_eq!(first_mismatch(&buf, tag(3, 17)), Some(len - 1), "{len}");
            }
        }
    }

    #[test]
    fn a_shorter_message_is_a_prefix_of_a_longer_one() {
        let mut long = vec![0u8; 100];
        fill(&mut long, READ_SOURCE);
        assert_eq!(first_mismatch(&long[..37], READ_SOURCE), None);
        assert_eq!(tag(65535, 5_000_000), (65535 << 40) | 5_000_000);
    }
}
