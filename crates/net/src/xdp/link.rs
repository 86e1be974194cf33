//! The XDP socket: its setup (UMEM, rings, the program that feeds it) and moving frames
//! through its rings.
//!
//! Unsafe code: the socket's system calls and the frames in the UMEM it shares with the
//! kernel; every unsafe block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use libc::{c_int, c_void};

use super::frame::{HEADERS_LEN, parse_frame, write_headers};
use super::interface::{check_interface, interface_mac};
use super::neighbour::arp_entry;
use super::ring::{RING, Ring};
use super::umem::{FRAME, FRAMES, Umem, desc_bytes, write_across};
use super::{bpf, context};
use crate::sys::{InMsg, OutMsg, OutPacket};

/// Where the kernel puts received bytes in each chunk, in copy mode (`XDP_PACKET_HEADROOM`).
const RX_HEADROOM: usize = 256;
/// The longest frame taken, sent or received: a jumbo frame's 9,000 bytes of IP and
/// Ethernet's 14 (at most three chunks).
pub(super) const MAX_FRAME_LEN: usize = 9014;
/// `sockaddr_xdp` flag: frames may span several chunks (`XDP_USE_SG`).
const XDP_USE_SG: u16 = 1 << 4;
/// Descriptor option: the frame goes on in the next descriptor (`XDP_PKT_CONTD`).
const XDP_PKT_CONTD: u32 = 1;
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
    pub(crate) fn max_roce_len(&self) -> usize {
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

/// `rc`, or the error it stands for if negative.
fn check(rc: c_int) -> io::Result<c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Sets XDP socket option `name` of `fd` to `value`.
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 4791);

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
