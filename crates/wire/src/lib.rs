//! RoCE v2 on the wire.
//!
//! Everything a RoCE v2 packet can carry, decoded from and encoded to byte slices without
//! allocating: the BTH and every extension header of the RC, UC and UD transports and the CNP
//! ([`Bth`], [`ExtHeaders`], [`Aeth`]), Sluice's negotiated congestion-control extension
//! header ([`Ccx`]), the opcode table ([`Opcode::info`]), 24-bit PSN
//! arithmetic ([`Psn`]), the ICRC ([`icrc`]), IPv4/IPv6/UDP framing ([`IpUdp`],
//! [`emit_datagram`]), Ethernet, and capture files ([`pcap`]).
//!
//! Decoders take `&[u8]` from the network and never panic: every malformation is an
//! [`Error`] that says what was wrong. Encoders write into a caller's buffer.
//!
//! ```
//! use sluice_wire::*;
//! use std::net::Ipv4Addr;
//!
//! let ip = IpHeader::V4(Ipv4Header {
//!     src: Ipv4Addr::new(10, 0, 0, 1),
//!     dst: Ipv4Addr::new(10, 0, 0, 2),
//!     tos: 0x6A, // DSCP 26, ECT(0)
//!     identification: 0,
//!     dont_fragment: true,
//!     ttl: 64,
//! });
//! let udp = UdpHeader { src_port: 0xC001, dst_port: ROCE_V2_PORT };
//! let roce = RoceHeaders {
//!     bth: Bth { ack_req: true, ..Bth::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(42)) },
//!     ccx: None,
//!     ext: ExtHeaders::default(),
//! };
//! let mut buf = [0u8; 1500];
//! let len = emit_datagram(&ip, &udp, &roce, b"hello", &mut buf)?;
//!
//! let datagram = IpUdp::parse(&buf[..len])?;
//! let packet = datagram.roce()?; // decodes and verifies the ICRC
//! assert_eq!(packet.payload, b"hello");
//! assert_eq!(packet.bth.psn, Psn::new(42));
//! # Ok::<(), sluice_wire::Error>(())
//! ```

#![warn(missing_docs)]

mod aeth;
mod bth;
mod ccx;
mod ccx_declared;
mod datagram;
mod error;
mod ethernet;
mod ext;
mod homa;
pub mod icrc;
mod ip;
mod opcode;
mod packet;
pub mod pcap;
mod priority;
mod probe;
mod psn;
mod size;

pub use aeth::{AETH_LEN, Aeth, Credits, NakCode, RnrTimer, Syndrome};
pub use bth::{BTH_LEN, Bth, DEFAULT_PKEY};
pub use ccx::{
    CCX_COVERED_LEN, CCX_MAX_LEN, CCX_TVER, Ccx, CcxLayout, IntHop, IntPath, MAX_INT_HOPS,
    delay_timestamps,
};
pub use ccx_declared::{
    Coverage, DECLARED_BODY_MAX, DeclareError, DeclaredCcx, DeclaredLayout, DeclaredTag, Field,
    FieldSpec, LAYOUT_DECLARED, LayoutOffer,
};
pub use datagram::{IpUdp, emit_datagram};
pub use error::{Error, Layer, Result};
pub use ethernet::{ETHERNET_HEADER_LEN, ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthernetHeader};
pub use ext::{AtomicAckEth, AtomicEth, CcControl, CcControlKind, Deth, ExtHeaders, Reth};
pub use homa::{HOMA_BUSY_KIND, HOMA_GRANT_KIND, HOMA_RESEND_KIND, HomaControl};
pub use ip::{
    IPV4_HEADER_LEN, IPV6_HEADER_LEN, IpHeader, Ipv4Header, Ipv6Header, ROCE_V2_PORT,
    UDP_HEADER_LEN, UdpHeader, internet_checksum, udp6_checksum,
};
pub use opcode::{HeaderSet, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{ICRC_LEN, RoceHeaders, RocePacket, pad_for};
pub use priority::{
    DEFAULT_DSCP_BASE, MAX_DSCP_BASE, PRIORITY_LEVELS, check_dscp_base, priority_tos, tos_priority,
};
pub use probe::{PROBE_KIND, PROBE_REPLY_KIND, PathProbeHeader};
pub use psn::Psn;
pub use size::{
    ETHERNET_FCS_LEN, ETHERNET_GAP_LEN, ETHERNET_MIN_FRAME_LEN, ETHERNET_PREAMBLE_LEN, link_len,
    roce_link_len,
};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
