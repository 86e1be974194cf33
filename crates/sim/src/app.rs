//! Closed-loop applications, as perftest runs them: `[[app]]` tables of a scenario. Each
//! app opens `qps` queue pairs from host `src` to host `dst`, keeps `depth` messages posted
//! on each from `start_us` to `stop_us` (posting the next as each completes), and belongs
//! to a tenant the hosts' schedulers see (`Engine::set_tenant`). The run records, per queue
//! pair, the payload delivered per sample interval, the bytes completed and every
//! message's latency from post to completion; [`tenant_stats`] sums them per tenant.

use serde::Deserialize;
use sluice_core::Rng;

use crate::NodeId;
use crate::result::RunResult;

/// The largest message an app may post (the engine's limit).
pub const MAX_APP_MESSAGE: u64 = 1 << 30;
/// The most queue pairs one app may open.
pub const MAX_APP_QPS: u32 = 4096;
/// The deepest queue an app may keep per queue pair.
pub const MAX_APP_DEPTH: u32 = 4096;

/// The operation an app repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AppOp {
    /// RDMA WRITE from `src` into `dst`.
    #[default]
    Write,
    /// RDMA READ by `src` of `dst`'s memory (the data flows from `dst` to `src`).
    Read,
    /// SEND from `src` into receives `dst` keeps posted.
    Send,
}

impl AppOp {
    /// As scenario files write it.
    pub fn name(self) -> &'static str {
        match self {
            AppOp::Write => "write",
            AppOp::Read => "read",
            AppOp::Send => "send",
        }
    }
}

/// One `[[app]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppSpec {
    /// What reports call it (default `appN`, N its index).
    pub label: Option<String>,
    /// The tenant its queue pairs belong to (default 0).
    #[serde(default)]
    pub tenant: u32,
    /// The tenant's weight for schedulers that share by weight (default 1).
    #[serde(default = "one")]
    pub weight: u32,
    /// The host that posts.
    pub src: NodeId,
    /// The peer host.
    pub dst: NodeId,
    /// Queue pairs (default 1).
    #[serde(default = "one")]
    pub qps: u32,
    /// The operation (default write).
    #[serde(default)]
    pub op: AppOp,
    /// Every message's size in bytes; or else `size_min` and `size_max`, or `size_cdf`.
    pub size: Option<u64>,
    /// With `size_max`: sizes uniform in [size_min, size_max].
    pub size_min: Option<u64>,
    /// With `size_min`.
    pub size_max: Option<u64>,
    /// Sizes drawn from a distribution: a builtin (`websearch`, `hadoop`, `storage`,
    /// `rpc`) or a CDF file relative to the scenario, as a Poisson workload's `cdf`
    /// (sizes above 1 GiB are cut to 1 GiB).
    pub size_cdf: Option<String>,
    /// Messages kept posted per queue pair (default 1).
    #[serde(default = "one")]
    pub depth: u32,
    /// When its queue pairs open and post, in us (default 0).
    #[serde(default)]
    pub start_us: f64,
    /// After this no message is posted, in us (default: the time limit); those in flight
    /// complete.
    pub stop_us: Option<f64>,
    /// Throughput and latency are measured from `start_us + warmup_us` (default 0).
    #[serde(default)]
    pub warmup_us: f64,
    /// A control law of its own, `{ name = "...", params = { ... } }` (default: the run's
    /// `[[cc]]` law), run the way the run's law is (inline or decoupled).
    pub cc: Option<crate::scenario::PolicyConfig>,
    /// Open loop in batches instead of a closed loop (Weir Fig 4; needs `[rnic]`, not
    /// `[weir]`): each queue pair posts this many messages, one every `post_ns`, waits for
    /// all of them to complete, pauses `pause_us`, and posts the next batch (at most
    /// `depth`).
    pub batch: Option<u32>,
    /// With `batch`: the pause between batches, us (default 0).
    #[serde(default)]
    pub pause_us: f64,
    /// With `batch`: the CPU's time per post, ns (default 0: a batch is posted at once).
    #[serde(default)]
    pub post_ns: f64,
    /// Its queue pairs' modelled services, by name (`encrypt`, `inspect`), at the costs of
    /// `[services]` (default: `[services] all`).
    pub services: Option<Vec<String>>,
    /// The priority (0 lowest ..= 7 highest) its data packets carry in their DSCP, as a
    /// queue pair's traffic class would, unless the control law picks one; only
    /// `[switch] priorities` above 1 serve it (default: none, the lowest).
    pub priority: Option<u8>,
}

