//! DCTCP (Alizadeh et al., "Data Center TCP", SIGCOMM 2010; RFC 8257) on RoCE: a window
//! that grows like TCP's and shrinks in proportion to the fraction of ECN-marked data. RoCE
//! has no ECN-Echo bit in its ACKs, so the echo is the CNP: the responder sends one per
//! CE-marked request packet, and the requester counts each CNP as one marked MTU.
//!
//! Receiver, on a request packet arriving with CE: send a CNP (at most one per
//! `cnp_interval`, by default 0, i.e. one per marked packet, as DCTCP's per-packet echo).
//!
//! Sender, with window `W` (bytes of payload in flight), MTU `M`, estimate `α`:
//!
//! ```text
//! at start:         W = BDP = line rate × base_rtt,  α = 1,  no slow start
//! on an ACK of n packets (acked = n·M bytes):
//!   W < ssthresh:   W = min(W + acked, ssthresh)               (slow start, after a timeout)
//!   otherwise:      W = W + M·acked/W                          (one MTU per window acked)
//! per observation window (acked bytes reach the window's size at its start):
//!   F = min(marked, acked)/acked   (marked = CNPs × M)
//!   α = (1 − g)·α + g·F
//! on the first CNP of an observation window:
//!   W = W·(1 − α/2),  ssthresh = W
//! on a retransmit timeout:
//!   ssthresh = max(W/2, 2M),  W = M
//! ```
//!
//! `W` stays within `[M, max_window_bdp × BDP]`. The cut happens on the window's first mark
//! with the α of the windows before, as RFC 8257 §3.3–3.4 and Linux's `tcp_dctcp` do (the
//! paper: the sender "reacts to ... ECN-Echo" with `cwnd × (1 − α/2)`, at most once per window
//! of data, as RFC 3168 for TCP), rather than waiting for the window's end. The AI step keeps
//! its remainder (Linux's `snd_cwnd_cnt`), so that exactly one MTU is added per window of
//! data acknowledged, whatever the ACK sizes. Coalesced events are counted as they come: an
//! ACK of many packets counts all their bytes; a coalesced CNP counts as one mark.

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Law};

use crate::notification::NotificationPoint;
use crate::params::{
    ParamError, ParamInfo, Params, parse_f64, parse_f64_in, parse_positive, unknown, us_to_ns,
};

/// DCTCP's parameters. g = 1/16 is the paper's (§3.4 sets g = 1/16 in all experiments) and
/// RFC 8257's recommended value. The base RTT (10 µs) is this project's choice for a 100
/// Gbit/s fabric: between SwCC's measured 5 µs (hardware) and 30 µs (Soft-RoCE) base RTTs
/// (SwCC §5.7.2); starting at the BDP matters little, since the first marks cut a too-large
/// window within a few RTTs and additive increase grows a too-small one by one MTU per RTT.
/// The window cap (64 BDP) only bounds growth on an unmarked path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DctcpParams {
    /// g: weight of the newest window's marked fraction in α (paper: 1/16).
    pub g: f64,
    /// Base round-trip time in µs: the initial window is line rate × this.
    pub base_rtt_us: f64,
    /// Largest window, in multiples of the BDP (64).
    pub max_window_bdp: f64,
    /// At most one CNP per queue pair per this period, in µs (0: one per marked packet).
    pub cnp_interval_us: f64,
}

impl Default for DctcpParams {
    fn default() -> Self {
        DctcpParams {
            g: 1.0 / 16.0,
            base_rtt_us: 10.0,
            max_window_bdp: 64.0,
            cnp_interval_us: 0.0,
        }
    }
}

