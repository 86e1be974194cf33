//! The system calls of the datapath: a UDP socket with Don't-Fragment, a fixed TOS byte, ECN
//! reporting, GSO and GRO, and batched `sendmmsg`/`recvmmsg`. With the core of `xdp`, the
//! only code of the crate that is unsafe; every block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use libc::{c_int, c_void, socklen_t};
use sluice_wire::{ICRC_LEN, pad_for};

// Linux UDP socket options that the libc crate does not export for glibc targets.
const UDP_SEGMENT: c_int = 103;
const UDP_GRO: c_int = 104;
const SO_SNDBUFFORCE: c_int = 32;
const SO_RCVBUFFORCE: c_int = 33;

/// Room for the control messages of one received datagram: its TOS or traffic class and the
/// GRO segment size (an int each), and its arrival time (a timespec). Kept as `u64`s so that
/// the buffer is aligned for `cmsghdr`.
const RX_CMSG_WORDS: usize = 12;
/// Room for one UDP_SEGMENT control message (a u16), aligned likewise.
const TX_CMSG_WORDS: usize = 6;

/// The most datagrams one `sendmmsg` or `recvmmsg` call moves.
pub(crate) const MAX_BATCH: usize = 64;
/// The most bytes one `recvmmsg` call asks for: eight GRO batches of 64 KiB, or `MAX_BATCH`
/// datagrams of up to 8 KiB. Up to 64 GRO batches (4 MiB, the size of this VM's L2 cache)
/// were read before the first was handled, and the ACKs for them waited for the whole call;
/// larger limits than 512 KiB did no better.
const MAX_RECV_BYTES: usize = 512 * 1024;
/// The most segments the kernel accepts in one GSO send (`UDP_MAX_SEGMENTS`).
pub(crate) const MAX_GSO_SEGMENTS: usize = 64;
/// The most bytes of UDP payload one GSO send or one GRO receive carries.
pub(crate) const MAX_GSO_BYTES: usize = 65_000;
/// The parts a packet is sent in: its headers, its payload where it lies, its pad and ICRC.
pub(crate) const PARTS: usize = 3;

/// A bound UDP socket set up for RoCE v2.
#[derive(Debug)]
pub(crate) struct Socket {
    /// Blocking: every call passes MSG_DONTWAIT except the receive that waits
    /// ([`Receiver::recv`] with `wait`), which sleeps in the kernel until a datagram comes.
    socket: UdpSocket,
    /// The receive timeout (SO_RCVTIMEO) last set; `None`: none.
    recv_timeout: Option<Duration>,
    /// The kernel segments our batches (UDP_SEGMENT).
    pub(crate) gso: bool,
    /// The kernel coalesces received datagrams of one flow (UDP_GRO).
    pub(crate) gro: bool,
}

fn check(rc: c_int) -> io::Result<c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn set_int(fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast::<c_void>(),
            size_of::<c_int>() as socklen_t,
        )
    };
    check(rc).map(drop)
}

fn get_int(fd: RawFd, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: `value` and `len` live across the call; `len` is the size of `value`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&raw mut value).cast::<c_void>(),
            &raw mut len,
        )
    };
    check(rc).map(|_| value)
}

