//! The `[rnic]` and `[weir]` tables of a scenario: a named preset and per-field overrides,
//! resolved into [`RnicParams`] and a `WeirConfig`, every value checked and a bad one
//! refused with the field's name.

use std::time::Duration;

use serde::Deserialize;
use sluice_core::weir::WeirConfig;

/// The `[rnic]` table: `preset` and any field of [`RnicParams`] to override.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RnicSpec {
    /// `connectx6-like` (the default) or `swcc-like`.
    pub preset: Option<String>,
    /// Overrides, by [`RnicParams`] field.
    pub mmio_ns: Option<f64>,
    /// See [`RnicParams::pcie_read_ns`].
    pub pcie_read_ns: Option<f64>,
    /// See [`RnicParams::pcie_gbps`].
    pub pcie_gbps: Option<f64>,
    /// See [`RnicParams::pcie_tags`].
    pub pcie_tags: Option<u32>,
    /// See [`RnicParams::units`].
    pub units: Option<u32>,
    /// See [`RnicParams::unit_ns`].
    pub unit_ns: Option<f64>,
    /// See [`RnicParams::cqe_write_ns`].
    pub cqe_write_ns: Option<f64>,
    /// See [`RnicParams::wqe_entries`].
    pub wqe_entries: Option<u32>,
    /// See [`RnicParams::wqe_ways`].
    pub wqe_ways: Option<u32>,
    /// See [`RnicParams::qpc_entries`].
    pub qpc_entries: Option<u32>,
    /// See [`RnicParams::qpc_ways`].
    pub qpc_ways: Option<u32>,
    /// See [`RnicParams::mtt_entries`].
    pub mtt_entries: Option<u32>,
    /// See [`RnicParams::mtt_ways`].
    pub mtt_ways: Option<u32>,
    /// See [`RnicParams::wqe_prefetch_mtt`].
    pub wqe_prefetch_mtt: Option<bool>,
    /// See [`RnicParams::cc_entries`] (set it, with `cc_ways`, to model SwCC's table).
    pub cc_entries: Option<u32>,
    /// See [`RnicParams::cc_ways`].
    pub cc_ways: Option<u32>,
    /// See [`RnicParams::cc_miss_ns`].
    pub cc_miss_ns: Option<f64>,
    /// See [`RnicParams::wqe_bytes`].
    pub wqe_bytes: Option<u32>,
    /// See [`RnicParams::qpc_bytes`].
    pub qpc_bytes: Option<u32>,
    /// See [`RnicParams::mtt_bytes`].
    pub mtt_bytes: Option<u32>,
    /// See [`RnicParams::tx_overhead_bytes`].
    pub tx_overhead_bytes: Option<u32>,
}

/// The RNIC model's parameters, resolved. Every figure is a *model* parameter: a preset's
/// values are chosen so that the model shows the shapes the papers report, not measured on
/// hardware (`docs/weir.md` says where each comes from).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RnicParams {
    /// The preset the values started from.
    pub preset: &'static str,
    /// A doorbell's MMIO write, from the post to the NIC seeing it, ns.
    pub mmio_ns: f64,
    /// A PCIe read's round trip (request to last completion byte, after its transfer), ns.
    pub pcie_read_ns: f64,
    /// PCIe read bandwidth (device-bound data), Gbit/s.
    pub pcie_gbps: f64,
    /// PCIe reads the NIC may have outstanding at once (tags).
    pub pcie_tags: u32,
    /// Processing units: WQEs handled at once. A unit stalls for each miss's PCIe read.
    pub units: u32,
    /// A unit's time per WQE when everything hits, ns.
    pub unit_ns: f64,
    /// From the engine's completion to the CQE visible in host memory (its DMA write), ns.
    pub cqe_write_ns: f64,
    /// WQE cache: entries (one per doorbelled WQE, held until its CQE) and ways.
    pub wqe_entries: u32,
    /// Its associativity.
    pub wqe_ways: u32,
    /// QP-context (ICM) cache: entries (one per queue pair) and ways.
    pub qpc_entries: u32,
    /// Its associativity.
    pub qpc_ways: u32,
    /// MTT/MPT cache: entries (one per WQE's translation) and ways.
    pub mtt_entries: u32,
    /// Its associativity.
    pub mtt_ways: u32,
    /// A WQE fetched into the WQE cache brings its MTT/MPT entry with it, and a WQE evicted
    /// drags that entry out (what Weir infers from Fig. 2).
    pub wqe_prefetch_mtt: bool,
    /// SwCC's per-QP CC-context table: entries and ways (0 entries: no table).
    pub cc_entries: u32,
    /// Its associativity.
    pub cc_ways: u32,
    /// A CC-context miss's stall (on-NIC DRAM less what the QPN prefetch hides), ns.
    pub cc_miss_ns: f64,
    /// Bytes read over PCIe per WQE, QP context and MTT/MPT entry fetched.
    pub wqe_bytes: u32,
    /// See `wqe_bytes`.
    pub qpc_bytes: u32,
    /// See `wqe_bytes`.
    pub mtt_bytes: u32,
    /// Link bytes per packet besides payload the NIC's transmit stage reserves (headers and
    /// framing of a WRITE ONLY over IPv4: 98), so that it never outruns the link.
    pub tx_overhead_bytes: u32,
}

