//! The baseline for `sluice perf write-lat`: a plain UDP ping-pong of the same message size on
//! the same path (127.0.0.1 <-> 127.0.0.2, one thread per end), reporting the median of half
//! round trips in microseconds as one JSON object. Each end waits for a datagram as
//! `sluice perf` does: by default it blocks in `recv` (`sluice perf --spin-us 0`); with
//! `--spin-us N` it spins on a non-blocking socket for N us first, then blocks (`sluice
//! perf`'s default, N = 20); with `--spin` it only spins (`sluice perf --busy-poll`).
//!
//! `cargo run --release -p sluice-net --example udp_pingpong -- [SIZE] [ITERATIONS]
//! [--spin | --spin-us N]`

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

/// How an end waits for a datagram.
#[derive(Clone, Copy)]
enum Wait {
    Block,
    /// Spin for this long (forever: `None`), then block.
    Spin(Option<Duration>),
}

/// Receives one datagram on a blocking socket. Spinning polls it without blocking
/// (`MSG_DONTWAIT`), so that blocking after the spin is one system call, as in Sluice's
/// own wait, not a change of the socket's mode and back.
fn recv(socket: &UdpSocket, buf: &mut [u8], wait: Wait) -> std::io::Result<usize> {
    let limit = match wait {
        Wait::Block => return Ok(socket.recv_from(buf)?.0),
        Wait::Spin(limit) => limit,
    };
    let start = Instant::now();
    loop {
        match recv_dontwait(socket, buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
            Err(_) if limit.is_some_and(|l| start.elapsed() >= l) => {
                return Ok(socket.recv_from(buf)?.0);
            }
            Err(_) => std::hint::spin_loop(),
        }
    }
}

/// One `recv` that does not block (`WouldBlock` if nothing waits).
#[allow(unsafe_code)]
fn recv_dontwait(socket: &UdpSocket, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the whole call.
    let n = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut numbers = Vec::new();
    let mut wait = Wait::Block;
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
            a => numbers.push(a.parse::<usize>().expect("SIZE and ITERATIONS are numbers")),
        }
        i += 1;
    }
    let size = numbers.first().copied().unwrap_or(8);
    let iterations = numbers.get(1).copied().unwrap_or(10_000).max(1);
    let server = UdpSocket::bind("127.0.0.2:0")?;
    let client = UdpSocket::bind("127.0.0.1:0")?;
    let (server_addr, client_addr) = (server.local_addr()?, client.local_addr()?);
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; 65536];
        for _ in 0..iterations {
            let n = recv(&server, &mut buf, wait)?;
            server.send_to(&buf[..n], client_addr)?;
        }
        Ok(())
    });
    let msg = vec![7u8; size];
    let mut buf = vec![0u8; 65536];
    let mut half_rtt_ns = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t0 = Instant::now();
        client.send_to(&msg, server_addr)?;
        recv(&client, &mut buf, wait)?;
        half_rtt_ns.push(t0.elapsed().as_nanos() as u64 / 2);
    }
    echo.join().expect("the echo thread")?;
    half_rtt_ns.sort_unstable();
    let us = |q: f64| {
        half_rtt_ns[((half_rtt_ns.len() as f64 * q) as usize).min(iterations - 1)] as f64 / 1e3
    };
    println!(
        "{{\"test\":\"udp_pingpong\",\"mode\":\"{}\",\"bytes\":{size},\"iterations\":{iterations},\"t_min_us\":{:.3},\"t_typical_us\":{:.3},\"t_p99_us\":{:.3}}}",
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
