//! The test rig for Sluice's engine, shared by `sluice-core`'s and `sluice-control`'s
//! integration tests, the engine bench and the engine fuzz target.
//!
//! - [`World`]: engines joined by a simulated link (delay, rate, loss, duplication,
//!   reordering, corruption, ECN and INT switch ports) driven by a seeded generator, whose
//!   packets cross as real bytes through `sluice-wire`'s encoder and decoder;
//! - [`Direct`]: two engines handing packets straight to each other, no wire and no time
//!   unless asked (the bench's and the fuzz target's rig: nothing but engine work);
//! - [`Pair`]: a connected pair of queue pairs with their protection domains, completion
//!   queues and memory regions, set up the same way on either rig;
//! - [`Recorder`], [`rtt_samples`]: a control law that records what the engine tells it;
//! - [`seeds`]: the seeds of a seeded test, `SLUICE_SEED` replaying one.
//!
//! It is a dev-only crate: `sluice-core` uses it from its integration tests and benches
//! (cargo allows that cycle there), never from its own unit tests.

#![warn(missing_docs)]

mod direct;
mod law;
mod link;
mod pair;

pub use direct::Direct;
pub use law::{Recorder, rtt_samples};
pub use link::{DeepReorder, Fault, Impairments, RedMarking, World};
pub use pair::{CANARY, Hosts, Pair, PairOptions, RegionMemory, host_addr};

/// The seeds of a seeded test: 1 to `count`, or only the one `SLUICE_SEED` names (to replay
/// a failure).
pub fn seeds(count: u64) -> Vec<u64> {
    match std::env::var("SLUICE_SEED") {
        Ok(s) => vec![s.parse().expect("SLUICE_SEED is a number")],
        Err(_) => (1..=count).collect(),
    }
}
