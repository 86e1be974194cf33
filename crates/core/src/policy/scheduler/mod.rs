//! Which queue pair with something to send is served next.
//!
//! One file per scheduler beside this one (the trait, what a visit sent, and the two round
//! robins): [`Drr`] shares the link among tenants by weight, [`StaticShare`] and
//! [`WaterFilling`] are SCR's fairness schedulers (they pace queue pairs to the rates they
//! allocate), and [`NicDefault`] models a hardware NIC's greedy arbiter.

use std::collections::VecDeque;

use sluice_wire::{
    BTH_LEN, CcxLayout, ICRC_LEN, Opcode, Operation, Position, pad_for, roce_link_len,
};

use crate::Instant;

mod drr;
mod estimate;
mod lists;
mod nic;
mod paced;
mod srpt;
mod static_share;
mod water;
mod wheel;

pub use drr::Drr;
pub use estimate::RateEstimate;
pub use nic::NicDefault;
pub use srpt::Srpt;
pub use static_share::StaticShare;
pub use water::{Filling, Join, WaterFilling};

/// How the pacing schedulers ([`StaticShare`], [`WaterFilling`]) pace: each class (a queue
/// pair, or a tenant) has a token bucket filled at the rate it is allocated, and may send its
/// next packet when the bucket holds the packet's bytes on the link ([`Served::link_len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// The link's capacity C, bit/s, which the rates share; `None`: the engine's line rate
    /// ([`Scheduler::set_link`]; 100 Gbit/s until told). Given, it wins over the engine's
    /// (a scaled-down experiment paces to a virtual link).
    pub link: Option<u64>,
    /// No class is paced below this, bit/s (SCR's 1 Gbit/s at 100 Gbit/s); `None`: 1% of
    /// the link. Never above the link.
    pub floor: Option<u64>,
    /// Classes are tenants, weighed by their weights, rather than queue pairs.
    pub by_tenant: bool,
    /// A bucket's depth, bytes: what a class that waited may send back to back.
    pub burst: u32,
    /// How long a queue pair with nothing to send keeps its share before it leaves.
    pub linger: std::time::Duration,
    /// How classes whose buckets allow them take turns: 0, one packet each (a software
    /// NIC's round robin, fair by construction); else as a hardware NIC's own arbiter
    /// ([`NicDefault`]) under SCR's rate limiters: a class keeps the turn until its
    /// message ends or it has sent `turn` payload bytes, while its bucket allows. It
    /// matters once the rates no longer bind (the floors sum above C): then the NIC's
    /// arbitration, favouring large messages, decides the shares again.
    pub turn: u32,
}

/// The link a scheduler assumes until the engine tells it its line rate.
pub const DEFAULT_LINK: u64 = 100_000_000_000;

impl Default for Pacing {
    /// The engine's line rate, a floor of 1% of it, per queue pair, 16 KiB buckets, 1 ms
    /// linger, turns of one packet.
    fn default() -> Self {
        Pacing {
            link: None,
            floor: None,
            by_tenant: false,
            burst: 16384,
            linger: std::time::Duration::from_millis(1),
            turn: 0,
        }
    }
}

impl Pacing {
    /// The link, bit/s, on an engine whose line rate is `line` (bit/s).
    pub(crate) fn link_on(&self, line: u64) -> u64 {
        self.link.unwrap_or(line).max(1)
    }

    /// The link, bytes per ns, on an engine whose line rate is `line`.
    pub(crate) fn link_bytes_per_ns(&self, line: u64) -> f64 {
        self.link_on(line) as f64 / 8e9
    }

    /// The floor, bytes per ns, on an engine whose line rate is `line`.
    pub(crate) fn floor_bytes_per_ns(&self, line: u64) -> f64 {
        let link = self.link_on(line);
        let floor = self.floor.unwrap_or(link / 100).min(link);
        (floor as f64 / 8e9).max(1e-9)
    }

