//! What one run of one algorithm produced: per-flow records, fabric counters and time
//! series. The report turns these into tables, JSON, CSV and plots.

use crate::NodeId;

/// One flow's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRecord {
    /// The flow's id, its index in the workload.
    pub id: u32,
    /// The sending host.
    pub src: NodeId,
    /// The receiving host.
    pub dst: NodeId,
    /// Bytes the flow writes.
    pub bytes: u64,
    /// When it started (`None`: it never did, its predecessor did not complete).
    pub start_ns: Option<u64>,
    /// When its last byte was acknowledged to the sender (`None`: not within the run).
    pub finish_ns: Option<u64>,
    /// The flow completion time it would have alone on the idle fabric.
    pub ideal_ns: u64,
    /// It ended with an error completion (retries exhausted).
    pub failed: bool,
}

impl FlowRecord {
    /// Completion time, if it completed.
    pub fn fct_ns(&self) -> Option<u64> {
        Some(self.finish_ns?.saturating_sub(self.start_ns?))
    }

    /// FCT over the ideal FCT, if it completed.
    pub fn slowdown(&self) -> Option<f64> {
        (!self.failed).then_some(())?;
        Some(self.fct_ns()? as f64 / self.ideal_ns.max(1) as f64)
    }
}

/// Fabric-wide counters of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FabricCounters {
    /// Packets switches dropped for want of buffer (or over the dynamic threshold).
    pub drops: u64,
    /// Packets switches marked Congestion Experienced.
    pub ecn_marks: u64,
    /// CNPs the receivers' notification points sent.
    pub cnps: u64,
    /// PFC pause frames switches sent.
    pub pfc_pauses: u64,
    /// Time ports spent paused, summed over ports.
    pub pfc_paused_ns: u64,
    /// Packets the senders retransmitted.
    pub retransmissions: u64,
    /// Retransmit timeouts that fired at the senders.
    pub timeouts: u64,
    /// Packets switches forwarded (one per packet per switch).
    pub switch_packets: u64,
    /// The payload services' counters (`policies.services`), summed over every queue pair,
    /// by "service.counter".
    pub services: std::collections::BTreeMap<String, u64>,
    /// Link state changes applied (`[links]`), one per link.
    pub link_events: u64,
    /// Packets lost to failed links (`[links]`): on the link or waiting for it.
    pub link_drops: u64,
    /// The receive pipelines' figures, when modelled (`[reorder_cost]`).
    pub receive: Option<ReceiveCounters>,
    /// The modelled payload services' figures (`[services]`), when a queue pair has one.
    pub service_model: Option<crate::services::ServiceCounters>,
    /// What the hosts' decoupled control loops did (SCR), summed over hosts, processor
    /// `i` of every host together; `None` when the law runs inline.
    pub decoupled: Option<sluice_core::control::DecoupledStats>,
    /// The RNIC model's counts, summed over the hosts that have one (`[rnic]` only).
    pub nic: Option<crate::rnic::NicCounters>,
    /// The same from the apps' measured windows on (the earliest `start_us + warmup_us`
    /// of each host's apps) to the end.
    pub nic_window: Option<crate::rnic::NicCounters>,
    /// Weir's counts, summed over the hosts that pace (`[weir]` only).
    pub weir: Option<sluice_core::weir::WeirStats>,
    /// Weir's doorbell rate, bit/s, when the first app of each pacing host stopped posting
    /// (summed over those hosts).
    pub weir_rate_bps: Option<u64>,
    /// Weir's smoothed delay then, ns (the largest over those hosts).
    pub weir_delay_ns: Option<u64>,
    /// Every answered path probe (`rtt-probe`), in the order the replies arrived: what the
    /// sender's selector measured, seen from the wire (empty without probes).
    pub probe_rtts: Vec<ProbeRtt>,
}

