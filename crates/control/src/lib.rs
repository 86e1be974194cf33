//! The control laws of Sluice, each in one file, each a [`sluice_core::control::Law`] with
//! its paper's parameters as defaults. Run one inline (`control::Inline`, SwCC) or behind
//! SCR's queues (`control::Decoupled`); see `docs/control.md`.

#![warn(missing_docs)]

pub mod params;
pub mod policies;
pub mod registry;

pub mod credit;
pub mod dcqcn;
pub mod dctcp;
pub mod homa;
pub mod hpcc;
pub mod line_rate;
pub mod notification;
pub mod rate_credit;
pub mod static_rate;
pub mod swcc_credit;
pub mod swift;
pub mod timely;

pub use params::{ParamError, ParamInfo, Params};
