//! SCR Fig 20 (E21) with the controlled flow a READ: the data's receiver is the requester,
//! which measures its port as READ responses arrive and credits the responder, whose READ
//! responses the engine gates and paces (`EventMask::GATE_READ_RESPONSES`). The same two
//! experiments as `scr-fig20`, with the roles of the controlled flow's ends turned round:
//! 16 background WRITE senders join one by one against the credited READ, then one READ
//! at line rate with backpressure from the requester.

use sluice_sim::RunResult;
use sluice_sim::plot::{Chart, Series};

use super::ctl::{app_mean, slope};
use super::{Check, Entry, Report, Scale, Table, f, simulate_all};

pub(super) const SCR_FIG20_READ: Entry = Entry {
    name: "scr-fig20-read",
    source: "SCR Fig 20b/c (E21), the credited flow a READ",
    summary: "receiver-driven rate credits for a READ (the requester credits, the responder's READ responses are gated and paced) against 16 background senders, then backpressure with MD/AI",
    run: fig20_read,
    needs: &[],
};

/// The line, Gbit/s.
const LINE_GBPS: f64 = 100.0;
/// Background senders, and each one's rate on the wire (Gbit/s), as in `scr-fig20`.
const SENDERS: u32 = 16;
const BACKGROUND_GBPS: f64 = 5.0;

/// Host `SENDERS + 1` READs from host 0 under `rate-credit` (the data flows 0 -> the
/// reader); background senders 1 to 16 WRITE into the reader at a fixed rate, one joining
/// every `step_us`. `controlled: false` gives the READ no law (the contrast).
fn joins_scenario(step_us: f64, controlled: bool) -> String {
    let reader = SENDERS + 1;
    let (name, how, law) = if controlled {
        ("scr-fig20b-read", "under receiver-driven rate credits", "")
    } else {
        (
            "scr-fig20b-read-uncontrolled",
            "with no law (its responses at line rate)",
            "cc = { name = \"none\" }\n",
        )
    };
    let mut text = format!(
        r#"# SCR Fig 20b with a READ: host {reader} reads from host 0 {how};
# {SENDERS} background senders WRITE into host {reader} at {BACKGROUND_GBPS} Gbit/s each,
# joining one every {step_us} us.
name = "{name}"
time_limit_us = {limit}
[topology]
kind = "star"
hosts = {hosts}
link_gbps = {LINE_GBPS}
link_delay_ns = 1000
[output]
sample_interval_us = 5
[[app]]
label = "credited-read"
tenant = 1
op = "read"
src = {reader}
dst = 0
size = 65536
depth = 16
{law}"#,
        limit = step_us * f64::from(SENDERS + 1),
        hosts = SENDERS + 2,
    );
    for k in 1..=SENDERS {
        text.push_str(&format!(
            "[[app]]\nlabel = \"background{k}\"\ntenant = 2\nsrc = {k}\ndst = {reader}\n\
             size = 65536\ndepth = 16\nstart_us = {}\n\
             cc = {{ name = \"static\", params = {{ rate_gbps = {BACKGROUND_GBPS} }} }}\n",
            step_us * f64::from(k)
        ));
    }
    text.push_str("[[cc]]\nname = \"rate-credit\"\n");
    text
}

