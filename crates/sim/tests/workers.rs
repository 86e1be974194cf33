//! Stages on a worker (`[services]`, `placement = "worker"` and `offload`): the host's real
//! engine offers received payloads to a modelled core within its receive credit. A worker
//! slower than the link holds the READs' completions and keeps what is out within the
//! credit; past it, an offload's packets are dropped and recovered (when the worker gives
//! credit back, not at the timeout), each offered once, an inspection's go
//! on uninspected; a worker faster than the link adds its last packet's time; runs repeat
//! for a seed.

mod common;

use common::one;
use proptest::prelude::*;
use sluice_sim::RunResult;
use sluice_sim::services::WorkerCounters;

/// [`common::two_hosts`] with this file's run length (4000 us) and app stop (600 us).
fn two_hosts(app: &str, extra: &str) -> String {
    common::two_hosts(app, extra, 4000, 600)
}

fn worker(r: &RunResult) -> WorkerCounters {
    r.counters
        .service_model
        .and_then(|m| m.worker)
        .expect("a worker was modelled")
}

fn latencies(r: &RunResult) -> Vec<u64> {
    r.apps
        .iter()
        .flat_map(|q| q.latencies_ns.iter().copied())
        .collect()
}

fn mean_latency_ns(r: &RunResult) -> f64 {
    let l = latencies(r);
    l.iter().sum::<u64>() as f64 / l.len() as f64
}

fn completed(r: &RunResult) -> (u64, u64, u64) {
    r.apps.iter().fold((0, 0, 0), |(p, c, b), q| {
        (p + q.posted, c + q.completed, b + q.completed_bytes)
    })
}

#[test]
fn a_slow_worker_holds_the_reads_and_bounds_what_is_out_at_the_credit() {
    // 1 ns a byte: 8 Gbit/s against a 100 Gbit/s link. 256 KiB READs, four at a time;
    // a credit of 32 packets (128 KiB) so that it fills.
    let app = "op = \"read\"\nsize = 262144\ndepth = 4\nwarmup_us = 100\n";
    // A READ's last responses dropped past the credit have nothing behind them to show
    // the gap: the engine asks for them again as soon as the worker gives credit back,
    // so the default retransmission timeout (4.096 us x 2^8, about 1 ms) never fires.
    let services = "[services]\nall = [\"offload\"]\n[services.offload]\n\
                    ns_per_byte = 1.0\n[services.credit]\npackets = 32\n";
    let plain = one(&two_hosts(app, ""));
    let r = one(&two_hosts(app, services));
    let w = worker(&r);
    // What is out never passes the credit, in packets or bytes.
    assert!(w.peak_out_packets <= 32, "{w:?}");
    assert!(w.peak_out_bytes <= 32 * 4096, "{w:?}");
    assert!(w.peak_out_packets >= 30, "the credit filled: {w:?}");
    // Past it, packets were dropped, and the transport recovered them.
    assert!(
        w.credit_drops > 0 && r.counters.retransmissions > 0,
        "{w:?}"
    );
    assert_eq!(r.counters.timeouts, 0, "recovered without the timer");
    assert_eq!(w.uninspected, 0);
    // The READs waited for their work: each took at least its own bytes' worker time
    // (262 us), and their rate is the worker's, not the link's.
    assert!(w.held_completions > 0);
    assert!(
        latencies(&r).iter().all(|&l| l >= 262_144),
        "{:?}",
        latencies(&r)
    );
    // Four READs always posted: by Little's law their rate is four READs' bits over the
    // mean latency (the app's delivered-bytes figure counts arrivals, dropped ones too).
    let gbps = 4.0 * 262_144.0 * 8.0 / mean_latency_ns(&r);
    let plain_gbps = 4.0 * 262_144.0 * 8.0 / mean_latency_ns(&plain);
    assert!(plain_gbps > 80.0, "plain {plain_gbps}");
    assert!(gbps <= 8.0 * 1.01 && gbps > 8.0 * 0.7, "{gbps} Gbit/s");
    // Busy nearly all the time once started.
    assert!(w.busy_ns as f64 > 0.8 * r.simulated_ns as f64, "{w:?}");
}

