//! A packet's size on an Ethernet link: the one definition that the engine's pacer, the
//! simulator's links and the tests all use, so that a rate a control law sets means the same
//! bytes everywhere.
//!
//! A link's rate is spent on more than the frame a capture shows: every frame also carries a
//! frame check sequence, is announced by a preamble and start delimiter, and is followed by
//! the minimum inter-frame gap. A frame shorter than the Ethernet minimum is padded to it.

use crate::ethernet::ETHERNET_HEADER_LEN;
use crate::ip::{IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};
use crate::packet::RoceHeaders;

/// The Ethernet frame check sequence.
pub const ETHERNET_FCS_LEN: usize = 4;
/// The preamble (7 bytes) and start-of-frame delimiter (1) before every frame.
pub const ETHERNET_PREAMBLE_LEN: usize = 8;
/// The minimum gap between two frames, in byte times.
pub const ETHERNET_GAP_LEN: usize = 12;
/// The shortest frame, header to FCS: shorter ones are padded.
pub const ETHERNET_MIN_FRAME_LEN: usize = 64;

/// Byte times a link spends on one IP datagram of `ip_len` bytes (IP header included) sent in
/// an Ethernet frame: header, datagram, padding to the minimum frame, FCS, preamble and gap.
pub const fn link_len(ip_len: usize) -> usize {
    let frame = ETHERNET_HEADER_LEN + ip_len + ETHERNET_FCS_LEN;
    let frame = if frame < ETHERNET_MIN_FRAME_LEN {
        ETHERNET_MIN_FRAME_LEN
    } else {
        frame
    };
    ETHERNET_PREAMBLE_LEN + frame + ETHERNET_GAP_LEN
}

/// Byte times a link spends on a RoCE v2 packet whose UDP payload (BTH to ICRC) is `roce_len`
/// bytes, over IPv6 if `ipv6`, else IPv4 without options.
pub const fn roce_link_len(ipv6: bool, roce_len: usize) -> usize {
    let ip = if ipv6 {
        IPV6_HEADER_LEN
    } else {
        IPV4_HEADER_LEN
    };
    link_len(ip + UDP_HEADER_LEN + roce_len)
}

impl RoceHeaders {
    /// Byte times a link spends on this packet with `payload_len` bytes of payload (see
    /// [`roce_link_len`]); `None` for an opcode without a known layout.
    pub fn link_len(&self, ipv6: bool, payload_len: usize) -> Option<usize> {
        let roce = self.wire_len(payload_len).ok()?;
        Some(roce_link_len(ipv6, roce))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Aeth, Bth, Credits, ExtHeaders, Opcode, Psn, Reth, Syndrome};

    fn headers(opcode: Opcode) -> RoceHeaders {
        RoceHeaders {
            bth: Bth::new(opcode, 0x11, Psn::new(0)),
            ccx: None,
            ext: ExtHeaders::default(),
        }
    }

    #[test]
    fn a_full_write_packet_counts_every_header_and_the_framing() {
        // WRITE MIDDLE, 4096 bytes: BTH 12 + payload + ICRC 4, UDP 8, IPv4 20, Ethernet 14,
        // FCS 4, preamble 8, gap 12.
        let h = headers(Opcode::RC_RDMA_WRITE_MIDDLE);
        assert_eq!(
            h.link_len(false, 4096),
            Some(4096 + 12 + 4 + 8 + 20 + 14 + 4 + 8 + 12)
        );
        assert_eq!(
            h.link_len(true, 4096),
            Some(4096 + 12 + 4 + 8 + 40 + 14 + 4 + 8 + 12)
        );
        let mut first = headers(Opcode::RC_RDMA_WRITE_FIRST);
        first.ext.reth = Some(Reth {
            va: 0,
            rkey: 0,
            dma_len: 8192,
        });
        // The FIRST adds its RETH (16 bytes).
        assert_eq!(
            first.link_len(false, 4096),
            Some(4096 + 12 + 16 + 4 + 8 + 20 + 38)
        );
    }

    #[test]
    fn payloads_are_padded_to_four_bytes() {
        let h = headers(Opcode::RC_SEND_ONLY);
        // 5 bytes of payload carry 3 of pad.
        assert_eq!(h.link_len(false, 5), Some(roce_link_len(false, 12 + 8 + 4)));
    }

    #[test]
    fn short_frames_are_padded_to_the_ethernet_minimum() {
        // A zero-length SEND: 14 + 20 + 8 + 12 + 4 + 4 = 62 bytes, padded to 64.
        let h = headers(Opcode::RC_SEND_ONLY);
        assert_eq!(h.link_len(false, 0), Some(8 + 64 + 12));
        // An ACK: BTH and AETH, 66 bytes, not padded.
        let mut ack = headers(Opcode::RC_ACKNOWLEDGE);
        ack.ext.aeth = Some(Aeth {
            syndrome: Syndrome::Ack(Credits::UNLIMITED),
            msn: 0,
        });
        assert_eq!(ack.link_len(false, 0), Some(8 + 66 + 12));
    }
}
