//! From run results to what a reader sees: FCT-slowdown statistics by flow size, fairness,
//! the printed table, `summary.json`, CSV files and SVG plots.
//!
//! Everything written is a function of the results alone, so the same scenario and seed
//! give the same files, with one exception that cannot be otherwise: the wall-clock fields
//! of `summary.json` (`wall_s`, `events_per_s`).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::app::{tenant_series, tenant_stats};
use crate::plot::{Chart, Series as Line};
use crate::result::RunResult;

/// Flow-size buckets of the slowdown statistics: (upper bound exclusive, label).
pub const BUCKETS: [(u64, &str); 5] = [
    (10_000, "<10KB"),
    (100_000, "10KB-100KB"),
    (1_000_000, "100KB-1MB"),
    (10_000_000, "1MB-10MB"),
    (u64::MAX, ">=10MB"),
];

/// Slowdown percentiles of a set of flows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slowdown {
    /// How many flows.
    pub count: usize,
    /// The median.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// The 99th percentile.
    pub p99: f64,
}

impl Slowdown {
    /// Nearest-rank percentiles of `values` (sorted here); `None` if empty.
    pub fn of(mut values: Vec<f64>) -> Option<Slowdown> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let k = ((p / 100.0) * values.len() as f64).ceil() as usize;
            values[k.clamp(1, values.len()) - 1]
        };
        Some(Slowdown {
            count: values.len(),
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
        })
    }

    fn json(&self) -> serde_json::Value {
        json!({"count": self.count, "p50": round4(self.p50), "p95": round4(self.p95), "p99": round4(self.p99)})
    }
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Statistics of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStats {
    /// Flows that completed.
    pub completed: usize,
    /// Flows that ended with an error completion.
    pub failed: usize,
    /// Flows still running (or never started) when the run ended.
    pub unfinished: usize,
    /// The slowdown over every completed flow (`None`: none completed).
    pub all: Option<Slowdown>,
    /// The slowdown per flow-size bucket of [`BUCKETS`], by its label.
    pub buckets: Vec<(&'static str, Option<Slowdown>)>,
    /// Jain's fairness index over the completed flows' mean rates (bytes / FCT).
    pub jain: Option<f64>,
    /// The largest queue any switch port reached.
    pub max_queue_bytes: u64,
}

impl RunStats {
    /// The statistics of run `r`.
    pub fn of(r: &RunResult) -> RunStats {
        let done: Vec<_> = r.flows.iter().filter(|f| f.slowdown().is_some()).collect();
        let failed = r.flows.iter().filter(|f| f.failed).count();
        let buckets = BUCKETS
            .iter()
            .enumerate()
            .map(|(i, &(upper, label))| {
                let lower = if i == 0 { 0 } else { BUCKETS[i - 1].0 };
                let v = done
                    .iter()
                    .filter(|f| f.bytes >= lower && f.bytes < upper)
                    .filter_map(|f| f.slowdown())
                    .collect();
                (label, Slowdown::of(v))
            })
            .collect();
        let rates: Vec<f64> = done
            .iter()
            .filter_map(|f| Some(f.bytes as f64 / f.fct_ns()?.max(1) as f64))
            .collect();
        RunStats {
            completed: done.len(),
            failed,
            unfinished: r.flows.len() - done.len() - failed,
            all: Slowdown::of(done.iter().filter_map(|f| f.slowdown()).collect()),
            buckets,
            jain: jain_index(&rates),
            max_queue_bytes: r.peaks.first().map_or(0, |p| p.max_queue_bytes),
        }
    }
}

/// Jain's fairness index: (sum x)^2 / (n sum x^2); 1 when all are equal.
pub fn jain_index(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

/// The printed summary table.
pub fn table(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>7} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>10} {:>6}",
        "algorithm",
        "flows",
        "done",
        "sd p50",
        "sd p99",
        "p99<10KB",
        "p99>=1MB",
        "drops",
        "marks",
        "cnps",
        "pauses",
        "max queue",
        "jain"
    );
    for r in runs {
        let s = RunStats::of(r);
        let p = |x: Option<Slowdown>, f: fn(&Slowdown) -> f64| {
            x.map_or("-".to_string(), |v| format!("{:.2}", f(&v)))
        };
        let large = Slowdown::of(
            r.flows
                .iter()
                .filter(|f| f.bytes >= 1_000_000)
                .filter_map(|f| f.slowdown())
                .collect(),
        );
        let _ = writeln!(
            out,
            "{:<12} {:>7} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>10} {:>6}",
            r.algorithm,
            r.flows.len(),
            s.completed,
            p(s.all, |v| v.p50),
            p(s.all, |v| v.p99),
            p(s.buckets[0].1, |v| v.p99),
            p(large, |v| v.p99),
            r.counters.drops,
            r.counters.ecn_marks,
            r.counters.cnps,
            r.counters.pfc_pauses,
            s.max_queue_bytes,
            s.jain.map_or("-".to_string(), |j| format!("{j:.3}")),
        );
    }
    if runs.iter().any(|r| !r.apps.is_empty()) {
        out.push_str(&tenant_table(runs));
    }
    if runs.iter().any(|r| r.counters.decoupled.is_some()) {
        out.push_str(&decoupled_table(runs));
    }
    out
}

