//! The engine: its objects and configuration, and what the parts share (the control law's
//! events and actions, the scheduler, completions and errors). The verbs are in `verbs`,
//! packets in and out in `packets`, time in `time`; the requester and responder halves of a
//! queue pair in their own modules.

#[cfg(test)]
pub(crate) mod fixture;
mod packets;
mod time;
mod verbs;

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use sluice_wire::{Opcode, Psn, RoceHeaders};

use crate::control::{Actions, Controller, Deferred, Event, EventKind, EventMask, Gate};
use crate::cq::{Completion, CompletionQueue, WcOpcode, WcStatus};
use crate::mr::{Access, MrTable};
use crate::policy::{EnginePathSelector, EngineScheduler, Policies, Service, TrackerFactory};
use crate::qp::{Qp, QpNum, QpState, RecvWqe, SendOp, SendWqe};
use crate::timers::Timers;
use crate::{Counters, Error, Instant, Rng};

/// A protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdId(pub u32);

/// A completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqId(pub u32);

/// The first QPN handed out (QPs 0 and 1 are special in InfiniBand; Soft-RoCE starts at 17).
const FIRST_QPN: u32 = 0x11;

/// Limits and policies of one engine.
#[derive(Debug, Clone, Copy)]
pub struct EngineConfig {
    /// Seeds the memory keys (and nothing else random).
    pub seed: u64,
    /// Queue pairs that may exist at once (also bounded by the 24-bit QPN space); default
    /// 2^16.
    pub max_qps: u32,
    /// Memory regions that may be registered at once; default 2^16.
    pub max_mrs: u32,
    /// Completion queues that may be created; default 2^16.
    pub max_cqs: u32,
    /// The largest capacity of one completion queue, in completions; default 2^20.
    pub max_cq_entries: u32,
    /// Request packets a queue pair may have unacknowledged (its window), at most 2^23.
    /// 384 by default: 1.5 MiB at path MTU 4096, more than twice the bandwidth-delay
    /// product of a 100 Gbit/s path with a 50 us round trip. More only adds data waiting in
    /// queues: on loopback every byte in flight waits in the receiver's socket, and larger
    /// windows were slower there (the measurements are in CHANGELOG.md).
    pub max_outstanding_packets: u32,
    /// The requester asks for an ACK on the last packet of every message and on every
    /// this many packets in between.
    pub ack_request_every: u32,
    /// The responder acknowledges at least every this many new request packets, whether
    /// they ask (AckReq) or not; 0: only when asked. Either way ACKs are coalesced: one
    /// covers everything received before it leaves. `ack_request_every` makes a Sluice
    /// requester ask more often; this knob sets the ACK rate whatever the requester asks
    /// (a standard RoCE requester asks at the end of a message and every so many packets),
    /// e.g. 1 for the per-packet ACKs that HPCC's INT echo and Swift's delay sample best.
    pub ack_every_packets: u32,
    /// The line rate control laws start from ([`Event::Start`]), and the link's capacity
    /// the scheduler shares unless it was given one ([`crate::policy::Scheduler::set_link`]),
    /// in bits per second.
    pub line_rate_bps: u64,
    /// Receive crediting (RoCE BALBOA's): how much work may wait for the deferred stages
    /// ([`crate::policy::Service::deferred`]): received payloads queued for them, in
    /// packets and bytes. A packet that would pass either is dropped before it is taken
    /// (counted in [`crate::Counters::drops_service_credit`]) and the transport recovers
    /// it, so a slow stage slows the sender instead of growing memory. Default 1,024
    /// packets and 4 MiB.
    pub service_credit: ServiceCredit,
    /// How long a completion waits at most for the flags of an asynchronous stage beside
    /// the path that is neither deferred nor acting where READ data lands (an inspection:
    /// [`crate::policy::Service::asynchronous`]); past it the completion goes without
    /// them, and flags that come later are counted
    /// ([`crate::Counters::service_flags_uncompleted`]). A stage slower than the link
    /// then costs the datapath this much latency at most. Completions that wait for a
    /// deferred or landing stage wait until it returned (within the credit): their
    /// stage's work must be done first. Measured on the engine's clock (the `now` of its
    /// calls). Default 0: beside the path, a completion never waits; flags the stage
    /// returned by the driver's next [`Engine::run_deferred_at`] still reach it (it is
    /// released there, after what came back), later ones are counted. Set it for
    /// completions that carry every flag the stage can give in that time.
    pub service_flag_wait: Duration,
}

/// A completion waiting for an asynchronous stage's flags ([`Nic::held`]).
#[derive(Debug)]
pub(crate) struct HeldCompletion {
    pub(crate) index: u32,
    pub(crate) cq: crate::CqId,
    pub(crate) completion: Completion,
    /// How many payloads its queue pair must have had returned before it goes.
    pub(crate) needs: u64,
    /// When it goes anyway (`None`: not before `needs`; see
    /// [`EngineConfig::service_flag_wait`]).
    pub(crate) until: Option<crate::Instant>,
    /// Which side's message it completes and that message's first PSN (`None`: a flush).
    pub(crate) scope: Option<(FlagSide, sluice_wire::Psn)>,
}

