//! Weir's cost per post: ns per `post` + `on_completion` pair, the driver's side of one
//! application WQE, with 1, 1,024 and 16,384 active queue pairs, and the ratio to a
//! pass-through pacer (rings every post, hands every completion back) driven by the same
//! loop in the same run.
//!
//! Each queue pair keeps one 512 B WQE in flight: in turn, a new WQE is posted on each and
//! the completion of the one before is handed in (its doorbell was 100 ns of simulated time
//! per pair ago, times the number of queue pairs). The clock advances 100 ns per pair, more than a
//! 512 B credit at line rate, and `base_delay` is set far above the delays seen, so every
//! post rings at once and the rate stays at line rate: the cost measured is the monitor,
//! bitmap, EWMA, thresholds, AIAD and credit bookkeeping, not waiting. A clock
//! synchronisation is made whenever one is due (every 1,000 doorbells), as a driver would.
//!
//! `cargo bench -p sluice-core --bench weir` (criterion runs first, then the summary
//! table); `SLUICE_BENCH_WEIR=16384` runs one row alone, for a profiler.

use std::hint::black_box;
use std::time::{Duration, Instant as WallClock};

use criterion::{BenchmarkId, Criterion};
use sluice_core::weir::{AppCompletion, Decision, Doorbell, Weir, WeirConfig};
use sluice_core::{Instant, QpNum};

/// Simulated time per pair, ns.
const STEP: u64 = 100;
const LEN: u32 = 512;

/// What the loop drives: Weir, or a pass-through.
trait Pacer {
    fn post(&mut self, qp: QpNum, wr_id: u64, now: Instant) -> Decision;
    fn complete(&mut self, qp: QpNum, tag: u64, nic_time: Instant) -> Option<AppCompletion>;
    fn sync(&mut self, now: Instant);
}

impl Pacer for Weir {
    #[inline]
    fn post(&mut self, qp: QpNum, wr_id: u64, now: Instant) -> Decision {
        Weir::post(self, qp, wr_id, LEN, true, now).unwrap()
    }

    #[inline]
    fn complete(&mut self, qp: QpNum, tag: u64, nic_time: Instant) -> Option<AppCompletion> {
        self.on_completion(qp, tag, nic_time, true).unwrap()
    }

    #[inline]
    fn sync(&mut self, now: Instant) {
        if self.sync_due() {
            Weir::sync(self, now, now);
        }
    }
}

/// Rings every post and hands every completion back: the driver loop's own cost.
struct Passthrough;

impl Pacer for Passthrough {
    #[inline]
    fn post(&mut self, qp: QpNum, wr_id: u64, _now: Instant) -> Decision {
        Decision::Ring(Doorbell {
            qp,
            wr_id,
            tag: wr_id,
            offset: 0,
            len: LEN,
            piece: 0,
            pieces: 1,
            more: false,
        })
    }

    #[inline]
    fn complete(&mut self, qp: QpNum, tag: u64, _nic_time: Instant) -> Option<AppCompletion> {
        Some(AppCompletion {
            qp,
            wr_id: tag,
            len: LEN,
            pieces: 1,
            ok: true,
        })
    }

    #[inline]
    fn sync(&mut self, _now: Instant) {}
}

/// A pacer, its queue pairs' tags in flight, and the simulated clock.
struct Bench<P> {
    pacer: P,
    tags: Vec<u64>,
    next: usize,
    now: u64,
    wr_id: u64,
}

fn config(qps: usize) -> WeirConfig {
    WeirConfig {
        max_qpn: qps as u32,
        max_wqes: 4,
        sq_depth: 4,
        base_delay: Duration::from_secs(1),
        ..WeirConfig::default()
    }
}

