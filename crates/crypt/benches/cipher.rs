//! Which AES-GCM crate: aws-lc-rs against RustCrypto's `aes-gcm`, measured in the same run on
//! this machine, single core, seal then open (in place, detached tag) of 4 KiB and 1 KiB
//! payloads under AES-256-GCM with a 40-byte AAD (a BTH, a RETH and the explicit nonce); and
//! both suites Sluice negotiates (AES-256-GCM, AES-128-GCM) side by side, with their ratio.
//!
//! `cargo bench -p sluice-crypt --bench cipher` (`CIPHER_BENCH_MS` per line, default 1500,
//! spread over `CIPHER_BENCH_ROUNDS` alternated rounds, default 5; medians printed).
//! RustCrypto's crate is a dev-dependency only, for this comparison: the library does not
//! depend on it. Prints GB/s of payload for each, the ratios aws-lc-rs / RustCrypto and
//! AES-128 / AES-256, then the whole per-packet stage (`EncryptService`) under each suite
//! against aws-lc-rs's own rate for that suite, same run.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sluice_crypt::Suite;

const AAD: [u8; 40] = [0x5a; 40];
const KEY: [u8; 32] = [7; 32];

/// Runs `op` on one buffer for at least `budget`, returns payload bytes per second.
fn rate(len: usize, budget: Duration, mut op: impl FnMut(&mut [u8], u64)) -> f64 {
    let mut buf = vec![0xa5u8; len + 16];
    // Warm up.
    for i in 0..1000 {
        op(&mut buf, i);
    }
    let mut n: u64 = 0;
    let start = Instant::now();
    loop {
        for _ in 0..1000 {
            op(&mut buf, n);
            n += 1;
        }
        if start.elapsed() >= budget {
            break;
        }
    }
    black_box(&buf);
    (n as f64 * len as f64) / start.elapsed().as_secs_f64()
}

fn nonce(i: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&i.to_be_bytes());
    n
}

fn aws_lc(alg: &'static aws_lc_rs::aead::Algorithm, key: &[u8]) -> impl FnMut(&mut [u8], u64) {
    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey};
    let key = LessSafeKey::new(UnboundKey::new(alg, key).unwrap());
    move |buf: &mut [u8], i: u64| {
        let len = buf.len() - 16;
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce(i)),
                Aad::from(&AAD[..]),
                &mut buf[..len],
            )
            .unwrap();
        buf[len..].copy_from_slice(tag.as_ref());
        key.open_in_place(
            Nonce::assume_unique_for_key(nonce(i)),
            Aad::from(&AAD[..]),
            buf,
        )
        .unwrap();
    }
}

fn rust_crypto() -> impl FnMut(&mut [u8], u64) {
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::{Aes256Gcm, KeyInit};
    let key = Aes256Gcm::new_from_slice(&KEY).unwrap();
    move |buf: &mut [u8], i: u64| {
        let len = buf.len() - 16;
        let n = nonce(i);
        let tag = key
            .encrypt_in_place_detached((&n).into(), &AAD, &mut buf[..len])
            .unwrap();
        buf[len..].copy_from_slice(&tag);
        let (body, tag) = buf.split_at_mut(len);
        key.decrypt_in_place_detached((&n).into(), &AAD, body, (&*tag).into())
            .unwrap();
    }
}

/// The whole per-packet stage: `EncryptService` sealing (counter, AAD from the headers) and
/// the peer's opening it (replay window included).
fn service(suite: Suite, len: usize, budget: Duration) -> f64 {
    use sluice_crypt::handshake::{Endpoint, Handshake, Role};
    use sluice_crypt::{EncryptService, OVERHEAD, Psk, Verdict};
    let psk = || Psk::new([3; 32]).unwrap();
    let (a, hello_a) =
        Handshake::start_suite(Role::Initiator, suite, psk(), Endpoint { qpn: 1, psn: 0 }).unwrap();
    let (b, hello_b) =
        Handshake::start_suite(Role::Responder, suite, psk(), Endpoint { qpn: 2, psn: 0 }).unwrap();
    let (a, confirm_a) = a.receive_hello(&hello_b).unwrap();
    let (b, confirm_b) = b.receive_hello(&hello_a).unwrap();
    let mut a = EncryptService::new(&a.receive_confirm(&confirm_b).unwrap());
    let mut b = EncryptService::new(&b.receive_confirm(&confirm_a).unwrap());
    let mut wire = vec![0xa5u8; len + OVERHEAD];
    let (bth, ext) = (&AAD[..12], &AAD[12..28]);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..1000 {
            a.on_send(bth, ext, &mut wire).unwrap();
            let Verdict::Pass(_) = b.on_receive(bth, ext, &mut wire) else {
                panic!("a packet sealed by the peer must open");
            };
            n += 1;
        }
    }
    black_box(&wire);
    (n as f64 * len as f64) / start.elapsed().as_secs_f64()
}

