//! Homa's own headline as a check (issue 36): web search flow sizes at 80% load on the
//! fat-tree, Homa (with the switches' strict-priority queues) against DCQCN and DCTCP on the
//! same flows, on a lossy fabric (Homa's paper's) and a lossless one (PFC). Homa (Montazeri
//! et al., SIGCOMM 2018) shows short messages keeping a low tail slowdown under heavy load
//! where sender-driven laws queue them behind long flows; the shape that counts here is
//! Homa's short-flow p99 slowdown well below DCQCN's and DCTCP's. docs/repro.md has the run.

use sluice_sim::RunResult;
use sluice_sim::plot::{Chart, Series};
use sluice_sim::report::Slowdown;

use super::{Check, Entry, Report, Scale, Table, f, simulate_all};

pub(super) const WEBSEARCH: Entry = Entry {
    name: "homa-websearch",
    source: "Homa (SIGCOMM 2018) headline, issue 36",
    summary: "web search at 80% load on the fat-tree, lossy and lossless: Homa with 8 strict priorities against DCQCN and DCTCP, short-flow p50/p99 slowdown",
    run: websearch,
    needs: &[],
};

/// The laws compared, Homa first; the checks compare `homa` with the last two.
const LAWS: [&str; 3] = ["homa", "dcqcn", "dctcp"];
/// The laws Homa's short-flow tail is checked against.
const OTHERS: [&str; 2] = ["dcqcn", "dctcp"];
/// Homa's run beside `homa` with its paper's own priority split for this workload (its
/// unscheduled cutoffs from the flow-size CDF, overcommitment = scheduled levels), reported.
const HOMA_PAPER: &str = "homa-paper";
/// Flows below one bandwidth-delay product count as short: 100 Gbit/s times 12 us, the
/// propagation part of the fat-tree's longest round trip (6 links of 1 us each way).
const BDP_BYTES: u64 = 150_000;
/// "Well below": Homa's short-flow p99 at most this share of each other law's.
const WELL_BELOW: f64 = 0.5;
/// Size buckets of the plot (upper bounds, bytes): the web search CDF's own points.
const PLOT_BUCKETS: [u64; 10] = [
    10_000, 20_000, 50_000, 100_000, 200_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
    30_000_001,
];

/// The two fabrics, by name: Homa's own (lossy: its paper's switches have priorities and no
/// PFC) and the lossless one DCQCN is built for, with per-priority PFC (each priority's
/// data paused on its own, as 802.1Qbb: one lossless class would stop Homa's short
/// messages behind paused long ones; DCQCN's and DCTCP's data are all priority 0, for
/// which the two are the same run).
const FABRICS: [(&str, bool); 2] = [("lossy", false), ("lossless", true)];

/// The scenario: the HPCC paper's fat-tree (320 hosts, 100/400 Gbit/s, 1 us links; at the
/// quick scale 32 hosts of the same shape) with DCQCN's ECN marking, PFC if `lossless`, 8
/// strict-priority queues per port (only Homa's packets carry priorities: the others all
/// land in the lowest queue, the switch as without priorities), web search at 80% load.
/// Homa's hosts order their queue pairs shortest remaining message first (`srpt`), as
/// Homa's senders do; DCQCN's and DCTCP's keep the engine's round robin.
fn scenario(scale: Scale, fabric: &str, lossless: bool) -> String {
    let (topology, duration_us, limit_us) = match scale {
        Scale::Quick => (
            "pods = 2\ntors_per_pod = 2\naggs_per_pod = 2\ncores = 2\nhosts_per_tor = 8\n",
            300,
            20_000,
        ),
        Scale::Full => ("", 2_000, 200_000),
    };
    let pfc = if lossless {
        "pfc = { xoff_bytes = 400000, xon_bytes = 300000, per_priority = true }\n"
    } else {
        ""
    };
    let mut text = format!(
        r#"# Homa's headline as a check: web search at 80% load on the fat-tree, Homa with
# 8 strict priorities against DCQCN and DCTCP on the same flows.
name = "homa-websearch-{fabric}"
seed = 1
time_limit_us = {limit_us}
[topology]
kind = "fat-tree"
{topology}[switch]
buffer_bytes = 32000000
routing = "ecmp"
priorities = 8
ecn = {{ kmin_bytes = 100000, kmax_bytes = 400000, pmax = 0.2 }}
{pfc}[transport]
mtu = 1024
ack_every_packets = 1
[workload]
kind = "poisson"
cdf = "websearch"
load = 0.8
duration_us = {duration_us}
[output]
sample_interval_us = 20
"#
    );
    for law in LAWS {
        text.push_str(&format!("[[cc]]\nname = \"{law}\"\n"));
        if law == "homa" {
            text.push_str("scheduler = { name = \"srpt\" }\n");
        }
    }
    let (cutoffs, overcommit) = paper_split();
    text.push_str(&format!(
        "[[cc]]\nname = \"homa\"\nlabel = \"{HOMA_PAPER}\"\nscheduler = {{ name = \"srpt\" }}\nparams = {{ unsched_cutoffs = \"{cutoffs}\", overcommit = {overcommit} }}\n"
    ));
    text
}

