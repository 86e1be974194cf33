//! SCR's receiver-driven control loop (appendix A.8, Fig 20): the receiver measures its
//! port and credits each sender with the bandwidth the others leave it; past a threshold it
//! also sends ECN-like backpressure, on which the sender decreases multiplicatively and
//! then increases additively.
//!
//! ```text
//! receiver, once an interval has passed since its last credit (on the next arrival, or
//! on the timer the first arrival after that credit armed):
//!     port   = wire bit/s the port received (every queue pair of the host, the law's own
//!              and, in the simulator, those other laws run: Law::on_foreign_rx)
//!     others = port - this queue pair's own
//!     credit = max(target x capacity - others, min_rate)  (SCR: "remaining headroom")
//!     grant credit x interval of payload bytes            (Homa-like grant, at a rate)
//!     if bp_threshold > 0 and port >= bp_threshold x capacity: send a CNP (backpressure)
//! sender:
//!     on Start:    r = line; credit bytes = one interval at line rate
//!     on Credit g: credit += g (at most two grants); credit_rate = g / interval
//!     on CNP:      r = max(r x md, min_rate)                              (MD)
//!     per interval since the last CNP: r = min(r + ai, line)  (AI, applied when the
//!                                                                sender next hears anything)
//!     pace at min(r, 1.1 x credit_rate); send only credited bytes (gate)
//! ```
//!
//! SCR's credit is a rate the sender keeps until the next one ("optimistic"); here it rides
//! Sluice's credit channel, a byte total, as `credit_rate x interval` bytes each interval: the
//! sender paces at the rate those bytes make and sends no more than it was granted, so a
//! lost or merged grant costs nothing (the next total repairs it) and a sender whose grants
//! stop does not run on at an old rate. A sender with no grant for `stall_us` regains its
//! first interval's credit, as the credit law's does. SCR sends backpressure as an
//! out-of-band peer message; here it is a RoCE CNP, the notification RoCE already has. SCR
//! gives neither its MD/AI constants nor its trigger: the defaults here are a halving, 1
//! Gbit/s per interval, and a port at 95% of capacity.
//!
//! READs are credited the same way with the roles turned round: the data's receiver is the
//! requester, which hears its READ responses arrive (`Event::RxResponse`, counted with its
//! port as `Rx` is) and grants; the data's sender is the responder, whose READ responses the
//! engine gates and paces with this law (`EventMask::GATE_READ_RESPONSES`), from `Start`
//! before its first one. A packet without payload (a READ request, an atomic) takes its
//! share of the port but asks for no credit: only data is credited.
//!
//! No queue pair ticks while nothing happens: a receiver arms its timer only while data it
//! has not credited yet is there (so a flow's last bytes are credited too, and credits clock
//! the sender's next bytes), and a sender only for its stall check, pushed out by every
//! grant. A host of many idle queue pairs costs nothing.

use std::time::Duration;

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Gate, Law};

use crate::params::{ParamError, ParamInfo, Params, parse_f64_in, unknown, us_to_ns};

/// The receiver-driven law's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateCreditParams {
    /// The receiver's measuring and crediting period, µs. Default 10 (a few base RTTs).
    pub interval_us: f64,
    /// The receiver port's capacity on the wire, Gbit/s. Default 100.
    pub capacity_gbps: f64,
    /// The share of capacity the credits fill. Default 0.95: the receiver sees only what
    /// the port delivers, so at full capacity it cannot tell a queue building, and credits
    /// that filled all of it would keep one (the others' share of a congested port is less
    /// than what they send).
    pub target: f64,
    /// The least credit and the least sender rate, Gbit/s. Default 0.1.
    pub min_rate_gbps: f64,
    /// Backpressure when the port's rate reaches this share of capacity; 0: off. Default 0.
    pub bp_threshold: f64,
    /// The sender's multiplicative decrease on backpressure. Default 0.5.
    pub md: f64,
    /// The sender's additive increase per interval without backpressure, Gbit/s. Default 1.
    pub ai_gbps: f64,
    /// A sender with no grant for this long regains its first credit, µs. Default 1000.
    pub stall_us: f64,
}

