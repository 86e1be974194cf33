//! The responder half of a queue pair: checks each request (PSN, opcode sequence, access,
//! keys, bounds, lengths), places its data, answers with ACKs, NAKs, READ responses and
//! atomic ACKs, and answers duplicates from what it kept, never executing an atomic twice.

use sluice_wire::{
    Aeth, AtomicAckEth, Bth, Credits, ExtHeaders, NakCode, Opcode, OpcodeInfo, Operation, Position,
    Psn, RnrTimer, RoceHeaders, Syndrome,
};

use crate::Engine;
use crate::cq::{Completion, WcOpcode, WcStatus};
use crate::engine::{Payload, PayloadAt, Transmit};
use crate::mr::Access;
use crate::qp::{InProgress, QpState, RecvWqe, ResponderResource, Response};
use crate::requester::read_span;
use crate::rules::Arrival;

/// Why a request is refused, and the NAK that says so.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    InvalidRequest,
    RemoteAccess,
    RemoteOperational,
}

impl Engine {
    /// A request packet (SEND, WRITE, READ request, atomic) for queue pair `index`.
    pub(crate) fn on_request(
        &mut self,
        index: u32,
        now: crate::Instant,
        ce: bool,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) {
        let psn = headers.bth.psn;
        self.emit(
            index,
            now,
            crate::control::Event::Rx {
                psn,
                bytes: payload.len(),
                ce,
            },
        );
        let qp = self.qp_mut(index);
        match qp.resp.arrival(psn) {
            Arrival::InOrder => {}
            Arrival::Ahead(d) => {
                // A gap. Selective repeat keeps the packet for later (if it has room);
                // either way the first missing PSN is NAK'd, once per gap.
                if let Some(reorder) = &mut qp.resp.reorder {
                    let bytes = match payload {
                        Payload::Bytes(b) => Some(b),
                        Payload::Len(_) => None,
                    };
                    if reorder.hold(d, psn, headers, bytes, payload.len()) {
                        self.counters.packets_held += 1;
                    }
                }
                self.nak_gap(index);
                return;
            }
            Arrival::Duplicate => {
                self.counters.duplicate_requests += 1;
                self.on_duplicate(index, headers, info);
                return;
            }
        }
        self.execute_in_order(index, headers, info, payload);
        // Selective repeat: the packets held behind the gap just filled follow in order;
        // if another gap remains, NAK its first PSN.
        loop {
            let qp = self.qp_mut(index);
            let epsn = qp.resp.epsn;
            let Some(reorder) = &mut qp.resp.reorder else {
                return;
            };
            if reorder.held.is_empty() {
                return;
            }
            let Some(held) = reorder.take(epsn) else {
                self.nak_gap(index);
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
            let before = self.qp_mut(index).resp.epsn;
            self.execute_in_order(index, &held.headers, info, payload);
            let qp = self.qp_mut(index);
            if let Some(reorder) = &mut qp.resp.reorder {
                reorder.recycle(held.bytes);
            }
            if qp.resp.epsn == before {
                return; // RNR or an error: the rest waits for the requester
            }
        }
    }

    /// Carries out the request at the expected PSN (or answers why not), and moves the
    /// selective-repeat tracking along with the expected PSN.
    fn execute_in_order(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) {
        let before = self.qp_mut(index).resp.epsn;
        if let Err(refusal) = self.execute(index, headers, info, payload) {
            self.refuse(index, headers.bth.psn, refusal);
        }
        let qp = self.qp_mut(index);
        let moved = before.distance_to(qp.resp.epsn);
        if let (Some(reorder), true) = (&mut qp.resp.reorder, moved > 0) {
            reorder.tracker.advance(moved as u32);
        }
    }

    /// NAKs the expected PSN as missing, once per value of it.
    fn nak_gap(&mut self, index: u32) {
        let qp = self.qp_mut(index);
        if !qp.resp.claim_gap_nak() {
            return;
        }
        let epsn = qp.resp.epsn;
        let nak = Response::Nak {
            psn: epsn,
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        };
        if self.owe(index, nak) {
            self.counters.naks_sent_sequence += 1;
        }
    }

    /// Checks and carries out a new request (its PSN is the expected one): whether it may
    /// come now, then what its operation does.
    fn execute(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) -> Result<(), Refusal> {
        let starts = info.position.starts_message();
        let ends = info.position.ends_message();
        self.check_request(index, info, payload.len(), starts, ends)?;
        match info.operation {
            Operation::Send | Operation::SendWithImmediate => {
                self.execute_send(index, headers, payload, starts, ends)
            }
            Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => {
                self.execute_write(index, headers, payload, starts, ends)
            }
            Operation::RdmaReadRequest => self.execute_read(index, headers),
            Operation::CompareSwap | Operation::FetchAdd => {
                self.execute_atomic(index, headers, info.operation)
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
        index: u32,
        info: &OpcodeInfo,
        len: u32,
        starts: bool,
        ends: bool,
    ) -> Result<(), Refusal> {
        let qp = self.qp_at(index);
        if !qp.resp.continues_message(info.operation, starts) {
            return Err(Refusal::InvalidRequest);
        }
        let carries_data = matches!(
            info.operation,
            Operation::Send
                | Operation::SendWithImmediate
                | Operation::RdmaWrite
                | Operation::RdmaWriteWithImmediate
        );
        if carries_data && (len > qp.attrs.mtu || (!ends && len != qp.attrs.mtu)) {
            return Err(Refusal::InvalidRequest);
        }
        let needs = match info.operation {
            Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => Access::REMOTE_WRITE,
            Operation::RdmaReadRequest => Access::REMOTE_READ,
            Operation::CompareSwap | Operation::FetchAdd => Access::REMOTE_ATOMIC,
            _ => Access::NONE,
        };
        if !qp.attrs.access.contains(needs) {
            return Err(Refusal::InvalidRequest);
        }
        Ok(())
    }

    /// A SEND packet: the first takes a receive (or is answered RNR), each is placed where
    /// the receive's buffers say, the last completes the receive.
    #[inline(always)]
    fn execute_send(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        payload: Payload<'_>,
        starts: bool,
        ends: bool,
    ) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let imm = headers.ext.imm_dt;
        let len = payload.len();
        let qp = self.qp_mut(index);
        let pd = qp.pd;
        if starts {
            let Some(wqe) = qp.resp.rq.pop_front() else {
                return self.rnr(index, bth.psn);
            };
            qp.resp.in_progress = Some(InProgress::Send { wqe, received: 0 });
        }
        let Some(InProgress::Send { wqe, received }) = qp.resp.in_progress else {
            unreachable!("checked by the opcode sequence")
        };
        if received + len > wqe.len {
            self.finish_recv(index, wqe, 0, None, WcStatus::LocalLengthError);
            return Err(Refusal::InvalidRequest);
        }
        if self.place(pd, &wqe, received, payload).is_err() {
            self.finish_recv(index, wqe, 0, None, WcStatus::LocalProtectionError);
            return Err(Refusal::RemoteOperational);
        }
        let received = received + len;
        let qp = self.qp_mut(index);
        qp.resp.in_progress = Some(InProgress::Send { wqe, received });
        if ends {
            qp.resp.in_progress = None;
            self.finish_recv(index, wqe, received, imm, WcStatus::Success);
            self.message_done(index);
        }
        let ack_every = self.config.ack_every_packets;
        self.qp_mut(index)
            .resp
            .took_request(headers.bth.ack_req, ack_every);
        Ok(())
    }

    /// A WRITE packet: the first checks the RETH's region, each is written in place, the
    /// last with immediate data takes a receive (or is answered RNR) and completes it.
    #[inline(always)]
    fn execute_write(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        payload: Payload<'_>,
        starts: bool,
        ends: bool,
    ) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let imm = headers.ext.imm_dt;
        let len = payload.len();
        let pd = self.qp_at(index).pd;
        if starts {
            let reth = headers.ext.reth.ok_or(Refusal::InvalidRequest)?;
            self.remote(
                pd,
                reth.rkey,
                reth.va,
                u64::from(reth.dma_len),
                Access::REMOTE_WRITE,
            )?;
            let qp = self.qp_mut(index);
            qp.resp.in_progress = Some(InProgress::Write {
                rkey: reth.rkey,
                va: reth.va,
                remaining: reth.dma_len,
                total: reth.dma_len,
            });
        }
        let qp = self.qp_mut(index);
        let Some(InProgress::Write {
            rkey,
            va,
            remaining,
            total,
        }) = qp.resp.in_progress
        else {
            unreachable!("checked by the opcode sequence")
        };
        if len > remaining || (ends && len != remaining) {
            return Err(Refusal::InvalidRequest);
        }
        // WRITE with immediate consumes a receive: make sure one is there first.
        let imm_wqe = if ends && imm.is_some() {
            match qp.resp.rq.front() {
                Some(_) => qp.resp.rq.pop_front(),
                None => {
                    // Not taken: a WRITE ONLY begins nothing, so that its retry
                    // starts the message afresh.
                    if starts {
                        qp.resp.in_progress = None;
                    }
                    return self.rnr(index, bth.psn);
                }
            }
        } else {
            None
        };
        if let Payload::Bytes(bytes) = payload {
            self.mrs.write(rkey, va, bytes);
        }
        let qp = self.qp_mut(index);
        qp.resp.in_progress = Some(InProgress::Write {
            rkey,
            va: va + u64::from(len),
            remaining: remaining - len,
            total,
        });
        if ends {
            qp.resp.in_progress = None;
            if let Some(wqe) = imm_wqe {
                self.finish_recv_with(
                    index,
                    wqe,
                    total,
                    imm,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                );
            }
            self.message_done(index);
        }
        let ack_every = self.config.ack_every_packets;
        self.qp_mut(index)
            .resp
            .took_request(headers.bth.ack_req, ack_every);
        Ok(())
    }

    /// A READ request: checked and queued; its responses go out in turn.
    fn execute_read(&mut self, index: u32, headers: &RoceHeaders) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let qp = self.qp_at(index);
        let (pd, mtu) = (qp.pd, qp.attrs.mtu);
        let reth = headers.ext.reth.ok_or(Refusal::InvalidRequest)?;
        self.remote(
            pd,
            reth.rkey,
            reth.va,
            u64::from(reth.dma_len),
            Access::REMOTE_READ,
        )?;
        if !self
            .qp_at(index)
            .resp
            .room_for_new_request(self.qp_at(index).attrs.max_dest_rd_atomic)
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
            index,
            response,
            ResponderResource {
                first_psn: bth.psn,
                span,
                atomic_original: None,
            },
        );
        Ok(())
    }

    /// An atomic: checked, carried out once on the 8 bytes it names, its original value
    /// kept to answer a duplicate.
    fn execute_atomic(
        &mut self,
        index: u32,
        headers: &RoceHeaders,
        operation: Operation,
    ) -> Result<(), Refusal> {
        let bth = &headers.bth;
        let pd = self.qp_at(index).pd;
        let a = headers.ext.atomic_eth.ok_or(Refusal::InvalidRequest)?;
        if a.va % 8 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        self.remote(pd, a.rkey, a.va, 8, Access::REMOTE_ATOMIC)?;
        if !self
            .qp_at(index)
            .resp
            .room_for_new_request(self.qp_at(index).attrs.max_dest_rd_atomic)
        {
            return Err(Refusal::InvalidRequest);
        }
        let mut old = [0u8; 8];
        self.mrs.read(a.rkey, a.va, &mut old);
        let original = u64::from_le_bytes(old);
        let new = if operation == Operation::FetchAdd {
            Some(original.wrapping_add(a.swap_add))
        } else {
            (original == a.compare).then_some(a.swap_add)
        };
        if let Some(new) = new {
            self.mrs.write(a.rkey, a.va, &new.to_le_bytes());
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
        self.accept_rd_atomic(index, response, resource);
        Ok(())
    }

    /// Checks that the region of `key` grants `need` over `[va, va + len)` in `pd`; a
    /// refusal is a remote access error.
    fn remote(
        &self,
        pd: crate::PdId,
        key: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(), Refusal> {
        self.mrs
            .check(key, pd, va, len, need)
            .map_err(|_| Refusal::RemoteAccess)
    }

    /// Takes a READ or atomic (already checked and, for an atomic, executed): its response
    /// is owed in PSN order, the request is kept to answer duplicates, and the expected PSN
    /// moves past the PSNs it occupies. The caller checked that there is room for it.
    fn accept_rd_atomic(&mut self, index: u32, response: Response, resource: ResponderResource) {
        let qp = self.qp_mut(index);
        qp.resp.responses.push_back(response);
        self.keep_resource(index, resource);
        let qp = self.qp_mut(index);
        qp.resp.epsn = qp.resp.epsn.add(resource.span);
        qp.resp.msn = (qp.resp.msn + 1) & 0xFF_FFFF;
        qp.resp.nak_sent = false;
    }

    /// Receive-not-ready: no receive is posted. The request is dropped and the requester
    /// told to wait and resend.
    fn rnr(&mut self, index: u32, psn: Psn) -> Result<(), Refusal> {
        let qp = self.qp_mut(index);
        let timer = RnrTimer::from_code(qp.attrs.min_rnr_timer).expect("validated at RTR");
        if self.owe(
            index,
            Response::Nak {
                psn,
                syndrome: Syndrome::RnrNak(timer),
            },
        ) {
            self.counters.naks_sent_rnr += 1;
        }
        Ok(())
    }

    /// Queues a NAK, unless the room for NAKs and replays is full (the queue of owed
    /// responses holds answers to at most `max_dest_rd_atomic` new requests plus
    /// `EXTRA_SLOTS` others): then the NAK is dropped and counted, and the requester's timer
    /// recovers. False if dropped.
    fn owe(&mut self, index: u32, nak: Response) -> bool {
        let qp = self.qp_mut(index);
        if !qp.resp.room_for_extra() {
            self.counters.naks_dropped += 1;
            return false;
        }
        qp.resp.responses.push_back(nak);
        true
    }

    /// A request the responder will not carry out: NAK it, and (as for every class of
    /// responder error but RNR and sequence errors) move the queue pair to the error state.
    fn refuse(&mut self, index: u32, psn: Psn, refusal: Refusal) {
        let code = match refusal {
            Refusal::InvalidRequest => {
                self.counters.naks_sent_invalid_request += 1;
                NakCode::InvalidRequest
            }
            Refusal::RemoteAccess => {
                self.counters.naks_sent_remote_access += 1;
                NakCode::RemoteAccessError
            }
            Refusal::RemoteOperational => {
                self.counters.naks_sent_remote_operational += 1;
                NakCode::RemoteOperationalError
            }
        };
        let qp = self.qp_mut(index);
        qp.resp.responses.push_back(Response::Nak {
            psn,
            syndrome: Syndrome::Nak(code),
        });
        if qp.state != QpState::Error {
            self.enter_error(index);
        }
    }

    /// Copies a SEND's payload into a receive request's buffers at `offset`.
    fn place(
        &mut self,
        pd: crate::PdId,
        wqe: &RecvWqe,
        offset: u32,
        payload: Payload<'_>,
    ) -> Result<(), ()> {
        let bytes = match payload {
            Payload::Bytes(b) => Some(b),
            Payload::Len(_) => None,
        };
        self.mrs
            .scatter(pd, &wqe.sgl, offset, payload.len(), bytes)
            .map_err(|_| ())
    }

    fn finish_recv(
        &mut self,
        index: u32,
        wqe: RecvWqe,
        byte_len: u32,
        imm: Option<u32>,
        status: WcStatus,
    ) {
        self.finish_recv_with(index, wqe, byte_len, imm, status, WcOpcode::Recv);
    }

    fn finish_recv_with(
        &mut self,
        index: u32,
        wqe: RecvWqe,
        byte_len: u32,
        imm: Option<u32>,
        status: WcStatus,
        opcode: WcOpcode,
    ) {
        let qp = self.qp_mut(index);
        let (num, cq) = (qp.num, qp.recv_cq);
        let byte_len = if status == WcStatus::Success {
            byte_len
        } else {
            0
        };
        self.complete(
            index,
            cq,
            Completion {
                wr_id: wqe.wr_id,
                status,
                opcode,
                qp: num,
                byte_len,
                imm,
            },
        );
    }

    fn message_done(&mut self, index: u32) {
        let qp = self.qp_mut(index);
        qp.resp.msn = (qp.resp.msn + 1) & 0xFF_FFFF;
    }

    /// Keeps a READ or atomic to answer its duplicates, forgetting the oldest beyond the bound.
    fn keep_resource(&mut self, index: u32, resource: ResponderResource) {
        let qp = self.qp_mut(index);
        let bound = usize::from(qp.attrs.max_dest_rd_atomic).max(1);
        while qp.resp.resources.len() >= bound {
            qp.resp.resources.pop_front();
        }
        qp.resp.resources.push_back(resource);
    }

    /// A request with a PSN already passed: re-acknowledge SENDs and WRITEs, serve a READ
    /// again, resend an atomic's saved result. Nothing is executed twice.
    fn on_duplicate(&mut self, index: u32, headers: &RoceHeaders, info: &OpcodeInfo) {
        let psn = headers.bth.psn;
        let qp = self.qp_mut(index);
        let pd = qp.pd;
        match info.operation {
            Operation::RdmaReadRequest => {
                let Some(reth) = headers.ext.reth else { return };
                if !qp.resp.read_was_taken(psn) || !qp.resp.room_for_extra() {
                    return;
                }
                if self
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
                let qp = self.qp_mut(index);
                qp.resp.responses.push_back(Response::Read {
                    psn,
                    rkey: reth.rkey,
                    va: reth.va,
                    remaining: reth.dma_len,
                    first: true,
                    replay: true,
                });
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let saved = qp.resp.atomic_result(psn);
                if let Some(original) = saved.filter(|_| qp.resp.room_for_extra()) {
                    qp.resp.responses.push_back(Response::AtomicAck {
                        psn,
                        original,
                        replay: true,
                    });
                }
            }
            _ => qp.resp.ack_due = true,
        }
    }

    /// A CNP the control law asked for (before anything else), or a grant it made, for
    /// queue pair `index`: not sequenced, no payload, never a CC extension header. A grant
    /// that rides the credit CCX instead makes an ACK due to carry it.
    #[inline(always)]
    fn control_packet(
        &mut self,
        index: u32,
        dst: std::net::IpAddr,
        dest_qp: u32,
    ) -> Option<Transmit> {
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
        };
        let qp = self.qp_mut(index);
        if qp.cnp_due {
            // The control law's congestion notification goes before anything else.
            qp.cnp_due = false;
            if qp.state != QpState::Error {
                let mut bth = Bth::new(Opcode::CNP, dest_qp, Psn::new(0));
                bth.becn = true;
                self.counters.cnps_sent += 1;
                let port = self.source_port(index, bth.psn, bth.opcode);
                return Some(unsequenced(port, bth, ExtHeaders::default()));
            }
        }
        if qp.resp.grant_due > 0 {
            let more = std::mem::take(&mut qp.resp.grant_due);
            let by_ccx = qp.attrs.ccx == Some(sluice_wire::CcxLayout::Credit);
            if qp.state == QpState::Error || !(by_ccx || qp.attrs.cc_control) {
                self.counters.grants_unsent += 1;
            } else {
                let total = qp.granted_total.wrapping_add(more);
                qp.granted_total = total;
                // With the credit CCX the total rides in whatever goes to the peer next;
                // with nothing else owed, an ACK of what was received carries it (to the
                // requester, an ACK it already had: it only counts it as stale).
                if by_ccx && qp.resp.responses.is_empty() {
                    qp.resp.ack_due = true;
                }
                self.counters.grants_sent += 1;
                if !by_ccx {
                    let bth = Bth::new(Opcode::RC_CC_CONTROL, dest_qp, Psn::new(0));
                    let ext = ExtHeaders {
                        cc_control: Some(sluice_wire::CcControl {
                            kind: sluice_wire::CcControlKind::CreditTotal,
                            value: total,
                        }),
                        ..ExtHeaders::default()
                    };
                    let port = self.source_port(index, bth.psn, bth.opcode);
                    return Some(unsequenced(port, bth, ext));
                }
            }
        }
        None
    }

    /// The next response of queue pair `index`: owed READ responses, atomic ACKs and NAKs in
    /// PSN order, then a coalesced ACK of everything received. A READ response's payload is
    /// read in place from the region ([`PayloadAt::Region`]); no other response has one.
    pub(crate) fn next_response_packet(
        &mut self,
        index: u32,
        now: crate::Instant,
        payload: &mut [u8],
    ) -> Option<Transmit> {
        let qp = self.qp_mut(index);
        // Most visits (a requester's turn) owe nothing: decide that from the flags alone,
        // before reading the fields a response is built from (other cache lines).
        if !qp.owes_peer() {
            return None;
        }
        let dst = qp.attrs.peer?;
        let dest_qp = qp.attrs.dest_qpn;
        let mtu = qp.attrs.mtu;
        let msn = qp.resp.msn;
        let pd = qp.pd;
        let ack = |syndrome| Aeth { syndrome, msn };
        let ok = ack(Syndrome::Ack(Credits::UNLIMITED));
        if (qp.cnp_due || qp.resp.grant_due > 0)
            && let Some(t) = self.control_packet(index, dst, dest_qp)
        {
            return Some(t);
        }
        let qp = self.qp_mut(index);
        if qp.state == QpState::Error
            && !matches!(qp.resp.responses.front(), Some(Response::Nak { .. }))
        {
            return None;
        }
        let (bth, ext, payload_len, payload_at) = match qp.resp.responses.front_mut() {
            Some(Response::Read {
                psn,
                rkey,
                va,
                remaining,
                first,
                ..
            }) => {
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
                    qp.resp.responses.pop_front();
                }
                // The region was checked when the READ arrived; if it was deregistered since,
                // the data cannot be had: answer with a remote access NAK instead.
                if self
                    .mrs
                    .check(key, pd, at, u64::from(len), Access::REMOTE_READ)
                    .is_err()
                {
                    let qp = self.qp_mut(index);
                    qp.resp.responses.clear();
                    self.refuse(index, bth.psn, Refusal::RemoteAccess);
                    return self.next_response_packet(index, now, payload);
                }
                let mut payload_at = PayloadAt::Region { key, addr: at };
                if self.qp_at(index).attrs.services
                    && let Some(crate::Payload::Bytes(bytes)) = self.mrs.slice(key, at, len)
                {
                    // Services see the payload in the buffer it leaves from.
                    payload[..len as usize].copy_from_slice(bytes);
                    payload_at = PayloadAt::Buffer;
                }
                (bth, ext, len, payload_at)
            }
            Some(&mut Response::AtomicAck { psn, original, .. }) => {
                qp.resp.responses.pop_front();
                let ext = ExtHeaders {
                    aeth: Some(ok),
                    atomic_ack_eth: Some(AtomicAckEth { original }),
                    ..ExtHeaders::default()
                };
                (
                    Bth::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, dest_qp, psn),
                    ext,
                    0,
                    PayloadAt::Buffer,
                )
            }
            Some(&mut Response::Nak { psn, syndrome }) => {
                qp.resp.responses.pop_front();
                let ext = ExtHeaders {
                    aeth: Some(ack(syndrome)),
                    ..ExtHeaders::default()
                };
                (
                    Bth::new(Opcode::RC_ACKNOWLEDGE, dest_qp, psn),
                    ext,
                    0,
                    PayloadAt::Buffer,
                )
            }
            None if qp.resp.ack_due => {
                qp.resp.ack_sent();
                let ext = ExtHeaders {
                    aeth: Some(ok),
                    ..ExtHeaders::default()
                };
                (
                    Bth::new(Opcode::RC_ACKNOWLEDGE, dest_qp, qp.resp.epsn.sub(1)),
                    ext,
                    0,
                    PayloadAt::Buffer,
                )
            }
            None => return None,
        };
        let ccx = self.qp_mut(index).ccx_out(now, true);
        let src_port = self.source_port(index, bth.psn, bth.opcode);
        Some(Transmit {
            dst,
            src_port,
            headers: RoceHeaders { bth, ccx, ext },
            payload_len,
            payload_at,
        })
    }
}
