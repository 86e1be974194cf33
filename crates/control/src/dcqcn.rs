//! DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015):
//! switches mark ECN, the receiver (notification point, NP) turns marks into CNPs, the
//! sender (reaction point, RP) cuts its rate on a CNP and climbs back on timers and a byte
//! counter.
//!
//! Notification point, on a request packet arriving with CE:
//! send a CNP unless this queue pair already sent one less than `cnp_interval` (N) ago.
//!
//! Reaction point, with current rate `R_C`, target rate `R_T` and congestion estimate `α`:
//!
//! ```text
//! on a CNP:            R_T = R_C
//!                      R_C = R_C · (1 − α/2)
//!                      α   = (1 − g)·α + g
//!                      T = BC = 0, byte counter and both timers restart
//! every K without CNP: α   = (1 − g)·α
//! increase event       (the timer expires every T_inc: T += 1; B bytes sent: BC += 1):
//!   max(T, BC) < F     fast recovery:              R_C = (R_T + R_C)/2
//!   min(T, BC) < F     additive increase:  R_T += R_AI;          R_C = (R_T + R_C)/2
//!   otherwise          hyper increase:     R_T += i·R_HAI;       R_C = (R_T + R_C)/2,
//!                                          i = min(T, BC) − F + 1
//! ```
//!
//! `R_T` and `R_C` stay within `[min_rate, line rate]`; a queue pair starts at line rate with
//! `α = 1`. The RP runs no timer until its first CNP, and stops again once `R_C` is back at
//! line rate (then no increase is possible). One law timer per queue pair serves both the α
//! timer (period K) and the increase timer (period T_inc): the context keeps the next due
//! time of each and arms the earlier. While the timer is stopped, α's decay is caught up at
//! the next CNP (`α·(1 − g)^n` for the n periods K that passed), which is exactly what a
//! free-running α timer would have done. A late timer performs every expiry it missed (up to
//! 256 increase events per event, as does a huge coalesced TX for the byte counter).
//!
//! `cnp_delay_us` (0 by default) makes the RP act on each CNP that long after it arrives,
//! the way SwCC's Fig 1 lengthens the control loop ("artificially delaying CNP
//! processing"). The delayed cuts wait in the context (at most [`MAX_PENDING`]; a CNP
//! arriving when they are all taken is dropped, as a full CNP queue would) and the law
//! timer fires for each; a cut then happens as if the CNP had arrived at its due time.

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Law};

use crate::notification::NotificationPoint;
use crate::params::{
    ParamError, ParamInfo, Params, mbps_to_bps, parse_f64, parse_f64_in, parse_positive, parse_u32,
    parse_u64_in, unknown, us_to_ns,
};

/// The most increase events one event performs (a late timer or a huge coalesced TX): far
/// more than any sane parameters need to reach line rate, and it bounds the work.
const MAX_INCREASES: u64 = 256;

/// The most CNPs waiting out `cnp_delay_us` at once: the NP sends at most one per N
/// (50 µs by default), so three cover delays past 100 µs, and the context stays within
/// its 128 bytes.
pub const MAX_PENDING: usize = 3;