impl Default for RateCreditParams {
    fn default() -> Self {
        RateCreditParams {
            interval_us: 10.0,
            capacity_gbps: 100.0,
            target: 0.95,
            min_rate_gbps: 0.1,
            bp_threshold: 0.0,
            md: 0.5,
            ai_gbps: 1.0,
            stall_us: 1000.0,
        }
    }
}

impl Params for RateCreditParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "interval_us",
            help: "the receiver's measuring and crediting period in µs, 1..=100000 (default 10)",
        },
        ParamInfo {
            name: "capacity_gbps",
            help: "the receiver port's capacity on the wire in Gbit/s, 0.001..=10000 (default 100)",
        },
        ParamInfo {
            name: "target",
            help: "the share of capacity the credits fill, 0.01..=1 (default 0.95)",
        },
        ParamInfo {
            name: "min_rate_gbps",
            help: "least credit and least sender rate in Gbit/s, 0.001..=10000 (default 0.1)",
        },
        ParamInfo {
            name: "bp_threshold",
            help: "backpressure when the port reaches this share of capacity, 0 (off)..=2 (default 0)",
        },
        ParamInfo {
            name: "md",
            help: "the sender's multiplicative decrease on backpressure, 0.01..=1 (default 0.5)",
        },
        ParamInfo {
            name: "ai_gbps",
            help: "the sender's additive increase per interval without backpressure in Gbit/s, 0..=10000 (default 1)",
        },
        ParamInfo {
            name: "stall_us",
            help: "µs without a grant after which a sender regains its first credit, 1..=10^7 (default 1000)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "interval_us" => self.interval_us = parse_f64_in(name, value, 1.0, 100_000.0)?,
            "capacity_gbps" => self.capacity_gbps = parse_f64_in(name, value, 0.001, 10_000.0)?,
            "target" => self.target = parse_f64_in(name, value, 0.01, 1.0)?,
            "min_rate_gbps" => self.min_rate_gbps = parse_f64_in(name, value, 0.001, 10_000.0)?,
            "bp_threshold" => self.bp_threshold = parse_f64_in(name, value, 0.0, 2.0)?,
            "md" => self.md = parse_f64_in(name, value, 0.01, 1.0)?,
            "ai_gbps" => self.ai_gbps = parse_f64_in(name, value, 0.0, 10_000.0)?,
            "stall_us" => self.stall_us = parse_f64_in(name, value, 1.0, 1e7)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Per-queue-pair state: a sender half and a receiver half (at most 128 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct RateCreditContext {
    /// Sender: the line rate (0 until Start: not a sender), bytes it may send, and its first
    /// interval's credit (the most it regains after a stall).
    line: u64,
    credit: u64,
    first_credit: u64,
    /// Sender: its MD/AI rate and the rate the latest grant makes, bit/s.
    rate: u64,
    credit_rate: u64,
    /// Sender: the latest backpressure, the latest additive increase, the latest grant.
    last_bp: Instant,
    last_ai: Instant,
    last_grant: Instant,
    /// Receiver: wire bytes of this queue pair received so far, and the port's and its own
    /// count at the last credit (`mark_at`).
    own_wire: u64,
    own_mark: u64,
    port_mark: u64,
    mark_at: Instant,
    /// Receiver: a flow has arrived (marks set), and data arrived since the last credit.
    receiving: bool,
    uncredited: bool,
    /// Sender: a stall check is due `stall` after the latest grant (armed by a grant, off
    /// once a check finds the sender not short of credit: an idle sender does not tick).
    stall_armed: bool,
    /// The timer this context has armed (the earlier of the two halves' deadlines).
    tick_at: Option<Instant>,
}

/// The sender paces a little above the credit's rate: the gate holds it to the bytes.
const PACE_MARGIN: f64 = 1.1;

/// SCR's receiver-driven control: see the module documentation.
#[derive(Debug, Clone, Copy)]
pub struct RateCredit {
    interval: Duration,
    /// `target x capacity`: what the credits fill.
    fill_bps: u64,
    min_bps: u64,
    bp_bps: Option<u64>,
    md: f64,
    ai_bps: u64,
    stall: Duration,
    /// Wire bytes the host's port received, every queue pair together.
    port_wire: u64,
    /// The largest payload one arrival carried (an MTU's worth, once a full packet came):
    /// what turns wire credit into payload bytes.
    max_rx: u32,
}

/// Wire bytes of a request packet carrying `payload` bytes (BTH and ICRC; its extension
/// headers, a few percent at most, are left out).
fn wire_len(payload: u32) -> u64 {
    sluice_wire::roce_link_len(false, sluice_wire::BTH_LEN + payload as usize + 4) as u64
}

impl RateCredit {
    /// A receiver-driven law with parameters `p`.
    pub fn new(p: RateCreditParams) -> RateCredit {
        let bps = |gbps: f64| ((gbps * 1e9) as u64).max(1);
        RateCredit {
            interval: Duration::from_nanos(us_to_ns(p.interval_us).max(1)),
            fill_bps: bps(p.target.clamp(0.01, 1.0) * p.capacity_gbps),
            min_bps: bps(p.min_rate_gbps),
            bp_bps: (p.bp_threshold > 0.0).then(|| bps(p.bp_threshold * p.capacity_gbps)),
            md: p.md.clamp(0.01, 1.0),
            ai_bps: (p.ai_gbps * 1e9) as u64,
            stall: Duration::from_nanos(us_to_ns(p.stall_us)),
            port_wire: 0,
            max_rx: 0,
        }
    }

    /// `bps` over one interval, in bytes.
    fn bytes_per_interval(&self, bps: u64) -> u64 {
        (u128::from(bps) * self.interval.as_nanos() / 8_000_000_000) as u64
    }

    fn arrived(
        &mut self,
        now: Instant,
        ctx: &mut RateCreditContext,
        bytes: u32,
        act: &mut Actions,
    ) {
        let wire = wire_len(bytes);
        self.port_wire += wire;
        if bytes == 0 {
            // A READ request or an atomic: no data to credit, nor a flow to start crediting
            // (a READ's data comes back the other way, where the requester credits it).
            return;
        }
        self.max_rx = self.max_rx.max(bytes);
        ctx.own_wire += wire;
        if !ctx.receiving {
            ctx.receiving = true;
            ctx.own_mark = ctx.own_wire - wire;
            ctx.port_mark = self.port_wire - wire;
            ctx.mark_at = now;
        }
        ctx.uncredited = true;
        if now - ctx.mark_at >= self.interval {
            self.credit(now, ctx, act);
        }
    }

    /// The receiver's credit: what the others leave, backpressure past the threshold.
    fn credit(&mut self, now: Instant, ctx: &mut RateCreditContext, act: &mut Actions) {
        let elapsed = (now - ctx.mark_at).as_nanos().max(1);
        let rate = |bytes: u64| (u128::from(bytes) * 8_000_000_000 / elapsed) as u64;
        let port = rate(self.port_wire - ctx.port_mark);
        let own = rate(ctx.own_wire - ctx.own_mark);
        let credit = self
            .fill_bps
            .saturating_sub(port.saturating_sub(own))
            .max(self.min_bps);
        // The credit is on the wire; the grant is payload: one full packet's share of it.
        let mtu = self.max_rx.max(1);
        let payload = self.bytes_per_interval(credit) * u64::from(mtu) / wire_len(mtu);
        act.grant(payload.max(1));
        if self.bp_bps.is_some_and(|bp| port >= bp) {
            act.send_cnp();
        }
        ctx.own_mark = ctx.own_wire;
        ctx.port_mark = self.port_wire;
        ctx.mark_at = now;
        ctx.uncredited = false;
    }

    /// The sender's additive increase: one step per whole interval since the later of the
    /// last backpressure and the last increase (applied whenever the sender hears anything).
    fn catch_up(&self, now: Instant, ctx: &mut RateCreditContext) {
        let from = ctx.last_bp.max(ctx.last_ai);
        let steps = ((now - from).as_nanos() / self.interval.as_nanos().max(1)) as u64;
        if steps > 0 {
            ctx.rate = ctx
                .rate
                .saturating_add(self.ai_bps.saturating_mul(steps))
                .min(ctx.line);
            let step_ns = u64::try_from(self.interval.as_nanos()).unwrap_or(u64::MAX);
            ctx.last_ai = from + Duration::from_nanos(step_ns.saturating_mul(steps));
        }
    }

    fn pace(&self, ctx: &RateCreditContext, act: &mut Actions) {
        let credited = (ctx.credit_rate as f64 * PACE_MARGIN) as u64;
        let rate = ctx.rate.min(credited).max(self.min_bps);
        if rate >= ctx.line {
            act.unpace();
        } else {
            act.set_rate(rate);
        }
    }
}

impl Law for RateCredit {
    type Context = RateCreditContext;

    fn name(&self) -> &'static str {
        "rate-credit"
    }

    /// Grant totals ride every packet to the sender, as the credit law's do.
    fn ccx(&self) -> Option<sluice_wire::CcxLayout> {
        Some(sluice_wire::CcxLayout::Credit)
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[
            EventKind::Start,
            EventKind::Rx,
            EventKind::RxResponse,
            EventKind::Credit,
            EventKind::Cnp,
            EventKind::Timer,
        ])
        .union(EventMask::GATE)
        .union(EventMask::GATE_READ_RESPONSES)
    }

    fn on_event(
        &mut self,
        now: Instant,
        ctx: &mut RateCreditContext,
        event: &Event,
        act: &mut Actions,
    ) {
        match *event {
            Event::Start { mtu, line_rate_bps } => {
                ctx.line = line_rate_bps.max(1);
                ctx.first_credit = self.bytes_per_interval(ctx.line).max(u64::from(mtu));
                ctx.credit = ctx.first_credit;
                ctx.rate = ctx.line;
                ctx.credit_rate = ctx.line;
                ctx.last_grant = now;
                ctx.last_ai = now;
                ctx.stall_armed = true;
                act.unpace();
            }
            // A WRITE's or SEND's data at the responder, a READ's at the requester.
            Event::Rx { bytes, .. } | Event::RxResponse { bytes, .. } => {
                self.arrived(now, ctx, bytes, act)
            }
            Event::Credit { bytes } => {
                let cap = ctx.first_credit.max(bytes).saturating_mul(2);
                ctx.credit = ctx.credit.saturating_add(bytes).min(cap);
                ctx.credit_rate =
                    (u128::from(bytes) * 8_000_000_000 / self.interval.as_nanos()) as u64;
                ctx.last_grant = now;
                ctx.stall_armed = true;
                if ctx.line > 0 {
                    self.catch_up(now, ctx);
                    self.pace(ctx, act);
                }
                act.wake();
            }
            Event::Cnp if ctx.line > 0 => {
                self.catch_up(now, ctx);
                ctx.rate = ((ctx.rate as f64 * self.md) as u64).max(self.min_bps);
                ctx.last_bp = now;
                self.pace(ctx, act);
            }
            Event::Timer => {
                ctx.tick_at = None; // it fired
                if ctx.uncredited && now - ctx.mark_at >= self.interval {
                    self.credit(now, ctx, act);
                }
                if ctx.line > 0 && ctx.stall_armed && now - ctx.last_grant >= self.stall {
                    if ctx.credit < ctx.first_credit {
                        // No grant for `stall` and short of credit: the first interval's
                        // credit back (and another check after as long).
                        ctx.credit = ctx.first_credit;
                        ctx.credit_rate = ctx.line;
                        ctx.last_grant = now;
                        self.catch_up(now, ctx);
                        self.pace(ctx, act);
                        act.wake();
                    } else {
                        ctx.stall_armed = false;
                    }
                }
            }
            _ => {}
        }
        // One timer: the receiver's next credit while data is uncredited, the sender's
        // stall check (both after now).
        let credit_at = ctx.uncredited.then(|| ctx.mark_at + self.interval);
        let stall_at = (ctx.line > 0 && ctx.stall_armed).then(|| ctx.last_grant + self.stall);
        let want = match (credit_at, stall_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if want != ctx.tick_at {
            match want {
                Some(at) => act.arm_timer(at),
                None => act.cancel_timer(),
            }
            ctx.tick_at = want;
        }
    }

    fn gate(&mut self, _: Instant, ctx: &mut RateCreditContext, bytes: u32) -> Gate {
        let bytes = u64::from(bytes);
        if bytes == 0 {
            Gate::Send // READ requests and atomics carry no payload
        } else if ctx.credit >= bytes {
            ctx.credit -= bytes;
            Gate::Send
        } else {
            Gate::Hold
        }
    }

    fn on_foreign_rx(&mut self, _: Instant, bytes: u32) {
        self.port_wire += wire_len(bytes);
        self.max_rx = self.max_rx.max(bytes);
    }
}

#[cfg(test)]
mod tests {
    use sluice_wire::Psn;

    use super::*;

    const LINE: u64 = 100_000_000_000;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    fn ev(law: &mut RateCredit, ctx: &mut RateCreditContext, us: u64, e: Event) -> Actions {
        let mut act = Actions::default();
        law.on_event(at(us), ctx, &e, &mut act);
        act
    }

    fn rx(bytes: u32) -> Event {
        Event::Rx {
            psn: Psn::new(0),
            bytes,
            ce: false,
        }
    }

    /// A receiver whose flow brings `own` packets of 1 KiB per 10 us beside `others` of
    /// other queue pairs: the grant of its tick at 20 us.
    fn grant_beside(own: u32, others: u32, bp: f64) -> Actions {
        let mut law = RateCredit::new(RateCreditParams {
            bp_threshold: bp,
            ..RateCreditParams::default()
        });
        let mut ctx = RateCreditContext::default();
        let mut last = Actions::default();
        for step in 0..2u64 {
            for i in 0..own {
                let act = ev(&mut law, &mut ctx, 10 * step + u64::from(i) % 10, rx(1024));
                if step == 0 && i == 0 {
                    assert_eq!(act.timer(), Some(Some(at(10))), "ticking from the first Rx");
                }
            }
            for _ in 0..others {
                law.on_foreign_rx(at(10 * step), 1024);
            }
            last = ev(&mut law, &mut ctx, 10 * (step + 1), Event::Timer);
        }
        last
    }

    #[test]
    fn the_receiver_credits_what_the_others_leave() {
        // Alone: 95% of the port, in payload (1024 of each 1094 wire bytes).
        let alone = grant_beside(100, 0, 0.0).granted();
        let full = 95e9 * 10e-6 / 8.0 * 1024.0 / wire_len(1024) as f64;
        assert!(
            (alone as f64 / full - 1.0).abs() < 0.01,
            "{alone} vs {full}"
        );
        // Beside 61 others' packets per 10 us (about 53 Gbit/s on the wire): the rest.
        let beside = grant_beside(10, 61, 0.0).granted();
        let others_bps = 61.0 * wire_len(1024) as f64 * 8.0 / 10e-6;
        let rest = (95e9 - others_bps) * 10e-6 / 8.0 * 1024.0 / wire_len(1024) as f64;
        assert!(
            (beside as f64 / rest - 1.0).abs() < 0.01,
            "{beside} vs {rest}"
        );
        // More than the port: the least credit, never nothing.
        let starved = grant_beside(10, 200, 0.0).granted();
        assert!(starved > 0 && starved < 200, "{starved}");
    }

    #[test]
    fn backpressure_past_the_threshold_only() {
        // 100 packets of 1 KiB per 10 us: 87.5 Gbit/s on the wire.
        assert!(grant_beside(100, 0, 0.8).cnp());
        assert!(!grant_beside(100, 0, 0.9).cnp());
        assert!(!grant_beside(100, 0, 0.0).cnp(), "off by default");
    }

    #[test]
    fn the_sender_halves_on_backpressure_and_climbs_back_by_ai() {
        let mut law = RateCredit::new(RateCreditParams::default());
        let mut ctx = RateCreditContext::default();
        let e = Event::Start {
            mtu: 1024,
            line_rate_bps: LINE,
        };
        let act = ev(&mut law, &mut ctx, 0, e);
        assert_eq!(act.rate(), Some(None), "line rate at first");
        let act = ev(&mut law, &mut ctx, 1, Event::Cnp);
        assert_eq!(act.rate(), Some(Some(LINE / 2)));
        let act = ev(&mut law, &mut ctx, 2, Event::Cnp);
        assert_eq!(act.rate(), Some(Some(LINE / 4)));
        // 1 Gbit/s more per whole interval since the last CNP, applied when the sender
        // next hears anything (here grants of a full interval at line rate).
        let grant = Event::Credit { bytes: 125_000 };
        let act = ev(&mut law, &mut ctx, 11, grant);
        assert_eq!(act.rate(), Some(Some(LINE / 4)), "not a whole interval yet");
        let act = ev(&mut law, &mut ctx, 12, grant);
        assert_eq!(act.rate(), Some(Some(LINE / 4 + 1_000_000_000)));
        let act = ev(&mut law, &mut ctx, 42, grant);
        assert_eq!(act.rate(), Some(Some(LINE / 4 + 4_000_000_000)));
        // A CNP restarts the count.
        ev(&mut law, &mut ctx, 45, Event::Cnp);
        let act = ev(&mut law, &mut ctx, 54, grant);
        assert_eq!(act.rate(), Some(Some((LINE / 4 + 4_000_000_000) / 2)));
    }

    #[test]
    fn the_sender_spends_only_credit_and_paces_at_its_rate() {
        let mut law = RateCredit::new(RateCreditParams::default());
        let mut ctx = RateCreditContext::default();
        let e = Event::Start {
            mtu: 1024,
            line_rate_bps: LINE,
        };
        ev(&mut law, &mut ctx, 0, e);
        // One interval at line rate: 125,000 bytes, 122 packets of 1 KiB.
        let sent = (0..1000)
            .take_while(|_| law.gate(at(0), &mut ctx, 1024) == Gate::Send)
            .count();
        assert_eq!(sent, 122);
        // A grant of 25,000 bytes per 10 us is 20 Gbit/s: paced a little above it, woken.
        let act = ev(&mut law, &mut ctx, 5, Event::Credit { bytes: 25_000 });
        assert!(act.woken());
        assert_eq!(act.rate(), Some(Some(22_000_000_000)));
        let sent = (0..1000)
            .take_while(|_| law.gate(at(5), &mut ctx, 1024) == Gate::Send)
            .count();
        assert_eq!(sent, 24, "the 25,000 bytes and the 1,000 left over");
    }

    #[test]
    fn a_sender_without_grants_regains_its_first_credit() {
        let mut law = RateCredit::new(RateCreditParams {
            stall_us: 50.0,
            ..RateCreditParams::default()
        });
        let mut ctx = RateCreditContext::default();
        let e = Event::Start {
            mtu: 1024,
            line_rate_bps: LINE,
        };
        ev(&mut law, &mut ctx, 0, e);
        while law.gate(at(0), &mut ctx, 1024) == Gate::Send {}
        let act = ev(&mut law, &mut ctx, 40, Event::Timer);
        assert!(!act.woken());
        let act = ev(&mut law, &mut ctx, 50, Event::Timer);
        assert!(act.woken());
        assert_eq!(law.gate(at(50), &mut ctx, 1024), Gate::Send);
    }

    #[test]
    fn idle_queue_pairs_arm_no_timer() {
        let mut law = RateCredit::new(RateCreditParams::default());
        // A receiver credits the data that came, then stops.
        let mut r = RateCreditContext::default();
        assert_eq!(
            ev(&mut law, &mut r, 0, rx(1024)).timer(),
            Some(Some(at(10)))
        );
        let act = ev(&mut law, &mut r, 10, Event::Timer);
        assert!(act.granted() > 0);
        assert!(
            !matches!(act.timer(), Some(Some(_))),
            "nothing uncredited: no new timer"
        );
        // A sender with credit to spare checks for a stall once, then stops.
        let mut s = RateCreditContext::default();
        let e = Event::Start {
            mtu: 1024,
            line_rate_bps: LINE,
        };
        assert_eq!(ev(&mut law, &mut s, 0, e).timer(), Some(Some(at(1000))));
        let act = ev(&mut law, &mut s, 1000, Event::Timer);
        assert!(!act.woken());
        assert!(!matches!(act.timer(), Some(Some(_))), "no new timer");
    }

    #[test]
    fn the_context_fits_swccs_slot() {
        assert!(
            std::mem::size_of::<RateCreditContext>() <= sluice_core::control::MAX_CONTEXT_BYTES
        );
    }
}
