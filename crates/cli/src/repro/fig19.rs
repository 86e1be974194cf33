//! SCR Fig 19b (A.7, experiment E20): multipath selection by RTT probes. A leaf-spine with
//! two spines; the path through spine 5 is 10 us longer per round trip; one queue pair
//! sends at line rate under the `rtt-probe` path selector (probes on a few UDP source
//! ports, the live port of lowest RTT carries the data, a probe unanswered for 100 us
//! marks its path dead). Then the uplink the traffic uses fails, and the switches keep
//! their routes (`[links] keep_routes`): only the selector can move the traffic.

use sluice_sim::plot::{Chart, Series};
use sluice_sim::{ProbeRtt, RunResult};

use super::{Check, Entry, Report, Scale, Table, f, simulate_all};

pub(super) const FIG19: Entry = Entry {
    name: "scr-fig19",
    source: "SCR Fig 19b (A.7)",
    summary: "rtt-probe multipath selection: probes see a +10 us path, a failed uplink is detected within the 100 us probe timeout and the traffic moves off it",
    run: fig19,
    needs: &[],
};

/// The probe timeout and interval (SCR: 100 us timeout; the interval is Sluice's default).
const TIMEOUT_US: f64 = 100.0;
const INTERVAL_US: f64 = 20.0;
/// The round-trip delay added on the spine-5 path.
const EXTRA_US: f64 = 10.0;
/// The transport's retransmission timeout at its default (`timeout = 8`: 4.096 us x 2^8).
const RTO_US: f64 = 4.096 * 256.0;
/// The shorter one of the second run (`timeout = 5`).
const SHORT_TIMEOUT: u8 = 5;
const SHORT_RTO_US: f64 = 4.096 * 32.0;
/// Nodes: hosts 0 and 1, leaves 2 and 3, spines 4 and 5.
const FAST: &str = "leaf2.p1->spine4";
const SLOW: &str = "leaf2.p2->spine5";

