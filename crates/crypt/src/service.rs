//! The per-queue-pair encryption stage: [`EncryptService`], what RoCE BALBOA's in-line AES
//! service slot holds, with GCM instead of ECB.
//!
//! It is an in-line stage of Sluice's payload-service seam ([`sluice_core::policy::Service`]):
//! it grows each payload it sends by [`OVERHEAD`] bytes (nonce in front, tag behind, so the
//! queue pair segments messages into `PMTU - 24` bytes), binds the packet's BTH and
//! extension headers as associated data, runs on every packet whose opcode has a payload
//! (zero-length ones included), and a packet it cannot seal is not sent.

use std::ops::Range;

use sluice_core::policy::{self, Direction, Overhead, Service, ServicePacket};
use sluice_wire::{BTH_LEN, Bth, CCX_TVER, pad_for};

use crate::handshake::SessionKeys;
use crate::packet::{NONCE_LEN, OVERHEAD, OpenError, OpenKey, SealError, SealKey, TAG_LEN};
use crate::suite::Suite;

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
    suite: Suite,
    seal: SealKey,
    open: OpenKey,
    opened: u64,
    dropped_short: u64,
    dropped_forged: u64,
    dropped_replayed: u64,
    dropped_headers: u64,
    seal_failures: u64,
}

impl EncryptService {
    /// Bytes the stage puts in front of each payload (the explicit nonce).
    pub const HEAD: usize = NONCE_LEN;
    /// Bytes it puts behind (the tag).
    pub const TAIL: usize = TAG_LEN;

    /// From a completed handshake.
    pub fn new(keys: &SessionKeys) -> EncryptService {
        EncryptService {
            suite: keys.suite,
            seal: SealKey::new(&keys.send),
            open: OpenKey::new(&keys.receive),
            opened: 0,
            dropped_short: 0,
            dropped_forged: 0,
            dropped_replayed: 0,
            dropped_headers: 0,
            seal_failures: 0,
        }
    }

    /// Its registry name (the same for every suite: reports key its counters by it, and sum
    /// them over queue pairs; the suite is [`Self::suite`]).
    pub fn name(&self) -> &'static str {
        "aes-gcm"
    }

    /// The cipher suite the handshake agreed.
    pub fn suite(&self) -> Suite {
        self.suite
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

    /// [`Self::on_send`] out of place: `plain` is the payload (in the application's memory,
    /// left unchanged), `wire` the [`OVERHEAD`] bytes longer room it is sealed into.
    pub fn on_send_from(
        &mut self,
        bth: &[u8],
        ext: &[u8],
        plain: &[u8],
        wire: &mut [u8],
    ) -> Result<(), SealError> {
        self.seal.seal_from(bth, ext, plain, wire).map(|_| ())
    }

    /// On the receive path, before the packet is taken: opens `wire` in place and says where
    /// the plaintext is, or drops the packet and counts why.
    pub fn on_receive(&mut self, bth: &[u8], ext: &[u8], wire: &mut [u8]) -> Verdict {
        let opened = self.open.open(bth, ext, wire);
        self.count(opened)
    }

    /// [`Self::on_receive`] out of place: reads `wire` (left unchanged) and writes the
    /// plaintext into `out`, as long as `wire`, at the range the verdict gives.
    pub fn on_receive_from(
        &mut self,
        bth: &[u8],
        ext: &[u8],
        wire: &[u8],
        out: &mut [u8],
    ) -> Verdict {
        let opened = self.open.open_from(bth, ext, wire, out);
        self.count(opened)
    }

    fn count(&mut self, opened: Result<Range<usize>, OpenError>) -> Verdict {
        match opened {
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
            ("seal_failures", self.seal_failures),
        ]
    }
}

/// Room for the associated data: a BTH and the longest IBA extension headers.
const AAD_ROOM: usize = BTH_LEN + 32;

/// The BTH and the IBA extension headers of `packet`, written into `room` as they go on the
/// wire with a payload of `wire_len` bytes (the pad count follows from it; TVER is set when
/// a CC extension header follows); `None` if they cannot be written. The same bytes
/// `RoceHeaders::emit_headers` writes there, without the CC header between them, which is
/// not bound and which every packet would otherwise write once more at each end.
fn aad_parts<'a>(
    packet: &ServicePacket<'_>,
    wire_len: usize,
    room: &'a mut [u8; AAD_ROOM],
) -> Option<(&'a [u8], &'a [u8])> {
    let headers = packet.headers;
    let info = headers.bth.opcode.info()?;
    if !info.has_payload && wire_len != 0 {
        return None;
    }
    let bth = Bth {
        pad_count: pad_for(wire_len),
        ..headers.bth
    };
    let (bth_room, ext_room) = room.split_at_mut(BTH_LEN);
    bth.emit(bth_room).ok()?;
    if headers.ccx.is_some() {
        bth_room[1] |= CCX_TVER;
    }
    let ext_len = headers
        .ext
        .emit(info.headers, headers.bth.opcode.0, ext_room)
        .ok()?;
    Some((&room[..BTH_LEN], &room[BTH_LEN..BTH_LEN + ext_len]))
}

