//! Whole scenarios: the same seed gives the same files byte for byte; the HPCC paper's
//! fat-tree with web search runs end to end for every law; every routing mode and
//! topology kind runs; a dragonfly's minimal routes keep a group shift off third groups;
//! memory follows the packets in flight, not simulated time; bad
//! scenario files are refused with the field named.

mod common;

use std::path::Path;

use common::*;
use sluice_sim::workload::WorkloadSpec;
use sluice_sim::{Scenario, report};

/// Every output file of `dir`, by name; `summary.json` without its wall-clock fields.
fn outputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let mut bytes = std::fs::read(&p).unwrap();
            if name == "summary.json" {
                let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                strip_wall_clock(&mut v);
                bytes = serde_json::to_vec(&v).unwrap();
            }
            (name, bytes)
        })
        .collect()
}

fn strip_wall_clock(v: &mut serde_json::Value) {
    if let Some(map) = v.as_object_mut() {
        map.remove("wall_s");
        map.remove("events_per_s");
        map.values_mut().for_each(strip_wall_clock);
    } else if let Some(list) = v.as_array_mut() {
        list.iter_mut().for_each(strip_wall_clock);
    }
}

/// Four leaves of four hosts, two spines, 100 Gbit/s throughout (full bisection), 1 us.
const LEAF_SPINE: &str = r#"
[topology]
kind = "leaf-spine"
leaves = 4
spines = 2
hosts_per_leaf = 4
host_link_gbps = 100
link_delay_ns = 1000
"#;

/// A leaf-spine fabric under Poisson web-search traffic, with the random routing modes
/// (spraying, flowlets) and RED marking, so that every random choice is exercised.
fn busy_leaf_spine(routing: &str, seed: u64) -> Scenario {
    scenario(&format!(
        r#"
        seed = {seed}
        {LEAF_SPINE}
        [switch]
        routing = "{routing}"
        flowlet_gap_us = 2
        ecn = {{ kmin_bytes = 20000, kmax_bytes = 200000, pmax = 0.2 }}
        pfc = {{ xoff_bytes = 300000, xon_bytes = 200000 }}
        [workload]
        kind = "poisson"
        cdf = "websearch"
        load = 0.5
        duration_us = 300
        [[cc]]
        name = "dcqcn"
        [[cc]]
        name = "hpcc"
        "#
    ))
}

#[test]
fn the_same_seed_gives_the_same_files() {
    let base = std::env::temp_dir().join(format!("sluice-sim-det-{}", std::process::id()));
    let mut seen = Vec::new();
    for (k, seed) in [7, 7, 8].into_iter().enumerate() {
        let s = busy_leaf_spine("flowlet", seed);
        let runs = run(&s);
        let dir = base.join(k.to_string());
        report::write_all(&dir, &s.name, &runs).unwrap();
        seen.push(outputs(&dir));
    }
    std::fs::remove_dir_all(&base).unwrap();
    let names: Vec<_> = seen[0].iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "summary.json",
        "flows.csv",
        "timeseries.csv",
        "fct_slowdown.svg",
    ] {
        assert!(names.contains(&expected), "{expected} missing: {names:?}");
    }
    assert_eq!(seen[0], seen[1], "two runs of seed 7 differ");
    assert_ne!(seen[0], seen[2], "seeds 7 and 8 gave the same files");
}

#[test]
fn every_routing_mode_delivers_everything() {
    for routing in ["ecmp", "spray", "flowlet", "adaptive"] {
        let runs = run(&busy_leaf_spine(routing, 3));
        for r in &runs {
            assert!(
                r.flows.len() > 20,
                "{routing}: only {} flows",
                r.flows.len()
            );
            assert_eq!(
                completed(r),
                r.flows.len(),
                "{routing}/{}: flows left",
                r.algorithm
            );
            assert_eq!(r.counters.drops, 0, "{routing}/{}: drops", r.algorithm);
        }
    }
}

