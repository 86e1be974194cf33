//! What a control law hears: one [`Event`] per transport happening on a queue pair, and the
//! [`EventMask`] by which a law says which kinds it wants (SwCC's selective triggering: the
//! engine does not even build the events nobody asked for).

use std::time::Duration;

use sluice_wire::Psn;

/// Something that happened on one queue pair.
///
/// Events are small and `Copy`, so that SCR-style queues can hold and coalesce them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The queue pair is about to send its first request packet (or, under a law that gates
    /// READ responses, [`EventMask::GATE_READ_RESPONSES`], its first READ response: the data
    /// it sends for the peer's READ): set the initial rate and window. `mtu` is its path MTU and `line_rate_bps` the engine's line rate.
    Start {
        /// The path MTU, in bytes.
        mtu: u32,
        /// The engine's line rate, in bits per second.
        line_rate_bps: u64,
    },
    /// Request packets left: `bytes` of payload (several packets if coalesced). `psn` is the
    /// last one; `retransmission` if any of them was resent.
    Tx {
        /// The PSN of the last packet.
        psn: Psn,
        /// Payload bytes, headers not included.
        bytes: u32,
        /// Whether any of the packets was a retransmission.
        retransmission: bool,
    },
    /// Request packets arrived at the responder; `ce` if any was marked Congestion
    /// Experienced in its IP header.
    Rx {
        /// The PSN of the last packet.
        psn: Psn,
        /// Payload bytes, headers not included.
        bytes: u32,
        /// Whether any of the packets was marked CE.
        ce: bool,
    },
    /// READ response packets arrived at the requester: the data of its READs, of which it is
    /// the receiver (`Rx`'s counterpart for data flowing from responder to requester; READ
    /// requests, atomics and ACKs carry none and cause none). `ce` if any was marked
    /// Congestion Experienced. Apart from `Rx` so that a law asking for request arrivals
    /// (DCQCN's notification point) keeps hearing only those.
    RxResponse {
        /// The PSN of the last packet.
        psn: Psn,
        /// Payload bytes, headers not included.
        bytes: u32,
        /// Whether any of the packets was marked CE.
        ce: bool,
    },
    /// The responder confirmed `packets` more request packets: every PSN before
    /// `confirmed`. `rtt` is a sample from a packet that was sent once and asked for this
    /// acknowledgement (Karn's rule: never from a retransmission).
    Ack {
        /// Every request PSN before this one is confirmed.
        confirmed: Psn,
        /// Request packets newly confirmed.
        packets: u32,
        /// A round-trip time sample, if this acknowledgement gives one.
        rtt: Option<Duration>,
    },
    /// A NAK arrived.
    Nak {
        /// The PSN the NAK names.
        psn: Psn,
        /// What kind of NAK it is.
        kind: NakKind,
    },
    /// A congestion notification packet (RoCE v2 CNP) arrived for this queue pair.
    Cnp,
    /// The retransmit timer fired.
    Timeout,
    /// A timer the law armed (`Actions::arm_timer`) fired.
    Timer,
    /// In-band network telemetry echoed back with an acknowledgement (`confirmed` as in
    /// [`Event::Ack`]): one
    /// record per switch hop, as HPCC uses it.
    Telemetry {
        /// Every request PSN before this one is confirmed.
        confirmed: Psn,
        /// The per-hop records.
        path: IntPath,
    },
    /// The peer granted `bytes` more credit (a receiver-driven control packet).
    Credit {
        /// Bytes of credit newly granted.
        bytes: u64,
    },
    /// A hint from the application (its meaning is the law's).
    Hint(u64),
    /// A packet from the peer carried the CC header layout the law declared (see
    /// `Law::ccx` and `sluice_wire::DeclaredLayout`): the peer's field values, read with the
    /// layout's `Field`s.
    Header(sluice_wire::DeclaredCcx),
    /// The peer sent one of Homa's control messages (a GRANT, RESEND or BUSY: kinds 4-6
    /// of the 0x18 control packet, accepted only on a queue pair that agreed to control
    /// packets).
    Homa(sluice_wire::HomaControl),
}

/// The kind of a NAK, as a control law needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakKind {
    /// PSN sequence error: the responder saw a gap; the requester resends.
    Sequence,
    /// Receiver not ready (RNR NAK): no receive was posted; the requester waits and
    /// retries.
    ReceiverNotReady,
    /// Invalid request, remote access or remote operational error: the request fails and
    /// the queue pair goes to the error state.
    Fatal,
}

