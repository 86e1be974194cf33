//! The simulator's speed on the HPCC paper's fat-tree (320 hosts, 100/400 Gbit/s, web
//! search at 30% load): events per second of wall time, wall time per simulated
//! millisecond, and peak memory, beside a baseline measured in the same run: the bare event
//! queue, holding as many events as the run's peak of packets in flight (about one pending
//! event each) and churned with the same kind of near-future times (the most any simulator
//! built on it could do).
//!
//! `cargo bench -p sluice-sim --bench fat_tree`; `SLUICE_SIM_BENCH_US` sets the arrival
//! window (default 1000 us), `SLUICE_SIM_BENCH_CC` the law (default hpcc);
//! `SLUICE_SIM_BENCH_ROUNDS` how many times the simulation and its baseline alternate
//! (default 3; medians are reported); `SLUICE_SIM_BENCH_NO_BASELINE=1` skips the baseline
//! (to profile the simulator alone).

use std::path::Path;
use std::time::Instant;

use sluice_sim::event::EventQueue;
use sluice_sim::workload::WorkloadSpec;
use sluice_sim::{Scenario, run_scenario};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Peak resident memory of this process so far, in MiB (Linux).
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Events per second of the bare queue holding `pending` events: each pop schedules one
/// event 0-2 us later (the spread of link and serialisation times in the fabric).
fn queue_baseline(pending: usize, events: u64) -> f64 {
    let mut q = EventQueue::default();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..pending {
        q.push(next() % 2_000_000, 0u32);
    }
    let start = Instant::now();
    let mut popped = 0;
    while popped < events {
        let Some((at, e)) = q.pop_until(u64::MAX) else {
            break;
        };
        q.push(at + next() % 2_000_000, e.wrapping_add(1));
        popped += 1;
    }
    popped as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut s = Scenario::load(&root.join("examples/hpcc-fat-tree-websearch.toml"))
        .expect("the example scenario");
    let window: f64 = env_or("SLUICE_SIM_BENCH_US", 1000.0);
    let law: String = env_or("SLUICE_SIM_BENCH_CC", "hpcc".to_string());
    if let WorkloadSpec::Poisson { duration_us, .. } = &mut s.workload {
        *duration_us = window;
    }
    s.cc.retain(|c| c.name == law);
    assert_eq!(s.cc.len(), 1, "law {law} is not in the example");
    // The simulation and its baseline alternate, `rounds` times: this VM's speed drifts by
    // a quarter within minutes, and a ratio of two figures from different minutes says
    // little. Medians are reported.
    let rounds: usize = env_or("SLUICE_SIM_BENCH_ROUNDS", 3).max(1);
    let baseline_wanted = std::env::var_os("SLUICE_SIM_BENCH_NO_BASELINE").is_none();
    let (mut rates, mut baselines, mut per_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..rounds {
        let runs = run_scenario(&s, &|_, _| {}).expect("the run");
        let r = runs.into_iter().next().expect("one law");
        rates.push(r.events as f64 / r.wall_s);
        per_ms.push(r.wall_s / (r.simulated_ns as f64 / 1e6));
        if baseline_wanted {
            baselines.push(queue_baseline(
                r.peak_packets.max(1) as usize,
                r.events.min(20_000_000),
            ));
        }
        last = Some(r);
    }
    let r = last.expect("at least one round");
    let rss = peak_rss_mib();
    let rate = median(&mut rates);
    println!(
        "fat-tree, web search 30%, {law}, arrivals over {window} us: {} flows, {:.3} ms simulated, {} events; {rounds} rounds",
        r.flows.len(),
        r.simulated_ns as f64 / 1e6,
        r.events
    );
    println!(
        "  median {:.2} M events/s (rounds: {}), {:.2} s of wall time per simulated ms",
        rate / 1e6,
        rates
            .iter()
            .map(|x| format!("{:.2}", x / 1e6))
            .collect::<Vec<_>>()
            .join(" "),
        median(&mut per_ms)
    );
    println!(
        "  peak {} packets alive; peak resident memory {}",
        r.peak_packets,
        rss.map_or("unknown".to_string(), |m| format!("{m:.1} MiB"))
    );
    println!("  target 10 M events/s: {:.2}x", rate / 1e7);
    if baseline_wanted {
        let baseline = median(&mut baselines);
        println!(
            "  baseline, the bare event queue at {} pending: median {:.2} M events/s; simulator / baseline = {:.3}",
            r.peak_packets,
            baseline / 1e6,
            rate / baseline,
        );
    }
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