    pub(crate) fn linger_ns(&self) -> u64 {
        u64::try_from(self.linger.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A queue pair's tenant: schedulers that share a link among tenants (SCR) group queue pairs
/// by `id` and weigh the groups by `weight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tenant {
    /// The tenant's identifier; default 0.
    pub id: u32,
    /// Relative share, at least 1.
    pub weight: u32,
}

impl Default for Tenant {
    fn default() -> Self {
        Tenant { id: 0, weight: 1 }
    }
}

/// What one visit to a queue pair sent: a packet (what it is follows from its opcode, asked
/// only by a scheduler that needs to know).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// The opcode of the packet sent.
    pub opcode: Opcode,
    /// Payload bytes of the packet.
    pub payload_len: u32,
    /// Byte times the packet takes on an Ethernet link ([`sluice_wire::RoceHeaders::link_len`]: headers,
    /// padding, ICRC and the frame's overhead included, over the queue pair's IP version and
    /// with its CC extension header), which is what schedulers that count bytes charge a
    /// queue pair for it.
    pub link_len: u32,
    /// Payload bytes the queue pair's next message has left to send after this packet,
    /// 0 when it owes its peer a packet first (an ACK, a grant, a READ response) or sends
    /// no message (what [`Srpt`] ranks by). Only the engine knows it: the constructors
    /// leave 0 ([`Served::with_left`] sets it).
    pub left: u32,
}

impl Served {
    /// It was a response (ACK, NAK, READ response, atomic ACK) or control (CNP, grant), not
    /// a request.
    pub fn response(&self) -> bool {
        self.opcode.info().is_some_and(|i| {
            matches!(
                i.operation,
                Operation::Acknowledge
                    | Operation::AtomicAcknowledge
                    | Operation::RdmaReadResponse
                    | Operation::Cnp
                    | Operation::CcControl
            )
        })
    }

    /// It was the last packet of its message (a work request's, or a READ response's), or
    /// a message of its own (an ACK, a CNP).
    pub fn message_end(&self) -> bool {
        self.opcode
            .info()
            .is_none_or(|i| matches!(i.position, Position::Last | Position::Only))
    }

    /// A packet of `opcode` with `payload_len` bytes of payload over IPv4 without a CC
    /// extension header (for models and tests: the engine gives the packet's own size).
    pub fn new(opcode: Opcode, payload_len: u32) -> Served {
        Served::on_link(opcode, payload_len, false, None)
    }

    /// A packet of `opcode` with `payload_len` bytes of payload, over IPv6 if `ipv6`, with a
    /// CC extension header of layout `ccx` if any: [`sluice_wire::RoceHeaders::wire_len`]'s sum from the
    /// opcode alone (the extension headers' lengths follow from it), framed by
    /// [`roce_link_len`].
    #[inline]
    pub fn on_link(opcode: Opcode, payload_len: u32, ipv6: bool, ccx: Option<CcxLayout>) -> Served {
        let ext = opcode.info().map_or(0, |i| i.ext_len);
        let payload = payload_len as usize;
        let headers = BTH_LEN + ccx.map_or(0, CcxLayout::wire_len) + ext;
        let roce = headers + payload + pad_for(payload) as usize + ICRC_LEN;
        Served {
            opcode,
            payload_len,
            link_len: roce_link_len(ipv6, roce) as u32,
            left: 0,
        }
    }

    /// This packet, with `left` bytes of its queue pair's next message left to send.
    pub fn with_left(self, left: u32) -> Served {
        Served { left, ..self }
    }
}

/// Picks which eligible queue pair sends next; may also pace queue pairs (its dequeue rate).
///
/// The engine keeps one bit per queue pair saying whether the scheduler holds it: it calls
/// [`Scheduler::wake`] only for a queue pair not held, and after each visit that
/// [`Scheduler::next`] asked for it calls [`Scheduler::served`], saying whether the queue
/// pair may send more (then the scheduler keeps it) or not (it forgets it). Queue pairs are
/// named by their index in the engine (dense, reused after a queue pair is destroyed).
///
/// A scheduler has no timers: nothing in it happens at a time of its own. One that holds
/// queue pairs back (pacing, an arbiter's busy time) says when `next` may next answer
/// ([`Scheduler::eligible_at`]); the engine passes that on to its driver as the time
/// [`crate::Engine::poll_transmit`] may next produce a packet
/// ([`crate::Engine::next_transmit_at`]), apart from its timers
/// ([`crate::Engine::next_timeout`]).
pub trait Scheduler: std::fmt::Debug + std::any::Any {
    /// A new queue pair at `qp`: forget anything an earlier one at this index left.
    fn reset(&mut self, qp: u32);

