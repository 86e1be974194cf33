//! The requester half of a queue pair: cuts work requests into packets, tracks what is
//! unacknowledged, and recovers losses by going back to the first missing PSN (go-back-N),
//! with the retransmit timer, the retry and RNR-retry counts, and READ re-requests.

use crate::held_ranges::Insert;
use sluice_wire::{
    AtomicEth, Bth, ExtHeaders, NakCode, Opcode, OpcodeInfo, Position, Psn, Reth, RoceHeaders,
    Syndrome,
};

use crate::Instant;
use crate::cq::{Completion, WcStatus};
use crate::engine::Nic;
use crate::engine::{Payload, PayloadAt, Transmit, send_opcode};
use crate::qp::{Qp, QpState, ReadRepair, SendOp};

/// The opcode of a SEND or WRITE packet by its place in the message.
fn data_opcode(op: SendOp, first: bool, last: bool) -> Opcode {
    use Opcode as O;
    let imm = matches!(op, SendOp::SendWithImm(_) | SendOp::WriteWithImm { .. });
    let write = matches!(op, SendOp::Write { .. } | SendOp::WriteWithImm { .. });
    match (write, first, last, imm) {
        (false, true, true, false) => O::RC_SEND_ONLY,
        (false, true, true, true) => O::RC_SEND_ONLY_WITH_IMMEDIATE,
        (false, true, false, _) => O::RC_SEND_FIRST,
        (false, false, false, _) => O::RC_SEND_MIDDLE,
        (false, false, true, false) => O::RC_SEND_LAST,
        (false, false, true, true) => O::RC_SEND_LAST_WITH_IMMEDIATE,
        (true, true, true, false) => O::RC_RDMA_WRITE_ONLY,
        (true, true, true, true) => O::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (true, true, false, _) => O::RC_RDMA_WRITE_FIRST,
        (true, false, false, _) => O::RC_RDMA_WRITE_MIDDLE,
        (true, false, true, false) => O::RC_RDMA_WRITE_LAST,
        (true, false, true, true) => O::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    }
}

/// The opcode and AtomicETH of an atomic request.
fn atomic_request(op: SendOp) -> (Opcode, Option<AtomicEth>) {
    let (opcode, va, rkey, swap_add, compare) = match op {
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => (Opcode::RC_COMPARE_SWAP, remote_addr, rkey, swap, compare),
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => (Opcode::RC_FETCH_ADD, remote_addr, rkey, add, 0),
        _ => unreachable!("only atomics are passed here"),
    };
    (
        opcode,
        Some(AtomicEth {
            va,
            rkey,
            swap_add,
            compare,
        }),
    )
}

/// Response packets a READ of `len` bytes takes at this MTU (a zero-length READ takes one).
pub(crate) fn read_span(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// A request packet's headers and where it stands in the sequence.
#[derive(Debug, Clone, Copy)]
struct RequestPacket {
    psn: Psn,
    bth: Bth,
    ext: ExtHeaders,
    /// Its payload: `payload_len` bytes from `offset` of its work request.
    offset: u32,
    payload_len: u32,
    /// PSNs it takes (a READ request, one per response packet).
    advance: u32,
    retransmission: bool,
}

/// Builds the request packet at `cursor` of `qp` (begun) and moves the cursor past it.
#[inline(always)]
fn request_headers(
    qp: &mut crate::qp::Qp,
    cursor: usize,
    window: u32,
    ack_every: u32,
    read_until: Option<Psn>,
) -> RequestPacket {
    let mtu = qp.attrs.mtu;
    let req = &mut qp.req;
    let wqe = &req.sq[cursor];
    // A READ (re-)request asks for what is still missing, at the PSN of the first
    // missing response; responses that arrived since the cursor was placed count.
    let psn = match wqe.op {
        SendOp::Read { .. } => wqe.first_psn.add(wqe.read_done / mtu),
        SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => wqe.first_psn,
        _ => req.next_psn,
    };
    let retransmission = psn.precedes(req.max_sent);
    let offset = req.cursor_offset;
    let mut bth = Bth::new(Opcode::RC_SEND_ONLY, qp.attrs.dest_qpn, psn);
    let mut ext = ExtHeaders::default();
    let mut payload_len = 0;
    let advance;
    match wqe.op {
        SendOp::Read { remote_addr, rkey } => {
            // A first request, or a re-request of what is still missing (with selective
            // repeat, of a gap only: up to PSN `read_until`).
            let end = read_until
                .map(|u| i64::from(wqe.first_psn.distance_to(u)) * i64::from(mtu))
                .filter(|&e| e > i64::from(wqe.read_done) && e < i64::from(wqe.len))
                .map_or(wqe.len, |e| e as u32);
            let remaining = end - wqe.read_done;
            bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
            ext.reth = Some(Reth {
                va: remote_addr + u64::from(wqe.read_done),
                rkey,
                dma_len: remaining,
            });
            advance = read_span(remaining, mtu);
            req.cursor += 1;
            req.cursor_offset = 0;
        }
        op @ (SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }) => {
            (bth.opcode, ext.atomic_eth) = atomic_request(op);
            advance = 1;
            req.cursor += 1;
        }
        op => {
            let len = (wqe.len - offset).min(mtu);
            let first = offset == 0;
            let last = offset + len == wqe.len;
            bth.opcode = data_opcode(op, first, last);
            if let (
                true,
                SendOp::Write { remote_addr, rkey }
                | SendOp::WriteWithImm {
                    remote_addr, rkey, ..
                },
            ) = (first, op)
            {
                ext.reth = Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: wqe.len,
                });
            }
            if last {
                ext.imm_dt = match op {
                    SendOp::SendWithImm(imm) | SendOp::WriteWithImm { imm, .. } => Some(imm),
                    _ => None,
                };
                bth.solicited = wqe.solicited;
            }
            // Ask for an ACK at the end of a message, every `ack_every` packets, and when
            // this packet fills the window (or the sender would wait for the timer). A
            // small window (a control law's) is asked about twice per window, so that its
            // first half is confirmed while the second is on the way and the window
            // slides instead of going stop-and-go one round trip per window.
            let every = ack_every.min((window / 2).max(1));
            let fills_window = req.una.distance_to(psn) as u32 + 1 >= window;
            bth.ack_req = last || psn.value() % every == 0 || fills_window;
            payload_len = len;
            advance = 1;
            if last {
                req.cursor += 1;
                req.cursor_offset = 0;
            } else {
                req.cursor_offset += len;
            }
        }
    }
    RequestPacket {
        psn,
        bth,
        ext,
        offset,
        payload_len,
        advance,
        retransmission,
    }
}