/// Homa's paper's priority split for web search at the law's RTTbytes: the unscheduled
/// cutoffs from the CDF (`sluice_control::homa::workload_cutoffs`) as `unsched_cutoffs`
/// text, and the overcommitment its paper pairs with them (one message per scheduled level,
/// at most the law's 8).
fn paper_split() -> (String, usize) {
    use sluice_control::homa::{HomaParams, MAX_OVERCOMMIT, workload_cutoffs};
    let p = HomaParams::default();
    let rtt_bytes = (p.link_gbps * 1e9 / 8.0 * p.base_rtt_us * 1e-6) as u64;
    let cdf = sluice_sim::workload::Cdf::builtin("websearch").expect("a builtin CDF");
    let cutoffs = workload_cutoffs(cdf.points(), rtt_bytes, p.priorities);
    let scheduled = usize::from(p.priorities) - (cutoffs.len() + 1);
    let text: Vec<String> = cutoffs.iter().map(u32::to_string).collect();
    (text.join("/"), scheduled.min(MAX_OVERCOMMIT))
}

/// Slowdowns of `r`'s completed flows whose size `keep` says.
fn slowdowns(r: &RunResult, keep: impl Fn(u64) -> bool) -> Option<Slowdown> {
    Slowdown::of(
        r.flows
            .iter()
            .filter(|fl| keep(fl.bytes))
            .filter_map(|fl| fl.slowdown())
            .collect(),
    )
}

fn websearch(scale: Scale) -> Result<Report, String> {
    let mut report = Report {
        table: Table::new(&[
            "fabric",
            "law",
            "flows done",
            "unfinished",
            "short (<1 BDP) p50",
            "short p99",
            "<10 KB p99",
            "all p50",
            "all p99",
            "pauses",
            "drops",
        ]),
        ..Report::default()
    };
    let scenarios = FABRICS
        .iter()
        .map(|&(fabric, lossless)| {
            (
                format!("homa-websearch-{fabric}"),
                scenario(scale, fabric, lossless),
            )
        })
        .collect();
    let results = simulate_all(&mut report, scenarios)?;
    for (&(fabric, lossless), runs) in FABRICS.iter().zip(&results) {
        fabric_report(&mut report, fabric, lossless, runs);
    }
    let (cutoffs, overcommit) = paper_split();
    let (levels, shown) = match cutoffs.as_str() {
        "" => (1, "none".to_string()),
        c => (c.split('/').count() + 1, c.to_string()),
    };
    report.notes.push(format!(
        "short flows are those under {BDP_BYTES} bytes (100 Gbit/s x 12 us). Both fabrics \
         mark with DCQCN's RED (100-400 KB) for all the laws, as the HPCC example runs them \
         (Homa ignores the marks). Homa's hosts send shortest remaining message first (the \
         `srpt` scheduler), the others' round robin. `homa` has the law's default \
         unscheduled cutoffs (1/10/100 KB: 4 unscheduled levels, overcommitment 4); \
         `{HOMA_PAPER}` its paper's split for this CDF ({levels} unscheduled level(s), \
         cutoffs {shown}, overcommitment {overcommit}), reported, not checked. Homa's paper \
         ran lossy switches, so the shape checks are enforced on the lossy fabric; on the \
         lossless one (per-priority PFC) they are reported",
    ));
    Ok(report)
}

