//! Strict-priority queues in the switches (`[switch] priorities`): a port serves its data
//! queues highest priority first, a packet's queue read from the DSCP its host wrote.

mod common;

use common::{run, scenario};

/// Hosts 0 and 1 send to host 2 through one switch at 100 Gbit/s, without congestion
/// control: the switch's port to host 2 is the one they share. `a` and `b` are the two
/// apps' extra fields.
fn shared_port(priorities: u8, a: &str, b: &str) -> String {
    format!(
        r#"
        time_limit_us = 400
        [topology]
        kind = "star"
        hosts = 3
        link_gbps = 100
        link_delay_ns = 1000
        [switch]
        priorities = {priorities}
        [[app]]
        label = "low"
        src = 0
        dst = 2
        size = 65536
        depth = 8
        warmup_us = 20
        stop_us = 200
        {a}
        [[app]]
        label = "high"
        src = 1
        dst = 2
        size = 65536
        depth = 8
        warmup_us = 20
        stop_us = 200
        {b}
        "#
    )
}

/// The two apps' measured bytes (low, high).
fn measured(text: &str) -> (u64, u64) {
    let runs = run(&scenario(text));
    let apps = &runs[0].apps;
    assert_eq!(apps.len(), 2);
    for q in apps {
        assert!(!q.failed, "{q:?}");
        assert_eq!(q.posted, q.completed, "everything completes: {q:?}");
    }
    (apps[0].measured_bytes, apps[1].measured_bytes)
}

#[test]
fn a_low_priority_flow_yields_to_a_high_one_at_a_shared_port() {
    // One data queue: the two share the port about evenly.
    let (low, high) = measured(&shared_port(1, "priority = 1", "priority = 6"));
    let ratio = high as f64 / low as f64;
    assert!((0.5..2.0).contains(&ratio), "shared: low {low} high {high}");
    // Eight: the high one takes the port, the low one what is left (almost nothing).
    let (low, high) = measured(&shared_port(8, "priority = 1", "priority = 6"));
    assert!(high > 20 * low, "strict: low {low} high {high}");
    // The order follows the levels, not the apps: swapped, so is the outcome.
    let (low2, high2) = measured(&shared_port(8, "priority = 6", "priority = 1"));
    assert!(low2 > 20 * high2, "swapped: {low2} {high2}");
    // Fewer queues than levels: 1 and 6 still land in different queues of 4 (0 and 3) ...
    let (low, high) = measured(&shared_port(4, "priority = 1", "priority = 6"));
    assert!(high > 20 * low, "four queues: low {low} high {high}");
    // ... and 6 and 7 in the same one: shared again.
    let (low, high) = measured(&shared_port(4, "priority = 6", "priority = 7"));
    let ratio = high as f64 / low as f64;
    assert!(
        (0.5..2.0).contains(&ratio),
        "same queue: low {low} high {high}"
    );
}

#[test]
fn read_responses_carry_their_apps_priority() {
    // The high app reads from host 1 into host 2: its data are READ responses, sent by
    // host 1, and they take the port to host 2 from the low app's WRITEs.
    let text = shared_port(8, "priority = 0", "priority = 7").replace(
        "src = 1\n        dst = 2",
        "src = 2\n        dst = 1\n        op = \"read\"",
    );
    assert!(text.contains("op = \"read\""));
    let (low, high) = measured(&text);
    assert!(high > 20 * low, "read: low {low} high {high}");
}