/// Per algorithm run behind SCR's decoupled loop: events handed in, queued, merged into
/// one waiting (coalesced), taken by a processor (runs of the law and early exits), TX
/// bytes per run, and the processors' busy fractions of the run (the counts summed over
/// hosts, the loads their mean: processor `i` of every host together).
pub fn decoupled_table(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}  processor load (%)",
        "algorithm", "events", "queued", "coalesced", "processed", "runs", "exits", "B/tx run"
    );
    for r in runs {
        let Some(d) = &r.counters.decoupled else {
            continue;
        };
        let t = &d.totals;
        let load: Vec<String> = d
            .utilisation(std::time::Duration::from_nanos(r.simulated_ns))
            .iter()
            .map(|u| format!("{:.0}", u * 100.0))
            .collect();
        let _ = writeln!(
            out,
            "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}  {}",
            r.algorithm,
            t.events,
            t.queued(),
            t.coalesced,
            t.processed(),
            t.runs,
            t.early_exits,
            t.bytes_per_tx_run()
                .map_or("-".to_string(), |b| format!("{b:.0}")),
            load.join(" ")
        );
    }
    out
}

/// The decoupled loop's statistics as JSON (see [`decoupled_table`]).
fn decoupled_json(
    d: &sluice_core::control::DecoupledStats,
    simulated_ns: u64,
) -> serde_json::Value {
    let t = &d.totals;
    let util = d.utilisation(std::time::Duration::from_nanos(simulated_ns));
    json!({
        "events": t.events,
        "queued": t.queued(),
        "coalesced": t.coalesced,
        "processed": t.processed(),
        "runs": t.runs,
        "early_exits": t.early_exits,
        "dropped": t.dropped,
        "loops": d.loops,
        "tx_runs": t.tx_runs,
        "tx_bytes": t.tx_bytes,
        "bytes_per_tx_run": t.bytes_per_tx_run().map(round4),
        "processors": d.processors.iter().zip(&util).map(|(p, u)| json!({
            "processed": p.processed,
            "runs": p.runs,
            "busy_ns": p.busy.as_nanos() as u64,
            "load": round4(*u),
        })).collect::<Vec<_>>(),
    })
}

/// Per algorithm and tenant: throughput, latency percentiles, and Jain's index over the
/// tenants' throughputs.
pub fn tenant_table(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>6} {:>4} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "algorithm", "tenant", "qps", "messages", "Gbit/s", "lat p50", "lat p99", "jain"
    );
    for r in runs {
        let t = tenant_stats(r);
        let jain = jain_index(&t.iter().map(|t| t.gbps).collect::<Vec<_>>());
        for (i, t) in t.iter().enumerate() {
            let lat = |f: fn(&(f64, f64, f64)) -> f64| {
                t.latency_us
                    .map_or("-".into(), |l| format!("{:.2}us", f(&l)))
            };
            let _ = writeln!(
                out,
                "{:<12} {:>6} {:>4} {:>10} {:>9.2} {:>9} {:>9} {:>9}",
                r.algorithm,
                t.tenant,
                t.qps,
                t.messages,
                t.gbps,
                lat(|l| l.0),
                lat(|l| l.1),
                match (i, jain) {
                    (0, Some(j)) => format!("{j:.3}"),
                    _ => String::new(),
                }
            );
        }
    }
    out
}

