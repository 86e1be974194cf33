//! Two engines joined in memory, no I/O and no wire encoding: RDMA WRITE throughput and the
//! engine's cost per packet.
//!
//! - messages/s and Gbit/s for WRITEs of 64 B, 4 KiB and 64 KiB on one queue pair (MTU 4096,
//!   32 writes in flight), with real bytes (the responder's copy into its region included;
//!   the requester's payload is read in place as a driver sends it, or copied next to the
//!   headers when it is 256 bytes or less, as a 64 B message's is) and with length-only
//!   memory (engine logic only: the "payload copy excluded" figure);
//! - ns of engine work per data packet on each side (requester, responder), timed apart;
//! - ns of engine work per data packet, both sides together, with 1, 1,024 and 16,384 active
//!   queue pairs (one 4 KiB WRITE in flight on each);
//! - ns of the requester's work per READ response with 0 and 1,000 WRITEs in the send queue
//!   ahead of the READ, kept there by an unanswered atomic at its front ([`ReadBehind`]).
//!
//! `cargo bench -p sluice-core --bench engine` (criterion runs first, then the summary table;
//! `SLUICE_BENCH_READ_BEHIND=1` prints the READ-behind-WRITEs table alone).

use std::hint::black_box;
use std::time::{Duration, Instant as WallClock};

use criterion::{BenchmarkId, Criterion, Throughput};
use sluice_core::*;
use sluice_testkit::{Direct, Pair, PairOptions, RegionMemory};

/// The bench's rig: two engines handing packets straight across (no wire, no time), and
/// its queue pairs, all on one completion queue and one memory region per side.
struct Bench {
    direct: Direct,
    pair: Pair,
    qps: Vec<[QpNum; 2]>,
}

impl Bench {
    fn new(qps: usize, bytes: bool, mr_len: u64) -> Bench {
        let mut direct = Direct::new([
            EngineConfig::default(),
            EngineConfig {
                seed: 1,
                ..EngineConfig::default()
            },
        ]);
        // Connection::new's timers and depths (they never fire here), MTU 4096, PSNs from 0.
        let options = PairOptions {
            mtu: Mtu::M4096,
            mr_len: mr_len as usize,
            memory: if bytes {
                RegionMemory::Bytes(0)
            } else {
                RegionMemory::LengthOnly
            },
            mr_addr: [0, 0],
            sq_psn: [0, 0],
            timeout: 14,
            min_rnr_timer: 12,
            caps: QpCaps {
                max_send_wr: 64,
                max_recv_wr: 1,
                ..QpCaps::default()
            },
            cq_entries: 1 << 20,
            shared_cq: true,
            ..PairOptions::default()
        };
        let pair = Pair::connect(&mut direct, &options);
        let mut pairs = Vec::with_capacity(qps);
        pairs.push(pair.qp);
        for _ in 1..qps {
            pairs.push(pair.another(&mut direct, &options));
        }
        Bench {
            direct,
            pair,
            qps: pairs,
        }
    }

    fn post_write(&mut self, qp: usize, size: u32) {
        self.pair
            .post_write_on(&mut self.direct, self.qps[qp][0], qp as u64, 0, size);
    }

    fn pump(&mut self) {
        self.direct.pump();
    }

    /// Completes `messages` WRITEs of `size` bytes on queue pair 0, `depth` in flight.
    fn writes(&mut self, messages: u64, size: u32, depth: u64) {
        let mut posted = 0;
        let mut done = 0;
        while done < messages {
            while posted < messages && posted - done < depth {
                self.post_write(0, size);
                posted += 1;
            }
            self.pump();
            while let Ok(Some(c)) = self.direct.engines[0].poll_cq(self.pair.send_cq[0]) {
                debug_assert_eq!(c.status, WcStatus::Success);
                done += 1;
            }
        }
    }

