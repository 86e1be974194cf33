//! The invariant CRC (ICRC) that ends every RoCE v2 packet, computed exactly as Linux
//! Soft-RoCE (`rxe_icrc.c`) and RoCE NICs do.
//!
//! It is the Ethernet CRC-32 (reflected, polynomial 0x04C11DB7) over:
//! 8 bytes of 0xFF standing for the InfiniBand LRH, the IP header, the UDP header, the BTH,
//! the extension headers, the payload and the pad; not the ICRC itself. Fields that routers
//! may change are replaced by ones first: the IPv4 TOS, TTL and header checksum; the IPv6
//! traffic class, flow label and hop limit; the UDP checksum; BTH byte 4 (FECN, BECN and
//! reserved bits). The four ICRC bytes on the wire are the CRC least significant byte first.
//!
//! Sluice's congestion-control extension header (a BTH with TVer 1, see [`crate::Ccx`]) is
//! covered in its first two bytes (length and layout); for the telemetry layouts the rest of
//! it is replaced by ones, like the TTL, because switches write telemetry into it on the way.
//! A credit header is covered whole ([`crate::CcxLayout::icrc_covered_len`]).
//!
//! # Receiving on a UDP socket
//!
//! A receiver on an ordinary UDP socket gets the RoCE packet but not the IP and UDP headers
//! the ICRC covers. It rebuilds them from what the socket reports (addresses, ports, length)
//! and hashes the two parts with [`compute_split`]. On IPv6 that is the whole check. On IPv4
//! one covered field cannot be rebuilt: the identification, which Linux Soft-RoCE sends
//! non-zero and incrementing (and a UDP GSO sender gets one per segment). The receiver then
//! computes the ICRC with identification 0 and asks an [`Ipv4IdSolver`] whether some
//! identification explains the ICRC found on the wire; see there for the cost in detection
//! strength (a corrupted packet passes with probability about 2^-16 instead of 2^-32).

use core::net::SocketAddr;

use crate::error::{Layer, Result, need};
use crate::{BTH_LEN, CCX_MAX_LEN, CCX_TVER, Error, ICRC_LEN, IpHeader};

/// The CRC-32 of eight 0xFF bytes (the masked LRH): the state every ICRC starts from.
const LRH_CRC: u32 = 0x2144_DF1C;
const UDP_LEN: usize = 8;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;

/// The most bytes of IP and UDP headers [`masked_ip_udp`] writes (IPv6).
pub const MAX_IP_UDP_LEN: usize = IPV6_LEN + UDP_LEN;

/// Writes the IP and UDP headers of a RoCE v2 datagram from `src` to `dst` whose UDP payload
/// (BTH to ICRC) is `roce_len` bytes, as the ICRC sees them: those of
/// [`IpHeader::between`] with every field the ICRC masks already all ones, so none of them
/// (IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label and hop limit; UDP
/// checksum) is computed. Returns the length written (28 or 48), for [`compute_split`] or
/// [`compute_parts`]: what a datagram's sender and receiver pass there for each packet,
/// cheaper than emitting the real headers.
#[inline]
pub fn masked_ip_udp(
    src: SocketAddr,
    dst: SocketAddr,
    roce_len: usize,
    ipv4_id: u16,
    out: &mut [u8; MAX_IP_UDP_LEN],
) -> Result<usize> {
    let udp_len = u16::try_from(UDP_LEN + roce_len)
        .map_err(|_| Error::FieldRange("UDP datagram over 65535 bytes"))?;
    let ip_len = match IpHeader::between(src.ip(), dst.ip(), ipv4_id) {
        IpHeader::V4(h) => {
            let total = u16::try_from(IPV4_LEN + usize::from(udp_len))
                .map_err(|_| Error::FieldRange("IPv4 datagram over 65535 bytes"))?;
            let [t0, t1] = total.to_be_bytes();
            let [i0, i1] = h.identification.to_be_bytes();
            let flags = if h.dont_fragment { 0x40 } else { 0 };
            out[..12]
                .copy_from_slice(&[0x45, 0xFF, t0, t1, i0, i1, flags, 0, 0xFF, 17, 0xFF, 0xFF]);
            out[12..16].copy_from_slice(&h.src.octets());
            out[16..20].copy_from_slice(&h.dst.octets());
            IPV4_LEN
        }
        IpHeader::V6(h) => {
            let [l0, l1] = udp_len.to_be_bytes();
            out[..8].copy_from_slice(&[0x6F, 0xFF, 0xFF, 0xFF, l0, l1, 17, 0xFF]);
            out[8..24].copy_from_slice(&h.src.octets());
            out[24..40].copy_from_slice(&h.dst.octets());
            IPV6_LEN
        }
    };
    let udp = &mut out[ip_len..ip_len + UDP_LEN];
    udp[..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..].fill(0xFF);
    Ok(ip_len + UDP_LEN)
}

/// Computes the ICRC of an IP datagram (IPv4 without options, or IPv6 without extension
/// headers) carrying UDP and a RoCE v2 packet. `ip_packet` is exactly the datagram, ending in
/// the four ICRC bytes, which are not covered.
#[inline]
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let (ip_len, layer) = ip_version(ip_packet)?;
    let roce_at = ip_len + UDP_LEN;
    need(ip_packet, roce_at + BTH_LEN + ICRC_LEN, layer)?;
    let (ip_udp, roce) = ip_packet.split_at(roce_at);
    masked_crc(ip_udp, &roce[..roce.len() - ICRC_LEN], &[], &[])
}

/// Computes the ICRC of a datagram held in two parts: `ip_udp`, exactly the IP and UDP
/// headers (28 bytes for IPv4 without options, 48 for IPv6 without extension headers), and
/// `roce`, the UDP payload (BTH to pad, then the four ICRC bytes, which are not covered).
/// Masks the same fields as [`compute`] and gives the same value as [`compute`] over the
/// two parts joined.
///
/// A receiver on a UDP socket rebuilds `ip_udp` from the addresses, ports and length the
/// socket reports; the fields the ICRC masks need not be right.
#[inline]
pub fn compute_split(ip_udp: &[u8], roce: &[u8]) -> Result<u32> {
    check_ip_udp(ip_udp)?;
    need(roce, BTH_LEN, Layer::Bth)?;
    need(roce, BTH_LEN + ICRC_LEN, Layer::Extension)?;
    masked_crc(ip_udp, &roce[..roce.len() - ICRC_LEN], &[], &[])
}