/// `summary.json`.
pub fn summary_json(scenario: &str, runs: &[RunResult]) -> serde_json::Value {
    let events: u64 = runs.iter().map(|r| r.events).sum();
    let wall: f64 = runs.iter().map(|r| r.wall_s).sum();
    let stats: Vec<RunStats> = runs.iter().map(RunStats::of).collect();
    let algorithms: Vec<_> = runs
        .iter()
        .zip(&stats)
        .map(|(r, s)| {
            let buckets: serde_json::Map<String, serde_json::Value> = s
                .buckets
                .iter()
                .map(|(label, v)| (label.to_string(), v.map_or(json!(null), |v| v.json())))
                .collect();
            let c = &r.counters;
            let mut run = json!({
                "name": r.algorithm,
                "simulated_ns": r.simulated_ns,
                "events": r.events,
                "wall_s": r.wall_s,
                "events_per_s": rate(r.events, r.wall_s),
                "flows": r.flows.len(),
                "flows_completed": s.completed,
                "flows_failed": s.failed,
                "flows_unfinished": s.unfinished,
                "fct_slowdown": s.all.map_or(json!(null), |v| v.json()),
                "fct_slowdown_by_size": buckets,
                "jain_index": s.jain.map(round4),
                "drops": c.drops,
                "ecn_marks": c.ecn_marks,
                "cnps": c.cnps,
                "pfc_pauses": c.pfc_pauses,
                "pfc_paused_ns": c.pfc_paused_ns,
                "retransmissions": c.retransmissions,
                "timeouts": c.timeouts,
                "switch_packets": c.switch_packets,
                "max_queue_bytes": s.max_queue_bytes,
                "peak_packets": r.peak_packets,
                "top_ports": r.peaks.iter().map(|p| json!({"port": p.port.name, "max_queue_bytes": p.max_queue_bytes})).collect::<Vec<_>>(),
            });
            // Only when the scenario has services: other summaries stay as they were.
            if !c.services.is_empty() {
                run["services"] = json!(c.services);
            }
            // Only with `[links]` events or `[reorder_cost]`, likewise.
            if c.link_events > 0 {
                run["link_events"] = json!(c.link_events);
                run["link_drops"] = json!(c.link_drops);
            }
            if let Some(rx) = &c.receive {
                let w = &rx.work;
                run["receive"] = json!({
                    "packets": rx.packets,
                    "busy_ns": rx.busy_ns,
                    "mean_ns": if rx.packets > 0 { round4(rx.busy_ns as f64 / rx.packets as f64) } else { 0.0 },
                    "max_waiting": rx.max_waiting,
                    "records": w.records,
                    "cache_hits": w.cache_hits,
                    "pool_walks": w.pool_walks,
                    "pool_hops": w.pool_hops,
                    "swaps": w.swaps,
                    "swap_hops": w.swap_hops,
                    "gathered": w.gathered,
                    "flushes": w.flushes,
                    "exhausted": w.exhausted,
                });
            }
            // Only with `[services]` selected on some queue pair (issue 35).
            if let Some(m) = &c.service_model {
                run["service_model"] = json!({
                    "sealed_packets": m.sealed_packets,
                    "sealed_bytes": m.sealed_bytes,
                    "seal_busy_ns": m.seal_busy_ns,
                    "opened_packets": m.opened_packets,
                    "open_busy_ns": m.open_busy_ns,
                    "open_max_waiting": m.open_max_waiting,
                    "inspected_packets": m.inspected_packets,
                    "inspected_bytes": m.inspected_bytes,
                    "inspect_busy_ns": m.inspect_busy_ns,
                    "inspect_skipped": m.inspect_skipped,
                });
                // Only with a stage on a worker.
                if let Some(w) = &m.worker {
                    run["service_model"]["worker"] = json!({
                        "packets": w.packets,
                        "bytes": w.bytes,
                        "busy_ns": w.busy_ns,
                        "peak_out_packets": w.peak_out_packets,
                        "peak_out_bytes": w.peak_out_bytes,
                        "credit_drops": w.credit_drops,
                        "uninspected": w.uninspected,
                        "held_completions": w.held_completions,
                    });
                }
            }
            if let Some(d) = &c.decoupled {
                run["decoupled"] = decoupled_json(d, r.simulated_ns);
            }
            // Likewise the RNIC model's and Weir's counts (issue 34).
            if let Some(nic) = &c.nic {
                run["rnic"] = nic.json();
            }
            if let Some(nic) = &c.nic_window {
                run["rnic_window"] = nic.json();
            }
            if let Some(w) = &c.weir {
                run["weir"] = json!({
                    "posts": w.posts, "doorbells": w.doorbells, "runs": w.runs,
                    "splits": w.splits,
                    "cqes": w.cqes, "app_completions": w.app_completions,
                    "swallowed": w.swallowed, "increases": w.increases,
                    "decreases": w.decreases,
                    "rate_bps_at_stop": c.weir_rate_bps,
                    "delay_ns_at_stop": c.weir_delay_ns,
                });
            }
            if !r.apps.is_empty() {
                let tenants = tenant_stats(r);
                let qp_rates: Vec<f64> = r.apps.iter().map(|q| q.bps()).collect();
                let lat = |v: Option<f64>| v.map_or(json!(null), |v| json!(round4(v)));
                run["tenants"] = json!(tenants.iter().map(|t| json!({
                    "tenant": t.tenant,
                    "qps": t.qps,
                    "messages": t.messages,
                    "gbps": round4(t.gbps),
                    "latency_us_p50": lat(t.latency_us.map(|l| l.0)),
                    "latency_us_p99": lat(t.latency_us.map(|l| l.1)),
                    "latency_us_p999": lat(t.latency_us.map(|l| l.2)),
                    "latency_us_mean": lat(t.mean_latency_us),
                })).collect::<Vec<_>>());
                run["tenant_jain_index"] = json!(
                    jain_index(&tenants.iter().map(|t| t.gbps).collect::<Vec<_>>()).map(round4)
                );
                run["qp_jain_index"] = json!(jain_index(&qp_rates).map(round4));
                run["app_qps"] = json!(r.apps.iter().map(|q| json!({
                    "app": q.label,
                    "tenant": q.tenant,
                    "src": q.src,
                    "dst": q.dst,
                    "posted": q.posted,
                    "completed": q.completed,
                    "completed_bytes": q.completed_bytes,
                    "delivered_bytes": q.delivered_bytes,
                    "gbps": round4(q.bps() / 1e9),
                    "failed": q.failed,
                })).collect::<Vec<_>>());
            }
            run
        })
        .collect();
    json!({
        "scenario": scenario,
        "seed": runs.first().map_or(0, |r| r.seed),
        "simulated_ns": runs.iter().map(|r| r.simulated_ns).max().unwrap_or(0),
        "events": events,
        "wall_s": wall,
        "events_per_s": rate(events, wall),
        "flows_completed": stats.iter().map(|s| s.completed).sum::<usize>(),
        "size_buckets": BUCKETS.iter().map(|b| b.1).collect::<Vec<_>>(),
        "algorithms": algorithms,
    })
}

