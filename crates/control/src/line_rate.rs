//! No congestion control: every queue pair sends at line rate with the engine's window.
//! The baseline every other law is compared with.

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventMask, Law};

use crate::params::{ParamError, ParamInfo, Params, unknown};

/// Line rate, no reaction to anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct LineRate;

/// [`LineRate`] takes no parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct LineRateParams;

impl Params for LineRateParams {
    const INFO: &'static [ParamInfo] = &[];

    fn set(&mut self, name: &str, _: &str) -> Result<(), ParamError> {
        Err(unknown::<Self>(name))
    }
}

impl LineRate {
    /// The law that never limits (it has no parameters).
    pub fn new(_: LineRateParams) -> LineRate {
        LineRate
    }
}

impl Law for LineRate {
    type Context = ();

    fn name(&self) -> &'static str {
        "none"
    }

    fn interest(&self) -> EventMask {
        EventMask::NONE
    }

    fn on_event(&mut self, _: Instant, _: &mut (), _: &Event, _: &mut Actions) {}
}
