//! An AF_XDP link: RoCE v2 frames sent and received through an XDP socket on one network
//! interface, past the kernel's IP and UDP stack. Sluice writes the Ethernet, IPv4 and UDP
//! headers itself; a small XDP program (loaded here, detached when the link closes) hands
//! the interface's RoCE packets for this device's address and port to the socket and every
//! other packet (ARP, the perftest TCP exchange, other UDP) to the kernel as usual.
//!
//! Why: on the project's 2-core VM, a ping-pong between two network namespaces over a veth
//! took 1.72-1.89 us per half round trip through UDP sockets, and 0.72-0.74 us through
//! AF_XDP sockets (a C experiment, generic XDP, copy mode): a UDP send and receive cost the
//! kernel about a microsecond more than a frame into and out of an XDP socket's rings, and
//! the receiving end finds the frame by reading memory, with no system call.
//!
//! Scope: IPv4, interface queue 0 (a veth or any single-queue interface; on a multi-queue
//! NIC steer RoCE to queue 0), copy mode (`XDP_COPY`, which every driver supports), frames
//! of up to 9,014 bytes over several 4 KiB chunks (multi-buffer, Linux 6.6 and later; one
//! chunk, RoCE path MTU 2048 at most, before), the peer on the link (its MAC from the
//! kernel's neighbour table). Needs CAP_NET_ADMIN and CAP_BPF (root).
//!
//! Like `sys`, this module makes system calls and reads memory the kernel shares; every
//! unsafe block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use libc::{c_int, c_void};
use sluice_wire::{
    ETHERNET_HEADER_LEN, ETHERTYPE_IPV4, EthernetHeader, IPV4_HEADER_LEN, IpHeader, IpUdp,
    Ipv4Header, UDP_HEADER_LEN, UdpHeader,
};

use crate::sys::{InMsg, OutMsg, OutPacket};

/// One UMEM chunk. A frame longer than one (a RoCE packet of path MTU 4096 is 4,170 bytes
/// with its Ethernet, IP and UDP headers) spans several, as one descriptor each, all but the
/// last flagged `XDP_PKT_CONTD` (AF_XDP multi-buffer, `XDP_USE_SG`, Linux 6.6 and later).
const FRAME: usize = 4096;
/// Chunks in the UMEM: half are lent to the kernel for receiving, half are ours to send from.
const FRAMES: usize = 4096;
/// Entries of each ring (a power of two; the fill ring can hold every receive chunk).
const RING: u32 = (FRAMES / 2) as u32;
/// Where the kernel puts received bytes in each chunk, in copy mode (`XDP_PACKET_HEADROOM`).
const RX_HEADROOM: usize = 256;
/// The longest frame taken, sent or received: a jumbo frame's 9,000 bytes of IP and
/// Ethernet's 14 (at most three chunks).
const MAX_FRAME_LEN: usize = 9014;
/// `sockaddr_xdp` flag: frames may span several chunks (`XDP_USE_SG`).
const XDP_USE_SG: u16 = 1 << 4;
/// Descriptor option: the frame goes on in the next descriptor (`XDP_PKT_CONTD`).
const XDP_PKT_CONTD: u32 = 1;
/// Ethernet, IPv4 (no options) and UDP headers.
const HEADERS_LEN: usize = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN;
/// The largest RoCE packet (BTH to ICRC) a frame of one chunk carries, received or sent:
/// the most a link without multi-buffer frames takes.
const ONE_CHUNK_ROCE_LEN: usize = FRAME - RX_HEADROOM - HEADERS_LEN;
/// How long to wait for an interface queue held by another XDP socket (one closing).
const BIND_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);
/// Frames taken from the receive ring per receive.
const RX_BATCH: usize = 64;
/// What the kernel sends per `sendto` in copy mode (its `TX_BATCH_SIZE`) is 32; this many
/// calls in a row that leave the ring as full as before mean the link is stuck.
const KICKS: usize = 64;

/// An XDP socket with its UMEM and rings, the XDP program that feeds it, and what its frames'
/// headers say.
pub(crate) struct XdpLink {
    interface: String,
    /// Dropped in field order: the socket goes first, then the program's attachment
    /// (detaching it), the program and its map.
    socket: OwnedFd,
    _attachment: OwnedFd,
    _program: OwnedFd,
    _map: OwnedFd,
    umem: Umem,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    /// Chunks that are ours to send from (not lent to the kernel).
    free: Vec<u64>,
    /// Frames spanning several chunks are sent and received (`XDP_USE_SG`).
    multi_buffer: bool,
    /// The descriptors taken in the last receive (their chunks go back to the fill ring on
    /// the next one), and the frames they make.
    rx_descs: Vec<libc::xdp_desc>,
    frames: Vec<RxFrame>,
    /// The bytes of received frames that span several chunks, joined.
    joined: Vec<u8>,
    local: SocketAddrV4,
    mac: [u8; 6],
    tos: u8,
    /// Peers' MAC addresses, from the kernel's neighbour table.
    neighbours: Vec<(Ipv4Addr, [u8; 6])>,
    /// For asking the kernel to resolve a peer's address (a datagram to its discard port).
    resolver: UdpSocket,
}