/// The rows, checks and plot of one fabric's runs.
fn fabric_report(report: &mut Report, fabric: &str, lossless: bool, runs: &[RunResult]) {
    let mut short_p99 = Vec::new();
    let mut plot = Vec::new();
    for r in runs {
        let done = r.flows.iter().filter(|fl| fl.slowdown().is_some()).count();
        let short = slowdowns(r, |b| b < BDP_BYTES);
        let tiny = slowdowns(r, |b| b < 10_000);
        let all = slowdowns(r, |_| true);
        let cell = |s: Option<Slowdown>, pick: fn(&Slowdown) -> f64| {
            s.map_or("-".to_string(), |s| f(pick(&s), 2))
        };
        report.table.row(vec![
            fabric.to_string(),
            r.algorithm.clone(),
            done.to_string(),
            (r.flows.len() - done).to_string(),
            cell(short, |s| s.p50),
            cell(short, |s| s.p99),
            cell(tiny, |s| s.p99),
            cell(all, |s| s.p50),
            cell(all, |s| s.p99),
            r.counters.pfc_pauses.to_string(),
            r.counters.drops.to_string(),
        ]);
        short_p99.push((r.algorithm.clone(), short.map(|s| s.p99)));
        let mut lower = 0;
        let points = PLOT_BUCKETS
            .iter()
            .filter_map(|&upper| {
                let s = slowdowns(r, |b| b >= lower && b < upper);
                lower = upper;
                Some((upper.min(30_000_000) as f64, s?.p99))
            })
            .collect();
        plot.push(Series {
            name: r.algorithm.clone(),
            points,
        });
    }
    // Shape on Homa's own fabric, reported on the other.
    let check = if lossless {
        Check::number
    } else {
        Check::shape
    };
    if let Some(homa) = runs.iter().find(|r| r.algorithm == "homa") {
        let left = homa
            .flows
            .iter()
            .filter(|fl| fl.slowdown().is_none())
            .count();
        report.checks.push(check(
            &format!(
                "{fabric}: every flow completes under Homa (its grants and RESENDs strand none)"
            ),
            left == 0,
            format!("{left} of {} unfinished", homa.flows.len()),
        ));
    }
    let homa = short_p99
        .iter()
        .find(|(l, _)| l == "homa")
        .and_then(|(_, p)| *p);
    for (law, p) in short_p99
        .iter()
        .filter(|(l, _)| OTHERS.contains(&l.as_str()))
    {
        let passed = matches!((homa, p), (Some(h), Some(o)) if h <= WELL_BELOW * o);
        report.checks.push(check(
            &format!("{fabric}: Homa's short-flow p99 slowdown well below {law}'s"),
            passed,
            format!(
                "homa {} against {law} {} (at most {WELL_BELOW} x)",
                homa.map_or("-".into(), |h| f(h, 2)),
                p.map_or("-".into(), |o| f(o, 2)),
            ),
        ));
    }
    let name = if lossless {
        "homa-websearch-lossless"
    } else {
        "homa-websearch"
    };
    report.plots.push((
        name.into(),
        Chart {
            title: format!("Web search at 80% load, {fabric}: p99 FCT slowdown by flow size"),
            x_label: "flow size, bytes (bucket upper bound)".into(),
            y_label: "p99 FCT slowdown".into(),
            x_log: true,
            y_log: true,
            series: plot,
        },
    ));
}