/// One path probe and its reply, as the simulator saw them leave and arrive at the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeRtt {
    /// The sending host.
    pub host: NodeId,
    /// The UDP source port the probe left from (the path it took, by ECMP).
    pub port: u16,
    /// When it left, ns.
    pub sent_ns: u64,
    /// Its round-trip time, ns; `None`: not answered before the next probe on its port
    /// left (the selector timed it out: lost, or late) or the run ended.
    pub rtt_ns: Option<u64>,
}

/// What the receive pipelines (`[reorder_cost]`) did, over every host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveCounters {
    /// Data packets handed to the engines.
    pub packets: u64,
    /// Time the pipelines were busy, summed over hosts, ns.
    pub busy_ns: u64,
    /// The most data packets waiting at one host.
    pub max_waiting: u64,
    /// The trackers' work over the run, summed over hosts.
    pub work: sluice_core::policy::TrackerWork,
}

impl FabricCounters {
    /// Adds a queue pair's services' counters.
    pub fn add_services(&mut self, services: &[Box<dyn sluice_core::policy::Service>]) {
        for service in services {
            for (name, value) in service.counters() {
                *self
                    .services
                    .entry(format!("{}.{name}", service.name()))
                    .or_default() += value;
            }
        }
    }
}

/// A port's identity in reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortId {
    /// The node, and the port's index among its ports (as in `Topology::nodes`).
    pub node: NodeId,
    /// The port's index among its node's ports.
    pub port: u16,
    /// The node's role and id, the port, and the node at the other end, as in
    /// "tor21.p17->agg37".
    pub name: String,
}

/// Sampled time series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Simulated time between samples.
    pub interval_ns: u64,
    /// The sample times.
    pub times_ns: Vec<u64>,
    /// Over all switch egress ports, per sample: the largest queue.
    pub max_queue_bytes: Vec<u64>,
    /// Over all switch egress ports, per sample: bytes queued in all.
    pub total_queue_bytes: Vec<u64>,
    /// Per sample: bits per second delivered to hosts (payload, all flows).
    pub goodput_bps: Vec<f64>,
    /// Ports with a series of their own (small fabrics only), and per sample and port
    /// (row-major: sample, then port) the queue in bytes and the throughput in bit/s.
    pub ports: Vec<PortId>,
    /// Per sample and port, the bytes queued.
    pub port_queue_bytes: Vec<u64>,
    /// Per sample and port, the bits per second sent.
    pub port_bps: Vec<f64>,
    /// Flows with a series of their own (small workloads only), and per sample and flow the
    /// payload bits per second delivered to their receiver.
    pub flows: Vec<u32>,
    /// Per sample and flow (row-major), the payload bits per second delivered.
    pub flow_bps: Vec<f64>,
    /// Per sample and app queue pair (row-major, in `RunResult::apps`' order), the payload
    /// bits per second delivered.
    pub app_bps: Vec<f64>,
}

/// The largest queue a port reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPeak {
    /// Which port.
    pub port: PortId,
    /// The most bytes it held queued at once.
    pub max_queue_bytes: u64,
}

/// Everything one run of one algorithm produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The algorithm's label.
    pub algorithm: String,
    /// The seed of the run's random choices.
    pub seed: u64,
    /// Simulated time when the run ended.
    pub simulated_ns: u64,
    /// Events the simulator processed.
    pub events: u64,
    /// Wall-clock seconds the run took (the one output that differs between runs).
    pub wall_s: f64,
    /// Every flow's outcome, by id.
    pub flows: Vec<FlowRecord>,
    /// The fabric's counters over the run.
    pub counters: FabricCounters,
    /// The sampled time series.
    pub series: Series,
    /// The switch egress ports with the largest peaks, largest first (at most 16).
    pub peaks: Vec<PortPeak>,
    /// The most packets alive at once (in queues and on links): what memory follows.
    pub peak_packets: u64,
    /// Every app queue pair's record, apps in the scenario's order, then queue pairs.
    pub apps: Vec<crate::app::AppQpRecord>,
}
