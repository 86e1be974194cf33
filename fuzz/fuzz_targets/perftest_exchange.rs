//! perftest's TCP exchange (`sluice_perftest`) fed a peer's bytes that are partly or
//! wholly arbitrary: a remote end may send anything, and the exchange must answer with an
//! error, never a panic or a hang.
//!
//! The first two bytes of an input choose this end (role, test, QP count, MTU). What the
//! peer sends is then a real peer's transcript for that choice (recorded once per choice by
//! running both ends over a socket pair), cut where the next two bytes say, with one byte
//! replaced as the two after say, and followed by the rest of the input: so the fuzzer
//! reaches every stage of the exchange, not only the version message. Checked besides
//! "no panic": the untouched transcript is accepted whole, and an accepted exchange has the
//! peer's data for every QP.
#![no_main]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sluice_core::Mtu;
use sluice_perftest::{
    BwReport, Dest, LocalParams, PerftestError, Role, SelfLimiting, Session, Test, TimeoutStream,
};

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

/// One end's whole exchange, as `sluice perf` walks it.
fn run<S: TimeoutStream>(stream: S, end: End) -> Result<(), PerftestError> {
    let mut session = Session::start(
        stream,
        end.role,
        end.test,
        LocalParams::new(end.mtu),
        STEP_TIMEOUT,
    )?;
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

fuzz_target!(|data: &[u8]| {
    let [a, b, cut_hi, cut_lo, at, with, rest @ ..] = data else {
        return;
    };
    let end = End::from_bytes(*a, *b);
    let mut input = transcript(end);
    let whole = input.len();
    let cut = usize::from(u16::from_be_bytes([*cut_hi, *cut_lo])) % (whole + 1);
    input.truncate(cut);
    if let Some(byte) = input.get_mut(usize::from(*at) * whole / 256) {
        *byte ^= *with;
    }
    input.extend_from_slice(rest);
    let untouched = cut == whole && *with == 0;
    let result = run(SelfLimiting(Script { input, at: 0 }), end);
    if untouched {
        assert!(
            result.is_ok(),
            "a real peer's transcript was refused: {result:?}"
        );
    }
});
