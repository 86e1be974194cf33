//! Stages on the payload of a queue pair's packets (RoCE BALBOA's service slots): in line,
//! a stage may change the bytes and their length (encryption); beside the path, it sees them
//! and changes nothing (inspection, telemetry).
//!
//! Services run per queue pair, on the send path after a packet is built and on the receive
//! path before the packet is taken, on every packet whose opcode carries a payload,
//! zero-length ones included (an encrypting stage must seal an empty SEND too, and refuse
//! an unsealed one). A stage sees the packet's headers ([`ServicePacket::headers`]), so it
//! can bind them (as associated data). An in-line stage may grow a payload by a fixed
//! [`Overhead`] on the way out and shrink it by as much on the way in: the queue pair then
//! segments messages into `PMTU - overhead` bytes, so a packet stays within the path MTU.
//! A length-only payload (the simulator's) has no bytes: the stages beside the path see its
//! length, the in-line ones are passed over (and it does not grow). A stage that changes
//! what goes on the wire must be run by both ends: set it only on a queue pair whose peer
//! agreed.

use sluice_wire::{Opcode, Operation, Psn, RoceHeaders};

use crate::QpNum;

/// Which way a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Leaving: on the send path, after the packet is built.
    Send,
    /// Arriving: on the receive path, before the packet is taken.
    Receive,
}

/// What a service may know of a packet besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServicePacket<'a> {
    /// The local queue pair.
    pub qpn: QpNum,
    /// The packet's PSN.
    pub psn: Psn,
    /// The packet's opcode.
    pub opcode: Opcode,
    /// Which way the packet goes.
    pub direction: Direction,
    /// Its payload's length as it comes to this stage (before the stage's [`Overhead`] is
    /// added on the way out, with it on the way in), or, for a length-only payload (the
    /// simulator's), the only thing there is to see.
    pub len: u32,
    /// The packet's headers from the BTH on, as they go on the wire (received: as they
    /// came). The BTH's pad count is not set here: it is that of the payload on the wire,
    /// which a stage that binds it derives from the length.
    pub headers: &'a RoceHeaders,
}

/// Bytes an in-line stage puts in front of and behind every payload it sends, and takes
/// off every payload it receives (an explicit nonce and a tag, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overhead {
    /// Bytes in front of the payload.
    pub head: u32,
    /// Bytes behind it.
    pub tail: u32,
}

impl Overhead {
    /// No change of length.
    pub const NONE: Overhead = Overhead { head: 0, tail: 0 };

    /// Both together: what the payload grows by.
    pub const fn total(self) -> u32 {
        self.head + self.tail
    }
}

/// What a stage beside the path raises about a packet it saw (BALBOA's DPI verdict): the
/// engine ORs the flags of a message's packets and hands them to the application in that
/// message's completion ([`crate::Completion::flags`]). A bit set, so stages that mean
/// different things can sit on one queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ServiceFlags(pub u8);

impl ServiceFlags {
    /// Nothing raised.
    pub const NONE: ServiceFlags = ServiceFlags(0);
    /// The payload carries executable content (inspection).
    pub const EXECUTABLE: ServiceFlags = ServiceFlags(1);

