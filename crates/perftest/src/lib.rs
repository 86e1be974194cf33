//! perftest's out-of-band connection exchange, so that Sluice can stand in for either end of an
//! `ib_write_bw`-style run over RoCE v2, and two Sluice ends can use the same exchange.
//!
//! Before any RoCE packet flows, perftest's two processes talk over one TCP connection (port
//! 18515): they swap version strings, page and cache-line sizes, the path MTU, and then each
//! queue pair's address (QPN, PSN, rkey, buffer address, GID) as fixed-width hex text. The same
//! QP message doubles as a barrier at fixed points of each test. `docs/perftest.md` describes
//! every message and what each test then does over RoCE; this module implements it for the
//! default options (no rdma_cm, RC, not bidirectional, one message size).
//!
//! A [`Session`] walks one test through the exchange in the order perftest does:
//!
//! 1. [`Session::start`] right after the TCP connection is up (the client connects, the
//!    server accepts): versions, system data and MTU.
//! 2. Create the QPs and the memory region, then [`Session::exchange_dests`] with one [`Dest`]
//!    per QP: returns the peer's.
//! 3. Move the QPs to RTR (and to RTS where this side sends), then [`Session::connected`].
//! 4. Post receives where the test has them, then [`Session::start_traffic`]: a barrier for
//!    the SEND tests, nothing for the others. Traffic may start when it returns.
//! 5. [`Session::finish`]: the end-of-test barrier and, for the WRITE/READ/atomic bandwidth
//!    tests, the report the client sends the server. The client calls it when its traffic is
//!    done. The server calls it as soon as traffic may start (in `ib_write_lat` and
//!    `ib_send_lat`, after its own traffic) and it returns when the client is done, so keep
//!    the datapath running on another thread meanwhile.
//!
//! Every step ends within the session's step timeout, however the peer behaves: all reads and
//! writes of one step share one deadline (see [`TimeoutStream`]), so a peer that goes silent,
//! or trickles its message a byte at a time, gets [`PerftestError::TimedOut`] naming the stage
//! and how much of the message came. perftest itself waits forever.
//!
//! Every value the peer announces is checked against a documented bound before anything uses
//! it ([`MAX_CYCLE_BUFFER`], [`MAX_CACHE_LINE_SIZE`], [`MIN_PEER_QPN`], [`MAX_REPORT_SIZE`]),
//! so that a peer cannot make its user allocate or compute something absurd; a value out of
//! bounds is [`PerftestError::OutOfBounds`], naming the field, the value and the bound.
//!
//! Every read waits for the whole message; messages are written with one `write` each because
//! perftest reads each with a single `read(2)` and fails if it comes up short.

#![warn(missing_docs)]

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpStream};
use std::ops::Range;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::str::FromStr;
use std::time::{Duration, Instant};

use sluice_core::Mtu;

/// The TCP port perftest listens on unless given `-p`.
pub const DEFAULT_PORT: u16 = 18515;

/// The version we announce. Peers check only that it is at least 5.70; below 6.28 a newer
/// perftest skips its parameter negotiation (which we do not speak). 6.06 is what Debian
/// bookworm's perftest (4.5-0.17) announces.
pub const VERSION: &str = "6.06";

/// Where Sluice's advertisement sits in the version message: after the version text and
/// its NUL, where perftest (which reads the text with `atof`) looks no further, so that a
/// perftest peer never sees it. Bytes 8..12 are [`SLUICE_MAGIC`], 12..16 the receive
/// window in packets, big-endian (docs/perftest.md, "Messages, in order").
const SLUICE_OPTIONS_AT: usize = 8;

/// Marks the version message's tail as Sluice's options, layout 1.
const SLUICE_MAGIC: [u8; 4] = *b"SLC1";

/// The largest receive window a peer may advertise, in packets: 2^23, half the PSN space
/// (the largest window a requester may keep).
pub const MAX_RECEIVE_WINDOW: u32 = sluice_core::policy::MAX_RECEIVE_WINDOW;

// The version text and its NUL must end before the options.
const _: () = assert!(VERSION.len() < SLUICE_OPTIONS_AT);

/// The oldest peer perftest itself accepts (`check_version_compatibility`).
const MIN_PEER_VERSION: f64 = 5.70;

/// Bytes of the version message (`MAX_VERSION`): the text, NUL-padded.
const VERSION_LEN: usize = 16;

/// Bytes of one QP message in the RoCE format, with the GID (`KEY_MSG_SIZE_GID`): 107
/// characters and the terminating NUL.
pub const DEST_MSG_LEN: usize = 108;

/// Bytes of the InfiniBand format without a GID (`KEY_MSG_SIZE`), which we only recognise in
/// order to say what went wrong.
const DEST_MSG_LEN_NO_GID: usize = 59;

/// perftest's page size default (`cycle_buffer`); remote addresses cycle within it.
pub const DEFAULT_CYCLE_BUFFER: u32 = 4096;

/// perftest's cache-line default; consecutive remote addresses are this far apart at least.
pub const DEFAULT_CACHE_LINE_SIZE: u32 = 64;

/// The largest page size (`cycle_buffer`) accepted from a peer: 1 MiB. perftest sends its
/// `sysconf(_SC_PAGESIZE)`: 4 KiB on x86-64, 16 or 64 KiB on some arm64 and ppc64 kernels; no
/// Linux architecture has base pages above 256 KiB. The negotiated size sets how much memory
/// each end registers, so an unbounded one would let a peer make us reserve gigabytes.
pub const MAX_CYCLE_BUFFER: u32 = 1 << 20;

/// The largest cache line accepted from a peer: 4 KiB. perftest reads the CPU's
/// `coherency_line_size` (64 bytes on x86-64, 128 on POWER and some arm64, 256 on s390x) and
/// falls back to 64. Buffers are rounded up to it, so it is bounded like the page size.
pub const MAX_CACHE_LINE_SIZE: u32 = 4096;

/// The smallest QPN accepted from a peer: QPs 0 and 1 are InfiniBand's management QPs (SMI
/// and GSI) and never an RC QP's number; the largest is 0xff_ffff, all 24 bits (the format's
/// six hex digits cannot carry more).
pub const MIN_PEER_QPN: u32 = 2;

/// The largest message size accepted in a client's bandwidth report: 2^31 bytes, the largest
/// RDMA message (InfiniBand's limit; perftest's `-s` stays far below it).
pub const MAX_REPORT_SIZE: u64 = 1 << 31;

/// A stream whose blocking reads and writes can be bounded in time, so that each step of the
/// exchange ends by its deadline: before every read and write the session lets it block only
/// for what is left of the step.
pub trait TimeoutStream: Read + Write {
    /// Lets each following read and write block for at most `limit` (never zero) and then
    /// fail with `WouldBlock` or `TimedOut`; `None` lets them block as long as they need.
    fn limit_blocking(&mut self, limit: Option<Duration>) -> io::Result<()>;
}

impl TimeoutStream for TcpStream {
    fn limit_blocking(&mut self, limit: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(limit)?;
        self.set_write_timeout(limit)
    }
}

#[cfg(unix)]
impl TimeoutStream for UnixStream {
    fn limit_blocking(&mut self, limit: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(limit)?;
        self.set_write_timeout(limit)
    }
}

impl<T: TimeoutStream + ?Sized> TimeoutStream for &mut T {
    fn limit_blocking(&mut self, limit: Option<Duration>) -> io::Result<()> {
        (**self).limit_blocking(limit)
    }
}

/// A stream that never blocks for long by itself: an in-memory script, or a non-blocking
/// handle whose reads give up on their own. There is no timeout to set; the step's deadline
/// is still checked before every read and write.
#[derive(Debug)]
pub struct SelfLimiting<S>(pub S);

impl<S: Read> Read for SelfLimiting<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<S: Write> Write for SelfLimiting<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<S: Read + Write> TimeoutStream for SelfLimiting<S> {
    fn limit_blocking(&mut self, _limit: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

/// QP attributes perftest sets on every RC queue pair (`ctx_modify_qp_to_rtr`/`_rts`), so
/// that a Sluice end behaves the same: timeout 14 (4.096 us x 2^14 = 67 ms, `-u` changes it),
/// 7 retries, RNR retry forever, RNR timer code 12 (0.64 ms).
pub const QP_TIMEOUT: u8 = 14;
/// See [`QP_TIMEOUT`].
pub const QP_RETRY_CNT: u8 = 7;
/// See [`QP_TIMEOUT`].
pub const QP_RNR_RETRY: u8 = 7;
/// See [`QP_TIMEOUT`].
pub const QP_MIN_RNR_TIMER: u8 = 12;

/// Which end of the TCP connection we are. perftest decides by the host name argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Given a host name: connects, and writes first in every exchange. Drives the traffic
    /// in the bandwidth tests and in the READ and atomic latency tests.
    Client,
    /// Given no host name: listens, reads first in every exchange.
    Server,
}

/// The RDMA operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// SEND, to receives the responder posted.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FETCH_AND_ADD (adds 1) by default, or CMP_AND_SWAP (compare 0, swap 0), on 8 bytes.
    Atomic,
}