/// The presets' names.
pub const PRESETS: &[&str] = &["connectx6-like", "swcc-like"];

impl RnicParams {
    /// A named preset.
    pub fn preset(name: &str) -> Option<RnicParams> {
        let cx6 = RnicParams {
            preset: "connectx6-like",
            mmio_ns: 100.0,
            pcie_read_ns: 800.0,
            pcie_gbps: 200.0,
            pcie_tags: 256,
            units: 24,
            unit_ns: 100.0,
            cqe_write_ns: 400.0,
            wqe_entries: 12_288,
            wqe_ways: 12_288,
            qpc_entries: 2_048,
            qpc_ways: 8,
            mtt_entries: 16_384,
            mtt_ways: 16_384,
            wqe_prefetch_mtt: true,
            cc_entries: 0,
            cc_ways: 4,
            cc_miss_ns: 40.0,
            wqe_bytes: 64,
            qpc_bytes: 256,
            mtt_bytes: 64,
            tx_overhead_bytes: 98,
        };
        match name {
            "connectx6-like" => Some(cx6),
            // SwCC's QP-aware table: 128 KB of 128 B slots, 4-way LRU (1,024 queue pairs),
            // backed by on-NIC DRAM (100 ns) with the QPN prefetch hiding about 60 ns.
            "swcc-like" => Some(RnicParams {
                preset: "swcc-like",
                cc_entries: 1_024,
                cc_ways: 4,
                cc_miss_ns: 40.0,
                ..cx6
            }),
            _ => None,
        }
    }

    /// `spec`'s preset with its overrides, checked; errors start with `rnic.FIELD:`.
    pub fn resolve(spec: &RnicSpec) -> Result<RnicParams, String> {
        let name = spec.preset.as_deref().unwrap_or("connectx6-like");
        let mut p = RnicParams::preset(name).ok_or_else(|| {
            format!(
                "rnic.preset: unknown preset `{name}` (known: {})",
                PRESETS.join(", ")
            )
        })?;
        fn ns(field: &str, v: Option<f64>, into: &mut f64) -> Result<(), String> {
            if let Some(v) = v {
                // Written so that NaN fails too.
                if !(v >= 0.0 && v <= crate::MAX_DELAY_NS as f64) {
                    return Err(format!(
                        "rnic.{field}: expected a latency of 0 ..= {} ns, got {v}",
                        crate::MAX_DELAY_NS
                    ));
                }
                *into = v;
            }
            Ok(())
        }
        fn count(field: &str, v: Option<u32>, into: &mut u32, max: u32) -> Result<(), String> {
            if let Some(v) = v {
                if !(1..=max).contains(&v) {
                    return Err(format!("rnic.{field}: expected 1 ..= {max}, got {v}"));
                }
                *into = v;
            }
            Ok(())
        }
        ns("mmio_ns", spec.mmio_ns, &mut p.mmio_ns)?;
        ns("pcie_read_ns", spec.pcie_read_ns, &mut p.pcie_read_ns)?;
        ns("unit_ns", spec.unit_ns, &mut p.unit_ns)?;
        ns("cqe_write_ns", spec.cqe_write_ns, &mut p.cqe_write_ns)?;
        ns("cc_miss_ns", spec.cc_miss_ns, &mut p.cc_miss_ns)?;
        if let Some(g) = spec.pcie_gbps {
            if !(g > 0.0 && g <= 10_000.0) {
                return Err(format!(
                    "rnic.pcie_gbps: expected a bandwidth in (0, 10000] Gbit/s, got {g}"
                ));
            }
            p.pcie_gbps = g;
        }
        const MAX_ENTRIES: u32 = 1 << 24;
        count("pcie_tags", spec.pcie_tags, &mut p.pcie_tags, 65_536)?;
        count("units", spec.units, &mut p.units, 4_096)?;
        count(
            "wqe_entries",
            spec.wqe_entries,
            &mut p.wqe_entries,
            MAX_ENTRIES,
        )?;
        count("wqe_ways", spec.wqe_ways, &mut p.wqe_ways, MAX_ENTRIES)?;
        count(
            "qpc_entries",
            spec.qpc_entries,
            &mut p.qpc_entries,
            MAX_ENTRIES,
        )?;
        count("qpc_ways", spec.qpc_ways, &mut p.qpc_ways, MAX_ENTRIES)?;
        count(
            "mtt_entries",
            spec.mtt_entries,
            &mut p.mtt_entries,
            MAX_ENTRIES,
        )?;
        count("mtt_ways", spec.mtt_ways, &mut p.mtt_ways, MAX_ENTRIES)?;
        count(
            "cc_entries",
            spec.cc_entries,
            &mut p.cc_entries,
            MAX_ENTRIES,
        )?;
        count("cc_ways", spec.cc_ways, &mut p.cc_ways, MAX_ENTRIES)?;
        count("wqe_bytes", spec.wqe_bytes, &mut p.wqe_bytes, 1 << 16)?;
        count("qpc_bytes", spec.qpc_bytes, &mut p.qpc_bytes, 1 << 16)?;
        count("mtt_bytes", spec.mtt_bytes, &mut p.mtt_bytes, 1 << 16)?;
        if let Some(v) = spec.tx_overhead_bytes {
            if v > 1 << 16 {
                return Err(format!(
                    "rnic.tx_overhead_bytes: expected 0 ..= 65536, got {v}"
                ));
            }
            p.tx_overhead_bytes = v;
        }
        if let Some(b) = spec.wqe_prefetch_mtt {
            p.wqe_prefetch_mtt = b;
        }
        for (field, entries, ways) in [
            ("wqe", p.wqe_entries, p.wqe_ways),
            ("qpc", p.qpc_entries, p.qpc_ways),
            ("mtt", p.mtt_entries, p.mtt_ways),
            ("cc", p.cc_entries, p.cc_ways),
        ] {
            if entries > 0 && (entries < ways || entries % ways != 0) {
                return Err(format!(
                    "rnic.{field}_ways: {ways} ways must divide {field}_entries ({entries})"
                ));
            }
        }
        Ok(p)
    }
}

