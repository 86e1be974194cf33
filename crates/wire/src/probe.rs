//! Sluice's path probe: a control packet (opcode 0x18, see [`crate::CcControl`]) that a
//! sender sends from one UDP source port to measure that port's path (SCR's RTT probing),
//! and that the peer sends back as a reply. Sent only between queue pairs whose two ends
//! agreed to probes at connection setup; see `docs/control.md`.
//!
//! The 16-byte control header of a probe or a reply:
//!
//! ```text
//!  byte 0      kind: 2 = probe, 3 = reply
//!  bytes 1..8  reserved, 0
//!  bytes 8..10 port  u16  the UDP source port the probe left from (the path it measures)
//!  bytes 10..12 reserved, 0
//!  bytes 12..16 seq  u32  the probe's number on that port
//! ```
//!
//! A reply carries the probe's port and number unchanged: the prober matches it to the probe
//! it sent and takes the time between as that path's RTT. A probe is not sequenced (BTH PSN
//! 0, AckReq clear) and has no payload. Unlike a credit grant's header, a probe's reserved
//! bytes are checked: a probe with any of them set is malformed ([`Error::BadProbe`]), so
//! that a later layout can use them without being misread by this one.

use crate::error::Result;
use crate::{CcControl, CcControlKind, Error};

/// The bytes of a control header, by field (byte ranges of the 16-byte header).
const KIND: usize = 0;
const RESERVED_LOW: std::ops::Range<usize> = 1..8;
const PORT: std::ops::Range<usize> = 8..10;
const RESERVED_MID: std::ops::Range<usize> = 10..12;
const SEQ: std::ops::Range<usize> = 12..16;

/// The control header kind of a probe.
pub const PROBE_KIND: u8 = 2;
/// The control header kind of a probe's reply.
pub const PROBE_REPLY_KIND: u8 = 3;

/// What a probe or its reply says: the port it measures and its number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathProbeHeader {
    /// A reply (kind 3) rather than a probe (kind 2).
    pub reply: bool,
    /// The UDP source port the probe left from.
    pub port: u16,
    /// The probe's number on that port.
    pub seq: u32,
}

impl PathProbeHeader {
    /// The control header that carries it.
    pub fn control(&self) -> CcControl {
        let mut b = [0u8; CcControl::LEN];
        b[PORT].copy_from_slice(&self.port.to_be_bytes());
        b[SEQ].copy_from_slice(&self.seq.to_be_bytes());
        CcControl {
            kind: if self.reply {
                CcControlKind::PathProbeReply
            } else {
                CcControlKind::PathProbe
            },
            detail: 0,
            value: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
        }
    }

    /// The probe a decoded control header carries: `None` if it is another kind;
    /// [`Error::BadProbe`] if it is a probe with reserved bits set.
    pub fn from_control(c: &CcControl) -> Result<Option<PathProbeHeader>> {
        let reply = match c.kind {
            CcControlKind::PathProbe => false,
            CcControlKind::PathProbeReply => true,
            _ => return Ok(None),
        };
        if c.detail != 0 {
            return Err(Error::BadProbe("reserved bytes 4..8 are not zero"));
        }
        let v = c.value.to_be_bytes();
        if v[RESERVED_MID.start - 8..RESERVED_MID.end - 8] != [0, 0] {
            return Err(Error::BadProbe("reserved bytes 10..12 are not zero"));
        }
        Ok(Some(PathProbeHeader {
            reply,
            port: u16::from_be_bytes([v[0], v[1]]),
            seq: u32::from_be_bytes([v[4], v[5], v[6], v[7]]),
        }))
    }

    /// Checks the raw control header `b` (16 bytes, as the packet holds it): a probe's or
    /// reply's reserved bytes must be zero; other kinds are not checked here.
    pub(crate) fn check(b: &[u8]) -> Result<()> {
        if !matches!(b[KIND], PROBE_KIND | PROBE_REPLY_KIND) {
            return Ok(());
        }
        if b[RESERVED_LOW].iter().any(|&x| x != 0) {
            return Err(Error::BadProbe("reserved bytes 1..8 are not zero"));
        }
        if b[RESERVED_MID].iter().any(|&x| x != 0) {
            return Err(Error::BadProbe("reserved bytes 10..12 are not zero"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bth, ExtHeaders, Opcode, Psn, RoceHeaders, RocePacket};

    fn encoded(probe: PathProbeHeader) -> Vec<u8> {
        crate::ext::encoded_cc_control(probe.control())
    }

    #[test]
    fn a_probe_and_its_reply_round_trip_in_the_documented_bytes() {
        for reply in [false, true] {
            let probe = PathProbeHeader {
                reply,
                port: 0xC123,
                seq: 0x0102_0304,
            };
            let bytes = encoded(probe);
            // BTH (12), then the control header.
            let h = &bytes[12..28];
            assert_eq!(h[0], if reply { 3 } else { 2 });
            assert_eq!(&h[1..8], &[0; 7]);
            assert_eq!(&h[8..10], &[0xC1, 0x23]);
            assert_eq!(&h[10..12], &[0, 0]);
            assert_eq!(&h[12..16], &[1, 2, 3, 4]);
            let p = RocePacket::parse(&bytes).unwrap();
            let c = p.ext().cc_control.unwrap();
            assert_eq!(PathProbeHeader::from_control(&c), Ok(Some(probe)));
        }
    }

    #[test]
    fn a_probe_with_a_reserved_byte_set_is_malformed_and_a_grant_is_not_a_probe() {
        let probe = PathProbeHeader {
            reply: false,
            port: 0xC001,
            seq: 7,
        };
        for byte in [1, 7, 10, 11] {
            let mut bytes = encoded(probe);
            bytes[12 + byte] = 0x80;
            assert!(
                matches!(RocePacket::parse(&bytes), Err(Error::BadProbe(_))),
                "byte {byte}"
            );
        }
        let grant = CcControl {
            kind: CcControlKind::CreditTotal,
            detail: 0,
            value: u64::MAX,
        };
        assert_eq!(PathProbeHeader::from_control(&grant), Ok(None));
        let bad = CcControl {
            kind: CcControlKind::PathProbeReply,
            detail: 0,
            value: 0x0000_0100_0000_0000,
        };
        assert!(PathProbeHeader::from_control(&bad).is_err());
        // Nor does an encoder write one.
        let headers = RoceHeaders {
            bth: Bth::new(Opcode::RC_CC_CONTROL, 0x12, Psn::new(0)),
            ccx: None,
            ext: ExtHeaders {
                cc_control: Some(bad),
                ..ExtHeaders::default()
            },
        };
        let mut out = [0u8; 64];
        assert!(matches!(
            headers.emit(&[], &mut out),
            Err(Error::FieldRange(_))
        ));
    }
}
