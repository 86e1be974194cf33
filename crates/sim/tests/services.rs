//! Modelled payload services (`[services]`, issue 35): encryption in line costs exactly its
//! stages' time and its overhead's serialisation, caps throughput at the cipher's rate and
//! shortens segments; inspection beside the path changes nothing on the datapath and keeps
//! within its budget; in line it delays; a scenario that selects nothing runs as before.

mod common;

use common::one;
use proptest::prelude::*;
use sluice_sim::RunResult;
use sluice_sim::app::tenant_stats;

/// [`common::two_hosts`] with this file's run length (2000 us) and app stop (300 us).
fn two_hosts(app: &str, extra: &str) -> String {
    common::two_hosts(app, extra, 2000, 300)
}

fn mean_latency_ns(r: &RunResult) -> f64 {
    let l: Vec<u64> = r
        .apps
        .iter()
        .flat_map(|q| q.latencies_ns.iter().copied())
        .collect();
    l.iter().sum::<u64>() as f64 / l.len() as f64
}

#[test]
fn in_line_encryption_adds_its_two_stages_and_its_overhead_on_the_wire() {
    for (size, cost) in [
        // Default costs: 125 ns + 0.137 ns a byte.
        (1000u32, ""),
        (64, ""),
        // Given costs.
        (
            3000,
            "[services.encrypt]\nns_per_packet = 40\nns_per_byte = 0.5\n",
        ),
    ] {
        let app = format!("size = {size}\n");
        let plain = one(&two_hosts(&app, ""));
        let enc = one(&two_hosts(
            &app,
            &format!("[services]\nall = [\"encrypt\"]\n{cost}"),
        ));
        let (pkt, byte) = if cost.is_empty() {
            (125.0, 0.137)
        } else {
            (40.0, 0.5)
        };
        // A one-packet message: sealed at the sender, opened at the receiver, each paid
        // once; 24 more bytes serialised on each of the two hops (80 ps a byte). Every
        // message alike, so the means differ by exactly that (to rounding of ns).
        let stage = pkt + byte * f64::from(size);
        let expected = 2.0 * stage + 2.0 * 24.0 * 0.08;
        let diff = mean_latency_ns(&enc) - mean_latency_ns(&plain);
        assert!(
            (diff - expected).abs() < 1.5,
            "size {size}: {diff} ns more, expected {expected}"
        );
        let m = enc.counters.service_model.expect("modelled");
        let completed: u64 = enc.apps.iter().map(|q| q.completed).sum();
        assert!(
            m.sealed_packets >= completed && m.opened_packets >= completed,
            "{m:?}"
        );
        assert_eq!(m.inspected_packets, 0);
        assert!(plain.counters.service_model.is_none());
    }
}

#[test]
fn in_line_encryption_caps_throughput_at_the_stage_rate_and_shortens_segments() {
    let app = "size = 1048576\ndepth = 4\nwarmup_us = 50\n";
    let plain = one(&two_hosts(app, ""));
    let enc = one(&two_hosts(app, "[services]\nall = [\"encrypt\"]\n"));
    let p = tenant_stats(&plain)[0].gbps;
    let e = tenant_stats(&enc)[0].gbps;
    // A full packet carries 4096 - 24 = 4072 bytes and each stage takes 125 + 0.137 x 4072
    // ns for it: one stage per end, pipelined with the link, so the slower of the stage and
    // the link sets the rate.
    let stage_gbps = 4072.0 * 8.0 / (125.0 + 0.137 * 4072.0);
    assert!(p > 90.0, "plain {p}");
    assert!(
        (e - stage_gbps).abs() / stage_gbps < 0.03,
        "encrypted {e} Gbit/s, the stage's rate {stage_gbps}"
    );
    // Segments of 4072 bytes: a 1 MiB message is 258 packets, not 256.
    let m = enc.counters.service_model.expect("modelled");
    let messages: u64 = enc.apps.iter().map(|q| q.posted).sum();
    assert_eq!(m.sealed_packets, messages * 1_048_576u64.div_ceil(4072));
}

#[test]
fn inspection_beside_the_path_changes_nothing_and_keeps_to_its_budget() {
    let app = "size = 65536\ndepth = 4\n";
    let plain = one(&two_hosts(app, ""));
    for budget in ["", "budget_us = 5\n"] {
        let text = two_hosts(
            app,
            &format!("[services]\nall = [\"inspect\"]\n[services.inspect]\n{budget}"),
        );
        let r = one(&text);
        // The datapath does not wait for it: every app record is the same.
        assert_eq!(r.apps, plain.apps, "budget {budget:?}");
        assert_eq!(r.simulated_ns, plain.simulated_ns);
        let m = r.counters.service_model.expect("modelled");
        // At 3.64 ns a byte one inspector does about 2.2 Gbit/s against 100 arriving: most
        // packets are passed over once its budget of waiting work is full.
        assert!(
            m.inspected_packets > 0 && m.inspect_skipped > m.inspected_packets,
            "{m:?}"
        );
        let budget_ns = if budget.is_empty() { 100_000 } else { 5_000 };
        let one_packet_ns = (3.64 * 4096.0) as u64 + 1;
        assert!(
            m.inspect_busy_ns <= r.simulated_ns + budget_ns + one_packet_ns,
            "{m:?} in {} ns",
            r.simulated_ns
        );
        assert_eq!((m.sealed_packets, m.opened_packets), (0, 0));
    }
    // A fast inspector sees every data packet.
    let r = one(&two_hosts(
        app,
        "[services]\nall = [\"inspect\"]\n[services.inspect]\nns_per_byte = 0.001\n",
    ));
    let m = r.counters.service_model.expect("modelled");
    assert_eq!(m.inspect_skipped, 0);
    let delivered: u64 = r.apps.iter().map(|q| q.delivered_bytes).sum();
    assert_eq!(m.inspected_bytes, delivered);
}

