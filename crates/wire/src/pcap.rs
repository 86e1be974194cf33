//! Capture files: a pcap writer (nanosecond timestamps) and a reader for pcap (either byte
//! order, micro- or nanosecond timestamps) and pcapng (the format tshark and dumpcap write).
//!
//! The reader bounds every length it reads from the file, so a corrupt or hostile capture
//! yields an error, never a huge allocation or a panic.

use std::io::{self, Read, Write};

/// Link types (the `LINKTYPE_*` values of tcpdump.org).
pub mod link_type {
    /// Ethernet.
    pub const ETHERNET: u32 = 1;
    /// Raw IP: the record starts with an IPv4 or IPv6 header.
    pub const RAW: u32 = 101;
    /// Linux cooked capture, version 1 (`tcpdump -i any`).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4.
    pub const IPV4: u32 = 228;
    /// Raw IPv6.
    pub const IPV6: u32 = 229;
    /// Linux cooked capture, version 2.
    pub const LINUX_SLL2: u32 = 276;
}

/// The largest record this reader accepts: well above any jumbo frame or GRO super-packet.
pub const MAX_RECORD_LEN: usize = 256 * 1024;

const PCAP_MAGIC_US: u32 = 0xA1B2_C3D4;
const PCAP_MAGIC_NS: u32 = 0xA1B2_3C4D;
const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const PCAPNG_BYTE_ORDER: u32 = 0x1A2B_3C4D;

