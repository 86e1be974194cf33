//! Scenario files: what to simulate, as TOML. Every table rejects fields it does not know,
//! and every value is checked before a run starts, so a typo is an error naming the field
//! rather than a default silently used. `docs/sim.md` documents each field.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::topology::TopologySpec;
use crate::workload::WorkloadSpec;

/// A whole scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A name for reports.
    #[serde(default = "default_name")]
    pub name: String,
    /// Seeds every random choice of a run (workload, ECMP hashes, marking), so the same
    /// seed gives the same files.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated time after which a run stops even if flows are unfinished (they are
    /// reported as such). At most one hour.
    #[serde(default = "default_time_limit_us")]
    pub time_limit_us: f64,
    /// The fabric.
    pub topology: TopologySpec,
    /// How every switch buffers, marks, pauses and forwards.
    #[serde(default)]
    pub switch: SwitchConfig,
    /// How every host's RoCE transport behaves.
    #[serde(default)]
    pub transport: TransportConfig,
    /// Every host's engine policies besides the control law (defaults: the engine's).
    #[serde(default)]
    pub policies: PoliciesConfig,
    /// The congestion-control algorithms to compare: one run each, same seed and workload.
    #[serde(default = "default_cc")]
    pub cc: Vec<CcConfig>,
    /// The flows to run (default none).
    #[serde(default)]
    pub workload: WorkloadSpec,
    /// Closed-loop applications, perftest-like, each in a tenant (`[[app]]` tables).
    #[serde(default, rename = "app")]
    pub apps: Vec<crate::app::AppSpec>,
    /// What is sampled besides flow completion times.
    #[serde(default)]
    pub output: OutputConfig,
    /// Per-link delays and link failures (default none: every link as its topology builds it).
    #[serde(default)]
    pub links: crate::links::LinksConfig,
    /// The receiving NIC's per-packet reorder cost, from its tracker's work (default none:
    /// packets are handed to the engine as they arrive).
    #[serde(default)]
    pub reorder_cost: Option<crate::links::ReorderCost>,
    /// An RNIC model with bounded caches in front of every host that runs apps (`[rnic]`,
    /// issue 34); none without the table.
    #[serde(default)]
    pub rnic: Option<crate::rnic::RnicSpec>,
    /// Apps post through a Weir doorbell pacer per host (`[weir]`, issue 34); none without
    /// the table.
    #[serde(default)]
    pub weir: Option<crate::rnic::WeirSpec>,
    /// Modelled payload services (`[services]`, issue 35): their costs, and the services of
    /// every queue pair (default none).
    #[serde(default)]
    pub services: crate::services::ServicesConfig,
    /// The directory relative paths in the scenario (CDF and flow files) start from.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

fn default_name() -> String {
    "scenario".to_string()
}
fn default_seed() -> u64 {
    1
}
fn default_time_limit_us() -> f64 {
    1_000_000.0
}
fn default_cc() -> Vec<CcConfig> {
    vec![CcConfig {
        name: "none".to_string(),
        label: None,
        params: toml::Table::new(),
        ack_every_packets: None,
        decoupled: None,
        scheduler: None,
    }]
}

/// How switches forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// Per flow: a hash of the 5-tuple (the UDP source port is the entropy).
    Ecmp,
    /// Per packet and per hop: each switch picks uniformly at random among its ports on a
    /// shortest path.
    Spray,
    /// Per flowlet: a flow may change path after a gap of `flowlet_gap_us`.
    Flowlet,
    /// Per packet, to the candidate port with the shortest queue.
    Adaptive,
}

/// Which ports a switch may forward on towards a host (`routing` picks among them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteSet {
    /// Every port on a hop-count shortest path. On a dragonfly these include ways through a
    /// third group (global, global, local) as short as the minimal route.
    #[default]
    Shortest,
    /// A dragonfly's minimal routes (Kim et al.): between two groups only the global links
    /// joining them, reached by at most a local hop (`topology::DragonflyMinimal`).
    DragonflyMinimal,
}

