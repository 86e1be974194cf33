//! The baseline for `sluice perf write-lat`: a plain UDP ping-pong of the same message size on
//! the same path (127.0.0.1 <-> 127.0.0.2, one thread per end), reporting the median of half
//! round trips in microseconds as one JSON object. Each end waits for a datagram as
//! `sluice perf` does: by default it blocks in `recv` (`sluice perf --spin-us 0`); with
//! `--spin-us N` it spins on a non-blocking socket for N us first, then blocks (`sluice
//! perf`'s default, N = 20); with `--spin` it only spins (`sluice perf --busy-poll`).
//! Spinning, it yields the core between empty polls, as `sluice perf` does.
//!
//! `--roce-shaped` sends, each way, what a RoCE WRITE ping-pong must: the WRITE's packet
//! (BTH, RETH, payload, pad, ICRC) and the ACK of the peer's last WRITE (BTH, AETH, ICRC),
//! as one GSO send of two segments, which is how Sluice sends them; from sockets set up as
//! Sluice's are (GRO, TOS and its report, receive timestamps, Don't Fragment) and read
//! with `recvmmsg` and the control messages Sluice reads. The bytes are not RoCE (no
//! engine, no ICRC computed): this is the kernel's part of a Sluice ping-pong alone, through
//! the calls Sluice makes, so `sluice perf write-lat` over it is Sluice's own share.
//!
//! `--role server|client --local ADDR:PORT --remote ADDR:PORT` runs one end only, in this
//! process (the server echoes, the client times and reports): for a ping-pong between two
//! network namespaces. Start the server first.
//!
//! `cargo run --release -p sluice-net --example udp_pingpong -- [SIZE] [ITERATIONS]
//! [--spin | --spin-us N] [--roce-shaped] [--role server|client --local A --remote A]`

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sluice_net::{DEFAULT_TOS, DeviceConfig};

mod common;

/// How an end waits for a datagram.
#[derive(Clone, Copy)]
enum Wait {
    Block,
    /// Spin for this long (forever: `None`), then block.
    Spin(Option<Duration>),
}

/// What goes each way.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// One datagram of the message's size.
    Plain,
    /// A WRITE's packet and an ACK's, as one GSO send of two segments (`--roce-shaped`).
    Roce,
}

/// RoCE's bytes around a WRITE's payload (BTH, RETH; ICRC) and an ACK's size (BTH, AETH,
/// ICRC).
const WRITE_HEADERS: usize = 12 + 16 + 4;
const ACK_LEN: usize = 12 + 4 + 4;

/// One end: its socket, and for the RoCE shape the arrays `sendmmsg` and `recvmmsg` take.
struct End {
    socket: UdpSocket,
    shape: Shape,
    /// What one turn sends: the message, or the WRITE's packet and the ACK's after it.
    out: Vec<u8>,
    /// The first segment's length (RoCE shape).
    segment: usize,
    buf: Vec<u8>,
    name: libc::sockaddr_storage,
    control: [u64; 16],
    /// Where its turns go (feature `turn-timing`, for `scripts/bench-turn-time`).
    #[cfg(feature = "turn-timing")]
    turn: sluice_net::turn_timing::TurnTiming,
}

impl End {
    #[allow(unsafe_code)]
    fn bind(addr: SocketAddr, shape: Shape, size: usize) -> std::io::Result<End> {
        let socket = match shape {
            Shape::Plain => UdpSocket::bind(addr)?,
            Shape::Roce => {
                let buffer = DeviceConfig::new(addr.ip()).socket_buffer;
                sluice_net::bind_socket(addr, DEFAULT_TOS, buffer)?
            }
        };
        let (out, segment) = match shape {
            Shape::Plain => (vec![7u8; size], size),
            Shape::Roce => {
                let write = WRITE_HEADERS + size.div_ceil(4) * 4;
                (vec![7u8; write + ACK_LEN], write)
            }
        };
        Ok(End {
            socket,
            shape,
            out,
            segment,
            buf: vec![0; 1 << 16],
            // SAFETY: sockaddr_storage is plain old data; zeroes are a valid value.
            name: unsafe { std::mem::zeroed() },
            control: [0; 16],
            #[cfg(feature = "turn-timing")]
            turn: Default::default(),
        })
    }

