//! The schedulers' cost per decision, driven directly (no engine) by a fake 100 Gbit/s link
//! that sends one 1 KiB packet per decision and advances a simulated clock by its time on
//! the link, so that the pacing schedulers see the time pass that their rates assume.
//!
//! A decision is `next` and `served` (the queue pair staying held), and one in 16 ends a
//! 16-packet message with the queue pair dropped and woken again at once (`wake`). When a
//! pacing scheduler has no one eligible, the clock jumps to its `eligible_at` (that call
//! is in the time). Every queue pair always has something to send; with 1, 1,024 and
//! 16,384 of them, ns per decision and the ratio to round robin measured in the same run.
//!
//! `cargo bench -p sluice-core --bench scheduler` (criterion runs first, then the summary
//! table); `SLUICE_BENCH_SCHED=static:16384` runs one row alone, for a profiler.

use std::hint::black_box;
use std::time::{Duration, Instant as WallClock};

use criterion::{BenchmarkId, Criterion};
use sluice_core::Instant;
use sluice_core::policy::{
    Drr, Filling, NicDefault, Pacing, RoundRobin, Scheduler, Served, StaticShare, Tenant,
    WaterFilling,
};
use sluice_wire::Opcode;

/// Packets per message.
const MESSAGE: u32 = 16;

/// The schedulers measured, by registry name, round robin first.
const NAMES: [&str; 5] = [
    "round-robin",
    "drr",
    "static",
    "water-filling",
    "nic-default",
];

/// No floor: with one, 1,024 queue pairs at 1 Gbit/s each would oversubscribe the link ten
/// times over and every bucket would always allow; without, the rates sum to C and the
/// buckets decide who is eligible at every decision.
const PACING: Pacing = Pacing {
    link: Some(100_000_000_000),
    floor: Some(0),
    by_tenant: false,
    burst: 16384,
    linger: Duration::from_millis(1),
    turn: 0,
};

fn build(name: &str) -> Box<dyn Scheduler> {
    match name {
        "round-robin" => Box::new(RoundRobin::default()),
        "drr" => Box::new(Drr::new(4096)),
        "static" => Box::new(StaticShare::new(PACING)),
        "water-filling" => Box::new(WaterFilling::new(PACING, Filling::default())),
        "nic-default" => Box::new(NicDefault::default()),
        _ => unreachable!("{name}"),
    }
}

/// One scheduler over `qps` busy queue pairs in four tenants, and the fake link's clock.
struct Bench {
    s: Box<dyn Scheduler>,
    /// Packets each queue pair sent, modulo `MESSAGE`.
    sent: Vec<u32>,
    /// The clock, in 1/1024 ns so that a packet's time on the link adds up exactly enough.
    now: u64,
}

impl Bench {
    fn new(name: &str, qps: usize) -> Bench {
        let mut s = build(name);
        for qp in 0..qps as u32 {
            s.reset(qp);
            s.set_tenant(
                qp,
                Tenant {
                    id: qp % 4,
                    weight: 1 + qp % 4,
                },
            );
            s.wake(qp);
        }
        let mut bench = Bench {
            s,
            sent: vec![0; qps],
            now: 0,
        };
        // Past joins and the first fill.
        bench.decisions(4 * qps as u64 + 4096);
        bench
    }

    #[inline]
    fn packet(sent: u32) -> Served {
        let opcode = match (sent, sent + 1 == MESSAGE) {
            (0, _) => Opcode::RC_RDMA_WRITE_FIRST,
            (_, true) => Opcode::RC_RDMA_WRITE_LAST,
            _ => Opcode::RC_RDMA_WRITE_MIDDLE,
        };
        Served::new(opcode, 1024)
    }

    /// `n` decisions.
    fn decisions(&mut self, n: u64) {
        let mut done = 0;
        while done < n {
            let now = Instant::from_nanos(self.now >> 10);
            let Some(qp) = self.s.next(now) else {
                let t = self
                    .s
                    .eligible_at()
                    .expect("busy queue pairs wait for a time");
                self.now = self.now.max(t.as_nanos() << 10);
                continue;
            };
            let i = qp as usize;
            let p = Bench::packet(self.sent[i]);
            self.sent[i] = (self.sent[i] + 1) % MESSAGE;
            let more = self.sent[i] != 0;
            self.s.served(qp, now, Some(p), more);
            if !more {
                self.s.wake(qp);
            }
            // 100 Gbit/s: 0.08 ns per byte, in 1/1024 ns.
            self.now += u64::from(p.link_len) * 1024 * 8 / 100;
            done += 1;
        }
    }
}

fn criterion_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduler");
    group.measurement_time(Duration::from_secs(1));
    for name in NAMES {
        let mut bench = Bench::new(name, 1024);
        group.bench_function(BenchmarkId::new(name, 1024), |b| {
            b.iter_custom(|iters| {
                let start = WallClock::now();
                bench.decisions(iters);
                black_box(&bench.now);
                start.elapsed()
            })
        });
    }
    group.finish();
}

/// ns per decision: the best of three runs of about `target`.
fn best_of(bench: &mut Bench, target: Duration) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = WallClock::now();
        let mut n = 0u64;
        while start.elapsed() < target {
            bench.decisions(4096);
            n += 4096;
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    best
}

fn summary() {
    const QPS: [usize; 3] = [1, 1024, 16384];
    // The rows are measured in turn three times and each keeps its best, so that a slow
    // minute of a shared machine does not fall on one row only.
    let mut best = [[f64::MAX; QPS.len()]; NAMES.len()];
    for _ in 0..3 {
        for (row, name) in NAMES.iter().enumerate() {
            for (col, &qps) in QPS.iter().enumerate() {
                let mut bench = Bench::new(name, qps);
                best[row][col] =
                    best[row][col].min(best_of(&mut bench, Duration::from_millis(200)));
            }
        }
    }
    println!(
        "\nns per scheduling decision (next, served; a wake per 16), busy queue pairs, ratio to round robin (best of 3 turns of 3 runs of 0.2 s)"
    );
    print!("  {:<16}", "scheduler");
    for qps in QPS {
        print!("{:>18}", format!("{qps} QPs"));
    }
    println!();
    for (row, name) in NAMES.iter().enumerate() {
        print!("  {name:<16}");
        for (&ns, &rr) in best[row].iter().zip(&best[0]) {
            let ratio = ns / rr;
            print!("{:>18}", format!("{ns:.1} ns ({ratio:.2}x)"));
        }
        println!();
    }
}

fn main() {
    // SLUICE_BENCH_SCHED=NAME:QPS: only that scheduler's row for that many queue pairs, three
    // times (for a profiler: `perf record` sees nothing else).
    if let Ok(row) = std::env::var("SLUICE_BENCH_SCHED") {
        let (name, qps) = row
            .split_once(':')
            .expect("SLUICE_BENCH_SCHED: NAME:QPS, e.g. static:16384");
        let qps: usize = qps
            .parse()
            .expect("SLUICE_BENCH_SCHED: a number of queue pairs");
        let mut bench = Bench::new(name, qps);
        for _ in 0..3 {
            println!(
                "  {name} {qps}: {:.1} ns",
                best_of(&mut bench, Duration::from_millis(500))
            );
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
    summary();
}