#[test]
fn inspection_in_line_delays_every_packet() {
    let app = "size = 1000\n";
    let plain = one(&two_hosts(app, ""));
    let r = one(&two_hosts(
        app,
        "[services]\nall = [\"inspect\"]\n[services.inspect]\nplacement = \"in-line\"\n",
    ));
    let diff = mean_latency_ns(&r) - mean_latency_ns(&plain);
    assert!((diff - 3640.0).abs() < 1.5, "{diff}");
    assert_eq!(r.counters.service_model.unwrap().inspect_skipped, 0);
}

#[test]
fn apps_choose_their_own_services() {
    let text = format!(
        "{}\n[[app]]\nsrc = 1\ndst = 0\nsize = 1000\nstop_us = 300\nservices = [\"encrypt\"]\n",
        two_hosts(
            "size = 1000\nservices = []\n",
            "[services]\nall = [\"inspect\"]\n"
        )
    );
    let r = one(&text);
    let m = r.counters.service_model.expect("modelled");
    // The first app has none, the second encrypts and does not inspect: nothing inspected.
    assert_eq!(m.inspected_packets + m.inspect_skipped, 0);
    let second: u64 = r
        .apps
        .iter()
        .filter(|q| q.app == 1)
        .map(|q| q.completed)
        .sum();
    assert!(second > 0 && m.sealed_packets >= second);
    let first: u64 = r
        .apps
        .iter()
        .filter(|q| q.app == 0)
        .map(|q| q.completed)
        .sum();
    assert!(m.sealed_packets < first + second + 2, "{m:?}");
}

#[test]
fn nothing_selected_runs_as_before() {
    let app = "size = 20000\ndepth = 2\n";
    let plain = one(&two_hosts(app, ""));
    let costs = one(&two_hosts(
        app,
        "[services]\n[services.encrypt]\nns_per_packet = 9\n[services.inspect]\nns_per_byte = 1\n",
    ));
    assert_eq!(costs.apps, plain.apps);
    assert_eq!(costs.counters, plain.counters);
    assert_eq!(costs.simulated_ns, plain.simulated_ns);
}

#[test]
fn bad_services_are_refused_by_field() {
    let bad = |extra: &str, app: &str| {
        sluice_sim::Scenario::parse(&two_hosts(app, extra), std::path::Path::new("."))
            .unwrap_err()
            .to_string()
    };
    let e = bad("[services]\nall = [\"zip\"]\n", "size = 1\n");
    assert!(e.contains("services.all[0]") && e.contains("zip"), "{e}");
    let e = bad("", "size = 1\nservices = [\"encrypt\", \"dpi\"]\n");
    assert!(e.contains("app[0].services[1]"), "{e}");
    let e = bad("[services.encrypt]\nplacement = \"beside\"\n", "size = 1\n");
    assert!(e.contains("services.encrypt.placement"), "{e}");
    let e = bad("[services.inspect]\nns_per_packet = -3\n", "size = 1\n");
    assert!(e.contains("services.inspect.ns_per_packet"), "{e}");
    let e = bad("[services]\nspeed = 3\n", "size = 1\n");
    assert!(e.contains("speed"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// For any one-packet size and any costs, encryption adds exactly its two stages and
    /// its overhead's serialisation on the two hops; inspection beside the path adds
    /// nothing whatever its cost.
    #[test]
    fn stage_costs_add_exactly(
        size in 1u32..=4072,
        packet_ns in 0u32..2000,
        byte_milli_ns in 0u32..3000,
    ) {
        let byte_ns = f64::from(byte_milli_ns) / 1000.0;
        let app = format!("size = {size}\n");
        let plain = one(&two_hosts(&app, ""));
        let costs = format!("ns_per_packet = {packet_ns}\nns_per_byte = {byte_ns}\n");
        let enc = one(&two_hosts(
            &app,
            &format!("[services]\nall = [\"encrypt\"]\n[services.encrypt]\n{costs}"),
        ));
        let stage = f64::from(packet_ns) + byte_ns * f64::from(size);
        let expected = 2.0 * stage + 2.0 * 24.0 * 0.08;
        let diff = mean_latency_ns(&enc) - mean_latency_ns(&plain);
        prop_assert!((diff - expected).abs() < 1.5, "{} against {}", diff, expected);
        let beside = one(&two_hosts(
            &app,
            &format!("[services]\nall = [\"inspect\"]\n[services.inspect]\n{costs}"),
        ));
        prop_assert_eq!(&beside.apps, &plain.apps);
    }
}
