//! HPCC, High Precision Congestion Control (Li et al., SIGCOMM 2019): a window law driven by
//! in-band network telemetry. Every acknowledgement echoes one record per switch hop `i`:
//! the egress queue `qlen_i` (bytes), the port's transmitted-byte counter `txBytes_i`
//! (wrapping), a timestamp `ts_i` (ns, wrapping) and the port rate `B_i`. The sender keeps
//! the previous acknowledgement's records `L_i` and runs the paper's Algorithm 1 per
//! [`Event::Telemetry`]:
//!
//! ```text
//! txRate_i = (txBytes_i − L_i.txBytes) / (ts_i − L_i.ts)          bytes/ns (wrapping differences)
//! u_i      = min(qlen_i, L_i.qlen) / (B_i·T) + txRate_i / B_i     the hop's normalised in-flight bytes
//! u        = max_i u_i,   τ = min(ts_i − L_i.ts of that hop, T)
//! U        = (1 − τ/T)·U + (τ/T)·u                                 an EWMA over about one T
//!
//! ComputeWind(U, updateWc):
//!   if U ≥ η or incStage ≥ maxStage:  W = W_c / (U/η) + W_AI   (and if updateWc: incStage = 0)
//!   else:                             W = W_c + W_AI           (and if updateWc: incStage += 1)
//!   if updateWc: W_c = W
//! window = W,  pacing rate R = W / T
//! ```
//!
//! `T` is the base RTT; `B_i·T` the hop's bandwidth-delay product; `η` the target
//! utilisation; `W_c` the reference window, updated (`updateWc`) only once per RTT: when the
//! acknowledged sequence passes `lastUpdateSeq`, which is then set to the next PSN the sender
//! will send (`snd_nxt`). Other acknowledgements recompute `W` from the unchanged `W_c` (the
//! paper's per-ACK "fast reaction"). `W_init = line rate · T` (one BDP) is both the start and
//! the ceiling; `W_AI = W_init·(1 − η)/N` for `N` expected concurrent flows; the floor is
//! one path MTU. `U` starts at 1.
//!
//! Compared with the authors' ns-3 code (`rdma-hw.cc`, `UpdateRateHp`): ns-3 runs the same
//! equations on rates (`R = R_c/(U/η) + R_AI`) and derives the window from the rate; its
//! scripts (`run.py`) use `MI_THRESH 0` (every update multiplicative, where the paper says
//! maxStage = 5), `RATE_AI` = 40 Mbit/s at 100 Gbit/s (65 B per 13 µs, where we derive
//! `W_AI` from `N`) and a floor of 1 Gbit/s (ours: one MTU per `T`). Like ns-3 (and unlike
//! its optional per-hop `MultiRate` mode) this keeps one `U` for the path, takes `τ` from the
//! hop of the largest `u_i`, starts `U` at 1, and makes no change on the first telemetry of a
//! flow (there is nothing to difference yet). Telemetry with no hops is ignored; a hop that
//! reports rate 0, or the same timestamp as its last record, gives no `u_i` (a rate-0 record
//! is also not kept).

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, IntPath, Law, MAX_INT_HOPS};
use sluice_wire::Psn;

use crate::params::{ParamError, ParamInfo, Params, parse_f64_in, parse_u64_in, unknown};

/// HPCC's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpccParams {
    /// η, the target utilisation. Default 0.95: the paper's §5 and SwCC §5.1 (ns-3 `TargetUtil`).
    pub eta: f64,
    /// maxStage, additive steps before a multiplicative one. Default 5: the paper (and SwCC).
    pub max_stage: u32,
    /// T, the base RTT in µs. Default 13 µs: the base RTT of the authors' ns-3 100G fat-tree
    /// (`run.py`: "RTT=13us"), a typical three-tier datacenter RTT; T should be at least the
    /// largest base RTT the flows see, since `B·T` is what counts as "full".
    pub base_rtt_us: f64,
    /// N, the expected number of concurrent flows on a link, setting `W_AI = W_init(1−η)/N`
    /// (the paper's §3.3 rule). Default 100: 81.25 B at 100 Gbit/s and T = 13 µs, about the
    /// paper's 80 B.
    pub expected_flows: u32,
}

impl Default for HpccParams {
    fn default() -> Self {
        HpccParams {
            eta: 0.95,
            max_stage: 5,
            base_rtt_us: 13.0,
            expected_flows: 100,
        }
    }
}