impl std::fmt::Debug for XdpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpLink")
            .field("interface", &self.interface)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// A received frame: where its bytes are.
#[derive(Debug, Clone, Copy)]
enum RxFrame {
    /// In one chunk: descriptor `i` of the receive.
    InPlace(usize),
    /// Spanning several chunks: these bytes of `joined`.
    Joined { start: usize, end: usize },
    /// Longer than `MAX_FRAME_LEN`.
    TooLong,
    /// Its descriptors are out of bounds.
    Refused,
}

/// Why a received frame is not handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a well-formed IPv4 UDP datagram to this device.
    Malformed,
    /// Longer than any frame the link takes: a GSO batch a UDP peer on this host sent across
    /// a veth, which hands it over whole.
    TooLong,
}

/// Why a send stopped short of its messages: the message after those it took cannot leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendStop {
    /// Its packet is larger than a frame.
    TooBig,
    /// Its peer's MAC address is not known yet (the kernel has been asked to resolve it);
    /// or its peer is not IPv4.
    Unresolved,
}

impl XdpLink {
    /// Opens an XDP socket on `interface`, queue 0, for RoCE packets to `local`.
    pub(crate) fn open(interface: &str, local: SocketAddrV4, tos: u8) -> io::Result<XdpLink> {
        let ifindex = check_interface(interface)?;
        let mac = interface_mac(interface)?;
        let map = bpf::create_xskmap()?;
        let program = bpf::load_program(map.as_raw_fd(), *local.ip(), local.port())?;

        // SAFETY: no pointers; the result is checked.
        let fd =
            check(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: `fd` was just created and is owned by nothing else.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let umem = Umem::new(FRAMES * FRAME)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: umem.len as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        set_opt(fd, libc::XDP_UMEM_REG, &reg)?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            set_opt(fd, opt, &RING)?;
        }
        // SAFETY: plain old data; zeroes are valid.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: `off` and `len` live across the call; `len` says how much `off` holds.
        check(unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&raw mut off).cast::<c_void>(),
                &raw mut len,
            )
        })?;
        let fill = Ring::map(fd, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING as i64)?;
        let completion = Ring::map(fd, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64)?;
        let rx = Ring::map(fd, &off.rx, libc::XDP_PGOFF_RX_RING)?;
        let tx = Ring::map(fd, &off.tx, libc::XDP_PGOFF_TX_RING)?;

        let mut addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY | XDP_USE_SG,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: 0,
            sxdp_shared_umem_fd: 0,
        };
        // The socket of a program that just exited may hold the queue a moment longer (its
        // release is deferred): try for up to BIND_PATIENCE while the queue is busy.
        let start = std::time::Instant::now();
        loop {
            // SAFETY: `addr` lives across the call and its size is passed.
            let bound = check(unsafe {
                libc::bind(
                    fd,
                    (&raw const addr).cast::<libc::sockaddr>(),
                    size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            });
            match bound {
                Ok(_) => break,
                // A kernel without multi-buffer frames (before 6.6): frames of one chunk.
                Err(e)
                    if e.raw_os_error() == Some(libc::EINVAL)
                        && addr.sxdp_flags & XDP_USE_SG != 0 =>
                {
                    addr.sxdp_flags &= !XDP_USE_SG;
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < BIND_PATIENCE =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => {
                    return Err(context(
                        e,
                        "binding the XDP socket to the interface's queue 0 \
                         (another XDP socket holds it?)",
                    ));
                }
            }
        }
        bpf::set_socket(map.as_raw_fd(), fd)?;
        let attachment = bpf::attach(program.as_raw_fd(), ifindex)?;

        let resolver = UdpSocket::bind(SocketAddr::new(IpAddr::V4(*local.ip()), 0))?;
        resolver.set_nonblocking(true)?;
        let mut link = XdpLink {
            interface: interface.to_string(),
            socket,
            _attachment: attachment,
            _program: program,
            _map: map,
            umem,
            fill,
            completion,
            rx,
            tx,
            free: (FRAMES / 2..FRAMES).map(|i| (i * FRAME) as u64).collect(),
            multi_buffer: addr.sxdp_flags & XDP_USE_SG != 0,
            rx_descs: Vec::with_capacity(RX_BATCH * 3),
            frames: Vec::with_capacity(RX_BATCH),
            joined: Vec::with_capacity(RX_BATCH * MAX_FRAME_LEN),
            local,
            mac,
            tos,
            neighbours: Vec::new(),
            resolver,
        };
        // The first half of the chunks is lent to the kernel to receive into.
        for i in 0..FRAMES / 2 {
            link.fill.push((i * FRAME) as u64);
        }
        link.fill.publish();
        Ok(link)
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Sends messages of single packets (`msgs`, `count` 1 each) from `packets`, each as one
    /// frame of Ethernet, IPv4 and UDP headers and the packet's `parts`. Returns how many
    /// it took, in order: fewer than all when the transmit ring is full (try again later),
    /// or with the reason the next one cannot leave now. Adds the `sendto` calls it made to
    /// `syscalls`.
    pub(crate) fn send<'a>(
        &mut self,
        packets: &[OutPacket],
        msgs: &[OutMsg],
        parts: impl Fn(&OutPacket) -> [&'a [u8]; 3],
        syscalls: &mut u64,
    ) -> (usize, Option<SendStop>) {
        self.reclaim();
        let mut taken = 0;
        let mut stop = None;
        for m in msgs {
            debug_assert_eq!(m.count, 1, "no GSO batches on an XDP link");
            let p = &packets[m.first];
            let len = p.len();
            if len > self.max_roce_len() {
                stop = Some(SendStop::TooBig);
                break;
            }
            let resolved = match m.dst {
                SocketAddr::V4(dst) => self.neighbour(*dst.ip()).map(|mac| (dst, mac)),
                SocketAddr::V6(_) => None,
            };
            let Some((dst, dst_mac)) = resolved else {
                stop = Some(SendStop::Unresolved);
                break;
            };
            let frame_len = HEADERS_LEN + len;
            let pieces = frame_len.div_ceil(FRAME);
            if (self.tx.room() as usize) < pieces || self.free.len() < pieces {
                break;
            }
            let mut chunks = [0u64; MAX_FRAME_LEN.div_ceil(FRAME)];
            for c in &mut chunks[..pieces] {
                *c = self.free.pop().expect("counted just above");
            }
            let chunks = &chunks[..pieces];
            // SAFETY: the chunk is ours (from the free list, not lent to the kernel), inside
            // the UMEM, and FRAME bytes long, more than the headers; nothing else refers to it.
            let first = unsafe { self.umem.chunk_mut(chunks[0], HEADERS_LEN) };
            write_headers(first, self.mac, dst_mac, self.local, dst, self.tos, len);
            let mut at = HEADERS_LEN;
            for part in parts(p) {
                // SAFETY: the chunks are ours, as the first's just above.
                unsafe { write_across(&self.umem, chunks, at, part) };
                at += part.len();
            }
            debug_assert_eq!(at, frame_len);
            for (k, &chunk) in chunks.iter().enumerate() {
                let last = k + 1 == pieces;
                self.tx.push(libc::xdp_desc {
                    addr: chunk,
                    len: if last { frame_len - k * FRAME } else { FRAME } as u32,
                    options: if last { 0 } else { XDP_PKT_CONTD },
                });
            }
            taken += 1;
        }
        self.tx.publish();
        *syscalls += self.kick();
        (taken, stop)
    }

    /// The largest RoCE packet (BTH to ICRC) the link sends and receives.
    fn max_roce_len(&self) -> usize {
        if self.multi_buffer {
            MAX_FRAME_LEN - HEADERS_LEN
        } else {
            ONE_CHUNK_ROCE_LEN
        }
    }

    /// Has the kernel send what the transmit ring holds (copy mode sends in `sendto`, at most
    /// 32 frames a call). Returns how many calls that took.
    fn kick(&mut self) -> u64 {
        let mut calls = 0;
        for _ in 0..KICKS {
            if self.tx.unconsumed() == 0 {
                break;
            }
            calls += 1;
            // SAFETY: no buffer: a zero-length send on the XDP socket only wakes its
            // transmit path.
            let rc = unsafe {
                libc::sendto(
                    self.socket.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    // Partly sent (EAGAIN), or the interface busy: go on, or let the next
                    // poll try again.
                    Some(libc::EAGAIN) | Some(libc::EINTR) => {}
                    _ => break,
                }
            }
        }
        calls
    }

    /// Takes back the chunks of frames the kernel has sent.
    fn reclaim(&mut self) {
        let mut any = false;
        while let Some(chunk) = self.completion.pop() {
            self.free.push(chunk & !(FRAME as u64 - 1));
            any = true;
        }
        if any {
            self.completion.release();
        }
    }

    /// Gives the chunks of the last receive back to the kernel and takes the frames that have
    /// arrived since (up to a batch; a frame spanning several chunks only once all its
    /// descriptors are there). Returns how many.
    pub(crate) fn recv(&mut self) -> usize {
        // Only what changed is published: the indices share cache lines with the kernel,
        // which writes the receive ring's producer from the sending core, and a spinning
        // receiver that stored to them on every empty poll would take those lines away
        // from it each time.
        if !self.rx_descs.is_empty() {
            for d in self.rx_descs.drain(..) {
                self.fill.push(d.addr & !(FRAME as u64 - 1));
            }
            self.fill.publish();
            self.frames.clear();
            self.joined.clear();
        }
        while self.frames.len() < RX_BATCH {
            // The descriptors of the next whole frame.
            let mut n = 0;
            let whole = loop {
                match self.rx.peek(n) {
                    None => break false,
                    Some(d) => {
                        n += 1;
                        if d.options & XDP_PKT_CONTD == 0 {
                            break true;
                        }
                    }
                }
            };
            if !whole {
                break;
            }
            let first = self.rx_descs.len();
            for _ in 0..n {
                let d = self.rx.pop().expect("peeked");
                self.rx_descs.push(d);
            }
            let frame = if n == 1 {
                RxFrame::InPlace(first)
            } else {
                self.join(first)
            };
            self.frames.push(frame);
        }
        if !self.frames.is_empty() {
            self.rx.release();
        }
        self.frames.len()
    }

    /// Copies the frame of descriptors `first..` (the last ones taken) into `joined`.
    fn join(&mut self, first: usize) -> RxFrame {
        let start = self.joined.len();
        for i in first..self.rx_descs.len() {
            let Some(bytes) = desc_bytes(&self.umem, self.rx_descs[i]) else {
                self.joined.truncate(start);
                return RxFrame::Refused;
            };
            if self.joined.len() - start + bytes.len() > MAX_FRAME_LEN {
                self.joined.truncate(start);
                return RxFrame::TooLong;
            }
            // `joined` was sized for a batch of the longest frames: no reallocation.
            self.joined.extend_from_slice(bytes);
        }
        RxFrame::Joined {
            start,
            end: self.joined.len(),
        }
    }

    /// Received frame `i` of the last receive: who sent it and its RoCE packet (UDP
    /// payload), or why it is refused.
    pub(crate) fn message(&self, i: usize) -> Result<(InMsg, &[u8]), Refusal> {
        let frame = match self.frames[i] {
            RxFrame::InPlace(k) => desc_bytes(&self.umem, self.rx_descs[k]),
            RxFrame::Joined { start, end } => Some(&self.joined[start..end]),
            RxFrame::TooLong => return Err(Refusal::TooLong),
            RxFrame::Refused => None,
        };
        frame
            .and_then(|f| parse_frame(f, self.local))
            .ok_or(Refusal::Malformed)
    }

    /// The MAC address of `peer`, from the cache or the kernel's neighbour table; if the
    /// kernel knows none, asks it to resolve one and returns `None`.
    fn neighbour(&mut self, peer: Ipv4Addr) -> Option<[u8; 6]> {
        if let Some(&(_, mac)) = self.neighbours.iter().find(|(ip, _)| *ip == peer) {
            return Some(mac);
        }
        let table = std::fs::read_to_string("/proc/net/arp").unwrap_or_default();
        if let Some(mac) = arp_entry(&table, peer, &self.interface) {
            self.neighbours.push((peer, mac));
            return Some(mac);
        }
        // The discard port: a datagram there makes the kernel resolve the peer's address.
        let _ = self.resolver.send_to(&[], (peer, 9));
        None
    }
}

/// Writes `bytes` at offset `at` of a frame laid over `chunks` of `umem`, FRAME bytes each.
///
/// # Safety
/// The chunks are inside the UMEM and neither the kernel nor any other reference touches
/// them meanwhile.
unsafe fn write_across(umem: &Umem, chunks: &[u64], mut at: usize, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let (k, offset) = (at / FRAME, at % FRAME);
        let n = (FRAME - offset).min(bytes.len());
        // SAFETY: the caller's promise.
        let chunk = unsafe { umem.chunk_mut(chunks[k], FRAME) };
        chunk[offset..offset + n].copy_from_slice(&bytes[..n]);
        at += n;
        bytes = &bytes[n..];
    }
}