impl Qp {
    /// The next request packet, if the window, fences and limits allow.
    #[inline(always)]
    pub(crate) fn next_request_packet(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        payload: &mut [u8],
    ) -> Option<Transmit> {
        let ack_every = nic.config.ack_request_every.max(1);
        let configured_window = nic.config.max_outstanding_packets;
        let line_rate_bps = nic.config.line_rate_bps;
        if !self.state.sending() || self.req.rnr_wait_until.is_some() {
            return None;
        }
        if !self.control_started && self.req.cursor < self.req.sq.len() {
            self.control_started = true;
            let mtu = self.attrs.mtu;
            nic.emit(
                self,
                now,
                crate::control::Event::Start { mtu, line_rate_bps },
            );
        }
        let window = self.window_packets(configured_window);
        if self.req.cursor < self.req.sq.len() {
            let due = self.next_send_at();
            if due > now {
                // Paced: come back when the next packet may go.
                nic.arm(self, due);
                return None;
            }
        }
        if let Some(transmit) = self.resend_packet(nic, now, payload, window, ack_every) {
            return Some(transmit);
        }
        self.packet_at_cursor(nic, now, payload, window, ack_every, None)
    }

    /// The window in packets: the control law's in bytes, enforced in whole packets of
    /// the path MTU, else the engine's; never past what the responder's tracker can hold
    /// (`window_cap_shift`: IRN's BDP flow control).
    #[inline(always)]
    fn window_packets(&self, configured: u32) -> u32 {
        self.knobs
            .window_bytes
            .map_or(configured, |b| {
                b.div_ceil(u64::from(self.attrs.mtu))
                    .min(u64::from(u32::MAX)) as u32
            })
            // `clamp` with this bound, not a constant, asserts min <= max on every packet;
            // the bound is at least 1 (the shift is at most 23).
            .min(crate::qp::MAX_WINDOW >> self.req.window_cap_shift)
            .max(1)
    }

    /// Selective repeat: a NAK'd PSN goes first, alone; the cursor stays where it was.
    #[inline(always)]
    fn resend_packet(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        payload: &mut [u8],
        window: u32,
        ack_every: u32,
    ) -> Option<Transmit> {
        while let Some(p) = self.next_resend() {
            let req = &self.req;
            let d = req.una.distance_to(p);
            if d < 0 || d >= req.una.distance_to(req.max_sent) {
                continue; // confirmed meanwhile
            }
            let saved = (req.cursor, req.cursor_offset, req.next_psn);
            // A READ gap asked for again stops where the responses held begin.
            let read_until = req
                .read_repair
                .as_deref()
                .and_then(|r| r.asked)
                .filter(|&(from, _)| from == p)
                .map(|(_, until)| until);
            self.rewind(p);
            let transmit = self.packet_at_cursor(nic, now, payload, window, ack_every, read_until);
            if self.state.sending() {
                (self.req.cursor, self.req.cursor_offset, self.req.next_psn) = saved;
            }
            if transmit.is_some() {
                return transmit;
            }
        }
        None
    }

    /// The request packet at the cursor, if the window and limits allow; moves the cursor on.
    /// Its phases: begin the request at the cursor (if it is new), ask the control law's
    /// gate, build the headers, find the payload, record what was sent.
    fn packet_at_cursor(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        payload: &mut [u8],
        window: u32,
        ack_every: u32,
        read_until: Option<Psn>,
    ) -> Option<Transmit> {
        let req = &self.req;
        if req.window_full(window) || req.cursor >= req.sq.len() {
            return None;
        }
        let cursor = req.cursor;
        if !self.begin_request(cursor) {
            return None;
        }
        if !self.gate_allows(nic, now, cursor) {
            return None;
        }
        let packet = request_headers(self, cursor, window, ack_every, read_until);
        let payload_at = if packet.payload_len > 0 {
            match self.gather_request_payload(nic, cursor, &packet, payload) {
                Ok(at) => at,
                Err(()) => {
                    self.fail_request(nic, cursor, WcStatus::LocalProtectionError);
                    return None;
                }
            }
        } else {
            PayloadAt::Buffer
        };
        Some(self.record_sent(nic, now, cursor, &packet, payload_at))
    }

    /// Begins the request at `cursor` if it has not begun: gives it its PSNs, unless the
    /// queue pair is draining or a fence or the READ/atomic limit holds it back (false).
    #[inline(always)]
    fn begin_request(&mut self, cursor: usize) -> bool {
        let mtu = self.attrs.mtu;
        let req = &mut self.req;
        if !req.sq[cursor].started {
            if self.state == QpState::Sqd {
                return false; // draining: begin nothing new
            }
            let wqe = &req.sq[cursor];
            // Every READ and atomic not yet completed counts, answered or not: behind an
            // unanswered one (its response lost), the answered ones cannot complete, and
            // the responder keeps only the last `max_dest_rd_atomic` atomic results to
            // answer a resent request with; more started meanwhile would push out the
            // result the resend needs. Counted only for a request they can hold back, and
            // only as far as the limit: a pass over every work request before the cursor
            // (up to the TX depth) was a sizeable part of starting each small WRITE.
            if wqe.fence || wqe.op.is_read_or_atomic() {
                let enough = usize::from(self.attrs.max_rd_atomic).max(1);
                let pending_rd_atomic = req
                    .sq
                    .iter()
                    .take(cursor)
                    .filter(|w| w.op.is_read_or_atomic())
                    .take(enough)
                    .count();
                if wqe.fence && pending_rd_atomic > 0 {
                    return false;
                }
                if wqe.op.is_read_or_atomic()
                    && pending_rd_atomic >= usize::from(self.attrs.max_rd_atomic)
                {
                    return false;
                }
            }
            let span = match wqe.op {
                SendOp::Read { .. } => {
                    // Begun in order: the oldest waiting READ, unless one is waiting already.
                    req.oldest_read.started(cursor);
                    read_span(wqe.len, mtu)
                }
                SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
                _ => wqe.len.div_ceil(mtu).max(1),
            };
            let wqe = &mut req.sq[cursor];
            wqe.first_psn = req.next_psn;
            wqe.span = span;
            wqe.started = true;
        }
        true
    }