impl Socket {
    /// Binds `local` with Don't-Fragment set (so that the kernel writes IPv4 identification 0,
    /// which the ICRC covers), the whole TOS/traffic-class byte `tos` on every packet, the
    /// received TOS reported (for ECN), GRO on receive where the kernel has it, and socket
    /// buffers of `buffer_bytes`.
    pub(crate) fn bind(local: SocketAddr, tos: u8, buffer_bytes: usize) -> io::Result<Socket> {
        let socket = UdpSocket::bind(local)?;
        let fd = socket.as_raw_fd();
        path_mtu_discovery(fd, local.is_ipv4())?;
        if local.is_ipv4() {
            set_int(fd, libc::IPPROTO_IP, libc::IP_TOS, c_int::from(tos))?;
            set_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        } else {
            set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 1)?;
            set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, c_int::from(tos))?;
            set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        }
        let bytes = buffer_bytes.min(c_int::MAX as usize) as c_int;
        // The forcing variants pass the system limit (they need CAP_NET_ADMIN); else ask.
        for (force, plain) in [
            (SO_SNDBUFFORCE, libc::SO_SNDBUF),
            (SO_RCVBUFFORCE, libc::SO_RCVBUF),
        ] {
            if set_int(fd, libc::SOL_SOCKET, force, bytes).is_err() {
                set_int(fd, libc::SOL_SOCKET, plain, bytes)?;
            }
        }
        let gso = get_int(fd, libc::SOL_UDP, UDP_SEGMENT).is_ok();
        let gro = set_int(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok();
        // Arrival times from the kernel, taken before the packet waits for us to wake up and
        // read it. Without them packets are timed when read (RTT samples then include it).
        let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
        Ok(Socket {
            socket,
            recv_timeout: None,
            gso,
            gro,
        })
    }

    /// Makes a receive that waits give up after `timeout` (`None`: never). A system call
    /// only when it changes. The kernel counts it in scheduler ticks, rounded up, so it may
    /// end up to two ticks late (8 ms at 250 Hz).
    pub(crate) fn set_recv_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if self.recv_timeout != timeout {
            self.socket.set_read_timeout(timeout)?;
            self.recv_timeout = timeout;
        }
        Ok(())
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Turns GSO off (after the kernel refused a segmented send, or by configuration).
    pub(crate) fn disable_gso(&mut self) {
        self.gso = false;
    }

    /// The socket itself, for a caller that uses it without a device.
    pub(crate) fn into_udp(self) -> UdpSocket {
        self.socket
    }

    /// Turns GRO off (by configuration).
    pub(crate) fn disable_gro(&mut self) -> io::Result<()> {
        if self.gro {
            set_int(self.fd(), libc::SOL_UDP, UDP_GRO, 0)?;
            self.gro = false;
        }
        Ok(())
    }
}

/// A socket address in the kernel's form.
#[derive(Clone, Copy)]
struct RawAddr {
    storage: libc::sockaddr_storage,
    len: socklen_t,
}

impl RawAddr {
    fn new(addr: SocketAddr) -> RawAddr {
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(sin) };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(sin6) };
                size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr {
            storage,
            len: len as socklen_t,
        }
    }

    fn socket_addr(&self) -> Option<SocketAddr> {
        match c_int::from(self.storage.ss_family) {
            libc::AF_INET if self.len as usize >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: the kernel wrote a sockaddr_in (family and length say so).
                let sin = unsafe { (&raw const self.storage).cast::<libc::sockaddr_in>().read() };
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 if self.len as usize >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: the kernel wrote a sockaddr_in6 (family and length say so).
                let sin6 = unsafe {
                    (&raw const self.storage)
                        .cast::<libc::sockaddr_in6>()
                        .read()
                };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// One datagram, or one GSO batch of datagrams, to send: packets `first..first + count` of
/// the packet list, back to back. With `count > 1` the kernel cuts the batch into datagrams of
/// `segment` bytes (every packet but the last must be exactly that long).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutMsg {
    pub(crate) dst: SocketAddr,
    /// The socket it leaves from: 0 the device's own, `k` source socket `k - 1`.
    pub(crate) source: u8,
    pub(crate) first: usize,
    pub(crate) count: usize,
    pub(crate) segment: u16,
    /// ACKs (or NAKs): sent after the other messages of their batch (see `Device::stage`).
    pub(crate) ack: bool,
    /// The TOS (traffic class) byte of its packets, if not the socket's: a packet priority
    /// the control law set (`Transmit::priority`), sent as an `IP_TOS` / `IPV6_TCLASS`
    /// control message.
    pub(crate) tos: Option<u8>,
}

/// Where one packet to send lies: its headers, pad and ICRC in the send buffer, its payload
/// there too (between them) or in place in a memory region of the engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutPacket {
    /// Where its headers start in the send buffer.
    pub(crate) offset: usize,
    /// The length of its headers, BTH to the last extension header.
    pub(crate) head_len: u16,
    pub(crate) payload_len: u16,
    pub(crate) payload_at: sluice_core::PayloadAt,
    /// The IPv4 identification it leaves with (its index in its GSO batch), which its ICRC
    /// covers.
    pub(crate) ip_id: u16,
    /// The time its CC extension header's timestamps say, if it carries them.
    pub(crate) stamped: Option<sluice_core::Instant>,
}

