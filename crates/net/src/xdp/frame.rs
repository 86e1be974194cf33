//! The headers of a frame on an XDP link: Ethernet, IPv4 without options, UDP. Written for
//! every frame sent, checked for every frame received; where the XDP program looks is in
//! [`field`]. No unsafe code.

use std::net::{SocketAddr, SocketAddrV4};

use sluice_wire::{
    ETHERNET_HEADER_LEN, ETHERTYPE_IPV4, EthernetHeader, IPV4_HEADER_LEN, IpHeader, IpUdp,
    Ipv4Header, UDP_HEADER_LEN, UdpHeader,
};

use crate::sys::InMsg;

/// Ethernet, IPv4 (no options) and UDP headers.
pub(super) const HEADERS_LEN: usize = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN;

/// Where the fields the XDP program reads lie in a frame (byte offsets from its start).
pub(super) mod field {
    use std::ops::Range;

    use sluice_wire::{ETHERNET_HEADER_LEN as ETH, IPV4_HEADER_LEN as IP};

    /// The Ethernet type.
    pub(in super::super) const ETHERTYPE: Range<usize> = 12..14;
    /// IPv4's version and header length (0x45: version 4, five words, no options).
    pub(in super::super) const IP_VERSION_IHL: usize = ETH;
    /// IPv4's protocol (17: UDP).
    pub(in super::super) const IP_PROTOCOL: usize = ETH + 9;
    /// IPv4's destination address.
    pub(in super::super) const IP_DST: Range<usize> = ETH + 16..ETH + 20;
    /// UDP's destination port (after an IPv4 header without options).
    pub(in super::super) const UDP_DST_PORT: Range<usize> = ETH + IP + 2..ETH + IP + 4;
}

/// Writes the Ethernet, IPv4 and UDP headers of a frame carrying a `roce_len`-byte RoCE
/// packet: IPv4 with Don't Fragment, identification 0 (which the ICRC is computed for), TTL
/// 64, the header checksum; UDP without a checksum (RoCE v2 has the ICRC).
pub(super) fn write_headers(
    frame: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: SocketAddrV4,
    dst: SocketAddrV4,
    tos: u8,
    roce_len: usize,
) {
    let ethernet = EthernetHeader {
        dst: dst_mac,
        src: src_mac,
        ethertype: ETHERTYPE_IPV4,
    };
    let ip = IpHeader::V4(Ipv4Header {
        src: *src.ip(),
        dst: *dst.ip(),
        tos,
        identification: 0,
        dont_fragment: true,
        ttl: 64,
    });
    let udp = UdpHeader {
        src_port: src.port(),
        dst_port: dst.port(),
    };
    let udp_len = UDP_HEADER_LEN + roce_len;
    let (eth_buf, rest) = frame.split_at_mut(ETHERNET_HEADER_LEN);
    let (ip_buf, udp_buf) = rest.split_at_mut(IPV4_HEADER_LEN);
    ethernet
        .emit(eth_buf)
        .and_then(|()| ip.emit(IPV4_HEADER_LEN + udp_len, ip_buf))
        .and_then(|()| udp.emit(udp_len, udp_buf))
        .expect("`frame` holds the headers, and a frame is far under 65,535 bytes");
}