    /// The control law's TX function (SwCC): may a new packet go now? Resent packets are
    /// not asked: the credit a lost packet used is gone, and recovery must not wait for
    /// credit that can never come.
    #[inline(always)]
    fn gate_allows(&mut self, nic: &mut Nic, now: Instant, cursor: usize) -> bool {
        let req = &self.req;
        let fresh = !req.next_psn.precedes(req.max_sent);
        if !fresh || !nic.gates() {
            return true;
        }
        let wqe = &self.req.sq[cursor];
        let pos = if wqe.op.is_read_or_atomic() {
            crate::control::MessagePos {
                id: wqe.first_psn.value(),
                ..Default::default()
            }
        } else {
            crate::control::MessagePos {
                id: wqe.first_psn.value(),
                len: wqe.len,
                offset: self.req.cursor_offset,
                bytes: (wqe.len - self.req.cursor_offset).min(self.attrs.mtu),
            }
        };
        match nic.gate(self, now, &pos) {
            crate::control::Gate::Send => true,
            crate::control::Gate::Hold => false,
            crate::control::Gate::SendAt(level) => {
                self.priorities.request = crate::Priority::level(level);
                true
            }
        }
    }

    /// Finds the payload of `packet`: inline data (copied into the buffer: the work request
    /// may be retired before the packet leaves) or the local buffers (checked at post time;
    /// a region deregistered since then fails the request: `Err`).
    #[inline(always)]
    fn gather_request_payload(
        &self,
        nic: &Nic,
        cursor: usize,
        packet: &RequestPacket,
        payload: &mut [u8],
    ) -> Result<PayloadAt, ()> {
        let (offset, payload_len) = (packet.offset, packet.payload_len);
        // The list is borrowed, not copied: a one-entry list is read from the work
        // request's second cache line only.
        let wqe = &self.req.sq[cursor];
        let dst = &mut payload[..payload_len as usize];
        match &wqe.inline {
            Some(data) => {
                dst.copy_from_slice(&data[offset as usize..(offset + payload_len) as usize]);
                Ok(PayloadAt::Buffer)
            }
            // Left in place even for services: an in-line stage reads it from the region and
            // writes what goes into the buffer (`Engine::serve_outgoing`).
            None => nic
                .mrs
                .gather(self.pd, &wqe.sgl, offset, dst, true)
                .map_err(|_| ()),
        }
    }

    /// Where `packet` (of the work request at `cursor`) lies in its message, for the law.
    #[inline]
    fn message_pos(&self, cursor: usize, packet: &RequestPacket) -> crate::control::MessagePos {
        let wqe = &self.req.sq[cursor];
        let carries = !wqe.op.is_read_or_atomic();
        crate::control::MessagePos {
            id: wqe.first_psn.value(),
            len: if carries { wqe.len } else { 0 },
            offset: if carries { packet.offset } else { 0 },
            bytes: packet.payload_len,
        }
    }

    /// Records that `packet` leaves now: the sequence moves on, the retransmit timer runs,
    /// pacing takes the packet's time on the wire, an RTT sample may start, the control
    /// law hears of it; returns the packet to send.
    #[inline(always)]
    fn record_sent(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        cursor: usize,
        packet: &RequestPacket,
        payload_at: PayloadAt,
    ) -> Transmit {
        let RequestPacket {
            psn,
            bth,
            ext,
            payload_len,
            advance,
            retransmission,
            ..
        } = *packet;
        let req = &mut self.req;
        req.next_psn = psn.add(advance);
        if req.max_sent.precedes(req.next_psn) {
            req.max_sent = req.next_psn;
        }
        let dst = self.attrs.peer.expect("an RTS queue pair has a peer");
        let mut qp_ccx = self.ccx_out(now, false);
        if qp_ccx.is_some() {
            let pos = self.message_pos(cursor, packet);
            nic.stamp_request(self, now, &pos, &mut qp_ccx);
        }
        let timeout = Nic::retransmit_timeout(self.attrs.timeout);
        let arm_at = match (self.req.deadline, timeout) {
            (None, Some(t)) => {
                self.req.deadline = Some(now + t);
                Some(now + t)
            }
            _ => None,
        };
        if self.knobs.rate_bps.is_some_and(|r| r > 0) {
            // What the packet takes of a link, framing included (the simulator's links count
            // the same), so that a law's rate is a rate on the wire.
            let headers = RoceHeaders {
                bth,
                ccx: qp_ccx,
                ext,
            };
            let wire = headers
                .link_len(dst.is_ipv6(), payload_len as usize)
                .expect("the requester builds known opcodes") as u64;
            self.paced = (self.next_send_at().max(now), wire * 8);
        }
        // Time a packet that asks for an ACK: its sample is one round trip, not the time
        // the rest of its message took to leave.
        let answered =
            bth.ack_req || bth.opcode == Opcode::RC_RDMA_READ_REQUEST || ext.atomic_eth.is_some();
        if !retransmission && answered && self.req.rtt_probe_sent.is_none() {
            (self.req.rtt_probe_psn, self.req.rtt_probe_sent) = (psn, Some(now));
        }
        if let Some(at) = arm_at {
            nic.arm(self, at);
        }
        if retransmission {
            nic.counters.retransmitted_packets += 1;
        }
        nic.tx_opcode = bth.opcode.0;
        nic.emit(
            self,
            now,
            crate::control::Event::Tx {
                psn,
                bytes: payload_len,
                retransmission,
            },
        );
        let src_port = nic.source_port(self, psn, bth.opcode);
        Transmit {
            dst,
            src_port,
            headers: RoceHeaders {
                bth,
                ccx: qp_ccx,
                ext,
            },
            payload_len,
            payload_at,
            priority: self.priorities.request,
        }
    }

    /// An ACK, NAK, READ response or atomic ACK from the peer.
    pub(crate) fn on_response(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) {
        let psn = headers.bth.psn;
        let req = &self.req;
        // A response must be for a PSN sent and not yet acknowledged.
        let d = req.una.distance_to(psn);
        if d < 0 || d >= req.una.distance_to(req.max_sent) {
            nic.counters.stale_responses += 1;
            return;
        }
        match info.operation {
            sluice_wire::Operation::RdmaReadResponse => {
                self.on_read_response(nic, now, headers, info, payload)
            }
            sluice_wire::Operation::AtomicAcknowledge => {
                let original = headers.ext.atomic_ack_eth.map(|a| a.original);
                self.on_atomic_ack(nic, now, psn, original)
            }
            _ => match headers.ext.aeth.map(|a| a.syndrome) {
                Some(Syndrome::Ack(_)) => self.on_ack(nic, now, psn),
                Some(Syndrome::Nak(code)) => self.on_nak(nic, now, psn, code),
                Some(Syndrome::RnrNak(timer)) => self.on_rnr_nak(nic, now, psn, timer.as_nanos()),
                None => nic.counters.drops_unexpected_opcode += 1,
            },
        }
    }

    /// Everything up to and including `psn` is acknowledged.
    fn on_ack(&mut self, nic: &mut Nic, now: Instant, psn: Psn) {
        let advanced = self.confirm(nic, now, psn.next());
        self.retire(nic);
        if advanced {
            self.progress(nic, now);
        }
    }