/// One of perftest's RC tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Test {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_atomic_bw`.
    AtomicBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_atomic_lat`.
    AtomicLat,
}

impl Test {
    /// Every test.
    pub const ALL: [Test; 8] = [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::AtomicBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
        Test::AtomicLat,
    ];

    /// The perftest binary, e.g. `ib_write_bw`.
    pub const fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "ib_write_bw",
            Test::ReadBw => "ib_read_bw",
            Test::SendBw => "ib_send_bw",
            Test::AtomicBw => "ib_atomic_bw",
            Test::WriteLat => "ib_write_lat",
            Test::ReadLat => "ib_read_lat",
            Test::SendLat => "ib_send_lat",
            Test::AtomicLat => "ib_atomic_lat",
        }
    }

    /// The RDMA operation it measures.
    pub const fn verb(self) -> Verb {
        match self {
            Test::WriteBw | Test::WriteLat => Verb::Write,
            Test::ReadBw | Test::ReadLat => Verb::Read,
            Test::SendBw | Test::SendLat => Verb::Send,
            Test::AtomicBw | Test::AtomicLat => Verb::Atomic,
        }
    }

    /// Whether it measures latency (`_lat`) rather than bandwidth (`_bw`).
    pub const fn is_latency(self) -> bool {
        matches!(
            self,
            Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat
        )
    }

    /// perftest's default message size (`-s`): 64 KiB for bandwidth, 2 bytes for latency, and
    /// always 8 for atomics.
    pub const fn default_size(self) -> u64 {
        match (self.verb(), self.is_latency()) {
            (Verb::Atomic, _) => 8,
            (_, true) => 2,
            (_, false) => 65536,
        }
    }

    /// perftest's default iteration count (`-n`) per QP.
    pub const fn default_iters(self) -> u64 {
        if self.is_latency() { 1000 } else { 5000 }
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A test name that is none of perftest's RC tests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown perftest test {0:?}: expected one of ib_write_bw, ib_read_bw, ib_send_bw, \
     ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat, ib_atomic_lat (the ib_ is optional)"
)]
pub struct UnknownTest(pub String);

impl FromStr for Test {
    type Err = UnknownTest;

    /// Accepts the binary name with or without `ib_`: `ib_write_bw` or `write_bw`.
    fn from_str(s: &str) -> Result<Test, UnknownTest> {
        let bare = s.strip_prefix("ib_").unwrap_or(s);
        Test::ALL
            .into_iter()
            .find(|t| &t.name()[3..] == bare)
            .ok_or_else(|| UnknownTest(s.to_string()))
    }
}

/// One queue pair's address as perftest exchanges it (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Dest {
    /// InfiniBand LID; 0 on RoCE.
    pub lid: u16,
    /// READ and atomic requests this side accepts outstanding as responder: its
    /// `max_dest_rd_atomic`, and the peer's `max_rd_atomic`. perftest sends 1 in the SEND and
    /// WRITE tests, and `-o` or the device's `max_qp_rd_atom` in the READ and atomic tests.
    pub out_reads: u16,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The first PSN this side sends (24 bits): its `sq_psn`, the peer's `rq_psn`.
    pub psn: u32,
    /// The rkey of the region the peer's WRITEs, READs and atomics target.
    pub rkey: u32,
    /// Where in that region they start (the peer adds offsets, see `docs/perftest.md`).
    pub vaddr: u64,
    /// This side's GID; on RoCE v2 the IPv4-mapped or IPv6 address RoCE packets go to.
    pub gid: [u8; 16],
}

/// Why QP data could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestError {
    /// The message is not as long as the format's.
    #[error("{got} bytes, expected {want}")]
    Length {
        /// Bytes it has.
        got: usize,
        /// Bytes the format has.
        want: usize,
    },
    /// The text does not end in a NUL.
    #[error("no terminating NUL")]
    Unterminated,
    /// The message is not ASCII text.
    #[error("not ASCII text")]
    NotText,
    /// The text does not have the format's fields.
    #[error("{got} colon-separated fields, expected 23 each followed by ':' in {text:?}")]
    FieldCount {
        /// Fields it has.
        got: usize,
        /// The text.
        text: String,
    },
    /// A field is not hex digits of its width.
    #[error("field {name} is {text:?}, expected {width} hex digits")]
    Field {
        /// The field's name.
        name: &'static str,
        /// What it holds.
        text: String,
        /// Its width in hex digits.
        width: usize,
    },
    /// A value is too large for its field.
    #[error("{name} {value:#x} does not fit in {bits} bits")]
    OutOfRange {
        /// The field's name.
        name: &'static str,
        /// The value.
        value: u64,
        /// The field's width in bits.
        bits: u32,
    },
}

/// The fields of the RoCE format in order, with their widths in hex digits
/// (`KEY_PRINT_FMT_GID`: `%04x:%04x:%06x:%06x:%08x:%016llx:` then 16 x `%02x:` then `%08x:`).
const FIELDS: [(&str, usize); 6] = [
    ("LID", 4),
    ("out_reads", 4),
    ("QPN", 6),
    ("PSN", 6),
    ("rkey", 8),
    ("vaddr", 16),
];

impl Dest {
    /// perftest's wire text: 107 ASCII characters and a NUL, e.g.
    /// `0000:0001:000011:3c0ffe:00001234:00007f0000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:01:00000000:`
    /// The trailing `00000000` is the XRC SRQ number, always 0 for RC.
    pub fn encode(&self) -> Result<[u8; DEST_MSG_LEN], DestError> {
        for (name, value) in [("QPN", self.qpn), ("PSN", self.psn)] {
            if value >= 1 << 24 {
                return Err(DestError::OutOfRange {
                    name,
                    value: value.into(),
                    bits: 24,
                });
            }
        }
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for byte in self.gid {
            text.push_str(&format!("{byte:02x}:"));
        }
        text.push_str("00000000:");
        // Every field has a fixed width once the ranges above hold, so this cannot differ.
        debug_assert_eq!(text.len(), DEST_MSG_LEN - 1);
        let mut msg = [0u8; DEST_MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        Ok(msg)
    }

    /// Parses perftest's wire text. Strict about the layout: every field its exact width of
    /// hex digits (either case) and a ':', then the NUL.
    pub fn decode(msg: &[u8]) -> Result<Dest, DestError> {
        if msg.len() != DEST_MSG_LEN {
            return Err(DestError::Length {
                got: msg.len(),
                want: DEST_MSG_LEN,
            });
        }
        let nul = msg
            .iter()
            .position(|&b| b == 0)
            .ok_or(DestError::Unterminated)?;
        let text = std::str::from_utf8(&msg[..nul])
            .ok()
            .filter(|t| t.is_ascii())
            .ok_or(DestError::NotText)?;
        // 6 fields, 16 GID bytes and the SRQ number, each followed by ':', so splitting
        // leaves an empty 24th piece.
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() != 24 || !parts[23].is_empty() {
            return Err(DestError::FieldCount {
                got: parts.len().saturating_sub(1),
                text: text.to_string(),
            });
        }
        let mut values = [0u64; 6];
        for (value, ((name, width), part)) in values.iter_mut().zip(FIELDS.iter().zip(&parts)) {
            *value = hex_field(part, name, *width)?;
        }
        let mut gid = [0u8; 16];
        for (byte, part) in gid.iter_mut().zip(&parts[6..22]) {
            *byte = hex_field(part, "GID byte", 2)? as u8;
        }
        // The SRQ number only matters for XRC; check its shape and drop it.
        hex_field(parts[22], "SRQ number", 8)?;
        Ok(Dest {
            lid: values[0] as u16,
            out_reads: values[1] as u16,
            qpn: values[2] as u32,
            psn: values[3] as u32,
            rkey: values[4] as u32,
            vaddr: values[5],
            gid,
        })
    }

    /// The GID of an address: IPv4 addresses map to `::ffff:a.b.c.d`, as RoCE v2 does.
    pub fn gid_for(ip: IpAddr) -> [u8; 16] {
        match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    /// The address RoCE v2 packets to this side go to: IPv4 for an IPv4-mapped GID.
    pub fn gid_ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// Whether the GID stands for an IPv4 address, as perftest's `ipv6_addr_v4mapped` decides
    /// it (which also counts IPv4-encoded multicast `ff0e::ffff:a.b.c.d`).
    pub fn is_ipv4_gid(&self) -> bool {
        let g = &self.gid;
        let mapped_tail = g[4..10].iter().all(|&b| b == 0) && g[10..12] == [0xff, 0xff];
        mapped_tail && (g[..4] == [0; 4] || g[..4] == [0xff, 0x0e, 0, 0])
    }
}

fn hex_field(text: &str, name: &'static str, width: usize) -> Result<u64, DestError> {
    let bad = || DestError::Field {
        name,
        text: text.to_string(),
        width,
    };
    if text.len() != width || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    // At most 16 hex digits, so this fits.
    u64::from_str_radix(text, 16).map_err(|_| bad())
}

impl fmt::Display for Dest {
    /// Like perftest's "remote address" line, with the GID as an address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LID {:#06x} QPN {:#08x} PSN {:#08x} OUT {:#06x} RKey {:#010x} VAddr {:#018x} GID {}",
            self.lid,
            self.qpn,
            self.psn,
            self.out_reads,
            self.rkey,
            self.vaddr,
            Ipv6Addr::from(self.gid)
        )
    }
}

/// What this side brings to the first exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalParams {
    /// perftest's `cycle_buffer`, the page size: both ends use the larger of the two, and
    /// remote addresses cycle within that many bytes from the peer's `vaddr`.
    pub cycle_buffer: u32,
    /// Both ends use the larger; small messages go to addresses this far apart at least.
    pub cache_line_size: u32,
    /// The path MTU this side wants (perftest: `-m`, else the port's active MTU). Both ends
    /// use the smaller.
    pub mtu: Mtu,
    /// Sluice only: the receive window this side's selective-repeat queue pairs have, in
    /// packets (1..=[`MAX_RECEIVE_WINDOW`]), advertised in the version message's tail where
    /// perftest reads nothing; `None` sends exactly perftest's message.
    pub receive_window: Option<u32>,
}

impl LocalParams {
    /// perftest's page and cache-line defaults with the given MTU.
    pub fn new(mtu: Mtu) -> LocalParams {
        LocalParams {
            cycle_buffer: DEFAULT_CYCLE_BUFFER,
            cache_line_size: DEFAULT_CACHE_LINE_SIZE,
            mtu,
            receive_window: None,
        }
    }

    /// The same, advertising `window` (see [`LocalParams::receive_window`]).
    pub fn with_receive_window(self, window: Option<u32>) -> LocalParams {
        LocalParams {
            receive_window: window,
            ..self
        }
    }
}

/// What both ends settled on in [`Session::start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's version text, e.g. `6.06`.
    pub peer_version: String,
    /// The larger page size of the two.
    pub cycle_buffer: u32,
    /// The larger cache line of the two.
    pub cache_line_size: u32,
    /// The MTU the peer asked for.
    pub peer_mtu: Mtu,
    /// The path MTU both use: the smaller of the two.
    pub mtu: Mtu,
    /// The receive window a Sluice peer advertised, in packets (1..=[`MAX_RECEIVE_WINDOW`]);
    /// `None` from perftest, or from a Sluice peer that advertised none.
    pub peer_receive_window: Option<u32>,
}

impl Negotiated {
    /// The bytes from its announced address that a perftest peer may reach in each QP's
    /// target region, for messages of up to `max_size` bytes: `max(size, page)` rounded up to
    /// the cache line (`alloc_ctx`). The bounds on what a peer announces keep it below
    /// `max(max_size, MAX_CYCLE_BUFFER) + MAX_CACHE_LINE_SIZE` (a cache line need not be a
    /// power of two, so rounding may add up to one less than a line).
    pub fn target_span(&self, max_size: u32) -> u64 {
        u64::from(max_size)
            .max(u64::from(self.cycle_buffer))
            .next_multiple_of(u64::from(self.cache_line_size))
    }
}

/// A bandwidth result as perftest exchanges it (`struct bw_report_data`, the fields it sends).
/// The bandwidths are in MB/s (2^20 bytes per second) unless perftest runs with
/// `--report_gbits` (Gb/s); the message rate is in millions per second.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Messages, summed over all QPs.
    pub iters: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate.
    pub msg_rate: f64,
}

/// Where in the exchange something went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The version strings.
    Version,
    /// The page and cache-line sizes.
    SystemData,
    /// The path MTU.
    Mtu,
    /// The first round of QP data (QP index).
    QpData(usize),
    /// The rounds after the QPs are connected.
    ConnectSync,
    /// The SEND tests' barrier once receives are posted.
    StartSync,
    /// The barrier after the traffic of a bandwidth test.
    EndSync,
    /// The bandwidth report the client sends the server.
    Report,
    /// The barrier perftest's `ctx_close_connection` does.
    Close,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Version => f.write_str("the version exchange"),
            Stage::SystemData => f.write_str("the page and cache-line size exchange"),
            Stage::Mtu => f.write_str("the MTU exchange"),
            Stage::QpData(qp) => write!(f, "the QP data exchange for QP {qp}"),
            Stage::ConnectSync => f.write_str("the sync after connecting the QPs"),
            Stage::StartSync => f.write_str("the sync before traffic"),
            Stage::EndSync => f.write_str("the end-of-test sync"),
            Stage::Report => f.write_str("the bandwidth report exchange"),
            Stage::Close => f.write_str("the closing sync"),
        }
    }
}

