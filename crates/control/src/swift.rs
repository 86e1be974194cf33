//! Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
//! Datacenter", SIGCOMM 2020): a window law that keeps the RTT near a target delay, with
//! pacing once the window falls below one packet.
//!
//! The window `cwnd` is in packets (a float, down to `min_cwnd` = 0.001). Target delay (§3.5,
//! topology- and flow-based scaling):
//!
//! ```text
//! target = base_target + hops·per_hop + clamp(fs_α/√cwnd + fs_β, 0, fs_range)
//! fs_α   = fs_range / (1/√fs_min_cwnd - 1/√fs_max_cwnd),   fs_β = -fs_α/√fs_max_cwnd
//! ```
//!
//! Algorithm 1, with `delay` the ACK's RTT sample and `can_decrease` = at least one RTT since
//! the last decrease:
//!
//! ```text
//! on ACK:      retransmits = 0
//!              if delay < target: cwnd += ai·acked/cwnd   (cwnd >= 1)
//!                                 cwnd += ai·acked        (cwnd < 1)
//!              elif can_decrease: cwnd *= max(1 - β·(delay - target)/delay, 1 - max_mdf)
//! on timeout:  retransmits += 1
//!              if retransmits >= retx_reset: cwnd = min_cwnd
//!              elif can_decrease:            cwnd *= 1 - max_mdf
//! on NAK (sequence error, Swift's fast recovery):
//!              retransmits = 0; if can_decrease: cwnd *= 1 - max_mdf
//! cwnd = clamp(cwnd, min_cwnd, max_cwnd); if cwnd shrank: t_last_decrease = now
//! ```
//!
//! The engine gets `window = cwnd·mtu` bytes (at least one MTU: it enforces whole packets),
//! and, when `cwnd < 1`, a pacing rate of `cwnd·mtu·8/rtt` bits/s, i.e. one packet every
//! `rtt/cwnd` as in Swift (the rate counts payload only, so with the engine's per-packet
//! header bytes the real gap is longer by headers/mtu, about 2.6% at 4 KiB); otherwise no
//! pacing. `rtt` is the latest sample, or `base_rtt` before the first.
//!
//! The delay is the fabric's when the timestamp CC extension header is on ([`Law::ccx`] asks
//! for it): the echo leaves out the time the peer held the request, as Swift's NIC
//! timestamps do, and the real datapath times packets by the kernel's receive timestamps.
//! Without it the sample includes the peer's host delay; against a software peer that is
//! tens of microseconds of wake-up time, above the default target, and Swift falls to its
//! floor. Left out: Swift's second (endpoint) window and its EWMA of the delay. The RTT of `can_decrease` is the current sample
//! (the latest one on timeouts and NAKs). "Shrank" is strict (`cwnd < cwnd_prev`; the paper's
//! listing may read `<=`), so that holding at the floor or a blocked decrease does not push
//! `t_last_decrease` forward forever. No timers are armed.

use std::time::Duration;

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Law, NakKind};

use crate::params::{
    ParamError, ParamInfo, Params, parse_f64, parse_f64_in, parse_positive, parse_u32, unknown,
    us_to_ns,
};

