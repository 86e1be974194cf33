//! The extension headers that follow the BTH (all but the AETH, which has its own module),
//! and [`ExtHeaders`], the set of them one packet carries.

use crate::aeth::{AETH_LEN, Aeth};
use crate::error::{Layer, Result, need, room};
use crate::{Error, HeaderSet};

/// RDMA Extended Transport Header (16 bytes): where an RDMA WRITE or READ goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reth {
    /// Virtual address of the first byte.
    pub va: u64,
    /// The remote key of the memory region.
    pub rkey: u32,
    /// Length of the whole RDMA operation in bytes (not of this packet).
    pub dma_len: u32,
}

/// Atomic Extended Transport Header (28 bytes): the target of a compare-and-swap or
/// fetch-and-add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEth {
    /// Virtual address of the 8-byte target.
    pub va: u64,
    /// The remote key of the memory region.
    pub rkey: u32,
    /// The value to swap in (compare-and-swap) or to add (fetch-and-add).
    pub swap_add: u64,
    /// The value to compare with (compare-and-swap only).
    pub compare: u64,
}

/// Atomic ACK Extended Transport Header (8 bytes): the value the target held before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEth {
    /// The target's value before the operation.
    pub original: u64,
}

/// Datagram Extended Transport Header (8 bytes), in UD packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Deth {
    /// Queue key.
    pub qkey: u32,
    /// Source QP number, 24 bits.
    pub src_qp: u32,
}

/// Sluice's congestion-control control header (16 bytes, after the BTH of an
/// `RC_CC_CONTROL` packet, opcode 0x18, which the IBTA reserves): one byte of kind, three
/// reserved (zero), a 32-bit detail (bytes 4..8: zero except in a Homa RESEND, see
/// [`crate::HomaControl`]) and a 64-bit value. Sent only between peers that agreed to it at
/// connection setup; see `docs/control.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CcControl {
    /// What `value` means.
    pub kind: CcControlKind,
    /// Bytes 4..8: a Homa RESEND's length; zero in every other kind.
    pub detail: u32,
    /// The value.
    pub value: u64,
}

/// What a [`CcControl`] header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcControlKind {
    /// `value` is the total credit, in bytes, the receiver has granted the sender since the
    /// queue pair connected (wrapping). A total, not an increment, so that a lost or
    /// duplicated grant is repaired by the next one.
    CreditTotal,
    /// A path probe: `value` is a [`crate::PathProbeHeader`]'s port and number.
    PathProbe,
    /// A path probe's reply, echoing the probe's port and number.
    PathProbeReply,
    /// Homa's GRANT ([`crate::HomaControl::Grant`]).
    HomaGrant,
    /// Homa's RESEND ([`crate::HomaControl::Resend`]).
    HomaResend,
    /// Homa's BUSY ([`crate::HomaControl::Busy`]).
    HomaBusy,
    /// A kind this version does not know (kept, so it can be re-encoded as received).
    Other(u8),
}

impl From<u8> for CcControlKind {
    fn from(kind: u8) -> Self {
        match kind {
            1 => CcControlKind::CreditTotal,
            crate::probe::PROBE_KIND => CcControlKind::PathProbe,
            crate::probe::PROBE_REPLY_KIND => CcControlKind::PathProbeReply,
            crate::homa::HOMA_GRANT_KIND => CcControlKind::HomaGrant,
            crate::homa::HOMA_RESEND_KIND => CcControlKind::HomaResend,
            crate::homa::HOMA_BUSY_KIND => CcControlKind::HomaBusy,
            k => CcControlKind::Other(k),
        }
    }
}

impl From<CcControlKind> for u8 {
    fn from(kind: CcControlKind) -> u8 {
        match kind {
            CcControlKind::CreditTotal => 1,
            CcControlKind::PathProbe => crate::probe::PROBE_KIND,
            CcControlKind::PathProbeReply => crate::probe::PROBE_REPLY_KIND,
            CcControlKind::HomaGrant => crate::homa::HOMA_GRANT_KIND,
            CcControlKind::HomaResend => crate::homa::HOMA_RESEND_KIND,
            CcControlKind::HomaBusy => crate::homa::HOMA_BUSY_KIND,
            CcControlKind::Other(k) => k,
        }
    }
}

impl CcControl {
    /// Bytes on the wire.
    pub const LEN: usize = 16;

