//! Modelled payload services (`[services]`, issue 35): RoCE BALBOA's per-QP encryption and
//! inspection, as what they cost. Payloads are lengths in the simulator, so nothing is
//! encrypted or classified here; a service is its cost per packet and per byte, paid at a
//! host in one of two places:
//!
//! - **in line**: a stage on the datapath. Encryption seals each data packet at the sending
//!   host before its port takes it and opens it at the receiving host before its engine sees
//!   it; each host has one sealing and one opening stage (one core each), a packet at a time,
//!   so a stage slower than the link limits throughput and adds its time to latency.
//!   Encryption also grows every payload by its nonce and tag on the wire, and the queue
//!   pair segments messages that much shorter (`docs/encryption.md`, MTU).
//! - **beside the path**: inspection looks at a copy of each received data packet and never
//!   delays it. Its work has its own budget: an inspector with more than `budget_us` of work
//!   waiting passes the packet over uninspected (counted), as a classifier that cannot keep
//!   up must (sample), rather than hold the datapath.
//!
//! - **on a worker** (asynchronous): the DLRM offload on READ responses (`offload`), and
//!   inspection with `placement = "worker"`. The real datapath runs these on one worker
//!   thread per stage kind and device (`sluice_net::ServiceWorker`); here each host has one
//!   modelled core per stage kind, and the host's real engine drives it through its own
//!   asynchronous seam (`Service::asynchronous`, offer and collect): what is out with a
//!   worker counts against the engine's receive credit (`credit`), a completion whose
//!   packets are out waits for them (the offload's always; inspection's only until the
//!   next time the engine is driven), and past the credit the offload's packet is dropped
//!   and recovered by the transport while inspection's goes on uninspected
//!   (`network/worker.rs`).
//!
//! Off unless a scenario selects a service, and then only on the queue pairs that have it:
//! a scenario without `[services]` runs exactly as before.

use serde::Deserialize;

/// Bytes encryption puts in front of every payload (its explicit nonce), as `sluice-crypt`
/// does (`docs/encryption.md`, wire format; the CLI's tests pin the two together).
pub const ENCRYPT_HEAD: u32 = 8;
/// Bytes it puts behind (its GCM tag).
pub const ENCRYPT_TAIL: u32 = 16;

/// Encryption's default cost per packet, ns: AES-256-GCM (aws-lc-rs) through
/// `sluice-crypt`'s `EncryptService`, one direction (seal or open), fitted to
/// `cargo bench -p sluice-crypt --bench cipher` on this project's 2-core VM (2026-11-27,
/// load average 0.3: 4 KiB at 2.99 GB/s and 1 KiB at 1.93 GB/s for seal plus open, so
/// 685 ns and 265 ns per side; a line through both).
pub const ENCRYPT_PACKET_NS: f64 = 125.0;
/// Encryption's default cost per byte, ns (the same fit: 7.3 GB/s on one core at large
/// packets, before the per-packet part).
pub const ENCRYPT_BYTE_NS: f64 = 0.137;
/// Inspection's default cost per byte, ns: `sluice-inspect`'s classifier on one core,
/// `cargo bench -p sluice-inspect --bench classify` (same VM and day: 4.22, 3.88 and
/// 2.82 ns/B on code, text and random 4 KiB payloads; their mean). Its per-chunk work is
/// in the per-byte figure, so no per-packet part.
pub const INSPECT_BYTE_NS: f64 = 3.64;
/// Inspection's default budget: the work it may have waiting, us.
pub const INSPECT_BUDGET_US: f64 = 100.0;
/// The DLRM offload's default cost per byte, ns: `sluice-inspect`'s chain on one core,
/// `cargo bench -p sluice-inspect --bench dlrm` (`docs/inspection.md`: the last 4 KiB
/// packet's words take 2.8-2.9 us in line, so 2.9 us / 4096 B). No per-packet part.
pub const OFFLOAD_BYTE_NS: f64 = 0.71;

/// Where a service runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// On the datapath: the packet waits for it.
    InLine,
    /// On a copy: the packet does not wait.
    Beside,
    /// On the host's worker core, asynchronously, within the engine's receive credit.
    Worker,
}

/// What one service costs and where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceCost {
    /// Per packet, ns.
    pub ns_per_packet: Option<f64>,
    /// Per payload byte, ns.
    pub ns_per_byte: Option<f64>,
    /// In line, beside the path, or on a worker (encryption: in line only; inspection:
    /// beside by default; the offload: on a worker only).
    pub placement: Option<Placement>,
    /// Beside the path: the work it may have waiting before it passes packets over, us.
    pub budget_us: Option<f64>,
}

