//! The RNIC model (`[rnic]`) and Weir (`[weir]`) in the simulator (issue 34): off, runs are
//! as before; on, they repeat exactly, every WQE is accounted, and the caches behave as
//! their sizes say.

mod common;

use common::{run, scenario};
use sluice_sim::RunResult;

/// Host 0 posts to host 1 through one switch at 100 Gbit/s: `qps` queue pairs over up to 8
/// apps (perftest processes), `depth` deep, `size`-byte WRITEs; `extra` is appended.
fn perftest(qps: u32, depth: u32, size: u32, stop_us: f64, limit_us: f64, extra: &str) -> String {
    let procs = qps.min(8);
    let mut apps = String::new();
    for p in 0..procs {
        let n = qps / procs + u32::from(p < qps % procs);
        apps += &format!(
            "[[app]]\nsrc = 0\ndst = 1\nsize = {size}\ndepth = {depth}\nqps = {n}\n\
             stop_us = {stop_us}\nwarmup_us = {w}\n",
            w = warmup_us(qps, depth, stop_us)
        );
    }
    format!(
        r#"
        time_limit_us = {limit_us}
        [topology]
        kind = "star"
        hosts = 2
        link_gbps = 100
        link_delay_ns = 500
        [output]
        sample_interval_us = 10
        {extra}
        {apps}
        "#
    )
}

/// A quarter of the run, and long enough that the NIC has fetched what every queue pair
/// posted at the start (its PCIe tags, 256 reads of 0.8 us, take about 300 WQEs a us).
fn warmup_us(qps: u32, depth: u32, stop_us: f64) -> f64 {
    (stop_us / 4.0)
        .max(f64::from(qps * depth) / 250.0)
        .min(stop_us * 0.9)
}

fn gbps(r: &RunResult) -> f64 {
    r.apps.iter().map(|q| q.bps()).sum::<f64>() / 1e9
}

fn describe(label: &str, r: &RunResult) -> String {
    let n = r.counters.nic.unwrap_or_default();
    format!(
        "{label}: {:.1} Gbit/s, wqe miss {} / {}, mtt miss {}, qpc miss {}, max outstanding {}, events {}, sim {} ns, {n:?}",
        gbps(r),
        n.wqe.misses,
        n.wqe.hits + n.wqe.misses,
        n.mtt.misses,
        n.qpc.misses,
        n.max_outstanding,
        r.events,
        r.simulated_ns,
    ) + &format!(" weir {:?}", r.counters.weir)
}

#[test]
fn every_wqe_is_accounted_and_runs_repeat() {
    for extra in [
        "[rnic]\n",
        "[weir]\nbase_delay_us = 4\n",
        "[rnic]\n[weir]\nbase_delay_us = 4\n",
        "[rnic]\n[weir]\nbase_delay_us = 4\nmax_batch = 4\n",
    ] {
        let s = scenario(&perftest(16, 8, 512, 100.0, 400.0, extra));
        let a = run(&s);
        let b = run(&s);
        let r = &a[0];
        for q in &r.apps {
            assert!(!q.failed, "{extra}: {q:?}");
            assert_eq!(q.posted, q.completed, "{extra}: drained after the stop");
            assert!(q.max_outstanding <= 8);
            assert!(q.completed > 50, "{extra}: {q:?}");
        }
        let mut a0 = a[0].clone();
        let mut b0 = b[0].clone();
        a0.wall_s = 0.0;
        b0.wall_s = 0.0;
        assert_eq!(a0, b0, "{extra}: same seed, same run");
        let posted: u64 = r.apps.iter().map(|q| q.posted).sum();
        if let Some(n) = r.counters.nic {
            let doorbells = r.counters.weir.map_or(posted, |w| w.doorbells);
            let rung = r.counters.weir.map_or(posted, |w| w.runs);
            assert_eq!(n.doorbells, rung, "{extra}");
            assert_eq!((n.processed, n.cqes), (doorbells, doorbells), "{extra}");
            // 128 WQEs at most outstanding: all fit, each is fetched once and hit once.
            assert_eq!(n.wqe.misses, 0, "{extra}");
            assert_eq!(n.qpc.misses, 16, "{extra}: one cold miss per queue pair");
            assert!(n.max_outstanding <= 128, "{extra}");
        }
        if let Some(w) = r.counters.weir {
            assert_eq!(w.posts, posted, "{extra}");
            assert_eq!(w.app_completions, posted, "{extra}");
        }
        eprintln!("{}", describe(extra, r));
    }
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    for (extra, field) in [
        ("[rnic]\nwqe_entries = 0\n", "rnic.wqe_entries"),
        ("[rnic]\npcie_read_ns = -1\n", "rnic.pcie_read_ns"),
        ("[rnic]\npreset = \"cx9\"\n", "rnic.preset"),
        ("[weir]\nbase_delay_us = 0\n", "weir.base_delay_us"),
    ] {
        let text = perftest(2, 2, 512, 50.0, 100.0, extra);
        let e = sluice_sim::Scenario::parse(&text, std::path::Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{extra}: {e}");
    }
}

/// A sweep to look at by hand: `cargo test --release -p sluice-sim --test rnic -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn sweep() {
    let qps: Vec<u32> = std::env::var("QPS")
        .ok()
        .map(|v| v.split(',').map(|x| x.parse().unwrap()).collect())
        .unwrap_or(vec![8, 64, 128, 512, 2048]);
    let size: u32 = std::env::var("SIZE").map_or(512, |v| v.parse().unwrap());
    let depth: u32 = std::env::var("DEPTH").map_or(128, |v| v.parse().unwrap());
    let us: f64 = std::env::var("US").map_or(200.0, |v| v.parse().unwrap());
    let weir = std::env::var("WEIR").unwrap_or("base_delay_us = 4".into());
    for q in qps {
        for (label, extra) in [
            ("native", "[rnic]\n".to_string()),
            ("weir", format!("[rnic]\n[weir]\n{weir}\n")),
        ] {
            let t = std::time::Instant::now();
            let s = scenario(&perftest(q, depth, size, us, us * 1.5, &extra));
            let r = &run(&s)[0];
            if std::env::var("SERIES").is_ok() {
                let g = &r.series.goodput_bps;
                let step = (g.len() / 30).max(1);
                let pts: Vec<String> = g
                    .iter()
                    .step_by(step)
                    .map(|b| format!("{:.0}", b / 1e9))
                    .collect();
                eprintln!("series: {}", pts.join(" "));
            }
            eprintln!(
                "{q:>6} {} ({:.1}s)",
                describe(label, r),
                t.elapsed().as_secs_f64()
            );
        }
    }
}

