//! Receiver-driven credit, in the manner of Homa (Montazeri et al., SIGCOMM 2018) and EQDS
//! (Olteanu et al., NSDI 2022), as SwCC's credit example (Listing 1) runs it: a sender sends
//! only bytes it holds credit for, and the receiver returns credit for what it received.
//!
//! ```text
//! sender:   on Start:          credit = U                      (U = unscheduled bytes, one BDP)
//!           gate(b), b > 0:    if credit ≥ b { credit −= b; Send } else { Hold }
//!           gate(0):           Send                            (READ requests, atomics)
//!           on Credit(g):      credit = min(credit + g, 2U); wake
//! receiver: on Rx(b):          owed += b                       (one for one)
//!           grant owed when    owed ≥ quantum  and  now ≥ next_grant_at
//!              then            next_grant_at = max(next_grant_at, now) + owed·8 / downlink
//! ```
//!
//! So a flow keeps `U` bytes in flight (data, owed credit and grants on the way): one BDP,
//! enough for the line rate. `next_grant_at` is law-wide, shared by every queue pair of the
//! receiving host: its grants together never exceed its downlink rate (EQDS's pull pacer).
//! A grant the pacer holds back stays owed and a timer fires when it may go; owed bytes
//! below the quantum are flushed after one base RTT without a grant, so a message's tail
//! returns its credit. Grants queue in timer order, not by remaining size (no SRPT: SwCC's
//! Homa port has no switch priorities either).
//!
//! The engine never gates a resent packet, and its arrival earns a grant, so a lost data
//! packet costs no credit for good. What can still strand a sender is the last grant of a
//! burst getting lost (grants carry totals: only a later grant repairs one). So that this
//! cannot stall a sender for ever, a sender that has neither sent nor been granted anything
//! for `stall_us` gets its unscheduled credit back (`credit = max(credit, U)`; Homa recovers
//! with RESEND instead). The bound `2U` keeps a late grant after that, or a peer granting
//! more than it received, from letting a sender burst more than two BDPs.
//!
//! This law sets no rate and no window: it unpaces the queue pair at start.

use std::time::Duration;

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Gate, Law};

use crate::params::{
    ParamError, ParamInfo, Params, parse_f64_in, parse_u64, parse_u64_in, unknown, us_to_ns,
};

/// The credit law's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreditParams {
    /// U, the bytes a sender may send without credit; 0 = one BDP (line rate · base RTT,
    /// Homa's RTTbytes). Default 0.
    pub unscheduled_bytes: u64,
    /// The base RTT in µs that sizes the BDP and the flush of small owed amounts. Default
    /// 13 µs, the same datacenter RTT as HPCC's default.
    pub base_rtt_us: f64,
    /// Owed bytes are granted in amounts of at least this. Default 4096 B, one RoCE MTU.
    pub grant_quantum_bytes: u64,
    /// The receiver's downlink, the rate its grants (all queue pairs together) may not
    /// exceed, in Gbit/s. Default 100.
    pub downlink_gbps: f64,
    /// A sender with no send and no grant for this long gets its unscheduled credit back,
    /// in µs. Default 1000 (about 75 RTTs: far longer than a grant waits in the pacer).
    pub stall_us: f64,
}

impl Default for CreditParams {
    fn default() -> Self {
        CreditParams {
            unscheduled_bytes: 0,
            base_rtt_us: 13.0,
            grant_quantum_bytes: 4096,
            downlink_gbps: 100.0,
            stall_us: 1000.0,
        }
    }
}