/// DCQCN's parameters. Defaults, from the DCQCN paper (SIGCOMM 2015) unless said otherwise:
/// g = 1/256, N = 50 µs and K = 55 µs as SwCC (§5.1, §5.7.1) quotes them from it; B = 10 MB,
/// F = 5 and R_AI = 40 Mbit/s from the paper's control law; T = 55 µs, as SwCC's DCQCN runs
/// its increase on the same 55 µs tick as α (the ns-3 DCQCN and HPCC simulators default to
/// 1500 µs). R_HAI =
/// 200 Mbit/s from the authors' simulator configuration (bobzhuyb/ns3-rdma `mix/config.txt`:
/// `RATE_HAI 200Mb/s`, alongside `RATE_AI 40Mb/s`, `FAST_RECOVERY_TIMES 5`, `CNP_INTERVAL 50`,
/// `ALPHA_RESUME_INTERVAL 55`). The paper gives no rate floor; 10 Mbit/s is this project's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnParams {
    /// α's gain g (paper: 1/256).
    pub g: f64,
    /// K: α decays once per this period without a CNP, in µs (paper: 55).
    pub alpha_timer_us: f64,
    /// T_inc: the rate-increase timer's period, in µs (55).
    pub increase_timer_us: f64,
    /// B: a rate-increase event per this many bytes sent, in bytes (paper: 10 MB).
    pub byte_counter_bytes: u64,
    /// F: increase events of fast recovery before additive increase (paper: 5).
    pub fast_recovery: u32,
    /// R_AI: additive increase step, in Mbit/s (paper: 40).
    pub rate_ai_mbps: f64,
    /// R_HAI: hyper increase step, in Mbit/s (authors' simulator: 200).
    pub rate_hai_mbps: f64,
    /// Floor of the rate, in Mbit/s (10; the paper gives none).
    pub min_rate_mbps: f64,
    /// N: at most one CNP per queue pair per this period, in µs (paper: 50).
    pub cnp_interval_us: f64,
    /// The RP acts on a CNP this long after it arrives, in µs (0: at once).
    pub cnp_delay_us: f64,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams {
            g: 1.0 / 256.0,
            alpha_timer_us: 55.0,
            increase_timer_us: 55.0,
            byte_counter_bytes: 10_000_000,
            fast_recovery: 5,
            rate_ai_mbps: 40.0,
            rate_hai_mbps: 200.0,
            min_rate_mbps: 10.0,
            cnp_interval_us: 50.0,
            cnp_delay_us: 0.0,
        }
    }
}

impl Params for DcqcnParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "g",
            help: "gain of the congestion estimate alpha, 0..=1 (default 1/256)",
        },
        ParamInfo {
            name: "alpha_timer_us",
            help: "K: alpha decays once per this many us without a CNP (default 55)",
        },
        ParamInfo {
            name: "increase_timer_us",
            help: "T: period of the rate-increase timer in us (default 55)",
        },
        ParamInfo {
            name: "byte_counter_bytes",
            help: "B: one rate-increase event per this many bytes sent (default 10000000)",
        },
        ParamInfo {
            name: "fast_recovery",
            help: "F: increase events of fast recovery before additive increase (default 5)",
        },
        ParamInfo {
            name: "rate_ai_mbps",
            help: "R_AI: additive increase step in Mbit/s (default 40)",
        },
        ParamInfo {
            name: "rate_hai_mbps",
            help: "R_HAI: hyper increase step in Mbit/s (default 200)",
        },
        ParamInfo {
            name: "min_rate_mbps",
            help: "lowest rate in Mbit/s, above 0 (default 10)",
        },
        ParamInfo {
            name: "cnp_interval_us",
            help: "N: at most one CNP per queue pair per this many us (default 50)",
        },
        ParamInfo {
            name: "cnp_delay_us",
            help: "the sender acts on a CNP this many us after it arrives (default 0)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "g" => self.g = parse_f64_in(name, value, 0.0, 1.0)?,
            "alpha_timer_us" => self.alpha_timer_us = parse_positive(name, value)?,
            "increase_timer_us" => self.increase_timer_us = parse_positive(name, value)?,
            "byte_counter_bytes" => {
                self.byte_counter_bytes = parse_u64_in(name, value, 1, u64::MAX)?
            }
            "fast_recovery" => self.fast_recovery = parse_u32(name, value)?,
            "rate_ai_mbps" => self.rate_ai_mbps = parse_f64(name, value)?,
            "rate_hai_mbps" => self.rate_hai_mbps = parse_f64(name, value)?,
            "min_rate_mbps" => self.min_rate_mbps = parse_positive(name, value)?,
            "cnp_interval_us" => self.cnp_interval_us = parse_f64(name, value)?,
            "cnp_delay_us" => self.cnp_delay_us = parse_f64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// The sender half of a queue pair's state.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReactionPoint {
    /// Line rate in bit/s; 0 until `Start`.
    line: u64,
    /// Floor of the rate: `min_rate`, at most the line rate.
    floor: u64,
    /// R_C, bit/s.
    rc: u64,
    /// R_T, bit/s.
    rt: u64,
    alpha: f64,
    /// Next α decay, ns (valid once `cut`).
    alpha_due: u64,
    /// Next increase-timer expiry, ns (valid while [`ReactionPoint::active`]).
    inc_due: u64,
    /// Bytes sent toward the next byte-counter expiry.
    tx_bytes: u64,
    /// T: increase-timer expiries since the last cut.
    timer_count: u32,
    /// BC: byte-counter expiries since the last cut.
    byte_count: u32,
    /// A CNP has cut the rate at least once (α's timer exists).
    cut: bool,
    /// How many of `pending` are taken.
    pending_len: u8,
    /// Due times (ns) of the CNPs waiting out `cnp_delay`, earliest first.
    pending: [u64; MAX_PENDING],
}

