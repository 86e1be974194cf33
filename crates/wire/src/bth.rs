//! The Base Transport Header, 12 bytes, first in every RoCE v2 packet after UDP.
//!
//! ```text
//!  byte 0: opcode
//!  byte 1: SE(1) M(1) PadCnt(2) TVer(4)
//!  2..4:   P_Key
//!  byte 4: FECN(1) BECN(1) reserved(6)     <- masked out of the ICRC
//!  5..8:   destination QP (24 bits)
//!  byte 8: AckReq(1) reserved(7)
//!  9..12:  PSN (24 bits)
//! ```

use crate::error::{Layer, Result, need, room};
use crate::{Error, Opcode, Psn};

/// Length of the BTH in bytes.
pub const BTH_LEN: usize = 12;

/// The default partition key (full membership, default partition), as perftest and
/// Soft-RoCE use.
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// A decoded BTH. Reserved bits are dropped on decode and written as zero. The transport
/// version is not kept: 0 is RoCE v2, [`crate::CCX_TVER`] says a CC extension header follows
/// (which [`crate::RocePacket`] decodes and [`crate::RoceHeaders`] writes), anything else is
/// rejected with [`Error::BadVersion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bth {
    /// The operation, transport and place in a message.
    pub opcode: Opcode,
    /// Solicited event: the responder should raise a completion event.
    pub solicited: bool,
    /// Migration request (APM); RoCE v2 peers send it set to 1 once migrated, usually 0.
    pub mig_req: bool,
    /// Pad bytes (0..=3) after the payload that make it a whole number of 4-byte words.
    /// An encoder of whole packets sets this from the payload length.
    pub pad_count: u8,
    /// Partition key; [`DEFAULT_PKEY`] unless partitions are in use.
    pub pkey: u16,
    /// Forward ECN: set by a congested switch (InfiniBand); RoCE v2 uses the IP ECN bits.
    pub fecn: bool,
    /// Backward ECN, set in CNPs by some senders.
    pub becn: bool,
    /// Destination queue pair number, 24 bits.
    pub dest_qp: u32,
    /// Acknowledge request: the responder must answer this packet with an ACK.
    pub ack_req: bool,
    /// Packet sequence number, 24 bits.
    pub psn: Psn,
}

impl Bth {
    /// A BTH with every flag clear, the default P_Key and no pad.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> Bth {
        Bth {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Decodes the first [`BTH_LEN`] bytes of `buf`. Does not look at the opcode's meaning.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Bth> {
        need(buf, BTH_LEN, Layer::Bth)?;
        let tver = buf[1] & 0x0F;
        if tver != 0 && tver != crate::CCX_TVER {
            return Err(Error::BadVersion(tver));
        }
        Ok(Bth {
            opcode: Opcode(buf[0]),
            solicited: buf[1] & 0x80 != 0,
            mig_req: buf[1] & 0x40 != 0,
            pad_count: (buf[1] >> 4) & 0x03,
            pkey: u16::from_be_bytes([buf[2], buf[3]]),
            fecn: buf[4] & 0x80 != 0,
            becn: buf[4] & 0x40 != 0,
            dest_qp: u32::from_be_bytes([0, buf[5], buf[6], buf[7]]),
            ack_req: buf[8] & 0x80 != 0,
            psn: Psn::new(u32::from_be_bytes([0, buf[9], buf[10], buf[11]])),
        })
    }

    /// Encodes into the first [`BTH_LEN`] bytes of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        room(buf, BTH_LEN)?;
        if self.dest_qp >= 1 << 24 {
            return Err(Error::FieldRange("destination QP is 24 bits"));
        }
        if self.pad_count > 3 {
            return Err(Error::FieldRange("pad count is 0..=3"));
        }
        buf[0] = self.opcode.0;
        buf[1] =
            (u8::from(self.solicited) << 7) | (u8::from(self.mig_req) << 6) | (self.pad_count << 4);
        buf[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        buf[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        buf[5..8].copy_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        buf[8] = u8::from(self.ack_req) << 7;
        buf[9..12].copy_from_slice(&self.psn.value().to_be_bytes()[1..]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_bytes() {
        // RC SEND ONLY, SE, pad 2, P_Key 0xFFFF, BECN, QP 0x000011, AckReq, PSN 0xABCDEF.
        let bytes = [
            0x04, 0xA0, 0xFF, 0xFF, 0x40, 0x00, 0x00, 0x11, 0x80, 0xAB, 0xCD, 0xEF,
        ];
        let bth = Bth::parse(&bytes).unwrap();
        assert_eq!(bth.opcode, Opcode::RC_SEND_ONLY);
        assert!(bth.solicited && !bth.mig_req && bth.becn && !bth.fecn && bth.ack_req);
        assert_eq!((bth.pad_count, bth.pkey, bth.dest_qp), (2, 0xFFFF, 0x11));
        assert_eq!(bth.psn, Psn::new(0xABCDEF));
        let mut out = [0u8; BTH_LEN];
        bth.emit(&mut out).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn rejects_nonzero_tver_and_short_buffers() {
        let mut bytes = [0u8; BTH_LEN];
        bytes[1] = 0x02;
        assert_eq!(Bth::parse(&bytes), Err(Error::BadVersion(2)));
        bytes[1] = 0x0F;
        assert_eq!(Bth::parse(&bytes), Err(Error::BadVersion(15)));
        assert!(matches!(
            Bth::parse(&bytes[..11]),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn emit_checks_field_ranges() {
        let mut out = [0u8; BTH_LEN];
        let bth = Bth::new(Opcode::RC_SEND_ONLY, 1 << 24, Psn::new(0));
        assert!(matches!(bth.emit(&mut out), Err(Error::FieldRange(_))));
        let bth = Bth {
            pad_count: 4,
            ..Bth::new(Opcode::RC_SEND_ONLY, 1, Psn::new(0))
        };
        assert!(matches!(bth.emit(&mut out), Err(Error::FieldRange(_))));
        assert!(matches!(
            bth.emit(&mut out[..4]),
            Err(Error::BufferTooSmall { .. })
        ));
    }
}
