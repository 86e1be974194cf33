//! The errors a decoder or encoder can report.
//!
//! Every way a buffer from the network can be wrong has its own variant, so that a receiver can
//! count drops by reason (as a NIC does) and a tool can say exactly what is wrong with a frame.

use thiserror::Error;

/// Which header a [`Error::Truncated`] ran out of bytes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The Ethernet header (or a VLAN tag).
    Ethernet,
    /// The IPv4 header.
    Ipv4,
    /// The IPv6 header.
    Ipv6,
    /// The UDP header.
    Udp,
    /// The base transport header.
    Bth,
    /// The extension headers that follow the BTH, or the ICRC after them.
    Extension,
}

impl core::fmt::Display for Layer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = match self {
            Layer::Ethernet => "Ethernet",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
            Layer::Bth => "BTH",
            Layer::Extension => "extension headers",
        };
        f.write_str(name)
    }
}

/// A decoding or encoding error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum Error {
    /// The buffer ends before the header it should hold.
    #[error("truncated {layer}: need {needed} bytes, have {available}")]
    Truncated {
        /// The header that was cut short.
        layer: Layer,
        /// Bytes the header needs.
        needed: usize,
        /// Bytes there were.
        available: usize,
    },
    /// The BTH transport version (TVer) is neither 0, the only version RoCE v2 defines, nor
    /// 1, which announces Sluice's congestion-control extension header.
    #[error("unsupported BTH transport version {0} (0 is RoCE v2, 1 adds a CCX)")]
    BadVersion(u8),
    /// A congestion-control extension header (after a BTH with TVer 1) that is malformed.
    #[error("bad CC extension header: {0}")]
    BadCcx(&'static str),
    /// A path probe (a control packet of kind 2 or 3) that is malformed.
    #[error("bad path probe: {0}")]
    BadProbe(&'static str),
    /// A Homa GRANT, RESEND or BUSY (a control packet of kind 4, 5 or 6) that is malformed.
    #[error("bad Homa control header: {0}")]
    BadHoma(&'static str),
    /// The IP version nibble is neither 4 nor 6, or disagrees with the framing.
    #[error("bad IP version {0}")]
    BadIpVersion(u8),
    /// An opcode that is reserved, or of a transport Sluice does not speak (RD, XRC).
    #[error("unknown or unsupported opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The pad count is non-zero on an opcode without payload, or larger than the payload.
    #[error("bad pad count {pad} for {payload_with_pad} bytes of payload and pad")]
    BadPadCount {
        /// The BTH's pad count.
        pad: u8,
        /// Bytes of payload and pad the packet holds.
        payload_with_pad: usize,
    },
    /// A length field disagrees with the bytes present, or payload and pad are not a whole
    /// number of 4-byte words, or an opcode without payload carries some.
    #[error("length mismatch: {0}")]
    LengthMismatch(&'static str),
    /// An AETH syndrome with a reserved type or NAK code.
    #[error("reserved AETH syndrome {0:#04x}")]
    BadSyndrome(u8),
    /// The IPv4 header checksum is wrong.
    #[error("bad IPv4 header checksum")]
    Ipv4Checksum,
    /// IPv4 options, a fragment, or an IPv6 next header other than UDP: not a RoCE v2 frame
    /// that can be checked.
    #[error("unsupported IP feature: {0}")]
    UnsupportedIp(&'static str),
    /// The IP datagram carries another protocol than UDP (or IPv6 extension headers).
    #[error("IP payload is protocol {0}, not UDP")]
    NotUdp(u8),
    /// The ICRC on the wire is not the one computed over the packet.
    #[error("ICRC mismatch: packet carries {found:#010x}, computed {computed:#010x}")]
    IcrcMismatch {
        /// The ICRC the packet carries.
        found: u32,
        /// The ICRC computed over it.
        computed: u32,
    },
    /// The extension headers given to an encoder do not match the opcode's.
    #[error("extension headers do not match opcode {0:#04x}")]
    HeaderMismatch(u8),
    /// The caller's buffer is too small for what is to be written.
    #[error("buffer too small: need {needed} bytes, have {available}")]
    BufferTooSmall {
        /// Bytes the encoding needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// A value does not fit its field (e.g. a QPN over 24 bits, a packet over 64 KiB).
    #[error("field out of range: {0}")]
    FieldRange(&'static str),
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T> = core::result::Result<T, Error>;

/// Checks that `buf` holds at least `needed` bytes of `layer`.
#[inline]
pub(crate) fn need(buf: &[u8], needed: usize, layer: Layer) -> Result<()> {
    if buf.len() < needed {
        return Err(Error::Truncated {
            layer,
            needed,
            available: buf.len(),
        });
    }
    Ok(())
}

/// Checks that an output buffer can hold `needed` bytes.
#[inline]
pub(crate) fn room(buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        return Err(Error::BufferTooSmall {
            needed,
            available: buf.len(),
        });
    }
    Ok(())
}
