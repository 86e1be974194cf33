//! TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter",
//! SIGCOMM 2015): a rate-based law driven by the gradient of the round-trip time.
//!
//! On every acknowledgement that carries an RTT sample `new_rtt` (Algorithm 1 of the paper):
//!
//! ```text
//! new_rtt_diff = new_rtt - prev_rtt;   prev_rtt = new_rtt
//! rtt_diff     = (1 - α)·rtt_diff + α·new_rtt_diff          (α: EWMA weight of the new sample)
//! g            = rtt_diff / min_rtt                          (normalized gradient)
//! if   new_rtt < T_low:   rate = rate + δ                    (additive increase)
//! elif new_rtt > T_high:  rate = rate·(1 - β·(1 - T_high/new_rtt))
//! elif g <= 0:            rate = rate + N·δ                  (N = hai_n once the last `hai_after`
//!                                                              gradients were all <= 0, else 1)
//! else:                   rate = rate·(1 - β·g)
//! rate = clamp(rate, min_rate, line_rate)
//! ```
//!
//! Variables: `rate` the pacing rate (bits/s on the wire), `prev_rtt` the previous sample,
//! `rtt_diff` the smoothed RTT difference (ns), `min_rtt` the propagation RTT that normalizes
//! the gradient, `δ` the additive step, `β` the multiplicative decrease factor.
//!
//! Choices the paper leaves open: a queue pair starts at line rate; the first sample only sets
//! `prev_rtt`; the rate is updated on every sample (the paper updates once per completion
//! event of 16-64 KB; with SCR's coalescing one event may stand for many packets); samples of
//! zero or absent are ignored; the HAI count includes the current sample and is reset by any
//! positive gradient. TIMELY arms no timers and sets no window.

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Law};

use crate::params::{ParamError, ParamInfo, Params, parse_f64, parse_f64_in, parse_u32, unknown};

/// TIMELY's parameters. Defaults are the paper's values for its 10 Gbit/s testbed, kept at
/// 100 Gbit/s (α, β as SwCC §5.1 quotes them from the paper; δ, T_low, T_high, minRTT and
/// α, β as the HPCC ns-3 simulator's TIMELY defaults; HAI after 5 with N = 5 as in the
/// paper's algorithm). The paper gives no minimum rate: `min_rate_mbps` is the HPCC
/// simulator's 100 Mbit/s. (The authors' later reference code recommends α = 0.02 for
/// per-packet updates; not the default here.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelyParams {
    /// EWMA weight of the newest RTT difference (paper: α = 0.875).
    pub alpha: f64,
    /// Multiplicative decrease factor (paper: β = 0.8).
    pub beta: f64,
    /// Additive increment δ in Mbit/s (paper: 10 Mbit/s).
    pub delta_mbps: f64,
    /// Below this RTT, always increase, in µs (paper: T_low = 50 µs).
    pub t_low_us: f64,
    /// Above this RTT, always decrease, in µs (paper: T_high = 500 µs).
    pub t_high_us: f64,
    /// The RTT that normalizes the gradient, in µs (paper: minRTT = 20 µs).
    pub min_rtt_us: f64,
    /// Consecutive non-positive gradients before hyperactive increase (paper: 5).
    pub hai_after: u32,
    /// Multiplier of δ in hyperactive increase (paper: N = 5).
    pub hai_n: u32,
    /// The lowest rate, in Mbit/s (HPCC simulator: 100 Mbit/s).
    pub min_rate_mbps: f64,
}

impl Default for TimelyParams {
    fn default() -> Self {
        TimelyParams {
            alpha: 0.875,
            beta: 0.8,
            delta_mbps: 10.0,
            t_low_us: 50.0,
            t_high_us: 500.0,
            min_rtt_us: 20.0,
            hai_after: 5,
            hai_n: 5,
            min_rate_mbps: 100.0,
        }
    }
}