impl ReactionPoint {
    /// The rate is below line rate: the increase machinery and the timer run (never
    /// before Start, when both are 0).
    fn active(&self) -> bool {
        self.rc < self.line
    }

    /// The earliest delayed CNP, if any.
    fn next_pending(&self) -> Option<u64> {
        (self.pending_len > 0).then_some(self.pending[0])
    }

    /// Takes the earliest delayed CNP out if it is due by `now`.
    fn pop_pending(&mut self, now: u64) -> Option<u64> {
        let due = self.next_pending().filter(|&d| d <= now)?;
        let n = usize::from(self.pending_len);
        self.pending.copy_within(1..n, 0);
        self.pending_len -= 1;
        Some(due)
    }
}

/// Per-queue-pair state of [`Dcqcn`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DcqcnContext {
    rp: ReactionPoint,
    np: NotificationPoint,
}

/// The DCQCN control law, both ends (NP and RP).
#[derive(Debug, Clone, Copy)]
pub struct Dcqcn {
    g: f64,
    k_ns: u64,
    t_ns: u64,
    b: u64,
    f: u32,
    r_ai: u64,
    r_hai: u64,
    min_rate: u64,
    cnp_interval_ns: u64,
    cnp_delay_ns: u64,
}

impl Dcqcn {
    /// A DCQCN law with parameters `p`.
    pub fn new(p: DcqcnParams) -> Dcqcn {
        Dcqcn {
            g: p.g.clamp(0.0, 1.0),
            // Zero periods would make the timers spin; parsing refuses them, this guards
            // hand-built parameters.
            k_ns: us_to_ns(p.alpha_timer_us).max(1),
            t_ns: us_to_ns(p.increase_timer_us).max(1),
            b: p.byte_counter_bytes.max(1),
            f: p.fast_recovery,
            r_ai: mbps_to_bps(p.rate_ai_mbps),
            r_hai: mbps_to_bps(p.rate_hai_mbps),
            min_rate: mbps_to_bps(p.min_rate_mbps).max(1),
            cnp_interval_ns: us_to_ns(p.cnp_interval_us),
            cnp_delay_ns: us_to_ns(p.cnp_delay_us),
        }
    }

    /// Applies every α decay due by `now` (periods K without a CNP).
    fn decay_alpha(&self, rp: &mut ReactionPoint, now: u64) {
        if now < rp.alpha_due {
            return;
        }
        let n = (now - rp.alpha_due) / self.k_ns + 1;
        rp.alpha *= (1.0 - self.g).powi(n.min(1 << 20) as i32);
        rp.alpha_due = rp.alpha_due.saturating_add(n.saturating_mul(self.k_ns));
    }