/// Switch settings, the same for every switch. A field left out takes its value from
/// `Default` (one statement of each default).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchConfig {
    /// Packet buffer shared by all the ports of a switch.
    pub buffer_bytes: u64,
    /// Dynamic threshold (Choudhury and Hahne): without PFC, an egress queue may hold at
    /// most alpha times the free buffer.
    pub dt_alpha: f64,
    /// How a switch picks among the ports on a shortest path.
    pub routing: Routing,
    /// Which ports are on a shortest path: hop-count or, on a dragonfly, its minimal routes.
    /// With `nonminimal_paths` above 0 a dragonfly takes its minimal routes whatever this
    /// says (a Valiant path's legs need them).
    pub routes: RouteSet,
    /// With flowlet routing, the idle gap after which a flow may take another path.
    pub flowlet_gap_us: f64,
    /// On a dragonfly, this many Valiant paths (through an intermediate group) per host pair
    /// beside the minimal ones; a packet's source router picks among them by the routing
    /// mode (per flow, per packet or per flowlet). 0: minimal paths only.
    pub nonminimal_paths: u32,
    /// RED-style ECN marking per egress queue; none without this table.
    pub ecn: Option<EcnConfig>,
    /// Priority flow control (lossless data class); lossy without this table.
    pub pfc: Option<PfcConfig>,
    /// Stamp INT hop records into packets that carry an INT header (HPCC).
    pub int: bool,
    /// ECMP hashes a flow and its reverse alike, the same at every switch (the two hosts
    /// unordered, no switch id): a probe's reply from the probe's source port comes back
    /// along the probed path (`rtt-probe`). Off: each switch hashes the 5-tuple with its id.
    pub symmetric_hash: bool,
    /// Data queues per egress port, served strictly highest priority first (1: one queue,
    /// no priorities); a packet's queue comes from its DSCP (`crate::priority`).
    pub priorities: u8,
    /// The DSCP of priority 0 (priority `p` is `dscp_base + p`), as hosts write it.
    pub dscp_base: u8,
}

impl SwitchConfig {
    /// The strict-priority queues these settings give (checked by `Scenario::validate`).
    pub fn priority_queues(&self) -> Result<crate::priority::Priorities, String> {
        crate::priority::Priorities::new(self.priorities, self.dscp_base)
    }
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            buffer_bytes: 32 * 1024 * 1024,
            dt_alpha: 1.0,
            routing: Routing::Ecmp,
            routes: RouteSet::Shortest,
            flowlet_gap_us: 10.0,
            nonminimal_paths: 0,
            ecn: None,
            pfc: None,
            int: true,
            symmetric_hash: false,
            priorities: 1,
            dscp_base: crate::priority::DEFAULT_DSCP_BASE,
        }
    }
}

/// RED marking on the bytes queued ahead: none up to `kmin_bytes`, then with a chance
/// rising linearly to `pmax` at `kmax_bytes`, every packet above.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EcnConfig {
    /// Up to this many bytes queued, no packet is marked.
    pub kmin_bytes: u64,
    /// Above this many bytes queued, every packet is marked.
    pub kmax_bytes: u64,
    /// The chance of marking at `kmax_bytes`.
    pub pmax: f64,
}

impl EcnConfig {
    /// The chance a packet finding `queued` bytes ahead is marked.
    pub fn chance(&self, queued: u64) -> f64 {
        if queued <= self.kmin_bytes {
            0.0
        } else if queued > self.kmax_bytes {
            1.0
        } else {
            self.pmax * (queued - self.kmin_bytes) as f64
                / (self.kmax_bytes - self.kmin_bytes).max(1) as f64
        }
    }
}

