//! The responder half of a queue pair: checks each request (PSN, opcode sequence, access,
//! keys, bounds, lengths), places its data, answers with ACKs, NAKs, READ responses and
//! atomic ACKs, and answers duplicates from what it kept, never executing an atomic twice.

use sluice_wire::{
    Aeth, AtomicAckEth, Bth, Credits, ExtHeaders, NakCode, Opcode, OpcodeInfo, Operation, Position,
    Psn, RnrTimer, RoceHeaders, Syndrome,
};

use crate::cq::{Completion, WcOpcode, WcStatus};
use crate::engine::Nic;
use crate::engine::{Payload, PayloadAt, Transmit};
use crate::mr::{Access, MrTable};
use crate::qp::{InProgress, Qp, QpState, RecvWqe, ResponderResource, Response};
use crate::reorder::Hold;
use crate::requester::read_span;
use crate::rules::Arrival;

/// A response packet's headers and where its payload is, before what every packet to the
/// peer carries (the CC extension header, the source port).
struct ResponsePacket {
    bth: Bth,
    ext: ExtHeaders,
    payload_len: u32,
    payload_at: PayloadAt,
}

/// Why a request is refused, and the NAK that says so.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    InvalidRequest,
    RemoteAccess,
    RemoteOperational,
}

/// Checks that the region of `key` grants `need` over `[va, va + len)` in `pd`; a
/// refusal is a remote access error.
fn remote(
    mrs: &MrTable,
    pd: crate::PdId,
    key: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Result<(), Refusal> {
    mrs.check(key, pd, va, len, need)
        .map_err(|_| Refusal::RemoteAccess)
}

/// Copies a SEND's payload into a receive request's buffers at `offset`.
fn place(
    mrs: &mut MrTable,
    pd: crate::PdId,
    wqe: &RecvWqe,
    offset: u32,
    payload: Payload<'_>,
) -> Result<(), ()> {
    let bytes = match payload {
        Payload::Bytes(b) => Some(b),
        Payload::Len(_) => None,
    };
    mrs.scatter(pd, &wqe.sgl, offset, payload.len(), bytes)
        .map_err(|_| ())
}

impl Qp {
    /// A request packet (SEND, WRITE, READ request, atomic) from the peer.
    pub(crate) fn on_request(
        &mut self,
        nic: &mut Nic,
        now: crate::Instant,
        ce: bool,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) {
        let psn = headers.bth.psn;
        nic.emit(
            self,
            now,
            crate::control::Event::Rx {
                psn,
                bytes: payload.len(),
                ce,
            },
        );
        match self.resp.arrival(psn) {
            Arrival::InOrder => {}
            Arrival::Ahead(d) => return self.on_request_ahead(nic, d, headers, info, payload),
            Arrival::Duplicate => {
                nic.counters.duplicate_requests += 1;
                return self.on_duplicate(nic, headers, info);
            }
        }
        self.execute_in_order(nic, headers, info, payload);
        if self.resp.reorder.is_some() {
            self.take_held(nic);
        }
    }

    /// A request `d` PSNs past the expected one: a gap. Selective repeat keeps the packet
    /// for later (if it has room): a WRITE packet whose address is known already is placed
    /// now and only its headers kept; any other has its payload copied. The first missing
    /// PSN is NAK'd, once per gap, unless the tracker does not take a gap for loss (LEFT):
    /// then only a packet it could not hold brings the NAK.
    fn on_request_ahead(
        &mut self,
        nic: &mut Nic,
        d: u32,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) {
        nic.counters.out_of_order_arrivals += 1;
        let target = self.write_target(nic, d, headers, info, payload.len());
        if let Some(reorder) = &mut self.resp.reorder {
            let bytes = match (payload, target) {
                (Payload::Bytes(b), None) => Some(b),
                _ => None,
            };
            // The engine set the clock to the packet's arrival.
            let now = nic.clock;
            let held = reorder.hold(d, headers.bth.psn, headers, bytes, payload.len(), now);
            if held == Hold::Refused {
                nic.counters.packets_refused += 1;
            }
            if held == Hold::Held {
                nic.counters.packets_held += 1;
                if let Some((rkey, va)) = target {
                    if let Payload::Bytes(b) = payload {
                        nic.mrs.write(rkey, va, b);
                    }
                    nic.counters.packets_placed += 1;
                }
                if let (Some(reth), true) = (headers.ext.reth, info.position == Position::First) {
                    // Checked as `begin_write` will check it, so that what follows it may
                    // be placed; a refused one is refused again when it executes.
                    let writable = self.attrs.access.contains(Access::REMOTE_WRITE)
                        && matches!(
                            info.operation,
                            Operation::RdmaWrite | Operation::RdmaWriteWithImmediate
                        )
                        && remote(
                            &nic.mrs,
                            self.pd,
                            reth.rkey,
                            reth.va,
                            u64::from(reth.dma_len),
                            Access::REMOTE_WRITE,
                        )
                        .is_ok();
                    if writable {
                        reorder.write = Some(crate::reorder::HeldWrite {
                            psn: headers.bth.psn,
                            rkey: reth.rkey,
                            va: reth.va,
                            len: reth.dma_len,
                        });
                    }
                }
            }
            if !reorder.tracker.gap_is_loss() && held != Hold::Refused {
                return;
            }
        }
        self.nak_gap(nic);
    }

    /// Where the payload of a WRITE middle or last packet `d` PSNs past the expected one
    /// goes, if that is known without the packets between: its WRITE's first packet has
    /// executed (the WRITE is in progress at the expected PSN) or is held ahead. A WRITE's
    /// packets have consecutive PSNs and every one but the last is one MTU, so the packet
    /// k PSNs after its first is at k MTUs from the RETH's address. `None` (the first packet
    /// is missing, the packet does not fit the WRITE, or the region no longer allows it):
    /// the payload is copied and placed when the packet executes.
    fn write_target(
        &self,
        nic: &Nic,
        d: u32,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        len: u32,
    ) -> Option<(u32, u64)> {
        if !matches!(info.position, Position::Middle | Position::Last)
            || !matches!(
                info.operation,
                Operation::RdmaWrite | Operation::RdmaWriteWithImmediate
            )
            || len == 0
        {
            return None;
        }
        // The packet `k` PSNs after the one at `va` with `remaining` bytes left of its WRITE.
        let fit = |rkey: u32, va: u64, remaining: u32, k: u32| {
            let mtu = self.attrs.mtu;
            let offset = u64::from(k) * u64::from(mtu);
            let end = offset + u64::from(len);
            let fits = match info.position {
                Position::Middle => len == mtu && end < u64::from(remaining),
                _ => end == u64::from(remaining),
            };
            let va = va.checked_add(offset)?;
            let allowed = || {
                remote(
                    &nic.mrs,
                    self.pd,
                    rkey,
                    va,
                    u64::from(len),
                    Access::REMOTE_WRITE,
                )
                .is_ok()
            };
            (fits && allowed()).then_some((rkey, va))
        };
        if let Some(InProgress::Write {
            rkey,
            va,
            remaining,
            ..
        }) = self.resp.in_progress
        {
            if let Some(t) = fit(rkey, va, remaining, d) {
                return Some(t);
            }
        }
        let w = self.resp.reorder.as_ref()?.write?;
        let k = w.psn.distance_to(headers.bth.psn);
        // Its first packet still ahead of the expected PSN: not executed yet (once it has,
        // the WRITE is in progress or over).
        if k <= 0 || self.resp.epsn.distance_to(w.psn) <= 0 {
            return None;
        }
        fit(w.rkey, w.va, w.len, k as u32)
    }

    /// Selective repeat, after a request at the expected PSN: the packets held behind the
    /// gap it filled follow in order; if another gap remains, its first PSN is NAK'd (if
    /// the tracker takes a gap for loss).
    fn take_held(&mut self, nic: &mut Nic) {
        loop {
            let epsn = self.resp.epsn;
            let Some(reorder) = &mut self.resp.reorder else {
                return;
            };
            if reorder.held.is_empty() {
                if reorder.take_refused(epsn) {
                    self.ask_again_from(nic, epsn);
                }
                return;
            }
            let Some(held) = reorder.take(epsn) else {
                if reorder.tracker.gap_is_loss() {
                    self.nak_gap(nic);
                }
                return;
            };
            let payload = if held.real {
                Payload::Bytes(&held.bytes)
            } else {
                Payload::Len(held.len)
            };
            let info = held
                .headers
                .bth
                .opcode
                .info()
                .expect("held packets were decoded");
            let before = self.resp.epsn;
            self.execute_in_order(nic, &held.headers, info, payload);
            if let Some(reorder) = &mut self.resp.reorder {
                reorder.recycle(held.bytes);
            }
            if self.resp.epsn == before {
                return; // RNR or an error: the rest waits for the requester
            }
        }
    }

    /// Carries out the request at the expected PSN (or answers why not), and moves the
    /// selective-repeat tracking along with the expected PSN.
    fn execute_in_order(
        &mut self,
        nic: &mut Nic,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) {
        let before = self.resp.epsn;
        if self.services {
            self.take_flags(nic, headers.bth.psn, info.position.starts_message());
        }
        if let Err(refusal) = self.execute(nic, headers, info, payload) {
            self.refuse(nic, headers.bth.psn, refusal);
        }
        let moved = before.distance_to(self.resp.epsn);
        if let (Some(reorder), true) = (&mut self.resp.reorder, moved > 0) {
            reorder.tracker.advance(moved as u32);
        }
    }

    /// Selective repeat: nothing is held past `epsn`, and packets after it were refused for
    /// want of room (the requester's window is larger than this tracker holds). A sequence
    /// NAK would bring back only `epsn` (selective repeat resends the one PSN), and each
    /// refused packet a round trip of its own; an RNR NAK, RC's "no room to take it", has
    /// every requester (Sluice's or any RoCE one) go back to `epsn` and send everything
    /// from there, after the shortest RNR wait (10 us). Counted as an RNR NAK.
    fn ask_again_from(&mut self, nic: &mut Nic, epsn: Psn) {
        let nak = Response::Nak {
            psn: epsn,
            syndrome: Syndrome::RnrNak(RnrTimer::from_code(1).expect("code 1 is 0.01 ms")),
        };
        if self.owe(nic, nak) {
            nic.counters.naks_sent_rnr += 1;
        }
    }

    /// Requests at or after the expected PSN were dropped for want of receive credit
    /// (RoCE BALBOA's crediting) and the credit came back: answered as RC's "no room",
    /// as for a full reorder buffer ([`Qp::ask_again_from`]). A sequence NAK would not do:
    /// a selective-repeat requester resends only the PSN it names, and a go-back-N one
    /// spends a transport retry on it; an RNR NAK has any RoCE requester go back to the
    /// expected PSN and send everything from there after the shortest wait, stops its
    /// retransmit timer meanwhile, and costs an RNR retry only (infinite at 7). Sent when
    /// the credit is back rather than at the drop, so that what comes again has room.
    /// It stands for the sequence NAK of this expected PSN too: packets in flight behind
    /// the dropped one would otherwise bring that NAK after it, and a NAK that confirms
    /// nothing new spends one of the requester's transport retries (with a small credit,
    /// one per packet, until the queue pair fails with a retry error;
    /// `crates/core/tests/asynchronous.rs`). Whether it is owed.
    pub(crate) fn ask_again_for_credit(&mut self, nic: &mut Nic) -> bool {
        let before = nic.counters.naks_sent_rnr;
        self.ask_again_from(nic, self.resp.epsn);
        self.resp.claim_gap_nak();
        nic.counters.naks_sent_rnr != before
    }

    /// NAKs the expected PSN as missing, once per value of it.
    fn nak_gap(&mut self, nic: &mut Nic) {
        if !self.resp.claim_gap_nak() {
            return;
        }
        let epsn = self.resp.epsn;
        let nak = Response::Nak {
            psn: epsn,
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        };
        if self.owe(nic, nak) {
            nic.counters.naks_sent_sequence += 1;
        }
    }

    /// Checks and carries out a new request (its PSN is the expected one): whether it may
    /// come now, then what its operation does.
    fn execute(
        &mut self,
        nic: &mut Nic,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) -> Result<(), Refusal> {
        let starts = info.position.starts_message();
        let ends = info.position.ends_message();
        self.check_request(info, payload.len(), starts, ends)?;
        match info.operation {
            Operation::Send | Operation::SendWithImmediate => {
                self.execute_send(nic, headers, payload, starts, ends)
            }
            Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => {
                self.execute_write(nic, headers, payload, starts, ends)
            }
            Operation::RdmaReadRequest => self.execute_read(nic, headers),
            Operation::CompareSwap | Operation::FetchAdd => {
                self.execute_atomic(nic, headers, info.operation)
            }
            _ => Err(Refusal::InvalidRequest),
        }
    }

    /// Whether a request may come now: it continues the message in progress (or starts
    /// one), every packet but a message's last is one MTU, and the queue pair grants the
    /// remote access it needs.
    #[inline(always)]
    fn check_request(
        &self,
        info: &OpcodeInfo,
        len: u32,
        starts: bool,
        ends: bool,
    ) -> Result<(), Refusal> {
        if !self.resp.continues_message(info.operation, starts) {
            return Err(Refusal::InvalidRequest);
        }
        let carries_data = matches!(
            info.operation,
            Operation::Send
                | Operation::SendWithImmediate
                | Operation::RdmaWrite
                | Operation::RdmaWriteWithImmediate
        );
        if carries_data && (len > self.attrs.mtu || (!ends && len != self.attrs.mtu)) {
            return Err(Refusal::InvalidRequest);
        }
        let needs = match info.operation {
            Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => Access::REMOTE_WRITE,
            Operation::RdmaReadRequest => Access::REMOTE_READ,
            Operation::CompareSwap | Operation::FetchAdd => Access::REMOTE_ATOMIC,
            _ => Access::NONE,
        };
        if !self.attrs.access.contains(needs) {
            return Err(Refusal::InvalidRequest);
        }
        Ok(())
    }

    /// A SEND packet: the first takes a receive (or is answered RNR), each is placed where
    /// the receive's buffers say, the last completes the receive.
    #[inline(always)]
    fn execute_send(
        &mut self,
        nic: &mut Nic,
        headers: &RoceHeaders,
        payload: Payload<'_>,
        starts: bool,
        ends: bool,
    ) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let imm = headers.ext.imm_dt;
        let len = payload.len();
        let pd = self.pd;
        if starts {
            let Some(wqe) = self.resp.rq.pop_front() else {
                return self.rnr(nic, bth.psn);
            };
            self.resp.in_progress = Some(InProgress::Send { wqe, received: 0 });
        }
        let Some(InProgress::Send { wqe, received }) = self.resp.in_progress else {
            unreachable!("checked by the opcode sequence")
        };
        if received + len > wqe.len {
            self.finish_recv(nic, wqe, 0, None, WcStatus::LocalLengthError);
            return Err(Refusal::InvalidRequest);
        }
        if place(&mut nic.mrs, pd, &wqe, received, payload).is_err() {
            self.finish_recv(nic, wqe, 0, None, WcStatus::LocalProtectionError);
            return Err(Refusal::RemoteOperational);
        }
        let received = received + len;
        self.resp.in_progress = Some(InProgress::Send { wqe, received });
        if ends {
            self.resp.in_progress = None;
            self.finish_recv(nic, wqe, received, imm, WcStatus::Success);
            self.message_done(nic);
        }
        let ack_every = nic.config.ack_every_packets;
        self.resp.took_request(headers.bth.ack_req, ack_every);
        Ok(())
    }

    /// A WRITE packet: the first checks the RETH's region, each is written in place, the
    /// last with immediate data takes a receive (or is answered RNR) and completes it.
    #[inline(always)]
    fn execute_write(
        &mut self,
        nic: &mut Nic,
        headers: &RoceHeaders,
        payload: Payload<'_>,
        starts: bool,
        ends: bool,
    ) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let imm = headers.ext.imm_dt;
        let len = payload.len();
        if starts {
            self.begin_write(nic, headers)?;
        }
        let Some(InProgress::Write {
            rkey,
            va,
            remaining,
            total,
        }) = self.resp.in_progress
        else {
            unreachable!("checked by the opcode sequence")
        };
        if len > remaining || (ends && len != remaining) {
            return Err(Refusal::InvalidRequest);
        }
        // WRITE with immediate consumes a receive: make sure one is there first.
        let imm_wqe = if ends && imm.is_some() {
            match self.resp.rq.front() {
                Some(_) => self.resp.rq.pop_front(),
                None => {
                    // Not taken: a WRITE ONLY begins nothing, so that its retry
                    // starts the message afresh.
                    if starts {
                        self.resp.in_progress = None;
                    }
                    return self.rnr(nic, bth.psn);
                }
            }
        } else {
            None
        };
        if let Payload::Bytes(bytes) = payload {
            nic.mrs.write(rkey, va, bytes);
        }
        self.resp.in_progress = Some(InProgress::Write {
            rkey,
            va: va + u64::from(len),
            remaining: remaining - len,
            total,
        });
        if ends {
            self.resp.in_progress = None;
            if let Some(wqe) = imm_wqe {
                self.finish_recv_with(
                    nic,
                    wqe,
                    total,
                    imm,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                );
            }
            self.message_done(nic);
        }
        let ack_every = nic.config.ack_every_packets;
        self.resp.took_request(headers.bth.ack_req, ack_every);
        Ok(())
    }

    /// The first packet of a WRITE: its RETH names a region this queue pair may write
    /// over the whole length; the message begins there.
    #[inline(always)]
    fn begin_write(&mut self, nic: &Nic, headers: &RoceHeaders) -> Result<(), Refusal> {
        let reth = headers.ext.reth.ok_or(Refusal::InvalidRequest)?;
        remote(
            &nic.mrs,
            self.pd,
            reth.rkey,
            reth.va,
            u64::from(reth.dma_len),
            Access::REMOTE_WRITE,
        )?;
        self.resp.in_progress = Some(InProgress::Write {
            rkey: reth.rkey,
            va: reth.va,
            remaining: reth.dma_len,
            total: reth.dma_len,
        });
        Ok(())
    }

    /// A READ request: checked and queued; its responses go out in turn.
    fn execute_read(&mut self, nic: &mut Nic, headers: &RoceHeaders) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let (pd, mtu) = (self.pd, self.attrs.mtu);
        let reth = headers.ext.reth.ok_or(Refusal::InvalidRequest)?;
        remote(
            &nic.mrs,
            pd,
            reth.rkey,
            reth.va,
            u64::from(reth.dma_len),
            Access::REMOTE_READ,
        )?;
        if !self
            .resp
            .room_for_new_request(self.attrs.max_dest_rd_atomic)
        {
            return Err(Refusal::InvalidRequest);
        }
        let span = read_span(reth.dma_len, mtu);
        let response = Response::Read {
            psn: bth.psn,
            rkey: reth.rkey,
            va: reth.va,
            remaining: reth.dma_len,
            first: true,
            replay: false,
        };
        self.accept_rd_atomic(
            response,
            ResponderResource {
                first_psn: bth.psn,
                span,
                atomic_original: None,
            },
        );
        if self.services {
            self.read_responses_from(nic, bth.psn);
        }
        Ok(())
    }

    /// A new READ at `psn` was taken (requests execute in PSN order). With no other READ's
    /// responses queued, every response sent before it is before `psn` and will go again
    /// only as a replay, so the mark its stages' resends are told by moves to `psn`
    /// ([`crate::policy::MessageFlags::read_responses_from`]): moved by responses alone,
    /// it falls behind over the peer's other requests (WRITEs, SENDs), and once 2^23 PSNs
    /// behind it looks ahead of the next READ's responses, which would then be taken for
    /// resends and never offered to the stages.
    #[cold]
    #[inline(never)]
    fn read_responses_from(&self, nic: &mut Nic, psn: Psn) {
        let reads = self
            .resp
            .responses
            .iter()
            .filter(|r| matches!(r, Response::Read { .. }))
            .count();
        if reads == 1
            && let Some(f) = nic.message_flags.get_mut(self.index() as usize)
        {
            f.read_responses_from(psn);
        }
    }

    /// An atomic: checked, carried out once on the 8 bytes it names, its original value
    /// kept to answer a duplicate.
    fn execute_atomic(
        &mut self,
        nic: &mut Nic,
        headers: &RoceHeaders,
        operation: Operation,
    ) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let pd = self.pd;
        let a = headers.ext.atomic_eth.ok_or(Refusal::InvalidRequest)?;
        if a.va % 8 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        remote(&nic.mrs, pd, a.rkey, a.va, 8, Access::REMOTE_ATOMIC)?;
        if !self
            .resp
            .room_for_new_request(self.attrs.max_dest_rd_atomic)
        {
            return Err(Refusal::InvalidRequest);
        }
        let mut old = [0u8; 8];
        nic.mrs.read(a.rkey, a.va, &mut old);
        let original = u64::from_le_bytes(old);
        let new = if operation == Operation::FetchAdd {
            Some(original.wrapping_add(a.swap_add))
        } else {
            (original == a.compare).then_some(a.swap_add)
        };
        if let Some(new) = new {
            nic.mrs.write(a.rkey, a.va, &new.to_le_bytes());
        }
        let response = Response::AtomicAck {
            psn: bth.psn,
            original,
            replay: false,
        };
        let resource = ResponderResource {
            first_psn: bth.psn,
            span: 1,
            atomic_original: Some(original),
        };
        self.accept_rd_atomic(response, resource);
        Ok(())
    }

    /// Takes a READ or atomic (already checked and, for an atomic, executed): its response
    /// is owed in PSN order, the request is kept to answer duplicates, and the expected PSN
    /// moves past the PSNs it occupies. The caller checked that there is room for it.
    fn accept_rd_atomic(&mut self, response: Response, resource: ResponderResource) {
        self.resp.responses.push_back(response);
        self.keep_resource(resource);
        self.resp.epsn = self.resp.epsn.add(resource.span);
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
        self.resp.nak_sent = false;
    }

    /// Receive-not-ready: no receive is posted. The request is dropped and the requester
    /// told to wait and resend.
    fn rnr(&mut self, nic: &mut Nic, psn: Psn) -> Result<(), Refusal> {
        let timer = RnrTimer::from_code(self.attrs.min_rnr_timer).expect("validated at RTR");
        if self.owe(
            nic,
            Response::Nak {
                psn,
                syndrome: Syndrome::RnrNak(timer),
            },
        ) {
            nic.counters.naks_sent_rnr += 1;
        }
        Ok(())
    }

    /// Queues a NAK, unless the room for NAKs and replays is full (the queue of owed
    /// responses holds answers to at most `max_dest_rd_atomic` new requests plus
    /// `EXTRA_SLOTS` others): then the NAK is dropped and counted, and the requester's timer
    /// recovers. False if dropped.
    fn owe(&mut self, nic: &mut Nic, nak: Response) -> bool {
        if !self.resp.room_for_extra() {
            nic.counters.naks_dropped += 1;
            return false;
        }
        self.resp.responses.push_back(nak);
        true
    }

    /// A request the responder will not carry out: NAK it, and (as for every class of
    /// responder error but RNR and sequence errors) move the queue pair to the error state.
    fn refuse(&mut self, nic: &mut Nic, psn: Psn, refusal: Refusal) {
        let code = match refusal {
            Refusal::InvalidRequest => {
                nic.counters.naks_sent_invalid_request += 1;
                NakCode::InvalidRequest
            }
            Refusal::RemoteAccess => {
                nic.counters.naks_sent_remote_access += 1;
                NakCode::RemoteAccessError
            }
            Refusal::RemoteOperational => {
                nic.counters.naks_sent_remote_operational += 1;
                NakCode::RemoteOperationalError
            }
        };
        self.resp.responses.push_back(Response::Nak {
            psn,
            syndrome: Syndrome::Nak(code),
        });
        if self.state != QpState::Error {
            nic.enter_error(self);
        }
    }

    fn finish_recv(
        &mut self,
        nic: &mut Nic,
        wqe: RecvWqe,
        byte_len: u32,
        imm: Option<u32>,
        status: WcStatus,
    ) {
        self.finish_recv_with(nic, wqe, byte_len, imm, status, WcOpcode::Recv);
    }

    fn finish_recv_with(
        &mut self,
        nic: &mut Nic,
        wqe: RecvWqe,
        byte_len: u32,
        imm: Option<u32>,
        status: WcStatus,
        opcode: WcOpcode,
    ) {
        let (num, cq) = (self.num, self.recv_cq);
        let byte_len = if status == WcStatus::Success {
            byte_len
        } else {
            0
        };
        // Read before the message's flags are taken (which forgets its first PSN).
        let scope = self
            .message_first(nic)
            .map(|first| (crate::engine::FlagSide::Responder, first));
        let flags = self.take_message_flags(nic);
        nic.complete_in(
            self,
            cq,
            Completion {
                wr_id: wqe.wr_id,
                status,
                opcode,
                qp: num,
                byte_len,
                imm,
                time: crate::Instant::ZERO,
                flags,
            },
            move |_| scope,
        );
    }

    #[inline(always)]
    fn message_done(&mut self, nic: &mut Nic) {
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
        if self.services {
            self.forget_message_flags(nic);
        }
    }

    /// A completion took the flags already; one without (a plain WRITE) leaves them, and
    /// they are counted. Out of line: only queue pairs with services come here.
    #[cold]
    #[inline(never)]
    fn forget_message_flags(&self, nic: &mut Nic) {
        if !self.take_message_flags(nic).is_empty() {
            nic.counters.service_flags_uncompleted += 1;
        }
    }

    /// The first PSN of the message being completed (`None` without services).
    fn message_first(&self, nic: &Nic) -> Option<Psn> {
        if !self.services {
            return None;
        }
        nic.message_flags.get(self.index() as usize)?.first
    }

    /// The flags of the message being completed (none without services), cleared.
    fn take_message_flags(&self, nic: &mut Nic) -> crate::policy::ServiceFlags {
        if !self.services {
            return crate::policy::ServiceFlags::NONE;
        }
        nic.message_flags
            .get_mut(self.index() as usize)
            .map(|f| {
                f.first = None;
                std::mem::take(&mut f.message)
            })
            .unwrap_or_default()
    }

    /// The flags stages beside the path raised on the packet at `psn`, which is being
    /// taken in order: joined to the message's (whose first packet forgets any left by a
    /// message abandoned half-way). Earlier PSNs still listed were never taken as flagged
    /// (a flagged copy replaced by a clean one): forgotten. Out of line: only queue pairs
    /// with services come here.
    #[cold]
    #[inline(never)]
    fn take_flags(&self, nic: &mut Nic, psn: Psn, starts: bool) {
        let Some(f) = nic.message_flags.get_mut(self.index() as usize) else {
            return;
        };
        if starts {
            f.message = crate::policy::ServiceFlags::NONE;
            f.first = Some(psn);
        }
        if f.pending.is_empty() {
            return;
        }
        let message = &mut f.message;
        f.pending.retain(|&(p, flags)| {
            if p == psn {
                *message |= flags;
            }
            psn.precedes(p)
        });
    }

    /// Keeps a READ or atomic to answer its duplicates, forgetting the oldest beyond the bound.
    fn keep_resource(&mut self, resource: ResponderResource) {
        let bound = usize::from(self.attrs.max_dest_rd_atomic).max(1);
        while self.resp.resources.len() >= bound {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(resource);
    }

    /// A request with a PSN already passed: re-acknowledge SENDs and WRITEs, serve a READ
    /// again, resend an atomic's saved result. Nothing is executed twice.
    fn on_duplicate(&mut self, nic: &mut Nic, headers: &RoceHeaders, info: &OpcodeInfo) {
        let psn = headers.bth.psn;
        let pd = self.pd;
        match info.operation {
            Operation::RdmaReadRequest => {
                let Some(reth) = headers.ext.reth else { return };
                if !self.resp.read_was_taken(psn) || !self.resp.room_for_extra() {
                    return;
                }
                if nic
                    .mrs
                    .check(
                        reth.rkey,
                        pd,
                        reth.va,
                        u64::from(reth.dma_len),
                        Access::REMOTE_READ,
                    )
                    .is_err()
                {
                    return;
                }
                self.resp.responses.push_back(Response::Read {
                    psn,
                    rkey: reth.rkey,
                    va: reth.va,
                    remaining: reth.dma_len,
                    first: true,
                    replay: true,
                });
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let saved = self.resp.atomic_result(psn);
                if let Some(original) = saved.filter(|_| self.resp.room_for_extra()) {
                    self.resp.responses.push_back(Response::AtomicAck {
                        psn,
                        original,
                        replay: true,
                    });
                }
            }
            _ => self.resp.ack_due = true,
        }
    }

    /// A CNP the control law asked for (before anything else), or a grant it made, to the
    /// peer: not sequenced, no payload, never a CC extension header. A grant that rides the
    /// credit CCX instead makes an ACK due to carry it.
    #[inline(always)]
    fn control_packet(
        &mut self,
        nic: &mut Nic,
        dst: std::net::IpAddr,
        dest_qp: u32,
    ) -> Option<Transmit> {
        let priority = self.priorities.response;
        let unsequenced = |src_port, bth, ext| Transmit {
            dst,
            src_port,
            headers: RoceHeaders {
                bth,
                ccx: None,
                ext,
            },
            payload_len: 0,
            payload_at: PayloadAt::Buffer,
            priority,
        };
        if self.cnp_due {
            // The control law's congestion notification goes before anything else.
            self.cnp_due = false;
            if self.state != QpState::Error {
                let mut bth = Bth::new(Opcode::CNP, dest_qp, Psn::new(0));
                bth.becn = true;
                nic.counters.cnps_sent += 1;
                let port = nic.source_port(self, bth.psn, bth.opcode);
                return Some(unsequenced(port, bth, ExtHeaders::default()));
            }
        }
        if self.resp.grant_due > 0 {
            let more = std::mem::take(&mut self.resp.grant_due);
            let by_ccx = self.attrs.ccx == Some(sluice_wire::CcxLayout::Credit);
            if self.state == QpState::Error || !(by_ccx || self.attrs.cc_control) {
                nic.counters.grants_unsent += 1;
            } else {
                let total = self.granted_total.wrapping_add(more);
                self.granted_total = total;
                // With the credit CCX the total rides in whatever goes to the peer next;
                // with nothing else owed, an ACK of what was received carries it (to the
                // requester, an ACK it already had: it only counts it as stale).
                if by_ccx && self.resp.responses.is_empty() {
                    self.resp.ack_due = true;
                }
                nic.counters.grants_sent += 1;
                if !by_ccx {
                    let bth = Bth::new(Opcode::RC_CC_CONTROL, dest_qp, Psn::new(0));
                    let ext = ExtHeaders {
                        cc_control: Some(sluice_wire::CcControl {
                            detail: 0,
                            kind: sluice_wire::CcControlKind::CreditTotal,
                            value: total,
                        }),
                        ..ExtHeaders::default()
                    };
                    let port = nic.source_port(self, bth.psn, bth.opcode);
                    return Some(unsequenced(port, bth, ext));
                }
            }
        }
        if self.control_due
            && let Some((port, bth, ext)) = self.homa_packet(nic, dest_qp)
        {
            return Some(unsequenced(port, bth, ext));
        }
        None
    }

    /// Homa's owed messages (a GRANT or RESEND first, then a BUSY, one per call): the
    /// source port and headers of the control packet to send, if one may go. Kept out of
    /// line: it runs only for Homa, and `control_packet` is inlined into every response's
    /// path.
    #[inline(never)]
    fn homa_packet(&mut self, nic: &mut Nic, dest_qp: u32) -> Option<(u16, Bth, ExtHeaders)> {
        let message = match self.homa_due.take() {
            Some(m) => Some(m),
            None => self
                .busy_due
                .take()
                .map(|message| sluice_wire::HomaControl::Busy { message }),
        };
        self.control_due = self.homa_due.is_some() || self.busy_due.is_some();
        let m = message?;
        let agreed = self.state != QpState::Error && self.attrs.cc_control;
        match m.control() {
            Ok(c) if agreed => {
                nic.counters.homa_sent += 1;
                let bth = Bth::new(Opcode::RC_CC_CONTROL, dest_qp, Psn::new(0));
                let ext = ExtHeaders {
                    cc_control: Some(c),
                    ..ExtHeaders::default()
                };
                let port = nic.source_port(self, bth.psn, bth.opcode);
                Some((port, bth, ext))
            }
            // Not agreed, in error, or a field out of range: never on the wire.
            _ => {
                nic.counters.homa_unsent += 1;
                None
            }
        }
    }

    /// The next response of the queue pair: owed READ responses, atomic ACKs and NAKs in
    /// PSN order, then a coalesced ACK of everything received. A READ response's payload is
    /// read in place from the region ([`PayloadAt::Region`]); no other response has one.
    /// Its phases: the control law's packets first, then the owed response's headers
    /// (`read_response` or `acknowledgement`), then what every packet to the peer carries.
    /// The engine asks its two halves apart (`Engine::visit_from`); the tests ask this.
    #[cfg(test)]
    pub(crate) fn next_response_packet(
        &mut self,
        nic: &mut Nic,
        now: crate::Instant,
    ) -> Option<Transmit> {
        if self.owes_control() {
            self.control_then_response(nic, now)
        } else {
            self.next_plain_response(nic, now)
        }
    }

    /// Whether the control law asked for a packet to the peer (a CNP, a grant, Homa's).
    #[inline(always)]
    pub(crate) fn owes_control(&self) -> bool {
        self.cnp_due || self.control_due || self.resp.grant_due > 0
    }

    /// [`Qp::next_response_packet`] when the control law asked for a packet
    /// ([`Qp::owes_control`]): that one, or else the owed response. Out of line: see
    /// `Engine::visit_from`.
    #[inline(never)]
    pub(crate) fn control_then_response(
        &mut self,
        nic: &mut Nic,
        now: crate::Instant,
    ) -> Option<Transmit> {
        loop {
            if !self.owes_peer() {
                return None;
            }
            let dst = self.attrs.peer?;
            if self.owes_control()
                && let Some(t) = self.control_packet(nic, dst, self.attrs.dest_qpn)
            {
                return Some(t);
            }
            let mut again = false;
            let t = self.owed_response(nic, now, dst, &mut again);
            if !again {
                return t;
            }
        }
    }

    /// [`Qp::next_response_packet`] of a queue pair that owes no control packet
    /// (`!owes_control()`): the engine's hot path.
    #[inline(always)]
    pub(crate) fn next_plain_response(
        &mut self,
        nic: &mut Nic,
        now: crate::Instant,
    ) -> Option<Transmit> {
        loop {
            // Most visits (a requester's turn) owe nothing: decide that from the flags
            // alone, before reading the fields a response is built from (other cache lines).
            if !self.owes_peer() {
                return None;
            }
            let dst = self.attrs.peer?;
            let mut again = false;
            let t = self.owed_response(nic, now, dst, &mut again);
            if !again {
                return t;
            }
            // Refusing the READ set no control flag: still none owed.
            debug_assert!(!self.owes_control());
        }
    }

    /// The owed response's packet: a READ response, atomic ACK or NAK in PSN order, or a
    /// coalesced ACK. `again`: a READ's region was gone, and the NAK that says so is owed
    /// instead; the caller asks again (a loop, not a call: a call's result meeting an ACK
    /// built in place made every ACK be built aside and copied, 64 instructions).
    #[inline(always)]
    fn owed_response(
        &mut self,
        nic: &mut Nic,
        now: crate::Instant,
        dst: std::net::IpAddr,
        again: &mut bool,
    ) -> Option<Transmit> {
        if self.state == QpState::Error
            && !matches!(self.resp.responses.front(), Some(Response::Nak { .. }))
        {
            return None;
        }
        let packet = match self.resp.responses.front() {
            Some(Response::Read { .. }) => {
                // A law that controls READ data too: asked, and its pace kept, out of line
                // (and before the packet is built: an ACK's way must not read the built
                // packet again, or every ACK is built aside and copied).
                if nic.gates_read_responses() && !self.read_response_may_go(nic, now, dst) {
                    return None;
                }
                match self.read_response(nic) {
                    Some(packet) => packet,
                    None => {
                        *again = true;
                        return None;
                    }
                }
            }
            _ => self.acknowledgement()?,
        };
        let ResponsePacket {
            bth,
            ext,
            payload_len,
            payload_at,
        } = packet;
        let mut ccx = self.ccx_out(now, true);
        nic.stamp_declared(self, now, &mut ccx);
        let src_port = nic.source_port(self, bth.psn, bth.opcode);
        Some(Transmit {
            dst,
            src_port,
            headers: RoceHeaders { bth, ccx, ext },
            payload_len,
            payload_at,
            priority: self.priorities.response,
        })
    }

    /// Under a law that gates READ responses ([`crate::control::EventMask::GATE_READ_RESPONSES`]):
    /// may the next packet of the READ response owed first go now? The law hears `Start`
    /// before the queue pair's first data packet, READ response or request; the pace it
    /// set must allow the packet (else the timer wakes the queue pair when it does); and a
    /// new packet must pass the law's gate, as a new request packet must. A replay (for a
    /// duplicate READ, the requester's recovery) is paced but never gated: the credit the
    /// lost packets used is gone, and recovery must not wait for it. `false` leaves the
    /// response owed: the queue pair sends it when the pacer's timer or the law's
    /// `Actions::wake` schedules it again. `true` takes the packet's time on the wire from
    /// the pacer, as a request packet's is (framing and the CC extension header counted,
    /// so that the law's rate is a rate on the wire).
    #[inline(never)]
    fn read_response_may_go(
        &mut self,
        nic: &mut Nic,
        now: crate::Instant,
        dst: std::net::IpAddr,
    ) -> bool {
        if !self.control_started {
            self.control_started = true;
            let (mtu, line_rate_bps) = (self.attrs.mtu, nic.config.line_rate_bps);
            nic.emit(
                self,
                now,
                crate::control::Event::Start { mtu, line_rate_bps },
            );
        }
        if self.knobs.rate_bps.is_some() {
            let due = self.next_send_at();
            if due > now {
                nic.arm(self, due);
                return false;
            }
        }
        let mtu = self.attrs.mtu;
        let Some(&Response::Read {
            remaining,
            first,
            replay,
            ..
        }) = self.resp.responses.front()
        else {
            return true;
        };
        let len = remaining.min(mtu);
        if !replay && nic.gate_bytes(self, now, len) == crate::control::Gate::Hold {
            return false;
        }
        if self.knobs.rate_bps.is_some_and(|r| r > 0) {
            // BTH, an AETH unless a MIDDLE packet, the CCX, the payload and its pad, the
            // ICRC (as `RoceHeaders::wire_len` counts the packet `read_response` builds).
            let middle = !first && remaining > mtu;
            let aeth = if middle { 0 } else { sluice_wire::AETH_LEN };
            let ccx = self.attrs.ccx.map_or(0, |l| l.wire_len());
            let payload = len as usize + usize::from(sluice_wire::pad_for(len as usize));
            let roce = sluice_wire::BTH_LEN + aeth + ccx + payload + sluice_wire::ICRC_LEN;
            let wire = sluice_wire::roce_link_len(dst.is_ipv6(), roce) as u64;
            self.paced = (self.next_send_at().max(now), wire * 8);
        }
        true
    }

    /// Whether the response owed first is a READ's: one a law that gates READ responses may
    /// hold back (the queue pair then owes the peer but waits for the pacer or the law).
    pub(crate) fn read_response_first(&self) -> bool {
        matches!(self.resp.responses.front(), Some(Response::Read { .. }))
    }

    /// The timer of a queue pair that cannot send requests (RTR) fired: a READ response
    /// waiting for its pace (under a law that gates READ responses) goes when it is due.
    pub(crate) fn read_pacing_timer(&mut self, nic: &mut Nic, now: crate::Instant) {
        if self.knobs.rate_bps.is_none()
            || !nic.gates_read_responses()
            || !self.read_response_first()
        {
            return;
        }
        let due = self.next_send_at();
        if due <= now {
            nic.schedule(self);
        } else {
            nic.arm(self, due);
        }
    }

    /// The next packet of the READ response owed first: its headers, its payload in place.
    /// `None` if the region was deregistered since the
    /// READ arrived: then the data cannot be had, and a remote access NAK is owed instead.
    #[inline(always)]
    fn read_response(&mut self, nic: &mut Nic) -> Option<ResponsePacket> {
        let (mtu, pd, dest_qp) = (self.attrs.mtu, self.pd, self.attrs.dest_qpn);
        let ok = self.aeth(Syndrome::Ack(Credits::UNLIMITED));
        let Some(Response::Read {
            psn,
            rkey,
            va,
            remaining,
            first,
            ..
        }) = self.resp.responses.front_mut()
        else {
            unreachable!("called for a READ response")
        };
        let len = (*remaining).min(mtu);
        let last = len == *remaining;
        let opcode = match (*first, last) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        };
        let position = opcode.info().map(|i| i.position);
        let ext = ExtHeaders {
            aeth: (position != Some(Position::Middle)).then_some(ok),
            ..ExtHeaders::default()
        };
        let bth = Bth::new(opcode, dest_qp, *psn);
        let (key, at) = (*rkey, *va);
        *psn = psn.next();
        *va += u64::from(len);
        *remaining -= len;
        *first = false;
        if last {
            self.resp.responses.pop_front();
        }
        if nic
            .mrs
            .check(key, pd, at, u64::from(len), Access::REMOTE_READ)
            .is_err()
        {
            self.resp.responses.clear();
            self.refuse(nic, bth.psn, Refusal::RemoteAccess);
            return None;
        }
        // In place, services or not: an in-line stage reads it from the region and writes
        // what goes into the buffer (`Engine::serve_outgoing`).
        Some(ResponsePacket {
            bth,
            ext,
            payload_len: len,
            payload_at: PayloadAt::Region { key, addr: at },
        })
    }

    /// The owed atomic ACK or NAK first in line, else the coalesced ACK of everything
    /// received if one is due.
    #[inline(always)]
    fn acknowledgement(&mut self) -> Option<ResponsePacket> {
        let dest_qp = self.attrs.dest_qpn;
        let (opcode, psn, ext) = match self.resp.responses.front() {
            Some(&Response::AtomicAck { psn, original, .. }) => {
                self.resp.responses.pop_front();
                let ext = ExtHeaders {
                    aeth: Some(self.aeth(Syndrome::Ack(Credits::UNLIMITED))),
                    atomic_ack_eth: Some(AtomicAckEth { original }),
                    ..ExtHeaders::default()
                };
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, ext)
            }
            Some(&Response::Nak { psn, syndrome }) => {
                self.resp.responses.pop_front();
                let ext = ExtHeaders {
                    aeth: Some(self.aeth(syndrome)),
                    ..ExtHeaders::default()
                };
                (Opcode::RC_ACKNOWLEDGE, psn, ext)
            }
            Some(Response::Read { .. }) => unreachable!("READ responses are built apart"),
            None if self.resp.ack_due => {
                self.resp.ack_sent();
                let ext = ExtHeaders {
                    aeth: Some(self.aeth(Syndrome::Ack(Credits::UNLIMITED))),
                    ..ExtHeaders::default()
                };
                (Opcode::RC_ACKNOWLEDGE, self.resp.epsn.sub(1), ext)
            }
            None => return None,
        };
        Some(ResponsePacket {
            bth: Bth::new(opcode, dest_qp, psn),
            ext,
            payload_len: 0,
            payload_at: PayloadAt::Buffer,
        })
    }

    /// An AETH with this syndrome and the messages completed so far.
    #[inline(always)]
    fn aeth(&self, syndrome: Syndrome) -> Aeth {
        Aeth {
            syndrome,
            msn: self.resp.msn,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The responder's handlers driven directly: requests in, what it owes the peer out.

    use sluice_wire::{AtomicEth, ExtHeaders, NakCode, Opcode, Reth, Syndrome};

    use crate::engine::fixture::{Fixture, MTU, RQ_PSN, request, write_only};
    use crate::qp::{QpState, Response};
    use crate::{Instant, Payload};
    use sluice_wire::RoceHeaders;

    const NOW: Instant = Instant::ZERO;

    #[test]
    fn in_order_writes_execute_and_one_ack_covers_them() {
        let mut f = Fixture::new();
        let (rkey, va) = (f.mr.rkey, f.mr.addr);
        for i in 0..3u32 {
            // Only the last asks for an ACK.
            let w = write_only(RQ_PSN + i, i == 2, rkey, va + u64::from(i) * 4, 4);
            f.request(&w, Payload::Bytes(&[i as u8 + 1; 4]));
            assert_eq!(f.qp().resp.ack_due, i == 2, "after request {i}");
        }
        assert_eq!(&f.memory()[..12], &[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN + 3);
        let ack = f.next_response(NOW).expect("an ACK");
        assert_eq!(ack.headers.bth.opcode, Opcode::RC_ACKNOWLEDGE);
        assert_eq!(
            ack.headers.bth.psn.value(),
            RQ_PSN + 2,
            "the last one taken"
        );
        assert!(matches!(
            ack.headers.ext.aeth.map(|a| a.syndrome),
            Some(Syndrome::Ack(_))
        ));
        assert!(f.next_response(NOW).is_none(), "one ACK for all three");
    }

    #[test]
    fn a_psn_gap_is_naked_once_at_the_expected_psn() {
        let mut f = Fixture::new();
        let (rkey, va) = (f.mr.rkey, f.mr.addr);
        for psn in [RQ_PSN + 2, RQ_PSN + 3, RQ_PSN + 5] {
            f.request(&write_only(psn, true, rkey, va, 4), Payload::Bytes(&[9; 4]));
        }
        assert_eq!(&f.memory()[..4], &[0; 4], "nothing past a gap executes");
        assert_eq!(f.nic().counters.naks_sent_sequence, 1);
        let nak = f.next_response(NOW).expect("a NAK");
        assert_eq!(nak.headers.bth.psn.value(), RQ_PSN, "the first missing PSN");
        assert_eq!(
            nak.headers.ext.aeth.map(|a| a.syndrome),
            Some(Syndrome::Nak(NakCode::PsnSequenceError))
        );
        assert!(f.next_response(NOW).is_none(), "once per gap");
        // The missing request fills the gap; a later gap is NAK'd afresh.
        f.request(
            &write_only(RQ_PSN, false, rkey, va, 4),
            Payload::Bytes(&[1; 4]),
        );
        f.request(
            &write_only(RQ_PSN + 2, false, rkey, va, 4),
            Payload::Bytes(&[1; 4]),
        );
        assert_eq!(f.nic().counters.naks_sent_sequence, 2);
    }

    #[test]
    fn a_tracker_that_expects_reordering_naks_only_what_it_cannot_hold() {
        use crate::policy::{Left, LeftConfig};
        let config = LeftConfig::default();
        let capacity = config.capacity();
        let policies = crate::policy::Policies {
            tracker: Box::new(Left::new(config)),
            ..Default::default()
        };
        let mut f = Fixture::with_policies(
            crate::EngineConfig::default(),
            crate::Recovery::SelectiveRepeat,
            policies,
        );
        let (rkey, va) = (f.mr.rkey, f.mr.addr);
        for psn in [RQ_PSN + 2, RQ_PSN + 3, RQ_PSN + 5] {
            f.request(&write_only(psn, true, rkey, va, 4), Payload::Bytes(&[9; 4]));
        }
        assert_eq!(f.nic().counters.packets_held, 3);
        assert_eq!(
            f.nic().counters.naks_sent_sequence,
            0,
            "reordering is no loss"
        );
        assert!(f.next_response(NOW).is_none());
        // The late packet fills the first gap; what is held up to the next gap executes,
        // and the remaining gap (PSN + 4) is not NAK'd either.
        f.request(
            &write_only(RQ_PSN, false, rkey, va, 4),
            Payload::Bytes(&[1; 4]),
        );
        f.request(
            &write_only(RQ_PSN + 1, false, rkey, va, 4),
            Payload::Bytes(&[1; 4]),
        );
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN + 4);
        assert_eq!(f.nic().counters.naks_sent_sequence, 0);
        // A packet past what the tracker can hold is NAK'd at the first missing PSN.
        f.request(
            &write_only(RQ_PSN + 4 + capacity + 1, true, rkey, va, 4),
            Payload::Bytes(&[9; 4]),
        );
        assert_eq!(f.nic().counters.naks_sent_sequence, 1);
        let nak = std::iter::from_fn(|| f.next_response(NOW))
            .find(|t| {
                matches!(
                    t.headers.ext.aeth.map(|a| a.syndrome),
                    Some(Syndrome::Nak(_))
                )
            })
            .expect("a NAK");
        assert_eq!(nak.headers.bth.psn.value(), RQ_PSN + 4);
    }

    #[test]
    fn packets_refused_past_the_tracker_are_asked_for_again_at_once_when_the_held_run_out() {
        // The default tracker: the 256-PSN bitmap, holding offsets 1 ..= 255.
        let mut f = Fixture::with(
            crate::EngineConfig::default(),
            crate::Recovery::SelectiveRepeat,
        );
        let (rkey, va) = (f.mr.rkey, f.mr.addr);
        let write = |psn| write_only(psn, false, rkey, va, 4);
        f.request(&write(RQ_PSN + 1), Payload::Bytes(&[1; 4]));
        // 256 past the expected PSN: past the bitmap, refused.
        f.request(&write(RQ_PSN + 256), Payload::Bytes(&[1; 4]));
        assert_eq!(f.nic().counters.packets_held, 1);
        // The gap fills, the held packet follows, and nothing is held past the new expected
        // PSN: everything from it is asked for again, by an RNR NAK (go back), not one PSN.
        f.request(&write(RQ_PSN), Payload::Bytes(&[1; 4]));
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN + 2);
        let naks: Vec<_> = std::iter::from_fn(|| f.next_response(NOW))
            .filter_map(|t| match t.headers.ext.aeth.map(|a| a.syndrome) {
                Some(Syndrome::RnrNak(timer)) => Some((t.headers.bth.psn.value(), timer)),
                _ => None,
            })
            .collect();
        assert_eq!(
            naks,
            [(RQ_PSN + 2, sluice_wire::RnrTimer::from_code(1).unwrap())]
        );
        assert_eq!(f.nic().counters.naks_sent_rnr, 1);
        // Asked once: what follows in order brings no other.
        f.request(&write(RQ_PSN + 2), Payload::Bytes(&[1; 4]));
        assert_eq!(f.nic().counters.naks_sent_rnr, 1);
    }

    /// A WRITE of four packets, `FIRST MIDDLE MIDDLE LAST`, at `psn`: its headers, in order.
    fn write_of_four(psn: u32, rkey: u32, va: u64) -> [RoceHeaders; 4] {
        let reth = Reth {
            va,
            rkey,
            dma_len: 4 * MTU,
        };
        let ext = |reth| ExtHeaders {
            reth,
            ..ExtHeaders::default()
        };
        [
            request(Opcode::RC_RDMA_WRITE_FIRST, psn, false, ext(Some(reth))),
            request(Opcode::RC_RDMA_WRITE_MIDDLE, psn + 1, false, ext(None)),
            request(Opcode::RC_RDMA_WRITE_MIDDLE, psn + 2, false, ext(None)),
            request(Opcode::RC_RDMA_WRITE_LAST, psn + 3, true, ext(None)),
        ]
    }

    #[test]
    fn a_write_packet_past_a_gap_is_placed_directly_once_its_first_packet_arrived() {
        let mut f = Fixture::with(
            crate::EngineConfig::default(),
            crate::Recovery::SelectiveRepeat,
        );
        let (rkey, va) = (f.mr.rkey, f.mr.addr);
        let data = |i: usize| vec![i as u8 + 1; MTU as usize];
        let at = |i: usize| i * MTU as usize..(i + 1) * MTU as usize;
        // In progress: the first packet executed, the second is late; the third and last
        // are placed on arrival, their payload not kept.
        let w = write_of_four(RQ_PSN, rkey, va);
        f.request(&w[0], Payload::Bytes(&data(0)));
        for i in [3, 2] {
            f.request(&w[i], Payload::Bytes(&data(i)));
            assert_eq!(&f.memory()[at(i)], &data(i)[..], "packet {i} placed");
        }
        assert_eq!(&f.memory()[at(1)], &[0; MTU as usize][..]);
        let counters = f.nic().counters;
        assert_eq!((counters.packets_held, counters.packets_placed), (2, 2));
        let held = &f.qp().resp.reorder.as_ref().unwrap().held;
        assert!(held.iter().all(|h| h.bytes.capacity() == 0 && !h.real));
        // The application overwrites a placed packet's bytes: executing it later in order
        // must not write them again (it was placed once, from the packet).
        f.memory()[at(3)].fill(0xEE);
        f.request(&w[1], Payload::Bytes(&data(1)));
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN + 4, "the WRITE completed");
        assert_eq!(&f.memory()[at(1)], &data(1)[..]);
        assert!(f.memory()[at(3)].iter().all(|&b| b == 0xEE));
        assert!(f.qp().resp.in_progress.is_none());

        // Its first packet held ahead of a gap: the rest of the WRITE is placed by its RETH.
        let (gap, base) = (RQ_PSN + 4, RQ_PSN + 5);
        let w = write_of_four(base, rkey, va + 4 * u64::from(MTU));
        f.request(&w[0], Payload::Bytes(&data(4)));
        f.request(&w[2], Payload::Bytes(&data(6)));
        assert_eq!(&f.memory()[at(6)], &data(6)[..]);
        let counters = f.nic().counters;
        assert_eq!((counters.packets_held, counters.packets_placed), (4, 3));
        // The next WRITE's first packet missing: nothing to place by (the held first packet
        // is another WRITE's, which this packet is past the end of), so it is copied.
        let later = write_of_four(base + 4, rkey, va + 8 * u64::from(MTU));
        f.request(&later[1], Payload::Bytes(&data(9)));
        let counters = f.nic().counters;
        assert_eq!((counters.packets_held, counters.packets_placed), (5, 3));
        assert_eq!(&f.memory()[at(9)], &[0; MTU as usize][..]);
        // The gap fills: everything executes in order, each byte in place.
        f.request(
            &write_only(gap, false, rkey, va + 12 * u64::from(MTU), 4),
            Payload::Bytes(&[5; 4]),
        );
        for i in [1, 3] {
            f.request(&w[i], Payload::Bytes(&data(4 + i)));
        }
        f.request(&later[0], Payload::Bytes(&data(8)));
        for i in [2, 3] {
            f.request(&later[i], Payload::Bytes(&data(8 + i)));
        }
        assert_eq!(f.qp().resp.epsn.value(), base + 8);
        for i in (0..12).filter(|&i| i != 3) {
            assert_eq!(&f.memory()[at(i)], &data(i)[..], "packet {i}");
        }
        let counters = f.nic().counters;
        assert_eq!((counters.packets_held, counters.packets_placed), (5, 3));
    }

    #[test]
    fn a_duplicate_write_is_acknowledged_again_not_executed_again() {
        let mut f = Fixture::new();
        let (rkey, va) = (f.mr.rkey, f.mr.addr);
        f.request(
            &write_only(RQ_PSN, true, rkey, va, 4),
            Payload::Bytes(&[1; 4]),
        );
        assert!(f.next_response(NOW).is_some());
        // The application changes the bytes; a resent copy must not write them back.
        f.memory()[..4].copy_from_slice(&[7; 4]);
        f.request(
            &write_only(RQ_PSN, false, rkey, va, 4),
            Payload::Bytes(&[1; 4]),
        );
        assert_eq!(&f.memory()[..4], &[7; 4]);
        assert_eq!(f.nic().counters.duplicate_requests, 1);
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN + 1);
        let ack = f.next_response(NOW).expect("the duplicate is acknowledged");
        assert_eq!(ack.headers.bth.psn.value(), RQ_PSN);
    }

    #[test]
    fn a_duplicate_read_is_served_again_from_the_kept_request() {
        let mut f = Fixture::new();
        let reth = Reth {
            va: f.mr.addr,
            rkey: f.mr.rkey,
            dma_len: 2 * MTU,
        };
        let ext = ExtHeaders {
            reth: Some(reth),
            ..ExtHeaders::default()
        };
        let read = request(Opcode::RC_RDMA_READ_REQUEST, RQ_PSN, false, ext);
        f.request(&read, Payload::Len(0));
        assert_eq!(
            f.qp().resp.epsn.value(),
            RQ_PSN + 2,
            "a READ takes its span"
        );
        for psn in [RQ_PSN, RQ_PSN + 1] {
            let r = f.next_response(NOW).expect("a READ response");
            assert_eq!(r.headers.bth.psn.value(), psn);
        }
        assert!(f.next_response(NOW).is_none());
        // A READ never taken (before the first expected PSN) is not answered.
        let unknown = request(Opcode::RC_RDMA_READ_REQUEST, RQ_PSN - 4, false, ext);
        f.request(&unknown, Payload::Len(0));
        assert!(f.next_response(NOW).is_none());
        // The one taken is served again, in full, as a replay.
        f.request(&read, Payload::Len(0));
        assert!(matches!(
            f.qp().resp.responses.front(),
            Some(Response::Read { replay: true, .. })
        ));
        let again = f.next_response(NOW).expect("served again");
        assert_eq!(
            again.headers.bth.opcode,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST
        );
        assert_eq!(again.headers.bth.psn.value(), RQ_PSN);
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN + 2, "nothing new taken");
    }

    #[test]
    fn a_bad_rkey_is_a_remote_access_nak_and_the_error_state() {
        let mut f = Fixture::new();
        let (rkey, va) = (f.mr.rkey, f.mr.addr);
        f.post_recv(5);
        f.request(
            &write_only(RQ_PSN, true, rkey ^ 0x100, va, 4),
            Payload::Bytes(&[1; 4]),
        );
        assert_eq!(&f.memory()[..4], &[0; 4]);
        assert_eq!(f.nic().counters.naks_sent_remote_access, 1);
        assert_eq!(f.qp().state, QpState::Error);
        let nak = f.next_response(NOW).expect("a NAK");
        assert_eq!(nak.headers.bth.psn.value(), RQ_PSN);
        assert_eq!(
            nak.headers.ext.aeth.map(|a| a.syndrome),
            Some(Syndrome::Nak(NakCode::RemoteAccessError))
        );
        // The posted receive is flushed.
        let c = f.poll().expect("the receive completes");
        assert_eq!((c.wr_id, c.status), (5, crate::WcStatus::WrFlushError));
    }

    #[test]
    fn a_duplicate_atomic_is_answered_from_its_saved_result_not_executed_again() {
        let mut f = Fixture::new();
        let atomic = AtomicEth {
            va: f.mr.addr,
            rkey: f.mr.rkey,
            swap_add: 5,
            compare: 0,
        };
        let ext = ExtHeaders {
            atomic_eth: Some(atomic),
            ..ExtHeaders::default()
        };
        f.memory()[..8].copy_from_slice(&10u64.to_le_bytes());
        let add = request(Opcode::RC_FETCH_ADD, RQ_PSN, false, ext);
        f.request(&add, Payload::Len(0));
        assert_eq!(&f.memory()[..8], &15u64.to_le_bytes());
        let original = |t: crate::Transmit| t.headers.ext.atomic_ack_eth.map(|a| a.original);
        assert_eq!(f.next_response(NOW).map(original), Some(Some(10)));
        // The same request again (its ACK was lost): the same answer, added once.
        f.request(&add, Payload::Len(0));
        assert_eq!(&f.memory()[..8], &15u64.to_le_bytes());
        assert_eq!(f.next_response(NOW).map(original), Some(Some(10)));
    }

    #[test]
    fn a_send_without_a_receive_is_answered_rnr_and_taken_when_sent_again() {
        let mut f = Fixture::new();
        let send = request(Opcode::RC_SEND_ONLY, RQ_PSN, true, ExtHeaders::default());
        f.request(&send, Payload::Bytes(&[3; 8]));
        assert_eq!(f.nic().counters.naks_sent_rnr, 1);
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN, "not taken");
        let nak = f.next_response(NOW).expect("an RNR NAK");
        assert!(matches!(
            nak.headers.ext.aeth.map(|a| a.syndrome),
            Some(Syndrome::RnrNak(_))
        ));
        assert_eq!(nak.headers.bth.psn.value(), RQ_PSN);
        f.post_recv(7);
        f.request(&send, Payload::Bytes(&[3; 8]));
        assert_eq!(&f.memory()[..8], &[3; 8]);
        let c = f.poll().expect("the receive completes");
        assert_eq!((c.wr_id, c.byte_len), (7, 8));
        assert_eq!(f.qp().resp.epsn.value(), RQ_PSN + 1);
    }

    /// Paces READ responses at 1 Gbit/s from `Start` on (and lets every one through its
    /// gate): the opt-in's pacer alone.
    #[derive(Debug)]
    struct PacedReads;

    impl crate::control::Law for PacedReads {
        type Context = ();

        fn name(&self) -> &'static str {
            "paced-reads"
        }

        fn interest(&self) -> crate::control::EventMask {
            use crate::control::{EventKind, EventMask};
            EventMask::of(&[EventKind::Start]).union(EventMask::GATE_READ_RESPONSES)
        }

        fn on_event(
            &mut self,
            _: Instant,
            _: &mut (),
            event: &crate::control::Event,
            act: &mut crate::control::Actions,
        ) {
            if let crate::control::Event::Start { .. } = event {
                act.set_rate(1_000_000_000);
            }
        }
    }

    #[test]
    fn a_paced_read_response_takes_its_own_length_on_the_wire_from_the_pacer() {
        let policies = crate::policy::Policies {
            controller: Box::new(crate::control::Inline::new(PacedReads)),
            ..Default::default()
        };
        let mut f = Fixture::with_policies(
            crate::EngineConfig::default(),
            crate::Recovery::GoBackN,
            policies,
        );
        // FIRST and LAST with an AETH, MIDDLE without; the LAST's 513 bytes padded to 516.
        let ext = ExtHeaders {
            reth: Some(Reth {
                va: f.mr.addr,
                rkey: f.mr.rkey,
                dma_len: 2 * MTU + 513,
            }),
            ..ExtHeaders::default()
        };
        f.request(
            &request(Opcode::RC_RDMA_READ_REQUEST, RQ_PSN, false, ext),
            Payload::Len(0),
        );
        let mut now = NOW;
        let mut lens = Vec::new();
        while let Some(t) = f.next_response(now) {
            // The pacer took exactly what `RoceHeaders::link_len` says the built packet is.
            let wire = t.headers.link_len(false, t.payload_len as usize).unwrap() as u64;
            assert_eq!(f.qp().paced, (now, wire * 8), "{:?}", t.headers.bth.opcode);
            lens.push(t.payload_len);
            // The next packet waits for its slot: at 1 Gbit/s, 8 ns a byte on the wire.
            let due = f.qp().next_send_at();
            assert_eq!((due - now).as_nanos() as u64, wire * 8);
            let early = Instant::from_nanos(due.as_nanos() - 1);
            assert!(f.next_response(early).is_none());
            now = due;
        }
        assert_eq!(lens, [MTU, MTU, 513]);
    }
}
