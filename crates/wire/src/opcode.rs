//! The BTH opcode table for RC, UC and UD, and the RoCE v2 CNP.
//!
//! For every opcode the table says which extension headers follow the BTH (always in the
//! canonical IBTA order, see [`HeaderSet`]), whether the packet carries payload, what operation
//! it belongs to and where it sits in a message. Lookups are a single array index.

/// The transport service an opcode belongs to (the top three bits of the opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
    /// RoCE v2 Congestion Notification Packet (opcode 0x81).
    Cnp,
}

/// The operation a packet is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImmediate,
    /// SEND with invalidate.
    SendWithInvalidate,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA WRITE with immediate data.
    RdmaWriteWithImmediate,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACK or NAK.
    Acknowledge,
    /// The ACK of an atomic operation, with the original value.
    AtomicAcknowledge,
    /// Atomic compare-and-swap.
    CompareSwap,
    /// Atomic fetch-and-add.
    FetchAdd,
    /// Congestion notification packet (RoCE v2, opcode 0x81).
    Cnp,
    /// A Sluice congestion-control control packet (a credit grant), sent only to a peer
    /// that negotiated it.
    CcControl,
}

/// Where a packet sits in its message. Single-packet operations (READ requests, ACKs,
/// atomics, CNPs) are `Only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// The first packet of a message of several.
    First,
    /// A packet between the first and the last.
    Middle,
    /// The last packet of a message of several.
    Last,
    /// The only packet of a message.
    Only,
}

impl Position {
    /// True for the packet that starts a message (First or Only).
    pub const fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// True for the packet that ends a message (Last or Only).
    pub const fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// A set of extension headers. Headers always appear on the wire in the order of the
/// constants below (the IBTA order; RDETH, of the unsupported RD transport, would come first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    /// No header.
    pub const NONE: HeaderSet = HeaderSet(0);
    /// Datagram Extended Transport Header (UD): Q_Key, source QP. 8 bytes.
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    /// RDMA Extended Transport Header: virtual address, R_Key, DMA length. 16 bytes.
    pub const RETH: HeaderSet = HeaderSet(1 << 1);
    /// Atomic Extended Transport Header: address, R_Key, swap/add, compare. 28 bytes.
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 2);
    /// ACK Extended Transport Header: syndrome, MSN. 4 bytes.
    pub const AETH: HeaderSet = HeaderSet(1 << 3);
    /// Atomic ACK Extended Transport Header: original remote data. 8 bytes.
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 4);
    /// Immediate data. 4 bytes.
    pub const IMM_DT: HeaderSet = HeaderSet(1 << 5);
    /// Invalidate Extended Transport Header: the R_Key to invalidate. 4 bytes.
    pub const IETH: HeaderSet = HeaderSet(1 << 6);
    /// The 16 reserved bytes that follow the BTH of a CNP.
    pub const CNP_RESERVED: HeaderSet = HeaderSet(1 << 7);
    /// Sluice's congestion-control control header (see [`crate::CcControl`]), carried
    /// only by [`Opcode::RC_CC_CONTROL`]. 16 bytes.
    pub const CC_CONTROL: HeaderSet = HeaderSet(1 << 8);

    /// Each header with its size in bytes, in wire order.
    pub const ORDER: [(HeaderSet, usize); 9] = [
        (Self::DETH, 8),
        (Self::RETH, 16),
        (Self::ATOMIC_ETH, 28),
        (Self::AETH, 4),
        (Self::ATOMIC_ACK_ETH, 8),
        (Self::IMM_DT, 4),
        (Self::IETH, 4),
        (Self::CNP_RESERVED, 16),
        (Self::CC_CONTROL, 16),
    ];

    /// The headers in either set.
    pub const fn union(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }

    /// The headers in `self` and not in `other`.
    pub const fn difference(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 & !other.0)
    }

    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the set holds no header.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Total size in bytes of the headers in the set.
    pub const fn wire_len(self) -> usize {
        let mut len = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                len += Self::ORDER[i].1;
            }
            i += 1;
        }
        len
    }
}