/// Writes a classic pcap file with nanosecond timestamps.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header. Records longer than `snaplen` are cut to it (the original
    /// length is kept in the record, as tcpdump does).
    pub fn new(mut out: W, link_type: u32, snaplen: u32) -> io::Result<PcapWriter<W>> {
        let mut header = [0u8; 24];
        header[0..4].copy_from_slice(&PCAP_MAGIC_NS.to_le_bytes());
        header[4..6].copy_from_slice(&2u16.to_le_bytes());
        header[6..8].copy_from_slice(&4u16.to_le_bytes());
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&link_type.to_le_bytes());
        out.write_all(&header)?;
        Ok(PcapWriter { out, snaplen })
    }

    /// Appends one record.
    pub fn write(&mut self, timestamp_ns: u64, frame: &[u8]) -> io::Result<()> {
        self.write_truncated(timestamp_ns, frame, frame.len())
    }

    /// Appends one record of a frame that was `orig_len` bytes long on the wire, of which
    /// `captured` (cut further to the snap length) is kept.
    pub fn write_truncated(
        &mut self,
        timestamp_ns: u64,
        captured: &[u8],
        orig_len: usize,
    ) -> io::Result<()> {
        let orig_len = u32::try_from(orig_len.max(captured.len()))
            .map_err(|_| io::Error::other("frame over 4 GiB"))?;
        let caplen = (captured.len() as u32).min(self.snaplen);
        let mut header = [0u8; 16];
        header[0..4].copy_from_slice(&((timestamp_ns / 1_000_000_000) as u32).to_le_bytes());
        header[4..8].copy_from_slice(&((timestamp_ns % 1_000_000_000) as u32).to_le_bytes());
        header[8..12].copy_from_slice(&caplen.to_le_bytes());
        header[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(&captured[..caplen as usize])
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Reading the file failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The file starts with neither magic number.
    #[error("not a pcap or pcapng file (magic {0:#010x})")]
    UnknownFormat(u32),
    /// A header or block is not what the format allows.
    #[error("malformed capture: {0}")]
    Malformed(&'static str),
    /// The file ends inside a record.
    #[error("the capture ends in the middle of a record")]
    TruncatedRecord,
}

/// One captured frame.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The link type of the interface it was captured on ([`link_type`]).
    pub link_type: u32,
    /// When it was captured, in ns since the Unix epoch.
    pub timestamp_ns: u64,
    /// The captured bytes (possibly fewer than `orig_len`).
    pub data: &'a [u8],
    /// Its length on the wire.
    pub orig_len: u32,
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link_type: u32,
    snaplen: u32,
    /// Timestamp resolution: units per second as (is power of two, exponent).
    resolution: (bool, u8),
}

#[derive(Debug)]
enum Format {
    Pcap {
        big_endian: bool,
        nanos: bool,
        link_type: u32,
    },
    PcapNg {
        big_endian: bool,
        interfaces: Vec<Interface>,
    },
}

/// Reads pcap or pcapng records one at a time, reusing one buffer.
#[derive(Debug)]
pub struct CaptureReader<R: Read> {
    input: R,
    format: Format,
    buf: Vec<u8>,
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean end of input before any byte.
fn read_or_eof(input: &mut impl Read, buf: &mut [u8]) -> Result<bool, CaptureError> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(CaptureError::TruncatedRecord),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

fn u16_at(b: &[u8], at: usize, big: bool) -> u16 {
    let v = [b[at], b[at + 1]];
    if big {
        u16::from_be_bytes(v)
    } else {
        u16::from_le_bytes(v)
    }
}

fn u32_at(b: &[u8], at: usize, big: bool) -> u32 {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    }
}

fn to_nanos(ts: u64, (pow2, exp): (bool, u8)) -> u64 {
    let ts = u128::from(ts);
    let ns = if pow2 {
        (ts * 1_000_000_000) >> exp.min(127)
    } else if exp <= 9 {
        ts * 10u128.pow(9 - u32::from(exp))
    } else {
        ts / 10u128.pow(u32::from(exp.min(38)) - 9)
    };
    ns.min(u128::from(u64::MAX)) as u64
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header and detects the format.
    pub fn new(mut input: R) -> Result<CaptureReader<R>, CaptureError> {
        let mut magic = [0u8; 4];
        if !read_or_eof(&mut input, &mut magic)? {
            return Err(CaptureError::Malformed("empty file"));
        }
        let le = u32::from_le_bytes(magic);
        let be = u32::from_be_bytes(magic);
        let mut reader = CaptureReader {
            input,
            format: Format::PcapNg {
                big_endian: false,
                interfaces: Vec::new(),
            },
            buf: Vec::new(),
        };
        if le == PCAPNG_SHB {
            reader.read_section_header()?;
            return Ok(reader);
        }
        let (big_endian, nanos) = match (le, be) {
            (PCAP_MAGIC_US, _) => (false, false),
            (PCAP_MAGIC_NS, _) => (false, true),
            (_, PCAP_MAGIC_US) => (true, false),
            (_, PCAP_MAGIC_NS) => (true, true),
            _ => return Err(CaptureError::UnknownFormat(be)),
        };
        let mut rest = [0u8; 20];
        if !read_or_eof(&mut reader.input, &mut rest)? {
            return Err(CaptureError::Malformed("pcap file header cut short"));
        }
        let link_type = u32_at(&rest, 16, big_endian) & 0xFFFF;
        reader.format = Format::Pcap {
            big_endian,
            nanos,
            link_type,
        };
        Ok(reader)
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        match self.format {
            Format::Pcap {
                big_endian,
                nanos,
                link_type,
            } => {
                let mut header = [0u8; 16];
                if !read_or_eof(&mut self.input, &mut header)? {
                    return Ok(None);
                }
                let secs = u64::from(u32_at(&header, 0, big_endian));
                let frac = u64::from(u32_at(&header, 4, big_endian));
                let caplen = u32_at(&header, 8, big_endian) as usize;
                let orig_len = u32_at(&header, 12, big_endian);
                if caplen > MAX_RECORD_LEN {
                    return Err(CaptureError::Malformed("record length over 256 KiB"));
                }
                self.buf.resize(caplen, 0);
                if !read_or_eof(&mut self.input, &mut self.buf)? && caplen > 0 {
                    return Err(CaptureError::TruncatedRecord);
                }
                let timestamp_ns = secs * 1_000_000_000 + if nanos { frac } else { frac * 1_000 };
                Ok(Some(Record {
                    link_type,
                    timestamp_ns,
                    data: &self.buf,
                    orig_len,
                }))
            }
            Format::PcapNg { .. } => self.next_pcapng_record(),
        }
    }

    /// Reads the rest of a section header block whose type was just read.
    fn read_section_header(&mut self) -> Result<(), CaptureError> {
        let mut head = [0u8; 8];
        if !read_or_eof(&mut self.input, &mut head)? {
            return Err(CaptureError::Malformed("pcapng section header cut short"));
        }
        self.begin_section(
            [head[0], head[1], head[2], head[3]],
            [head[4], head[5], head[6], head[7]],
        )
    }

    /// Starts a pcapng section from its block length and byte-order magic (read as they
    /// are on disk: the magic tells the byte order the length is in), skipping the rest of
    /// the block. Interfaces of earlier sections are forgotten.
    fn begin_section(&mut self, length: [u8; 4], byte_order: [u8; 4]) -> Result<(), CaptureError> {
        let big_endian = match u32::from_le_bytes(byte_order) {
            PCAPNG_BYTE_ORDER => false,
            0x4D3C_2B1A => true,
            _ => return Err(CaptureError::Malformed("pcapng byte-order magic")),
        };
        let total = u32_at(&length, 0, big_endian) as usize;
        if !(28..=MAX_RECORD_LEN).contains(&total) || total % 4 != 0 {
            return Err(CaptureError::Malformed("pcapng section header length"));
        }
        self.skip(total - 12)?;
        self.format = Format::PcapNg {
            big_endian,
            interfaces: Vec::new(),
        };
        Ok(())
    }

    fn skip(&mut self, n: usize) -> Result<(), CaptureError> {
        self.buf.resize(n, 0);
        if n > 0 && !read_or_eof(&mut self.input, &mut self.buf)? {
            return Err(CaptureError::TruncatedRecord);
        }
        Ok(())
    }

    fn next_pcapng_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        loop {
            let Format::PcapNg {
                big_endian: big, ..
            } = self.format
            else {
                unreachable!()
            };
            let mut head = [0u8; 8];
            if !read_or_eof(&mut self.input, &mut head)? {
                return Ok(None);
            }
            let block_type = u32_at(&head, 0, big);
            if block_type == PCAPNG_SHB {
                let mut byte_order = [0u8; 4];
                if !read_or_eof(&mut self.input, &mut byte_order)? {
                    return Err(CaptureError::TruncatedRecord);
                }
                self.begin_section([head[4], head[5], head[6], head[7]], byte_order)?;
                continue;
            }
            let total = u32_at(&head, 4, big) as usize;
            if !(12..=MAX_RECORD_LEN + 64).contains(&total) || total % 4 != 0 {
                return Err(CaptureError::Malformed("pcapng block length"));
            }
            self.skip(total - 8)?;
            let body = &self.buf[..total - 12];
            let Format::PcapNg { interfaces, .. } = &mut self.format else {
                unreachable!()
            };
            match block_type {
                // Interface Description Block.
                1 => {
                    if body.len() < 8 {
                        return Err(CaptureError::Malformed("pcapng interface block too short"));
                    }
                    let link_type = u32::from(u16_at(body, 0, big));
                    let snaplen = u32_at(body, 4, big);
                    let mut resolution = (false, 6);
                    let mut opts = &body[8..];
                    while opts.len() >= 4 {
                        let code = u16_at(opts, 0, big);
                        let len = usize::from(u16_at(opts, 2, big));
                        let padded = (len + 3) & !3;
                        if opts.len() < 4 + padded {
                            break;
                        }
                        if code == 9 && len == 1 {
                            let v = opts[4];
                            resolution = (v & 0x80 != 0, v & 0x7F);
                        }
                        if code == 0 {
                            break;
                        }
                        opts = &opts[4 + padded..];
                    }
                    if interfaces.len() >= 1024 {
                        return Err(CaptureError::Malformed("more than 1024 pcapng interfaces"));
                    }
                    interfaces.push(Interface {
                        link_type,
                        snaplen,
                        resolution,
                    });
                }
                // Enhanced Packet Block.
                6 => {
                    if body.len() < 20 {
                        return Err(CaptureError::Malformed("pcapng packet block too short"));
                    }
                    let iface = *interfaces.get(u32_at(body, 0, big) as usize).ok_or(
                        CaptureError::Malformed("pcapng packet names an unknown interface"),
                    )?;
                    let ts =
                        (u64::from(u32_at(body, 4, big)) << 32) | u64::from(u32_at(body, 8, big));
                    let caplen = u32_at(body, 12, big) as usize;
                    let orig_len = u32_at(body, 16, big);
                    if caplen > body.len() - 20 {
                        return Err(CaptureError::Malformed(
                            "pcapng packet longer than its block",
                        ));
                    }
                    let data = &self.buf[20..20 + caplen];
                    return Ok(Some(Record {
                        link_type: iface.link_type,
                        timestamp_ns: to_nanos(ts, iface.resolution),
                        data,
                        orig_len,
                    }));
                }
                // Simple Packet Block: interface 0, no timestamp.
                3 => {
                    let iface = *interfaces.first().ok_or(CaptureError::Malformed(
                        "pcapng packet before any interface",
                    ))?;
                    if body.len() < 4 {
                        return Err(CaptureError::Malformed(
                            "pcapng simple packet block too short",
                        ));
                    }
                    let orig_len = u32_at(body, 0, big);
                    let mut caplen = (orig_len as usize).min(body.len() - 4);
                    if iface.snaplen != 0 {
                        caplen = caplen.min(iface.snaplen as usize);
                    }
                    let data = &self.buf[4..4 + caplen];
                    return Ok(Some(Record {
                        link_type: iface.link_type,
                        timestamp_ns: 0,
                        data,
                        orig_len,
                    }));
                }
                // Name resolution, statistics, secrets, custom blocks: nothing to decode.
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_round_trip() {
        let mut w = PcapWriter::new(Vec::new(), link_type::ETHERNET, 8).unwrap();
        w.write(1_500_000_123, &[1, 2, 3]).unwrap();
        w.write(2_000_000_000, &[9; 20]).unwrap();
        let bytes = w.into_inner();
        let mut r = CaptureReader::new(&bytes[..]).unwrap();
        let a = r.next_record().unwrap().unwrap();
        assert_eq!(
            (a.link_type, a.timestamp_ns, a.data, a.orig_len),
            (1, 1_500_000_123, &[1u8, 2, 3][..], 3)
        );
        let b = r.next_record().unwrap().unwrap();
        assert_eq!((b.data.len(), b.orig_len), (8, 20));
        assert!(r.next_record().unwrap().is_none());
        // Cut in the middle of the last record.
        let mut r = CaptureReader::new(&bytes[..bytes.len() - 1]).unwrap();
        r.next_record().unwrap();
        assert!(matches!(
            r.next_record(),
            Err(CaptureError::TruncatedRecord)
        ));
    }

    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let total = (12 + body.len()) as u32;
        let mut b = kind.to_le_bytes().to_vec();
        b.extend_from_slice(&total.to_le_bytes());
        b.extend_from_slice(body);
        b.extend_from_slice(&total.to_le_bytes());
        b
    }

    #[test]
    fn pcapng_enhanced_and_simple_packets() {
        let mut shb = PCAPNG_BYTE_ORDER.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        let mut idb = vec![1, 0, 0, 0, 0, 0, 1, 0];
        idb.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]); // if_tsresol = 10^-9
        let mut epb = Vec::new();
        for v in [0u32, 0, 1_000, 5, 5] {
            epb.extend_from_slice(&v.to_le_bytes());
        }
        epb.extend_from_slice(&[7, 7, 7, 7, 7, 0, 0, 0]);
        let mut spb = 2u32.to_le_bytes().to_vec();
        spb.extend_from_slice(&[5, 6, 0, 0]);
        let mut file = block(PCAPNG_SHB, &shb);
        file.extend(block(1, &idb));
        file.extend(block(4, &[0; 8])); // name resolution: skipped
        file.extend(block(6, &epb));
        file.extend(block(3, &spb));
        let mut r = CaptureReader::new(&file[..]).unwrap();
        let a = r.next_record().unwrap().unwrap();
        assert_eq!(
            (a.link_type, a.timestamp_ns, a.data),
            (1, 1_000, &[7u8; 5][..])
        );
        let b = r.next_record().unwrap().unwrap();
        assert_eq!(b.data, &[5, 6]);
        assert!(r.next_record().unwrap().is_none());
    }

    #[test]
    fn pcapng_second_section_resets_interfaces() {
        let shb = || {
            let mut b = PCAPNG_BYTE_ORDER.to_le_bytes().to_vec();
            b.extend_from_slice(&[1, 0, 0, 0]);
            b.extend_from_slice(&(-1i64).to_le_bytes());
            block(PCAPNG_SHB, &b)
        };
        let idb = |link: u16| {
            let mut b = link.to_le_bytes().to_vec();
            b.extend_from_slice(&[0, 0, 0, 0, 1, 0]);
            block(1, &b)
        };
        let epb = |iface: u32| {
            let mut b = Vec::new();
            for v in [iface, 0, 0, 4, 4] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&[1, 2, 3, 4]);
            block(6, &b)
        };
        let mut file = shb();
        file.extend(idb(1));
        file.extend(epb(0));
        file.extend(shb());
        file.extend(idb(101));
        file.extend(epb(0));
        file.extend(epb(1)); // no interface 1 in this section
        let mut r = CaptureReader::new(&file[..]).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap().link_type, 1);
        assert_eq!(r.next_record().unwrap().unwrap().link_type, 101);
        assert!(matches!(r.next_record(), Err(CaptureError::Malformed(_))));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            CaptureReader::new(&b"hello world"[..]),
            Err(CaptureError::UnknownFormat(_))
        ));
        assert!(CaptureReader::new(&b""[..]).is_err());
        let mut huge = PcapWriter::new(Vec::new(), 1, 65535).unwrap().into_inner();
        huge.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x7F, 0, 0, 0, 0]);
        let mut r = CaptureReader::new(&huge[..]).unwrap();
        assert!(matches!(r.next_record(), Err(CaptureError::Malformed(_))));
    }

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(to_nanos(5, (false, 6)), 5_000);
        assert_eq!(to_nanos(5, (false, 9)), 5);
        assert_eq!(to_nanos(5_000, (false, 12)), 5);
        assert_eq!(to_nanos(1 << 30, (true, 30)), 1_000_000_000);
    }
}
