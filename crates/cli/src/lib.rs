//! The library behind the `sluice` command: each subcommand's logic lives here, so that
//! tests call it directly and `main.rs` stays a thin argument parser.

#![warn(missing_docs)]

pub mod check;
pub mod perf;
pub mod preflight;
pub mod psn_ranges;
pub mod repro;
pub mod sim;
pub mod synth;