impl<P: Pacer> Bench<P> {
    fn new(mut pacer: P, qps: usize) -> Bench<P> {
        let mut tags = Vec::with_capacity(qps);
        let mut now = 0;
        pacer.sync(Instant::from_nanos(now));
        for qp in 0..qps {
            now += STEP;
            match pacer.post(QpNum(qp as u32), qp as u64, Instant::from_nanos(now)) {
                Decision::Ring(d) => tags.push(d.tag),
                d => panic!("setup post held: {d:?}"),
            }
        }
        let mut bench = Bench {
            pacer,
            tags,
            next: 0,
            now,
            wr_id: qps as u64,
        };
        bench.pairs(4 * qps as u64 + 4096);
        bench
    }

    /// `n` post + completion pairs, round robin over the queue pairs.
    #[inline(never)]
    fn pairs(&mut self, n: u64) {
        for _ in 0..n {
            let qp = QpNum(self.next as u32);
            self.now += STEP;
            let now = Instant::from_nanos(self.now);
            self.pacer.sync(now);
            let tag = match self.pacer.post(qp, self.wr_id, now) {
                Decision::Ring(d) => d.tag,
                Decision::Hold { .. } => unreachable!("every post rings"),
            };
            // The new WQE is posted before the old one completes, so that the queue pair
            // stays active and every completion runs the rate update.
            let old = std::mem::replace(&mut self.tags[self.next], tag);
            black_box(self.pacer.complete(qp, old, now));
            self.wr_id += 1;
            self.next += 1;
            if self.next == self.tags.len() {
                self.next = 0;
            }
        }
    }
}

/// ns per pair: the best of three runs of about `target`.
fn best_of<P: Pacer>(bench: &mut Bench<P>, target: Duration) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = WallClock::now();
        let mut n = 0u64;
        while start.elapsed() < target {
            bench.pairs(4096);
            n += 4096;
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    best
}

const QPS: [usize; 3] = [1, 1024, 16384];

fn criterion_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("weir");
    group.measurement_time(Duration::from_secs(1));
    for qps in QPS {
        let mut bench = Bench::new(Weir::new(config(qps)).unwrap(), qps);
        group.bench_function(BenchmarkId::new("post+completion", qps), |b| {
            b.iter_custom(|iters| {
                let start = WallClock::now();
                bench.pairs(iters);
                black_box(bench.now);
                start.elapsed()
            })
        });
    }
    group.finish();
}

fn summary() {
    // The rows are measured in turn three times and each keeps its best, so that a slow
    // minute of a shared machine does not fall on one row only.
    let mut best = [(f64::MAX, f64::MAX); QPS.len()];
    for _ in 0..3 {
        for (row, &qps) in QPS.iter().enumerate() {
            let mut weir = Bench::new(Weir::new(config(qps)).unwrap(), qps);
            let mut none = Bench::new(Passthrough, qps);
            let w = best_of(&mut weir, Duration::from_millis(200));
            let p = best_of(&mut none, Duration::from_millis(200));
            best[row] = (best[row].0.min(w), best[row].1.min(p));
        }
    }
    println!(
        "\nns per post + completion pair, one 512 B WQE in flight per queue pair, against a pass-through (best of 3 turns of 3 runs of 0.2 s)"
    );
    println!(
        "  {:>8}{:>12}{:>16}{:>12}{:>10}",
        "QPs", "weir", "pass-through", "extra", "ratio"
    );
    for (&qps, &(w, p)) in QPS.iter().zip(&best) {
        println!("  {qps:>8}{w:>12.1}{p:>16.1}{:>12.1}{:>10.1}", w - p, w / p);
    }
}

fn main() {
    // SLUICE_BENCH_WEIR=QPS: only Weir's row for that many queue pairs, three times.
    if let Ok(qps) = std::env::var("SLUICE_BENCH_WEIR") {
        let qps: usize = qps
            .parse()
            .expect("SLUICE_BENCH_WEIR: a number of queue pairs");
        let mut bench = Bench::new(Weir::new(config(qps)).unwrap(), qps);
        for _ in 0..3 {
            let ns = best_of(&mut bench, Duration::from_millis(300));
            println!("  {qps:>8}{ns:>12.1}");
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
    summary();
}