impl OutPacket {
    /// The RoCE packet's length, BTH to ICRC: headers, payload, pad and ICRC.
    pub(crate) fn len(&self) -> usize {
        let payload = usize::from(self.payload_len);
        usize::from(self.head_len) + payload + usize::from(pad_for(payload)) + ICRC_LEN
    }
}

/// The arrays `sendmmsg` and `recvmmsg` read and write: `MAX_BATCH` message headers, socket
/// addresses and control buffers of `CMSG_WORDS` words each, and `iovs` iovecs. Allocated
/// once; the pointers inside are rewritten before every call.
struct MsgArrays<const CMSG_WORDS: usize> {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<RawAddr>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
}

impl<const CMSG_WORDS: usize> MsgArrays<CMSG_WORDS> {
    fn new(iovs: usize) -> Self {
        // SAFETY: mmsghdr and iovec are plain old data; zeroes (null pointers) are valid values
        // and every pointer is set before a call uses it.
        let (hdr, iov) = unsafe { (zeroed::<libc::mmsghdr>(), zeroed::<libc::iovec>()) };
        MsgArrays {
            hdrs: vec![hdr; MAX_BATCH],
            iovs: vec![iov; iovs],
            names: vec![RawAddr::new(SocketAddr::from(([0, 0, 0, 0], 0))); MAX_BATCH],
            cmsgs: vec![[0; CMSG_WORDS]; MAX_BATCH],
        }
    }
}

// SAFETY: the raw pointers inside the arrays point only into heap buffers owned by the same
// sender or receiver (which move with it and never reallocate), or into buffers borrowed for
// one call, and are dereferenced only by the kernel during a call; so moving the arrays to
// another thread moves nothing they point into that is not moved with them.
unsafe impl<const CMSG_WORDS: usize> Send for MsgArrays<CMSG_WORDS> {}

