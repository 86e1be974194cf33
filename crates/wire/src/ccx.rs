//! Sluice's congestion-control extension header (CCX): what a control law needs that RoCE v2
//! has no field for (per-packet timestamps, INT records from switches, credit a receiver
//! grants), carried right after the BTH, before the IBTA extension headers, as SwCC proposes.
//!
//! A packet carries a CCX when its BTH transport version (TVer) is 1. Only queue pairs whose
//! two ends agreed on a layout at connection setup send one; a standard RoCE peer drops
//! packets with TVer 1, so nothing misreads it. Without a CCX the wire is plain RoCE v2.
//!
//! ```text
//!  byte 0: length of the CCX in 4-byte words, this byte included (1..=16: 4..=64 bytes)
//!  byte 1: layout (1 = timestamps, 2 = INT, 3 = credit, 4 = declared by a law: see
//!          `ccx_declared.rs`, whose bytes 2 and 3 are its id and ICRC coverage)
//!  byte 2: layout-specific count (timestamps: 1 if echo_ns is set; INT: hop records present;
//!          credit: 0)
//!  byte 3: reserved, 0
//!  4..   : the layout's fields, big-endian
//!
//!  timestamps (20 bytes): tx_ns u64   the sender's clock (ns) as the packet left
//!                         echo_ns u64 in a response: the tx_ns of the request it answers,
//!                                     plus the time the responder held that request, so
//!                                     that arrival - echo_ns is the network's round trip
//!                                     (count 1); zero and not set in a request (count 0)
//!  INT (64 bytes, always): 5 hop slots of 12 bytes, first hop first, `count` of them filled:
//!                         tx_bytes u32, ts_ns u32, qlen u16 (in 256-byte units, rounded up,
//!                         saturating), rate u16 (100 Mbit/s units)
//!  credit (12 bytes):     granted_total u64  the credit in bytes the sender of this packet has
//!                                            granted its peer since the queue pair connected
//!                                            (wrapping), on every packet of the queue pair
//! ```
//!
//! The ICRC covers the length and layout bytes and, for timestamps and INT, treats the rest of
//! the CCX like the IP TTL: replaced by ones, because switches write INT records into it in
//! flight and a driver moves the times to the moment the packet leaves. An INT CCX is
//! therefore sent full size with no hop filled, so that a switch never changes a length. A
//! credit CCX is covered whole: nothing on the way may change it, and a corrupted total
//! would hand a sender credit nobody granted. The payload and every IBTA header stay covered.

use crate::Error;
use crate::ccx_declared::{DeclaredCcx, DeclaredTag, LAYOUT_DECLARED};
use crate::error::{Layer, Result, need, room};
use crate::ext::{read_u32, read_u64};

/// BTH transport version that announces a CCX after the BTH.
pub const CCX_TVER: u8 = 1;

/// The longest CCX, in bytes.
pub const CCX_MAX_LEN: usize = 64;

/// Bytes at the start of every CCX that the ICRC covers (length and layout); a layout may
/// cover more ([`CcxLayout::icrc_covered_len`]).
pub const CCX_COVERED_LEN: usize = 2;

/// The most switch hops a telemetry record covers (HPCC's 42-byte header holds five).
pub const MAX_INT_HOPS: usize = 5;

const LAYOUT_TIMESTAMPS: u8 = 1;
const LAYOUT_INT: u8 = 2;
const LAYOUT_CREDIT: u8 = 3;
const TIMESTAMPS_LEN: usize = 20;
const CREDIT_LEN: usize = 12;
const INT_HOP_LEN: usize = 12;
const INT_LEN: usize = 4 + MAX_INT_HOPS * INT_HOP_LEN;

/// What one switch egress port stamped into a packet (HPCC's INT record). Counters and the
/// timestamp wrap: a law only ever uses differences between two records of the same hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IntHop {
    /// Queue length at the egress port when the packet left, in bytes. The wire carries it in
    /// [`IntHop::QLEN_UNIT`] units, rounded up and saturating at 16 MiB.
    pub qlen_bytes: u32,
    /// Bytes the port had transmitted (wrapping).
    pub tx_bytes: u32,
    /// When the packet left the port, in nanoseconds (wrapping).
    pub ts_ns: u32,
    /// The port's line rate, in units of 100 Mbit/s.
    pub rate_100mbps: u16,
}

impl IntHop {
    /// The granularity of a queue length on the wire, in bytes.
    pub const QLEN_UNIT: u32 = 256;