/// The bytes descriptor `d` of the receive ring holds, if they lie inside one chunk of `umem`.
fn desc_bytes(umem: &Umem, d: libc::xdp_desc) -> Option<&[u8]> {
    let chunk = d.addr & !(FRAME as u64 - 1);
    let offset = (d.addr - chunk) as usize;
    if offset + d.len as usize > FRAME || chunk as usize + FRAME > umem.len {
        return None;
    }
    // SAFETY: the kernel published this descriptor on the receive ring, so its bytes are
    // written and stay ours (not on the fill ring) until the next `recv`; they lie inside one
    // chunk of the UMEM, checked just above.
    Some(unsafe { umem.bytes(d.addr, d.len as usize) })
}

/// Writes the Ethernet, IPv4 and UDP headers of a frame carrying a `roce_len`-byte RoCE
/// packet: IPv4 with Don't Fragment, identification 0 (which the ICRC is computed for), TTL
/// 64, the header checksum; UDP without a checksum (RoCE v2 has the ICRC).
fn write_headers(
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
fn parse_frame(frame: &[u8], local: SocketAddrV4) -> Option<(InMsg, &[u8])> {
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

/// The MAC address of `peer` on `interface` in a `/proc/net/arp` table, if complete.
fn arp_entry(table: &str, peer: Ipv4Addr, interface: &str) -> Option<[u8; 6]> {
    // IP address, HW type, Flags, HW address, Mask, Device.
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let complete = f
            .get(2)
            .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())?
            & 0x2
            != 0;
        if f.len() < 6 || f[0].parse::<Ipv4Addr>().ok()? != peer || f[5] != interface || !complete {
            return None;
        }
        parse_mac(f[3])
    })
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn interface_mac(interface: &str) -> io::Result<[u8; 6]> {
    let path = format!("/sys/class/net/{interface}/address");
    let text =
        std::fs::read_to_string(&path).map_err(|e| context(e, &format!("reading {path}")))?;
    parse_mac(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path}: not a MAC address"),
        )
    })
}