/// PFC on the data class: a switch pauses an upstream port when the bytes that arrived
/// through it and still sit in the buffer exceed `xoff_bytes`, and resumes it below
/// `xon_bytes`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PfcConfig {
    /// Pause the upstream port above this many of its bytes buffered.
    pub xoff_bytes: u64,
    /// Resume it below this many.
    pub xon_bytes: u64,
    /// Per-priority PFC (802.1Qbb): each data queue of `[switch] priorities` is a lossless
    /// class of its own, counted per ingress port and paused alone (the thresholds apply
    /// to each). Off (default): one class, a pause stops every priority.
    #[serde(default)]
    pub per_priority: bool,
}

/// Loss recovery of every queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryMode {
    /// A NAK resends everything from the lost packet on (what RoCE NICs do).
    GoBackN,
    /// Only the lost packets are resent.
    SelectiveRepeat,
}

/// Transport settings of every host (a field left out takes its `Default`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    pub mtu: u32,
    /// How lost packets are recovered.
    pub recovery: RecoveryMode,
    /// Unacknowledged request packets a queue pair may have.
    pub window_packets: u32,
    /// The responder acknowledges at least every this many packets (1: every packet, as
    /// HPCC's and Swift's per-packet feedback wants).
    pub ack_every_packets: u32,
    /// The requester asks for an ACK (AckReq) on every this many packets; it takes an RTT
    /// sample on such packets (one outstanding), which TIMELY needs often.
    pub ack_request_every: u32,
    /// The retransmit timeout exponent: 4.096 us x 2^timeout.
    pub timeout: u8,
    /// Retries after a timeout before the flow fails.
    pub retry_cnt: u8,
    /// PCIe/DMA latency added to every packet a host sends and receives (at most 1 s).
    pub nic_delay_ns: u64,
    /// Data bytes a host's NIC takes from the engine ahead of its link (its transmit
    /// buffer, first in first out; at most 1 GiB). 0: one packet at a time, taken when the
    /// link is free.
    pub nic_tx_buffer_bytes: u64,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            mtu: 1024,
            recovery: RecoveryMode::GoBackN,
            window_packets: 1024,
            ack_every_packets: 1,
            ack_request_every: 1,
            timeout: 8,
            retry_cnt: 7,
            nic_delay_ns: 0,
            nic_tx_buffer_bytes: 0,
        }
    }
}

/// One congestion-control algorithm to run: a law of `sluice_control::registry` by name,
/// with parameters over its defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CcConfig {
    /// The law's name in `sluice_control::registry` ("dcqcn", "hpcc", "none", ...).
    pub name: String,
    /// What reports call it (default: the name); two entries of one law need two labels. It
    /// names CSV rows, so it has no commas, quotes or control characters.
    pub label: Option<String>,
    /// Parameters over the law's defaults, by the registry's names.
    #[serde(default)]
    pub params: toml::Table,
    /// Overrides `transport.ack_every_packets` for this algorithm.
    pub ack_every_packets: Option<u32>,
    /// Runs the law behind SCR's decoupled control loop (coalescing queues, modelled
    /// processors) instead of inline on each event.
    pub decoupled: Option<DecoupledConfig>,
    /// Every host's queue-pair scheduler in this algorithm's run, instead of
    /// `[policies] scheduler` (a law whose senders order their queue pairs themselves, as
    /// Homa's send the shortest message first: `scheduler = { name = "srpt" }`).
    pub scheduler: Option<PolicyConfig>,
}

/// SCR's decoupled control loop (`sluice_core::control::Decoupled`): events reach their
/// queue `loop_delay_us` after they happen, and each of `processors` takes `service_us`
/// per run of the law. A field left out takes `ScrConfig`'s default.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecoupledConfig {
    /// Run-to-completion processors (1 ..= 1024).
    pub processors: Option<u32>,
    /// From an event to its arrival in the queue, in us (0 ..= 1 s).
    pub loop_delay_us: Option<f64>,
    /// A processor's time per run, in us (0 ..= 1 s).
    pub service_us: Option<f64>,
    /// SCR's software coalescing of TX events (`sluice_core::control::EarlyExit`): a run
    /// of the law covers at least this many TX bytes; a processor that takes fewer only
    /// carries them, in `early_exit_us`. Absent: hardware-only accumulation.
    pub early_exit_bytes: Option<u32>,
    /// A processor's time for an early exit, in us (0 ..= 1 s; default 0.1).
    pub early_exit_us: Option<f64>,
}