    /// The port's line rate in bit/s.
    pub fn rate_bps(&self) -> u64 {
        u64::from(self.rate_100mbps) * 100_000_000
    }

    fn emit(&self, b: &mut [u8]) {
        let qlen = self
            .qlen_bytes
            .div_ceil(Self::QLEN_UNIT)
            .min(u32::from(u16::MAX)) as u16;
        b[0..4].copy_from_slice(&self.tx_bytes.to_be_bytes());
        b[4..8].copy_from_slice(&self.ts_ns.to_be_bytes());
        b[8..10].copy_from_slice(&qlen.to_be_bytes());
        b[10..12].copy_from_slice(&self.rate_100mbps.to_be_bytes());
    }

    fn read(b: &[u8]) -> IntHop {
        IntHop {
            tx_bytes: read_u32(b),
            ts_ns: read_u32(&b[4..]),
            qlen_bytes: u32::from(u16::from_be_bytes([b[8], b[9]])) * Self::QLEN_UNIT,
            rate_100mbps: u16::from_be_bytes([b[10], b[11]]),
        }
    }
}

/// The telemetry of a packet's path: up to [`MAX_INT_HOPS`] records, first hop first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IntPath {
    /// The hop records; only the first `len` are filled.
    pub hops: [IntHop; MAX_INT_HOPS],
    /// How many of `hops` are filled.
    pub len: u8,
}

impl IntPath {
    /// The filled hop records, first hop first.
    pub fn hops(&self) -> &[IntHop] {
        &self.hops[..usize::from(self.len).min(MAX_INT_HOPS)]
    }

    /// Appends a hop's record; false if the path is already full.
    pub fn push(&mut self, hop: IntHop) -> bool {
        let n = usize::from(self.len);
        if n >= MAX_INT_HOPS {
            return false;
        }
        self.hops[n] = hop;
        self.len += 1;
        true
    }
}

/// Which CCX layout a queue pair's two ends agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcxLayout {
    /// Send and echo timestamps, for RTT samples without the peer's host delay.
    Timestamps,
    /// INT records written by switches on the path.
    Int,
    /// The credit total the sender has granted its peer.
    Credit,
    /// A layout a law declared itself (`crate::DeclaredLayout`), as its packets name it.
    Declared(DeclaredTag),
}

impl CcxLayout {
    /// Every fixed layout.
    pub const ALL: [CcxLayout; 3] = [CcxLayout::Timestamps, CcxLayout::Int, CcxLayout::Credit];

    /// The layout's name in options and messages.
    pub const fn name(self) -> &'static str {
        match self {
            CcxLayout::Timestamps => "timestamps",
            CcxLayout::Int => "int",
            CcxLayout::Credit => "credit",
            CcxLayout::Declared(_) => "declared",
        }
    }

    /// The layout called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<CcxLayout> {
        CcxLayout::ALL.into_iter().find(|l| l.name() == name)
    }

    /// The layout's number on the wire (byte 1).
    pub const fn wire(self) -> u8 {
        match self {
            CcxLayout::Timestamps => LAYOUT_TIMESTAMPS,
            CcxLayout::Int => LAYOUT_INT,
            CcxLayout::Credit => LAYOUT_CREDIT,
            CcxLayout::Declared(_) => LAYOUT_DECLARED,
        }
    }

    /// The fixed layout with wire number `n`, if there is one (a declared layout is known
    /// by its whole first word, not its number).
    pub const fn from_wire(n: u8) -> Option<CcxLayout> {
        match n {
            LAYOUT_TIMESTAMPS => Some(CcxLayout::Timestamps),
            LAYOUT_INT => Some(CcxLayout::Int),
            LAYOUT_CREDIT => Some(CcxLayout::Credit),
            _ => None,
        }
    }

    /// Bytes a CCX of this layout takes on the wire.
    pub const fn wire_len(self) -> usize {
        match self {
            CcxLayout::Timestamps => TIMESTAMPS_LEN,
            CcxLayout::Int => INT_LEN,
            CcxLayout::Credit => CREDIT_LEN,
            CcxLayout::Declared(tag) => tag.len as usize,
        }
    }

    /// Bytes at the start of a CCX of this layout that the ICRC covers; it masks the rest.
    /// Telemetry may change in flight; a credit total may not.
    pub const fn icrc_covered_len(self) -> usize {
        match self {
            CcxLayout::Timestamps | CcxLayout::Int => CCX_COVERED_LEN,
            CcxLayout::Credit => CREDIT_LEN,
            CcxLayout::Declared(tag) => tag.covered as usize,
        }
    }
}

