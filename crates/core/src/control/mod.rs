//! The control plane: every transport event on a queue pair can go to a control law, which
//! answers with actions (rate, window, timers, grants, CNPs, path). See `docs/control.md`.
//!
//! - [`Event`], [`EventKind`], [`EventMask`]: what a law hears, and selective triggering.
//! - [`Law`]: what an algorithm implements (one event + its per-QP context -> [`Actions`]).
//! - [`Controller`]: what the engine drives. [`Inline`] runs a law on the event's own path
//!   (SwCC); [`Decoupled`] runs it behind SCR's coalescing queues and processor pool, with a
//!   modelled control-loop delay. [`NoControl`] asks for nothing (line rate).
//!
//! The laws themselves live in the `sluice-control` crate.

mod event;
mod inline;
mod law;
mod scr;
mod store;
mod timers;

pub(crate) use event::PACKET_KINDS;
pub use event::{Event, EventKind, EventMask, IntHop, IntPath, MAX_INT_HOPS, NakKind, OpcodeMask};
pub use inline::Inline;
pub use law::{Actions, Controller, Deferred, Gate, Law, MAX_CONTEXT_BYTES, MessagePos, NoControl};
pub use scr::{Coalesce, Decoupled, DecoupledStats, EarlyExit, ProcessorLoad, ScrConfig, ScrStats};