/// Swift's parameters. The paper gives the equations but, in what could be checked here,
/// few numbers; the sources:
/// - `min_cwnd` 0.001 packets: the paper ("fall below one packet down to a minimum of
///   0.001 packets");
/// - `ai` 1 packet per RTT, `beta` 0.8, `max_mdf` 0.5: the commonly quoted Swift values
///   (open implementations differ, e.g. ai 0.5 to 2; not verified against the paper);
/// - `fs_min_cwnd` 0.1, `fs_max_cwnd` 100 packets: the flow-scaling range used by open
///   Swift implementations (not verified against the paper);
/// - `hops` 1, `per_hop_us` 2, `fs_range_us` 2: SCR's Swift at 100 Gbit/s (appendix A.6);
/// - `base_target_us` 25: Swift defines the base target as what a one-hop path with few
///   flows needs for full utilization, propagation and host delay included. SCR's 1 us
///   assumes NIC hardware timestamps; Sluice stamps in software, where the unloaded RTT is
///   tens of microseconds, so this is our choice (base_rtt plus 5 us), not a paper value;
/// - `base_rtt_us` 20 (our choice; for the initial window and for pacing before the first
///   sample), `init_cwnd` 0 = the bandwidth-delay product at line rate over base_rtt;
/// - `max_cwnd` 1000 packets and `retx_reset` 5 timeouts: our choices (the paper names
///   RETX_RESET_THRESHOLD without a value here).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwiftParams {
    /// Additive increment, packets per RTT.
    pub ai: f64,
    /// Multiplicative decrease constant, 0..1.
    pub beta: f64,
    /// Largest multiplicative decrease per RTT, 0..1.
    pub max_mdf: f64,
    /// Base target delay, µs.
    pub base_target_us: f64,
    /// Switch hops on the path.
    pub hops: u32,
    /// Target delay added per hop, µs.
    pub per_hop_us: f64,
    /// Most target delay flow scaling adds, µs.
    pub fs_range_us: f64,
    /// Window (packets) at and below which flow scaling adds all of `fs_range_us`.
    pub fs_min_cwnd: f64,
    /// Window (packets) at and above which flow scaling adds nothing.
    pub fs_max_cwnd: f64,
    /// Smallest window, packets.
    pub min_cwnd: f64,
    /// Largest window, packets.
    pub max_cwnd: f64,
    /// Initial window, packets; 0: line rate times `base_rtt_us`.
    pub init_cwnd: f64,
    /// Unloaded RTT, µs, for the initial window and pacing before the first sample.
    pub base_rtt_us: f64,
    /// Consecutive timeouts after which the window drops to `min_cwnd`.
    pub retx_reset: u32,
}

impl Default for SwiftParams {
    fn default() -> Self {
        SwiftParams {
            ai: 1.0,
            beta: 0.8,
            max_mdf: 0.5,
            base_target_us: 25.0,
            hops: 1,
            per_hop_us: 2.0,
            fs_range_us: 2.0,
            fs_min_cwnd: 0.1,
            fs_max_cwnd: 100.0,
            min_cwnd: 0.001,
            max_cwnd: 1000.0,
            init_cwnd: 0.0,
            base_rtt_us: 20.0,
            retx_reset: 5,
        }
    }
}