/// The index of `interface`, if an XDP link can be opened on it as far as can be told
/// without privileges: it exists in this network namespace and is not a loopback one.
pub(crate) fn check_interface(interface: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(interface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"))?;
    // SAFETY: a NUL-terminated string that lives across the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(context(
            io::Error::last_os_error(),
            &format!("{interface}: no such interface in this network namespace"),
        ));
    }
    if is_loopback(interface) {
        // It has no neighbours to resolve, and the kernel drops as martians the frames an
        // XDP socket sends into it from 127.0.0.0/8 (unless route_localnet is set). With
        // both worked around (scratch, 2026-11-24), an XDP end on `lo` against a UDP end
        // took 2.81-2.87 us a half round trip, a UDP end against a UDP end 2.81-2.85: its
        // sends go through the kernel's IP input, which a UDP socket's skip, and loopback's
        // one queue takes one XDP socket, so one end at most.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{interface} is a loopback interface: an XDP link needs an Ethernet interface \
                 with the peer on its link (on loopback, use the UDP datapath)"
            ),
        ));
    }
    Ok(ifindex)
}

/// Whether `interface` is a loopback interface (link type `ARPHRD_LOOPBACK`).
fn is_loopback(interface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/type"))
        .is_ok_and(|t| t.trim().parse() == Ok(libc::ARPHRD_LOOPBACK))
}

fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn check(rc: c_int) -> io::Result<c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn set_opt<T>(fd: RawFd, name: c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            name,
            (value as *const T).cast::<c_void>(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// The UMEM: anonymous memory the socket's frames live in, shared with the kernel.
struct Umem {
    ptr: *mut u8,
    len: usize,
}

impl Umem {
    fn new(len: usize) -> io::Result<Umem> {
        // SAFETY: a fresh anonymous mapping; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Umem {
            ptr: ptr.cast(),
            len,
        })
    }

    /// `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` lies inside the UMEM and the kernel does not write it meanwhile.
    unsafe fn bytes(&self, addr: u64, len: usize) -> &[u8] {
        debug_assert!(addr as usize + len <= self.len);
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(addr as usize), len) }
    }

    /// The first `len` bytes of chunk `chunk`, to write.
    ///
    /// # Safety
    /// The chunk is inside the UMEM, `len <= FRAME`, and neither the kernel nor any other
    /// reference touches it meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn chunk_mut(&self, chunk: u64, len: usize) -> &mut [u8] {
        debug_assert!(chunk as usize + FRAME <= self.len && len <= FRAME);
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(chunk as usize), len) }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; the socket using it is closed
        // first (field order of `XdpLink`).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// SAFETY: the UMEM and the rings are memory this link alone uses from user space (the kernel
