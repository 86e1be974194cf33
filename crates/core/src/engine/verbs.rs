//! The verbs-style calls: protection domains, memory regions, completion queues, queue
//! pairs and their transitions, the per-queue-pair policies, and posting work.

use sluice_wire::Psn;

use super::{Connection, CqId, CqOverrun, Engine, FIRST_QPN, PdId, send_opcode};
use crate::control::Event;
use crate::cq::{Completion, CompletionQueue, WcOpcode, WcStatus};
use crate::mr::{Access, Memory, MrInfo};
use crate::policy::{Service, Tenant, TrackerMemory};
use crate::qp::{Qp, QpConfig, QpNum, QpState, RecvWqe, SendWqe, SendWr, SgList, Transition};
use crate::{Error, Instant, RecvWr};

impl Engine {
    /// Allocates a protection domain (never fails; domains are never freed).
    pub fn alloc_pd(&mut self) -> PdId {
        self.nic.pds += 1;
        PdId(self.nic.pds)
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
        if pd.0 == 0 || pd.0 > self.nic.pds {
            return Err(Error::NoSuchObject("protection domain"));
        }
        self.nic
            .mrs
            .register(&mut self.nic.rng, pd, addr, memory, access)
    }

    /// Deregisters a region and hands its memory back.
    pub fn deregister_mr(&mut self, lkey: u32) -> Result<Memory, Error> {
        self.nic.mrs.deregister(lkey)
    }

    /// The bytes of a region (`None` for a length-only region or an unknown key).
    pub fn mr_bytes(&self, lkey: u32) -> Option<&[u8]> {
        self.nic.mrs.bytes(lkey)
    }

    /// The bytes of a region, writable (`None` for a length-only region or an unknown key).
    pub fn mr_bytes_mut(&mut self, lkey: u32) -> Option<&mut [u8]> {
        self.nic.mrs.bytes_mut(lkey)
    }

    /// Creates a completion queue with room for `capacity` completions
    /// (1..=[`EngineConfig::max_cq_entries`](crate::EngineConfig::max_cq_entries)).
    pub fn create_cq(&mut self, capacity: u32) -> Result<CqId, Error> {
        if capacity == 0 || capacity > self.nic.config.max_cq_entries {
            return Err(Error::InvalidArgument(
                "CQ capacity must be 1..=max_cq_entries",
            ));
        }
        if self.nic.cqs.len() >= self.nic.config.max_cqs as usize {
            return Err(Error::Exhausted("completion queues"));
        }
        self.nic
            .cqs
            .push(Some(CompletionQueue::new(capacity as usize)));
        Ok(CqId(self.nic.cqs.len() as u32 - 1))
    }

