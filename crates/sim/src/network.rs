//! One run: hosts running the real engine behind a NIC model, switches, links, flows, and
//! the event loop that drives them.
//!
//! A packet moves as events: a port starts sending it when the port is free (host ports take
//! the next packet from the engine, switch ports from their queues, control class first) and
//! is busy for one serialisation; `Arrive` hands the packet to the next node one propagation
//! delay after that (store and forward). A port is free from the instant its serialisation
//! ends, whatever else happens at that instant. `TxDone` wakes a host port then (to ask its
//! engine for more) and a switch port only when packets wait for it: most packets find their
//! switch port idle, and an event per packet to free it would do nothing. Packets live in a
//! slab and events carry their index, so nothing is allocated per packet once the slab has
//! grown.

use std::net::{IpAddr, Ipv4Addr};

use std::collections::VecDeque;

use sluice_core::{
    Access, Completion, Connection, CqId, Engine, EngineConfig, Memory, MrInfo, Mtu, Payload,
    QpCaps, QpConfig, QpNum, Recovery, RecvWr, Rng, SendOp, SendWr, Sge, WcStatus,
};
use sluice_wire::{Ccx, IntHop, Opcode, Psn, RoceHeaders};

use crate::app::{AppOp, AppQpRecord, AppSpec};
use crate::event::{
    EventQueue, PS_PER_NS, PS_PER_US, Ps, from_instant, serialisation_ps, to_instant,
};
use crate::ideal::ideal_fct_ps;
use crate::result::{FabricCounters, FlowRecord, PortId, PortPeak, RunResult, Series};
use crate::scenario::{CcConfig, RecoveryMode, Routing, Scenario, SwitchConfig};
use crate::tenant_laws::{NextLaw, TenantLaws};
use crate::topology::{Port, Routes, Topology};
use crate::{Flow, NodeId};

/// Issue 34: the RNIC model and Weir in front of a host's apps.
mod paced;
use paced::{add_paced_counters, build_paced};
/// Issue 35: modelled payload services (`[services]`).
mod served;
mod worker;
use crate::services::ServiceSet;
use served::Served;

/// A PFC frame: 64 bytes plus preamble and gap.
const PFC_FRAME: u64 = 84;
/// Traffic classes: control (ACKs, NAKs, CNPs, grants) is served first and never paused;
/// data may be paused by PFC.
const CONTROL: usize = 0;
const DATA: usize = 1;
/// A port's queues: control, then one per data priority (`[switch] priorities`): priority
/// `p`'s queue is `DATA + p`. Without priorities only `DATA` is used.
const QUEUES: usize = DATA + crate::priority::MAX_PRIORITIES as usize;
/// Slots of a switch's flowlet table (hashed, as in hardware: colliding flows share one).
const FLOWLET_SLOTS: usize = 4096;
/// A PFC frame's classes: every data queue (one lossless class, `pfc.per_priority` off).
const ALL_CLASSES: u8 = u8::MAX;
/// Data packets a paused host port holds while it keeps taking the engine's ACKs.
const HELD_WHILE_PAUSED: usize = 8;
/// The largest message the engine takes; longer flows are posted as several.
const MAX_MESSAGE: u64 = 1 << 30;
/// A flow's send queue depth: the longest flow's messages are all posted at once.
const SEND_QUEUE_DEPTH: u32 = 256;
const _: () = assert!(crate::MAX_FLOW_BYTES.div_ceil(MAX_MESSAGE) <= SEND_QUEUE_DEPTH as u64);
/// The memory region every host writes from and into (length only: nothing is stored).
const REGION_BYTES: u64 = 1 << 40;
const REGION_ADDR: u64 = 0x1000;
/// Work-request ids of apps have this bit (flows' ids are their index, below 2^32) ...
const APP_WR: u64 = 1 << 63;
/// ... and their receives this one too; the low 32 bits are the app queue pair's index.
const APP_RECV_WR: u64 = 1 << 62;

#[derive(Debug, Clone, Copy)]
enum Ev {
    FlowStart(u32),
    /// App queue pair `n` opens and posts.
    AppStart(u32),
    /// App queue pair `n` (in batches) posts its next batch.
    AppBatch(u32),
    /// Packet `pkt` has fully arrived at `node` through `port`.
    Arrive {
        node: NodeId,
        port: u16,
        pkt: u32,
    },
    /// `port` of `node` has finished sending and is free: a host port asks its engine for
    /// more, a switch port sends what waits.
    TxDone {
        node: NodeId,
        port: u16,
    },
    /// The engine of `host` has a timer due.
    HostTimer {
        host: NodeId,
    },
    /// A PFC frame reaches `node` on `port`: pause or resume that port's data class, or
    /// with per-priority PFC the data queues in `classes` (bit q: queue `DATA + q`).
    Pfc {
        node: NodeId,
        port: u16,
        pause: bool,
        classes: u8,
    },
    Sample,
    /// A link changes state (`[links]`): the link of `port` of `node`, both ways.
    Link {
        node: NodeId,
        port: u16,
        up: bool,
    },
    /// The receive pipeline of `host` (`[reorder_cost]`) has finished its packet.
    RxDone {
        host: NodeId,
    },
    /// Issue 34's RNIC model: the earliest WQE fetch of `host` in flight completes while a
    /// processing unit is idle (fetches complete without events otherwise).
    RnicWake {
        host: NodeId,
    },
    /// A processing unit of `host` reached WQE `wqe`'s turn on the wire.
    RnicUnit {
        host: NodeId,
        wqe: u32,
    },
    /// The oldest pending CQE of `host` reaches host memory.
    RnicCqe {
        host: NodeId,
    },
    /// The Weir pacer of `host` has a credit due.
    WeirTimer {
        host: NodeId,
    },
    /// The apps of `host` start measuring: its NIC model's counts are noted.
    RnicSnapshot {
        host: NodeId,
    },
    /// The first app of `host` stops posting: Weir's rate and delay are noted.
    WeirProbe {
        host: NodeId,
    },
    /// The sealing stage of `host` (`[services]`) has finished its packet.
    SealDone {
        host: NodeId,
    },
    /// The receiving stage of `host` (`[services]`) has finished its packet.
    OpenDone {
        host: NodeId,
    },
    /// A worker of `host` (`[services]`, on a worker) is done with a payload.
    WorkerDone {
        host: NodeId,
    },
}

/// What the fabric reads of a packet at every hop, kept apart from its RoCE headers (which
/// only the hosts and INT stamping touch): some 10,000 packets in flight fit in a core's
/// cache this way, where with their headers (about 250 bytes each) they do not.
#[derive(Debug, Clone, Copy)]
struct Packet {
    src: NodeId,
    dst: NodeId,
    payload_len: u32,
    wire_bytes: u32,
    src_port: u16,
    /// The port it entered the current switch through (PFC accounting).
    in_port: u16,
    ce: bool,
    class: u8,
    /// A path probe or its reply (`rtt-probe`): a control packet that waits in the data
    /// queues, as a ping does, so that its RTT includes the queues on its path (it is
    /// neither dropped by a queue's threshold nor marked nor counted by PFC, as control).
    probe: bool,
    /// The IPv4 TOS byte its sender wrote (its DSCP carries its priority; ECN is `ce`).
    tos: u8,
    /// The packet behind it in its port's queue.
    next: u32,
    /// On a Valiant path (`[switch] nonminimal_paths`), the host whose router's group the
    /// packet heads for before its destination; `NO_VIA` on a minimal path or once there.
    via: NodeId,
}

/// A packet on a minimal path (no intermediate group, or past it).
const NO_VIA: NodeId = NodeId::MAX;

/// Flowlet slots for the source routers' Valiant choices (shared by all of them, keyed by
/// the flow hash that includes the router).
const VALIANT_FLOWLET_SLOTS: usize = 1 << 16;

/// No packet.
const NO_PACKET: u32 = u32::MAX;

/// A port's queue of one class: packets linked through their records, so a queue costs no
/// buffer of its own and a packet is touched where it already is.
#[derive(Debug, Clone, Copy)]
struct Fifo {
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for Fifo {
    fn default() -> Self {
        Fifo {
            head: NO_PACKET,
            tail: NO_PACKET,
            len: 0,
        }
    }
}

impl Fifo {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push_back(&mut self, packets: &mut [Packet], pkt: u32) {
        packets[pkt as usize].next = NO_PACKET;
        match packets.get_mut(self.tail as usize) {
            Some(last) => last.next = pkt,
            None => self.head = pkt,
        }
        self.tail = pkt;
        self.len += 1;
    }

    /// Takes out the first packet that `ok` accepts, wherever it is (per-priority PFC at a
    /// host: the oldest packet of a class not paused); a walk, over the few packets a host
    /// port holds.
    fn take_first(&mut self, packets: &mut [Packet], ok: impl Fn(&Packet) -> bool) -> Option<u32> {
        let (mut prev, mut cur) = (NO_PACKET, self.head);
        while let Some(p) = packets.get(cur as usize) {
            let next = p.next;
            if ok(p) {
                match packets.get_mut(prev as usize) {
                    Some(before) => before.next = next,
                    None => self.head = next,
                }
                if self.tail == cur {
                    self.tail = prev;
                }
                self.len -= 1;
                return Some(cur);
            }
            (prev, cur) = (cur, next);
        }
        None
    }

    fn pop_front(&mut self, packets: &[Packet]) -> Option<u32> {
        let pkt = self.head;
        self.head = packets.get(pkt as usize)?.next;
        self.len -= 1;
        if self.len == 0 {
            self.tail = NO_PACKET;
        }
        Some(pkt)
    }
}

#[derive(Debug)]
struct PortState {
    /// The link this port sends on.
    peer: NodeId,
    peer_port: u16,
    bps: u64,
    /// Propagation delay, plus the NIC's when the link touches a host.
    flight_ps: Ps,
    /// Picoseconds per byte when the rate makes that exact (every rate that divides
    /// 8 Tbit/s: 100, 400 Gbit/s...), else 0 (computed per packet).
    ps_per_byte: Ps,
    /// Control, then data by priority (`QUEUES`); a host port uses `CONTROL` and `DATA` only.
    queue: [Fifo; QUEUES],
    queued: [u64; QUEUES],
    /// Data bytes over all the data queues.
    data_queued: u64,
    /// Sending until then; free from then on.
    busy_until: Ps,
    /// A switch port's `TxDone` is scheduled (it has one only while packets wait for it).
    wake_pending: bool,
    /// The peer paused this port's data class.
    paused: bool,
    /// Per-priority PFC: the data queues the peer paused (bit q: queue `DATA + q`).
    paused_classes: u8,
    paused_since: Ps,
    /// Wire bytes sent (the INT `tx_bytes` counter, and throughput samples).
    tx_bytes: u64,
    sampled_tx: u64,
    max_queue: u64,
    /// Data bytes that entered the switch through this port and are still buffered.
    ingress_bytes: u64,
    /// This switch has paused the peer behind this port.
    xoff_sent: bool,
    /// Per-priority PFC: per data queue, bytes that came in through this port and are
    /// still buffered, and the queues this switch paused the peer's sending of.
    ingress_by_class: [u64; crate::priority::MAX_PRIORITIES as usize],
    xoff_classes: u8,
    /// Its link has failed (`[links]`).
    down: bool,
}

impl PortState {
    /// `pkt`, of `bytes` on the wire, joins queue `class`: counted there and, for a data
    /// queue, in the port's data total (which strict priority, INT and the routing modes
    /// read), so that the two counts cannot disagree.
    #[inline]
    fn push(&mut self, packets: &mut [Packet], class: usize, pkt: u32, bytes: u64) {
        self.queue[class].push_back(packets, pkt);
        self.queued[class] += bytes;
        if class != CONTROL {
            self.data_queued += bytes;
        }
    }