/// [`compute_split`] over a RoCE packet held in three parts, `head ++ payload ++ tail`:
/// `head` from the BTH to the end of the extension headers (the CC extension header, if
/// any, whole), `payload`, and `tail`, the pad and then the four ICRC bytes (not covered).
/// A sender that hands the kernel its headers and the payload from where the payload lies
/// hashes them where they are, without joining them first (a short packet's parts are
/// copied together, after the masked headers: see [`IcrcInput`], which also splits this in
/// two steps for a caller with several packets).
#[inline]
pub fn compute_parts(ip_udp: &[u8], head: &[u8], payload: &[u8], tail: &[u8]) -> Result<u32> {
    let mut input = IcrcInput::new();
    input.prepare(ip_udp, head, payload, tail)?;
    Ok(input.crc(head, payload, tail))
}

/// Checks that `ip_udp` is exactly an IPv4 header without options or an IPv6 header, and a
/// UDP header.
#[inline]
fn check_ip_udp(ip_udp: &[u8]) -> Result<()> {
    let (ip_len, layer) = ip_version(ip_udp)?;
    if ip_len == IPV4_LEN && ip_udp[0] & 0x0F != 5 {
        return Err(Error::UnsupportedIp("IPv4 options"));
    }
    need(ip_udp, ip_len, layer)?;
    need(ip_udp, ip_len + UDP_LEN, Layer::Udp)?;
    if ip_udp.len() != ip_len + UDP_LEN {
        return Err(Error::LengthMismatch(
            "IP and UDP headers must be exactly 28 (IPv4) or 48 (IPv6) bytes",
        ));
    }
    Ok(())
}

/// The IP header length and layer announced by the version nibble of `buf[0]`.
#[inline]
fn ip_version(buf: &[u8]) -> Result<(usize, Layer)> {
    match buf.first().map(|b| b >> 4) {
        Some(4) => Ok((IPV4_LEN, Layer::Ipv4)),
        Some(6) => Ok((IPV6_LEN, Layer::Ipv6)),
        Some(v) => Err(Error::BadIpVersion(v)),
        None => Err(Error::Truncated {
            layer: Layer::Ipv4,
            needed: 1,
            available: 0,
        }),
    }
}

/// The ICRC over `ip_udp` (exactly the IP and UDP headers of the version in its first byte)
/// and the RoCE packet `head ++ payload ++ pad` without its ICRC, where `head` holds at
/// least the BTH and the whole CC extension header if there is one: the callers have
/// checked the lengths of `ip_udp` and the BTH.
#[inline(always)]
fn masked_crc(ip_udp: &[u8], head: &[u8], payload: &[u8], pad: &[u8]) -> Result<u32> {
    let mut input = IcrcInput::new();
    input.fill(Some(ip_udp), ip_udp.len(), head, payload, pad)?;
    Ok(input.hash(head, payload, pad))
}

/// The most bytes of masked headers and packet hashed as one copy (see [`IcrcInput`]).
const SHORT_PACKET: usize = 128;

/// One packet's ICRC in two steps: [`IcrcInput::prepare`] copies the headers the ICRC
/// masks fields of (IP, UDP, BTH) into a block of its own and masks them there, with the
/// rest of the packet when it is short (an ACK, a small message: one pass over a few dozen
/// bytes costs less than several); [`IcrcInput::crc`] hashes the block, then the rest of a
/// longer packet where it lies. [`compute_parts`] is the two at once.
///
/// Apart, they let a caller with several packets prepare the next packet's input while it
/// hashes this one's. The CRC reads its input 16 bytes at a time, and a read of bytes just
/// written in smaller pieces waits until the writes reach the cache (the stores cannot be
/// forwarded to the load); headers written a packet earlier have reached the cache by the
/// time they are hashed.
#[derive(Clone)]
pub struct IcrcInput {
    block: [u8; SHORT_PACKET],
    /// Bytes of `block` to hash.
    len: u8,
    /// The whole packet is in `block` (a short packet).
    whole: bool,
    /// The CC extension header's length, and how much of it the ICRC covers (0, 0: none).
    ccx_len: u8,
    ccx_covered: u8,
}

impl Default for IcrcInput {
    fn default() -> IcrcInput {
        IcrcInput::new()
    }
}

impl core::fmt::Debug for IcrcInput {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IcrcInput")
            .field("len", &self.len)
            .field("whole", &self.whole)
            .finish_non_exhaustive()
    }
}

impl IcrcInput {
    /// An input with nothing prepared yet.
    pub const fn new() -> IcrcInput {
        IcrcInput {
            block: [0; SHORT_PACKET],
            len: 0,
            whole: true,
            ccx_len: 0,
            ccx_covered: 0,
        }
    }

    /// Prepares the ICRC of the datagram whose IP and UDP headers are `ip_udp` (28 or 48
    /// bytes) and whose RoCE packet is `head ++ payload ++ tail`, as [`compute_parts`] takes
    /// them. Pass the same parts to [`IcrcInput::crc`]. On an error the input holds nothing
    /// to hash.
    #[inline]
    pub fn prepare(
        &mut self,
        ip_udp: &[u8],
        head: &[u8],
        payload: &[u8],
        tail: &[u8],
    ) -> Result<()> {
        (self.len, self.whole) = (0, true);
        check_ip_udp(ip_udp)?;
        need(head, BTH_LEN, Layer::Bth)?;
        need(tail, ICRC_LEN, Layer::Extension)?;
        let pad = &tail[..tail.len() - ICRC_LEN];
        self.fill(Some(ip_udp), ip_udp.len(), head, payload, pad)
    }

    /// [`IcrcInput::prepare`] for a datagram from `src` to `dst` under IPv4 identification
    /// `ipv4_id`, its IP and UDP headers those [`masked_ip_udp`] writes: written here in
    /// place, not copied in from the caller. Such a copy is a 16-byte load of bytes written
    /// a moment before in narrower stores, which cannot be forwarded to it: the load waits
    /// for them to reach the cache (55% of `prepare`'s time, `perf annotate`, the sending
    /// core of write-bw 64 KiB on loopback).
    #[inline]
    pub fn prepare_between(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        ipv4_id: u16,
        head: &[u8],
        payload: &[u8],
        tail: &[u8],
    ) -> Result<()> {
        (self.len, self.whole) = (0, true);
        need(head, BTH_LEN, Layer::Bth)?;
        need(tail, ICRC_LEN, Layer::Extension)?;
        let roce_len = head.len() + payload.len() + tail.len();
        let (ip_udp, _) = self
            .block
            .split_first_chunk_mut::<MAX_IP_UDP_LEN>()
            .expect("the block holds the longest IP and UDP headers");
        let ip_udp_len = masked_ip_udp(src, dst, roce_len, ipv4_id, ip_udp)?;
        self.fill(
            None,
            ip_udp_len,
            head,
            payload,
            &tail[..tail.len() - ICRC_LEN],
        )
    }

