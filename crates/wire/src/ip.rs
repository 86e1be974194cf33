//! IPv4, IPv6 and UDP headers as RoCE v2 uses them: no IPv4 options, no IPv6 extension
//! headers (Linux Soft-RoCE and RoCE NICs send neither, and the ICRC is defined without them).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::Error;
use crate::error::{Layer, Result, need, room};

/// Bytes in an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Bytes in an IPv6 header without extension headers.
pub const IPV6_HEADER_LEN: usize = 40;
/// Bytes in a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// The IANA UDP port of RoCE v2.
pub const ROCE_V2_PORT: u16 = 4791;
const PROTO_UDP: u8 = 17;

/// An IPv4 header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Header {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// The whole TOS byte: DSCP in the top six bits, ECN in the bottom two.
    pub tos: u8,
    /// Covered by the ICRC: RoCE senders use 0 with Don't Fragment set.
    pub identification: u16,
    /// The Don't Fragment flag.
    pub dont_fragment: bool,
    /// Time to live.
    pub ttl: u8,
}

/// An IPv6 header without extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Header {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// DSCP in the top six bits, ECN in the bottom two.
    pub traffic_class: u8,
    /// 20 bits.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

/// The network header of a RoCE v2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpHeader {
    /// IPv4.
    V4(Ipv4Header),
    /// IPv6.
    V6(Ipv6Header),
}

/// A UDP header; its length and checksum are derived when encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpHeader {
    /// Source port; RoCE v2 uses it as a flow label for ECMP.
    pub src_port: u16,
    /// Destination port: [`ROCE_V2_PORT`] for RoCE.
    pub dst_port: u16,
}

impl IpHeader {
    /// The header a datagram from `src` to `dst` leaves an unconnected Don't-Fragment UDP
    /// socket with, as far as the ICRC covers it: IPv4 when both addresses are (Don't
    /// Fragment, identification `ipv4_id`), else IPv6 with an IPv4 address mapped. The
    /// fields the ICRC masks are left at TOS 0 and TTL (hop limit) 64.
    pub fn between(src: IpAddr, dst: IpAddr, ipv4_id: u16) -> IpHeader {
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpHeader::V4(Ipv4Header {
                src,
                dst,
                tos: 0,
                identification: ipv4_id,
                dont_fragment: true,
                ttl: 64,
            }),
            (src, dst) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                IpHeader::V6(Ipv6Header {
                    src: v6(src),
                    dst: v6(dst),
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 64,
                })
            }
        }
    }

    /// The source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(h.src),
            IpHeader::V6(h) => IpAddr::V6(h.src),
        }
    }

    /// The destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(h.dst),
            IpHeader::V6(h) => IpAddr::V6(h.dst),
        }
    }

    /// The two ECN bits (0: not ECN-capable, 1/2: ECT, 3: congestion experienced).
    pub fn ecn(&self) -> u8 {
        match self {
            IpHeader::V4(h) => h.tos & 0x03,
            IpHeader::V6(h) => h.traffic_class & 0x03,
        }
    }

    /// Bytes in the header.
    pub const fn header_len(&self) -> usize {
        match self {
            IpHeader::V4(_) => IPV4_HEADER_LEN,
            IpHeader::V6(_) => IPV6_HEADER_LEN,
        }
    }

    /// Decodes the IP header at the start of `buf` and returns it with the length of the
    /// datagram it announces (header included). Bytes after that length (Ethernet padding)
    /// are allowed; a datagram longer than `buf` is [`Error::Truncated`].
    pub fn parse(buf: &[u8]) -> Result<(IpHeader, usize)> {
        match buf.first().map(|b| b >> 4) {
            Some(4) => parse_v4(buf),
            Some(6) => parse_v6(buf),
            Some(v) => Err(Error::BadIpVersion(v)),
            None => Err(Error::Truncated {
                layer: Layer::Ipv4,
                needed: 1,
                available: 0,
            }),
        }
    }

    /// Writes the header for a datagram of `total_len` bytes (header included) carrying UDP.
    pub fn emit(&self, total_len: usize, buf: &mut [u8]) -> Result<()> {
        room(buf, self.header_len())?;
        match self {
            IpHeader::V4(h) => {
                let total = u16::try_from(total_len)
                    .map_err(|_| Error::FieldRange("IPv4 datagram over 65535 bytes"))?;
                buf[0] = 0x45;
                buf[1] = h.tos;
                buf[2..4].copy_from_slice(&total.to_be_bytes());
                buf[4..6].copy_from_slice(&h.identification.to_be_bytes());
                buf[6..8]
                    .copy_from_slice(&(if h.dont_fragment { 0x4000u16 } else { 0 }).to_be_bytes());
                buf[8] = h.ttl;
                buf[9] = PROTO_UDP;
                buf[10..12].fill(0);
                buf[12..16].copy_from_slice(&h.src.octets());
                buf[16..20].copy_from_slice(&h.dst.octets());
                let sum = internet_checksum(&buf[..IPV4_HEADER_LEN], 0);
                buf[10..12].copy_from_slice(&sum.to_be_bytes());
            }
            IpHeader::V6(h) => {
                if h.flow_label >= 1 << 20 {
                    return Err(Error::FieldRange("IPv6 flow label is 20 bits"));
                }
                let payload = u16::try_from(total_len - IPV6_HEADER_LEN)
                    .map_err(|_| Error::FieldRange("IPv6 payload over 65535 bytes"))?;
                let word = (6u32 << 28) | (u32::from(h.traffic_class) << 20) | h.flow_label;
                buf[0..4].copy_from_slice(&word.to_be_bytes());
                buf[4..6].copy_from_slice(&payload.to_be_bytes());
                buf[6] = PROTO_UDP;
                buf[7] = h.hop_limit;
                buf[8..24].copy_from_slice(&h.src.octets());
                buf[24..40].copy_from_slice(&h.dst.octets());
            }
        }
        Ok(())
    }
}

