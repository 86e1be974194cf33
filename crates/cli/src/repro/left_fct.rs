//! LEFT Figs 4-5 (Huang et al., APNet 2024, §4.1): flow completion times on the paper's
//! dragonfly, per-packet and per-flowlet load balancing with LEFT and with IRN (the per-QP
//! bitmap with selective repeat), against per-flow ECMP. The paper's workload (an HPL trace)
//! is not public: a collective (all-to-all) and web search stand in for it, and a group-to-
//! group shift loads the global links (the pattern of LEFT's Fig 1, at full scale), and
//! web search with every host's flows sent to its counterpart in the next group loads them
//! with web search's sizes and arrivals; an HPL-like pattern (the `hpl` workload: panel
//! broadcasts around process rows, ring row swaps down columns) is the fifth. The shift runs again over Valiant paths, and web
//! search and the shift over the dragonfly's minimal routes alone (only the global links
//! joining two groups; the main rows' hop-count shortest paths also cross third groups).

use sluice_sim::RunResult;
use sluice_sim::plot::{Chart, Series};

use super::{Check, Entry, Report, Scale, Table, f};

pub(super) const FIG45: Entry = Entry {
    name: "left-fig45",
    source: "LEFT Figs 4-5",
    summary: "dragonfly FCT: per-packet and per-flowlet with LEFT and IRN against per-flow ECMP, all-to-all, web search and group shift",
    run: fig45,
    needs: &[],
};

/// The paper's §4.1 numbers: per-packet LEFT against per-flow (avg, p99), and LEFT against
/// IRN per packet and per flowlet (avg, p99), as FCT changes.
const PAPER_LEFT_VS_FLOW: (f64, f64) = (-0.281, -0.482);
const PAPER_LEFT_VS_IRN_PACKET: (f64, f64) = (-0.20, -0.267);
const PAPER_LEFT_VS_IRN_FLOWLET: (f64, f64) = (-0.12, -0.081);

/// How one configuration balances load and reorders.
struct Config {
    label: &'static str,
    routing: &'static str,
    tracker: &'static str,
}

/// The paper's five, in its order; index 0 is the baseline.
const CONFIGS: [Config; 5] = [
    Config {
        label: "per-flow ECMP",
        routing: "ecmp",
        tracker: "bitmap",
    },
    Config {
        label: "per-packet, IRN",
        routing: "spray",
        tracker: "bitmap",
    },
    Config {
        label: "per-packet, LEFT",
        routing: "spray",
        tracker: "left",
    },
    Config {
        label: "per-flowlet, IRN",
        routing: "flowlet",
        tracker: "bitmap",
    },
    Config {
        label: "per-flowlet, LEFT",
        routing: "flowlet",
        tracker: "left",
    },
];
const PER_FLOW: usize = 0;
const PACKET_IRN: usize = 1;
const PACKET_LEFT: usize = 2;
const FLOWLET_IRN: usize = 3;
const FLOWLET_LEFT: usize = 4;

/// The configurations the group shift runs again over Valiant paths (`[switch]
/// nonminimal_paths`), all with the same paths so that the comparison is fair; the first is
/// their baseline.
const VALIANT_CONFIGS: [usize; 3] = [PER_FLOW, PACKET_LEFT, FLOWLET_LEFT];

/// The configurations run again with the dragonfly's minimal routes alone (`[switch] routes
/// = "dragonfly-minimal"`: between two groups only the links joining them), on the
/// workloads of [`MINIMAL_WORKLOADS`]; the first is their baseline.
const MINIMAL_CONFIGS: [usize; 3] = [PER_FLOW, PACKET_IRN, PACKET_LEFT];

/// The workloads by index, in the table's order.
const WEB_SEARCH: usize = 1;
const GROUP_SHIFT: usize = 2;
const WEB_SEARCH_TO_NEXT_GROUP: usize = 3;
/// The HPL-like pattern (the `hpl` workload): panel broadcasts around each process row, ring
/// row swaps down each column, on a grid whose rows are groups and columns span them all.
const HPL: usize = 4;
/// Web search and the group shift. Not the all-to-all, which is bound by its receivers'
/// links, so its routes cannot matter (measured at 40 x 13 x 2, docs/repro.md); nor web
/// search to the next group, which would offer the 2 global links joining two groups 13
/// times their capacity at full scale (52 hosts at half of 200 Gbit/s against 400 Gbit/s:
/// flows were still unfinished at 10 ms in every configuration).
const MINIMAL_WORKLOADS: [usize; 2] = [WEB_SEARCH, GROUP_SHIFT];

