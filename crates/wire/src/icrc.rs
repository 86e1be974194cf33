//! The invariant CRC (ICRC) that ends every RoCE v2 packet, computed exactly as Linux
//! Soft-RoCE (`rxe_icrc.c`) and RoCE NICs do.
//!
//! It is the Ethernet CRC-32 (reflected, polynomial 0x04C11DB7) over:
//! 8 bytes of 0xFF standing for the InfiniBand LRH, the IP header, the UDP header, the BTH,
//! the extension headers, the payload and the pad; not the ICRC itself. Fields that routers
//! may change are replaced by ones first: the IPv4 TOS, TTL and header checksum; the IPv6
//! traffic class, flow label and hop limit; the UDP checksum; BTH byte 4 (FECN, BECN and
//! reserved bits). The four ICRC bytes on the wire are the CRC least significant byte first.

use crate::error::{Layer, Result, need};
use crate::{BTH_LEN, Error, ICRC_LEN};

/// The CRC-32 of eight 0xFF bytes (the masked LRH): the state every ICRC starts from.
const LRH_CRC: u32 = 0x2144_DF1C;
const UDP_LEN: usize = 8;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;

/// Computes the ICRC of an IP datagram (IPv4 without options, or IPv6 without extension
/// headers) carrying UDP and a RoCE v2 packet. `ip_packet` is exactly the datagram, ending in
/// the four ICRC bytes, which are not covered.
#[inline]
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let (ip_len, layer) = match ip_packet.first().map(|b| b >> 4) {
        Some(4) => (IPV4_LEN, Layer::Ipv4),
        Some(6) => (IPV6_LEN, Layer::Ipv6),
        Some(v) => return Err(Error::BadIpVersion(v)),
        None => {
            return Err(Error::Truncated {
                layer: Layer::Ipv4,
                needed: 1,
                available: 0,
            });
        }
    };
    let fixed = ip_len + UDP_LEN + BTH_LEN;
    need(ip_packet, fixed + ICRC_LEN, layer)?;

    // Mask a copy of the fixed headers; the rest of the packet is hashed in place.
    let mut head = [0u8; IPV6_LEN + UDP_LEN + BTH_LEN];
    let head = &mut head[..fixed];
    head.copy_from_slice(&ip_packet[..fixed]);
    if ip_len == IPV4_LEN {
        if head[0] & 0x0F != 5 {
            return Err(Error::UnsupportedIp("IPv4 options"));
        }
        head[1] = 0xFF; // TOS
        head[8] = 0xFF; // TTL
        head[10] = 0xFF; // header checksum
        head[11] = 0xFF;
    } else {
        head[0] |= 0x0F; // traffic class and flow label
        head[1..4].fill(0xFF);
        head[7] = 0xFF; // hop limit
    }
    head[ip_len + 6] = 0xFF; // UDP checksum
    head[ip_len + 7] = 0xFF;
    head[ip_len + UDP_LEN + 4] = 0xFF; // BTH FECN, BECN, reserved

    let mut crc = crc32fast::Hasher::new_with_initial(LRH_CRC);
    crc.update(head);
    crc.update(&ip_packet[fixed..ip_packet.len() - ICRC_LEN]);
    Ok(crc.finalize())
}

/// Computes the ICRC of `ip_packet` and writes it into its last four bytes.
#[inline]
pub fn write(ip_packet: &mut [u8]) -> Result<u32> {
    let icrc = compute(ip_packet)?;
    let at = ip_packet.len() - ICRC_LEN;
    ip_packet[at..].copy_from_slice(&icrc.to_le_bytes());
    Ok(icrc)
}

/// Checks the ICRC carried in the last four bytes of `ip_packet`.
#[inline]
pub fn verify(ip_packet: &[u8]) -> Result<()> {
    let computed = compute(ip_packet)?;
    let at = ip_packet.len() - ICRC_LEN;
    let found = u32::from_le_bytes([
        ip_packet[at],
        ip_packet[at + 1],
        ip_packet[at + 2],
        ip_packet[at + 3],
    ]);
    if found != computed {
        return Err(Error::IcrcMismatch { found, computed });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second, table-driven CRC-32 from the `crc` crate over an explicitly masked copy.
    fn oracle(ip_packet: &[u8]) -> u32 {
        let mut masked = vec![0xFFu8; 8];
        masked.extend_from_slice(&ip_packet[..ip_packet.len() - 4]);
        let ip = if ip_packet[0] >> 4 == 4 { 20 } else { 40 };
        if ip == 20 {
            for i in [1, 8, 10, 11] {
                masked[8 + i] = 0xFF;
            }
        } else {
            masked[8] |= 0x0F;
            for i in [1, 2, 3, 7] {
                masked[8 + i] = 0xFF;
            }
        }
        for i in [ip + 6, ip + 7, ip + 12] {
            masked[8 + i] = 0xFF;
        }
        crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&masked)
    }

    #[test]
    fn lrh_seed_is_crc_of_eight_ones() {
        assert_eq!(
            crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&[0xFF; 8]),
            LRH_CRC
        );
    }

    #[test]
    fn matches_an_independent_crc_on_v4_and_v6() {
        for (version, len) in [(4u8, 20 + 8 + 12 + 100 + 4), (6, 40 + 8 + 12 + 64 + 4)] {
            let mut pkt: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            pkt[0] = (version << 4) | if version == 4 { 5 } else { 0 };
            assert_eq!(compute(&pkt).unwrap(), oracle(&pkt));
            write(&mut pkt).unwrap();
            verify(&pkt).unwrap();
            let last = pkt.len() - 5;
            pkt[last] ^= 1;
            assert!(matches!(verify(&pkt), Err(Error::IcrcMismatch { .. })));
        }
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc() {
        let mut pkt: Vec<u8> = (0..80u32).map(|i| (i * 7) as u8).collect();
        pkt[0] = 0x45;
        let before = compute(&pkt).unwrap();
        for i in [1, 8, 10, 11, 26, 27, 32] {
            pkt[i] ^= 0x5A;
        }
        assert_eq!(compute(&pkt).unwrap(), before);
        pkt[4] ^= 1; // the IPv4 identification is covered
        assert_ne!(compute(&pkt).unwrap(), before);
    }

    #[test]
    fn short_or_odd_input_is_an_error() {
        assert!(compute(&[]).is_err());
        assert!(compute(&[0x45; 43]).is_err());
        assert_eq!(compute(&[0x20; 80]), Err(Error::BadIpVersion(2)));
        assert_eq!(
            compute(&[0x46; 80]),
            Err(Error::UnsupportedIp("IPv4 options"))
        );
    }
}
