//! The Sluice transport engine, sans-IO.
//!
//! One [`Engine`] plays the role of one RDMA NIC: it owns the protection domains, memory
//! regions, completion queues and reliable-connected queue pairs of a host, and is driven from
//! outside. Packets ([`Engine::handle_packet`]), work ([`Engine::post_send`],
//! [`Engine::post_recv`]) and time ([`Engine::handle_timeout`]) go in; packets
//! ([`Engine::poll_transmit`]) and completions ([`Engine::poll_cq`]) come out. The engine
//! never reads a clock, opens a socket or spawns a thread, so the same code runs over real
//! UDP sockets and inside the simulator.

#![warn(missing_docs)]

pub mod control;
mod counters;
mod cq;
mod engine;
mod error;
mod held_ranges;
mod mr;
mod oldest_read;
pub mod policy;
mod qp;
mod reorder;
mod requester;
mod responder;
mod rng;
mod rules;
mod time;
mod timers;
pub mod weir;

pub use counters::Counters;
pub use cq::{Completion, WcOpcode, WcStatus};
pub use engine::{
    Connection, CqId, CqOverrun, Engine, EngineConfig, Payload, PayloadAt, PdId, Priority,
    ServiceCredit, Transmit,
};
pub use error::Error;
pub use mr::{Access, Memory, MrInfo};
pub use policy::{Bitmap256, Policies, ReceiveTracker};
pub use qp::{
    AsyncEvent, MAX_SGE, Mtu, QpCaps, QpConfig, QpNum, QpPsns, QpState, QueueDepths, Recovery,
    RecvWr, SendOp, SendWr, Sge, Transition,
};
pub use rng::Rng;
pub use time::Instant;