    /// The ICRC of the packet last prepared, given the same `head`, `payload` and `tail`.
    #[inline]
    pub fn crc(&self, head: &[u8], payload: &[u8], tail: &[u8]) -> u32 {
        let pad = &tail[..tail.len().saturating_sub(ICRC_LEN)];
        self.hash(head, payload, pad)
    }

    /// [`IcrcInput::prepare`] once the lengths of the IP and UDP headers (`ip_udp_len`: 28 or
    /// 48) and the BTH are checked, for the packet `head ++ payload ++ pad` without its
    /// ICRC. The headers are `ip_udp`, or with `None` already at the start of the block.
    #[inline(always)]
    fn fill(
        &mut self,
        ip_udp: Option<&[u8]>,
        ip_udp_len: usize,
        head: &[u8],
        payload: &[u8],
        pad: &[u8],
    ) -> Result<()> {
        // One copy of the code per header length, so that the header copies are of fixed
        // size.
        if ip_udp_len == IPV4_LEN + UDP_LEN {
            self.fill_of::<{ IPV4_LEN + UDP_LEN }>(ip_udp, head, payload, pad)
        } else {
            self.fill_of::<{ IPV6_LEN + UDP_LEN }>(ip_udp, head, payload, pad)
        }
    }

    /// [`IcrcInput::fill`] for headers of `HEADERS` bytes.
    #[inline(always)]
    fn fill_of<const HEADERS: usize>(
        &mut self,
        ip_udp: Option<&[u8]>,
        headers: &[u8],
        payload: &[u8],
        pad: &[u8],
    ) -> Result<()> {
        let ip_len = HEADERS - UDP_LEN;
        let head = &mut self.block[..HEADERS + BTH_LEN];
        if let Some(ip_udp) = ip_udp {
            head[..HEADERS].copy_from_slice(&ip_udp[..HEADERS]);
        }
        head[HEADERS..].copy_from_slice(&headers[..BTH_LEN]);
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
        head[HEADERS + 4] = 0xFF; // BTH FECN, BECN, reserved

        let rest = &headers[BTH_LEN..];
        let ccx = headers[1] & 0x0F == CCX_TVER;
        (self.ccx_len, self.ccx_covered) = (0, 0);
        if ccx {
            let ccx_len = rest.first().map_or(0, |&words| usize::from(words) * 4);
            if !(4..=CCX_MAX_LEN).contains(&ccx_len) || ccx_len > rest.len() {
                return Err(Error::BadCcx(
                    "length outside 4..=64 bytes or beyond the packet",
                ));
            }
            // What may change in flight is masked; what may not (a credit total) is covered.
            let covered = crate::ccx::icrc_covered(rest, ccx_len);
            (self.ccx_len, self.ccx_covered) = (ccx_len as u8, covered as u8);
        }
        // A short packet is copied whole after the masked headers and hashed in one call:
        // one pass over a few dozen bytes costs less than several calls.
        let short = HEADERS + BTH_LEN + rest.len() + payload.len() + pad.len();
        self.whole = short <= SHORT_PACKET && !ccx;
        let mut at = HEADERS + BTH_LEN;
        if self.whole {
            for part in [rest, payload, pad] {
                self.block[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
        }
        self.len = at as u8;
        Ok(())
    }

    /// Hashes the block and, unless it holds the whole packet, the rest of `headers` (past
    /// the BTH), `payload` and `pad` where they lie.
    #[inline(always)]
    fn hash(&self, headers: &[u8], payload: &[u8], pad: &[u8]) -> u32 {
        let mut crc = icrc_hasher();
        crc.update(&self.block[..usize::from(self.len)]);
        if self.whole {
            return crc.finalize();
        }
        let mut rest = headers.get(BTH_LEN..).unwrap_or_default();
        if self.ccx_len > 0 {
            let (ccx_len, covered) = (usize::from(self.ccx_len), usize::from(self.ccx_covered));
            crc.update(rest.get(..covered).unwrap_or_default());
            crc.update(&[0xFF; CCX_MAX_LEN][..ccx_len - covered]);
            rest = rest.get(ccx_len..).unwrap_or_default();
        }
        crc.update(rest);
        crc.update(payload);
        crc.update(pad);
        crc.finalize()
    }
}

/// A CRC-32 hasher in the state every ICRC starts from (after the masked LRH). crc32fast
/// chooses its kernel from the CPU's features each time a hasher is made, a cost paid on
/// every packet; one made once is copied instead.
#[inline]
fn icrc_hasher() -> crc32fast::Hasher {
    static START: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    START
        .get_or_init(|| crc32fast::Hasher::new_with_initial(LRH_CRC))
        .clone()
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

// GF(2) polynomials modulo the CRC-32 polynomial P, in the CRC's own reflected layout: bit 31
// of a `u32` is the coefficient of x^0, bit 0 that of x^31. A CRC value read this way is the
// remainder the CRC defines, so CRC values and these polynomials are the same `u32`s.

/// P without its x^32 term, reflected.
const POLY: u32 = 0xEDB8_8320;
/// The polynomial 1.
const ONE: u32 = 0x8000_0000;

/// `v` times x, modulo P.
#[inline(always)]
const fn mul_x(v: u32) -> u32 {
    (v >> 1) ^ (POLY & 0u32.wrapping_sub(v & 1))
}

/// `v` divided by x, modulo P (x is invertible because P has a constant term): the inverse
/// of [`mul_x`].
const fn div_x(v: u32) -> u32 {
    if v & ONE != 0 {
        ((v ^ POLY) << 1) | 1
    } else {
        v << 1
    }
}

/// `a` times `b`, modulo P.
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut power = 0;
    while power < 32 {
        // b is the original b times x^power.
        product ^= b & 0u32.wrapping_sub((a >> (31 - power)) & 1);
        b = mul_x(b);
        power += 1;
    }
    product
}

/// `X_INV_POW2[i]` is x^(-2^i) modulo P.
const X_INV_POW2: [u32; 32] = {
    let mut table = [0; 32];
    table[0] = div_x(ONE);
    let mut i = 1;
    while i < 32 {
        table[i] = mul_mod(table[i - 1], table[i - 1]);
        i += 1;
    }
    table
};

/// x^(-e) modulo P, in at most one multiplication per bit of `e`.
fn x_inv_pow(e: u32) -> u32 {
    let mut result = ONE;
    for (bit, factor) in X_INV_POW2.iter().enumerate() {
        if e >> bit == 0 {
            break;
        }
        if (e >> bit) & 1 != 0 {
            result = mul_mod(result, *factor);
        }
    }
    result
}

/// Where the identification sits in the IPv4 header (big-endian, bytes 4 and 5).
const IPV4_ID_AT: usize = 4;
/// The shortest datagram the solver accepts: IPv4, UDP, BTH and ICRC.
const MIN_IPV4_DATAGRAM: usize = IPV4_LEN + UDP_LEN + BTH_LEN + ICRC_LEN;
/// How many datagram lengths an [`Ipv4IdSolver`] keeps a solved system for.
const SOLVER_WAYS: usize = 4;

/// The solved linear system for one datagram length: the linear map from the ICRC difference
/// D = icrc(id = 0) XOR icrc(id = x) to x, with a 16-bit residue that is zero exactly when D
/// is the difference of some identification. Stored as eight tables, one per nibble of D.
#[derive(Clone, Copy)]
struct IdSystem {
    /// `nibbles[i][v]` is the image of `v << (4 * i)`: identification in the high 16 bits,
    /// residue in the low 16.
    nibbles: [[u32; 16]; 8],
}

impl IdSystem {
    const EMPTY: IdSystem = IdSystem {
        nibbles: [[0; 16]; 8],
    };

    /// The system for IPv4 datagrams of `datagram_len` bytes, which is at least
    /// `MIN_IPV4_DATAGRAM` and at most 65535.
    ///
    /// The message the CRC divides ends with `k = datagram_len - 6 - 4` bytes after the
    /// identification (the rest of the IP header to the pad; the ICRC is not covered), and
    /// the CRC of a message M is M x^32 mod P plus terms that cancel between two messages of
    /// the same length. Bytes are fed least significant bit first, so with id byte 4 = h and
    /// byte 5 = l, the difference identification x makes is
    /// D = q(x) x^E mod P with E = 32 + 8k and q = sum over bits b of l of x^(7-b), plus over
    /// bits b of h of x^(15-b): a polynomial of degree below 16. Then q = D x^(-E) mod P,
    /// and D comes from an identification iff that q has degree below 16 (unique, since the
    /// map is invertible). In the reflected layout q's coefficients of x^0..x^15 are bits
    /// 31..16: bits 16..23 hold h and bits 24..31 hold l, so x is the high half byte-swapped.
    fn new(datagram_len: usize) -> IdSystem {
        let after_id = (datagram_len - IPV4_ID_AT - 2 - ICRC_LEN) as u32;
        let exponent = 32 + 8 * after_id;
        // The image of x^j, for j = 0..32, is x^(j - E); x^j is bit 31 - j of D.
        let mut image = x_inv_pow(exponent);
        let mut columns = [0u32; 32];
        for bit in (0..32).rev() {
            let q = image;
            let id = ((q >> 16) as u16).swap_bytes();
            columns[bit] = (u32::from(id) << 16) | (q & 0xFFFF);
            image = mul_x(image);
        }
        let mut nibbles = [[0u32; 16]; 8];
        for (table, columns) in nibbles.iter_mut().zip(columns.chunks_exact(4)) {
            for v in 1..16usize {
                table[v] = table[v & (v - 1)] ^ columns[v.trailing_zeros() as usize];
            }
        }
        IdSystem { nibbles }
    }

    /// The identification in the high 16 bits and the residue in the low 16 bits.
    #[inline(always)]
    fn apply(&self, difference: u32) -> u32 {
        let mut out = 0;
        for (i, table) in self.nibbles.iter().enumerate() {
            out ^= table[((difference >> (4 * i)) & 0xF) as usize];
        }
        out
    }
}

/// Recovers the IPv4 identification an ICRC was computed over, for a receiver that could not
/// see it (a UDP socket does not report it).
///
/// The ICRC covers the IPv4 identification, which Linux Soft-RoCE sends non-zero and
/// incrementing, and which a UDP GSO sender gets anew on every segment. The CRC is linear over
/// GF(2), so for datagrams of one length the ICRC with identification x is the ICRC with
/// identification 0 XOR a term that depends only on x and the length, and that term is
/// different for every x. [`Ipv4IdSolver::solve`] inverts it: given the ICRC computed with
/// identification 0 and the one found on the wire, it finds the one identification that
/// explains the difference, or reports that none does.
///
/// # Assumptions
///
/// * The datagram is IPv4 without options (a 20-byte header) carrying UDP, and
///   `computed_with_id_zero` is the ICRC (as [`compute_split`] gives it) over a rebuilt
///   header equal to the sender's in every covered field except the identification (bytes 4
///   and 5, big-endian), which is 0: version and header length 0x45, the total length,
///   flags and fragment offset (Don't Fragment set and offset 0, as RoCE senders send them:
///   a receiver that does not know them must assume them), protocol 17, both addresses, both
///   ports and the UDP length. The TOS, TTL, header checksum and UDP checksum are masked and
///   need not be right.
/// * `datagram_len` is the IPv4 total length: header, UDP header, RoCE packet and ICRC.
///
/// # Detection strength
///
/// Accepting any of the 2^16 identifications spends 16 of the CRC's 32 bits: a corrupted
/// packet is accepted with probability about 2^-16 (1 in 65,536) instead of 2^-32, and the
/// CRC-32 guarantee of catching every error of up to 32 consecutive bits no longer holds.
/// Single flipped bits are still all caught in datagrams of up to 26,772 bytes (so at every
/// Ethernet MTU, jumbo frames included), anywhere after the identification, ICRC included;
/// in longer datagrams a few positions look exactly like another identification (the
/// first is 214,135 bits before the identification's last bit). A caller that can predict the
/// identification (the previous one from the same sender plus one, say) can compare the
/// returned value with its prediction to win some of that back. IPv6 has no such field:
/// check its ICRC directly.
///
/// # Cost
///
/// Per call, after the first for a length: eight table lookups. The solver keeps the system
/// for the four most recently used datagram lengths (a flow mostly sends one or two); a new
/// length costs about 20 polynomial multiplications to build. It never allocates.
///
/// ```
/// use sluice_wire::*;
/// use std::net::Ipv4Addr;
///
/// // A sender that writes identification 0xBEEF.
/// let ip = |identification| {
///     IpHeader::V4(Ipv4Header {
///         src: Ipv4Addr::new(10, 0, 0, 1),
///         dst: Ipv4Addr::new(10, 0, 0, 2),
///         tos: 0,
///         identification,
///         dont_fragment: true,
///         ttl: 64,
///     })
/// };
/// let udp = UdpHeader { src_port: 0xC001, dst_port: ROCE_V2_PORT };
/// let roce = RoceHeaders {
///     bth: Bth::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(7)),
///     ccx: None,
///     ext: ExtHeaders::default(),
/// };
/// let mut wire = [0u8; 128];
/// let len = emit_datagram(&ip(0xBEEF), &udp, &roce, b"payload", &mut wire)?;
///
/// // The receiver's socket hands over the UDP payload; it rebuilds the headers with
/// // identification 0 from the addresses, ports and length.
/// let payload = &wire[IPV4_HEADER_LEN + UDP_HEADER_LEN..len];
/// let mut head = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
/// ip(0).emit(head.len() + payload.len(), &mut head)?;
/// udp.emit(UDP_HEADER_LEN + payload.len(), &mut head[IPV4_HEADER_LEN..])?;
/// let computed = icrc::compute_split(&head, payload)?;
/// let found = RocePacket::parse(payload)?.icrc;
/// assert_ne!(computed, found);
///
/// let mut solver = icrc::Ipv4IdSolver::new();
/// assert_eq!(solver.solve(len, computed, found), Some(0xBEEF));
/// assert_eq!(solver.solve(len, computed, found ^ 1), None); // a corrupted ICRC
/// # Ok::<(), sluice_wire::Error>(())
/// ```
#[derive(Clone)]
pub struct Ipv4IdSolver {
    /// The datagram length each way holds the system for; 0 for an empty way.
    lens: [u32; SOLVER_WAYS],
    /// When each way was last used, in calls to [`Ipv4IdSolver::solve`] that needed a system.
    used: [u64; SOLVER_WAYS],
    clock: u64,
    systems: [IdSystem; SOLVER_WAYS],
}

impl Ipv4IdSolver {
    /// A solver with no length cached yet.
    pub const fn new() -> Ipv4IdSolver {
        Ipv4IdSolver {
            lens: [0; SOLVER_WAYS],
            used: [0; SOLVER_WAYS],
            clock: 0,
            systems: [IdSystem::EMPTY; SOLVER_WAYS],
        }
    }

    /// The identification that makes the ICRC of an IPv4 datagram of `datagram_len` bytes
    /// (its total length) equal to `found`, given `computed_with_id_zero`, its ICRC with
    /// identification 0. `Some(0)` when the two are equal; `Some(x)` when x is the one
    /// identification that explains the difference; `None` when none does (the packet is
    /// corrupted: reject it), or when `datagram_len` is shorter than an IPv4, UDP, BTH and
    /// ICRC (44 bytes) or longer than 65,535 bytes. See the type's documentation for what
    /// this assumes and what it costs in detection strength.
    #[inline]
    pub fn solve(
        &mut self,
        datagram_len: usize,
        computed_with_id_zero: u32,
        found: u32,
    ) -> Option<u16> {
        if !(MIN_IPV4_DATAGRAM..=usize::from(u16::MAX)).contains(&datagram_len) {
            return None;
        }
        let difference = computed_with_id_zero ^ found;
        if difference == 0 {
            return Some(0);
        }
        let solved = self.system(datagram_len).apply(difference);
        (solved & 0xFFFF == 0).then_some((solved >> 16) as u16)
    }

    /// The system for `datagram_len`, built in the least recently used way on a miss.
    #[inline]
    fn system(&mut self, datagram_len: usize) -> &IdSystem {
        let len = datagram_len as u32;
        self.clock += 1;
        let way = match self.lens.iter().position(|&l| l == len) {
            Some(way) => way,
            None => self.build(datagram_len),
        };
        self.used[way] = self.clock;
        &self.systems[way]
    }

    #[cold]
    fn build(&mut self, datagram_len: usize) -> usize {
        let mut way = 0;
        for (i, used) in self.used.iter().enumerate() {
            if *used < self.used[way] {
                way = i;
            }
        }
        self.lens[way] = datagram_len as u32;
        self.systems[way] = IdSystem::new(datagram_len);
        way
    }
}

impl Default for Ipv4IdSolver {
    fn default() -> Ipv4IdSolver {
        Ipv4IdSolver::new()
    }
}

impl core::fmt::Debug for Ipv4IdSolver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut cached = [0u32; SOLVER_WAYS];
        let mut n = 0;
        for &len in self.lens.iter().filter(|&&l| l != 0) {
            cached[n] = len;
            n += 1;
        }
        f.debug_struct("Ipv4IdSolver")
            .field("cached_lengths", &&cached[..n])
            .finish()
    }
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

