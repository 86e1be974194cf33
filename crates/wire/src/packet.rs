//! A whole RoCE v2 packet as UDP carries it: BTH, extension headers, payload, pad, ICRC.

use crate::aeth::Aeth;
use crate::error::{Layer, Result, need, room};
use crate::ext::{read_u32, read_u64};
use crate::{
    AtomicAckEth, AtomicEth, BTH_LEN, Bth, CCX_TVER, Ccx, Deth, Error, ExtHeaders, HeaderSet,
    OpcodeInfo, Reth, Syndrome,
};

/// Length of the ICRC trailer in bytes.
pub const ICRC_LEN: usize = 4;

/// The number of pad bytes that make `payload_len` a whole number of 4-byte words.
#[inline]
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

/// A RoCE v2 packet decoded from a UDP payload: the BTH, the CC extension header (decoded),
/// a validated view of the IBTA extension headers (decoded on access, so a receiver pays only
/// for the headers it reads) and the payload, borrowing from the buffer.
///
/// Decoding checks the structure (version, CC extension header, opcode, header and payload
/// lengths, pad count, AETH syndrome) but not the ICRC, which covers the IP and UDP headers too: see
/// [`crate::IpUdp::roce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// The base transport header.
    pub bth: Bth,
    /// Sluice's congestion-control extension header, when the BTH announces one (TVer 1).
    pub ccx: Option<Ccx>,
    /// The table entry for the opcode (decoding fails for opcodes without one).
    pub info: &'static OpcodeInfo,
    /// The extension header bytes, exactly `info.ext_len` of them.
    ext: &'a [u8],
    /// The payload without its pad bytes.
    pub payload: &'a [u8],
    /// The ICRC as carried, as a CRC value (the wire holds it least significant byte first).
    pub icrc: u32,
}

impl<'a> RocePacket<'a> {
    /// Decodes a UDP payload. Never panics; every malformation is a typed [`Error`].
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<RocePacket<'a>> {
        let bth = Bth::parse(buf)?;
        let info = bth
            .opcode
            .info()
            .ok_or(Error::UnknownOpcode(bth.opcode.0))?;
        let (ccx, ccx_len) = if buf[1] & 0x0F == CCX_TVER {
            let (ccx, len) = Ccx::parse(&buf[BTH_LEN..])?;
            (Some(ccx), len)
        } else {
            (None, 0)
        };
        let ext_at = BTH_LEN + ccx_len;
        let header_len = ext_at + info.ext_len;
        need(buf, header_len + ICRC_LEN, Layer::Extension)?;
        let ext = &buf[ext_at..header_len];
        if let Some(at) = info.offset_of(HeaderSet::AETH) {
            Syndrome::from_byte(ext[at])?;
        }
        if let Some(at) = info.offset_of(HeaderSet::CC_CONTROL) {
            crate::probe::PathProbeHeader::check(&ext[at..])?;
            crate::homa::HomaControl::check(&ext[at..at + crate::CcControl::LEN])?;
        }
        let icrc_at = buf.len() - ICRC_LEN;
        let body = &buf[header_len..icrc_at];
        let pad = usize::from(bth.pad_count);
        if !info.has_payload {
            if pad != 0 {
                return Err(Error::BadPadCount {
                    pad: bth.pad_count,
                    payload_with_pad: body.len(),
                });
            }
            if !body.is_empty() {
                return Err(Error::LengthMismatch(
                    "bytes after the headers of an opcode without payload",
                ));
            }
        }
        if pad > body.len() {
            return Err(Error::BadPadCount {
                pad: bth.pad_count,
                payload_with_pad: body.len(),
            });
        }
        if body.len() % 4 != 0 {
            return Err(Error::LengthMismatch(
                "payload and pad are not a multiple of 4 bytes",
            ));
        }
        let icrc = u32::from_le_bytes([
            buf[icrc_at],
            buf[icrc_at + 1],
            buf[icrc_at + 2],
            buf[icrc_at + 3],
        ]);
        Ok(RocePacket {
            bth,
            ccx,
            info,
            ext,
            payload: &body[..body.len() - pad],
            icrc,
        })
    }

    /// Bytes of BTH, CC extension header and extension headers.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.ccx.map_or(0, |c| c.wire_len()) + self.info.ext_len
    }

    /// The headers, as an encoder takes them: what re-encodes this packet.
    pub fn headers(&self) -> RoceHeaders {
        RoceHeaders {
            bth: self.bth,
            ccx: self.ccx,
            ext: self.ext(),
        }
    }

    /// Every extension header, decoded.
    pub fn ext(&self) -> ExtHeaders {
        // `ext` is exactly `info.ext_len` bytes, the set's length: no length to check again.
        ExtHeaders::read(self.info.headers, self.ext).expect("validated when the packet was parsed")
    }

    #[inline]
    fn header(&self, h: HeaderSet) -> Option<&'a [u8]> {
        self.info.offset_of(h).map(|at| &self.ext[at..])
    }

    /// The RETH, if this opcode carries one.
    #[inline]
    pub fn reth(&self) -> Option<Reth> {
        self.header(HeaderSet::RETH).map(Reth::read)
    }

    /// The AETH, if this opcode carries one.
    #[inline]
    pub fn aeth(&self) -> Option<Aeth> {
        self.header(HeaderSet::AETH)
            .map(|b| Aeth::parse(b).expect("validated when the packet was parsed"))
    }

    /// The AtomicETH, if this opcode carries one.
    #[inline]
    pub fn atomic_eth(&self) -> Option<AtomicEth> {
        self.header(HeaderSet::ATOMIC_ETH).map(AtomicEth::read)
    }

    /// The AtomicAckETH, if this opcode carries one.
    #[inline]
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth> {
        self.header(HeaderSet::ATOMIC_ACK_ETH)
            .map(|b| AtomicAckEth {
                original: read_u64(b),
            })
    }

    /// The DETH, if this opcode carries one.
    #[inline]
    pub fn deth(&self) -> Option<Deth> {
        self.header(HeaderSet::DETH).map(Deth::read)
    }

    /// Immediate data.
    #[inline]
    pub fn imm_dt(&self) -> Option<u32> {
        self.header(HeaderSet::IMM_DT).map(read_u32)
    }

    /// The R_Key to invalidate (IETH).
    #[inline]
    pub fn ieth(&self) -> Option<u32> {
        self.header(HeaderSet::IETH).map(read_u32)
    }
}

