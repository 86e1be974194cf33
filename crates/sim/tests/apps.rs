//! Closed-loop applications (`[[app]]`): each queue pair keeps its depth posted and no more,
//! every byte completed is accounted, tenants are measured apart, and runs repeat exactly.

mod common;

use common::{run, scenario};
use proptest::prelude::*;
use sluice_sim::app::{AppQpRecord, tenant_stats};

/// Two hosts through one switch at 100 Gbit/s; `apps` are `[[app]]` tables.
fn two_hosts(apps: &str, extra: &str) -> String {
    format!(
        r#"
        time_limit_us = 400
        [topology]
        kind = "star"
        hosts = 2
        link_gbps = 100
        link_delay_ns = 1000
        [output]
        sample_interval_us = 5
        {extra}
        {apps}
        "#
    )
}

fn app(tenant: u32, op: &str, size: u64, depth: u32, qps: u32, stop_us: f64) -> String {
    format!(
        "[[app]]\ntenant = {tenant}\nsrc = 0\ndst = 1\nop = \"{op}\"\nsize = {size}\n\
         depth = {depth}\nqps = {qps}\nstop_us = {stop_us}\n"
    )
}

/// What every app queue pair of a lossless run that stopped posting in time must show.
fn check_closed_loop(q: &AppQpRecord, depth: u32) {
    assert!(!q.failed, "{q:?}");
    assert!(
        q.max_outstanding <= depth,
        "{} > depth {depth}",
        q.max_outstanding
    );
    assert_eq!(q.max_outstanding, depth, "kept its depth posted");
    assert_eq!(
        q.posted, q.completed,
        "everything posted completed after the stop"
    );
    assert_eq!(
        q.delivered_bytes, q.completed_bytes,
        "no loss: delivered = completed"
    );
    assert!(q.measured_bytes <= q.delivered_bytes);
}

#[test]
fn every_operation_runs_closed_loop() {
    for op in ["write", "read", "send"] {
        let s = scenario(&two_hosts(&app(3, op, 8192, 4, 2, 150.0), ""));
        let runs = run(&s);
        let r = &runs[0];
        assert_eq!(r.apps.len(), 2, "{op}: one record per queue pair");
        for q in &r.apps {
            check_closed_loop(q, 4);
            assert!(q.completed > 100, "{op}: {q:?}");
        }
        let t = tenant_stats(r);
        assert_eq!((t.len(), t[0].tenant, t[0].qps), (1, 3, 2));
        // One tenant alone near line rate (headers and the window's edges cost a little).
        assert!(t[0].gbps > 80.0 && t[0].gbps < 100.0, "{op}: {}", t[0].gbps);
        // The run ends once the last message in flight completes.
        assert!(r.simulated_ns < 200_000, "{op}: ran to {}", r.simulated_ns);
    }
}

#[test]
fn tenants_are_measured_apart_and_runs_repeat() {
    let text = two_hosts(
        &format!(
            "{}{}",
            app(1, "write", 65536, 16, 1, 300.0),
            app(2, "write", 256, 4, 1, 300.0)
        ),
        "",
    );
    let a = run(&scenario(&text));
    let b = run(&scenario(&text));
    assert_eq!(a[0].apps, b[0].apps);
    assert_eq!(a[0].series, b[0].series);
    let t = tenant_stats(&a[0]);
    assert_eq!(t.len(), 2);
    assert!(t[0].gbps > 10.0 * t[1].gbps, "{t:?}");
    let (small, big) = (t[1].latency_us.unwrap(), t[0].latency_us.unwrap());
    assert!(small.0 < big.0, "{t:?}");
    // The per-tenant series carry the bytes: their sum over time is what was delivered.
    let series = sluice_sim::app::tenant_series(&a[0]);
    let interval_s = a[0].series.interval_ns as f64 * 1e-9;
    for ((_, points), q) in series.iter().zip(&a[0].apps) {
        let bytes: f64 = points.iter().map(|p| p.1 * 1e9 * interval_s / 8.0).sum();
        assert!(
            (bytes - q.delivered_bytes as f64).abs() < 1.0,
            "{bytes} vs {q:?}"
        );
    }
}

