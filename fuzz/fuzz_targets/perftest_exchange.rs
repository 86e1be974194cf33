//! perftest's TCP exchange (`sluice_perftest`) fed a peer's bytes that are partly or
//! wholly arbitrary: a remote end may send anything, and the exchange must answer with an
//! error, never a panic or a hang.
//!
//! The first two bytes of an input choose this end (role, test, QP count, MTU). What the
//! peer sends is then a real peer's transcript for that choice (recorded once per choice by
//! running both ends over a socket pair), cut where the next two bytes say, with one byte
//! replaced as the two after say, and followed by the rest of the input: so the fuzzer
//! reaches every stage of the exchange, not only the version message. The byte after those
//! may replace the page and cache-line sizes the peer announces with values at their bounds
//! and beyond (see `ANNOUNCED`). Checked besides "no panic": the untouched transcript is
//! accepted whole whatever in-bounds sizes it announces, and refused with the field named when
//! one is out of bounds; an accepted exchange has the peer's data for every QP; and no
//! allocation on the way, nor the memory region `sluice perf` then sizes from the negotiated
//! values, exceeds `PEAK_ALLOCATION`.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sluice_core::Mtu;
use sluice_perftest::{
    BwReport, Dest, LocalParams, MAX_CACHE_LINE_SIZE, MAX_CYCLE_BUFFER, PerftestError, Role,
    SelfLimiting, Session, Test, TimeoutStream,
};

/// The system allocator, noting the largest single request since the last `reset`: the
/// exchange must never be talked into a large allocation.
struct Tracking;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

impl Tracking {
    fn reset() {
        LARGEST.store(0, Ordering::Relaxed);
    }

    fn largest() -> usize {
        LARGEST.load(Ordering::Relaxed)
    }

