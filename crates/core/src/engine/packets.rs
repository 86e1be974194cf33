//! Packets in (`handle_packet`: checks, receive-side services, then the responder or the
//! requester) and out (`poll_transmit`: the scheduler's visits, send-side services).

use std::net::IpAddr;

use std::ops::Range;

use sluice_wire::{OpcodeInfo, Operation, RoceHeaders};

use super::{Engine, Payload, PayloadAt, Transmit};
use crate::Instant;
use crate::control::Event;
use crate::policy::{Direction, Sent, ServiceFlags, ServicePacket, Verdict};
use crate::qp::QpNum;

/// A received payload past the services: the copy they worked on, and the range of it that
/// goes on.
type Served = (Vec<u8>, Range<usize>);

/// Why the services refused a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// An in-line stage dropped it.
    Service,
    /// An asynchronous deferred stage had no credit left for it.
    Credit,
}

/// Offers a received payload of `len` bytes (`seen`: its bytes, or none for a length-only
/// one) to the asynchronous stage `service`, off the engine's thread, within the receive
/// credit; with `reserve`, a deferred stage after this one keeps its room (it is cleared
/// once a deferred stage had its turn). Past the credit a deferred stage's packet is
/// dropped, `Err` (the transport recovers it); another's goes on unseen, counted.
#[allow(clippy::too_many_arguments)]
#[inline]
fn offer_within_credit(
    queue: &mut crate::policy::DeferredQueue,
    credit: crate::ServiceCredit,
    counters: &mut crate::Counters,
    f: &mut crate::policy::MessageFlags,
    service: &mut dyn crate::policy::Service,
    packet: &ServicePacket<'_>,
    seen: &[u8],
    len: usize,
    reserve: &mut bool,
) -> Result<(), Refused> {
    let deferred = service.deferred();
    *reserve &= !deferred;
    if queue.admits_beside(credit, len, *reserve) && service.offer(packet, seen) {
        queue.went_out(len);
        f.offered += 1;
        f.credited.0 += 1;
        f.credited.1 += len as u64;
        counters.service_queue_peak_bytes = queue.peak_bytes;
        Ok(())
    } else if deferred {
        Err(Refused::Credit)
    } else {
        counters.service_uninspected += 1;
        Ok(())
    }
}

/// Flagged request PSNs a responder keeps until it takes them: as many as the packets a
/// selective-repeat responder holds past a gap, and more than a window of a go-back-N one.
const MAX_FLAGGED: usize = 256;