impl Params for DctcpParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "g",
            help: "weight of the last window's marked fraction in alpha, 0..=1 (default 1/16)",
        },
        ParamInfo {
            name: "base_rtt_us",
            help: "base RTT in us; the initial window is line rate x this (default 10)",
        },
        ParamInfo {
            name: "max_window_bdp",
            help: "largest window in multiples of the BDP, at least 1 (default 64)",
        },
        ParamInfo {
            name: "cnp_interval_us",
            help: "at most one CNP per queue pair per this many us; 0 = one per marked packet \
                   (default 0)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "g" => self.g = parse_f64_in(name, value, 0.0, 1.0)?,
            "base_rtt_us" => self.base_rtt_us = parse_positive(name, value)?,
            "max_window_bdp" => self.max_window_bdp = parse_f64_in(name, value, 1.0, 1e6)?,
            "cnp_interval_us" => self.cnp_interval_us = parse_f64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Per-queue-pair state of [`Dctcp`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DctcpContext {
    /// Path MTU in bytes; 0 until `Start`.
    mtu: u64,
    max_window: u64,
    /// W, bytes.
    cwnd: u64,
    /// Slow start runs while W < ssthresh (only after a timeout).
    ssthresh: u64,
    alpha: f64,
    /// M·acked not yet turned into window growth (below W).
    ai_acc: u64,
    /// The current observation window: its size, and what was acked and marked in it.
    win_bytes: u64,
    win_acked: u64,
    win_marked: u64,
    /// The window was already cut in this observation window.
    cut: bool,
    /// Receiver: the CNPs it sends for marked packets.
    np: NotificationPoint,
}

/// The DCTCP control law, both ends.
#[derive(Debug, Clone, Copy)]
pub struct Dctcp {
    g: f64,
    base_rtt_ns: u64,
    max_window_bdp: f64,
    cnp_interval_ns: u64,
}

impl Dctcp {
    /// A DCTCP law with parameters `p`.
    pub fn new(p: DctcpParams) -> Dctcp {
        Dctcp {
            g: p.g.clamp(0.0, 1.0),
            base_rtt_ns: us_to_ns(p.base_rtt_us),
            max_window_bdp: p.max_window_bdp.max(1.0),
            cnp_interval_ns: us_to_ns(p.cnp_interval_us),
        }
    }

    fn clamp(ctx: &mut DctcpContext) {
        ctx.cwnd = ctx.cwnd.clamp(ctx.mtu, ctx.max_window);
    }

    fn on_start(&self, mtu: u32, line_rate_bps: u64, ctx: &mut DctcpContext) {
        let mtu = u64::from(mtu.max(1));
        let bdp = (u128::from(line_rate_bps) * u128::from(self.base_rtt_ns) / 8_000_000_000)
            .min(u128::from(u64::MAX)) as u64;
        let max_window = ((bdp as f64 * self.max_window_bdp) as u64).max(mtu);
        *ctx = DctcpContext {
            mtu,
            max_window,
            cwnd: bdp,
            alpha: 1.0,
            np: ctx.np,
            ..DctcpContext::default()
        };
        Self::clamp(ctx);
        ctx.win_bytes = ctx.cwnd;
    }

    fn on_ack(&self, packets: u32, ctx: &mut DctcpContext) -> bool {
        if ctx.mtu == 0 || packets == 0 {
            return false;
        }
        let acked = u64::from(packets) * ctx.mtu;
        if ctx.cwnd < ctx.ssthresh {
            ctx.cwnd = ctx.cwnd.saturating_add(acked).min(ctx.ssthresh);
        } else {
            ctx.ai_acc = ctx.ai_acc.saturating_add(acked.saturating_mul(ctx.mtu));
            let inc = ctx.ai_acc / ctx.cwnd;
            ctx.ai_acc -= inc * ctx.cwnd;
            ctx.cwnd = ctx.cwnd.saturating_add(inc);
        }
        Self::clamp(ctx);
        ctx.win_acked = ctx.win_acked.saturating_add(acked);
        if ctx.win_acked >= ctx.win_bytes {
            // One window of data acknowledged: fold its marked fraction into α.
            let f = ctx.win_marked.min(ctx.win_acked) as f64 / ctx.win_acked as f64;
            ctx.alpha = (1.0 - self.g) * ctx.alpha + self.g * f;
            ctx.win_bytes = ctx.cwnd;
            ctx.win_acked = 0;
            ctx.win_marked = 0;
            ctx.cut = false;
        }
        true
    }

    fn on_cnp(&self, ctx: &mut DctcpContext) -> bool {
        if ctx.mtu == 0 {
            return false;
        }
        ctx.win_marked = ctx.win_marked.saturating_add(ctx.mtu);
        if ctx.cut {
            return false; // at most one cut per window of data
        }
        ctx.cwnd = (ctx.cwnd as f64 * (1.0 - ctx.alpha / 2.0)) as u64;
        Self::clamp(ctx);
        // As TCP on an ECN reduction: the new window is also the slow-start threshold.
        ctx.ssthresh = ctx.cwnd;
        ctx.ai_acc = 0;
        ctx.cut = true;
        true
    }

    fn on_timeout(&self, ctx: &mut DctcpContext) -> bool {
        if ctx.mtu == 0 {
            return false;
        }
        ctx.ssthresh = (ctx.cwnd / 2).max(2 * ctx.mtu);
        ctx.cwnd = ctx.mtu;
        ctx.ai_acc = 0;
        ctx.win_bytes = ctx.cwnd;
        ctx.win_acked = 0;
        ctx.win_marked = 0;
        ctx.cut = false;
        true
    }
}

impl Law for Dctcp {
    type Context = DctcpContext;

    fn name(&self) -> &'static str {
        "dctcp"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[
            EventKind::Start,
            EventKind::Rx,
            EventKind::Ack,
            EventKind::Cnp,
            EventKind::Timeout,
        ])
    }

    fn on_event(&mut self, now: Instant, ctx: &mut DctcpContext, event: &Event, act: &mut Actions) {
        let changed = match *event {
            Event::Start { mtu, line_rate_bps } => {
                self.on_start(mtu, line_rate_bps, ctx);
                true
            }
            Event::Ack { packets, .. } => self.on_ack(packets, ctx),
            Event::Cnp => self.on_cnp(ctx),
            Event::Timeout => self.on_timeout(ctx),
            Event::Rx { ce, .. } => {
                ctx.np.on_rx(now.as_nanos(), ce, self.cnp_interval_ns, act);
                false
            }
            _ => false,
        };
        if changed {
            act.set_window(ctx.cwnd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::Psn;

    const T0: u64 = 1_000_000;
    const MTU: u64 = 4096;
    /// 100 Gbit/s × 10 µs / 8 = 125 000 bytes.
    const BDP: u64 = 125_000;

    fn run(law: &mut Dctcp, ctx: &mut DctcpContext, e: Event) -> Actions {
        let mut act = Actions::default();
        law.on_event(Instant::from_nanos(T0), ctx, &e, &mut act);
        act
    }

    fn started(law: &mut Dctcp) -> DctcpContext {
        let mut ctx = DctcpContext::default();
        let start = Event::Start {
            mtu: MTU as u32,
            line_rate_bps: 100_000_000_000,
        };
        let act = run(law, &mut ctx, start);
        assert_eq!(act.window(), Some(Some(BDP)));
        // max window: 64 × 125 000 = 8 000 000.
        assert_eq!(
            (ctx.max_window, ctx.alpha, ctx.win_bytes),
            (8_000_000, 1.0, BDP)
        );
        ctx
    }

    fn ack(packets: u32) -> Event {
        Event::Ack {
            confirmed: Psn::new(0),
            packets,
            rtt: None,
        }
    }

    #[test]
    fn additive_increase_adds_one_mtu_per_window_acked() {
        let mut law = Dctcp::new(DctcpParams::default());
        let mut ctx = started(&mut law);
        // 30 packets = 122 880 bytes (less than the 125 000-byte observation window):
        // W += 4096 · 122 880 / 125 000 = 503 316 480 / 125 000 = 4026 (remainder 66 480).
        let act = run(&mut law, &mut ctx, ack(30));
        assert_eq!(act.window(), Some(Some(129_026)));
        assert_eq!(ctx.ai_acc, 66_480);
        assert_eq!(ctx.alpha, 1.0, "the observation window is not over yet");
        // One more packet: (66 480 + 16 777 216) / 129 026 = 130 (remainder 70 316).
        let act = run(&mut law, &mut ctx, ack(1));
        assert_eq!(act.window(), Some(Some(129_156)));
        assert_eq!(ctx.ai_acc, 70_316);
        // 126 976 bytes acked ≥ 125 000: the window closed unmarked, α = (15/16)·1 = 0.9375,
        // and the next one is the current W.
        assert_eq!(
            (ctx.alpha, ctx.win_bytes, ctx.win_acked),
            (0.9375, 129_156, 0)
        );
    }

    #[test]
    fn marks_cut_once_per_window_and_set_alpha_to_the_marked_fraction() {
        let mut law = Dctcp::new(DctcpParams::default());
        let mut ctx = started(&mut law);
        // First CNP, α = 1: W = 125 000 · (1 − 1/2) = 62 500 = ssthresh.
        let act = run(&mut law, &mut ctx, Event::Cnp);
        assert_eq!(act.window(), Some(Some(62_500)));
        assert_eq!(ctx.ssthresh, 62_500);
        // A second CNP in the same window: counted, no cut.
        assert!(run(&mut law, &mut ctx, Event::Cnp).is_empty());
        assert_eq!(ctx.win_marked, 2 * MTU);
        // 31 packets = 126 976 bytes close the window. AI first (W = ssthresh, not below):
        // W += 4096 · 126 976 / 62 500 = 520 093 696 / 62 500 = 8321 → 70 821.
        // F = 8192 / 126 976; α = (15/16)·1 + (1/16)·F ≈ 0.941532.
        let act = run(&mut law, &mut ctx, ack(31));
        assert_eq!(act.window(), Some(Some(70_821)));
        let f = 8192.0 / 126_976.0;
        assert_eq!(ctx.alpha, (1.0 - 1.0 / 16.0) * 1.0 + (1.0 / 16.0) * f);
        // The next window may cut again, with the new α:
        // W = 70 821 · (1 − 0.941532/2) = 70 821 · 0.529234 = 37 480.9 → 37 480.
        let act = run(&mut law, &mut ctx, Event::Cnp);
        assert_eq!(act.window(), Some(Some(37_480)));
    }

    #[test]
    fn a_timeout_drops_to_one_mtu_then_slow_starts_to_half_the_old_window() {
        let mut law = Dctcp::new(DctcpParams::default());
        let mut ctx = started(&mut law);
        // ssthresh = max(125 000 / 2, 2 · 4096) = 62 500; W = 4096 (the floor).
        let act = run(&mut law, &mut ctx, Event::Timeout);
        assert_eq!(act.window(), Some(Some(MTU)));
        assert_eq!(ctx.ssthresh, 62_500);
        // Slow start: W = 4096 + 4 · 4096 = 20 480; then min(20 480 + 81 920, 62 500).
        assert_eq!(run(&mut law, &mut ctx, ack(4)).window(), Some(Some(20_480)));
        assert_eq!(
            run(&mut law, &mut ctx, ack(20)).window(),
            Some(Some(62_500))
        );
        // Then additive increase: 4096 · 4096 / 62 500 = 268.
        assert_eq!(run(&mut law, &mut ctx, ack(1)).window(), Some(Some(62_768)));
    }

    #[test]
    fn the_window_is_clamped_to_one_mtu_and_to_the_cap() {
        let mut law = Dctcp::new(DctcpParams::default());
        let mut ctx = started(&mut law);
        run(&mut law, &mut ctx, Event::Timeout); // W = 4096
        // α = 1: 4096 / 2 = 2048, held at one MTU.
        assert_eq!(
            run(&mut law, &mut ctx, Event::Cnp).window(),
            Some(Some(MTU))
        );
        // Near the cap: 7 999 990 + 4096 · 1024·4096 / 7 999 990 = +2147 → held at 8 000 000.
        ctx.cwnd = 7_999_990;
        ctx.ssthresh = 0;
        assert_eq!(
            run(&mut law, &mut ctx, ack(1024)).window(),
            Some(Some(8_000_000))
        );
    }

    #[test]
    fn nothing_happens_before_start_or_on_empty_acks() {
        let mut law = Dctcp::new(DctcpParams::default());
        let mut ctx = DctcpContext::default();
        for e in [Event::Cnp, Event::Timeout, ack(3)] {
            assert!(run(&mut law, &mut ctx, e).is_empty(), "{e:?}");
        }
        let mut ctx = started(&mut law);
        assert!(run(&mut law, &mut ctx, ack(0)).is_empty());
    }

    #[test]
    fn the_receiver_echoes_every_mark_or_one_per_interval() {
        let rx = |ce| Event::Rx {
            psn: Psn::new(1),
            bytes: 4096,
            ce,
        };
        let at = |law: &mut Dctcp, ctx: &mut DctcpContext, ns: u64, e: Event| {
            let mut act = Actions::default();
            law.on_event(Instant::from_nanos(ns), ctx, &e, &mut act);
            act.cnp()
        };
        // Default: one CNP per marked packet, even back to back.
        let mut law = Dctcp::new(DctcpParams::default());
        let mut ctx = DctcpContext::default();
        assert!(at(&mut law, &mut ctx, T0, rx(true)));
        assert!(at(&mut law, &mut ctx, T0, rx(true)));
        assert!(!at(&mut law, &mut ctx, T0, rx(false)));
        // cnp_interval_us = 50: at most one per 50 µs.
        let mut law = Dctcp::new(DctcpParams {
            cnp_interval_us: 50.0,
            ..DctcpParams::default()
        });
        let mut ctx = DctcpContext::default();
        assert!(at(&mut law, &mut ctx, T0, rx(true)));
        assert!(!at(&mut law, &mut ctx, T0 + 49_999, rx(true)));
        assert!(at(&mut law, &mut ctx, T0 + 50_000, rx(true)));
    }
}
