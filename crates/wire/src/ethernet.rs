//! Ethernet II framing, for captures. 802.1Q and 802.1ad VLAN tags are skipped on decode.

use crate::error::{Layer, Result, need, room};

/// Bytes in an Ethernet header without VLAN tags.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;

/// An Ethernet II header (after any VLAN tags, the inner EtherType).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetHeader {
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// Source MAC address.
    pub src: [u8; 6],
    /// EtherType of the payload (after any VLAN tags).
    pub ethertype: u16,
}

impl EthernetHeader {
    /// Decodes a frame and returns the header and what it carries.
    pub fn parse(frame: &[u8]) -> Result<(EthernetHeader, &[u8])> {
        need(frame, ETHERNET_HEADER_LEN, Layer::Ethernet)?;
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        src.copy_from_slice(&frame[6..12]);
        let mut at = 12;
        let mut ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
            at += 4;
            need(frame, at + 2, Layer::Ethernet)?;
            ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
        }
        Ok((
            EthernetHeader {
                dst,
                src,
                ethertype,
            },
            &frame[at + 2..],
        ))
    }

    /// Encodes the header (no VLAN tag) into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        room(buf, ETHERNET_HEADER_LEN)?;
        buf[0..6].copy_from_slice(&self.dst);
        buf[6..12].copy_from_slice(&self.src);
        buf[12..14].copy_from_slice(&self.ethertype.to_be_bytes());
        Ok(())
    }
}