impl DecoupledConfig {
    /// The loop's configuration, or what is wrong (naming the field).
    pub fn scr(&self) -> Result<sluice_core::control::ScrConfig, ScenarioError> {
        let d = sluice_core::control::ScrConfig::default();
        let us = |v: Option<f64>, field: &str, default: std::time::Duration| match v {
            None => Ok(default),
            Some(v) if (0.0..=1e6).contains(&v) => {
                Ok(std::time::Duration::from_nanos((v * 1e3).round() as u64))
            }
            Some(v) => Err(ScenarioError::Invalid(format!(
                "cc.decoupled.{field}: expected 0 ..= 1000000 us, got {v}"
            ))),
        };
        let processors = self.processors.unwrap_or(d.processors);
        if !(1..=1024).contains(&processors) {
            return Err(ScenarioError::Invalid(format!(
                "cc.decoupled.processors: expected 1 ..= 1024, got {processors}"
            )));
        }
        let exit_time = us(
            self.early_exit_us,
            "early_exit_us",
            std::time::Duration::from_nanos(100),
        )?;
        let early_exit = match self.early_exit_bytes {
            None if self.early_exit_us.is_some() => {
                return Err(ScenarioError::Invalid(
                    "cc.decoupled.early_exit_us: needs early_exit_bytes".into(),
                ));
            }
            None => None,
            Some(0) => {
                return Err(ScenarioError::Invalid(
                    "cc.decoupled.early_exit_bytes: expected at least 1".into(),
                ));
            }
            Some(bytes) => Some(sluice_core::control::EarlyExit {
                bytes,
                time: exit_time,
            }),
        };
        Ok(sluice_core::control::ScrConfig {
            processors,
            loop_delay: us(self.loop_delay_us, "loop_delay_us", d.loop_delay)?,
            service_time: us(self.service_us, "service_us", d.service_time)?,
            early_exit,
            ..d
        })
    }
}

impl CcConfig {
    /// What reports call it: `label`, else the law's name.
    pub fn label(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.name)
    }

    /// How the law runs: inline, or behind the decoupled loop.
    pub fn mode(&self) -> Result<sluice_control::registry::Mode, ScenarioError> {
        Ok(match &self.decoupled {
            None => sluice_control::registry::Mode::Inline,
            Some(d) => sluice_control::registry::Mode::Decoupled(d.scr()?),
        })
    }

    /// The parameters as the registry takes them: (name, value as text).
    pub fn param_pairs(&self) -> Result<Vec<(String, String)>, ScenarioError> {
        param_pairs(&self.params, &format!("cc `{}`", self.name))
    }
}

/// Every host's engine policies besides the control law, by the names of
/// `sluice_control::policies` (as `sluice perf --sched`, `--path` and `--tracker` take them):
/// `scheduler = { name = "per-message" }`, `path = { name = "spray", params = { paths = 4 } }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoliciesConfig {
    /// Which eligible queue pair sends next (default `round-robin`).
    pub scheduler: Option<PolicyConfig>,
    /// Each packet's UDP source port, the entropy ECMP hashes (default `ecmp`).
    pub path: Option<PolicyConfig>,
    /// How selective-repeat queue pairs track packets past a gap (default `bitmap`).
    pub tracker: Option<PolicyConfig>,
    /// Payload services on every queue pair, in send order (default none). Payloads are
    /// lengths here: the stages beside the path see lengths, in-line ones are passed over.
    pub services: Vec<PolicyConfig>,
}

/// One policy by name, with parameters over its defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Its name in the registry of its kind.
    pub name: String,
    /// Parameters over its defaults, by the registry's names.
    #[serde(default)]
    pub params: toml::Table,
}

