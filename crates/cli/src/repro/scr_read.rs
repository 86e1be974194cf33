//! SCR Fig 20 (E21) with the controlled flow a READ: the data's receiver is the requester,
//! which measures its port as READ responses arrive and credits the responder, whose READ
//! responses the engine gates and paces (`EventMask::GATE_READ_RESPONSES`). The same two
//! experiments as `scr-fig20`, with the roles of the controlled flow's ends turned round:
//! 16 background WRITE senders join one by one against the credited READ, then one READ
//! at line rate with backpressure from the requester.

use super::ctl::{
    FIG20_BACKGROUND_GBPS as BACKGROUND_GBPS, FIG20_SENDERS as SENDERS, Fig20Words, LINE_GBPS,
    fig20_chart, fig20_checks,
};
use super::{Check, Entry, Report, Scale, f, simulate_all};

pub(super) const SCR_FIG20_READ: Entry = Entry {
    name: "scr-fig20-read",
    source: "SCR Fig 20b/c (E21), the credited flow a READ",
    summary: "receiver-driven rate credits for a READ (the requester credits, the responder's READ responses are gated and paced) against 16 background senders, then backpressure with MD/AI",
    run: fig20_read,
    needs: &[],
};

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
    let seen = fig20_checks(
        &mut report,
        &b,
        &c,
        step_us,
        &Fig20Words {
            flow: "credited READ",
            port: "the reader's port",
            queue: "a small queue at the reader's port",
            backpressure: "backpressure on READ responses",
            paper: "paper (a WRITE-like flow)",
        },
    );
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
        free_peak >= 10.0 * seen.peak_queue.max(1.0),
        format!(
            "peak {} KB with no law on the READ, {} KB credited",
            f(free_peak / 1e3, 0),
            f(seen.peak_queue / 1e3, 0)
        ),
    ));
    report.plots.push((
        "scr-fig20-read".into(),
        fig20_chart(
            "SCR Fig 20 with a READ: rate credits from the requester, then backpressure",
            &b,
            [
                "credited READ (20b)",
                "background WRITEs (20b)",
                "one READ with backpressure (20c)",
            ],
            &seen.rates,
        ),
    ));
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

#[cfg(test)]
mod tests {
    use super::*;

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
