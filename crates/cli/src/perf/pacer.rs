//! `--pacer`: a doorbell pacer between the bandwidth requester and the engine
//! (`sluice_core::weir`; docs/weir.md).

use serde::Serialize;
use sluice_core::weir::{Weir, WeirConfig};

/// `--pacer list`: each pacer and its `--pacer-param`s.
pub const LISTING: &str = "\
none     every post goes to the engine at once (the default)
weir     Weir's delay-based doorbell pacer (docs/weir.md): holds posts in user space and
         rings them at an AIAD rate kept against the doorbell-to-completion delay; splits
         posts longer than split_bytes. Bandwidth tests: write-bw, read-bw, send-bw.
    --pacer-param base_delay_us=...   delay the thresholds are relative to (10)
    --pacer-param inc_mbps=...        additive increase per completion, Mbit/s (10)
    --pacer-param dec_mbps=...        additive decrease per completion, Mbit/s (10)
    --pacer-param line_rate_gbps=...  starting rate and ceiling, Gbit/s (100)
    --pacer-param min_rate_gbps=...   the rate's floor, Gbit/s (1)
    --pacer-param split_bytes=...     split posts longer than this; 0: never (4096)
    --pacer-param ewma_weight=...     weight of the previous delay, in [0, 1) (0.875)
    --pacer-param qps_per_step=...    active QPs per threshold step (128)
    --pacer-param init_alpha=...      lower threshold per step (1)
    --pacer-param init_beta=...       beta = alpha + init_alpha - init_beta (0.5)
    --pacer-param sync_every=...      doorbells between clock synchronisations (1000)
    --pacer-param max_batch=...       posts of one QP per doorbell run, at most split_bytes (1)
";

/// The pacer `--pacer NAME --pacer-param K=V...` asks for: `None` for `none`, Weir's
/// configuration for `weir` (its queue depths and QPN range are the run's, set when the
/// run starts). A bad name, key or value is refused with the key named.
pub fn parse(name: &str, params: &[(String, String)]) -> Result<Option<WeirConfig>, String> {
    match name {
        "none" => {
            if let Some((k, _)) = params.first() {
                return Err(format!(
                    "--pacer-param {k}: --pacer none takes no parameters"
                ));
            }
            return Ok(None);
        }
        "weir" => {}
        other => return Err(format!("--pacer {other}: none or weir (`--pacer list`)")),
    }
    let mut c = WeirConfig::default();
    for (key, value) in params {
        let bad = |what: &str| format!("--pacer-param {key}={value}: {key} must be {what}");
        let num = |what: &str| {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(what))
        };
        let int = |what: &str| value.parse::<u32>().map_err(|_| bad(what));
        match key.as_str() {
            "base_delay_us" => {
                let us = num("a positive number of microseconds")?;
                if us <= 0.0 || us > 1e9 {
                    return Err(bad("a positive number of microseconds"));
                }
                c.base_delay = std::time::Duration::from_nanos((us * 1e3).round().max(1.0) as u64);
            }
            "inc_mbps" => c.inc = (num("Mbit/s, at least 0")? * 1e6) as u64,
            "dec_mbps" => c.dec = (num("Mbit/s, at least 0")? * 1e6) as u64,
            "line_rate_gbps" => c.line_rate = (num("Gbit/s, above 0")? * 1e9) as u64,
            "min_rate_gbps" => c.min_rate = (num("Gbit/s, above 0")? * 1e9) as u64,
            "split_bytes" => c.split_bytes = int("a number of bytes (0: never split)")?,
            "ewma_weight" => c.ewma_weight = num("in [0, 1)")?,
            "qps_per_step" => c.qps_per_step = int("a positive count")?,
            "init_alpha" => c.init_alpha = num("at least 0")?,
            "init_beta" => c.init_beta = num("at least 0, at most init_alpha")?,
            "sync_every" => c.sync_every = int("a count of doorbells")?,
            "max_batch" => c.max_batch = int("a positive count")?,
            _ => {
                return Err(format!(
                    "--pacer-param {key}: weir has no such parameter (`--pacer list`)"
                ));
            }
        }
    }
    // Weir's own checks name the fields they refuse.
    Weir::new(WeirConfig {
        max_qpn: 1,
        max_wqes: 1,
        sq_depth: 1,
        ..c
    })
    .map_err(|e| format!("--pacer weir: {e}"))?;
    Ok(Some(c))
}

/// Send-queue entries per QP with the pacer: room for every piece of `tx_depth` posts of
/// `max_size` bytes (each piece is a WR of its own), up to 8,192 per QP and 2^19 over all
/// QPs, so that the completion queue (at most 2^20 entries) holds every piece in flight;
/// never fewer than `tx_depth`.
pub(crate) fn send_depth(c: &WeirConfig, tx_depth: u32, qps: u32, max_size: u32) -> u32 {
    let pieces = if c.split_bytes == 0 {
        1
    } else {
        max_size.div_ceil(c.split_bytes).max(1)
    };
    let cap = 8192.min((1 << 19) / qps.max(1));
    tx_depth.saturating_mul(pieces).min(cap).max(tx_depth)
}