/// The `[weir]` table: every app's posts go through a Weir pacer, one per host (the
/// `WeirConfig` fields, in the units `sluice perf --pacer-param` takes).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeirSpec {
    /// `base_delay`, us.
    pub base_delay_us: Option<f64>,
    /// Additive increase, Mbit/s per completion.
    pub inc_mbps: Option<f64>,
    /// Additive decrease, Mbit/s per completion.
    pub dec_mbps: Option<f64>,
    /// The initial rate and ceiling, Gbit/s (default: the host's link rate).
    pub line_rate_gbps: Option<f64>,
    /// The floor, Gbit/s.
    pub min_rate_gbps: Option<f64>,
    /// Split WQEs longer than this (0: never).
    pub split_bytes: Option<u32>,
    /// `W`, the EWMA weight of the previous delay.
    pub ewma_weight: Option<f64>,
    /// `N`, active queue pairs per threshold step.
    pub qps_per_step: Option<u32>,
    /// `init_alpha`.
    pub init_alpha: Option<f64>,
    /// `init_beta`.
    pub init_beta: Option<f64>,
    /// Doorbells between clock synchronisations.
    pub sync_every: Option<u32>,
    /// WQEs of one queue pair one doorbell may carry (`WeirConfig::max_batch`; 1).
    pub max_batch: Option<u32>,
}

/// Send-queue entries per queue pair on a paced host: every piece of a split WQE is a WR
/// of its own, so the engine's send queue (and Weir's `sq_depth`) holds the pieces of
/// `depth` WQEs of `max_size` bytes, as `sluice perf --pacer weir` sizes it; at most 8,192
/// per queue pair and 2^19 over the run's `qps`, since Weir keeps a doorbell time per
/// entry; never fewer than `depth`. With `depth` alone a split WQE's pieces went out one
/// round trip apart: 64 KiB at depth 1 took 16 unloaded delays.
pub fn send_depth(split_bytes: u32, depth: u32, max_size: u64, qps: u32) -> u32 {
    let pieces = if split_bytes == 0 {
        1
    } else {
        max_size.div_ceil(u64::from(split_bytes)).max(1)
    };
    let cap = 8192.min((1u32 << 19) / qps.max(1));
    (u64::from(depth) * pieces)
        .min(u64::from(cap))
        .max(u64::from(depth)) as u32
}

impl WeirSpec {
    /// `split_bytes` as it will be: the field, or Weir's default.
    pub fn split(&self) -> u32 {
        self.split_bytes
            .unwrap_or(WeirConfig::default().split_bytes)
    }