/// A dragonfly of 6 groups x 3 routers x 2 hosts at 100 Gbit/s, lossless, DCQCN, with
/// `switch` (TOML lines) in its `[switch]` table and `rest` (the workload and any other
/// tables) after it.
fn dragonfly(switch: &str, rest: &str) -> Scenario {
    scenario(&format!(
        r#"
        [topology]
        kind = "dragonfly"
        groups = 6
        routers_per_group = 3
        hosts_per_router = 2
        links_per_group_pair = 2
        host_link_gbps = 100
        link_delay_ns = 1000
        [switch]
        flowlet_gap_us = 2
        pfc = {{ xoff_bytes = 300000, xon_bytes = 200000 }}
        {switch}
        {rest}
        [[cc]]
        name = "dcqcn"
        "#
    ))
}

/// The dragonfly of [`dragonfly`] under web search (seed 5).
fn busy_dragonfly(switch: &str) -> Scenario {
    let mut s = dragonfly(
        switch,
        "[workload]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.4\nduration_us = 200",
    );
    s.seed = 5;
    s
}

#[test]
fn valiant_paths_deliver_everything_over_longer_paths_and_change_nothing_when_off() {
    let base = std::env::temp_dir().join(format!("sluice-sim-valiant-{}", std::process::id()));
    for routing in ["ecmp", "spray", "flowlet"] {
        let files = |k: &str, extra: &str| {
            let s = busy_dragonfly(&format!("routing = \"{routing}\"\n{extra}"));
            let runs = run(&s);
            let dir = base.join(format!("{routing}-{k}"));
            report::write_all(&dir, &s.name, &runs).unwrap();
            (outputs(&dir), runs.into_iter().next().unwrap())
        };
        let (absent, minimal) = files("absent", "");
        let (zero, _) = files("zero", "nonminimal_paths = 0");
        assert_eq!(
            absent, zero,
            "{routing}: nonminimal_paths = 0 changed the outputs"
        );
        let (v1, valiant) = files("v1", "nonminimal_paths = 3");
        let (v2, _) = files("v2", "nonminimal_paths = 3");
        assert_eq!(v1, v2, "{routing}: two Valiant runs of one seed differ");
        assert!(
            valiant.flows.len() >= 20,
            "{routing}: {} flows",
            valiant.flows.len()
        );
        assert_eq!(
            completed(&valiant),
            valiant.flows.len(),
            "{routing}: flows left"
        );
        assert_eq!(valiant.counters.drops, 0, "{routing}: drops");
        // Three of four choices between groups go through a third one: more switch hops.
        assert!(
            valiant.counters.switch_packets * 10 > minimal.counters.switch_packets * 12,
            "{routing}: {} switch packets with Valiant paths, {} without",
            valiant.counters.switch_packets,
            minimal.counters.switch_packets
        );
    }
    std::fs::remove_dir_all(&base).unwrap();
}

/// Every host of the dragonfly of [`dragonfly`] writes 200 KB at once to its counterpart a
/// group on, with `switch` (TOML lines) in its `[switch]` table; port series every
/// microsecond.
fn dragonfly_shift(switch: &str) -> Scenario {
    dragonfly(
        switch,
        "[workload]\nkind = \"shift\"\nbytes = 200000\nby = 6\n[output]\nsample_interval_us = 1",
    )
}

/// The bytes a run's port series saw leave routers over global links between two groups
/// that are not neighbours in the shift (neither is the other's next), and over global
/// links between neighbours.
fn shift_global_bytes(s: &Scenario, run: &sluice_sim::RunResult) -> (f64, f64) {
    let t = s.topology.build().unwrap();
    let (hosts, groups) = (t.hosts, 6);
    let group = |n: u32| (n - hosts) / 3;
    let series = &run.series;
    let n = series.ports.len();
    assert!(n > 0, "no port series");
    let seconds = series.interval_ns as f64 / 1e9;
    let (mut third, mut direct) = (0.0, 0.0);
    for (k, p) in series.ports.iter().enumerate() {
        let peer = t.nodes[p.node as usize][p.port as usize].peer;
        if peer < hosts || group(peer) == group(p.node) {
            continue;
        }
        let bytes: f64 = series.port_bps[k..]
            .iter()
            .step_by(n)
            .map(|bps| bps * seconds / 8.0)
            .sum();
        let (a, b) = (group(p.node), group(peer));
        if (a + 1) % groups == b || (b + 1) % groups == a {
            direct += bytes;
        } else {
            third += bytes;
        }
    }
    (third, direct)
}