    #[inline]
    pub(crate) fn read(b: &[u8]) -> CcControl {
        CcControl {
            kind: b[0].into(),
            detail: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            value: be64(b, 8),
        }
    }

    pub(crate) fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0] = self.kind.into();
        b[4..8].copy_from_slice(&self.detail.to_be_bytes());
        b[8..].copy_from_slice(&self.value.to_be_bytes());
        b
    }
}

/// The extension headers of one packet. Which ones must be present is fixed by the opcode
/// (see [`crate::OpcodeInfo::headers`]); the 16 reserved bytes of a CNP are implied by its
/// opcode and not represented here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    /// The DETH, in UD packets.
    pub deth: Option<Deth>,
    /// The RETH, in RDMA WRITE (first or only) and READ requests.
    pub reth: Option<Reth>,
    /// The AtomicETH, in atomic requests.
    pub atomic_eth: Option<AtomicEth>,
    /// The AETH, in ACKs, NAKs and READ responses that carry one.
    pub aeth: Option<Aeth>,
    /// The AtomicAckETH, in atomic ACKs.
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data (ImmDt), carried as-is (network byte order on the wire).
    pub imm_dt: Option<u32>,
    /// The R_Key to invalidate (IETH).
    pub ieth: Option<u32>,
    /// Sluice's control header (opcode 0x18 only).
    pub cc_control: Option<CcControl>,
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

impl Reth {
    /// Bytes on the wire.
    pub const LEN: usize = 16;

    /// Decodes the first [`Reth::LEN`] bytes of `b` (the caller has checked the length).
    #[inline]
    pub(crate) fn read(b: &[u8]) -> Reth {
        Reth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            dma_len: be32(b, 12),
        }
    }
}

impl AtomicEth {
    /// Bytes on the wire.
    pub const LEN: usize = 28;

    #[inline]
    pub(crate) fn read(b: &[u8]) -> AtomicEth {
        AtomicEth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            swap_add: be64(b, 12),
            compare: be64(b, 20),
        }
    }
}

impl Deth {
    /// Bytes on the wire.
    pub const LEN: usize = 8;

    #[inline]
    pub(crate) fn read(b: &[u8]) -> Deth {
        Deth {
            qkey: be32(b, 0),
            src_qp: be32(b, 4) & 0x00FF_FFFF,
        }
    }
}

#[inline]
pub(crate) fn read_u32(b: &[u8]) -> u32 {
    be32(b, 0)
}

#[inline]
pub(crate) fn read_u64(b: &[u8]) -> u64 {
    be64(b, 0)
}

impl ExtHeaders {
    /// The headers present, as a set.
    pub fn present(&self) -> HeaderSet {
        let mut set = HeaderSet::NONE;
        let mut add = |present: bool, h: HeaderSet| {
            if present {
                set = set.union(h);
            }
        };
        add(self.deth.is_some(), HeaderSet::DETH);
        add(self.reth.is_some(), HeaderSet::RETH);
        add(self.atomic_eth.is_some(), HeaderSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HeaderSet::AETH);
        add(self.atomic_ack_eth.is_some(), HeaderSet::ATOMIC_ACK_ETH);
        add(self.imm_dt.is_some(), HeaderSet::IMM_DT);
        add(self.ieth.is_some(), HeaderSet::IETH);
        add(self.cc_control.is_some(), HeaderSet::CC_CONTROL);
        set
    }

    /// Decodes the headers in `set` from the start of `buf` (the bytes after the BTH).
    pub fn parse(set: HeaderSet, buf: &[u8]) -> Result<ExtHeaders> {
        need(buf, set.wire_len(), Layer::Extension)?;
        ExtHeaders::read(set, buf)
    }