impl Params for HpccParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "eta",
            help: "target utilisation η, 0.01..=1 (default 0.95)",
        },
        ParamInfo {
            name: "max_stage",
            help: "additive-increase steps before a multiplicative one, 0..=255 (default 5)",
        },
        ParamInfo {
            name: "base_rtt_us",
            help: "base RTT T in µs, 0.1..=100000 (default 13)",
        },
        ParamInfo {
            name: "expected_flows",
            help: "expected concurrent flows N per link, W_AI = W_init(1-η)/N, 1..=1000000 (default 100)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "eta" => self.eta = parse_f64_in(name, value, 0.01, 1.0)?,
            "max_stage" => self.max_stage = parse_u64_in(name, value, 0, 255)? as u32,
            "base_rtt_us" => self.base_rtt_us = parse_f64_in(name, value, 0.1, 100_000.0)?,
            "expected_flows" => {
                self.expected_flows = parse_u64_in(name, value, 1, 1_000_000)? as u32
            }
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// One hop's record from the previous acknowledgement (12 bytes).
#[derive(Debug, Clone, Copy, Default)]
struct HopRecord {
    tx_bytes: u32,
    ts_ns: u32,
    qlen: u32,
}

/// Per-queue-pair state (112 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct HpccContext {
    /// `L_i`: the previous telemetry's records; bit i of `known` says whether hop i has one.
    hops: [HopRecord; MAX_INT_HOPS],
    known: u8,
    inc_stage: u8,
    /// Whether `last_update_seq` holds a real value (a reference update has happened).
    synced: bool,
    /// U, the path's normalised in-flight estimate.
    u: f64,
    /// W_c, W_init (0 until Start), W_min, in bytes.
    w_c: f64,
    w_init: f64,
    w_min: f64,
    line_bps: u64,
    last_update_seq: Psn,
    /// The PSN after the last one sent.
    snd_nxt: Psn,
}

/// HPCC: see the module documentation.
#[derive(Debug, Clone, Copy)]
pub struct Hpcc {
    eta: f64,
    max_stage: u8,
    t_ns: f64,
    flows: f64,
}

impl Hpcc {
    /// An HPCC law with parameters `p`.
    pub fn new(p: HpccParams) -> Hpcc {
        Hpcc {
            eta: p.eta.clamp(0.01, 1.0),
            max_stage: p.max_stage.min(255) as u8,
            t_ns: (p.base_rtt_us * 1e3).max(100.0),
            flows: f64::from(p.expected_flows.max(1)),
        }
    }

    /// ComputeWind: the new window, and the reference moved to it if `update`.
    fn compute_wind(&self, ctx: &mut HpccContext, update: bool) -> f64 {
        let w_ai = ctx.w_init * (1.0 - self.eta) / self.flows;
        let (w, stage) = if ctx.u >= self.eta || ctx.inc_stage >= self.max_stage {
            // W_c / (U/η); U = 0 (an idle path) can only get here past maxStage: go to the top.
            let mi = if ctx.u > 0.0 {
                ctx.w_c * self.eta / ctx.u
            } else {
                ctx.w_init
            };
            (mi + w_ai, 0)
        } else {
            (ctx.w_c + w_ai, ctx.inc_stage.saturating_add(1))
        };
        // max then min (not clamp): never panics, and an infinite quotient becomes W_init.
        let w = w.max(ctx.w_min).min(ctx.w_init);
        if update {
            ctx.w_c = w;
            ctx.inc_stage = stage;
        }
        w
    }

    /// Window `w` and its pacing rate `w/T` (wire bits per second, at most the line).
    fn apply(&self, ctx: &HpccContext, w: f64, act: &mut Actions) {
        act.set_window(w as u64);
        act.set_rate(((w * 8e9 / self.t_ns) as u64).min(ctx.line_bps));
    }