/// What the pacer did over one result line, for the table and the JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PacerReport {
    /// The pacer's name (`weir`).
    pub name: &'static str,
    /// Application posts it took.
    pub posts: u64,
    /// Doorbells it rang (pieces posted to the engine).
    pub doorbells: u64,
    /// Runs of one queue pair's pieces handed out together (`doorbells` with
    /// `max_batch` 1).
    pub runs: u64,
    /// Posts it split into pieces.
    pub splits: u64,
    /// Engine completions it took (one per doorbell).
    pub cqes: u64,
    /// Completions it handed to the application.
    pub app_completions: u64,
    /// Completions it kept from the application (of unsignaled posts, and all but the
    /// last piece of split ones).
    pub swallowed: u64,
    /// Rate increases and decreases (AIAD steps).
    pub increases: u64,
    /// See `increases`.
    pub decreases: u64,
    /// The doorbell rate after the last completion that left work in flight, Gbit/s (at
    /// the very end the engine is idle, and Weir back at line rate).
    pub rate_gbps: f64,
    /// The lowest doorbell rate of the run, Gbit/s.
    pub min_rate_gbps: f64,
    /// The smoothed doorbell-to-completion delay after that completion, microseconds: the
    /// time from the doorbell to the poll that found the completion (the engine stamps no
    /// completion time yet).
    pub delay_us: Option<f64>,
    /// The sampled cost of its calls in this run (`cost.rs`).
    pub cost: Option<super::cost::PacerCost>,
}

impl PacerReport {
    /// Weir's counts, with the rate and delay last seen with work in flight (`busy`) and
    /// the lowest rate (bit/s).
    pub(crate) fn of(w: &Weir, busy: Option<(u64, Option<f64>)>, lowest: u64) -> PacerReport {
        let s = w.stats();
        let (rate, delay) = busy.unwrap_or((w.rate(), None));
        PacerReport {
            name: "weir",
            posts: s.posts,
            doorbells: s.doorbells,
            runs: s.runs,
            splits: s.splits,
            cqes: s.cqes,
            app_completions: s.app_completions,
            swallowed: s.swallowed,
            increases: s.increases,
            decreases: s.decreases,
            rate_gbps: rate as f64 / 1e9,
            min_rate_gbps: lowest as f64 / 1e9,
            delay_us: delay.map(|ns| ns / 1e3),
            cost: None,
        }
    }

    /// Its line under the run's row.
    pub fn row(&self) -> String {
        let delay = self
            .delay_us
            .map_or("-".to_string(), |d| format!("{d:.2} us"));
        format!(
            " pacer {}: {} posts, {} doorbells ({} split), {} CQEs, {} to the app, {} swallowed; \
             rate {:.2} Gb/s (lowest {:.2}; {} up, {} down), delay {delay}",
            self.name,
            self.posts,
            self.doorbells,
            self.splits,
            self.cqes,
            self.app_completions,
            self.swallowed,
            self.rate_gbps,
            self.min_rate_gbps,
            self.increases,
            self.decreases,
        ) + &self.cost.map_or(String::new(), |c| {
            format!(
                "\n pacer cost (1 call in {} timed, less {} ns of clock): post {} ns, doorbell {} ns, \
                 completion {} ns (medians; p99 {}, {}, {}); {:.0} ns per post",
                super::cost::SAMPLE_EVERY,
                c.clock_pair_ns,
                c.post.median_ns,
                c.doorbell.median_ns,
                c.completion.median_ns,
                c.post.p99_ns,
                c.doorbell.p99_ns,
                c.completion.p99_ns,
                c.per_post_ns,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parameters_set_their_fields_and_bad_ones_name_theirs() {
        assert_eq!(parse("none", &[]), Ok(None));
        let c = parse(
            "weir",
            &kv(&[
                ("base_delay_us", "2.5"),
                ("inc_mbps", "100"),
                ("split_bytes", "1024"),
                ("line_rate_gbps", "25"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.base_delay, std::time::Duration::from_nanos(2500));
        assert_eq!(c.inc, 100_000_000);
        assert_eq!(c.split_bytes, 1024);
        assert_eq!(c.line_rate, 25_000_000_000);
        for (k, v) in [
            ("base_delay_us", "0"),
            ("inc_mbps", "-1"),
            ("split_bytes", "x"),
            ("ewma_weight", "1.5"),
            ("min_rate_gbps", "200"),
            ("init_beta", "2"),
        ] {
            let e = parse("weir", &kv(&[(k, v)])).unwrap_err();
            assert!(e.contains(k.split('_').next().unwrap()), "{k}={v}: {e}");
        }
        assert!(
            parse("weir", &kv(&[("nope", "1")]))
                .unwrap_err()
                .contains("nope")
        );
        assert!(parse("fast", &[]).unwrap_err().contains("--pacer fast"));
    }
}