fn one() -> u32 {
    1
}

impl AppSpec {
    /// Checks the fields the types do not; the error starts with the field's name.
    pub fn check(&self, time_limit_us: f64) -> Result<(), String> {
        let max_us = (crate::MAX_TIME_NS / 1_000) as f64;
        if self.src == self.dst {
            return Err(format!("dst: {} is also the src", self.dst));
        }
        if self.weight == 0 {
            return Err("weight: expected at least 1".into());
        }
        if let Some(p) = self
            .priority
            .filter(|&p| p >= crate::priority::MAX_PRIORITIES)
        {
            return Err(format!("priority: expected 0 ..= 7, got {p}"));
        }
        if !(1..=MAX_APP_QPS).contains(&self.qps) {
            return Err(format!(
                "qps: expected 1 ..= {MAX_APP_QPS}, got {}",
                self.qps
            ));
        }
        if !(1..=MAX_APP_DEPTH).contains(&self.depth) {
            return Err(format!(
                "depth: expected 1 ..= {MAX_APP_DEPTH}, got {}",
                self.depth
            ));
        }
        let size_ok = |field: &str, v: u64| {
            if (1..=MAX_APP_MESSAGE).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{field}: expected 1 ..= {MAX_APP_MESSAGE} bytes, got {v}"
                ))
            }
        };
        match (self.size, self.size_min, self.size_max) {
            _ if self.size_cdf.is_some() => {
                if self.size.is_some() || self.size_min.is_some() || self.size_max.is_some() {
                    return Err(
                        "size_cdf: expected `size`, `size_min` and `size_max`, or `size_cdf`, \
                         one of them"
                            .into(),
                    );
                }
            }
            (Some(s), None, None) => size_ok("size", s)?,
            (None, Some(lo), Some(hi)) => {
                size_ok("size_min", lo)?;
                size_ok("size_max", hi)?;
                if lo > hi {
                    return Err(format!("size_min: {lo} is above size_max {hi}"));
                }
            }
            _ => {
                return Err(
                    "size: expected `size`, or `size_min` and `size_max`, or `size_cdf`".into(),
                );
            }
        }
        if !(self.start_us >= 0.0 && self.start_us <= max_us) {
            return Err(format!(
                "start_us: expected 0 ..= {max_us}, got {}",
                self.start_us
            ));
        }
        let stop = self.stop_us(time_limit_us);
        if !(stop > self.start_us && stop <= max_us) {
            return Err(format!(
                "stop_us: expected after start_us ({}) and at most {max_us}, got {stop}",
                self.start_us
            ));
        }
        if !(self.warmup_us >= 0.0 && self.start_us + self.warmup_us < stop) {
            return Err(format!(
                "warmup_us: expected >= 0 and ending before stop_us, got {}",
                self.warmup_us
            ));
        }
        if let Some(b) = self.batch {
            if !(1..=self.depth).contains(&b) {
                return Err(format!(
                    "batch: expected 1 ..= depth ({}), got {b}",
                    self.depth
                ));
            }
        }
        if !(self.pause_us >= 0.0 && self.pause_us <= max_us) {
            return Err(format!(
                "pause_us: expected 0 ..= {max_us}, got {}",
                self.pause_us
            ));
        }
        if !(self.post_ns >= 0.0 && self.post_ns <= 1e6) {
            return Err(format!(
                "post_ns: expected 0 ..= 1000000, got {}",
                self.post_ns
            ));
        }
        if let Some(l) = &self.label {
            if l.is_empty() || l.contains(|c: char| c == ',' || c == '"' || c.is_control()) {
                return Err(format!(
                    "label: {l:?} must be non-empty, without commas, quotes or control characters"
                ));
            }
        }
        Ok(())
    }

    /// When it stops posting.
    pub fn stop_us(&self, time_limit_us: f64) -> f64 {
        self.stop_us.unwrap_or(time_limit_us)
    }

    /// The largest message it may post (`MAX_APP_MESSAGE` when sizes come from a CDF).
    pub fn max_size(&self) -> u64 {
        match (self.size, self.size_max, &self.size_cdf) {
            (Some(s), _, _) => s,
            (None, Some(hi), None) => hi,
            _ => MAX_APP_MESSAGE,
        }
    }

    /// The next message's size (one draw of `rng` when sizes vary); `cdf` is `size_cdf`'s
    /// distribution, loaded.
    pub fn draw_size(&self, rng: &mut Rng, cdf: Option<&crate::workload::Cdf>) -> u64 {
        if let Some(cdf) = cdf {
            return cdf.sample(rng).min(MAX_APP_MESSAGE);
        }
        match (self.size, self.size_min, self.size_max) {
            (Some(s), _, _) => s,
            (None, Some(lo), Some(hi)) => lo + rng.below(hi - lo + 1),
            _ => 1,
        }
    }
}