/// A service's cost with every default filled in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Per packet, ps.
    pub packet_ps: f64,
    /// Per byte, ps.
    pub byte_ps: f64,
    /// Where it runs.
    pub placement: Placement,
    /// Beside the path: its budget, ps.
    pub budget_ps: u64,
}

impl Cost {
    /// The time a packet of `bytes` payload takes, ps.
    pub fn ps(&self, bytes: u32) -> u64 {
        (self.packet_ps + self.byte_ps * f64::from(bytes)).round() as u64
    }
}

/// The services a queue pair has, as bits.
pub type ServiceSet = u8;
/// In-line authenticated encryption.
pub const ENCRYPT: ServiceSet = 1;
/// Inspection.
pub const INSPECT: ServiceSet = 2;
/// The DLRM offload (on a worker, on the payloads the queue pair receives: a READ's
/// responses at its requester).
pub const OFFLOAD: ServiceSet = 4;

/// The engine's receive credit (`[services.credit]`): what may be out with the workers.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreditConfig {
    /// Packets (default 1,024, the engine's).
    pub packets: Option<u32>,
    /// Payload bytes (default 4 MiB, the engine's).
    pub bytes: Option<u64>,
}

/// The `[services]` table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServicesConfig {
    /// The services of every queue pair (flows, and apps without `services` of their own).
    pub all: Vec<String>,
    /// Encryption's cost (defaults: measured, above).
    pub encrypt: Option<ServiceCost>,
    /// Inspection's cost (defaults: measured, above; beside the path).
    pub inspect: Option<ServiceCost>,
    /// The DLRM offload's cost (defaults: measured, above; on a worker).
    pub offload: Option<ServiceCost>,
    /// The engines' receive credit (defaults: the engine's).
    pub credit: Option<CreditConfig>,
}

/// Most a cost may be per packet or per byte, ns (a typo's guard, not a model's limit).
const MAX_NS: f64 = 1e6;

impl ServicesConfig {
    /// The set `names` names; the error names `field`.
    pub fn set_of(names: &[String], field: &str) -> Result<ServiceSet, String> {
        let mut set = 0;
        for (i, n) in names.iter().enumerate() {
            set |= match n.as_str() {
                "encrypt" => ENCRYPT,
                "inspect" => INSPECT,
                "offload" => OFFLOAD,
                other => {
                    return Err(format!(
                        "{field}[{i}]: unknown service `{other}` (modelled: encrypt, inspect, \
                         offload)"
                    ));
                }
            };
        }
        Ok(set)
    }

    /// Every queue pair's set.
    pub fn all_set(&self) -> ServiceSet {
        Self::set_of(&self.all, "services.all").expect("checked when loaded")
    }

    /// Checks every field; the error names it.
    pub fn check(&self) -> Result<(), String> {
        Self::set_of(&self.all, "services.all")?;
        for (name, c) in [
            ("encrypt", &self.encrypt),
            ("inspect", &self.inspect),
            ("offload", &self.offload),
        ] {
            let Some(c) = c else { continue };
            for (field, v) in [
                ("ns_per_packet", c.ns_per_packet),
                ("ns_per_byte", c.ns_per_byte),
            ] {
                if let Some(v) = v {
                    if !(0.0..=MAX_NS).contains(&v) {
                        return Err(format!(
                            "services.{name}.{field}: expected 0 ..= {MAX_NS} ns, got {v}"
                        ));
                    }
                }
            }
            if let Some(b) = c.budget_us {
                if !(0.0..=1e6).contains(&b) {
                    return Err(format!(
                        "services.{name}.budget_us: expected 0 ..= 1000000 us, got {b}"
                    ));
                }
            }
        }
        if let Some(c) = &self.offload {
            if c.placement.is_some_and(|p| p != Placement::Worker) {
                return Err("services.offload.placement: the offload runs on a worker only".into());
            }
            if c.budget_us.is_some() {
                return Err(
                    "services.offload.budget_us: the receive credit (`services.credit`) \
                     bounds a worker"
                        .into(),
                );
            }
        }
        if let Some(c) = &self.inspect {
            if c.placement == Some(Placement::Worker) && c.budget_us.is_some() {
                return Err(
                    "services.inspect.budget_us: on a worker, the receive credit \
                     (`services.credit`) bounds it"
                        .into(),
                );
            }
        }
        if let Some(c) = &self.credit {
            if c.packets == Some(0) || c.bytes == Some(0) {
                return Err(
                    "services.credit: expected at least 1 packet and 1 byte (a credit of \
                     nothing would refuse every payload)"
                        .into(),
                );
            }
        }
        if let Some(c) = &self.encrypt {
            if c.placement.is_some_and(|p| p != Placement::InLine) {
                return Err(
                    "services.encrypt.placement: encryption changes the payload, so it \
                            runs in line only"
                        .into(),
                );
            }
            if c.budget_us.is_some() {
                return Err(
                    "services.encrypt.budget_us: only a service beside the path has a \
                            budget"
                        .into(),
                );
            }
        }
        Ok(())
    }