/// What can go wrong in the exchange, said so that a user can act on it.
#[derive(Debug, thiserror::Error)]
pub enum PerftestError {
    /// Reading or writing the stream failed.
    #[error("perftest exchange, {stage}: {source}")]
    Io {
        /// Where in the exchange.
        stage: Stage,
        /// What the stream said.
        #[source]
        source: io::Error,
    },
    /// `got` of the `want` bytes of the message we were reading had come (both 0 if the
    /// peer went away while we were writing).
    #[error(
        "the peer closed the connection during {stage}{}: its output should say why (e.g. a \
         failed test, or options that do not match ours)",
        progress(*.got, *.want)
    )]
    PeerClosed {
        /// Where in the exchange.
        stage: Stage,
        /// Bytes of the message that came.
        got: usize,
        /// Bytes the message has.
        want: usize,
    },
    /// The step did not finish within the step timeout (`got` and `want` as for
    /// `PeerClosed`).
    #[error(
        "timed out waiting for the peer during {stage}{}: the step did not finish within \
         {limit:?}; is the peer still running its traffic, waiting for ours, or not perftest?",
        progress(*.got, *.want)
    )]
    TimedOut {
        /// Where in the exchange.
        stage: Stage,
        /// Bytes of the message that came.
        got: usize,
        /// Bytes the message has.
        want: usize,
        /// The step timeout.
        limit: Duration,
    },
    /// The peer announced a value outside what Sluice accepts there.
    #[error(
        "the peer announced {field} {value} in {stage}; Sluice accepts {bound} (see \
         docs/perftest.md, \"Bounds and deadlines\")"
    )]
    OutOfBounds {
        /// Where in the exchange.
        stage: Stage,
        /// The field, as perftest names it.
        field: &'static str,
        /// What the peer announced.
        value: String,
        /// What is accepted.
        bound: &'static str,
    },
    /// The peer's perftest is older than the exchange this speaks.
    #[error(
        "the peer announced perftest version {peer:?}; perftest only talks to 5.70 or newer \
         (we announce {VERSION})"
    )]
    VersionTooOld {
        /// The version it announced.
        peer: String,
    },
    /// A message from the peer is not what the exchange has there.
    #[error("malformed message from the peer in {stage}: {detail}")]
    Malformed {
        /// Where in the exchange.
        stage: Stage,
        /// What is wrong with it.
        detail: String,
    },
    /// The peer's QP data could not be decoded.
    #[error("malformed QP data from the peer in {stage}: {source}")]
    BadDest {
        /// Where in the exchange.
        stage: Stage,
        /// Why not.
        #[source]
        source: DestError,
    },
    /// The peer sent QP data without a GID: it is not on a RoCE device.
    #[error(
        "the peer sent {got}-byte QP data (the InfiniBand format, without a GID) where RoCE \
         uses {want} bytes: run perftest on a RoCE device, with -x GID_INDEX"
    )]
    NoGid {
        /// Bytes it sent.
        got: usize,
        /// Bytes of the RoCE format.
        want: usize,
    },
    /// One end's GID is IPv4 and the other's IPv6.
    #[error(
        "GID types differ: ours {ours} is {}, the peer's {peer} is {}: give perftest a GID index \
         (-x) of the same IP version as ours",
        if *.ours_ipv4 { "IPv4" } else { "IPv6" },
        if *.ours_ipv4 { "IPv6" } else { "IPv4" }
    )]
    GidTypeMismatch {
        /// Our GID.
        ours: Ipv6Addr,
        /// The peer's.
        peer: Ipv6Addr,
        /// Whether ours is IPv4 (IPv4-mapped).
        ours_ipv4: bool,
    },
    /// The peer's QP data in a later round is not what it sent in the first.
    #[error(
        "the peer's QP data in {stage} is [{now}] where QP {qp} was [{first}]: do both ends run \
         the same test with the same number of QPs (-q)?"
    )]
    DestChanged {
        /// The round.
        stage: Stage,
        /// The QP.
        qp: usize,
        /// What it sent first.
        first: Dest,
        /// What it sent now.
        now: Dest,
    },
    /// Our own QP data cannot be put in the format.
    #[error("cannot send our QP data for QP {qp}: {source}")]
    LocalDest {
        /// The QP.
        qp: usize,
        /// Why not.
        #[source]
        source: DestError,
    },
    /// The session was used out of order, or with parameters it cannot send.
    #[error("{0}")]
    Usage(&'static str),
}

fn progress(got: usize, want: usize) -> String {
    if want == 0 {
        String::new()
    } else {
        format!(" ({got} of {want} bytes of its message came)")
    }
}

/// Where a session is in the sequence; each step may only follow the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Started,
    DestsExchanged,
    Connected,
    TrafficStarted,
    Finished,
    /// A step failed after it had started talking: the two ends are out of step for good.
    Failed,
}

/// One perftest test's exchange over one stream, in either role. See the module documentation
/// for the order of the calls.
#[derive(Debug)]
pub struct Session<S> {
    stream: S,
    role: Role,
    test: Test,
    negotiated: Negotiated,
    local: Vec<[u8; DEST_MSG_LEN]>,
    peer: Vec<Dest>,
    phase: Phase,
    /// How long each step may take in all.
    step_timeout: Duration,
}

impl<S: TimeoutStream> Session<S> {
    /// Versions, page and cache-line sizes, and the MTU (perftest's `exchange_versions`,
    /// `check_sys_data`, `check_mtu`), as soon as the connection is up. This and every later
    /// step must be over within `step_timeout` (reads and writes together), or it fails with
    /// [`PerftestError::TimedOut`]; the peer's page and cache-line sizes must be within
    /// [`MAX_CYCLE_BUFFER`] and [`MAX_CACHE_LINE_SIZE`].
    pub fn start(
        mut stream: S,
        role: Role,
        test: Test,
        params: LocalParams,
        step_timeout: Duration,
    ) -> Result<Session<S>, PerftestError> {
        if params.cycle_buffer == 0 || params.cache_line_size == 0 {
            return Err(PerftestError::Usage(
                "page and cache-line sizes must be positive",
            ));
        }
        if step_timeout.is_zero() {
            return Err(PerftestError::Usage("the step timeout must be positive"));
        }
        if params
            .receive_window
            .is_some_and(|w| !(1..=MAX_RECEIVE_WINDOW).contains(&w))
        {
            return Err(PerftestError::Usage(
                "the receive window must be 1..=2^23 packets",
            ));
        }
        let io = &mut Step::new(&mut stream, step_timeout);
        let ours = version_message(params.receive_window);
        let theirs = exchange(io, role, &ours, Stage::Version)?;
        let peer_version = parse_version(&theirs)?;
        let peer_receive_window = parse_sluice_options(&theirs)?;

        // Peers from 5.32 on send these; we only talk to 5.70 and newer. Each is checked as
        // soon as it comes, before anything is sized from it.
        let cycle = exchange(
            io,
            role,
            &params.cycle_buffer.to_be_bytes(),
            Stage::SystemData,
        )?;
        let peer_cycle = bounded_be(cycle, PAGE_SIZE_BOUND)?;
        let cache = exchange(
            io,
            role,
            &params.cache_line_size.to_be_bytes(),
            Stage::SystemData,
        )?;
        let peer_cache = bounded_be(cache, CACHE_LINE_BOUND)?;

        // From 5.31 on: the ibv_mtu enum value as one decimal digit and a NUL.
        let mtu_msg = [b'0' + mtu_code(params.mtu), 0];
        let peer_mtu = parse_mtu(exchange(io, role, &mtu_msg, Stage::Mtu)?)?;
        let mtu = if peer_mtu.bytes() < params.mtu.bytes() {
            peer_mtu
        } else {
            params.mtu
        };

        Ok(Session {
            stream,
            role,
            test,
            negotiated: Negotiated {
                peer_version,
                cycle_buffer: params.cycle_buffer.max(peer_cycle),
                cache_line_size: params.cache_line_size.max(peer_cache),
                peer_mtu,
                mtu,
                peer_receive_window,
            },
            local: Vec::new(),
            peer: Vec::new(),
            phase: Phase::Started,
            step_timeout,
        })
    }

    /// Changes the step timeout for the steps that follow, e.g. for a server that calls
    /// [`Session::finish`] while the client's traffic runs: that step lasts the traffic.
    pub fn set_step_timeout(&mut self, step_timeout: Duration) -> Result<(), PerftestError> {
        if step_timeout.is_zero() {
            return Err(PerftestError::Usage("the step timeout must be positive"));
        }
        self.step_timeout = step_timeout;
        Ok(())
    }

    /// Which end this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The test being run.
    pub fn test(&self) -> Test {
        self.test
    }

    /// What the two ends agreed on in [`Session::start`].
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// The peer's QP data, one per QP, once [`Session::exchange_dests`] returned.
    pub fn peer_dests(&self) -> &[Dest] {
        &self.peer
    }

    /// Swaps QP data, QP by QP in order (perftest's first `ctx_hand_shake` loop; the latency
    /// tests other than SEND do one extra exchange of QP 0 first). Both ends must have the
    /// same number of QPs: perftest does not send it, and a mismatch shows up at the latest in
    /// [`Session::connected`]. Fails if the GIDs are of different IP versions, as perftest's
    /// `ctx_check_gid_compatibility` does.
    pub fn exchange_dests(&mut self, local: &[Dest]) -> Result<&[Dest], PerftestError> {
        self.expect(Phase::Started, "exchange_dests must follow start, once")?;
        if local.is_empty() {
            return Err(PerftestError::Usage("exchange_dests needs at least one QP"));
        }
        // Encode everything first: a bad local value fails before anything is sent.
        self.local = local
            .iter()
            .enumerate()
            .map(|(qp, d)| {
                d.encode()
                    .map_err(|source| PerftestError::LocalDest { qp, source })
            })
            .collect::<Result<_, _>>()?;

        self.phase = Phase::Failed; // until this step succeeds
        let io = &mut Step::new(&mut self.stream, self.step_timeout);
        let early = if self.test.is_latency() && self.test.verb() != Verb::Send {
            Some(hand_shake(io, self.role, &self.local[0], Stage::QpData(0))?)
        } else {
            None
        };
        self.peer = Vec::with_capacity(local.len());
        for qp in 0..local.len() {
            let dest = hand_shake(io, self.role, &self.local[qp], Stage::QpData(qp))?;
            self.peer.push(dest);
        }
        if let Some(first) = early {
            check_same(&self.peer, Stage::QpData(0), 0, first)?;
        }

        let ours = local[0];
        let peer = self.peer[0];
        if ours.is_ipv4_gid() != peer.is_ipv4_gid() {
            return Err(PerftestError::GidTypeMismatch {
                ours: Ipv6Addr::from(ours.gid),
                peer: Ipv6Addr::from(peer.gid),
                ours_ipv4: ours.is_ipv4_gid(),
            });
        }
        self.phase = Phase::DestsExchanged;
        Ok(&self.peer)
    }