/// What one queue pair of an app did in a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppQpRecord {
    /// The app's index among the scenario's `[[app]]`s.
    pub app: u32,
    /// Its label.
    pub label: String,
    /// Its tenant.
    pub tenant: u32,
    /// The hosts.
    pub src: NodeId,
    /// The peer.
    pub dst: NodeId,
    /// Messages posted.
    pub posted: u64,
    /// Messages completed successfully.
    pub completed: u64,
    /// Their bytes.
    pub completed_bytes: u64,
    /// Payload bytes delivered within the measured window (per packet, so that a window
    /// holding few large messages is measured as finely as one of many small ones).
    pub measured_bytes: u64,
    /// The window: from `start_us + warmup_us` to `stop_us` (or the run's end), in ns.
    pub window_ns: (u64, u64),
    /// Latency from post to completion of each message posted within the window, in ns.
    pub latencies_ns: Vec<u64>,
    /// Payload bytes delivered to either end (READ responses to `src`, else to `dst`),
    /// retransmissions included.
    pub delivered_bytes: u64,
    /// The most messages it had posted and not completed at once.
    pub max_outstanding: u32,
    /// It ended with an error completion.
    pub failed: bool,
    /// Bytes of the messages completed within the window: goodput without the duplicates a
    /// retransmission of a packet that was late, not lost, delivers (which `measured_bytes`
    /// counts).
    pub window_completed_bytes: u64,
}

impl AppQpRecord {
    /// Goodput over the window from completed messages, in bit/s (see
    /// `window_completed_bytes`; coarse when few messages complete in the window).
    pub fn completed_bps(&self) -> f64 {
        let span = self.window_ns.1.saturating_sub(self.window_ns.0);
        if span == 0 {
            0.0
        } else {
            self.window_completed_bytes as f64 * 8e9 / span as f64
        }
    }

    /// Throughput over the window, in bit/s.
    pub fn bps(&self) -> f64 {
        let span = self.window_ns.1.saturating_sub(self.window_ns.0);
        if span == 0 {
            0.0
        } else {
            self.measured_bytes as f64 * 8e9 / span as f64
        }
    }
}

/// A tenant's sums over its queue pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantStats {
    /// The tenant.
    pub tenant: u32,
    /// Its queue pairs.
    pub qps: usize,
    /// Messages completed.
    pub messages: u64,
    /// Throughput over its queue pairs' windows, in Gbit/s.
    pub gbps: f64,
    /// Latency percentiles of its messages, in us (p50, p99, p99.9), if any completed.
    pub latency_us: Option<(f64, f64, f64)>,
    /// Mean latency, in us.
    pub mean_latency_us: Option<f64>,
}