/// Which routes the switches take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Paths {
    /// Hop-count shortest paths (the main rows): no line, so those scenarios read as they
    /// did before the other two existed.
    Shortest,
    /// This many Valiant paths per host pair besides the minimal ones.
    Valiant(u32),
    /// The dragonfly's minimal routes alone.
    DragonflyMinimal,
}

impl Paths {
    /// The scenario's `[switch]` line for these routes, if any.
    fn line(self) -> String {
        match self {
            Paths::Shortest => String::new(),
            Paths::Valiant(n) => format!("nonminimal_paths = {n}\n"),
            Paths::DragonflyMinimal => "routes = \"dragonfly-minimal\"\n".into(),
        }
    }
}

/// The fabric: the paper's (80 groups of 26 routers, 2 hosts each, 2 global links between
/// every pair of groups, 200 Gbit/s, 1 us) at full scale, 4 groups of 4 at quick scale.
struct Fabric {
    groups: u32,
    routers: u32,
}

/// The stand-ins for the HPL trace, and the shift that loads the global links, as
/// `[workload]` tables.
struct Workload {
    label: &'static str,
    table: String,
}

/// The scenario of workload `w` under configuration `c` over `paths`.
fn scenario(fabric: &Fabric, w: &Workload, c: &Config, time_limit_us: f64, paths: Paths) -> String {
    let paths = paths.line();
    format!(
        r#"# LEFT Figs 4-5: {workload} on a dragonfly of {groups} groups x {routers} routers x 2
# hosts; {label}.
name = "left-fig45"
time_limit_us = {time_limit_us}
[topology]
kind = "dragonfly"
groups = {groups}
routers_per_group = {routers}
hosts_per_router = 2
links_per_group_pair = 2
host_link_gbps = 200
link_delay_ns = 1000
[switch]
routing = "{routing}"
{paths}flowlet_gap_us = 2
pfc = {{ xoff_bytes = 200000, xon_bytes = 150000 }}
ecn = {{ kmin_bytes = 100000, kmax_bytes = 400000, pmax = 0.2 }}
[transport]
recovery = "selective-repeat"
[policies]
tracker = {{ name = "{tracker}" }}
[reorder_cost]
[workload]
{table}
[[cc]]
name = "dcqcn"
"#,
        workload = w.label,
        groups = fabric.groups,
        routers = fabric.routers,
        label = c.label,
        routing = c.routing,
        tracker = c.tracker,
        table = w.table,
    )
}

/// Average and nearest-rank 99th percentile of the completed flows' FCTs in us, and how
/// many completed.
fn fcts(run: &RunResult) -> (f64, f64, usize) {
    let mut us: Vec<f64> = run
        .flows
        .iter()
        .filter_map(|r| r.fct_ns())
        .map(|ns| ns as f64 / 1e3)
        .collect();
    if us.is_empty() {
        return (f64::NAN, f64::NAN, 0);
    }
    us.sort_by(f64::total_cmp);
    let avg = us.iter().sum::<f64>() / us.len() as f64;
    let k = ((0.99 * us.len() as f64).ceil() as usize).clamp(1, us.len());
    (avg, us[k - 1], us.len())
}

/// `x` against `base` as a signed percentage change.
fn change(x: f64, base: f64) -> String {
    format!("{:+.1}%", (x / base - 1.0) * 100.0)
}

/// (avg, p99) FCTs `x` against `base` as fractional changes.
fn vs(x: (f64, f64), base: (f64, f64)) -> (f64, f64) {
    (x.0 / base.0 - 1.0, x.1 / base.1 - 1.0)
}

/// The evidence of a check that (avg, p99) FCTs `left` are below `base`'s.
fn below(left: (f64, f64), base: (f64, f64)) -> String {
    format!(
        "avg {} against {} us ({}), p99 {} against {} us ({})",
        f(left.0, 1),
        f(base.0, 1),
        change(left.0, base.0),
        f(left.1, 1),
        f(base.1, 1),
        change(left.1, base.1)
    )
}