    /// One 4 KiB WRITE on every queue pair, all in flight together, until all complete.
    fn round_over_all_qps(&mut self) {
        for qp in 0..self.qps.len() {
            self.post_write(qp, 4096);
        }
        self.pump();
        let mut done = 0;
        while let Ok(Some(_)) = self.direct.engines[0].poll_cq(self.pair.send_cq[0]) {
            done += 1;
        }
        assert_eq!(done, self.qps.len());
    }
}

const SIZES: [u32; 3] = [64, 4096, 65536];

/// A READ behind `writes` WRITEs that stay in the send queue while its responses arrive: a
/// FetchAdd at the front whose answer comes last (as if the READ's responses overtook it)
/// holds every request behind it from completing, so each READ response is matched with
/// the READ past an atomic and all the WRITEs (`Qp::oldest_read_expecting`). A large
/// window (4,096 packets) lets them all be in flight at once; with the default window
/// (384) at most that many requests can be ahead.
struct ReadBehind {
    direct: Direct,
    pair: Pair,
    writes: usize,
    /// The responder's answers of one round, READ responses apart from the rest.
    responses: Vec<(Transmit, u32)>,
    others: Vec<(Transmit, u32)>,
}

/// Packets of each round's READ (MTU 4096, length-only memory).
const READ_PACKETS: u32 = 64;

impl ReadBehind {
    fn new(writes: usize) -> ReadBehind {
        let config = EngineConfig {
            max_outstanding_packets: 4096,
            ..EngineConfig::default()
        };
        let mut direct = Direct::new([config, EngineConfig { seed: 1, ..config }]);
        let options = PairOptions {
            mtu: Mtu::M4096,
            mr_len: 1 << 20,
            memory: RegionMemory::LengthOnly,
            mr_addr: [0, 0],
            sq_psn: [0, 0],
            timeout: 14,
            min_rnr_timer: 12,
            caps: QpCaps {
                max_send_wr: 2048,
                max_recv_wr: 1,
                ..QpCaps::default()
            },
            cq_entries: 1 << 16,
            shared_cq: true,
            ..PairOptions::default()
        };
        let pair = Pair::connect(&mut direct, &options);
        ReadBehind {
            direct,
            pair,
            writes,
            responses: Vec::with_capacity(READ_PACKETS as usize),
            others: Vec::with_capacity(writes + 8),
        }
    }

    fn post(&mut self, wr_id: u64, op: SendOp, offset: u64, len: u32) {
        let sgl = [Sge {
            lkey: self.pair.mr[0].lkey,
            addr: self.pair.mr[0].addr + offset,
            len,
        }];
        self.direct.engines[0]
            .post_send(self.pair.qp[0], &SendWr::new(wr_id, op, &sgl))
            .unwrap();
    }

    /// One round: the atomic, the WRITEs and the READ posted and sent, the READ's
    /// responses taken (`counted_read_responses`), then the rest of the answers (the
    /// atomic's last), and every request completed. Returns the time the READ responses
    /// took.
    fn round(&mut self) -> Duration {
        let (rkey, remote) = (self.pair.mr[1].rkey, self.pair.mr[1].addr);
        let fetch_add = SendOp::FetchAdd {
            remote_addr: remote + (768 << 10),
            rkey,
            add: 1,
        };
        self.post(0, fetch_add, 512 << 10, 8);
        for w in 0..self.writes {
            let write = SendOp::Write {
                remote_addr: remote,
                rkey,
            };
            self.post(1 + w as u64, write, 0, 64);
        }
        let read = SendOp::Read {
            remote_addr: remote,
            rkey,
        };
        self.post(1 + self.writes as u64, read, 0, READ_PACKETS * 4096);
        let d = &mut self.direct;
        let [requester, responder] = &mut d.engines;
        while let Some(tx) = requester.poll_transmit(d.now, &mut d.payload) {
            responder.handle_packet(
                d.now,
                d.addrs[0],
                false,
                &tx.headers,
                Payload::Len(tx.payload_len),
            );
        }
        self.responses.clear();
        self.others.clear();
        while let Some(tx) = responder.poll_transmit(d.now, &mut d.payload) {
            let is_read_response = (sluice_wire::Opcode::RC_RDMA_READ_RESPONSE_FIRST.0
                ..=sluice_wire::Opcode::RC_RDMA_READ_RESPONSE_ONLY.0)
                .contains(&tx.headers.bth.opcode.0);
            let to = if is_read_response {
                &mut self.responses
            } else {
                &mut self.others
            };
            to.push((tx, tx.payload_len));
        }
        assert_eq!(self.responses.len(), READ_PACKETS as usize);
        let start = WallClock::now();
        counted_read_responses(requester, d.now, d.addrs[1], &self.responses);
        let took = start.elapsed();
        for (tx, len) in &self.others {
            requester.handle_packet(d.now, d.addrs[1], false, &tx.headers, Payload::Len(*len));
        }
        let mut done = 0;
        while let Ok(Some(c)) = requester.poll_cq(self.pair.send_cq[0]) {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            done += 1;
        }
        assert_eq!(done, self.writes + 2, "every request completes each round");
        took
    }
}