/// Which side of a queue pair a message's flags belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagSide {
    /// A send request: its packets sent, or a READ's responses.
    Requester,
    /// A request received.
    Responder,
}

/// The bound on received work waiting for deferred stages (see
/// [`EngineConfig::service_credit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceCredit {
    /// Packets queued at most.
    pub packets: u32,
    /// Payload bytes queued at most.
    pub bytes: u64,
}

impl Default for ServiceCredit {
    fn default() -> Self {
        ServiceCredit {
            packets: 1024,
            bytes: 4 << 20,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            seed: 0,
            max_qps: 1 << 16,
            max_mrs: 1 << 16,
            max_cqs: 1 << 16,
            max_cq_entries: 1 << 20,
            max_outstanding_packets: 384,
            ack_request_every: 64,
            ack_every_packets: 0,
            line_rate_bps: 100_000_000_000,
            service_credit: ServiceCredit::default(),
            service_flag_wait: Duration::ZERO,
        }
    }
}

/// Everything it takes to bring a new queue pair from RESET to RTS against one peer: the
/// attributes of the INIT, RTR and RTS transitions, as a connection exchange yields them.
#[derive(Debug, Clone, Copy)]
pub struct Connection {
    /// Remote operations the queue pair accepts.
    pub access: Access,
    /// The IP address of the peer (see [`Transition::Rtr`](crate::Transition::Rtr)).
    pub peer: IpAddr,
    /// The peer's queue pair number (24 bits).
    pub dest_qpn: u32,
    /// The path MTU.
    pub path_mtu: crate::Mtu,
    /// The PSN of the peer's first request (its `sq_psn`).
    pub rq_psn: Psn,
    /// The PSN of this queue pair's first request.
    pub sq_psn: Psn,
    /// Retransmit timeout 4.096 us x 2^timeout (0..=31, 0: wait forever); default 14.
    pub timeout: u8,
    /// Transport retries after a timeout or sequence-error NAK (0..=7); default 7.
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (0..=6; 7, the default, retries forever).
    pub rnr_retry: u8,
    /// The RNR NAK timer code (0..=31) the peer is asked to wait; default 12.
    pub min_rnr_timer: u8,
    /// READ and atomic requests this queue pair may have outstanding at the peer; default
    /// 16.
    pub max_rd_atomic: u8,
    /// READ and atomic requests the peer may have outstanding here; default 16.
    pub max_dest_rd_atomic: u8,
    /// How lost packets are recovered; default go-back-N.
    pub recovery: crate::Recovery,
    /// Exchange Sluice's control packets (credit grants, opcode 0x18) with the peer. Only
    /// when both ends agreed: a standard RoCE peer drops them.
    pub cc_control: bool,
    /// Exchange Sluice's path probes with the peer (control packets of kinds 2 and 3, opcode
    /// 0x18): a path selector that probes (`rtt-probe`) sends them, and the peer's are
    /// answered. Only when both ends agreed: a standard RoCE peer drops them.
    pub path_probes: bool,
    /// Carry Sluice's CC extension header (after the BTH, TVer 1) in this layout: send
    /// timestamps echoed by the peer (an RTT sample per ACK), INT records switches fill in
    /// (HPCC) or credit totals (grants then ride the peer's packets instead of control
    /// packets). Only when both ends agreed: a standard RoCE peer drops such packets.
    pub ccx: Option<sluice_wire::CcxLayout>,
    /// The peer's receive window, in packets, as it advertised it at connection setup: the
    /// PSNs from its expected one on that its selective-repeat tracker accepts (its
    /// capacity plus one, [`crate::policy::TrackerFactory::receive_window`]). BDP flow
    /// control then keeps at most the largest power of two within it unacknowledged (and
    /// within this engine's own tracker's window). `None`, the default: the peer said
    /// nothing (perftest, Soft-RoCE), and its tracker is taken to be this engine's.
    /// 1..=2^23; anything else is refused, naming the field.
    pub peer_receive_window: Option<u32>,
}

impl Connection {
    /// A connection with every remote access, perftest's timers (timeout 14 = 67 ms, seven
    /// retries, RNR retry forever, 0.64 ms RNR wait), 16 READs/atomics each way, go-back-N.
    pub fn new(
        peer: IpAddr,
        dest_qpn: u32,
        path_mtu: crate::Mtu,
        rq_psn: Psn,
        sq_psn: Psn,
    ) -> Connection {
        Connection {
            access: Access::ALL,
            peer,
            dest_qpn,
            path_mtu,
            rq_psn,
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            recovery: crate::Recovery::GoBackN,
            cc_control: false,
            path_probes: false,
            ccx: None,
            peer_receive_window: None,
        }
    }
}