impl EncryptService {
    /// A seal's outcome as a verdict, counted when it failed (the packet must not go).
    fn sealed(&mut self, result: Result<(), SealError>) -> policy::Verdict {
        match result {
            Ok(()) => policy::Verdict::Pass,
            Err(_) => {
                self.seal_failures += 1;
                policy::Verdict::Drop
            }
        }
    }

    /// Headers that cannot be written again: nothing to bind, so the packet goes no further.
    fn refuse_headers(&mut self, direction: Direction) -> policy::Verdict {
        match direction {
            Direction::Send => self.seal_failures += 1,
            Direction::Receive => self.dropped_headers += 1,
        }
        policy::Verdict::Drop
    }
}

impl Service for EncryptService {
    fn name(&self) -> &str {
        EncryptService::name(self)
    }

    fn in_line(&self) -> bool {
        true
    }

    fn overhead(&self) -> Overhead {
        Overhead {
            head: Self::HEAD as u32,
            tail: Self::TAIL as u32,
        }
    }

    /// Seals or opens `payload` in place. The associated data is the headers written again
    /// from `packet.headers` for a payload of `payload.len()` bytes: canonical, so both
    /// ends build the same bytes (the pad count follows from the length; the CC extension
    /// header is written but left out of the associated data).
    fn transform(&mut self, packet: &ServicePacket<'_>, payload: &mut [u8]) -> policy::Verdict {
        let mut headers = [0; AAD_ROOM];
        let Some((bth, ext)) = aad_parts(packet, payload.len(), &mut headers) else {
            return self.refuse_headers(packet.direction);
        };
        match packet.direction {
            Direction::Send => {
                let result = self.on_send(bth, ext, payload);
                self.sealed(result)
            }
            Direction::Receive => match self.on_receive(bth, ext, payload) {
                Verdict::Pass(plain) => {
                    debug_assert_eq!(plain, Self::HEAD..payload.len() - Self::TAIL);
                    policy::Verdict::Pass
                }
                Verdict::Drop(_) => policy::Verdict::Drop,
            },
        }
    }

    /// Seals straight from the application's memory into the packet buffer; opens straight
    /// from the received packet into the engine's receive buffer.
    fn transform_from(
        &mut self,
        packet: &ServicePacket<'_>,
        input: &[u8],
        output: &mut [u8],
    ) -> Option<policy::Verdict> {
        let mut headers = [0; AAD_ROOM];
        let Some((bth, ext)) = aad_parts(packet, output.len(), &mut headers) else {
            return Some(self.refuse_headers(packet.direction));
        };
        Some(match packet.direction {
            Direction::Send => {
                let result = self.on_send_from(bth, ext, input, output);
                self.sealed(result)
            }
            Direction::Receive => match self.on_receive_from(bth, ext, input, output) {
                Verdict::Pass(plain) => {
                    debug_assert_eq!(plain, Self::HEAD..output.len() - Self::TAIL);
                    policy::Verdict::Pass
                }
                Verdict::Drop(_) => policy::Verdict::Drop,
            },
        })
    }

    fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
        out.clear();
        out.extend(EncryptService::counters(self));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::QpNum;
    use sluice_wire::{Ccx, ExtHeaders, Opcode, Psn, Reth, RoceHeaders};

    /// What the associated data was before it was written directly: `emit_headers`'s
    /// BTH and its IBA extension headers, the CC header between them left out.
    fn via_emit_headers(headers: &RoceHeaders, wire_len: usize) -> Vec<u8> {
        let mut room = [0; 256];
        let len = headers.emit_headers(wire_len, &mut room).unwrap();
        let ext_at = BTH_LEN + headers.ccx.map_or(0, |c| c.wire_len());
        [&room[..BTH_LEN], &room[ext_at..len]].concat()
    }

    #[test]
    fn associated_data_is_the_emitted_bth_and_extension_headers() {
        let reth = Reth {
            va: 0x1234_5678_9abc,
            rkey: 0xfeed,
            dma_len: 65536,
        };
        let ccx = Ccx::Timestamps {
            tx_ns: 77,
            echo_ns: None,
        };
        for (opcode, with_reth) in [
            (Opcode::RC_RDMA_WRITE_FIRST, true),
            (Opcode::RC_RDMA_WRITE_MIDDLE, false),
            (Opcode::RC_SEND_ONLY, false),
        ] {
            for cc in [None, Some(ccx)] {
                for wire_len in [24, 25, 1047, 4096] {
                    let mut headers = RoceHeaders {
                        bth: sluice_wire::Bth::new(opcode, 0x12_3456, Psn::new(0xff_fffe)),
                        ccx: cc,
                        ext: ExtHeaders::default(),
                    };
                    headers.bth.fecn = true;
                    headers.ext.reth = with_reth.then_some(reth);
                    let packet = ServicePacket {
                        qpn: QpNum(5),
                        psn: headers.bth.psn,
                        opcode,
                        direction: Direction::Send,
                        len: wire_len as u32,
                        headers: &headers,
                    };
                    let mut room = [0; AAD_ROOM];
                    let (bth, ext) = aad_parts(&packet, wire_len, &mut room).unwrap();
                    assert_eq!(
                        [bth, ext].concat(),
                        via_emit_headers(&headers, wire_len),
                        "{opcode:?} {cc:?} {wire_len}"
                    );
                }
            }
        }
    }
}