/// The READ responses of a [`ReadBehind`] round, handed to the requester (callgrind
/// counts inside this function only: `SLUICE_BENCH_COUNT_READ_BEHIND`).
#[inline(never)]
fn counted_read_responses(
    requester: &mut Engine,
    now: Instant,
    from: std::net::IpAddr,
    responses: &[(Transmit, u32)],
) {
    for (tx, len) in responses {
        requester.handle_packet(now, from, false, &tx.headers, Payload::Len(*len));
    }
}

/// ns of the requester's work per READ response behind `writes` WRITEs: the best of five
/// runs of about 0.3 s.
fn read_behind_ns(writes: usize) -> f64 {
    let mut bench = ReadBehind::new(writes);
    bench.round();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let (mut took, mut responses) = (Duration::ZERO, 0u64);
        let start = WallClock::now();
        while start.elapsed() < Duration::from_millis(300) {
            took += bench.round();
            responses += u64::from(READ_PACKETS);
        }
        best = best.min(took.as_nanos() as f64 / responses as f64);
    }
    best
}

/// Engine time per data packet on each side, for 64 KiB WRITEs with length-only memory:
/// each side's calls run in their own timed phase (the requester sends a batch, the
/// responder takes it and answers, the requester takes the answers), so the clock is read
/// only around whole phases.
fn per_side() -> (f64, f64) {
    let mut bench = Bench::new(1, false, 1 << 20);
    let mut packets: Vec<(Transmit, u32)> = Vec::with_capacity(2048);
    let (mut requester, mut responder) = (Duration::ZERO, Duration::ZERO);
    let mut data_packets = 0u64;
    let start = WallClock::now();
    while start.elapsed() < Duration::from_millis(500) {
        for _ in 0..8 {
            bench.post_write(0, 65536);
        }
        let mut done = 0;
        while done < 8 {
            // Requester: everything it may send now.
            let t = WallClock::now();
            packets.clear();
            while let Some(tx) =
                bench.direct.engines[0].poll_transmit(bench.direct.now, &mut bench.direct.payload)
            {
                packets.push((tx, tx.payload_len));
            }
            requester += t.elapsed();
            data_packets += packets.iter().filter(|p| p.1 > 0).count() as u64;
            // Responder: takes them all, then sends its answers.
            let t = WallClock::now();
            for (tx, len) in &packets {
                bench.direct.engines[1].handle_packet(
                    bench.direct.now,
                    bench.direct.addrs[0],
                    false,
                    &tx.headers,
                    Payload::Len(*len),
                );
            }
            packets.clear();
            while let Some(tx) =
                bench.direct.engines[1].poll_transmit(bench.direct.now, &mut bench.direct.payload)
            {
                packets.push((tx, tx.payload_len));
            }
            responder += t.elapsed();
            // Requester: takes the answers and collects completions.
            let t = WallClock::now();
            for (tx, len) in &packets {
                bench.direct.engines[0].handle_packet(
                    bench.direct.now,
                    bench.direct.addrs[1],
                    false,
                    &tx.headers,
                    Payload::Len(*len),
                );
            }
            while let Ok(Some(_)) = bench.direct.engines[0].poll_cq(bench.pair.send_cq[0]) {
                done += 1;
            }
            requester += t.elapsed();
        }
    }
    let per = |d: Duration| d.as_nanos() as f64 / data_packets as f64;
    (per(requester), per(responder))
}

