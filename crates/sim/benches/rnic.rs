//! What the RNIC model (`[rnic]`, issue 34) costs the simulator: the same perftest-like
//! scenario (host 0 writing to host 1 through one switch, 8 apps) with the model off and
//! on, alternating, reporting events per second and wall time per message completed.
//! The fat-tree bench (`benches/fat_tree.rs`) runs flows, which the model does not touch,
//! so it would show no cost at all; this one runs apps, which it does.
//!
//! `cargo bench -p sluice-sim --bench rnic`; `SLUICE_RNIC_BENCH_QPS` (default 1024),
//! `SLUICE_RNIC_BENCH_DEPTH` (16), `SLUICE_RNIC_BENCH_US` (2000 simulated us),
//! `SLUICE_RNIC_BENCH_ROUNDS` (3; medians are reported).

use std::path::Path;
use std::time::Instant;

use sluice_sim::{Scenario, run_scenario};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn scenario(qps: u32, depth: u32, us: f64, extra: &str) -> Scenario {
    let mut text = format!(
        "time_limit_us = {limit}\n[topology]\nkind = \"star\"\nhosts = 2\nlink_gbps = 100\n\
         link_delay_ns = 500\n[output]\nsample_interval_us = 100\n{extra}\n",
        limit = us + 50.0
    );
    for p in 0..8 {
        text += &format!(
            "[[app]]\nsrc = 0\ndst = 1\nsize = 512\ndepth = {depth}\nqps = {}\nstop_us = {us}\n",
            qps / 8 + u32::from(p < qps % 8)
        );
    }
    Scenario::parse(&text, Path::new(".")).expect("the bench scenario")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let qps: u32 = env_or("SLUICE_RNIC_BENCH_QPS", 1024);
    let depth: u32 = env_or("SLUICE_RNIC_BENCH_DEPTH", 16);
    let us: f64 = env_or("SLUICE_RNIC_BENCH_US", 2000.0);
    let rounds: usize = env_or("SLUICE_RNIC_BENCH_ROUNDS", 3).max(1);
    let configs = [
        ("off", scenario(qps, depth, us, "")),
        ("rnic", scenario(qps, depth, us, "[rnic]")),
        (
            "rnic+weir",
            scenario(qps, depth, us, "[rnic]\n[weir]\nbase_delay_us = 2"),
        ),
    ];
    let mut rates = vec![Vec::new(); configs.len()];
    let mut per_msg = vec![Vec::new(); configs.len()];
    let mut events = vec![0; configs.len()];
    for _ in 0..rounds {
        for (i, (_, s)) in configs.iter().enumerate() {
            let t = Instant::now();
            let r = &run_scenario(s, &|_, _| {}).expect("runs")[0];
            let wall = t.elapsed().as_secs_f64();
            let msgs: u64 = r.apps.iter().map(|q| q.completed).sum();
            rates[i].push(r.events as f64 / wall);
            per_msg[i].push(wall * 1e9 / msgs.max(1) as f64);
            events[i] = r.events;
        }
    }
    println!("{qps} QPs x depth {depth}, 512 B, {us} simulated us; medians of {rounds} rounds");
    let base = median(per_msg[0].clone());
    for (i, (name, _)) in configs.iter().enumerate() {
        let m = median(per_msg[i].clone());
        println!(
            "{name:>10}: {:>6.2} M events/s, {events:>9} events, {m:>7.0} ns wall per message ({:.2}x off)",
            median(rates[i].clone()) / 1e6,
            m / base,
            events = events[i],
        );
    }
}