#[test]
fn decoupled_control_is_selectable_and_checked() {
    let cc = "[[cc]]\nname = \"dcqcn\"\nlabel = \"slow\"\n\
              decoupled = { processors = 2, loop_delay_us = 20, service_us = 1 }\n\
              [[cc]]\nname = \"dcqcn\"\n";
    let s = scenario(&two_hosts(&app(0, "write", 65536, 8, 1, 100.0), cc));
    let runs = run(&s);
    assert_eq!(runs.len(), 2);
    for r in &runs {
        check_closed_loop(&r.apps[0], 8);
    }
    let bad = two_hosts(
        &app(0, "write", 1, 1, 1, 10.0),
        "[[cc]]\nname = \"dcqcn\"\ndecoupled = { processors = 0 }\n",
    );
    let e = sluice_sim::Scenario::parse(&bad, std::path::Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cc.decoupled.processors"), "{e}");
    for (bad, field) in [
        ("early_exit_us = 1", "cc.decoupled.early_exit_us"),
        ("early_exit_bytes = 0", "cc.decoupled.early_exit_bytes"),
        (
            "early_exit_bytes = 1, early_exit_us = -1",
            "cc.decoupled.early_exit_us",
        ),
    ] {
        let text = two_hosts(
            &app(0, "write", 1, 1, 1, 10.0),
            &format!("[[cc]]\nname = \"dcqcn\"\ndecoupled = {{ {bad} }}\n"),
        );
        let e = sluice_sim::Scenario::parse(&text, std::path::Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{bad}: {e}");
    }
    let bad = two_hosts(&app(0, "write", 1, 1, 1, 10.0), "").replace("dst = 1", "dst = 7");
    let e = sluice_sim::run_scenario(
        &sluice_sim::Scenario::parse(&bad, std::path::Path::new(".")).unwrap(),
        &|_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("app[0].dst: 7 is not a host"), "{e}");
}

#[test]
fn decoupled_statistics_reach_the_summaries() {
    let cc = "[[cc]]\nname = \"dcqcn\"\nlabel = \"scr\"\n\
              decoupled = { processors = 3, loop_delay_us = 1, service_us = 1 }\n\
              [[cc]]\nname = \"dcqcn\"\nlabel = \"inline\"\n";
    let runs = run(&scenario(&two_hosts(
        &app(0, "write", 65536, 8, 4, 200.0),
        cc,
    )));
    let d = runs[0]
        .counters
        .decoupled
        .as_ref()
        .expect("decoupled stats");
    assert!(runs[1].counters.decoupled.is_none(), "inline has none");
    let t = &d.totals;
    assert!(t.events > 0 && t.coalesced > 0, "{t:?}");
    // Every queued event is processed, dropped, or still waiting at the end (a few).
    assert!(t.processed() + t.dropped <= t.queued(), "{t:?}");
    assert!(t.queued() - t.processed() - t.dropped <= 3 * 8, "{t:?}");
    assert_eq!(d.processors.len(), 3);
    assert_eq!(d.processors.iter().map(|p| p.runs).sum::<u64>(), t.runs);
    // Both hosts run the law: their loads are averaged.
    assert_eq!(d.loops, 2);
    let summary = sluice_sim::report::summary_json("t", &runs);
    let j = &summary["algorithms"][0]["decoupled"];
    assert_eq!(j["events"], t.events, "{j}");
    assert_eq!(j["processed"], t.processed());
    assert_eq!(j["processors"].as_array().unwrap().len(), 3);
    let load = j["processors"][0]["load"].as_f64().unwrap();
    assert!(load > 0.1 && load <= 1.0, "{j}");
    assert!(summary["algorithms"][1].get("decoupled").is_none());
    let table = sluice_sim::report::table(&runs);
    assert!(
        table.contains("coalesced") && table.contains("processor load"),
        "{table}"
    );
    let section: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.contains("processor load"))
        .collect();
    assert_eq!(section.len(), 2, "a row for scr, none for inline: {table}");
    assert!(section[1].starts_with("scr "), "{table}");
}

#[test]
fn an_app_may_run_a_law_of_its_own() {
    // Two tenants on one host: one paced by a fixed-rate law at 20 Gbit/s, the other under
    // the run's law (none), which takes the rest of the link.
    let apps = format!(
        "{}cc = {{ name = \"static\", params = {{ rate_gbps = 20 }} }}\n{}",
        app(1, "write", 65536, 8, 1, 300.0),
        app(2, "write", 65536, 8, 1, 300.0)
    );
    let runs = run(&scenario(&two_hosts(&apps, "")));
    let t = tenant_stats(&runs[0]);
    assert!(t[0].gbps > 15.0 && t[0].gbps <= 20.0, "{t:?}");
    assert!(t[1].gbps > 70.0, "{t:?}");
    // A law with a CC header of its own (swift's timestamps) beside one without.
    let apps = format!(
        "{}cc = {{ name = \"swift\" }}\n{}",
        app(1, "write", 65536, 8, 1, 300.0),
        app(2, "write", 65536, 8, 1, 300.0)
    );
    let runs = run(&scenario(&two_hosts(&apps, "")));
    for q in &runs[0].apps {
        check_closed_loop(q, 8);
    }
    let bad = two_hosts(
        &format!(
            "{}cc = {{ name = \"fastest\" }}\n",
            app(1, "write", 1, 1, 1, 10.0)
        ),
        "",
    );
    let e = sluice_sim::Scenario::parse(&bad, std::path::Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(e.contains("app[0].cc") && e.contains("fastest"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Any mix of depths, sizes and operations: no queue pair exceeds its depth, and what
    /// completes is what was delivered.
    #[test]
    fn closed_loops_hold_their_depth(
        apps in prop::collection::vec(
            (0u32..3, prop::sample::select(vec!["write", "read", "send"]), 1u64..20_000, 1u32..9),
            1..4,
        )
    ) {
        let text: String = apps
            .iter()
            .map(|&(t, op, size, depth)| app(t, op, size, depth, 1, 40.0))
            .collect();
        let runs = run(&scenario(&two_hosts(&text, "")));
        for (q, &(_, _, _, depth)) in runs[0].apps.iter().zip(&apps) {
            prop_assert!(!q.failed);
            prop_assert!(q.max_outstanding <= depth);
            prop_assert_eq!(q.posted, q.completed);
            prop_assert_eq!(q.delivered_bytes, q.completed_bytes);
        }
    }
}

#[test]
fn paced_schedulers_and_a_transmit_buffer() {
    // Schedulers that pace or arbitrate with deadlines of their own (a deadline may pass
    // while the port is busy): every run ends, each tenant served.
    let apps = format!(
        "{}{}",
        app(1, "write", 65536, 16, 1, 200.0),
        app(2, "write", 256, 4, 1, 200.0)
    );
    let mut latency = Vec::new();
    for (scheduler, buffer) in [
        ("nic-default", 0),
        ("nic-default", 32768),
        ("static", 32768),
        ("water-filling", 0),
        ("drr", 0),
    ] {
        let extra = format!(
            "[transport]\nnic_tx_buffer_bytes = {buffer}\n\
             [policies]\nscheduler = {{ name = \"{scheduler}\" }}\n"
        );
        let runs = run(&scenario(&two_hosts(&apps, &extra)));
        let t = tenant_stats(&runs[0]);
        assert!(t.iter().all(|t| t.gbps > 0.1), "{scheduler}: {t:?}");
        for q in &runs[0].apps {
            assert!(!q.failed && q.posted == q.completed, "{scheduler}: {q:?}");
        }
        latency.push(t[1].mean_latency_us.unwrap());
    }
    // A small message waits behind what the buffer holds of the bulk tenant's; a paced
    // bulk tenant does not fill it.
    assert!(latency[1] > latency[0] + 1.0, "{latency:?}");
    assert!(latency[2] < latency[1], "{latency:?}");
}

#[test]
fn reports_carry_the_tenants() {
    let text = two_hosts(
        &format!(
            "{}{}",
            app(1, "write", 65536, 8, 2, 100.0),
            app(2, "read", 4096, 8, 1, 100.0)
        ),
        "",
    );
    let runs = run(&scenario(&text));
    let summary = sluice_sim::report::summary_json("t", &runs);
    let run = &summary["algorithms"][0];
    assert_eq!(run["tenants"].as_array().unwrap().len(), 2, "{run}");
    assert_eq!(run["tenants"][0]["qps"], 2);
    assert!(run["tenants"][1]["latency_us_p99"].as_f64().unwrap() > 0.0);
    assert!(run["tenant_jain_index"].as_f64().unwrap() > 0.0);
    assert_eq!(run["app_qps"].as_array().unwrap().len(), 3);
    let table = sluice_sim::report::table(&runs);
    assert!(
        table.contains("tenant") && table.contains("lat p99"),
        "{table}"
    );
    let dir = std::env::temp_dir().join(format!("sluice-apps-{}", std::process::id()));
    sluice_sim::report::write_all(&dir, "t", &runs).unwrap();
    let csv = std::fs::read_to_string(dir.join("tenants.csv")).unwrap();
    assert!(csv.starts_with("algorithm,tenant,time_ns,gbps\n"), "{csv}");
    let svg = std::fs::read_to_string(dir.join("tenants.svg")).unwrap();
    assert!(svg.contains("tenant 1") && svg.contains("tenant 2"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sizes_may_follow_a_distribution() {
    for op in ["write", "send"] {
        let text = two_hosts(
            &format!(
                "[[app]]\nsrc = 0\ndst = 1\nop = \"{op}\"\nsize_cdf = \"rpc\"\n\
                 depth = 4\nstop_us = 200\n"
            ),
            "",
        );
        let runs = run(&scenario(&text));
        let q = &runs[0].apps[0];
        check_closed_loop(q, 4);
        assert!(q.completed > 4, "{op}: {q:?}");
        // Not all one size: the mean of what completed is not the first message's.
        assert_ne!(q.completed_bytes % q.completed, 0, "{op}: {q:?}");
    }
    let bad = two_hosts(
        "[[app]]\nsrc = 0\ndst = 1\nsize_cdf = \"no-such-cdf\"\nstop_us = 10\n",
        "",
    );
    let e = sluice_sim::Scenario::parse(&bad, std::path::Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("app[0].size_cdf") && e.contains("no-such-cdf"),
        "{e}"
    );
}
