//! Helpers shared by the simulator's tests: scenarios from TOML text, runs, and the queue
//! a run settled at.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use sluice_sim::{RunResult, Scenario, run_scenario};

/// The scenario in TOML `text`; relative paths start at the repository's root.
pub fn scenario(text: &str) -> Scenario {
    Scenario::parse(text, &repo_root()).unwrap_or_else(|e| panic!("{e}"))
}

/// A scenario file of the repository's `examples/`.
pub fn example(name: &str) -> Scenario {
    Scenario::load(&repo_root().join("examples").join(name)).unwrap_or_else(|e| panic!("{e}"))
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs every algorithm of `s`.
pub fn run(s: &Scenario) -> Vec<RunResult> {
    run_scenario(s, &|_, _| {}).unwrap_or_else(|e| panic!("{e}"))
}

/// The run of algorithm `label`.
pub fn by_label<'a>(runs: &'a [RunResult], label: &str) -> &'a RunResult {
    runs.iter()
        .find(|r| r.algorithm == label)
        .unwrap_or_else(|| panic!("no run of {label}"))
}

/// The largest switch queue sampled in the second half of the time the flows ran.
pub fn settled_queue(r: &RunResult) -> u64 {
    let half = r.simulated_ns / 2;
    r.series
        .times_ns
        .iter()
        .zip(&r.series.max_queue_bytes)
        .filter(|(t, _)| **t >= half && **t <= r.simulated_ns)
        .map(|(_, q)| *q)
        .max()
        .unwrap_or(0)
}

/// Flows of `r` that completed without error.
pub fn completed(r: &RunResult) -> usize {
    r.flows.iter().filter(|f| f.slowdown().is_some()).count()
}

/// Two hosts through one switch at 100 Gbit/s (80 ps a byte), 1 us links, MTU 4096: host 0
/// runs `app` towards host 1 until `stop_us`, the run ending at `limit_us`; `extra` goes in
/// before the app (services, switch settings).
pub fn two_hosts(app: &str, extra: &str, limit_us: u64, stop_us: u64) -> String {
    format!(
        r#"
        time_limit_us = {limit_us}
        [topology]
        kind = "star"
        hosts = 2
        link_gbps = 100
        link_delay_ns = 1000
        [transport]
        mtu = 4096
        {extra}
        [[app]]
        src = 0
        dst = 1
        stop_us = {stop_us}
        {app}
        "#
    )
}

/// The first (usually only) run of a scenario given as text.
pub fn one(text: &str) -> RunResult {
    run(&scenario(text)).remove(0)
}