// is the other party, through the socket); moving the link moves the only user.
unsafe impl Send for Umem {}
unsafe impl<T> Send for Ring<T> {}

/// One of the socket's four rings: a single-producer single-consumer queue in memory shared
/// with the kernel. User space produces on the fill and transmit rings and consumes on the
/// completion and receive rings; `cached` is its own index, published by `publish` or
/// `release`.
struct Ring<T> {
    map: *mut c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    descs: *mut T,
    /// Our index (producer or consumer), ahead of what is published.
    cached: u32,
}

impl<T: Copy> Ring<T> {
    fn map(fd: RawFd, off: &libc::xdp_ring_offset, pgoff: i64) -> io::Result<Ring<T>> {
        let map_len = off.desc as usize + RING as usize * size_of::<T>();
        // SAFETY: maps the ring the kernel made for this socket at its documented offset;
        // the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map.cast::<u8>();
        // SAFETY: the kernel's offsets lie inside the mapping it sized (`off.desc` plus the
        // descriptors); the producer and consumer are aligned u32s.
        let (producer, consumer, descs) = unsafe {
            (
                base.add(off.producer as usize).cast::<AtomicU32>(),
                base.add(off.consumer as usize).cast::<AtomicU32>(),
                base.add(off.desc as usize).cast::<T>(),
            )
        };
        Ok(Ring {
            map,
            map_len,
            producer,
            consumer,
            descs,
            // A new ring's producer and consumer are both 0.
            cached: 0,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping, alive as long as `self`.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    // -- as producer (fill, transmit) --

    /// Free entries: the ring's size less those not yet consumed by the kernel.
    fn room(&self) -> u32 {
        RING - self
            .cached
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Entries published and not yet consumed by the kernel.
    fn unconsumed(&self) -> u32 {
        self.producer()
            .load(Ordering::Relaxed)
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Writes an entry (the caller checked `room`, or owns fewer entries than the ring holds).
    fn push(&mut self, value: T) {
        debug_assert!(self.room() > 0);
        let i = (self.cached & (RING - 1)) as usize;
        // SAFETY: `i` is within the ring's RING descriptors, and an entry not yet published
        // is not read by the kernel.
        unsafe { self.descs.add(i).write(value) };
        self.cached = self.cached.wrapping_add(1);
    }

    /// Makes the pushed entries visible to the kernel.
    fn publish(&mut self) {
        self.producer().store(self.cached, Ordering::Release);
    }

    // -- as consumer (completion, receive) --

    /// The entry `k` places after the next one to pop, if the kernel has published it.
    fn peek(&self, k: u32) -> Option<T> {
        let available = self
            .producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.cached);
        if k >= available {
            return None;
        }
        let i = (self.cached.wrapping_add(k) & (RING - 1)) as usize;
        // SAFETY: the kernel published entry `i` (acquire above) and does not rewrite it
        // until we release it.
        Some(unsafe { self.descs.add(i).read() })
    }

    fn pop(&mut self) -> Option<T> {
        let value = self.peek(0)?;
        self.cached = self.cached.wrapping_add(1);
        Some(value)
    }

    /// Hands the popped entries back to the kernel.
    fn release(&mut self) {
        self.consumer().store(self.cached, Ordering::Release);
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// The `bpf` system calls: the socket map, the program, and its attachment.
mod bpf {
    use super::*;

    const BPF_MAP_CREATE: c_int = 0;
    const BPF_MAP_UPDATE_ELEM: c_int = 2;
    const BPF_PROG_LOAD: c_int = 5;
    const BPF_LINK_CREATE: c_int = 28;
    const BPF_MAP_TYPE_XSKMAP: u32 = 17;
    const BPF_PROG_TYPE_XDP: u32 = 6;
    const BPF_XDP: u32 = 37;
    const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
    const BPF_FUNC_REDIRECT_MAP: i32 = 51;
    const BPF_PSEUDO_MAP_FD: u8 = 1;
    const XDP_PASS: i32 = 2;

    #[repr(C)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
    }

    #[repr(C)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }

    #[repr(C)]
    struct MapUpdate {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }

    #[repr(C)]
    struct LinkCreate {
        prog_fd: u32,
        target_ifindex: u32,
        attach_type: u32,
        flags: u32,
    }

    /// One eBPF instruction.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Insn {
        code: u8,
        regs: u8,
        off: i16,
        imm: i32,
    }

    const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        }
    }

    // Instruction classes, sizes, modes and operations (linux/bpf_common.h, linux/bpf.h).
    const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
    const LDX_H: u8 = 0x69;
    const LDX_B: u8 = 0x71;
    const MOV64_X: u8 = 0xbf;
    const MOV64_K: u8 = 0xb7;
    const ADD64_K: u8 = 0x07;
    const JGT_X: u8 = 0x2d;
    const JNE_K: u8 = 0x56; // BPF_JMP32 | BPF_JNE | BPF_K: compares the low 32 bits
    const LD_DW_IMM: u8 = 0x18;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;

    fn sys_bpf<T>(cmd: c_int, attr: &mut T) -> io::Result<c_int> {
        // SAFETY: `attr` lives across the call and its size is passed; the kernel reads (and
        // for some commands writes) only that many bytes.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                (attr as *mut T).cast::<c_void>(),
                size_of::<T>() as u32,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as c_int)
        }
    }