impl Engine {
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
        self.nic.clock = now;
        if self.nic.any_services {
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
                && self.qps[i as usize].services
                && self.qps[i as usize].attrs.peer == Some(from)
        });
        let Some(index) = index else {
            return self.take_packet(now, from, ce, headers, payload);
        };
        // Receive crediting: a payload its deferred stages have no room for is not taken.
        let takeable = self.may_take(index, headers);
        let deferred = takeable && self.defers(index);
        if deferred
            && !self
                .nic
                .service_queue
                .admits(self.nic.config.service_credit, payload.len() as usize)
        {
            self.nic.counters.rx_packets += 1;
            self.nic.counters.rx_bytes += u64::from(payload.len());
            self.dropped_for_credit(index, headers);
            return;
        }
        let mut flags = ServiceFlags::NONE;
        let served = self.serve_incoming(index, headers, payload, takeable, &mut flags);
        if !flags.is_empty() && served.is_ok() {
            self.raise_flags(index, headers, Direction::Receive, flags);
        }
        if deferred {
            let queued = match (&served, payload) {
                (Ok(Some((copy, kept))), _) => Some(&copy[kept.clone()]),
                (Ok(None), Payload::Bytes(bytes)) => Some(bytes),
                _ => None,
            };
            if let Some(bytes) = queued {
                self.nic.service_queue.push(index, headers, bytes);
                let peak = self.nic.service_queue.peak_bytes;
                self.nic.counters.service_queue_peak_bytes = peak;
            }
        }
        match served {
            Ok(Some((copy, kept))) => {
                self.take_packet(now, from, ce, headers, Payload::Bytes(&copy[kept.clone()]));
                // Bytes received are counted as they came, in-line services' overhead too.
                self.nic.counters.rx_bytes += (payload.len() as usize - kept.len()) as u64;
                self.nic.service_scratch = copy;
            }
            Ok(None) => self.take_packet(now, from, ce, headers, payload),
            Err(refused) => {
                self.nic.counters.rx_packets += 1;
                self.nic.counters.rx_bytes += u64::from(payload.len());
                match refused {
                    Refused::Service => self.nic.counters.drops_service += 1,
                    Refused::Credit => self.dropped_for_credit(index, headers),
                }
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
        self.nic.counters.rx_packets += 1;
        self.nic.counters.rx_bytes += u64::from(payload.len());
        let Some((index, info)) = self.admit(now, from, headers) else {
            return;
        };
        // Only a debug build asks (an assertion below): nothing in release.
        let gated_reads = cfg!(debug_assertions) && self.nic.gates_read_responses();
        let qp = self.qp_mut(index);
        let is_response = matches!(
            info.operation,
            Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse
        );
        if is_response {
            if !qp.state.sending() {
                self.nic.counters.drops_bad_state += 1;
                return;
            }
            if info.operation == Operation::RdmaReadResponse {
                // The data of a READ arrived at its receiver: `Rx`'s counterpart, before
                // the packet is handled (as `Rx` is), whatever becomes of it.
                self.emit(
                    index,
                    now,
                    Event::RxResponse {
                        psn: headers.bth.psn,
                        bytes: payload.len(),
                        ce,
                    },
                );
            }
            self.on_response_ccx(index, now, headers, info, payload);
        } else {
            if !qp.state.receiving() {
                self.nic.counters.drops_bad_state += 1;
                return;
            }
            if let Some(ccx) = headers.ccx.filter(|c| {
                matches!(
                    c,
                    sluice_wire::Ccx::Timestamps { .. } | sluice_wire::Ccx::Int(_)
                )
            }) {
                // Kept out of line (boxed once per queue pair): most never carry a CCX.
                let echo = crate::qp::CcxEcho { ccx, arrived: now };
                match &mut qp.ccx_echo {
                    Some(kept) => **kept = echo,
                    slot => *slot = Some(Box::new(echo)),
                }
            }
            let (qp, nic) = self.parts(index);
            qp.on_request(nic, now, ce, headers, info, payload);
        }
        #[cfg(debug_assertions)]
        self.qp_mut(index).check_requester();
        // On the ready list only with something to send: an ACK that completes the last
        // request leaves nothing, and a turn that finds nothing reads cold cache lines. A
        // response can give only the requester more to send (what the responder owes grows
        // with requests; the control law's CNPs and grants schedule as they are asked for,
        // in `apply`), so it is judged by the requester's lines alone.
        let qp = self.qp_mut(index);
        let more = if is_response {
            // (A READ response a law holds back waits for the pacer's timer or the law.)
            debug_assert!(
                qp.scheduled || !qp.owes_peer() || (gated_reads && qp.read_response_first()),
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

    /// The first phase of a received packet: whether it is a known opcode, for a live queue
    /// pair, from its peer, a transport packet with the extension header agreed. Its queue
    /// pair's index and the opcode's description, or `None` when that is all: dropped (and
    /// counted), or a CNP or control packet (handled). Credit totals a packet carries are
    /// taken here, whatever becomes of the packet.
    #[inline(always)]
    fn admit(
        &mut self,
        now: Instant,
        from: IpAddr,
        headers: &RoceHeaders,
    ) -> Option<(u32, &'static OpcodeInfo)> {
        let bth = &headers.bth;
        self.nic.rx_opcode = bth.opcode.0;
        let Some(info) = bth.opcode.info() else {
            self.nic.counters.drops_unexpected_opcode += 1;
            return None;
        };
        if bth.pkey & 0x7FFF != 0x7FFF {
            self.nic.counters.drops_bad_pkey += 1;
            return None;
        }
        let Ok(index) = self.live(QpNum(bth.dest_qp)) else {
            self.nic.counters.drops_unknown_qp += 1;
            return None;
        };
        let qp = self.qp_mut(index);
        if qp.attrs.peer != Some(from) {
            self.nic.counters.drops_wrong_peer += 1;
            return None;
        }
        match info.transport {
            sluice_wire::Transport::Rc => {}
            sluice_wire::Transport::Cnp => {
                self.nic.counters.cnps_received += 1;
                self.nic.path.on_cnp(index);
                self.emit(index, now, Event::Cnp);
                self.schedule(index);
                return None;
            }
            _ => {
                self.nic.counters.drops_unexpected_opcode += 1;
                return None;
            }
        }
        let qp = self.qp_mut(index);
        if headers
            .ccx
            .is_some_and(|c| qp.attrs.ccx != Some(c.layout()))
        {
            self.nic.counters.drops_unnegotiated_ccx += 1;
            return None;
        }
        if info.operation == Operation::CcControl {
            self.on_cc_control(index, now, headers);
            return None;
        }
        if let Some(sluice_wire::Ccx::Credit { granted_total }) = headers.ccx {
            // Credit is not sequenced: any packet from the peer, even a stale one, may
            // carry a newer total.
            self.on_credit_total(index, now, granted_total);
        }
        if let Some(sluice_wire::Ccx::Declared(fields)) = headers.ccx {
            // Before the packet is handled, as telemetry is: the law sees the peer's fields
            // with the events the packet then causes.
            self.emit(index, now, Event::Header(fields));
        }
        Some((index, info))
    }

    /// Whether these stages include an asynchronous deferred one that works on packets
    /// (not where READ data lands): one whose packet is dropped past the credit. A stage
    /// beside it that is not deferred (inspection, whose packet goes on uninspected past
    /// the credit) leaves it room on a packet the transport takes: else, with a small
    /// credit, the stage that runs first could take the last room on every packet, the
    /// deferred stage's would all be dropped, and a READ re-issued for them would never
    /// complete (`crates/sim/tests/workers.rs` covers a 2-packet credit).
    fn defers_asynchronously(services: &[Box<dyn crate::policy::Service>]) -> bool {
        services
            .iter()
            .any(|s| s.asynchronous() && s.deferred() && !s.on_landing())
    }

    /// Whether queue pair `index` has a deferred stage that queues payloads in the engine
    /// (not an asynchronous one: those hold their own copies).
    fn defers(&self, index: u32) -> bool {
        self.nic.services[index as usize]
            .iter()
            .any(|s| s.deferred() && !s.asynchronous())
    }

    /// Whether this received packet's payload counts against the receive credit of queue
    /// pair `index`'s deferred stages: one that the transport may take. A length-only
    /// payload (the simulator's) counts too: no deferred stage queues it here (it is seen
    /// at once), but an asynchronous one (the simulator's modelled worker) holds its length
    /// against the credit as a real one holds the bytes.
    ///
    /// Only a packet the transport may take counts against the credit: a request at the
    /// expected PSN (or, selective repeat, past it: one it may hold and does not hold
    /// yet), or a READ response the oldest READ waiting for data expects (or, selective
    /// repeat, past it: one it may keep and has not yet). A duplicate was seen already,
    /// and a go-back-N packet past a gap is dropped anyway: letting those take credit would
    /// crowd out the packet the transport waits for (with a READ whose responses outrun
    /// the stage, every re-requested stream's first packet, so that the READ would never
    /// progress), and offering them would show a deferred stage the same payload twice
    /// (`crates/sim/tests/workers.rs`, `drops_past_the_credit_are_recovered_exactly_once`).
    /// So each PSN's payload is offered once: what the reorder state records is what was
    /// offered. (Not covered: a packet offered and then refused by the transport for a
    /// reason of its own, a SEND without a receive posted, say, or a LEFT tracker out of
    /// shared memory; it is offered again when it comes again.)
    fn may_take(&self, index: u32, headers: &RoceHeaders) -> bool {
        let Some(info) = headers.bth.opcode.info() else {
            return false;
        };
        if !info.has_payload {
            return false;
        }
        let qp = &self.qps[index as usize];
        let psn = headers.bth.psn;
        let selective = qp.attrs.recovery == crate::Recovery::SelectiveRepeat;
        if info.operation == Operation::RdmaReadResponse {
            let mtu = qp.attrs.mtu;
            let Some((pos, expected)) = qp.oldest_read_expecting() else {
                return false;
            };
            let w = &qp.req.sq[pos];
            let d = expected.distance_to(psn);
            // Past the first missing response: kept only within the READ, if not kept yet
            // and there is room to record it (`on_read_response_ahead`).
            return d == 0
                || (selective
                    && d > 0
                    && (d as u32) < w.span - w.read_done / mtu
                    && qp
                        .req
                        .read_repair
                        .as_deref()
                        .is_none_or(|r| r.held.would_record(d as u32)));
        }
        let d = qp.resp.epsn.distance_to(psn);
        d == 0
            || (selective
                && d > 0
                && qp
                    .resp
                    .reorder
                    .as_ref()
                    .is_some_and(|r| r.would_hold(d as u32)))
    }

    /// A packet for queue pair `index` dropped for want of receive credit: counted, and
    /// recorded so that the transport asks for it again as soon as the credit comes back
    /// ([`crate::policy::CreditDrops`]; `recover_credit_drops`).
    #[cold]
    #[inline(never)]
    fn dropped_for_credit(&mut self, index: u32, headers: &RoceHeaders) {
        self.nic.counters.drops_service_credit += 1;
        let psn = headers.bth.psn;
        let qp = &self.qps[index as usize];
        let response = headers
            .bth
            .opcode
            .info()
            .is_some_and(|i| i.operation == Operation::RdmaReadResponse);
        let (retried, nak_sent) = (qp.req.read_retry_at == Some(psn), qp.resp.nak_sent);
        let Some(f) = self.nic.message_flags.get_mut(index as usize) else {
            return;
        };
        if f.credit_drops.is_empty() {
            self.nic.credit_waiting.push(index);
        }
        if response {
            f.credit_drops.response(psn, retried);
        } else {
            f.credit_drops.request(psn, nak_sent);
        }
    }

    /// The receive credit came back: each queue pair that lost packets to it since asks
    /// for them again now (the responder with an RNR NAK at its expected PSN, the
    /// requester by re-issuing its oldest waiting READ from the first missing response),
    /// rather than at the retransmission timeout. See [`crate::policy::CreditDrops`].
    #[cold]
    #[inline(never)]
    fn recover_credit_drops(&mut self) {
        let mut waiting = std::mem::take(&mut self.nic.credit_waiting);
        for &index in &waiting {
            let Some(f) = self.nic.message_flags.get_mut(index as usize) else {
                continue;
            };
            let drops = std::mem::take(&mut f.credit_drops);
            if drops.is_empty() || !self.is_live(index) {
                continue;
            }
            let (qp, nic) = self.parts(index);
            let go_back_n = qp.attrs.recovery == crate::Recovery::GoBackN;
            let mut asked = false;
            if qp.state.receiving() && drops.ask_requests(qp.resp.epsn, qp.resp.nak_sent, go_back_n)
            {
                asked |= qp.ask_again_for_credit(nic);
            }
            if qp.state.sending()
                && let Some((_, expected)) = qp.oldest_read_expecting()
                && drops.ask_responses(expected, qp.req.read_retry_at == Some(expected), go_back_n)
            {
                qp.ask_read_again();
                asked = true;
            }
            if asked {
                self.schedule(index);
            }
        }
        waiting.clear();
        self.nic.credit_waiting = waiting;
    }

    /// Gives the deferred stages ([`crate::policy::Service::deferred`]) up to `max` of the
    /// received payloads waiting for them, oldest first, and returns how many it gave. A
    /// driver calls it when it has time for them (`sluice-net`'s device after each batch
    /// it receives); what it leaves waits, within the receive credit. Flags they raise go
    /// where a stage's beside the path go, if the message is still open.
    pub fn run_deferred(&mut self, max: usize) -> usize {
        let mut done = 0;
        while done < max {
            let Some(w) = self.nic.service_queue.pop() else {
                break;
            };
            let index = w.index;
            let mut flags = ServiceFlags::NONE;
            if self.is_live(index) {
                let packet = ServicePacket {
                    qpn: self.qps[index as usize].num,
                    psn: w.headers.bth.psn,
                    opcode: w.headers.bth.opcode,
                    direction: Direction::Receive,
                    len: w.bytes.len() as u32,
                    headers: &w.headers,
                };
                for service in self.nic.services[index as usize].iter_mut().rev() {
                    if service.deferred() {
                        flags |= service.observe(&packet, &w.bytes);
                    }
                }
            }
            if !flags.is_empty() {
                self.raise_flags(index, &w.headers, Direction::Receive, flags);
            }
            self.nic.service_queue.recycle(w.bytes);
            done += 1;
        }
        if !self.nic.async_qps.is_empty() {
            done += self.collect_returned();
        }
        if done > 0 && !self.nic.credit_waiting.is_empty() {
            self.recover_credit_drops();
        }
        done
    }

    /// What the asynchronous stages ([`crate::policy::Service::asynchronous`]) returned:
    /// their credit comes back, their flags go to their messages (or to the completions
    /// held for them), and completions that waited go to their CQs.
    #[inline(never)]
    fn collect_returned(&mut self) -> usize {
        let mut done = 0;
        let mut out = std::mem::take(&mut self.nic.returned);
        for k in 0..self.nic.async_qps.len() {
            let index = self.nic.async_qps[k];
            let nic = &mut self.nic;
            let Some(services) = nic.services.get_mut(index as usize) else {
                continue;
            };
            // What a landing stage made of READ data goes back where the data lies (a
            // region deregistered since takes nothing).
            let mrs = &mut nic.mrs;
            let mut put_back = |at: crate::policy::Landing, bytes: &[u8]| {
                if let Some(to) = mrs.slice_mut(at.key, at.addr, bytes.len() as u32) {
                    to.copy_from_slice(bytes);
                }
            };
            for service in services.iter_mut().filter(|s| s.asynchronous()) {
                service.collect(&mut out, &mut put_back);
            }
            for r in out.drain(..) {
                let f = &mut self.nic.message_flags[index as usize];
                f.returned += 1;
                // Only what was received took credit (a sent payload takes none).
                let (queue, len) = (&mut self.nic.service_queue, u64::from(r.len));
                let owed = if r.direction == Direction::Receive {
                    queue.came_back(r.len as usize);
                    &mut f.credited
                } else {
                    queue.sent_back(r.len as usize);
                    &mut f.sent_out
                };
                *owed = (owed.0.saturating_sub(1), owed.1.saturating_sub(len));
                if !r.flags.is_empty() && self.is_live(index) {
                    self.raise_flags_at(index, r.psn, r.opcode, r.direction, r.flags, true);
                }
                done += 1;
            }
        }
        self.nic.returned = out;
        self.release_held();
        done
    }

    /// Pushes to their CQs the held completions (oldest first) whose queue pairs' stages
    /// returned what was offered before them, or whose wait is over; stops at the first
    /// that still waits.
    fn release_held(&mut self) {
        let now = self.nic.clock;
        while let Some(h) = self.nic.held.front() {
            let ready = h.until.is_some_and(|t| t <= now)
                || self
                    .nic
                    .message_flags
                    .get(h.index as usize)
                    .is_none_or(|f| f.returned >= h.needs);
            if !ready {
                break;
            }
            let h = self.nic.held.pop_front().expect("front exists");
            let (qp, nic) = self.parts(h.index);
            nic.push_completion(qp, h.cq, h.completion);
        }
    }

    /// Completions waiting for asynchronous stages' flags.
    pub fn held_completions(&self) -> usize {
        self.nic.held.len()
    }

    /// [`Engine::run_deferred`] at time `now` (not earlier than the engine's last): a
    /// completion held for an asynchronous stage's flags whose wait
    /// ([`crate::EngineConfig::service_flag_wait`]) is over by then goes. A driver with
    /// asynchronous stages calls this one, also when nothing else happens.
    pub fn run_deferred_at(&mut self, now: Instant, max: usize) -> usize {
        if now > self.nic.clock {
            self.nic.clock = now;
        }
        self.run_deferred(max)
    }

    /// Payloads, and their bytes, waiting for deferred stages or out with asynchronous
    /// ones (sent ones included, though they take no receive credit): while there are
    /// any, a driver looks again soon.
    pub fn deferred_waiting(&self) -> (usize, u64) {
        self.nic.service_queue.depth()
    }

    /// Runs queue pair `index`'s services, last first (the reverse of the send side's order,
    /// so that stages that undo each other nest), on a received payload, for every opcode
    /// that carries one (zero-length included: a stage that authenticates
    /// must see, and refuse, an empty packet that was not sealed). Gives the copy in-line
    /// stages wrote and the range of it that goes on (they take their overhead off), `None`
    /// when the packet goes on as it came (no payload; no in-line stage; or no bytes: a
    /// length-only payload shows its length to the stages beside the path), or `Err` when
    /// an in-line stage drops it.
    #[inline(never)]
    fn serve_incoming(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        payload: Payload<'_>,
        takeable: bool,
        flags: &mut ServiceFlags,
    ) -> Result<Option<Served>, Refused> {
        if !headers.bth.opcode.info().is_some_and(|i| i.has_payload) {
            return Ok(None);
        }
        let mut packet = ServicePacket {
            qpn: self.qps[index as usize].num,
            psn: headers.bth.psn,
            opcode: headers.bth.opcode,
            direction: Direction::Receive,
            len: payload.len(),
            headers,
        };
        let bytes = match payload {
            Payload::Bytes(bytes) => bytes,
            Payload::Len(len) => {
                let nic = &mut self.nic;
                let mut reserve =
                    takeable && Self::defers_asynchronously(&nic.services[index as usize]);
                for service in nic.services[index as usize].iter_mut().rev() {
                    if service.in_line() {
                        continue;
                    }
                    if !service.asynchronous() {
                        *flags |= service.observe(&packet, &[]);
                    } else if !takeable {
                        // As with bytes (below): what the transport drops is not offered.
                    } else if !service.on_landing() {
                        // As with bytes (below), the length held against the credit: the
                        // simulator's modelled worker, whose time a length is enough for.
                        offer_within_credit(
                            &mut nic.service_queue,
                            nic.config.service_credit,
                            &mut nic.counters,
                            &mut nic.message_flags[index as usize],
                            service.as_mut(),
                            &packet,
                            &[],
                            len as usize,
                            &mut reserve,
                        )?;
                    }
                }
                return Ok(None);
            }
        };
        // The copy in-line stages work on, taken when the first of them runs: into it, out of
        // place if the stage can (a queue pair with stages beside the path only copies
        // nothing). The scratch keeps the largest length it was given, so that a stage
        // writing into it needs no fill first.
        let nic = &mut self.nic;
        let mut reserve = takeable && Self::defers_asynchronously(&nic.services[index as usize]);
        let mut copy: Option<Vec<u8>> = None;
        let mut kept = 0..bytes.len();
        for service in nic.services[index as usize].iter_mut().rev() {
            packet.len = kept.len() as u32;
            if !service.in_line() {
                let seen = copy.as_ref().map_or(bytes, |c| &c[kept.clone()]);
                if service.asynchronous() && service.on_landing() {
                    // Works where READ data lands, not on packets.
                } else if service.asynchronous() && !takeable {
                    // The transport drops it (a duplicate, or past a go-back-N gap): an
                    // asynchronous stage's work is for what is taken, so it is not offered
                    // (nor takes credit: a slow inspection beside the offload, offered the
                    // streams a re-issued READ brings again, filled a 2-packet credit with
                    // them, and the offload's packets were all dropped; its flags would
                    // have reached nothing, the packet being dropped).
                } else if service.asynchronous() {
                    // Off the engine's thread, within the credit; past it, a deferred
                    // stage's packet is dropped (the transport recovers it), another's
                    // goes on unseen.
                    let offered = offer_within_credit(
                        &mut nic.service_queue,
                        nic.config.service_credit,
                        &mut nic.counters,
                        &mut nic.message_flags[index as usize],
                        service.as_mut(),
                        &packet,
                        seen,
                        seen.len(),
                        &mut reserve,
                    );
                    if let Err(refused) = offered {
                        if let Some(c) = copy {
                            nic.service_scratch = c;
                        }
                        return Err(refused);
                    }
                } else if !service.deferred() {
                    // A deferred stage sees its copy later (`run_deferred`).
                    *flags |= service.observe(&packet, seen);
                }
                continue;
            }
            let verdict = match &mut copy {
                Some(c) => service.transform(&packet, &mut c[kept.clone()]),
                None => {
                    let mut c = std::mem::take(&mut nic.service_scratch);
                    if c.len() < bytes.len() {
                        c.resize(bytes.len(), 0);
                    }
                    let out = &mut c[..bytes.len()];
                    let verdict = match service.transform_from(&packet, bytes, out) {
                        Some(verdict) => verdict,
                        None => {
                            out.copy_from_slice(bytes);
                            service.transform(&packet, out)
                        }
                    };
                    copy = Some(c);
                    verdict
                }
            };
            let o = service.overhead();
            let (head, tail) = (o.head as usize, o.tail as usize);
            // A stage that passes a payload shorter than its overhead has nothing to give.
            if verdict == Verdict::Drop || kept.len() < head + tail {
                if let Some(c) = copy {
                    nic.service_scratch = c;
                }
                return Err(Refused::Service);
            }
            kept = kept.start + head..kept.end - tail;
        }
        Ok(copy.map(|c| (c, kept)))
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
        self.nic.echoed_rtt = match headers.ccx {
            Some(Ccx::Timestamps {
                echo_ns: Some(sent),
                ..
            }) if sent <= now.as_nanos() => {
                Some(std::time::Duration::from_nanos(now.as_nanos() - sent))
            }
            _ => None,
        };
        let (qp, nic) = self.parts(index);
        qp.on_response(nic, now, headers, info, payload);
        self.nic.echoed_rtt = None;
        if let Some(Ccx::Int(path)) = headers.ccx {
            let confirmed = self.qp_mut(index).req.confirmed;
            self.emit(index, now, Event::Telemetry { confirmed, path });
        }
    }

    /// A control packet from the peer: credit grants carry the total granted so far, so a
    /// lost grant is made up by the next and a duplicate or late one adds nothing; path
    /// probes are answered and their replies go to the path selector. Each kind only when
    /// the queue pair agreed to it.
    fn on_cc_control(&mut self, index: u32, now: Instant, headers: &RoceHeaders) {
        use sluice_wire::CcControlKind;
        let qp = self.qp_mut(index);
        let (credit, probes) = (qp.attrs.cc_control, qp.path_probes);
        match headers.ext.cc_control {
            Some(c) if credit && c.kind == CcControlKind::CreditTotal => {
                self.on_credit_total(index, now, c.value)
            }
            Some(c)
                if probes
                    && matches!(
                        c.kind,
                        CcControlKind::PathProbe | CcControlKind::PathProbeReply
                    ) =>
            {
                self.on_probe(index, now, &c)
            }
            Some(c)
                if matches!(
                    c.kind,
                    CcControlKind::HomaGrant | CcControlKind::HomaResend | CcControlKind::HomaBusy
                ) =>
            {
                match sluice_wire::HomaControl::from_control(&c) {
                    Ok(Some(m)) if credit => {
                        self.nic.counters.homa_received += 1;
                        self.emit(index, now, Event::Homa(m));
                    }
                    // Not agreed: a standard RoCE peer would drop the opcode too.
                    Ok(Some(_)) => {
                        self.nic.counters.drops_homa_unagreed += 1;
                        self.nic.counters.drops_unexpected_opcode += 1;
                    }
                    // The decoder refuses malformed ones already; one built otherwise is
                    // not taken either.
                    _ => self.nic.counters.drops_unexpected_opcode += 1,
                }
            }
            _ => self.nic.counters.drops_unexpected_opcode += 1,
        }
    }

    /// A path probe from the peer (answered: the reply leaves with the next packets) or the
    /// reply to one of ours (to the path selector, which matches it to the probe it sent).
    #[inline(never)]
    fn on_probe(&mut self, index: u32, now: Instant, c: &sluice_wire::CcControl) {
        let Ok(Some(h)) = sluice_wire::PathProbeHeader::from_control(c) else {
            // The decoder refuses reserved bits already; a header built otherwise is not
            // taken either.
            self.nic.counters.drops_unexpected_opcode += 1;
            return;
        };
        if h.reply {
            self.nic.counters.probe_replies_received += 1;
            let probe = crate::policy::PathProbe {
                qp: index,
                port: h.port,
                seq: h.seq,
            };
            self.nic.path.on_probe_reply(probe, now);
        } else if self.qp_mut(index).state.receiving()
            && self.nic.probes.len() < super::MAX_PROBES_WAITING
        {
            self.nic
                .probes
                .push_back((index, sluice_wire::PathProbeHeader { reply: true, ..h }));
        } else {
            self.nic.counters.probes_unsent += 1;
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
        self.nic.counters.grants_received += 1;
        self.emit(index, now, Event::Credit { bytes: more });
        self.schedule(index);
    }

    /// The next packet to send, if any may go now. `payload` must hold a full MTU (4096
    /// bytes): a payload that is not read in place from a region is written to its start.
    /// Read the payload with [`Engine::payload`] before the next call.
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant, payload: &mut [u8]) -> Option<Transmit> {
        if !self.nic.probes.is_empty()
            && let Some(t) = self.probe_packet(now)
        {
            return Some(t);
        }
        // Nothing to send is the common answer when a driver polls: given before the visit's
        // set-up.
        let first = self.nic.scheduler.next(now)?;
        self.nic.clock = now;
        self.visit_from(first, now, payload)
    }

    /// The next path probe or probe reply waiting, as a packet: a control packet (opcode
    /// 0x18, not sequenced, no payload, no CCX) from the port the probe measures, a reply
    /// from the same port (so that, on a fabric that hashes both ways alike, it comes back
    /// along the probed path).
    #[cold]
    #[inline(never)]
    fn probe_packet(&mut self, now: Instant) -> Option<Transmit> {
        use sluice_wire::{Bth, ExtHeaders, Opcode, Psn};
        while let Some((index, h)) = self.nic.probes.pop_front() {
            if !self.is_live(index) {
                continue;
            }
            let qp = &self.qps[index as usize];
            let Some(dst) = qp.attrs.peer.filter(|_| qp.state != crate::QpState::Error) else {
                continue;
            };
            self.nic.clock = now;
            let bth = Bth::new(Opcode::RC_CC_CONTROL, qp.attrs.dest_qpn, Psn::new(0));
            let ext = ExtHeaders {
                cc_control: Some(h.control()),
                ..ExtHeaders::default()
            };
            let counters = &mut self.nic.counters;
            counters.tx_packets += 1;
            if h.reply {
                counters.probe_replies_sent += 1;
            } else {
                counters.probes_sent += 1;
            }
            return Some(Transmit {
                dst,
                src_port: h.port,
                headers: RoceHeaders {
                    bth,
                    ccx: None,
                    ext,
                },
                payload_len: 0,
                payload_at: PayloadAt::Buffer,
                priority: qp.priorities.response,
            });
        }
        None
    }

    /// Visits queue pairs from `first` on, in the scheduler's order, until one sends.
    fn visit_from(&mut self, first: u32, now: Instant, payload: &mut [u8]) -> Option<Transmit> {
        let mut next = Some(first);
        while let Some(index) = next {
            // A queue pair the control law asked a packet of (a CNP, a grant, Homa's) is
            // visited out of line: built in this function, that packet and an ACK met in
            // one `Transmit`, and every ACK paid for it (its constants became registers,
            // or it was built aside and copied: 40 to 80 instructions).
            if self.qps[index as usize].owes_control() {
                match self.visit_owing_control(index, now, payload) {
                    Some(t) => return Some(t),
                    None => {
                        next = self.nic.scheduler.next(now);
                        continue;
                    }
                }
            }
            let (qp, nic) = self.parts(index);
            // The payload goes after the room in-line services need in front of it (none
            // for most queue pairs).
            let room = &mut payload[qp.attrs.service_head as usize..];
            let transmit = qp
                .next_plain_response(nic, now)
                .or_else(|| qp.next_request_packet(nic, now, room));
            let qp = &mut self.qps[index as usize];
            let Some(t) = transmit else {
                qp.scheduled = false;
                self.nic.scheduler.served(index, now, || None, false, || 0);
                next = self.nic.scheduler.next(now);
                continue;
            };
            // Kept if it may send more; if not, let go now, while its state is in cache,
            // rather than at a later turn that would only find it idle (the next event that
            // gives it work schedules it again).
            let more = qp.may_send_more();
            qp.scheduled = more;
            // Services see (and in-line ones seal, say) the packet before it goes. Out of
            // line, `t` moved there: a packet without services is not copied.
            if self.nic.any_services && qp.services {
                match self.serve_outgoing(index, now, more, t, payload) {
                    Some(t) => return Some(t),
                    None => {
                        next = self.nic.scheduler.next(now);
                        continue;
                    }
                }
            }
            self.sent(index, now, more, &t);
            return Some(t);
        }
        None
    }

    /// [`Engine::visit_from`]'s visit of queue pair `index` when it owes a control packet:
    /// that packet, or else what it would send otherwise; `None` if nothing (the scheduler
    /// let it go, or a service stopped it).
    ///
    /// Its tail repeats `visit_from`'s on purpose: one shared function taking the
    /// `Option<Transmit>`, even `#[inline(always)]`, made every packet be built aside and
    /// copied (117 more instructions a message by `scripts/bench-engine-instructions`).
    #[inline(never)]
    fn visit_owing_control(
        &mut self,
        index: u32,
        now: Instant,
        payload: &mut [u8],
    ) -> Option<Transmit> {
        let (qp, nic) = self.parts(index);
        let room = &mut payload[qp.attrs.service_head as usize..];
        let transmit = qp
            .control_then_response(nic, now)
            .or_else(|| qp.next_request_packet(nic, now, room));
        let qp = &mut self.qps[index as usize];
        let Some(t) = transmit else {
            qp.scheduled = false;
            self.nic.scheduler.served(index, now, || None, false, || 0);
            return None;
        };
        let more = qp.may_send_more();
        qp.scheduled = more;
        if self.nic.any_services && qp.services {
            return self.serve_outgoing(index, now, more, t, payload);
        }
        self.sent(index, now, more, &t);
        Some(t)
    }

    /// Tells the scheduler and the counters that queue pair `index` sends `t`.
    #[inline(always)]
    fn sent(&mut self, index: u32, now: Instant, more: bool, t: &Transmit) {
        // Asked only of a scheduler that may look (not round robin): what the packet is
        // and the queue pair's next message are read then, not on every packet. (`move`:
        // the index by value; taken by reference, it was stored for every packet.)
        let sent = || {
            Some(Sent {
                opcode: t.headers.bth.opcode,
                payload_len: t.payload_len,
                ipv6: t.dst.is_ipv6(),
                ccx: t.headers.ccx.map(|c| c.layout()),
            })
        };
        let qps = &self.qps;
        self.nic.scheduler.served(index, now, sent, more, move || {
            qps[index as usize].next_message_left()
        });
        self.nic.counters.tx_packets += 1;
        self.nic.counters.tx_bytes += u64::from(t.payload_len);
    }

    /// Runs queue pair `index`'s services on packet `t`, if its opcode carries a payload
    /// (zero-length included), in the buffer it leaves from (never the region it came
    /// from: an in-line stage changes the bytes that go, not the application's memory).
    /// The builders left a gathered payload after the room in front that the in-line
    /// stages need, and one in a single piece of a region in place; each in-line stage
    /// writes what goes into the buffer, grown by its overhead, so it ends at the buffer's
    /// start, and `t.payload_len` becomes the length on the wire. Without bytes
    /// (length-only memory), the stages beside the path see its length and the in-line ones
    /// have nothing to change. Then the packet is sent (`more`: the queue pair may send more), or, when an
    /// in-line stage failed, not: what it failed on may be half done, or plaintext where
    /// ciphertext was due, so the queue pair stops instead (`None`).
    #[inline(never)]
    fn serve_outgoing(
        &mut self,
        index: u32,
        now: Instant,
        more: bool,
        mut t: Transmit,
        buffer: &mut [u8],
    ) -> Option<Transmit> {
        if self.run_send_services(index, &mut t, buffer).is_err() {
            self.qps[index as usize].scheduled = false;
            self.nic.scheduler.served(index, now, || None, false, || 0);
            self.nic.counters.service_send_failures += 1;
            self.enter_error(index);
            if self.qps[index as usize].owes_peer() {
                self.schedule(index);
            }
            return None;
        }
        self.sent(index, now, more, &t);
        Some(t)
    }

    /// [`Engine::serve_outgoing`]'s stages on `t`; `Err` when an in-line one failed.
    fn run_send_services(
        &mut self,
        index: u32,
        t: &mut Transmit,
        buffer: &mut [u8],
    ) -> Result<(), ()> {
        let Some(info) = t.headers.bth.opcode.info() else {
            return Ok(());
        };
        // A resent packet's payload was offered to the asynchronous stages when it first
        // went: each PSN's once, as on the receive side. Offered each time it went again,
        // every recovery round gave a slow stage a window's more work, and completions
        // waited for all of it. Every request is recorded, payload or not
        // (`MessageFlags::first_sent`).
        let first =
            self.nic.message_flags[index as usize].first_sent(t.headers.bth.psn, info.operation);
        if !info.has_payload {
            return Ok(());
        }
        let head = self.qps[index as usize].attrs.service_head as usize;
        let mut packet = ServicePacket {
            qpn: self.qps[index as usize].num,
            psn: t.headers.bth.psn,
            opcode: t.headers.bth.opcode,
            direction: Direction::Send,
            len: t.payload_len,
            headers: &t.headers,
        };
        let nic = &mut self.nic;
        // Where the bytes are: in the buffer (after the room in front), in place in a region
        // (read, never changed, by the stages: an in-line one writes into the buffer), or
        // nowhere (length-only memory, the simulator's, or a region gone since: the driver
        // drops that packet), when the stages beside the path see only the length.
        let mut region = match t.payload_at {
            PayloadAt::Buffer => None,
            PayloadAt::Region { key, addr } => match nic.mrs.slice(key, addr, t.payload_len) {
                Some(Payload::Bytes(bytes)) => Some(Some(bytes)),
                _ => Some(None),
            },
        };
        let mut at = head..head + t.payload_len as usize;
        let mut flags = ServiceFlags::NONE;
        for service in &mut nic.services[index as usize] {
            packet.len = at.len() as u32;
            if !service.in_line() {
                let seen = match region {
                    None => &buffer[at.clone()],
                    Some(bytes) => bytes.unwrap_or(&[]),
                };
                if !service.asynchronous() {
                    flags |= service.observe(&packet, seen);
                } else if service.on_landing() || !first {
                    // Works where READ data lands, not on packets; or a resend.
                } else if service.offer(&packet, seen) {
                    // Bounded by the stage's own room, not the receive credit: the credit
                    // bounds what the receive side holds for the stages, so that a slow
                    // stage slows the peer's sending (a packet past it is dropped and the
                    // peer sends it again). A sent payload is never dropped for it, and
                    // one that took credit could take the room a received payload needs:
                    // a READ re-issued when credit came back resent the WRITE behind it,
                    // whose payload took the one slot before the READ's response came,
                    // which was dropped, round after round until the READ's retries ran
                    // out (`reads_among_writes`).
                    let f = &mut nic.message_flags[index as usize];
                    f.offered += 1;
                    f.sent_out.0 += 1;
                    f.sent_out.1 += seen.len() as u64;
                    nic.service_queue.sent_out(seen.len());
                } else {
                    nic.counters.service_uninspected += 1;
                }
                continue;
            }
            let o = service.overhead();
            let grown = at.start - o.head as usize..at.end + o.tail as usize;
            let verdict = match region {
                None => service.transform(&packet, &mut buffer[grown.clone()]),
                Some(None) => continue,
                Some(Some(bytes)) => {
                    match service.transform_from(&packet, bytes, &mut buffer[grown.clone()]) {
                        Some(verdict) => verdict,
                        None => {
                            buffer[at.clone()].copy_from_slice(bytes);
                            service.transform(&packet, &mut buffer[grown.clone()])
                        }
                    }
                }
            };
            if verdict == Verdict::Drop {
                return Err(());
            }
            // What goes is in the buffer now.
            region = None;
            at = grown;
        }
        if region.is_none() {
            debug_assert_eq!(
                at.start, 0,
                "the room in front is the in-line stages' heads"
            );
            t.payload_at = PayloadAt::Buffer;
            t.payload_len = at.len() as u32;
        }
        if !flags.is_empty() {
            let headers = t.headers;
            self.raise_flags(index, &headers, Direction::Send, flags);
        }
        Ok(())
    }

    /// Carries `flags`, raised by stages beside the path on a packet of queue pair `index`,
    /// towards the completion of the message it belongs to: a request sent, or READ
    /// response received, to the send request that holds its PSN; a request received to the
    /// responder, which joins them to its message when it takes that PSN in order. Rare
    /// (only flagged packets come here), so the send queue is searched.
    #[cold]
    #[inline(never)]
    fn raise_flags(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        direction: Direction,
        flags: ServiceFlags,
    ) {
        let (psn, opcode) = (headers.bth.psn, headers.bth.opcode);
        self.raise_flags_at(index, psn, opcode, direction, flags, false);
    }

    /// [`Engine::raise_flags`] for the packet at `psn` with `opcode`. `late`: an
    /// asynchronous stage returned them, possibly after the packet was taken: a request
    /// taken goes to the message in progress, or to the held completion of the message
    /// it was part of (so does a send request completed); what finds neither is counted.
    #[cold]
    #[inline(never)]
    fn raise_flags_at(
        &mut self,
        index: u32,
        psn: sluice_wire::Psn,
        opcode: sluice_wire::Opcode,
        direction: Direction,
        flags: ServiceFlags,
        late: bool,
    ) {
        self.nic.counters.service_flagged_packets += 1;
        let Some(info) = opcode.info() else {
            return;
        };
        let is_response = info.operation == Operation::RdmaReadResponse;
        let qp = &mut self.qps[index as usize];
        match (direction, is_response) {
            (Direction::Send, false) | (Direction::Receive, true) => {
                if let Some(w) = qp.req.sq.iter_mut().find(|w| {
                    w.started
                        && w.span > 0
                        && !psn.precedes(w.first_psn)
                        && !w.last_psn().precedes(psn)
                }) {
                    w.flags |= flags;
                } else if late && !self.flag_held(index, super::FlagSide::Requester, psn, flags) {
                    self.nic.counters.service_flags_uncompleted += 1;
                }
            }
            (Direction::Receive, false) => {
                if psn.precedes(qp.resp.epsn) {
                    if !late {
                        return; // a duplicate: its message was taken (and flagged) before
                    }
                    // Taken before the stage returned: the message in progress's, or a
                    // held completion's.
                    if let Some(f) = self.nic.message_flags.get_mut(index as usize)
                        && f.first.is_some_and(|first| !psn.precedes(first))
                    {
                        f.message |= flags;
                    } else if !self.flag_held(index, super::FlagSide::Responder, psn, flags) {
                        self.nic.counters.service_flags_uncompleted += 1;
                    }
                    return;
                }
                let Some(f) = self.nic.message_flags.get_mut(index as usize) else {
                    return;
                };
                // Bounded: past the bound, the oldest (furthest from being taken) goes.
                if f.pending.len() >= MAX_FLAGGED {
                    self.nic.counters.service_flags_uncompleted += 1;
                    f.pending.remove(0);
                }
                match f.pending.iter_mut().find(|(p, _)| *p == psn) {
                    Some((_, old)) => *old |= flags,
                    None => f.pending.push((psn, flags)),
                }
            }
            // A READ response sent: the incoming READ has no completion here.
            (Direction::Send, true) => self.nic.counters.service_flags_uncompleted += 1,
        }
    }

    /// ORs `flags` into the latest held completion of queue pair `index`'s `side` whose
    /// message starts at or before `psn` (so holds it: later messages start later);
    /// whether there was one.
    fn flag_held(
        &mut self,
        index: u32,
        side: super::FlagSide,
        psn: sluice_wire::Psn,
        flags: ServiceFlags,
    ) -> bool {
        let held = self.nic.held.iter_mut().rev().find(|h| {
            h.index == index
                && h.scope
                    .is_some_and(|(s, first)| s == side && !psn.precedes(first))
        });
        match held {
            Some(h) => {
                h.completion.flags |= flags;
                true
            }
            None => false,
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
            PayloadAt::Region { key, addr } => self.nic.mrs.slice(key, addr, len),
        }
    }
}
