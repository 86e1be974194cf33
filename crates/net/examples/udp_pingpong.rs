//! The baseline for `sluice perf write-lat`: a plain UDP ping-pong of the same message size on
//! the same path (127.0.0.1 <-> 127.0.0.2, one thread per end, blocking sockets), reporting
//! the median of half round trips in microseconds as one JSON object.
//!
//! `cargo run --release -p sluice-net --example udp_pingpong -- [SIZE] [ITERATIONS]`

use std::net::UdpSocket;
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let iterations: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let server = UdpSocket::bind("127.0.0.2:0")?;
    let client = UdpSocket::bind("127.0.0.1:0")?;
    let (server_addr, client_addr) = (server.local_addr()?, client.local_addr()?);
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; 65536];
        for _ in 0..iterations {
            let (n, _) = server.recv_from(&mut buf)?;
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
        client.recv_from(&mut buf)?;
        half_rtt_ns.push(t0.elapsed().as_nanos() as u64 / 2);
    }
    echo.join().expect("the echo thread")?;
    half_rtt_ns.sort_unstable();
    let us = |q: f64| {
        half_rtt_ns[((half_rtt_ns.len() as f64 * q) as usize).min(iterations - 1)] as f64 / 1e3
    };
    println!(
        "{{\"test\":\"udp_pingpong\",\"bytes\":{size},\"iterations\":{iterations},\"t_min_us\":{:.3},\"t_typical_us\":{:.3},\"t_p99_us\":{:.3}}}",
        us(0.0),
        us(0.5),
        us(0.99)
    );
    Ok(())
}