/// The scenario; `timeout` the transport's retransmission timeout code when not the
/// default (IB encoding: 4.096 us x 2^timeout).
fn scenario(fail_us: f64, stop_us: f64, timeout: Option<u8>) -> String {
    let timeout = timeout.map_or(String::new(), |t| format!("timeout = {t}\n"));
    format!(
        r#"# SCR Fig 19b: host 0 -> host 1 over two spines; leaf2-spine5 is 5 us longer each way
# (a round trip through spine 5: +{EXTRA_US} us). The uplink to spine 4 fails at {fail_us} us
# and the switches keep their routes: only the sender's rtt-probe selector moves the data.
name = "scr-fig19"
time_limit_us = {limit}
[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 1
host_link_gbps = 100
# Fabric links faster than the hosts': the data itself queues nowhere on the paths, so
# the probes measure the paths' delays.
fabric_link_gbps = 400
link_delay_ns = 1000
[switch]
routing = "ecmp"
# Probes' replies come back along the probed path (the engine replies from the probe's
# port; a fabric hashing both ways alike, as the selector assumes).
symmetric_hash = true
[transport]
recovery = "selective-repeat"
{timeout}[policies]
path = {{ name = "rtt-probe", params = {{ paths = 4, interval = {INTERVAL_US}, timeout = {TIMEOUT_US} }} }}
[output]
sample_interval_us = 5
[links]
keep_routes = true
[[links.delay]]
a = 2
b = 5
delay_ns = {slow_ns}
[[links.event]]
a = 2
b = 4
at_us = {fail_us}
state = "down"
[[app]]
label = "one"
src = 0
dst = 1
qps = 1
size = 65536
depth = 4
warmup_us = 100
stop_us = {stop_us}
"#,
        limit = stop_us + 100.0,
        slow_ns = 1000.0 + EXTRA_US * 500.0,
    )
}

/// The mean over samples in `[from_us, to_us)` of `value(sample)`.
pub(super) fn mean(r: &RunResult, from_us: f64, to_us: f64, value: impl Fn(usize) -> f64) -> f64 {
    let s = &r.series;
    let picked: Vec<f64> = (0..s.times_ns.len())
        .filter(|&i| {
            let t = s.times_ns[i] as f64 / 1e3;
            t >= from_us && t < to_us
        })
        .map(value)
        .collect();
    picked.iter().sum::<f64>() / picked.len().max(1) as f64
}

/// Per sample, Gbit/s leaving leaf 2 towards the spine named in `port`.
fn uplink(r: &RunResult, port: &str) -> impl Fn(usize) -> f64 {
    let s = &r.series;
    let n = s.ports.len();
    let k = s.ports.iter().position(|p| p.name == port);
    move |i| k.map_or(0.0, |k| s.port_bps[i * n + k] / 1e9)
}

/// After the failure at `fail`: how long until the data leaves mostly through spine 5
/// (us), then the mean goodput and Gbit/s through spine 5 from 50 us after that to `stop`.
fn after_failure(r: &RunResult, fail: f64, stop: f64) -> (Option<f64>, f64, f64) {
    let s = &r.series;
    let slow = uplink(r, SLOW);
    let moved = (0..s.times_ns.len())
        .map(|i| (i, s.times_ns[i] as f64 / 1e3))
        .find(|&(i, t)| t > fail && slow(i) > 50.0)
        .map(|(_, t)| t - fail);
    let settled = fail + moved.unwrap_or(stop) + 50.0;
    let good = |i: usize| s.app_bps.get(i).copied().unwrap_or(0.0) / 1e9;
    (
        moved,
        mean(r, settled, stop, good),
        mean(r, settled, stop, slow),
    )
}

pub(super) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// Host 0's probe RTTs, and the source ports it probed (sorted).
pub(super) fn host0_probes(r: &RunResult) -> (Vec<&ProbeRtt>, Vec<u16>) {
    let probes: Vec<&ProbeRtt> = r
        .counters
        .probe_rtts
        .iter()
        .filter(|p| p.host == 0)
        .collect();
    let mut ports: Vec<u16> = probes.iter().map(|p| p.port).collect();
    ports.sort_unstable();
    ports.dedup();
    (probes, ports)
}

/// RTT per probed port against the time each probe was sent (us), in the order sent (a
/// lost probe is recorded when a later one is answered); a lost one breaks the line.
pub(super) fn rtt_chart(title: &str, probes: &[&ProbeRtt], ports: &[u16]) -> Chart {
    let mut chart = Chart {
        title: title.into(),
        x_label: "time (us)".into(),
        y_label: "RTT (us)".into(),
        ..Chart::default()
    };
    for &port in ports {
        let mut points: Vec<(f64, f64)> = probes
            .iter()
            .filter(|p| p.port == port)
            .map(|p| {
                (
                    p.sent_ns as f64 / 1e3,
                    p.rtt_ns.map_or(f64::NAN, |n| n as f64 / 1e3),
                )
            })
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart.series.push(Series {
            name: format!("port {port}"),
            points,
        });
    }
    chart
}

fn fig19(scale: Scale) -> Result<Report, String> {
    let (fail, stop) = match scale {
        Scale::Quick => (500.0, 2000.0),
        Scale::Full => (1000.0, 3000.0),
    };
    let mut report = Report::default();
    let runs = simulate_all(
        &mut report,
        vec![
            ("scr-fig19".into(), scenario(fail, stop, None)),
            (
                "scr-fig19-rto131".into(),
                scenario(fail, stop, Some(SHORT_TIMEOUT)),
            ),
        ],
    )?;
    let r = &runs[0][0];
    let s = &r.series;
    let t_us = |i: usize| s.times_ns[i] as f64 / 1e3;
    let (probes, ports) = host0_probes(r);

    // Per probed port, the median RTT before the failure and after it.
    let rtt_of = |port: u16, from: f64, to: f64| {
        median(
            probes
                .iter()
                .filter(|p| p.port == port && (p.sent_ns as f64 / 1e3) >= from)
                .filter(|p| (p.sent_ns as f64 / 1e3) < to)
                .filter_map(|p| p.rtt_ns.map(|n| n as f64 / 1e3))
                .collect(),
        )
    };
    report.table = Table::new(&[
        "probed port (host 0)",
        "RTT before failure, median (us)",
        "RTT after, median (us)",
        "probes lost",
        "paper",
    ]);
    let mut before = Vec::new();
    for &port in &ports {
        let b = rtt_of(port, 100.0, fail);
        let a = rtt_of(port, fail + TIMEOUT_US, stop);
        let lost = probes
            .iter()
            .filter(|p| p.port == port && p.rtt_ns.is_none())
            .filter(|p| (p.sent_ns as f64 / 1e3) < stop)
            .count();
        before.extend(b);
        let cell = |x: Option<f64>| x.map_or("dead".to_string(), |x| f(x, 2));
        report.table.row(vec![
            port.to_string(),
            cell(b),
            cell(a),
            lost.to_string(),
            "probes on ports 5101 and 5102 (+10 us) show the gap; the failed one times out".into(),
        ]);
    }
    let gap = before.iter().copied().fold(f64::MIN, f64::max)
        - before.iter().copied().fold(f64::MAX, f64::min);

    // Where the data goes, and how much arrives, before and after the failure.
    let (fast, slow) = (uplink(r, FAST), uplink(r, SLOW));
    let good = |i: usize| s.app_bps.get(i).copied().unwrap_or(0.0) / 1e9;
    let fast_before = mean(r, 200.0, fail, &fast);
    let slow_before = mean(r, 200.0, fail, &slow);
    let good_before = mean(r, 200.0, fail, good);
    // Detection: the first lost probe's timeout, from the failure. Move: the first sample
    // after the failure whose data leaves mostly through spine 5.
    let detect = probes
        .iter()
        .filter(|p| p.rtt_ns.is_none() && p.sent_ns as f64 / 1e3 >= fail - TIMEOUT_US)
        .map(|p| p.sent_ns as f64 / 1e3 + TIMEOUT_US - fail)
        .fold(f64::MAX, f64::min);
    let (moved, good_after, slow_after) = after_failure(r, fail, stop);
    let (moved_short, good_short, _) = after_failure(&runs[1][0], fail, stop);
    let dip = mean(r, fail + 10.0, fail + moved.unwrap_or(stop) - 10.0, good);
    report.table.row(vec![
        "data on the uplinks (Gbit/s)".into(),
        format!(
            "spine 4: {}, spine 5: {}",
            f(fast_before, 1),
            f(slow_before, 1)
        ),
        format!("spine 5: {}", f(slow_after, 1)),
        format!("{} link drops", r.counters.link_drops),
        "not shown (the selector moves to the best live path)".into(),
    ]);
    report.table.row(vec![
        "goodput (Gbit/s)".into(),
        f(good_before, 1),
        format!("{} (mean until the move: {})", f(good_after, 1), f(dip, 1)),
        String::new(),
        "not shown".into(),
    ]);
    let when = |m: Option<f64>| m.map_or("never".to_string(), |m| format!("{} us", f(m, 0)));
    report.table.row(vec![
        "data through spine 5, from the failure".into(),
        format!("transport timeout {} us: {}", f(RTO_US, 0), when(moved)),
        format!(
            "timeout {} us: {} (then {} Gbit/s)",
            f(SHORT_RTO_US, 0),
            when(moved_short),
            f(good_short, 1)
        ),
        String::new(),
        "at the probe timeout".into(),
    ]);

    report.checks.push(Check::shape(
        "the probes see the +10 us path",
        (gap - EXTRA_US).abs() <= 1.0,
        format!(
            "probed ports' median RTTs before the failure span {} us (injected: {EXTRA_US} us a round trip through spine 5)",
            f(gap, 2)
        ),
    ));
    report.checks.push(Check::shape(
        "the data takes the fast path",
        fast_before > 0.9 * (fast_before + slow_before),
        format!(
            "before the failure {} Gbit/s leave leaf 2 through spine 4, {} through spine 5",
            f(fast_before, 1),
            f(slow_before, 1)
        ),
    ));
    let bound = TIMEOUT_US + INTERVAL_US;
    report.checks.push(Check::shape(
        "the failure is detected within the timeout",
        detect <= bound,
        format!(
            "a probe on the failed path timed out {} us after the failure (timeout {TIMEOUT_US} us + interval {INTERVAL_US} us = {bound} us)",
            if detect == f64::MAX { "never".to_string() } else { f(detect, 1) }
        ),
    ));
    report.checks.push(Check::shape(
        "the traffic moves off the failed path and recovers",
        moved.is_some_and(|m| m <= bound + RTO_US + 20.0) && good_after > 0.8 * good_before,
        format!(
            "data through spine 5 from {} us after the failure (the selector's new port carries the retransmissions once the lost window's transport timeout, {} us, fires); goodput {} Gbit/s before, {} after, {} in between",
            moved.map_or("never".to_string(), |m| f(m, 0)),
            f(RTO_US, 0),
            f(good_before, 1),
            f(good_after, 1),
            f(dip, 1)
        ),
    ));
    report.checks.push(Check::shape(
        "with a shorter transport timeout the traffic moves soon after detection",
        moved_short.is_some_and(|m| m <= bound.max(SHORT_RTO_US) + 20.0)
            && good_short > 0.8 * good_before,
        format!(
            "transport timeout {} us: data through spine 5 from {} after the failure, then {} Gbit/s",
            f(SHORT_RTO_US, 0),
            when(moved_short),
            f(good_short, 1)
        ),
    ));
    report.checks.push(Check::number(
        "the traffic moves within the probe timeout",
        moved.is_some_and(|m| m <= bound) && moved_short.is_some_and(|m| m <= bound),
        format!(
            "SCR's selector moves the flow once the probe timeout marks its path dead; here the data already sent is lost with the link and the queue pair waits for its retransmission timeout before sending on the new port: {} after the failure at the default {} us, {} at {} us",
            when(moved),
            f(RTO_US, 0),
            when(moved_short),
            f(SHORT_RTO_US, 0)
        ),
    ));
    report.notes.push(
        "the paper adds 10 us with netem on traffic of one source port and fails a link on its testbed; here the leaf2-spine5 link is 5 us longer each way, so a round trip through spine 5 takes 10 us more. The switches hash both ways alike (`symmetric_hash`), so a probe's reply, sent from the probe's port, returns along the probed path; with the default per-switch hash (same seed) every probed port measured 13.1 us (+5 us): each reply crossed the other spine. After the failure the switches keep their routes (`keep_routes`): the simulator's routing would otherwise converge at once and move the traffic before any probe times out.".into(),
    );

    // RTT per probed port over time, and goodput with the two uplinks.
    let rtt_chart = rtt_chart(
        "SCR Fig 19b: probe RTT per source port (host 0)",
        &probes,
        &ports,
    );
    let over_time = |name: &str, v: &dyn Fn(usize) -> f64| Series {
        name: name.into(),
        points: (0..s.times_ns.len()).map(|i| (t_us(i), v(i))).collect(),
    };
    let rate_chart = Chart {
        title: format!("SCR Fig 19b: uplink {FAST} fails at {fail} us"),
        x_label: "time (us)".into(),
        y_label: "Gbit/s".into(),
        series: vec![
            over_time("goodput", &good),
            over_time("leaf 2 -> spine 4", &fast),
            over_time("leaf 2 -> spine 5 (+10 us)", &slow),
        ],
        ..Chart::default()
    };
    report.plots.push(("scr-fig19-rtt".into(), rtt_chart));
    report.plots.push(("scr-fig19".into(), rate_chart));
    Ok(report)
}