/// A WQE cache of 256 entries: 8 queue pairs x depth 16 (128 WQEs) fit and never miss in
/// the window; 32 x 16 (512) overflow it, nearly every WQE then misses (LRU's cyclic worst
/// case: the round robin needs next the WQE that waited longest), drags its MTT/MPT entry
/// out with it, and throughput falls.
#[test]
fn the_wqe_cache_thrashes_once_outstanding_work_exceeds_it() {
    let nic = "[rnic]\nwqe_entries = 256\nwqe_ways = 256\n";
    let fit = &run(&scenario(&perftest(8, 16, 512, 200.0, 300.0, nic)))[0];
    let over = &run(&scenario(&perftest(32, 16, 512, 200.0, 300.0, nic)))[0];
    let (f, o) = (
        fit.counters.nic_window.unwrap(),
        over.counters.nic_window.unwrap(),
    );
    assert_eq!(
        (f.wqe.misses, f.mtt.misses),
        (0, 0),
        "{}",
        describe("fit", fit)
    );
    assert!(f.processed > 1000);
    assert!(
        o.wqe.misses * 10 > o.processed * 9 && o.mtt.misses * 10 > o.processed * 9,
        "{}",
        describe("over", over)
    );
    assert!(gbps(over) < 0.8 * gbps(fit), "{} {}", gbps(over), gbps(fit));
    // Occupancy is what was doorbelled and not completed: depth x queue pairs at most, and
    // while the apps post (from the warm-up's end at 50 us to their stop at 200 us) nearly
    // that: a WQE leaves the NIC when the engine completes it and its successor comes once
    // the CQE is in host memory, 400 ns later (of about 6 us a round); then it drains.
    assert_eq!((f.max_outstanding, o.max_outstanding), (128, 512));
    let end = fit.simulated_ns;
    assert!(f.occupancy_wqe_ns <= 128 * (end - 50_000), "{f:?}");
    assert!(f.occupancy_wqe_ns >= 128 * 150_000 * 9 / 10, "{f:?}");
}

/// With `[weir]`, Weir's rate and delay are noted when the apps stop: here, unloaded, at
/// line rate with a delay of a few microseconds.
#[test]
fn weirs_rate_and_delay_are_noted_at_the_stop() {
    let r = &run(&scenario(&perftest(
        8,
        4,
        512,
        100.0,
        200.0,
        "[rnic]\n[weir]\nbase_delay_us = 4\n",
    )))[0];
    let (rate, delay) = (
        r.counters.weir_rate_bps.unwrap(),
        r.counters.weir_delay_ns.unwrap(),
    );
    assert!(rate > 90_000_000_000, "{rate}");
    assert!((1_000..20_000).contains(&delay), "{delay}");
}

