//! Small fabrics whose answers are known in closed form: one flow alone gets line rate and
//! exactly the ideal completion time; flows sharing one bottleneck share it fairly and fill
//! it; a queue fed at twice its rate grows at its line rate until PFC or ECN acts.

mod common;

use common::*;
use sluice_sim::report::jain_index;

#[test]
fn one_flow_alone_gets_line_rate_and_the_ideal_fct() {
    // 100 Gbit/s host links, a 40 Gbit/s bottleneck, 1 us links and 300 ns of NIC delay.
    // The ideal is computed independently of the run (packets pipelined store-and-forward
    // along the path, then the last ACK back); the run must meet it, not merely approach it.
    let s = scenario(
        r#"
        [topology]
        kind = "dumbbell"
        hosts_per_side = 1
        host_link_gbps = 100
        bottleneck_gbps = 40
        link_delay_ns = 1000
        [transport]
        nic_delay_ns = 300
        [workload]
        kind = "incast"
        senders = 1
        receiver = 1
        bytes = 4000000
        "#,
    );
    let r = &run(&s)[0];
    let f = &r.flows[0];
    assert_eq!((f.src, f.dst), (0, 1));
    let fct = f.fct_ns().expect("completed");
    assert_eq!(fct, f.ideal_ns, "measured FCT vs ideal, ns");
    // Payload rate: 40 Gbit/s x 1024 / (1024 + 82): Ethernet 38 with preamble and gap, IP 20,
    // UDP 8, BTH 12, ICRC 4.
    let goodput = 4_000_000.0 * 8.0 / fct as f64;
    let expected = 40.0 * 1024.0 / 1106.0;
    assert!(
        (goodput - expected).abs() / expected < 0.01,
        "goodput {goodput:.2} Gbit/s, expected {expected:.2}"
    );
    assert_eq!(r.counters.drops, 0);
}

#[test]
fn flows_sharing_one_bottleneck_share_it_fairly_and_fill_it() {
    // Four flows across a 100 Gbit/s dumbbell bottleneck from 100 Gbit/s hosts: the left
    // switch's port is fed at 4x its rate; PFC keeps it lossless.
    let s = scenario(
        r#"
        [topology]
        kind = "dumbbell"
        hosts_per_side = 4
        host_link_gbps = 100
        bottleneck_gbps = 100
        link_delay_ns = 1000
        [switch]
        pfc = { xoff_bytes = 200000, xon_bytes = 150000 }
        [workload]
        kind = "file"
        path = "crates/sim/tests/data/four-across.txt"
        "#,
    );
    let r = &run(&s)[0];
    assert_eq!(completed(r), 4);
    let rates: Vec<f64> = r
        .flows
        .iter()
        .map(|f| f.bytes as f64 / f.fct_ns().unwrap() as f64)
        .collect();
    let jain = jain_index(&rates).unwrap();
    assert!(jain > 0.99, "Jain index {jain:.4}, rates {rates:?}");
    let last = r.flows.iter().filter_map(|f| f.finish_ns).max().unwrap();
    let total: u64 = r.flows.iter().map(|f| f.bytes).sum();
    let utilisation = total as f64 * 8.0 / last as f64 / (100.0 * 1024.0 / 1106.0);
    assert!(
        utilisation > 0.99,
        "bottleneck carried {utilisation:.3} of its payload rate"
    );
    assert!(r.counters.pfc_pauses > 0, "the hosts were never paused");
    assert_eq!(r.counters.drops, 0);
}

/// Two hosts send to a third at line rate: the receiver's port gets 200 Gbit/s for 100.
fn two_to_one(switch: &str, cc: &str) -> sluice_sim::RunResult {
    let buffer = if switch.contains("buffer_bytes") {
        ""
    } else {
        "buffer_bytes = 64000000"
    };
    let s = scenario(&format!(
        r#"
        [topology]
        kind = "star"
        hosts = 3
        link_gbps = 100
        link_delay_ns = 1000
        [switch]
        {buffer}
        {switch}
        [transport]
        window_packets = 16384
        [output]
        sample_interval_us = 2
        [workload]
        kind = "incast"
        senders = 2
        receiver = 0
        bytes = 8000000
        [[cc]]
        name = "{cc}"
        "#
    ));
    run(&s).remove(0)
}

#[test]
fn a_queue_fed_at_twice_its_rate_grows_at_line_rate() {
    let r = two_to_one("", "none");
    let s = &r.series;
    // Between 20 and 120 us the queue grows by what the second sender adds: 100 Gbit/s of
    // wire bytes, 12.5 bytes per ns.
    let at = |t: u64| {
        let i = s.times_ns.iter().position(|&x| x >= t).unwrap();
        (s.times_ns[i], s.max_queue_bytes[i])
    };
    let ((t0, q0), (t1, q1)) = (at(20_000), at(120_000));
    let slope = (q1 - q0) as f64 / (t1 - t0) as f64;
    assert!(
        (slope - 12.5).abs() < 0.25,
        "queue grew at {slope:.3} bytes/ns ({q0} B at {t0} ns, {q1} B at {t1} ns)"
    );
    assert_eq!(completed(&r), 2);
}

#[test]
fn pfc_caps_the_queue_that_would_grow() {
    let free = two_to_one("", "none");
    let pfc = two_to_one("pfc = { xoff_bytes = 100000, xon_bytes = 80000 }", "none");
    let peak = |r: &sluice_sim::RunResult| r.series.max_queue_bytes.iter().copied().max().unwrap();
    // Each ingress fills to xoff before it pauses its sender, and may hold what arrives
    // while the pause travels back (about 2 us x 100 Gbit/s = 25 KB): two senders, between
    // 2 x 100 KB and 2 x 130 KB.
    assert!(
        (200_000..260_000).contains(&peak(&pfc)),
        "PFC let the queue reach {} B",
        peak(&pfc)
    );
    assert!(
        peak(&free) > 4_000_000,
        "without PFC it reached {} B",
        peak(&free)
    );
    assert!(pfc.counters.pfc_pauses > 0 && pfc.counters.pfc_paused_ns > 0);
    assert_eq!(completed(&pfc), 2);
    assert_eq!(pfc.counters.drops, 0);
}

#[test]
fn ecn_marks_bring_dctcp_to_the_marking_threshold() {
    // DCTCP on a step at K = 60 KB: the queue settles near K, far below what the windows
    // alone would pile up.
    let r = two_to_one(
        "ecn = { kmin_bytes = 60000, kmax_bytes = 60000, pmax = 1.0 }",
        "dctcp",
    );
    let settled = settled_queue(&r);
    assert!(r.counters.ecn_marks > 0 && r.counters.cnps > 0);
    assert!(
        (40_000..100_000).contains(&settled),
        "settled at {settled} B"
    );
    assert_eq!(completed(&r), 2);
}

#[test]
fn dynamic_thresholds_drop_without_pfc_and_the_flows_recover() {
    // A small shared buffer, no PFC: the dynamic threshold drops, go-back-N recovers.
    let r = two_to_one("buffer_bytes = 200000", "none");
    assert!(r.counters.drops > 0);
    assert!(r.counters.retransmissions > 0);
    assert_eq!(completed(&r), 2);
    let peak = r.series.max_queue_bytes.iter().copied().max().unwrap();
    // alpha = 1: one queue may hold at most half the buffer, and drops begin only there.
    assert!(
        (95_000..=100_000 + 1200).contains(&peak),
        "queue peaked at {peak} B, the threshold is 100000 B"
    );
}