fn budget_ms() -> u64 {
    std::env::var("CIPHER_BENCH_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500)
}

/// aws-lc-rs's seal+open of `suite` on `len` bytes.
fn suite_rate(suite: Suite, len: usize, budget: Duration) -> f64 {
    rate(
        len,
        budget,
        aws_lc(suite.algorithm(), &KEY[..suite.key_len()]),
    )
}

fn rounds() -> usize {
    std::env::var("CIPHER_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs each of `ops` once per round, in turn, `rounds` times: a change in the machine's
/// load falls on all of them alike. Returns each one's median.
fn alternated<const N: usize>(rounds: usize, mut ops: [&mut dyn FnMut() -> f64; N]) -> [f64; N] {
    let mut all: [Vec<f64>; N] = std::array::from_fn(|_| Vec::new());
    for _ in 0..rounds {
        for (op, out) in ops.iter_mut().zip(&mut all) {
            out.push(op());
        }
    }
    all.map(|mut v| median(&mut v))
}

fn main() {
    let rounds = rounds();
    // Each line's budget spread over the rounds.
    let budget = Duration::from_millis(budget_ms() / rounds as u64);
    println!(
        "AES-GCM seal+open, single core, payload GB/s (1 GB = 1e9 bytes): medians of {rounds} \
         alternated rounds of {} ms each",
        budget.as_millis()
    );
    println!(
        "{:>6}  {:>14}  {:>14}  {:>14}  {:>9}  {:>9}",
        "size", "aws-lc-rs 256", "aws-lc-rs 128", "RustCrypto 256", "aws/RC", "128/256"
    );
    for len in [4096usize, 1024] {
        let [aws256, aws128, rc] = alternated(
            rounds,
            [
                &mut || suite_rate(Suite::Aes256Gcm, len, budget),
                &mut || suite_rate(Suite::Aes128Gcm, len, budget),
                &mut || rate(len, budget, rust_crypto()),
            ],
        );
        println!(
            "{:>6}  {:>14.2}  {:>14.2}  {:>14.2}  {:>8.2}x  {:>8.2}x",
            len,
            aws256 / 1e9,
            aws128 / 1e9,
            rc / 1e9,
            aws256 / rc,
            aws128 / aws256
        );
    }
    println!(
        "aws/RC = aws-lc-rs AES-256-GCM / RustCrypto aes-gcm AES-256-GCM; \
         128/256 = aws-lc-rs AES-128-GCM / AES-256-GCM; ratios of the medians"
    );
    println!();
    println!("sluice-crypt's EncryptService (seal at one end, open at the other) under each");
    println!("suite, against the cipher crate's own rate for that suite, same rounds:");
    for len in [4096usize, 1024] {
        let [raw256, stage256, raw128, stage128] = alternated(
            rounds,
            [
                &mut || suite_rate(Suite::Aes256Gcm, len, budget),
                &mut || service(Suite::Aes256Gcm, len, budget),
                &mut || suite_rate(Suite::Aes128Gcm, len, budget),
                &mut || service(Suite::Aes128Gcm, len, budget),
            ],
        );
        for (suite, stage, raw) in [
            (Suite::Aes256Gcm, stage256, raw256),
            (Suite::Aes128Gcm, stage128, raw128),
        ] {
            println!(
                "{:>6}  {suite}  service {:>6.2} GB/s  aws-lc-rs {:>6.2} GB/s  service/cipher {:>5.2}",
                len,
                stage / 1e9,
                raw / 1e9,
                stage / raw
            );
        }
        println!(
            "{:>6}  service aes-128-gcm / aes-256-gcm {:.2}",
            len,
            stage128 / stage256
        );
    }
}