    /// Encryption's cost, defaults filled in.
    pub fn encrypt_cost(&self) -> Cost {
        resolve(
            self.encrypt.as_ref(),
            ENCRYPT_PACKET_NS,
            ENCRYPT_BYTE_NS,
            Placement::InLine,
        )
    }

    /// Inspection's cost, defaults filled in.
    pub fn inspect_cost(&self) -> Cost {
        resolve(
            self.inspect.as_ref(),
            0.0,
            INSPECT_BYTE_NS,
            Placement::Beside,
        )
    }

    /// The DLRM offload's cost, defaults filled in (always on a worker).
    pub fn offload_cost(&self) -> Cost {
        resolve(
            self.offload.as_ref(),
            0.0,
            OFFLOAD_BYTE_NS,
            Placement::Worker,
        )
    }

    /// The engines' receive credit, defaults filled in.
    pub fn credit(&self) -> sluice_core::ServiceCredit {
        let d = sluice_core::ServiceCredit::default();
        let c = self.credit.unwrap_or(CreditConfig {
            packets: None,
            bytes: None,
        });
        sluice_core::ServiceCredit {
            packets: c.packets.unwrap_or(d.packets),
            bytes: c.bytes.unwrap_or(d.bytes),
        }
    }

    /// Whether queue pairs with `set` have a stage on a worker.
    pub fn on_worker(&self, set: ServiceSet) -> bool {
        set & OFFLOAD != 0
            || (set & INSPECT != 0 && self.inspect_cost().placement == Placement::Worker)
    }
}

fn resolve(c: Option<&ServiceCost>, packet_ns: f64, byte_ns: f64, placement: Placement) -> Cost {
    let c = c.copied().unwrap_or(ServiceCost {
        ns_per_packet: None,
        ns_per_byte: None,
        placement: None,
        budget_us: None,
    });
    Cost {
        packet_ps: c.ns_per_packet.unwrap_or(packet_ns) * 1e3,
        byte_ps: c.ns_per_byte.unwrap_or(byte_ns) * 1e3,
        placement: c.placement.unwrap_or(placement),
        budget_ps: (c.budget_us.unwrap_or(INSPECT_BUDGET_US) * 1e6).round() as u64,
    }
}

/// What the modelled services did over a run, summed over hosts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceCounters {
    /// Data packets sealed at their senders.
    pub sealed_packets: u64,
    /// Their payload bytes (before the overhead).
    pub sealed_bytes: u64,
    /// Time the sealing stages were busy, ns.
    pub seal_busy_ns: u64,
    /// Data packets through the receiving hosts' in-line stages (opening, in-line
    /// inspection).
    pub opened_packets: u64,
    /// Time those stages were busy, ns.
    pub open_busy_ns: u64,
    /// The most packets waiting for one host's receiving stage.
    pub open_max_waiting: u64,
    /// Data packets inspected.
    pub inspected_packets: u64,
    /// Their payload bytes.
    pub inspected_bytes: u64,
    /// Time the inspectors were busy, ns.
    pub inspect_busy_ns: u64,
    /// Data packets an inspector beside the path passed over (over its budget).
    pub inspect_skipped: u64,
    /// The workers' figures, when a queue pair has a stage on one.
    pub worker: Option<WorkerCounters>,
}

