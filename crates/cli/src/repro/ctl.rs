//! The control plane's experiments: SCR's coalescing granularity (Fig 10b) and software
//! coalescing (Fig 10c/d) on the decoupled loop's statistics, and SwCC's comparison of
//! DCQCN, TIMELY and HPCC (Figs 12-14).

use sluice_core::control::DecoupledStats;
use sluice_sim::RunResult;
use sluice_sim::plot::{Chart, Series};

use super::{Check, Entry, Report, Scale, Table, f, simulate_all};

pub(super) const SCR_FIG10B: Entry = Entry {
    name: "scr-fig10b",
    source: "SCR Fig 10b (E8/E9)",
    summary: "fixed processors, 1 to 1,024 saturating flows: bytes per run of the law fall until flows reach the processors, then stay flat",
    run: fig10b,
    needs: &[],
};

pub(super) const SCR_FIG10CD: Entry = Entry {
    name: "scr-fig10cd",
    source: "SCR Fig 10c/d (E10/E11)",
    summary: "hardware-only accumulation against hardware + software coalescing of TX events: events handled per processor",
    run: fig10cd,
    needs: &[],
};

/// A processor's time per run of the law: SCR's Swift on a DPA thread (A.11, Fig 22).
const SERVICE_US: f64 = 4.0;
/// The line, Gbit/s.
pub(super) const LINE_GBPS: f64 = 100.0;

/// `flows` queue pairs from host 0 to host 1 writing 64 KiB messages four deep (SCR's
/// `ib_write_bw` setup, E8), under DCQCN behind the decoupled loop as `decoupled` says.
/// Nothing congests the one link, so DCQCN never cuts: its runs are the TX events' (and the
/// receiver's RX events', on a loop of its own), and the load saturates the processors.
fn saturating(name: &str, flows: u32, stop_us: f64, decoupled: &[(&str, String)]) -> String {
    let mut text = format!(
        r#"# {name}: {flows} queue pairs from host 0 to host 1 at line rate, 64 KiB writes
# four deep; DCQCN behind SCR's decoupled loop ({SERVICE_US} us a run, SCR's Swift on a DPA).
name = "{name}"
time_limit_us = {stop_us}
[topology]
kind = "star"
hosts = 2
link_gbps = {LINE_GBPS}
link_delay_ns = 1000
[output]
sample_interval_us = 50
[[app]]
label = "flows"
src = 0
dst = 1
size = 65536
depth = 4
qps = {flows}
"#
    );
    for (label, spec) in decoupled {
        text.push_str(&format!(
            "[[cc]]\nname = \"dcqcn\"\nlabel = \"{label}\"\ndecoupled = {{ {spec} }}\n"
        ));
    }
    text
}

/// The decoupled statistics of run `r` (every entry here runs decoupled).
fn stats(r: &RunResult) -> Result<&DecoupledStats, String> {
    r.counters
        .decoupled
        .as_ref()
        .ok_or_else(|| format!("{}: no decoupled statistics", r.algorithm))
}

/// Payload Gbit/s delivered to the app queue pairs over the run.
fn goodput(r: &RunResult) -> f64 {
    let bytes: u64 = r.apps.iter().map(|q| q.delivered_bytes).sum();
    bytes as f64 * 8.0 / r.simulated_ns.max(1) as f64
}

