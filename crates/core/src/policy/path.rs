//! Each packet's UDP source port: the entropy ECMP switches hash to pick a path.

use sluice_wire::{Opcode, Psn};

use crate::QpNum;

/// What a path selector may look at of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPacket {
    /// The sending queue pair.
    pub qpn: QpNum,
    /// The packet's PSN.
    pub psn: Psn,
    /// The packet's opcode.
    pub opcode: Opcode,
}

/// Chooses each packet's UDP source port. A control law that sets a path (its `set_path`
/// action) overrides it for that queue pair.
pub trait PathSelector: std::fmt::Debug + std::any::Any {
    /// A new queue pair at index `qp`: forget anything an earlier one left.
    fn reset(&mut self, qp: u32) {
        let _ = qp;
    }

    /// The source port of `packet`, sent by queue pair `qp` (its index).
    fn source_port(&mut self, qp: u32, packet: &PathPacket) -> u16;
}

/// The queue pair's own port for every packet: 0xC000 plus a hash of the QPN (Soft-RoCE's
/// choice), so ECMP spreads queue pairs, not packets, over paths.
#[derive(Debug, Clone, Copy, Default)]
pub struct QpnHash;

impl QpnHash {
    /// The port of queue pair `qpn`.
    #[inline]
    pub fn port(qpn: QpNum) -> u16 {
        let h = qpn.0.wrapping_mul(0x9E37_79B1);
        0xC000 | ((h >> 18) as u16 & 0x3FFF)
    }
}

impl PathSelector for QpnHash {
    #[inline]
    fn source_port(&mut self, _qp: u32, packet: &PathPacket) -> u16 {
        QpnHash::port(packet.qpn)
    }
}

/// Per-packet spraying over `paths` entropies per queue pair: consecutive PSNs take
/// consecutive ports after the queue pair's own, so a queue pair's packets cross every path
/// (and arrive out of order when paths differ).
#[derive(Debug, Clone, Copy)]
pub struct Spray {
    /// The number of ports per queue pair (0 acts as 1).
    pub paths: u16,
}

impl PathSelector for Spray {
    fn source_port(&mut self, _qp: u32, packet: &PathPacket) -> u16 {
        let base = QpnHash::port(packet.qpn) & 0x3FFF;
        let step = (packet.psn.value() % u32::from(self.paths.max(1))) as u16;
        0xC000 | (base.wrapping_add(step) & 0x3FFF)
    }
}

/// The engine's path selector, with the default one called directly rather than through its
/// vtable (it is asked for every packet; the hash is a few instructions).
#[derive(Debug)]
pub(crate) enum EnginePathSelector {
    QpnHash,
    Other(Box<dyn PathSelector>),
}

impl EnginePathSelector {
    pub(crate) fn new(selector: Box<dyn PathSelector>) -> EnginePathSelector {
        let any: &dyn std::any::Any = &*selector;
        if any.is::<QpnHash>() {
            EnginePathSelector::QpnHash
        } else {
            EnginePathSelector::Other(selector)
        }
    }

    pub(crate) fn reset(&mut self, qp: u32) {
        if let EnginePathSelector::Other(s) = self {
            s.reset(qp);
        }
    }

    /// The source port of a packet of queue pair `qp` (its index), numbered `qpn`.
    #[inline]
    pub(crate) fn source_port(&mut self, qp: u32, qpn: QpNum, psn: Psn, opcode: Opcode) -> u16 {
        match self {
            EnginePathSelector::QpnHash => QpnHash::port(qpn),
            EnginePathSelector::Other(s) => Self::ask(&mut **s, qp, qpn, psn, opcode),
        }
    }

    /// Out of line, so that the packet's description is built only for a selector that
    /// reads it.
    #[inline(never)]
    fn ask(s: &mut dyn PathSelector, qp: u32, qpn: QpNum, psn: Psn, opcode: Opcode) -> u16 {
        s.source_port(qp, &PathPacket { qpn, psn, opcode })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(qpn: u32, psn: u32) -> PathPacket {
        PathPacket {
            qpn: QpNum(qpn),
            psn: Psn::new(psn),
            opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
        }
    }

    #[test]
    fn the_hash_gives_a_queue_pair_one_port_in_the_dynamic_range() {
        let mut p = QpnHash;
        let port = p.source_port(0, &packet(0x11, 0));
        assert!(port >= 0xC000);
        assert_eq!(p.source_port(0, &packet(0x11, 99)), port);
        assert_ne!(p.source_port(1, &packet(0x12, 0)), port);
    }

    #[test]
    fn spray_cycles_through_its_paths_by_psn() {
        let mut p = Spray { paths: 4 };
        let ports: Vec<u16> = (0..8)
            .map(|psn| p.source_port(0, &packet(0x11, psn)))
            .collect();
        assert_eq!(ports[..4], ports[4..]);
        let mut distinct = ports[..4].to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4);
        assert!(ports.iter().all(|&p| p >= 0xC000));
    }
}