fn rate(events: u64, wall_s: f64) -> f64 {
    if wall_s > 0.0 {
        (events as f64 / wall_s).round()
    } else {
        0.0
    }
}

/// Writes `summary.json`, the CSV files and the plots into `dir` (created if needed).
pub fn write_all(dir: &Path, scenario: &str, runs: &[RunResult]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let summary = serde_json::to_string_pretty(&summary_json(scenario, runs))?;
    std::fs::write(dir.join("summary.json"), summary + "\n")?;
    std::fs::write(dir.join("flows.csv"), flows_csv(runs))?;
    std::fs::write(dir.join("timeseries.csv"), timeseries_csv(runs))?;
    if runs.iter().any(|r| !r.series.ports.is_empty()) {
        std::fs::write(dir.join("ports.csv"), ports_csv(runs))?;
    }
    if runs.iter().any(|r| !r.series.flows.is_empty()) {
        std::fs::write(dir.join("flow_throughput.csv"), flow_series_csv(runs))?;
    }
    // One chart per percentile: one colour per algorithm (the palette has eight).
    std::fs::write(
        dir.join("fct_slowdown.svg"),
        slowdown_chart(runs, "p99", |s| s.p99).to_svg(),
    )?;
    std::fs::write(
        dir.join("fct_slowdown_p50.svg"),
        slowdown_chart(runs, "p50", |s| s.p50).to_svg(),
    )?;
    std::fs::write(dir.join("queue.svg"), queue_chart(runs).to_svg())?;
    std::fs::write(dir.join("throughput.svg"), throughput_chart(runs).to_svg())?;
    if runs.iter().any(|r| !r.apps.is_empty()) {
        std::fs::write(dir.join("tenants.csv"), tenant_csv(runs))?;
        std::fs::write(dir.join("tenants.svg"), tenant_chart(runs).to_svg())?;
    }
    Ok(())
}

