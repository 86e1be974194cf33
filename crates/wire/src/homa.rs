//! Homa's control messages (Montazeri et al., SIGCOMM 2018) as kinds of Sluice's control
//! packet (opcode 0x18, see [`crate::CcControl`]): GRANT, RESEND and BUSY. Sent only between
//! queue pairs whose two ends agreed to control packets; see `docs/control.md` ("Homa").
//!
//! The 16-byte control header of all three (byte ranges below, the one place they live):
//!
//! ```text
//!  byte 0        kind: 4 = GRANT, 5 = RESEND, 6 = BUSY
//!  bytes 1..4    reserved, zero
//!  bytes 4..8    length   u32  RESEND: the bytes asked for from `offset`; zero otherwise
//!  bytes 8..11   message  u24  the message's first PSN (its name at both ends)
//!  byte 11       priority u8   GRANT: the level to send the granted bytes at; RESEND: the
//!                              level to resend at (0..=7); BUSY: zero
//!  bytes 12..16  offset   u32  GRANT: the message may be sent up to this byte; RESEND: the
//!                              first byte asked for; BUSY: zero
//! ```
//!
//! A message is one work request (SEND or WRITE) of the queue pair: its bytes are named by
//! their offset in it, as Homa names a message's bytes, and the message by its first PSN,
//! which the responder sees too. A GRANT's offset is a total, as Homa's is: a lost or
//! reordered grant is made up by the next, and one behind what the sender holds adds
//! nothing. Every field is checked: a header with reserved bytes set, a priority above 7, a
//! RESEND of nothing, or a field the kind does not use set is malformed
//! ([`Error::BadHoma`]), and an encoder refuses to write one.

use std::ops::Range;

use crate::error::Result;
use crate::{CcControl, CcControlKind, Error, PRIORITY_LEVELS};

/// The bytes of the control header, by field (byte ranges of the 16-byte header).
const KIND: usize = 0;
const RESERVED: Range<usize> = 1..4;
const LENGTH: Range<usize> = 4..8;
const MESSAGE: Range<usize> = 8..11;
const PRIORITY: usize = 11;
const OFFSET: Range<usize> = 12..16;

/// The control header kind of a GRANT.
pub const HOMA_GRANT_KIND: u8 = 4;
/// The control header kind of a RESEND.
pub const HOMA_RESEND_KIND: u8 = 5;
/// The control header kind of a BUSY.
pub const HOMA_BUSY_KIND: u8 = 6;

/// One of Homa's control messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HomaControl {
    /// Receiver to sender: message `message` may be sent up to byte `offset`, its scheduled
    /// bytes at `priority`.
    Grant {
        /// The message's first PSN (24 bits).
        message: u32,
        /// The message may be sent up to this byte (a total).
        offset: u32,
        /// The level for the granted bytes, 0..=7.
        priority: u8,
    },
    /// Receiver to sender: bytes `offset .. offset + length` of `message` were granted and
    /// have not arrived; send them (again) at `priority`.
    Resend {
        /// The message's first PSN (24 bits).
        message: u32,
        /// The first byte asked for.
        offset: u32,
        /// How many bytes, at least 1.
        length: u32,
        /// The level to send them at, 0..=7.
        priority: u8,
    },
    /// Sender to receiver: `message` is not lost, the sender is busy with something else (a
    /// shorter message, or its own recovery); restart the resend timer.
    Busy {
        /// The message's first PSN (24 bits).
        message: u32,
    },
}

impl HomaControl {
    /// The message it is about.
    pub fn message(&self) -> u32 {
        match *self {
            HomaControl::Grant { message, .. }
            | HomaControl::Resend { message, .. }
            | HomaControl::Busy { message } => message,
        }
    }

    /// The 16 header bytes (unchecked: [`HomaControl::control`] checks).
    fn bytes(&self) -> [u8; CcControl::LEN] {
        let mut b = [0u8; CcControl::LEN];
        let (kind, message, offset, length, priority) = match *self {
            HomaControl::Grant {
                message,
                offset,
                priority,
            } => (HOMA_GRANT_KIND, message, offset, 0, priority),
            HomaControl::Resend {
                message,
                offset,
                length,
                priority,
            } => (HOMA_RESEND_KIND, message, offset, length, priority),
            HomaControl::Busy { message } => (HOMA_BUSY_KIND, message, 0, 0, 0),
        };
        b[KIND] = kind;
        b[LENGTH].copy_from_slice(&length.to_be_bytes());
        b[MESSAGE].copy_from_slice(&message.to_be_bytes()[1..]);
        b[PRIORITY] = priority;
        b[OFFSET].copy_from_slice(&offset.to_be_bytes());
        b
    }

    /// The control header that carries it; [`Error::BadHoma`] if a field is out of range
    /// (a message above 24 bits, a priority above 7, a RESEND of no bytes).
    pub fn control(&self) -> Result<CcControl> {
        if self.message() >> 24 != 0 {
            return Err(Error::BadHoma("message (bytes 8..11) is 24 bits"));
        }
        let b = self.bytes();
        Self::check(&b)?;
        Ok(CcControl::read(&b))
    }