    /// Call once this side's QPs are in RTR, and in RTS where this side sends (a perftest
    /// server of a bandwidth test stays in RTR). perftest swaps all QP data once more (SEND
    /// tests: QP 0 alone, then every QP; the others: every QP, then QP 0 alone) and checks
    /// nothing; we check that the peer repeats what it sent, which catches a different test
    /// or QP count on the two ends. When this returns the peer's QPs are in RTR, so for all
    /// but the SEND tests traffic may start.
    pub fn connected(&mut self) -> Result<(), PerftestError> {
        self.expect(
            Phase::DestsExchanged,
            "connected must follow exchange_dests",
        )?;
        self.phase = Phase::Failed;
        let send = self.test.verb() == Verb::Send;
        let (role, local, peer) = (self.role, &self.local, &self.peer);
        let io = &mut Step::new(&mut self.stream, self.step_timeout);
        if send {
            sync(io, role, local, peer, 0, Stage::ConnectSync)?;
        }
        for qp in 0..local.len() {
            sync(io, role, local, peer, qp, Stage::ConnectSync)?;
        }
        if !send {
            sync(io, role, local, peer, 0, Stage::ConnectSync)?;
        }
        self.phase = Phase::Connected;
        Ok(())
    }

    /// Call when this side is ready for traffic: in the SEND tests, once receives are posted
    /// (perftest's server posts them all before this barrier, and its client starts sending
    /// right after). Does nothing in the other tests.
    pub fn start_traffic(&mut self) -> Result<(), PerftestError> {
        self.expect(Phase::Connected, "start_traffic must follow connected")?;
        self.phase = Phase::Failed;
        if self.test.verb() == Verb::Send {
            let io = &mut Step::new(&mut self.stream, self.step_timeout);
            sync(io, self.role, &self.local, &self.peer, 0, Stage::StartSync)?;
        }
        self.phase = Phase::TrafficStarted;
        Ok(())
    }

    /// The end of the test. The client calls it when its traffic is done; the server calls
    /// it right after [`Session::start_traffic`] in every test but `ib_write_lat` and
    /// `ib_send_lat` (where it has traffic of its own to finish first), and it returns once
    /// the client is done.
    ///
    /// - WRITE, READ and atomic bandwidth: a barrier, the client's report to the server
    ///   (`xchg_bw_reports`, which also carries the server's, meaningless, back), and a
    ///   closing barrier. Returns the client's report on the server and `None` on the
    ///   client; `report` is what the client reports (the server sends zeros whatever it is).
    /// - SEND bandwidth, SEND/READ/atomic latency: a closing barrier (`ctx_close_connection`).
    /// - WRITE latency: nothing; perftest just exits.
    ///
    /// perftest before 23.07 then writes "done" and closes; nobody reads it, so we neither
    /// write nor expect it. Drop the stream afterwards.
    ///
    /// Like every step, this one must be over within the step timeout: a server that calls it
    /// while the traffic runs sets a timeout longer than the traffic first
    /// ([`Session::set_step_timeout`]). The client's report is checked against
    /// [`MAX_REPORT_SIZE`], and its rates must be finite and not negative.
    pub fn finish(&mut self, report: Option<BwReport>) -> Result<Option<BwReport>, PerftestError> {
        let (role, test) = (self.role, self.test);
        let (local, peer) = (&self.local, &self.peer);
        let io = &mut Step::new(&mut self.stream, self.step_timeout);
        finish_steps(io, role, test, &mut self.phase, local, peer, report)
    }

    /// [`Session::finish`] over `stream`, another handle of the same connection: one whose
    /// reads can do something else while they wait (a driver answering the peer's resends,
    /// which the peer may need before it can reach the barrier). Such a handle bounds its own
    /// waits (its reads return `WouldBlock` or `TimedOut` when it gives up); the step timeout
    /// is checked between its reads and writes.
    pub fn finish_on<T: Read + Write>(
        &mut self,
        stream: &mut T,
        report: Option<BwReport>,
    ) -> Result<Option<BwReport>, PerftestError> {
        let (role, test) = (self.role, self.test);
        let mut stream = SelfLimiting(stream);
        let io = &mut Step::new(&mut stream, self.step_timeout);
        finish_steps(
            io,
            role,
            test,
            &mut self.phase,
            &self.local,
            &self.peer,
            report,
        )
    }

    /// The stream, e.g. to close it or to look at what is left.
    pub fn into_inner(self) -> S {
        self.stream
    }

    fn expect(&self, phase: Phase, what: &'static str) -> Result<(), PerftestError> {
        expect_phase(self.phase, phase, what)
    }
}

fn expect_phase(now: Phase, want: Phase, what: &'static str) -> Result<(), PerftestError> {
    match now {
        p if p == want => Ok(()),
        Phase::Failed => Err(PerftestError::Usage(
            "an earlier step of this exchange failed; start a new connection",
        )),
        _ => Err(PerftestError::Usage(what)),
    }
}

/// The steps of [`Session::finish`], over `io`.
fn finish_steps<T: TimeoutStream>(
    io: &mut Step<'_, T>,
    role: Role,
    test: Test,
    phase: &mut Phase,
    local: &[[u8; DEST_MSG_LEN]],
    peer: &[Dest],
    report: Option<BwReport>,
) -> Result<Option<BwReport>, PerftestError> {
    expect_phase(
        *phase,
        Phase::TrafficStarted,
        "finish must follow start_traffic",
    )?;
    *phase = Phase::Failed;
    let peer_report = match test {
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => {
            sync(io, role, local, peer, 0, Stage::EndSync)?;
            let ours = match role {
                Role::Client => report.unwrap_or_default(),
                Role::Server => BwReport::default(),
            };
            let theirs = exchange_report(io, role, &ours)?;
            // Only a server uses the report (a perftest server's is uninitialised memory).
            if role == Role::Server {
                check_report(&theirs)?;
            }
            sync(io, role, local, peer, 0, Stage::Close)?;
            match role {
                Role::Server => Some(theirs),
                Role::Client => None,
            }
        }
        Test::SendBw | Test::SendLat | Test::ReadLat | Test::AtomicLat => {
            sync(io, role, local, peer, 0, Stage::Close)?;
            None
        }
        Test::WriteLat => None,
    };
    *phase = Phase::Finished;
    Ok(peer_report)
}

/// One `ctx_hand_shake`: `ours` (our QP data) out, the peer's in; the client writes first.
fn hand_shake<S: TimeoutStream>(
    io: &mut Step<'_, S>,
    role: Role,
    ours: &[u8; DEST_MSG_LEN],
    stage: Stage,
) -> Result<Dest, PerftestError> {
    match role {
        Role::Client => {
            io.write_msg(ours, stage)?;
            read_dest(io, stage)
        }
        Role::Server => {
            let theirs = read_dest(io, stage)?;
            io.write_msg(ours, stage)?;
            Ok(theirs)
        }
    }
}

/// A `ctx_hand_shake` used as a barrier: the peer must repeat its QP data for `qp`.
fn sync<S: TimeoutStream>(
    io: &mut Step<'_, S>,
    role: Role,
    local: &[[u8; DEST_MSG_LEN]],
    peer: &[Dest],
    qp: usize,
    stage: Stage,
) -> Result<(), PerftestError> {
    let now = hand_shake(io, role, &local[qp], stage)?;
    check_same(peer, stage, qp, now)
}

/// The peer's QP data for `qp` at `stage` must be what it sent first.
fn check_same(peer: &[Dest], stage: Stage, qp: usize, now: Dest) -> Result<(), PerftestError> {
    let first = peer[qp];
    if now == first {
        Ok(())
    } else {
        Err(PerftestError::DestChanged {
            stage,
            qp,
            first,
            now,
        })
    }
}

/// `xchg_bw_reports`: each field is its own exchange, 8 bytes big-endian (the doubles as
/// their IEEE bits), in this order.
fn exchange_report<S: TimeoutStream>(
    io: &mut Step<'_, S>,
    role: Role,
    ours: &BwReport,
) -> Result<BwReport, PerftestError> {
    let fields = [
        ours.size,
        ours.iters,
        ours.bw_peak.to_bits(),
        ours.bw_avg.to_bits(),
        ours.msg_rate.to_bits(),
    ];
    let mut theirs = [0u64; 5];
    for (mine, peer) in fields.iter().zip(theirs.iter_mut()) {
        let got = exchange(io, role, &mine.to_be_bytes(), Stage::Report)?;
        *peer = u64::from_be_bytes(got);
    }
    Ok(BwReport {
        size: theirs[0],
        iters: theirs[1],
        bw_peak: f64::from_bits(theirs[2]),
        bw_avg: f64::from_bits(theirs[3]),
        msg_rate: f64::from_bits(theirs[4]),
    })
}

/// `ctx_xchg_data`: the client writes then reads, the server reads then writes.
fn exchange<S: TimeoutStream, const N: usize>(
    io: &mut Step<'_, S>,
    role: Role,
    ours: &[u8; N],
    stage: Stage,
) -> Result<[u8; N], PerftestError> {
    let mut theirs = [0u8; N];
    match role {
        Role::Client => {
            io.write_msg(ours, stage)?;
            io.read_range(&mut theirs, 0..N, stage)?;
        }
        Role::Server => {
            io.read_range(&mut theirs, 0..N, stage)?;
            io.write_msg(ours, stage)?;
        }
    }
    Ok(theirs)
}

/// The stream during one step of the exchange, and when that step must be over. Each read
/// and write may block only for what is left of the step: a timeout per read alone would
/// start again with every byte, and a peer trickling its message could hold us forever.
struct Step<'a, S> {
    stream: &'a mut S,
    /// `None` when the step timeout is too long to be an `Instant`: no deadline then.
    deadline: Option<Instant>,
    /// The step timeout, to say it in errors.
    limit: Duration,
}

impl<'a, S: TimeoutStream> Step<'a, S> {
    fn new(stream: &'a mut S, limit: Duration) -> Self {
        Step {
            stream,
            deadline: Instant::now().checked_add(limit),
            limit,
        }
    }