fn parse_v4(buf: &[u8]) -> Result<(IpHeader, usize)> {
    need(buf, IPV4_HEADER_LEN, Layer::Ipv4)?;
    let ihl = usize::from(buf[0] & 0x0F) * 4;
    if ihl < IPV4_HEADER_LEN {
        return Err(Error::LengthMismatch("IPv4 header length under 20 bytes"));
    }
    if ihl != IPV4_HEADER_LEN {
        return Err(Error::UnsupportedIp("IPv4 options"));
    }
    let total = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
    if total < IPV4_HEADER_LEN {
        return Err(Error::LengthMismatch("IPv4 total length under its header"));
    }
    need(buf, total, Layer::Ipv4)?;
    if internet_checksum(&buf[..IPV4_HEADER_LEN], 0) != 0 {
        return Err(Error::Ipv4Checksum);
    }
    let flags = u16::from_be_bytes([buf[6], buf[7]]);
    if flags & 0x3FFF != 0 {
        return Err(Error::UnsupportedIp("IPv4 fragment"));
    }
    if buf[9] != PROTO_UDP {
        return Err(Error::NotUdp(buf[9]));
    }
    let header = Ipv4Header {
        src: Ipv4Addr::new(buf[12], buf[13], buf[14], buf[15]),
        dst: Ipv4Addr::new(buf[16], buf[17], buf[18], buf[19]),
        tos: buf[1],
        identification: u16::from_be_bytes([buf[4], buf[5]]),
        dont_fragment: flags & 0x4000 != 0,
        ttl: buf[8],
    };
    Ok((IpHeader::V4(header), total))
}