    /// The Homa message a decoded control header carries: `None` if it is another kind;
    /// [`Error::BadHoma`] if it is malformed.
    pub fn from_control(c: &CcControl) -> Result<Option<HomaControl>> {
        if !matches!(
            c.kind,
            CcControlKind::HomaGrant | CcControlKind::HomaResend | CcControlKind::HomaBusy
        ) {
            return Ok(None);
        }
        let b = c.bytes();
        Self::check(&b)?;
        let be32 = |r: Range<usize>| u32::from_be_bytes(b[r].try_into().expect("4 bytes"));
        let message = u32::from_be_bytes([0, b[MESSAGE][0], b[MESSAGE][1], b[MESSAGE][2]]);
        let (offset, length, priority) = (be32(OFFSET), be32(LENGTH), b[PRIORITY]);
        Ok(Some(match b[KIND] {
            HOMA_GRANT_KIND => HomaControl::Grant {
                message,
                offset,
                priority,
            },
            HOMA_RESEND_KIND => HomaControl::Resend {
                message,
                offset,
                length,
                priority,
            },
            _ => HomaControl::Busy { message },
        }))
    }

    /// Checks the raw control header `b` (16 bytes, as the packet holds it) if it is one of
    /// Homa's kinds; other kinds are not checked here.
    pub(crate) fn check(b: &[u8]) -> Result<()> {
        let kind = b[KIND];
        if !(HOMA_GRANT_KIND..=HOMA_BUSY_KIND).contains(&kind) {
            return Ok(());
        }
        if b[RESERVED].iter().any(|&x| x != 0) {
            return Err(Error::BadHoma("reserved bytes 1..4 are not zero"));
        }
        let zero = |r: Range<usize>| b[r].iter().all(|&x| x == 0);
        if b[PRIORITY] >= PRIORITY_LEVELS {
            return Err(Error::BadHoma("priority (byte 11) is above 7"));
        }
        match kind {
            HOMA_GRANT_KIND if !zero(LENGTH) => {
                Err(Error::BadHoma("a GRANT's length (bytes 4..8) is not zero"))
            }
            HOMA_RESEND_KIND if zero(LENGTH) => {
                Err(Error::BadHoma("a RESEND's length (bytes 4..8) is zero"))
            }
            HOMA_BUSY_KIND if !zero(LENGTH) || b[PRIORITY] != 0 || !zero(OFFSET) => {
                Err(Error::BadHoma(
                    "a BUSY's length, priority and offset (bytes 4..8, 11, 12..16) are not zero",
                ))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RocePacket;

    fn encoded(c: CcControl) -> Vec<u8> {
        crate::ext::encoded_cc_control(c)
    }

    #[test]
    fn each_kind_round_trips_in_the_documented_bytes() {
        let cases = [
            (
                HomaControl::Grant {
                    message: 0xAB_CDEF,
                    offset: 0x0102_0304,
                    priority: 6,
                },
                [4, 0, 0, 0, 0, 0, 0, 0, 0xAB, 0xCD, 0xEF, 6, 1, 2, 3, 4],
            ),
            (
                HomaControl::Resend {
                    message: 7,
                    offset: 4096,
                    length: 0x0A0B_0C0D,
                    priority: 0,
                },
                [
                    5, 0, 0, 0, 0x0A, 0x0B, 0x0C, 0x0D, 0, 0, 7, 0, 0, 0, 0x10, 0,
                ],
            ),
            (
                HomaControl::Busy { message: 0xFF_FFFF },
                [6, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0],
            ),
        ];
        for (msg, want) in cases {
            let bytes = encoded(msg.control().unwrap());
            // BTH (12 bytes), then the 16-byte control header, then the ICRC.
            assert_eq!(bytes[12..28], want, "{msg:?}");
            let back = RocePacket::parse(&bytes).unwrap();
            let c = back.headers().ext.cc_control.unwrap();
            assert_eq!(HomaControl::from_control(&c), Ok(Some(msg)));
        }
        let credit = CcControl {
            kind: CcControlKind::CreditTotal,
            detail: 0,
            value: u64::MAX,
        };
        assert_eq!(HomaControl::from_control(&credit), Ok(None));
    }

    #[test]
    fn malformed_headers_are_refused_by_decoder_and_encoder() {
        let good = encoded(
            HomaControl::Grant {
                message: 1,
                offset: 2,
                priority: 3,
            }
            .control()
            .unwrap(),
        );
        // Any reserved byte, a priority above 7, a GRANT with a length: refused on decode.
        for (at, value) in [(13, 1u8), (14, 0x80), (15, 1), (12 + 11, 8), (12 + 7, 1)] {
            let mut bad = good.clone();
            bad[at] = value;
            assert!(
                matches!(RocePacket::parse(&bad), Err(Error::BadHoma(_))),
                "byte {at}"
            );
        }
        // Nor does an encoder write them.
        for msg in [
            HomaControl::Grant {
                message: 1 << 24,
                offset: 0,
                priority: 0,
            },
            HomaControl::Grant {
                message: 1,
                offset: 0,
                priority: 8,
            },
            HomaControl::Resend {
                message: 1,
                offset: 0,
                length: 0,
                priority: 0,
            },
        ] {
            assert!(matches!(msg.control(), Err(Error::BadHoma(_))), "{msg:?}");
        }
        let mut bytes = [0u8; 16];
        bytes[0] = HOMA_BUSY_KIND;
        bytes[15] = 1;
        let c = CcControl::read(&bytes);
        assert!(HomaControl::from_control(&c).is_err());
    }
}
