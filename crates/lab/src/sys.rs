//! The system calls of the relay: packet sockets bound to an interface, batched receives and
//! sends into and out of preallocated slots, a wait with a nanosecond timeout, the clocks.
//! The only unsafe code of the crate; every block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, c_void, socklen_t};

// <linux/if_packet.h>, defined here rather than trusting every libc version to export them.
const PACKET_ADD_MEMBERSHIP: c_int = 1;
const PACKET_STATISTICS: c_int = 6;
const PACKET_VNET_HDR: c_int = 15;
const PACKET_IGNORE_OUTGOING: c_int = 23;
const PACKET_MR_PROMISC: u16 = 1;
const SO_SNDBUFFORCE: c_int = 32;
const SO_RCVBUFFORCE: c_int = 33;
const PR_SET_TIMERSLACK: c_int = 29;

/// Bytes of the `virtio_net_hdr` the kernel puts before each frame (PACKET_VNET_HDR).
pub(crate) const VNET_HDR: usize = 10;
/// Control-message room of one received frame (its SCM_TIMESTAMPNS), as u64 words so that
/// it is aligned for `cmsghdr`.
const CMSG_WORDS: usize = 8;

#[repr(C)]
struct PacketMreq {
    mr_ifindex: c_int,
    mr_type: u16,
    mr_alen: u16,
    mr_address: [u8; 8],
}

#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: u32,
    tp_drops: u32,
}

fn check(rc: c_int) -> io::Result<c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn set_opt<T>(fd: RawFd, level: c_int, name: c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised T and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast::<c_void>(),
            size_of::<T>() as socklen_t,
        )
    };
    check(rc).map(drop)
}

/// A raw packet socket on one interface: every frame that arrives on it, with a
/// `virtio_net_hdr` before it, so that a GSO batch (a veth hands a UDP GSO send over whole)
/// and a checksum left for the device to fill (CHECKSUM_PARTIAL) are read and sent on as they
/// are: the frame goes out the other interface as the kernel would have passed it, and the
/// peer segments it and trusts its checksum as it would have without the relay.
#[derive(Debug)]
pub(crate) struct PacketSocket {
    fd: OwnedFd,
    pub(crate) name: String,
}