/// Reusable kernel-side arrays for `sendmmsg`: nothing is allocated per call.
pub(crate) struct Sender {
    arrays: MsgArrays<TX_CMSG_WORDS>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl Sender {
    pub(crate) fn new() -> Sender {
        Sender {
            arrays: MsgArrays::new(MAX_BATCH * MAX_GSO_SEGMENTS * PARTS),
        }
    }

    /// Sends up to [`MAX_BATCH`] messages of `packets` in one system call, each packet
    /// handed to the kernel as the parts `parts` gives for it, one after the other (parts
    /// that are adjacent in memory as one). Returns how many messages went; `Ok(0)` when the
    /// socket buffer is full (try again when the socket is writable).
    pub(crate) fn send<'a>(
        &mut self,
        socket: &Socket,
        packets: &[OutPacket],
        msgs: &[OutMsg],
        parts: impl Fn(&OutPacket) -> [&'a [u8]; PARTS],
    ) -> io::Result<usize> {
        let a = &mut self.arrays;
        let n = msgs.len().min(MAX_BATCH);
        let mut iov_at = 0;
        for (i, m) in msgs[..n].iter().enumerate() {
            assert!(
                m.count >= 1 && m.count <= MAX_GSO_SEGMENTS,
                "a batch the kernel takes"
            );
            a.names[i] = RawAddr::new(m.dst);
            let first_iov = iov_at;
            // Where the last part pushed ends: a part starting there extends its iovec.
            let mut end = std::ptr::null::<u8>();
            for p in &packets[m.first..m.first + m.count] {
                for part in parts(p).into_iter().filter(|part| !part.is_empty()) {
                    let range = part.as_ptr_range();
                    if range.start == end {
                        a.iovs[iov_at - 1].iov_len += part.len();
                    } else {
                        a.iovs[iov_at] = libc::iovec {
                            // The kernel only reads through this pointer (sendmmsg).
                            iov_base: part.as_ptr() as *mut c_void,
                            iov_len: part.len(),
                        };
                        iov_at += 1;
                    }
                    end = range.end;
                }
            }
            let hdr = &mut a.hdrs[i].msg_hdr;
            hdr.msg_name = (&raw mut a.names[i].storage).cast::<c_void>();
            hdr.msg_namelen = a.names[i].len;
            hdr.msg_iov = &raw mut a.iovs[first_iov];
            hdr.msg_iovlen = (iov_at - first_iov) as _;
            hdr.msg_flags = 0;
            let gso = m.count > 1;
            let space = if gso { cmsg_space(size_of::<u16>()) } else { 0 }
                + if m.tos.is_some() {
                    cmsg_space(size_of::<c_int>())
                } else {
                    0
                };
            if space > 0 {
                hdr.msg_control = a.cmsgs[i].as_mut_ptr().cast::<c_void>();
                hdr.msg_controllen = space as _;
                // SAFETY: msg_control points at `space` bytes of this message's own aligned
                // cmsg buffer (TX_CMSG_WORDS * 8 = 48 >= CMSG_SPACE(2) + CMSG_SPACE(4));
                // CMSG_FIRSTHDR, CMSG_NXTHDR and CMSG_DATA stay inside it (each header is
                // written, length first, before the next is asked for).
                unsafe {
                    let mut c = libc::CMSG_FIRSTHDR(hdr);
                    if gso {
                        (*c).cmsg_level = libc::SOL_UDP;
                        (*c).cmsg_type = UDP_SEGMENT;
                        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                        libc::CMSG_DATA(c).cast::<u16>().write_unaligned(m.segment);
                        c = libc::CMSG_NXTHDR(hdr, c);
                    }
                    if let Some(tos) = m.tos {
                        let (level, kind) = if m.dst.is_ipv4() {
                            (libc::IPPROTO_IP, libc::IP_TOS)
                        } else {
                            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                        };
                        (*c).cmsg_level = level;
                        (*c).cmsg_type = kind;
                        (*c).cmsg_len = libc::CMSG_LEN(size_of::<c_int>() as u32) as _;
                        libc::CMSG_DATA(c)
                            .cast::<c_int>()
                            .write_unaligned(c_int::from(tos));
                    }
                }
            } else {
                hdr.msg_control = std::ptr::null_mut();
                hdr.msg_controllen = 0;
            }
        }
        // SAFETY: the first `n` headers point at live names, iovecs (into the parts, borrowed
        // for `'a`, which outlives the call) and control buffers, all owned by `self` or
        // borrowed for the call.
        let rc = unsafe {
            libc::sendmmsg(
                socket.fd(),
                a.hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(rc as usize)
    }
}

/// Lowers the calling thread's scheduling priority to `nice` (Linux keeps a nice value
/// per thread: `setpriority` with `who` 0 changes the caller's only).
pub(crate) fn nice_this_thread(nice: i32) -> io::Result<()> {
    // SAFETY: no pointers; the call changes only this thread's nice value.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `CLOCK_REALTIME` in ns since the Unix epoch: the clock of [`InMsg::arrived_ns`].
pub(crate) fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn cmsg_space(len: usize) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(len as u32) as usize }
}

/// What the kernel said about one received datagram (or GRO batch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InMsg {
    pub(crate) src: SocketAddr,
    pub(crate) len: usize,
    /// The size of each coalesced datagram (GRO); `len` when the kernel did not coalesce.
    pub(crate) segment: usize,
    /// The TOS / traffic-class byte it arrived with.
    pub(crate) tos: u8,
    /// When the kernel received it, in ns since the Unix epoch (`CLOCK_REALTIME`); 0 when
    /// the kernel did not say.
    pub(crate) arrived_ns: u64,
    /// The IPv4 identification it travelled with, where the link sees its IP header (an
    /// XDP link; a UDP socket does not).
    pub(crate) ip_id: Option<u16>,
}

/// Reusable arrays and buffers for `recvmmsg`: up to `MAX_BATCH` slots of `slot` bytes each.
pub(crate) struct Receiver {
    arrays: MsgArrays<RX_CMSG_WORDS>,
    buf: Vec<u8>,
    slot: usize,
    msgs: Vec<InMsg>,
    /// How many headers, from the first, the last call may have changed: only those are set
    /// up again (all 64 each time was a measurable part of a latency test's user time).
    touched: usize,
    /// How many datagrams the next call asks for: one after a call that found the socket
    /// empty, `batch` otherwise. A socket polled while idle is likely to hold a lone
    /// datagram when it next holds one (a ping-pong's reply), and asking the kernel for
    /// more makes it look for a second one, which costs a lone datagram's receive about a
    /// third of a microsecond on this project's VMs; once datagrams arrive, batches are
    /// what pays, and one call of one datagram is the whole cost of switching back.
    want: usize,
    /// How many datagrams a call asks for when they are arriving: [`MAX_BATCH`], or fewer
    /// for slots so large that the batch would pass [`MAX_RECV_BYTES`].
    batch: usize,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Receiver {
    /// Buffers for `MAX_BATCH` datagrams (or GRO batches) of up to `slot` bytes each, or as
    /// many as [`MAX_RECV_BYTES`] holds.
    pub(crate) fn new(slot: usize) -> Receiver {
        let batch = (MAX_RECV_BYTES / slot.max(1)).clamp(1, MAX_BATCH);
        Receiver {
            arrays: MsgArrays::new(batch),
            buf: vec![0; slot * batch],
            slot,
            msgs: Vec::with_capacity(batch),
            touched: batch,
            want: batch,
            batch,
        }
    }

    /// Receives what is waiting, up to [`MAX_BATCH`] messages and [`MAX_RECV_BYTES`] (one
    /// message after a call that found none), in one system call; none when nothing is.
    /// With `wait`, sleeps until the first comes, or the socket's receive timeout passes, or
    /// a signal. Datagrams cut short by the buffer are dropped and counted in `truncated`.
    pub(crate) fn recv(
        &mut self,
        socket: &Socket,
        wait: bool,
        truncated: &mut u64,
    ) -> io::Result<usize> {
        let a = &mut self.arrays;
        // The headers point into heap buffers that never move, so only the fields the kernel
        // writes back (name and control lengths, flags) need resetting; the pointers are set
        // with them for simplicity.
        for i in 0..self.touched {
            a.iovs[i] = libc::iovec {
                iov_base: self.buf[i * self.slot..].as_mut_ptr().cast::<c_void>(),
                iov_len: self.slot,
            };
            let hdr = &mut a.hdrs[i].msg_hdr;
            hdr.msg_name = (&raw mut a.names[i].storage).cast::<c_void>();
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as socklen_t;
            hdr.msg_iov = &raw mut a.iovs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = a.cmsgs[i].as_mut_ptr().cast::<c_void>();
            hdr.msg_controllen = size_of::<[u64; RX_CMSG_WORDS]>() as _;
            hdr.msg_flags = 0;
        }
        // SAFETY: every header points at live, writable buffers of the stated sizes, owned by
        // `self` for the duration of the call.
        let rc = unsafe {
            libc::recvmmsg(
                socket.fd(),
                a.hdrs.as_mut_ptr(),
                self.want as u32,
                if wait {
                    libc::MSG_WAITFORONE
                } else {
                    libc::MSG_DONTWAIT
                },
                std::ptr::null_mut(),
            )
        };
        self.msgs.clear();
        // The kernel writes back the headers of the messages it returns, and of the one it
        // tried and found nothing for if it asked for more.
        self.touched = (rc.max(0) as usize + 1).min(self.want);
        self.want = if rc > 0 { self.batch } else { 1 };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                // Nothing waiting; or, waiting, the timeout passed or a signal came.
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                // An ICMP error for an earlier send (peer port closed): not fatal here.
                io::ErrorKind::ConnectionRefused => Ok(0),
                _ => Err(e),
            };
        }
        for i in 0..rc as usize {
            let hdr = &a.hdrs[i].msg_hdr;
            let len = a.hdrs[i].msg_len as usize;
            if hdr.msg_flags & libc::MSG_TRUNC != 0 {
                *truncated += 1;
                continue;
            }
            a.names[i].len = hdr.msg_namelen;
            let Some(src) = a.names[i].socket_addr() else {
                continue;
            };
            let (mut segment, mut tos, mut arrived_ns) = (len, 0u8, 0u64);
            // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG_* macros
            // walk only inside it, and each payload read is of the size the kernel wrote.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(hdr);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    match ((*c).cmsg_level, (*c).cmsg_type) {
                        (libc::SOL_UDP, UDP_GRO) => {
                            segment = data.cast::<c_int>().read_unaligned() as usize;
                        }
                        (libc::IPPROTO_IP, libc::IP_TOS) => tos = data.read(),
                        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                            tos = data.cast::<c_int>().read_unaligned() as u8;
                        }
                        (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                            let t = data.cast::<libc::timespec>().read_unaligned();
                            arrived_ns = (t.tv_sec as u64)
                                .saturating_mul(1_000_000_000)
                                .saturating_add(t.tv_nsec as u64);
                        }
                        _ => {}
                    }
                    c = libc::CMSG_NXTHDR(hdr, c);
                }
            }
            self.msgs.push(InMsg {
                src,
                len,
                segment: segment.clamp(1, len.max(1)),
                tos,
                arrived_ns,
                ip_id: None,
            });
        }
        Ok(self.msgs.len())
    }

    /// The messages of the last `recv`, with their bytes.
    pub(crate) fn message(&self, i: usize) -> (&InMsg, &[u8]) {
        let m = &self.msgs[i];
        (m, &self.buf[i * self.slot..i * self.slot + m.len])
    }
}