    /// The next completion of `cq`, `Ok(None)` when it is empty, `Err(CqOverrun)` once an
    /// overrun happened and the completions queued before it are drained.
    pub fn poll_cq(&mut self, cq: CqId) -> Result<Option<Completion>, CqOverrun> {
        let Some(Some(queue)) = self.nic.cqs.get_mut(cq.0 as usize) else {
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
        self.nic
            .cqs
            .get(cq.0 as usize)
            .and_then(|c| c.as_ref())
            .map_or(0, |c| c.len())
    }

    /// Creates a queue pair in RESET and returns its number.
    pub fn create_qp(&mut self, config: QpConfig) -> Result<QpNum, Error> {
        if config.pd.0 == 0 || config.pd.0 > self.nic.pds {
            return Err(Error::NoSuchObject("protection domain"));
        }
        for cq in [config.send_cq, config.recv_cq] {
            if !matches!(self.nic.cqs.get(cq.0 as usize), Some(Some(_))) {
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
                < (self.nic.config.max_qps as usize).min((1 << 24) - FIRST_QPN as usize) =>
            {
                self.live.push(false);
                let index = self.live.len() as u32 - 1;
                self.nic.timers.add(index);
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
        self.nic.controller.reset(index);
        self.nic.scheduler.get().reset(index);
        self.nic.path.reset(index);
        if let Some(services) = self.nic.services.get_mut(index as usize) {
            services.clear();
            self.nic.forget_services(index);
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
            self.nic.scheduler.get().remove(index);
        }
        if let Some(services) = self.nic.services.get_mut(index as usize) {
            services.clear();
            self.nic.forget_services(index);
        }
        self.nic.timers.clear(index);
        self.nic.probes.retain(|&(i, _)| i != index);
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
        while let Some(index) = self.nic.async_events.pop_front() {
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
                // In-line services' overhead comes out of each packet's payload.
                qp.attrs.mtu = path_mtu.bytes()
                    - u32::from(qp.attrs.service_head)
                    - u32::from(qp.attrs.service_tail);
                qp.attrs.max_dest_rd_atomic = max_dest_rd_atomic;
                qp.attrs.min_rnr_timer = min_rnr_timer;
                qp.attrs.recovery = recovery;
                qp.resp.epsn = rq_psn;
                qp.resp.reorder = (recovery == crate::Recovery::SelectiveRepeat).then(|| {
                    Box::new(crate::reorder::ReorderBuffer::new(
                        self.nic.trackers.create(),
                    ))
                });
                // BDP flow control (IRN's): with selective repeat the requester keeps at most
                // one packet more unacknowledged than the peer's tracker holds past a gap, so
                // that no packet lands past it (refused, and then resent one a round trip).
                // Without the peer's word (`set_peer_receive_window`: a perftest or
                // Soft-RoCE peer, which advertise nothing) its tracker is taken to be this
                // engine's; with it, the smaller of the two. A power of two (one byte in the
                // requester): the largest at most the tracker plus one.
                qp.req.window_cap_shift = qp.resp.reorder.as_ref().map_or(0, |r| {
                    let own = crate::qp::window_shift(
                        r.tracker
                            .capacity()
                            .saturating_add(1)
                            .min(crate::qp::MAX_WINDOW),
                    );
                    own.max(qp.req.peer_cap_shift)
                });
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
                self.nic.controller.reset(index);
                // Its services go with the rest: a reset queue pair agrees to nothing yet.
                if let Some(services) = self.nic.services.get_mut(index as usize) {
                    services.clear();
                    self.nic.forget_services(index);
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

    /// Lets queue pair `qpn` send and answer Sluice's path probes (see
    /// [`crate::Connection::path_probes`]). Call it only when the peer agreed at connection
    /// setup: without it the path selector's probes are not sent (and counted in
    /// `Counters::probes_unsent`) and the peer's are dropped.
    pub fn set_path_probes(&mut self, qpn: QpNum, on: bool) -> Result<(), Error> {
        let index = self.live(qpn)?;
        self.qp_mut(index).path_probes = on;
        Ok(())
    }

    /// Tells queue pair `qpn` the receive window its peer advertised at connection setup
    /// (see [`crate::Connection::peer_receive_window`]): with selective repeat it then
    /// keeps at most the largest power of two within it unacknowledged (and within its
    /// own tracker's window), so that the peer refuses nothing for want of room. `None`:
    /// the peer said nothing, and its tracker is taken to be this engine's. A window of 0
    /// or past [`crate::policy::MAX_RECEIVE_WINDOW`] is refused. Call it before the queue
    /// pair leaves INIT ([`Engine::connect`] does); a reset forgets it.
    pub fn set_peer_receive_window(
        &mut self,
        qpn: QpNum,
        window: Option<u32>,
    ) -> Result<(), Error> {
        let index = self.live(qpn)?;
        let shift = match window {
            None => 0,
            Some(w) if (1..=crate::policy::MAX_RECEIVE_WINDOW).contains(&w) => {
                crate::qp::window_shift(w)
            }
            Some(_) => {
                return Err(Error::InvalidArgument(
                    "peer_receive_window must be 1..=2^23 packets",
                ));
            }
        };
        let qp = self.qp_mut(index);
        if !matches!(qp.state, QpState::Reset | QpState::Init) {
            // RTR fixed the window cap from it already.
            return Err(Error::InvalidState {
                state: qp.state,
                action: "take a peer_receive_window (only in RESET or INIT)",
            });
        }
        qp.req.peer_cap_shift = shift;
        Ok(())
    }

    /// The most packets queue pair `qpn` keeps unacknowledged whatever its window says
    /// (BDP flow control, from RTR on): `None` when nothing caps it (go-back-N).
    pub fn bdp_window(&self, qpn: QpNum) -> Result<Option<u32>, Error> {
        let index = self.live(qpn)?;
        let qp = self.qp_at(index);
        Ok((qp.req.window_cap_shift > 0).then(|| crate::qp::MAX_WINDOW >> qp.req.window_cap_shift))
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
        self.nic.scheduler.get().set_tenant(index, tenant);
        Ok(())
    }

    /// Runs `services` on queue pair `qpn`'s payloads, in this order on the send path and
    /// the reverse on the receive path (replacing any it had). An in-line service changes
    /// what goes on the wire: set one only when the peer agreed to run its counterpart.
    /// In-line services that grow the payload ([`Service::overhead`]) shrink the queue
    /// pair's segment by as much (both ends must have the same); they are set before any
    /// work is posted (changing the segment with requests or responses under way is
    /// refused), and their overhead together is under 128 bytes (the smallest path MTU is
    /// 256).
    pub fn set_services(
        &mut self,
        qpn: QpNum,
        services: Vec<Box<dyn Service>>,
    ) -> Result<(), Error> {
        let index = self.live(qpn)? as usize;
        let (head, tail) = services
            .iter()
            .filter(|s| s.in_line())
            .map(|s| s.overhead())
            .fold((0u32, 0u32), |(h, t), o| {
                (h.saturating_add(o.head), t.saturating_add(o.tail))
            });
        if head.saturating_add(tail) >= 128 {
            return Err(Error::InvalidArgument(
                "in-line services add under 128 bytes to a payload",
            ));
        }
        let qp = &mut self.qps[index];
        let (old_head, old_tail) = (
            u32::from(qp.attrs.service_head),
            u32::from(qp.attrs.service_tail),
        );
        if (head, tail) != (old_head, old_tail) {
            if !qp.req.sq.is_empty() || !qp.resp.responses.is_empty() {
                return Err(Error::InvalidState {
                    state: qp.state,
                    action: "change the payload overhead of services with work under way",
                });
            }
            qp.attrs.mtu = qp.attrs.mtu + old_head + old_tail - head - tail;
            // Each under 128 (checked above).
            qp.attrs.service_head = head as u8;
            qp.attrs.service_tail = tail as u8;
        }
        if self.nic.services.len() <= index {
            self.nic.services.resize_with(index + 1, Vec::new);
            self.nic
                .message_flags
                .resize_with(index + 1, Default::default);
        }
        if services.iter().any(|s| s.asynchronous())
            && !self.nic.async_qps.contains(&(index as u32))
        {
            self.nic.async_qps.push(index as u32);
        }
        self.nic.message_flags[index].strict = services
            .iter()
            .any(|s| s.asynchronous() && (s.deferred() || s.on_landing()));
        self.qps[index].services = !services.is_empty();
        self.nic.any_services |= !services.is_empty();
        self.nic.services[index] = services;
        if self.nic.service_scratch.capacity() == 0 {
            // Once, the largest payload: receiving allocates nothing after this (but for a
            // payload longer than any RoCE peer sends).
            self.nic.service_scratch = vec![0; crate::Mtu::M4096.bytes() as usize];
        }
        Ok(())
    }

    /// Queue pair `qpn`'s services (for their counters).
    pub fn services(&self, qpn: QpNum) -> &[Box<dyn Service>] {
        self.live(qpn)
            .ok()
            .and_then(|i| self.nic.services.get(i as usize))
            .map_or(&[], |s| s.as_slice())
    }

    /// The receive window this engine's selective-repeat queue pairs have, in packets (their
    /// tracker's capacity plus one): what to advertise to a peer at connection setup, for
    /// its [`crate::Connection::peer_receive_window`].
    pub fn receive_window(&self) -> u32 {
        self.nic.trackers.receive_window()
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
            shared: self.nic.trackers.shared_memory(),
        }
    }

    /// The operations the receive trackers carried out so far (cache hits, pool walks,
    /// gathered packets...), for a driver to charge their cost (LEFT's FPGA figures:
    /// [`crate::policy::TrackerWork::nanos`]) or report work per packet.
    pub fn tracker_work(&self) -> crate::policy::TrackerWork {
        self.nic.trackers.work()
    }

    /// Moves a new (RESET) queue pair through INIT and RTR to RTS with `c`.
    pub fn connect(&mut self, qpn: QpNum, c: &Connection) -> Result<(), Error> {
        self.set_cc_control(qpn, c.cc_control)?;
        self.set_path_probes(qpn, c.path_probes)?;
        self.set_ccx(qpn, c.ccx)?;
        self.set_peer_receive_window(qpn, c.peer_receive_window)?;
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
            self.nic
                .mrs
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
            let mut data = match self.nic.inline_spare.pop() {
                Some(spare) if spare.len() >= len as usize => spare,
                _ => vec![0u8; room].into_boxed_slice(),
            };
            let mut at = 0;
            for (lkey, addr, n) in sgl.pieces(0, len) {
                self.nic
                    .mrs
                    .read(lkey, addr, &mut data[at..at + n as usize]);
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
            flags: crate::policy::ServiceFlags::NONE,
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
}
