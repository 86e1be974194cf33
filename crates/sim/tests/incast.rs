//! Each congestion-control law on the 16-to-1 incast of `examples/incast.toml`: without
//! control the receiver's port holds the whole burst (PFC caps it at about 16 x xoff); each
//! law must bring it down to a bounded queue while the 16 flows share the port fairly, and
//! HPCC must keep it near zero.

mod common;

use common::*;
use sluice_sim::RunResult;
use sluice_sim::report::jain_index;

/// Jain's index of the flows' throughput over the middle half of the time before the
/// first flow completed (all 16 active).
fn middle_fairness(r: &RunResult) -> f64 {
    let s = &r.series;
    let n = s.flows.len();
    assert_eq!(n, 16, "per-flow series recorded");
    let first_done = r.flows.iter().filter_map(|f| f.finish_ns).min().unwrap();
    let (from, to) = (first_done / 4, first_done * 3 / 4);
    let mut bytes = vec![0.0; n];
    for (i, &t) in s.times_ns.iter().enumerate() {
        if t > from && t <= to {
            for (k, b) in bytes.iter_mut().enumerate() {
                *b += s.flow_bps[i * n + k];
            }
        }
    }
    jain_index(&bytes).unwrap()
}

#[test]
fn every_law_bounds_the_incast_queue_and_shares_the_port() {
    let runs = run(&example("incast.toml"));
    let none = by_label(&runs, "none");
    let uncontrolled = settled_queue(none);
    assert!(
        uncontrolled > 4_000_000,
        "without control the queue settles at {uncontrolled} B"
    );
    for r in &runs {
        assert_eq!(completed(r), 16, "{}: flows left", r.algorithm);
        assert_eq!(r.counters.drops, 0, "{}: drops under PFC", r.algorithm);
    }
    for law in ["dcqcn", "dctcp", "timely", "swift", "hpcc"] {
        let r = by_label(&runs, law);
        let settled = settled_queue(r);
        let fairness = middle_fairness(r);
        eprintln!("{law}: settled queue {settled} B, Jain {fairness:.4}");
        assert!(
            settled < uncontrolled / 8,
            "{law}: queue settled at {settled} B (uncontrolled {uncontrolled} B)"
        );
        assert!(fairness > 0.95, "{law}: Jain index {fairness:.4}");
    }
    let hpcc = settled_queue(by_label(&runs, "hpcc"));
    assert!(hpcc < 16_000, "HPCC's queue settled at {hpcc} B");
    for law in ["dcqcn", "dctcp", "timely", "swift"] {
        assert!(
            hpcc <= settled_queue(by_label(&runs, law)),
            "HPCC's queue ({hpcc} B) above {law}'s"
        );
    }
}