impl PoliciesConfig {
    /// The engine's policies, with `controller` as its control law and `scheduler`, if
    /// given, instead of `self.scheduler` (a `[[cc]]`'s own).
    pub fn build(
        &self,
        controller: Box<dyn sluice_core::control::Controller>,
        scheduler: Option<&PolicyConfig>,
    ) -> Result<sluice_core::Policies, ScenarioError> {
        use sluice_control::policies::{PATH_SELECTORS, Registry, SCHEDULERS, TRACKERS};
        fn one<T>(
            registry: &Registry<T>,
            field: &str,
            config: &Option<PolicyConfig>,
        ) -> Result<T, ScenarioError> {
            let (name, pairs) = match config {
                Some(c) => (c.name.as_str(), param_pairs(&c.params, field)?),
                None => (registry.default_name(), Vec::new()),
            };
            registry
                .build(name, &pairs)
                .map_err(|e| ScenarioError::Invalid(format!("{field}: {e}")))
        }
        Ok(sluice_core::Policies {
            controller,
            scheduler: match scheduler {
                Some(own) => one(&SCHEDULERS, "cc.scheduler", &Some(own.clone()))?,
                None => one(&SCHEDULERS, "policies.scheduler", &self.scheduler)?,
            },
            path: one(&PATH_SELECTORS, "policies.path", &self.path)?,
            tracker: one(&TRACKERS, "policies.tracker", &self.tracker)?,
        })
    }

    /// Whether the path selector exchanges probes with the peer (`rtt-probe`): in the
    /// simulator both ends run the scenario's selector, so both agree to them.
    pub fn path_probes(&self) -> bool {
        self.path.as_ref().is_some_and(|p| {
            sluice_control::policies::PATH_SELECTORS
                .info(&p.name)
                .is_some_and(|i| i.both_ends)
        })
    }

    /// One queue pair's services.
    pub fn build_services(
        &self,
    ) -> Result<Vec<Box<dyn sluice_core::policy::Service>>, ScenarioError> {
        self.services
            .iter()
            .map(|c| {
                let pairs = param_pairs(&c.params, "policies.services")?;
                sluice_control::policies::SERVICES
                    .build(&c.name, &pairs)
                    .map_err(|e| ScenarioError::Invalid(format!("policies.services: {e}")))
            })
            .collect()
    }
}

/// A table of parameters as a registry takes them: (name, value as text).
pub(crate) fn param_pairs(
    params: &toml::Table,
    owner: &str,
) -> Result<Vec<(String, String)>, ScenarioError> {
    params
        .iter()
        .map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    return Err(ScenarioError::Invalid(format!(
                        "{owner}: params.{k}: expected a number, string or boolean"
                    )));
                }
            };
            Ok((k.clone(), text))
        })
        .collect()
}

/// What a run records besides flow completion times (a field left out takes its `Default`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputConfig {
    /// Queue lengths and link throughput are sampled this often (1 ns to one hour).
    pub sample_interval_us: f64,
    /// Per-flow throughput over time is recorded when the workload has at most this many
    /// flows (it costs a lookup per packet).
    pub flow_series_max_flows: u32,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            sample_interval_us: 10.0,
            flow_series_max_flows: 64,
        }
    }
}

/// A scenario could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a scenario: bad TOML, an unknown field, a wrong type.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, naming the field.
        message: String,
    },
    /// A value is out of range or inconsistent; the message names the field.
    #[error("{0}")]
    Invalid(String),
}