    /// One increase event (T or BC was just incremented): the stage follows from both.
    fn increase(&self, rp: &mut ReactionPoint) {
        let (t, bc) = (rp.timer_count, rp.byte_count);
        if t.max(bc) < self.f {
            // Fast recovery: R_T stays, R_C closes half the gap.
        } else if t.min(bc) < self.f {
            rp.rt = rp.rt.saturating_add(self.r_ai);
        } else {
            let i = u64::from(t.min(bc) - self.f) + 1;
            rp.rt = rp.rt.saturating_add(i.saturating_mul(self.r_hai));
        }
        rp.rt = rp.rt.clamp(rp.floor, rp.line);
        // Rounded up, so that R_C reaches R_T instead of stalling one bit/s below it.
        let avg = (u128::from(rp.rt) + u128::from(rp.rc)).div_ceil(2) as u64;
        rp.rc = avg.clamp(rp.floor, rp.line);
    }

    /// Publishes R_C and keeps the timer (see [`Dcqcn::arm`]).
    fn finish(&self, rp: &mut ReactionPoint, act: &mut Actions) {
        if rp.rc >= rp.line {
            act.unpace();
        } else {
            act.set_rate(rp.rc);
        }
        self.arm(rp, act);
    }

    /// Keeps the timer: armed at the earliest of the two due times (while below line
    /// rate) and the first delayed CNP, cancelled when there is none of them.
    fn arm(&self, rp: &ReactionPoint, act: &mut Actions) {
        let timers = rp.active().then(|| rp.alpha_due.min(rp.inc_due));
        match [timers, rp.next_pending()].into_iter().flatten().min() {
            Some(at) => act.arm_timer(Instant::from_nanos(at)),
            None => act.cancel_timer(),
        }
    }

    /// A CNP arrived: cut now, or once it has waited out `cnp_delay`.
    fn on_cnp_arrival(&self, now: u64, rp: &mut ReactionPoint, act: &mut Actions) {
        if self.cnp_delay_ns == 0 {
            return self.on_cnp(now, rp, act);
        }
        if rp.line == 0 || usize::from(rp.pending_len) == MAX_PENDING {
            return; // not started, or the delayed CNPs fill their queue
        }
        rp.pending[usize::from(rp.pending_len)] = now.saturating_add(self.cnp_delay_ns);
        rp.pending_len += 1;
        self.arm(rp, act);
    }

    fn on_cnp(&self, now: u64, rp: &mut ReactionPoint, act: &mut Actions) {
        if rp.line == 0 {
            return; // not started: nothing to cut
        }
        if rp.cut {
            self.decay_alpha(rp, now);
        }
        rp.rt = rp.rc;
        let cut = rp.rc as f64 * (1.0 - rp.alpha / 2.0);
        rp.rc = (cut as u64).clamp(rp.floor, rp.line);
        rp.alpha = (1.0 - self.g) * rp.alpha + self.g;
        rp.timer_count = 0;
        rp.byte_count = 0;
        rp.tx_bytes = 0;
        rp.alpha_due = now.saturating_add(self.k_ns);
        rp.inc_due = now.saturating_add(self.t_ns);
        rp.cut = true;
        // A cut that leaves R_C at line rate (α = 0, or a floor at line rate) runs no timer:
        // there is nothing to increase, and α's decay is caught up at the next CNP.
        self.finish(rp, act);
    }

    fn on_timer(&self, now: u64, rp: &mut ReactionPoint, act: &mut Actions) {
        while let Some(due) = rp.pop_pending(now) {
            self.on_cnp(due, rp, act);
        }
        if !rp.active() {
            return; // stale: the timer was cancelled at line rate
        }
        self.decay_alpha(rp, now);
        if now >= rp.inc_due {
            let n = (now - rp.inc_due) / self.t_ns + 1;
            rp.inc_due = rp.inc_due.saturating_add(n.saturating_mul(self.t_ns));
            for _ in 0..n.min(MAX_INCREASES) {
                rp.timer_count = rp.timer_count.saturating_add(1);
                self.increase(rp);
            }
        }
        self.finish(rp, act);
    }