    /// The responder has received (and carried out) every request before `psn`. True if
    /// that is news: the only kind of progress that restores the retry count (a duplicate
    /// ACK or NAK must not, or a request that can never complete would be retried forever).
    fn confirm(&mut self, nic: &mut Nic, now: Instant, psn: Psn) -> bool {
        if !self.req.confirmed.precedes(psn) {
            return false;
        }
        let packets = self.req.confirmed.distance_to(psn) as u32;
        self.req.confirmed = psn;
        let probed = match self.req.rtt_probe_sent {
            Some(sent) if self.req.rtt_probe_psn.precedes(psn) => {
                self.req.rtt_probe_sent = None;
                Some(now - sent)
            }
            _ => None,
        };
        // An echoed send time measures the very transmission that was answered.
        let rtt = nic.echoed_rtt.take().or(probed);
        nic.path_ack(self, now, psn, rtt);
        nic.emit(
            self,
            now,
            crate::control::Event::Ack {
                confirmed: psn,
                packets,
                rtt,
            },
        );
        true
    }

    /// Position in the send queue of the request holding `psn`, if any.
    fn holding(&mut self, psn: Psn) -> Option<usize> {
        self.req.sq.iter().position(|w| {
            let d = w.first_psn.distance_to(psn);
            w.started && d >= 0 && (d as u32) < w.span
        })
    }

    fn on_nak(&mut self, nic: &mut Nic, now: Instant, psn: Psn, code: NakCode) {
        // Every request before the NAK'd PSN was received.
        let advanced = self.confirm(nic, now, psn);
        self.retire(nic);
        match code {
            NakCode::PsnSequenceError => {
                nic.counters.naks_received_sequence += 1;
                nic.emit(
                    self,
                    now,
                    crate::control::Event::Nak {
                        psn,
                        kind: crate::control::NakKind::Sequence,
                    },
                );
                if advanced {
                    self.progress(nic, now);
                } else if !self.use_retry(nic) {
                    return;
                }
                if self.attrs.recovery == crate::Recovery::SelectiveRepeat {
                    // The responder holds what came after: resend just the missing PSN.
                    self.req.queue_resend(psn);
                } else {
                    self.rewind(psn);
                }
            }
            code => {
                nic.counters.naks_received_error += 1;
                nic.emit(
                    self,
                    now,
                    crate::control::Event::Nak {
                        psn,
                        kind: crate::control::NakKind::Fatal,
                    },
                );
                let status = match code {
                    NakCode::InvalidRequest | NakCode::InvalidRdRequest => {
                        WcStatus::RemoteInvalidRequestError
                    }
                    NakCode::RemoteAccessError => WcStatus::RemoteAccessError,
                    _ => WcStatus::RemoteOperationalError,
                };
                let pos = self.holding(psn).unwrap_or(0);
                self.fail_request(nic, pos, status);
            }
        }
    }

    fn on_rnr_nak(&mut self, nic: &mut Nic, now: Instant, psn: Psn, wait_ns: u64) {
        nic.counters.naks_received_rnr += 1;
        nic.emit(
            self,
            now,
            crate::control::Event::Nak {
                psn,
                kind: crate::control::NakKind::ReceiverNotReady,
            },
        );
        self.confirm(nic, now, psn);
        self.retire(nic);
        if self.attrs.rnr_retry != 7 {
            if self.req.rnr_retries_left == 0 {
                let pos = self.holding(psn).unwrap_or(0);
                self.fail_request(nic, pos, WcStatus::RnrRetryExceeded);
                return;
            }
            self.req.rnr_retries_left -= 1;
        }
        self.rewind(psn);
        let until = now + std::time::Duration::from_nanos(wait_ns);
        self.req.rnr_wait_until = Some(until);
        self.req.deadline = None;
        nic.arm(self, until);
    }

    fn on_read_response(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        headers: &RoceHeaders,
        info: &OpcodeInfo,
        payload: Payload<'_>,
    ) {
        let psn = headers.bth.psn;
        let mtu = self.attrs.mtu;
        let selective = self.attrs.recovery == crate::Recovery::SelectiveRepeat;
        // The oldest READ still waiting for data is the only one a response may be for.
        let Some((pos, expected)) = self.oldest_read_expecting() else {
            nic.counters.stale_responses += 1;
            return;
        };
        let wqe = &self.req.sq[pos];
        // The responder took the whole READ request, and every request before it.
        let request_end = wqe.first_psn.add(wqe.span);
        let d = expected.distance_to(psn);
        if d != 0 {
            return self.on_read_response_out_of_order(nic, now, pos, d, payload);
        }
        let remaining = wqe.len - wqe.read_done;
        let len = payload.len();
        let ends = len == remaining;
        // A re-request starts a fresh response stream (FIRST or ONLY) mid-READ, while late
        // packets of the first stream may still arrive: any packet at the expected PSN is
        // data, as long as only the final one claims to end the message. With selective
        // repeat a re-request may cover only a gap, whose last response is a LAST or ONLY
        // short of the end: then only the length is checked.
        let position_ok = match info.position {
            Position::Only | Position::Last => ends || selective,
            Position::First | Position::Middle => !ends,
        };
        if !position_ok || len > remaining || len > mtu || (!ends && len != mtu) {
            self.fail_request(nic, pos, WcStatus::BadResponseError);
            return;
        }
        let (pd, sgl, read_done) = (self.pd, wqe.sgl, wqe.read_done);
        let bytes = match payload {
            Payload::Bytes(b) => Some(b),
            Payload::Len(_) => None,
        };
        if nic.mrs.scatter(pd, &sgl, read_done, len, bytes).is_err() {
            self.fail_request(nic, pos, WcStatus::LocalProtectionError);
            return;
        }
        if self.services && bytes.is_some() {
            nic.landed(self, &sgl, read_done, len);
        }
        self.take_read_data(pos, len);
        self.confirm(nic, now, request_end);
        self.retire(nic);
        self.progress(nic, now);
    }