    /// Whether no flag is raised.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `other` is raised here.
    pub const fn contains(self, other: ServiceFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ServiceFlags {
    type Output = ServiceFlags;
    fn bitor(self, other: ServiceFlags) -> ServiceFlags {
        ServiceFlags(self.0 | other.0)
    }
}

impl MessageFlags {
    /// Whether the packet `operation` at `psn` that this queue pair sends goes for the
    /// first time, and records that it went. Requests and READ responses are numbered
    /// apart (the latter in the peer's PSNs); other packets carry no payload and are
    /// always first. Every request moves its mark, payload or not: a mark moved by
    /// payloads alone falls behind over READ requests and atomics, and once more than
    /// 2^23 PSNs behind it looks ahead of the next WRITE (24-bit serial order), which with
    /// every one after it would be taken for a resend and never offered to the stages.
    pub(crate) fn first_sent(&mut self, psn: Psn, operation: Operation) -> bool {
        let side = match operation {
            Operation::RdmaReadResponse => 1,
            Operation::Acknowledge
            | Operation::AtomicAcknowledge
            | Operation::Cnp
            | Operation::CcControl => return true,
            _ => 0,
        };
        let until = &mut self.sent_until[side];
        if until.is_some_and(|u| psn.precedes(u)) {
            return false;
        }
        *until = Some(psn.next());
        true
    }

    /// READ responses from `psn` on are new: the responder took a new READ there with no
    /// other READ's responses owed, so every response before it already went (and goes
    /// again only as a replay for a duplicate request).
    pub(crate) fn read_responses_from(&mut self, psn: Psn) {
        self.sent_until[1] = Some(psn);
    }
}

impl std::ops::BitOrAssign for ServiceFlags {
    fn bitor_assign(&mut self, other: ServiceFlags) {
        self.0 |= other.0;
    }
}

/// A responder's flags on their way to a completion: those raised on request packets not
/// taken yet, by PSN, and those of the message being taken. Kept by the engine for each
/// queue pair with services (apart from the queue pair, whose lines are full).
#[derive(Debug, Clone, Default)]
pub(crate) struct MessageFlags {
    /// Request PSNs at or past the expected one that stages flagged (empty, and
    /// unallocated, unless something was flagged).
    pub(crate) pending: Vec<(Psn, ServiceFlags)>,
    /// The flags of the message in progress's packets taken so far.
    pub(crate) message: ServiceFlags,
    /// The first PSN of the message in progress (taken in part), so that flags an
    /// asynchronous stage returns after its packet was taken still reach it.
    pub(crate) first: Option<Psn>,
    /// Payloads handed to asynchronous stages ([`Service::asynchronous`]) and returned,
    /// each way: a completion waits while `returned` is short of what was `offered`
    /// before it.
    pub(crate) offered: u64,
    pub(crate) returned: u64,
    /// Received payloads (packets and READ data landed), and their bytes, offered and not
    /// yet returned: what this queue pair holds of the receive credit, given back when it
    /// goes. Sent payloads are not in it: they take no credit.
    pub(crate) credited: (u64, u64),
    /// Sent payloads, and their bytes, offered and not yet returned (no credit taken).
    pub(crate) sent_out: (u64, u64),
    /// The PSN after the furthest request (`[0]`) and READ response (`[1]`) with a payload
    /// this queue pair sent: a packet before it is resent, and its asynchronous stages,
    /// offered it the first time, are not offered it again.
    pub(crate) sent_until: [Option<Psn>; 2],
    /// Its asynchronous stages include a deferred or a landing one: its completions wait
    /// for them however long (within the credit), not only
    /// [`crate::EngineConfig::service_flag_wait`].
    pub(crate) strict: bool,
    /// What its deferred stages' receive credit dropped, to ask for again when the credit
    /// comes back.
    pub(crate) credit_drops: super::CreditDrops,
}

/// Where READ data an asynchronous stage was offered ([`Service::offer_landed`]) lies in
/// the requester's memory, for the engine to put back what the stage made of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landing {
    pub(crate) key: u32,
    pub(crate) addr: u64,
}

impl Landing {
    /// A made-up place, for a stage's own tests (the engine gives the real ones).
    pub fn for_tests(key: u32, addr: u64) -> Landing {
        Landing { key, addr }
    }
}

/// What an asynchronous stage ([`Service::asynchronous`]) gives back for each payload it
/// was offered, once, in the order offered: which packet it was, and the flags it raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Returned {
    /// The packet's PSN.
    pub psn: Psn,
    /// Its opcode.
    pub opcode: Opcode,
    /// Which way it went, as offered ([`Direction::Receive`] for READ data landed): the
    /// engine gives back receive credit for a received payload only, so a wrong direction
    /// leaks credit or frees credit still held.
    pub direction: Direction,
    /// The payload's length as offered.
    pub len: u32,
    /// What the stage raised on it.
    pub flags: ServiceFlags,
}

/// What an in-line stage decides about a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on (with the payload as the stage left it).
    Pass,
    /// Receive path: drop the packet, counted ([`crate::Counters::drops_service`]); the
    /// transport recovers it as a loss. Send path: the stage could not do its work (a key
    /// used up, say), and what is in the buffer must not go: the packet is not sent, and
    /// the queue pair moves to the error state (its work requests complete flushed;
    /// counted in [`crate::Counters::service_send_failures`]). A stage that needs the
    /// packet to go whatever happens returns `Pass`.
    Drop,
}

/// One stage of a queue pair's payload pipeline.
pub trait Service: std::fmt::Debug {
    /// Its registry name, for reports.
    fn name(&self) -> &str;

    /// In line (may change the payload: [`Service::transform`]) or beside the path (sees it
    /// only: [`Service::observe`]).
    fn in_line(&self) -> bool;