fn criterion_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("write");
    for bytes in [true, false] {
        for size in SIZES {
            let mut bench = Bench::new(1, bytes, 1 << 20);
            group.throughput(Throughput::Bytes(u64::from(size)));
            let id = BenchmarkId::new(if bytes { "bytes" } else { "length-only" }, size);
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let start = WallClock::now();
                    bench.writes(iters, size, 32);
                    black_box(&bench);
                    start.elapsed()
                })
            });
        }
    }
    group.finish();
}

/// Runs `f` repeatedly for about `target` and returns the best rate of `unit`s per second
/// over five tries, with the packets counted in the best try.
fn best_of<F: FnMut(&mut Bench) -> u64>(
    bench: &mut Bench,
    target: Duration,
    mut f: F,
) -> (f64, f64) {
    let mut best = (0.0f64, f64::MAX);
    for _ in 0..5 {
        let packets_before = bench.direct.data_packets;
        let start = WallClock::now();
        let mut units = 0;
        while start.elapsed() < target {
            units += f(bench);
        }
        let secs = start.elapsed().as_secs_f64();
        let packets = (bench.direct.data_packets - packets_before) as f64;
        let rate = units as f64 / secs;
        if rate > best.0 {
            best = (rate, secs * 1e9 / packets);
        }
    }
    best
}

fn summary() {
    println!("\nWRITE on one queue pair, MTU 4096, 32 in flight (best of 5 runs of 0.3 s)");
    println!(
        "  {:<12}{:>8}{:>14}{:>12}  ns/data packet (2 sides)",
        "memory", "size", "messages/s", "Gbit/s"
    );
    for bytes in [true, false] {
        for size in SIZES {
            let mut bench = Bench::new(1, bytes, 1 << 20);
            let batch = (1 << 20) / u64::from(size).max(1024);
            let (rate, ns) = best_of(&mut bench, Duration::from_millis(300), |b| {
                b.writes(batch, size, 32);
                batch
            });
            let gbps = rate * f64::from(size) * 8.0 / 1e9;
            println!(
                "  {:<12}{:>8}{:>14.0}{:>12.2}{:>14.1}",
                if bytes { "bytes" } else { "length-only" },
                size,
                rate,
                gbps,
                ns
            );
        }
    }
    let (requester, responder) = (0..3)
        .map(|_| per_side())
        .fold((f64::MAX, f64::MAX), |a, b| (a.0.min(b.0), a.1.min(b.1)));
    println!("\n64 KiB WRITEs, length-only, each side timed apart (best of 3 runs of 0.5 s)");
    println!(
        "  requester {requester:.1} ns and responder {responder:.1} ns of engine work per data packet"
    );
    // The rows are measured in turn three times and each keeps its best, so that a slow
    // minute of a shared machine does not fall on one row only; the ratio is to 1 QP.
    println!(
        "\nOne 4 KiB WRITE in flight on every queue pair, length-only memory (best of 3 turns of 5 runs of 0.3 s)"
    );
    println!(
        "  {:>8}{:>16}{:>28}{:>12}",
        "QPs", "messages/s", "ns/data packet (2 sides)", "ratio"
    );
    const QPS: [usize; 3] = [1, 1024, 16384];
    let mut best = [(0.0f64, f64::MAX); QPS.len()];
    for _ in 0..3 {
        for (row, &qps) in QPS.iter().enumerate() {
            let mut bench = Bench::new(qps, false, 1 << 20);
            let (rate, ns) = best_of(&mut bench, Duration::from_millis(300), |b| {
                b.round_over_all_qps();
                qps as u64
            });
            if rate > best[row].0 {
                best[row] = (rate, ns);
            }
        }
    }
    for (&qps, &(rate, ns)) in QPS.iter().zip(&best) {
        let ratio = ns / best[0].1;
        println!("  {qps:>8}{rate:>16.0}{ns:>28.1}{ratio:>12.2}");
    }
    read_behind_table();
}