    /// A response `d` PSNs away from the one the READ at `pos` expects: with selective
    /// repeat, one past a gap is kept; else a gap is asked for again, once per gap; what is
    /// behind, or beyond the READ, is stale.
    fn on_read_response_out_of_order(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        pos: usize,
        d: i32,
        payload: Payload<'_>,
    ) {
        let mtu = self.attrs.mtu;
        let selective = self.attrs.recovery == crate::Recovery::SelectiveRepeat;
        let wqe = &self.req.sq[pos];
        let request_end = wqe.first_psn.add(wqe.span);
        let expected = wqe.first_psn.add(wqe.read_done / mtu);
        if d > 0 && (d as u32) < wqe.span - wqe.read_done / mtu && selective {
            self.on_read_response_ahead(nic, now, pos, d as u32, payload);
        } else if d > 0 && (d as u32) < wqe.span && self.req.read_retry_at != Some(expected) {
            // A response is missing: ask again from it, once per gap.
            self.req.read_retry_at = Some(expected);
            self.confirm(nic, now, request_end);
            self.retire(nic);
            self.rewind(expected);
        } else {
            nic.counters.stale_responses += 1;
        }
    }

    /// `len` more bytes of the READ at `pos` are in place: with selective repeat, so are
    /// the responses held right after them; the READ is answered once all are, else the
    /// next gap is asked for.
    #[inline(always)]
    fn take_read_data(&mut self, pos: usize, len: u32) {
        let mtu = self.attrs.mtu;
        let req = &mut self.req;
        let wqe = &mut req.sq[pos];
        wqe.read_done += len;
        if let Some(repair) = req.read_repair.as_deref_mut() {
            // Responses held past this one are in place already: take them in order.
            repair.held.advance(1);
            if let Some((0, run)) = repair.held.first() {
                let bytes = u64::from(run) * u64::from(mtu);
                wqe.read_done += bytes.min(u64::from(wqe.len - wqe.read_done)) as u32;
                repair.held.advance(run);
            }
            wqe.responded = wqe.read_done == wqe.len;
            if wqe.responded {
                *repair = ReadRepair::default();
                req.oldest_read.answered(&req.sq);
            } else {
                self.ask_for_read_gap(pos);
            }
        } else {
            wqe.responded = wqe.read_done == wqe.len;
            if wqe.responded {
                req.oldest_read.answered(&req.sq);
            }
        }
    }

    /// Selective repeat: a response `d` PSNs past the first one the oldest waiting READ
    /// (at `pos`) misses. Its data goes in place at once and its PSN is recorded; the first
    /// such response of a gap asks for the gap alone again.
    fn on_read_response_ahead(
        &mut self,
        nic: &mut Nic,
        now: Instant,
        pos: usize,
        d: u32,
        payload: Payload<'_>,
    ) {
        let mtu = self.attrs.mtu;
        let req = &mut self.req;
        let repair = req.read_repair.get_or_insert_with(Box::default);
        if repair.held.contains(d) {
            nic.counters.stale_responses += 1;
            return;
        }
        let wqe = &req.sq[pos];
        let offset = wqe.read_done + d * mtu;
        let len = (wqe.len - offset).min(mtu);
        if payload.len() != len {
            self.fail_request(nic, pos, WcStatus::BadResponseError);
            return;
        }
        let (pd, sgl, request_end) = (self.pd, wqe.sgl, wqe.first_psn.add(wqe.span));
        if repair.held.insert(d) == Insert::Full {
            // No room to record it: asked for again once the gaps before it are filled.
            repair.overflow = true;
            nic.counters.stale_responses += 1;
            return;
        }
        let bytes = match payload {
            Payload::Bytes(b) => Some(b),
            Payload::Len(_) => None,
        };
        if nic.mrs.scatter(pd, &sgl, offset, len, bytes).is_err() {
            self.fail_request(nic, pos, WcStatus::LocalProtectionError);
            return;
        }
        if self.services && bytes.is_some() {
            nic.landed(self, &sgl, offset, len);
        }
        self.ask_for_read_gap(pos);
        self.confirm(nic, now, request_end);
        self.retire(nic);
    }

    /// The oldest READ still waiting for data (its place in the send queue) and the PSN of
    /// its first missing response.
    #[inline]
    pub(crate) fn oldest_read_expecting(&self) -> Option<(usize, Psn)> {
        let pos = self.req.oldest_read.get();
        // The place kept must be the one a pass from the front finds (in release builds
        // nothing is checked: that pass is what keeping the place saves).
        #[cfg(debug_assertions)]
        assert_eq!(
            pos,
            crate::oldest_read::OldestRead::scan(&self.req.sq),
            "the oldest waiting READ's place kept against a pass over the send queue"
        );
        let pos = pos?;
        let w = &self.req.sq[pos];
        Some((pos, w.first_psn.add(w.read_done / self.attrs.mtu)))
    }

    /// READ responses of the oldest waiting READ were dropped for want of receive credit
    /// and the credit came back: asked for again at once, from the first missing response
    /// (RC lets a requester re-issue a READ from any response it misses; every responder
    /// answers it as a duplicate READ), and what follows it sent again, in both recoveries,
    /// as the retransmit timer would. Not the gap alone under selective repeat: a later
    /// READ's responses come back before the re-request's (the responder answers in PSN
    /// order of arrival) and are discarded, since only the oldest READ keeps responses
    /// past a gap, so that READ too must be asked again (else only the retransmit timer
    /// recovers it; `crates/core/tests/asynchronous.rs`). Responses held already
    /// come again as duplicates, not offered to the stages nor taking credit.
    pub(crate) fn ask_read_again(&mut self) {
        let Some((_, expected)) = self.oldest_read_expecting() else {
            return;
        };
        if let Some(repair) = self.req.read_repair.as_deref_mut() {
            // Asked for in full now: the gap's record no longer says what is on its way.
            repair.asked = None;
        }
        self.req.read_retry_at = Some(expected);
        self.rewind(expected);
    }

    /// Selective repeat: if responses are held past the first missing one of the READ at
    /// `pos`, asks again for the gap before them (once per gap, unless the gap's own
    /// resent responses overtook it: then that copy was lost too); if none is held but some
    /// were dropped as too far ahead, for the rest of the READ.
    fn ask_for_read_gap(&mut self, pos: usize) {
        let mtu = self.attrs.mtu;
        let req = &mut self.req;
        let wqe = &req.sq[pos];
        let expected = wqe.first_psn.add(wqe.read_done / mtu);
        let Some(repair) = req.read_repair.as_deref_mut() else {
            return;
        };
        let first_held = repair.held.first().map(|(offset, _)| expected.add(offset));
        if repair.gap_on_its_way(expected, first_held) {
            return;
        }
        let until = match first_held {
            Some(held) => held,
            None if std::mem::take(&mut repair.overflow) => wqe.first_psn.add(wqe.span),
            None => return,
        };
        // A full resend queue: the retransmit timer asks for it instead.
        if req.queue_resend(expected)
            && let Some(repair) = req.read_repair.as_deref_mut()
        {
            repair.asked = Some((expected, until));
        }
    }