/// INT records travel in the CC extension header, so the wire crate defines them.
pub use sluice_wire::{IntHop, IntPath, MAX_INT_HOPS};

/// The kinds of [`Event`], one bit each in an [`EventMask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum EventKind {
    /// [`Event::Start`].
    Start,
    /// [`Event::Tx`].
    Tx,
    /// [`Event::Rx`].
    Rx,
    /// [`Event::Ack`].
    Ack,
    /// [`Event::Nak`].
    Nak,
    /// [`Event::Cnp`].
    Cnp,
    /// [`Event::Timeout`].
    Timeout,
    /// [`Event::Timer`].
    Timer,
    /// [`Event::Telemetry`].
    Telemetry,
    /// [`Event::Credit`].
    Credit,
    /// [`Event::Hint`].
    Hint,
    /// [`Event::Header`].
    Header,
    /// [`Event::Homa`].
    Homa,
    /// [`Event::RxResponse`].
    RxResponse,
}

impl EventKind {
    /// Every kind, in order.
    pub const ALL: [EventKind; 14] = [
        EventKind::Start,
        EventKind::Tx,
        EventKind::Rx,
        EventKind::Ack,
        EventKind::Nak,
        EventKind::Cnp,
        EventKind::Timeout,
        EventKind::Timer,
        EventKind::Telemetry,
        EventKind::Credit,
        EventKind::Hint,
        EventKind::Header,
        EventKind::Homa,
        EventKind::RxResponse,
    ];
    /// The number of kinds (14).
    pub const COUNT: usize = Self::ALL.len();
}

impl Event {
    /// The kind of this event.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Start { .. } => EventKind::Start,
            Event::Tx { .. } => EventKind::Tx,
            Event::Rx { .. } => EventKind::Rx,
            Event::Ack { .. } => EventKind::Ack,
            Event::Nak { .. } => EventKind::Nak,
            Event::Cnp => EventKind::Cnp,
            Event::Timeout => EventKind::Timeout,
            Event::Timer => EventKind::Timer,
            Event::Telemetry { .. } => EventKind::Telemetry,
            Event::Credit { .. } => EventKind::Credit,
            Event::Hint(_) => EventKind::Hint,
            Event::Header(_) => EventKind::Header,
            Event::Homa(_) => EventKind::Homa,
            Event::RxResponse { .. } => EventKind::RxResponse,
        }
    }
}

/// A set of event kinds, plus [`EventMask::GATE`]: the law decides, packet by packet,
/// whether a request packet may go (SwCC's TX function; see `Law::gate`), and
/// [`EventMask::GATE_READ_RESPONSES`]: READ responses too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventMask(u32);

impl EventMask {
    /// No kind and no gate.
    pub const NONE: EventMask = EventMask(0);
    /// Every kind, without the gate.
    pub const ALL: EventMask = EventMask((1 << EventKind::COUNT) - 1);
    /// Ask the law before every request packet.
    pub const GATE: EventMask = EventMask(1 << 31);
    /// Ask the law (`Law::gate`, with the packet's payload bytes) before every new READ
    /// response packet too, and pace READ responses at the rate it sets: for a law that
    /// controls the data a queue pair sends whichever end asked for it (a READ's data goes
    /// from responder to requester). Without it READ responses go as soon as they are owed,
    /// whatever the law's rate, as on a NIC whose rate limiter sits on the send queue.
    pub const GATE_READ_RESPONSES: EventMask = EventMask(1 << 30);

    /// The set of `kinds`.
    pub const fn of(kinds: &[EventKind]) -> EventMask {
        let mut bits = 0;
        let mut i = 0;
        while i < kinds.len() {
            bits |= 1 << kinds[i] as u32;
            i += 1;
        }
        EventMask(bits)
    }

    /// The kinds (and gate) of both.
    pub const fn union(self, other: EventMask) -> EventMask {
        EventMask(self.0 | other.0)
    }

    /// Whether `kind` is in the set.
    #[inline]
    pub const fn contains(self, kind: EventKind) -> bool {
        self.0 & (1 << kind as u32) != 0
    }

    /// No events and no gate: the law costs nothing per packet.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether [`EventMask::GATE`] is set.
    #[inline]
    pub const fn gates(self) -> bool {
        self.0 & Self::GATE.0 != 0
    }

    /// Whether [`EventMask::GATE_READ_RESPONSES`] is set.
    #[inline]
    pub const fn gates_read_responses(self) -> bool {
        self.0 & Self::GATE_READ_RESPONSES.0 != 0
    }
}