    /// Lets the next read or write block until the deadline at most; fails once it passed.
    /// `got` of `want` bytes of the message being read have come, for the error.
    fn arm(&mut self, stage: Stage, got: usize, want: usize) -> Result<(), PerftestError> {
        let left = match self.deadline {
            None => None,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(self.timed_out(stage, got, want));
                }
                // A socket takes no zero timeout, and rounds below a microsecond.
                Some(left.max(Duration::from_millis(1)))
            }
        };
        self.stream
            .limit_blocking(left)
            .map_err(|source| PerftestError::Io { stage, source })
    }

    fn timed_out(&self, stage: Stage, got: usize, want: usize) -> PerftestError {
        PerftestError::TimedOut {
            stage,
            got,
            want,
            limit: self.limit,
        }
    }

    /// One message in one `write` where the stream allows: perftest reads each message with
    /// a single `read(2)` and gives up if it returns less.
    fn write_msg(&mut self, msg: &[u8], stage: Stage) -> Result<(), PerftestError> {
        let mut sent = 0;
        while sent < msg.len() {
            self.arm(stage, 0, 0)?;
            match self.stream.write(&msg[sent..]) {
                Ok(0) => {
                    return Err(PerftestError::PeerClosed {
                        stage,
                        got: 0,
                        want: 0,
                    });
                }
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(self.io_error(stage, source, 0, 0)),
            }
        }
        self.stream
            .flush()
            .map_err(|source| self.io_error(stage, source, 0, 0))
    }

    /// Fills `msg[range]`; errors count what of the whole message had come.
    fn read_range(
        &mut self,
        msg: &mut [u8],
        range: Range<usize>,
        stage: Stage,
    ) -> Result<(), PerftestError> {
        let want = msg.len();
        let mut got = range.start;
        while got < range.end {
            self.arm(stage, got, want)?;
            match self.stream.read(&mut msg[got..range.end]) {
                Ok(0) => return Err(PerftestError::PeerClosed { stage, got, want }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(self.io_error(stage, source, got, want)),
            }
        }
        Ok(())
    }

    /// A reset or broken pipe is the peer going away: say so the same way as a clean close.
    /// An expired timeout shows up as `WouldBlock` (Unix) or `TimedOut` (Windows).
    fn io_error(&self, stage: Stage, source: io::Error, got: usize, want: usize) -> PerftestError {
        match source.kind() {
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => PerftestError::PeerClosed { stage, got, want },
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => self.timed_out(stage, got, want),
            _ => PerftestError::Io { stage, source },
        }
    }
}

/// Reads one QP message. The InfiniBand format is 59 bytes with its NUL last, where the RoCE
/// format always has a ':': look there before waiting for the rest, so that a peer without
/// a GID gets an error instead of both ends waiting for each other.
fn read_dest<S: TimeoutStream>(io: &mut Step<'_, S>, stage: Stage) -> Result<Dest, PerftestError> {
    let mut msg = [0u8; DEST_MSG_LEN];
    io.read_range(&mut msg, 0..DEST_MSG_LEN_NO_GID, stage)?;
    if msg[DEST_MSG_LEN_NO_GID - 1] == 0 {
        return Err(PerftestError::NoGid {
            got: DEST_MSG_LEN_NO_GID,
            want: DEST_MSG_LEN,
        });
    }
    io.read_range(&mut msg, DEST_MSG_LEN_NO_GID..DEST_MSG_LEN, stage)?;
    let dest = Dest::decode(&msg).map_err(|source| PerftestError::BadDest { stage, source })?;
    // The format's widths bound the rest (PSN 24 bits, LID and out_reads 16, rkey 32, vaddr
    // 64); only the QPN has reserved values below its width.
    if dest.qpn < MIN_PEER_QPN {
        return Err(PerftestError::OutOfBounds {
            stage,
            field: "QPN",
            value: format!("{:#x}", dest.qpn),
            bound: "0x2 to 0xffffff (QPs 0 and 1 are management QPs, never RC)",
        });
    }
    Ok(dest)
}

/// The version text up to its NUL; the number it starts with must be at least 5.70, read the
/// way `atof` reads it.
fn parse_version(msg: &[u8; VERSION_LEN]) -> Result<String, PerftestError> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
    let text = String::from_utf8_lossy(&msg[..end]).into_owned();
    let trimmed = text.trim_start();
    let number_len = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    match trimmed[..number_len].parse::<f64>() {
        Ok(v) if v >= MIN_PEER_VERSION => Ok(text),
        Ok(_) => Err(PerftestError::VersionTooOld { peer: text }),
        Err(_) => Err(PerftestError::Malformed {
            stage: Stage::Version,
            detail: format!(
                "version {text:?} is not a number: is the peer perftest, and is it using the \
                 TCP exchange (no -R on one side only)?"
            ),
        }),
    }
}

/// The version message: the text, NUL-padded, and Sluice's options in its tail when there
/// is something to advertise.
fn version_message(receive_window: Option<u32>) -> [u8; VERSION_LEN] {
    let mut msg = [0u8; VERSION_LEN];
    msg[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    if let Some(window) = receive_window {
        msg[SLUICE_OPTIONS_AT..SLUICE_OPTIONS_AT + 4].copy_from_slice(&SLUICE_MAGIC);
        msg[SLUICE_OPTIONS_AT + 4..].copy_from_slice(&window.to_be_bytes());
    }
    msg
}

/// The receive window a Sluice peer advertised in its version message's tail. Nothing
/// unless the text's NUL comes before the tail and the tail starts with [`SLUICE_MAGIC`]
/// (perftest pads with zeros); a window outside 1..=[`MAX_RECEIVE_WINDOW`] is refused,
/// naming the field.
fn parse_sluice_options(msg: &[u8; VERSION_LEN]) -> Result<Option<u32>, PerftestError> {
    let text_ends_before = msg[..SLUICE_OPTIONS_AT].contains(&0);
    if !text_ends_before || msg[SLUICE_OPTIONS_AT..SLUICE_OPTIONS_AT + 4] != SLUICE_MAGIC {
        return Ok(None);
    }
    let mut window = [0u8; 4];
    window.copy_from_slice(&msg[SLUICE_OPTIONS_AT + 4..]);
    let window = u32::from_be_bytes(window);
    if !(1..=MAX_RECEIVE_WINDOW).contains(&window) {
        return Err(PerftestError::OutOfBounds {
            stage: Stage::Version,
            field: "receive window",
            value: window.to_string(),
            bound: "1 to 8388608 packets (2^23, half the PSN space)",
        });
    }
    Ok(Some(window))
}

/// A size a peer announces, and what Sluice accepts for it.
struct SizeBound {
    field: &'static str,
    max: u32,
    /// `max`, and why, for the error.
    says: &'static str,
}

const PAGE_SIZE_BOUND: SizeBound = SizeBound {
    field: "page size",
    max: MAX_CYCLE_BUFFER,
    says: "1 to 1048576 bytes (perftest sends the system page size, 4 KiB to 64 KiB)",
};

const CACHE_LINE_BOUND: SizeBound = SizeBound {
    field: "cache-line size",
    max: MAX_CACHE_LINE_SIZE,
    says: "1 to 4096 bytes (perftest sends the CPU's, 64 to 256 bytes)",
};

/// perftest's `int32` (big-endian) within `bound`.
fn bounded_be(bytes: [u8; 4], bound: SizeBound) -> Result<u32, PerftestError> {
    let value = i32::from_be_bytes(bytes);
    u32::try_from(value)
        .ok()
        .filter(|v| (1..=bound.max).contains(v))
        .ok_or_else(|| PerftestError::OutOfBounds {
            stage: Stage::SystemData,
            field: bound.field,
            value: format!("{value} ({value:#x})"),
            bound: bound.says,
        })
}

/// A client's bandwidth report, before a server prints or computes with it.
fn check_report(report: &BwReport) -> Result<(), PerftestError> {
    let out = |field, value: String, bound| PerftestError::OutOfBounds {
        stage: Stage::Report,
        field,
        value,
        bound,
    };
    if report.size > MAX_REPORT_SIZE {
        return Err(out(
            "message size",
            report.size.to_string(),
            "at most 2^31 bytes, the largest RDMA message",
        ));
    }
    for (field, value) in [
        ("peak bandwidth", report.bw_peak),
        ("average bandwidth", report.bw_avg),
        ("message rate", report.msg_rate),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(out(
                field,
                value.to_string(),
                "a finite number, not negative",
            ));
        }
    }
    Ok(())
}

/// `enum ibv_mtu`: 1 = 256 up to 5 = 4096.
fn mtu_code(mtu: Mtu) -> u8 {
    match mtu {
        Mtu::M256 => 1,
        Mtu::M512 => 2,
        Mtu::M1024 => 3,
        Mtu::M2048 => 4,
        Mtu::M4096 => 5,
    }
}