    /// `pkt` as two buffers, the IP and UDP headers and the rest.
    fn split(pkt: &[u8]) -> (&[u8], &[u8]) {
        pkt.split_at(if pkt[0] >> 4 == 4 { 28 } else { 48 })
    }

    #[test]
    fn split_matches_whole_on_v4_and_v6() {
        for (version, ip) in [(4u8, 20), (6, 40)] {
            for roce_len in [16, 17, 20, 100, 1027] {
                let mut pkt: Vec<u8> = (0..ip + 8 + roce_len).map(|i| (i * 53 + 5) as u8).collect();
                pkt[0] = (version << 4) | if version == 4 { 5 } else { 0 };
                let (ip_udp, roce) = split(&pkt);
                assert_eq!(compute_split(ip_udp, roce).unwrap(), oracle(&pkt));
                assert_eq!(compute_split(ip_udp, roce), compute(&pkt));
            }
        }
    }

    #[test]
    fn packets_on_both_sides_of_the_short_copy_match_the_oracle() {
        // Whole packets up to `SHORT_PACKET` bytes of masked headers and packet are hashed as
        // one copy, longer ones in place: every length across the limit, cut in three parts
        // at a few places, against the independent CRC.
        for (version, ip) in [(4u8, 20), (6, 40)] {
            for roce_len in 16..SHORT_PACKET + 24 {
                let mut pkt: Vec<u8> = (0..ip + 8 + roce_len).map(|i| (i * 61 + 9) as u8).collect();
                pkt[0] = (version << 4) | if version == 4 { 5 } else { 0 };
                pkt[ip + 8 + 1] &= 0xF0; // TVer 0: no CC extension header
                let expected = oracle(&pkt);
                let (ip_udp, roce) = split(&pkt);
                assert_eq!(compute_split(ip_udp, roce), Ok(expected), "{roce_len}");
                let body = roce_len - ICRC_LEN;
                for (head, tail_at) in [(12, 12), (12, body), (16, body - 1), (body, body)] {
                    let (h, rest) = roce.split_at(head.min(body));
                    let (payload, tail) = rest.split_at(tail_at.max(head).min(body) - h.len());
                    assert_eq!(compute_parts(ip_udp, h, payload, tail), Ok(expected));
                }
            }
        }
    }

