//! A whole RoCE v2 datagram: IP, UDP and the RoCE packet with its ICRC.

use crate::error::{Result, room};
use crate::ip::{IPV6_HEADER_LEN, UDP_HEADER_LEN, udp6_checksum};
use crate::{Error, IpHeader, RoceHeaders, RocePacket, UdpHeader, icrc};

/// An IP datagram carrying UDP, decoded down to the UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpUdp<'a> {
    /// The IP header.
    pub ip: IpHeader,
    /// The UDP header.
    pub udp: UdpHeader,
    /// Exactly the IP datagram (Ethernet padding after it is cut off).
    packet: &'a [u8],
}

impl<'a> IpUdp<'a> {
    /// Decodes an IP datagram at the start of `buf` (trailing bytes beyond the IP length are
    /// ignored). A datagram of another protocol is [`Error::NotUdp`].
    pub fn parse(buf: &'a [u8]) -> Result<IpUdp<'a>> {
        let (ip, total) = IpHeader::parse(buf)?;
        let packet = &buf[..total];
        let udp = UdpHeader::parse(&packet[ip.header_len()..])?;
        Ok(IpUdp { ip, udp, packet })
    }

    /// The IP datagram, headers included.
    pub fn packet(&self) -> &'a [u8] {
        self.packet
    }

    /// The UDP payload.
    pub fn payload(&self) -> &'a [u8] {
        &self.packet[self.ip.header_len() + UDP_HEADER_LEN..]
    }

    /// Decodes the UDP payload as RoCE v2 and verifies its ICRC: the full receive check.
    pub fn roce(&self) -> Result<RocePacket<'a>> {
        let roce = RocePacket::parse(self.payload())?;
        let computed = icrc::compute(self.packet)?;
        if computed != roce.icrc {
            return Err(Error::IcrcMismatch {
                found: roce.icrc,
                computed,
            });
        }
        Ok(roce)
    }
}

/// Encodes a complete RoCE v2 datagram into `buf`: IP header (IPv4 checksum filled in), UDP
/// header (checksum 0 on IPv4 as RoCE NICs send it; computed on IPv6, where it is mandatory),
/// the RoCE packet and its ICRC. Returns the datagram's length.
pub fn emit_datagram(
    ip: &IpHeader,
    udp: &UdpHeader,
    roce: &RoceHeaders,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    let ip_len = ip.header_len();
    let roce_at = ip_len + UDP_HEADER_LEN;
    let total = roce_at + roce.wire_len(payload.len())?;
    room(buf, total)?;
    let buf = &mut buf[..total];
    roce.emit(payload, &mut buf[roce_at..])?;
    ip.emit(total, buf)?;
    udp.emit(total - ip_len, &mut buf[ip_len..])?;
    icrc::write(buf)?;
    if let IpHeader::V6(h) = ip {
        debug_assert_eq!(ip_len, IPV6_HEADER_LEN);
        let sum = udp6_checksum(&h.src, &h.dst, &buf[ip_len..]);
        buf[ip_len + 6..ip_len + 8].copy_from_slice(&sum.to_be_bytes());
    }
    Ok(total)
}