    /// The pacer's configuration for a host of `line_bps` serving QPNs below `max_qpn`,
    /// with apps keeping up to `depth` WQEs posted per queue pair and the engine's send
    /// queues `sq_depth` deep (room for the pieces of split WQEs: [`send_depth`]); errors
    /// start with `weir.FIELD:` (or `weir:` for what `Weir::new` refuses).
    pub fn config(
        &self,
        line_bps: u64,
        max_qpn: u32,
        depth: u32,
        sq_depth: u32,
    ) -> Result<WeirConfig, String> {
        let mut c = WeirConfig {
            max_qpn,
            max_wqes: depth,
            sq_depth: sq_depth.max(depth),
            line_rate: line_bps,
            ..WeirConfig::default()
        };
        let bps = |field: &str, v: f64, unit: f64| -> Result<u64, String> {
            if v.is_finite() && v > 0.0 && v * unit <= 1e13 {
                Ok((v * unit).round() as u64)
            } else {
                Err(format!("weir.{field}: expected a positive rate, got {v}"))
            }
        };
        if let Some(v) = self.base_delay_us {
            if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                return Err(format!(
                    "weir.base_delay_us: expected 0 < base_delay_us <= 1000000, got {v}"
                ));
            }
            c.base_delay = Duration::from_nanos((v * 1e3).round() as u64);
        }
        if let Some(v) = self.inc_mbps {
            c.inc = bps("inc_mbps", v, 1e6)?;
        }
        if let Some(v) = self.dec_mbps {
            c.dec = bps("dec_mbps", v, 1e6)?;
        }
        if let Some(v) = self.line_rate_gbps {
            c.line_rate = bps("line_rate_gbps", v, 1e9)?;
        }
        if let Some(v) = self.min_rate_gbps {
            c.min_rate = bps("min_rate_gbps", v, 1e9)?;
        }
        if let Some(v) = self.split_bytes {
            c.split_bytes = v;
        }
        if let Some(v) = self.ewma_weight {
            c.ewma_weight = v;
        }
        if let Some(v) = self.qps_per_step {
            c.qps_per_step = v;
        }
        if let Some(v) = self.init_alpha {
            c.init_alpha = v;
        }
        if let Some(v) = self.init_beta {
            c.init_beta = v;
        }
        if let Some(v) = self.sync_every {
            c.sync_every = v;
        }
        if let Some(v) = self.max_batch {
            c.max_batch = v;
        }
        // Checks what `Weir::new` checks without building one (its state is sized by
        // `max_qpn`): a throwaway of one QPN.
        sluice_core::weir::Weir::new(WeirConfig { max_qpn: 1, ..c })
            .map_err(|e| format!("weir: {e}"))?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> RnicSpec {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn presets_resolve_and_overrides_apply() {
        let p = RnicParams::resolve(&spec("")).unwrap();
        assert_eq!(p, RnicParams::preset("connectx6-like").unwrap());
        let p = RnicParams::resolve(&spec("preset = \"swcc-like\"\nunits = 4")).unwrap();
        assert_eq!((p.cc_entries, p.cc_ways, p.units), (1024, 4, 4));
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        for (text, field) in [
            ("preset = \"cx9\"", "rnic.preset:"),
            ("wqe_entries = 0", "rnic.wqe_entries:"),
            ("qpc_entries = 0", "rnic.qpc_entries:"),
            ("units = 0", "rnic.units:"),
            ("pcie_read_ns = -5", "rnic.pcie_read_ns:"),
            ("mmio_ns = -1", "rnic.mmio_ns:"),
            ("cqe_write_ns = nan", "rnic.cqe_write_ns:"),
            ("pcie_gbps = 0", "rnic.pcie_gbps:"),
            ("wqe_entries = 100\nwqe_ways = 8", "rnic.wqe_ways:"),
        ] {
            let e = RnicParams::resolve(&spec(text)).unwrap_err();
            assert!(e.starts_with(field), "{text}: {e}");
        }
        let e = toml::from_str::<RnicSpec>("wqe_entrys = 5").unwrap_err();
        assert!(e.to_string().contains("wqe_entrys"), "{e}");
    }

    #[test]
    fn weir_fields_are_checked() {
        let w: WeirSpec = toml::from_str("base_delay_us = 4\ninc_mbps = 20").unwrap();
        let c = w.config(100_000_000_000, 10, 128, 512).unwrap();
        assert_eq!((c.base_delay.as_nanos(), c.inc), (4_000, 20_000_000));
        assert_eq!((c.max_wqes, c.sq_depth), (128, 512));
        // The send queue is never shallower than the app's depth.
        assert_eq!(w.config(100_000_000_000, 10, 128, 1).unwrap().sq_depth, 128);
        assert_eq!(w.split(), 4096);
        for (text, field) in [
            ("base_delay_us = -1", "weir.base_delay_us:"),
            ("inc_mbps = 0", "weir.inc_mbps:"),
            ("init_alpha = 0.5\ninit_beta = 1", "weir:"),
            ("max_batch = 0", "weir:"),
        ] {
            let w: WeirSpec = toml::from_str(text).unwrap();
            let e = w.config(100_000_000_000, 10, 128, 128).unwrap_err();
            assert!(e.starts_with(field), "{text}: {e}");
        }
    }
}