fn fig10b(scale: Scale) -> Result<Report, String> {
    let (processors, flows, stop_us): (u32, &[u32], f64) = match scale {
        Scale::Quick => (4, &[1, 2, 4, 8, 32], 300.0),
        Scale::Full => (16, &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], 3000.0),
    };
    let spec = format!("processors = {processors}, service_us = {SERVICE_US}");
    let scenarios = flows
        .iter()
        .map(|&n| {
            let name = format!("scr-fig10b-{n}");
            let text = saturating(&name, n, stop_us, &[("scr", spec.clone())]);
            (name, text)
        })
        .collect();
    let mut report = Report::default();
    let runs = simulate_all(&mut report, scenarios)?;
    // SCR's invariance: LineRate = Bspe x C, C = P / service time.
    let invariant = LINE_GBPS / 8.0 * 1e3 * SERVICE_US / f64::from(processors);
    report.table = Table::new(&[
        "flows",
        "goodput (Gbit/s)",
        "TX runs per us",
        "bytes per TX run",
        "events coalesced",
        "sender processor load (%)",
        "paper",
    ]);
    let mut points = Vec::new();
    for (&n, r) in flows.iter().zip(&runs) {
        let r = &r[0];
        let d = stats(r)?;
        let t = &d.totals;
        let per_run = t.bytes_per_tx_run().unwrap_or(0.0);
        let rate = t.tx_runs as f64 / (r.simulated_ns as f64 / 1e3);
        // Both hosts' loops are summed: the receiver's runs on RX events, the sender's on
        // TX; the sender's load is the busy time of its TX runs.
        let sender_load =
            t.tx_runs as f64 * SERVICE_US / (f64::from(processors) * r.simulated_ns as f64 / 1e3);
        report.table.row(vec![
            n.to_string(),
            f(goodput(r), 1),
            f(rate, 2),
            f(per_run, 0),
            format!(
                "{}%",
                f(100.0 * t.coalesced as f64 / t.events.max(1) as f64, 1)
            ),
            f(sender_load * 100.0, 0),
            match n {
                n if n < processors => "falls as flows grow".into(),
                n if n == processors => "finest, at flows = processors".into(),
                _ => "flat (granularity invariance)".into(),
            },
        ]);
        points.push((n, per_run, rate));
    }
    let falling = points
        .iter()
        .filter(|p| p.0 <= processors)
        .collect::<Vec<_>>()
        .windows(2)
        .all(|w| w[1].1 < w[0].1);
    let at_p = points
        .iter()
        .find(|p| p.0 == processors)
        .map_or(0.0, |p| p.1);
    let flat: Vec<f64> = points
        .iter()
        .filter(|p| p.0 >= processors)
        .map(|p| p.1)
        .collect();
    let worst = flat
        .iter()
        .map(|b| (b / at_p - 1.0).abs())
        .fold(0.0, f64::max);
    let first = points.first().map_or(0.0, |p| p.1);
    report.checks.push(Check::shape(
        "bytes per TX run fall until flows reach the processor count",
        falling && first > 2.0 * at_p,
        format!(
            "{} B at 1 flow ... {} B at {processors} flows (each step smaller, the first over twice the last)",
            f(first, 0),
            f(at_p, 0)
        ),
    ));
    report.checks.push(Check::shape(
        "then flat within 15%",
        worst <= 0.15,
        format!(
            "{} from {processors} to {} flows: at most {}% from the value at {processors}",
            flat.iter().map(|b| f(*b, 0)).collect::<Vec<_>>().join(", "),
            flows.last().copied().unwrap_or(0),
            f(worst * 100.0, 1)
        ),
    ));
    let mean_flat = flat.iter().sum::<f64>() / flat.len().max(1) as f64;
    report.checks.push(Check::number(
        "the flat value is the line rate times the service time over the processors",
        (mean_flat / invariant - 1.0).abs() <= 0.15,
        format!(
            "{} B measured, {} B from SCR's LineRate = Bspe x C (within 15%)",
            f(mean_flat, 0),
            f(invariant, 0)
        ),
    ));
    report.plots.push((
        "scr-fig10b".into(),
        Chart {
            title: format!(
                "SCR Fig 10b: coalescing granularity, {processors} processors of {SERVICE_US} us"
            ),
            x_label: "flows".into(),
            y_label: "bytes per TX run of the law".into(),
            x_log: true,
            y_log: true,
            series: vec![Series {
                name: "bytes per TX run".into(),
                points: points.iter().map(|p| (f64::from(p.0), p.1)).collect(),
            }],
        },
    ));
    report.notes.push(format!(
        "SCR runs 64 DPA threads 1:1 with up to 64 flows, then up to 1,024 flows on them; \
         here {processors} modelled processors of {SERVICE_US} us a run (SCR's Swift \
         processing time on a DPA), the law DCQCN (which, on an uncongested link, runs on TX \
         events only at the sender). Bytes per TX run are the TX payload bytes the sender's \
         runs covered over its TX runs; SCR's granularity counts headers too."
    ));
    Ok(report)
}

/// Software coalescing's threshold: a run of the law covers at least one message of the
/// app (64 KiB), SCR's "enough signals built up" (the paper gives no value).
const EARLY_EXIT_BYTES: u32 = 65536;
/// An early exit's cost: an enqueue and an add on the processor, an eighth of a run here
/// (the paper gives no value).
const EARLY_EXIT_US: f64 = 0.5;
/// Flows of Fig 10c/d.
const FIG10CD_FLOWS: u32 = 64;
/// SCR's gain in events handled at 4 threads (Fig 10d).
const PAPER_GAIN: f64 = 0.513;