    #[test]
    fn parts_match_split_at_every_cut() {
        // Without a CC extension header, and with a 20-byte one (layout 1, TVer 1) that the
        // head must hold whole.
        for ccx in [0usize, 20] {
            let roce_len = 12 + ccx + 40 + 2 + ICRC_LEN;
            let mut pkt: Vec<u8> = (0..28 + roce_len).map(|i| (i * 29 + 3) as u8).collect();
            pkt[0] = 0x45;
            let (ip_udp, roce) = pkt.split_at_mut(28);
            if ccx > 0 {
                roce[1] = (roce[1] & 0xF0) | 1;
                roce[12] = (ccx / 4) as u8;
                roce[13] = 1;
            }
            let whole = compute_split(ip_udp, roce).unwrap();
            for head in 12 + ccx..=roce_len - ICRC_LEN {
                for tail_at in head..=roce_len - ICRC_LEN {
                    let (h, rest) = roce.split_at(head);
                    let (payload, tail) = rest.split_at(tail_at - head);
                    assert_eq!(compute_parts(ip_udp, h, payload, tail), Ok(whole));
                }
            }
            // Too short a head for its CC extension header, too short a tail for the ICRC.
            if ccx > 0 {
                let (h, rest) = roce.split_at(12 + ccx - 1);
                assert!(compute_parts(ip_udp, h, &[], rest).is_err());
            }
            let (h, tail) = roce.split_at(roce_len - 3);
            assert!(compute_parts(ip_udp, h, &[], tail).is_err());
        }
    }