/// The number check of `label`'s comparison `name`: its (avg, p99) change `got` within 10
/// points of the paper's `want` in both.
fn paper_check(label: &str, name: &str, got: (f64, f64), want: (f64, f64)) -> Check {
    Check::number(
        &format!(
            "{label}: {name} {}% avg / {}% p99 (paper, within 10 points)",
            f(want.0 * 100.0, 1),
            f(want.1 * 100.0, 1)
        ),
        (got.0 - want.0).abs() <= 0.1 && (got.1 - want.1).abs() <= 0.1,
        format!("{}% / {}%", f(got.0 * 100.0, 1), f(got.1 * 100.0, 1)),
    )
}

/// One row of the table: workload `label`, configuration `k`'s `run` with its (avg, p99,
/// completed) FCTs, compared with `base` (avg, p99).
fn table_row(
    label: &str,
    k: usize,
    run: &RunResult,
    (avg, p99, done): (f64, f64, usize),
    base: (f64, f64),
) -> Vec<String> {
    let paper = match k {
        PACKET_LEFT => format!(
            "{}% / {}%",
            f(PAPER_LEFT_VS_FLOW.0 * 100.0, 1),
            f(PAPER_LEFT_VS_FLOW.1 * 100.0, 1)
        ),
        _ => "-".into(),
    };
    vec![
        label.to_string(),
        CONFIGS[k].label.to_string(),
        format!("{done} of {}", run.flows.len()),
        f(avg, 1),
        f(p99, 1),
        change(avg, base.0),
        change(p99, base.1),
        paper,
        run.counters.retransmissions.to_string(),
        run.counters
            .receive
            .as_ref()
            .map_or(0, |r| r.work.records)
            .to_string(),
        run.counters.pfc_pauses.to_string(),
    ]
}