impl PacketSocket {
    /// Opens one on interface `name` in promiscuous mode, with `buf` bytes of socket buffer
    /// each way (forced past the system's limit: root only).
    pub(crate) fn open(name: &str, buf: usize) -> io::Result<PacketSocket> {
        let cname = CString::new(name).map_err(|_| io::Error::other("interface name has a NUL"))?;
        // SAFETY: a NUL-terminated string that lives across the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::other(format!("no interface {name}")));
        }
        // Protocol 0 until bound: no frame of another interface is queued in between.
        // SAFETY: plain call; the descriptor is owned at once.
        let raw = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: a descriptor just returned to us and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        set_opt(s, libc::SOL_PACKET, PACKET_VNET_HDR, &1 as &c_int)?;
        // Not our own sends back (the kernel skips the sending socket anyway; this skips any
        // other frame leaving the interface).
        set_opt(s, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1 as &c_int)?;
        set_opt(s, libc::SOL_SOCKET, SO_RCVBUFFORCE, &(buf as c_int))?;
        set_opt(s, libc::SOL_SOCKET, SO_SNDBUFFORCE, &(buf as c_int))?;
        set_opt(s, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1 as &c_int)?;
        // SAFETY: all-zero is a valid sockaddr_ll.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = ifindex as c_int;
        // SAFETY: `addr` is a sockaddr_ll and its size is passed.
        check(unsafe {
            libc::bind(
                s,
                (&raw const addr).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as socklen_t,
            )
        })?;
        let mreq = PacketMreq {
            mr_ifindex: ifindex as c_int,
            mr_type: PACKET_MR_PROMISC,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        set_opt(s, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)?;
        Ok(PacketSocket {
            fd,
            name: name.to_owned(),
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The frames the kernel dropped for want of socket buffer since the last call.
    pub(crate) fn drops(&self) -> io::Result<u32> {
        let mut st = TpacketStats::default();
        let mut len = size_of::<TpacketStats>() as socklen_t;
        // SAFETY: `st` is a tpacket_stats with its size in `len`; both live across the call.
        check(unsafe {
            libc::getsockopt(
                self.raw(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&raw mut st).cast::<c_void>(),
                &raw mut len,
            )
        })?;
        Ok(st.tp_drops)
    }
}

/// `count` slots of `size` bytes, each with its own iovec, control buffer and mmsghdr set up
/// once, so that a receive fills consecutive slots and a send sends them, one system call for
/// a run of frames and no allocation per frame. The headers point into this struct's own
/// vectors, which never grow or move (their heap buffers stay where they are when `Slots`
/// moves).
pub(crate) struct Slots {
    /// The slots' bytes: only read and written through `iov`, which points into it.
    _buf: Vec<u8>,
    size: usize,
    iov: Vec<libc::iovec>,
    ctl: Vec<[u64; CMSG_WORDS]>,
    msgs: Vec<libc::mmsghdr>,
    /// Each slot's frame length (with its vnet header), as received.
    lens: Vec<u32>,
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slots({} x {} bytes)", self.lens.len(), self.size)
    }
}

impl Slots {
    pub(crate) fn new(count: usize, size: usize) -> Slots {
        // Zeroed memory the kernel maps on first touch: slots that only ever hold small
        // frames cost little resident memory.
        let mut buf = vec![0u8; count * size];
        let mut ctl = vec![[0u64; CMSG_WORDS]; count];
        let mut iov: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec {
                // SAFETY: i * size is inside `buf` (count * size bytes).
                iov_base: unsafe { buf.as_mut_ptr().add(i * size) }.cast::<c_void>(),
                iov_len: size,
            })
            .collect();
        let msgs = (0..count)
            .map(|i| {
                // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
                let mut m: libc::mmsghdr = unsafe { zeroed() };
                m.msg_hdr.msg_iov = &raw mut iov[i];
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_control = ctl[i].as_mut_ptr().cast::<c_void>();
                m
            })
            .collect();
        Slots {
            _buf: buf,
            size,
            iov,
            ctl,
            msgs,
            lens: vec![0; count],
        }
    }

    /// Receives up to `n` frames into slots `first..first + n` without waiting: how many
    /// came (0 when none was waiting).
    pub(crate) fn recv(
        &mut self,
        sock: &PacketSocket,
        first: usize,
        n: usize,
    ) -> io::Result<usize> {
        assert!(first + n <= self.lens.len());
        for i in first..first + n {
            self.iov[i].iov_len = self.size;
            let m = &mut self.msgs[i].msg_hdr;
            m.msg_control = self.ctl[i].as_mut_ptr().cast::<c_void>();
            m.msg_controllen = CMSG_WORDS * 8;
            m.msg_flags = 0;
        }
        // SAFETY: msgs[first..first + n] point at their own iovec and control buffer, inside
        // vectors that outlive the call, with those buffers' sizes.
        let rc = unsafe {
            libc::recvmmsg(
                sock.raw(),
                self.msgs.as_mut_ptr().add(first),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        for i in first..first + rc as usize {
            self.lens[i] = self.msgs[i].msg_len;
        }
        Ok(rc as usize)
    }

    /// Whether the frame in `slot` was longer than a slot (cut: not to be sent).
    pub(crate) fn truncated(&self, slot: usize) -> bool {
        self.msgs[slot].msg_hdr.msg_flags & libc::MSG_TRUNC != 0
    }

    /// The frame's length in `slot`, its vnet header included.
    pub(crate) fn len(&self, slot: usize) -> usize {
        self.lens[slot] as usize
    }

    /// The kernel's arrival stamp of the frame in `slot` (CLOCK_REALTIME, ns), if it gave one.
    pub(crate) fn stamp(&self, slot: usize) -> Option<u64> {
        let m = &self.msgs[slot].msg_hdr;
        // SAFETY: `m` is the msghdr the kernel filled, its control buffer inside `ctl`
        // (msg_controllen says how much); the CMSG macros stay inside it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(m);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = libc::CMSG_DATA(c).cast::<libc::timespec>().read_unaligned();
                    return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(m, c);
            }
        }
        None
    }

    /// Sends the frames in slots `first..first + n` (as received) without waiting: how many
    /// went (the first of the rest could not, for want of buffer: try again later).
    pub(crate) fn send(
        &mut self,
        sock: &PacketSocket,
        first: usize,
        n: usize,
    ) -> io::Result<usize> {
        assert!(first + n <= self.lens.len());
        for i in first..first + n {
            self.iov[i].iov_len = self.lens[i] as usize;
            let m = &mut self.msgs[i].msg_hdr;
            m.msg_control = std::ptr::null_mut();
            m.msg_controllen = 0;
        }
        // SAFETY: as in `recv`: each msghdr points at its slot, with the frame's length.
        let rc = unsafe {
            libc::sendmmsg(
                sock.raw(),
                self.msgs.as_mut_ptr().add(first),
                n as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(rc as usize)
    }
}

/// Sleeps until one of `fds` is readable (those given `true`), or `timeout_ns` has passed
/// (`None`: no limit), or a signal comes.
pub(crate) fn wait(fds: &[(RawFd, bool)], timeout_ns: Option<u64>) -> io::Result<()> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 2];
    assert!(fds.len() <= p.len());
    for (slot, &(fd, read)) in p.iter_mut().zip(fds) {
        slot.fd = fd;
        slot.events = if read { libc::POLLIN } else { 0 };
    }
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `p` holds fds.len() pollfds and `tsp` is null or a live timespec.
    let rc = unsafe {
        libc::ppoll(
            p.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    match check(rc) {
        Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
        _ => Ok(()),
    }
}

fn clock(id: libc::clockid_t) -> u64 {
    // SAFETY: all-zero is a valid timespec, written by the call.
    let mut ts: libc::timespec = unsafe { zeroed() };
    // SAFETY: `ts` lives across the call.
    unsafe { libc::clock_gettime(id, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in ns: what the relay holds frames by.
pub(crate) fn mono_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in ns: the clock of the kernel's arrival stamps.
pub(crate) fn real_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

/// Asks the kernel to wake this thread's timed sleeps within 1 ns of their time rather than
/// the default 50 us of slack (it may still be late; the relay measures by how much).
pub(crate) fn tight_timers() -> io::Result<()> {
    // SAFETY: plain call with integer arguments.
    check(unsafe { libc::prctl(PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) }).map(drop)
}

/// Runs this thread under SCHED_FIFO at `priority` (1..=99): it then runs as soon as it
/// wakes, ahead of every ordinary thread, as a wire would. It sleeps when nothing is due, so
/// it takes only the time it needs (and the kernel keeps 5% of each core for others).
pub(crate) fn realtime(priority: u8) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: c_int::from(priority),
    };
    // SAFETY: `p` lives across the call; pid 0 is this thread.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const p) }).map(drop)
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGTERM and SIGINT end the relay's loop (it then prints its report) instead of killing it.
pub(crate) fn stop_on_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_stop as *const () as libc::sighandler_t) };
    }
}

/// Whether SIGTERM or SIGINT has come.
pub(crate) fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}