    /// Queue pair `qp` may have something to send and is not held. No time: the verbs that
    /// give a queue pair work (`post_send`, `modify_qp`) are given none; a scheduler that
    /// needs one takes the latest that `next` or `served` saw (`served` charges a packet at
    /// its own `now`).
    fn wake(&mut self, qp: u32);

    /// The queue pair to visit at `now`, if one is eligible. It stays held until
    /// [`Scheduler::served`].
    fn next(&mut self, now: Instant) -> Option<u32>;

    /// The visit to `qp` that `next` asked for sent `sent` (or nothing). `more`: the queue
    /// pair may send more, so keep it; otherwise drop it until it is woken again.
    fn served(&mut self, qp: u32, now: Instant, sent: Option<Served>, more: bool);

    /// Queue pair `qp`, held, is destroyed: drop it.
    fn remove(&mut self, qp: u32);

    /// Queue pair `qp` belongs to `tenant` from now on.
    fn set_tenant(&mut self, qp: u32, tenant: Tenant) {
        let _ = (qp, tenant);
    }

    /// The engine's line rate, bit/s ([`crate::EngineConfig::line_rate_bps`]), told once as
    /// the engine is made, before any queue pair exists: a scheduler that needs the link's
    /// capacity uses it unless it was given one of its own.
    fn set_link(&mut self, bits_per_second: u64) {
        let _ = bits_per_second;
    }

    /// When [`Scheduler::next`] may next return a queue pair, for a scheduler that holds
    /// queue pairs back: the earliest time one it holds becomes eligible, a time already
    /// passed if one is eligible now (the driver's link was busy, or `next` was not asked
    /// since). `None` when it holds none back: it holds nothing, or `next` returns what it
    /// holds at any time (the round robins, DRR), so only an event that gives a queue pair
    /// something to send makes a difference. Not a deadline: nothing happens in the
    /// scheduler when it passes. Right after `next(now)` returned `None` it is `None` or
    /// later than `now`, so that a driver that waits for it never waits for no time.
    fn eligible_at(&self) -> Option<Instant> {
        None
    }
}

/// Every held queue pair in turn, one packet per visit (the engine's behaviour before
/// schedulers were a policy, and a software NIC's natural fair share).
#[derive(Debug, Clone, Default)]
pub struct RoundRobin {
    ready: VecDeque<u32>,
}

impl Scheduler for RoundRobin {
    fn reset(&mut self, _qp: u32) {}

    #[inline]
    fn wake(&mut self, qp: u32) {
        self.ready.push_back(qp);
    }

    #[inline]
    fn next(&mut self, _now: Instant) -> Option<u32> {
        self.ready.pop_front()
    }

    #[inline]
    fn served(&mut self, qp: u32, _now: Instant, _sent: Option<Served>, more: bool) {
        if more {
            self.ready.push_back(qp);
        }
    }

    fn remove(&mut self, qp: u32) {
        // A scan, only for a queue pair destroyed while it had something to send.
        self.ready.retain(|&i| i != qp);
    }
}

/// Round robin by message: a queue pair keeps its turn until the message it is sending
/// ends, so that its packets leave back to back (as a NIC that arbitrates per work request).
#[derive(Debug, Clone, Default)]
pub struct PerMessage {
    ready: VecDeque<u32>,
}

impl Scheduler for PerMessage {
    fn reset(&mut self, _qp: u32) {}

    fn wake(&mut self, qp: u32) {
        self.ready.push_back(qp);
    }