    fn on_atomic_ack(&mut self, nic: &mut Nic, now: Instant, psn: Psn, original: Option<u64>) {
        let Some(pos) = self
            .req
            .sq
            .iter()
            .position(|w| w.started && w.op.is_atomic() && w.first_psn == psn)
        else {
            nic.counters.stale_responses += 1;
            return;
        };
        let Some(original) = original else { return };
        let wqe = &mut self.req.sq[pos];
        if !wqe.responded {
            // The first answer carries the result; a duplicate only confirms it.
            let (lkey, addr, _) = wqe
                .sgl
                .pieces(0, 8)
                .next()
                .expect("atomics have an 8-byte buffer");
            let pd = self.pd;
            if nic
                .mrs
                .check(lkey, pd, addr, 8, crate::Access::LOCAL_WRITE)
                .is_err()
            {
                self.fail_request(nic, pos, WcStatus::LocalProtectionError);
                return;
            }
            nic.mrs.write(lkey, addr, &original.to_le_bytes());
            self.req.sq[pos].responded = true;
        }
        self.confirm(nic, now, psn.next());
        self.retire(nic);
        self.progress(nic, now);
    }

    /// Completes, oldest first as RC requires, every request the responder has confirmed
    /// (all its PSNs before `confirmed`) and, for READs and atomics, whose responses have
    /// arrived. `una` stops at a READ or atomic still waiting for its response: on a network
    /// that reorders, a later ACK can overtake the response, so only the retransmit timer
    /// (or a gap in READ responses) asks for it again. Returns how many requests completed.
    pub(crate) fn retire(&mut self, nic: &mut Nic) -> usize {
        let confirmed = self.req.confirmed;
        let (done, waiting_at) = self.complete_confirmed(nic, confirmed);
        let una = waiting_at.unwrap_or(confirmed);
        if self.req.una.precedes(una) {
            self.req.una = una;
        }
        // A go-back-N resend overtaken by an ACK: send on from the first unconfirmed PSN.
        if self.req.next_psn.precedes(self.req.una) {
            let una = self.req.una;
            self.rewind(una);
        }
        // The cursor may have pointed into a request that just completed: place it again
        // from the PSN it was at (or the first one still outstanding, if that is later).
        if done > 0 {
            self.req.oldest_read.retired(done);
            let req = &self.req;
            let target = match req.sq.front() {
                Some(f) if f.started && req.next_psn.precedes(f.first_psn) => f.first_psn,
                _ => req.next_psn,
            };
            // Not a resend: the probe in flight still times its round trip.
            self.place_cursor(target);
            nic.check_drained(self);
        }
        done
    }

    /// Pops and completes, oldest first, the requests wholly before `confirmed` whose
    /// responses (for READs and atomics) have all arrived. Returns how many, and the PSN a
    /// READ or atomic taken but still waiting for its response holds `una` at.
    #[inline(always)]
    fn complete_confirmed(&mut self, nic: &mut Nic, confirmed: Psn) -> (usize, Option<Psn>) {
        let num = self.num;
        let cq = self.send_cq;
        let mtu = self.attrs.mtu;
        let mut done = 0;
        let mut waiting_at = None;
        while let Some(front) = self.req.sq.front() {
            if !front.started || !front.first_psn.precedes(confirmed) {
                break;
            }
            // A READ or atomic the responder has taken (even in part) but that still waits
            // for its response holds `una` at its first missing PSN.
            if !front.responses_complete() {
                waiting_at = Some(match front.op {
                    SendOp::Read { .. } => front.first_psn.add(front.read_done / mtu),
                    _ => front.first_psn,
                });
                break;
            }
            if !front.last_psn().precedes(confirmed) {
                break;
            }
            let w = self.req.sq.pop_front().expect("front exists");
            self.req.cursor = self.req.cursor.saturating_sub(1);
            done += 1;
            if w.signaled {
                let byte_len = if w.op.is_atomic() { 8 } else { w.len };
                let c = Completion {
                    wr_id: w.wr_id,
                    status: WcStatus::Success,
                    opcode: send_opcode(w.op),
                    qp: num,
                    byte_len,
                    imm: None,
                    time: Instant::ZERO,
                    flags: w.flags,
                };
                let first = w.first_psn;
                nic.complete_in(self, cq, c, move |qp| {
                    qp.services
                        .then_some((crate::engine::FlagSide::Requester, first))
                });
            }
            if let Some(buffer) = w.inline {
                nic.inline_spare.push(buffer);
            }
        }
        (done, waiting_at)
    }

    /// The requester's invariants, checked in debug builds after every input: PSNs are
    /// handed out in order without reuse, `una` never passes a request still waiting for a
    /// response, and the cursor lies within the send queue, at the request and offset that
    /// hold `next_psn`.
    #[cfg(debug_assertions)]
    pub(crate) fn check_requester(&mut self) {
        let req = &self.req;
        assert!(
            req.cursor <= req.sq.len(),
            "cursor {} past {} requests",
            req.cursor,
            req.sq.len()
        );
        let mut expect = None;
        for w in req.sq.iter().filter(|w| w.started) {
            if let Some(e) = expect {
                assert_eq!(w.first_psn, e, "requests occupy consecutive PSNs");
            }
            expect = Some(w.first_psn.add(w.span));
            if !w.responses_complete() {
                let missing = match w.op {
                    SendOp::Read { .. } => w.first_psn.add(w.read_done / self.attrs.mtu),
                    _ => w.first_psn,
                };
                assert!(
                    !missing.precedes(req.una),
                    "una {:?} passed request {} still waiting for its response at {:?}",
                    req.una,
                    w.wr_id,
                    missing
                );
            }
        }
        assert!(
            !req.max_sent.precedes(req.next_psn),
            "next_psn {:?} beyond max_sent {:?}",
            req.next_psn,
            req.max_sent
        );
        // Requests begin in order: those begun are a prefix of the send queue (the oldest
        // waiting READ's place is kept on that ground), and that place is the one a pass
        // from the front finds.
        assert!(
            req.sq.iter().skip_while(|w| w.started).all(|w| !w.started),
            "a request begun behind one not begun"
        );
        assert_eq!(
            req.oldest_read.get(),
            crate::oldest_read::OldestRead::scan(&req.sq),
            "the oldest waiting READ's place"
        );
        // The cursor is where it would be placed for the PSN it sends next.
        let (cursor, offset, _) = req.cursor_for(req.next_psn, self.attrs.mtu);
        assert_eq!(
            (req.cursor, req.cursor_offset),
            (cursor, offset),
            "cursor and offset against next_psn {:?}",
            req.next_psn
        );
    }

