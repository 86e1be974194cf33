//! Issue 35's encryption benchmark, every figure measured in the same run on this machine:
//!
//! 1. the cipher crate's own rate (aws-lc-rs AES-256-GCM, seal then open of one 4 KiB
//!    buffer in place, detached tag, a 40-byte AAD, single core: what `sluice-crypt`'s
//!    `cipher` bench calls its rate);
//! 2. `sluice perf write-bw --loopback` plain, and
//! 3. the same with `--encrypt`,
//!
//! at 1 and at 16 queue pairs, 64 KiB messages (the default: segments of 4072 bytes, so the
//! cipher works on 4 KiB buffers as in 1). Rounds alternate the three so that a change in the
//! machine's load falls on all of them alike; the summary gives each figure's median and the
//! ratios of the medians: encrypted / plain, encrypted / cipher, and encrypted against the
//! lower of the two (the target: at least 0.8). It also gives the rate a datapath
//! that pays the plain cost and the cipher's, one after the other, would reach
//! (1 / (1/plain + 1/cipher at the run's segment)), and encrypted against that: below 1 is
//! cost beyond the cipher's own. The cipher at the segment (`min(size, 4072)` bytes, what
//! each packet seals) is measured too: below 4 KiB its fixed cost a packet weighs more.
//!
//! `cargo bench -p sluice-cli --bench encrypt_bw`; `ENCRYPT_BW_ROUNDS` (default 3),
//! `ENCRYPT_BW_SECONDS` per write-bw run (default 2), `ENCRYPT_BW_SIZE` (default 65536).

use std::hint::black_box;
use std::time::{Duration, Instant};

use sluice_cli::perf::{self, Options};
use sluice_perftest::Test;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// aws-lc-rs's own AES-256-GCM seal+open rate, bytes of payload per second, on one core:
/// one `len`-byte buffer sealed then opened for `budget`.
fn cipher_rate(len: usize, budget: Duration) -> f64 {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7; 32]).expect("a 32-byte key"));
    let aad = [0x5au8; 40];
    let mut buf = vec![0xa5u8; len + 16];
    let nonce = |i: u64| {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&i.to_be_bytes());
        Nonce::assume_unique_for_key(n)
    };
    let mut op = |i: u64| {
        let tag = key
            .seal_in_place_separate_tag(nonce(i), Aad::from(&aad[..]), &mut buf[..len])
            .expect("seal");
        buf[len..].copy_from_slice(tag.as_ref());
        key.open_in_place(nonce(i), Aad::from(&aad[..]), &mut buf)
            .expect("open");
    };
    for i in 0..1000 {
        op(i);
    }
    let (start, mut n) = (Instant::now(), 0u64);
    while start.elapsed() < budget {
        for _ in 0..1000 {
            op(n);
            n += 1;
        }
    }
    black_box(&buf);
    n as f64 * len as f64 / start.elapsed().as_secs_f64()
}

/// One `write-bw --loopback` run: bytes per second, and the packets it resent.
fn write_bw(qps: u32, size: u32, secs: u64, encrypt: bool) -> (f64, u64) {
    let mut o = Options::new(Test::WriteBw);
    o.port = 0;
    o.qps = qps;
    o.size = Some(size);
    o.duration = Some(Duration::from_secs(secs));
    o.quiet = true;
    if encrypt {
        o.encrypt = Some(sluice_crypt::Psk::new([0x35; 32]).expect("not all zero"));
    }
    // A port free now (a fixed 4791 would collide with anything else on loopback).
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a loopback port");
    o.roce_port = socket.local_addr().expect("bound").port();
    drop(socket);
    let reports = perf::run_loopback(&o).unwrap_or_else(|e| panic!("write-bw: {e}"));
    let r = reports.first().expect("a result");
    (r.bw_avg_gbps * 1e9 / 8.0, r.retransmitted_packets)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = env("ENCRYPT_BW_ROUNDS", 3);
    let secs: u64 = env("ENCRYPT_BW_SECONDS", 2);
    let size: u32 = env("ENCRYPT_BW_SIZE", 65536);
    let gb = |bps: f64| bps / 1e9;
    println!(
        "AES-256-GCM (aws-lc-rs) seal+open of 4 KiB on one core, against `sluice perf write-bw \
         --loopback -s {size}` plain and with --encrypt, {secs} s each; GB/s (1e9 bytes/s); \
         {rounds} alternated rounds"
    );
    println!(
        "{:>4}  {:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>7}",
        "QPs", "round", "cipher", "at segment", "plain", "encrypted", "resent"
    );
    let segment = (size as usize).min(4096 - sluice_crypt::OVERHEAD);
    for qps in [1u32, 16] {
        let (mut cipher, mut plain, mut enc) = (Vec::new(), Vec::new(), Vec::new());
        let mut at_segment = Vec::new();
        for round in 1..=rounds {
            let c = cipher_rate(4096, Duration::from_millis(500));
            let cs = cipher_rate(segment, Duration::from_millis(500));
            let (p, p_resent) = write_bw(qps, size, secs, false);
            let (e, e_resent) = write_bw(qps, size, secs, true);
            println!(
                "{qps:>4}  {round:>5}  {:>10.2}  {:>10.2}  {:>10.2}  {:>10.2}  {:>3} {:>3}",
                gb(c),
                gb(cs),
                gb(p),
                gb(e),
                p_resent,
                e_resent
            );
            cipher.push(c);
            at_segment.push(cs);
            plain.push(p);
            enc.push(e);
        }
        let (c, p, e) = (median(&cipher), median(&plain), median(&enc));
        let serial = 1.0 / (1.0 / p + 1.0 / median(&at_segment));
        println!(
            "{qps:>2} QP(s), medians: cipher {:.2}, plain {:.2}, encrypted {:.2} GB/s; \
             encrypted / plain {:.2}, encrypted / cipher {:.2}, encrypted / lower {:.2} \
             (target >= 0.8); plain and cipher ({segment} B) in series {:.2} GB/s, encrypted / that {:.2}",
            gb(c),
            gb(p),
            gb(e),
            e / p,
            e / c,
            e / p.min(c),
            gb(serial),
            e / serial
        );
    }
}