/// A WQE Weir splits goes out as pieces, each a WR of its own on the engine: the send
/// queue holds every piece of the app's depth (`rnic::send_depth`), so the pieces of a
/// 64 KiB WRITE at depth 1 are in flight together and its FCT is the native one, not 16
/// unloaded delays (the bug `weir-fig11` found: 61.7 us against 46.0).
#[test]
fn split_wqes_go_out_together_at_depth_one() {
    let median = |r: &RunResult| {
        let mut l: Vec<u64> = r.apps.iter().flat_map(|q| q.latencies_ns.clone()).collect();
        l.sort_unstable();
        assert!(!l.is_empty());
        l[l.len() / 2] as f64
    };
    let native = median(&run(&scenario(&perftest(8, 1, 65536, 300.0, 2000.0, "[rnic]\n")))[0]);
    let r = &run(&scenario(&perftest(
        8,
        1,
        65536,
        300.0,
        2000.0,
        "[rnic]\n[weir]\nbase_delay_us = 2\n",
    )))[0];
    let paced = median(r);
    assert_eq!(
        r.counters.weir.unwrap().splits,
        r.counters.weir.unwrap().posts
    );
    assert!(
        paced <= 1.1 * native,
        "Weir's median FCT {paced} ns against native {native} ns"
    );
    assert_eq!(sluice_sim::rnic::send_depth(4096, 1, 65536, 8), 16);
    assert_eq!(sluice_sim::rnic::send_depth(4096, 128, 512, 16384), 128);
    assert_eq!(sluice_sim::rnic::send_depth(0, 4, 1 << 20, 1), 4);
    assert_eq!(sluice_sim::rnic::send_depth(4096, 128, 65536, 1024), 512);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
    /// Any queue pairs, depth, size (split by Weir or not), small caches or not, Weir or
    /// not: every message posted completes once, the NIC processes and completes every
    /// doorbell it was given, and its occupancy never exceeds what was posted.
    #[test]
    fn every_doorbell_is_processed_and_completed(
        qps in 1u32..40,
        depth in 1u32..12,
        size in 64u32..12_000,
        small in proptest::bool::ANY,
        weir in proptest::bool::ANY,
        max_batch in proptest::sample::select(vec![1u32, 4]),
    ) {
        let mut extra = String::from("[rnic]\n");
        if small {
            extra += "wqe_entries = 32\nwqe_ways = 4\nqpc_entries = 8\nqpc_ways = 2\n\
                      mtt_entries = 32\nmtt_ways = 8\nunits = 2\npcie_tags = 4\n";
        }
        if weir {
            extra += &format!(
                "[weir]\nbase_delay_us = 4\nsplit_bytes = 4096\nmax_batch = {max_batch}\n"
            );
        }
        let r = &run(&scenario(&perftest(qps, depth, size, 60.0, 2_000.0, &extra)))[0];
        let posted: u64 = r.apps.iter().map(|q| q.posted).sum();
        for q in &r.apps {
            proptest::prop_assert!(!q.failed);
            proptest::prop_assert_eq!(q.posted, q.completed);
            proptest::prop_assert!(q.max_outstanding <= depth);
        }
        let n = r.counters.nic.unwrap();
        let doorbells = r.counters.weir.map_or(posted, |w| w.doorbells);
        let rung = r.counters.weir.map_or(posted, |w| w.runs);
        proptest::prop_assert_eq!((n.doorbells, n.processed, n.cqes), (rung, doorbells, doorbells));
        proptest::prop_assert!(rung <= doorbells && rung * u64::from(max_batch) >= doorbells);
        // An app keeps `depth` WQEs posted; Weir at most the pieces of `depth` WQEs in
        // flight per QP (its `sq_depth`, `rnic::send_depth`), and no more than were posted.
        let per_qp = if weir {
            sluice_sim::rnic::send_depth(4096, depth, u64::from(size), qps)
        } else {
            depth
        };
        proptest::prop_assert!(n.max_outstanding <= u64::from(qps * per_qp));
        // Every WQE is released at its CQE, unless evicted before (small caches only).
        proptest::prop_assert!(n.wqe.invalidations <= doorbells);
        if !small {
            proptest::prop_assert_eq!(n.wqe.invalidations, doorbells);
            proptest::prop_assert_eq!(n.wqe.evictions, 0);
        }
    }
}

/// Apps in batches (Weir Fig 4): each batch is posted, completes, and the next follows the
/// pause; bad batch fields are refused by name.
#[test]
fn batches_post_complete_and_pause() {
    let text = perftest(1, 10, 4096, 300.0, 400.0, "[rnic]\n").replace(
        "depth = 10\n",
        "depth = 10\nbatch = 10\npause_us = 50\npost_ns = 200\n",
    );
    let r = &run(&scenario(&text))[0];
    let q = &r.apps[0];
    assert!(!q.failed);
    assert_eq!(q.posted % 10, 0, "whole batches: {}", q.posted);
    assert_eq!(q.posted, q.completed);
    // A batch takes well under 50 us here: between 300 / (50 + 40) and 300 / 50 batches.
    assert!((3..=6).contains(&(q.posted / 10)), "{}", q.posted);
    for (extra, field) in [
        ("batch = 11\n", "app[0].batch"),
        ("batch = 5\npause_us = -1\n", "app[0].pause_us"),
    ] {
        let text = perftest(1, 10, 512, 100.0, 200.0, "[rnic]\n")
            .replace("depth = 10\n", &format!("depth = 10\n{extra}"));
        let e = sluice_sim::Scenario::parse(&text, std::path::Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{e}");
    }
    let text =
        perftest(1, 10, 512, 100.0, 200.0, "").replace("depth = 10\n", "depth = 10\nbatch = 5\n");
    let e = sluice_sim::Scenario::parse(&text, std::path::Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(e.contains("app[0].batch") && e.contains("[rnic]"), "{e}");
}