    /// A packet of `bytes`, already taken from queue `class`, has left the port.
    #[inline]
    fn left(&mut self, class: usize, bytes: u64) {
        self.queued[class] -= bytes;
        if class != CONTROL {
            self.data_queued -= bytes;
        }
    }
}

#[derive(Debug)]
struct Host {
    engine: Engine,
    cq: CqId,
    pd: sluice_core::PdId,
    mr: MrInfo,
    /// When the `HostTimer` events pending for this host are due (a few at most: one is
    /// added only if it is earlier than all of them).
    timers: Vec<Ps>,
    /// With apps of laws of their own: which law the next queue pair takes.
    next_law: Option<NextLaw>,
    /// Issue 34: the RNIC model and the Weir pacer in front of this host's apps.
    paced: Option<Box<Paced>>,
}

/// A host's RNIC model and Weir pacer (either or both), apart from the rest of `Host` so
/// that a run without them carries one `None` per host.
#[derive(Debug)]
struct Paced {
    nic: Option<crate::rnic::Rnic>,
    weir: Option<sluice_core::weir::Weir>,
    /// When the pending `WeirTimer` is due, if one is.
    weir_timer: Option<Ps>,
    /// When the pending `RnicWake` is due, if one is.
    nic_wake: Option<Ps>,
    /// Completions the engine made whose CQE is on its way to host memory, oldest first.
    cqes: VecDeque<Completion>,
    /// The NIC model's counts when this host's apps started measuring.
    snapshot: Option<crate::rnic::NicCounters>,
    /// Weir's rate (bit/s) and smoothed delay (ns) when this host's first app stopped.
    weir_probe: Option<(u64, Option<f64>)>,
    /// The last doorbell Weir handed out has more of its run to follow: the next WQE goes
    /// under the same doorbell.
    weir_run: bool,
}

#[derive(Debug)]
struct FlowState {
    spec: Flow,
    start: Option<Ps>,
    finish: Option<Ps>,
    failed: bool,
    qps: Option<(QpNum, QpNum)>,
    /// Messages posted and completed.
    messages: u32,
    completed: u32,
    /// Payload bytes delivered to the receiver since the last sample (flow series only).
    rx_since_sample: u64,
}

/// One queue pair of an app.
#[derive(Debug)]
struct AppQp {
    rec: AppQpRecord,
    spec: usize,
    qps: Option<(QpNum, QpNum)>,
    /// Post time and size of each message in flight, oldest first (a queue pair completes
    /// in order).
    in_flight: VecDeque<(Ps, u64)>,
    /// The measured window, and the end of posting.
    from: Ps,
    stop: Ps,
    open: bool,
    rng: Rng,
    rx_since_sample: u64,
    /// Its control law: 0 the run's, else its app's (`TenantLaws`).
    law: u8,
    /// Its connections carry Sluice control packets (its law sends them).
    cc_control: bool,
    /// The CC header its connections carry (its law's).
    ccx: Option<sluice_wire::CcxLayout>,
}

/// One simulation run of one algorithm.
#[derive(Debug)]
pub struct Network<'a> {
    scenario: &'a Scenario,
    /// Path probes sent and not yet answered: host, peer, port, number, when (ps); at most
    /// one a host, peer and port.
    probes_out: Vec<(NodeId, NodeId, u16, u32, Ps)>,
    /// Copies of what every packet reads (kept by value: one load, not a chain).
    hosts_count: u32,
    switch: SwitchConfig,
    /// The switches' strict-priority queues (`[switch] priorities`).
    prio: crate::priority::Priorities,
    /// Some app has a `priority` (looked up per data packet only then).
    app_priorities: bool,
    flowlet_gap_ps: Ps,
    seed: u64,
    /// Connections made so far: each one's initial PSNs are drawn from its number.
    connections: u64,
    cc: &'a CcConfig,
    topo: &'a Topology,
    routes: &'a Routes,
    now: Ps,
    events: EventQueue<Ev>,
    rng: Rng,
    hosts: Vec<Host>,
    /// Index of each node's first port in `ports`.
    port_base: Vec<u32>,
    ports: Vec<PortState>,
    /// Buffer bytes in use, per switch (indexed by node - hosts).
    buffer_used: Vec<u64>,
    /// Per switch (flowlet routing only): (last packet time, port) per slot.
    flowlets: Vec<Vec<(Ps, u16)>>,
    /// A dragonfly's Valiant paths (`[switch] nonminimal_paths`), if asked for.
    valiant: Option<crate::topology::Valiant>,
    /// Flowlet routing over Valiant paths: (last packet time, choice) per slot.
    valiant_flowlets: Vec<(Ps, u32)>,
    /// Packets by slot; `headers` holds their RoCE headers at the same index.
    packets: Vec<Packet>,
    headers: Vec<RoceHeaders>,
    free_packets: Vec<u32>,
    live_packets: u64,
    peak_packets: u64,
    flows: Vec<FlowState>,
    /// Flows waiting for each flow to complete.
    dependents: Vec<Vec<u32>>,
    /// (receiver, receiver's QPN) -> flow, sorted, for the per-flow series.
    flow_of_qp: Vec<((NodeId, u32), u32)>,
    counters: FabricCounters,
    series: Series,
    rx_payload_since_sample: u64,
    /// Flows not yet completed, failed or given up (their predecessor failed).
    flows_open: usize,
    apps: Vec<AppQp>,
    /// Each `[[app]]`'s size distribution, if it has one.
    app_cdfs: Vec<Option<crate::workload::Cdf>>,
    /// (host, QPN) -> app queue pair, sorted, for the per-app series.
    app_of_qp: Vec<((NodeId, u32), u32)>,
    /// App queue pairs still posting or with messages in flight.
    apps_open: usize,
    mtu: Mtu,
    ccx: Option<sluice_wire::CcxLayout>,
    cc_control: bool,
    scratch: Box<[u8]>,
    /// Link ends down now (`[links]`); while none is, routing never looks at link state.
    links_down: u32,
    /// Routes without the failed links, while some are down.
    rerouted: Option<Rerouted>,
    /// The receive pipelines (`[reorder_cost]`), if modelled.
    rx: Option<RxPipelines>,
    /// The modelled payload services (`[services]`), if any queue pair has one.
    svc: Option<Box<Served>>,
}

/// Routes computed on the fabric without its failed links, and for each node the port of
/// the whole fabric that each of its remaining ports is.
#[derive(Debug)]
struct Rerouted {
    routes: Routes,
    old_port: Vec<Vec<u16>>,
}

impl Rerouted {
    /// Routes over `topo` without the ports `down` says have failed.
    fn new(topo: &Topology, down: impl Fn(NodeId, u16) -> bool) -> Rerouted {
        let mut old_port: Vec<Vec<u16>> = Vec::with_capacity(topo.nodes.len());
        let mut new_port: Vec<Vec<u16>> = Vec::with_capacity(topo.nodes.len());
        for (n, ports) in topo.nodes.iter().enumerate() {
            let mut olds = Vec::new();
            let mut news = vec![u16::MAX; ports.len()];
            for k in 0..ports.len() as u16 {
                if !down(n as NodeId, k) {
                    news[k as usize] = olds.len() as u16;
                    olds.push(k);
                }
            }
            old_port.push(olds);
            new_port.push(news);
        }
        let nodes = topo
            .nodes
            .iter()
            .enumerate()
            .map(|(n, ports)| {
                old_port[n]
                    .iter()
                    .map(|&k| {
                        let p = ports[k as usize];
                        Port {
                            peer_port: new_port[p.peer as usize][p.peer_port as usize],
                            ..p
                        }
                    })
                    .collect()
            })
            .collect();
        let pruned = Topology {
            hosts: topo.hosts,
            nodes,
            roles: topo.roles.clone(),
        };
        Rerouted {
            routes: pruned.routes(),
            old_port,
        }
    }
}

/// Each host's receive pipeline (`[reorder_cost]`): data packets wait in arrival order and
/// are handed to the engine one at a time, each keeping the pipeline busy for the reorder
/// work its tracker did.
#[derive(Debug)]
struct RxPipelines {
    cost: crate::links::ReorderCost,
    waiting: Vec<VecDeque<u32>>,
    busy: Vec<bool>,
    counters: crate::result::ReceiveCounters,
}

fn host_ip(h: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + h + 1))
}

fn ip_host(ip: IpAddr) -> Option<NodeId> {
    match ip {
        IpAddr::V4(v4) => u32::from(v4).checked_sub(0x0A00_0001),
        IpAddr::V6(_) => None,
    }
}

fn class_of(op: Opcode) -> u8 {
    match op {
        Opcode::RC_ACKNOWLEDGE
        | Opcode::RC_ATOMIC_ACKNOWLEDGE
        | Opcode::RC_CC_CONTROL
        | Opcode::CNP => CONTROL as u8,
        _ => DATA as u8,
    }
}

/// Bytes on the link for a packet of RoCE `headers` with `payload` bytes, over IPv4: the
/// one definition the engine's pacer uses too ([`RoceHeaders::link_len`]).
pub(crate) fn frame_bytes(headers: &RoceHeaders, payload: u64) -> u64 {
    headers
        .link_len(false, payload as usize)
        .expect("the engine sends known opcodes") as u64
}

/// A well-mixed hash of `x` (one SplitMix64 step): ECMP and flowlet slots, engine seeds.
fn hash(x: u64) -> u64 {
    Rng::new(x).next_u64()
}

/// A run could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A `[[cc]]` entry (its name, and why) could not be made into a control law.
    #[error("cc `{0}`: {1}")]
    Law(String, String),
    /// A host's engine refused its setup.
    #[error("host {0}: {1}")]
    Engine(NodeId, sluice_core::Error),
    /// A `[policies]` entry could not be built.
    #[error("{0}")]
    Policy(String),
    /// An `[[app]]` names a host the fabric does not have.
    #[error("{0}")]
    App(String),
    /// A `[links]` entry does not fit the fabric.
    #[error("{0}")]
    Links(String),
    /// A `[switch]` setting is out of range.
    #[error("{0}")]
    Switch(String),
    /// `transport.mtu` is not one RoCE allows.
    #[error("transport.mtu: {0} is not a RoCE MTU (256, 512, 1024, 2048 or 4096)")]
    Mtu(u32),
}

