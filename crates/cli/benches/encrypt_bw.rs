//! Issue 35's encryption benchmark, every figure measured in the same run on this machine:
//!
//! 1. the cipher crate's own rate for each suite Sluice negotiates (aws-lc-rs AES-256-GCM
//!    and AES-128-GCM, seal then open of one 4 KiB buffer in place, detached tag, a 40-byte
//!    AAD, single core: what `sluice-crypt`'s `cipher` bench calls its rate);
//! 2. `sluice perf write-bw --loopback` plain, and
//! 3. the same with `--encrypt`, under each suite (`--cipher aes-256-gcm`, `aes-128-gcm`),
//!
//! at 1 and at 16 queue pairs, 64 KiB messages (the default: segments of 4072 bytes, so the
//! cipher works on 4 KiB buffers as in 1). Rounds alternate them (the suites taking turns to
//! go first) so that a change in the machine's load falls on all of them alike; the summary
//! gives, per suite, each figure's median and the ratios of the medians: encrypted / plain,
//! encrypted / cipher, and encrypted against the lower of the two (the target: at
//! least 0.8), then AES-128 against AES-256. It also gives the rate a datapath
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
use sluice_crypt::Suite;
use sluice_perftest::Test;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// aws-lc-rs's own seal+open rate for `suite`, bytes of payload per second, on one core:
/// one `len`-byte buffer sealed then opened for `budget`.
fn cipher_rate(suite: Suite, len: usize, budget: Duration) -> f64 {
    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey};
    let key = LessSafeKey::new(
        UnboundKey::new(suite.algorithm(), &[7; 32][..suite.key_len()]).expect("a key"),
    );
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

/// One `write-bw --loopback` run, plain (`None`) or encrypted under a suite: bytes per
/// second, and the packets it resent.
fn write_bw(qps: u32, size: u32, secs: u64, encrypt: Option<Suite>) -> (f64, u64) {
    let mut o = Options::new(Test::WriteBw);
    o.port = 0;
    o.qps = qps;
    o.size = Some(size);
    o.duration = Some(Duration::from_secs(secs));
    o.quiet = true;
    if let Some(suite) = encrypt {
        o.encrypt = Some(sluice_crypt::Psk::new([0x35; 32]).expect("not all zero"));
        o.cipher = suite;
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

/// One suite's figures over the rounds.
#[derive(Default)]
struct Series {
    cipher: Vec<f64>,
    at_segment: Vec<f64>,
    encrypted: Vec<f64>,
}

fn main() {
    let rounds: usize = env("ENCRYPT_BW_ROUNDS", 3);
    let secs: u64 = env("ENCRYPT_BW_SECONDS", 2);
    let size: u32 = env("ENCRYPT_BW_SIZE", 65536);
    let gb = |bps: f64| bps / 1e9;
    println!(
        "aws-lc-rs seal+open of 4 KiB on one core per suite, against `sluice perf write-bw \
         --loopback -s {size}` plain and with --encrypt --cipher SUITE, {secs} s each; \
         GB/s (1e9 bytes/s); {rounds} alternated rounds"
    );
    println!(
        "{:>4}  {:>5}  {:>11}  {:>10}  {:>10}  {:>10}  {:>10}  {:>11}",
        "QPs", "round", "suite", "cipher", "at segment", "plain", "encrypted", "resent p/e"
    );
    let segment = (size as usize).min(4096 - sluice_crypt::OVERHEAD);
    for qps in [1u32, 16] {
        let mut plain = Vec::new();
        let mut series: Vec<Series> = Suite::ALL.iter().map(|_| Series::default()).collect();
        for round in 1..=rounds {
            let (p, p_resent) = write_bw(qps, size, secs, None);
            plain.push(p);
            // The suites take turns going first, so neither always runs right after plain.
            let mut order: Vec<usize> = (0..Suite::ALL.len()).collect();
            if round % 2 == 0 {
                order.reverse();
            }
            for i in order {
                let (suite, s) = (Suite::ALL[i], &mut series[i]);
                let c = cipher_rate(suite, 4096, Duration::from_millis(500));
                let cs = cipher_rate(suite, segment, Duration::from_millis(500));
                let (e, e_resent) = write_bw(qps, size, secs, Some(suite));
                println!(
                    "{qps:>4}  {round:>5}  {suite:>11}  {:>10.2}  {:>10.2}  {:>10.2}  {:>10.2}  {:>5} {:>5}",
                    gb(c),
                    gb(cs),
                    gb(p),
                    gb(e),
                    p_resent,
                    e_resent
                );
                s.cipher.push(c);
                s.at_segment.push(cs);
                s.encrypted.push(e);
            }
        }
        let p = median(&plain);
        let mut encrypted = Vec::new();
        for (suite, s) in Suite::ALL.into_iter().zip(&series) {
            let (c, e) = (median(&s.cipher), median(&s.encrypted));
            let serial = 1.0 / (1.0 / p + 1.0 / median(&s.at_segment));
            println!(
                "{qps:>2} QP(s), {suite}, medians: cipher {:.2}, plain {:.2}, encrypted {:.2} GB/s; \
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
            encrypted.push((c, e));
        }
        let ((c256, e256), (c128, e128)) = (encrypted[0], encrypted[1]);
        println!(
            "{qps:>2} QP(s), aes-128-gcm / aes-256-gcm: cipher {:.2}, encrypted write-bw {:.2}",
            c128 / c256,
            e128 / e256
        );
    }
}