    fn owned(fd: c_int) -> OwnedFd {
        // SAFETY: a descriptor the kernel just returned to us, owned by nothing else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// A socket map of one entry: receive queue 0's socket.
    pub(super) fn create_xskmap() -> io::Result<OwnedFd> {
        let mut attr = MapCreate {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: 1,
            map_flags: 0,
        };
        sys_bpf(BPF_MAP_CREATE, &mut attr)
            .map(owned)
            .map_err(|e| context(e, "creating the XDP socket map (needs root)"))
    }

    /// The XDP program: a frame that is Ethernet + IPv4 without options + UDP to `ip` and
    /// `port` goes to the socket of its receive queue in `map` (if there is one); every
    /// other frame goes on to the kernel (`XDP_PASS`).
    pub(super) fn load_program(map: RawFd, ip: Ipv4Addr, port: u16) -> io::Result<OwnedFd> {
        // Loads read network-order bytes into little-endian registers: compare with the
        // bytes as the load sees them.
        let ethertype_ipv4 = i32::from(u16::from_le_bytes([0x08, 0x00]));
        let dst_ip = u32::from_le_bytes(ip.octets()) as i32;
        let dst_port = i32::from(u16::from_le_bytes(port.to_be_bytes()));
        // A jump's offset counts instructions after it: each lands on `pass` (21). The load
        // of the map's address takes two.
        let prog = [
            insn(LDX_W, 2, 1, 0, 0),                       // 0: r2 = ctx->data
            insn(LDX_W, 3, 1, 4, 0),                       // 1: r3 = ctx->data_end
            insn(MOV64_X, 4, 2, 0, 0),                     // 2: r4 = r2
            insn(ADD64_K, 4, 0, 0, HEADERS_LEN as i32),    // 3: r4 += 42
            insn(JGT_X, 4, 3, 16, 0),                      // 4: short frame: pass
            insn(LDX_H, 5, 2, 12, 0),                      // 5: ethertype
            insn(JNE_K, 5, 0, 14, ethertype_ipv4),         // 6
            insn(LDX_B, 5, 2, 14, 0),                      // 7: version and IHL
            insn(JNE_K, 5, 0, 12, 0x45),                   // 8
            insn(LDX_B, 5, 2, 23, 0),                      // 9: protocol
            insn(JNE_K, 5, 0, 10, 17),                     // 10
            insn(LDX_W, 5, 2, 30, 0),                      // 11: destination address
            insn(JNE_K, 5, 0, 8, dst_ip),                  // 12
            insn(LDX_H, 5, 2, 36, 0),                      // 13: UDP destination port
            insn(JNE_K, 5, 0, 6, dst_port),                // 14
            insn(LDX_W, 2, 1, 16, 0),                      // 15: r2 = ctx->rx_queue_index
            insn(LD_DW_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map), // 16-17: r1 = the map
            insn(0, 0, 0, 0, 0),
            insn(MOV64_K, 3, 0, 0, XDP_PASS), // 18: no socket for the queue: pass
            insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // 19
            insn(EXIT, 0, 0, 0, 0),           // 20
            insn(MOV64_K, 0, 0, 0, XDP_PASS), // 21: pass
            insn(EXIT, 0, 0, 0, 0),           // 22
        ];
        let license = c"GPL";
        let mut log = vec![0u8; 1 << 16];
        let mut name = [0u8; 16];
        name[..12].copy_from_slice(b"sluice_xsk\0\0");
        let mut attr = ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: prog.len() as u32,
            insns: prog.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: 1,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            kern_version: 0,
            prog_flags: 0,
            prog_name: name,
            prog_ifindex: 0,
            expected_attach_type: BPF_XDP,
        };
        sys_bpf(BPF_PROG_LOAD, &mut attr).map(owned).map_err(|e| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let verifier = String::from_utf8_lossy(&log[..end]);
            context(e, &format!("loading the XDP program: {}", verifier.trim()))
        })
    }

    /// Puts socket `socket` in `map` for receive queue 0.
    pub(super) fn set_socket(map: RawFd, socket: RawFd) -> io::Result<()> {
        let key = 0u32;
        let value = socket as u32;
        let mut attr = MapUpdate {
            map_fd: map as u32,
            _pad: 0,
            key: (&raw const key) as u64,
            value: (&raw const value) as u64,
            flags: 0,
        };
        sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    /// Attaches `program` to interface `ifindex` in generic (skb) mode, which every driver
    /// supports; closing the returned link detaches it.
    pub(super) fn attach(program: RawFd, ifindex: u32) -> io::Result<OwnedFd> {
        let mut attr = LinkCreate {
            prog_fd: program as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: XDP_FLAGS_SKB_MODE,
        };
        sys_bpf(BPF_LINK_CREATE, &mut attr).map(owned).map_err(|e| {
            context(
                e,
                "attaching the XDP program (is another XDP program on the interface?)",
            )
        })
    }
}

