//! What SCR's decoupled control loop did over one result line (`--cc-decoupled`), for the
//! table and the JSON.

use serde::Serialize;
use sluice_core::control::DecoupledStats;

/// The decoupled loop's counts over one result line.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DecoupledReport {
    /// Events the engine handed to the loop.
    pub events: u64,
    /// Events that took a place in a queue.
    pub queued: u64,
    /// Events merged into one already waiting.
    pub coalesced: u64,
    /// Events a processor took (runs of the law and early exits).
    pub processed: u64,
    /// Runs of the law.
    pub runs: u64,
    /// TX events only carried to a later run (software coalescing).
    pub early_exits: u64,
    /// Events dropped while waiting (their queue pair was reset).
    pub dropped: u64,
    /// TX payload bytes per run of the law on a TX event (SCR's coalescing granularity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_tx_run: Option<f64>,
    /// Each processor's share, by index.
    pub processors: Vec<ProcessorReport>,
}

/// One processor's share of a result line.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProcessorReport {
    /// Events it took.
    pub processed: u64,
    /// Runs of the law among them.
    pub runs: u64,
    /// Modelled busy time, microseconds.
    pub busy_us: f64,
    /// Its busy fraction of the line's duration.
    pub load: f64,
}

impl DecoupledReport {
    /// The counts between `before` and `after` (taken around a line's traffic) over
    /// `duration_s` seconds.
    pub(crate) fn of(
        before: Option<&DecoupledStats>,
        after: &DecoupledStats,
        duration_s: f64,
    ) -> DecoupledReport {
        let d = before.map_or_else(|| after.clone(), |b| after.since(b));
        let t = d.totals;
        let elapsed = std::time::Duration::from_secs_f64(duration_s.max(0.0));
        DecoupledReport {
            events: t.events,
            queued: t.queued(),
            coalesced: t.coalesced,
            processed: t.processed(),
            runs: t.runs,
            early_exits: t.early_exits,
            dropped: t.dropped,
            bytes_per_tx_run: t.bytes_per_tx_run(),
            processors: d
                .processors
                .iter()
                .zip(d.utilisation(elapsed))
                .map(|(p, load)| ProcessorReport {
                    processed: p.processed,
                    runs: p.runs,
                    busy_us: p.busy.as_secs_f64() * 1e6,
                    load,
                })
                .collect(),
        }
    }

    /// Its line under the run's row.
    pub fn row(&self) -> String {
        let per_run = self
            .bytes_per_tx_run
            .map_or("-".to_string(), |b| format!("{b:.0} B"));
        let loads: Vec<String> = self
            .processors
            .iter()
            .map(|p| format!("{:.0}%", p.load * 100.0))
            .collect();
        format!(
            " decoupled: {} events, {} queued, {} coalesced, {} processed ({} runs, {} early \
             exits, {} dropped); {per_run} per TX run; processor load {}",
            self.events,
            self.queued,
            self.coalesced,
            self.processed,
            self.runs,
            self.early_exits,
            self.dropped,
            loads.join(" ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::control::{ProcessorLoad, ScrStats};
    use std::time::Duration;

    fn stats(events: u64, runs: u64, busy_us: u64) -> DecoupledStats {
        DecoupledStats {
            totals: ScrStats {
                events,
                coalesced: events - runs,
                runs,
                tx_runs: runs,
                tx_bytes: runs * 4096,
                ..ScrStats::default()
            },
            processors: vec![
                ProcessorLoad {
                    processed: runs,
                    runs,
                    busy: Duration::from_micros(busy_us),
                },
                ProcessorLoad::default(),
            ],
            loops: 1,
        }
    }

    #[test]
    fn a_line_reports_what_happened_since_its_start() {
        let before = stats(100, 10, 10);
        let after = stats(1100, 210, 510);
        let r = DecoupledReport::of(Some(&before), &after, 0.001);
        assert_eq!((r.events, r.queued, r.coalesced), (1000, 200, 800));
        assert_eq!((r.processed, r.runs), (200, 200));
        assert_eq!(r.bytes_per_tx_run, Some(4096.0));
        assert_eq!(r.processors.len(), 2);
        assert!((r.processors[0].load - 0.5).abs() < 1e-9, "{r:?}");
        assert_eq!(r.processors[1].load, 0.0);
        let row = r.row();
        assert!(
            row.contains("1000 events") && row.contains("200 queued"),
            "{row}"
        );
        assert!(
            row.contains("800 coalesced") && row.contains("load 50% 0%"),
            "{row}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["processors"][0]["runs"], 200);
        assert_eq!(json["coalesced"], 800);
    }
}