impl Params for TimelyParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "alpha",
            help: "EWMA weight of the newest RTT difference, 0..1 (default 0.875)",
        },
        ParamInfo {
            name: "beta",
            help: "multiplicative decrease factor, 0..1 (default 0.8)",
        },
        ParamInfo {
            name: "delta_mbps",
            help: "additive increment in Mbit/s (default 10)",
        },
        ParamInfo {
            name: "t_low_us",
            help: "RTT below which the rate always increases, in us (default 50)",
        },
        ParamInfo {
            name: "t_high_us",
            help: "RTT above which the rate always decreases, in us (default 500)",
        },
        ParamInfo {
            name: "min_rtt_us",
            help: "RTT normalizing the gradient, in us, > 0 (default 20)",
        },
        ParamInfo {
            name: "hai_after",
            help: "consecutive non-positive gradients before hyperactive increase (default 5)",
        },
        ParamInfo {
            name: "hai_n",
            help: "multiplier of delta in hyperactive increase (default 5)",
        },
        ParamInfo {
            name: "min_rate_mbps",
            help: "lowest rate in Mbit/s (default 100)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "alpha" => self.alpha = parse_f64_in(name, value, 0.0, 1.0)?,
            "beta" => self.beta = parse_f64_in(name, value, 0.0, 1.0)?,
            "delta_mbps" => self.delta_mbps = parse_f64(name, value)?,
            "t_low_us" => self.t_low_us = parse_f64(name, value)?,
            "t_high_us" => self.t_high_us = parse_f64(name, value)?,
            // The gradient divides by it.
            "min_rtt_us" => self.min_rtt_us = parse_f64_in(name, value, 1e-3, f64::MAX)?,
            "hai_after" => self.hai_after = parse_u32(name, value)?,
            "hai_n" => self.hai_n = parse_u32(name, value)?,
            "min_rate_mbps" => self.min_rate_mbps = parse_f64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Per-queue-pair state (40 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct TimelyContext {
    /// Current rate, bits/s.
    rate: f64,
    /// Line rate from `Start`, bits/s; 0 until then.
    line: f64,
    /// Previous RTT sample, ns; 0 before the first.
    prev_rtt: f64,
    /// Smoothed RTT difference, ns.
    rtt_diff: f64,
    /// Consecutive samples with a non-positive gradient.
    neg_gradients: u32,
}

/// TIMELY, in its paper's form.
#[derive(Debug, Clone)]
pub struct Timely {
    alpha: f64,
    beta: f64,
    delta_bps: f64,
    t_low_ns: f64,
    t_high_ns: f64,
    min_rtt_ns: f64,
    hai_after: u32,
    hai_n: f64,
    min_rate_bps: f64,
}

impl Timely {
    /// A TIMELY law with parameters `p`.
    pub fn new(p: TimelyParams) -> Timely {
        // Fields are public, so guard here too: nothing below may divide by zero or go NaN.
        let finite = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
        Timely {
            alpha: finite(p.alpha).min(1.0),
            beta: finite(p.beta),
            delta_bps: finite(p.delta_mbps) * 1e6,
            t_low_ns: finite(p.t_low_us) * 1e3,
            t_high_ns: finite(p.t_high_us) * 1e3,
            min_rtt_ns: (finite(p.min_rtt_us) * 1e3).max(1.0),
            hai_after: p.hai_after,
            hai_n: f64::from(p.hai_n),
            min_rate_bps: (finite(p.min_rate_mbps) * 1e6).max(1.0),
        }
    }

    /// Paces at `ctx.rate` (no pacing at line rate).
    fn emit(&self, ctx: &TimelyContext, act: &mut Actions) {
        if ctx.rate >= ctx.line {
            act.unpace();
        } else {
            act.set_rate(ctx.rate as u64);
        }
    }

    /// Algorithm 1 on one RTT sample of `new_rtt` ns (> 0).
    fn on_rtt(&self, ctx: &mut TimelyContext, new_rtt: f64) {
        if ctx.prev_rtt == 0.0 {
            ctx.prev_rtt = new_rtt;
            return;
        }
        let new_rtt_diff = new_rtt - ctx.prev_rtt;
        ctx.prev_rtt = new_rtt;
        ctx.rtt_diff = (1.0 - self.alpha) * ctx.rtt_diff + self.alpha * new_rtt_diff;
        let gradient = ctx.rtt_diff / self.min_rtt_ns;
        ctx.neg_gradients = if gradient <= 0.0 {
            ctx.neg_gradients.saturating_add(1)
        } else {
            0
        };
        let rate = if new_rtt < self.t_low_ns {
            ctx.rate + self.delta_bps
        } else if new_rtt > self.t_high_ns {
            ctx.rate * (1.0 - self.beta * (1.0 - self.t_high_ns / new_rtt))
        } else if gradient <= 0.0 {
            let n = if ctx.neg_gradients >= self.hai_after {
                self.hai_n
            } else {
                1.0
            };
            ctx.rate + n * self.delta_bps
        } else {
            ctx.rate * (1.0 - self.beta * gradient)
        };
        // max/min rather than clamp: no panic even if min_rate exceeds the line.
        ctx.rate = rate.min(ctx.line).max(self.min_rate_bps.min(ctx.line));
    }
}

impl Law for Timely {
    type Context = TimelyContext;

    fn name(&self) -> &'static str {
        "timely"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Start, EventKind::Ack])
    }

    fn on_event(&mut self, _: Instant, ctx: &mut TimelyContext, event: &Event, act: &mut Actions) {
        match *event {
            Event::Start { line_rate_bps, .. } => {
                let line = line_rate_bps as f64;
                *ctx = TimelyContext {
                    rate: line,
                    line,
                    ..TimelyContext::default()
                };
                self.emit(ctx, act);
            }
            Event::Ack { rtt: Some(rtt), .. } if ctx.line > 0.0 && !rtt.is_zero() => {
                self.on_rtt(ctx, rtt.as_nanos() as f64);
                self.emit(ctx, act);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const LINE: u64 = 100_000_000_000;

    fn started(law: &mut Timely) -> TimelyContext {
        let mut ctx = TimelyContext::default();
        let mut act = Actions::default();
        let start = Event::Start {
            mtu: 4096,
            line_rate_bps: LINE,
        };
        law.on_event(Instant::ZERO, &mut ctx, &start, &mut act);
        assert_eq!(act.rate(), Some(None), "starts unpaced at line rate");
        ctx
    }

    /// Feeds one ACK with an RTT sample of `us` microseconds; returns the rate action.
    fn sample(law: &mut Timely, ctx: &mut TimelyContext, us: u64) -> Option<Option<u64>> {
        let mut act = Actions::default();
        let ack = Event::Ack {
            confirmed: sluice_wire::Psn::new(1),
            packets: 1,
            rtt: Some(Duration::from_micros(us)),
        };
        law.on_event(Instant::ZERO, ctx, &ack, &mut act);
        assert_eq!(act.window(), None);
        assert_eq!(act.timer(), None);
        act.rate()
    }

    /// A paced rate within 1 bit/s of `expect` (float rounding of the hand-computed factor).
    fn close(rate: Option<Option<u64>>, expect: f64) {
        let r = rate.flatten().expect("a paced rate");
        assert!((r as f64 - expect).abs() <= 1.0, "{r} vs {expect}");
    }

    #[test]
    fn first_sample_only_sets_prev_rtt() {
        let mut law = Timely::new(TimelyParams::default());
        let mut ctx = started(&mut law);
        // Unpaced: the rate stays at the line.
        assert_eq!(sample(&mut law, &mut ctx, 300), Some(None));
        assert_eq!(ctx.prev_rtt, 300_000.0);
        assert_eq!(ctx.rtt_diff, 0.0);
        assert_eq!(ctx.rate, LINE as f64);
    }

    #[test]
    fn below_t_low_adds_delta() {
        let mut law = Timely::new(TimelyParams::default());
        let mut ctx = started(&mut law);
        ctx.rate = 50e9;
        ctx.prev_rtt = 30_000.0;
        // 40 us < T_low = 50 us: 50 Gb/s + 10 Mb/s. rtt_diff = 0.875 * (40000 - 30000).
        assert_eq!(sample(&mut law, &mut ctx, 40), Some(Some(50_010_000_000)));
        assert_eq!(ctx.rtt_diff, 8_750.0);
        // At the line it stays at the line (unpaced).
        ctx.rate = LINE as f64;
        assert_eq!(sample(&mut law, &mut ctx, 40), Some(None));
    }

    #[test]
    fn above_t_high_cuts_by_the_excess() {
        let mut law = Timely::new(TimelyParams::default());
        let mut ctx = started(&mut law);
        ctx.rate = 50e9;
        ctx.prev_rtt = 600_000.0;
        // 1000 us > T_high: factor 1 - 0.8 * (1 - 500/1000) = 0.6 -> 30 Gb/s.
        close(sample(&mut law, &mut ctx, 1_000), 30e9);
    }

    #[test]
    fn positive_gradient_cuts_by_beta_times_gradient() {
        let mut law = Timely::new(TimelyParams::default());
        let mut ctx = started(&mut law);
        ctx.rate = 50e9;
        ctx.prev_rtt = 100_000.0;
        // new_rtt_diff = 2000 ns, rtt_diff = 0.875 * 2000 = 1750, g = 1750 / 20000 = 0.0875,
        // factor 1 - 0.8 * 0.0875 = 0.93 -> 46.5 Gb/s.
        close(sample(&mut law, &mut ctx, 102), 46.5e9);
        assert_eq!(ctx.neg_gradients, 0);
    }

    #[test]
    fn five_negative_gradients_switch_to_hyperactive_increase() {
        let mut law = Timely::new(TimelyParams::default());
        let mut ctx = started(&mut law);
        ctx.rate = 50e9;
        ctx.prev_rtt = 200_000.0;
        // 190, 180, 170, 160 us: each diff -10 us, gradient < 0, T_low < rtt < T_high:
        // + 10 Mb/s each. The fifth (150 us) is the fifth negative in a row: + 5 * 10 Mb/s.
        for (i, us) in [190, 180, 170, 160].into_iter().enumerate() {
            let expect = 50_000_000_000 + 10_000_000 * (i as u64 + 1);
            assert_eq!(sample(&mut law, &mut ctx, us), Some(Some(expect)));
        }
        assert_eq!(sample(&mut law, &mut ctx, 150), Some(Some(50_090_000_000)));
        // A sixth keeps HAI: + 50 Mb/s.
        assert_eq!(sample(&mut law, &mut ctx, 140), Some(Some(50_140_000_000)));
        // Six diffs of -10000 ns: rtt_diff = -10000 * (1 - 0.125^6) = -9999.96. A rise to
        // 200 us: new diff +60000, rtt_diff = 0.125 * -9999.96 + 0.875 * 60000 = 51250.0,
        // g = 2.5625, factor 1 - 0.8 * 2.5625 < 0 -> clamped at min_rate 100 Mb/s.
        assert_eq!(sample(&mut law, &mut ctx, 200), Some(Some(100_000_000)));
        assert!((ctx.rtt_diff - 51_250.0).abs() < 0.01, "{}", ctx.rtt_diff);
        assert_eq!(ctx.neg_gradients, 0);
    }

    #[test]
    fn huge_rtt_is_clamped_at_min_rate() {
        let mut law = Timely::new(TimelyParams::default());
        let mut ctx = started(&mut law);
        ctx.rate = 200e6;
        ctx.prev_rtt = 100_000_000.0;
        // 100 ms: factor 1 - 0.8 * (1 - 0.5/100) = 0.204 -> 40.8 Mb/s, below 100 Mb/s.
        assert_eq!(sample(&mut law, &mut ctx, 100_000), Some(Some(100_000_000)));
    }

    #[test]
    fn ignores_missing_and_zero_samples_and_acks_before_start() {
        let mut law = Timely::new(TimelyParams::default());
        let mut ctx = TimelyContext::default();
        // Before Start: nothing.
        assert_eq!(sample(&mut law, &mut ctx, 10), None);
        let mut ctx = started(&mut law);
        for rtt in [None, Some(Duration::ZERO)] {
            let mut act = Actions::default();
            let ack = Event::Ack {
                confirmed: sluice_wire::Psn::new(1),
                packets: 3,
                rtt,
            };
            law.on_event(Instant::ZERO, &mut ctx, &ack, &mut act);
            assert!(act.is_empty());
        }
        assert_eq!(ctx.prev_rtt, 0.0);
        // No timers: TIMELY neither asks for Timer events nor arms any.
        assert!(!law.interest().contains(EventKind::Timer));
        assert!(!law.interest().gates());
    }
}
