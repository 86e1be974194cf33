//! SwCC Fig 1: how long a switch queue takes to drain after a second flow joins, as the
//! control loop's delay grows (SwCC's motivation for a NIC-class loop).

use sluice_sim::RunResult;
use sluice_sim::plot::{Chart, Series};

use super::{Check, Entry, Report, Scale, Table, f, simulate};

pub(super) const FIG1: Entry = Entry {
    name: "swcc-fig1",
    source: "SwCC Fig 1",
    summary: "queue drain time after a flow joins vs the control loop's delay (DCQCN, CNP processing delayed)",
    run: fig1,
    needs: &[],
};

/// The queue counts as drained at or below this many bytes.
const DRAINED_BYTES: u64 = 10_000;
/// The paper's loop delays: a NIC-class loop (ASIC NIC, SwCC) and a CPU-class one
/// (Soft-RoCE), SwCC Table 1.
const NIC_US: f64 = 3.1;
const CPU_US: f64 = 23.0;
/// The paper's drain-time ratio between the two (SwCC §3.2).
const PAPER_RATIO: f64 = 7.8;
/// The control loop as the paper defines it (from the CNP's generation at the receiver
/// until the sender has it) with nothing added: two 1 us links and the switch between.
const BASE_LOOP_US: f64 = 2.0;

fn scenario(join_us: f64, limit_us: f64, loops: &[f64]) -> String {
    let mut text = format!(
        r#"# SwCC Fig 1: flow 1 (host 0) runs alone at line rate; flow 2 (host 1) joins it
# towards host 2 at {join_us} us. DCQCN with the paper's parameters (g = 1/256, CNPs at most
# every 50 us, alpha every 55 us; RED from 5 to 200 KB, at most 1%), the sender's CNP
# processing delayed to sweep the control loop's delay, as the paper does.
name = "swcc-fig1"
time_limit_us = {limit_us}
[topology]
kind = "star"
hosts = 3
link_gbps = 100
link_delay_ns = 1000
[switch]
ecn = {{ kmin_bytes = 5000, kmax_bytes = 200000, pmax = 0.01 }}
[output]
sample_interval_us = 1
[[app]]
label = "flow1"
tenant = 1
src = 0
dst = 2
size = 65536
depth = 16
[[app]]
label = "flow2"
tenant = 2
src = 1
dst = 2
size = 65536
depth = 16
start_us = {join_us}
"#
    );
    for l in loops {
        let added = l - BASE_LOOP_US;
        text.push_str(&format!(
            "[[cc]]\nname = \"dcqcn\"\nlabel = \"loop-{l}us\"\n\
             params = {{ cnp_delay_us = {added:.1} }}\n"
        ));
    }
    // The same law behind SCR's decoupled loop with its defaults (4 processors, 1 us a
    // run) and no added delay, for comparison.
    text.push_str(
        "[[cc]]\nname = \"dcqcn\"\nlabel = \"scr-loop\"\ndecoupled = { loop_delay_us = 0 }\n",
    );
    text
}