fn parse_mtu(msg: [u8; 2]) -> Result<Mtu, PerftestError> {
    let code = match msg {
        [digit @ b'1'..=b'5', 0] => digit - b'0',
        _ => {
            return Err(PerftestError::Malformed {
                stage: Stage::Mtu,
                detail: format!(
                    "MTU {msg:02x?}, expected one digit 1-5 (256-4096 bytes) and a NUL"
                ),
            });
        }
    };
    Ok(Mtu::ALL[usize::from(code) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
    use std::thread;
    use std::time::{Duration, Instant};

    /// The step timeout of the tests' sessions: long enough for a slow machine.
    const STEP: Duration = Duration::from_secs(10);

    /// ::ffff:192.0.2.1
    const GID_HOST: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];

    fn dest(qpn: u32, psn: u32) -> Dest {
        Dest {
            lid: 0,
            out_reads: 1,
            qpn,
            psn,
            rkey: 0x1234,
            vaddr: 0x7f00_0000_1000,
            gid: GID_HOST,
        }
    }

    /// Written by hand from KEY_PRINT_FMT_GID.
    const DEST_TEXT: &str = "0000:0001:000011:3c0ffe:00001234:00007f0000001000:\
        00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:01:00000000:";

    fn dest_bytes(text: &str) -> Vec<u8> {
        let mut v = text.as_bytes().to_vec();
        v.push(0);
        v
    }

    #[test]
    fn encodes_the_exact_text() {
        let msg = dest(0x11, 0x3c0ffe).encode().unwrap();
        assert_eq!(DEST_TEXT.len(), 107);
        assert_eq!(msg.to_vec(), dest_bytes(DEST_TEXT));
    }

    #[test]
    fn decodes_the_exact_text() {
        assert_eq!(
            Dest::decode(&dest_bytes(DEST_TEXT)).unwrap(),
            dest(0x11, 0x3c0ffe)
        );
    }

    /// Sent by Debian bookworm's ib_write_bw (perftest 6.06) on Soft-RoCE with -x 1, captured
    /// in the rxe-lab VM.
    #[test]
    fn decodes_a_message_from_real_perftest() {
        let msg = dest_bytes(
            "0000:0001:000011:f63b5a:00000201:00007f95bb42f000:\
             00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:",
        );
        let d = Dest::decode(&msg).unwrap();
        assert_eq!(
            d,
            Dest {
                lid: 0,
                out_reads: 1,
                qpn: 0x11,
                psn: 0xf63b5a,
                rkey: 0x201,
                vaddr: 0x7f95_bb42_f000,
                gid: Dest::gid_for("192.0.2.2".parse().unwrap()),
            }
        );
        assert_eq!(d.encode().unwrap().to_vec(), msg);
    }

    #[test]
    fn round_trips() {
        let cases = [
            Dest::default(),
            dest(1, 0),
            Dest {
                lid: 0xffff,
                out_reads: 0xffff,
                qpn: 0xff_ffff,
                psn: 0xff_ffff,
                rkey: u32::MAX,
                vaddr: u64::MAX,
                gid: [0xff; 16],
            },
            Dest {
                gid: Dest::gid_for("fe80::1:2".parse().unwrap()),
                out_reads: 128,
                ..dest(0x1234, 0xabcdef)
            },
        ];
        for d in cases {
            assert_eq!(Dest::decode(&d.encode().unwrap()).unwrap(), d);
        }
    }

    #[test]
    fn accepts_upper_case_hex() {
        // perftest's sprintf writes lower case; its strtol would read either.
        let msg = dest_bytes(&DEST_TEXT.to_uppercase());
        assert_eq!(Dest::decode(&msg).unwrap(), dest(0x11, 0x3c0ffe));
    }

    #[test]
    fn refuses_values_the_format_cannot_carry() {
        assert_eq!(
            dest(1 << 24, 0).encode(),
            Err(DestError::OutOfRange {
                name: "QPN",
                value: 1 << 24,
                bits: 24
            })
        );
        assert!(matches!(
            dest(1, 1 << 24).encode(),
            Err(DestError::OutOfRange { name: "PSN", .. })
        ));
    }

    #[test]
    fn rejects_malformed_messages() {
        let good = dest_bytes(DEST_TEXT);
        let replace = |at: usize, with: &[u8]| {
            let mut m = good.clone();
            m[at..at + with.len()].copy_from_slice(with);
            m
        };
        assert_eq!(
            Dest::decode(&good[..59]),
            Err(DestError::Length { got: 59, want: 108 })
        );
        assert_eq!(
            Dest::decode(&[]),
            Err(DestError::Length { got: 0, want: 108 })
        );
        assert_eq!(
            Dest::decode(&replace(107, b":")),
            Err(DestError::Unterminated)
        );
        assert_eq!(Dest::decode(&replace(3, &[0xc3])), Err(DestError::NotText));
        assert!(matches!(
            Dest::decode(&replace(5, b"00g1")),
            Err(DestError::Field {
                name: "out_reads",
                ..
            })
        ));
        // A field one digit short and the next one digit long: same length, wrong layout.
        assert!(matches!(
            Dest::decode(&replace(9, b"0:0")),
            Err(DestError::Field {
                name: "out_reads",
                ..
            })
        ));
        assert!(matches!(
            Dest::decode(&replace(50, b"+1")),
            Err(DestError::Field {
                name: "GID byte",
                ..
            })
        ));
        assert!(matches!(
            Dest::decode(&replace(106, b"0")),
            Err(DestError::FieldCount { got: 22, .. })
        ));
        assert!(matches!(
            Dest::decode(&replace(40, &[0])),
            Err(DestError::FieldCount { .. })
        ));
        assert!(matches!(
            Dest::decode(&[0u8; 108]),
            Err(DestError::FieldCount { got: 0, .. })
        ));
        assert!(matches!(
            Dest::decode(&replace(98, b"0000000x")),
            Err(DestError::Field {
                name: "SRQ number",
                ..
            })
        ));
    }

    /// A small xorshift: random and mutated messages must give a result, never a panic.
    #[test]
    fn decode_never_panics() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let good = dest_bytes(DEST_TEXT);
        let alphabet = b"0123456789abcdefABCDEF:\0 xg\xff";
        for round in 0..20_000 {
            let mut msg = if round % 2 == 0 {
                good.clone()
            } else {
                (0..108).map(|_| next() as u8).collect()
            };
            for _ in 0..(next() % 4 + 1) {
                let at = (next() % 108) as usize;
                msg[at] = alphabet[(next() % alphabet.len() as u64) as usize];
            }
            if let Ok(d) = Dest::decode(&msg) {
                // Whatever decodes re-encodes to a valid message of the same values.
                assert_eq!(Dest::decode(&d.encode().unwrap()).unwrap(), d);
            }
        }
    }

    #[test]
    fn gids_and_addresses() {
        let d = dest(1, 1);
        assert_eq!(d.gid_ip(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
        assert!(d.is_ipv4_gid());
        assert_eq!(Dest::gid_for(d.gid_ip()), GID_HOST);
        let v6 = Dest {
            gid: Dest::gid_for("fe80::5054:ff:fe12:3456".parse().unwrap()),
            ..d
        };
        assert!(!v6.is_ipv4_gid());
        assert_eq!(
            v6.gid_ip(),
            "fe80::5054:ff:fe12:3456".parse::<IpAddr>().unwrap()
        );
        let mut mcast = [0u8; 16];
        mcast[..2].copy_from_slice(&[0xff, 0x0e]);
        mcast[10..].copy_from_slice(&[0xff, 0xff, 239, 1, 1, 1]);
        assert!(Dest { gid: mcast, ..d }.is_ipv4_gid());
        assert_eq!(
            d.to_string(),
            "LID 0x0000 QPN 0x000001 PSN 0x000001 OUT 0x0001 RKey 0x00001234 \
             VAddr 0x00007f0000001000 GID ::ffff:192.0.2.1"
        );
    }

    #[test]
    fn versions() {
        let msg = |s: &str| {
            let mut m = [0u8; VERSION_LEN];
            m[..s.len()].copy_from_slice(s.as_bytes());
            m
        };
        assert_eq!(parse_version(&msg("6.06")).unwrap(), "6.06");
        assert_eq!(parse_version(&msg("5.70")).unwrap(), "5.70");
        assert_eq!(parse_version(&msg("6.29 extra")).unwrap(), "6.29 extra");
        assert_eq!(parse_version(&[b'9'; 16]).unwrap().len(), 16);
        assert!(matches!(
            parse_version(&msg("5.6")),
            Err(PerftestError::VersionTooOld { .. })
        ));
        assert!(matches!(
            parse_version(&msg("")),
            Err(PerftestError::Malformed { .. })
        ));
        assert!(matches!(
            parse_version(&msg("\u{1}x")),
            Err(PerftestError::Malformed { .. })
        ));
    }

    #[test]
    fn mtus() {
        for mtu in Mtu::ALL {
            assert_eq!(parse_mtu([b'0' + mtu_code(mtu), 0]).unwrap(), mtu);
        }
        for bad in [[b'0', 0], [b'6', 0], [b'5', b'5'], [0, 0]] {
            assert!(matches!(
                parse_mtu(bad),
                Err(PerftestError::Malformed {
                    stage: Stage::Mtu,
                    ..
                })
            ));
        }
    }

    #[test]
    fn test_names() {
        for t in Test::ALL {
            assert_eq!(t.name().parse::<Test>().unwrap(), t);
            assert_eq!(t.name()[3..].parse::<Test>().unwrap(), t);
        }
        assert!("ib_foo_bw".parse::<Test>().is_err());
        assert_eq!(Test::AtomicLat.default_size(), 8);
        assert_eq!(Test::SendLat.default_size(), 2);
        assert_eq!(Test::ReadBw.default_size(), 65536);
    }

    /// A connected pair of TCP streams on 127.0.0.1, with timeouts so that a protocol bug
    /// fails the test instead of hanging it.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        for s in [&client, &server] {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        (client, server)
    }

    struct Side {
        role: Role,
        params: LocalParams,
        dests: Vec<Dest>,
        report: Option<BwReport>,
    }

    struct Outcome {
        negotiated: Negotiated,
        peer: Vec<Dest>,
        report: Option<BwReport>,
    }

    /// One side of a whole test, as the perf tool would drive it (minus the traffic).
    fn run(stream: TcpStream, test: Test, side: Side) -> Result<Outcome, PerftestError> {
        let mut s = Session::start(stream, side.role, test, side.params, STEP)?;
        let peer = s.exchange_dests(&side.dests)?.to_vec();
        s.connected()?;
        s.start_traffic()?;
        let report = s.finish(side.report)?;
        Ok(Outcome {
            negotiated: s.negotiated().clone(),
            peer,
            report,
        })
    }

    fn both(
        test: Test,
        client: Side,
        server: Side,
    ) -> (
        Result<Outcome, PerftestError>,
        Result<Outcome, PerftestError>,
    ) {
        let (c, s) = pair();
        let server = thread::spawn(move || run(s, test, server));
        let client = run(c, test, client);
        (client, server.join().unwrap())
    }

    fn dests(n: u32, base: u32) -> Vec<Dest> {
        (0..n)
            .map(|i| Dest {
                vaddr: 0x1000 * u64::from(i + 1),
                ..dest(base + i, (base + i) * 0x111)
            })
            .collect()
    }

    #[test]
    fn sluice_to_sluice_every_test() {
        let report = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1234.5,
            bw_avg: 1200.25,
            msg_rate: 0.019,
        };
        for test in Test::ALL {
            for qps in [1, 3] {
                let client = Side {
                    role: Role::Client,
                    params: LocalParams::new(Mtu::M4096),
                    dests: dests(qps, 0x100),
                    report: Some(report),
                };
                let server = Side {
                    role: Role::Server,
                    params: LocalParams {
                        cycle_buffer: 65536,
                        cache_line_size: 128,
                        mtu: Mtu::M1024,
                        receive_window: None,
                    },
                    dests: dests(qps, 0x200),
                    report: None,
                };
                let (c, s) = both(test, client, server);
                let (c, s) = (c.unwrap(), s.unwrap());
                assert_eq!(c.peer, dests(qps, 0x200), "{test}");
                assert_eq!(s.peer, dests(qps, 0x100), "{test}");
                for n in [&c.negotiated, &s.negotiated] {
                    assert_eq!(n.peer_version, VERSION);
                    assert_eq!((n.cycle_buffer, n.cache_line_size), (65536, 128));
                    assert_eq!(n.mtu, Mtu::M1024);
                }
                assert_eq!(c.negotiated.peer_mtu, Mtu::M1024);
                assert_eq!(s.negotiated.peer_mtu, Mtu::M4096);
                let bw_report = matches!(test, Test::WriteBw | Test::ReadBw | Test::AtomicBw);
                assert_eq!(s.report, bw_report.then_some(report), "{test}");
                assert_eq!(c.report, None);
            }
        }
    }

    #[test]
    fn different_qp_counts_are_caught() {
        for test in [Test::WriteBw, Test::SendBw, Test::ReadLat] {
            let side = |role, n| Side {
                role,
                params: LocalParams::new(Mtu::M1024),
                dests: dests(n, 0x10),
                report: None,
            };
            let (c, s) = both(test, side(Role::Client, 2), side(Role::Server, 1));
            // One end sees the mismatch; the other then sees it leave.
            let errors = [c.err(), s.err()];
            assert!(
                errors
                    .iter()
                    .any(|e| matches!(e, Some(PerftestError::DestChanged { .. }))),
                "{test}: {errors:?}"
            );
        }
    }

    #[test]
    fn different_gid_types_are_caught() {
        let side = |role, gid| Side {
            role,
            params: LocalParams::new(Mtu::M1024),
            dests: vec![Dest {
                gid,
                ..dest(0x11, 1)
            }],
            report: None,
        };
        let v6 = Dest::gid_for("fe80::1".parse().unwrap());
        let (c, s) = both(
            Test::WriteBw,
            side(Role::Client, GID_HOST),
            side(Role::Server, v6),
        );
        for e in [c.err(), s.err()] {
            let e = e.unwrap();
            assert!(matches!(e, PerftestError::GidTypeMismatch { .. }));
            assert!(e.to_string().contains("-x"), "{e}");
        }
    }

    /// The bytes a perftest server would exchange with our client, written out by hand from
    /// perftest's source: the script plays the server and checks every byte we send.
    #[test]
    fn client_speaks_perftest_bytes() {
        let (client, mut server) = pair();
        let peer = thread::spawn(move || {
            let mut expect = |want: &[u8], reply: &[u8]| {
                let mut got = vec![0u8; want.len()];
                server.read_exact(&mut got).unwrap();
                assert_eq!(got, want, "{}", String::from_utf8_lossy(&got));
                server.write_all(reply).unwrap();
            };
            expect(
                b"6.06\0\0\0\0\0\0\0\0\0\0\0\0",
                b"6.13\0\0\0\0\0\0\0\0\0\0\0\0",
            );
            expect(&[0, 0, 0x10, 0], &[0, 0, 0x10, 0]); // page size 4096
            expect(&[0, 0, 0, 64], &[0, 0, 0, 64]); // cache line 64
            expect(b"5\0", b"3\0"); // we want 4096, the peer 1024
            let ours = dest_bytes(DEST_TEXT);
            let theirs = dest_bytes(
                "0000:0001:000012:0abcde:00000100:00005555deadb000:\
                 00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:",
            );
            // ib_write_bw: N, then N after connecting, then one more.
            for _ in 0..3 {
                expect(&ours, &theirs);
            }
            // End sync, report (size, iters, peak, avg, rate), close.
            expect(&ours, &theirs);
            expect(&65536u64.to_be_bytes(), &[0xaa; 8]);
            expect(&5000u64.to_be_bytes(), &[0xaa; 8]);
            expect(&1.5f64.to_be_bytes(), &[0xaa; 8]);
            expect(&[0x40, 0x93, 0x4a, 0, 0, 0, 0, 0], &[0xaa; 8]); // 1234.5
            expect(&0.25f64.to_be_bytes(), &[0xaa; 8]);
            expect(&ours, &theirs);
            // Nothing after the closing sync: we send no "done".
            let mut rest = Vec::new();
            server.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
        });
        let mut s = Session::start(
            client,
            Role::Client,
            Test::WriteBw,
            LocalParams::new(Mtu::M4096),
            STEP,
        )
        .unwrap();
        assert_eq!(s.negotiated().peer_version, "6.13");
        assert_eq!(s.negotiated().mtu, Mtu::M1024);
        let peer_dest = s.exchange_dests(&[dest(0x11, 0x3c0ffe)]).unwrap()[0];
        assert_eq!(peer_dest.qpn, 0x12);
        assert_eq!(peer_dest.vaddr, 0x5555_dead_b000);
        assert_eq!(peer_dest.gid_ip(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)));
        s.connected().unwrap();
        s.start_traffic().unwrap();
        let report = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1.5,
            bw_avg: 1234.5,
            msg_rate: 0.25,
        };
        assert_eq!(s.finish(Some(report)).unwrap(), None);
        s.into_inner().shutdown(Shutdown::Both).unwrap();
        peer.join().unwrap();
    }

    /// The same for our server against a perftest ib_read_lat client: one extra QP exchange
    /// before the first round, and the closing sync right after connecting.
    #[test]
    fn server_speaks_perftest_bytes() {
        let (mut client, server) = pair();
        let peer = thread::spawn(move || {
            let mut step = |send: &[u8], want: &[u8]| {
                client.write_all(send).unwrap();
                let mut got = vec![0u8; want.len()];
                client.read_exact(&mut got).unwrap();
                assert_eq!(got, want, "{}", String::from_utf8_lossy(&got));
            };
            step(
                b"6.06\0\0\0\0\0\0\0\0\0\0\0\0",
                b"6.06\0\0\0\0\0\0\0\0\0\0\0\0",
            );
            step(&[0, 1, 0, 0], &[0, 0, 0x10, 0]); // the peer has 64 KiB pages
            step(&[0, 0, 0, 64], &[0, 0, 0, 64]);
            step(b"5\0", b"4\0");
            let theirs = dest_bytes(
                "0000:0080:000012:0abcde:00000100:00005555deadb000:\
                 00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:",
            );
            let ours = dest_bytes(DEST_TEXT);
            // 1 early + N + N + 1, then the closing sync.
            for _ in 0..5 {
                step(&theirs, &ours);
            }
        });
        let mut s = Session::start(
            server,
            Role::Server,
            Test::ReadLat,
            LocalParams::new(Mtu::M2048),
            STEP,
        )
        .unwrap();
        assert_eq!(s.negotiated().cycle_buffer, 65536);
        assert_eq!(s.negotiated().mtu, Mtu::M2048);
        assert_eq!(s.negotiated().peer_mtu, Mtu::M4096);
        let peer_dest = s.exchange_dests(&[dest(0x11, 0x3c0ffe)]).unwrap()[0];
        assert_eq!(peer_dest.out_reads, 0x80);
        s.connected().unwrap();
        s.start_traffic().unwrap();
        assert_eq!(s.finish(None).unwrap(), None);
        peer.join().unwrap();
    }

    /// Plays a perftest client up to its first QP message.
    fn perftest_client_preamble(client: &mut TcpStream) {
        let mut buf = [0u8; 16];
        client.write_all(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0").unwrap();
        client.read_exact(&mut buf).unwrap();
        for msg in [&[0, 0, 0x10, 0][..], &[0, 0, 0, 64], b"5\0"] {
            client.write_all(msg).unwrap();
            client.read_exact(&mut buf[..msg.len()]).unwrap();
        }
    }

    #[test]
    fn a_peer_that_leaves_mid_message_is_reported() {
        let (mut client, server) = pair();
        let peer = thread::spawn(move || {
            perftest_client_preamble(&mut client);
            client.write_all(&DEST_TEXT.as_bytes()[..70]).unwrap();
        });
        let mut s = Session::start(
            server,
            Role::Server,
            Test::WriteBw,
            LocalParams::new(Mtu::M1024),
            STEP,
        )
        .unwrap();
        let e = s.exchange_dests(&[dest(1, 1)]).unwrap_err();
        peer.join().unwrap();
        assert!(
            matches!(
                e,
                PerftestError::PeerClosed {
                    stage: Stage::QpData(0),
                    got: 70,
                    want: 108
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("(70 of 108 bytes"), "{e}");
        // The two ends are out of step now: nothing more may be tried on this session.
        assert!(matches!(
            s.exchange_dests(&[dest(1, 1)]),
            Err(PerftestError::Usage(m)) if m.contains("earlier step")
        ));
    }

    #[test]
    fn an_infiniband_peer_is_told_to_use_a_gid() {
        let (mut client, server) = pair();
        let peer = thread::spawn(move || {
            perftest_client_preamble(&mut client);
            // KEY_PRINT_FMT: no GID, 58 characters and the NUL; then perftest waits.
            let mut ib = b"0001:0001:000012:0abcde:00000100:00005555deadb000:00000000".to_vec();
            ib.push(0);
            client.write_all(&ib).unwrap();
            let mut rest = Vec::new();
            let _ = client.read_to_end(&mut rest);
        });
        let mut s = Session::start(
            server,
            Role::Server,
            Test::WriteBw,
            LocalParams::new(Mtu::M1024),
            STEP,
        )
        .unwrap();
        let e = s.exchange_dests(&[dest(1, 1)]).unwrap_err();
        assert!(
            matches!(e, PerftestError::NoGid { got: 59, want: 108 }),
            "{e}"
        );
        drop(s);
        peer.join().unwrap();
    }

    #[test]
    fn a_peer_that_leaves_early_is_reported() {
        let (client, mut server) = pair();
        let peer = thread::spawn(move || {
            let mut buf = [0u8; 10];
            server.read_exact(&mut buf).unwrap();
            // perftest exits like this when the version is too old for it.
        });
        let e = Session::start(
            client,
            Role::Client,
            Test::SendBw,
            LocalParams::new(Mtu::M1024),
            STEP,
        )
        .unwrap_err();
        peer.join().unwrap();
        assert!(
            matches!(
                e,
                PerftestError::PeerClosed {
                    stage: Stage::Version,
                    got: 0,
                    want: 16
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("version exchange"), "{e}");
    }

    /// Finding 1 of the hostile-peer review: a silent server kept a client waiting forever.
    #[test]
    fn a_silent_server_times_the_client_out() {
        let (client, mut server) = pair();
        let limit = Duration::from_millis(200);
        let began = Instant::now();
        let e = Session::start(
            client,
            Role::Client,
            Test::SendBw,
            LocalParams::new(Mtu::M1024),
            limit,
        )
        .unwrap_err();
        assert!(began.elapsed() < limit * 5, "{:?}", began.elapsed());
        let mut buf = [0u8; 16];
        server.read_exact(&mut buf).unwrap();
        assert!(
            matches!(
                e,
                PerftestError::TimedOut {
                    stage: Stage::Version,
                    got: 0,
                    want: 16,
                    limit: l,
                } if l == limit
            ),
            "{e}"
        );
        assert!(e.to_string().contains("200ms"), "{e}");
    }

    /// A peer that sends part of a message and then holds the connection open.
    fn holds_after(mut peer: TcpStream, sent: &'static [u8]) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            peer.write_all(sent).unwrap();
            // Until our end gives up and closes.
            let mut rest = Vec::new();
            let _ = peer.read_to_end(&mut rest);
        })
    }

    /// A peer's version message (`text`, NUL-padded, and `tail` from byte 8 on) and the
    /// page, cache line and MTU messages; what the server then negotiated.
    fn server_hearing_version(text: &[u8], tail: &[u8]) -> Result<Negotiated, PerftestError> {
        let (client, server) = pair();
        let mut msg = [0u8; 16].to_vec();
        msg[..text.len()].copy_from_slice(text);
        msg[SLUICE_OPTIONS_AT..SLUICE_OPTIONS_AT + tail.len()].copy_from_slice(tail);
        msg.extend_from_slice(&4096u32.to_be_bytes());
        msg.extend_from_slice(&64u32.to_be_bytes());
        msg.extend_from_slice(b"3\0");
        let peer = holds_after(client, msg.leak());
        let params = LocalParams::new(Mtu::M1024).with_receive_window(Some(256));
        let result = Session::start(server, Role::Server, Test::WriteBw, params, STEP)
            .map(|s| s.negotiated().clone());
        peer.join().unwrap();
        result
    }

    /// Two Sluice ends learn each other's receive window from the version message's tail;
    /// an end that advertises none sends perftest's exact message and is heard as none.
    #[test]
    fn sluice_ends_advertise_their_receive_windows() {
        for (client_window, server_window) in [
            (Some(256), Some(16)),
            (Some(1), Some(MAX_RECEIVE_WINDOW)),
            (None, Some(64)),
            (Some(64), None),
            (None, None),
        ] {
            let side = |role, window| Side {
                role,
                params: LocalParams::new(Mtu::M1024).with_receive_window(window),
                dests: dests(1, 0x10),
                report: None,
            };
            let (c, s) = both(
                Test::WriteBw,
                side(Role::Client, client_window),
                side(Role::Server, server_window),
            );
            let (c, s) = (c.unwrap(), s.unwrap());
            assert_eq!(c.negotiated.peer_receive_window, server_window);
            assert_eq!(s.negotiated.peer_receive_window, client_window);
            assert_eq!(c.negotiated.peer_version, VERSION);
        }
        assert_eq!(version_message(None), *b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(
            version_message(Some(0x0102)),
            *b"6.06\0\0\0\0SLC1\0\0\x01\x02"
        );
    }

    /// perftest's message (zeros after the text), any tail without the mark, or a version
    /// text reaching into the tail, advertise nothing; a marked window of 0 or past 2^23
    /// is refused, naming the field; a window of our own out of bounds is a usage error.
    #[test]
    fn a_receive_window_is_heard_only_from_sluice_and_within_bounds() {
        let heard = |text: &[u8], tail: &[u8]| {
            server_hearing_version(text, tail)
                .unwrap()
                .peer_receive_window
        };
        assert_eq!(heard(b"6.06", b""), None);
        assert_eq!(heard(b"6.13", &[0xaa; 8]), None);
        assert_eq!(heard(b"6.06", b"SLC2\0\0\x01\0"), None);
        assert_eq!(heard(b"6.06-sluSLC1", b"SLC1\0\0\x01\0"), None);
        assert_eq!(heard(b"6.06", b"SLC1\0\0\0\x10"), Some(16));
        assert_eq!(heard(b"6.06", b"SLC1\0\x80\0\0"), Some(1 << 23));
        for (tail, value) in [
            (b"SLC1\0\0\0\0", "0"),
            (b"SLC1\0\x80\0\x01", "8388609"),
            (b"SLC1\xff\xff\xff\xff", "4294967295"),
        ] {
            let e = server_hearing_version(b"6.06", tail).unwrap_err();
            assert!(
                matches!(
                    &e,
                    PerftestError::OutOfBounds {
                        stage: Stage::Version,
                        field: "receive window",
                        ..
                    }
                ),
                "{e}"
            );
            let text = e.to_string();
            assert!(
                text.contains("receive window") && text.contains(value),
                "{text}"
            );
        }
        for bad in [0, MAX_RECEIVE_WINDOW + 1] {
            let (client, _server) = pair();
            let params = LocalParams::new(Mtu::M1024).with_receive_window(Some(bad));
            let e = Session::start(client, Role::Client, Test::WriteBw, params, STEP).unwrap_err();
            assert!(e.to_string().contains("receive window"), "{e}");
        }
    }

    /// Finding 1: a client that sends 8 of the 16 version bytes held a server in `read`.
    #[test]
    fn a_server_times_out_a_client_that_sends_half_its_version() {
        let (client, server) = pair();
        let peer = holds_after(client, b"6.06\0\0\0\0");
        let limit = Duration::from_millis(300);
        let began = Instant::now();
        let e = Session::start(
            server,
            Role::Server,
            Test::WriteBw,
            LocalParams::new(Mtu::M1024),
            limit,
        )
        .unwrap_err();
        assert!(began.elapsed() < limit * 5, "{:?}", began.elapsed());
        peer.join().unwrap();
        assert!(
            matches!(
                e,
                PerftestError::TimedOut {
                    stage: Stage::Version,
                    got: 8,
                    want: 16,
                    ..
                }
            ),
            "{e}"
        );
        let text = e.to_string();
        assert!(text.contains("version exchange"), "{text}");
        assert!(text.contains("(8 of 16 bytes"), "{text}");
    }

    /// The deadline is the step's, not each read's: a byte every 50 ms would renew a timeout
    /// per read forever.
    #[test]
    fn a_trickling_peer_cannot_stretch_a_step() {
        let (mut client, server) = pair();
        let peer = thread::spawn(move || {
            for &byte in b"6.06\0\0\0\0\0\0\0\0\0\0\0\0" {
                if client.write_all(&[byte]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        let limit = Duration::from_millis(300);
        let began = Instant::now();
        let e = Session::start(
            server,
            Role::Server,
            Test::WriteBw,
            LocalParams::new(Mtu::M1024),
            limit,
        )
        .unwrap_err();
        let took = began.elapsed();
        peer.join().unwrap();
        assert!(took < Duration::from_millis(700), "{took:?}");
        assert!(
            matches!(
                e,
                PerftestError::TimedOut {
                    stage: Stage::Version,
                    got: 1..=15,
                    want: 16,
                    ..
                }
            ),
            "{e}"
        );
    }

    /// A perftest client's first messages with the page and cache-line sizes given, then
    /// whatever comes back until our end closes.
    fn announces(client: TcpStream, page: u32, line: u32) -> thread::JoinHandle<()> {
        let mut msg = b"6.06\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        msg.extend_from_slice(&page.to_be_bytes());
        msg.extend_from_slice(&line.to_be_bytes());
        msg.extend_from_slice(b"3\0");
        let msg: &'static [u8] = msg.leak();
        holds_after(client, msg)
    }

    fn server_negotiating(page: u32, line: u32) -> Result<Negotiated, PerftestError> {
        let (client, server) = pair();
        let peer = announces(client, page, line);
        let result = Session::start(
            server,
            Role::Server,
            Test::WriteBw,
            LocalParams::new(Mtu::M1024),
            STEP,
        )
        .map(|s| s.negotiated().clone());
        peer.join().unwrap();
        result
    }

    /// Finding 2: a page size of 0x7fffffff and a cache line of 0x7ffffffe made `sluice perf`
    /// reserve 8 GiB. Now each is refused, naming the field, the value and the bound.
    #[test]
    fn announced_sizes_beyond_their_bounds_are_refused() {
        for (page, line, field, value) in [
            (0x7fff_ffff, 0x7fff_fffe, "page size", "2147483647"),
            (MAX_CYCLE_BUFFER + 1, 64, "page size", "1048577"),
            (0, 64, "page size", "0"),
            (0xffff_f000, 64, "page size", "-4096"),
            (4096, 0x7fff_fffe, "cache-line size", "2147483646"),
            (4096, MAX_CACHE_LINE_SIZE + 1, "cache-line size", "4097"),
            (4096, 0, "cache-line size", "0"),
        ] {
            let e = server_negotiating(page, line).unwrap_err();
            assert!(
                matches!(
                    &e,
                    PerftestError::OutOfBounds { stage: Stage::SystemData, field: f, .. }
                        if *f == field
                ),
                "{page:#x}/{line:#x}: {e}"
            );
            let text = e.to_string();
            assert!(text.contains(value), "{text}");
            assert!(text.contains("Sluice accepts 1 to"), "{text}");
        }
    }

    #[test]
    fn announced_sizes_at_their_bounds_are_accepted() {
        let n = server_negotiating(MAX_CYCLE_BUFFER, MAX_CACHE_LINE_SIZE).unwrap();
        assert_eq!(n.cycle_buffer, MAX_CYCLE_BUFFER);
        assert_eq!(n.cache_line_size, MAX_CACHE_LINE_SIZE);
        assert_eq!(n.target_span(2), u64::from(MAX_CYCLE_BUFFER));
        assert_eq!(n.target_span(MAX_CYCLE_BUFFER + 1), 1 << 20 | 4096);
        let n = server_negotiating(1, 1).unwrap();
        // The larger of the two: ours.
        assert_eq!(n.cycle_buffer, DEFAULT_CYCLE_BUFFER);
        assert_eq!(n.cache_line_size, DEFAULT_CACHE_LINE_SIZE);
    }

    #[test]
    fn a_management_qpn_is_refused() {
        let (mut client, server) = pair();
        let peer = thread::spawn(move || {
            perftest_client_preamble(&mut client);
            client
                .write_all(&dest_bytes(&DEST_TEXT.replacen("000011", "000001", 1)))
                .unwrap();
            let mut rest = Vec::new();
            let _ = client.read_to_end(&mut rest);
        });
        let mut s = Session::start(
            server,
            Role::Server,
            Test::WriteBw,
            LocalParams::new(Mtu::M1024),
            STEP,
        )
        .unwrap();
        let e = s.exchange_dests(&[dest(0x11, 1)]).unwrap_err();
        drop(s);
        peer.join().unwrap();
        assert!(
            matches!(e, PerftestError::OutOfBounds { field: "QPN", .. }),
            "{e}"
        );
        assert!(e.to_string().contains("0x1"), "{e}");
    }

    #[test]
    fn a_report_a_server_cannot_use_is_refused() {
        for (bad, field) in [
            (
                BwReport {
                    size: MAX_REPORT_SIZE + 1,
                    ..BwReport::default()
                },
                "message size",
            ),
            (
                BwReport {
                    bw_avg: f64::NAN,
                    ..BwReport::default()
                },
                "average bandwidth",
            ),
            (
                BwReport {
                    msg_rate: -1.0,
                    ..BwReport::default()
                },
                "message rate",
            ),
        ] {
            let side = |role, report| Side {
                role,
                params: LocalParams::new(Mtu::M1024),
                dests: dests(1, 0x20),
                report,
            };
            let (c, s) = both(
                Test::WriteBw,
                side(Role::Client, Some(bad)),
                side(Role::Server, None),
            );
            let e = s.err().unwrap();
            assert!(
                matches!(e, PerftestError::OutOfBounds { stage: Stage::Report, field: f, .. } if f == field),
                "{e}"
            );
            assert!(c.is_err());
        }
    }

    #[test]
    fn an_old_or_foreign_peer_is_refused() {
        for (reply, old) in [
            (&b"5.60\0\0\0\0\0\0\0\0\0\0\0\0"[..], true),
            (b"HTTP/1.1 400 Bad", false),
        ] {
            let (client, mut server) = pair();
            let reply = reply.to_vec();
            let peer = thread::spawn(move || {
                let mut buf = [0u8; 16];
                server.read_exact(&mut buf).unwrap();
                server.write_all(&reply).unwrap();
            });
            let e = Session::start(
                client,
                Role::Client,
                Test::WriteBw,
                LocalParams::new(Mtu::M1024),
                STEP,
            )
            .unwrap_err();
            peer.join().unwrap();
            if old {
                assert!(matches!(e, PerftestError::VersionTooOld { .. }), "{e}");
                assert!(e.to_string().contains("5.70"), "{e}");
            } else {
                assert!(matches!(e, PerftestError::Malformed { .. }), "{e}");
            }
        }
    }

    #[test]
    fn steps_out_of_order_are_refused() {
        let (c, s) = pair();
        let server = thread::spawn(move || {
            Session::start(
                s,
                Role::Server,
                Test::WriteBw,
                LocalParams::new(Mtu::M1024),
                STEP,
            )
            .unwrap()
        });
        let mut client = Session::start(
            c,
            Role::Client,
            Test::WriteBw,
            LocalParams::new(Mtu::M1024),
            STEP,
        )
        .unwrap();
        let _server = server.join().unwrap();
        assert!(matches!(client.connected(), Err(PerftestError::Usage(_))));
        assert!(matches!(client.finish(None), Err(PerftestError::Usage(_))));
        assert!(matches!(
            client.exchange_dests(&[]),
            Err(PerftestError::Usage(_))
        ));
        assert!(matches!(
            client.exchange_dests(&[dest(1 << 24, 0)]),
            Err(PerftestError::LocalDest { qp: 0, .. })
        ));
    }
}