#[cfg(test)]
mod tests {
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

    /// Neighbour entries are taken only complete, for the peer and interface asked.
    #[test]
    fn arp_table_entries() {
        let table = "IP address       HW type     Flags       HW address            Mask     Device\n\
                     10.1.2.200       0x1         0x2         aa:bb:cc:dd:ee:0f     *        veth0\n\
                     10.1.2.201       0x1         0x0         00:00:00:00:00:00     *        veth0\n\
                     10.1.2.202       0x1         0x2         aa:bb:cc:dd:ee:10     *        eth1\n";
        let peer = |last| Ipv4Addr::new(10, 1, 2, last);
        assert_eq!(
            arp_entry(table, peer(200), "veth0"),
            Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x0f])
        );
        assert_eq!(arp_entry(table, peer(201), "veth0"), None, "incomplete");
        assert_eq!(
            arp_entry(table, peer(202), "veth0"),
            None,
            "other interface"
        );
        assert_eq!(arp_entry(table, peer(9), "veth0"), None, "absent");
        assert_eq!(parse_mac("aa:bb:cc:dd:ee"), None);
        assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff:00"), None);
    }

    /// A frame written over several chunks lands in them in order, whatever the cuts
    /// between parts and chunks; the bytes of other chunks are left alone.
    #[test]
    fn a_frame_is_written_across_its_chunks() {
        let umem = Umem::new(8 * FRAME).unwrap();
        let chunks = [5 * FRAME as u64, 2 * FRAME as u64, 7 * FRAME as u64];
        let frame: Vec<u8> = (0..MAX_FRAME_LEN).map(|i| (i * 7 + 3) as u8).collect();
        for cut in [
            0,
            1,
            42,
            FRAME - 1,
            FRAME,
            FRAME + 1,
            2 * FRAME,
            MAX_FRAME_LEN,
        ] {
            // SAFETY: this test's own UMEM, no kernel socket.
            unsafe {
                write_across(&umem, &chunks, 0, &frame[..cut]);
                write_across(&umem, &chunks, cut, &frame[cut..]);
            }
            let mut back = Vec::new();
            for (k, &c) in chunks.iter().enumerate() {
                let len = (MAX_FRAME_LEN - k * FRAME).min(FRAME);
                // SAFETY: as above.
                back.extend_from_slice(unsafe { umem.bytes(c, len) });
            }
            assert_eq!(back, frame, "cut at {cut}");
        }
        // SAFETY: as above.
        assert!(unsafe { umem.bytes(0, 2 * FRAME) }.iter().all(|&b| b == 0));
    }

    /// A missing interface is named in the error, not a panic.
    #[test]
    fn opening_on_a_missing_interface_says_so() {
        let e = XdpLink::open("sluice-nonesuch", A, 0).unwrap_err();
        assert!(e.to_string().contains("no such interface"), "{e}");
    }

    #[test]
    fn opening_on_loopback_says_to_use_udp() {
        // Refused before anything is attached (no privilege needed to see it).
        let e = XdpLink::open("lo", A, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("use the UDP datapath"), "{e}");
    }
}