impl Params for SwiftParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "ai",
            help: "additive increment in packets per RTT (default 1)",
        },
        ParamInfo {
            name: "beta",
            help: "multiplicative decrease constant, 0..1 (default 0.8)",
        },
        ParamInfo {
            name: "max_mdf",
            help: "largest multiplicative decrease per RTT, 0..1 (default 0.5)",
        },
        ParamInfo {
            name: "base_target_us",
            help: "base target delay in us (default 25)",
        },
        ParamInfo {
            name: "hops",
            help: "switch hops on the path (default 1)",
        },
        ParamInfo {
            name: "per_hop_us",
            help: "target delay added per hop in us (default 2)",
        },
        ParamInfo {
            name: "fs_range_us",
            help: "most target delay added by flow scaling in us (default 2)",
        },
        ParamInfo {
            name: "fs_min_cwnd",
            help: "window in packets at and below which flow scaling adds all of fs_range, > 0 (default 0.1)",
        },
        ParamInfo {
            name: "fs_max_cwnd",
            help: "window in packets at and above which flow scaling adds nothing, > fs_min_cwnd (default 100)",
        },
        ParamInfo {
            name: "min_cwnd",
            help: "smallest window in packets, > 0 (default 0.001)",
        },
        ParamInfo {
            name: "max_cwnd",
            help: "largest window in packets (default 1000)",
        },
        ParamInfo {
            name: "init_cwnd",
            help: "initial window in packets; 0 = line rate x base_rtt_us (default 0)",
        },
        ParamInfo {
            name: "base_rtt_us",
            help: "unloaded RTT in us, for the initial window and pacing before a sample, > 0 (default 20)",
        },
        ParamInfo {
            name: "retx_reset",
            help: "consecutive timeouts after which the window drops to min_cwnd (default 5)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "ai" => self.ai = parse_f64(name, value)?,
            "beta" => self.beta = parse_f64_in(name, value, 0.0, 1.0)?,
            "max_mdf" => self.max_mdf = parse_f64_in(name, value, 0.0, 1.0)?,
            "base_target_us" => self.base_target_us = parse_f64(name, value)?,
            "hops" => self.hops = parse_u32(name, value)?,
            "per_hop_us" => self.per_hop_us = parse_f64(name, value)?,
            "fs_range_us" => self.fs_range_us = parse_f64(name, value)?,
            "fs_min_cwnd" => self.fs_min_cwnd = parse_positive(name, value)?,
            "fs_max_cwnd" => self.fs_max_cwnd = parse_positive(name, value)?,
            "min_cwnd" => self.min_cwnd = parse_positive(name, value)?,
            "max_cwnd" => self.max_cwnd = parse_positive(name, value)?,
            "init_cwnd" => self.init_cwnd = parse_f64(name, value)?,
            "base_rtt_us" => self.base_rtt_us = parse_positive(name, value)?,
            "retx_reset" => self.retx_reset = parse_u32(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Per-queue-pair state (48 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct SwiftContext {
    /// Congestion window in packets; 0 until `Start`.
    cwnd: f64,
    /// Line rate from `Start`, bits/s.
    line: f64,
    /// Latest RTT sample, ns; 0 before the first.
    rtt_ns: u64,
    /// When the window last shrank.
    last_decrease: Option<Instant>,
    /// Path MTU, bytes.
    mtu: u32,
    /// Consecutive retransmit timeouts.
    retransmits: u32,
}

/// Swift's fabric window, in its paper's form.
#[derive(Debug, Clone)]
pub struct Swift {
    ai: f64,
    beta: f64,
    max_mdf: f64,
    /// base_target + hops·per_hop, ns.
    fixed_target_ns: f64,
    fs_range_ns: f64,
    fs_alpha: f64,
    fs_beta: f64,
    min_cwnd: f64,
    max_cwnd: f64,
    init_cwnd: f64,
    base_rtt_ns: u64,
    retx_reset: u32,
}

impl Swift {
    /// A Swift law with parameters `p`.
    pub fn new(p: SwiftParams) -> Swift {
        // Fields are public, so sanitize here too: no NaN, no zero divisor below.
        let finite = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
        let fs_range_ns = finite(p.fs_range_us) * 1e3;
        let denom = 1.0 / finite(p.fs_min_cwnd).sqrt() - 1.0 / finite(p.fs_max_cwnd).sqrt();
        // A degenerate range (min >= max, or a zero bound) turns flow scaling off.
        let (fs_alpha, fs_beta) = if denom.is_finite() && denom > 0.0 {
            let a = fs_range_ns / denom;
            (a, -a / finite(p.fs_max_cwnd).sqrt())
        } else {
            (0.0, 0.0)
        };
        let min_cwnd = finite(p.min_cwnd).max(1e-9);
        Swift {
            ai: finite(p.ai),
            beta: finite(p.beta).min(1.0),
            max_mdf: finite(p.max_mdf).min(1.0),
            fixed_target_ns: (finite(p.base_target_us) + f64::from(p.hops) * finite(p.per_hop_us))
                * 1e3,
            fs_range_ns,
            fs_alpha,
            fs_beta,
            min_cwnd,
            max_cwnd: finite(p.max_cwnd).max(min_cwnd),
            init_cwnd: finite(p.init_cwnd),
            base_rtt_ns: us_to_ns(finite(p.base_rtt_us)).max(1),
            retx_reset: p.retx_reset,
        }
    }

    /// Target delay in ns for a window of `cwnd` packets (> 0).
    fn target_ns(&self, cwnd: f64) -> f64 {
        let fs = (self.fs_alpha / cwnd.sqrt() + self.fs_beta)
            .min(self.fs_range_ns)
            .max(0.0);
        self.fixed_target_ns + fs
    }

    fn can_decrease(&self, now: Instant, ctx: &SwiftContext, rtt_ns: u64) -> bool {
        ctx.last_decrease
            .is_none_or(|t| now - t >= Duration::from_nanos(rtt_ns))
    }

    /// Clamps the new window, notes a decrease from `before`, and tells the engine.
    fn apply(&self, now: Instant, ctx: &mut SwiftContext, before: f64, act: &mut Actions) {
        let cwnd = ctx.cwnd.min(self.max_cwnd).max(self.min_cwnd);
        if cwnd < before {
            ctx.last_decrease = Some(now);
        }
        ctx.cwnd = cwnd;
        let mtu = f64::from(ctx.mtu);
        act.set_window(((cwnd * mtu) as u64).max(u64::from(ctx.mtu)));
        if cwnd < 1.0 {
            // One packet every rtt/cwnd.
            let rtt_ns = if ctx.rtt_ns > 0 {
                ctx.rtt_ns
            } else {
                self.base_rtt_ns
            };
            let bps = cwnd * mtu * 8.0 * 1e9 / rtt_ns as f64;
            act.set_rate((bps as u64).min(ctx.line as u64));
        } else {
            act.unpace();
        }
    }

    fn on_ack(&self, now: Instant, ctx: &mut SwiftContext, packets: u32, delay_ns: u64) {
        ctx.rtt_ns = delay_ns;
        let delay = delay_ns as f64;
        let acked = f64::from(packets);
        let target = self.target_ns(ctx.cwnd);
        if delay < target {
            ctx.cwnd += if ctx.cwnd >= 1.0 {
                self.ai * acked / ctx.cwnd
            } else {
                self.ai * acked
            };
        } else if self.can_decrease(now, ctx, delay_ns) {
            let factor = (1.0 - self.beta * (delay - target) / delay).max(1.0 - self.max_mdf);
            ctx.cwnd *= factor;
        }
    }
}

impl Law for Swift {
    type Context = SwiftContext;

    fn name(&self) -> &'static str {
        "swift"
    }

    /// An RTT sample with every ACK, without the time the peer held the request.
    fn ccx(&self) -> Option<sluice_wire::CcxLayout> {
        Some(sluice_wire::CcxLayout::Timestamps)
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[
            EventKind::Start,
            EventKind::Ack,
            EventKind::Nak,
            EventKind::Timeout,
        ])
    }

    fn on_event(&mut self, now: Instant, ctx: &mut SwiftContext, event: &Event, act: &mut Actions) {
        if !matches!(event, Event::Start { .. }) && ctx.mtu == 0 {
            return; // not started
        }
        let mut before = ctx.cwnd;
        match *event {
            Event::Start { mtu, line_rate_bps } => {
                let mtu = mtu.max(1);
                let line = line_rate_bps as f64;
                let bdp = line * self.base_rtt_ns as f64 / 8e9 / f64::from(mtu);
                let init = if self.init_cwnd > 0.0 {
                    self.init_cwnd
                } else {
                    bdp
                };
                *ctx = SwiftContext {
                    cwnd: init,
                    line,
                    mtu,
                    ..SwiftContext::default()
                };
                before = 0.0; // a fresh start is no decrease
            }
            Event::Ack { packets, rtt, .. } => {
                ctx.retransmits = 0;
                match rtt {
                    Some(rtt) if !rtt.is_zero() => {
                        let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
                        self.on_ack(now, ctx, packets, ns);
                    }
                    _ => return, // no delay sample, nothing to decide
                }
            }
            Event::Nak {
                kind: NakKind::Sequence,
                ..
            } => {
                ctx.retransmits = 0;
                if self.can_decrease(now, ctx, ctx.rtt_ns) {
                    ctx.cwnd *= 1.0 - self.max_mdf;
                }
            }
            Event::Timeout => {
                ctx.retransmits = ctx.retransmits.saturating_add(1);
                if ctx.retransmits >= self.retx_reset {
                    ctx.cwnd = self.min_cwnd;
                } else if self.can_decrease(now, ctx, ctx.rtt_ns) {
                    ctx.cwnd *= 1.0 - self.max_mdf;
                }
            }
            _ => return,
        }
        self.apply(now, ctx, before, act);
    }
}

#[cfg(test)]
mod tests {
    use sluice_wire::Psn;

    use super::*;

    const LINE: u64 = 100_000_000_000;
    const MTU: u32 = 4096;

    /// Round numbers: 1/√0.25 = 2, 1/√4 = 0.5, so fs_α = 3000 ns / 1.5 = 2000 ns·√pkt and
    /// fs_β = -2000/2 = -1000 ns; fixed target = 10 + 1·2 = 12 us.
    fn params() -> SwiftParams {
        SwiftParams {
            base_target_us: 10.0,
            hops: 1,
            per_hop_us: 2.0,
            fs_range_us: 3.0,
            fs_min_cwnd: 0.25,
            fs_max_cwnd: 4.0,
            max_cwnd: 100.0,
            ..SwiftParams::default()
        }
    }

    fn at(us: u64) -> Instant {
        Instant::from_nanos(1_000_000 + us * 1_000)
    }

    fn run(law: &mut Swift, ctx: &mut SwiftContext, now: Instant, e: Event) -> Actions {
        let mut act = Actions::default();
        law.on_event(now, ctx, &e, &mut act);
        assert_eq!(act.timer(), None);
        act
    }

    fn started(law: &mut Swift, cwnd: f64) -> SwiftContext {
        let mut ctx = SwiftContext::default();
        let start = Event::Start {
            mtu: MTU,
            line_rate_bps: LINE,
        };
        run(law, &mut ctx, at(0), start);
        ctx.cwnd = cwnd;
        ctx
    }

    fn ack(packets: u32, rtt_us: u64) -> Event {
        Event::Ack {
            confirmed: Psn::new(1),
            packets,
            rtt: Some(Duration::from_micros(rtt_us)),
        }
    }

    #[test]
    fn target_delay_scales_with_the_window() {
        let law = Swift::new(params());
        // cwnd 1: 2000/1 - 1000 = 1000 ns on top of 12 us.
        assert_eq!(law.target_ns(1.0), 13_000.0);
        // cwnd 4 = fs_max_cwnd: 2000/2 - 1000 = 0.
        assert_eq!(law.target_ns(4.0), 12_000.0);
        // cwnd 0.25 = fs_min_cwnd: 2000/0.5 - 1000 = 3000 = fs_range.
        assert_eq!(law.target_ns(0.25), 15_000.0);
        // Outside the range the term is clamped to [0, fs_range].
        assert_eq!(law.target_ns(16.0), 12_000.0);
        assert_eq!(law.target_ns(0.01), 15_000.0);
    }

    #[test]
    fn starts_at_the_bandwidth_delay_product() {
        let mut law = Swift::new(SwiftParams::default());
        let mut ctx = SwiftContext::default();
        let start = Event::Start {
            mtu: MTU,
            line_rate_bps: LINE,
        };
        let act = run(&mut law, &mut ctx, at(0), start);
        // 100 Gb/s x 20 us / 8 = 250000 bytes = 61.03515625 packets of 4096.
        assert_eq!(ctx.cwnd, 61.035_156_25);
        assert_eq!(act.window(), Some(Some(250_000)));
        assert_eq!(act.rate(), Some(None));
        let mut law = Swift::new(SwiftParams {
            init_cwnd: 8.0,
            ..SwiftParams::default()
        });
        let act = run(&mut law, &mut ctx, at(0), start);
        assert_eq!(act.window(), Some(Some(8 * 4096)));
    }

    #[test]
    fn below_target_increases_additively() {
        let mut law = Swift::new(params());
        let mut ctx = started(&mut law, 10.0);
        // 11 us < 12 us: cwnd = 10 + 1 x 2 / 10 = 10.2 -> 10.2 x 4096 = 41779.2 bytes.
        let act = run(&mut law, &mut ctx, at(10), ack(2, 11));
        assert_eq!(ctx.cwnd, 10.2);
        assert_eq!(act.window(), Some(Some(41_779)));
        assert_eq!(act.rate(), Some(None));
        // Below one packet the increment is ai per packet: 0.25 + 1 x 1 = 1.25 (target at
        // 0.25 is 15 us; 11 us is below).
        ctx.cwnd = 0.25;
        run(&mut law, &mut ctx, at(20), ack(1, 11));
        assert_eq!(ctx.cwnd, 1.25);
        // At max_cwnd it stays there.
        ctx.cwnd = 100.0;
        let act = run(&mut law, &mut ctx, at(30), ack(5, 11));
        assert_eq!(ctx.cwnd, 100.0);
        assert_eq!(act.window(), Some(Some(409_600)));
    }

    #[test]
    fn above_target_decreases_once_per_rtt() {
        let mut law = Swift::new(params());
        let mut ctx = started(&mut law, 10.0);
        // Target at cwnd 10 = 12 us (2000/√10 - 1000 < 0). 16 us: factor
        // max(1 - 0.8 x 4/16, 0.5) = 0.8 -> cwnd 8.
        let act = run(&mut law, &mut ctx, at(100), ack(1, 16));
        assert!((ctx.cwnd - 8.0).abs() < 1e-12, "{}", ctx.cwnd);
        assert_eq!(act.window(), Some(Some(32_768)));
        // 10 us later (< one 16 us RTT): no decrease.
        run(&mut law, &mut ctx, at(110), ack(1, 16));
        assert!((ctx.cwnd - 8.0).abs() < 1e-12);
        // The RTT is the sample's: a 60 us sample 16 us after the decrease is too soon...
        run(&mut law, &mut ctx, at(116), ack(1, 60));
        assert!((ctx.cwnd - 8.0).abs() < 1e-12);
        // ...60 us after it, max(1 - 0.8 x 48/60, 0.5) = max(0.36, 0.5) -> 4.
        run(&mut law, &mut ctx, at(160), ack(1, 60));
        assert!((ctx.cwnd - 4.0).abs() < 1e-12, "{}", ctx.cwnd);
    }

    #[test]
    fn below_one_packet_it_paces() {
        let mut law = Swift::new(params());
        let mut ctx = started(&mut law, 0.5);
        // 100 us is far above any target: the max_mdf bound applies, cwnd = 0.25. Pacing:
        // 0.25 x 4096 x 8 bits / 100 us = 81.92 Mb/s; the window is one MTU.
        let act = run(&mut law, &mut ctx, at(0), ack(1, 100));
        assert_eq!(ctx.cwnd, 0.25);
        assert_eq!(act.rate(), Some(Some(81_920_000)));
        assert_eq!(act.window(), Some(Some(4096)));
        // At the floor: 0.0015 x 0.5 = 0.00075 -> min_cwnd 0.001, paced at
        // 0.001 x 32768 / 100 us = 327680 b/s.
        ctx.cwnd = 0.0015;
        let act = run(&mut law, &mut ctx, at(200), ack(1, 100));
        assert_eq!(ctx.cwnd, 0.001);
        assert_eq!(act.rate(), Some(Some(327_680)));
        // Back above one packet: unpaced.
        let act = run(&mut law, &mut ctx, at(300), ack(1, 5));
        assert_eq!(ctx.cwnd, 1.001);
        assert_eq!(act.rate(), Some(None));
    }

    #[test]
    fn timeouts_halve_then_reset_to_the_floor() {
        let mut law = Swift::new(params());
        let mut ctx = started(&mut law, 10.0);
        ctx.rtt_ns = 20_000;
        // First timeout: cwnd x (1 - 0.5) = 5.
        run(&mut law, &mut ctx, at(0), Event::Timeout);
        assert_eq!(ctx.cwnd, 5.0);
        // Second, within one 20 us RTT: no decrease. Third, 20 us later: 2.5.
        run(&mut law, &mut ctx, at(10), Event::Timeout);
        assert_eq!(ctx.cwnd, 5.0);
        run(&mut law, &mut ctx, at(30), Event::Timeout);
        assert_eq!(ctx.cwnd, 2.5);
        // Fourth (too soon), fifth: retx_reset = 5 consecutive timeouts -> min_cwnd.
        run(&mut law, &mut ctx, at(35), Event::Timeout);
        let act = run(&mut law, &mut ctx, at(36), Event::Timeout);
        assert_eq!(ctx.cwnd, 0.001);
        assert_eq!(act.window(), Some(Some(4096)));
        // An ACK (even without a sample) clears the count.
        let act = run(
            &mut law,
            &mut ctx,
            at(40),
            Event::Ack {
                confirmed: Psn::new(1),
                packets: 1,
                rtt: None,
            },
        );
        assert!(act.is_empty());
        assert_eq!(ctx.retransmits, 0);
        // A sequence NAK is fast recovery: 0.001 x 0.5 is clamped at the floor anyway; at
        // cwnd 8 (more than an RTT after the last decrease) it halves.
        ctx.cwnd = 8.0;
        run(
            &mut law,
            &mut ctx,
            at(100),
            Event::Nak {
                psn: Psn::new(1),
                kind: NakKind::Sequence,
            },
        );
        assert_eq!(ctx.cwnd, 4.0);
    }

    #[test]
    fn ignores_events_before_start_and_zero_samples() {
        let mut law = Swift::new(params());
        let mut ctx = SwiftContext::default();
        assert!(run(&mut law, &mut ctx, at(0), ack(1, 10)).is_empty());
        assert!(run(&mut law, &mut ctx, at(0), Event::Timeout).is_empty());
        let mut ctx = started(&mut law, 3.0);
        let zero = Event::Ack {
            confirmed: Psn::new(1),
            packets: 1,
            rtt: Some(Duration::ZERO),
        };
        assert!(run(&mut law, &mut ctx, at(0), zero).is_empty());
        assert_eq!(ctx.cwnd, 3.0);
    }

    #[test]
    fn degenerate_parameters_divide_by_nothing() {
        let law = Swift::new(SwiftParams {
            fs_min_cwnd: 0.0,
            fs_max_cwnd: 0.0,
            min_cwnd: 0.0,
            base_rtt_us: 0.0,
            ..SwiftParams::default()
        });
        assert_eq!(law.target_ns(law.min_cwnd), 27_000.0);
        assert!(law.min_cwnd > 0.0 && law.base_rtt_ns > 0);
    }
}