    fn on_telemetry(
        &self,
        ctx: &mut HpccContext,
        confirmed: Psn,
        path: &IntPath,
        act: &mut Actions,
    ) {
        let hops = path.hops();
        if ctx.w_init <= 0.0 || hops.is_empty() {
            return; // not started, or no telemetry at all
        }
        // MeasureInflight: the largest u_i and the τ of its hop.
        let mut max: Option<(f64, f64)> = None;
        let mut known = 0u8;
        for (i, hop) in hops.iter().enumerate() {
            if hop.rate_100mbps == 0 {
                continue; // no rate: nothing to normalise by, and the record is not kept
            }
            let b = hop.rate_bps() as f64 / 8e9; // B_i in bytes per ns
            if ctx.known & (1 << i) != 0 {
                let last = ctx.hops[i];
                let dt = hop.ts_ns.wrapping_sub(last.ts_ns);
                if dt != 0 {
                    let tx_rate =
                        f64::from(hop.tx_bytes.wrapping_sub(last.tx_bytes)) / f64::from(dt);
                    let qlen = f64::from(hop.qlen_bytes.min(last.qlen));
                    let u = qlen / (b * self.t_ns) + tx_rate / b;
                    if max.is_none_or(|(m, _)| u > m) {
                        max = Some((u, f64::from(dt)));
                    }
                }
            }
            ctx.hops[i] = HopRecord {
                tx_bytes: hop.tx_bytes,
                ts_ns: hop.ts_ns,
                qlen: hop.qlen_bytes,
            };
            known |= 1 << i;
        }
        ctx.known = known;
        let Some((u, tau)) = max else {
            return; // first records of this path: nothing to compare with yet
        };
        let tau = tau.min(self.t_ns);
        ctx.u = (1.0 - tau / self.t_ns) * ctx.u + (tau / self.t_ns) * u;
        // The reference window moves once per RTT: when this ACK covers a packet sent after
        // the last reference update.
        let update = !ctx.synced || ctx.last_update_seq.precedes(confirmed);
        let w = self.compute_wind(ctx, update);
        if update {
            ctx.last_update_seq = ctx.snd_nxt;
            ctx.synced = true;
        }
        self.apply(ctx, w, act);
    }
}

impl Law for Hpcc {
    type Context = HpccContext;