#[test]
fn drops_past_the_credit_are_recovered_exactly_once() {
    for recovery in ["go-back-n", "selective-repeat"] {
        let app = "op = \"read\"\nsize = 65536\ndepth = 2\n";
        let services = format!(
            "recovery = \"{recovery}\"\n[services]\nall = [\"offload\"]\n\
             [services.offload]\nns_per_byte = 0.5\n[services.credit]\npackets = 8\n"
        );
        let r = one(&two_hosts(app, &services));
        let w = worker(&r);
        assert!(w.credit_drops > 0, "{recovery}: {w:?}");
        // Every READ posted completed, once, with all its bytes; none failed.
        let (posted, done, bytes) = completed(&r);
        assert!(
            posted > 0 && done == posted,
            "{recovery}: {posted} posted, {done} done"
        );
        assert_eq!(bytes, done * 65536, "{recovery}");
        assert!(r.apps.iter().all(|q| !q.failed));
        // Each completed byte went through the worker exactly once: a packet the engine
        // takes was offered, one it could not offer was dropped, and one it kept already
        // (selective repeat: held past a gap, then sent again) is not offered again.
        assert_eq!(w.bytes, bytes, "{recovery}: {w:?}");
        assert!(w.peak_out_packets <= 8, "{recovery}: {w:?}");
        // With the default retransmission timeout (about 1 ms): never needed.
        assert_eq!(r.counters.timeouts, 0, "{recovery}");
    }
}

#[test]
fn inspection_on_a_worker_past_the_credit_goes_uninspected_and_never_delays() {
    let app = "size = 65536\ndepth = 4\n";
    let plain = one(&two_hosts(app, ""));
    let r = one(&two_hosts(
        app,
        "[services]\nall = [\"inspect\"]\n[services.inspect]\nplacement = \"worker\"\n\
         [services.credit]\npackets = 16\n",
    ));
    let w = worker(&r);
    // At 3.64 ns a byte it keeps up with a fraction of 100 Gbit/s: the rest is passed over.
    assert!(w.uninspected > w.packets && w.packets > 0, "{w:?}");
    assert_eq!(w.credit_drops, 0);
    assert!(w.peak_out_packets <= 16, "{w:?}");
    // Its completions wait only until the engine is next driven, at once here: the datapath
    // is the plain one.
    assert_eq!(r.apps, plain.apps);
    assert_eq!(r.simulated_ns, plain.simulated_ns);
}

#[test]
fn a_fast_worker_adds_only_its_last_packets_time() {
    for (size, byte_ns) in [(1000u32, 0.71), (4096, 0.05), (65536, 0.01), (65536, 0.07)] {
        let app = format!("op = \"read\"\nsize = {size}\n");
        let plain = one(&two_hosts(&app, ""));
        let r = one(&two_hosts(
            &app,
            &format!(
                "[services]\nall = [\"offload\"]\n[services.offload]\nns_per_byte = {byte_ns}\n"
            ),
        ));
        // Faster than the link (0.08 ns a byte), so each packet is done before the next
        // arrives: the READ waits only for its last packet's work.
        let last = (size - 1) % 4096 + 1;
        let expected = byte_ns * f64::from(last);
        let diff = mean_latency_ns(&r) - mean_latency_ns(&plain);
        assert!(
            (diff - expected).abs() < 1.5,
            "{size} B at {byte_ns} ns/B: {diff} ns more, expected {expected}"
        );
        let w = worker(&r);
        assert_eq!((w.credit_drops, w.uninspected), (0, 0));
        assert_eq!(w.peak_out_packets, 1, "{w:?}");
    }
}