#[test]
fn priorities_repeat_exactly_and_cost_nothing_when_off() {
    let text = shared_port(8, "priority = 2", "priority = 5");
    let (a, b) = (run(&scenario(&text)), run(&scenario(&text)));
    assert_eq!(a[0].apps, b[0].apps);
    assert_eq!(a[0].series, b[0].series);
    // Apps' priorities with one data queue: the same run as without them.
    let on = run(&scenario(&shared_port(1, "priority = 1", "priority = 6")));
    let off = run(&scenario(&shared_port(1, "", "")));
    assert_eq!(on[0].apps, off[0].apps);
    assert_eq!(on[0].series, off[0].series);
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    for (text, field) in [
        (shared_port(0, "", ""), "switch.priorities"),
        (shared_port(9, "", ""), "switch.priorities"),
        (
            shared_port(8, "", "").replace("priorities = 8", "priorities = 8\ndscp_base = 57"),
            "switch.dscp_base",
        ),
        (shared_port(8, "priority = 8", ""), "app[0].priority"),
    ] {
        let e = sluice_sim::Scenario::parse(&text, std::path::Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
}

/// Homa over strict priorities: a long message stream from host 0 and short messages from
/// host 1 share the port to host 2. Without priorities the short ones wait behind what
/// Homa granted the long one; with them their unscheduled bytes go first.
fn homa_short_beside_long(priorities: u8) -> u64 {
    let text = format!(
        r#"
        time_limit_us = 2000
        [topology]
        kind = "star"
        hosts = 3
        link_gbps = 100
        link_delay_ns = 1000
        [switch]
        priorities = {priorities}
        [[cc]]
        name = "homa"
        [[app]]
        label = "long"
        src = 0
        dst = 2
        size = 4000000
        depth = 2
        stop_us = 400
        [[app]]
        label = "short"
        src = 1
        dst = 2
        size = 4096
        depth = 1
        start_us = 50
        stop_us = 400
        "#
    );
    let runs = run(&scenario(&text));
    let apps = &runs[0].apps;
    for q in apps {
        assert!(!q.failed && q.posted == q.completed, "{q:?}");
    }
    let mut lat = apps[1].latencies_ns.clone();
    assert!(lat.len() > 20, "{lat:?}");
    lat.sort_unstable();
    lat[lat.len() * 99 / 100]
}

#[test]
fn homas_priorities_reach_the_switches() {
    let (one, eight) = (homa_short_beside_long(1), homa_short_beside_long(8));
    assert!(
        eight * 2 < one,
        "short p99 {eight} ns with priorities, {one} without"
    );
}

/// PFC's congestion spreading across a leaf-spine (100 Gbit/s hosts, 400 Gbit/s fabric,
/// 8 hosts a leaf): low-priority senders on leaf 0 (hosts 0-2) and leaf 1 (10-15) overrun
/// host 8 on leaf 1, whose leaf pauses the spine (and the spine leaf 0); a high-priority
/// app from host 3 to host 9 crosses the same fabric links to an idle port. `pfc` is more
/// of the `[switch] pfc` table's fields. Returns the high app's measured bytes, the run's
/// pauses and drops.
fn spreading(pfc: &str) -> (u64, u64, u64) {
    let mut text = format!(
        r#"
        time_limit_us = 2000
        [topology]
        kind = "leaf-spine"
        leaves = 2
        spines = 1
        hosts_per_leaf = 8
        host_link_gbps = 100
        fabric_link_gbps = 400
        link_delay_ns = 1000
        [switch]
        priorities = 8
        pfc = {{ xoff_bytes = 100000, xon_bytes = 80000{pfc} }}
        [[app]]
        label = "high"
        src = 3
        dst = 9
        size = 65536
        depth = 8
        warmup_us = 50
        stop_us = 300
        priority = 6
        "#
    );
    for src in [0, 1, 2, 10, 11, 12, 13, 14, 15] {
        text.push_str(&format!(
            "[[app]]\nlabel = \"low{src}\"\nsrc = {src}\ndst = 8\nsize = 65536\ndepth = 8\nstop_us = 300\npriority = 1\n"
        ));
    }
    let runs = run(&scenario(&text));
    let r = &runs[0];
    for q in &r.apps {
        assert!(!q.failed && q.posted == q.completed, "{q:?}");
    }
    (
        r.apps[0].measured_bytes,
        r.counters.pfc_pauses,
        r.counters.drops,
    )
}

#[test]
fn per_priority_pfc_pauses_only_the_congested_class() {
    // One lossless class: the pauses that leaf 1 sends the spine, and the spine leaf 0,
    // stop the high app's packets with the low ones'.
    let (shared, pauses, drops) = spreading("");
    assert!(pauses > 0 && drops == 0, "pauses {pauses} drops {drops}");
    // Per priority: only the low class is paused; the high app crosses the same links at
    // about its line rate (250 us at 100 Gbit/s: 3.1 MB).
    let (own, pauses, drops) = spreading(", per_priority = true");
    assert!(pauses > 0 && drops == 0, "pauses {pauses} drops {drops}");
    assert!(
        own > 2_500_000 && own > shared * 3 / 2,
        "high app: {own} bytes per priority, {shared} with one class"
    );
}

#[test]
fn per_priority_pfc_with_one_class_of_traffic_is_todays_pfc() {
    // One data queue, or apps all in one queue: every packet is in class 0, so per-priority
    // PFC pauses what one-class PFC does, at the same times: the same run, byte for byte.
    for priorities in [1, 8] {
        let text = |pfc: &str| {
            shared_port(priorities, "", "").replace(
                "[switch]",
                &format!("[switch]\npfc = {{ xoff_bytes = 20000, xon_bytes = 10000{pfc} }}"),
            )
        };
        let (off, on) = (
            run(&scenario(&text(""))),
            run(&scenario(&text(", per_priority = true"))),
        );
        assert!(off[0].counters.pfc_pauses > 0, "{priorities}: no pause");
        assert_eq!(off[0].apps, on[0].apps);
        assert_eq!(off[0].series, on[0].series);
        assert_eq!(off[0].counters, on[0].counters);
    }
}

/// Sender-side SRPT (a `[[cc]]`'s `scheduler`): host 0 streams long messages to host 2 and
/// sends short ones to host 1, so the two share only host 0's link. Round robin gives the
/// short ones every other packet; `srpt` sends them first (Homa both times).
#[test]
fn srpt_hosts_send_a_short_message_before_their_long_ones() {
    let text = r#"
        time_limit_us = 2000
        [topology]
        kind = "star"
        hosts = 3
        link_gbps = 100
        link_delay_ns = 1000
        [switch]
        priorities = 8
        [[cc]]
        name = "homa"
        [[cc]]
        name = "homa"
        label = "homa-srpt"
        scheduler = { name = "srpt" }
        [[app]]
        label = "long"
        src = 0
        dst = 2
        size = 4000000
        depth = 2
        stop_us = 400
        [[app]]
        label = "short"
        src = 0
        dst = 1
        size = 32768
        depth = 1
        start_us = 50
        stop_us = 400
        "#;
    let runs = run(&scenario(text));
    let p99 = |label: &str| {
        let r = common::by_label(&runs, label);
        for q in &r.apps {
            assert!(!q.failed && q.posted == q.completed, "{label}: {q:?}");
        }
        let mut lat = r.apps[1].latencies_ns.clone();
        assert!(lat.len() > 20, "{label}: {lat:?}");
        lat.sort_unstable();
        lat[lat.len() * 99 / 100]
    };
    let (rr, srpt) = (p99("homa"), p99("homa-srpt"));
    // 32 KB at 100 Gbit/s is about 2.7 us on the wire, and round robin about doubles
    // that; the rest (about 4.4 us) is the two links' delay both ways, which neither
    // changes (measured: 7.1 us with srpt, 9.9 with round robin).
    assert!(
        srpt * 4 < rr * 3,
        "short p99 {srpt} ns with srpt, {rr} ns with round robin"
    );
}