/// Bytes the ICRC covers of the CCX `ccx` (at least its first word), `len` bytes long: what
/// its layout says, the declared coverage byte for a declared layout (bounded by `len`).
pub(crate) fn icrc_covered(ccx: &[u8], len: usize) -> usize {
    if ccx[1] == LAYOUT_DECLARED {
        return usize::from(ccx[3]).clamp(4, len);
    }
    CcxLayout::from_wire(ccx[1]).map_or(CCX_COVERED_LEN, |l| l.icrc_covered_len().min(len))
}

/// A decoded CCX.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ccx {
    /// `echo_ns`: in a response, the `tx_ns` of the request it answers plus the time the
    /// responder held that request.
    Timestamps {
        /// The sender's clock, in ns, as the packet left.
        tx_ns: u64,
        /// In a response: the request's `tx_ns` plus the time the responder held it.
        echo_ns: Option<u64>,
    },
    /// INT records of the path so far.
    Int(IntPath),
    /// The total credit in bytes the sender of the packet has granted its peer (wrapping): a
    /// total, not an increment, so a lost packet is made up by the next and a duplicate or
    /// late one adds nothing.
    Credit {
        /// Bytes granted since the queue pair connected (wrapping).
        granted_total: u64,
    },
    /// A header of a layout a law declared: its fields as bytes, read and written through
    /// the layout's [`crate::Field`]s.
    Declared(DeclaredCcx),
}

impl Ccx {
    /// Which layout this is.
    pub const fn layout(&self) -> CcxLayout {
        match self {
            Ccx::Timestamps { .. } => CcxLayout::Timestamps,
            Ccx::Int(_) => CcxLayout::Int,
            Ccx::Credit { .. } => CcxLayout::Credit,
            Ccx::Declared(d) => CcxLayout::Declared(d.tag()),
        }
    }

    /// Bytes this CCX takes on the wire.
    pub const fn wire_len(&self) -> usize {
        self.layout().wire_len()
    }

    /// Decodes the CCX at the start of `buf` (the bytes after a BTH with TVer 1); returns it
    /// and its length. Never panics.
    pub fn parse(buf: &[u8]) -> Result<(Ccx, usize)> {
        need(buf, 4, Layer::Extension)?;
        let len = usize::from(buf[0]) * 4;
        if buf[1] == LAYOUT_DECLARED {
            if !(4..=CCX_MAX_LEN).contains(&len) {
                return Err(Error::BadCcx("length outside 4..=64 bytes"));
            }
            need(buf, len, Layer::Extension)?;
            let word = [buf[0], buf[1], buf[2], buf[3]];
            return Ok((Ccx::Declared(DeclaredCcx::parse(word, buf)?), len));
        }
        let layout = CcxLayout::from_wire(buf[1]).ok_or(Error::BadCcx("unknown layout"))?;
        if len != layout.wire_len() {
            return Err(Error::BadCcx("length does not match the layout"));
        }
        need(buf, len, Layer::Extension)?;
        let ccx = match layout {
            CcxLayout::Timestamps => Ccx::Timestamps {
                tx_ns: read_u64(&buf[4..]),
                echo_ns: match buf[2] {
                    0 => None,
                    1 => Some(read_u64(&buf[12..])),
                    _ => return Err(Error::BadCcx("a timestamp header echoes at most one")),
                },
            },
            CcxLayout::Int => {
                let count = buf[2];
                if usize::from(count) > MAX_INT_HOPS {
                    return Err(Error::BadCcx("more INT hops than the header holds"));
                }
                let mut path = IntPath {
                    len: count,
                    ..IntPath::default()
                };
                for (i, hop) in path.hops[..usize::from(count)].iter_mut().enumerate() {
                    *hop = IntHop::read(&buf[4 + i * INT_HOP_LEN..]);
                }
                Ccx::Int(path)
            }
            CcxLayout::Credit => {
                if buf[2] != 0 {
                    return Err(Error::BadCcx("a credit header has no count"));
                }
                Ccx::Credit {
                    granted_total: read_u64(&buf[4..]),
                }
            }
            CcxLayout::Declared(_) => return Err(Error::BadCcx("unknown layout")),
        };
        Ok((ccx, len))
    }