/// The headers a sender fills in to build a packet: the encoding side of [`RocePacket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceHeaders {
    /// The base transport header; an encoder sets its pad count and TVer.
    pub bth: Bth,
    /// Written after the BTH, whose TVer then says so; `None` for plain RoCE v2.
    pub ccx: Option<Ccx>,
    /// The IBTA extension headers; the opcode says which must be present.
    pub ext: ExtHeaders,
}

impl RoceHeaders {
    /// Bytes on the wire (UDP payload) for a packet with `payload_len` bytes of payload.
    pub fn wire_len(&self, payload_len: usize) -> Result<usize> {
        Ok(self.header_len()? + payload_len + usize::from(pad_for(payload_len)) + ICRC_LEN)
    }

    /// Bytes of BTH, CC extension header and extension headers.
    pub fn header_len(&self) -> Result<usize> {
        let info = self
            .bth
            .opcode
            .info()
            .ok_or(Error::UnknownOpcode(self.bth.opcode.0))?;
        Ok(BTH_LEN + self.ccx_len() + info.ext_len)
    }

    /// Writes the BTH (with the pad count for `payload_len`) and the extension headers at the
    /// start of `buf`; returns their length. The payload, pad and ICRC go after them: this is
    /// the entry point for senders that gather the payload from elsewhere.
    pub fn emit_headers(&self, payload_len: usize, buf: &mut [u8]) -> Result<usize> {
        let info = self
            .bth
            .opcode
            .info()
            .ok_or(Error::UnknownOpcode(self.bth.opcode.0))?;
        if !info.has_payload && payload_len != 0 {
            return Err(Error::LengthMismatch(
                "payload given to an opcode without payload",
            ));
        }
        let ext_at = BTH_LEN + self.ccx_len();
        let header_len = ext_at + info.ext_len;
        room(buf, header_len)?;
        let bth = Bth {
            pad_count: pad_for(payload_len),
            ..self.bth
        };
        bth.emit(buf)?;
        if let Some(ccx) = &self.ccx {
            buf[1] |= CCX_TVER;
            ccx.emit(&mut buf[BTH_LEN..])?;
        }
        self.ext
            .emit(info.headers, self.bth.opcode.0, &mut buf[ext_at..])?;
        Ok(header_len)
    }

