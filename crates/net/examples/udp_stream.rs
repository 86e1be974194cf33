//! The kernel's ceiling for `sluice perf write-bw -s 65536` on loopback: the datagrams a
//! 64 KiB RDMA WRITE is sent as, through the socket calls Sluice makes, with none of the
//! RoCE work (no engine, no headers built, no ICRC, no copy into a memory region). One
//! thread sends, one receives (127.0.0.1 -> 127.0.0.2), each from a socket set up as
//! Sluice's; reports the rate of message bytes delivered as one JSON object, as `sluice
//! perf --json` does, so that Sluice's rate over it is the share of the kernel's rate that
//! Sluice's own work leaves.
//!
//! At path MTU 4096 a 64 KiB WRITE is 16 packets: the FIRST (BTH, RETH, 4,096 bytes,
//! ICRC: 4,128) and 15 of 4,112 (BTH, payload, ICRC). A GSO send's segments are all of one
//! size but the last, so the FIRST goes alone and the other 15 as one GSO send (61,680
//! bytes); `sendmmsg` takes 16 messages' worth (32 sends) per call (Sluice's median in a
//! write-bw run: 14). The receiver reads with `recvmmsg` into 512 KiB of 64 KiB buffers
//! and polls without blocking, yielding the core between empty polls.
//!
//! `cargo run --release -p sluice-net --example udp_stream -- [SECONDS]`

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_net::{DEFAULT_TOS, DeviceConfig};

mod common;

/// The message size, and the datagrams (UDP payload bytes) a WRITE of it is sent as.
const MESSAGE: usize = 65536;
const FIRST_LEN: usize = 12 + 16 + 4096 + 4;
const SEGMENT_LEN: usize = 12 + 4096 + 4;
const SEGMENTS: usize = 15;
/// Messages per `sendmmsg` call.
const PER_CALL: usize = 16;
/// Receive buffers of one GRO batch each.
const RX_BUFFERS: usize = 8;
const RX_SLOT: usize = 1 << 16;

fn main() -> std::io::Result<()> {
    let seconds: f64 = match std::env::args().nth(1) {
        Some(s) => s
            .parse()
            .map_err(|_| std::io::Error::other("SECONDS must be a number"))?,
        None => 3.0,
    };
    let server: SocketAddr = "127.0.0.2:0".parse().unwrap();
    let client: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let buffer = DeviceConfig::new(server.ip()).socket_buffer;
    let rx = sluice_net::bind_socket(server, DEFAULT_TOS, buffer)?;
    let tx = sluice_net::bind_socket(client, DEFAULT_TOS, buffer)?;
    let to = rx.local_addr()?;

    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = stop.clone();
        std::thread::spawn(move || receive(&rx, &stop))
    };
    let start = Instant::now();
    let messages = send(&tx, to, Duration::from_secs_f64(seconds))?;
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let received = receiver.join().expect("the receiver does not panic")?;
    // The rate of what arrived, not of what was sent: datagrams a full socket dropped (or
    // the last ones, still queued when the receiver stopped) do not count.
    let delivered = received / (FIRST_LEN + SEGMENTS * SEGMENT_LEN) as u64;
    let gbps = (delivered * MESSAGE as u64) as f64 * 8.0 / elapsed / 1e9;
    println!(
        "{{\"test\":\"udp_stream\",\"bytes\":{MESSAGE},\"messages\":{messages},\
         \"delivered\":{delivered},\"duration_s\":{elapsed},\"bw_avg_gbps\":{gbps}}}"
    );
    Ok(())
}

/// Sends for `duration`, `PER_CALL` messages' datagrams per `sendmmsg`; returns the
/// messages sent whole.
#[allow(unsafe_code)]
fn send(socket: &std::net::UdpSocket, to: SocketAddr, duration: Duration) -> std::io::Result<u64> {
    let mut name = common::sockaddr_v4(to)?;
    let data = vec![0x5Au8; SEGMENT_LEN * SEGMENTS];
    let mut iovs: Vec<libc::iovec> = (0..2 * PER_CALL)
        .map(|i| libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast::<libc::c_void>(),
            iov_len: if i % 2 == 0 {
                FIRST_LEN
            } else {
                SEGMENT_LEN * SEGMENTS
            },
        })
        .collect();
    let mut control = vec![[0u64; 4]; 2 * PER_CALL];
    // SAFETY: mmsghdr is plain old data; zeroes are a valid value.
    let mut msgs: Vec<libc::mmsghdr> = (0..2 * PER_CALL)
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    for (i, m) in msgs.iter_mut().enumerate() {
        let h = &mut m.msg_hdr;
        h.msg_name = (&raw mut name).cast::<libc::c_void>();
        h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_iov = &raw mut iovs[i];
        h.msg_iovlen = 1;
        if i % 2 == 1 {
            common::set_gso_segment(h, &mut control[i], SEGMENT_LEN as u16);
        }
    }
    let start = Instant::now();
    let mut messages = 0;
    while start.elapsed() < duration {
        // SAFETY: every header points at `name`, an iovec over `data` and its control
        // buffer, all live for the call (the kernel writes back only `msg_len`).
        let sent =
            unsafe { libc::sendmmsg(socket.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, 0) };
        if sent < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) => continue,
                _ => return Err(e),
            }
        }
        messages += sent as u64 / 2;
    }
    Ok(messages)
}

/// Reads until `stop`; returns the bytes received.
#[allow(unsafe_code)]
fn receive(socket: &std::net::UdpSocket, stop: &AtomicBool) -> std::io::Result<u64> {
    let mut buf = vec![0u8; RX_BUFFERS * RX_SLOT];
    let mut control = vec![[0u64; 12]; RX_BUFFERS];
    let mut iovs: Vec<libc::iovec> = buf
        .chunks_mut(RX_SLOT)
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast::<libc::c_void>(),
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain old data; zeroes are a valid value.
    let mut msgs: Vec<libc::mmsghdr> = (0..RX_BUFFERS)
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    let mut received = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for (i, m) in msgs.iter_mut().enumerate() {
            let h = &mut m.msg_hdr;
            h.msg_iov = &raw mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = control[i].as_mut_ptr().cast::<libc::c_void>();
            h.msg_controllen = size_of::<[u64; 12]>() as _;
            h.msg_flags = 0;
        }
        // SAFETY: every header points at a live iovec over `buf` and a live control
        // buffer of the stated size.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                RX_BUFFERS as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            std::thread::yield_now();
            continue;
        }
        received += msgs[..n as usize]
            .iter()
            .map(|m| u64::from(m.msg_len))
            .sum::<u64>();
    }
    Ok(received)
}