impl<'a> Network<'a> {
    /// A fabric of idle hosts running law `cc`, about to run `flows`. `routes` are
    /// `topo`'s: [`crate::topology::Valiant::routes`] with `[switch] nonminimal_paths`,
    /// else [`crate::topology::DragonflyMinimal::routes`] with `[switch] routes =
    /// "dragonfly-minimal"`, else [`Topology::routes`].
    pub fn new(
        scenario: &'a Scenario,
        cc: &'a CcConfig,
        topo: &'a Topology,
        routes: &'a Routes,
        flows: &[Flow],
    ) -> Result<Network<'a>, RunError> {
        let t = &scenario.transport;
        let mtu = Mtu::from_bytes(t.mtu).ok_or(RunError::Mtu(t.mtu))?;
        let pairs = cc
            .param_pairs()
            .map_err(|e| RunError::Law(cc.name.clone(), e.to_string()))?;
        let law_info = sluice_control::registry::info(&cc.name);
        let mut ccx = None;
        // Apps with laws of their own, in order: law k + 1 of every host is the k-th.
        let own_laws: Vec<(usize, &crate::scenario::PolicyConfig)> = scenario
            .apps
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.cc.as_ref().map(|c| (i, c)))
            .collect();
        let mut hosts = Vec::with_capacity(topo.hosts as usize);
        // The CC header each app law's connections carry (the same on every host).
        let mut own_ccx = Vec::new();
        for h in 0..topo.hosts {
            let mode = cc
                .mode()
                .map_err(|e| RunError::Law(cc.name.clone(), e.to_string()))?;
            let mut controller = sluice_control::registry::build(&cc.name, &pairs, &mode)
                .map_err(|e| RunError::Law(cc.name.clone(), e.to_string()))?;
            ccx = controller.ccx();
            let mut next_law = None;
            if !own_laws.is_empty() {
                let mut laws = vec![controller];
                for &(i, law) in &own_laws {
                    let field = format!("app[{i}].cc");
                    let pairs = crate::scenario::param_pairs(&law.params, &field)
                        .map_err(|e| RunError::App(e.to_string()))?;
                    let built = sluice_control::registry::build(&law.name, &pairs, &mode)
                        .map_err(|e| RunError::App(format!("{field}: {e}")))?;
                    if h == 0 {
                        own_ccx.push(built.ccx());
                    }
                    laws.push(built);
                }
                let next: NextLaw = Default::default();
                next_law = Some(next.clone());
                controller = Box::new(TenantLaws::new(laws, next));
            }
            let config = EngineConfig {
                seed: scenario.seed ^ hash(u64::from(h) + 1),
                max_outstanding_packets: t.window_packets,
                ack_every_packets: cc.ack_every_packets.unwrap_or(t.ack_every_packets),
                ack_request_every: t.ack_request_every,
                line_rate_bps: topo.nodes[h as usize][0].bps,
                service_credit: scenario.services.credit(),
                ..EngineConfig::default()
            };
            let policies = scenario
                .policies
                .build(controller, cc.scheduler.as_ref())
                .map_err(|e| RunError::Policy(e.to_string()))?;
            let mut engine = Engine::with_policies(config, policies);
            let pd = engine.alloc_pd();
            let cq = engine
                .create_cq(1 << 20)
                .map_err(|e| RunError::Engine(h, e))?;
            let mr = engine
                .register_mr(
                    pd,
                    REGION_ADDR,
                    Memory::LengthOnly(REGION_BYTES),
                    Access::ALL,
                )
                .map_err(|e| RunError::Engine(h, e))?;
            hosts.push(Host {
                engine,
                cq,
                pd,
                mr,
                timers: Vec::new(),
                next_law,
                paced: None,
            });
        }
        build_paced(scenario, topo, &mut hosts)?;
        let mut port_base = Vec::with_capacity(topo.nodes.len());
        let mut total_ports = 0u32;
        for ports in &topo.nodes {
            port_base.push(total_ports);
            total_ports += ports.len() as u32;
        }
        let switches = topo.nodes.len() - topo.hosts as usize;
        let flowlets = if scenario.switch.routing == Routing::Flowlet {
            vec![vec![(0, u16::MAX); FLOWLET_SLOTS]; switches]
        } else {
            Vec::new()
        };
        let valiant =
            crate::topology::Valiant::of(&scenario.topology, scenario.switch.nonminimal_paths)
                .map_err(RunError::Switch)?;
        let mut dependents = vec![Vec::new(); flows.len()];
        let mut events = EventQueue::default();
        let link_events = scenario
            .links
            .port_events(topo)
            .map_err(|e| RunError::Links(e.to_string()))?;
        for e in link_events {
            events.push(
                e.at,
                Ev::Link {
                    node: e.node,
                    port: e.port,
                    up: e.up,
                },
            );
        }
        for f in flows {
            match f.after {
                Some(before) if (before as usize) < flows.len() => {
                    dependents[before as usize].push(f.id)
                }
                _ => events.push(f.start_ns * PS_PER_NS, Ev::FlowStart(f.id)),
            }
        }
        // Samples fall on whole nanoseconds, the series' unit.
        let interval_ns = ((scenario.output.sample_interval_us * 1e3).round() as u64).max(1);
        events.push(interval_ns * PS_PER_NS, Ev::Sample);
        // Hosts have one port each, and come first.
        let switch_ports = total_ports - topo.hosts;
        let port_series = switch_ports <= 256;
        let mut series = Series {
            interval_ns,
            ..Series::default()
        };
        if port_series {
            for n in topo.hosts..topo.nodes.len() as u32 {
                for p in 0..topo.nodes[n as usize].len() as u16 {
                    series.ports.push(port_id(topo, n, p));
                }
            }
        }
        let mut apps = Vec::new();
        for (i, spec) in scenario.apps.iter().enumerate() {
            for (field, h) in [("src", spec.src), ("dst", spec.dst)] {
                if h >= topo.hosts {
                    return Err(RunError::App(format!(
                        "app[{i}].{field}: {h} is not a host (the fabric has {})",
                        topo.hosts
                    )));
                }
            }
            let limit_us = scenario.time_limit_us;
            let from = ((spec.start_us + spec.warmup_us) * PS_PER_US as f64) as Ps;
            let stop = (spec.stop_us(limit_us) * PS_PER_US as f64) as Ps;
            for q in 0..spec.qps {
                let index = apps.len() as u32;
                events.push(
                    (spec.start_us * PS_PER_US as f64) as Ps,
                    Ev::AppStart(index),
                );
                apps.push(AppQp {
                    rec: AppQpRecord {
                        app: i as u32,
                        label: spec.label.clone().unwrap_or_else(|| format!("app{i}")),
                        tenant: spec.tenant,
                        src: spec.src,
                        dst: spec.dst,
                        window_ns: (from / PS_PER_NS, stop / PS_PER_NS),
                        ..AppQpRecord::default()
                    },
                    spec: i,
                    qps: None,
                    in_flight: VecDeque::new(),
                    from,
                    stop,
                    open: true,
                    law: own_laws
                        .iter()
                        .position(|&(k, _)| k == i)
                        .map_or(0, |k| k as u8 + 1),
                    ccx: match own_laws.iter().position(|&(k, _)| k == i) {
                        Some(k) => own_ccx[k],
                        None => ccx,
                    },
                    cc_control: match &spec.cc {
                        Some(law) => sluice_control::registry::info(&law.name)
                            .is_some_and(|i| i.control_packets),
                        None => law_info.is_some_and(|i| i.control_packets),
                    },
                    rng: Rng::new(scenario.seed ^ hash((u64::from(index) << 20) ^ u64::from(q))),
                    rx_since_sample: 0,
                });
            }
        }
        paced::schedule_snapshots(scenario, &hosts, &mut events);
        let app_cdfs = scenario
            .apps
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.size_cdf
                    .as_ref()
                    .map(|c| crate::workload::Cdf::load(c, &scenario.base_dir))
                    .transpose()
                    .map_err(|e| RunError::App(format!("app[{i}].size_cdf: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let flow_series = flows.len() <= scenario.output.flow_series_max_flows as usize;
        if flow_series {
            series.flows = flows.iter().map(|f| f.id).collect();
        }
        Ok(Network {
            scenario,
            hosts_count: topo.hosts,
            switch: scenario.switch.clone(),
            prio: scenario
                .switch
                .priority_queues()
                .map_err(RunError::Switch)?,
            app_priorities: scenario.switch.priorities > 1
                && scenario.apps.iter().any(|a| a.priority.is_some()),
            flowlet_gap_ps: (scenario.switch.flowlet_gap_us * PS_PER_US as f64) as Ps,
            seed: scenario.seed,
            connections: 0,
            cc,
            topo,
            routes,
            now: 0,
            events,
            rng: Rng::new(scenario.seed ^ 0x5EED_F10B),
            hosts,
            port_base,
            ports: port_states(topo, scenario.transport.nic_delay_ns * PS_PER_NS),
            buffer_used: vec![0; switches],
            flowlets,
            valiant_flowlets: if valiant.is_some() && scenario.switch.routing == Routing::Flowlet {
                vec![(0, u32::MAX); VALIANT_FLOWLET_SLOTS]
            } else {
                Vec::new()
            },
            valiant,
            packets: Vec::new(),
            headers: Vec::new(),
            free_packets: Vec::new(),
            live_packets: 0,
            peak_packets: 0,
            probes_out: Vec::new(),
            flows: flows
                .iter()
                .map(|&spec| FlowState {
                    spec,
                    start: None,
                    finish: None,
                    failed: false,
                    qps: None,
                    messages: 0,
                    completed: 0,
                    rx_since_sample: 0,
                })
                .collect(),
            dependents,
            flow_of_qp: Vec::new(),
            counters: FabricCounters::default(),
            series,
            rx_payload_since_sample: 0,
            flows_open: flows.len(),
            apps_open: apps.len(),
            apps,
            app_cdfs,
            app_of_qp: Vec::new(),
            mtu,
            ccx,
            cc_control: law_info.is_some_and(|i| i.control_packets),
            scratch: vec![0u8; 4096].into_boxed_slice(),
            links_down: 0,
            rerouted: None,
            rx: scenario.reorder_cost.map(|cost| RxPipelines {
                cost,
                waiting: vec![VecDeque::new(); topo.hosts as usize],
                busy: vec![false; topo.hosts as usize],
                counters: Default::default(),
            }),
            svc: Served::build(scenario, topo.hosts),
        })
    }

    /// Runs until every flow has completed or failed (or cannot start), or the time limit;
    /// `progress` is called now and then with the simulated time.
    pub fn run(mut self, mut progress: impl FnMut(u64)) -> RunResult {
        let wall = std::time::Instant::now();
        let limit = (self.scenario.time_limit_us * PS_PER_US as f64) as Ps;
        let mut tick = 0u32;
        while let Some((at, ev)) = self.events.pop_until(limit) {
            self.now = at;
            match ev {
                Ev::FlowStart(f) => self.start_flow(f),
                Ev::AppStart(a) => self.start_app(a),
                Ev::AppBatch(a) => self.app_batch(a),
                Ev::Arrive { node, port, pkt } => self.arrive(node, port, pkt),
                Ev::TxDone { node, port } => {
                    if self.is_host(node) {
                        self.after_engine(node);
                    } else {
                        let i = self.port_index(node, port);
                        self.ports[i].wake_pending = false;
                        self.kick_switch(node, port, i);
                    }
                }
                Ev::HostTimer { host } => self.host_timer(host),
                Ev::Pfc {
                    node,
                    port,
                    pause,
                    classes,
                } => self.pfc(node, port, pause, classes),
                Ev::Link { node, port, up } => self.set_link(node, port, up),
                Ev::RxDone { host } => self.rx_done(host),
                Ev::RnicWake { host } => self.rnic_wake(host),
                Ev::RnicUnit { host, wqe } => self.rnic_unit(host, wqe),
                Ev::RnicCqe { host } => self.rnic_cqe(host),
                Ev::WeirTimer { host } => self.weir_timer(host),
                Ev::RnicSnapshot { host } => self.rnic_snapshot(host),
                Ev::WeirProbe { host } => self.weir_probe(host),
                Ev::SealDone { host } => self.seal_done(host),
                Ev::OpenDone { host } => self.receive_done(host),
                Ev::WorkerDone { host } => self.worker_done(host),
                Ev::Sample => {
                    self.sample();
                    if self.flows_open > 0 || self.apps_open > 0 {
                        let next = self.now + self.series.interval_ns * PS_PER_NS;
                        self.events.push(next, Ev::Sample);
                    }
                }
            }
            if self.flows_open == 0 && self.apps_open == 0 {
                break;
            }
            tick = tick.wrapping_add(1);
            if tick % (1 << 20) == 0 {
                progress(self.now / PS_PER_NS);
            }
        }
        // Stopped by the time limit if flows are open and events remain.
        let end = if (self.flows_open > 0 || self.apps_open > 0) && !self.events.is_empty() {
            limit
        } else {
            self.now
        };
        self.finish(end, wall.elapsed().as_secs_f64())
    }

    fn finish(mut self, end: Ps, wall_s: f64) -> RunResult {
        // The services of flows still open (closed ones were counted when they closed).
        for f in &self.flows {
            if let Some((a, b)) = f.qps {
                self.counters
                    .add_services(self.hosts[f.spec.src as usize].engine.services(a));
                self.counters
                    .add_services(self.hosts[f.spec.dst as usize].engine.services(b));
            }
        }
        for host in &mut self.hosts {
            if let Some(nic) = host.paced.as_deref_mut().and_then(|p| p.nic.as_mut()) {
                // Fetches completed by the end whose events the run would have had.
                while let Some(w) = nic.fetch_due(end) {
                    nic.fetched(w);
                }
            }
        }
        for host in &self.hosts {
            if let Some(p) = &host.paced {
                add_paced_counters(&mut self.counters, p, end);
            }
            let c = host.engine.counters();
            self.counters.cnps += c.cnps_sent;
            self.counters.retransmissions += c.retransmitted_packets;
            self.counters.timeouts += c.retransmit_timeouts;
            if let Some(d) = host.engine.decoupled_stats() {
                self.counters
                    .decoupled
                    .get_or_insert_with(Default::default)
                    .add(&d);
            }
        }
        if let Some(rx) = &mut self.rx {
            for host in &self.hosts {
                crate::links::add_work(&mut rx.counters.work, &host.engine.tracker_work());
            }
            self.counters.receive = Some(rx.counters);
        }
        if let Some(svc) = &self.svc {
            let mut m = svc.counters();
            m.worker = self.worker_counters();
            self.counters.service_model = Some(m);
        }
        let nic = self.scenario.transport.nic_delay_ns * PS_PER_NS;
        let flows = self
            .flows
            .iter()
            .map(|f| FlowRecord {
                id: f.spec.id,
                src: f.spec.src,
                dst: f.spec.dst,
                bytes: f.spec.bytes,
                start_ns: f.start.map(|t| t / PS_PER_NS),
                finish_ns: f.finish.map(|t| t / PS_PER_NS),
                ideal_ns: ideal_fct_ps(self.topo, self.routes, &f.spec, self.ccx, self.mtu, nic)
                    / PS_PER_NS,
                failed: f.failed,
            })
            .collect();
        let mut peaks: Vec<PortPeak> = (self.topo.hosts..self.topo.nodes.len() as u32)
            .flat_map(|n| (0..self.topo.nodes[n as usize].len() as u16).map(move |p| (n, p)))
            .map(|(n, p)| PortPeak {
                port: port_id(self.topo, n, p),
                max_queue_bytes: self.ports[self.port_index(n, p)].max_queue,
            })
            .filter(|p| p.max_queue_bytes > 0)
            .collect();
        peaks.sort_by_key(|p| std::cmp::Reverse(p.max_queue_bytes));
        peaks.truncate(16);
        let end_ns = end / PS_PER_NS;
        for (host, _, port, _, sent) in std::mem::take(&mut self.probes_out) {
            self.counters.probe_rtts.push(crate::ProbeRtt {
                host,
                port,
                sent_ns: sent / PS_PER_NS,
                rtt_ns: None,
            });
        }
        let apps = std::mem::take(&mut self.apps)
            .into_iter()
            .map(|a| {
                let mut rec = a.rec;
                rec.window_ns.1 = rec.window_ns.1.min(end_ns);
                rec
            })
            .collect();
        RunResult {
            algorithm: self.cc.label().to_string(),
            seed: self.scenario.seed,
            simulated_ns: end / PS_PER_NS,
            events: self.events.popped,
            wall_s,
            flows,
            counters: self.counters,
            series: self.series,
            peaks,
            peak_packets: self.peak_packets,
            apps,
        }
    }

    /// Per-flow throughput is recorded (a workload of few flows).
    fn flow_series(&self) -> bool {
        !self.series.flows.is_empty()
    }

    /// Per-port queue and throughput are recorded (a fabric of few switch ports).
    fn port_series(&self) -> bool {
        !self.series.ports.is_empty()
    }

    fn port_index(&self, node: NodeId, port: u16) -> usize {
        (self.port_base[node as usize] + u32::from(port)) as usize
    }

    fn is_host(&self, node: NodeId) -> bool {
        node < self.hosts_count
    }

    // ---- flows ---------------------------------------------------------------------------

    fn start_flow(&mut self, id: u32) {
        let spec = self.flows[id as usize].spec;
        self.flows[id as usize].start = Some(self.now);
        match self.open_flow(&spec) {
            Ok(()) => {}
            Err(_) => {
                self.flows[id as usize].failed = true;
                self.close_flow(id);
            }
        }
        self.after_engine(spec.src);
        self.after_engine(spec.dst);
    }

    /// Creates and connects the two queue pairs of a flow and posts its WRITEs.
    fn open_flow(&mut self, f: &Flow) -> Result<(), sluice_core::Error> {
        let mut qp = [QpNum(0); 2];
        for (i, h) in [f.src, f.dst].into_iter().enumerate() {
            let host = &mut self.hosts[h as usize];
            let created = host.engine.create_qp(QpConfig {
                pd: host.pd,
                send_cq: host.cq,
                recv_cq: host.cq,
                caps: QpCaps {
                    max_send_wr: SEND_QUEUE_DEPTH,
                    ..QpCaps::default()
                },
            });
            match created {
                Ok(q) => qp[i] = q,
                Err(e) => {
                    if i == 1 {
                        let _ = self.hosts[f.src as usize].engine.destroy_qp(qp[0]);
                    }
                    return Err(e);
                }
            }
        }
        // From here on close_flow releases both, whatever fails next.
        self.flows[f.id as usize].qps = Some((qp[0], qp[1]));
        if self.flow_series() {
            let key = (f.dst, qp[1].0);
            let at = self.flow_of_qp.partition_point(|(k, _)| *k < key);
            self.flow_of_qp.insert(at, (key, f.id));
        }
        let set = self.svc.as_ref().map_or(0, |s| s.all);
        self.connect_pair(f.src, f.dst, qp, self.ccx, self.cc_control, set, 1)?;
        self.write_flow(f, qp)
    }

    /// Creates the two queue pairs of a connection from `a` to `b`; `None` if either
    /// engine refuses.
    fn create_pair(&mut self, a: NodeId, b: NodeId, caps: QpCaps) -> Option<[QpNum; 2]> {
        let mut qp = [QpNum(0); 2];
        for (i, h) in [a, b].into_iter().enumerate() {
            let host = &mut self.hosts[h as usize];
            match host.engine.create_qp(QpConfig {
                pd: host.pd,
                send_cq: host.cq,
                recv_cq: host.cq,
                caps,
            }) {
                Ok(q) => qp[i] = q,
                Err(_) => {
                    if i == 1 {
                        let _ = self.hosts[a as usize].engine.destroy_qp(qp[0]);
                    }
                    return None;
                }
            }
        }
        Some(qp)
    }

    // ---- apps ----------------------------------------------------------------------------

    fn start_app(&mut self, index: u32) {
        let a = &self.apps[index as usize];
        let spec: &AppSpec = &self.scenario.apps[a.spec];
        let (src, dst) = (a.rec.src, a.rec.dst);
        // Behind Weir every piece of a split WQE is a WR of its own: the send queue is as
        // deep as Weir's `sq_depth` (`rnic::send_depth`).
        let send_wr = self.hosts[src as usize]
            .paced
            .as_ref()
            .and_then(|p| p.weir.as_ref())
            .map_or(spec.depth, |w| w.config().sq_depth.max(spec.depth));
        let caps = QpCaps {
            max_send_wr: send_wr,
            max_recv_wr: spec.depth,
            ..QpCaps::default()
        };
        let law = a.law;
        for h in [src, dst] {
            if let Some(next) = &self.hosts[h as usize].next_law {
                next.set(law);
            }
        }
        let created = self.create_pair(src, dst, caps);
        for h in [src, dst] {
            if let Some(next) = &self.hosts[h as usize].next_law {
                next.set(0);
            }
        }
        let opened = created.is_some_and(|qp| {
            self.apps[index as usize].qps = Some((qp[0], qp[1]));
            self.open_app(index, qp).is_ok()
        });
        if !opened {
            self.apps[index as usize].rec.failed = true;
            self.close_app(index);
        }
        self.after_engine(src);
        self.after_engine(dst);
    }

    fn open_app(&mut self, index: u32, qp: [QpNum; 2]) -> Result<(), sluice_core::Error> {
        let a = &self.apps[index as usize];
        let spec: &'a AppSpec = &self.scenario.apps[a.spec];
        let (src, dst, ccx, cc_control) = (a.rec.src, a.rec.dst, a.ccx, a.cc_control);
        let set = match (&self.svc, &spec.services) {
            (None, _) => 0,
            (Some(_), Some(names)) => {
                crate::services::ServicesConfig::set_of(names, "app.services")
                    .expect("checked when the scenario was loaded")
            }
            (Some(s), None) => s.all,
        };
        // The end that receives the data: a READ's requester, else the responder.
        let data_at = if spec.op == AppOp::Read { 0 } else { 1 };
        self.connect_pair(src, dst, qp, ccx, cc_control, set, data_at)?;
        let tenant = sluice_core::policy::Tenant {
            id: spec.tenant,
            weight: spec.weight,
        };
        self.hosts[src as usize].engine.set_tenant(qp[0], tenant)?;
        self.hosts[dst as usize].engine.set_tenant(qp[1], tenant)?;
        for key in [(src, qp[0].0), (dst, qp[1].0)] {
            let at = self.app_of_qp.partition_point(|(k, _)| *k < key);
            self.app_of_qp.insert(at, (key, index));
        }
        if spec.op == AppOp::Send {
            for _ in 0..spec.depth {
                self.post_app_recv(index)?;
            }
        }
        for _ in 0..spec.batch.unwrap_or(spec.depth) {
            self.post_app(index)?;
        }
        Ok(())
    }

    fn post_app(&mut self, index: u32) -> Result<(), sluice_core::Error> {
        let a = &mut self.apps[index as usize];
        let spec: &AppSpec = &self.scenario.apps[a.spec];
        if a.qps.is_none() {
            return Ok(());
        }
        let size = spec.draw_size(&mut a.rng, self.app_cdfs[a.spec].as_ref());
        if self.hosts[a.rec.src as usize].paced.is_some() {
            return self.post_paced(index, size);
        }
        self.engine_post_app(index, size, APP_WR | u64::from(index))?;
        let a = &mut self.apps[index as usize];
        a.in_flight.push_back((self.now, size));
        a.rec.posted += 1;
        a.rec.max_outstanding = a.rec.max_outstanding.max(a.in_flight.len() as u32);
        Ok(())
    }

    /// Posts app queue pair `index`'s next message, `size` bytes, to its engine as `wr_id`.
    fn engine_post_app(
        &mut self,
        index: u32,
        size: u64,
        wr_id: u64,
    ) -> Result<(), sluice_core::Error> {
        let a = &self.apps[index as usize];
        let spec: &AppSpec = &self.scenario.apps[a.spec];
        let Some((qp, _)) = a.qps else {
            return Ok(());
        };
        let (src_mr, dst_mr) = (
            self.hosts[a.rec.src as usize].mr,
            self.hosts[a.rec.dst as usize].mr,
        );
        let sgl = [Sge {
            lkey: src_mr.lkey,
            addr: src_mr.addr,
            len: size as u32,
        }];
        let op = match spec.op {
            AppOp::Write => SendOp::Write {
                remote_addr: dst_mr.addr,
                rkey: dst_mr.rkey,
            },
            AppOp::Read => SendOp::Read {
                remote_addr: dst_mr.addr,
                rkey: dst_mr.rkey,
            },
            AppOp::Send => SendOp::Send,
        };
        let src = a.rec.src;
        self.hosts[src as usize]
            .engine
            .post_send(qp, &SendWr::new(wr_id, op, &sgl))
    }

    fn post_app_recv(&mut self, index: u32) -> Result<(), sluice_core::Error> {
        let a = &self.apps[index as usize];
        let spec: &AppSpec = &self.scenario.apps[a.spec];
        let Some((_, qp)) = a.qps else {
            return Ok(());
        };
        let dst = a.rec.dst;
        let mr = self.hosts[dst as usize].mr;
        let largest = match &self.app_cdfs[a.spec] {
            Some(cdf) => cdf.points().last().map_or(1.0, |p| p.0.ceil()) as u64,
            None => spec.size.or(spec.size_max).unwrap_or(1),
        };
        let len = largest.clamp(1, crate::app::MAX_APP_MESSAGE) as u32;
        let sgl = [Sge {
            lkey: mr.lkey,
            addr: mr.addr,
            len,
        }];
        self.hosts[dst as usize].engine.post_recv(
            qp,
            &RecvWr {
                wr_id: APP_WR | APP_RECV_WR | u64::from(index),
                sgl: &sgl,
            },
        )
    }

    fn complete_app(&mut self, c: &Completion) {
        let index = c.wr_id as u32;
        let Some(a) = self.apps.get_mut(index as usize) else {
            return;
        };
        if !a.open {
            return;
        }
        if c.status != WcStatus::Success {
            a.rec.failed = true;
            self.close_app(index);
            return;
        }
        if c.wr_id & APP_RECV_WR != 0 {
            if self.post_app_recv(index).is_err() {
                self.apps[index as usize].rec.failed = true;
                self.close_app(index);
            }
            return;
        }
        let now = self.now;
        let Some((posted, size)) = a.in_flight.pop_front() else {
            return;
        };
        a.rec.completed += 1;
        a.rec.completed_bytes += size;
        if now >= a.from && now <= a.stop {
            a.rec.window_completed_bytes += size;
        }
        if posted >= a.from && posted < a.stop {
            a.rec.latencies_ns.push((now - posted) / PS_PER_NS);
        }
        if now < a.stop && self.scenario.apps[a.spec].batch.is_some() {
            if a.in_flight.is_empty() {
                let pause = (self.scenario.apps[a.spec].pause_us * PS_PER_US as f64) as Ps;
                self.events.push(now + pause, Ev::AppBatch(index));
            }
        } else if now < a.stop {
            if self.post_app(index).is_err() {
                self.apps[index as usize].rec.failed = true;
                self.close_app(index);
            }
        } else if a.in_flight.is_empty() {
            self.close_app(index);
        }
    }

    /// Releases an app queue pair's connection; it no longer keeps the run going.
    fn close_app(&mut self, index: u32) {
        let a = &mut self.apps[index as usize];
        if !a.open {
            return;
        }
        a.open = false;
        let (src, dst) = (a.rec.src, a.rec.dst);
        if self.hosts[src as usize].paced.is_some() {
            self.paced_closed(src, index);
        }
        let a = &mut self.apps[index as usize];
        if let Some((x, y)) = a.qps.take() {
            let _ = self.hosts[src as usize].engine.destroy_qp(x);
            let _ = self.hosts[dst as usize].engine.destroy_qp(y);
            if let Some(svc) = self.svc.as_mut() {
                svc.close(src, x.0);
                svc.close(dst, y.0);
            }
            self.app_of_qp
                .retain(|&(k, _)| k != (src, x.0) && k != (dst, y.0));
        }
        self.apps_open -= 1;
    }

    /// Connects queue pairs `qp` of hosts `a` and `b` to each other, with the scenario's
    /// transport settings and services, CC header `ccx` (and Sluice control packets if
    /// `cc_control`). Stages on a worker go to the end `data_at` (0: `a`, 1: `b`), the one
    /// that receives the data.
    #[allow(clippy::too_many_arguments)]
    fn connect_pair(
        &mut self,
        a: NodeId,
        b: NodeId,
        qp: [QpNum; 2],
        ccx: Option<sluice_wire::CcxLayout>,
        cc_control: bool,
        set: ServiceSet,
        data_at: usize,
    ) -> Result<(), sluice_core::Error> {
        // Random initial PSNs, one per direction, as RoCE peers choose them (perftest and
        // rdma_cm alike): a queue pair's number is reused as soon as a flow's pair is
        // destroyed, and a late duplicate of the old flow's packet (a spurious resend
        // sprayed over a long path) must fall outside the new pair's window rather than be
        // taken for the new flow's packet of the same PSN. Drawn by hashing, not from the
        // run's generator, so that every other random choice stays as it was.
        let n = self.connections;
        self.connections += 1;
        let isn =
            |direction: u64| Psn::new(hash(self.seed ^ hash(n.wrapping_mul(2) + direction)) as u32);
        let psn = [isn(0), isn(1)];
        let t = &self.scenario.transport;
        for (i, (me, peer)) in [(a, b), (b, a)].into_iter().enumerate() {
            let c = Connection {
                timeout: t.timeout,
                retry_cnt: t.retry_cnt,
                recovery: match t.recovery {
                    RecoveryMode::GoBackN => Recovery::GoBackN,
                    RecoveryMode::SelectiveRepeat => Recovery::SelectiveRepeat,
                },
                ccx,
                cc_control,
                path_probes: self.scenario.policies.path_probes(),
                // Every host is Sluice: the peer's word on its receive window, as two
                // `sluice perf` ends exchange it (the same as this host's own tracker
                // today, every host running the scenario's).
                peer_receive_window: Some(self.hosts[peer as usize].engine.receive_window()),
                // Each end sends from its direction's PSN and expects the other's.
                ..Connection::new(host_ip(peer), qp[1 - i].0, self.mtu, psn[1 - i], psn[i])
            };
            self.hosts[me as usize].engine.connect(qp[i], &c)?;
            let encrypt = set & crate::services::ENCRYPT != 0;
            let workers = match self.svc.as_ref() {
                Some(svc) if i == data_at => svc.worker_stages(me, set),
                _ => Vec::new(),
            };
            if !self.scenario.policies.services.is_empty() || encrypt || !workers.is_empty() {
                let mut services = self
                    .scenario
                    .policies
                    .build_services()
                    .expect("checked when the scenario was loaded");
                services.extend(workers);
                if encrypt {
                    // Last, as `sluice perf --encrypt` puts it: its overhead shortens the
                    // queue pair's segments.
                    services.push(Box::new(crate::services::EncryptOverhead));
                }
                self.hosts[me as usize]
                    .engine
                    .set_services(qp[i], services)?;
            }
            if let Some(svc) = self.svc.as_mut() {
                svc.open(me, qp[i].0, set);
            }
        }
        Ok(())
    }

    /// Posts a flow's WRITEs (at most `MAX_MESSAGE` bytes each).
    fn write_flow(&mut self, f: &Flow, qp: [QpNum; 2]) -> Result<(), sluice_core::Error> {
        let (src_mr, dst_mr) = (self.hosts[f.src as usize].mr, self.hosts[f.dst as usize].mr);
        let mut left = f.bytes;
        let mut offset = 0;
        loop {
            let len = left.min(MAX_MESSAGE);
            let sgl = [Sge {
                lkey: src_mr.lkey,
                addr: src_mr.addr + offset % (REGION_BYTES - MAX_MESSAGE),
                len: len as u32,
            }];
            let op = SendOp::Write {
                remote_addr: dst_mr.addr + offset % (REGION_BYTES - MAX_MESSAGE),
                rkey: dst_mr.rkey,
            };
            self.hosts[f.src as usize]
                .engine
                .post_send(qp[0], &SendWr::new(u64::from(f.id), op, &sgl))?;
            self.flows[f.id as usize].messages += 1;
            left -= len;
            offset += len;
            if left == 0 {
                return Ok(());
            }
        }
    }

    fn complete(&mut self, c: &Completion) {
        if c.wr_id & APP_WR != 0 {
            self.complete_app(c);
            return;
        }
        let id = c.wr_id as u32;
        let Some(flow) = self.flows.get_mut(id as usize) else {
            return;
        };
        if flow.finish.is_some() || flow.failed {
            return;
        }
        if c.status != WcStatus::Success {
            flow.failed = true;
            self.close_flow(id);
            return;
        }
        flow.completed += 1;
        if flow.completed == flow.messages {
            flow.finish = Some(self.now);
            self.close_flow(id);
        }
    }

    /// Releases a flow's queue pairs and starts the flows that waited for it.
    fn close_flow(&mut self, id: u32) {
        let flow = &mut self.flows[id as usize];
        let spec = flow.spec;
        if let Some((a, b)) = flow.qps.take() {
            self.counters
                .add_services(self.hosts[spec.src as usize].engine.services(a));
            self.counters
                .add_services(self.hosts[spec.dst as usize].engine.services(b));
            let _ = self.hosts[spec.src as usize].engine.destroy_qp(a);
            let _ = self.hosts[spec.dst as usize].engine.destroy_qp(b);
            if let Some(svc) = self.svc.as_mut() {
                svc.close(spec.src, a.0);
                svc.close(spec.dst, b.0);
            }
            self.flow_of_qp.retain(|&(k, _)| k != (spec.dst, b.0));
        }
        self.flows_open -= 1;
        let ok = !flow.failed;
        let waiting = std::mem::take(&mut self.dependents[id as usize]);
        for next in waiting {
            if ok {
                let delay = self.flows[next as usize].spec.start_ns * PS_PER_NS;
                self.events.push(self.now + delay, Ev::FlowStart(next));
            } else {
                // It can never start: count it as closed (unfinished) and release its own.
                self.close_never_started(next);
            }
        }
    }

    fn close_never_started(&mut self, id: u32) {
        self.flows_open -= 1;
        for next in std::mem::take(&mut self.dependents[id as usize]) {
            self.close_never_started(next);
        }
    }

    // ---- hosts ---------------------------------------------------------------------------

    /// After the engine of `host` did anything: its completions, its port, its timer.
    fn after_engine(&mut self, host: NodeId) {
        self.worker_after(host);
        let cq = self.hosts[host as usize].cq;
        while let Ok(Some(c)) = self.hosts[host as usize].engine.poll_cq(cq) {
            if self.hosts[host as usize].paced.is_some()
                && c.wr_id & (APP_WR | APP_RECV_WR) == APP_WR
            {
                self.paced_completion(host, c);
                continue;
            }
            self.complete(&c);
        }
        self.kick_host(host);
        let h = &mut self.hosts[host as usize];
        let timer = h
            .engine
            .next_timeout()
            .map(|t| from_instant(t).max(self.now));
        // When the scheduler lets a queue pair it holds back send: the engine is asked then.
        // A time not after now is a packet that waits for the port (`kick_host` asked while
        // it was free, or it is paused), which the port's `TxDone` or resume asks for.
        let send = h
            .engine
            .next_transmit_at()
            .map(from_instant)
            .filter(|&t| t > self.now);
        if let Some(at) = timer.into_iter().chain(send).min() {
            // An event already pending at or before `at` will do: the engine is asked again
            // then. Pushing one per call would leave a stale event per pacing step.
            if h.timers.iter().all(|&t| t > at) {
                h.timers.push(at);
                self.events.push(at, Ev::HostTimer { host });
            }
        }
    }

    fn host_timer(&mut self, host: NodeId) {
        let h = &mut self.hosts[host as usize];
        if let Some(k) = h.timers.iter().position(|&t| t == self.now) {
            h.timers.swap_remove(k);
        }
        h.engine.handle_timeout(to_instant(self.now));
        self.after_engine(host);
    }

    /// Takes the engine's next packet into the host's port queue; false if it has none.
    fn pull_from_engine(&mut self, host: NodeId) -> bool {
        let now = to_instant(self.now);
        let Some(t) = self.hosts[host as usize]
            .engine
            .poll_transmit(now, &mut self.scratch)
        else {
            return false;
        };
        let Some(dst) = ip_host(t.dst).filter(|&d| d < self.hosts_count) else {
            return true; // addressed to no host of this fabric: lost at the first hop
        };
        let packet = Packet {
            src: host,
            dst,
            src_port: t.src_port,
            class: class_of(t.headers.bth.opcode),
            probe: t.headers.ext.cc_control.is_some_and(|c| {
                matches!(
                    c.kind,
                    sluice_wire::CcControlKind::PathProbe
                        | sluice_wire::CcControlKind::PathProbeReply
                )
            }),
            payload_len: t.payload_len,
            wire_bytes: frame_bytes(&t.headers, u64::from(t.payload_len)) as u32,
            ce: false,
            tos: 0,
            in_port: 0,
            next: NO_PACKET,
            via: NO_VIA,
        };
        let pkt = self.alloc_packet(packet, &t.headers);
        if self.prio.enabled() && packet.class == DATA as u8 {
            // The host, as the driver writing the IP header, puts the packet's priority in
            // its DSCP: the law's, else its app's traffic class.
            let level = t
                .priority
                .get()
                .or_else(|| self.app_priority(dst, t.headers.bth.dest_qp));
            self.packets[pkt as usize].tos = self.prio.tos(level);
        }
        if self.seal(host, pkt) {
            return true;
        }
        let class = if packet.probe {
            DATA
        } else {
            usize::from(packet.class)
        };
        let bytes = u64::from(packet.wire_bytes);
        let i = self.port_index(host, 0);
        self.ports[i].push(&mut self.packets, class, pkt, bytes);
        true
    }

    /// The `priority` of the app whose queue pair `qpn` at `peer` a packet is addressed to.
    fn app_priority(&self, peer: NodeId, qpn: u32) -> Option<u8> {
        if !self.app_priorities {
            return None;
        }
        let key = (peer, qpn);
        let at = self.app_of_qp.partition_point(|(k, _)| *k < key);
        let &(k, a) = self.app_of_qp.get(at)?;
        (k == key)
            .then(|| self.scenario.apps[self.apps[a as usize].spec].priority)
            .flatten()
    }

    fn alloc_packet(&mut self, p: Packet, headers: &RoceHeaders) -> u32 {
        self.live_packets += 1;
        self.peak_packets = self.peak_packets.max(self.live_packets);
        match self.free_packets.pop() {
            Some(i) => {
                self.packets[i as usize] = p;
                self.headers[i as usize] = *headers;
                i
            }
            None => {
                self.packets.push(p);
                self.headers.push(*headers);
                (self.packets.len() - 1) as u32
            }
        }
    }

    fn free_packet(&mut self, pkt: u32) {
        self.live_packets -= 1;
        self.free_packets.push(pkt);
    }

    fn deliver(&mut self, host: NodeId, pkt: u32) {
        let p = &self.packets[pkt as usize];
        let (from, ce, len) = (host_ip(p.src), p.ce, p.payload_len);
        if p.class == DATA as u8 {
            let dest_qp = self.headers[pkt as usize].bth.dest_qp;
            self.rx_payload_since_sample += u64::from(len);
            if !self.app_of_qp.is_empty() {
                let key = (host, dest_qp);
                let at = self.app_of_qp.partition_point(|(k, _)| *k < key);
                if let Some(&(k, a)) = self.app_of_qp.get(at) {
                    if k == key {
                        let now = self.now;
                        let a = &mut self.apps[a as usize];
                        a.rx_since_sample += u64::from(len);
                        a.rec.delivered_bytes += u64::from(len);
                        if now >= a.from && now <= a.stop {
                            a.rec.measured_bytes += u64::from(len);
                        }
                    }
                }
            }
            if self.flow_series() {
                let key = (host, dest_qp);
                let at = self.flow_of_qp.partition_point(|(k, _)| *k < key);
                if let Some(&(k, f)) = self.flow_of_qp.get(at) {
                    if k == key {
                        self.flows[f as usize].rx_since_sample += u64::from(len);
                    }
                }
            }
        }
        if let Some(c) = self.headers[pkt as usize].ext.cc_control {
            self.note_probe_reply(host, self.packets[pkt as usize].src, &c);
        }
        // The engine reads the headers where they lie; the slot is freed after.
        self.worker_clock(host);
        self.hosts[host as usize].engine.handle_packet(
            to_instant(self.now),
            from,
            ce,
            &self.headers[pkt as usize],
            Payload::Len(len),
        );
        self.free_packet(pkt);
        self.after_engine(host);
    }

    /// A path probe leaving `host` for `peer`: remembered until its reply comes (only
    /// probes, which only `rtt-probe` sends: other control packets pass). The selector
    /// sends a port's next probe only once the last was answered or timed out, so one still
    /// waiting on the same port was lost: recorded so, which keeps one entry a port.
    fn note_probe_sent(&mut self, host: NodeId, peer: NodeId, c: &sluice_wire::CcControl) {
        let Ok(Some(h)) = sluice_wire::PathProbeHeader::from_control(c) else {
            return;
        };
        if h.reply {
            return;
        }
        let now = self.now;
        match self
            .probes_out
            .iter_mut()
            .find(|o| (o.0, o.1, o.2) == (host, peer, h.port))
        {
            Some(o) => {
                let lost = crate::ProbeRtt {
                    host,
                    port: h.port,
                    sent_ns: o.4 / PS_PER_NS,
                    rtt_ns: None,
                };
                (o.3, o.4) = (h.seq, now);
                self.counters.probe_rtts.push(lost);
            }
            None => self.probes_out.push((host, peer, h.port, h.seq, now)),
        }
    }

    /// A path probe reply from `peer` reaching `host`: the probe's round trip joins the
    /// run's record (a reply to a probe already counted lost is not matched).
    fn note_probe_reply(&mut self, host: NodeId, peer: NodeId, c: &sluice_wire::CcControl) {
        let Ok(Some(h)) = sluice_wire::PathProbeHeader::from_control(c) else {
            return;
        };
        let at = self
            .probes_out
            .iter()
            .position(|&o| h.reply && o == (host, peer, h.port, h.seq, o.4));
        if let Some(at) = at {
            let (_, _, port, _, sent) = self.probes_out.swap_remove(at);
            self.counters.probe_rtts.push(crate::ProbeRtt {
                host,
                port,
                sent_ns: sent / PS_PER_NS,
                rtt_ns: Some((self.now - sent) / PS_PER_NS),
            });
        }
    }

    // ---- ports ---------------------------------------------------------------------------

    /// Starts sending on the port of `host` if it is free: control packets first, then data
    /// unless paused, asking the engine for more when nothing sendable is queued. The port
    /// always has a `TxDone` when it sends, to ask the engine again.
    fn kick_host(&mut self, host: NodeId) {
        let i = self.port_index(host, 0);
        if self.now < self.ports[i].busy_until {
            self.seal_ahead(host);
            return;
        }
        let buffer = self.scenario.transport.nic_tx_buffer_bytes;
        loop {
            let p = &self.ports[i];
            // A NIC with a transmit buffer takes packets from the engine ahead of the link
            // until it holds `buffer` data bytes: what it took waits there, first in first out.
            if buffer > 0
                && !p.paused
                && p.queued[DATA] < buffer
                && self.seal_free(host)
                && self.pull_from_engine(host)
            {
                continue;
            }
            let p = &self.ports[i];
            let (control, data) = (!p.queue[CONTROL].is_empty(), !p.queue[DATA].is_empty());
            let (paused, classes) = (p.paused, p.paused_classes);
            let (class, pkt) = if control {
                let q = &mut self.ports[i].queue[CONTROL];
                (CONTROL, q.pop_front(&self.packets).expect("not empty"))
            } else if data && !paused && classes == 0 {
                let q = &mut self.ports[i].queue[DATA];
                (DATA, q.pop_front(&self.packets).expect("not empty"))
            } else if let Some(pkt) = (data && !paused && classes != 0)
                .then(|| {
                    // Priorities paused (per-priority PFC): the oldest data packet of a
                    // class that is not, as a NIC's per-class queues served oldest first.
                    let prio = &self.prio;
                    self.ports[i].queue[DATA].take_first(&mut self.packets, |pkt| {
                        classes & (1 << prio.queue(pkt.tos)) == 0
                    })
                })
                .flatten()
            {
                (DATA, pkt)
            } else {
                // Nothing sendable queued: ask the engine for more. While paused it still
                // does (ACKs must go on), but holds at most a few data packets.
                let p = &self.ports[i];
                let paused = paused || classes != 0;
                let room = p.queue[DATA].is_empty()
                    || (paused && (p.queue[DATA].len as usize) < HELD_WHILE_PAUSED);
                if room && self.seal_free(host) && self.pull_from_engine(host) {
                    continue;
                }
                return;
            };
            if self.packets[pkt as usize].probe {
                if let Some(c) = self.headers[pkt as usize].ext.cc_control {
                    self.note_probe_sent(host, self.packets[pkt as usize].dst, &c);
                }
            }
            let (ser, arrive_at, arrive) = self.start_sending(i, class, pkt);
            self.events.push(
                self.now + ser,
                Ev::TxDone {
                    node: host,
                    port: 0,
                },
            );
            self.events.push(arrive_at, arrive);
            self.seal_ahead(host);
            return;
        }
    }

    /// Starts sending on `port` (index `i`) of switch `node` if it is free and has something
    /// to send, control class first; then, if packets still wait, schedules its `TxDone` for
    /// when it is free (one at a time). Ports with nothing waiting have none: most packets
    /// of a lightly loaded fabric find their port idle, and their `TxDone` would do nothing.
    #[inline]
    fn kick_switch(&mut self, node: NodeId, port: u16, i: usize) {
        let st = &mut self.ports[i];
        if self.now >= st.busy_until && !st.down {
            let class = if !st.queue[CONTROL].is_empty() {
                CONTROL
            } else if st.data_queued > 0 && !st.paused {
                // Strict priority: the highest data queue with packets (and not paused,
                // with per-priority PFC).
                let top = DATA + usize::from(self.prio.queues()) - 1;
                let paused = st.paused_classes;
                match (DATA..=top)
                    .rev()
                    .find(|&q| !st.queue[q].is_empty() && paused & (1 << (q - DATA)) == 0)
                {
                    Some(q) => q,
                    // Every queue with packets is paused: its resume kicks the port.
                    None => return,
                }
            } else {
                return;
            };
            let pkt = st.queue[class].pop_front(&self.packets).expect("not empty");
            self.switch_transmit(node, i, class, pkt);
        }
        let st = &mut self.ports[i];
        let waiting = !st.queue[CONTROL].is_empty() || st.data_queued > 0;
        if waiting && !st.wake_pending && !st.down {
            st.wake_pending = true;
            let at = st.busy_until.max(self.now);
            self.events.push(at, Ev::TxDone { node, port });
        }
    }

    /// Puts `pkt` of `class` on the link of port `i`, now free: busy for its serialisation.
    /// Returns that time, and when and as what the packet reaches the peer (for the caller
    /// to schedule: the order of pushes decides ties).
    #[inline]
    fn start_sending(&mut self, i: usize, class: usize, pkt: u32) -> (Ps, Ps, Ev) {
        let bytes = u64::from(self.packets[pkt as usize].wire_bytes);
        let st = &mut self.ports[i];
        st.left(class, bytes);
        st.tx_bytes += bytes;
        let ser = if st.ps_per_byte > 0 {
            bytes * st.ps_per_byte
        } else {
            serialisation_ps(bytes, st.bps)
        };
        st.busy_until = self.now + ser;
        let arrive = Ev::Arrive {
            node: st.peer,
            port: st.peer_port,
            pkt,
        };
        (ser, self.now + ser + st.flight_ps, arrive)
    }

    /// A switch port's send: buffer and PFC accounting as `pkt` leaves, its INT record, and
    /// the link.
    fn switch_transmit(&mut self, node: NodeId, i: usize, class: usize, pkt: u32) {
        let bytes = u64::from(self.packets[pkt as usize].wire_bytes);
        self.leave_switch(node, pkt, bytes);
        let (_, arrive_at, arrive) = self.start_sending(i, class, pkt);
        // Data packets collect the path's records (the port's queue and count with this
        // packet gone); an ACK carries its data packet's back unchanged (as HPCC's switches
        // do: they stamp data packets only).
        if self.switch.int && self.packets[pkt as usize].class == DATA as u8 {
            let st = &self.ports[i];
            stamp_int(
                &mut self.headers[pkt as usize],
                IntHop {
                    // The port's data over all its priorities: what its link must drain.
                    qlen_bytes: st.data_queued.min(u64::from(u32::MAX)) as u32,
                    tx_bytes: st.tx_bytes as u32,
                    ts_ns: (self.now / PS_PER_NS) as u32,
                    rate_100mbps: (st.bps / 100_000_000).min(u64::from(u16::MAX)) as u16,
                },
            );
        }
        self.events.push(arrive_at, arrive);
    }

    fn arrive(&mut self, node: NodeId, port: u16, pkt: u32) {
        if self.links_down > 0 && self.ports[self.port_index(node, port)].down {
            // It was on the link when the link failed.
            self.counters.link_drops += 1;
            self.free_packet(pkt);
            return;
        }
        if self.is_host(node) {
            if self.packets[pkt as usize].dst != node {
                self.free_packet(pkt);
            } else if self.packets[pkt as usize].class == DATA as u8 && self.receive(node, pkt) {
                // In the receiving stage of its services.
            } else if self.rx.is_some() && self.packets[pkt as usize].class == DATA as u8 {
                self.rx_arrive(node, pkt);
            } else {
                self.deliver(node, pkt);
            }
            return;
        }
        self.counters.switch_packets += 1;
        self.packets[pkt as usize].in_port = port;
        let dst = self.packets[pkt as usize].dst;
        let Some(out) = self.route(node, pkt, dst) else {
            self.counters.drops += 1;
            self.free_packet(pkt);
            return;
        };
        if self.links_down > 0 && self.ports[self.port_index(node, out)].down {
            // Routed to a failed link (`keep_routes`: the switch does not know).
            self.counters.link_drops += 1;
            self.free_packet(pkt);
            return;
        }
        self.enqueue(node, out, pkt);
    }

    /// The egress port of switch `node` for `pkt`, by the scenario's routing mode.
    fn route(&mut self, node: NodeId, pkt: u32, dst: NodeId) -> Option<u16> {
        // Off (the default), nothing below reads or draws anything more.
        let dst = match self.valiant {
            Some(v) => self.valiant_leg(v, node, pkt, dst),
            None => dst,
        };
        if self.rerouted.is_some() {
            return self.route_around(node, pkt, dst);
        }
        let cands = self.routes.candidates(node, dst);
        match cands.len() {
            0 => return None,
            1 => return Some(cands[0]),
            _ => {}
        }
        // The flow's 5-tuple hashed with the switch's id (spraying does not need it).
        let flow_hash = || self.flow_hash(node, pkt);
        let n = cands.len() as u64;
        let pick = match self.switch.routing {
            Routing::Ecmp => (flow_hash() % n) as usize,
            Routing::Spray => self.rng.below(n) as usize,
            Routing::Adaptive => {
                // Shortest queue; ties go to the flow's ECMP choice, then onwards, so that
                // idle fabrics still spread flows.
                let start = (flow_hash() % n) as usize;
                (0..cands.len())
                    .map(|k| (start + k) % cands.len())
                    .min_by_key(|&k| {
                        let q = &self.ports[self.port_index(node, cands[k])];
                        q.data_queued + q.queued[CONTROL]
                    })
                    .unwrap_or(start)
            }
            Routing::Flowlet => {
                let s = (node - self.hosts_count) as usize;
                let slot = (flow_hash() as usize) % FLOWLET_SLOTS;
                let (last, port) = self.flowlets[s][slot];
                let keep = port != u16::MAX && self.now.saturating_sub(last) <= self.flowlet_gap_ps;
                let choice = if keep {
                    cands.iter().position(|&c| c == port).unwrap_or(0)
                } else {
                    self.rng.below(n) as usize
                };
                self.flowlets[s][slot] = (self.now, cands[choice]);
                choice
            }
        };
        Some(cands[pick])
    }

    /// Where a packet on a dragonfly with Valiant paths heads from switch `node`: at its
    /// source router, the choice among its minimal and Valiant paths is made (per flow,
    /// per packet or per flowlet, as the routing mode spreads ports); on the first leg of a
    /// Valiant path, the intermediate host until its group is reached; else `dst`.
    fn valiant_leg(
        &mut self,
        v: crate::topology::Valiant,
        node: NodeId,
        pkt: u32,
        dst: NodeId,
    ) -> NodeId {
        let (src, in_port, via) = {
            let p = &self.packets[pkt as usize];
            (p.src, p.in_port, p.via)
        };
        let from_source = node == v.router_of_host(src)
            && self.topo.nodes[node as usize][in_port as usize].peer == src;
        let via = if from_source {
            let n = v.choices();
            // Salted so that the choice and the port picked after it are not one hash.
            let salted = || hash(self.flow_hash(node, pkt) ^ 0x7A11_A4F1);
            let k = match self.switch.routing {
                Routing::Ecmp | Routing::Adaptive => (salted() % u64::from(n)) as u32,
                Routing::Spray => self.rng.below(u64::from(n)) as u32,
                Routing::Flowlet => {
                    let slot = (salted() as usize) % VALIANT_FLOWLET_SLOTS;
                    let (last, kept) = self.valiant_flowlets[slot];
                    let keep =
                        kept != u32::MAX && self.now.saturating_sub(last) <= self.flowlet_gap_ps;
                    let k = if keep {
                        kept
                    } else {
                        self.rng.below(u64::from(n)) as u32
                    };
                    self.valiant_flowlets[slot] = (self.now, k);
                    k
                }
            };
            v.via(src, dst, k).unwrap_or(NO_VIA)
        } else if via != NO_VIA && v.reached(node, via, dst) {
            NO_VIA
        } else {
            via
        };
        self.packets[pkt as usize].via = via;
        if via == NO_VIA { dst } else { via }
    }

    /// [`Network::route`] while some link is down: the same choice among the candidates
    /// of routes computed without the failed links (as if the fabric's routing had
    /// converged at once), none if `dst` cannot be reached. Flowlet routing keeps a
    /// flowlet's port while it is still a candidate.
    fn route_around(&mut self, node: NodeId, pkt: u32, dst: NodeId) -> Option<u16> {
        let rr = self.rerouted.take().expect("rerouted while links are down");
        let pick = self.pick_rerouted(&rr, node, pkt, dst);
        self.rerouted = Some(rr);
        pick
    }

    /// ECMP's hash of `pkt`'s 5-tuple at switch `node` (`symmetric_hash`: the same both
    /// ways and at every switch).
    #[inline]
    fn flow_hash(&self, node: NodeId, pkt: u32) -> u64 {
        let p = &self.packets[pkt as usize];
        let (a, b, node) = if self.switch.symmetric_hash {
            (p.src.min(p.dst), p.src.max(p.dst), 0)
        } else {
            (p.src, p.dst, node)
        };
        hash(
            (u64::from(a) << 40)
                ^ (u64::from(b) << 16)
                ^ u64::from(p.src_port)
                ^ (u64::from(node) << 56)
                ^ self.seed,
        )
    }

    fn pick_rerouted(&mut self, rr: &Rerouted, node: NodeId, pkt: u32, dst: NodeId) -> Option<u16> {
        let cands = rr.routes.candidates(node, dst);
        let old = |k: usize| rr.old_port[node as usize][cands[k] as usize];
        let n = cands.len() as u64;
        if n == 0 {
            return None;
        }
        let flow_hash = self.flow_hash(node, pkt);
        let k = match self.switch.routing {
            Routing::Ecmp => (flow_hash % n) as usize,
            Routing::Spray => self.rng.below(n) as usize,
            Routing::Adaptive => (0..cands.len())
                .min_by_key(|&k| {
                    let q = &self.ports[self.port_index(node, old(k))];
                    q.data_queued + q.queued[CONTROL]
                })
                .unwrap_or(0),
            Routing::Flowlet => {
                let s = (node - self.hosts_count) as usize;
                let slot = (flow_hash as usize) % FLOWLET_SLOTS;
                let (last, port) = self.flowlets[s][slot];
                let kept = (port != u16::MAX
                    && self.now.saturating_sub(last) <= self.flowlet_gap_ps)
                    .then(|| (0..cands.len()).find(|&k| old(k) == port))
                    .flatten();
                let k = match kept {
                    Some(k) => k,
                    None => self.rng.below(n) as usize,
                };
                self.flowlets[s][slot] = (self.now, old(k));
                k
            }
        };
        Some(old(k))
    }

    /// Link events (`[links]`): the link of `port` of `node` fails or works again, both
    /// ways. A failing link loses what waits for it at either end; what is on it is lost as
    /// it arrives ([`Network::arrive`]).
    fn set_link(&mut self, node: NodeId, port: u16, up: bool) {
        self.counters.link_events += 1;
        let link = self.topo.nodes[node as usize][port as usize];
        for (n, p) in [(node, port), (link.peer, link.peer_port)] {
            let i = self.port_index(n, p);
            if self.ports[i].down != up {
                // Already in that state.
                continue;
            }
            self.ports[i].down = !up;
            if up {
                self.links_down -= 1;
                self.kick_switch(n, p, i);
                continue;
            }
            self.links_down += 1;
            for class in 0..QUEUES {
                while let Some(pkt) = self.ports[i].queue[class].pop_front(&self.packets) {
                    let bytes = u64::from(self.packets[pkt as usize].wire_bytes);
                    self.ports[i].left(class, bytes);
                    self.leave_switch(n, pkt, bytes);
                    self.counters.link_drops += 1;
                    self.free_packet(pkt);
                }
            }
        }
        // Routing converges at once: routes without the failed links, while any is.
        self.rerouted = (self.links_down > 0 && !self.scenario.links.keep_routes).then(|| {
            let ports = &self.ports;
            let base = &self.port_base;
            Rerouted::new(self.topo, |n, k| {
                ports[(base[n as usize] + u32::from(k)) as usize].down
            })
        });
    }

    // ---- receive pipelines ([reorder_cost]) ----------------------------------------------

    /// A data packet reached `host`: it waits for the receive pipeline.
    fn rx_arrive(&mut self, host: NodeId, pkt: u32) {
        let rx = self.rx.as_mut().expect("modelled");
        rx.waiting[host as usize].push_back(pkt);
        let depth = rx.waiting[host as usize].len() as u64;
        rx.counters.max_waiting = rx.counters.max_waiting.max(depth);
        if !rx.busy[host as usize] {
            self.rx_next(host);
        }
    }

    /// The pipeline of `host` is free: hands the next waiting packet to the engine and stays
    /// busy for the reorder work that took.
    fn rx_next(&mut self, host: NodeId) {
        let Some(pkt) = self.rx.as_mut().expect("modelled").waiting[host as usize].pop_front()
        else {
            return;
        };
        let before = self.hosts[host as usize].engine.tracker_work();
        self.deliver(host, pkt);
        let work =
            crate::links::work_since(&self.hosts[host as usize].engine.tracker_work(), &before);
        let rx = self.rx.as_mut().expect("modelled");
        let ns = rx.cost.nanos(&work);
        rx.busy[host as usize] = true;
        rx.counters.packets += 1;
        rx.counters.busy_ns += ns;
        self.events
            .push(self.now + ns * PS_PER_NS, Ev::RxDone { host });
    }

    fn rx_done(&mut self, host: NodeId) {
        self.rx.as_mut().expect("modelled").busy[host as usize] = false;
        self.rx_next(host);
    }

    /// Admits `pkt` to egress `out` of switch `node` (or drops it), marks it, and counts it
    /// against the port it came in by for PFC.
    fn enqueue(&mut self, node: NodeId, out: u16, pkt: u32) {
        let sw = &self.switch;
        let s = (node - self.hosts_count) as usize;
        let p = &self.packets[pkt as usize];
        let (bytes, in_port) = (u64::from(p.wire_bytes), p.in_port);
        // The queue it joins: control, or its priority's data queue (a probe: the data
        // queue of its TOS, as a ping).
        let data = p.class == DATA as u8;
        let class = match usize::from(p.class) {
            CONTROL if !p.probe => CONTROL,
            _ => DATA + usize::from(self.prio.queue(p.tos)),
        };
        let i = self.port_index(node, out);
        let used = self.buffer_used[s];
        let free = sw.buffer_bytes.saturating_sub(used);
        // Dynamic thresholds and RED act on the queue the packet joins, as per-queue
        // thresholds and WRED do in a switch with several queues per port.
        let over_threshold = sw.pfc.is_none()
            && data
            && (self.ports[i].queued[class] + bytes) as f64 > sw.dt_alpha * free as f64;
        if bytes > free || over_threshold {
            self.counters.drops += 1;
            self.free_packet(pkt);
            return;
        }
        if let Some(ecn) = &sw.ecn {
            if data {
                // A draw only when the outcome is in doubt (below Kmin nothing is marked).
                let p = ecn.chance(self.ports[i].queued[class]);
                if p >= 1.0 || (p > 0.0 && self.rng.chance(p)) {
                    self.packets[pkt as usize].ce = true;
                    self.counters.ecn_marks += 1;
                }
            }
        }
        self.buffer_used[s] += bytes;
        let st = &mut self.ports[i];
        st.push(&mut self.packets, class, pkt, bytes);
        st.max_queue = st.max_queue.max(st.data_queued + st.queued[CONTROL]);
        if data {
            // PFC counts the ingress port's data over all priorities: one lossless class;
            // or, per priority, each data queue's on its own. Probes wait in the data queues but
            // are not data: PFC never counts them (`leave_switch` skips them too).
            if let Some(pfc) = sw.pfc {
                let j = self.port_index(node, in_port);
                let ing = &mut self.ports[j];
                if pfc.per_priority {
                    let q = class - DATA;
                    ing.ingress_by_class[q] += bytes;
                    if ing.ingress_by_class[q] > pfc.xoff_bytes && ing.xoff_classes & (1 << q) == 0
                    {
                        ing.xoff_classes |= 1 << q;
                        self.counters.pfc_pauses += 1;
                        self.send_pfc(node, in_port, true, 1 << q);
                    }
                } else {
                    ing.ingress_bytes += bytes;
                    if ing.ingress_bytes > pfc.xoff_bytes && !ing.xoff_sent {
                        ing.xoff_sent = true;
                        self.counters.pfc_pauses += 1;
                        self.send_pfc(node, in_port, true, ALL_CLASSES);
                    }
                }
            }
        }
        // Sends it at once if the port is free and nothing goes before it (`kick_switch`'s order).
        self.kick_switch(node, out, i);
    }

    /// Buffer and PFC accounting as `pkt` leaves switch `node`.
    fn leave_switch(&mut self, node: NodeId, pkt: u32, bytes: u64) {
        let s = (node - self.hosts_count) as usize;
        self.buffer_used[s] -= bytes;
        let p = &self.packets[pkt as usize];
        if p.class != DATA as u8 {
            return;
        }
        if let Some(pfc) = self.switch.pfc {
            let in_port = p.in_port;
            let q = usize::from(self.prio.queue(p.tos));
            let j = self.port_index(node, in_port);
            let ing = &mut self.ports[j];
            if pfc.per_priority {
                ing.ingress_by_class[q] -= bytes;
                if ing.xoff_classes & (1 << q) != 0 && ing.ingress_by_class[q] <= pfc.xon_bytes {
                    ing.xoff_classes &= !(1 << q);
                    self.send_pfc(node, in_port, false, 1 << q);
                }
            } else {
                ing.ingress_bytes -= bytes;
                if ing.xoff_sent && ing.ingress_bytes <= pfc.xon_bytes {
                    ing.xoff_sent = false;
                    self.send_pfc(node, in_port, false, ALL_CLASSES);
                }
            }
        }
    }

    /// Sends a PFC frame out of `port` of `node` to the peer (it bypasses the queues, as
    /// MAC control frames do).
    fn send_pfc(&mut self, node: NodeId, port: u16, pause: bool, classes: u8) {
        let link = self.topo.nodes[node as usize][port as usize];
        let at = self.now + serialisation_ps(PFC_FRAME, link.bps) + link.delay_ns * PS_PER_NS;
        self.events.push(
            at,
            Ev::Pfc {
                node: link.peer,
                port: link.peer_port,
                pause,
                classes,
            },
        );
    }

    fn pfc(&mut self, node: NodeId, port: u16, pause: bool, classes: u8) {
        let now = self.now;
        let i = self.port_index(node, port);
        let st = &mut self.ports[i];
        if classes != ALL_CLASSES {
            // Per priority: the port counts as paused (`pfc_paused_ns`) while any class is.
            let before = st.paused_classes;
            if pause {
                st.paused_classes |= classes;
                if before == 0 {
                    st.paused_since = now;
                }
            } else if before & classes != 0 {
                st.paused_classes &= !classes;
                if st.paused_classes == 0 {
                    self.counters.pfc_paused_ns += (now - st.paused_since) / PS_PER_NS;
                }
                if self.is_host(node) {
                    self.after_engine(node);
                } else {
                    self.kick_switch(node, port, i);
                }
            }
            return;
        }
        if pause && !st.paused {
            st.paused = true;
            st.paused_since = now;
        } else if !pause && st.paused {
            st.paused = false;
            self.counters.pfc_paused_ns += (now - st.paused_since) / PS_PER_NS;
            if self.is_host(node) {
                self.after_engine(node);
            } else {
                self.kick_switch(node, port, i);
            }
        }
    }

    // ---- metrics -------------------------------------------------------------------------

    fn sample(&mut self) {
        let (port_series, flow_series) = (self.port_series(), self.flow_series());
        let s = &mut self.series;
        let interval_s = s.interval_ns as f64 * 1e-9;
        s.times_ns.push(self.now / PS_PER_NS);
        let (mut max_q, mut total_q) = (0, 0);
        // Hosts have one port each, and come first.
        for st in &mut self.ports[self.hosts_count as usize..] {
            let q = st.data_queued + st.queued[CONTROL];
            max_q = max_q.max(q);
            total_q += q;
            if port_series {
                s.port_queue_bytes.push(q);
                s.port_bps
                    .push((st.tx_bytes - st.sampled_tx) as f64 * 8.0 / interval_s);
                st.sampled_tx = st.tx_bytes;
            }
        }
        s.max_queue_bytes.push(max_q);
        s.total_queue_bytes.push(total_q);
        s.goodput_bps
            .push(self.rx_payload_since_sample as f64 * 8.0 / interval_s);
        self.rx_payload_since_sample = 0;
        if flow_series {
            for f in &mut self.flows {
                s.flow_bps.push(f.rx_since_sample as f64 * 8.0 / interval_s);
                f.rx_since_sample = 0;
            }
        }
        for a in &mut self.apps {
            s.app_bps.push(a.rx_since_sample as f64 * 8.0 / interval_s);
            a.rx_since_sample = 0;
        }
    }
}

/// The state of every port, nodes in order, each knowing its link.
fn port_states(topo: &Topology, nic_ps: Ps) -> Vec<PortState> {
    let mut ports = Vec::new();
    for (node, links) in topo.nodes.iter().enumerate() {
        for link in links {
            let per_byte = 8_000_000_000_000 / link.bps.max(1);
            ports.push(PortState {
                peer: link.peer,
                peer_port: link.peer_port,
                bps: link.bps,
                flight_ps: flight_ps(topo, node as NodeId, link, nic_ps),
                ps_per_byte: if per_byte * link.bps.max(1) == 8_000_000_000_000 {
                    per_byte
                } else {
                    0
                },
                queue: Default::default(),
                queued: [0; QUEUES],
                data_queued: 0,
                busy_until: 0,
                wake_pending: false,
                paused: false,
                paused_classes: 0,
                paused_since: 0,
                tx_bytes: 0,
                sampled_tx: 0,
                max_queue: 0,
                ingress_bytes: 0,
                xoff_sent: false,
                ingress_by_class: [0; crate::priority::MAX_PRIORITIES as usize],
                xoff_classes: 0,
                down: false,
            });
        }
    }
    ports
}

fn port_id(topo: &Topology, node: NodeId, port: u16) -> PortId {
    let role = topo.roles.get(node as usize).copied().unwrap_or("node");
    let peer = topo.nodes[node as usize][port as usize].peer;
    let peer_role = topo.roles.get(peer as usize).copied().unwrap_or("node");
    PortId {
        node,
        port,
        name: format!("{role}{node}.p{port}->{peer_role}{peer}"),
    }
}

/// Writes `hop` into the INT header of `headers`, if it has one with room.
fn stamp_int(headers: &mut RoceHeaders, hop: IntHop) {
    if let Some(Ccx::Int(path)) = &mut headers.ccx {
        path.push(hop);
    }
}

/// Propagation over `link` leaving node `from`: the link's delay, plus the NIC's when one
/// end is a host (a host's NIC delays what it sends and what it receives).
pub(crate) fn flight_ps(topo: &Topology, from: NodeId, link: &Port, nic_ps: Ps) -> Ps {
    let touches_host = from < topo.hosts || link.peer < topo.hosts;
    link.delay_ns * PS_PER_NS + if touches_host { nic_ps } else { 0 }
}