    fn send(&mut self, dst: SocketAddr) -> std::io::Result<()> {
        #[cfg(feature = "turn-timing")]
        let start = self.turn.sending();
        match self.shape {
            Shape::Plain => {
                self.socket.send_to(&self.out, dst)?;
            }
            Shape::Roce => self.send_segmented(dst)?,
        }
        #[cfg(feature = "turn-timing")]
        self.turn.sent(start);
        Ok(())
    }

    /// `out` in one `sendmmsg` of one GSO message, segments of `segment` bytes.
    #[allow(unsafe_code)]
    fn send_segmented(&mut self, dst: SocketAddr) -> std::io::Result<()> {
        let mut to = common::sockaddr_v4(dst)?;
        let mut iov = libc::iovec {
            iov_base: self.out.as_mut_ptr().cast::<libc::c_void>(),
            iov_len: self.out.len(),
        };
        // SAFETY: mmsghdr is plain old data; zeroes are a valid value.
        let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
        m.msg_hdr.msg_name = (&raw mut to).cast::<libc::c_void>();
        m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        m.msg_hdr.msg_iov = &raw mut iov;
        m.msg_hdr.msg_iovlen = 1;
        common::set_gso_segment(&mut m.msg_hdr, &mut self.control, self.segment as u16);
        // SAFETY: the header points at `to`, `iov` (over `out`) and `control`, all live for
        // the call.
        if unsafe { libc::sendmmsg(self.socket.as_raw_fd(), &raw mut m, 1, 0) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one turn's bytes from the peer. Spinning polls without blocking
    /// (`MSG_DONTWAIT`), so that blocking after the spin is one system call, as in Sluice's
    /// own wait, not a change of the socket's mode and back.
    fn recv(&mut self, wait: Wait) -> std::io::Result<()> {
        let mut got = 0;
        while got < self.out.len() {
            got += self.recv_one(wait)?;
            if self.shape == Shape::Plain {
                break;
            }
        }
        Ok(())
    }

    fn recv_one(&mut self, wait: Wait) -> std::io::Result<usize> {
        let limit = match wait {
            Wait::Block => return self.recv_call(false),
            Wait::Spin(limit) => limit,
        };
        let start = Instant::now();
        loop {
            match self.recv_call(true) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
                Err(_) if limit.is_some_and(|l| start.elapsed() >= l) => {
                    return self.recv_call(false);
                }
                // As `sluice perf` spins: one pass through the scheduler between empty
                // polls. Spinning without it took 1.66-1.70 us (plain) and 2.38-2.42 us
                // (RoCE-shaped) where with it 1.43-1.45 and 1.79-1.82 (3 alternated runs).
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    /// One `recv` (plain) or `recvmmsg` with the sender's address and control messages
    /// (RoCE shape); `WouldBlock` when `dontwait` and nothing waits.
    #[allow(unsafe_code)]
    fn recv_call(&mut self, dontwait: bool) -> std::io::Result<usize> {
        let fd = self.socket.as_raw_fd();
        let buf = self.buf.as_mut_ptr().cast::<libc::c_void>();
        #[cfg(feature = "turn-timing")]
        let start = sluice_net::turn_timing::cycles();
        // SAFETY: every pointer handed to the kernel is to a live buffer of the stated length
        // (`buf`, `name`, `control`, and `iov` over `buf`) for the whole call.
        let n = unsafe {
            match self.shape {
                Shape::Plain => {
                    let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
                    libc::recv(fd, buf, self.buf.len(), flags)
                }
                Shape::Roce => {
                    let mut iov = libc::iovec {
                        iov_base: buf,
                        iov_len: self.buf.len(),
                    };
                    let mut m: libc::mmsghdr = std::mem::zeroed();
                    m.msg_hdr.msg_name = (&raw mut self.name).cast::<libc::c_void>();
                    m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
                    m.msg_hdr.msg_iov = &raw mut iov;
                    m.msg_hdr.msg_iovlen = 1;
                    m.msg_hdr.msg_control = self.control.as_mut_ptr().cast::<libc::c_void>();
                    m.msg_hdr.msg_controllen = size_of::<[u64; 16]>() as _;
                    // As the device receives: a batch call, waiting for one if it waits.
                    let flags = if dontwait {
                        libc::MSG_DONTWAIT
                    } else {
                        libc::MSG_WAITFORONE
                    };
                    match libc::recvmmsg(fd, &raw mut m, 1, flags, std::ptr::null_mut()) {
                        1 => m.msg_len as isize,
                        _ => -1,
                    }
                }
            }
        };
        #[cfg(feature = "turn-timing")]
        self.turn.received(start, n >= 0, !dontwait);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut numbers = Vec::new();
    let mut wait = Wait::Block;
    let mut shape = Shape::Plain;
    let (mut role, mut local, mut remote) = (None::<String>, None::<SocketAddr>, None);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--spin" => wait = Wait::Spin(None),
            "--spin-us" => {
                i += 1;
                let us = args
                    .get(i)
                    .and_then(|a| a.parse().ok())
                    .expect("--spin-us N");
                wait = Wait::Spin(Some(Duration::from_micros(us)));
            }
            "--roce-shaped" => shape = Shape::Roce,
            "--role" | "--local" | "--remote" => {
                let value = args.get(i + 1).cloned().expect("a value after the option");
                match args[i].as_str() {
                    "--role" => role = Some(value),
                    "--local" => local = Some(value.parse().expect("--local ADDR:PORT")),
                    _ => remote = Some(value.parse().expect("--remote ADDR:PORT")),
                }
                i += 1;
            }
            a => numbers.push(a.parse::<usize>().expect("SIZE and ITERATIONS are numbers")),
        }
        i += 1;
    }
    let size = numbers.first().copied().unwrap_or(8);
    let iterations = numbers.get(1).copied().unwrap_or(10_000).max(1);
    let echo = move |mut server: End, client_addr: SocketAddr| -> std::io::Result<()> {
        for _ in 0..iterations {
            server.recv(wait)?;
            server.send(client_addr)?;
        }
        #[cfg(feature = "turn-timing")]
        if let Some(t) = server.turn.summary() {
            eprintln!("turn timing (Server): {t}");
        }
        Ok(())
    };
    let (mut client, server_addr, echo) = match (role.as_deref(), local, remote) {
        (None, _, _) => {
            let server = End::bind(SocketAddr::from(([127, 0, 0, 2], 0)), shape, size)?;
            let client = End::bind(SocketAddr::from(([127, 0, 0, 1], 0)), shape, size)?;
            let (server_addr, client_addr) =
                (server.socket.local_addr()?, client.socket.local_addr()?);
            let echo = std::thread::spawn(move || echo(server, client_addr));
            (client, server_addr, Some(echo))
        }
        (Some("server"), Some(local), Some(remote)) => {
            return echo(End::bind(local, shape, size)?, remote);
        }
        (Some("client"), Some(local), Some(remote)) => {
            (End::bind(local, shape, size)?, remote, None)
        }
        _ => panic!("--role server|client needs --local ADDR:PORT and --remote ADDR:PORT"),
    };
    let mut half_rtt_ns = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t0 = Instant::now();
        client.send(server_addr)?;
        client.recv(wait)?;
        half_rtt_ns.push(t0.elapsed().as_nanos() as u64 / 2);
    }
    if let Some(echo) = echo {
        echo.join().expect("the echo thread")?;
    }
    #[cfg(feature = "turn-timing")]
    if let Some(t) = client.turn.summary() {
        eprintln!("turn timing (Client): {t}");
    }
    half_rtt_ns.sort_unstable();
    let us = |q: f64| {
        half_rtt_ns[((half_rtt_ns.len() as f64 * q) as usize).min(iterations - 1)] as f64 / 1e3
    };
    println!(
        "{{\"test\":\"udp_pingpong\",\"shape\":\"{}\",\"mode\":\"{}\",\"bytes\":{size},\"iterations\":{iterations},\"t_min_us\":{:.3},\"t_typical_us\":{:.3},\"t_p99_us\":{:.3}}}",
        match shape {
            Shape::Plain => "plain",
            Shape::Roce => "roce",
        },
        match wait {
            Wait::Block => "block".to_string(),
            Wait::Spin(None) => "spin".to_string(),
            Wait::Spin(Some(d)) => format!("spin {} us, then block", d.as_micros()),
        },
        us(0.0),
        us(0.5),
        us(0.99)
    );
    Ok(())
}
