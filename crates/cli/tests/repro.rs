//! `sluice repro`: every experiment at its `--quick` scale, with the checks that say it
//! reproduced (the command exits non-zero when one fails), and the files it writes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("runs sluice")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-repro-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `name --quick`, asserts it passed every shape check and wrote its files, and
/// returns its output.
fn quick(name: &str) -> String {
    let (passed, stdout) = quick_run(name);
    assert!(passed && !stdout.contains("FAIL"), "{stdout}");
    stdout
}

/// Runs `name --quick` and checks the files it wrote: whether it exited 0 (every shape
/// check passed), and its output.
fn quick_run(name: &str) -> (bool, String) {
    let dir = scratch(name);
    let out = sluice(&["repro", name, "--quick", "--out", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.success(), !stdout.contains("FAIL"), "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("| paper |") || report.contains("paper"),
        "{report}"
    );
    let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
    assert!(svg.starts_with("<svg"), "{name}.svg");
    let scenarios = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "toml")
        })
        .count();
    assert!(scenarios > 0, "{name}: the scenarios it ran are kept");
    std::fs::remove_dir_all(&dir).unwrap();
    (out.status.success(), stdout)
}

#[test]
fn list_names_every_experiment() {
    let out = sluice(&["repro", "list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in sluice_cli::repro::ENTRIES.iter().map(|e| e.name) {
        assert!(text.contains(name), "{text}");
    }
    assert!(text.contains("swcc-fig1"));
    let bad = sluice(&["repro", "no-such-figure"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("sluice repro list"));
}

#[test]
fn swcc_fig1_drain_time_rises_with_the_loop_delay() {
    let out = quick("swcc-fig1");
    assert!(
        out.contains("drain time rises with the loop delay"),
        "{out}"
    );
}

#[test]
fn scr_table2_the_64kb_tenant_takes_the_link() {
    let out = quick("scr-table2");
    assert!(
        out.contains("PASS    the 64 KB tenant takes most of the link"),
        "{out}"
    );
    assert!(
        out.contains("PASS    small-message latency at least doubles"),
        "{out}"
    );
}

#[test]
fn scr_fig11_only_water_filling_is_fair_everywhere() {
    let out = quick("scr-fig11");
    assert!(
        out.contains("PASS    default is fair only on the diagonal"),
        "{out}"
    );
    assert!(out.contains("PASS    water-filling: Jain >= 0.95"), "{out}");
    assert!(out.contains("PASS    static: fair"), "{out}");
}

#[test]
fn scr_fig13_water_filling_isolates_the_latency_tenant() {
    let out = quick("scr-fig13");
    assert!(out.contains("PASS    water-filling cuts"), "{out}");
    assert!(
        out.contains("PASS    water-filling: the hog keeps its bandwidth"),
        "{out}"
    );
    assert!(out.contains("PASS    static halves the hog"), "{out}");
}

#[test]
fn scr_fig12_water_filling_is_fair_across_many_write_qps() {
    let out = quick("scr-fig12");
    assert!(
        out.contains("PASS    at 4 QPs the default is unfair, static and water-filling fair"),
        "{out}"
    );
    assert!(
        out.contains("PASS    every scheduler keeps the link at least 90% busy"),
        "{out}"
    );
}

#[test]
fn scr_fig17_read_has_the_shape_of_write() {
    let out = quick("scr-fig17");
    assert!(
        out.contains("PASS    at 4 QPs the default is unfair, static and water-filling fair"),
        "{out}"
    );
    assert!(
        out.contains("PASS    every scheduler keeps the link at least 90% busy"),
        "{out}"
    );
}

#[test]
fn scr_fig16_join_share_converges_fastest_and_steps_set_the_pace() {
    let out = quick("scr-fig16");
    assert!(
        out.contains("PASS    join=share converges faster than join=reset"),
        "{out}"
    );
    assert!(
        out.contains("PASS    join=share is fairer than join=reset"),
        "{out}"
    );
    assert!(
        out.contains("PASS    Fig 9: strategy (c), share, converges fastest of (a), (b) and (c)"),
        "{out}"
    );
    assert!(
        out.contains("PASS    Table 5: larger steps converge faster"),
        "{out}"
    );
}

#[test]
fn scr_fig18_swift_takes_what_the_background_leaves() {
    let out = quick("scr-fig18");
    assert!(
        out.contains("PASS    Swift takes what the background leaves"),
        "{out}"
    );
    assert!(out.contains("PASS    without fabric congestion"), "{out}");
    assert!(
        out.contains("PASS    Swift's delay is near its target"),
        "{out}"
    );
}

#[test]
fn a_run_repeats_byte_for_byte() {
    let report = |tag: &str| {
        let dir = scratch(&format!("again-{tag}"));
        let out = sluice(&[
            "repro",
            "scr-fig18",
            "--quick",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(out.status.success());
        let files: Vec<String> = ["report.md", "scr-fig18.svg", "scr-fig18-bg40.toml"]
            .iter()
            .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        files
    };
    assert_eq!(report("a"), report("b"));
}

#[test]
fn left_fig7_left_is_a_small_fraction_of_per_connection_bitmaps() {
    // No scenario: the trackers are driven directly, so `quick` (which wants one) is not used.
    let dir = scratch("left-fig7");
    let out = sluice(&[
        "repro",
        "left-fig7",
        "--quick",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("PASS    LEFT holds a small fraction of per-connection bitmaps"),
        "{stdout}"
    );
    assert!(
        stdout.contains("PASS    the extra structures cost: MELO+ <= LEFT- <= LEFT"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(dir.join("left-fig7.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    assert!(
        std::fs::read_to_string(dir.join("report.md"))
            .unwrap()
            .contains("27 KB")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn left_fig6_melo_falls_behind_the_ideal_and_left_keeps_up() {
    let (_, out) = quick_run("left-fig6");
    assert!(
        out.contains("PASS    at equal paths every tracker runs near the ideal's rate"),
        "{out}"
    );
    assert!(
        out.contains("PASS    at 32x: ideal >= LEFT >= LEFT- >= MELO+"),
        "{out}"
    );
    assert!(
        out.contains("PASS    at 32x MELO+ falls below the ideal tracker"),
        "{out}"
    );
    assert!(
        out.contains("PASS    at 32x LEFT >= 90% of line rate"),
        "{out}"
    );
}

#[test]
fn left_fig1_gbn_collapses_under_spraying_and_left_holds_over_valiant_paths() {
    // Over hop-count shortest paths LEFT does not hold (docs/repro.md says why), and over
    // Valiant paths, which are longer than the minimal ones, GBN already loses at load 0.1:
    // those two checks are not asserted.
    let (_, out) = quick_run("left-fig1");
    assert!(
        out.contains("PASS    below the paper's knee (load < 0.3) no configuration loses"),
        "{out}"
    );
    assert!(
        out.contains("PASS    GBN under per-packet spraying collapses"),
        "{out}"
    );
    assert!(
        out.contains("PASS    over 2 Valiant paths: GBN under per-packet spraying collapses"),
        "{out}"
    );
    assert!(
        out.contains("PASS    over 2 Valiant paths: LEFT holds under spraying"),
        "{out}"
    );
    // Every configuration, on minimal paths and again over Valiant ones, at both loads.
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("0.") && l.contains(", 2 Valiant paths"))
            .count(),
        8,
        "{out}"
    );
}

#[test]
fn left_fig45_runs_every_configuration_and_left_retransmits_no_more_than_irn() {
    // Whether spraying shortens FCTs is the entry's result, reported, not asserted here
    // (docs/repro.md has the full-scale run).
    let (_, out) = quick_run("left-fig45");
    assert!(
        out.contains("PASS    every flow completes in every configuration"),
        "{out}"
    );
    assert!(
        out.contains("PASS    LEFT retransmits no more than IRN under the same load balancing"),
        "{out}"
    );
    assert!(out.contains("per-flowlet, LEFT"), "{out}");
    // The third workload, the one that loads the global links: its five configurations on
    // hop-count shortest paths, three over 2 Valiant paths, three over dragonfly-minimal
    // routes alone.
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("group shift, 16 KB") && l.contains("32 of 32"))
            .count(),
        11,
        "{out}"
    );
    for (rows, n) in [
        ("group shift, 16 KB, 2 Valiant paths", 3),
        ("group shift, 16 KB, dragonfly-minimal routes", 3),
        ("web search, load 0.3, 20 us, dragonfly-minimal routes", 3),
        // The fourth: web search with every host's flows to its counterpart a group on,
        // its five configurations over hop-count routes.
        ("web search to the next group, load 0.5, 60 us", 5),
        // The fifth, HPL-like: its five configurations over hop-count routes.
        (
            "HPL-like, 4 x 8 grid, 16 KB panels and swaps, 2 iterations",
            5,
        ),
    ] {
        assert_eq!(
            out.lines().filter(|l| l.starts_with(rows)).count(),
            n,
            "{rows}: {out}"
        );
    }
}

#[test]
fn scr_fig10b_granularity_falls_to_the_processor_count_then_holds() {
    let out = quick("scr-fig10b");
    assert!(
        out.contains("PASS    bytes per TX run fall until flows reach the processor count"),
        "{out}"
    );
    assert!(out.contains("PASS    then flat within 15%"), "{out}");
}

#[test]
fn scr_fig10cd_software_coalescing_handles_more_events() {
    let out = quick("scr-fig10cd");
    assert!(
        out.contains("PASS    software coalescing handles substantially more events"),
        "{out}"
    );
    assert!(out.contains("hw+sw, exit 2 us"), "{out}");
}

#[test]
fn swcc_fig12_hpcc_holds_the_smallest_queue_and_a_cpu_loop_a_larger_one() {
    let out = quick("swcc-fig12");
    assert!(
        out.contains("PASS    HPCC holds the smallest queue at the highest throughput"),
        "{out}"
    );
    assert!(
        out.contains("PASS    a CPU-class loop lets every law build a larger queue"),
        "{out}"
    );
}

#[test]
fn scr_fig20_credits_track_the_headroom_and_backpressure_saws() {
    let out = quick("scr-fig20");
    assert!(
        out.contains("PASS    the credited flow gives up what each background sender takes"),
        "{out}"
    );
    assert!(out.contains("PASS    a small receiver queue"), "{out}");
    assert!(
        out.contains("PASS    backpressure: an MD/AI sawtooth"),
        "{out}"
    );
}

#[test]
fn weir_fig2_native_collapses_at_the_wqe_cache_and_misses_qpc_beyond_2k() {
    let out = quick("weir-fig2");
    assert!(out.contains("a throughput knee near 128 QPs"), "{out}");
    assert!(out.contains("QPC misses only beyond 2K QPs"), "{out}");
}

#[test]
fn weir_fig7_weir_stays_flat_where_native_collapses() {
    let out = quick("weir-fig7");
    assert!(
        out.contains("PASS    Weir at 512 B stays within 5% of its best"),
        "{out}"
    );
    assert!(out.contains("fewer WQE and MTT/MPT misses"), "{out}");
}

#[test]
fn swcc_fig11a_the_context_table_misses_once_it_overflows() {
    let out = quick("swcc-fig11a");
    assert!(out.contains("drops where it overflows"), "{out}");
}

#[test]
fn weir_fig10_base_delay_sets_the_occupancy() {
    let out = quick("weir-fig10");
    assert!(
        out.contains("a larger base_delay gives a higher occupancy"),
        "{out}"
    );
}

#[test]
fn weir_fig4_delay_ramps_for_large_wqes_and_resets_after_pauses() {
    let out = quick("weir-fig4");
    assert!(out.contains("8 KB ramps faster than 4 KB"), "{out}");
}

#[test]
fn weir_fig11_fct_as_native_and_the_pacer_cost_is_measured() {
    let out = quick("weir-fig11");
    assert!(
        out.contains("PASS    Weir's median FCT within 10% of native's"),
        "{out}"
    );
    // The real datapath ran and its sampled costs are reported (their level is a debug
    // build's here, so not asserted).
    assert!(out.contains("cost per post, 1 QPs"), "{out}");
    assert!(out.contains("mostly under 1,000 cycles"), "{out}");
}

#[test]
fn scr_fig19_probes_see_the_slow_path_and_the_failure_moves_the_flow() {
    let out = quick("scr-fig19");
    for check in [
        "PASS    the probes see the +10 us path",
        "PASS    the data takes the fast path",
        "PASS    the failure is detected within the timeout",
        "PASS    the traffic moves off the failed path and recovers",
        "PASS    with a shorter transport timeout the traffic moves soon after detection",
    ] {
        assert!(out.contains(check), "{out}");
    }
}

#[test]
fn scr_fig19a_probes_track_cross_traffic_on_and_off() {
    let out = quick("scr-fig19a");
    for check in [
        "PASS    every probed path's RTT rises while the cross traffic is on",
        "PASS    the RTT returns once the cross traffic stops",
    ] {
        assert!(out.contains(check), "{out}");
    }
}

#[test]
fn balboa_fig7_doorbell_is_slower_than_in_line_in_the_model() {
    // The measured "in-line within the cipher's cost" does not hold on this loopback
    // datapath (docs/repro.md says why), so that check is not asserted.
    let (_, out) = quick_run("balboa-fig7");
    assert!(
        out.contains(
            "PASS    doorbell baseline slower than plain by a buffer pass, and than in-line (model)"
        ),
        "{out}"
    );
    assert!(
        out.contains("in-line encryption within the cipher's own cost (measured, loopback)"),
        "{out}"
    );
    // Measured as one flow, on a loaded machine in a debug build: reported, not asserted.
    assert!(
        out.contains("doorbell baseline slower than plain by a buffer pass (measured, one flow)"),
        "{out}"
    );
    // Its bandwidth is one flow too (`--doorbell-crypt` write-bw), judged against in-line's.
    assert!(
        out.contains(
            "doorbell baseline's bandwidth below in-line's by a buffer pass (measured, one flow)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "doorbell baseline's bandwidth below plain's by a buffer pass (measured, one flow)"
        ),
        "{out}"
    );
    assert!(out.contains("Gbit/s doorbell (meas, one flow)"), "{out}");
}

#[test]
fn balboa_fig8_inspection_is_measured_and_free_beside_the_path() {
    let (_, out) = quick_run("balboa-fig8");
    assert!(
        out.contains("PASS    bandwidth and latency beside the path within noise of none (model)"),
        "{out}"
    );
    // A machine without the corpus's files (not Linux) cannot measure the accuracy: the
    // check then fails naming the corpus, as `sluice-inspect`'s own test skips there.
    assert!(
        out.contains("PASS    detection and false-positive rates measured on the corpus")
            || out.contains(
                "FAIL    detection and false-positive rates measured on the corpus: corpus:"
            ),
        "{out}"
    );
}

#[test]
fn the_simulator_models_encryption_with_the_crypt_crates_overhead() {
    assert_eq!(
        (sluice_sim::services::ENCRYPT_HEAD + sluice_sim::services::ENCRYPT_TAIL) as usize,
        sluice_crypt::OVERHEAD
    );
    assert_eq!(
        sluice_sim::services::ENCRYPT_HEAD as usize,
        sluice_crypt::packet::NONCE_LEN
    );
}

/// BALBOA Figs 10-11 on real loopback runs: in line and after leave the same bytes (an
/// enforced check that must pass); whether in line is several times faster is measured and
/// reported either way (on a software NIC the chain runs on the transport's own core, so the
/// paper's shape is not expected: docs/repro.md).
#[test]
fn balboa_fig10_in_line_and_after_agree_byte_for_byte() {
    let (_, out) = quick_run("balboa-fig10");
    assert!(
        out.contains("PASS    in line and after leave the same bytes"),
        "{out}"
    );
    assert!(out.contains("several times (3x or more) faster"), "{out}");
    assert!(out.contains("16 KiB") && out.contains("256 KiB"), "{out}");
    // The simulator's model (a worker at line rate against receive-then-process), an
    // enforced shape: deterministic, unlike the measurement.
    assert!(
        out.contains("PASS    model: the chain in line at line rate"),
        "{out}"
    );
}

#[test]
fn homa_websearch_runs_homa_beside_dcqcn_and_dctcp_on_the_same_flows() {
    // At the quick scale (32 hosts, 300 us of arrivals: 59 flows) too few flows contend for
    // the short-flow p99 to separate the laws, so that check is not asserted here;
    // docs/repro.md has the full run.
    let (_, out) = quick_run("homa-websearch");
    assert!(
        out.contains("PASS    lossy: every flow completes under Homa"),
        "{out}"
    );
    for fabric in ["lossy ", "lossless "] {
        for law in [" homa ", " dcqcn ", " dctcp ", " homa-paper "] {
            assert!(
                out.lines()
                    .any(|l| l.starts_with(fabric) && l.contains(law)),
                "{fabric}{law}: {out}"
            );
        }
    }
}

#[test]
fn scr_fig20_read_credits_a_read_from_the_requester() {
    let out = quick("scr-fig20-read");
    assert!(
        out.contains("PASS    the credited READ gives up what each background sender takes"),
        "{out}"
    );
    assert!(
        out.contains("PASS    a small queue at the reader's port"),
        "{out}"
    );
    assert!(
        out.contains("PASS    backpressure on READ responses: an MD/AI sawtooth"),
        "{out}"
    );
}