    fn ccx_len(&self) -> usize {
        self.ccx.map_or(0, |c| c.wire_len())
    }

    /// Writes the whole packet (headers, payload, zero pad) into `buf` and returns its length
    /// including the ICRC, whose 4 bytes are left zero: the ICRC covers the IP and UDP headers,
    /// so it is filled in by [`crate::icrc`] once those are known.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        let total = self.wire_len(payload.len())?;
        room(buf, total)?;
        let header_len = self.emit_headers(payload.len(), buf)?;
        let end = header_len + payload.len();
        buf[header_len..end].copy_from_slice(payload);
        buf[end..total].fill(0);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Credits, Opcode, Psn};

    fn write_only(payload: &[u8]) -> Vec<u8> {
        let headers = RoceHeaders {
            bth: Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 0x12, Psn::new(7)),
            ccx: None,
            ext: ExtHeaders {
                reth: Some(Reth {
                    va: 0x1000,
                    rkey: 0xAB,
                    dma_len: payload.len() as u32,
                }),
                ..ExtHeaders::default()
            },
        };
        let mut buf = vec![0u8; 64 + payload.len()];
        let n = headers.emit(payload, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn ack() -> RoceHeaders {
        RoceHeaders {
            bth: Bth::new(Opcode::RC_ACKNOWLEDGE, 1, Psn::new(1)),
            ccx: None,
            ext: ExtHeaders {
                aeth: Some(Aeth {
                    syndrome: Syndrome::Ack(Credits::UNLIMITED),
                    msn: 1,
                }),
                ..ExtHeaders::default()
            },
        }
    }

    #[test]
    fn payload_and_pad() {
        let buf = write_only(b"hello");
        assert_eq!(buf.len(), 12 + 16 + 5 + 3 + 4);
        let p = RocePacket::parse(&buf).unwrap();
        assert_eq!(p.bth.pad_count, 3);
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.reth().unwrap().rkey, 0xAB);
        assert_eq!(p.ext().reth, p.reth());
        assert_eq!(p.aeth(), None);
    }

    #[test]
    fn pad_larger_than_payload_is_rejected() {
        let mut buf = write_only(b"");
        buf[1] |= 0x30;
        assert!(matches!(
            RocePacket::parse(&buf),
            Err(Error::BadPadCount { pad: 3, .. })
        ));
    }

    #[test]
    fn misaligned_payload_is_rejected() {
        let mut buf = write_only(b"abcd");
        buf.insert(30, 0);
        assert!(matches!(
            RocePacket::parse(&buf),
            Err(Error::LengthMismatch(_))
        ));
    }

    #[test]
    fn ack_with_payload_is_rejected() {
        let headers = ack();
        let mut buf = [0u8; 64];
        assert!(matches!(
            headers.emit(b"data", &mut buf),
            Err(Error::LengthMismatch(_))
        ));
        let n = headers.emit(b"", &mut buf).unwrap();
        assert_eq!(n, 20);
        let mut longer = buf[..n].to_vec();
        longer.extend_from_slice(&[0; 4]);
        assert!(matches!(
            RocePacket::parse(&longer),
            Err(Error::LengthMismatch(_))
        ));
    }

    #[test]
    fn missing_or_extra_headers_are_refused() {
        let headers = RoceHeaders {
            bth: Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 1, Psn::new(1)),
            ccx: None,
            ext: ExtHeaders::default(),
        };
        let mut buf = [0u8; 64];
        assert_eq!(
            headers.emit(b"", &mut buf),
            Err(Error::HeaderMismatch(0x0A))
        );
    }

    #[test]
    fn reserved_syndrome_is_rejected_at_parse() {
        let headers = ack();
        let mut buf = [0u8; 20];
        headers.emit(b"", &mut buf).unwrap();
        buf[12] = 0x40;
        assert_eq!(RocePacket::parse(&buf), Err(Error::BadSyndrome(0x40)));
    }

    #[test]
    fn unknown_opcode() {
        let mut buf = write_only(b"");
        buf[0] = 0x15;
        assert_eq!(RocePacket::parse(&buf), Err(Error::UnknownOpcode(0x15)));
    }
}
