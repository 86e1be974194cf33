//! A deterministic packet-level datacenter simulator that runs the real Sluice engine
//! (`sluice_core::Engine`, length-only payloads) and the real control laws
//! (`sluice_control`) on simulated fabrics: hosts behind a NIC model, output-queued switches
//! with a shared buffer, ECN, PFC, INT and several routing modes.
//!
//! Time is integer picoseconds (the engine sees nanoseconds); every random choice comes
//! from one seeded generator per run; simultaneous events run in the order they were
//! scheduled. The same scenario and seed therefore give the same run, byte for byte. See
//! `docs/sim.md`.

#![warn(missing_docs)]

pub mod app;
pub mod plot;
pub mod topology;
pub mod workload;

/// A node of the fabric: hosts are `0..hosts`, switches follow.
pub type NodeId = u32;

/// The latest time a scenario may name, in ns: a flow's start, the time limit, the sample
/// interval. One simulated hour; with delays bounded by [`MAX_DELAY_NS`] every event time
/// stays far inside the picosecond clock (2^64 ps is 213 days).
pub const MAX_TIME_NS: u64 = 3_600 * 1_000_000_000;

/// The longest link or NIC delay a scenario may set, in ns: one second.
pub const MAX_DELAY_NS: u64 = 1_000_000_000;

/// The most bytes one flow may carry: 256 GiB, posted at once as up to 256 WRITEs of 1 GiB
/// (the depth of the send queue the simulator gives a flow).
pub const MAX_FLOW_BYTES: u64 = 1 << 38;

/// A flow to simulate: one RDMA WRITE of `bytes` from host `src` to host `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Its index in the workload's list (flows are numbered 0, 1, 2, ...).
    pub id: u32,
    /// The host that writes.
    pub src: NodeId,
    /// The host written to.
    pub dst: NodeId,
    /// 1 ..= [`MAX_FLOW_BYTES`].
    pub bytes: u64,
    /// When it starts, in nanoseconds of simulated time; with `after`, how long after that
    /// flow completes. At most [`MAX_TIME_NS`].
    pub start_ns: u64,
    /// Starts only once flow `after` has completed (a collective's steps), `start_ns` later.
    pub after: Option<u32>,
}

pub mod event;
mod ideal;
pub mod links;
pub mod network;
pub mod priority;
pub mod report;
pub mod result;
pub mod rnic;
pub mod run;
pub mod scenario;
pub mod services;
mod tenant_laws;

pub use result::{FlowRecord, ProbeRtt, RunResult};
pub use run::{SimError, run_scenario};
pub use scenario::Scenario;