fn fig10cd(scale: Scale) -> Result<Report, String> {
    let (processors, costs, stop_us): (&[u32], &[f64], f64) = match scale {
        Scale::Quick => (&[4, 16], &[2.0], 300.0),
        Scale::Full => (&[1, 2, 4, 8, 16, 32, 64], &[1.0, 2.0, 3.0, 3.5], 2000.0),
    };
    let mut scenarios: Vec<(String, String)> = processors
        .iter()
        .map(|&p| {
            let name = format!("scr-fig10cd-p{p}");
            let hw = format!("processors = {p}, service_us = {SERVICE_US}");
            let sw = format!(
                "{hw}, early_exit_bytes = {EARLY_EXIT_BYTES}, early_exit_us = {EARLY_EXIT_US}"
            );
            let text = saturating(
                &name,
                FIG10CD_FLOWS,
                stop_us,
                &[("hw-only", hw), ("hw+sw", sw)],
            );
            (name, text)
        })
        .collect();
    // How the gain at 4 processors follows the early exit's cost, the paper's unknown.
    let hw4 = format!("processors = 4, service_us = {SERVICE_US}");
    let by_cost: Vec<(String, String)> = costs
        .iter()
        .map(|c| {
            (
                format!("exit {c} us"),
                format!("{hw4}, early_exit_bytes = {EARLY_EXIT_BYTES}, early_exit_us = {c}"),
            )
        })
        .collect();
    let by_cost: Vec<(&str, String)> = std::iter::once(("hw-only", hw4.clone()))
        .chain(by_cost.iter().map(|(l, s)| (l.as_str(), s.clone())))
        .collect();
    scenarios.push((
        "scr-fig10cd-cost".into(),
        saturating("scr-fig10cd-cost", FIG10CD_FLOWS, stop_us, &by_cost),
    ));
    let mut report = Report::default();
    let mut runs = simulate_all(&mut report, scenarios)?;
    let cost_runs = runs.pop().unwrap_or_default();
    report.table = Table::new(&[
        "processors",
        "coalescing",
        "goodput (Gbit/s)",
        "events handled per us",
        "of which runs",
        "us per handled event",
        "bytes per TX run",
        "gain in events handled",
        "paper",
    ]);
    let mut gains = Vec::new();
    let mut lines = vec![
        Series {
            name: "hardware only".into(),
            points: Vec::new(),
        },
        Series {
            name: "hardware + software".into(),
            points: Vec::new(),
        },
    ];
    // Handled on the sender: the receiver's loop handles its RX events, the same in both
    // runs, and is left out (TX runs and early exits are the sender's alone).
    let handled = |r: &RunResult, exit_us: f64| -> Result<(f64, f64, f64, f64), String> {
        let t = stats(r)?.totals;
        let us = r.simulated_ns as f64 / 1e3;
        let events = (t.tx_runs + t.early_exits) as f64;
        let busy = t.tx_runs as f64 * SERVICE_US + t.early_exits as f64 * exit_us;
        Ok((
            events / us,
            t.tx_runs as f64 / us,
            busy / events.max(1.0),
            t.bytes_per_tx_run().unwrap_or(0.0),
        ))
    };
    for (&p, pair) in processors.iter().zip(&runs) {
        let (hw, sw) = (handled(&pair[0], 0.0)?, handled(&pair[1], EARLY_EXIT_US)?);
        let gain = sw.0 / hw.0.max(1e-9) - 1.0;
        gains.push((p, gain));
        for (i, (r, h)) in [(&pair[0], hw), (&pair[1], sw)].into_iter().enumerate() {
            report.table.row(vec![
                p.to_string(),
                r.algorithm.clone(),
                f(goodput(r), 1),
                f(h.0, 2),
                f(h.1, 2),
                f(h.2, 2),
                f(h.3, 0),
                if i == 1 {
                    format!("{}%", f(gain * 100.0, 1))
                } else {
                    String::new()
                },
                match (i, p) {
                    (1, 4) => "+51.3% at 4 threads".into(),
                    (1, _) => "gain largest when threads are few".into(),
                    _ => String::new(),
                },
            ]);
            lines[i].points.push((f64::from(p), h.0));
        }
    }
    let mut cost_gains = Vec::new();
    if let Some(hw_run) = cost_runs.first() {
        let hw = handled(hw_run, 0.0)?;
        for (&c, r) in costs.iter().zip(&cost_runs[1..]) {
            let h = handled(r, c)?;
            let gain = h.0 / hw.0.max(1e-9) - 1.0;
            cost_gains.push((c, gain));
            report.table.row(vec![
                "4".into(),
                format!("hw+sw, exit {c} us"),
                f(goodput(r), 1),
                f(h.0, 2),
                f(h.1, 2),
                f(h.2, 2),
                f(h.3, 0),
                format!("{}%", f(gain * 100.0, 1)),
                "+51.3% at 4 threads".into(),
            ]);
        }
    }
    let at4 = gains.iter().find(|g| g.0 == 4).map(|g| g.1);
    if let Some(g) = at4 {
        report.checks.push(Check::shape(
            "software coalescing handles substantially more events at 4 processors",
            g >= 0.25,
            format!(
                "{}% more events handled (at least 25% asked)",
                f(g * 100.0, 1)
            ),
        ));
        report.checks.push(Check::number(
            "the gain at 4 processors",
            (g / PAPER_GAIN - 1.0).abs() <= 0.5,
            format!(
                "{}% vs the paper's 51.3% (within half of it either way)",
                f(g * 100.0, 1)
            ),
        ));
    }
    // Where the gain peaks: SCR's is largest when threads are few.
    if let Some(peak) = gains.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
        report.checks.push(Check::number(
            "the gain is largest when processors are few (at 4 or fewer)",
            peak.0 <= 4,
            gains
                .iter()
                .map(|(p, g)| format!("{p}: {}%", f(g * 100.0, 0)))
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    if cost_gains.len() > 1 {
        let falling = cost_gains.windows(2).all(|w| w[1].1 <= w[0].1);
        report.checks.push(Check::number(
            "the gain falls as an early exit costs more",
            falling,
            cost_gains
                .iter()
                .map(|(c, g)| format!("{c} us: {}%", f(g * 100.0, 0)))
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    report.plots.push((
        "scr-fig10cd".into(),
        Chart {
            title: format!(
                "SCR Fig 10d: events handled, {FIG10CD_FLOWS} saturating flows, {SERVICE_US} us a run, {EARLY_EXIT_US} us an early exit"
            ),
            x_label: "processors".into(),
            y_label: "TX events handled per us (sender)".into(),
            x_log: true,
            y_log: false,
            series: lines,
        },
    ));
    report.notes.push(format!(
        "Hardware-only: the queues' accumulation alone, every TX event a processor takes runs \
         the law ({SERVICE_US} us). Hardware + software: SCR's early termination \
         (`early_exit_bytes = {EARLY_EXIT_BYTES}`, `early_exit_us = {EARLY_EXIT_US}`): a TX \
         event covering, with what was carried, less than one 64 KiB message is only carried. \
         The paper gives neither the threshold nor an early exit's cost; the gain follows \
         from them (a cheaper exit or a higher threshold gives more), so the number check \
         compares a model, not a measurement of SCR's DPA. Events handled are the sender's \
         (TX runs and early exits); the receiver's loop is the same in both runs."
    ));
    Ok(report)
}

pub(super) const SWCC_FIG12: Entry = Entry {
    name: "swcc-fig12",
    source: "SwCC Figs 12-14",
    summary: "2 senders x 5 flows of 2 KB writes into one 100 Gbit/s port: DCQCN, TIMELY and HPCC on a NIC-class and a CPU-class control loop",
    run: fig12,
    needs: &[],
};

/// The laws SwCC compares, in its order.
const SWCC_LAWS: [&str; 3] = ["dcqcn", "timely", "hpcc"];
/// The CPU-class loop's added delay: Soft-RoCE's 23 us loop (SwCC Table 1) less the
/// fabric's part of a NIC-class one.
const CPU_LOOP_US: f64 = 20.0;
/// A queue counts as drained at or below this.
const DRAINED: u64 = 10_000;

/// SwCC's end-to-end workload (§5.7): hosts 0 and 1 start five flows each towards host 2 at
/// once, 2 KB writes kept `depth` deep, every law on a NIC-class loop (inline) and on a
/// CPU-class one (the decoupled loop with [`CPU_LOOP_US`] of delay and no service time, so
/// that only the loop's length differs).
fn fig12_scenario(depth: u32, stop_us: f64) -> String {
    let mut text = format!(
        r#"# SwCC Figs 12-14: 2 senders x 5 flows of 2 KB writes into one port at 100 Gbit/s.
# RED as SwCC's (5 to 200 KB, at most 1%); DCQCN, TIMELY and HPCC with their defaults,
# each on a NIC-class loop and on a CPU-class one ({CPU_LOOP_US} us added to every event).
name = "swcc-fig12"
time_limit_us = {stop_us}
[topology]
kind = "star"
hosts = 3
link_gbps = {LINE_GBPS}
link_delay_ns = 1000
[switch]
ecn = {{ kmin_bytes = 5000, kmax_bytes = 200000, pmax = 0.01 }}
[output]
sample_interval_us = 2
"#
    );
    for src in 0..2 {
        text.push_str(&format!(
            "[[app]]\nlabel = \"sender{src}\"\ntenant = 1\nsrc = {src}\ndst = 2\nsize = 2048\n\
             depth = {depth}\nqps = 5\nstop_us = {stop_us}\n"
        ));
    }
    for law in SWCC_LAWS {
        text.push_str(&format!("[[cc]]\nname = \"{law}\"\nlabel = \"{law}\"\n"));
    }
    for law in SWCC_LAWS {
        text.push_str(&format!(
            "[[cc]]\nname = \"{law}\"\nlabel = \"{law}-cpu-loop\"\n\
             decoupled = {{ processors = 16, loop_delay_us = {CPU_LOOP_US}, service_us = 0 }}\n"
        ));
    }
    text
}

/// One run's figures.
struct LawRun {
    gbps: f64,
    peak_kb: f64,
    mean_kb: f64,
    drain_us: Option<f64>,
    latency_us: f64,
    p99_us: f64,
    jain: f64,
}

fn law_run(r: &RunResult) -> LawRun {
    let s = &r.series;
    let q = &s.max_queue_bytes;
    let peak_at = q
        .iter()
        .enumerate()
        .max_by_key(|(i, v)| (**v, std::cmp::Reverse(*i)))
        .map_or(0, |(i, _)| i);
    let drain_us = q[peak_at..]
        .iter()
        .position(|v| *v <= DRAINED)
        .map(|k| s.times_ns[peak_at + k] as f64 / 1e3);
    let t = sluice_sim::app::tenant_stats(r);
    let t = t.first();
    let rates: Vec<f64> = r.apps.iter().map(|q| q.bps()).collect();
    LawRun {
        gbps: t.map_or(0.0, |t| t.gbps),
        peak_kb: q.iter().copied().max().unwrap_or(0) as f64 / 1e3,
        mean_kb: q.iter().sum::<u64>() as f64 / q.len().max(1) as f64 / 1e3,
        drain_us,
        latency_us: t.and_then(|t| t.mean_latency_us).unwrap_or(f64::NAN),
        p99_us: t.and_then(|t| t.latency_us).map_or(f64::NAN, |l| l.1),
        jain: sluice_sim::report::jain_index(&rates).unwrap_or(0.0),
    }
}

fn fig12(scale: Scale) -> Result<Report, String> {
    let (depth, stop_us) = match scale {
        Scale::Quick => (128, 500.0),
        Scale::Full => (128, 2000.0),
    };
    let mut report = Report::default();
    let runs = simulate_all(
        &mut report,
        vec![("swcc-fig12".into(), fig12_scenario(depth, stop_us))],
    )?
    .pop()
    .unwrap_or_default();
    if runs.len() != 2 * SWCC_LAWS.len() {
        return Err(format!("swcc-fig12: {} runs, expected 6", runs.len()));
    }
    let figures: Vec<LawRun> = runs.iter().map(law_run).collect();
    report.table = Table::new(&[
        "law",
        "loop",
        "Gbit/s",
        "peak queue (KB)",
        "mean queue (KB)",
        "queue drained at (us)",
        "message latency mean / p99 (us)",
        "Jain over flows",
        "paper",
    ]);
    for (i, (r, x)) in runs.iter().zip(&figures).enumerate() {
        let cpu = i >= SWCC_LAWS.len();
        report.table.row(vec![
            SWCC_LAWS[i % SWCC_LAWS.len()].to_string(),
            if cpu {
                format!("CPU-class (+{CPU_LOOP_US} us)")
            } else {
                "NIC-class".into()
            },
            f(x.gbps, 1),
            f(x.peak_kb, 0),
            f(x.mean_kb, 0),
            x.drain_us
                .map_or(format!("> {}", f(stop_us, 0)), |d| f(d, 0)),
            format!("{} / {}", f(x.latency_us, 0), f(x.p99_us, 0)),
            f(x.jain, 3),
            match (cpu, r.algorithm.as_str()) {
                (false, "hpcc") => "HPCC: near-empty queue at high throughput".into(),
                (false, _) => "standing queue".into(),
                (true, law) => format!(
                    "slower drain, longer FCT (Soft-RoCE/SwCC FCT {}x)",
                    paper_ratio(law)
                ),
            },
        ]);
    }
    let (nic, cpu) = figures.split_at(SWCC_LAWS.len());
    let (d, t, h) = (&nic[0], &nic[1], &nic[2]);
    report.checks.push(Check::shape(
        "HPCC holds the smallest queue at the highest throughput of the three",
        h.mean_kb < d.mean_kb && h.mean_kb < t.mean_kb && h.gbps >= d.gbps && h.gbps >= t.gbps,
        format!(
            "mean queue HPCC {} KB, DCQCN {} KB, TIMELY {} KB; Gbit/s {}, {}, {}",
            f(h.mean_kb, 0),
            f(d.mean_kb, 0),
            f(t.mean_kb, 0),
            f(h.gbps, 1),
            f(d.gbps, 1),
            f(t.gbps, 1)
        ),
    ));
    let bigger: Vec<String> = SWCC_LAWS
        .iter()
        .zip(nic.iter().zip(cpu))
        .map(|(law, (n, c))| {
            let at = |x: &LawRun| {
                x.drain_us
                    .map_or("never".into(), |d| format!("{} us", f(d, 0)))
            };
            format!(
                "{law} {} -> {} KB, drained at {} -> {}",
                f(n.peak_kb, 0),
                f(c.peak_kb, 0),
                at(n),
                at(c)
            )
        })
        .collect();
    // A queue never drained counts as drained at the end of time.
    let drained = |x: &LawRun| x.drain_us.unwrap_or(f64::INFINITY);
    report.checks.push(Check::shape(
        "a CPU-class loop lets every law build a larger queue and drain it later",
        nic.iter()
            .zip(cpu)
            .all(|(n, c)| c.peak_kb > n.peak_kb && drained(c) > drained(n)),
        bigger.join(", "),
    ));
    let ratios: Vec<f64> = nic
        .iter()
        .zip(cpu)
        .map(|(n, c)| c.latency_us / n.latency_us)
        .collect();
    report.checks.push(Check::number(
        "the CPU-class loop's latency penalty in the paper's order (HPCC >= DCQCN > TIMELY)",
        ratios[2] >= ratios[0] && ratios[0] > ratios[1],
        format!(
            "mean message latency CPU / NIC loop: DCQCN {}x, TIMELY {}x, HPCC {}x; the paper's \
             Soft-RoCE / SwCC FCT 39x, 14x, 42x",
            f(ratios[0], 2),
            f(ratios[1], 2),
            f(ratios[2], 2)
        ),
    ));
    let stride = (runs[0].series.times_ns.len() / 400).max(1);
    report.plots.push((
        "swcc-fig12".into(),
        Chart {
            title: "SwCC Figs 12-13: queue at the congested port, 2 x 5 flows at 100 Gbit/s".into(),
            x_label: "time (us)".into(),
            y_label: "queue (KB)".into(),
            series: runs
                .iter()
                .map(|r| Series {
                    name: r.algorithm.clone(),
                    points: r
                        .series
                        .times_ns
                        .iter()
                        .zip(&r.series.max_queue_bytes)
                        .step_by(stride)
                        .map(|(t, q)| (*t as f64 / 1e3, *q as f64 / 1e3))
                        .collect(),
                })
                .collect(),
            ..Chart::default()
        },
    ));
    report.notes.push(format!(
        "SwCC runs this workload (each flow 2K messages of 2 KB) at 100 Gbit/s for DCQCN alone \
         (Fig 12, against a CX-5) and at 10 Gbit/s for the three laws against Soft-RoCE (Figs \
         13-14, base RTT 5 against 30 us); here all at 100 Gbit/s, the flows kept {depth} \
         messages deep for the run instead of 2K messages each, and the CPU-class loop is \
         {CPU_LOOP_US} us added to every event of the law, not Soft-RoCE's host stack (whose \
         low throughput inflates the paper's FCT ratios). HPCC's ordering against DCQCN and \
         TIMELY is HPCC's paper's headline (near-zero queues at high utilisation); SwCC gives \
         no numbers for queues."
    ));
    Ok(report)
}

/// SwCC Fig 14: Soft-RoCE's FCT over SwCC's, by law.
fn paper_ratio(law: &str) -> &'static str {
    match law {
        l if l.starts_with("dcqcn") => "39",
        l if l.starts_with("timely") => "14",
        _ => "42",
    }
}

/// SCR Fig 18's Swift: the fixed part of its target (SCR's base target of 1 us and one hop
/// of 2 us) and its flow-scaling range, with Swift's default flow-scaling bounds (windows of
/// 0.1 and 100 packets), as `fig18_scenario` in `scr.rs` sets them.
const SWIFT_FIXED_TARGET_US: f64 = 3.0;
const SWIFT_FS_RANGE_US: f64 = 2.0;
const SWIFT_FS_MIN_CWND: f64 = 0.1;
const SWIFT_FS_MAX_CWND: f64 = 100.0;

/// Swift's target delay, us, for a window of `cwnd` packets (Swift §3.5).
fn swift_target_us(cwnd: f64) -> f64 {
    let alpha =
        SWIFT_FS_RANGE_US / (1.0 / SWIFT_FS_MIN_CWND.sqrt() - 1.0 / SWIFT_FS_MAX_CWND.sqrt());
    let beta = -alpha / SWIFT_FS_MAX_CWND.sqrt();
    SWIFT_FIXED_TARGET_US + (alpha / cwnd.max(1e-9).sqrt() + beta).clamp(0.0, SWIFT_FS_RANGE_US)
}

/// The round trip Swift measures on an empty path in SCR Fig 18's star: four link delays,
/// and a data packet of `mtu` bytes and its ACK (both with Swift's timestamp header) each
/// stored and forwarded at the switch, at 100 Gbit/s.
fn swift_base_rtt_us(link_delay_ns: f64, mtu: usize) -> f64 {
    let ccx = sluice_wire::CcxLayout::Timestamps.wire_len();
    let data = sluice_wire::roce_link_len(false, sluice_wire::BTH_LEN + ccx + mtu + 4);
    let ack = sluice_wire::roce_link_len(false, sluice_wire::BTH_LEN + ccx + 4 + 4);
    let byte_ns = 8.0 / LINE_GBPS;
    (4.0 * link_delay_ns + 2.0 * (data + ack) as f64 * byte_ns) / 1e3
}

/// SCR Fig 18's second criterion (E19: "delay near its target"): for each (background,
/// Swift Gbit/s, mean queue in us) the delay Swift sees, the empty path's round trip plus
/// the queue, against the target at the window that rate and delay make, within 20%.
pub(super) fn swift_delay_near_target(
    points: &[(u32, f64, f64)],
    link_delay_ns: f64,
    mtu: usize,
) -> Check {
    let base = swift_base_rtt_us(link_delay_ns, mtu);
    let mut all_near = true;
    let detail: Vec<String> = points
        .iter()
        .map(|&(bg, gbps, queue_us)| {
            let delay = base + queue_us;
            let cwnd = gbps * 1e3 * delay / (mtu as f64 * 8.0);
            let target = swift_target_us(cwnd);
            all_near &= (delay / target - 1.0).abs() <= 0.2;
            format!(
                "beside {bg}: {} us against {} us",
                f(delay, 2),
                f(target, 2)
            )
        })
        .collect();
    Check::shape(
        "Swift's delay is near its target (within 20%)",
        all_near,
        format!(
            "{} (delay: the empty path's {} us plus the mean queue; target at the window this \
             rate and delay make)",
            detail.join(", "),
            f(base, 2)
        ),
    )
}

pub(super) const SCR_FIG20: Entry = Entry {
    name: "scr-fig20",
    source: "SCR Fig 20b/c (E21)",
    summary: "receiver-driven rate credits against 16 background senders added one by one, then receiver backpressure with MD/AI",
    run: fig20,
    needs: &[],
};

/// Background senders of Fig 20b, and each one's rate on the wire (Gbit/s).
pub(super) const FIG20_SENDERS: u32 = 16;
pub(super) const FIG20_BACKGROUND_GBPS: f64 = 5.0;

/// Fig 20b: host 0's flow under `rate-credit` towards host 17, and background senders 1 to
/// 16 (a fixed-rate law of their own, as SCR's BF2 senders run no SCR) joining one every
/// `step_us`.
fn fig20b_scenario(step_us: f64) -> String {
    let receiver = FIG20_SENDERS + 1;
    let mut text = format!(
        r#"# SCR Fig 20b: a flow under receiver-driven rate credits (host 0) and {FIG20_SENDERS}
# background senders at {FIG20_BACKGROUND_GBPS} Gbit/s each joining one every {step_us} us,
# all towards host {receiver}.
name = "scr-fig20b"
time_limit_us = {limit}
[topology]
kind = "star"
hosts = {hosts}
link_gbps = {LINE_GBPS}
link_delay_ns = 1000
[output]
sample_interval_us = 5
[[app]]
label = "credited"
tenant = 1
src = 0
dst = {receiver}
size = 65536
depth = 16
"#,
        limit = step_us * f64::from(FIG20_SENDERS + 1),
        hosts = FIG20_SENDERS + 2,
    );
    for k in 1..=FIG20_SENDERS {
        text.push_str(&format!(
            "[[app]]\nlabel = \"background{k}\"\ntenant = 2\nsrc = {k}\ndst = {receiver}\n\
             size = 65536\ndepth = 16\nstart_us = {}\n\
             cc = {{ name = \"static\", params = {{ rate_gbps = {FIG20_BACKGROUND_GBPS} }} }}\n",
            step_us * f64::from(k)
        ));
    }
    text.push_str("[[cc]]\nname = \"rate-credit\"\n");
    text
}

/// Fig 20c: one flow at line rate under `rate-credit` with backpressure when the receiver's
/// port passes 90% of its capacity.
fn fig20c_scenario(stop_us: f64) -> String {
    format!(
        r#"# SCR Fig 20c: one flow from host 0 to host 1 at line rate; the receiver sends
# backpressure (a CNP) past 90% of its port, on which the sender halves its rate, then adds
# 1 Gbit/s every 10 us.
name = "scr-fig20c"
time_limit_us = {stop_us}
[topology]
kind = "star"
hosts = 2
link_gbps = {LINE_GBPS}
link_delay_ns = 1000
[output]
sample_interval_us = 10
[[app]]
label = "credited"
src = 0
dst = 1
size = 65536
depth = 16
[[cc]]
name = "rate-credit"
params = {{ bp_threshold = 0.9 }}
"#
    )
}

/// The mean over samples in (from_us, to_us] of app queue pair `app`'s payload Gbit/s.
pub(super) fn app_mean(r: &RunResult, app: usize, from_us: f64, to_us: f64) -> f64 {
    let s = &r.series;
    let n = r.apps.len();
    let v: Vec<f64> = s
        .times_ns
        .iter()
        .enumerate()
        .filter(|(_, t)| (**t as f64) > from_us * 1e3 && (**t as f64) <= to_us * 1e3)
        .map(|(i, _)| s.app_bps[i * n + app] / 1e9)
        .collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The slope of the least-squares line through `points`.
pub(super) fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    sxy / sxx.max(1e-12)
}

fn fig20(scale: Scale) -> Result<Report, String> {
    let (step_us, c_stop_us) = match scale {
        Scale::Quick => (60.0, 1000.0),
        Scale::Full => (200.0, 3000.0),
    };
    let mut report = Report::default();
    let mut runs = simulate_all(
        &mut report,
        vec![
            ("scr-fig20b".into(), fig20b_scenario(step_us)),
            ("scr-fig20c".into(), fig20c_scenario(c_stop_us)),
        ],
    )?;
    let c = runs
        .pop()
        .and_then(|mut r| r.pop())
        .ok_or("scr-fig20c: no run")?;
    let b = runs
        .pop()
        .and_then(|mut r| r.pop())
        .ok_or("scr-fig20b: no run")?;
    let seen = fig20_checks(
        &mut report,
        &b,
        &c,
        step_us,
        &Fig20Words {
            flow: "credited flow",
            port: "the port",
            queue: "a small receiver queue",
            backpressure: "backpressure",
            paper: "paper",
        },
    );
    report.plots.push((
        "scr-fig20".into(),
        fig20_chart(
            "SCR Fig 20: receiver-driven rate credits, then backpressure",
            &b,
            [
                "credited flow (20b)",
                "background (20b)",
                "one flow with backpressure (20c)",
            ],
            &seen.rates,
        ),
    ));
    report.notes.push(format!(
        "SCR adds a sender every 5 s; here every {step_us} us. SCR's credit is a rate the \
         sender keeps; here the receiver grants that rate's bytes every 10 us over Sluice's \
         credit channel and the sender paces at it (docs/control.md). The credits fill 95% of \
         the port, so that a port delivering all it can does not hide a queue; SCR does not \
         say how its receiver avoids that. Backpressure is a CNP; SCR gives neither its \
         trigger nor its MD/AI constants (here: 90% of the port, a halving, 1 Gbit/s per 10 \
         us). Rates are payload; the background's 5 Gbit/s is on the wire."
    ));
    Ok(report)
}

/// How Fig 20's checks name the credited flow and its port (`scr-fig20`: a WRITE-like flow;
/// `scr-fig20-read`: a READ, whose receiver is the requester).
pub(super) struct Fig20Words<'a> {
    pub(super) flow: &'a str,
    pub(super) port: &'a str,
    pub(super) queue: &'a str,
    pub(super) backpressure: &'a str,
    pub(super) paper: &'a str,
}

/// What `fig20_checks` read off the runs, for what a caller adds.
pub(super) struct Fig20Seen {
    /// The backpressure run's payload rate, (us, Gbit/s).
    pub(super) rates: Vec<(f64, f64)>,
    /// The joins run's peak queue at the receiver's port, bytes.
    pub(super) peak_queue: f64,
}

/// Fig 20's table and checks from the joins run `b` (senders joining every `step_us`) and
/// the backpressure run `c`: the credited flow gives up what the background takes, the port
/// stays busy with a small queue, the flow beside 16 senders against the derived rate, and
/// the MD/AI sawtooth.
pub(super) fn fig20_checks(
    report: &mut Report,
    b: &RunResult,
    c: &RunResult,
    step_us: f64,
    words: &Fig20Words<'_>,
) -> Fig20Seen {
    // The payload a full port carries: 1 KiB packets (the scenario's MTU) in their frames.
    let payload_share = 1024.0 / sluice_wire::roce_link_len(false, 12 + 1024 + 4) as f64;
    let capacity = LINE_GBPS * payload_share;
    let flow = words.flow;
    report.table = Table::new(&[
        "background senders",
        &format!("{flow} (Gbit/s)"),
        "background (Gbit/s)",
        "port used",
        "C minus the background (Gbit/s)",
        words.paper,
    ]);
    let mut credited = Vec::new();
    let mut background = Vec::new();
    let mut used = Vec::new();
    for k in 0..=FIG20_SENDERS {
        // The second half of each step: after the credit has caught up with the join.
        let (from, to) = (
            step_us * (f64::from(k) + 0.5),
            step_us * (f64::from(k) + 1.0),
        );
        let own = app_mean(b, 0, from, to);
        // (+ 0.0: an empty sum of f64 is -0.0.)
        let bg: f64 = (1..=k as usize)
            .map(|a| app_mean(b, a, from, to))
            .sum::<f64>()
            + 0.0;
        let share = (own + bg) / capacity;
        report.table.row(vec![
            k.to_string(),
            f(own, 1),
            f(bg, 1),
            format!("{}%", f(share * 100.0, 0)),
            f(capacity - bg, 1),
            format!(
                "about {} (derived: 100 - 5k on the wire)",
                f(LINE_GBPS - FIG20_BACKGROUND_GBPS * f64::from(k), 0)
            ),
        ]);
        credited.push((f64::from(k), own));
        background.push((f64::from(k), bg));
        used.push(share);
    }
    let (s_own, s_bg) = (slope(&credited), slope(&background));
    report.checks.push(Check::shape(
        &format!("the {flow} gives up what each background sender takes (slopes within 20%)"),
        s_bg > 0.0 && ((-s_own) / s_bg - 1.0).abs() <= 0.2,
        format!(
            "{} Gbit/s per sender for the {flow}, {} for the background",
            f(s_own, 2),
            f(s_bg, 2)
        ),
    ));
    let least = used.iter().copied().fold(f64::INFINITY, f64::min);
    report.checks.push(Check::shape(
        &format!(
            "{} stays busy at every step (at least 85% of its payload capacity)",
            words.port
        ),
        least >= 0.85,
        format!("at least {}% used", f(least * 100.0, 0)),
    ));
    let q = &b.series.max_queue_bytes;
    let mean_q = q.iter().sum::<u64>() as f64 / q.len().max(1) as f64;
    let peak_queue = q.iter().copied().max().unwrap_or(0) as f64;
    report.checks.push(Check::shape(
        &format!("{} (mean under 10 KB, peak under 100 KB)", words.queue),
        mean_q < 10e3 && peak_queue < 100e3,
        format!(
            "mean {} KB, peak {} KB",
            f(mean_q / 1e3, 1),
            f(peak_queue / 1e3, 0)
        ),
    ));
    let last = credited.last().map_or(0.0, |p| p.1) / payload_share;
    let derived = LINE_GBPS - FIG20_BACKGROUND_GBPS * f64::from(FIG20_SENDERS);
    report.checks.push(Check::number(
        &format!("the {flow} beside 16 senders, on the wire"),
        (last / derived - 1.0).abs() <= 0.25,
        format!(
            "{} Gbit/s against the derived {} (the credits fill 95% of the port)",
            f(last, 1),
            f(derived, 0)
        ),
    ));
    // Fig 20c: the sawtooth of the backpressure run's payload rate.
    let rates: Vec<(f64, f64)> = c
        .series
        .times_ns
        .iter()
        .enumerate()
        .map(|(i, t)| (*t as f64 / 1e3, c.series.app_bps[i] / 1e9))
        .collect();
    let (cuts, climbs) = cuts_and_climbs(&rates);
    report.checks.push(Check::shape(
        &format!(
            "{}: an MD/AI sawtooth (at least two cuts, the rate climbing between)",
            words.backpressure
        ),
        cuts.len() >= 2 && climbs + 1 >= cuts.len(),
        format!(
            "{} cuts, at {} us; climbing between {} of {} pairs",
            cuts.len(),
            cuts.iter()
                .map(|&i| f(rates[i].0, 0))
                .collect::<Vec<_>>()
                .join(", "),
            climbs,
            cuts.len().saturating_sub(1)
        ),
    ));
    Fig20Seen { rates, peak_queue }
}

/// Indices of samples at most 70% of the one before (a cut), and how many pairs of
/// consecutive cuts have the rate climbing between them (the sample before the later cut
/// at least 1.3 times the one after the earlier).
fn cuts_and_climbs(rates: &[(f64, f64)]) -> (Vec<usize>, usize) {
    let cuts: Vec<usize> = (1..rates.len())
        .filter(|&i| rates[i].1 > 0.0 && rates[i].1 <= 0.7 * rates[i - 1].1)
        .collect();
    let climbs = cuts
        .windows(2)
        .filter(|w| rates[w[1] - 1].1 >= rates[w[0]].1 * 1.3)
        .count();
    (cuts, climbs)
}

/// Fig 20's plot: the credited flow and the background through the joins run `b`, and the
/// backpressure run's `sawtooth`; `names` in that order.
pub(super) fn fig20_chart(
    title: &str,
    b: &RunResult,
    names: [&str; 3],
    sawtooth: &[(f64, f64)],
) -> Chart {
    let stride = (b.series.times_ns.len() / 400).max(1);
    let n = b.apps.len();
    let line = |name: &str, pick: &dyn Fn(usize) -> f64| Series {
        name: name.into(),
        points: b
            .series
            .times_ns
            .iter()
            .enumerate()
            .step_by(stride)
            .map(|(i, t)| (*t as f64 / 1e3, pick(i)))
            .collect(),
    };
    let credited = line(names[0], &|i| b.series.app_bps[i * n] / 1e9);
    let background = line(names[1], &|i| {
        (1..n).map(|a| b.series.app_bps[i * n + a]).sum::<f64>() / 1e9
    });
    let saw = Series {
        name: names[2].into(),
        points: sawtooth.iter().step_by(stride).copied().collect(),
    };
    Chart {
        title: title.into(),
        x_label: "time (us)".into(),
        y_label: "Gbit/s (payload)".into(),
        series: vec![credited, background, saw],
        ..Chart::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_is_a_drop_to_70_percent_and_a_climb_is_30_percent_up() {
        let r = |v: &[f64]| -> Vec<(f64, f64)> {
            v.iter().enumerate().map(|(i, &x)| (i as f64, x)).collect()
        };
        // Two halvings with a climb between them.
        let (cuts, climbs) = cuts_and_climbs(&r(&[80.0, 40.0, 50.0, 60.0, 30.0]));
        assert_eq!((cuts, climbs), (vec![1, 4], 1));
        // A dip to 75% is no cut; a flat rate between cuts is no climb.
        let (cuts, climbs) = cuts_and_climbs(&r(&[80.0, 60.0, 30.0, 30.0, 15.0]));
        assert_eq!((cuts, climbs), (vec![2, 4], 0));
    }

    #[test]
    fn swifts_target_spans_its_flow_scaling_range() {
        assert!((swift_target_us(0.1) - 5.0).abs() < 1e-9);
        assert!((swift_target_us(100.0) - 3.0).abs() < 1e-9);
        assert!((swift_target_us(1000.0) - 3.0).abs() < 1e-9);
        let mid = swift_target_us(10.0);
        assert!(mid > 3.0 && mid < 5.0, "{mid}");
    }

    #[test]
    fn the_empty_paths_round_trip_is_propagation_and_two_store_and_forwards() {
        // 1024 B of payload: BTH 12 + CCX 20 + 1024 + ICRC 4, UDP 8, IPv4 20, Ethernet 14 +
        // FCS 4 + preamble 8 + gap 12 = 1126 B; the ACK 40 + 66 = 106 B. At 100 Gbit/s,
        // 2 x (1126 + 106) x 0.08 ns = 197.12 ns, plus 4 x 250 ns.
        assert!((swift_base_rtt_us(250.0, 1024) - 1.19712).abs() < 1e-9);
    }

    #[test]
    fn a_delay_far_from_the_target_fails_the_check() {
        // 72 Gbit/s at the base RTT plus 1.9 us: near 3.1 us of target.
        assert!(swift_delay_near_target(&[(20, 72.0, 1.9)], 250.0, 1024).passed);
        assert!(!swift_delay_near_target(&[(20, 72.0, 0.2)], 250.0, 1024).passed);
        assert!(!swift_delay_near_target(&[(20, 72.0, 6.0)], 250.0, 1024).passed);
    }
}
