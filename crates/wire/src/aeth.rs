//! The ACK Extended Transport Header: a syndrome byte and a 24-bit message sequence number.
//!
//! The syndrome says what kind of acknowledgement this is:
//!
//! ```text
//!  bit 7:    reserved
//!  bits 6-5: 00 ACK (bits 4-0: credit count code)
//!            01 RNR NAK (bits 4-0: RNR timer code)
//!            10 reserved
//!            11 NAK (bits 4-0: NAK code)
//! ```

use crate::Error;
use crate::error::{Layer, Result, need, room};

/// Length of the AETH in bytes.
pub const AETH_LEN: usize = 4;

/// The end-to-end credit count of an ACK, as its 5-bit code.
///
/// Codes 0..=30 stand for a number of receive WQEs (see [`Credits::count`]); code 31 means
/// the responder does no end-to-end flow control ("invalid credit count").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Credits(u8);

/// The number of credits for each code 0..=30 (IBTA, end-to-end flow control credit codes).
const CREDIT_TABLE: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

impl Credits {
    /// "No credit information": the responder does not limit the requester.
    pub const UNLIMITED: Credits = Credits(31);

    /// The credit code, `None` if it does not fit 5 bits.
    pub const fn from_code(code: u8) -> Option<Credits> {
        if code < 32 { Some(Credits(code)) } else { None }
    }

    /// The largest code whose credit count does not exceed `count` (never over-promises).
    pub fn from_count(count: u32) -> Credits {
        let code = CREDIT_TABLE.partition_point(|&c| c <= count) - 1;
        Credits(code as u8)
    }

    /// The 5-bit code as it goes on the wire.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The number of receive WQEs available, or `None` for [`Credits::UNLIMITED`].
    pub const fn count(self) -> Option<u32> {
        if self.0 == 31 {
            None
        } else {
            Some(CREDIT_TABLE[self.0 as usize])
        }
    }
}

/// The minimum RNR NAK timer, as its 5-bit code: how long the requester waits before
/// retrying after a receiver-not-ready NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RnrTimer(u8);

/// The wait for each code, in microseconds (code 0 is the longest: 655.36 ms).
const RNR_TABLE_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl RnrTimer {
    /// The timer with 5-bit code `code`, `None` if it does not fit 5 bits.
    pub const fn from_code(code: u8) -> Option<RnrTimer> {
        if code < 32 {
            Some(RnrTimer(code))
        } else {
            None
        }
    }

    /// The 5-bit code as it goes on the wire.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The wait in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        RNR_TABLE_US[self.0 as usize] as u64 * 1_000
    }
}

/// The reason a NAK gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// A packet arrived out of sequence; resend from the NAK's PSN.
    PsnSequenceError = 0,
    /// Bad opcode, length or other malformed request.
    InvalidRequest = 1,
    /// R_Key, bounds or permission violation.
    RemoteAccessError = 2,
    /// The responder could not complete the request (e.g. a local error at the responder).
    RemoteOperationalError = 3,
    /// Invalid RD request (RD transport; kept for completeness).
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The NAK code `code`, `None` for a reserved one.
    pub const fn from_code(code: u8) -> Option<NakCode> {
        Some(match code {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
}

/// What an AETH acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// An ACK, with the responder's credit count.
    Ack(Credits),
    /// A receiver-not-ready NAK, with how long to wait before retrying.
    RnrNak(RnrTimer),
    /// A NAK, with its reason.
    Nak(NakCode),
}

impl Syndrome {
    /// Decodes a syndrome byte; reserved types and NAK codes are [`Error::BadSyndrome`].
    /// The reserved top bit is ignored.
    pub const fn from_byte(byte: u8) -> Result<Syndrome> {
        let value = byte & 0x1F;
        match (byte >> 5) & 0x03 {
            0b00 => Ok(Syndrome::Ack(Credits(value))),
            0b01 => Ok(Syndrome::RnrNak(RnrTimer(value))),
            0b11 => match NakCode::from_code(value) {
                Some(code) => Ok(Syndrome::Nak(code)),
                None => Err(Error::BadSyndrome(byte)),
            },
            _ => Err(Error::BadSyndrome(byte)),
        }
    }

    /// The syndrome byte as it goes on the wire.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.0,
            Syndrome::RnrNak(t) => 0x20 | t.0,
            Syndrome::Nak(code) => 0x60 | code as u8,
        }
    }
}

/// A decoded AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// ACK, RNR NAK or NAK, with its value.
    pub syndrome: Syndrome,
    /// Message sequence number: how many requests the responder has completed (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Decodes an AETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Aeth> {
        need(buf, AETH_LEN, Layer::Extension)?;
        Ok(Aeth {
            syndrome: Syndrome::from_byte(buf[0])?,
            msn: u32::from_be_bytes([0, buf[1], buf[2], buf[3]]),
        })
    }

    /// Encodes the AETH into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        room(buf, AETH_LEN)?;
        if self.msn >= 1 << 24 {
            return Err(Error::FieldRange("MSN is 24 bits"));
        }
        buf[0] = self.syndrome.to_byte();
        buf[1..4].copy_from_slice(&self.msn.to_be_bytes()[1..]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndrome_bytes() {
        assert_eq!(
            Syndrome::from_byte(0x1F),
            Ok(Syndrome::Ack(Credits::UNLIMITED))
        );
        assert_eq!(
            Syndrome::from_byte(0x60),
            Ok(Syndrome::Nak(NakCode::PsnSequenceError))
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Ok(Syndrome::Nak(NakCode::RemoteAccessError))
        );
        assert_eq!(Syndrome::from_byte(0x2E).unwrap().to_byte(), 0x2E);
        assert_eq!(Syndrome::from_byte(0x40), Err(Error::BadSyndrome(0x40)));
        assert_eq!(Syndrome::from_byte(0x65), Err(Error::BadSyndrome(0x65)));
        for byte in 0..=0x7Fu8 {
            if let Ok(s) = Syndrome::from_byte(byte) {
                assert_eq!(s.to_byte(), byte);
            }
        }
    }

    #[test]
    fn credit_codes() {
        assert_eq!(Credits::from_code(0).unwrap().count(), Some(0));
        assert_eq!(Credits::from_code(30).unwrap().count(), Some(32768));
        assert_eq!(Credits::UNLIMITED.count(), None);
        assert_eq!(Credits::from_count(5).count(), Some(4));
        assert_eq!(Credits::from_count(6).count(), Some(6));
        assert_eq!(Credits::from_count(1_000_000).count(), Some(32768));
        assert_eq!(Credits::from_code(32), None);
    }

    #[test]
    fn rnr_timer_codes() {
        assert_eq!(RnrTimer::from_code(0).unwrap().as_nanos(), 655_360_000);
        assert_eq!(RnrTimer::from_code(1).unwrap().as_nanos(), 10_000);
        assert_eq!(RnrTimer::from_code(14).unwrap().as_nanos(), 1_280_000);
        assert_eq!(RnrTimer::from_code(31).unwrap().as_nanos(), 491_520_000);
    }

    #[test]
    fn round_trip() {
        let aeth = Aeth {
            syndrome: Syndrome::RnrNak(RnrTimer(12)),
            msn: 0xABCDEF,
        };
        let mut buf = [0u8; AETH_LEN];
        aeth.emit(&mut buf).unwrap();
        assert_eq!(buf, [0x2C, 0xAB, 0xCD, 0xEF]);
        assert_eq!(Aeth::parse(&buf), Ok(aeth));
    }
}