    fn on_tx(&self, bytes: u32, rp: &mut ReactionPoint, act: &mut Actions) {
        if !rp.active() {
            return; // at line rate the byte counter has nothing to do
        }
        rp.tx_bytes = rp.tx_bytes.saturating_add(u64::from(bytes));
        let n = rp.tx_bytes / self.b;
        if n == 0 {
            return;
        }
        rp.tx_bytes %= self.b;
        for _ in 0..n.min(MAX_INCREASES) {
            rp.byte_count = rp.byte_count.saturating_add(1);
            self.increase(rp);
        }
        self.finish(rp, act);
    }
}

impl Law for Dcqcn {
    type Context = DcqcnContext;

    fn name(&self) -> &'static str {
        "dcqcn"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[
            EventKind::Start,
            EventKind::Tx,
            EventKind::Rx,
            EventKind::Cnp,
            EventKind::Timer,
        ])
    }

    fn on_event(&mut self, now: Instant, ctx: &mut DcqcnContext, event: &Event, act: &mut Actions) {
        let now = now.as_nanos();
        match *event {
            Event::Start { line_rate_bps, .. } => {
                let line = line_rate_bps.max(1);
                ctx.rp = ReactionPoint {
                    line,
                    floor: self.min_rate.min(line),
                    rc: line,
                    rt: line,
                    alpha: 1.0,
                    ..ReactionPoint::default()
                };
                act.unpace();
            }
            Event::Cnp => self.on_cnp_arrival(now, &mut ctx.rp, act),
            Event::Timer => self.on_timer(now, &mut ctx.rp, act),
            Event::Tx { bytes, .. } => self.on_tx(bytes, &mut ctx.rp, act),
            Event::Rx { ce, .. } => ctx.np.on_rx(now, ce, self.cnp_interval_ns, act),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::Psn;

    const G100: u64 = 100_000_000_000;
    const US: u64 = 1_000;
    const T0: u64 = 1_000_000;

    fn run(law: &mut Dcqcn, ctx: &mut DcqcnContext, at: u64, e: Event) -> Actions {
        let mut act = Actions::default();
        law.on_event(Instant::from_nanos(at), ctx, &e, &mut act);
        act
    }

    fn started(law: &mut Dcqcn, line: u64) -> DcqcnContext {
        let mut ctx = DcqcnContext::default();
        let start = Event::Start {
            mtu: 4096,
            line_rate_bps: line,
        };
        let act = run(law, &mut ctx, T0, start);
        assert_eq!(act.rate(), Some(None), "starts unpaced, at line rate");
        assert_eq!(act.timer(), None, "no timer before the first CNP");
        ctx
    }

    fn tx(bytes: u32) -> Event {
        Event::Tx {
            psn: Psn::new(0),
            bytes,
            retransmission: false,
        }
    }

    fn at(ns: u64) -> Option<Option<Instant>> {
        Some(Some(Instant::from_nanos(ns)))
    }

    #[test]
    fn a_cnp_cuts_by_alpha_and_raises_alpha() {
        let mut law = Dcqcn::new(DcqcnParams::default());
        let mut ctx = started(&mut law, G100);
        // α = 1: R_T = 100G, R_C = 100G·(1 − 1/2) = 50G, α = (255/256)·1 + 1/256 = 1.
        let act = run(&mut law, &mut ctx, T0, Event::Cnp);
        assert_eq!(act.rate(), Some(Some(50_000_000_000)));
        assert_eq!((ctx.rp.rt, ctx.rp.alpha), (G100, 1.0));
        // K = T = 55 µs: one timer, at T0 + 55 µs.
        assert_eq!(act.timer(), at(T0 + 55 * US));
        // Tx before any counter expiry: nothing to do.
        assert!(run(&mut law, &mut ctx, T0 + US, tx(4096)).is_empty());
    }

    #[test]
    fn alpha_decays_without_cnps_and_sets_the_next_cut() {
        let mut law = Dcqcn::new(DcqcnParams::default());
        let mut ctx = started(&mut law, G100);
        run(&mut law, &mut ctx, T0, Event::Cnp); // R_C = 50G, R_T = 100G, α = 1
        // At T0 + 55 µs: α = 255/256 = 0.99609375; fast recovery (T = 1 < 5):
        // R_C = (100G + 50G)/2 = 75G.
        let act = run(&mut law, &mut ctx, T0 + 55 * US, Event::Timer);
        assert_eq!(ctx.rp.alpha, 0.99609375);
        assert_eq!(act.rate(), Some(Some(75_000_000_000)));
        assert_eq!(act.timer(), at(T0 + 110 * US));
        // A CNP now: R_T = 75G, R_C = 75G·(1 − 0.99609375/2) = 75G·257/512 = 37_646_484_375,
        // α = (255/256)·0.99609375 + 1/256 = 65281/65536 = 0.9961090087890625 (exact).
        let act = run(&mut law, &mut ctx, T0 + 60 * US, Event::Cnp);
        assert_eq!(act.rate(), Some(Some(37_646_484_375)));
        assert_eq!(ctx.rp.rt, 75_000_000_000);
        assert_eq!(ctx.rp.alpha, 0.9961090087890625);
        // Both timers restart from the CNP.
        assert_eq!(act.timer(), at(T0 + 115 * US));
    }

    #[test]
    fn fast_recovery_then_additive_then_hyper_increase() {
        // B = 1000 bytes so that the byte counter is easy to drive.
        let mut law = Dcqcn::new(DcqcnParams {
            byte_counter_bytes: 1000,
            ..DcqcnParams::default()
        });
        let mut ctx = started(&mut law, G100);
        run(&mut law, &mut ctx, T0, Event::Cnp); // R_C = 50G, R_T = 100G, α = 1
        run(&mut law, &mut ctx, T0 + US, Event::Cnp); // R_C = 25G, R_T = 50G, α = 1
        let g = 1_000_000_000u64;
        assert_eq!((ctx.rp.rc, ctx.rp.rt), (25 * g, 50 * g));
        // 4000 bytes: BC = 1..4, all fast recovery (T = 0, BC < 5):
        // R_C = 37.5G, 43.75G, 46.875G, 48.4375G.
        let act = run(&mut law, &mut ctx, T0 + 2 * US, tx(4000));
        assert_eq!(act.rate(), Some(Some(48_437_500_000)));
        assert_eq!(ctx.rp.rt, 50 * g);
        // 1000 more: BC = 5 ≥ F, T = 0 < F: additive. R_T = 50G + 40M = 50.04G,
        // R_C = (50.04G + 48.4375G)/2 = 49.23875G.
        let act = run(&mut law, &mut ctx, T0 + 3 * US, tx(1000));
        assert_eq!(act.rate(), Some(Some(49_238_750_000)));
        assert_eq!(ctx.rp.rt, 50_040_000_000);
        // Timer expiries at T0 + 1 µs + k·55 µs. k = 1..4: T < F, BC = 5: additive each,
        // R_T = 50.08G, 50.12G, 50.16G, 50.20G. A late timer performs all four at once.
        let act = run(&mut law, &mut ctx, T0 + US + 220 * US, Event::Timer);
        assert_eq!(ctx.rp.rt, 50_200_000_000);
        assert_eq!(ctx.rp.timer_count, 4);
        // R_C: (50.08G + 49.23875G)/2 = 49.659375G; (50.12G + ·)/2 = 49.8896875G;
        // (50.16G + ·)/2 = 50.02484375G; (50.20G + ·)/2 = 50.112421875G.
        assert_eq!(act.rate(), Some(Some(50_112_421_875)));
        assert_eq!(act.timer(), at(T0 + US + 275 * US));
        // k = 5: T = 5, BC = 5: hyper, i = min(5, 5) − 5 + 1 = 1: R_T = 50.2G + 200M = 50.4G,
        // R_C = (50.4G + 50.112421875G)/2 = 50.2562109375G → rounded up to 50_256_210_938.
        let act = run(&mut law, &mut ctx, T0 + US + 275 * US, Event::Timer);
        assert_eq!(ctx.rp.rt, 50_400_000_000);
        assert_eq!(act.rate(), Some(Some(50_256_210_938)));
        // BC = 6, T = 5: i = min(5, 6) − 4 = 1 → R_T = 50.6G; then T = 6, BC = 6 (timer):
        // i = 2 → R_T = 51.0G.
        run(&mut law, &mut ctx, T0 + 300 * US, tx(1000));
        assert_eq!(ctx.rp.rt, 50_600_000_000);
        run(&mut law, &mut ctx, T0 + US + 330 * US, Event::Timer);
        assert_eq!(ctx.rp.rt, 51_000_000_000);
    }

    #[test]
    fn one_timer_serves_the_alpha_and_the_increase_timers() {
        // K = 30 µs, T = 55 µs: the timer alternates between the two due times.
        let mut law = Dcqcn::new(DcqcnParams {
            alpha_timer_us: 30.0,
            ..DcqcnParams::default()
        });
        let mut ctx = started(&mut law, G100);
        let act = run(&mut law, &mut ctx, T0, Event::Cnp);
        assert_eq!(act.timer(), at(T0 + 30 * US));
        // At 30 µs only α decays (R_C stays 50G); next due: the increase at 55 µs.
        let act = run(&mut law, &mut ctx, T0 + 30 * US, Event::Timer);
        assert_eq!(ctx.rp.alpha, 0.99609375);
        assert_eq!(act.rate(), Some(Some(50_000_000_000)));
        assert_eq!(act.timer(), at(T0 + 55 * US));
        // At 55 µs: an increase (75G), α untouched; next due: α at 60 µs.
        let act = run(&mut law, &mut ctx, T0 + 55 * US, Event::Timer);
        assert_eq!(ctx.rp.alpha, 0.99609375);
        assert_eq!(act.rate(), Some(Some(75_000_000_000)));
        assert_eq!(act.timer(), at(T0 + 60 * US));
    }

    #[test]
    fn the_rate_floors_at_min_rate_and_recovers_to_line_rate_then_stops_its_timer() {
        let mut law = Dcqcn::new(DcqcnParams::default());
        let mut ctx = started(&mut law, G100);
        // α stays 1 under back-to-back CNPs: 100G / 2^40 is far below the 10 Mbit/s floor.
        let mut act = Actions::default();
        for _ in 0..40 {
            act = run(&mut law, &mut ctx, T0, Event::Cnp);
        }
        assert_eq!(act.rate(), Some(Some(10_000_000)));
        assert_eq!(ctx.rp.rt, 10_000_000);
        // Fire the timer at every armed time until the law cancels it.
        let mut now = T0;
        let mut armed = act.timer();
        while let Some(Some(t)) = armed {
            assert!(t.as_nanos() > now);
            now = t.as_nanos();
            let a = run(&mut law, &mut ctx, now, Event::Timer);
            if let Some(Some(r)) = a.rate() {
                assert!((10_000_000..G100).contains(&r));
            }
            armed = a.timer();
            if armed == Some(None) {
                assert_eq!(a.rate(), Some(None), "back at line rate: unpaced");
            }
        }
        assert_eq!(armed, Some(None));
        assert_eq!((ctx.rp.rc, ctx.rp.rt, ctx.rp.active()), (G100, G100, false));
        // Stopped: a Tx changes nothing.
        assert!(run(&mut law, &mut ctx, now + 1, tx(4096)).is_empty());
        // The α timer was stopped too; the next CNP catches its decay up: α decayed once
        // per 55 µs since the last CNP at T0 (n = (t − T0)/55 µs periods, all without CNP).
        let later = now + 1_000 * US;
        let n = (later - T0) / (55 * US);
        let alpha = (1.0f64 - 1.0 / 256.0).powi(n as i32);
        let act = run(&mut law, &mut ctx, later, Event::Cnp);
        let want = G100 as f64 * (1.0 - alpha / 2.0);
        // (Step-by-step decay and one powi may differ in the last bits of α.)
        let Some(Some(got)) = act.rate() else {
            panic!("{act:?}")
        };
        assert!((got as f64 - want).abs() < 1_000.0, "{got} vs {want}");
        assert!(alpha < 0.5, "α really decayed ({alpha})");
    }

    #[test]
    fn a_floor_above_the_line_rate_is_the_line_rate() {
        let mut law = Dcqcn::new(DcqcnParams {
            min_rate_mbps: 50_000.0,
            ..DcqcnParams::default()
        });
        let mut ctx = started(&mut law, 10_000_000_000);
        // R_C = 10G·(1 − 1/2) = 5G, clamped up to the floor, which is the line rate (10G):
        // nothing to recover, so no timer.
        let act = run(&mut law, &mut ctx, T0, Event::Cnp);
        assert_eq!((act.rate(), act.timer()), (Some(None), Some(None)));
        assert_eq!((ctx.rp.rc, ctx.rp.rt), (10_000_000_000, 10_000_000_000));
    }

    #[test]
    fn a_delayed_cnp_cuts_when_its_delay_is_over_as_if_it_arrived_then() {
        let mut law = Dcqcn::new(DcqcnParams {
            cnp_delay_us: 20.0,
            ..DcqcnParams::default()
        });
        let mut ctx = started(&mut law, G100);
        // The CNP only arms the timer for its due time.
        let act = run(&mut law, &mut ctx, T0, Event::Cnp);
        assert_eq!((act.rate(), act.timer()), (None, at(T0 + 20 * US)));
        // A second one waits behind it; the timer stays on the first.
        let act = run(&mut law, &mut ctx, T0 + 5 * US, Event::Cnp);
        assert_eq!((act.rate(), act.timer()), (None, at(T0 + 20 * US)));
        // At T0 + 20 µs the first cuts (100G → 50G) and restarts the timers from then; the
        // next expiry is the second CNP's, at T0 + 25 µs.
        let act = run(&mut law, &mut ctx, T0 + 20 * US, Event::Timer);
        assert_eq!(act.rate(), Some(Some(50_000_000_000)));
        assert_eq!(act.timer(), at(T0 + 25 * US));
        let act = run(&mut law, &mut ctx, T0 + 25 * US, Event::Timer);
        assert_eq!(act.rate(), Some(Some(25_000_000_000)));
        assert_eq!(act.timer(), at(T0 + 80 * US));
        // A late timer performs every cut due, each at its own due time.
        for k in 0..3 {
            run(&mut law, &mut ctx, T0 + 30 * US + k, Event::Cnp);
        }
        // The queue holds three: a fourth is dropped.
        assert!(run(&mut law, &mut ctx, T0 + 31 * US, Event::Cnp).is_empty());
        let act = run(&mut law, &mut ctx, T0 + 60 * US, Event::Timer);
        assert_eq!(act.rate(), Some(Some(3_125_000_000)));
        assert_eq!(act.timer(), at(T0 + 50 * US + 2 + 55 * US));
    }

    #[test]
    fn the_notification_point_sends_at_most_one_cnp_per_interval() {
        let mut law = Dcqcn::new(DcqcnParams::default());
        let mut ctx = DcqcnContext::default(); // a responder never sees Start
        let rx = |ce| Event::Rx {
            psn: Psn::new(1),
            bytes: 4096,
            ce,
        };
        assert!(!run(&mut law, &mut ctx, T0, rx(false)).cnp());
        assert!(
            run(&mut law, &mut ctx, T0 + US, rx(true)).cnp(),
            "the first mark"
        );
        assert!(
            !run(&mut law, &mut ctx, T0 + 50 * US, rx(true)).cnp(),
            "49 µs later"
        );
        assert!(
            run(&mut law, &mut ctx, T0 + 51 * US, rx(true)).cnp(),
            "50 µs later"
        );
        assert!(!run(&mut law, &mut ctx, T0 + 200 * US, rx(false)).cnp());
    }
}
