//! The classifier as a beside-the-path stage on the [`Service`] seam: it sees every payload,
//! cut into the model's chunks, and counts the packets it would flag. It never changes or
//! holds the payload. It raises [`ServiceFlags::EXECUTABLE`] on a packet it flags, which the
//! engine carries to the application in the message's completion.

use sluice_core::policy::{Direction, Service, ServiceFlags, ServicePacket};

use crate::model::Classifier;

/// Chunks shorter than this (a payload's tail) are not classified: too few bytes for the
/// byte statistics to mean anything, and text tails would read as noise.
pub const MIN_CHUNK: usize = 64;

/// Beside the path: flags payloads carrying executable code.
#[derive(Debug, Clone)]
pub struct Inspect {
    model: Classifier,
    /// Packets inspected (with bytes).
    pub packets: u64,
    /// Payload bytes inspected.
    pub bytes: u64,
    /// Chunks classified.
    pub chunks: u64,
    /// Chunks flagged.
    pub flagged_chunks: u64,
    /// Packets sent with at least one flagged chunk.
    pub flagged_sent: u64,
    /// Packets received with at least one flagged chunk.
    pub flagged_received: u64,
}

impl Inspect {
    /// With a loaded model.
    pub fn new(model: Classifier) -> Self {
        Inspect {
            model,
            packets: 0,
            bytes: 0,
            chunks: 0,
            flagged_chunks: 0,
            flagged_sent: 0,
            flagged_received: 0,
        }
    }

    /// With the model shipped in the crate.
    pub fn builtin() -> Self {
        Self::new(Classifier::builtin())
    }

    /// Classifies one payload: whether any chunk of it is flagged. Counts chunks.
    pub fn inspect(&mut self, payload: &[u8]) -> bool {
        let mut any = false;
        for c in payload.chunks(self.model.chunk()) {
            if c.len() < MIN_CHUNK {
                continue;
            }
            self.chunks += 1;
            if self.model.is_executable(c) {
                self.flagged_chunks += 1;
                any = true;
            }
        }
        any
    }
}

impl Service for Inspect {
    fn name(&self) -> &str {
        "inspect"
    }

    fn in_line(&self) -> bool {
        false
    }

    fn observe(&mut self, packet: &ServicePacket<'_>, payload: &[u8]) -> ServiceFlags {
        // A length-only payload (the simulator's) has no bytes to classify.
        if payload.is_empty() {
            return ServiceFlags::NONE;
        }
        self.packets += 1;
        self.bytes += payload.len() as u64;
        if self.inspect(payload) {
            match packet.direction {
                Direction::Send => self.flagged_sent += 1,
                Direction::Receive => self.flagged_received += 1,
            }
            return ServiceFlags::EXECUTABLE;
        }
        ServiceFlags::NONE
    }

    fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
        out.clear();
        out.extend_from_slice(&[
            ("inspected_packets", self.packets),
            ("inspected_bytes", self.bytes),
            ("chunks", self.chunks),
            ("flagged_chunks", self.flagged_chunks),
            ("flagged_sent", self.flagged_sent),
            ("flagged_received", self.flagged_received),
        ]);
    }
}