    /// Encodes at the start of `buf`; returns the length written. Unused INT slots are zero.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.wire_len();
        room(buf, len)?;
        let out = &mut buf[..len];
        out.fill(0);
        out[0] = (len / 4) as u8;
        out[1] = self.layout().wire();
        match self {
            Ccx::Timestamps { tx_ns, echo_ns } => {
                out[4..12].copy_from_slice(&tx_ns.to_be_bytes());
                if let Some(echo) = echo_ns {
                    out[2] = 1;
                    out[12..20].copy_from_slice(&echo.to_be_bytes());
                }
            }
            Ccx::Int(path) => {
                let hops = path.hops();
                out[2] = hops.len() as u8;
                for (i, hop) in hops.iter().enumerate() {
                    hop.emit(&mut out[4 + i * INT_HOP_LEN..]);
                }
            }
            Ccx::Credit { granted_total } => {
                out[4..12].copy_from_slice(&granted_total.to_be_bytes());
            }
            Ccx::Declared(d) => d.emit(out),
        }
        Ok(len)
    }
}

/// Moves the times of an encoded timestamp CCX `ns` later, in place: `tx_ns`, and `echo_ns`
/// when set (the responder's hold then grows by as much). `ccx` is the packet from the CCX
/// on (the bytes after its BTH). A driver calls it on a packet that leaves later than the
/// time it was built with, so that the times say when it left, as a NIC stamps on the wire.
/// The ICRC masks these bytes and stays valid. Returns whether there was a timestamp CCX to
/// change (nothing is changed otherwise).
pub fn delay_timestamps(ccx: &mut [u8], ns: u64) -> bool {
    if ccx.len() < TIMESTAMPS_LEN
        || usize::from(ccx[0]) * 4 != TIMESTAMPS_LEN
        || ccx[1] != LAYOUT_TIMESTAMPS
    {
        return false;
    }
    let fields = if ccx[2] == 1 { 4..20 } else { 4..12 };
    for at in fields.step_by(8) {
        let t = read_u64(&ccx[at..]).wrapping_add(ns);
        ccx[at..at + 8].copy_from_slice(&t.to_be_bytes());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delaying_moves_both_times_of_a_timestamp_header_only() {
        let mut buf = [0u8; 24];
        let response = Ccx::Timestamps {
            tx_ns: 1_000,
            echo_ns: Some(400),
        };
        response.emit(&mut buf).unwrap();
        assert!(delay_timestamps(&mut buf, 25));
        let moved = Ccx::Timestamps {
            tx_ns: 1_025,
            echo_ns: Some(425),
        };
        assert_eq!(Ccx::parse(&buf), Ok((moved, 20)));
        let request = Ccx::Timestamps {
            tx_ns: u64::MAX,
            echo_ns: None,
        };
        request.emit(&mut buf).unwrap();
        assert!(delay_timestamps(&mut buf, 2));
        let wrapped = Ccx::Timestamps {
            tx_ns: 1,
            echo_ns: None,
        };
        assert_eq!(Ccx::parse(&buf), Ok((wrapped, 20)));
        assert_eq!(buf[12..20], [0; 8], "no echo, nothing written there");
        // INT records and short or foreign bytes are left alone.
        let mut int = [0u8; 64];
        Ccx::Int(IntPath::default()).emit(&mut int).unwrap();
        let before = int;
        assert!(!delay_timestamps(&mut int, 5));
        assert_eq!(int, before);
        assert!(!delay_timestamps(&mut buf[..19], 5));
    }

    #[test]
    fn layouts_are_found_by_their_names() {
        for layout in CcxLayout::ALL {
            assert_eq!(CcxLayout::from_name(layout.name()), Some(layout));
            assert_eq!(CcxLayout::from_wire(layout.wire()), Some(layout));
        }
        assert_eq!(CcxLayout::from_name("none"), None);
        assert_eq!(CcxLayout::from_name("INT"), None);
    }

    #[test]
    fn timestamps_known_bytes() {
        let ccx = Ccx::Timestamps {
            tx_ns: 0x0102_0304_0506_0708,
            echo_ns: Some(9),
        };
        let mut buf = [0xEEu8; 24];
        assert_eq!(ccx.emit(&mut buf), Ok(20));
        assert_eq!(&buf[..4], &[5, 1, 1, 0]);
        assert_eq!(&buf[4..12], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&buf[12..20], &[0, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(buf[20], 0xEE, "nothing written past the header");
        assert_eq!(Ccx::parse(&buf), Ok((ccx, 20)));
        // A request echoes nothing, and a time of zero is a time like any other.
        let request = Ccx::Timestamps {
            tx_ns: 0,
            echo_ns: None,
        };
        request.emit(&mut buf).unwrap();
        assert_eq!(
            &buf[..20],
            &[[5, 1, 0, 0], [0; 4], [0; 4], [0; 4], [0; 4]].concat()[..]
        );
        assert_eq!(Ccx::parse(&buf), Ok((request, 20)));
    }

    #[test]
    fn int_round_trips_with_qlen_rounded_up_to_its_unit() {
        let mut path = IntPath::default();
        for i in 0..3u32 {
            path.push(IntHop {
                qlen_bytes: i * 1000,
                tx_bytes: u32::MAX - i,
                ts_ns: 77 + i,
                rate_100mbps: 1000,
            });
        }
        let mut buf = [0u8; 64];
        assert_eq!(Ccx::Int(path).emit(&mut buf), Ok(64));
        assert_eq!(&buf[..4], &[16, 2, 3, 0]);
        let (back, 64) = Ccx::parse(&buf).unwrap() else {
            panic!("an INT CCX is 64 bytes");
        };
        let Ccx::Int(back) = back else {
            panic!("layout changed")
        };
        assert_eq!(back.len, 3);
        for (i, (a, b)) in path.hops().iter().zip(back.hops()).enumerate() {
            assert_eq!(
                (a.tx_bytes, a.ts_ns, a.rate_100mbps),
                (b.tx_bytes, b.ts_ns, b.rate_100mbps)
            );
            // 0 -> 0, 1000 -> 1024, 2000 -> 2048: never reads emptier than it was.
            assert_eq!(b.qlen_bytes, [0, 1024, 2048][i]);
        }
        // A queue beyond 16 MiB saturates rather than wrapping to a small one.
        let mut huge = IntPath::default();
        huge.push(IntHop {
            qlen_bytes: u32::MAX,
            ..IntHop::default()
        });
        Ccx::Int(huge).emit(&mut buf).unwrap();
        let (Ccx::Int(back), _) = Ccx::parse(&buf).unwrap() else {
            panic!("layout changed")
        };
        assert_eq!(back.hops[0].qlen_bytes, u32::from(u16::MAX) * 256);
    }

    #[test]
    fn credit_known_bytes() {
        let ccx = Ccx::Credit {
            granted_total: 0x0102_0304_0506_0708,
        };
        let mut buf = [0xEEu8; 16];
        assert_eq!(ccx.emit(&mut buf), Ok(12));
        assert_eq!(&buf[..12], &[3, 3, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(buf[12], 0xEE, "nothing written past the header");
        assert_eq!(Ccx::parse(&buf), Ok((ccx, 12)));
        assert_eq!(CcxLayout::Credit.icrc_covered_len(), 12, "covered whole");
        let mut counted = buf;
        counted[2] = 1;
        assert!(matches!(Ccx::parse(&counted), Err(Error::BadCcx(_))));
        assert!(matches!(
            Ccx::parse(&buf[..11]),
            Err(Error::Truncated { .. })
        ));
        // Not a timestamp header: a driver leaves it alone.
        let before = buf;
        assert!(!delay_timestamps(&mut buf, 5));
        assert_eq!(buf, before);
    }

    #[test]
    fn malformed_headers_are_refused() {
        let mut buf = [0u8; 64];
        Ccx::Timestamps {
            tx_ns: 1,
            echo_ns: Some(2),
        }
        .emit(&mut buf)
        .unwrap();
        assert!(matches!(
            Ccx::parse(&buf[..19]),
            Err(Error::Truncated { .. })
        ));
        assert!(matches!(
            Ccx::parse(&buf[..3]),
            Err(Error::Truncated { .. })
        ));
        let mut wrong_len = buf;
        wrong_len[0] = 6;
        assert!(matches!(Ccx::parse(&wrong_len), Err(Error::BadCcx(_))));
        let mut unknown = buf;
        unknown[1] = 9;
        assert!(matches!(Ccx::parse(&unknown), Err(Error::BadCcx(_))));
        let mut two_echoes = buf;
        two_echoes[2] = 2;
        assert!(matches!(Ccx::parse(&two_echoes), Err(Error::BadCcx(_))));
        Ccx::Int(IntPath::default()).emit(&mut buf).unwrap();
        buf[2] = 6;
        assert!(matches!(Ccx::parse(&buf), Err(Error::BadCcx(_))));
        assert!(matches!(
            Ccx::Int(IntPath::default()).emit(&mut [0u8; 63]),
            Err(Error::BufferTooSmall { .. })
        ));
    }
}
