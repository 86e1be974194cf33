//! Per-link delays, link failures and the receive pipeline's reorder cost (`[links]`,
//! `[reorder_cost]`), and sender-side path selection through the engine's selector: the
//! UDP source ports it picks are what switches' ECMP hashes, so spraying over two unequal
//! paths needs no switch-side mode.

mod common;

use common::*;
use sluice_sim::RunResult;

/// Two hosts (0, 1) on two leaves (2, 3) joined through two spines (4, 5): two paths, each
/// of a leaf-spine link either side. `extra` adds tables.
fn two_paths(extra: &str) -> String {
    format!(
        r#"
time_limit_us = 20000
[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 1
host_link_gbps = 100
fabric_link_gbps = 100
link_delay_ns = 500
[transport]
recovery = "selective-repeat"
[output]
sample_interval_us = 5
{extra}
"#
    )
}

/// One flow from host 0 to host 1.
fn one_flow(bytes: u64) -> String {
    format!("[workload]\nkind = \"incast\"\nsenders = 1\nreceiver = 1\nbytes = {bytes}\n")
}

/// Bytes each switch port sent over the run, by "node.port".
fn port_bytes(r: &RunResult, node: u32, port: u16) -> f64 {
    let s = &r.series;
    let k = s
        .ports
        .iter()
        .position(|p| p.node == node && p.port == port)
        .expect("the port has a series");
    let n = s.ports.len();
    s.port_bps
        .iter()
        .skip(k)
        .step_by(n)
        .map(|bps| bps * s.interval_ns as f64 / 8e9)
        .sum()
}

/// Leaf 2's uplinks: port 1 to spine 4, port 2 to spine 5.
const UP_A: (u32, u16) = (2, 1);
const UP_B: (u32, u16) = (2, 2);
/// Path B's two leaf-spine links 8 us each: its one-way delay 17 us against path A's 2 us.
/// (Deeper skews at 100 Gbit/s need more than the 256 packets in flight that the 255-PSN
/// bitmap allows a single queue pair: BDP flow control caps its window there.)
const SLOW_B: &str = "[[links.delay]]\na = 2\nb = 5\ndelay_ns = 8000\n\
                      [[links.delay]]\na = 3\nb = 5\ndelay_ns = 8000\n";

#[test]
fn the_senders_selector_sprays_over_two_unequal_paths_through_ecmp() {
    // ECMP alone (one entropy a queue pair): one path carries the flow.
    let base = format!("{}{}", SLOW_B, one_flow(2_000_000));
    let runs = run(&scenario(&two_paths(&base)));
    let r = &runs[0];
    assert_eq!(completed(r), 1);
    let (a, b) = (port_bytes(r, UP_A.0, UP_A.1), port_bytes(r, UP_B.0, UP_B.1));
    assert!(a.min(b) < 0.01 * a.max(b), "one path: {a} {b}");

    // The engine's spray selector over 16 source ports: ECMP at the leaf spreads them over
    // both spines, so the flow takes both paths; the receiver sees the slow path's packets
    // late, holds what arrives ahead of them, and the flow still completes, exactly once.
    let text =
        format!("{base}[policies]\npath = {{ name = \"spray\", params = {{ paths = 16 }} }}\n");
    let runs = run(&scenario(&two_paths(&text)));
    let r = &runs[0];
    assert_eq!(completed(r), 1, "{:?} {:?}", r.flows[0], r.counters);
    let (a, b) = (port_bytes(r, UP_A.0, UP_A.1), port_bytes(r, UP_B.0, UP_B.1));
    assert!(a.min(b) > 0.2 * a.max(b), "both paths: {a} {b}");
    // Path B's 15 us more of flight shows in the completion time: its last packets and
    // ACKs come that much later than over path A alone.
    let fct = r.flows[0].finish_ns.unwrap() - r.flows[0].start_ns.unwrap();
    assert!(
        fct > r.flows[0].ideal_ns + 15_000,
        "{fct} {}",
        r.flows[0].ideal_ns
    );
}

#[test]
fn a_link_delay_moves_the_flows_completion_and_its_ideal_alike() {
    let fast = run(&scenario(&two_paths(&one_flow(100_000))));
    // Both spines' links slowed: whichever path ECMP picks is 4 x 10 us longer each way.
    let slow_text = format!(
        "{}{}",
        "[[links.delay]]\na = 2\nb = 4\ndelay_ns = 10500\n\
         [[links.delay]]\na = 3\nb = 4\ndelay_ns = 10500\n\
         [[links.delay]]\na = 2\nb = 5\ndelay_ns = 10500\n\
         [[links.delay]]\na = 3\nb = 5\ndelay_ns = 10500\n",
        one_flow(100_000)
    );
    let slow = run(&scenario(&two_paths(&slow_text)));
    let (f, s) = (&fast[0].flows[0], &slow[0].flows[0]);
    let fct = |r: &sluice_sim::FlowRecord| r.finish_ns.unwrap() - r.start_ns.unwrap();
    // 20 us more each way (two links of +10 us), the last ACK's way back included.
    assert!(
        fct(s) >= fct(f) + 40_000 && fct(s) <= fct(f) + 41_000,
        "{} {}",
        fct(f),
        fct(s)
    );
    assert_eq!(s.ideal_ns - f.ideal_ns, 40_000);
    // A lone flow meets its ideal.
    assert!(
        (fct(s) as f64) < 1.001 * s.ideal_ns as f64,
        "{} {}",
        fct(s),
        s.ideal_ns
    );
}

#[test]
fn a_failed_link_loses_what_it_carries_and_routing_moves_off_it() {
    // Spray in the switches so both spines carry the flow; spine 4's link to leaf 2 fails
    // at 20 us and comes back at 200 us. The flow completes, packets were lost on the
    // failed link, and while it was down its port sent nothing.
    let text = format!(
        "[switch]\nrouting = \"spray\"\n\
         [[links.event]]\na = 2\nb = 4\nat_us = 20\nstate = \"down\"\n\
         [[links.event]]\na = 4\nb = 2\nat_us = 200\nstate = \"up\"\n{}",
        one_flow(10_000_000)
    );
    let runs = run(&scenario(&two_paths(&text)));
    let r = &runs[0];
    assert_eq!(completed(r), 1);
    assert_eq!(r.counters.link_events, 2);
    assert!(r.counters.link_drops > 0, "{:?}", r.counters);
    let s = &r.series;
    let n = s.ports.len();
    let k = s
        .ports
        .iter()
        .position(|p| (p.node, p.port) == UP_A)
        .unwrap();
    for (i, t) in s.times_ns.iter().enumerate() {
        let bps = s.port_bps[i * n + k];
        if *t > 25_000 && *t <= 200_000 {
            assert_eq!(bps, 0.0, "sent at {t} ns while down");
        }
    }
    let after: f64 = (0..s.times_ns.len())
        .filter(|&i| s.times_ns[i] > 205_000)
        .map(|i| s.port_bps[i * n + k])
        .sum();
    assert!(after > 0.0, "used again after recovery");

    // Both uplinks down: nothing gets through until one recovers, and the flow then
    // completes (the sender's timeouts retry).
    let text = format!(
        "[[links.event]]\na = 2\nb = 4\nat_us = 5\nstate = \"down\"\n\
         [[links.event]]\na = 2\nb = 5\nat_us = 5\nstate = \"down\"\n\
         [[links.event]]\na = 2\nb = 5\nat_us = 600\nstate = \"up\"\n{}",
        one_flow(1_000_000)
    );
    let runs = run(&scenario(&two_paths(&text)));
    let r = &runs[0];
    assert_eq!(completed(r), 1, "{:?}", r.flows[0]);
    assert!(r.flows[0].finish_ns.unwrap() > 600_000);
    assert!(r.counters.drops > 0 || r.counters.link_drops > 0);
}

#[test]
fn reorder_work_slower_than_the_link_limits_throughput() {
    // 1 KB payloads at 100 Gbit/s arrive every 85 ns or so. A pipeline taking 200 ns a
    // packet delivers about 1024 B / 200 ns = 41 Gbit/s; at LEFT's 10 ns it is not seen.
    let bytes = 4_000_000u64;
    let fct = |cost: &str| {
        let text = format!("{cost}{}", one_flow(bytes));
        let runs = run(&scenario(&two_paths(&text)));
        let f = &runs[0].flows[0];
        assert_eq!(completed(&runs[0]), 1);
        let rx = runs[0].counters.receive;
        (f.finish_ns.unwrap() - f.start_ns.unwrap(), f.ideal_ns, rx)
    };
    let (none, ideal, rx) = fct("");
    assert!(rx.is_none());
    let (cheap, _, rx) = fct("[reorder_cost]\n");
    let rx = rx.expect("modelled");
    assert_eq!(rx.packets, bytes.div_ceil(1024));
    assert_eq!(rx.busy_ns, 10 * rx.packets);
    assert!(
        cheap as f64 <= 1.01 * none as f64,
        "{none} {cheap} (ideal {ideal})"
    );
    let (slow, _, rx) = fct("[reorder_cost]\nbase_ns = 200\n");
    let gbps = bytes as f64 * 8.0 / slow as f64;
    assert!((38.0..41.5).contains(&gbps), "{gbps} Gbit/s");
    assert!(rx.unwrap().max_waiting > 100);
}

#[test]
fn spraying_with_left_charges_its_work_and_repeats_byte_for_byte() {
    let text = format!(
        "{SLOW_B}[policies]\npath = {{ name = \"spray\", params = {{ paths = 16 }} }}\n\
         tracker = {{ name = \"left\" }}\n[reorder_cost]\n{}",
        one_flow(2_000_000)
    );
    let a = run(&scenario(&two_paths(&text)));
    let b = run(&scenario(&two_paths(&text)));
    let rx = a[0].counters.receive.expect("modelled");
    assert!(rx.work.records > 0, "{rx:?}");
    // Every packet at least the base; the tracker's work on top of some.
    assert!(rx.busy_ns > 10 * rx.packets, "{rx:?}");
    assert_eq!(a[0].flows, b[0].flows);
    assert_eq!(a[0].counters, b[0].counters);
    assert_eq!(a[0].series, b[0].series);
}

#[test]
fn bad_link_and_cost_tables_are_refused_with_the_field_named() {
    let bad = |extra: &str| {
        let text = two_paths(&format!("{extra}{}", one_flow(1000)));
        let s = sluice_sim::Scenario::parse(&text, std::path::Path::new("."));
        match s {
            Err(e) => e.to_string(),
            Ok(s) => sluice_sim::run_scenario(&s, &|_, _| {})
                .map(|_| ())
                .unwrap_err()
                .to_string(),
        }
    };
    let e = bad("[[links.delay]]\na = 2\nb = 40\ndelay_ns = 1\n");
    assert!(e.contains("links.delay[0].b"), "{e}");
    let e = bad("[[links.event]]\na = 0\nb = 2\nat_us = 1\nstate = \"down\"\n");
    assert!(e.contains("links.event[0]") && e.contains("host"), "{e}");
    let e = bad("[[links.event]]\na = 2\nb = 4\nat_us = 1\nstate = \"off\"\n");
    assert!(e.contains("state") || e.contains("off"), "{e}");
    let e = bad("[reorder_cost]\ncache_ns = 5000000\n");
    assert!(e.contains("reorder_cost.cache_ns"), "{e}");
    let e = bad("[reorder_cost]\nwhat = 1\n");
    assert!(e.contains("what"), "{e}");
}

#[test]
fn a_delay_equal_to_the_topologys_and_a_link_event_after_the_end_change_nothing() {
    let plain = run(&scenario(&two_paths(&one_flow(500_000))));
    let text = format!(
        "[[links.delay]]\na = 2\nb = 5\ndelay_ns = 500\n\
         [[links.event]]\na = 2\nb = 4\nat_us = 15000\nstate = \"down\"\n{}",
        one_flow(500_000)
    );
    let same = run(&scenario(&two_paths(&text)));
    assert_eq!(plain[0].flows, same[0].flows);
    assert_eq!(plain[0].series, same[0].series);
    // The event never came: the run ended first.
    assert_eq!(same[0].counters.link_events, 0);
    assert_eq!(plain[0].counters, same[0].counters);
}

#[test]
fn the_two_path_example_runs_with_its_failure_and_charged_work() {
    let runs = run(&example("left-two-paths.toml"));
    let r = &runs[0];
    assert_eq!(r.counters.link_events, 1);
    let rx = r.counters.receive.expect("modelled");
    assert!(rx.work.cache_hits > 0 && rx.work.gathered > 0, "{rx:?}");
    assert!(r.apps.iter().map(|q| q.bps()).sum::<f64>() > 100e9);
}

#[test]
fn rtt_probes_are_recorded_and_with_kept_routes_only_the_selector_moves_off_a_failure() {
    // Spine 5's path 10 us longer a round trip; symmetric ECMP, so each probe's reply
    // returns along the probed path. Leaf 2's uplink to spine 4 fails at 300 us and the
    // switches keep their routes.
    let text = format!(
        "[switch]\nsymmetric_hash = true\n\
         [policies]\npath = {{ name = \"rtt-probe\", params = {{ paths = 4, interval = 20, timeout = 100 }} }}\n\
         [links]\nkeep_routes = true\n\
         [[links.delay]]\na = 2\nb = 5\ndelay_ns = 5500\n\
         [[links.event]]\na = 2\nb = 4\nat_us = 300\nstate = \"down\"\n{}",
        one_flow(40_000_000)
    );
    let runs = run(&scenario(&two_paths(&text)));
    let r = &runs[0];
    let probes = &r.counters.probe_rtts;
    assert!(!probes.is_empty());
    // Every answered probe before the failure took one of the two paths: 4 us (8 links of
    // 500 ns) or 14 us a round trip, plus serialisation, plus the queue the line-rate flow
    // keeps on the way they share (probes wait in the data queues, as pings do): under
    // 5 us of it.
    let before: Vec<u64> = probes
        .iter()
        .filter(|p| p.sent_ns < 280_000)
        .filter_map(|p| p.rtt_ns)
        .collect();
    let fast: Vec<u64> = before.iter().copied().filter(|&t| t < 9_500).collect();
    let slow: Vec<u64> = before.iter().copied().filter(|&t| t >= 9_500).collect();
    assert!(fast.iter().all(|&t| t >= 4_000), "{before:?}");
    assert!(
        slow.iter().all(|&t| (14_000..19_500).contains(&t)),
        "{before:?}"
    );
    // The gap between the paths is the injected 10 us, whatever the shared queue.
    let median = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v[v.len() / 2]
    };
    assert!(!fast.is_empty() && !slow.is_empty(), "{before:?}");
    let gap = median(&slow) - median(&fast);
    assert!((9_500..10_500).contains(&gap), "gap {gap}: {before:?}");
    // Probes through spine 4 after the failure are lost, and none before it.
    assert!(
        probes
            .iter()
            .any(|p| p.rtt_ns.is_none() && p.sent_ns > 300_000)
    );
    assert!(
        probes
            .iter()
            .all(|p| p.rtt_ns.is_some() || p.sent_ns > 290_000)
    );
    // The routes stay: spine 4's uplink sends nothing after, packets routed to it are
    // lost, and the flow still completes, over spine 5 (the selector's new port).
    assert!(r.counters.link_drops > 0);
    assert_eq!(completed(r), 1, "{:?}", r.flows[0]);
    assert!(port_bytes(r, UP_B.0, UP_B.1) > 1e6);
}