/// What the opcode table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpcodeInfo {
    /// The IBTA name, e.g. `RC_RDMA_WRITE_FIRST`.
    pub name: &'static str,
    /// RC, UC, UD or CNP.
    pub transport: Transport,
    /// What the packet does.
    pub operation: Operation,
    /// Its place in a message.
    pub position: Position,
    /// The extension headers between the BTH and the payload.
    pub headers: HeaderSet,
    /// Whether the packet carries payload (which may still be empty, e.g. a 0-byte SEND).
    pub has_payload: bool,
    /// Total length of the extension headers: `headers.wire_len()`, precomputed.
    pub ext_len: usize,
    /// Offset of each header of [`HeaderSet::ORDER`] after the BTH, or `u8::MAX` if absent.
    offsets: [u8; HeaderSet::ORDER.len()],
}

impl OpcodeInfo {
    /// Where header `h` (one of the [`HeaderSet`] constants) starts, counted from the end of
    /// the BTH; `None` if this opcode does not carry it.
    #[inline]
    pub fn offset_of(&self, h: HeaderSet) -> Option<usize> {
        let index = h.0.trailing_zeros() as usize;
        match self.offsets.get(index) {
            Some(&at) if at != u8::MAX => Some(usize::from(at)),
            _ => None,
        }
    }
}

/// A BTH opcode. Any byte can be held; [`Opcode::info`] says whether it is one Sluice speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($name:ident = $val:expr,)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($val), ").")]
                pub const $name: Opcode = Opcode($val);
            )*
        }
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00,
    RC_SEND_MIDDLE = 0x01,
    RC_SEND_LAST = 0x02,
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03,
    RC_SEND_ONLY = 0x04,
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05,
    RC_RDMA_WRITE_FIRST = 0x06,
    RC_RDMA_WRITE_MIDDLE = 0x07,
    RC_RDMA_WRITE_LAST = 0x08,
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09,
    RC_RDMA_WRITE_ONLY = 0x0A,
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B,
    RC_RDMA_READ_REQUEST = 0x0C,
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D,
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E,
    RC_RDMA_READ_RESPONSE_LAST = 0x0F,
    RC_RDMA_READ_RESPONSE_ONLY = 0x10,
    RC_ACKNOWLEDGE = 0x11,
    RC_ATOMIC_ACKNOWLEDGE = 0x12,
    RC_COMPARE_SWAP = 0x13,
    RC_FETCH_ADD = 0x14,
    RC_SEND_LAST_WITH_INVALIDATE = 0x16,
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17,
    RC_CC_CONTROL = 0x18,
    UC_SEND_FIRST = 0x20,
    UC_SEND_MIDDLE = 0x21,
    UC_SEND_LAST = 0x22,
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23,
    UC_SEND_ONLY = 0x24,
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25,
    UC_RDMA_WRITE_FIRST = 0x26,
    UC_RDMA_WRITE_MIDDLE = 0x27,
    UC_RDMA_WRITE_LAST = 0x28,
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29,
    UC_RDMA_WRITE_ONLY = 0x2A,
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B,
    UD_SEND_ONLY = 0x64,
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65,
    CNP = 0x81,
}

impl Opcode {
    /// The table entry, or `None` for a reserved opcode or one of RD/XRC.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// Every opcode in the table, in numeric order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        (0..=255u8).map(Opcode).filter(|op| op.info().is_some())
    }

    /// Every IBTA opcode in the table (all but Sluice's own control opcode), in order.
    pub fn standard() -> impl Iterator<Item = Opcode> {
        Self::all().filter(|op| *op != Opcode::RC_CC_CONTROL)
    }

    /// The IBTA name, or `"UNKNOWN"`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), self.0)
    }
}

static TABLE: [Option<OpcodeInfo>; 256] = {
    let mut table = [None; 256];
    let mut op = 0;
    while op < 256 {
        table[op] = describe(op as u8);
        op += 1;
    }
    table
};