/// Per algorithm, tenant and sample: the tenant's delivered payload.
fn tenant_csv(runs: &[RunResult]) -> String {
    let mut out = String::from("algorithm,tenant,time_ns,gbps\n");
    for r in runs {
        for (t, points) in tenant_series(r) {
            for (us, gbps) in points {
                let _ = writeln!(out, "{},{t},{},{gbps:.3}", r.algorithm, (us * 1e3).round());
            }
        }
    }
    out
}

/// Every tenant's throughput over time, one line per algorithm and tenant.
pub fn tenant_chart(runs: &[RunResult]) -> Chart {
    Chart {
        title: "Throughput per tenant".to_string(),
        x_label: "time (us)".to_string(),
        y_label: "Gbit/s".to_string(),
        series: runs
            .iter()
            .flat_map(|r| {
                tenant_series(r).into_iter().map(move |(t, points)| Line {
                    name: if runs.len() > 1 {
                        format!("{} tenant {t}", r.algorithm)
                    } else {
                        format!("tenant {t}")
                    },
                    points,
                })
            })
            .collect(),
        ..Chart::default()
    }
}

fn flows_csv(runs: &[RunResult]) -> String {
    let mut out = String::from(
        "algorithm,flow,src,dst,bytes,start_ns,finish_ns,fct_ns,ideal_ns,slowdown,failed\n",
    );
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for r in runs {
        for f in &r.flows {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{}",
                r.algorithm,
                f.id,
                f.src,
                f.dst,
                f.bytes,
                opt(f.start_ns),
                opt(f.finish_ns),
                opt(f.fct_ns()),
                f.ideal_ns,
                f.slowdown().map_or(String::new(), |s| format!("{s:.4}")),
                f.failed
            );
        }
    }
    out
}

fn timeseries_csv(runs: &[RunResult]) -> String {
    let mut out =
        String::from("algorithm,time_ns,max_queue_bytes,total_queue_bytes,goodput_gbps\n");
    for r in runs {
        let s = &r.series;
        for (i, t) in s.times_ns.iter().enumerate() {
            let _ = writeln!(
                out,
                "{},{},{},{},{:.3}",
                r.algorithm,
                t,
                s.max_queue_bytes[i],
                s.total_queue_bytes[i],
                s.goodput_bps[i] / 1e9
            );
        }
    }
    out
}

/// One row per sample and switch port that had a queue or sent something.
fn ports_csv(runs: &[RunResult]) -> String {
    let mut out = String::from("algorithm,time_ns,port,queue_bytes,gbps\n");
    for r in runs {
        let s = &r.series;
        let n = s.ports.len();
        for (i, t) in s.times_ns.iter().enumerate() {
            for (k, port) in s.ports.iter().enumerate() {
                let (q, bps) = (s.port_queue_bytes[i * n + k], s.port_bps[i * n + k]);
                if q > 0 || bps > 0.0 {
                    let _ = writeln!(
                        out,
                        "{},{},{},{},{:.3}",
                        r.algorithm,
                        t,
                        port.name,
                        q,
                        bps / 1e9
                    );
                }
            }
        }
    }
    out
}