impl Scenario {
    /// Reads and checks the scenario in `path`.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Scenario::parse(&text, base).map_err(|e| match e {
            ScenarioError::Parse { message, .. } => ScenarioError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parses and checks scenario `text`; relative paths in it start from `base_dir`.
    pub fn parse(text: &str, base_dir: &Path) -> Result<Scenario, ScenarioError> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: "scenario".to_string(),
            message: e.to_string(),
        })?;
        s.base_dir = base_dir.to_path_buf();
        s.check()?;
        Ok(s)
    }

    /// Checks what the types alone do not.
    pub fn check(&self) -> Result<(), ScenarioError> {
        let bad = |m: String| Err(ScenarioError::Invalid(m));
        // Written so that NaN fails too.
        let max_us = (crate::MAX_TIME_NS / 1_000) as f64;
        if !(self.time_limit_us > 0.0 && self.time_limit_us <= max_us) {
            return bad(format!(
                "time_limit_us: expected a positive number of microseconds, at most {max_us} \
                 (one hour), got {}",
                self.time_limit_us
            ));
        }
        let sw = &self.switch;
        if sw.buffer_bytes == 0 {
            return bad("switch.buffer_bytes: expected a positive number of bytes".into());
        }
        if !(sw.dt_alpha.is_finite() && sw.dt_alpha > 0.0) {
            return bad(format!(
                "switch.dt_alpha: expected a positive number, got {}",
                sw.dt_alpha
            ));
        }
        if !(sw.flowlet_gap_us.is_finite() && sw.flowlet_gap_us >= 0.0) {
            return bad(format!(
                "switch.flowlet_gap_us: expected a number of microseconds >= 0, got {}",
                sw.flowlet_gap_us
            ));
        }
        if let Err(e) = sw.priority_queues() {
            return bad(e);
        }
        if let Err(e) = crate::topology::Valiant::of(&self.topology, sw.nonminimal_paths) {
            return bad(e);
        }
        if sw.routes == RouteSet::DragonflyMinimal {
            if let Err(e) = crate::topology::DragonflyMinimal::of(&self.topology) {
                return bad(e);
            }
        }
        if let Some(ecn) = &sw.ecn {
            if ecn.kmin_bytes > ecn.kmax_bytes {
                return bad(format!(
                    "switch.ecn: kmin_bytes ({}) must not exceed kmax_bytes ({})",
                    ecn.kmin_bytes, ecn.kmax_bytes
                ));
            }
            if !(0.0..=1.0).contains(&ecn.pmax) {
                return bad(format!(
                    "switch.ecn.pmax: expected a probability in [0, 1], got {}",
                    ecn.pmax
                ));
            }
        }
        if let Some(pfc) = &sw.pfc {
            if pfc.xon_bytes > pfc.xoff_bytes || pfc.xoff_bytes == 0 {
                return bad(format!(
                    "switch.pfc: expected 0 < xoff_bytes and xon_bytes <= xoff_bytes, got xoff {} xon {}",
                    pfc.xoff_bytes, pfc.xon_bytes
                ));
            }
        }
        let t = &self.transport;
        if sluice_core::Mtu::from_bytes(t.mtu).is_none() {
            return bad(format!(
                "transport.mtu: expected 256, 512, 1024, 2048 or 4096, got {}",
                t.mtu
            ));
        }
        if t.window_packets == 0 || t.window_packets > 1 << 23 {
            return bad(format!(
                "transport.window_packets: expected 1 ..= 8388608, got {}",
                t.window_packets
            ));
        }
        if t.ack_request_every == 0 {
            return bad("transport.ack_request_every: expected at least 1".into());
        }
        if t.timeout > 31 {
            return bad(format!(
                "transport.timeout: expected an exponent 0 ..= 31, got {}",
                t.timeout
            ));
        }
        if t.nic_delay_ns > crate::MAX_DELAY_NS {
            return bad(format!(
                "transport.nic_delay_ns: expected at most {} (one second), got {}",
                crate::MAX_DELAY_NS,
                t.nic_delay_ns
            ));
        }
        if t.nic_tx_buffer_bytes > 1 << 30 {
            return bad(format!(
                "transport.nic_tx_buffer_bytes: expected at most 1073741824, got {}",
                t.nic_tx_buffer_bytes
            ));
        }
        if t.retry_cnt > 7 {
            return bad(format!(
                "transport.retry_cnt: expected 0 ..= 7, got {}",
                t.retry_cnt
            ));
        }
        let o = &self.output;
        // Samples are taken on whole nanoseconds.
        if !(o.sample_interval_us >= 0.001 && o.sample_interval_us <= max_us) {
            return bad(format!(
                "output.sample_interval_us: expected 0.001 (one nanosecond) ..= {max_us}, got {}",
                o.sample_interval_us
            ));
        }
        if self.cc.is_empty() {
            return bad("cc: expected at least one [[cc]] entry".into());
        }
        // Builds the policies once now, so that a bad name or parameter fails before any run.
        self.policies
            .build(Box::new(sluice_core::control::NoControl), None)?;
        self.policies.build_services()?;
        let mut labels = Vec::new();
        for cc in &self.cc {
            // Builds each law once now so that a bad name or parameter fails before any run.
            let pairs = cc.param_pairs()?;
            sluice_control::registry::build(&cc.name, &pairs, &cc.mode()?)
                .map_err(|e| ScenarioError::Invalid(format!("cc: {e}")))?;
            if let Some(own) = &cc.scheduler {
                self.policies
                    .build(Box::new(sluice_core::control::NoControl), Some(own))?;
            }
            // Labels name rows of the CSV files, unquoted.
            if cc.label().is_empty()
                || cc
                    .label()
                    .contains(|c: char| c == ',' || c == '"' || c.is_control())
            {
                return bad(format!(
                    "cc: label {:?} must be non-empty, without commas, quotes or control characters",
                    cc.label()
                ));
            }
            if labels.contains(&cc.label()) {
                return bad(format!(
                    "cc: two entries are labelled `{}`; give one a distinct `label`",
                    cc.label()
                ));
            }
            labels.push(cc.label());
        }
        if matches!(self.workload, WorkloadSpec::None) && self.apps.is_empty() {
            return bad("workload: expected a [workload] table or [[app]] tables".into());
        }
        for (i, app) in self.apps.iter().enumerate() {
            app.check(self.time_limit_us)
                .map_err(|e| ScenarioError::Invalid(format!("app[{i}].{e}")))?;
            if let Some(cdf) = &app.size_cdf {
                crate::workload::Cdf::load(cdf, &self.base_dir)
                    .map_err(|e| ScenarioError::Invalid(format!("app[{i}].size_cdf: {e}")))?;
            }
            if let Some(law) = &app.cc {
                let pairs = param_pairs(&law.params, &format!("app[{i}].cc"))?;
                sluice_control::registry::build(
                    &law.name,
                    &pairs,
                    &sluice_control::registry::Mode::Inline,
                )
                .map_err(|e| ScenarioError::Invalid(format!("app[{i}].cc: {e}")))?;
            }
        }
        self.links.check()?;
        self.services.check().map_err(ScenarioError::Invalid)?;
        for (i, app) in self.apps.iter().enumerate() {
            if let Some(names) = &app.services {
                crate::services::ServicesConfig::set_of(names, &format!("app[{i}].services"))
                    .map_err(ScenarioError::Invalid)?;
            }
        }
        if let Some(cost) = &self.reorder_cost {
            cost.check()?;
        }
        if self.apps.iter().filter(|a| a.cc.is_some()).count() > 254 {
            return bad("app: at most 254 apps may have a `cc` of their own".into());
        }
        // Issue 34: the RNIC model and Weir (their fields, checked by their own code).
        if let Some(r) = &self.rnic {
            crate::rnic::RnicParams::resolve(r).map_err(ScenarioError::Invalid)?;
        }
        if let Some(w) = &self.weir {
            w.config(100_000_000_000, 1, 1, 1)
                .map_err(ScenarioError::Invalid)?;
        }
        for (i, app) in self.apps.iter().enumerate() {
            if app.batch.is_some() && (self.rnic.is_none() || self.weir.is_some()) {
                return bad(format!(
                    "app[{i}].batch: batches need an [rnic] table and no [weir] table"
                ));
            }
        }
        Ok(())
    }
}