fn parse_v6(buf: &[u8]) -> Result<(IpHeader, usize)> {
    need(buf, IPV6_HEADER_LEN, Layer::Ipv6)?;
    let word = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let payload = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
    let total = IPV6_HEADER_LEN + payload;
    need(buf, total, Layer::Ipv6)?;
    if buf[6] != PROTO_UDP {
        return Err(Error::NotUdp(buf[6]));
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&buf[at..at + 16]);
        Ipv6Addr::from(a)
    };
    let header = Ipv6Header {
        src: addr(8),
        dst: addr(24),
        traffic_class: (word >> 20) as u8,
        flow_label: word & 0xF_FFFF,
        hop_limit: buf[7],
    };
    Ok((IpHeader::V6(header), total))
}

impl UdpHeader {
    /// Decodes the UDP header of a datagram whose UDP part is exactly `buf`.
    pub fn parse(buf: &[u8]) -> Result<UdpHeader> {
        need(buf, UDP_HEADER_LEN, Layer::Udp)?;
        let len = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
        if len != buf.len() {
            return Err(Error::LengthMismatch(
                "UDP length disagrees with the IP length",
            ));
        }
        Ok(UdpHeader {
            src_port: u16::from_be_bytes([buf[0], buf[1]]),
            dst_port: u16::from_be_bytes([buf[2], buf[3]]),
        })
    }

    /// Writes the header for `udp_len` bytes of UDP (header included) with a zero checksum.
    pub fn emit(&self, udp_len: usize, buf: &mut [u8]) -> Result<()> {
        room(buf, UDP_HEADER_LEN)?;
        let len = u16::try_from(udp_len)
            .map_err(|_| Error::FieldRange("UDP datagram over 65535 bytes"))?;
        buf[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        buf[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        buf[4..6].copy_from_slice(&len.to_be_bytes());
        buf[6..8].fill(0);
        Ok(())
    }
}

/// The UDP checksum over an IPv6 pseudo-header and `udp` (whose checksum field must be 0).
pub fn udp6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, udp: &[u8]) -> u16 {
    let mut sum = 0u32;
    for chunk in src.octets().chunks(2).chain(dst.octets().chunks(2)) {
        sum += u32::from(u16::from_be_bytes([chunk[0], chunk[1]]));
    }
    sum += udp.len() as u32 >> 16;
    sum += udp.len() as u32 & 0xFFFF;
    sum += u32::from(PROTO_UDP);
    match internet_checksum(udp, sum) {
        0 => 0xFFFF, // a computed zero is sent as all ones (RFC 768, RFC 8200)
        s => s,
    }
}

/// The one's-complement Internet checksum of `data`, starting from the partial sum `initial`.
pub fn internet_checksum(data: &[u8], initial: u32) -> u16 {
    let mut sum = u64::from(initial);
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum of a known IPv4 header (RFC 1071's arithmetic, checked by hand against
    /// Wikipedia's worked example); with it filled in, the header sums to zero.
    #[test]
    fn internet_checksum_of_a_known_ipv4_header() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&h, 0), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(internet_checksum(&h, 0), 0);
    }

    /// What a Don't-Fragment UDP socket sends with: IPv4 with DF and the identification
    /// asked for when both ends are IPv4, otherwise IPv6 with the IPv4 end mapped.
    #[test]
    fn between_gives_the_header_a_df_socket_sends_with() {
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(192, 168, 7, 200));
        let c: Ipv6Addr = "fe80::2".parse().unwrap();
        assert_eq!(
            IpHeader::between(IpAddr::V4(a), IpAddr::V4(b), 7),
            IpHeader::V4(Ipv4Header {
                src: a,
                dst: b,
                tos: 0,
                identification: 7,
                dont_fragment: true,
                ttl: 64,
            })
        );
        let v6 = Ipv6Header {
            src: a.to_ipv6_mapped(),
            dst: c,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        };
        assert_eq!(
            IpHeader::between(IpAddr::V4(a), IpAddr::V6(c), 7),
            IpHeader::V6(v6)
        );
        assert_eq!(
            IpHeader::between(IpAddr::V6(c), IpAddr::V4(a), 0),
            IpHeader::V6(Ipv6Header {
                src: c,
                dst: a.to_ipv6_mapped(),
                ..v6
            })
        );
    }
}