#[test]
fn without_a_worker_nothing_changes() {
    // Costs and a credit given, nothing on a worker selected: as plain.
    let app = "op = \"read\"\nsize = 20000\ndepth = 2\n";
    let plain = one(&two_hosts(app, ""));
    let r = one(&two_hosts(
        app,
        "[services]\n[services.offload]\nns_per_byte = 9\n[services.credit]\npackets = 1\n",
    ));
    assert_eq!(r.apps, plain.apps);
    assert_eq!(r.counters, plain.counters);
}

#[test]
fn bad_worker_fields_are_refused_by_name() {
    let bad = |extra: &str| {
        sluice_sim::Scenario::parse(&two_hosts("size = 1\n", extra), std::path::Path::new("."))
            .unwrap_err()
            .to_string()
    };
    let e = bad("[services.offload]\nplacement = \"in-line\"\n");
    assert!(e.contains("services.offload.placement"), "{e}");
    let e = bad("[services.offload]\nbudget_us = 3\n");
    assert!(e.contains("services.offload.budget_us"), "{e}");
    let e = bad("[services.inspect]\nplacement = \"worker\"\nbudget_us = 3\n");
    assert!(e.contains("services.inspect.budget_us"), "{e}");
    let e = bad("[services.credit]\npackets = 0\n");
    assert!(e.contains("services.credit"), "{e}");
    let e = bad("[services.credit]\nframes = 3\n");
    assert!(e.contains("frames"), "{e}");
    let e = bad("[services.encrypt]\nplacement = \"worker\"\n");
    assert!(e.contains("services.encrypt.placement"), "{e}");
}

/// Inspection on a worker at its default cost (3.64 ns a byte, slower than the offload)
/// beside the offload, sharing a 2-packet credit, under the default timeout: it leaves the
/// offload room on a packet the transport takes and is not offered what the transport drops,
/// so the offload's READs all complete, without the timer (it used to take the credit first
/// and starve the offload: with `timeout = 4`, 2 READs completed by the run's end and 57
/// timeouts, against 4 and none now).
#[test]
fn a_slow_inspection_beside_the_offload_leaves_it_room() {
    let r = one(&two_hosts(
        "op = \"read\"\nsize = 100000\ndepth = 3\n",
        "[services]\nall = [\"offload\", \"inspect\"]\n[services.offload]\nns_per_byte = 0.6\n\
         [services.inspect]\nplacement = \"worker\"\n[services.credit]\npackets = 2\n",
    ));
    let (posted, done, bytes) = completed(&r);
    assert!(posted > 0 && done == posted, "{posted} posted, {done} done");
    assert_eq!(bytes, done * 100_000);
    let w = worker(&r);
    assert!(w.credit_drops > 0 && w.uninspected > 0, "{w:?}");
    assert!(w.peak_out_packets <= 2, "{w:?}");
    assert_eq!(r.counters.timeouts, 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// A run with two workers, drops and recovery is the same run again for the same seed,
    /// and completes.
    #[test]
    fn runs_repeat_for_a_seed(seed in 0u64..1000, credit in 2u32..40) {
        let text = two_hosts(
            "op = \"read\"\nsize = 100000\ndepth = 3\n",
            &format!(
                "timeout = 4\n[services]\nall = [\"offload\", \"inspect\"]\n\
                 [services.offload]\nns_per_byte = 0.6\n\
                 [services.inspect]\nplacement = \"worker\"\nns_per_byte = 0.05\n\
                 [services.credit]\npackets = {credit}\n"
            ),
        );
        let text = format!("seed = {seed}\n{text}");
        let a = one(&text);
        let b = one(&text);
        prop_assert_eq!(&a.apps, &b.apps);
        prop_assert_eq!(&a.counters, &b.counters);
        prop_assert_eq!(a.simulated_ns, b.simulated_ns);
        let w = worker(&a);
        prop_assert!(w.peak_out_packets <= u64::from(credit));
        // Both of host 0's cores (the offload's, inspection's) finish: every READ does.
        let (posted, done, _) = completed(&a);
        prop_assert!(posted > 0 && done == posted, "{} posted, {} done", posted, done);
    }
}