    /// In line: what it adds to each payload ([`Overhead::NONE`] unless it changes the
    /// length). Read when the service is set on a queue pair.
    fn overhead(&self) -> Overhead {
        Overhead::NONE
    }

    /// In line: changes `payload` in place and decides. Sending, `payload` is the stage's
    /// [`Overhead::head`] bytes of room, the `packet.len` bytes it is given, then
    /// [`Overhead::tail`] bytes of room: it fills them all. Receiving, `payload` is what
    /// came (`packet.len` bytes); on `Pass`, what goes on is `payload` without the head and
    /// tail (a payload shorter than both is the stage's to drop).
    fn transform(&mut self, packet: &ServicePacket<'_>, payload: &mut [u8]) -> Verdict {
        let _ = (packet, payload);
        Verdict::Pass
    }

    /// In line, out of place: reads the payload from `input` (never changed: on the send
    /// path it is the application's region) and writes to `output`. Sending, `output` is
    /// [`Overhead::total`] bytes longer and the stage writes all of it (head, bytes, tail).
    /// Receiving, `output` is as long as `input`, and what goes on is `output` without the
    /// head and tail. `None`: the stage works only in place, and the engine copies `input`
    /// into `output` for [`Service::transform`]. A stage that can spares a copy of every
    /// payload.
    fn transform_from(
        &mut self,
        packet: &ServicePacket<'_>,
        input: &[u8],
        output: &mut [u8],
    ) -> Option<Verdict> {
        let _ = (packet, input, output);
        None
    }

    /// Beside the path: sees `payload`, and raises the flags it finds in it (none by
    /// default). A packet the transport then drops (a duplicate, one past a gap) is seen
    /// again when it comes again.
    fn observe(&mut self, packet: &ServicePacket<'_>, payload: &[u8]) -> ServiceFlags {
        let _ = (packet, payload);
        ServiceFlags::NONE
    }

    /// Beside the path and off it: on the receive path, [`Service::observe`] runs not on
    /// the packet's way but when the driver gives the engine time for it
    /// ([`crate::Engine::run_deferred`]), on a copy of the payload (after the in-line
    /// stages) that waits in the engine's queue. The queue is bounded by the receive credit
    /// ([`crate::EngineConfig::service_credit`]): a packet past it is dropped before it is
    /// taken, counted, and recovered by the transport (RoCE BALBOA's crediting), so a
    /// stage slower than the link slows the sender instead of growing memory. Sent packets
    /// it sees on their way, as any stage beside the path. Its flags come once the packet
    /// was taken: a READ still waiting for its responses gets them in its completion,
    /// the rest are counted.
    fn deferred(&self) -> bool {
        false
    }

    /// Beside the path, off the engine's thread: instead of [`Service::observe`], the engine
    /// hands each payload (a copy: the receive buffer and the region are reused as soon as
    /// the packet is taken) to [`Service::offer`], and gets the stage's verdicts back from
    /// [`Service::collect`] when the driver runs [`crate::Engine::run_deferred`]. What it
    /// was offered of what was received (packets, READ data landed) and has not returned
    /// counts against the receive credit ([`crate::EngineConfig::service_credit`]); past
    /// it, a received payload is not offered: counted uninspected
    /// ([`crate::Counters::service_uninspected`]) and the packet goes on, or, for a stage
    /// that is also [`Service::deferred`], dropped and counted as a deferred stage's is.
    /// Sent payloads take no credit (the credit bounds what the receive side holds, and
    /// one taken by a sent payload is room a received one is dropped for): they are
    /// bounded by the stage's own room ([`Service::offer`] says `false`: counted
    /// uninspected), and each is offered when it first goes, not when it is resent. A
    /// completion whose packets are still out with the stage
    /// waits for them (so its flags are known).
    fn asynchronous(&self) -> bool {
        false
    }

    /// Asynchronous: takes a copy of `payload` for the stage's own thread; `false` when it
    /// has no room now (the payload goes uninspected). Never blocks.
    fn offer(&mut self, packet: &ServicePacket<'_>, payload: &[u8]) -> bool {
        let _ = (packet, payload);
        false
    }

    /// Asynchronous: what the stage finished since the last call, each offered payload
    /// exactly once, in the order offered. A landing offered ([`Service::offer_landed`])
    /// comes back through `put_back` with the bytes the stage made of it, which the engine
    /// writes where they came from (and in `out`, with no flags). Never blocks.
    fn collect(&mut self, out: &mut Vec<Returned>, put_back: &mut dyn FnMut(Landing, &[u8])) {
        let _ = (out, put_back);
    }