/// From the join to the first sample, after the queue's peak, at or below
/// [`DRAINED_BYTES`]; `None` if it never drained. Also the peak, and when the queue first
/// came within 5% of it (us after the join): the queue stops growing at the first cut and
/// then holds, so the peak itself may come anywhere in that plateau.
fn drain(r: &RunResult, join_ns: u64) -> (Option<f64>, u64, f64) {
    let s = &r.series;
    let after: Vec<(u64, u64)> = s
        .times_ns
        .iter()
        .zip(&s.max_queue_bytes)
        .filter(|(t, _)| **t >= join_ns)
        .map(|(t, q)| (*t, *q))
        .collect();
    let Some(peak_at) = after
        .iter()
        .enumerate()
        .max_by_key(|(i, (_, q))| (*q, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
    else {
        return (None, 0, 0.0);
    };
    let peak = after[peak_at].1;
    let drained = after[peak_at..]
        .iter()
        .find(|(_, q)| *q <= DRAINED_BYTES)
        .map(|(t, _)| (t - join_ns) as f64 / 1e3);
    let near = after
        .iter()
        .find(|(_, q)| *q * 20 >= peak * 19)
        .map_or(0, |(t, _)| t - join_ns);
    (drained, peak, near as f64 / 1e3)
}

fn fig1(scale: Scale) -> Result<Report, String> {
    let (join_us, limit_us, loops): (f64, f64, &[f64]) = match scale {
        Scale::Quick => (100.0, 900.0, &[BASE_LOOP_US, NIC_US, CPU_US, 100.0]),
        Scale::Full => (
            200.0,
            1500.0,
            &[BASE_LOOP_US, NIC_US, 6.0, 12.0, CPU_US, 50.0, 100.0],
        ),
    };
    let mut report = Report::default();
    let runs = simulate(&mut report, "swcc-fig1", scenario(join_us, limit_us, loops))?;
    let join_ns = (join_us * 1e3) as u64;
    report.table = Table::new(&[
        "control loop",
        "CNP loop delay (us)",
        "peak queue (KB)",
        "queue near peak from (us)",
        "drain time (us)",
        "Gbit/s after join",
        "paper",
    ]);
    let mut points = Vec::new();
    let mut lines = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let (drained, peak, near) = drain(r, join_ns);
        let delay = loops.get(i).copied();
        // Delivered over the time after the join, both flows.
        let s = &r.series;
        let n = r.apps.len();
        let (mut bits, mut count) = (0.0, 0usize);
        for (k, t) in s.times_ns.iter().enumerate() {
            if *t > join_ns {
                bits += (0..n).map(|q| s.app_bps[k * n + q]).sum::<f64>();
                count += 1;
            }
        }
        let gbps = if count > 0 {
            bits / count as f64 / 1e9
        } else {
            0.0
        };
        let paper = match delay {
            Some(d) if d == NIC_US => "NIC-class loop: 1x",
            Some(d) if d == CPU_US => "CPU-class loop: 7.8x the NIC's",
            _ => "",
        };
        report.table.row(vec![
            match delay {
                Some(d) if d == BASE_LOOP_US => "per packet, nothing added".into(),
                Some(_) => "per packet, CNP delayed".into(),
                None => "SCR loop, 1 us a run".into(),
            },
            delay.map_or(format!("{} + runs", f(BASE_LOOP_US, 1)), |d| f(d, 1)),
            f(peak as f64 / 1e3, 0),
            f(near, 0),
            drained.map_or(format!("> {}", f(limit_us - join_us, 0)), |d| f(d, 0)),
            f(gbps, 1),
            paper.to_string(),
        ]);
        if let Some(d) = delay {
            points.push((d, drained));
        }
        // At most some 400 points a line: the plot is for reading, the CSVs of `sluice sim
        // run` have every sample.
        let stride = (s.times_ns.len() / 400).max(1);
        lines.push(Series {
            name: r.algorithm.clone(),
            points: s
                .times_ns
                .iter()
                .zip(&s.max_queue_bytes)
                .step_by(stride)
                .map(|(t, q)| (*t as f64 / 1e3, *q as f64 / 1e3))
                .collect(),
        });
    }
    let drains: Vec<f64> = points
        .iter()
        .map(|(_, d)| d.unwrap_or((limit_us - join_us) * 2.0))
        .collect();
    let rising = drains.windows(2).all(|w| w[1] >= 0.9 * w[0]);
    let first = drains.first().copied().unwrap_or(0.0);
    let last = drains.last().copied().unwrap_or(0.0);
    report.checks.push(Check::shape(
        "drain time rises with the loop delay",
        rising && last >= 1.5 * first,
        format!(
            "drain {} us at {} us of delay ... {} us at {} us (never falling by more than 10% from one delay to the next, the last at least 1.5x the first)",
            f(first, 0),
            points.first().map_or(0.0, |p| p.0),
            f(last, 0),
            points.last().map_or(0.0, |p| p.0),
        ),
    ));
    let at = |d: f64| points.iter().position(|p| p.0 == d).map(|i| drains[i]);
    if let (Some(nic), Some(cpu)) = (at(NIC_US), at(CPU_US)) {
        let ratio = cpu / nic.max(1e-9);
        report.checks.push(Check::number(
            "CPU-class over NIC-class drain time",
            (PAPER_RATIO / 2.0..=PAPER_RATIO * 2.0).contains(&ratio),
            format!(
                "{}x at {CPU_US} us vs {NIC_US} us of delay; paper {PAPER_RATIO}x (the notes accept a factor of 2)",
                f(ratio, 1)
            ),
        ));
    }
    // The plot ends a little after the slowest drain: the rest is an empty queue.
    let slowest = drains.iter().copied().fold(0.0, f64::max);
    let plot_end_us = (join_us + slowest * 1.2).min(limit_us);
    report.plots.push((
        "swcc-fig1".into(),
        Chart {
            title: "SwCC Fig 1: bottleneck queue after flow 2 joins, by control-loop delay".into(),
            x_label: "time (us)".into(),
            y_label: "queue (KB)".into(),
            series: lines
                .into_iter()
                .map(|mut l| {
                    l.points.retain(|p| p.0 <= plot_end_us);
                    l
                })
                .collect(),
            ..Chart::default()
        },
    ));
    report.notes.push(
        "The paper lengthens the loop by delaying CNP processing on its FPGA NICs and defines \
         the loop's delay as the time from a CNP's generation until the sender has it; here \
         the sender acts on each CNP `cnp_delay_us` after it arrives, on top of the 2 us the \
         CNP takes through the fabric. The paper gives no x-axis values: 3.1 us and 23 us are \
         SwCC Table 1's NIC-class and CPU-class loop delays."
            .into(),
    );
    Ok(report)
}