    fn note(size: usize) {
        LARGEST.fetch_max(size, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to `System` unchanged; only sizes are noted.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Tracking::note(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Tracking::note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Tracking::note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// The largest message size of any test here (the bandwidth tests' default).
const MAX_MESSAGE: u32 = 65_536;

/// The most one input may allocate at once: `sluice perf`'s region for the largest
/// negotiated values, twice the target span, which is under `MAX_CYCLE_BUFFER` plus a cache
/// line (a line that is no power of two rounds 1 MiB up by up to a line: the fuzzer found
/// 1 MiB + 64). Everything else the exchange allocates is a few hundred bytes.
const PEAK_ALLOCATION: usize = 2 * (MAX_CYCLE_BUFFER + MAX_CACHE_LINE_SIZE) as usize;

/// Page and cache-line sizes a peer may announce instead of its own, as the input chooses:
/// at the bounds, just beyond, far beyond (the 8 GiB finding), zero and negative.
const ANNOUNCED: [Option<u32>; 16] = [
    None,
    None,
    Some(1),
    Some(64),
    Some(4096),
    Some(65_536),
    Some(MAX_CACHE_LINE_SIZE),
    Some(MAX_CACHE_LINE_SIZE + 1),
    Some(MAX_CYCLE_BUFFER),
    Some(MAX_CYCLE_BUFFER + 1),
    Some(0x7fff_fffe),
    Some(0x7fff_ffff),
    Some(0),
    Some(0x8000_0000),
    Some(0xffff_f000),
    Some(u32::MAX),
];

/// Where the peer's page size is in its transcript (after the 16-byte version); the cache
/// line follows it.
const PAGE_AT: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct End {
    role: Role,
    test: Test,
    qps: usize,
    mtu: Mtu,
}

impl End {
    fn from_bytes(a: u8, b: u8) -> End {
        End {
            role: if a & 1 == 0 {
                Role::Client
            } else {
                Role::Server
            },
            test: Test::ALL[usize::from(a >> 1) % Test::ALL.len()],
            qps: 1 + usize::from(b & 3),
            mtu: Mtu::ALL[usize::from(b >> 2) % Mtu::ALL.len()],
        }
    }

    fn peer(self) -> End {
        let role = match self.role {
            Role::Client => Role::Server,
            Role::Server => Role::Client,
        };
        End { role, ..self }
    }
}

/// Each end's QP data: distinct per role and QP, IPv4 GIDs on both ends.
fn dests(end: End) -> Vec<Dest> {
    let host = if end.role == Role::Client { 1 } else { 2 };
    (0..end.qps as u32)
        .map(|qp| Dest {
            lid: 0,
            out_reads: 1,
            qpn: 0x100 * host + qp,
            psn: 0x1000 * host + qp,
            rkey: 0x20 + host,
            vaddr: 0x7f00_0000_0000 + u64::from(host) * 0x10_0000,
            gid: Dest::gid_for(IpAddr::V4(Ipv4Addr::new(192, 0, 2, host as u8))),
        })
        .collect()
}

/// One end's whole exchange, as `sluice perf` walks it, with the memory region it sizes
/// from the negotiated values.
fn run<S: TimeoutStream>(stream: S, end: End) -> Result<(), PerftestError> {
    let mut session = Session::start(
        stream,
        end.role,
        end.test,
        LocalParams::new(end.mtu),
        STEP_TIMEOUT,
    )?;
    let half = session.negotiated().target_span(MAX_MESSAGE);
    let mut region: Vec<u8> = Vec::new();
    // Fallible as in `sluice perf`: a size past the peak check below must not abort first.
    if region.try_reserve_exact(2 * half as usize).is_ok() {
        region.resize(2 * half as usize, 0);
    }
    drop(region);
    let peer = session.exchange_dests(&dests(end))?;
    assert_eq!(
        peer.len(),
        end.qps,
        "an accepted exchange has every QP's data"
    );
    session.connected()?;
    session.start_traffic()?;
    let report = BwReport {
        size: 65_536,
        iters: 5_000,
        bw_peak: 6_000.0,
        bw_avg: 5_900.0,
        msg_rate: 0.09,
    };
    session.finish((end.role == Role::Client).then_some(report))?;
    Ok(())
}

/// Each step's deadline: the scripted peer never blocks, and the recorded one answers at
/// once, so this only bounds a bug.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// A stream that keeps what is written to it.
struct Recorded<S> {
    inner: S,
    written: Vec<u8>,
}

impl<S: Read> Read for Recorded<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl<S: Write> Write for Recorded<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<S: TimeoutStream> TimeoutStream for Recorded<S> {
    fn limit_blocking(&mut self, limit: Option<Duration>) -> io::Result<()> {
        self.inner.limit_blocking(limit)
    }
}

/// What a real peer of `end` sends over the whole exchange (recorded once per `end`).
fn transcript(end: End) -> Vec<u8> {
    static CACHE: OnceLock<Mutex<HashMap<End, Vec<u8>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.lock().unwrap().get(&end) {
        return t.clone();
    }
    let (ours, theirs) = UnixStream::pair().expect("a socket pair");
    let peer = std::thread::spawn(move || {
        let mut recorded = Recorded {
            inner: theirs,
            written: Vec::new(),
        };
        run(&mut recorded, end.peer()).expect("the peer's side of a clean exchange");
        recorded.written
    });
    run(ours, end).expect("our side of a clean exchange");
    let t = peer.join().expect("the peer thread");
    cache.lock().unwrap().insert(end, t.clone());
    t
}

/// The peer as a script: its bytes, then the end of the connection. Writes go nowhere.
struct Script {
    input: Vec<u8>,
    at: usize,
}

impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.input.len() - self.at);
        buf[..n].copy_from_slice(&self.input[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Write for Script {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Which field a peer's page and cache-line sizes put out of bounds, if any (the page is
/// checked first).
fn out_of_bounds(page: u32, line: u32) -> Option<&'static str> {
    let within = |v: u32, max: u32| (1..=max).contains(&v);
    if !within(page, MAX_CYCLE_BUFFER) {
        Some("page size")
    } else if !within(line, MAX_CACHE_LINE_SIZE) {
        Some("cache-line size")
    } else {
        None
    }
}

fuzz_target!(|data: &[u8]| {
    let [a, b, cut_hi, cut_lo, at, with, sizes, rest @ ..] = data else {
        return;
    };
    let end = End::from_bytes(*a, *b);
    let mut input = transcript(end);
    let whole = input.len();
    for (at, choice) in [(PAGE_AT, sizes & 15), (PAGE_AT + 4, sizes >> 4)] {
        if let Some(value) = ANNOUNCED[usize::from(choice)] {
            input[at..at + 4].copy_from_slice(&value.to_be_bytes());
        }
    }
    let be = |at: usize| u32::from_be_bytes(input[at..at + 4].try_into().unwrap());
    let refused_field = out_of_bounds(be(PAGE_AT), be(PAGE_AT + 4));
    let cut = usize::from(u16::from_be_bytes([*cut_hi, *cut_lo])) % (whole + 1);
    input.truncate(cut);
    if let Some(byte) = input.get_mut(usize::from(*at) * whole / 256) {
        *byte ^= *with;
    }
    input.extend_from_slice(rest);
    let untouched = cut == whole && *with == 0;

    Tracking::reset();
    let result = run(SelfLimiting(Script { input, at: 0 }), end);
    let largest = Tracking::largest();
    assert!(
        largest <= PEAK_ALLOCATION,
        "{largest} bytes allocated at once (at most {PEAK_ALLOCATION}): {result:?}"
    );
    match (untouched, refused_field) {
        (true, None) => assert!(
            result.is_ok(),
            "a real peer's transcript was refused: {result:?}"
        ),
        (true, Some(field)) => assert!(
            matches!(&result, Err(PerftestError::OutOfBounds { field: f, .. }) if *f == field),
            "{field} out of bounds, yet: {result:?}"
        ),
        (false, _) => {}
    }
});