    fn name(&self) -> &'static str {
        "hpcc"
    }

    /// The INT records HPCC runs on.
    fn ccx(&self) -> Option<sluice_wire::CcxLayout> {
        Some(sluice_wire::CcxLayout::Int)
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Start, EventKind::Tx, EventKind::Telemetry])
    }

    fn on_event(&mut self, _: Instant, ctx: &mut HpccContext, event: &Event, act: &mut Actions) {
        match *event {
            Event::Start { mtu, line_rate_bps } => {
                // W_init = one BDP of the line; at least a byte so the bounds stay ordered.
                let w_init =
                    (line_rate_bps as f64 * self.t_ns / 8e9).clamp(1.0, f64::from(u32::MAX));
                *ctx = HpccContext {
                    u: 1.0,
                    w_c: w_init,
                    w_init,
                    w_min: f64::from(mtu.max(1)).min(w_init),
                    line_bps: line_rate_bps,
                    ..HpccContext::default()
                };
                self.apply(ctx, w_init, act);
            }
            Event::Tx { psn, .. } => ctx.snd_nxt = psn.next(),
            Event::Telemetry { confirmed, path } => self.on_telemetry(ctx, confirmed, &path, act),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::control::IntHop;

    use super::*;

    const LINE: u64 = 100_000_000_000;
    // T = 13 µs; B = 100 Gbit/s = 12.5 B/ns; W_init = B·T = 162 500 B;
    // W_AI = 162 500 · 0.05 / 100 = 81.25 B; W_min = MTU = 4096 B.
    const W_INIT: f64 = 162_500.0;
    const W_AI: f64 = 81.25;

    fn started() -> (Hpcc, HpccContext) {
        let mut law = Hpcc::new(HpccParams::default());
        let mut ctx = HpccContext::default();
        let mut act = Actions::default();
        let start = Event::Start {
            mtu: 4096,
            line_rate_bps: LINE,
        };
        law.on_event(Instant::ZERO, &mut ctx, &start, &mut act);
        assert_eq!(act.window(), Some(Some(162_500)));
        assert_eq!(act.rate(), Some(Some(LINE)));
        (law, ctx)
    }

    fn hop(qlen_bytes: u32, tx_bytes: u32, ts_ns: u32) -> IntHop {
        IntHop {
            qlen_bytes,
            tx_bytes,
            ts_ns,
            rate_100mbps: 1000,
        }
    }

    fn telemetry(
        law: &mut Hpcc,
        ctx: &mut HpccContext,
        confirmed: u32,
        hops: &[IntHop],
    ) -> Actions {
        let mut path = IntPath::default();
        for h in hops {
            path.push(*h);
        }
        let mut act = Actions::default();
        let e = Event::Telemetry {
            confirmed: Psn::new(confirmed),
            path,
        };
        law.on_event(Instant::ZERO, ctx, &e, &mut act);
        act
    }

    fn tx(law: &mut Hpcc, ctx: &mut HpccContext, psn: u32) {
        let e = Event::Tx {
            psn: Psn::new(psn),
            bytes: 4096,
            retransmission: false,
        };
        law.on_event(Instant::ZERO, ctx, &e, &mut Actions::default());
    }

    /// Asserts the rate set is w·8/T bits per second (within rounding).
    fn assert_rate(act: &Actions, w: f64) {
        let r = act.rate().flatten().expect("a rate") as f64;
        assert!(
            (r - w * 8e9 / 13_000.0).abs() <= 2.0,
            "rate {r} for window {w}"
        );
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// One hop whose next record, T = 13 µs later, gives u = 0.5 (tx at half the line, no
    /// queue): txRate = 81 250 B / 13 000 ns = 6.25 B/ns, / 12.5 = 0.5.
    fn half_load(from: IntHop) -> IntHop {
        hop(
            0,
            from.tx_bytes.wrapping_add(81_250),
            from.ts_ns.wrapping_add(13_000),
        )
    }

    #[test]
    fn multiplicative_decrease_from_one_hop_with_wrapping_counters() {
        let (mut law, mut ctx) = started();
        tx(&mut law, &mut ctx, 99); // snd_nxt = 100
        let first = hop(65_000, u32::MAX - 1_000, u32::MAX - 5_000);
        // The first telemetry only records.
        assert!(telemetry(&mut law, &mut ctx, 50, &[first]).is_empty());
        // 13 000 ns later (τ = T), 243 750 more bytes, queue 70 000 (min with 65 000):
        // u = 65 000 / 162 500 + (243 750 / 13 000) / 12.5 = 0.4 + 1.5 = 1.9; U = u = 1.9.
        // U ≥ η: W = 162 500 / (1.9 / 0.95) + 81.25 = 81 250 + 81.25 = 81 331.25.
        let next = hop(
            70_000,
            first.tx_bytes.wrapping_add(243_750),
            first.ts_ns.wrapping_add(13_000),
        );
        let act = telemetry(&mut law, &mut ctx, 60, &[next]);
        assert_eq!(act.window(), Some(Some(81_331)));
        // R = 81 331.25 · 8 / 13 µs = 50.05 Gbit/s.
        assert_rate(&act, 81_331.25);
        assert!((act.rate().flatten().unwrap() as f64 - 50.05e9).abs() <= 2.0);
        assert!(near(ctx.w_c, 81_331.25) && near(ctx.u, 1.9));
        assert_eq!(ctx.inc_stage, 0);
        assert_eq!(ctx.last_update_seq, Psn::new(100));
    }

    #[test]
    fn tau_and_u_come_from_the_most_loaded_hop() {
        let (mut law, mut ctx) = started();
        let a0 = hop(0, 0, 0);
        let b0 = hop(0, 1_000, 2_000);
        telemetry(&mut law, &mut ctx, 1, &[a0, b0]);
        // Hop a: u = 0.5 over 13 000 ns. Hop b: 227 500 B in 6 500 ns = 35 B/ns, u = 2.8.
        // max u = 2.8 with τ = 6 500: U = (1 − 0.5)·1 + 0.5·2.8 = 1.9 (U starts at 1).
        // W = 162 500 · 0.95 / 1.9 + 81.25 = 81 331.25.
        let b1 = hop(0, 1_000 + 227_500, 2_000 + 6_500);
        let act = telemetry(&mut law, &mut ctx, 2, &[half_load(a0), b1]);
        assert_eq!(act.window(), Some(Some(81_331)));
        assert!(near(ctx.u, 1.9), "{}", ctx.u);
    }

    #[test]
    fn additive_steps_then_a_multiplicative_one_once_per_rtt() {
        let (mut law, mut ctx) = started();
        tx(&mut law, &mut ctx, 99);
        let mut h = hop(65_000, 0, 0);
        telemetry(&mut law, &mut ctx, 50, &[h]);
        let next = hop(70_000, 243_750, 13_000);
        telemetry(&mut law, &mut ctx, 60, &[next]); // W_c = 81 331.25 as above
        h = next;
        // Same RTT (confirmed 80 does not pass last_update_seq 100), U = 0.5 < η and
        // incStage 0 < 5: W = W_c + W_AI = 81 412.5, W_c unchanged.
        h = half_load(h);
        let act = telemetry(&mut law, &mut ctx, 80, &[h]);
        assert_eq!(act.window(), Some(Some(81_412)));
        assert_rate(&act, 81_412.5);
        assert!(near(ctx.u, 0.5) && near(ctx.w_c, 81_331.25));
        assert_eq!(ctx.inc_stage, 0);
        h = half_load(h);
        let act = telemetry(&mut law, &mut ctx, 90, &[h]);
        assert_eq!(act.window(), Some(Some(81_412)), "W_c did not move");
        // Five reference updates, each one RTT on: W_c += W_AI, incStage 1..=5.
        let mut w_c = 81_331.25;
        for stage in 1..=5u32 {
            let sent = 100 + 100 * stage;
            tx(&mut law, &mut ctx, sent);
            h = half_load(h);
            let act = telemetry(&mut law, &mut ctx, sent - 50, &[h]);
            w_c += W_AI;
            assert_eq!(act.window(), Some(Some(w_c as u64)));
            assert_rate(&act, w_c);
            assert!(near(ctx.w_c, w_c));
            assert_eq!(u32::from(ctx.inc_stage), stage);
        }
        // incStage = maxStage: multiplicative although U = 0.5 < η:
        // W = 81 737.5 / (0.5 / 0.95) + 81.25 = 155 301.25 + 81.25 = 155 382.5.
        assert_eq!(w_c, 81_737.5);
        tx(&mut law, &mut ctx, 700);
        h = half_load(h);
        let act = telemetry(&mut law, &mut ctx, 650, &[h]);
        assert_eq!(act.window(), Some(Some(155_382)));
        assert_rate(&act, 155_382.5);
        assert!(near(ctx.w_c, 155_382.5));
        assert_eq!(ctx.inc_stage, 0);
    }

    #[test]
    fn clamps_at_one_mtu_and_at_one_bdp() {
        let (mut law, mut ctx) = started();
        let h0 = hop(4_000_000_000, 0, 0);
        telemetry(&mut law, &mut ctx, 1, &[h0]);
        // A 4 GB queue: u ≈ 24 615, W = 162 500 · 0.95 / u + 81.25 ≈ 87.5 B < 4096: W = 4096,
        // R = 4096 · 8 / 13 µs = 2 520 615 384 bit/s.
        let h1 = hop(4_000_000_000, 0, 13_000);
        let act = telemetry(&mut law, &mut ctx, 2, &[h1]);
        assert_eq!(act.window(), Some(Some(4096)));
        assert_eq!(act.rate(), Some(Some(2_520_615_384)));
        // An idle path (U = 0) after maxStage additive steps from 4096: each W_c + 81.25;
        // then W_c / (0/η) is unbounded: W = W_init, R = the line.
        let mut h = h1;
        for k in 0..5 {
            tx(&mut law, &mut ctx, 10 * k + 10);
            h = hop(0, h.tx_bytes, h.ts_ns + 13_000);
            let act = telemetry(&mut law, &mut ctx, 10 * k + 5, &[h]);
            assert_eq!(
                act.window(),
                Some(Some((4096.0 + W_AI * f64::from(k + 1)) as u64))
            );
        }
        tx(&mut law, &mut ctx, 60);
        h = hop(0, h.tx_bytes, h.ts_ns + 13_000);
        let act = telemetry(&mut law, &mut ctx, 55, &[h]);
        assert_eq!(act.window(), Some(Some(W_INIT as u64)));
        assert_eq!(act.rate(), Some(Some(LINE)));
    }

    #[test]
    fn unusable_telemetry_changes_nothing() {
        let (mut law, mut ctx) = started();
        let h0 = hop(0, 0, 0);
        telemetry(&mut law, &mut ctx, 1, &[h0]);
        // No hops at all: ignored, records kept.
        assert!(telemetry(&mut law, &mut ctx, 2, &[]).is_empty());
        assert_eq!(ctx.known, 1);
        // The same timestamp: no rate can be measured.
        assert!(telemetry(&mut law, &mut ctx, 3, &[hop(10, 5, 0)]).is_empty());
        // A hop of rate 0: skipped and its record dropped, so the next one only records.
        let dead = IntHop {
            rate_100mbps: 0,
            ..hop(0, 99, 1)
        };
        assert!(telemetry(&mut law, &mut ctx, 4, &[dead]).is_empty());
        assert_eq!(ctx.known, 0);
        assert!(telemetry(&mut law, &mut ctx, 5, &[hop(0, 0, 7)]).is_empty());
        assert_eq!((ctx.u, ctx.w_c), (1.0, W_INIT));
        // Telemetry before Start is ignored too.
        let mut fresh = HpccContext::default();
        telemetry(&mut law, &mut fresh, 1, &[h0]);
        assert!(telemetry(&mut law, &mut fresh, 2, &[hop(0, 0, 13_000)]).is_empty());
    }

    #[test]
    fn has_no_timers() {
        // HPCC reacts only to telemetry: it arms no timer and ignores Timer events.
        assert!(
            !Hpcc::new(HpccParams::default())
                .interest()
                .contains(EventKind::Timer)
        );
    }
}