/// What the hosts' modelled workers did (`Placement::Worker`), summed over hosts, and what
/// their engines counted of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerCounters {
    /// Payloads the workers took (offered by the engines within the credit).
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Time the workers were busy, ns.
    pub busy_ns: u64,
    /// The most payloads out with one host's workers at once.
    pub peak_out_packets: u64,
    /// The most payload bytes out with one host's workers at once (the engine's own
    /// figure: `Counters::service_queue_peak_bytes`).
    pub peak_out_bytes: u64,
    /// Received packets the engines dropped past the credit (an offload's), recovered by
    /// the transport (`Counters::drops_service_credit`).
    pub credit_drops: u64,
    /// Payloads that went on uninspected past the credit (inspection's,
    /// `Counters::service_uninspected`).
    pub uninspected: u64,
    /// Completions that waited for a worker (`Counters::service_held_completions`).
    pub held_completions: u64,
}

/// An in-line service as the engine sees it in the simulator: it does nothing to a
/// length-only payload (the engine passes in-line stages over there), but declares
/// encryption's overhead, so the queue pair segments messages as an encrypting one does.
#[derive(Debug, Default)]
pub struct EncryptOverhead;

impl sluice_core::policy::Service for EncryptOverhead {
    fn name(&self) -> &str {
        "encrypt"
    }

    fn in_line(&self) -> bool {
        true
    }

    fn overhead(&self) -> sluice_core::policy::Overhead {
        sluice_core::policy::Overhead {
            head: ENCRYPT_HEAD,
            tail: ENCRYPT_TAIL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ServicesConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_are_the_measured_costs_and_encryption_is_in_line() {
        let c = parse("all = [\"encrypt\", \"inspect\"]\n");
        c.check().unwrap();
        assert_eq!(c.all_set(), ENCRYPT | INSPECT);
        let e = c.encrypt_cost();
        assert_eq!(e.placement, Placement::InLine);
        // 125 ns + 4096 x 0.137 ns.
        assert_eq!(e.ps(4096), 125_000 + 561_152);
        let i = c.inspect_cost();
        assert_eq!(i.placement, Placement::Beside);
        assert_eq!(i.ps(1000), 3_640_000);
        assert_eq!(i.budget_ps, 100_000_000);
    }

    #[test]
    fn the_offload_and_the_credit_default_to_the_measured_cost_and_the_engines_credit() {
        let c = parse("all = [\"offload\"]\n");
        c.check().unwrap();
        assert_eq!(c.all_set(), OFFLOAD);
        assert!(c.on_worker(OFFLOAD) && !c.on_worker(INSPECT | ENCRYPT));
        let o = c.offload_cost();
        assert_eq!((o.placement, o.ps(4096)), (Placement::Worker, 2_908_160));
        assert_eq!(c.credit(), sluice_core::ServiceCredit::default());
        let c = parse("[inspect]\nplacement = \"worker\"\n[credit]\npackets = 8\n");
        c.check().unwrap();
        assert!(c.on_worker(INSPECT));
        assert_eq!(
            (c.credit().packets, c.credit().bytes),
            (8, sluice_core::ServiceCredit::default().bytes)
        );
    }

    #[test]
    fn given_costs_replace_the_defaults_field_by_field() {
        let c = parse(
            "[encrypt]\nns_per_packet = 25\n[inspect]\nns_per_byte = 0\nplacement = \"in-line\"\n",
        );
        c.check().unwrap();
        assert_eq!(c.all_set(), 0);
        assert_eq!(c.encrypt_cost().ps(1000), 25_000 + 137_000);
        assert_eq!(c.inspect_cost().ps(1000), 0);
        assert_eq!(c.inspect_cost().placement, Placement::InLine);
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        let e = parse("all = [\"compress\"]\n").check().unwrap_err();
        assert!(
            e.contains("services.all[0]") && e.contains("compress"),
            "{e}"
        );
        let e = parse("[encrypt]\nplacement = \"beside\"\n")
            .check()
            .unwrap_err();
        assert!(e.contains("services.encrypt.placement"), "{e}");
        let e = parse("[encrypt]\nbudget_us = 3\n").check().unwrap_err();
        assert!(e.contains("services.encrypt.budget_us"), "{e}");
        let e = parse("[inspect]\nns_per_byte = -1\n").check().unwrap_err();
        assert!(e.contains("services.inspect.ns_per_byte"), "{e}");
        let e = parse("[inspect]\nbudget_us = 1e9\n").check().unwrap_err();
        assert!(e.contains("services.inspect.budget_us"), "{e}");
        assert!(toml::from_str::<ServicesConfig>("[encrypt]\nrate = 1\n").is_err());
        assert!(toml::from_str::<ServicesConfig>("speed = 1\n").is_err());
    }
}