    /// Asynchronous, on landing ([`Service::on_landing`]; such a stage is offered no
    /// packets, only landings): takes a copy of READ data just
    /// placed (`bytes`, at `offset` in the READ's data) to do on its own thread what
    /// [`Service::landed`] does, overlapping the next responses' arrival; `false` when it
    /// has no room (the engine calls [`Service::landed`] on its own thread instead). The
    /// READ completes once everything offered came back and was put back. A response
    /// placed again while its first copy is out is offered again; the later put-back
    /// wins, and both were made from the same bytes.
    fn offer_landed(&mut self, qpn: QpNum, offset: u32, bytes: &[u8], at: Landing) -> bool {
        let _ = (qpn, offset, bytes, at);
        false
    }

    /// An application offload on a READ's responses where they land (BALBOA's DLRM
    /// preprocessing): whether this stage wants [`Service::landed`]. Read for every
    /// response placed, on a queue pair with services only.
    fn on_landing(&self) -> bool {
        false
    }

    /// Called once a READ response's bytes are placed in the requester's memory, in order
    /// or (selective repeat) past a gap, with those bytes where they lie in the region (one
    /// call per scatter piece) and their offset in the READ's data. The stage may change
    /// them: what it leaves is what the application finds when the READ completes. A
    /// response placed again (a re-request's copy) is handed over again, as it came, so a
    /// stage that maps the bytes as they came gives the same result. Local, never on the
    /// wire: the peer need not run it.
    fn landed(&mut self, qpn: QpNum, offset: u32, bytes: &mut [u8]) {
        let _ = (qpn, offset, bytes);
    }

    /// Named counters to report (bytes seen, packets flagged...), written into `out`
    /// (cleared first): the one method a stage implements for them, so that a caller
    /// reading them often into one buffer allocates nothing once `out` has room.
    fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
        out.clear();
    }

    /// [`Service::counters_into`] into a new `Vec`, for a caller that reads them once.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        self.counters_into(&mut out);
        out
    }
}

/// Beside the path: counts the packets and payload bytes it sees each way.
#[derive(Debug, Clone, Default)]
pub struct ByteCount {
    /// Packets sent with payload.
    pub sent_packets: u64,
    /// Payload bytes sent.
    pub sent_bytes: u64,
    /// Packets received with payload.
    pub received_packets: u64,
    /// Payload bytes received.
    pub received_bytes: u64,
}

impl Service for ByteCount {
    fn name(&self) -> &str {
        "count"
    }

    fn in_line(&self) -> bool {
        false
    }

    fn observe(&mut self, packet: &ServicePacket<'_>, _payload: &[u8]) -> ServiceFlags {
        let (packets, bytes) = match packet.direction {
            Direction::Send => (&mut self.sent_packets, &mut self.sent_bytes),
            Direction::Receive => (&mut self.received_packets, &mut self.received_bytes),
        };
        *packets += 1;
        *bytes += u64::from(packet.len);
        ServiceFlags::NONE
    }

    fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
        out.clear();
        out.extend_from_slice(&[
            ("sent_packets", self.sent_packets),
            ("sent_bytes", self.sent_bytes),
            ("received_packets", self.received_packets),
            ("received_bytes", self.received_bytes),
        ]);
    }
}

/// In line: XORs every payload byte with `key` both ways. A toy that changes the bytes on
/// the wire and restores them at the peer, to exercise the in-line slot; no protection.
#[derive(Debug, Clone, Copy)]
pub struct XorPayload {
    /// The byte every payload byte is XORed with.
    pub key: u8,
}

impl Service for XorPayload {
    fn name(&self) -> &str {
        "xor"
    }

    fn in_line(&self) -> bool {
        true
    }