/// The sender and RoCE packet of a received frame, if it is an IPv4 UDP datagram (no IP
/// options, not a fragment, header checksum right, lengths that agree) to `local`.
pub(super) fn parse_frame(frame: &[u8], local: SocketAddrV4) -> Option<(InMsg, &[u8])> {
    let (ethernet, datagram) = EthernetHeader::parse(frame).ok()?;
    if ethernet.ethertype != ETHERTYPE_IPV4 {
        return None;
    }
    let datagram = IpUdp::parse(datagram).ok()?;
    let IpHeader::V4(ip) = datagram.ip else {
        return None;
    };
    if ip.dst != *local.ip() || datagram.udp.dst_port != local.port() {
        return None;
    }
    let roce = datagram.payload();
    let msg = InMsg {
        src: SocketAddr::V4(SocketAddrV4::new(ip.src, datagram.udp.src_port)),
        len: roce.len(),
        segment: roce.len().max(1),
        tos: ip.tos,
        arrived_ns: 0,
        ip_id: Some(ip.identification),
    };
    Some((msg, roce))
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use sluice_wire::internet_checksum;

    use super::*;

    const ETH: usize = ETHERNET_HEADER_LEN;

    const A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 4791);
    const B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 200), 4791);
    const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn frame(roce: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; HEADERS_LEN + roce.len()];
        write_headers(&mut f, MAC_A, MAC_B, A, B, 0x6a, roce.len());
        f[HEADERS_LEN..].copy_from_slice(roce);
        f
    }

    /// A frame as written is read back as sent: who sent it, its TOS, its RoCE bytes.
    #[test]
    fn a_written_frame_parses_back() {
        let roce: Vec<u8> = (0..40u8).collect();
        let f = frame(&roce);
        assert_eq!(&f[0..6], &MAC_B);
        assert_eq!(&f[6..12], &MAC_A);
        assert_eq!(
            internet_checksum(&f[ETH..ETH + IPV4_HEADER_LEN], 0),
            0,
            "checksum"
        );
        assert_eq!(f[ETH + 6], 0x40, "Don't Fragment");
        let (msg, bytes) = parse_frame(&f, B).expect("parses");
        assert_eq!(bytes, &roce[..]);
        assert_eq!(msg.src, SocketAddr::V4(A));
        assert_eq!((msg.tos, msg.len, msg.segment), (0x6a, 40, 40));
        assert_eq!(msg.ip_id, Some(0));
    }

    /// Frames that are not an IPv4 UDP datagram to this device's address and port, or whose
    /// headers disagree with their length, are refused, never read past their end.
    #[test]
    fn frames_not_for_the_device_or_malformed_are_refused() {
        let good = frame(&[7u8; 40]);
        assert!(parse_frame(&good, A).is_none(), "another address");
        assert!(
            parse_frame(&good, SocketAddrV4::new(*B.ip(), 9)).is_none(),
            "another port"
        );
        // One byte changed, the IP header checksum made right again (so that each case is
        // refused for its own reason, not the checksum).
        let mutate = |at: usize, v: u8| {
            let mut f = good.clone();
            f[at] = v;
            let ip = &mut f[ETH..ETH + IPV4_HEADER_LEN];
            ip[10..12].fill(0);
            let sum = internet_checksum(ip, 0);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            f
        };
        assert!(parse_frame(&mutate(12, 0x86), B).is_none(), "not IPv4");
        assert!(parse_frame(&mutate(ETH, 0x46), B).is_none(), "options");
        assert!(parse_frame(&mutate(ETH + 9, 6), B).is_none(), "TCP");
        let mut bad_sum = good.clone();
        bad_sum[ETH + 8] = 1;
        assert!(parse_frame(&bad_sum, B).is_none(), "checksum");
        assert!(
            parse_frame(&mutate(ETH + 8, 1), B).is_some(),
            "TTL alone is fine"
        );
        assert!(parse_frame(&mutate(ETH + 6, 0x20), B).is_none(), "fragment");
        assert!(
            parse_frame(&mutate(ETH + 3, 0xff), B).is_none(),
            "longer than the frame"
        );
        assert!(parse_frame(&mutate(ETH + 25, 1), B).is_none(), "UDP length");
        for len in 0..good.len() {
            assert!(parse_frame(&good[..len], B).is_none(), "cut to {len}");
        }
        // Ethernet padding after the datagram is left out.
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 20]);
        assert_eq!(parse_frame(&padded, B).unwrap().1, &[7u8; 40]);
    }

    /// Every prefix and every byte flip of a frame parses without a panic, and what parses
    /// lies inside the frame.
    #[test]
    fn mangled_frames_never_panic() {
        let good = frame(&[1u8; 60]);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut f = good.clone();
            for k in 0..(rng % 4) as usize {
                let at = ((rng >> (8 + 8 * k)) as usize) % f.len();
                f[at] ^= (rng >> (40 + k)) as u8 | 1;
            }
            f.truncate((rng >> 32) as usize % (f.len() + 1));
            if let Some((msg, roce)) = parse_frame(&f, B) {
                assert_eq!(msg.len, roce.len());
                assert!(roce.len() + HEADERS_LEN <= f.len());
            }
        }
    }

    /// The offsets the XDP program reads at are where `write_headers` puts those fields.
    #[test]
    fn the_program_s_fields_are_where_the_headers_put_them() {
        let f = frame(&[0u8; 8]);
        assert_eq!(f[field::ETHERTYPE], [0x08, 0x00]);
        assert_eq!(f[field::IP_VERSION_IHL], 0x45);
        assert_eq!(f[field::IP_PROTOCOL], 17);
        assert_eq!(f[field::IP_DST], B.ip().octets());
        assert_eq!(f[field::UDP_DST_PORT], B.port().to_be_bytes());
        assert_eq!(
            field::UDP_DST_PORT.end + 4,
            HEADERS_LEN,
            "then length and checksum"
        );
    }

    /// Every length of RoCE packet and every TOS byte written is read back as written.
    #[test]
    fn written_headers_round_trip_at_every_length() {
        for len in [0usize, 1, 12, 28, 1024, 4096 + 28, 9014 - HEADERS_LEN] {
            let roce: Vec<u8> = (0..len).map(|i| i as u8).collect();
            for tos in [0u8, 0x02, 0x6a, 0xff] {
                let mut f = vec![0u8; HEADERS_LEN + len];
                write_headers(&mut f, MAC_A, MAC_B, A, B, tos, len);
                f[HEADERS_LEN..].copy_from_slice(&roce);
                let (msg, bytes) = parse_frame(&f, B).expect("parses");
                assert_eq!(bytes, &roce[..], "len {len}");
                assert_eq!((msg.tos, msg.len, msg.src), (tos, len, SocketAddr::V4(A)));
                assert_eq!(msg.segment, len.max(1));
                assert_eq!(msg.arrived_ns, 0, "no kernel stamp on a link frame");
            }
        }
    }

    /// An IPv4 header length other than five words is refused: shorter than a header, or
    /// with options, which the XDP program passes to the kernel and the link never takes.
    #[test]
    fn a_bad_ip_header_length_is_refused() {
        let good = frame(&[3u8; 40]);
        for version_ihl in [0x40, 0x44, 0x46, 0x4f, 0x55, 0x65] {
            let mut f = good.clone();
            f[field::IP_VERSION_IHL] = version_ihl;
            let ip = &mut f[ETH..ETH + IPV4_HEADER_LEN];
            ip[10..12].fill(0);
            let sum = internet_checksum(ip, 0);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            assert!(parse_frame(&f, B).is_none(), "version/IHL {version_ihl:#x}");
        }
        // An IP total length shorter than its own headers.
        let mut f = good.clone();
        f[ETH + 2..ETH + 4].copy_from_slice(&20u16.to_be_bytes());
        assert!(parse_frame(&f, B).is_none(), "total length 20");
        // A frame with another destination MAC is still this device's if its IP and port
        // are (the interface filtered MACs already): the link reads what reaches it.
        let mut f = good.clone();
        f[0..6].copy_from_slice(&[0xff; 6]);
        assert!(parse_frame(&f, B).is_some());
        assert!(parse_frame(&f, SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 4), 4791)).is_none());
    }
}
