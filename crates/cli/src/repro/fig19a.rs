//! SCR Fig 19a (A.7, experiment E20): the `rtt-probe` selector's probes track cross
//! traffic. A leaf-spine with two spines; host 0 sends to host 2 at 50 Gbit/s under the
//! selector (probes on a few UDP source ports, every `INTERVAL_US`); a second sender on host
//! 0's leaf, host 1, sends 100 Gbit/s to the same receiver in on/off periods. While it is on,
//! the receiver's downlink is offered 1.5 times its rate and queues (no congestion control;
//! PFC bounds the queue), which every probed path crosses; when it stops, the queue drains
//! and the probes' RTT returns to the base RTT.

use sluice_sim::plot::{Chart, Series};

use super::fig19::{host0_probes, mean, median, rtt_chart};
use super::{Check, Entry, Report, Scale, Table, f, simulate_all};

pub(super) const FIG19A: Entry = Entry {
    name: "scr-fig19a",
    source: "SCR Fig 19a (A.7)",
    summary: "rtt-probe multipath monitoring: every probed path's RTT rises while 100 Gbit/s of cross traffic to the receiver is on and returns once it stops",
    run: fig19a,
    needs: &[],
};

const INTERVAL_US: f64 = 20.0;
/// The probed flow's rate: half the line.
const PROBED_GBPS: f64 = 50.0;
const TIMEOUT_US: f64 = 100.0;
/// The receiver's port: the queue the cross traffic builds.
const DOWNLINK: &str = "leaf5.p0->host2";
/// Samples within this long of a switch (on or off) are left out of the medians: the queue
/// takes a while to fill and to drain.
const SETTLE_US: f64 = 50.0;
/// The least rise of a probed path's median RTT while the cross traffic is on (µs): a
/// queue the probes would not see is at most a few packets (1 KiB is 0.08 µs at 100
/// Gbit/s), so anything above a microsecond is the cross traffic's.
const MIN_RISE_US: f64 = 2.0;
/// How close to the RTT before the first period the RTT after a period must return (µs).
const RETURN_US: f64 = 1.0;