/// The payload of a received packet: bytes, or a length only (the simulator).
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// The payload bytes.
    Bytes(&'a [u8]),
    /// A payload of this many bytes, not carried.
    Len(u32),
}

impl Payload<'_> {
    /// The payload length in bytes.
    pub fn len(&self) -> u32 {
        match self {
            Payload::Bytes(b) => b.len() as u32,
            Payload::Len(n) => *n,
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A packet to put on the wire. Its payload is read with [`Engine::payload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The destination: the queue pair's peer.
    pub dst: IpAddr,
    /// The UDP source port (the ECMP entropy of the queue pair).
    pub src_port: u16,
    /// The headers from the BTH on (the UDP/IP headers are the driver's).
    pub headers: RoceHeaders,
    /// The payload length in bytes.
    pub payload_len: u32,
    /// Where the payload is.
    pub payload_at: PayloadAt,
    /// The priority the control law chose for this packet, 0 the lowest ..= 7 the highest
    /// (`Actions::set_priority`, `Actions::set_response_priority`); [`Priority::NONE`] if it
    /// chose none. The driver writes [`Priority::get`] into the IP header's DSCP bits with
    /// `sluice_wire::priority_tos` (DSCP = its configured base + priority, ECN bits kept); a
    /// packet without one keeps the driver's own TOS.
    pub priority: Priority,
}

/// A packet priority the control law chose (0 the lowest ..= 7 the highest), or none: one
/// byte, where `Option<u8>` takes two and made every [`Transmit`] (built and copied for each
/// packet) 8 bytes larger.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Priority(u8);

impl Priority {
    /// No priority: the packet keeps the driver's own TOS.
    pub const NONE: Priority = Priority(u8::MAX);

    /// Priority `level`, 0 the lowest; above 7 counts as 7.
    pub const fn level(level: u8) -> Priority {
        let top = sluice_wire::PRIORITY_LEVELS - 1;
        Priority(if level > top { top } else { level })
    }

    /// The level, or `None` for [`Priority::NONE`].
    pub const fn get(self) -> Option<u8> {
        if self.0 == Self::NONE.0 {
            None
        } else {
            Some(self.0)
        }
    }
}

impl Default for Priority {
    fn default() -> Self {
        Priority::NONE
    }
}

impl From<Option<u8>> for Priority {
    fn from(level: Option<u8>) -> Self {
        level.map_or(Priority::NONE, Priority::level)
    }
}

impl std::fmt::Debug for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// Where the payload of a [`Transmit`] is.
///
/// Data that lies in one piece of a registered region is not copied: a driver hands the
/// region's bytes to the kernel itself, and the kernel's copy is the only one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadAt {
    /// In the buffer given to [`Engine::poll_transmit`], from its start: no payload, inline
    /// data, or data gathered from several pieces of memory (unless that memory is
    /// length-only: then the buffer holds nothing of it).
    Buffer,
    /// In place: `payload_len` bytes from `addr` of the region whose key is `key` (checked
    /// when the packet was built).
    Region {
        /// The local key of the region.
        key: u32,
        /// The virtual address of the first payload byte.
        addr: u64,
    },
}

/// A completion queue overran: completions were lost and the queue pairs that produced them
/// moved to the error state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqOverrun;

/// One RDMA NIC's worth of transport state: the queue pairs, and the rest of the NIC
/// (`Nic`) that their requester and responder halves work with.
#[derive(Debug)]
pub struct Engine {
    /// In line, not boxed: a round over many queue pairs walks one array in index order,
    /// seven to a 4 KiB page, instead of boxes scattered among their send queues (fewer
    /// TLB misses at 16,384 queue pairs). A free slot holds an empty queue pair in RESET
    /// (`live` says which slots are in use).
    pub(crate) qps: Vec<Qp>,
    /// Whether slot `i` of `qps` holds a live queue pair. Kept apart, not as `Option<Qp>`:
    /// that option's tag was a niche in the requester's timers, on a line a visit to the
    /// responder's side does not otherwise read, and every access to a queue pair tested it
    /// (cachegrind, 2 MiB cache, 16,384 queue pairs: 13.5 -> 12.0 read misses per message).
    live: Vec<bool>,
    free_qps: Vec<u32>,
    pub(crate) nic: Nic,
}

/// What a queue pair's requester and responder work with besides the queue pair itself:
/// the configuration, memory regions, completion queues, counters, the control law, the
/// timers and the scheduler. Apart from the queue pairs so that a handler can hold one
/// queue pair and this at once (`Engine::parts`), and so that a test can drive a handler
/// with a queue pair and a `Nic` of its own.
#[derive(Debug)]
pub(crate) struct Nic {
    pub(crate) config: EngineConfig,
    rng: Rng,
    pub(crate) mrs: MrTable,
    pub(crate) cqs: Vec<Option<CompletionQueue>>,
    pds: u32,
    /// Orders the queue pairs that may have something to send (those with `scheduled`).
    scheduler: EngineScheduler,
    /// Gives each packet its source port (unless the control law set the queue pair's path).
    path: EnginePathSelector,
    /// Makes the receive trackers of selective-repeat queue pairs.
    trackers: Box<dyn TrackerFactory>,
    /// Each queue pair's payload services, by index (empty for most: see `Qp::services`).
    services: Vec<Vec<Box<dyn Service>>>,
    /// Each queue pair's flags from stages beside the path on their way to a responder's
    /// completion, by index (as long as `services`).
    pub(crate) message_flags: Vec<crate::policy::MessageFlags>,
    /// Received payloads waiting for deferred stages, within the receive credit.
    pub(crate) service_queue: crate::policy::DeferredQueue,
    /// Queue pairs that lost packets to the receive credit since it last came back
    /// ([`crate::policy::CreditDrops`]), by index, each once (reused).
    pub(crate) credit_waiting: Vec<u32>,
    /// Where a received payload is copied for in-line services to change it (reused).
    service_scratch: Vec<u8>,
    /// Some queue pair has had services: received packets take the services' way.
    any_services: bool,
    /// The queue pairs with an asynchronous stage ([`Service::asynchronous`]), by index, in
    /// the order they got one: whose stages `run_deferred` collects from.
    pub(crate) async_qps: Vec<u32>,
    /// What asynchronous stages returned, being carried to completions (reused).
    pub(crate) returned: Vec<crate::policy::Returned>,
    /// Completions that wait for asynchronous stages, in the order they were made: each is
    /// pushed to its CQ once its queue pair's stages returned what was offered before it,
    /// and none overtakes an earlier one.
    pub(crate) held: std::collections::VecDeque<HeldCompletion>,
    /// One timer per queue pair: retransmission, RNR waits, pacing.
    timers: Timers,
    pub(crate) counters: Counters,
    controller: Box<dyn Controller>,
    /// The events the controller wants (asked once).
    interest: EventMask,
    /// The controller's opcode mask (asked once) and the kinds it filters: none when it
    /// admits every opcode, so that an unused mask costs one test of an empty set.
    opcodes: crate::control::OpcodeMask,
    opcode_kinds: EventMask,
    /// The opcode of the packet being handled (received) and of the request that just left,
    /// by which the opcode mask filters the events they cause.
    pub(crate) rx_opcode: u8,
    pub(crate) tx_opcode: u8,
    /// Actions the controller returned from its timers, applied at once (reused buffer).
    deferred: Deferred,
    /// While a response is handled: the round trip its echoed send time measures, for the
    /// ACK event it causes.
    pub(crate) echoed_rtt: Option<std::time::Duration>,
    /// The buffers of completed inline requests, for the next ones to copy into: once
    /// inline requests have completed, posting inline data allocates nothing.
    pub(crate) inline_spare: Vec<Box<[u8]>>,
    /// Asynchronous events not yet polled: QP indexes, at most one each (`async_pending`).
    async_events: VecDeque<u32>,
    /// The latest `now` the engine was given, which stamps completions.
    pub(crate) clock: Instant,
    /// Path probes and replies to send, by queue pair index, ahead of the scheduler's
    /// packets (a probe measures the network, not this engine's queues); at most
    /// [`MAX_PROBES_WAITING`].
    pub(crate) probes: VecDeque<(u32, sluice_wire::PathProbeHeader)>,
}

/// The most probes and probe replies waiting to leave: a peer that floods probes gets
/// replies up to this and the rest dropped (counted), never unbounded memory.
pub(crate) const MAX_PROBES_WAITING: usize = 1024;

impl Qp {
    /// The queue pair's slot in the engine's table: its number less the first number, so
    /// that the handlers need not be told it.
    #[inline(always)]
    pub(crate) fn index(&self) -> u32 {
        self.num.0 - FIRST_QPN
    }
}

impl Engine {
    /// An engine with the default policies: no congestion control (line rate, the
    /// configured window), per-packet round robin, one source port per queue pair.
    pub fn new(config: EngineConfig) -> Engine {
        Engine::with_policies(config, Policies::default())
    }

    /// An engine whose queue pairs a control law drives (other policies the defaults).
    pub fn with_controller(config: EngineConfig, controller: Box<dyn Controller>) -> Engine {
        Engine::with_policies(
            config,
            Policies {
                controller,
                ..Policies::default()
            },
        )
    }

    /// An engine with these policies.
    pub fn with_policies(config: EngineConfig, policies: Policies) -> Engine {
        Engine {
            qps: Vec::new(),
            live: Vec::new(),
            free_qps: Vec::new(),
            nic: Nic::new(config, policies),
        }
    }

    /// What the engine has counted.
    pub fn counters(&self) -> &Counters {
        &self.nic.counters
    }

    /// What the control law's decoupled loop did (`None`: the law runs inline).
    pub fn decoupled_stats(&self) -> Option<crate::control::DecoupledStats> {
        self.nic.controller.decoupled_stats()
    }

    fn index(qpn: QpNum) -> Option<u32> {
        qpn.0.checked_sub(FIRST_QPN)
    }

    /// The index of live queue pair `qpn`.
    fn live(&self, qpn: QpNum) -> Result<u32, Error> {
        Self::index(qpn)
            .filter(|&i| self.is_live(i))
            .ok_or(Error::NoSuchObject("queue pair"))
    }

    /// Whether slot `index` holds a live queue pair (any index may be asked).
    fn is_live(&self, index: u32) -> bool {
        self.live.get(index as usize).copied().unwrap_or(false)
    }

    fn qp(&self, qpn: QpNum) -> Option<&Qp> {
        let index = self.live(qpn).ok()?;
        Some(&self.qps[index as usize])
    }

    /// Live queue pair `index`, read only.
    pub(crate) fn qp_at(&self, index: u32) -> &Qp {
        debug_assert!(self.is_live(index), "a live queue pair index");
        &self.qps[index as usize]
    }

    pub(crate) fn qp_mut(&mut self, index: u32) -> &mut Qp {
        debug_assert!(self.is_live(index), "a live queue pair index");
        &mut self.qps[index as usize]
    }

    /// Live queue pair `index` and the rest of the NIC, to hand to its requester or
    /// responder.
    #[inline(always)]
    pub(crate) fn parts(&mut self, index: u32) -> (&mut Qp, &mut Nic) {
        debug_assert!(self.is_live(index), "a live queue pair index");
        (&mut self.qps[index as usize], &mut self.nic)
    }

    /// [`Nic::emit`] for queue pair `index`.
    pub(crate) fn emit(&mut self, index: u32, now: Instant, event: Event) {
        let (qp, nic) = self.parts(index);
        nic.emit(qp, now, event);
    }

    /// Carries out a control law's decisions for queue pair `index` (gone already: ignored).
    fn apply(&mut self, index: u32, act: Actions) {
        if !self.is_live(index) {
            return;
        }
        let (qp, nic) = self.parts(index);
        nic.apply(qp, act);
    }

    /// [`Nic::schedule`] for queue pair `index`.
    pub(crate) fn schedule(&mut self, index: u32) {
        let (qp, nic) = self.parts(index);
        nic.schedule(qp);
    }

    /// [`Nic::check_drained`] for queue pair `index`.
    pub(crate) fn check_drained(&mut self, index: u32) {
        let (qp, nic) = self.parts(index);
        nic.check_drained(qp);
    }

    /// [`Nic::complete`] for queue pair `index`.
    pub(crate) fn complete(&mut self, index: u32, cq: crate::CqId, c: Completion) {
        let (qp, nic) = self.parts(index);
        nic.complete(qp, cq, c);
    }

    /// [`Nic::enter_error`] for queue pair `index`.
    pub(crate) fn enter_error(&mut self, index: u32) {
        let (qp, nic) = self.parts(index);
        nic.enter_error(qp);
    }
}

impl Nic {
    /// A NIC with no objects yet, with these policies.
    pub(crate) fn new(config: EngineConfig, policies: Policies) -> Nic {
        let Policies {
            controller,
            mut scheduler,
            path,
            tracker,
        } = policies;
        scheduler.set_link(config.line_rate_bps);
        Nic {
            config,
            rng: Rng::new(config.seed),
            mrs: MrTable::new(config.max_mrs as usize),
            cqs: Vec::new(),
            pds: 0,
            scheduler: EngineScheduler::new(scheduler),
            path: EnginePathSelector::new(path),
            trackers: tracker,
            services: Vec::new(),
            message_flags: Vec::new(),
            service_queue: Default::default(),
            credit_waiting: Vec::new(),
            service_scratch: Vec::new(),
            any_services: false,
            async_qps: Vec::new(),
            returned: Vec::new(),
            held: std::collections::VecDeque::new(),
            timers: Timers::default(),
            counters: Counters::default(),
            interest: controller.interest(),
            opcodes: controller.opcodes(),
            opcode_kinds: if controller.opcodes() == crate::control::OpcodeMask::ALL {
                EventMask::NONE
            } else {
                crate::control::PACKET_KINDS
            },
            rx_opcode: 0,
            tx_opcode: 0,
            controller,
            deferred: Vec::new(),
            echoed_rtt: None,
            inline_spare: Vec::new(),
            async_events: VecDeque::new(),
            clock: Instant::ZERO,
            probes: VecDeque::new(),
        }
    }

    /// Tells the controller about `event` on `qp` (if it asked for that kind) and applies
    /// what it decides. Always in line: each caller builds one kind of event, so the test
    /// of the kind folds to one bit of `interest`. Merely `#[inline]`, the compiler took it
    /// out of line once READ responses became a caller too, and every message paid for the
    /// call and a match on the event's kind (`scripts/bench-engine-instructions`: 55
    /// instructions a message).
    #[inline(always)]
    pub(crate) fn emit(&mut self, qp: &mut Qp, now: Instant, event: Event) {
        let kind = event.kind();
        if !self.interest.contains(kind) {
            return;
        }
        if self.opcode_kinds.contains(kind) {
            let opcode = if kind == EventKind::Tx {
                self.tx_opcode
            } else {
                self.rx_opcode
            };
            if !self.opcodes.admits(opcode) {
                return;
            }
        }
        let mut act = Actions::default();
        self.controller.on_event(now, qp.index(), &event, &mut act);
        if !act.is_empty() {
            self.apply(qp, act);
        }
    }

    /// Lets the law fill the declared CC header of a packet of `qp` about to leave.
    pub(crate) fn stamp_declared(
        &mut self,
        qp: &Qp,
        now: Instant,
        ccx: &mut Option<sluice_wire::Ccx>,
    ) {
        if let Some(sluice_wire::Ccx::Declared(out)) = ccx {
            self.controller.stamp(now, qp.index(), out);
        }
    }

    /// True if the controller decides packet by packet whether a request may go.
    #[inline]
    pub(crate) fn gates(&self) -> bool {
        self.interest.gates()
    }

    /// True if the controller gates READ responses too, and paces them at its rate
    /// ([`crate::control::EventMask::GATE_READ_RESPONSES`]).
    #[inline]
    pub(crate) fn gates_read_responses(&self) -> bool {
        self.interest.gates_read_responses()
    }

    /// Asks the controller whether a packet of `qp` carrying `bytes` of payload (a READ
    /// response) may go now.
    pub(crate) fn gate_bytes(&mut self, qp: &Qp, now: Instant, bytes: u32) -> Gate {
        self.controller.gate(now, qp.index(), bytes)
    }

    /// Asks the controller whether a request packet of `qp` at `pos` may go now.
    pub(crate) fn gate(&mut self, qp: &Qp, now: Instant, pos: &crate::control::MessagePos) -> Gate {
        self.controller.gate_message(now, qp.index(), pos)
    }

    /// Lets the law fill the declared CC header of a request of `qp` at `pos`.
    pub(crate) fn stamp_request(
        &mut self,
        qp: &Qp,
        now: Instant,
        pos: &crate::control::MessagePos,
        ccx: &mut Option<sluice_wire::Ccx>,
    ) {
        if let Some(sluice_wire::Ccx::Declared(out)) = ccx {
            self.controller.stamp_request(now, qp.index(), pos, out);
        }
    }

    /// Carries out a control law's decisions for `qp` (a live one).
    fn apply(&mut self, qp: &mut Qp, act: Actions) {
        if let Some(rate) = act.rate() {
            qp.knobs.rate_bps = rate;
        }
        if let Some(window) = act.window() {
            qp.knobs.window_bytes = window;
        }
        if let Some(port) = act.path() {
            qp.path = Some(port);
        }
        if let Some(level) = act.priority() {
            qp.priorities.request = Priority::level(level);
        }
        if let Some(level) = act.response_priority() {
            qp.priorities.response = Priority::level(level);
        }
        let mut wake = act.woken() || act.rate().is_some() || act.window().is_some();
        if act.cnp() {
            qp.cnp_due = true;
            wake = true;
        }
        if let Some(m) = act.homa() {
            qp.homa_due = Some(m);
            qp.control_due = true;
            wake = true;
        }
        if let Some(m) = act.busy() {
            qp.busy_due = Some(m);
            qp.control_due = true;
            wake = true;
        }
        if act.granted() > 0 {
            qp.resp.grant_due = qp.resp.grant_due.saturating_add(act.granted());
            wake = true;
        }
        if wake && qp.state.receiving() {
            self.schedule(qp);
        }
    }

    /// In SQD, once no begun request is left: queues the drained event. Called on entering
    /// SQD and when requests complete; once drained nothing can complete (nothing new
    /// begins), so it reports once per drain.
    pub(crate) fn check_drained(&mut self, qp: &mut Qp) {
        if qp.state != QpState::Sqd || qp.req.sq.front().is_some_and(|w| w.started) {
            return;
        }
        if !std::mem::replace(&mut qp.async_pending, true) {
            self.async_events.push_back(qp.index());
        }
    }

    /// The UDP source port of a packet of `qp`: the control law's path if it set one, else
    /// the path selector's.
    #[inline]
    pub(crate) fn source_port(&mut self, qp: &Qp, psn: Psn, opcode: Opcode) -> u16 {
        match qp.path {
            Some(port) => port,
            // Packets are built in `poll_transmit`, which set the clock to its `now`.
            None => self
                .path
                .source_port(qp.index(), qp.num, psn, opcode, self.clock),
        }
    }

    /// `qp`'s requester confirmed every PSN before `confirmed` at `now` (with an RTT sample
    /// if the acknowledgement gave one): the path selector's round of signals (PLB).
    #[inline]
    pub(crate) fn path_ack(
        &mut self,
        qp: &Qp,
        now: Instant,
        confirmed: Psn,
        rtt: Option<Duration>,
    ) {
        self.path
            .on_ack(qp.index(), now, confirmed, qp.req.max_sent, rtt);
    }

    /// Hands `qp` to the scheduler (if it does not hold it already).
    #[inline]
    pub(crate) fn schedule(&mut self, qp: &mut Qp) {
        if !qp.scheduled {
            qp.scheduled = true;
            self.scheduler.wake(qp.index());
        }
    }

    /// Makes sure a timer fires for `qp` no later than `at`.
    #[inline]
    pub(crate) fn arm(&mut self, qp: &Qp, at: Instant) {
        self.timers.arm(qp.index(), at);
    }

    /// The retransmit timeout of a queue pair: 4.096 us x 2^timeout.
    pub(crate) fn retransmit_timeout(timeout: u8) -> Option<Duration> {
        (timeout != 0).then(|| Duration::from_nanos(4096 << timeout.min(31)))
    }

    /// Hands the `len` bytes of READ data at `offset`, just placed through `sgl`, to queue
    /// pair `qp`'s stages that act where responses land ([`Service::landed`]).
    #[inline(never)]
    pub(crate) fn landed(&mut self, qp: &Qp, sgl: &crate::qp::SgList, offset: u32, len: u32) {
        let Some(services) = self.services.get_mut(qp.index() as usize) else {
            return;
        };
        for service in services.iter_mut().filter(|s| s.on_landing()) {
            let asynchronous = service.asynchronous();
            let mut at = offset;
            for (lkey, addr, n) in sgl.pieces(offset, len) {
                if let Some(bytes) = self.mrs.slice_mut(lkey, addr, n) {
                    // Off the engine's thread if the stage has room within the credit
                    // (the READ's completion then waits for it), else here.
                    let landing = crate::policy::Landing { key: lkey, addr };
                    let f = &mut self.message_flags[qp.index() as usize];
                    if asynchronous
                        && self
                            .service_queue
                            .admits(self.config.service_credit, bytes.len())
                        && service.offer_landed(qp.num, at, bytes, landing)
                    {
                        self.service_queue.went_out(bytes.len());
                        f.offered += 1;
                        f.credited.0 += 1;
                        f.credited.1 += bytes.len() as u64;
                    } else {
                        service.landed(qp.num, at, bytes);
                    }
                }
                at += n;
            }
        }
    }

    /// Forgets queue pair `index`'s services' state (destroyed or reset: its slot's next
    /// queue pair must not see it): what waits for its deferred stages, what is out with
    /// its asynchronous ones (no longer owed: its credit comes back), and its completions
    /// held for them (dropped, as a destroyed queue pair's work is).
    pub(crate) fn forget_services(&mut self, index: u32) {
        let f = std::mem::take(&mut self.message_flags[index as usize]);
        self.service_queue.no_longer_owed(f.credited, f.sent_out);
        self.service_queue.forget(index);
        self.held.retain(|h| h.index != index);
    }

    /// Adds a completion; on a CQ overrun the queue pair goes to the error state. While
    /// the queue pair's packets are out with an asynchronous stage (or an earlier
    /// completion waits), it waits too ([`Nic::held`]).
    pub(crate) fn complete(&mut self, qp: &mut Qp, cq: crate::CqId, c: Completion) {
        self.complete_in(qp, cq, c, |_| None);
    }

    /// [`Nic::complete`] for a message: `scope` says which side's and its first PSN (so
    /// that flags an asynchronous stage returns late find it while it is held), asked
    /// only once some queue pair has an asynchronous stage.
    ///
    /// Without asynchronous stages (the usual case) one test, and the holding out of
    /// line: in line, it made every message cost more (`scripts/bench-engine-instructions`:
    /// 14 instructions, and 4 more for setting the scope in a field of the NIC).
    #[inline]
    pub(crate) fn complete_in(
        &mut self,
        qp: &mut Qp,
        cq: crate::CqId,
        mut c: Completion,
        scope: impl FnOnce(&Qp) -> Option<(FlagSide, sluice_wire::Psn)>,
    ) {
        c.time = self.clock;
        if !self.async_qps.is_empty() {
            let scope = scope(qp);
            return self.complete_or_hold(qp, cq, c, scope);
        }
        self.push_completion(qp, cq, c);
    }

    /// [`Nic::complete_in`] once some queue pair has an asynchronous stage: the completion
    /// waits ([`Nic::held`]) while its queue pair's packets are out with one, or while an
    /// earlier completion waits.
    #[inline(never)]
    fn complete_or_hold(
        &mut self,
        qp: &mut Qp,
        cq: crate::CqId,
        c: Completion,
        scope: Option<(FlagSide, sluice_wire::Psn)>,
    ) {
        let needs = self
            .message_flags
            .get(qp.index() as usize)
            .filter(|f| f.offered > f.returned)
            .map(|f| f.offered);
        if needs.is_some() || !self.held.is_empty() {
            self.counters.service_held_completions += 1;
            let strict = self
                .message_flags
                .get(qp.index() as usize)
                .is_some_and(|f| f.strict);
            let until = (!strict).then(|| self.clock + self.config.service_flag_wait);
            self.held.push_back(HeldCompletion {
                index: qp.index(),
                cq,
                completion: c,
                needs: needs.unwrap_or(0),
                until,
                scope,
            });
            return;
        }
        self.push_completion(qp, cq, c);
    }

    /// [`Nic::complete`] once nothing holds it.
    #[inline]
    pub(crate) fn push_completion(&mut self, qp: &mut Qp, cq: crate::CqId, c: Completion) {
        let pushed = self.cqs[cq.0 as usize]
            .as_mut()
            .expect("a queue pair's CQ outlives it")
            .push(c);
        if !pushed {
            self.counters.cq_overruns += 1;
            if qp.state != QpState::Error {
                self.enter_error(qp);
            }
        }
    }

    /// Moves a queue pair to ERROR: every outstanding request completes with a flush error;
    /// NAKs already owed to the peer are still sent.
    pub(crate) fn enter_error(&mut self, qp: &mut Qp) {
        self.enter_error_failing(qp, None);
    }

    /// [`Nic::enter_error`], with send request `failed.0` completing with status `failed.1`.
    pub(crate) fn enter_error_failing(&mut self, qp: &mut Qp, failed: Option<(usize, WcStatus)>) {
        qp.state = QpState::Error;
        let num = qp.num;
        let (send_cq, recv_cq) = (qp.send_cq, qp.recv_cq);
        let sends: Vec<SendWqe> = qp.req.sq.drain(..).collect();
        qp.req.oldest_read.clear();
        // The cursor points at no request: the offset into one goes too (a queue pair that
        // failed in the middle of a message kept it, against the requester's invariant).
        qp.req.cursor = 0;
        qp.req.cursor_offset = 0;
        qp.req.deadline = None;
        qp.req.rnr_wait_until = None;
        let mut recvs: Vec<RecvWqe> = Vec::new();
        if let Some(crate::qp::InProgress::Send { wqe, .. }) = qp.resp.in_progress.take() {
            recvs.push(wqe);
        }
        recvs.extend(qp.resp.rq.drain(..));
        qp.resp
            .responses
            .retain(|r| matches!(r, crate::qp::Response::Nak { .. }));
        qp.resp.ack_due = false;
        if let Some(reorder) = &mut qp.resp.reorder {
            reorder.clear();
        }
        qp.req.resend.clear();
        for (i, w) in sends.into_iter().enumerate() {
            let status = match failed {
                Some((pos, status)) if pos == i => status,
                _ => WcStatus::WrFlushError,
            };
            let c = Completion::unfinished(w.wr_id, status, send_opcode(w.op), num);
            self.complete(qp, send_cq, c);
        }
        for w in recvs {
            let c = Completion::unfinished(w.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, num);
            self.complete(qp, recv_cq, c);
        }
    }
}

/// The completion opcode of a send operation.
pub(crate) fn send_opcode(op: SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
        SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        SendOp::CompareSwap { .. } => WcOpcode::CompareSwap,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
    }
}

#[cfg(test)]
mod priority_tests {
    use super::{Priority, Transmit};

    #[test]
    fn a_priority_is_a_level_clamped_to_seven_or_none() {
        assert_eq!(Priority::NONE.get(), None);
        assert_eq!(Priority::default(), Priority::NONE);
        for level in 0..=7 {
            assert_eq!(Priority::level(level).get(), Some(level));
            assert_eq!(Priority::from(Some(level)).get(), Some(level));
        }
        // Above the top level counts as the top level, u8::MAX included: never "none".
        for level in [8, 100, u8::MAX] {
            assert_eq!(Priority::level(level).get(), Some(7));
        }
        assert_eq!(Priority::from(None), Priority::NONE);
        assert_eq!(format!("{:?}", Priority::level(3)), "Some(3)");
    }

    #[test]
    fn a_transmit_stays_as_small_as_before_it_had_a_priority() {
        // Built and copied for every packet: the priority took a byte of padding.
        assert_eq!(size_of::<Priority>(), 1);
        assert!(size_of::<Transmit>() <= 288, "{}", size_of::<Transmit>());
    }
}