fn flow_series_csv(runs: &[RunResult]) -> String {
    let mut out = String::from("algorithm,time_ns,flow,gbps\n");
    for r in runs {
        let s = &r.series;
        let n = s.flows.len();
        for (i, t) in s.times_ns.iter().enumerate() {
            for (k, flow) in s.flows.iter().enumerate() {
                let bps = s.flow_bps[i * n + k];
                if bps > 0.0 {
                    let _ = writeln!(out, "{},{},{},{:.3}", r.algorithm, t, flow, bps / 1e9);
                }
            }
        }
    }
    out
}

/// The `percentile` (named for the titles, read by `pick`) slowdown by flow-size bucket, one
/// line per algorithm.
fn slowdown_chart(runs: &[RunResult], percentile: &str, pick: fn(&Slowdown) -> f64) -> Chart {
    let series = runs
        .iter()
        .map(|r| {
            let points = RunStats::of(r)
                .buckets
                .iter()
                .enumerate()
                .filter_map(|(i, (_, v))| {
                    let v = (*v)?;
                    // Plotted at the bucket's upper bound (the last at 10x its lower one).
                    let x = if BUCKETS[i].0 == u64::MAX {
                        BUCKETS[i - 1].0 as f64 * 10.0
                    } else {
                        BUCKETS[i].0 as f64
                    };
                    Some((x, pick(&v)))
                })
                .collect();
            Line {
                name: r.algorithm.clone(),
                points,
            }
        })
        .collect();
    Chart {
        title: format!("FCT slowdown by flow size, {percentile}"),
        x_label: "flow size, bytes (bucket upper bound)".into(),
        y_label: format!("{percentile} FCT slowdown"),
        x_log: true,
        y_log: true,
        series,
    }
}

fn queue_chart(runs: &[RunResult]) -> Chart {
    Chart {
        title: "Largest switch queue over time".into(),
        x_label: "time, us".into(),
        y_label: "queue, KB".into(),
        x_log: false,
        y_log: false,
        series: runs
            .iter()
            .map(|r| Line {
                name: r.algorithm.clone(),
                points: r
                    .series
                    .times_ns
                    .iter()
                    .zip(&r.series.max_queue_bytes)
                    .map(|(&t, &q)| (t as f64 / 1e3, q as f64 / 1e3))
                    .collect(),
            })
            .collect(),
    }
}

fn throughput_chart(runs: &[RunResult]) -> Chart {
    let mut series: Vec<Line> = runs
        .iter()
        .map(|r| Line {
            name: format!("{} (all flows)", r.algorithm),
            points: r
                .series
                .times_ns
                .iter()
                .zip(&r.series.goodput_bps)
                .map(|(&t, &b)| (t as f64 / 1e3, b / 1e9))
                .collect(),
        })
        .collect();
    // With one algorithm and few flows, each flow's own line (fairness at a glance).
    if let [r] = runs {
        let s = &r.series;
        let n = s.flows.len();
        if (1..=16).contains(&n) {
            for (k, flow) in s.flows.iter().enumerate() {
                series.push(Line {
                    name: format!("flow {flow}"),
                    points: s
                        .times_ns
                        .iter()
                        .enumerate()
                        .map(|(i, &t)| (t as f64 / 1e3, s.flow_bps[i * n + k] / 1e9))
                        .collect(),
                });
            }
        }
    }
    Chart {
        title: "Goodput delivered to hosts".into(),
        x_label: "time, us".into(),
        y_label: "Gbit/s".into(),
        x_log: false,
        y_log: false,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = Slowdown::of((1..=100).map(f64::from).collect()).unwrap();
        assert_eq!((s.count, s.p50, s.p95, s.p99), (100, 50.0, 95.0, 99.0));
        let one = Slowdown::of(vec![3.0]).unwrap();
        assert_eq!((one.p50, one.p99), (3.0, 3.0));
        assert!(Slowdown::of(Vec::new()).is_none());
    }

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain_index(&[1.0, 0.0, 0.0, 0.0]), Some(0.25));
        assert_eq!(jain_index(&[]), None);
    }
}