/// Host 1 READs from host 0 at line rate under `rate-credit`, with backpressure (a CNP
/// from the reader) when its port passes 90% of its capacity.
fn backpressure_scenario(stop_us: f64) -> String {
    format!(
        r#"# SCR Fig 20c with a READ: host 1 reads from host 0 at line rate; the reader sends
# backpressure (a CNP) past 90% of its port, on which host 0's READ responses halve their
# rate, then add 1 Gbit/s every 10 us.
name = "scr-fig20c-read"
time_limit_us = {stop_us}
[topology]
kind = "star"
hosts = 2
link_gbps = {LINE_GBPS}
link_delay_ns = 1000
[output]
sample_interval_us = 10
[[app]]
label = "credited-read"
op = "read"
src = 1
dst = 0
size = 65536
depth = 16
[[cc]]
name = "rate-credit"
params = {{ bp_threshold = 0.9 }}
"#
    )
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

fn fig20_read(scale: Scale) -> Result<Report, String> {
    let (step_us, c_stop_us) = match scale {
        Scale::Quick => (60.0, 1000.0),
        Scale::Full => (200.0, 3000.0),
    };
    let mut report = Report::default();
    let mut runs = simulate_all(
        &mut report,
        vec![
            ("scr-fig20b-read".into(), joins_scenario(step_us, true)),
            ("scr-fig20c-read".into(), backpressure_scenario(c_stop_us)),
            (
                "scr-fig20b-read-uncontrolled".into(),
                joins_scenario(step_us, false),
            ),
        ],
    )?;
    let free = runs
        .pop()
        .and_then(|mut r| r.pop())
        .ok_or("scr-fig20b-read-uncontrolled: no run")?;
    let c = runs
        .pop()
        .and_then(|mut r| r.pop())
        .ok_or("scr-fig20c-read: no run")?;
    let b = runs
        .pop()
        .and_then(|mut r| r.pop())
        .ok_or("scr-fig20b-read: no run")?;
    // The payload a full port carries: 1 KiB packets (the scenario's MTU) in their frames.
    let payload_share = 1024.0 / sluice_wire::roce_link_len(false, 12 + 1024 + 4) as f64;
    let capacity = LINE_GBPS * payload_share;
    report.table = Table::new(&[
        "background senders",
        "credited READ (Gbit/s)",
        "background (Gbit/s)",
        "port used",
        "C minus the background (Gbit/s)",
        "paper (a WRITE-like flow)",
    ]);
    let mut credited = Vec::new();
    let mut background = Vec::new();
    let mut used = Vec::new();
    for k in 0..=SENDERS {
        // The second half of each step: after the credit has caught up with the join.
        let (from, to) = (
            step_us * (f64::from(k) + 0.5),
            step_us * (f64::from(k) + 1.0),
        );
        let own = app_mean(&b, 0, from, to);
        // (+ 0.0: an empty sum of f64 is -0.0.)
        let bg: f64 = (1..=k as usize)
            .map(|a| app_mean(&b, a, from, to))
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
                f(LINE_GBPS - BACKGROUND_GBPS * f64::from(k), 0)
            ),
        ]);
        credited.push((f64::from(k), own));
        background.push((f64::from(k), bg));
        used.push(share);
    }
    let (s_own, s_bg) = (slope(&credited), slope(&background));
    report.checks.push(Check::shape(
        "the credited READ gives up what each background sender takes (slopes within 20%)",
        s_bg > 0.0 && ((-s_own) / s_bg - 1.0).abs() <= 0.2,
        format!(
            "{} Gbit/s per sender for the credited READ, {} for the background",
            f(s_own, 2),
            f(s_bg, 2)
        ),
    ));
    let least = used.iter().copied().fold(f64::INFINITY, f64::min);
    report.checks.push(Check::shape(
        "the reader's port stays busy at every step (at least 85% of its payload capacity)",
        least >= 0.85,
        format!("at least {}% used", f(least * 100.0, 0)),
    ));
    let q = &b.series.max_queue_bytes;
    let mean_q = q.iter().sum::<u64>() as f64 / q.len().max(1) as f64;
    let peak_q = q.iter().copied().max().unwrap_or(0) as f64;
    report.checks.push(Check::shape(
        "a small queue at the reader's port (mean under 10 KB, peak under 100 KB)",
        mean_q < 10e3 && peak_q < 100e3,
        format!(
            "mean {} KB, peak {} KB",
            f(mean_q / 1e3, 1),
            f(peak_q / 1e3, 0)
        ),
    ));
    // The contrast: the same READ with no law sends its responses at line rate, and the
    // reader's port holds what the line rate and the background bring beyond its capacity.
    let free_peak = free
        .series
        .max_queue_bytes
        .iter()
        .copied()
        .max()
        .unwrap_or(0) as f64;
    report.checks.push(Check::number(
        "without a law on the READ the reader's port queues (peak at least 10 times the credited run's)",
        free_peak >= 10.0 * peak_q.max(1.0),
        format!(
            "peak {} KB with no law on the READ, {} KB credited",
            f(free_peak / 1e3, 0),
            f(peak_q / 1e3, 0)
        ),
    ));
    let last = credited.last().map_or(0.0, |p| p.1) / payload_share;
    let derived = LINE_GBPS - BACKGROUND_GBPS * f64::from(SENDERS);
    report.checks.push(Check::number(
        "the credited READ beside 16 senders, on the wire",
        (last / derived - 1.0).abs() <= 0.25,
        format!(
            "{} Gbit/s against the derived {} (the credits fill 95% of the port)",
            f(last, 1),
            f(derived, 0)
        ),
    ));
    // The backpressure run: the READ's data rate, as the reader receives it.
    let rates: Vec<(f64, f64)> = c
        .series
        .times_ns
        .iter()
        .enumerate()
        .map(|(i, t)| (*t as f64 / 1e3, c.series.app_bps[i] / 1e9))
        .collect();
    let (cuts, climbs) = cuts_and_climbs(&rates);
    report.checks.push(Check::shape(
        "backpressure on READ responses: an MD/AI sawtooth (at least two cuts, the rate climbing between)",
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
    report
        .plots
        .push(("scr-fig20-read".into(), chart(&b, &rates)));
    report.notes.push(format!(
        "SCR's Fig 20 controls a WRITE-like flow; this is the same experiment with the \
         credited flow a READ, so that the credits go from the requester (the data's \
         receiver) to the responder (its sender), and the responder's READ responses are \
         gated and paced (docs/control.md). Senders join every {step_us} us (SCR: 5 s). The \
         background WRITEs run a fixed-rate law of their own; the reader's law counts them \
         as port traffic. Rates are payload; the background's 5 Gbit/s is on the wire."
    ));
    Ok(report)
}

/// The plot: the credited READ and the background through the joins, and the READ with
/// backpressure.
fn chart(b: &RunResult, sawtooth: &[(f64, f64)]) -> Chart {
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
    let credited = line("credited READ (20b)", &|i| b.series.app_bps[i * n] / 1e9);
    let background = line("background WRITEs (20b)", &|i| {
        (1..n).map(|a| b.series.app_bps[i * n + a]).sum::<f64>() / 1e9
    });
    let saw = Series {
        name: "one READ with backpressure (20c)".into(),
        points: sawtooth.iter().step_by(stride).copied().collect(),
    };
    Chart {
        title: "SCR Fig 20 with a READ: rate credits from the requester, then backpressure".into(),
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
    fn the_credited_read_is_read_by_the_port_the_background_writes_into() {
        let reader = SENDERS + 1;
        for controlled in [true, false] {
            let text = joins_scenario(60.0, controlled);
            assert!(text.contains(&format!("op = \"read\"\nsrc = {reader}\ndst = 0\n")));
            assert_eq!(
                text.matches(&format!("dst = {reader}\n")).count(),
                SENDERS as usize
            );
            // Only the contrast gives the READ a law of its own (none).
            assert_eq!(text.contains("name = \"none\""), !controlled);
            let parsed = sluice_sim::Scenario::parse(&text, std::path::Path::new("."));
            assert!(parsed.is_ok(), "{text}");
        }
    }
}
