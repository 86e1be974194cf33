//! The engine: objects, the verbs-style calls, and the policies and timers it drives.
//! The requester and responder halves of a queue pair live in their own modules.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use sluice_wire::{Opcode, Operation, Psn, RoceHeaders};

use crate::control::{Actions, Controller, Deferred, Event, EventMask, Gate};
use crate::cq::{Completion, CompletionQueue, WcOpcode, WcStatus};
use crate::mr::{Access, Memory, MrInfo, MrTable};
use crate::policy::{
    Direction, EnginePathSelector, EngineScheduler, Policies, Served, Service, ServicePacket,
    Tenant, TrackerFactory, TrackerMemory, Verdict,
};
use crate::qp::{
    Qp, QpConfig, QpNum, QpState, RecvWqe, SendOp, SendWqe, SendWr, SgList, Transition,
};
use crate::timers::Timers;
use crate::{Counters, Error, Instant, RecvWr, Rng};

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
    /// The line rate control laws start from ([`Event::Start`]), in bits per second.
    pub line_rate_bps: u64,
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
    /// Carry Sluice's CC extension header (after the BTH, TVer 1) in this layout: send
    /// timestamps echoed by the peer (an RTT sample per ACK), INT records switches fill in
    /// (HPCC) or credit totals (grants then ride the peer's packets instead of control
    /// packets). Only when both ends agreed: a standard RoCE peer drops such packets.
    pub ccx: Option<sluice_wire::CcxLayout>,
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
            ccx: None,
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