fn read_behind_table() {
    println!(
        "\nA {READ_PACKETS}-packet READ behind WRITEs kept in the send queue by an unanswered atomic (best of 5 runs of 0.3 s)"
    );
    println!("  {:>8}{:>30}", "WRITEs", "ns/READ response (requester)");
    for writes in [0, 1000] {
        println!("  {writes:>8}{:>30.1}", read_behind_ns(writes));
    }
}

/// The rounds whose instructions `scripts/bench-engine-instructions` counts (callgrind
/// collects inside this function only: no setup, no warm-up).
#[inline(never)]
fn counted_rounds(bench: &mut Bench, rounds: u64) {
    for _ in 0..rounds {
        bench.round_over_all_qps();
    }
}

fn main() {
    // SLUICE_BENCH_COUNT_READ_BEHIND=N: 16 rounds of a READ behind N WRITEs after one of
    // warm-up, for callgrind to count the READ responses' instructions
    // (`scripts/bench-read-instructions`); prints the READ responses counted.
    if let Ok(writes) = std::env::var("SLUICE_BENCH_COUNT_READ_BEHIND") {
        let writes: usize = writes
            .parse()
            .expect("SLUICE_BENCH_COUNT_READ_BEHIND: a number of WRITEs");
        let mut bench = ReadBehind::new(writes);
        bench.round();
        for _ in 0..16 {
            bench.round();
        }
        println!("{}", 16 * READ_PACKETS);
        return;
    }
    // SLUICE_BENCH_COUNT_QPS=N: 32,768 messages in rounds of one WRITE per queue pair over N
    // queue pairs, after two rounds of warm-up, for callgrind to count (see above).
    if let Ok(qps) = std::env::var("SLUICE_BENCH_COUNT_QPS") {
        let qps: u64 = qps
            .parse()
            .expect("SLUICE_BENCH_COUNT_QPS: a number of queue pairs");
        let rounds = (32768 / qps).max(1);
        let mut bench = Bench::new(qps as usize, false, 1 << 20);
        bench.round_over_all_qps();
        bench.round_over_all_qps();
        counted_rounds(&mut bench, rounds);
        println!("{}", rounds * qps);
        return;
    }
    // SLUICE_BENCH_READ_BEHIND=1: only the READ-behind-WRITEs table.
    if std::env::var_os("SLUICE_BENCH_READ_BEHIND").is_some() {
        read_behind_table();
        return;
    }
    // SLUICE_BENCH_QPS=N: only the one-WRITE-per-queue-pair row for N queue pairs, three
    // times (for a profiler: `perf record` sees nothing else).
    if let Ok(qps) = std::env::var("SLUICE_BENCH_QPS") {
        let qps: usize = qps
            .parse()
            .expect("SLUICE_BENCH_QPS: a number of queue pairs");
        let mut bench = Bench::new(qps, false, 1 << 20);
        for _ in 0..3 {
            let (rate, ns) = best_of(&mut bench, Duration::from_millis(300), |b| {
                b.round_over_all_qps();
                qps as u64
            });
            println!("  {qps:>8}{rate:>16.0}{ns:>28.1}");
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
    summary();
}