/// The shape of the low five opcode bits shared by RC and UC (and the RC-only ones).
const fn describe_low(low: u8, rc: bool) -> Option<(Operation, Position, HeaderSet, bool)> {
    use HeaderSet as H;
    use Operation::*;
    use Position::*;
    let entry = match low {
        0x00 => (Send, First, H::NONE, true),
        0x01 => (Send, Middle, H::NONE, true),
        0x02 => (Send, Last, H::NONE, true),
        0x03 => (SendWithImmediate, Last, H::IMM_DT, true),
        0x04 => (Send, Only, H::NONE, true),
        0x05 => (SendWithImmediate, Only, H::IMM_DT, true),
        0x06 => (RdmaWrite, First, H::RETH, true),
        0x07 => (RdmaWrite, Middle, H::NONE, true),
        0x08 => (RdmaWrite, Last, H::NONE, true),
        0x09 => (RdmaWriteWithImmediate, Last, H::IMM_DT, true),
        0x0A => (RdmaWrite, Only, H::RETH, true),
        0x0B => (RdmaWriteWithImmediate, Only, H::RETH.union(H::IMM_DT), true),
        _ if !rc => return None,
        0x0C => (RdmaReadRequest, Only, H::RETH, false),
        0x0D => (RdmaReadResponse, First, H::AETH, true),
        0x0E => (RdmaReadResponse, Middle, H::NONE, true),
        0x0F => (RdmaReadResponse, Last, H::AETH, true),
        0x10 => (RdmaReadResponse, Only, H::AETH, true),
        0x11 => (Acknowledge, Only, H::AETH, false),
        0x12 => (
            AtomicAcknowledge,
            Only,
            H::AETH.union(H::ATOMIC_ACK_ETH),
            false,
        ),
        0x13 => (CompareSwap, Only, H::ATOMIC_ETH, false),
        0x14 => (FetchAdd, Only, H::ATOMIC_ETH, false),
        0x16 => (SendWithInvalidate, Last, H::IETH, true),
        0x17 => (SendWithInvalidate, Only, H::IETH, true),
        // 0x18..=0x1F are reserved by the IBTA; Sluice uses 0x18 between peers that agreed.
        0x18 => (CcControl, Only, H::CC_CONTROL, false),
        _ => return None,
    };
    Some(entry)
}

const fn describe(op: u8) -> Option<OpcodeInfo> {
    let (transport, (operation, position, headers, has_payload)) = match op {
        0x81 => (
            Transport::Cnp,
            (
                Operation::Cnp,
                Position::Only,
                HeaderSet::CNP_RESERVED,
                false,
            ),
        ),
        0x64 => (
            Transport::Ud,
            (Operation::Send, Position::Only, HeaderSet::DETH, true),
        ),
        0x65 => (
            Transport::Ud,
            (
                Operation::SendWithImmediate,
                Position::Only,
                HeaderSet::DETH.union(HeaderSet::IMM_DT),
                true,
            ),
        ),
        0x00..=0x1F => match describe_low(op, true) {
            Some(e) => (Transport::Rc, e),
            None => return None,
        },
        0x20..=0x3F => match describe_low(op & 0x1F, false) {
            Some(e) => (Transport::Uc, e),
            None => return None,
        },
        _ => return None,
    };
    let mut offsets = [u8::MAX; HeaderSet::ORDER.len()];
    let mut at = 0;
    let mut i = 0;
    while i < HeaderSet::ORDER.len() {
        let (h, len) = HeaderSet::ORDER[i];
        if headers.contains(h) {
            offsets[i] = at as u8;
            at += len;
        }
        i += 1;
    }
    Some(OpcodeInfo {
        name: NAMES[op as usize],
        transport,
        operation,
        position,
        headers,
        has_payload,
        ext_len: headers.wire_len(),
        offsets,
    })
}