/// The MTU of the route from `local` to `peer`, as the kernel knows it (the link MTU, or a
/// smaller path MTU it learnt).
pub(crate) fn route_mtu(local: std::net::IpAddr, peer: std::net::IpAddr) -> io::Result<u32> {
    let socket = UdpSocket::bind(SocketAddr::new(local, 0))?;
    socket.connect(SocketAddr::new(peer, 4791))?;
    let fd = socket.as_raw_fd();
    path_mtu_discovery(fd, peer.is_ipv4())?;
    let mtu = if peer.is_ipv4() {
        get_int(fd, libc::IPPROTO_IP, libc::IP_MTU)?
    } else {
        get_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU)?
    };
    Ok(mtu.max(0) as u32)
}

/// Path MTU discovery on, fragmentation off: IPv4 packets leave with DF set (and, from an
/// unconnected socket, IP identification 0).
fn path_mtu_discovery(fd: c_int, ipv4: bool) -> io::Result<()> {
    if ipv4 {
        set_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    } else {
        set_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    }
}

/// A kernel timer (a timerfd) that [`wait`] also sleeps on, armed lazily. A `ppoll` timeout
/// arms and cancels a kernel high-resolution timer on every sleep; in a virtual machine each
/// reprogramming of the timer hardware leaves the guest, and on this project's 2-core VM that
/// added 2-4 us to every half round trip of a UDP ping-pong. The alarm is only re-armed when a
/// deadline comes earlier than the one it holds, or after it went off: a retransmit timer
/// pushed later by every ACK costs one spurious wake-up per timeout period, not a
/// reprogramming per packet.
#[derive(Debug)]
pub(crate) struct Alarm {
    fd: OwnedFd,
    /// When it goes off, if armed.
    armed: Option<std::time::Instant>,
}