fn fig45(scale: Scale) -> Result<Report, String> {
    // The group shift (the last workload) runs again over this many Valiant paths: as many
    // as the quick fabric's 4 groups allow, and 8 at full scale (as measured at 40 x 13 x 2).
    let (fabric, workloads, time_limit_us, nonminimal) = match scale {
        Scale::Quick => (
            Fabric {
                groups: 4,
                routers: 4,
            },
            vec![
                Workload {
                    label: "all-to-all, 8 hosts, 16 KB",
                    table: "kind = \"all-to-all\"\nbytes = 16384\nparticipants = 8".into(),
                },
                Workload {
                    label: "web search, load 0.3, 20 us",
                    table: "kind = \"poisson\"\ncdf = \"websearch\"\nload = 0.3\nduration_us = 20"
                        .into(),
                },
                Workload {
                    label: "group shift, 16 KB",
                    // A group's 8 hosts: every host sends to its counterpart a group on.
                    table: "kind = \"shift\"\nbytes = 16384\nby = 8".into(),
                },
                Workload {
                    label: "web search to the next group, load 0.5, 60 us",
                    table: "kind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\nduration_us = 60\nby = 8"
                        .into(),
                },
                Workload {
                    label: "HPL-like, 4 x 8 grid, 16 KB panels and swaps, 2 iterations",
                    // A process row per group (its 8 hosts), a column across the 4 groups.
                    table: "kind = \"hpl\"\np = 4\nq = 8\npanel_bytes = 16384\nswap_bytes = 16384\niterations = 2"
                        .into(),
                },
            ],
            2_000.0,
            2,
        ),
        Scale::Full => (
            Fabric {
                groups: 80,
                routers: 26,
            },
            vec![
                Workload {
                    label: "all-to-all, 160 hosts, 64 KB",
                    table: "kind = \"all-to-all\"\nbytes = 65536\nparticipants = 160".into(),
                },
                Workload {
                    label: "web search, load 0.5, 50 us",
                    table: "kind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\nduration_us = 50"
                        .into(),
                },
                Workload {
                    label: "group shift, 64 KB",
                    // A group's 52 hosts: every host sends to its counterpart a group on,
                    // 52 flows over the 2 global links between the two groups.
                    table: "kind = \"shift\"\nbytes = 65536\nby = 52".into(),
                },
                Workload {
                    label: "web search to the next group, load 0.5, 50 us",
                    // Web search's sizes and arrivals, each host's flows to its counterpart
                    // a group on: the group pairs' global links carry all of it.
                    table: "kind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\nduration_us = 50\nby = 52"
                        .into(),
                },
                Workload {
                    label: "HPL-like, 80 x 52 grid, 64 KB panels and swaps, 4 iterations",
                    // A process row per group (its 52 hosts), a column across the 80 groups:
                    // each swap step crosses the global links from a group to the next.
                    table: "kind = \"hpl\"\np = 80\nq = 52\npanel_bytes = 65536\nswap_bytes = 65536\niterations = 4"
                        .into(),
                },
            ],
            // Web search's largest flows (30 MB) take 1.2 ms alone at line rate.
            10_000.0,
            8,
        ),
    };
    let mut report = Report {
        table: Table::new(&[
            "workload",
            "configuration",
            "flows done",
            "avg FCT us",
            "p99 FCT us",
            "avg vs per-flow",
            "p99 vs per-flow",
            "paper avg / p99",
            "retransmitted",
            "reordered (tracker records)",
            "PFC pauses",
        ]),
        ..Report::default()
    };
    let mut scenarios = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        for (k, c) in CONFIGS.iter().enumerate() {
            scenarios.push((
                format!("left-fig45-{i}-{k}"),
                scenario(&fabric, w, c, time_limit_us, Paths::Shortest),
            ));
        }
    }
    let shift = GROUP_SHIFT;
    for &k in &VALIANT_CONFIGS {
        scenarios.push((
            format!("left-fig45-{shift}-{k}-valiant"),
            scenario(
                &fabric,
                &workloads[shift],
                &CONFIGS[k],
                time_limit_us,
                Paths::Valiant(nonminimal),
            ),
        ));
    }
    for &i in &MINIMAL_WORKLOADS {
        for &k in &MINIMAL_CONFIGS {
            scenarios.push((
                format!("left-fig45-{i}-{k}-dfminimal"),
                scenario(
                    &fabric,
                    &workloads[i],
                    &CONFIGS[k],
                    time_limit_us,
                    Paths::DragonflyMinimal,
                ),
            ));
        }
    }
    let runs = super::simulate_all(&mut report, scenarios)?;
    // (avg, p99) per workload and configuration.
    let mut stats = vec![[(0.0, 0.0); CONFIGS.len()]; workloads.len()];
    let mut all_done = true;
    let mut retransmitted = vec![[0u64; CONFIGS.len()]; workloads.len()];
    let mut avg_bars: Vec<Series> = Vec::new();
    let mut next_group_bars: Vec<Series> = Vec::new();
    let mut hpl_bars: Vec<Series> = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        let mut points = Vec::new();
        for k in 0..CONFIGS.len() {
            let run = &runs[i * CONFIGS.len() + k][0];
            let (avg, p99, done) = fcts(run);
            all_done &= done == run.flows.len();
            stats[i][k] = (avg, p99);
            retransmitted[i][k] = run.counters.retransmissions;
            let base = stats[i][PER_FLOW];
            report
                .table
                .row(table_row(w.label, k, run, (avg, p99, done), base));
            points.push((k as f64, avg / base.0));
        }
        let p99s = (0..CONFIGS.len())
            .map(|k| (k as f64, stats[i][k].1 / stats[i][PER_FLOW].1))
            .collect();
        let bars = [
            Series {
                name: format!("{}: avg FCT / per-flow's", w.label),
                points,
            },
            Series {
                name: format!("{}: p99 FCT / per-flow's", w.label),
                points: p99s,
            },
        ];
        // The first chart has as many series as it can tell apart: the last workload has a
        // chart of its own.
        if i == WEB_SEARCH_TO_NEXT_GROUP {
            next_group_bars.extend(bars);
        } else if i == HPL {
            hpl_bars.extend(bars);
        } else {
            avg_bars.extend(bars);
        }
    }
    // The group shift over Valiant paths, against per-flow ECMP over the same paths.
    let label = format!("{}, {nonminimal} Valiant paths", workloads[shift].label);
    let first = workloads.len() * CONFIGS.len();
    let mut valiant = [(0.0, 0.0); CONFIGS.len()];
    let (mut avgs, mut p99s) = (Vec::new(), Vec::new());
    for (j, &k) in VALIANT_CONFIGS.iter().enumerate() {
        let run = &runs[first + j][0];
        let (avg, p99, done) = fcts(run);
        all_done &= done == run.flows.len();
        valiant[k] = (avg, p99);
        let base = valiant[PER_FLOW];
        report
            .table
            .row(table_row(&label, k, run, (avg, p99, done), base));
        avgs.push((k as f64, avg / base.0));
        p99s.push((k as f64, p99 / base.1));
    }
    avg_bars.push(Series {
        name: format!("{label}: avg FCT / its per-flow's"),
        points: avgs,
    });
    avg_bars.push(Series {
        name: format!("{label}: p99 FCT / its per-flow's"),
        points: p99s,
    });
    // Web search and the shift over the dragonfly's minimal routes alone, against per-flow
    // ECMP over the same routes.
    let mut minimal_stats = vec![[(0.0, 0.0); CONFIGS.len()]; workloads.len()];
    let mut minimal_retransmitted = vec![[0u64; CONFIGS.len()]; workloads.len()];
    let mut next = first + VALIANT_CONFIGS.len();
    let mut minimal_bars = Vec::new();
    for &i in &MINIMAL_WORKLOADS {
        let label = format!("{}, dragonfly-minimal routes", workloads[i].label);
        let (mut avgs, mut p99s) = (Vec::new(), Vec::new());
        for &k in &MINIMAL_CONFIGS {
            let run = &runs[next][0];
            next += 1;
            let (avg, p99, done) = fcts(run);
            all_done &= done == run.flows.len();
            minimal_stats[i][k] = (avg, p99);
            minimal_retransmitted[i][k] = run.counters.retransmissions;
            let base = minimal_stats[i][PER_FLOW];
            report
                .table
                .row(table_row(&label, k, run, (avg, p99, done), base));
            avgs.push((k as f64, avg / base.0));
            p99s.push((k as f64, p99 / base.1));
        }
        // Beside the same configurations over hop-count routes, on a chart of their own (the
        // first has as many series as it can tell apart).
        let hop_count = |p: fn((f64, f64)) -> f64| -> Vec<(f64, f64)> {
            MINIMAL_CONFIGS
                .iter()
                .map(|&k| (k as f64, p(stats[i][k]) / p(stats[i][PER_FLOW])))
                .collect()
        };
        // The workload's name without its sizes, so that the legend keeps the routes.
        let w = workloads[i].label.split(',').next().unwrap_or_default();
        minimal_bars.extend([
            Series {
                name: format!("{w}, hop-count: avg"),
                points: hop_count(|s| s.0),
            },
            Series {
                name: format!("{w}, hop-count: p99"),
                points: hop_count(|s| s.1),
            },
            Series {
                name: format!("{w}, minimal: avg"),
                points: avgs,
            },
            Series {
                name: format!("{w}, minimal: p99"),
                points: p99s,
            },
        ]);
    }
    report.checks.push(Check::shape(
        "every flow completes in every configuration",
        all_done,
        if all_done {
            "all completed".into()
        } else {
            "some flows did not complete in the time limit".into()
        },
    ));
    let no_more = workloads.len()
        == (0..workloads.len())
            .filter(|&i| {
                retransmitted[i][PACKET_LEFT] <= retransmitted[i][PACKET_IRN]
                    && retransmitted[i][FLOWLET_LEFT] <= retransmitted[i][FLOWLET_IRN]
                    && minimal_retransmitted[i][PACKET_LEFT] <= minimal_retransmitted[i][PACKET_IRN]
            })
            .count();
    report.checks.push(Check::shape(
        "LEFT retransmits no more than IRN under the same load balancing (a gap is no loss)",
        no_more,
        workloads
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let minimal = if MINIMAL_WORKLOADS.contains(&i) {
                    format!(
                        ", per-packet over dragonfly-minimal routes {} against {}",
                        minimal_retransmitted[i][PACKET_LEFT], minimal_retransmitted[i][PACKET_IRN]
                    )
                } else {
                    String::new()
                };
                format!(
                    "{}: per-packet {} against {}, per-flowlet {} against {}{minimal}",
                    w.label,
                    retransmitted[i][PACKET_LEFT],
                    retransmitted[i][PACKET_IRN],
                    retransmitted[i][FLOWLET_LEFT],
                    retransmitted[i][FLOWLET_IRN]
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    ));
    for (i, w) in workloads.iter().enumerate() {
        let (base, left) = (stats[i][PER_FLOW], stats[i][PACKET_LEFT]);
        report.checks.push(Check::shape(
            &format!(
                "{}: per-packet LEFT's avg and p99 FCT below per-flow ECMP's (the paper's direction)",
                w.label
            ),
            left.0 < base.0 && left.1 < base.1,
            below(left, base),
        ));
        let s = &stats[i];
        for (name, got, want) in [
            (
                "per-packet LEFT against per-flow",
                vs(s[PACKET_LEFT], s[PER_FLOW]),
                PAPER_LEFT_VS_FLOW,
            ),
            (
                "LEFT against IRN per packet",
                vs(s[PACKET_LEFT], s[PACKET_IRN]),
                PAPER_LEFT_VS_IRN_PACKET,
            ),
            (
                "LEFT against IRN per flowlet",
                vs(s[FLOWLET_LEFT], s[FLOWLET_IRN]),
                PAPER_LEFT_VS_IRN_FLOWLET,
            ),
        ] {
            report.checks.push(paper_check(w.label, name, got, want));
        }
    }
    let (left, base, minimal) = (
        valiant[PACKET_LEFT],
        valiant[PER_FLOW],
        stats[shift][PER_FLOW],
    );
    let got = vs(left, base);
    report.checks.push(Check::number(
        &format!(
            "{label}: per-packet LEFT against per-flow ECMP, both over them, {}% avg / {}% p99 (paper, within 10 points; the paper names no routing)",
            f(PAPER_LEFT_VS_FLOW.0 * 100.0, 1),
            f(PAPER_LEFT_VS_FLOW.1 * 100.0, 1)
        ),
        (got.0 - PAPER_LEFT_VS_FLOW.0).abs() <= 0.1 && (got.1 - PAPER_LEFT_VS_FLOW.1).abs() <= 0.1,
        format!(
            "{} / {} (against per-flow ECMP on minimal paths: {} / {})",
            change(left.0, base.0),
            change(left.1, base.1),
            change(left.0, minimal.0),
            change(left.1, minimal.1)
        ),
    ));
    for &i in &MINIMAL_WORKLOADS {
        let label = format!("{}, dragonfly-minimal routes", workloads[i].label);
        let m = &minimal_stats[i];
        let (base, left, irn) = (m[PER_FLOW], m[PACKET_LEFT], m[PACKET_IRN]);
        report.checks.push(Check::shape(
            &format!(
                "{label}: per-packet LEFT's avg and p99 FCT below per-flow ECMP's over the same routes (the paper's direction)"
            ),
            left.0 < base.0 && left.1 < base.1,
            format!(
                "{}; per-flow ECMP over hop-count routes {} / {} us",
                below(left, base),
                f(stats[i][PER_FLOW].0, 1),
                f(stats[i][PER_FLOW].1, 1)
            ),
        ));
        for (name, got, want) in [
            (
                "per-packet LEFT against per-flow",
                vs(left, base),
                PAPER_LEFT_VS_FLOW,
            ),
            (
                "LEFT against IRN per packet",
                vs(left, irn),
                PAPER_LEFT_VS_IRN_PACKET,
            ),
        ] {
            report.checks.push(paper_check(&label, name, got, want));
        }
    }
    report.notes.push(
        "Dragonfly-minimal rows: web search and the group shift again with `[switch] routes = \
         \"dragonfly-minimal\"`: between two groups a packet takes only the global links \
         joining them (from its router if it holds one, else after a local hop to one that \
         does), then at most a local hop, as a dragonfly's minimal routing does (the paper's \
         groups are \"directly connected by two links\"). The main rows' hop-count shortest \
         paths also go through a third group (global, global, local) where that is as short. \
         Their baseline is per-flow ECMP over the same routes."
            .into(),
    );
    report.notes.push(format!(
        "Valiant rows: the group shift again with `[switch] nonminimal_paths = {nonminimal}`: \
         each host pair also has {nonminimal} paths through distinct intermediate groups \
         (fixed per pair by a hash), each two legs of the dragonfly's minimal routes (local, \
         global, local hop); the source router picks among the minimal path and these per \
         flow (per-flow ECMP), per packet or per flowlet, and the minimal choice also takes \
         dragonfly-minimal routes. Their baseline is per-flow ECMP over the same paths. The \
         paper names no routing for its spraying (minimal, Valiant or UGAL), so neither these \
         rows nor the minimal ones are its stated setup."
    ));
    report.notes.push(format!(
        "Workload: the paper samples an HPL (High-Performance Linpack) trace, LONG+LONG \
         broadcast, which is not public. Two stand-ins run instead, so the numbers are not \
         the paper's experiment: an all-to-all collective (every participant writes to every \
         other at time 0; the participants spread evenly over the host ids, two per group) \
         and web search (DCTCP's flow sizes, Poisson arrivals between random hosts). Neither \
         loads the global links; a third workload does: a group shift (every host writes to \
         its counterpart in the next group at time 0, so each group's traffic crosses the 2 \
         global links to the next; as LEFT's Fig 1, at full scale), and a fourth has that \
         pattern with web search's sizes and Poisson arrivals (every flow of a host goes to \
         its counterpart in the next group), so that flows of every size arrive at any time \
         onto loaded global links; whether HPL's broadcasts load a group pair's links so is \
         not known. A fifth is HPL-like (the `hpl` workload, not a trace): a process grid \
         with a row per group and a column across every group; per iteration each row \
         passes a panel around itself as a ring from column k mod Q, each hop after the \
         previous one's arrival, and each column does a ring row swap (P - 1 steps of the \
         swap's 1/P per process, each group to the next); a row's next panel starts once its \
         panel has reached the whole row. Its flows are chained, so few are in flight at \
         once. Fabric: \
         a dragonfly of {} groups of {} routers, 2 hosts a router, 2 global links between \
         every pair of groups, all links 200 Gbit/s and 1 us, MTU 1 KB, lossless (PFC), DCQCN \
         (ECN marking from 100 to 400 KB queued, as the HPCC paper's DCQCN). Not HPCC, which \
         the paper's NS-3 base suggests: HPCC differences each hop's INT record with the \
         previous ACK's record of the same hop index, which under per-packet spraying comes \
         from another switch, so its utilisation estimate is noise (here one web-search flow \
         of 243 KB took 11.7 times its ideal FCT sprayed under HPCC, 1.01 times under \
         DCQCN). Routing is the switches' over hop-count shortest paths: \
         per-flow ECMP, per-packet spraying (each hop picks a port at random), per-flowlet \
         (a new port after a 2 us gap; the paper gives none). IRN is the per-queue-pair \
         256-PSN bitmap with selective repeat, which NAKs the first missing PSN of a gap; \
         LEFT takes no gap for loss. Both keep 255 PSNs past a gap, and selective repeat \
         holds a sender to 256 unacknowledged packets (IRN's BDP flow control). Every configuration has the receive pipeline at LEFT's \
         figures ([reorder_cost]). FCT from each flow's start to its last byte acknowledged; \
         p99 nearest rank.",
        fabric.groups, fabric.routers
    ));
    report.plots.push((
        "left-fig45".into(),
        Chart {
            title: "LEFT Figs 4-5: FCT against per-flow ECMP's (0 per-flow, 1-2 per-packet IRN/LEFT, 3-4 per-flowlet IRN/LEFT)".into(),
            x_label: "configuration".into(),
            y_label: "FCT / per-flow ECMP's".into(),
            x_log: false,
            y_log: false,
            series: avg_bars,
        },
    ));
    report.plots.push((
        "left-fig45-next-group".into(),
        Chart {
            title: format!(
                "LEFT Figs 4-5: {} (0 per-flow, 1-2 per-packet IRN/LEFT, 3-4 per-flowlet IRN/LEFT)",
                workloads[WEB_SEARCH_TO_NEXT_GROUP].label
            ),
            x_label: "configuration".into(),
            y_label: "FCT / per-flow ECMP's".into(),
            x_log: false,
            y_log: false,
            series: next_group_bars,
        },
    ));
    report.plots.push((
        "left-fig45-hpl".into(),
        Chart {
            title: format!(
                "LEFT Figs 4-5: {} (0 per-flow, 1-2 per-packet IRN/LEFT, 3-4 per-flowlet IRN/LEFT)",
                workloads[HPL].label
            ),
            x_label: "configuration".into(),
            y_label: "FCT / per-flow ECMP's".into(),
            x_log: false,
            y_log: false,
            series: hpl_bars,
        },
    ));
    report.plots.push((
        "left-fig45-routes".into(),
        Chart {
            title: "LEFT Figs 4-5 by routes (0 per-flow, 1-2 per-packet IRN/LEFT)".into(),
            x_label: "configuration".into(),
            y_label: "FCT / per-flow ECMP's".into(),
            x_log: false,
            y_log: false,
            series: minimal_bars,
        },
    ));
    Ok(report)
}
