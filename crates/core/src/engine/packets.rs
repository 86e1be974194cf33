//! Packets in (`handle_packet`: checks, receive-side services, then the responder or the
//! requester) and out (`poll_transmit`: the scheduler's visits, send-side services).

use std::net::IpAddr;

use sluice_wire::{Opcode, OpcodeInfo, Operation, Psn, RoceHeaders};

use super::{Engine, Payload, PayloadAt, Transmit};
use crate::Instant;
use crate::control::Event;
use crate::policy::{Direction, Sent, ServicePacket, Verdict};
use crate::qp::QpNum;

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
                && self.qps[i as usize].attrs.services
                && self.qps[i as usize].attrs.peer == Some(from)
        });
        let Some(index) = index else {
            return self.take_packet(now, from, ce, headers, payload);
        };
        match self.serve_incoming(index, headers, payload) {
            Ok(Some(copy)) => {
                self.take_packet(now, from, ce, headers, Payload::Bytes(&copy));
                self.nic.service_scratch = copy;
            }
            Ok(None) => self.take_packet(now, from, ce, headers, payload),
            Err(()) => {
                self.nic.counters.rx_packets += 1;
                self.nic.counters.rx_bytes += u64::from(payload.len());
                self.nic.counters.drops_service += 1;
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
                for service in self.nic.services[index as usize].iter_mut().rev() {
                    if !service.in_line() {
                        service.observe(&packet, &[]);
                    }
                }
                return Ok(None);
            }
        };
        let mut copy = std::mem::take(&mut self.nic.service_scratch);
        copy.clear();
        copy.extend_from_slice(bytes);
        for service in self.nic.services[index as usize].iter_mut().rev() {
            if !service.in_line() {
                service.observe(&packet, &copy);
            } else if service.transform(&packet, &mut copy) == Verdict::Drop {
                self.nic.service_scratch = copy;
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
    /// lost grant is made up by the next and a duplicate or late one adds nothing.
    fn on_cc_control(&mut self, index: u32, now: Instant, headers: &RoceHeaders) {
        match (self.qp_mut(index).attrs.cc_control, headers.ext.cc_control) {
            (true, Some(c)) if c.kind == sluice_wire::CcControlKind::CreditTotal => {
                self.on_credit_total(index, now, c.value)
            }
            _ => self.nic.counters.drops_unexpected_opcode += 1,
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
        // Nothing to send is the common answer when a driver polls: given before the visit's
        // set-up.
        let first = self.nic.scheduler.next(now)?;
        self.nic.clock = now;
        self.visit_from(first, now, payload)
    }

    /// Visits queue pairs from `first` on, in the scheduler's order, until one sends.
    fn visit_from(&mut self, first: u32, now: Instant, payload: &mut [u8]) -> Option<Transmit> {
        let mut next = Some(first);
        while let Some(index) = next {
            let (qp, nic) = self.parts(index);
            let transmit = qp
                .next_response_packet(nic, now, payload)
                .or_else(|| qp.next_request_packet(nic, now, payload));
            let qp = &mut self.qps[index as usize];
            let Some(t) = transmit else {
                qp.scheduled = false;
                self.nic.scheduler.served(index, now, None, false);
                next = self.nic.scheduler.next(now);
                continue;
            };
            // Kept if it may send more; if not, let go now, while its state is in cache,
            // rather than at a later turn that would only find it idle (the next event that
            // gives it work schedules it again).
            let more = qp.may_send_more();
            qp.scheduled = more;
            // The builders put a payload services must see in the buffer (see `Qp::services`).
            if self.nic.any_services && qp.attrs.services && t.payload_len > 0 {
                let (psn, len) = (t.headers.bth.psn, t.payload_len as usize);
                // The builders put a payload with bytes in the buffer; one left in its
                // region is length-only memory (the simulator's): only its length shows.
                let bytes = (t.payload_at == PayloadAt::Buffer).then(|| &mut payload[..len]);
                self.serve_outgoing(index, psn, t.headers.bth.opcode, len as u32, bytes);
            }
            let sent = Sent {
                opcode: t.headers.bth.opcode,
                payload_len: t.payload_len,
                ipv6: t.dst.is_ipv6(),
                ccx: t.headers.ccx.map(|c| c.layout()),
            };
            self.nic.scheduler.served(index, now, Some(sent), more);
            self.nic.counters.tx_packets += 1;
            self.nic.counters.tx_bytes += u64::from(t.payload_len);
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
        for service in &mut self.nic.services[index as usize] {
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
            PayloadAt::Region { key, addr } => self.nic.mrs.slice(key, addr, len),
        }
    }
}