impl Params for CreditParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "unscheduled_bytes",
            help: "bytes sent without credit, 0 = one BDP (line rate x base RTT) (default 0)",
        },
        ParamInfo {
            name: "base_rtt_us",
            help: "base RTT in µs, sizing the BDP and the flush of small grants, 0.1..=100000 (default 13)",
        },
        ParamInfo {
            name: "grant_quantum_bytes",
            help: "smallest grant in bytes, 1..=2^32 (default 4096)",
        },
        ParamInfo {
            name: "downlink_gbps",
            help: "receiver downlink in Gbit/s, bounding all its grants together, 0.001..=10000 (default 100)",
        },
        ParamInfo {
            name: "stall_us",
            help: "µs without sends or grants after which a sender regains its unscheduled credit, 1..=10^7 (default 1000)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "unscheduled_bytes" => self.unscheduled_bytes = parse_u64(name, value)?,
            "base_rtt_us" => self.base_rtt_us = parse_f64_in(name, value, 0.1, 100_000.0)?,
            "grant_quantum_bytes" => {
                self.grant_quantum_bytes = parse_u64_in(name, value, 1, 1 << 32)?
            }
            "downlink_gbps" => self.downlink_gbps = parse_f64_in(name, value, 0.001, 10_000.0)?,
            "stall_us" => self.stall_us = parse_f64_in(name, value, 1.0, 1e7)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Per-queue-pair state: a sender half and a receiver half (80 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct CreditContext {
    /// Sender: bytes it may send, and U (0 until Start).
    credit: u64,
    unscheduled: u64,
    /// Sender: the last send or grant, and when to look for a stall.
    last_activity: Instant,
    stall_check_at: Option<Instant>,
    /// Receiver: bytes received and not yet granted back, and when to try granting them.
    owed: u64,
    grant_at: Option<Instant>,
    /// The timer this context has armed (the earlier of the two deadlines).
    timer_at: Option<Instant>,
}

/// Receiver-driven credit: see the module documentation.
#[derive(Debug, Clone, Copy)]
pub struct Credit {
    unscheduled: u64,
    base_rtt: Duration,
    quantum: u64,
    downlink_bps: u64,
    stall: Duration,
    /// When this host's next grant may go (any queue pair).
    next_grant_at: Instant,
}

impl Credit {
    /// A credit law with parameters `p`.
    pub fn new(p: CreditParams) -> Credit {
        Credit {
            unscheduled: p.unscheduled_bytes,
            base_rtt: Duration::from_nanos(us_to_ns(p.base_rtt_us)),
            quantum: p.grant_quantum_bytes.max(1),
            downlink_bps: ((p.downlink_gbps * 1e9) as u64).max(1),
            stall: Duration::from_nanos(us_to_ns(p.stall_us)),
            next_grant_at: Instant::ZERO,
        }
    }

    /// Grants what `ctx` owes if the quantum (or `flush`) and the host's pacer allow;
    /// otherwise sets when to try again.
    fn try_grant(&mut self, now: Instant, ctx: &mut CreditContext, flush: bool, act: &mut Actions) {
        if ctx.owed == 0 {
            ctx.grant_at = None;
        } else if ctx.owed < self.quantum && !flush {
            // Wait for a quantum, but not beyond a base RTT.
            ctx.grant_at.get_or_insert(now + self.base_rtt);
        } else if now < self.next_grant_at {
            ctx.grant_at = Some(self.next_grant_at); // the pacer is busy until then
        } else {
            // The grant occupies the downlink for owed·8/downlink (rounded up).
            let ns = (u128::from(ctx.owed) * 8_000_000_000).div_ceil(u128::from(self.downlink_bps));
            self.next_grant_at = now + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
            act.grant(ctx.owed);
            ctx.owed = 0;
            ctx.grant_at = None;
        }
    }

    /// The sender's stall check: with no send and no grant for `stall`, regain U.
    fn check_stall(&self, now: Instant, ctx: &mut CreditContext, act: &mut Actions) {
        if now - ctx.last_activity >= self.stall {
            ctx.credit = ctx.credit.max(ctx.unscheduled);
            ctx.stall_check_at = None;
            act.wake();
        } else {
            ctx.stall_check_at = Some(ctx.last_activity + self.stall);
        }
    }
}

impl Law for Credit {
    type Context = CreditContext;

    fn name(&self) -> &'static str {
        "credit"
    }

    /// Grant totals in the CCX of every packet to the sender (its ACKs among them), so that
    /// no control packet is needed and a grant lost with one packet is made up by the next.
    fn ccx(&self) -> Option<sluice_wire::CcxLayout> {
        Some(sluice_wire::CcxLayout::Credit)
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[
            EventKind::Start,
            EventKind::Tx,
            EventKind::Rx,
            EventKind::Credit,
            EventKind::Timer,
        ])
        .union(EventMask::GATE)
    }

    fn on_event(
        &mut self,
        now: Instant,
        ctx: &mut CreditContext,
        event: &Event,
        act: &mut Actions,
    ) {
        if *event == Event::Timer {
            ctx.timer_at = None; // it fired
        }
        // Deadlines that are due (the Timer, or one delivered late behind this event).
        if ctx.grant_at.is_some_and(|at| at <= now) {
            self.try_grant(now, ctx, true, act);
        }
        if ctx.stall_check_at.is_some_and(|at| at <= now) {
            self.check_stall(now, ctx, act);
        }
        match *event {
            Event::Start { mtu, line_rate_bps } => {
                let bdp = u128::from(line_rate_bps) * self.base_rtt.as_nanos() / 8_000_000_000;
                let u = match self.unscheduled {
                    0 => u64::try_from(bdp).unwrap_or(u64::MAX),
                    u => u,
                };
                // At least one packet, or the sender could never start.
                ctx.unscheduled = u.max(u64::from(mtu.max(1)));
                ctx.credit = ctx.unscheduled;
                ctx.last_activity = now;
                act.unpace();
            }
            Event::Tx { .. } => {
                ctx.last_activity = now;
                ctx.stall_check_at.get_or_insert(now + self.stall);
            }
            Event::Credit { bytes } => {
                ctx.credit = ctx
                    .credit
                    .saturating_add(bytes)
                    .min(ctx.unscheduled.saturating_mul(2));
                ctx.last_activity = now;
                act.wake();
            }
            Event::Rx { bytes, .. } => {
                ctx.owed = ctx.owed.saturating_add(u64::from(bytes));
                self.try_grant(now, ctx, false, act);
            }
            _ => {}
        }
        // One timer per queue pair: the earlier deadline (both are after now).
        let want = match (ctx.grant_at, ctx.stall_check_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if want != ctx.timer_at {
            match want {
                Some(at) => act.arm_timer(at),
                None => act.cancel_timer(),
            }
            ctx.timer_at = want;
        }
    }

    fn gate(&mut self, _: Instant, ctx: &mut CreditContext, bytes: u32) -> Gate {
        let bytes = u64::from(bytes);
        if bytes == 0 {
            Gate::Send // READ requests and atomics carry no payload: they always go
        } else if ctx.credit >= bytes {
            ctx.credit -= bytes;
            Gate::Send
        } else {
            Gate::Hold
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_wire::Psn;

    use super::*;

    const LINE: u64 = 100_000_000_000;

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    fn event(law: &mut Credit, ctx: &mut CreditContext, now: u64, e: Event) -> Actions {
        let mut act = Actions::default();
        law.on_event(at(now), ctx, &e, &mut act);
        act
    }

    fn start(law: &mut Credit, ctx: &mut CreditContext) -> Actions {
        let e = Event::Start {
            mtu: 4096,
            line_rate_bps: LINE,
        };
        event(law, ctx, 0, e)
    }

    fn rx(law: &mut Credit, ctx: &mut CreditContext, now: u64, bytes: u32) -> Actions {
        let e = Event::Rx {
            psn: Psn::new(0),
            bytes,
            ce: false,
        };
        event(law, ctx, now, e)
    }

    /// How many gates of `bytes` pass in a row.
    fn sends(law: &mut Credit, ctx: &mut CreditContext, bytes: u32) -> usize {
        (0..10_000)
            .take_while(|_| law.gate(at(0), ctx, bytes) == Gate::Send)
            .count()
    }

    #[test]
    fn a_sender_spends_its_credit_holds_and_wakes_on_a_grant() {
        let mut law = Credit::new(CreditParams {
            unscheduled_bytes: 8192,
            ..CreditParams::default()
        });
        let mut ctx = CreditContext::default();
        let act = start(&mut law, &mut ctx);
        assert_eq!(act.rate(), Some(None), "unpaced");
        assert_eq!(act.window(), None, "no window");
        // 8192 B of credit: two 4096-byte packets, then hold; READs (0 B) still go.
        assert_eq!(law.gate(at(1), &mut ctx, 4096), Gate::Send);
        assert_eq!(law.gate(at(2), &mut ctx, 4096), Gate::Send);
        assert_eq!(law.gate(at(3), &mut ctx, 4096), Gate::Hold);
        assert_eq!(law.gate(at(3), &mut ctx, 1), Gate::Hold);
        assert_eq!(law.gate(at(3), &mut ctx, 0), Gate::Send);
        // A grant of 5000: wake; one packet (5000 − 4096 = 904 left), then hold.
        let act = event(&mut law, &mut ctx, 10, Event::Credit { bytes: 5000 });
        assert!(act.woken());
        assert_eq!(law.gate(at(11), &mut ctx, 4096), Gate::Send);
        assert_eq!(law.gate(at(12), &mut ctx, 4096), Gate::Hold);
        assert_eq!(law.gate(at(12), &mut ctx, 904), Gate::Send);
        assert_eq!(law.gate(at(12), &mut ctx, 1), Gate::Hold);
    }

    #[test]
    fn the_default_unscheduled_credit_is_one_bdp_and_credit_is_bounded() {
        let mut law = Credit::new(CreditParams::default());
        let mut ctx = CreditContext::default();
        start(&mut law, &mut ctx);
        // 100 Gbit/s · 13 µs / 8 = 162 500 B: 39 packets of 4096 (159 744), 2756 B left.
        assert_eq!(sends(&mut law, &mut ctx, 4096), 39);
        assert_eq!(sends(&mut law, &mut ctx, 2756), 1);
        // An enormous grant is capped at 2U = 325 000 B: 79 packets (323 584), 1416 left.
        event(&mut law, &mut ctx, 0, Event::Credit { bytes: u64::MAX });
        assert_eq!(sends(&mut law, &mut ctx, 4096), 79);
        assert_eq!(sends(&mut law, &mut ctx, 1416), 1);
        // Before Start there is no credit at all.
        let mut fresh = CreditContext::default();
        assert_eq!(law.gate(at(0), &mut fresh, 1), Gate::Hold);
    }

    #[test]
    fn the_receiver_grants_by_the_quantum_and_flushes_the_rest() {
        let mut law = Credit::new(CreditParams::default());
        let mut ctx = CreditContext::default();
        // 3 × 1024 B < 4096: owed, and a flush timer one base RTT (13 µs) after the first.
        let act = rx(&mut law, &mut ctx, 1000, 1024);
        assert_eq!((act.granted(), act.timer()), (0, Some(Some(at(14_000)))));
        assert!(rx(&mut law, &mut ctx, 1100, 1024).is_empty());
        assert!(rx(&mut law, &mut ctx, 1200, 1024).is_empty());
        // The fourth makes a quantum: all 4096 granted, the flush timer cancelled.
        let act = rx(&mut law, &mut ctx, 1300, 1024);
        assert_eq!((act.granted(), act.timer()), (4096, Some(None)));
        // 1000 B more, then silence: the timer 13 µs later grants them anyway.
        let act = rx(&mut law, &mut ctx, 5000, 1000);
        assert_eq!((act.granted(), act.timer()), (0, Some(Some(at(18_000)))));
        let act = event(&mut law, &mut ctx, 18_000, Event::Timer);
        assert_eq!((act.granted(), act.timer()), (1000, None));
        // A timer with nothing owed does nothing.
        assert!(event(&mut law, &mut ctx, 30_000, Event::Timer).is_empty());
    }

    #[test]
    fn grants_of_all_queue_pairs_share_the_downlink() {
        // 100 Gbit/s: a 4096-byte grant takes 4096 · 8 / 100 = 327.68 → 328 ns of the pacer.
        let mut law = Credit::new(CreditParams::default());
        let (mut a, mut b) = (CreditContext::default(), CreditContext::default());
        let act = rx(&mut law, &mut a, 1000, 4096);
        assert_eq!((act.granted(), act.timer()), (4096, None));
        // b's quantum arrives at the same time: it waits for the pacer, until 1328.
        let act = rx(&mut law, &mut b, 1000, 4096);
        assert_eq!((act.granted(), act.timer()), (0, Some(Some(at(1328)))));
        // a gets another 4096 at 1100: the pacer is still busy; a also waits until 1328.
        let act = rx(&mut law, &mut a, 1100, 4096);
        assert_eq!((act.granted(), act.timer()), (0, Some(Some(at(1328)))));
        // Both timers fire at 1328: b's first takes the slot, until 1656; a waits again.
        let act = event(&mut law, &mut b, 1328, Event::Timer);
        assert_eq!((act.granted(), act.timer()), (4096, None));
        let act = event(&mut law, &mut a, 1328, Event::Timer);
        assert_eq!((act.granted(), act.timer()), (0, Some(Some(at(1656)))));
        // Meanwhile more arrives for a: it all goes in one grant when a's turn comes.
        assert!(rx(&mut law, &mut a, 1400, 4096).is_empty());
        let act = event(&mut law, &mut a, 1656, Event::Timer);
        assert_eq!((act.granted(), act.timer()), (8192, None));
        // 16 384 B granted from 1000 to 1656, the last one busy until 1656 + 656 = 2312:
        // 16 384 · 8 bits in 1312 ns = 99.9 Gbit/s, within the downlink.
        let act = rx(&mut law, &mut b, 2311, 4096);
        assert_eq!((act.granted(), act.timer()), (0, Some(Some(at(2312)))));
    }

    #[test]
    fn a_stalled_sender_regains_its_unscheduled_credit() {
        let mut law = Credit::new(CreditParams {
            unscheduled_bytes: 8192,
            ..CreditParams::default()
        });
        let mut ctx = CreditContext::default();
        start(&mut law, &mut ctx);
        let tx = Event::Tx {
            psn: Psn::new(0),
            bytes: 4096,
            retransmission: false,
        };
        // Two packets sent (and lost): the stall check is armed 1 ms after the first.
        assert_eq!(sends(&mut law, &mut ctx, 4096), 2);
        let act = event(&mut law, &mut ctx, 100, tx);
        assert_eq!(act.timer(), Some(Some(at(1_000_100))));
        assert!(event(&mut law, &mut ctx, 200, tx).is_empty());
        // At 1 000 100 the last activity (200) is not 1 ms old yet: look again at 1 000 200.
        let act = event(&mut law, &mut ctx, 1_000_100, Event::Timer);
        assert_eq!(
            (act.woken(), act.timer()),
            (false, Some(Some(at(1_000_200))))
        );
        // Then it is: credit back to U = 8192, and a wake.
        let act = event(&mut law, &mut ctx, 1_000_200, Event::Timer);
        assert_eq!((act.woken(), act.timer()), (true, None));
        assert_eq!(sends(&mut law, &mut ctx, 4096), 2);
    }

    #[test]
    fn both_halves_share_one_timer() {
        let mut law = Credit::new(CreditParams::default());
        let mut ctx = CreditContext::default();
        start(&mut law, &mut ctx);
        event(
            &mut law,
            &mut ctx,
            0,
            Event::Tx {
                psn: Psn::new(0),
                bytes: 4096,
                retransmission: false,
            },
        );
        // The receiver's flush (13 µs) comes before the sender's stall check (1 ms).
        let act = rx(&mut law, &mut ctx, 0, 100);
        assert_eq!(act.timer(), Some(Some(at(13_000))));
        let act = event(&mut law, &mut ctx, 13_000, Event::Timer);
        assert_eq!(
            (act.granted(), act.timer()),
            (100, Some(Some(at(1_000_000))))
        );
    }
}