    fn next(&mut self, _now: Instant) -> Option<u32> {
        self.ready.pop_front()
    }

    fn served(&mut self, qp: u32, _now: Instant, sent: Option<Served>, more: bool) {
        if !more {
            return;
        }
        match sent {
            Some(s) if !s.message_end() => self.ready.push_front(qp),
            _ => self.ready.push_back(qp),
        }
    }

    fn remove(&mut self, qp: u32) {
        self.ready.retain(|&i| i != qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Instant = Instant::ZERO;

    fn packet(message_end: bool) -> Served {
        Served::new(
            if message_end {
                Opcode::RC_RDMA_WRITE_LAST
            } else {
                Opcode::RC_RDMA_WRITE_MIDDLE
            },
            1024,
        )
    }

    #[test]
    fn a_served_packet_says_what_it_was() {
        let write_only = Served::new(Opcode::RC_RDMA_WRITE_ONLY, 8);
        assert!(write_only.message_end() && !write_only.response());
        // BTH 12 + RETH 16 + 8 + ICRC 4, IPv4 20 + UDP 8, Ethernet 14 + FCS 4, preamble 8
        // and gap 12.
        assert_eq!(write_only.link_len, 106);
        let read_middle = Served::new(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 4096);
        assert!(!read_middle.message_end() && read_middle.response());
        let ack = Served::new(Opcode::RC_ACKNOWLEDGE, 0);
        assert!(ack.message_end() && ack.response());
    }

    #[test]
    fn a_served_packets_size_is_the_wires_with_its_ip_version_and_ccx() {
        use sluice_wire::{Bth, Ccx, ExtHeaders, Psn, RoceHeaders};
        for opcode in [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_SEND_ONLY,
            Opcode::RC_ACKNOWLEDGE,
        ] {
            for ipv6 in [false, true] {
                for ccx in [None, Some(Ccx::Credit { granted_total: 0 })] {
                    let headers = RoceHeaders {
                        bth: Bth::new(opcode, 0x11, Psn::new(0)),
                        ccx,
                        ext: ExtHeaders::default(),
                    };
                    let payload = if opcode == Opcode::RC_ACKNOWLEDGE {
                        0
                    } else {
                        1021
                    };
                    let wire = headers.link_len(ipv6, payload as usize).unwrap() as u32;
                    let layout = ccx.map(|c| c.layout());
                    let served = Served::on_link(opcode, payload, ipv6, layout);
                    assert_eq!(served.link_len, wire, "{opcode:?} {ipv6} {ccx:?}");
                }
            }
        }
    }

    /// Visits `s` `n` times, each queue pair sending a packet that ends a message every
    /// `every` packets and staying eligible; returns the order of visits.
    fn visits(s: &mut dyn Scheduler, n: usize, every: u32) -> Vec<u32> {
        let mut sent = [0u32; 8];
        (0..n)
            .map(|_| {
                let qp = s.next(NOW).expect("a held queue pair");
                sent[qp as usize] += 1;
                s.served(qp, NOW, Some(packet(sent[qp as usize] % every == 0)), true);
                qp
            })
            .collect()
    }

    #[test]
    fn round_robin_serves_each_queue_pair_one_packet_in_turn() {
        let mut s = RoundRobin::default();
        for qp in [3, 1, 2] {
            s.wake(qp);
        }
        assert_eq!(visits(&mut s, 7, 4), [3, 1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn per_message_keeps_the_turn_until_the_message_ends() {
        let mut s = PerMessage::default();
        for qp in [3, 1] {
            s.wake(qp);
        }
        assert_eq!(visits(&mut s, 7, 3), [3, 3, 3, 1, 1, 1, 3]);
    }

    #[test]
    fn a_queue_pair_with_nothing_more_is_dropped_and_a_removed_one_is_gone() {
        for s in [
            &mut RoundRobin::default() as &mut dyn Scheduler,
            &mut PerMessage::default(),
        ] {
            s.wake(1);
            s.wake(2);
            s.wake(3);
            let first = s.next(NOW).unwrap();
            s.served(first, NOW, Some(packet(true)), false);
            s.remove(2);
            let rest: Vec<u32> = std::iter::from_fn(|| s.next(NOW)).collect();
            assert_eq!(rest, [3], "{s:?}");
        }
    }
}

/// The engine's scheduler, with the default one called directly rather than through its
/// vtable: a call the compiler cannot see into, between building a packet and returning
/// it, made it copy the packet (288 bytes) on every send.
#[derive(Debug)]
pub(crate) enum EngineScheduler {
    RoundRobin(RoundRobin),
    Other(Box<dyn Scheduler>),
}

impl EngineScheduler {
    pub(crate) fn new(scheduler: Box<dyn Scheduler>) -> EngineScheduler {
        let any: &dyn std::any::Any = &*scheduler;
        if !any.is::<RoundRobin>() {
            return EngineScheduler::Other(scheduler);
        }
        let any: Box<dyn std::any::Any> = scheduler;
        let rr = any.downcast::<RoundRobin>().expect("checked above");
        EngineScheduler::RoundRobin(*rr)
    }

    pub(crate) fn get(&mut self) -> &mut dyn Scheduler {
        match self {
            EngineScheduler::RoundRobin(s) => s,
            EngineScheduler::Other(s) => &mut **s,
        }
    }

    pub(crate) fn get_ref(&self) -> &dyn Scheduler {
        match self {
            EngineScheduler::RoundRobin(s) => s,
            EngineScheduler::Other(s) => &**s,
        }
    }

    #[inline]
    pub(crate) fn wake(&mut self, qp: u32) {
        match self {
            EngineScheduler::RoundRobin(s) => s.wake(qp),
            EngineScheduler::Other(s) => s.wake(qp),
        }
    }

    #[inline]
    pub(crate) fn next(&mut self, now: Instant) -> Option<u32> {
        match self {
            EngineScheduler::RoundRobin(s) => s.next(now),
            EngineScheduler::Other(s) => s.next(now),
        }
    }

    /// [`Scheduler::served`] with the packet sent, if any: `sent` and `left` (what
    /// [`Served::left`] is) are asked, and the packet's size on the link worked out, only
    /// for a scheduler that may look (round robin does not). `sent` is a closure, called
    /// in line: a `Sent` built by the caller was stored to the stack before the test of
    /// the scheduler, for every packet (`scripts/bench-engine-instructions`: 20
    /// instructions a message with `left`'s closure taking the index by reference). `Sent`
    /// is small and handed on by value: a reference to the packet itself, which is returned
    /// right after, made the compiler keep it in memory and copy it out.
    #[inline]
    pub(crate) fn served(
        &mut self,
        qp: u32,
        now: Instant,
        sent: impl FnOnce() -> Option<Sent>,
        more: bool,
        left: impl FnOnce() -> u32,
    ) {
        match self {
            EngineScheduler::RoundRobin(s) => s.served(qp, now, None, more),
            EngineScheduler::Other(s) => served_other(&mut **s, qp, now, sent(), more, left),
        }
    }
}

/// [`EngineScheduler::served`] for a scheduler other than round robin, out of line: in
/// line, its work (the packet's size, `left`) made round robin's sends cost 58 more
/// instructions a message (`scripts/bench-engine-instructions`, 1,024 QPs: 2,190 before
/// `left`, 2,248 in line, 2,206 out of line).
#[inline(never)]
fn served_other(
    s: &mut dyn Scheduler,
    qp: u32,
    now: Instant,
    sent: Option<Sent>,
    more: bool,
    left: impl FnOnce() -> u32,
) {
    let sent =
        sent.map(|t| Served::on_link(t.opcode, t.payload_len, t.ipv6, t.ccx).with_left(left()));
    s.served(qp, now, sent, more)
}

/// What the engine knows of a packet it sent, for [`EngineScheduler::served`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) opcode: Opcode,
    pub(crate) payload_len: u32,
    pub(crate) ipv6: bool,
    pub(crate) ccx: Option<CcxLayout>,
}