    /// Inputs prepared one packet ahead in a ring of two, as the device uses them, each
    /// reused for packets of every kind in turn (short and long, with and without a CC
    /// extension header, IPv4 and IPv6): each gives its packet's ICRC, nothing of the
    /// packet it held before.
    #[test]
    fn inputs_prepared_ahead_and_reused_give_each_packets_icrc() {
        let mut packets = Vec::new();
        for (i, (ip_len, ccx, payload)) in [
            (20, 0, 8),
            (20, 20, 4096),
            (40, 0, 0),
            (20, 0, 4096),
            (40, 20, 16),
            (20, 0, 100),
            (40, 0, 2000),
        ]
        .into_iter()
        .enumerate()
        {
            let mut ip_udp: Vec<u8> = (0..ip_len + 8).map(|b| (b * 7 + i) as u8).collect();
            ip_udp[0] = if ip_len == 20 { 0x45 } else { 0x60 };
            let mut head: Vec<u8> = (0..12 + ccx).map(|b| (b * 13 + i) as u8).collect();
            head[1] = (head[1] & 0xF0) | u8::from(ccx > 0);
            if ccx > 0 {
                head[12] = (ccx / 4) as u8;
                head[13] = 1;
            }
            let payload: Vec<u8> = (0..payload).map(|b| (b * 31 + i) as u8).collect();
            let tail = vec![0u8; ICRC_LEN + (4 - payload.len() % 4) % 4];
            packets.push((ip_udp, head, payload, tail));
        }
        let mut ring = [IcrcInput::new(), IcrcInput::new()];
        let first = &packets[0];
        ring[0]
            .prepare(&first.0, &first.1, &first.2, &first.3)
            .unwrap();
        for round in 0..3 {
            for k in 0..packets.len() {
                let i = round * packets.len() + k;
                let next = &packets[(k + 1) % packets.len()];
                ring[(i + 1) % 2]
                    .prepare(&next.0, &next.1, &next.2, &next.3)
                    .unwrap();
                let (ip_udp, head, payload, tail) = &packets[k];
                // compute_parts runs a fresh input: the reused one must agree with it, and
                // both with the independent CRC where it applies (no CC extension header,
                // which `oracle` does not mask).
                let want = compute_parts(ip_udp, head, payload, tail).unwrap();
                assert_eq!(ring[i % 2].crc(head, payload, tail), want, "packet {k}");
                let joined = [&head[..], payload, tail].concat();
                assert_eq!(compute_split(ip_udp, &joined), Ok(want), "packet {k}");
                if head.len() == BTH_LEN {
                    let whole = [&ip_udp[..], &joined].concat();
                    assert_eq!(oracle(&whole), want, "packet {k}");
                }
            }
        }
        // A refused packet leaves nothing of the one before to hash.
        let (ip_udp, head, payload, tail) = &packets[1];
        let mut input = IcrcInput::new();
        input.prepare(ip_udp, head, payload, tail).unwrap();
        assert!(input.prepare(&ip_udp[..27], head, payload, tail).is_err());
        assert_eq!(
            input.crc(head, payload, tail),
            IcrcInput::new().crc(&[], &[], &[])
        );
    }