#[test]
fn a_late_copy_of_a_finished_flows_packet_is_not_taken_for_the_next_flows() {
    // Sixty flows of 8 to 16 KB one after another from host 0 to host 1, sprayed over a path 2 us
    // and a path 17 us long, with the per-QP bitmap (IRN): a gap is NAK'd and the packet
    // resent over whichever path, so a flow often completes while the first copy of one of
    // its packets is still on the long path. A flow's queue pairs are destroyed when it
    // completes and the next flow's take the same numbers. Were the initial PSNs the same
    // for every connection, the late copy would be taken for the new flow's packet of that
    // PSN (a WRITE's first packet, then its middles placed at the old flow's address), and
    // the flow would fail with an invalid-request NAK where the two flows' sizes differ
    // (where they do not, its data would go to the wrong place unseen). Connections start
    // at random PSNs, as RoCE peers do.
    let dir = std::env::temp_dir().join(format!("sluice-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flows: String = (0..60)
        .map(|i| format!("0 1 {} {}\n", 8192 + i * 1537 % 8192, i * 3000))
        .collect();
    std::fs::write(dir.join("flows.txt"), flows).unwrap();
    let text = two_paths(&format!(
        "[switch]\nrouting = \"spray\"\n{SLOW_B}[workload]\nkind = \"file\"\npath = \"flows.txt\"\n"
    ));
    let s = sluice_sim::Scenario::parse(&text, &dir).unwrap_or_else(|e| panic!("{e}"));
    let r = &run(&s)[0];
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(r.counters.retransmissions > 0, "no packet was resent");
    let failed: Vec<_> = r.flows.iter().filter(|f| f.failed).map(|f| f.id).collect();
    assert!(failed.is_empty(), "flows {failed:?} failed");
    assert_eq!(completed(r), 60);
}