    /// [`ExtHeaders::parse`] once the caller has checked that `buf` holds `set`'s headers
    /// (e.g. against the opcode table's precomputed length): only the AETH's syndrome can
    /// still be refused.
    #[inline]
    pub(crate) fn read(set: HeaderSet, buf: &[u8]) -> Result<ExtHeaders> {
        let mut ext = ExtHeaders::default();
        let mut at = 0;
        if set.contains(HeaderSet::DETH) {
            ext.deth = Some(Deth::read(&buf[at..]));
            at += Deth::LEN;
        }
        if set.contains(HeaderSet::RETH) {
            ext.reth = Some(Reth::read(&buf[at..]));
            at += Reth::LEN;
        }
        if set.contains(HeaderSet::ATOMIC_ETH) {
            ext.atomic_eth = Some(AtomicEth::read(&buf[at..]));
            at += AtomicEth::LEN;
        }
        if set.contains(HeaderSet::AETH) {
            ext.aeth = Some(Aeth::parse(&buf[at..])?);
            at += AETH_LEN;
        }
        if set.contains(HeaderSet::ATOMIC_ACK_ETH) {
            ext.atomic_ack_eth = Some(AtomicAckEth {
                original: read_u64(&buf[at..]),
            });
            at += 8;
        }
        if set.contains(HeaderSet::IMM_DT) {
            ext.imm_dt = Some(read_u32(&buf[at..]));
            at += 4;
        }
        if set.contains(HeaderSet::IETH) {
            ext.ieth = Some(read_u32(&buf[at..]));
            at += 4;
        }
        // CNP_RESERVED: 16 bytes that are ignored on receive (a CNP has nothing else).
        if set.contains(HeaderSet::CC_CONTROL) {
            ext.cc_control = Some(CcControl::read(&buf[at..]));
        }
        Ok(ext)
    }

    /// Encodes the headers of `set` at the start of `buf` and returns their length. The
    /// headers present must be exactly those of `set` (CNP padding aside), or
    /// [`Error::HeaderMismatch`] names `opcode`.
    pub fn emit(&self, set: HeaderSet, opcode: u8, buf: &mut [u8]) -> Result<usize> {
        if self.present() != set.difference(HeaderSet::CNP_RESERVED) {
            return Err(Error::HeaderMismatch(opcode));
        }
        let len = set.wire_len();
        if len == 0 {
            return Ok(0); // a MIDDLE packet's, most of a long message's packets
        }
        room(buf, len)?;
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            buf[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        if let Some(d) = self.deth {
            if d.src_qp >= 1 << 24 {
                return Err(Error::FieldRange("DETH source QP is 24 bits"));
            }
            put(&d.qkey.to_be_bytes());
            put(&d.src_qp.to_be_bytes());
        }
        if let Some(r) = self.reth {
            put(&r.va.to_be_bytes());
            put(&r.rkey.to_be_bytes());
            put(&r.dma_len.to_be_bytes());
        }
        if let Some(a) = self.atomic_eth {
            put(&a.va.to_be_bytes());
            put(&a.rkey.to_be_bytes());
            put(&a.swap_add.to_be_bytes());
            put(&a.compare.to_be_bytes());
        }
        if let Some(a) = self.aeth {
            let mut b = [0u8; AETH_LEN];
            a.emit(&mut b)?;
            put(&b);
        }
        if let Some(a) = self.atomic_ack_eth {
            put(&a.original.to_be_bytes());
        }
        if let Some(imm) = self.imm_dt {
            put(&imm.to_be_bytes());
        }
        if let Some(rkey) = self.ieth {
            put(&rkey.to_be_bytes());
        }
        if set.contains(HeaderSet::CNP_RESERVED) {
            put(&[0u8; 16]);
        }
        if let Some(c) = self.cc_control {
            // Never a probe the decoder would refuse.
            if crate::PathProbeHeader::from_control(&c).is_err() {
                return Err(Error::FieldRange(
                    "a path probe's reserved bytes 10..12 are zero",
                ));
            }
            // Nor a Homa message it would refuse.
            crate::homa::HomaControl::check(&c.bytes())?;
            put(&c.bytes());
        }
        debug_assert_eq!(at, len);
        Ok(len)
    }
}

/// The bytes of a whole 0x18 control packet (BTH and `c`, no ICRC) to QP 0x12: what the
/// tests of each control-packet kind (`homa.rs`, `probe.rs`) decode and corrupt.
#[cfg(test)]
pub(crate) fn encoded_cc_control(c: CcControl) -> Vec<u8> {
    use crate::{Bth, Opcode, Psn, RoceHeaders};
    let headers = RoceHeaders {
        bth: Bth::new(Opcode::RC_CC_CONTROL, 0x12, Psn::new(0)),
        ccx: None,
        ext: ExtHeaders {
            cc_control: Some(c),
            ..ExtHeaders::default()
        },
    };
    let mut out = vec![0u8; headers.wire_len(0).unwrap()];
    let n = headers.emit(&[], &mut out).unwrap();
    out.truncate(n);
    out
}