    /// The headers `masked_ip_udp` writes give the ICRC of the real ones (emitted with a
    /// TOS, TTL and checksum it does not compute) for IPv4, IPv6 and a mixed pair.
    #[test]
    fn masked_ip_udp_gives_the_icrc_of_the_real_headers() {
        use crate::{Ipv4Header, Ipv6Header, UdpHeader};
        let v4 = |a: [u8; 4], port| SocketAddr::from((a, port));
        let v6 = |a: core::net::Ipv6Addr, port| SocketAddr::from((a, port));
        let (a6, b6) = ("2001:db8::1".parse().unwrap(), "fe80::2".parse().unwrap());
        let pairs = [
            (v4([10, 0, 0, 1], 4791), v4([192, 168, 7, 200], 52_001)),
            (v6(a6, 1), v6(b6, 4791)),
            (v4([127, 0, 0, 1], 4791), v6(b6, 4791)),
        ];
        for (src, dst) in pairs {
            for (roce_len, id) in [(16usize, 0u16), (44, 1), (1077, 0xBEEF)] {
                // The real header, with the fields the ICRC masks set to other values.
                let ip = match IpHeader::between(src.ip(), dst.ip(), id) {
                    IpHeader::V4(h) => IpHeader::V4(Ipv4Header {
                        tos: 0x6A,
                        ttl: 3,
                        ..h
                    }),
                    IpHeader::V6(h) => IpHeader::V6(Ipv6Header {
                        traffic_class: 0x6A,
                        flow_label: 0x12345,
                        hop_limit: 3,
                        ..h
                    }),
                };
                let ip_len = ip.header_len();
                let mut pkt: Vec<u8> = (0..ip_len + 8 + roce_len)
                    .map(|i| (i * 41 + 9) as u8)
                    .collect();
                ip.emit(pkt.len(), &mut pkt).unwrap();
                let udp = UdpHeader {
                    src_port: src.port(),
                    dst_port: dst.port(),
                };
                udp.emit(8 + roce_len, &mut pkt[ip_len..]).unwrap();
                let mut head = [0u8; MAX_IP_UDP_LEN];
                let n = masked_ip_udp(src, dst, roce_len, id, &mut head).unwrap();
                assert_eq!(n, ip_len + 8);
                let roce = &pkt[n..];
                assert_eq!(
                    compute_split(&head[..n], roce),
                    compute(&pkt),
                    "{src} -> {dst}"
                );
                // Written in place by `prepare_between`, in one part or three, and in an
                // input that held another packet before.
                let (packet, icrc) = roce.split_at(roce_len - ICRC_LEN);
                let (bth, rest) = packet.split_at(BTH_LEN);
                let (payload, pad) = rest.split_at(rest.len() / 2);
                let pad_icrc = [pad, icrc].concat();
                let mut input = IcrcInput::new();
                for (head, payload, tail) in [(packet, &[][..], icrc), (bth, payload, &pad_icrc)] {
                    input
                        .prepare_between(src, dst, id, head, payload, tail)
                        .unwrap();
                    let crc = input.crc(head, payload, tail);
                    assert_eq!(Ok(crc), compute(&pkt), "{src} -> {dst}");
                }
                // The identification is covered (IPv4), and so is the length.
                let other = masked_ip_udp(src, dst, roce_len, id ^ 1, &mut head).unwrap();
                let differs = compute_split(&head[..other], roce) != compute(&pkt);
                assert_eq!(differs, ip_len == 20);
                masked_ip_udp(src, dst, roce_len + 4, id, &mut head).unwrap();
                assert_ne!(compute_split(&head[..n], roce), compute(&pkt));
            }
        }
        let mut head = [0u8; MAX_IP_UDP_LEN];
        let (src, dst) = pairs[0];
        assert!(masked_ip_udp(src, dst, 65_600, 0, &mut head).is_err());
    }

    #[test]
    fn split_rejects_wrong_lengths_without_panicking() {
        let bytes = [0u8; 128];
        for first in [0x45u8, 0x60, 0x46, 0x20] {
            for ip_udp_len in 0..=60 {
                for roce_len in 0..=24 {
                    let mut ip_udp = bytes[..ip_udp_len].to_vec();
                    if let Some(b) = ip_udp.first_mut() {
                        *b = first;
                    }
                    let exact = match first {
                        0x45 => ip_udp_len == 28,
                        0x60 => ip_udp_len == 48,
                        _ => false,
                    };
                    let ok = exact && roce_len >= 16;
                    let got = compute_split(&ip_udp, &bytes[..roce_len]);
                    assert_eq!(
                        got.is_ok(),
                        ok,
                        "{first:#x} {ip_udp_len} {roce_len}: {got:?}"
                    );
                }
            }
        }
        let roce = [0u8; 16];
        let truncated = |layer, needed, available| {
            Err(Error::Truncated {
                layer,
                needed,
                available,
            })
        };
        assert_eq!(compute_split(&[], &roce), truncated(Layer::Ipv4, 1, 0));
        assert_eq!(
            compute_split(&[0x45; 19], &roce),
            truncated(Layer::Ipv4, 20, 19)
        );
        assert_eq!(
            compute_split(&[0x45; 27], &roce),
            truncated(Layer::Udp, 28, 27)
        );
        assert_eq!(
            compute_split(&[0x60; 47], &roce),
            truncated(Layer::Udp, 48, 47)
        );
        assert!(matches!(
            compute_split(&[0x45; 29], &roce),
            Err(Error::LengthMismatch(_))
        ));
        assert_eq!(
            compute_split(&[0x46; 32], &roce),
            Err(Error::UnsupportedIp("IPv4 options"))
        );
        assert_eq!(
            compute_split(&[0x20; 28], &roce),
            Err(Error::BadIpVersion(2))
        );
        assert_eq!(
            compute_split(&[0x45; 28], &roce[..11]),
            truncated(Layer::Bth, 12, 11)
        );
        assert_eq!(
            compute_split(&[0x45; 28], &roce[..15]),
            truncated(Layer::Extension, 16, 15)
        );
    }

    /// The change identification `id` makes to the ICRC of an IPv4 datagram of `len` bytes,
    /// by brute force: the ICRC of two whole datagrams.
    fn id_term(len: usize, id: u16) -> u32 {
        let mut pkt = vec![0u8; len];
        pkt[0] = 0x45;
        let zero = compute(&pkt).unwrap();
        pkt[4..6].copy_from_slice(&id.to_be_bytes());
        compute(&pkt).unwrap() ^ zero
    }

    /// The rank over GF(2) of `vectors`.
    fn rank(vectors: &[u32]) -> usize {
        let mut rows = vectors.to_vec();
        let mut rank = 0;
        for bit in 0..32 {
            let Some(pivot) = (rank..rows.len()).find(|&r| rows[r] >> bit & 1 != 0) else {
                continue;
            };
            rows.swap(rank, pivot);
            for r in 0..rows.len() {
                if r != rank && rows[r] >> bit & 1 != 0 {
                    rows[r] ^= rows[rank];
                }
            }
            rank += 1;
        }
        rank
    }

