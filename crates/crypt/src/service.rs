//! The per-queue-pair encryption stage: [`EncryptService`], what RoCE BALBOA's in-line AES
//! service slot holds, with GCM instead of ECB.
//!
//! It is shaped for Sluice's payload-service seam (`sluice_core::policy::service::Service`)
//! as that seam will have to be; today's seam cannot carry it, for three reasons (see
//! `docs/encryption.md`, "What the service seam needs"): an in-line stage must keep the
//! payload's length there (this one adds [`OVERHEAD`] bytes); it is shown the payload but
//! not the BTH and extension headers (which this one binds as associated data); and it runs
//! only on packets with payload bytes (this one must run on every packet whose opcode has a
//! payload, zero-length ones included).

use std::ops::Range;

use crate::handshake::SessionKeys;
use crate::packet::{NONCE_LEN, OVERHEAD, OpenError, OpenKey, SealError, SealKey, TAG_LEN};

/// What the stage decides about a received packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver the plaintext, at this range of the wire payload.
    Pass(Range<usize>),
    /// Drop it (counted); the transport recovers it as a loss.
    Drop(OpenError),
}

/// Per-QP authenticated encryption of payloads, both ways, with its counters.
#[derive(Debug)]
pub struct EncryptService {
    seal: SealKey,
    open: OpenKey,
    opened: u64,
    dropped_short: u64,
    dropped_forged: u64,
    dropped_replayed: u64,
    dropped_headers: u64,
}

impl EncryptService {
    /// Bytes the stage puts in front of each payload (the explicit nonce).
    pub const HEAD: usize = NONCE_LEN;
    /// Bytes it puts behind (the tag).
    pub const TAIL: usize = TAG_LEN;

    /// From a completed handshake.
    pub fn new(keys: &SessionKeys) -> EncryptService {
        EncryptService {
            seal: SealKey::new(&keys.send),
            open: OpenKey::new(&keys.receive),
            opened: 0,
            dropped_short: 0,
            dropped_forged: 0,
            dropped_replayed: 0,
            dropped_headers: 0,
        }
    }

    /// Its registry name.
    pub fn name(&self) -> &'static str {
        "aes-gcm"
    }

    /// The most payload bytes a packet may carry when the path allows `payload_mtu` bytes
    /// of payload (the queue pair's PMTU, or less when the link's MTU is the tighter bound):
    /// `payload_mtu - 24`. The segmenting of messages into packets must use this.
    pub fn payload_budget(payload_mtu: u32) -> u32 {
        payload_mtu.saturating_sub(OVERHEAD as u32)
    }

    /// On the send path, after the headers are final: `wire` is [`Self::HEAD`] bytes of room,
    /// the payload, [`Self::TAIL`] bytes of room; seals it in place. On an error the packet
    /// must not be sent (nothing else is safe: sending it in the clear would leak it).
    pub fn on_send(&mut self, bth: &[u8], ext: &[u8], wire: &mut [u8]) -> Result<(), SealError> {
        self.seal.seal(bth, ext, wire).map(|_| ())
    }

    /// On the receive path, before the packet is taken: opens `wire` in place and says where
    /// the plaintext is, or drops the packet and counts why.
    pub fn on_receive(&mut self, bth: &[u8], ext: &[u8], wire: &mut [u8]) -> Verdict {
        match self.open.open(bth, ext, wire) {
            Ok(range) => {
                self.opened += 1;
                Verdict::Pass(range)
            }
            Err(why) => {
                *match why {
                    OpenError::Short => &mut self.dropped_short,
                    OpenError::Forged => &mut self.dropped_forged,
                    OpenError::Replayed => &mut self.dropped_replayed,
                    OpenError::Headers => &mut self.dropped_headers,
                } += 1;
                Verdict::Drop(why)
            }
        }
    }

    /// Named counters, for reports.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("sealed", self.seal.sealed()),
            ("opened", self.opened),
            ("dropped_short", self.dropped_short),
            ("dropped_forged", self.dropped_forged),
            ("dropped_replayed", self.dropped_replayed),
            ("dropped_headers", self.dropped_headers),
        ]
    }
}