/// Names, indexed by opcode; only entries the table defines are read.
static NAMES: [&str; 256] = {
    let mut n = ["UNKNOWN"; 256];
    n[0x00] = "RC_SEND_FIRST";
    n[0x01] = "RC_SEND_MIDDLE";
    n[0x02] = "RC_SEND_LAST";
    n[0x03] = "RC_SEND_LAST_WITH_IMMEDIATE";
    n[0x04] = "RC_SEND_ONLY";
    n[0x05] = "RC_SEND_ONLY_WITH_IMMEDIATE";
    n[0x06] = "RC_RDMA_WRITE_FIRST";
    n[0x07] = "RC_RDMA_WRITE_MIDDLE";
    n[0x08] = "RC_RDMA_WRITE_LAST";
    n[0x09] = "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE";
    n[0x0A] = "RC_RDMA_WRITE_ONLY";
    n[0x0B] = "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE";
    n[0x0C] = "RC_RDMA_READ_REQUEST";
    n[0x0D] = "RC_RDMA_READ_RESPONSE_FIRST";
    n[0x0E] = "RC_RDMA_READ_RESPONSE_MIDDLE";
    n[0x0F] = "RC_RDMA_READ_RESPONSE_LAST";
    n[0x10] = "RC_RDMA_READ_RESPONSE_ONLY";
    n[0x11] = "RC_ACKNOWLEDGE";
    n[0x12] = "RC_ATOMIC_ACKNOWLEDGE";
    n[0x13] = "RC_COMPARE_SWAP";
    n[0x14] = "RC_FETCH_ADD";
    n[0x16] = "RC_SEND_LAST_WITH_INVALIDATE";
    n[0x17] = "RC_SEND_ONLY_WITH_INVALIDATE";
    n[0x18] = "RC_CC_CONTROL";
    n[0x20] = "UC_SEND_FIRST";
    n[0x21] = "UC_SEND_MIDDLE";
    n[0x22] = "UC_SEND_LAST";
    n[0x23] = "UC_SEND_LAST_WITH_IMMEDIATE";
    n[0x24] = "UC_SEND_ONLY";
    n[0x25] = "UC_SEND_ONLY_WITH_IMMEDIATE";
    n[0x26] = "UC_RDMA_WRITE_FIRST";
    n[0x27] = "UC_RDMA_WRITE_MIDDLE";
    n[0x28] = "UC_RDMA_WRITE_LAST";
    n[0x29] = "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE";
    n[0x2A] = "UC_RDMA_WRITE_ONLY";
    n[0x2B] = "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE";
    n[0x64] = "UD_SEND_ONLY";
    n[0x65] = "UD_SEND_ONLY_WITH_IMMEDIATE";
    n[0x81] = "CNP";
    n
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_every_rc_uc_ud_opcode_and_cnp() {
        assert_eq!(Opcode::all().filter(|o| o.0 < 0x20).count(), 24);
        assert_eq!(
            Opcode::all()
                .filter(|o| (0x20..0x40).contains(&o.0))
                .count(),
            12
        );
        assert_eq!(Opcode::all().count(), 24 + 12 + 2 + 1);
        for op in Opcode::all() {
            assert_ne!(op.name(), "UNKNOWN", "{:#04x}", op.0);
        }
    }

    #[test]
    fn reserved_and_unsupported_opcodes_are_unknown() {
        for op in [
            0x15, 0x19, 0x1F, 0x2C, 0x40, 0x60, 0x63, 0x66, 0x80, 0xA0, 0xFF,
        ] {
            assert!(Opcode(op).info().is_none(), "{op:#04x}");
        }
    }

    #[test]
    fn header_layouts_follow_the_ibta_table() {
        let h = |op: Opcode| op.info().unwrap().headers;
        assert_eq!(h(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).wire_len(), 20);
        assert_eq!(h(Opcode::RC_ATOMIC_ACKNOWLEDGE).wire_len(), 12);
        assert_eq!(h(Opcode::RC_COMPARE_SWAP).wire_len(), 28);
        assert_eq!(h(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).wire_len(), 12);
        assert_eq!(h(Opcode::CNP).wire_len(), 16);
        assert_eq!(h(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE), HeaderSet::NONE);
        let ack = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(ack.offset_of(HeaderSet::AETH), Some(0));
        assert_eq!(ack.offset_of(HeaderSet::ATOMIC_ACK_ETH), Some(4));
        assert_eq!(ack.offset_of(HeaderSet::RETH), None);
        let ud = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(ud.offset_of(HeaderSet::IMM_DT), Some(8));
        assert_eq!(ud.ext_len, 12);
        let read = Opcode::RC_RDMA_READ_REQUEST.info().unwrap();
        assert!(!read.has_payload);
        assert_eq!(read.operation, Operation::RdmaReadRequest);
        let uc = Opcode::UC_RDMA_WRITE_FIRST.info().unwrap();
        assert_eq!(
            (uc.transport, uc.position),
            (Transport::Uc, Position::First)
        );
    }
}