    #[test]
    fn polynomial_arithmetic() {
        for v in [0, 1, ONE, POLY, 0x1234_5678, u32::MAX] {
            assert_eq!(div_x(mul_x(v)), v);
            assert_eq!(mul_x(div_x(v)), v);
            assert_eq!(mul_mod(v, ONE), v);
            assert_eq!(mul_mod(v, 0x0F0F_1234), mul_mod(0x0F0F_1234, v));
        }
        // x^(-2^i) times x^(2^i) is 1.
        for (i, inverse) in X_INV_POW2.iter().enumerate().take(12) {
            let x_pow = (0..1u32 << i).fold(ONE, |v, _| mul_x(v));
            assert_eq!(mul_mod(*inverse, x_pow), ONE, "2^{i}");
        }
        let x_pow_1000 = (0..1000).fold(ONE, |v, _| mul_x(v));
        assert_eq!(mul_mod(x_inv_pow(1000), x_pow_1000), ONE);
        assert_eq!(x_inv_pow(0), ONE);
    }

    /// The claim the solver rests on: for every length, the 16 identification bits change
    /// the ICRC by 16 linearly independent vectors, so the identification is unique. Checked
    /// for every length from the shortest datagram to 9000 bytes (a jumbo frame), with the
    /// basis carried from one length to the next by one zero byte (times x^8) and anchored by
    /// brute force at several lengths; the solver must invert every basis vector and a mix.
    #[test]
    fn the_identification_is_unique_for_every_length_to_9000() {
        let mut basis: [u32; 16] = core::array::from_fn(|j| id_term(MIN_IPV4_DATAGRAM, 1 << j));
        let mut solver = Ipv4IdSolver::new();
        for len in MIN_IPV4_DATAGRAM..=9000 {
            if matches!(len, 45 | 47 | 100 | 1500 | 4140 | 9000) {
                for (j, v) in basis.iter().enumerate() {
                    assert_eq!(*v, id_term(len, 1 << j), "length {len}, bit {j}");
                }
            }
            assert_eq!(rank(&basis), 16, "length {len}");
            for (j, v) in basis.iter().enumerate() {
                assert_eq!(solver.solve(len, 0, *v), Some(1 << j), "length {len}");
            }
            let id = (len as u16).wrapping_mul(40503) | 1;
            let term = (0..16)
                .filter(|j| id >> j & 1 != 0)
                .fold(0, |t, j| t ^ basis[j]);
            assert_eq!(solver.solve(len, 0xDEAD_BEEF, 0xDEAD_BEEF ^ term), Some(id));
            basis = basis.map(|v| (0..8).fold(v, |v, _| mul_x(v)));
        }
    }

    #[test]
    fn solves_the_longest_datagram() {
        let mut solver = Ipv4IdSolver::new();
        for id in [1, 0x8000, 0xBEEF, 0xFFFF] {
            assert_eq!(solver.solve(65535, 7, 7 ^ id_term(65535, id)), Some(id));
        }
        assert_eq!(
            rank(&core::array::from_fn::<u32, 16, _>(|j| id_term(
                65535,
                1 << j
            ))),
            16
        );
    }

    #[test]
    fn solver_edge_cases() {
        let mut solver = Ipv4IdSolver::new();
        assert_eq!(solver.solve(44, 5, 5), Some(0));
        assert_eq!(solver.solve(65535, 5, 5), Some(0));
        for len in [0, 1, 28, 43, 65536, usize::MAX] {
            assert_eq!(solver.solve(len, 5, 5), None, "{len}");
            assert_eq!(solver.solve(len, 5, 6), None, "{len}");
        }
        // Most differences come from no identification: about 2^-16 of them do.
        let accepted = (1..=100_000u32)
            .filter(|d| solver.solve(1000, 0, d.wrapping_mul(0x9E37_79B9)).is_some())
            .count();
        assert!(accepted <= 8, "{accepted}");
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_lengths() {
        let mut solver = Ipv4IdSolver::new();
        let lens = [100, 200, 300, 400, 500];
        let terms = lens.map(|len| id_term(len, 0x0102));
        let mut solve = |i: usize| {
            let got = solver.solve(lens[i], 0, terms[i]);
            assert_eq!(got, Some(0x0102));
            let mut cached = solver.lens;
            cached.sort_unstable();
            cached
        };
        for i in 0..4 {
            solve(i);
        }
        solve(0); // 100 is now the most recent; 200 the least
        assert_eq!(solve(4), [100, 300, 400, 500]);
        assert_eq!(solve(1), [100, 200, 400, 500]);
        // Whatever is cached, every length keeps solving right.
        for round in 0..3 {
            for i in (0..5).rev().chain(0..5) {
                solve((i + round) % 5);
            }
        }
        assert!(format!("{:?}", solver).contains("cached_lengths"));
    }

    /// The single-bit guarantee the solver's documentation states. A flipped bit whose term
    /// in the CRC is x^a (a < 32: the ICRC itself; above: covered bits, later ones lower) is
    /// accepted iff x^(a - E) has degree below 16, E the exponent of the identification's
    /// last bit. The first such distance E - a is 214,135 bits, so in a datagram of n bytes
    /// (E = 32 + 8 (n - 10)) every bit is caught iff E < 214,135, that is n <= 26,772.
    #[test]
    fn single_bit_errors_are_caught_up_to_26772_bytes() {
        let mut v = ONE;
        let first = (1..=250_000u32)
            .find(|_| {
                v = div_x(v);
                v & 0xFFFF == 0
            })
            .unwrap();
        assert_eq!(first, 214_135);

        let accepted = |len: usize| {
            let mut solver = Ipv4IdSolver::new();
            let exponent = 32 + 8 * (len - 10);
            let mut term = ONE;
            let mut accepted = Vec::new();
            for a in 0..exponent {
                if solver.solve(len, 0, term).is_some() {
                    accepted.push(a);
                }
                term = mul_x(term);
            }
            accepted
        };
        assert_eq!(accepted(26_772), []);
        // One byte longer, the flip of the ICRC's x^1 bit (bit 30) passes.
        assert_eq!(accepted(26_773), [1]);
        let mut solver = Ipv4IdSolver::new();
        assert!(
            solver
                .solve(26_773, 0xDEAD_BEEF, 0xDEAD_BEEF ^ 1 << 30)
                .is_some()
        );
        assert!(
            solver
                .solve(26_772, 0xDEAD_BEEF, 0xDEAD_BEEF ^ 1 << 30)
                .is_none()
        );
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
