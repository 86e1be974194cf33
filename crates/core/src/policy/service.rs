//! Stages on the payload of a queue pair's packets (RoCE BALBOA's service slots): in line,
//! a stage may change the bytes (encryption); beside the path, it sees them and changes
//! nothing (inspection, telemetry).
//!
//! Services run per queue pair, on the send path after a packet is built and on the receive
//! path before the packet is taken, on every packet that carries payload. A length-only
//! payload (the simulator's) has no bytes: the stages beside the path see its length, the
//! in-line ones are passed over. An in-line stage keeps the
//! payload's length. A stage that changes what goes on the wire must be run by both ends:
//! set it only on a queue pair whose peer agreed.

use sluice_wire::{Opcode, Psn};

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
pub struct ServicePacket {
    /// The local queue pair.
    pub qpn: QpNum,
    /// The packet's PSN.
    pub psn: Psn,
    /// The packet's opcode.
    pub opcode: Opcode,
    /// Which way the packet goes.
    pub direction: Direction,
    /// Its payload's length: the bytes a stage is shown, or, for a length-only payload (the
    /// simulator's), the only thing there is to see.
    pub len: u32,
}

/// What an in-line stage decides about a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on (with the payload as the stage left it).
    Pass,
    /// Drop the packet, counted ([`crate::Counters::drops_service`]); on the receive path the
    /// transport recovers it as a loss. A send-side drop is not allowed: the packet would
    /// be lost for good, so it is treated as `Pass`.
    Drop,
}

/// One stage of a queue pair's payload pipeline.
pub trait Service: std::fmt::Debug {
    /// Its registry name, for reports.
    fn name(&self) -> &str;

    /// In line (may change the payload: [`Service::transform`]) or beside the path (sees it
    /// only: [`Service::observe`]).
    fn in_line(&self) -> bool;

    /// In line: changes `payload` in place and decides.
    fn transform(&mut self, packet: &ServicePacket, payload: &mut [u8]) -> Verdict {
        let _ = (packet, payload);
        Verdict::Pass
    }

    /// Beside the path: sees `payload`.
    fn observe(&mut self, packet: &ServicePacket, payload: &[u8]) {
        let _ = (packet, payload);
    }

    /// Named counters to report (bytes seen, packets flagged...).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
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

    fn observe(&mut self, packet: &ServicePacket, _payload: &[u8]) {
        let (packets, bytes) = match packet.direction {
            Direction::Send => (&mut self.sent_packets, &mut self.sent_bytes),
            Direction::Receive => (&mut self.received_packets, &mut self.received_bytes),
        };
        *packets += 1;
        *bytes += u64::from(packet.len);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("sent_packets", self.sent_packets),
            ("sent_bytes", self.sent_bytes),
            ("received_packets", self.received_packets),
            ("received_bytes", self.received_bytes),
        ]
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

    fn transform(&mut self, _packet: &ServicePacket, payload: &mut [u8]) -> Verdict {
        for b in payload {
            *b ^= self.key;
        }
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(direction: Direction, len: u32) -> ServicePacket {
        ServicePacket {
            qpn: QpNum(0x11),
            psn: Psn::new(0),
            opcode: Opcode::RC_SEND_ONLY,
            direction,
            len,
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