/// The kinds an [`OpcodeMask`] filters: those a packet causes, each by that packet's opcode
/// (a request that left for `Tx`; the packet that arrived for the rest).
pub(crate) const PACKET_KINDS: EventMask = EventMask::of(&[
    EventKind::Tx,
    EventKind::Rx,
    EventKind::Ack,
    EventKind::Nak,
    EventKind::Telemetry,
    EventKind::Credit,
    EventKind::Header,
    EventKind::Homa,
    EventKind::RxResponse,
]);

/// SwCC's selective triggering by opcode: a 32-bit one-hot mask over the low five bits of
/// the RC opcodes (0x00..=0x1F: SEND, WRITE, READ request and responses, ACK, atomics,
/// Sluice's 0x18 control packet). Events caused by a packet of another transport (a CNP,
/// 0x81, whose low bits would alias an RC SEND) are never filtered: their kind says it all.
/// It narrows the [`EventMask`], never widens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeMask(u32);

impl OpcodeMask {
    /// Every opcode: no filtering (the default, and free: the engine skips the test).
    pub const ALL: OpcodeMask = OpcodeMask(u32::MAX);
    /// No RC opcode at all.
    pub const NONE: OpcodeMask = OpcodeMask(0);
    /// RDMA READ responses (first, middle, last, only; 0x0D..=0x10).
    pub const READ_RESPONSES: OpcodeMask = OpcodeMask(0b1111 << 0x0D);

    /// The set of RC `opcodes` (others are ignored: they are never filtered).
    pub const fn of(opcodes: &[sluice_wire::Opcode]) -> OpcodeMask {
        let mut bits = 0;
        let mut i = 0;
        while i < opcodes.len() {
            if opcodes[i].0 >> 5 == 0 {
                bits |= 1 << (opcodes[i].0 & 0x1F);
            }
            i += 1;
        }
        OpcodeMask(bits)
    }

    /// The opcodes of both.
    pub const fn union(self, other: OpcodeMask) -> OpcodeMask {
        OpcodeMask(self.0 | other.0)
    }

    /// Whether a packet of `opcode` may cause events.
    #[inline]
    pub const fn admits(self, opcode: u8) -> bool {
        opcode >> 5 != 0 || self.0 & (1 << (opcode & 0x1F)) != 0
    }
}

impl Default for OpcodeMask {
    fn default() -> Self {
        OpcodeMask::ALL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_hold_exactly_their_kinds() {
        let m = EventMask::of(&[EventKind::Ack, EventKind::Cnp]);
        for k in EventKind::ALL {
            assert_eq!(m.contains(k), matches!(k, EventKind::Ack | EventKind::Cnp));
            assert!(EventMask::ALL.contains(k));
            assert!(!EventMask::NONE.contains(k));
        }
        assert!(!m.gates());
        assert!(m.union(EventMask::GATE).gates());
        assert!(!EventMask::ALL.gates());
        // The two gates are apart: asking for one is not asking for the other.
        let reads = m.union(EventMask::GATE_READ_RESPONSES);
        assert!(reads.gates_read_responses() && !reads.gates());
        assert!(!m.union(EventMask::GATE).gates_read_responses());
        assert!(!EventMask::ALL.gates_read_responses());
        for k in EventKind::ALL {
            assert_eq!(reads.contains(k), m.contains(k), "no kind's bit");
        }
    }

    #[test]
    fn opcode_masks_hold_exactly_their_rc_opcodes() {
        use sluice_wire::Opcode;
        let reads = OpcodeMask::READ_RESPONSES;
        for op in 0u8..=0x1F {
            assert_eq!(reads.admits(op), (0x0D..=0x10).contains(&op), "{op:#x}");
            assert!(OpcodeMask::ALL.admits(op));
            assert!(!OpcodeMask::NONE.admits(op));
        }
        // A CNP (0x81) aliases SEND MIDDLE in its low bits; it is never filtered.
        assert!(OpcodeMask::NONE.admits(0x81));
        let acks = OpcodeMask::of(&[Opcode::RC_ACKNOWLEDGE]);
        assert!(acks.admits(0x11) && !acks.admits(0x10));
        assert_eq!(
            OpcodeMask::of(&[
                Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                Opcode::RC_RDMA_READ_RESPONSE_LAST,
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            ]),
            reads
        );
    }

    #[test]
    fn events_stay_small() {
        // Coalescing queues hold one event per (queue pair, kind).
        assert!(
            std::mem::size_of::<Event>() <= 96,
            "{}",
            std::mem::size_of::<Event>()
        );
    }
}