/// Per-tenant sums of a run's apps, by tenant id.
pub fn tenant_stats(r: &RunResult) -> Vec<TenantStats> {
    let mut ids: Vec<u32> = r.apps.iter().map(|q| q.tenant).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|t| {
            let qps: Vec<&AppQpRecord> = r.apps.iter().filter(|q| q.tenant == t).collect();
            let mut lat: Vec<u64> = qps
                .iter()
                .flat_map(|q| q.latencies_ns.iter().copied())
                .collect();
            lat.sort_unstable();
            let pct = |p: f64| {
                let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
                lat[i] as f64 / 1e3
            };
            let latency_us = (!lat.is_empty()).then(|| (pct(0.50), pct(0.99), pct(0.999)));
            let mean_latency_us =
                (!lat.is_empty()).then(|| lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1e3);
            TenantStats {
                tenant: t,
                qps: qps.len(),
                messages: qps.iter().map(|q| q.completed).sum(),
                gbps: qps.iter().map(|q| q.bps()).sum::<f64>() / 1e9,
                latency_us,
                mean_latency_us,
            }
        })
        .collect()
}

/// Per sample, each tenant's delivered payload in bit/s: (tenant, points (time us, Gbit/s)).
pub fn tenant_series(r: &RunResult) -> Vec<(u32, Vec<(f64, f64)>)> {
    let s = &r.series;
    let n = r.apps.len();
    let mut ids: Vec<u32> = r.apps.iter().map(|q| q.tenant).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|t| {
            let points = s
                .times_ns
                .iter()
                .enumerate()
                .map(|(i, &ns)| {
                    let bps: f64 = (0..n)
                        .filter(|&k| r.apps[k].tenant == t)
                        .filter_map(|k| s.app_bps.get(i * n + k))
                        .sum();
                    (ns as f64 / 1e3, bps / 1e9)
                })
                .collect();
            (t, points)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> AppSpec {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn fields_are_checked_by_name() {
        let ok = spec("src = 0\ndst = 1\nsize = 4096");
        assert_eq!(
            (ok.qps, ok.depth, ok.weight, ok.op),
            (1, 1, 1, AppOp::Write)
        );
        assert!(ok.check(1000.0).is_ok());
        let bad = [
            ("src = 0\ndst = 0\nsize = 1", "dst:"),
            ("src = 0\ndst = 1", "size:"),
            ("src = 0\ndst = 1\nsize = 0", "size:"),
            ("src = 0\ndst = 1\nsize = 1\nsize_min = 1", "size:"),
            ("src = 0\ndst = 1\nsize_min = 9\nsize_max = 3", "size_min:"),
            (
                "src = 0\ndst = 1\nsize = 9\nsize_cdf = \"rpc\"",
                "size_cdf:",
            ),
            ("src = 0\ndst = 1\nsize = 1\nqps = 0", "qps:"),
            ("src = 0\ndst = 1\nsize = 1\ndepth = 0", "depth:"),
            ("src = 0\ndst = 1\nsize = 1\nweight = 0", "weight:"),
            (
                "src = 0\ndst = 1\nsize = 1\nstart_us = 10\nstop_us = 5",
                "stop_us:",
            ),
            ("src = 0\ndst = 1\nsize = 1\nwarmup_us = 2000", "warmup_us:"),
            ("src = 0\ndst = 1\nsize = 1\nlabel = \"a,b\"", "label:"),
        ];
        for (text, field) in bad {
            let e = spec(text).check(1000.0).unwrap_err();
            assert!(e.starts_with(field), "{text}: {e}");
        }
        let e = toml::from_str::<AppSpec>("src = 0\ndst = 1\nsize = 1\nsise = 2").unwrap_err();
        assert!(e.to_string().contains("sise"), "{e}");
        let e =
            toml::from_str::<AppSpec>("src = 0\ndst = 1\nsize = 1\nop = \"atomic\"").unwrap_err();
        assert!(e.to_string().contains("atomic"), "{e}");
    }

    #[test]
    fn sizes_stay_in_their_range() {
        let s = spec("src = 0\ndst = 1\nsize_min = 4096\nsize_max = 1048576");
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            let v = s.draw_size(&mut rng, None);
            assert!((4096..=1_048_576).contains(&v));
        }
    }
}
