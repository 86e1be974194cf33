//! A static rate limiter: every queue pair is paced at one fixed rate (SCR's "Static"
//! allocation, a token-bucket-free pacer). The rate is set when a queue pair starts and
//! never changes.

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Law};

use crate::params::{ParamError, ParamInfo, Params, parse_f64, unknown};

/// The static law's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticRateParams {
    /// The rate of every queue pair, in Gbit/s on the wire.
    pub rate_gbps: f64,
}

impl Default for StaticRateParams {
    fn default() -> Self {
        StaticRateParams { rate_gbps: 10.0 }
    }
}

impl Params for StaticRateParams {
    const INFO: &'static [ParamInfo] = &[ParamInfo {
        name: "rate_gbps",
        help: "rate of every queue pair in Gbit/s on the wire (default 10)",
    }];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "rate_gbps" => self.rate_gbps = parse_f64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Paces every queue pair at a fixed rate (at most the line rate).
#[derive(Debug, Clone, Copy)]
pub struct StaticRate {
    rate_bps: u64,
}

impl StaticRate {
    /// A law that paces every queue pair at `p.rate_gbps`.
    pub fn new(p: StaticRateParams) -> StaticRate {
        StaticRate {
            rate_bps: ((p.rate_gbps * 1e9) as u64).max(1),
        }
    }
}

impl Law for StaticRate {
    type Context = ();

    fn name(&self) -> &'static str {
        "static"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Start])
    }

    fn on_event(&mut self, _: Instant, _: &mut (), event: &Event, act: &mut Actions) {
        if let Event::Start { line_rate_bps, .. } = *event {
            act.set_rate(self.rate_bps.min(line_rate_bps));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_its_rate_at_start_capped_by_the_line() {
        let mut law = StaticRate::new(StaticRateParams { rate_gbps: 2.5 });
        let mut act = Actions::default();
        let start = Event::Start {
            mtu: 4096,
            line_rate_bps: 100_000_000_000,
        };
        law.on_event(Instant::ZERO, &mut (), &start, &mut act);
        assert_eq!(act.rate(), Some(Some(2_500_000_000)));
        let mut act = Actions::default();
        let slow_line = Event::Start {
            mtu: 4096,
            line_rate_bps: 1_000_000_000,
        };
        law.on_event(Instant::ZERO, &mut (), &slow_line, &mut act);
        assert_eq!(act.rate(), Some(Some(1_000_000_000)));
    }

    #[test]
    fn parameters_parse_and_refuse_nonsense() {
        let mut p = StaticRateParams::default();
        p.set("rate_gbps", "40").unwrap();
        assert_eq!(p.rate_gbps, 40.0);
        assert!(p.set("rate_gbps", "-1").is_err());
        assert!(p.set("rate_gbps", "NaN").is_err());
        assert!(matches!(
            p.set("rate", "1"),
            Err(ParamError::Unknown { .. })
        ));
    }
}