    /// Goes back to send from `psn` (go-back-N): the cursor moves to the request holding it.
    /// For a READ, what is resent is a request for the data still missing. A PSN held by no
    /// request sends on from the first request not yet started, at `max_sent`: PSNs are
    /// never handed out twice.
    pub(crate) fn rewind(&mut self, psn: Psn) {
        // Karn's rule: a packet that may be sent twice gives no RTT sample.
        self.req.rtt_probe_sent = None;
        self.place_cursor(psn);
    }

    /// Places the cursor at the request holding `psn` (or past the last started one), to
    /// send from there; nothing already sent is sent again unless `psn` is behind
    /// `next_psn` ([`Qp::rewind`] is for that).
    fn place_cursor(&mut self, psn: Psn) {
        let mtu = self.attrs.mtu;
        let req = &mut self.req;
        (req.cursor, req.cursor_offset, req.next_psn) = req.cursor_for(psn, mtu);
    }

    /// Forward progress: the retry count is restored and the timer restarts (or stops).
    fn progress(&mut self, nic: &mut Nic, now: Instant) {
        self.req.retries_left = self.attrs.retry_cnt;
        self.req.rnr_retries_left = self.attrs.rnr_retry;
        self.req.read_retry_at = None;
        self.progress_timer(nic, now);
    }

    fn progress_timer(&mut self, nic: &mut Nic, now: Instant) {
        if self.req.una == self.req.max_sent {
            self.req.deadline = None;
        } else if let Some(t) = Nic::retransmit_timeout(self.attrs.timeout) {
            self.req.deadline = Some(now + t);
            nic.arm(self, now + t);
        }
    }

    /// Spends one transport retry; false (and the queue pair failed) when none is left.
    fn use_retry(&mut self, nic: &mut Nic) -> bool {
        if self.req.retries_left == 0 {
            self.fail_request(nic, 0, WcStatus::RetryExceeded);
            return false;
        }
        self.req.retries_left -= 1;
        true
    }

    /// The queue pair's timer fired: a pacing wait, an RNR wait or the retransmit timer.
    pub(crate) fn on_timer(&mut self, nic: &mut Nic, now: Instant) {
        if !self.state.sending() {
            // In RTR a queue pair still answers READs, and their pace still runs.
            if self.state.receiving() {
                self.read_pacing_timer(nic, now);
            }
            return;
        }
        if self.knobs.rate_bps.is_some() {
            // A pacing wait. The law may have lowered the rate since the timer was armed:
            // then the packet is due later, and the timer goes again.
            let due = self.next_send_at();
            if due <= now {
                nic.schedule(self);
            } else if self.req.cursor < self.req.sq.len()
                || (nic.gates_read_responses() && self.read_response_first())
            {
                nic.arm(self, due);
            }
        }
        if let Some(until) = self.req.rnr_wait_until {
            if until <= now {
                self.req.rnr_wait_until = None;
                nic.schedule(self);
            } else {
                nic.arm(self, until);
            }
        }
        match self.req.deadline {
            Some(deadline) if deadline <= now => self.on_retransmit_timeout(nic, now),
            Some(deadline) => nic.arm(self, deadline),
            None => {}
        }
    }

    /// The retransmit timer ran out: unless everything sent was acknowledged meanwhile, a
    /// retry is spent and everything from the first unacknowledged PSN is sent again.
    fn on_retransmit_timeout(&mut self, nic: &mut Nic, now: Instant) {
        self.req.deadline = None;
        if self.req.una == self.req.max_sent {
            return;
        }
        nic.counters.retransmit_timeouts += 1;
        nic.emit(self, now, crate::control::Event::Timeout);
        if !self.use_retry(nic) {
            return;
        }
        // Go-back-N from the first unacknowledged PSN, in both modes: bounded-time
        // recovery when NAKs were lost too. (A READ gap asked for before is asked
        // for in full again, so its record no longer says what is on its way.)
        let req = &mut self.req;
        if let Some(repair) = req.read_repair.as_deref_mut() {
            repair.asked = None;
        }
        let una = req.una;
        self.rewind(una);
        nic.schedule(self);
    }

    /// Request `pos` of the send queue failed with `status`: it completes with that status,
    /// the queue pair goes to the error state and every other request completes, in order,
    /// with a flush error.
    pub(crate) fn fail_request(&mut self, nic: &mut Nic, pos: usize, status: WcStatus) {
        nic.enter_error_failing(self, Some((pos, status)));
    }
}

#[cfg(test)]
mod tests {
    //! The requester's handlers driven directly: work requests and responses in, request
    //! packets and completions out.

    use sluice_wire::{Credits, NakCode, Opcode, RnrTimer, Syndrome};

    use crate::engine::fixture::{Fixture, MTU, ack, nak, response};
    use crate::qp::SendOp;
    use crate::{EngineConfig, Instant, Payload, QpState, Recovery, WcOpcode, WcStatus};

    const NOW: Instant = Instant::ZERO;

    /// The PSNs of the request packets the requester sends now, until it stops.
    fn send_all(f: &mut Fixture) -> Vec<u32> {
        send_all_at(f, NOW)
    }

    fn send_all_at(f: &mut Fixture, now: Instant) -> Vec<u32> {
        std::iter::from_fn(|| f.next_request(now))
            .map(|t| t.headers.bth.psn.value())
            .collect()
    }

    /// The work request ids and statuses of the completions waiting.
    fn completions(f: &mut Fixture) -> Vec<(u64, WcStatus)> {
        std::iter::from_fn(|| f.poll())
            .map(|c| (c.wr_id, c.status))
            .collect()
    }

    #[test]
    fn acks_retire_requests_and_complete_them_in_order() {
        let mut f = Fixture::new();
        for wr_id in 1..=3 {
            f.post_write(wr_id, 100);
        }
        assert_eq!(send_all(&mut f), [0, 1, 2]);
        f.respond(NOW, &ack(1), Payload::Len(0));
        let c = f.poll().expect("the first completes");
        assert_eq!(
            (c.wr_id, c.opcode, c.byte_len),
            (1, WcOpcode::RdmaWrite, 100)
        );
        assert_eq!(completions(&mut f), [(2, WcStatus::Success)]);
        assert_eq!(f.qp().req.una.value(), 2);
        assert_eq!(f.qp().req.sq.len(), 1);
        // A stale ACK changes nothing; the last one completes the rest.
        f.respond(NOW, &ack(0), Payload::Len(0));
        assert_eq!(f.nic().counters.stale_responses, 1);
        f.respond(NOW, &ack(2), Payload::Len(0));
        assert_eq!(completions(&mut f), [(3, WcStatus::Success)]);
        assert!(f.qp().req.sq.is_empty());
    }