/// One RDMA NIC's worth of transport state.
#[derive(Debug)]
pub struct Engine {
    pub(crate) config: EngineConfig,
    rng: Rng,
    pub(crate) mrs: MrTable,
    pub(crate) cqs: Vec<Option<CompletionQueue>>,
    pds: u32,
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
    /// Orders the queue pairs that may have something to send (those with `scheduled`).
    scheduler: EngineScheduler,
    /// Gives each packet its source port (unless the control law set the queue pair's path).
    path: EnginePathSelector,
    /// Makes the receive trackers of selective-repeat queue pairs.
    trackers: Box<dyn TrackerFactory>,
    /// Each queue pair's payload services, by index (empty for most: see `Qp::services`).
    services: Vec<Vec<Box<dyn Service>>>,
    /// Where a received payload is copied for in-line services to change it (reused).
    service_scratch: Vec<u8>,
    /// Some queue pair has had services: received packets take the services' way.
    any_services: bool,
    /// One timer per queue pair: retransmission, RNR waits, pacing.
    timers: Timers,
    pub(crate) counters: Counters,
    controller: Box<dyn Controller>,
    /// The events the controller wants (asked once).
    interest: EventMask,
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
        let Policies {
            controller,
            scheduler,
            path,
            tracker,
        } = policies;
        Engine {
            config,
            rng: Rng::new(config.seed),
            mrs: MrTable::new(config.max_mrs as usize),
            cqs: Vec::new(),
            pds: 0,
            qps: Vec::new(),
            live: Vec::new(),
            free_qps: Vec::new(),
            scheduler: EngineScheduler::new(scheduler),
            path: EnginePathSelector::new(path),
            trackers: tracker,
            services: Vec::new(),
            service_scratch: Vec::new(),
            any_services: false,
            timers: Timers::default(),
            counters: Counters::default(),
            interest: controller.interest(),
            controller,
            deferred: Vec::new(),
            echoed_rtt: None,
            inline_spare: Vec::new(),
            async_events: VecDeque::new(),
        }
    }

    /// Tells the controller about `event` on queue pair `index` (if it asked for that kind)
    /// and applies what it decides.
    #[inline]
    pub(crate) fn emit(&mut self, index: u32, now: Instant, event: Event) {
        if !self.interest.contains(event.kind()) {
            return;
        }
        let mut act = Actions::default();
        self.controller.on_event(now, index, &event, &mut act);
        if !act.is_empty() {
            self.apply(index, act);
        }
    }

    /// True if the controller decides packet by packet whether a request may go.
    #[inline]
    pub(crate) fn gates(&self) -> bool {
        self.interest.gates()
    }

    /// Asks the controller whether a request packet of `bytes` may go now.
    pub(crate) fn gate(&mut self, index: u32, now: Instant, bytes: u32) -> Gate {
        self.controller.gate(now, index, bytes)
    }

    /// Carries out a control law's decisions for queue pair `index` (gone already: ignored).
    fn apply(&mut self, index: u32, act: Actions) {
        if !self.is_live(index) {
            return;
        }
        let qp = self.qp_mut(index);
        if let Some(rate) = act.rate() {
            qp.knobs.rate_bps = rate;
        }
        if let Some(window) = act.window() {
            qp.knobs.window_bytes = window;
        }
        if let Some(port) = act.path() {
            qp.path = Some(port);
        }
        let mut wake = act.woken() || act.rate().is_some() || act.window().is_some();
        if act.cnp() {
            qp.cnp_due = true;
            wake = true;
        }
        if act.granted() > 0 {
            qp.resp.grant_due = qp.resp.grant_due.saturating_add(act.granted());
            wake = true;
        }
        if wake && qp.state.receiving() {
            self.schedule(index);
        }
    }

    /// What the engine has counted.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    // ---- objects -------------------------------------------------------------------------

    /// Allocates a protection domain (never fails; domains are never freed).
    pub fn alloc_pd(&mut self) -> PdId {
        self.pds += 1;
        PdId(self.pds)
    }

    /// Registers `memory` at virtual address `addr`. Remote write and atomic access need local
    /// write access too (IBTA).
    pub fn register_mr(
        &mut self,
        pd: PdId,
        addr: u64,
        memory: Memory,
        access: Access,
    ) -> Result<MrInfo, Error> {
        if pd.0 == 0 || pd.0 > self.pds {
            return Err(Error::NoSuchObject("protection domain"));
        }
        self.mrs.register(&mut self.rng, pd, addr, memory, access)
    }

    /// Deregisters a region and hands its memory back.
    pub fn deregister_mr(&mut self, lkey: u32) -> Result<Memory, Error> {
        self.mrs.deregister(lkey)
    }

    /// The bytes of a region (`None` for a length-only region or an unknown key).
    pub fn mr_bytes(&self, lkey: u32) -> Option<&[u8]> {
        self.mrs.bytes(lkey)
    }

    /// The bytes of a region, writable (`None` for a length-only region or an unknown key).
    pub fn mr_bytes_mut(&mut self, lkey: u32) -> Option<&mut [u8]> {
        self.mrs.bytes_mut(lkey)
    }

    /// Creates a completion queue with room for `capacity` completions
    /// (1..=[`EngineConfig::max_cq_entries`]).
    pub fn create_cq(&mut self, capacity: u32) -> Result<CqId, Error> {
        if capacity == 0 || capacity > self.config.max_cq_entries {
            return Err(Error::InvalidArgument(
                "CQ capacity must be 1..=max_cq_entries",
            ));
        }
        if self.cqs.len() >= self.config.max_cqs as usize {
            return Err(Error::Exhausted("completion queues"));
        }
        self.cqs.push(Some(CompletionQueue::new(capacity as usize)));
        Ok(CqId(self.cqs.len() as u32 - 1))
    }

    /// The next completion of `cq`, `Ok(None)` when it is empty, `Err(CqOverrun)` once an
    /// overrun happened and the completions queued before it are drained.
    pub fn poll_cq(&mut self, cq: CqId) -> Result<Option<Completion>, CqOverrun> {
        let Some(Some(queue)) = self.cqs.get_mut(cq.0 as usize) else {
            return Ok(None);
        };
        match queue.pop() {
            Some(c) => Ok(Some(c)),
            None if queue.overrun => Err(CqOverrun),
            None => Ok(None),
        }
    }

    /// Completions waiting in `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.cqs
            .get(cq.0 as usize)
            .and_then(|c| c.as_ref())
            .map_or(0, |c| c.len())
    }

    /// Creates a queue pair in RESET and returns its number.
    pub fn create_qp(&mut self, config: QpConfig) -> Result<QpNum, Error> {
        if config.pd.0 == 0 || config.pd.0 > self.pds {
            return Err(Error::NoSuchObject("protection domain"));
        }
        for cq in [config.send_cq, config.recv_cq] {
            if !matches!(self.cqs.get(cq.0 as usize), Some(Some(_))) {
                return Err(Error::NoSuchObject("completion queue"));
            }
        }
        if config.caps.max_sge as usize > crate::MAX_SGE
            || config.caps.max_send_wr == 0
            || config.caps.max_recv_wr == 0
        {
            return Err(Error::InvalidArgument(
                "queue sizes must be non-zero and max_sge at most MAX_SGE",
            ));
        }
        let index = match self.free_qps.pop() {
            Some(i) => i,
            None if self.qps.len()
                < (self.config.max_qps as usize).min((1 << 24) - FIRST_QPN as usize) =>
            {
                self.live.push(false);
                let index = self.live.len() as u32 - 1;
                self.timers.add(index);
                index
            }
            None => return Err(Error::Exhausted("queue pairs")),
        };
        let num = QpNum(FIRST_QPN + index);
        let qp = Qp::new(num, config);
        match self.qps.get_mut(index as usize) {
            Some(slot) => *slot = qp,
            None => self.qps.push(qp),
        }
        self.live[index as usize] = true;
        self.controller.reset(index);
        self.scheduler.get().reset(index);
        self.path.reset(index);
        if let Some(services) = self.services.get_mut(index as usize) {
            services.clear();
        }
        Ok(num)
    }

    /// Destroys a queue pair whatever it was doing: what it had queued or in flight is
    /// dropped without completions (as `ibv_destroy_qp`), and packets for it that arrive
    /// later are dropped as for an unknown QP.
    pub fn destroy_qp(&mut self, qpn: QpNum) -> Result<(), Error> {
        let index = self.live(qpn)?;
        // What it held goes now; the slot keeps an empty queue pair until it is reused.
        let qp = &mut self.qps[index as usize];
        let scheduled = std::mem::replace(qp, Qp::new(qp.num, qp.config())).scheduled;
        self.live[index as usize] = false;
        // Off the scheduler and the timers too: the index is reused by the next queue pair,
        // which must not inherit a turn or a timer.
        if scheduled {
            self.scheduler.get().remove(index);
        }
        if let Some(services) = self.services.get_mut(index as usize) {
            services.clear();
        }
        self.timers.clear(index);
        self.free_qps.push(index);
        Ok(())
    }

    /// How much queue pair `qpn` holds in each of its (bounded) queues.
    pub fn qp_queues(&self, qpn: QpNum) -> Option<crate::QueueDepths> {
        self.qp(qpn).map(|q| q.depths())
    }

    /// Where queue pair `qpn`'s send and receive PSN sequences stand.
    pub fn qp_psns(&self, qpn: QpNum) -> Option<crate::QpPsns> {
        self.qp(qpn).map(|q| q.psns())
    }

    /// The state of queue pair `qpn` (`None` if it does not exist).
    pub fn qp_state(&self, qpn: QpNum) -> Option<QpState> {
        self.qp(qpn).map(|q| q.state)
    }

    /// The oldest asynchronous event not yet taken (verbs' `ibv_get_async_event`).
    pub fn poll_async_event(&mut self) -> Option<crate::AsyncEvent> {
        while let Some(index) = self.async_events.pop_front() {
            // A queue pair destroyed or reset since has nothing to report.
            if !self.is_live(index) {
                continue;
            }
            let qp = self.qp_mut(index);
            if std::mem::take(&mut qp.async_pending) && qp.state == QpState::Sqd {
                return Some(crate::AsyncEvent::SqDrained(qp.num));
            }
        }
        None
    }

    /// In SQD, once no begun request is left: queues the drained event. Called on entering
    /// SQD and when requests complete; once drained nothing can complete (nothing new
    /// begins), so it reports once per drain.
    pub(crate) fn check_drained(&mut self, index: u32) {
        let qp = self.qp_mut(index);
        if qp.state != QpState::Sqd || qp.req.sq.front().is_some_and(|w| w.started) {
            return;
        }
        if !std::mem::replace(&mut qp.async_pending, true) {
            self.async_events.push_back(index);
        }
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

    /// Live queue pair `index`, read only: borrows the queue pairs alone, so that other
    /// fields of the engine (the memory regions) can be used beside it.
    pub(crate) fn qp_at(&self, index: u32) -> &Qp {
        debug_assert!(self.is_live(index), "a live queue pair index");
        &self.qps[index as usize]
    }

    pub(crate) fn qp_mut(&mut self, index: u32) -> &mut Qp {
        debug_assert!(self.is_live(index), "a live queue pair index");
        &mut self.qps[index as usize]
    }

    /// Moves a queue pair along its state machine.
    pub fn modify_qp(&mut self, qpn: QpNum, transition: Transition) -> Result<(), Error> {
        let index = self.live(qpn)?;
        // The field, not `qp_mut`: the RTR transition asks the tracker factory beside it.
        let qp = &mut self.qps[index as usize];
        let state = qp.state;
        let refuse = |action| Err(Error::InvalidState { state, action });
        match transition {
            Transition::Init { access } => {
                if state != QpState::Reset {
                    return refuse("move to INIT (only from RESET)");
                }
                qp.attrs.access = access;
                qp.state = QpState::Init;
            }
            Transition::Rtr {
                peer,
                dest_qpn,
                path_mtu,
                rq_psn,
                max_dest_rd_atomic,
                min_rnr_timer,
                recovery,
            } => {
                if state != QpState::Init {
                    return refuse("move to RTR (only from INIT)");
                }
                if dest_qpn >= 1 << 24 || min_rnr_timer > 31 {
                    return Err(Error::InvalidArgument(
                        "dest_qpn is 24 bits, min_rnr_timer 0..=31",
                    ));
                }
                qp.attrs.peer = Some(peer);
                qp.attrs.dest_qpn = dest_qpn;
                qp.attrs.mtu = path_mtu.bytes();
                qp.attrs.max_dest_rd_atomic = max_dest_rd_atomic;
                qp.attrs.min_rnr_timer = min_rnr_timer;
                qp.attrs.recovery = recovery;
                qp.resp.epsn = rq_psn;
                qp.resp.reorder = (recovery == crate::Recovery::SelectiveRepeat)
                    .then(|| Box::new(crate::reorder::ReorderBuffer::new(self.trackers.create())));
                qp.state = QpState::Rtr;
            }
            Transition::Rts {
                sq_psn,
                timeout,
                retry_cnt,
                rnr_retry,
                max_rd_atomic,
            } => {
                if state != QpState::Rtr {
                    return refuse("move to RTS (only from RTR)");
                }
                if timeout > 31 || retry_cnt > 7 || rnr_retry > 7 {
                    return Err(Error::InvalidArgument(
                        "timeout 0..=31, retry_cnt and rnr_retry 0..=7",
                    ));
                }
                qp.attrs.timeout = timeout;
                qp.attrs.retry_cnt = retry_cnt;
                qp.attrs.rnr_retry = rnr_retry;
                qp.attrs.max_rd_atomic = max_rd_atomic;
                qp.req.next_psn = sq_psn;
                qp.req.una = sq_psn;
                qp.req.max_sent = sq_psn;
                qp.req.confirmed = sq_psn;
                qp.req.retries_left = retry_cnt;
                qp.req.rnr_retries_left = rnr_retry;
                qp.state = QpState::Rts;
                self.schedule(index);
            }
            Transition::Drain => {
                if state != QpState::Rts {
                    return refuse("drain the send queue (only from RTS)");
                }
                qp.state = QpState::Sqd;
                self.check_drained(index);
            }
            Transition::Resume => {
                if state != QpState::Sqd {
                    return refuse("resume sending (only from SQD)");
                }
                qp.state = QpState::Rts;
                self.schedule(index);
            }
            Transition::Error => {
                if state != QpState::Error {
                    self.enter_error(index);
                }
            }
            Transition::Reset => {
                // Back to new, but still held by the scheduler if it was: `scheduled` says
                // whether it is (destroy_qp and schedule rely on it), and only poll_transmit
                // lets it go.
                let (num, config, scheduled) = (qp.num, qp.config(), qp.scheduled);
                *qp = Qp::new(num, config);
                qp.scheduled = scheduled;
                self.controller.reset(index);
                // Its services go with the rest: a reset queue pair agrees to nothing yet.
                if let Some(services) = self.services.get_mut(index as usize) {
                    services.clear();
                }
            }
        }
        Ok(())
    }

    /// Lets queue pair `qpn` send and receive Sluice's control packets (credit grants).
    /// Call it only when the peer agreed at connection setup: standard RoCE peers drop
    /// them, and without it grants a control law makes are not sent (and counted).
    pub fn set_cc_control(&mut self, qpn: QpNum, on: bool) -> Result<(), Error> {
        let index = self.live(qpn)?;
        self.qp_mut(index).attrs.cc_control = on;
        Ok(())
    }

    /// Makes queue pair `qpn` carry Sluice's CC extension header in `layout` (`None`: plain
    /// RoCE v2). Call it only when the peer agreed at connection setup: a standard RoCE
    /// peer drops such packets. Packets with a CCX of another layout are dropped and counted.
    pub fn set_ccx(
        &mut self,
        qpn: QpNum,
        layout: Option<sluice_wire::CcxLayout>,
    ) -> Result<(), Error> {
        let index = self.live(qpn)?;
        self.qp_mut(index).attrs.ccx = layout;
        Ok(())
    }

    /// Hands the control law of queue pair `qpn` an application hint (`Event::Hint`): a
    /// tenant's share, a deadline, a priority; its meaning is the law's.
    pub fn post_hint(&mut self, now: Instant, qpn: QpNum, hint: u64) -> Result<(), Error> {
        let index = self.live(qpn)?;
        self.emit(index, now, Event::Hint(hint));
        Ok(())
    }

    /// Puts queue pair `qpn` in `tenant` for the scheduler (every queue pair starts in
    /// tenant 0 of weight 1).
    pub fn set_tenant(&mut self, qpn: QpNum, tenant: Tenant) -> Result<(), Error> {
        let index = self.live(qpn)?;
        if tenant.weight == 0 {
            return Err(Error::InvalidArgument("a tenant's weight is at least 1"));
        }
        self.scheduler.get().set_tenant(index, tenant);
        Ok(())
    }

    /// Runs `services` on queue pair `qpn`'s payloads, in this order on the send path and
    /// the reverse on the receive path (replacing any it had). An in-line service changes
    /// what goes on the wire: set one only when the peer agreed to run its counterpart.
    pub fn set_services(
        &mut self,
        qpn: QpNum,
        services: Vec<Box<dyn Service>>,
    ) -> Result<(), Error> {
        let index = self.live(qpn)? as usize;
        if self.services.len() <= index {
            self.services.resize_with(index + 1, Vec::new);
        }
        self.qps[index].attrs.services = !services.is_empty();
        self.any_services |= !services.is_empty();
        self.services[index] = services;
        if self.service_scratch.capacity() == 0 {
            // Once, the largest payload: receiving allocates nothing after this.
            self.service_scratch = Vec::with_capacity(crate::Mtu::M4096.bytes() as usize);
        }
        Ok(())
    }

    /// Queue pair `qpn`'s services (for their counters).
    pub fn services(&self, qpn: QpNum) -> &[Box<dyn Service>] {
        self.live(qpn)
            .ok()
            .and_then(|i| self.services.get(i as usize))
            .map_or(&[], |s| s.as_slice())
    }

    /// What the receive trackers hold, over every live queue pair that has one.
    pub fn tracker_memory(&self) -> TrackerMemory {
        let per_connection = (0..self.qps.len() as u32)
            .filter(|&i| self.is_live(i))
            .filter_map(|i| self.qps[i as usize].resp.reorder.as_ref())
            .map(|r| r.tracker.memory())
            .sum();
        TrackerMemory {
            per_connection,
            shared: self.trackers.shared_memory(),
        }
    }

    /// Moves a new (RESET) queue pair through INIT and RTR to RTS with `c`.
    pub fn connect(&mut self, qpn: QpNum, c: &Connection) -> Result<(), Error> {
        self.set_cc_control(qpn, c.cc_control)?;
        self.set_ccx(qpn, c.ccx)?;
        self.modify_qp(qpn, Transition::Init { access: c.access })?;
        self.modify_qp(
            qpn,
            Transition::Rtr {
                peer: c.peer,
                dest_qpn: c.dest_qpn,
                path_mtu: c.path_mtu,
                rq_psn: c.rq_psn,
                max_dest_rd_atomic: c.max_dest_rd_atomic,
                min_rnr_timer: c.min_rnr_timer,
                recovery: c.recovery,
            },
        )?;
        self.modify_qp(
            qpn,
            Transition::Rts {
                sq_psn: c.sq_psn,
                timeout: c.timeout,
                retry_cnt: c.retry_cnt,
                rnr_retry: c.rnr_retry,
                max_rd_atomic: c.max_rd_atomic,
            },
        )
    }

    // ---- posting -------------------------------------------------------------------------

    /// Finds a queue pair and checks a work request's buffers: at most `max_sge` entries, at
    /// most 2^31 bytes in all, each inside a registered region of the queue pair's PD that
    /// grants `need`. Returns the queue pair's index, the list and its length.
    fn checked_sgl(
        &self,
        qpn: QpNum,
        sgl: &[crate::Sge],
        need: Access,
    ) -> Result<(u32, SgList, u32), Error> {
        let index = self.live(qpn)?;
        let qp = self.qp_at(index);
        if sgl.len() > qp.caps.max_sge as usize {
            return Err(Error::InvalidArgument(
                "more scatter/gather entries than max_sge",
            ));
        }
        let list = SgList::new(sgl).ok_or(Error::InvalidArgument(
            "more scatter/gather entries than MAX_SGE",
        ))?;
        let len = list
            .total()
            .ok_or(Error::InvalidArgument("a message is at most 2^31 bytes"))?;
        for sge in list.entries() {
            self.mrs
                .check(sge.lkey, qp.pd, sge.addr, u64::from(sge.len), need)
                .map_err(|_| {
                    Error::InvalidArgument("a buffer is outside a registered region it may use")
                })?;
        }
        Ok((index, list, len))
    }

    /// Posts a send work request. Malformed requests (too many or unregistered local buffers,
    /// a message over 2^31 bytes, oversized inline data, an atomic without an 8-byte buffer)
    /// are refused here; a queue pair in the error state takes the request and completes it
    /// at once with a flush error.
    pub fn post_send(&mut self, qpn: QpNum, wr: &SendWr<'_>) -> Result<(), Error> {
        if wr.op.is_atomic() && wr.sgl.iter().map(|s| u64::from(s.len)).sum::<u64>() != 8 {
            return Err(Error::InvalidArgument(
                "an atomic needs one 8-byte result buffer",
            ));
        }
        // READ and atomic results are written into the buffers: they need local write.
        let need = if wr.op.is_read_or_atomic() {
            Access::LOCAL_WRITE
        } else {
            Access::NONE
        };
        let (index, sgl, len) = self.checked_sgl(qpn, wr.sgl, need)?;
        let inline = if wr.inline && !wr.op.is_read_or_atomic() {
            let qp = self.qp_mut(index);
            if len > qp.caps.max_inline {
                return Err(Error::InvalidArgument("inline data longer than max_inline"));
            }
            // A new buffer holds the queue pair's most, so that whatever inline request
            // takes it back next fits too.
            let room = qp.caps.max_inline as usize;
            let mut data = match self.inline_spare.pop() {
                Some(spare) if spare.len() >= len as usize => spare,
                _ => vec![0u8; room].into_boxed_slice(),
            };
            let mut at = 0;
            for (lkey, addr, n) in sgl.pieces(0, len) {
                self.mrs.read(lkey, addr, &mut data[at..at + n as usize]);
                at += n as usize;
            }
            Some(data)
        } else {
            None
        };
        let qp = self.qp_mut(index);
        match qp.state {
            // In SQD the request waits in the queue until the queue pair resumes.
            QpState::Rts | QpState::Sqd => {}
            QpState::Error => {
                let c = Completion::unfinished(
                    wr.wr_id,
                    WcStatus::WrFlushError,
                    send_opcode(wr.op),
                    qpn,
                );
                let cq = qp.send_cq;
                self.complete(index, cq, c);
                return Ok(());
            }
            state => {
                return Err(Error::InvalidState {
                    state,
                    action: "post a send (needs RTS or SQD)",
                });
            }
        }
        if qp.req.sq.len() >= qp.caps.max_send_wr as usize {
            return Err(Error::QueueFull("send queue"));
        }
        qp.req.sq.push_back(SendWqe {
            wr_id: wr.wr_id,
            op: wr.op,
            sgl,
            inline,
            len,
            signaled: wr.signaled,
            fence: wr.fence,
            solicited: wr.solicited,
            first_psn: Psn::new(0),
            span: 0,
            started: false,
            read_done: 0,
            responded: false,
        });
        self.schedule(index);
        Ok(())
    }

    /// Posts a receive work request (INIT, RTR, RTS or SQD; in ERROR it completes at once
    /// with a flush error).
    pub fn post_recv(&mut self, qpn: QpNum, wr: &RecvWr<'_>) -> Result<(), Error> {
        let (index, sgl, len) = self.checked_sgl(qpn, wr.sgl, Access::LOCAL_WRITE)?;
        let qp = self.qp_mut(index);
        match qp.state {
            QpState::Init | QpState::Rtr | QpState::Rts | QpState::Sqd => {}
            QpState::Error => {
                let c =
                    Completion::unfinished(wr.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, qpn);
                let cq = qp.recv_cq;
                self.complete(index, cq, c);
                return Ok(());
            }
            state => {
                return Err(Error::InvalidState {
                    state,
                    action: "post a receive (needs INIT, RTR, RTS or SQD)",
                });
            }
        }
        if qp.resp.rq.len() >= qp.caps.max_recv_wr as usize {
            return Err(Error::QueueFull("receive queue"));
        }
        qp.resp.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sgl,
            len,
        });
        Ok(())
    }

    // ---- packets in ----------------------------------------------------------------------

    /// A received packet, already decoded and ICRC-checked by the caller (see `sluice-wire`).
    /// Anything that does not belong is dropped and counted; requests are answered as the
    /// protocol prescribes. `ce` says whether the IP header carried the Congestion
    /// Experienced mark. `now` is when the packet arrived: a driver that has the host's
    /// receive timestamp passes it, even if other calls since were made at later times (it
    /// must not be earlier than the `now` of anything this engine sent before the packet
    /// arrived); RTT samples and the responder's hold time (see `Ccx`) are measured from it.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        from: IpAddr,
        ce: bool,
        headers: &RoceHeaders,
        payload: Payload<'_>,
    ) {
        if self.any_services {
            self.handle_served_packet(now, from, ce, headers, payload);
        } else {
            self.take_packet(now, from, ce, headers, payload);
        }
    }

    /// [`Engine::handle_packet`] in an engine where some queue pair has services: they see
    /// (and in-line ones change) a copy of the payload, and the rest of the packet's way
    /// reads that copy. Apart, so that an engine without services pays one test per packet.
    #[inline(never)]
    fn handle_served_packet(
        &mut self,
        now: Instant,
        from: IpAddr,
        ce: bool,
        headers: &RoceHeaders,
        payload: Payload<'_>,
    ) {
        let index = Self::index(QpNum(headers.bth.dest_qp)).filter(|&i| {
            self.is_live(i)
                && self.qps[i as usize].attrs.services
                && self.qps[i as usize].attrs.peer == Some(from)
        });
        let Some(index) = index else {
            return self.take_packet(now, from, ce, headers, payload);
        };
        match self.serve_incoming(index, headers, payload) {
            Ok(Some(copy)) => {
                self.take_packet(now, from, ce, headers, Payload::Bytes(&copy));
                self.service_scratch = copy;
            }
            Ok(None) => self.take_packet(now, from, ce, headers, payload),
            Err(()) => {
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += u64::from(payload.len());
                self.counters.drops_service += 1;
            }
        }
    }

    /// A received packet, past the services: checked, dispatched, answered.
    #[inline(always)]
    fn take_packet(
        &mut self,
        now: Instant,
        from: IpAddr,
        ce: bool,
        headers: &RoceHeaders,
        payload: Payload<'_>,
    ) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += u64::from(payload.len());
        let bth = &headers.bth;
        let Some(info) = bth.opcode.info() else {
            self.counters.drops_unexpected_opcode += 1;
            return;
        };
        if bth.pkey & 0x7FFF != 0x7FFF {
            self.counters.drops_bad_pkey += 1;
            return;
        }
        let Ok(index) = self.live(QpNum(bth.dest_qp)) else {
            self.counters.drops_unknown_qp += 1;
            return;
        };
        let qp = self.qp_mut(index);
        if qp.attrs.peer != Some(from) {
            self.counters.drops_wrong_peer += 1;
            return;
        }
        match info.transport {
            sluice_wire::Transport::Rc => {}
            sluice_wire::Transport::Cnp => {
                self.counters.cnps_received += 1;
                self.emit(index, now, Event::Cnp);
                self.schedule(index);
                return;
            }
            _ => {
                self.counters.drops_unexpected_opcode += 1;
                return;
            }
        }
        let qp = self.qp_mut(index);
        if headers
            .ccx
            .is_some_and(|c| qp.attrs.ccx != Some(c.layout()))
        {
            self.counters.drops_unnegotiated_ccx += 1;
            return;
        }
        if info.operation == Operation::CcControl {
            self.on_cc_control(index, now, headers);
            return;
        }
        if let Some(sluice_wire::Ccx::Credit { granted_total }) = headers.ccx {
            // Credit is not sequenced: any packet from the peer, even a stale one, may
            // carry a newer total.
            self.on_credit_total(index, now, granted_total);
        }
        let qp = self.qp_mut(index);
        let is_response = matches!(
            info.operation,
            Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse
        );
        if is_response {
            if !qp.state.sending() {
                self.counters.drops_bad_state += 1;
                return;
            }
            self.on_response_ccx(index, now, headers, info, payload);
        } else {
            if !qp.state.receiving() {
                self.counters.drops_bad_state += 1;
                return;
            }
            if let Some(ccx) = headers
                .ccx
                .filter(|c| c.layout() != sluice_wire::CcxLayout::Credit)
            {
                // Kept out of line (boxed once per queue pair): most never carry a CCX.
                let echo = crate::qp::CcxEcho { ccx, arrived: now };
                match &mut qp.ccx_echo {
                    Some(kept) => **kept = echo,
                    slot => *slot = Some(Box::new(echo)),
                }
            }
            self.on_request(index, now, ce, headers, info, payload);
        }
        #[cfg(debug_assertions)]
        self.check_requester(index);
        // On the ready list only with something to send: an ACK that completes the last
        // request leaves nothing, and a turn that finds nothing reads cold cache lines. A
        // response can give only the requester more to send (what the responder owes grows
        // with requests; the control law's CNPs and grants schedule as they are asked for,
        // in `apply`), so it is judged by the requester's lines alone.
        let qp = self.qp_mut(index);
        let more = if is_response {
            debug_assert!(
                qp.scheduled || !qp.owes_peer(),
                "owes the peer, not scheduled"
            );
            qp.requests_to_send()
        } else {
            qp.may_send_more()
        };
        if more {
            self.schedule(index);
        }
    }

    /// Runs queue pair `index`'s services, last first (the reverse of the send side's order,
    /// so that stages that undo each other nest), on a copy of a received payload: the copy
    /// (`None` when there are no bytes: a length-only payload shows its length to the
    /// stages beside the path), or `Err` when an in-line stage drops it.
    #[inline(never)]
    fn serve_incoming(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        payload: Payload<'_>,
    ) -> Result<Option<Vec<u8>>, ()> {
        let packet = ServicePacket {
            qpn: self.qps[index as usize].num,
            psn: headers.bth.psn,
            opcode: headers.bth.opcode,
            direction: Direction::Receive,
            len: payload.len(),
        };
        let bytes = match payload {
            _ if payload.is_empty() => return Ok(None),
            Payload::Bytes(bytes) => bytes,
            Payload::Len(_) => {
                for service in self.services[index as usize].iter_mut().rev() {
                    if !service.in_line() {
                        service.observe(&packet, &[]);
                    }
                }
                return Ok(None);
            }
        };
        let mut copy = std::mem::take(&mut self.service_scratch);
        copy.clear();
        copy.extend_from_slice(bytes);
        for service in self.services[index as usize].iter_mut().rev() {
            if !service.in_line() {
                service.observe(&packet, &copy);
            } else if service.transform(&packet, &mut copy) == Verdict::Drop {
                self.service_scratch = copy;
                return Err(());
            }
        }
        Ok(Some(copy))
    }

    /// A response, with what its CC extension header says: the round trip its echoed
    /// timestamp measures goes with the ACK event it causes (exact even for a resent
    /// request: the echo names the transmission); an INT record is a telemetry event.
    fn on_response_ccx(
        &mut self,
        index: u32,
        now: Instant,
        headers: &RoceHeaders,
        info: &sluice_wire::OpcodeInfo,
        payload: Payload<'_>,
    ) {
        use sluice_wire::Ccx;
        self.echoed_rtt = match headers.ccx {
            Some(Ccx::Timestamps {
                echo_ns: Some(sent),
                ..
            }) if sent <= now.as_nanos() => {
                Some(std::time::Duration::from_nanos(now.as_nanos() - sent))
            }
            _ => None,
        };
        self.on_response(index, now, headers, info, payload);
        self.echoed_rtt = None;
        if let Some(Ccx::Int(path)) = headers.ccx {
            let confirmed = self.qp_mut(index).req.confirmed;
            self.emit(index, now, Event::Telemetry { confirmed, path });
        }
    }

    /// A control packet from the peer: credit grants carry the total granted so far, so a
    /// lost grant is made up by the next and a duplicate or late one adds nothing.
    fn on_cc_control(&mut self, index: u32, now: Instant, headers: &RoceHeaders) {
        match (self.qp_mut(index).attrs.cc_control, headers.ext.cc_control) {
            (true, Some(c)) if c.kind == sluice_wire::CcControlKind::CreditTotal => {
                self.on_credit_total(index, now, c.value)
            }
            _ => self.counters.drops_unexpected_opcode += 1,
        }
    }

    /// The peer says it has granted `total` bytes of credit in all (wrapping), in a control
    /// packet or a credit CCX: what is news, ahead of the largest total seen by less than
    /// half the space, goes to the control law, while the queue pair receives.
    fn on_credit_total(&mut self, index: u32, now: Instant, total: u64) {
        let qp = self.qp_mut(index);
        let more = total.wrapping_sub(qp.credit_total_seen);
        if !qp.state.receiving() || more == 0 || more > u64::MAX / 2 {
            return;
        }
        qp.credit_total_seen = total;
        self.counters.grants_received += 1;
        self.emit(index, now, Event::Credit { bytes: more });
        self.schedule(index);
    }

    // ---- packets out ---------------------------------------------------------------------

    /// The next packet to send, if any may go now. `payload` must hold a full MTU (4096
    /// bytes): a payload that is not read in place from a region is written to its start.
    /// Read the payload with [`Engine::payload`] before the next call.
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant, payload: &mut [u8]) -> Option<Transmit> {
        // Nothing to send is the common answer when a driver polls: given before the visit's
        // set-up.
        let first = self.scheduler.next(now)?;
        self.visit_from(first, now, payload)
    }

    /// Visits queue pairs from `first` on, in the scheduler's order, until one sends.
    fn visit_from(&mut self, first: u32, now: Instant, payload: &mut [u8]) -> Option<Transmit> {
        let mut next = Some(first);
        while let Some(index) = next {
            let transmit = self
                .next_response_packet(index, now, payload)
                .or_else(|| self.next_request_packet(index, now, payload));
            let qp = &mut self.qps[index as usize];
            let Some(t) = transmit else {
                qp.scheduled = false;
                self.scheduler.served(index, now, None, false);
                next = self.scheduler.next(now);
                continue;
            };
            // Kept if it may send more; if not, let go now, while its state is in cache,
            // rather than at a later turn that would only find it idle (the next event that
            // gives it work schedules it again).
            let more = qp.may_send_more();
            qp.scheduled = more;
            let served = Served {
                opcode: t.headers.bth.opcode,
                payload_len: t.payload_len,
            };
            // The builders put a payload services must see in the buffer (see `Qp::services`).
            if self.any_services && qp.attrs.services && t.payload_len > 0 {
                let (psn, len) = (t.headers.bth.psn, t.payload_len as usize);
                // The builders put a payload with bytes in the buffer; one left in its
                // region is length-only memory (the simulator's): only its length shows.
                let bytes = (t.payload_at == PayloadAt::Buffer).then(|| &mut payload[..len]);
                self.serve_outgoing(index, psn, served.opcode, len as u32, bytes);
            }
            self.scheduler.served(index, now, Some(served), more);
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += u64::from(served.payload_len);
            return Some(t);
        }
        None
    }

    /// Runs queue pair `index`'s services on the payload of its packet `psn`, in the
    /// buffer it leaves from (never the region it came from: an in-line stage changes the
    /// bytes that go, not the application's memory). Without bytes (length-only memory),
    /// the stages beside the path see its length and the in-line ones have nothing to change.
    #[inline(never)]
    fn serve_outgoing(
        &mut self,
        index: u32,
        psn: Psn,
        opcode: Opcode,
        len: u32,
        mut payload: Option<&mut [u8]>,
    ) {
        let packet = ServicePacket {
            qpn: self.qps[index as usize].num,
            psn,
            opcode,
            direction: Direction::Send,
            len,
        };
        for service in &mut self.services[index as usize] {
            match (service.in_line(), payload.as_deref_mut()) {
                // A send-side drop would lose the packet for good: it goes on (see Verdict).
                (true, Some(bytes)) => {
                    let _ = service.transform(&packet, bytes);
                }
                (true, None) => {}
                (false, bytes) => service.observe(&packet, bytes.map_or(&[], |b| &*b)),
            }
        }
    }

    /// The `len` bytes of payload at `at` of a packet [`Engine::poll_transmit`] gave with
    /// `buffer` (its `payload_at` and `payload_len`): read in place from its memory region,
    /// or from the buffer. A region's bytes are what they are when this is called (as a NIC
    /// reads memory when it sends, not when the request was posted); zero bytes name no
    /// memory and are always there. `None` if the region was deregistered since the packet
    /// was built: drop the packet (the request fails when it is sent again). A region
    /// deregistered while its sends are outstanding is the application's error, as with a
    /// NIC; a key that was reused by then (a tag repeats after two reuses of a slot) would
    /// read the new region.
    pub fn payload<'a>(&'a self, at: PayloadAt, len: u32, buffer: &'a [u8]) -> Option<Payload<'a>> {
        match at {
            PayloadAt::Buffer => Some(Payload::Bytes(&buffer[..len as usize])),
            PayloadAt::Region { key, addr } => self.mrs.slice(key, addr, len),
        }
    }

    /// The UDP source port of a packet of queue pair `index`: the control law's path if it
    /// set one, else the path selector's.
    #[inline]
    pub(crate) fn source_port(&mut self, index: u32, psn: Psn, opcode: Opcode) -> u16 {
        let qp = &self.qps[index as usize];
        match qp.path {
            Some(port) => port,
            None => self.path.source_port(index, qp.num, psn, opcode),
        }
    }

    /// Hands a queue pair to the scheduler (if it does not hold it already).
    pub(crate) fn schedule(&mut self, index: u32) {
        let qp = &mut self.qps[index as usize];
        if !qp.scheduled {
            qp.scheduled = true;
            self.scheduler.wake(index);
        }
    }

    // ---- time ----------------------------------------------------------------------------

    /// When [`Engine::handle_timeout`] should next be called: a time when there is
    /// something to do (see `Timers::settle`), so that a driver that sleeps until it does
    /// not wake for nothing, and may sleep in a cheaper way when nothing is due soon.
    pub fn next_timeout(&mut self) -> Option<Instant> {
        let (qps, live) = (&self.qps, &self.live);
        let need = |index: u32| {
            live.get(index as usize)
                .copied()
                .unwrap_or(false)
                .then(|| qps[index as usize].timer_need())
                .flatten()
        };
        [
            self.controller.next_timeout(),
            self.scheduler.get_ref().next_timeout(),
            self.timers.settle(need),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether [`Engine::handle_timeout`] may have something to do at `now`: a check for a
    /// driver that polls, cheaper than [`Engine::next_timeout`] (a look at the earliest entry,
    /// which is never later than what it stands for). It may say yes for an entry whose
    /// wait has since moved later or ended; `handle_timeout` then drops or re-arms it, so
    /// that happens once per such entry, not once per poll. `next_timeout` instead checks
    /// and moves the entry, for a driver deciding how long to sleep.
    pub fn timeout_due(&mut self, now: Instant) -> bool {
        [
            self.controller.next_timeout(),
            self.scheduler.get_ref().next_timeout(),
            self.timers.earliest(),
        ]
        .into_iter()
        .flatten()
        .any(|at| at <= now)
    }

    /// Fires every timer due at `now`: retransmissions, the end of RNR waits, pacing, and
    /// the control plane's own (law timers, decoupled processing).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.controller.next_timeout().is_some_and(|at| at <= now) {
            let mut deferred = std::mem::take(&mut self.deferred);
            self.controller.on_timeout(now, &mut deferred);
            for (index, act) in deferred.drain(..) {
                self.apply(index, act);
            }
            self.deferred = deferred;
        }
        while let Some(index) = self.timers.pop_due(now) {
            if self.is_live(index) {
                self.on_timer(index, now);
            }
        }
    }

    /// Makes sure a timer fires for queue pair `index` no later than `at`.
    pub(crate) fn arm(&mut self, index: u32, at: Instant) {
        self.timers.arm(index, at);
    }

    /// The retransmit timeout of a queue pair: 4.096 us x 2^timeout.
    pub(crate) fn retransmit_timeout(timeout: u8) -> Option<Duration> {
        (timeout != 0).then(|| Duration::from_nanos(4096 << timeout.min(31)))
    }

    // ---- completions and errors ----------------------------------------------------------

    /// Adds a completion; on a CQ overrun the queue pair goes to the error state.
    pub(crate) fn complete(&mut self, index: u32, cq: crate::CqId, c: Completion) {
        let pushed = self.cqs[cq.0 as usize]
            .as_mut()
            .expect("a queue pair's CQ outlives it")
            .push(c);
        if !pushed {
            self.counters.cq_overruns += 1;
            if self.qp_mut(index).state != QpState::Error {
                self.enter_error(index);
            }
        }
    }

    /// Moves a queue pair to ERROR: every outstanding request completes with a flush error;
    /// NAKs already owed to the peer are still sent.
    pub(crate) fn enter_error(&mut self, index: u32) {
        self.enter_error_failing(index, None);
    }

    /// [`Engine::enter_error`], with send request `failed.0` completing with status `failed.1`.
    pub(crate) fn enter_error_failing(&mut self, index: u32, failed: Option<(usize, WcStatus)>) {
        let qp = self.qp_mut(index);
        qp.state = QpState::Error;
        let num = qp.num;
        let (send_cq, recv_cq) = (qp.send_cq, qp.recv_cq);
        let sends: Vec<SendWqe> = qp.req.sq.drain(..).collect();
        qp.req.cursor = 0;
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
            self.complete(index, send_cq, c);
        }
        for w in recvs {
            let c = Completion::unfinished(w.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, num);
            self.complete(index, recv_cq, c);
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