#[test]
fn dragonfly_minimal_routes_keep_a_group_shift_off_third_groups() {
    let base = std::env::temp_dir().join(format!("sluice-sim-dfmin-{}", std::process::id()));
    for routing in ["ecmp", "spray", "flowlet"] {
        let go = |k: &str, routes: &str| {
            let s = dragonfly_shift(&format!("routing = \"{routing}\"\n{routes}"));
            let runs = run(&s);
            let dir = base.join(format!("{routing}-{k}"));
            report::write_all(&dir, &s.name, &runs).unwrap();
            let r = runs.into_iter().next().unwrap();
            assert_eq!(r.flows.len(), 36, "{routing}/{k}");
            assert_eq!(completed(&r), 36, "{routing}/{k}: flows left");
            assert_eq!(r.counters.drops, 0, "{routing}/{k}: drops");
            (outputs(&dir), shift_global_bytes(&s, &r))
        };
        let (absent, (third, direct)) = go("absent", "");
        let (shortest, _) = go("shortest", "routes = \"shortest\"");
        assert_eq!(
            absent, shortest,
            "{routing}: routes = \"shortest\" changed the outputs"
        );
        // Hop-count routes send some of the shift through a third group at equal length;
        // the dragonfly's minimal ones only over the links joining the two groups.
        assert!(
            third > 0.0,
            "{routing}: hop-count routes never left the two groups"
        );
        let (minimal, (third_m, direct_m)) = go("minimal", "routes = \"dragonfly-minimal\"");
        assert_ne!(
            absent, minimal,
            "{routing}: dragonfly-minimal changed nothing"
        );
        assert_eq!(
            third_m, 0.0,
            "{routing}: dragonfly-minimal crossed a third group"
        );
        // Every byte (36 x 200 KB and their ACKs) crossed a direct link at least once.
        assert!(direct_m >= 36.0 * 200e3, "{routing}: {direct_m} bytes");
        eprintln!(
            "{routing}: shortest {third:.0} B via third groups, {direct:.0} B direct; dragonfly-minimal {direct_m:.0} B direct"
        );
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn hpcc_fat_tree_with_web_search_runs_for_every_law() {
    // The example's fabric and workload with a shorter arrival window (the full one is for
    // `sluice sim run` and the benchmark).
    let mut s = example("hpcc-fat-tree-websearch.toml");
    if let WorkloadSpec::Poisson { duration_us, .. } = &mut s.workload {
        *duration_us = 60.0;
    }
    let runs = run(&s);
    let laws: Vec<_> = runs.iter().map(|r| r.algorithm.as_str()).collect();
    assert_eq!(laws, ["dcqcn", "dctcp", "timely", "swift", "hpcc"]);
    for r in &runs {
        assert!(r.flows.len() > 30, "{} flows", r.flows.len());
        assert_eq!(completed(r), r.flows.len(), "{}: flows left", r.algorithm);
        let stats = report::RunStats::of(r);
        let all = stats.all.unwrap();
        assert!(
            all.p50 >= 1.0,
            "{}: median slowdown {}",
            r.algorithm,
            all.p50
        );
        // The fabric is full bisection and lightly loaded: the median flow is not starved.
        assert!(
            all.p50 < 10.0,
            "{}: median slowdown {}",
            r.algorithm,
            all.p50
        );
    }
}

#[test]
fn every_topology_and_workload_kind_runs() {
    let topologies = [
        r#"kind = "dumbbell"
           hosts_per_side = 4
           host_link_gbps = 100
           bottleneck_gbps = 100
           link_delay_ns = 500"#,
        r#"kind = "star"
           hosts = 8
           link_gbps = 100
           link_delay_ns = 500"#,
        r#"kind = "leaf-spine"
           leaves = 2
           spines = 2
           hosts_per_leaf = 4
           host_link_gbps = 100
           oversubscription = 2.0
           link_delay_ns = 500"#,
        r#"kind = "fat-tree"
           pods = 2
           tors_per_pod = 2
           aggs_per_pod = 2
           cores = 2
           hosts_per_tor = 2"#,
        r#"kind = "dragonfly"
           groups = 3
           routers_per_group = 2
           hosts_per_router = 2
           host_link_gbps = 100
           link_delay_ns = 500"#,
    ];
    let workloads = [
        "kind = \"permutation\"\nbytes = 100000",
        "kind = \"all-to-all\"\nbytes = 20000",
        "kind = \"all-reduce\"\nbytes = 400000",
        "kind = \"poisson\"\ncdf = \"hadoop\"\nload = 0.3\nduration_us = 50",
        "kind = \"incast\"\nsenders = 5\nbytes = 50000\nreceiver = 2",
        "kind = \"file\"\npath = \"crates/sim/tests/data/staggered-small.txt\"",
    ];
    for topology in topologies {
        for workload in workloads {
            let s = scenario(&format!(
                "[topology]\n{topology}\n[switch]\npfc = {{ xoff_bytes = 200000, xon_bytes = 150000 }}\n[workload]\n{workload}\n[[cc]]\nname = \"dctcp\"\n"
            ));
            let r = &run(&s)[0];
            assert!(!r.flows.is_empty(), "{topology} / {workload}: no flows");
            assert_eq!(
                completed(r),
                r.flows.len(),
                "{topology} / {workload}: flows left"
            );
        }
    }
}

#[test]
fn all_reduce_steps_wait_for_the_chunk_they_forward() {
    let s = scenario(
        r#"
        [topology]
        kind = "star"
        hosts = 4
        link_gbps = 100
        link_delay_ns = 1000
        [workload]
        kind = "all-reduce"
        bytes = 4000000
        "#,
    );
    let r = &run(&s)[0];
    let flows = s
        .workload
        .generate(4, 100_000_000_000, s.seed, Path::new("."))
        .unwrap();
    assert_eq!(flows.len(), 4 * 2 * 3);
    for f in &flows {
        let me = &r.flows[f.id as usize];
        if let Some(before) = f.after {
            let prev = &r.flows[before as usize];
            assert!(
                me.start_ns.unwrap() >= prev.finish_ns.unwrap(),
                "flow {} started before flow {before} completed",
                f.id
            );
        }
    }
    assert_eq!(completed(r), flows.len());
}

#[test]
fn memory_follows_packets_in_flight_not_simulated_time() {
    // The same permutation of long flows for four times as long: the packets alive at
    // once (in queues and on links, what the slab holds) stay the same.
    let peak = |bytes: u64| {
        let s = scenario(&format!(
            r#"
            {LEAF_SPINE}
            [switch]
            pfc = {{ xoff_bytes = 300000, xon_bytes = 200000 }}
            [workload]
            kind = "permutation"
            bytes = {bytes}
            [[cc]]
            name = "hpcc"
            "#
        ));
        let r = run(&s).remove(0);
        assert_eq!(completed(&r), 16);
        (r.peak_packets, r.simulated_ns)
    };
    let ((short, t_short), (long, t_long)) = (peak(1_000_000), peak(4_000_000));
    assert!(t_long > 3 * t_short, "{t_short} ns vs {t_long} ns");
    assert!(
        (long as f64) < short as f64 * 1.2,
        "peak live packets {short} over {t_short} ns, {long} over {t_long} ns"
    );
}

#[test]
fn bad_scenarios_are_refused_with_the_field_named() {
    let base = r#"
        [topology]
        kind = "star"
        hosts = 4
        link_gbps = 100
        link_delay_ns = 1000
        [workload]
        kind = "incast"
        senders = 2
        bytes = 1000
    "#;
    let cases = [
        ("[switch]\nbufer_bytes = 5\n", "bufer_bytes"),
        ("[transport]\nmtu = 1000\n", "transport.mtu"),
        (
            "[switch]\necn = { kmin_bytes = 10, kmax_bytes = 5, pmax = 0.1 }\n",
            "kmin_bytes",
        ),
        ("[switch]\nrouting = \"random\"\n", "routing"),
        ("[[cc]]\nname = \"cubic\"\n", "cubic"),
        (
            "[[cc]]\nname = \"dcqcn\"\nparams = { rai_mbps = -1 }\n",
            "dcqcn",
        ),
        (
            "[[cc]]\nname = \"dcqcn\"\n[[cc]]\nname = \"dcqcn\"\n",
            "label",
        ),
        ("[output]\nsample_interval_us = 0\n", "sample_interval_us"),
        (
            "[[cc]]\nname = \"dcqcn\"\nlabel = \"dcqcn,fast\"\n",
            "without commas",
        ),
        (
            "[[cc]]\nname = \"dcqcn\"\nlabel = \"a\\nb\"\n",
            "without commas",
        ),
        (
            "[[cc]]\nname = \"dcqcn\"\nlabel = \"\"\n",
            "must be non-empty",
        ),
        (
            "[output]\nsample_interval_us = 0.0009\n",
            "sample_interval_us: expected 0.001 (one nanosecond)",
        ),
        (
            "[transport]\nnic_delay_ns = 1000000001\n",
            "nic_delay_ns: expected at most 1000000000",
        ),
        (
            "[switch]\nnonminimal_paths = 1\n",
            "switch.nonminimal_paths: Valiant paths need a dragonfly, not a star",
        ),
        (
            "[switch]\nroutes = \"dragonfly-minimal\"\n",
            "switch.routes: \"dragonfly-minimal\" needs a dragonfly, not a star",
        ),
        (
            "[switch]\nroutes = \"minimal\"\n",
            "expected `shortest` or `dragonfly-minimal`",
        ),
    ];
    for (extra, needle) in cases {
        let err = Scenario::parse(&format!("{base}{extra}"), Path::new("."))
            .expect_err(extra)
            .to_string();
        assert!(
            err.contains(needle),
            "`{extra}` gave `{err}`, without `{needle}`"
        );
    }
    // A scenario changed after parsing is checked again before it runs.
    let mut s = Scenario::parse(base, Path::new(".")).unwrap();
    s.transport.mtu = 1000;
    let err = sluice_sim::run_scenario(&s, &|_, _| {})
        .expect_err("MTU 1000")
        .to_string();
    assert!(err.contains("transport.mtu"), "{err}");
    // Top-level keys go before the tables.
    for limit in ["0", "-1", "nan", "3600000001"] {
        let err = Scenario::parse(&format!("time_limit_us = {limit}\n{base}"), Path::new("."))
            .expect_err(limit)
            .to_string();
        assert!(
            err.contains("time_limit_us: expected a positive number of microseconds, at most"),
            "time_limit_us = {limit} gave `{err}`"
        );
    }
    let err = Scenario::parse("[topology]\nkind = \"ring\"\n", Path::new("."))
        .expect_err("unknown kind")
        .to_string();
    assert!(err.contains("ring"), "{err}");
    let missing = Scenario::parse(
        "[topology]\nkind = \"star\"\nhosts = 2\nlink_gbps = 1\nlink_delay_ns = 1\n",
        Path::new("."),
    )
    .expect_err("no workload")
    .to_string();
    assert!(missing.contains("workload"), "{missing}");
}

/// The flows of `file` (under crates/sim/tests/data) on the test leaf-spine, with `policies`
/// (TOML) in the scenario.
fn flows_with(file: &str, policies: &str) -> sluice_sim::RunResult {
    let runs = run(&scenario(&format!(
        r#"
        {LEAF_SPINE}
        [transport]
        recovery = "selective-repeat"
        [policies]
        {policies}
        [workload]
        kind = "file"
        path = "crates/sim/tests/data/{file}"
        "#
    )));
    runs.into_iter().next().unwrap()
}

/// The scheduler named in a scenario orders one host's queue pairs: round robin shares the
/// link, so two flows from one host finish together; per-message serves one flow's WRITE
/// whole, so the first finishes in about half the time of the second.
#[test]
fn a_scenario_names_its_scheduler() {
    let finish = |policies: &str| -> Vec<u64> {
        let r = flows_with("two-from-one.txt", policies);
        assert_eq!(completed(&r), 2);
        let mut f: Vec<u64> = r.flows.iter().map(|f| f.fct_ns().unwrap()).collect();
        f.sort_unstable();
        f
    };
    let rr = finish("");
    assert!(rr[0] * 10 > rr[1] * 9, "round robin: {rr:?}");
    let pm = finish(r#"scheduler = { name = "per-message" }"#);
    assert!(pm[0] * 10 < pm[1] * 6, "per-message: {pm:?}");
}

/// The path selector named in a scenario sets the entropy ECMP hashes: one queue pair's
/// packets take one of its leaf's two spine uplinks with `ecmp`, and both with `spray`
/// (arriving out of order, which selective repeat with an offset-list tracker absorbs).
#[test]
fn a_scenario_names_its_path_selector_and_receive_tracker() {
    let uplinks = |policies: &str| {
        let r = flows_with("one-across.txt", policies);
        assert_eq!(completed(&r), 1, "{policies}");
        let s = &r.series;
        s.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.name.contains("->spine"))
            .filter(|(i, _)| {
                (0..s.times_ns.len()).any(|t| s.port_bps[t * s.ports.len() + i] > 10e9)
            })
            .map(|(_, p)| p.name.clone())
            .collect::<Vec<_>>()
    };
    // Above 10 Gbit/s: the sender's leaf's uplinks carrying data (the receiver's carry
    // its ACKs, a few Gbit/s).
    let ecmp = uplinks("");
    let sprayed = uplinks(
        r#"path = { name = "spray", params = { paths = 8 } }
        tracker = { name = "offset-list", params = { capacity = 512 } }"#,
    );
    assert_eq!(ecmp.len(), 1, "{ecmp:?}");
    assert_eq!(sprayed.len(), 2, "{sprayed:?}");
}

/// Services named in a scenario run on every queue pair; payloads are lengths here, which
/// a service beside the path sees: `count` reports every byte of the flow each way, in the
/// summary's counters.
#[test]
fn a_scenario_names_its_services() {
    let r = flows_with("one-across.txt", r#"services = [{ name = "count" }]"#);
    assert_eq!(completed(&r), 1);
    let s = &r.counters.services;
    assert_eq!(s.get("count.sent_bytes"), Some(&1_000_000), "{s:?}");
    assert_eq!(s.get("count.received_bytes"), Some(&1_000_000), "{s:?}");
    let plain = flows_with("one-across.txt", "");
    assert!(plain.counters.services.is_empty());
    assert_eq!(
        plain.flows[0].finish_ns, r.flows[0].finish_ns,
        "a length-only service costs nothing"
    );
}

#[test]
fn bad_policies_in_a_scenario_are_refused_naming_the_field() {
    for (policies, says) in [
        (
            r#"scheduler = { name = "fifo" }"#,
            "policies.scheduler: unknown scheduler `fifo`",
        ),
        (
            r#"path = { name = "spray", params = { paths = 0 } }"#,
            "policies.path",
        ),
        (
            r#"tracker = { name = "bitmap", params = { size = 1 } }"#,
            "unknown parameter `size`",
        ),
        (
            r#"services = [{ name = "zip" }]"#,
            "policies.services: unknown service `zip`",
        ),
        (r#"queue = { name = "fifo" }"#, "unknown field `queue`"),
    ] {
        let text = format!(
            "{LEAF_SPINE}\n[policies]\n{policies}\n[workload]\nkind = \"file\"\npath = \"crates/sim/tests/data/one-across.txt\"\n"
        );
        let e = Scenario::parse(&text, &repo_root())
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{policies}: {e}");
    }
    // A [[cc]]'s own scheduler is checked the same way.
    let text = format!(
        "{LEAF_SPINE}\n[workload]\nkind = \"file\"\npath = \"crates/sim/tests/data/one-across.txt\"\n[[cc]]\nname = \"homa\"\nscheduler = {{ name = \"sjf\" }}\n"
    );
    let e = Scenario::parse(&text, &repo_root())
        .unwrap_err()
        .to_string();
    assert!(e.contains("cc.scheduler: unknown scheduler `sjf`"), "{e}");
}