    #[test]
    fn a_sequence_error_nak_goes_back_to_the_naked_psn() {
        let mut f = Fixture::new();
        for wr_id in 1..=3 {
            f.post_write(wr_id, 100);
        }
        assert_eq!(send_all(&mut f), [0, 1, 2]);
        f.respond(NOW, &nak(1, NakCode::PsnSequenceError), Payload::Len(0));
        // What came before the NAK'd PSN was received.
        assert_eq!(completions(&mut f), [(1, WcStatus::Success)]);
        assert_eq!(f.nic().counters.naks_received_sequence, 1);
        // Go-back-N: everything from it again, in order, and nothing else.
        assert_eq!(send_all(&mut f), [1, 2]);
        assert_eq!(f.nic().counters.retransmitted_packets, 2);
    }

    #[test]
    fn a_full_window_stops_sending_until_an_ack_opens_it() {
        let config = EngineConfig {
            max_outstanding_packets: 4,
            ..EngineConfig::default()
        };
        let mut f = Fixture::with(config, Recovery::GoBackN);
        for wr_id in 1..=6 {
            f.post_write(wr_id, 100);
        }
        assert_eq!(send_all(&mut f), [0, 1, 2, 3]);
        f.respond(NOW, &ack(0), Payload::Len(0));
        assert_eq!(send_all(&mut f), [4]);
        f.respond(NOW, &ack(4), Payload::Len(0));
        assert_eq!(send_all(&mut f), [5]);
    }

    #[test]
    fn a_gap_in_read_responses_asks_again_once() {
        let mut f = Fixture::new();
        let read = SendOp::Read {
            remote_addr: 0x5000,
            rkey: 9,
        };
        f.post(1, read, 0, 4 * MTU);
        let request = f.next_request(NOW).expect("the READ request");
        assert_eq!(request.headers.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
        assert!(f.next_request(NOW).is_none());
        let ok = Some(Syndrome::Ack(Credits::UNLIMITED));
        let data = [5u8; MTU as usize];
        let first = response(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, ok);
        f.respond(NOW, &first, Payload::Bytes(&data));
        // PSN 1 is lost: the response at 2 asks for the rest again, from 1.
        let middle = |psn| response(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn, None);
        f.respond(NOW, &middle(2), Payload::Bytes(&data));
        let again = f.next_request(NOW).expect("a re-request");
        assert_eq!(again.headers.bth.psn.value(), 1);
        let reth = again.headers.ext.reth.expect("a RETH");
        assert_eq!((reth.va, reth.dma_len), (0x5000 + u64::from(MTU), 3 * MTU));
        // Further responses past the same gap do not ask again.
        f.respond(NOW, &middle(3), Payload::Bytes(&data));
        assert!(f.next_request(NOW).is_none());
        // The responses to the re-request complete the READ.
        f.respond(NOW, &middle(1), Payload::Bytes(&data));
        f.respond(NOW, &middle(2), Payload::Bytes(&data));
        let last = response(Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, ok);
        f.respond(NOW, &last, Payload::Bytes(&data));
        assert_eq!(completions(&mut f), [(1, WcStatus::Success)]);
        assert_eq!(&f.memory()[..4 * MTU as usize], &[5; 4 * MTU as usize]);
    }

    #[test]
    fn an_rnr_nak_waits_the_time_it_names_then_sends_again() {
        let mut f = Fixture::new();
        f.post_write(1, 100);
        assert_eq!(send_all(&mut f), [0]);
        let timer = RnrTimer::from_code(12).unwrap();
        let rnr = response(Opcode::RC_ACKNOWLEDGE, 0, Some(Syndrome::RnrNak(timer)));
        f.respond(NOW, &rnr, Payload::Len(0));
        assert_eq!(f.nic().counters.naks_received_rnr, 1);
        assert_eq!(send_all(&mut f), [0u32; 0], "waiting");
        let until = NOW + std::time::Duration::from_nanos(timer.as_nanos());
        f.timer(until);
        assert_eq!(send_all_at(&mut f, until), [0]);
    }

    #[test]
    fn the_retransmit_timer_goes_back_until_the_retries_run_out() {
        let mut f = Fixture::new();
        f.post_write(1, 100);
        f.post_write(2, 100);
        assert_eq!(send_all(&mut f), [0, 1]);
        // Seven retries (the connection's retry count): each sends both again.
        for retry in 1..=7 {
            let deadline = f.qp().req.deadline.expect("the timer runs");
            f.timer(deadline);
            assert_eq!(send_all_at(&mut f, deadline), [0, 1], "retry {retry}");
        }
        assert_eq!(f.nic().counters.retransmit_timeouts, 7);
        let deadline = f.qp().req.deadline.expect("the timer runs");
        f.timer(deadline);
        assert_eq!(
            completions(&mut f),
            [(1, WcStatus::RetryExceeded), (2, WcStatus::WrFlushError)]
        );
        assert_eq!(f.qp().state, QpState::Error);
    }

    #[test]
    fn selective_repeat_asks_for_a_read_gap_alone_and_keeps_what_came_after_it() {
        let mut f = Fixture::with(EngineConfig::default(), Recovery::SelectiveRepeat);
        let read = SendOp::Read {
            remote_addr: 0x5000,
            rkey: 9,
        };
        f.post(1, read, 0, 4 * MTU);
        assert!(f.next_request(NOW).is_some());
        let ok = Some(Syndrome::Ack(Credits::UNLIMITED));
        let data = [5u8; MTU as usize];
        let first = response(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, ok);
        f.respond(NOW, &first, Payload::Bytes(&data));
        // PSN 1 is lost: 2 is kept, and only 1 is asked for again.
        let middle = |psn| response(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn, None);
        f.respond(NOW, &middle(2), Payload::Bytes(&data));
        let again = f.next_request(NOW).expect("a re-request of the gap");
        assert_eq!(again.headers.bth.psn.value(), 1);
        let reth = again.headers.ext.reth.expect("a RETH");
        assert_eq!((reth.va, reth.dma_len), (0x5000 + u64::from(MTU), MTU));
        assert!(f.next_request(NOW).is_none());
        // 3 is kept too, without asking again; the gap's one response completes the READ.
        let last = response(Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, ok);
        f.respond(NOW, &last, Payload::Bytes(&data));
        assert!(f.next_request(NOW).is_none());
        let only = response(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 1, ok);
        f.respond(NOW, &only, Payload::Bytes(&data));
        assert_eq!(completions(&mut f), [(1, WcStatus::Success)]);
        assert_eq!(&f.memory()[..4 * MTU as usize], &[5; 4 * MTU as usize]);
    }
}
