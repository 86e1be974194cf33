//! The engine's policies besides congestion control: each a trait with today's behaviour as
//! its first implementation, so that a new mechanism plugs in without touching the engine.
//!
//! Five kinds of policy decide what a queue pair does (rate and window are the control law's,
//! in [`crate::control`]; the other four are here):
//!
//! | policy | decides | trait | first implementation |
//! |---|---|---|---|
//! | control law | how fast and how much in flight | [`crate::control::Controller`] | [`crate::control::NoControl`] |
//! | scheduler | which eligible queue pair sends next | [`Scheduler`] | [`RoundRobin`], per packet |
//! | path selector | each packet's UDP source port (its ECMP entropy) | [`PathSelector`] | [`QpnHash`] |
//! | receive tracker | which PSNs past a gap have arrived | [`ReceiveTracker`] | [`Bitmap256`] |
//! | service | what happens to the payload on its way | [`Service`] | none |
//!
//! A packet meets them in this order on the way out: the scheduler picks the queue pair, the
//! control law's gate and pacing let its next packet go (or not), the requester or responder
//! builds it, the send-side services see its payload, and the path selector gives it its
//! source port. On the way in: the receive-side services see the payload (and may drop the
//! packet), the requester or responder takes it (a selective-repeat responder asking its
//! receive tracker about packets past a gap), the control law hears of it as events, and a
//! completion may follow.

mod deferred;
mod path;
mod scheduler;
mod service;
mod tracker;

pub(crate) use deferred::{CreditDrops, DeferredQueue};
pub(crate) use path::EnginePathSelector;
pub use path::{
    Flowlet, PathPacket, PathProbe, PathSelector, PathSignal, Plb, QpnHash, RandomSpray, RttProbe,
    Spray,
};
pub use scheduler::{
    DEFAULT_LINK, Drr, Filling, Join, NicDefault, Pacing, PerMessage, RateEstimate, RoundRobin,
    Scheduler, Served, Srpt, StaticShare, Tenant, WaterFilling,
};
pub(crate) use scheduler::{EngineScheduler, Sent};
pub(crate) use service::MessageFlags;
pub use service::{
    ByteCount, Direction, Landing, Overhead, Returned, Service, ServiceFlags, ServicePacket,
    Verdict, XorPayload,
};
pub use tracker::{
    Bitmap256, Bitmaps, Left, LeftConfig, LeftTracker, MAX_RECEIVE_WINDOW, OffsetList, OffsetLists,
    PoolUse, ReceiveTracker, Recorded, TrackerFactory, TrackerMemory, TrackerWork,
};

use crate::control::{Controller, NoControl};

/// Every policy an engine is built with (services are set per queue pair, once both ends
/// agreed: [`crate::Engine::set_services`]).
#[derive(Debug)]
pub struct Policies {
    /// Runs the control law of every queue pair; default [`NoControl`].
    pub controller: Box<dyn Controller>,
    /// Chooses which queue pair sends next; default [`RoundRobin`].
    pub scheduler: Box<dyn Scheduler>,
    /// Chooses each packet's UDP source port; default [`QpnHash`].
    pub path: Box<dyn PathSelector>,
    /// Makes each selective-repeat queue pair's receive tracker.
    pub tracker: Box<dyn TrackerFactory>,
}

impl Default for Policies {
    /// Today's engine: no control law, per-packet round robin, one source port per queue pair
    /// (a hash of its number), a 256-PSN bitmap per selective-repeat queue pair.
    fn default() -> Self {
        Policies {
            controller: Box::new(NoControl),
            scheduler: Box::new(RoundRobin::default()),
            path: Box::new(QpnHash),
            tracker: Box::new(Bitmaps),
        }
    }
}