impl Alarm {
    pub(crate) fn new() -> io::Result<Alarm> {
        // SAFETY: no pointers; the result is checked before use.
        let fd = check(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Alarm { fd, armed: None })
    }

    /// Makes the alarm go off no later than `in_ns` after `now` (if given; `now` is the
    /// caller's reading of the monotonic clock). One that went off is cleared first, so that
    /// it does not keep waking [`wait`].
    pub(crate) fn set(&mut self, now: std::time::Instant, in_ns: Option<u64>) -> io::Result<()> {
        if self.armed.is_some_and(|at| at <= now) {
            let mut expirations = 0u64;
            // SAFETY: reads 8 bytes into a u64 that lives across the call. EAGAIN (not yet
            // gone off, a few ns early) leaves it armed: the next wait wakes at once.
            let rc = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&raw mut expirations).cast::<c_void>(),
                    size_of::<u64>(),
                )
            };
            if rc == size_of::<u64>() as isize {
                self.armed = None;
            }
        }
        let Some(ns) = in_ns else { return Ok(()) };
        let at = now + std::time::Duration::from_nanos(ns);
        if self.armed.is_some_and(|armed| armed <= at) {
            return Ok(());
        }
        // A zero it_value would disarm it.
        let ns = ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` lives across the call; the old value is not asked for.
        check(unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                0,
                &raw const spec,
                std::ptr::null_mut(),
            )
        })?;
        self.armed = Some(at);
        Ok(())
    }
}

/// Waits until `fd` is readable, or `writable` (if given) can take packets, or `alarm` goes
/// off. Returns whether one is ready.
pub(crate) fn wait(fd: RawFd, writable: Option<RawFd>, alarm: &Alarm) -> io::Result<bool> {
    let mut pfds = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }; 3];
    pfds[1].fd = alarm.fd.as_raw_fd();
    let mut count = 2;
    match writable {
        Some(w) if w == fd => pfds[0].events |= libc::POLLOUT,
        Some(w) => {
            pfds[2] = libc::pollfd {
                fd: w,
                events: libc::POLLOUT,
                revents: 0,
            };
            count = 3;
        }
        None => {}
    }
    // SAFETY: `pfds` (of which the first `count` are set) lives across the call; no timeout
    // (the alarm is the timeout) and no signal mask.
    let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), count, std::ptr::null(), std::ptr::null()) };
    match check(rc) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Datagrams waiting on a fresh socket bound to loopback, sent by plain `send_to`.
    fn socket_holding(datagrams: usize, len: usize) -> Socket {
        let socket = Socket::bind("127.0.0.1:0".parse().unwrap(), 0, 1 << 22).unwrap();
        let to = socket.local_addr().unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..datagrams {
            sender.send_to(&vec![i as u8; len], to).unwrap();
        }
        socket
    }

    #[test]
    fn a_receive_of_large_slots_asks_for_no_more_than_max_recv_bytes() {
        let slot = 64 * 1024;
        let cap = MAX_RECV_BYTES / slot;
        assert!(cap < MAX_BATCH, "the test needs slots the byte cap binds");
        let socket = socket_holding(cap + 3, 100);
        let mut receiver = Receiver::new(slot);
        let mut truncated = 0;
        let mut counts = Vec::new();
        while counts.iter().sum::<usize>() < cap + 3 {
            let n = receiver.recv(&socket, true, &mut truncated).unwrap();
            assert!(n > 0, "every datagram was sent before the first receive");
            counts.push(n);
        }
        assert!(counts.iter().all(|&n| n <= cap), "{counts:?}");
        assert!(
            counts.contains(&cap),
            "{counts:?}: a full batch was waiting"
        );
        // Each datagram in its own slot, intact and in order.
        assert_eq!(
            receiver.message(counts.last().unwrap() - 1).1,
            &[cap as u8 + 2; 100]
        );
        assert_eq!(truncated, 0);
    }

    #[test]
    fn a_receive_of_small_slots_takes_max_batch() {
        let socket = socket_holding(MAX_BATCH + 5, 64);
        let mut receiver = Receiver::new(4200);
        let mut truncated = 0;
        let mut counts = Vec::new();
        while counts.iter().sum::<usize>() < MAX_BATCH + 5 {
            counts.push(receiver.recv(&socket, true, &mut truncated).unwrap());
        }
        assert!(counts.contains(&MAX_BATCH), "{counts:?}");
    }
}