    fn transform(&mut self, _packet: &ServicePacket<'_>, payload: &mut [u8]) -> Verdict {
        for b in payload {
            *b ^= self.key;
        }
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_psn_is_first_sent_once_per_side() {
        let (write, response) = (Operation::RdmaWrite, Operation::RdmaReadResponse);
        let mut f = MessageFlags::default();
        let p = Psn::new;
        assert!(f.first_sent(p(10), write));
        assert!(f.first_sent(p(11), write));
        assert!(!f.first_sent(p(10), write), "resent");
        assert!(!f.first_sent(p(11), write), "resent");
        // READ responses are numbered apart (the peer's requests' PSNs).
        assert!(f.first_sent(p(5), response));
        assert!(!f.first_sent(p(5), response));
        assert!(f.first_sent(p(12), write));
        // Across the 24-bit wrap.
        let mut f = MessageFlags::default();
        assert!(f.first_sent(p(0xFF_FFFF), write));
        assert!(f.first_sent(p(0), write));
        assert!(!f.first_sent(p(0xFF_FFFF), write));
    }

    #[test]
    fn a_new_read_moves_the_responses_mark_past_the_peers_other_requests() {
        let (p, response) = (Psn::new, Operation::RdmaReadResponse);
        let mut f = MessageFlags::default();
        assert!(f.first_sent(p(5), response));
        // The peer's WRITEs take 9 Mi PSNs before its next READ: by responses alone, that
        // READ's look resent (24-bit serial order).
        let next = p(6).add(9 << 20);
        let mut stale = f.clone();
        assert!(!stale.first_sent(next, response));
        // Taken as a new READ, its responses are new; a replay of them is not.
        f.read_responses_from(next);
        assert!(f.first_sent(next, response));
        assert!(f.first_sent(next.next(), response));
        assert!(!f.first_sent(next, response), "replayed");
    }

    #[test]
    fn requests_without_a_payload_keep_the_mark_up_with_the_psns() {
        let p = Psn::new;
        let mut f = MessageFlags::default();
        assert!(f.first_sent(p(0), Operation::RdmaWrite));
        // READ requests spanning more than half the PSN space between two WRITEs (long
        // READs, or many): the WRITE after them is new, and so is the one after it.
        let mut psn = p(1);
        for _ in 0..3 {
            assert!(f.first_sent(psn, Operation::RdmaReadRequest));
            psn = psn.add(3 << 20);
        }
        assert!(f.first_sent(psn, Operation::RdmaWrite), "{psn:?}");
        assert!(f.first_sent(psn.next(), Operation::RdmaWrite));
        assert!(!f.first_sent(psn, Operation::RdmaWrite), "resent");
        // An atomic moves it too; ACKs and CNPs are no request's, and always first.
        assert!(f.first_sent(psn.add(2), Operation::FetchAdd));
        assert!(!f.first_sent(psn.next(), Operation::RdmaWrite), "resent");
        assert!(f.first_sent(p(7), Operation::Acknowledge));
        assert!(f.first_sent(p(7), Operation::Cnp));
        assert!(f.first_sent(psn.add(3), Operation::RdmaWrite));
    }

    static HEADERS: std::sync::LazyLock<RoceHeaders> = std::sync::LazyLock::new(|| RoceHeaders {
        bth: sluice_wire::Bth::new(Opcode::RC_SEND_ONLY, 0x22, Psn::new(0)),
        ccx: None,
        ext: sluice_wire::ExtHeaders::default(),
    });

    fn packet(direction: Direction, len: u32) -> ServicePacket<'static> {
        ServicePacket {
            qpn: QpNum(0x11),
            psn: Psn::new(0),
            opcode: Opcode::RC_SEND_ONLY,
            direction,
            len,
            headers: &HEADERS,
        }
    }

    #[test]
    fn xor_on_both_ends_restores_the_payload() {
        let mut s = XorPayload { key: 0x5A };
        let mut bytes = *b"payload";
        s.transform(&packet(Direction::Send, 7), &mut bytes);
        assert_ne!(&bytes, b"payload");
        s.transform(&packet(Direction::Receive, 7), &mut bytes);
        assert_eq!(&bytes, b"payload");
    }

    #[test]
    fn flags_combine_as_a_bit_set() {
        let mut f = ServiceFlags::NONE;
        assert!(f.is_empty());
        f |= ServiceFlags::EXECUTABLE;
        assert!(f.contains(ServiceFlags::EXECUTABLE));
        assert_eq!(f | ServiceFlags(2), ServiceFlags(3));
        assert!(!ServiceFlags(2).contains(ServiceFlags::EXECUTABLE));
    }

    #[test]
    fn count_tells_the_directions_apart() {
        let mut s = ByteCount::default();
        s.observe(&packet(Direction::Send, 10), &[0; 10]);
        s.observe(&packet(Direction::Receive, 3), &[0; 3]);
        s.observe(&packet(Direction::Receive, 4), &[]);
        assert_eq!(
            s.counters(),
            [
                ("sent_packets", 1),
                ("sent_bytes", 10),
                ("received_packets", 2),
                ("received_bytes", 7)
            ]
        );
    }
}