/// The scenario: the cross traffic on during each of `periods` (µs), the probed flow until
/// `stop_us`.
fn scenario(periods: &[(f64, f64)], stop_us: f64) -> String {
    let mut cross = String::new();
    for (k, (on, off)) in periods.iter().enumerate() {
        cross.push_str(&format!(
            "[[app]]\nlabel = \"cross{k}\"\nsrc = 1\ndst = 2\nqps = 1\nsize = 65536\ndepth = 4\nstart_us = {on}\nstop_us = {off}\n"
        ));
    }
    format!(
        r#"# SCR Fig 19a: host 0 -> host 2 at line rate under the rtt-probe selector; host 1 ->
# host 2 at 100 Gbit/s in on/off periods (cross traffic to the same receiver).
name = "scr-fig19a"
time_limit_us = {limit}
[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 2
host_link_gbps = 100
fabric_link_gbps = 100
link_delay_ns = 1000
[switch]
routing = "ecmp"
# Probes' replies come back along the probed path (as in Fig 19b).
symmetric_hash = true
# Lossless, as RoCE fabrics run: with no congestion control the queue the cross traffic
# builds at the receiver's port is bounded by PFC (each ingress pauses its sender past xoff).
pfc = {{ xoff_bytes = 200000, xon_bytes = 150000 }}
[transport]
recovery = "selective-repeat"
[policies]
path = {{ name = "rtt-probe", params = {{ paths = 4, interval = {INTERVAL_US}, timeout = {TIMEOUT_US} }} }}
[output]
sample_interval_us = 5
[[app]]
label = "probed"
src = 0
dst = 2
qps = 1
# Paced below the line: alone it queues nowhere, so the queue the cross traffic leaves
# drains once it stops (at line rate it would stand: as much arriving as leaving).
cc = {{ name = "static", params = {{ rate_gbps = {PROBED_GBPS} }} }}
size = 65536
depth = 4
warmup_us = 100
stop_us = {stop_us}
{cross}"#,
        limit = stop_us + 100.0,
    )
}

fn fig19a(scale: Scale) -> Result<Report, String> {
    let (periods, stop): (Vec<(f64, f64)>, f64) = match scale {
        Scale::Quick => (vec![(300.0, 600.0)], 900.0),
        Scale::Full => (vec![(400.0, 900.0), (1400.0, 1900.0)], 2400.0),
    };
    let mut report = Report::default();
    let runs = simulate_all(
        &mut report,
        vec![("scr-fig19a".into(), scenario(&periods, stop))],
    )?;
    let r = &runs[0][0];
    let s = &r.series;
    let (probes, ports) = host0_probes(r);

    // The windows: before the first period, during each (settled), and after each (settled,
    // until the next one or the end).
    let first_on = periods[0].0;
    let during: Vec<(f64, f64)> = periods
        .iter()
        .map(|&(on, off)| (on + SETTLE_US, off))
        .collect();
    let after: Vec<(f64, f64)> = periods
        .iter()
        .enumerate()
        .map(|(k, &(_, off))| {
            let next = periods.get(k + 1).map_or(stop, |p| p.0);
            (off + SETTLE_US, next)
        })
        .collect();
    let rtts = |port: u16, windows: &[(f64, f64)]| -> Vec<f64> {
        probes
            .iter()
            .filter(|p| p.port == port)
            .filter(|p| {
                let t = p.sent_ns as f64 / 1e3;
                windows.iter().any(|&(a, b)| t >= a && t < b)
            })
            .filter_map(|p| p.rtt_ns.map(|n| n as f64 / 1e3))
            .collect()
    };
    let queue_at = |name: &'static str| {
        let n = s.ports.len();
        let k = s.ports.iter().position(|p| p.name == name);
        move |i: usize| k.map_or(0.0, |k| s.port_queue_bytes[i * n + k] as f64 / 1e3)
    };
    let queue = queue_at(DOWNLINK);
    // The queues on a probe's way to the receiver: the sender leaf's uplink and the spine's
    // downlink (one of two spines, so their mean), then the receiver's port. PFC pauses the
    // links into a full port, so the first two fill as well.
    let uplinks = [queue_at("leaf4.p2->spine6"), queue_at("leaf4.p3->spine7")];
    let spines = [queue_at("spine6.p1->leaf5"), queue_at("spine7.p1->leaf5")];
    let on_path = |i: usize| {
        queue(i) + (uplinks[0](i) + uplinks[1](i)) / 2.0 + (spines[0](i) + spines[1](i)) / 2.0
    };

    report.table = Table::new(&[
        "probed port (host 0)",
        "RTT before, median (us)",
        "RTT while cross traffic is on, median / max (us)",
        "RTT after, median (us)",
        "paper",
    ]);
    let mut rises = Vec::new();
    let mut returns = Vec::new();
    for &port in &ports {
        let b = median(rtts(port, &[(100.0, first_on)]));
        let on = rtts(port, &during);
        let max_on = on.iter().copied().fold(f64::NAN, f64::max);
        let d = median(on);
        let a: Vec<Option<f64>> = after.iter().map(|&w| median(rtts(port, &[w]))).collect();
        if let (Some(b), Some(d)) = (b, d) {
            rises.push((port, d - b));
        }
        for x in &a {
            returns.push((
                port,
                match (b, x) {
                    (Some(b), Some(x)) => Some(x - b),
                    _ => None,
                },
            ));
        }
        let cell = |x: Option<f64>| x.map_or("-".to_string(), |x| f(x, 2));
        report.table.row(vec![
            port.to_string(),
            cell(b),
            format!("{} / {}", cell(d), f(max_on, 2)),
            a.iter().map(|&x| cell(x)).collect::<Vec<_>>().join(", "),
            "goes up when the cross traffic starts, down when it stops".into(),
        ]);
    }
    let q_before = mean(r, 100.0, first_on, queue);
    let q_on = during
        .iter()
        .map(|&(a, b)| mean(r, a, b, queue))
        .sum::<f64>()
        / during.len() as f64;
    let q_after = after
        .iter()
        .map(|&(a, b)| mean(r, a, b, queue))
        .sum::<f64>()
        / after.len() as f64;
    report.table.row(vec![
        format!("queue at {DOWNLINK} (KB, mean)"),
        f(q_before, 1),
        f(q_on, 1),
        f(q_after, 1),
        "not shown".into(),
    ]);

    // How soon the probes follow a switch: the first probe sent after the cross traffic
    // starts that sees the RTT risen, and after it stops the first back near the base.
    let base = median(
        probes
            .iter()
            .filter(|p| (100.0..first_on).contains(&(p.sent_ns as f64 / 1e3)))
            .filter_map(|p| p.rtt_ns.map(|n| n as f64 / 1e3))
            .collect(),
    )
    .unwrap_or(f64::NAN);
    let first_after = |from: f64, to: f64, hit: &dyn Fn(f64) -> bool| {
        probes
            .iter()
            .filter_map(|p| Some((p.sent_ns as f64 / 1e3, p.rtt_ns? as f64 / 1e3)))
            .filter(|&(t, rtt)| t >= from && t < to && hit(rtt))
            .map(|(t, _)| t - from)
            .fold(f64::NAN, f64::min)
    };
    let mut lags = Vec::new();
    for (k, &(on, off)) in periods.iter().enumerate() {
        let next = periods.get(k + 1).map_or(stop, |p| p.0);
        let up = first_after(on, off, &|rtt| rtt >= base + MIN_RISE_US);
        let down = first_after(off, next, &|rtt| rtt <= base + RETURN_US);
        lags.push(format!(
            "period {}: risen {} us after the start, back {} us after the stop",
            k + 1,
            f(up, 0),
            f(down, 0)
        ));
    }
    report.table.row(vec![
        "the probes follow (all ports)".into(),
        format!("base {} us", f(base, 2)),
        lags.join("; "),
        String::new(),
        "at once (a probe interval)".into(),
    ]);
    let q_path = during
        .iter()
        .map(|&(a, b)| mean(r, a, b, on_path))
        .sum::<f64>()
        / during.len() as f64;
    let q_delay = q_path * 1e3 * 8.0 / 100e9 * 1e6; // KB at 100 Gbit/s, in us
    let mean_rise = rises.iter().map(|r| r.1).sum::<f64>() / rises.len().max(1) as f64;
    report.checks.push(Check::number(
        "the probes' rise is the queueing delay on their path",
        (mean_rise - q_delay).abs() <= 0.3 * q_delay,
        format!(
            "median RTT rise {} us against the mean queues on a probe's way while on (sender leaf's uplink, spine, receiver's port), {} KB = {} us at 100 Gbit/s (within 30%)",
            f(mean_rise, 1),
            f(q_path, 1),
            f(q_delay, 1)
        ),
    ));

    let show = |v: &[(u16, f64)]| {
        v.iter()
            .map(|(p, x)| format!("{p}: {}", f(*x, 2)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    report.checks.push(Check::shape(
        "every probed path's RTT rises while the cross traffic is on",
        rises.len() == ports.len() && !ports.is_empty() && rises.iter().all(|&(_, x)| x >= MIN_RISE_US),
        format!(
            "median RTT while on minus before, per probed port (us): {} (at least {MIN_RISE_US} us each; {} probed ports)",
            show(&rises),
            ports.len()
        ),
    ));
    let back = returns
        .iter()
        .all(|(_, x)| x.is_some_and(|x| x.abs() <= RETURN_US));
    report.checks.push(Check::shape(
        "the RTT returns once the cross traffic stops",
        back && !returns.is_empty(),
        format!(
            "median RTT after each period minus before, per probed port (us): {} (within {RETURN_US} us)",
            returns
                .iter()
                .map(|(p, x)| format!("{p}: {}", x.map_or("none".to_string(), |x| f(x, 2))))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ));
    report.notes.push(format!(
        "the paper's cross traffic runs between the sender and the receiver; here it comes from a second host on the sender's leaf to the same receiver, so it shares the receiver's downlink ({DOWNLINK}), which every path crosses: all the probed ports see it, none can avoid it. No congestion control runs; the fabric is lossless (PFC, 200 KB xoff), so the queue the cross traffic builds is bounded by PFC, which fills the links into the receiver's leaf too. The probed flow is paced at 50 Gbit/s so that, alone, it leaves no standing queue. The paper's RTT rise depends on its NIC's congestion control and the switch's buffers and is not compared in numbers."
    ));

    // RTT per probed port over time; the downlink's queue beside it.
    let rtt_chart = rtt_chart(
        "SCR Fig 19a: probe RTT per source port (host 0), cross traffic on/off",
        &probes,
        &ports,
    );
    let on_off: Vec<(f64, f64)> = (0..s.times_ns.len())
        .map(|i| {
            let t = s.times_ns[i] as f64 / 1e3;
            let on = periods.iter().any(|&(a, b)| t >= a && t < b);
            (t, if on { 100.0 } else { 0.0 })
        })
        .collect();
    let load_chart = Chart {
        title: format!("SCR Fig 19a: cross traffic and the queue at {DOWNLINK}"),
        x_label: "time (us)".into(),
        y_label: "Gbit/s offered / KB queued".into(),
        series: vec![
            Series {
                name: "cross traffic on (Gbit/s offered)".into(),
                points: on_off,
            },
            Series {
                name: "queue (KB)".into(),
                points: (0..s.times_ns.len())
                    .map(|i| (s.times_ns[i] as f64 / 1e3, queue(i)))
                    .collect(),
            },
        ],
        ..Chart::default()
    };
    report.plots.push(("scr-fig19a-rtt".into(), rtt_chart));
    report.plots.push(("scr-fig19a".into(), load_chart));
    Ok(report)
}
