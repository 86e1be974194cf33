//! A law behind SCR's decoupled loop with no delay, no service time and a processor per
//! queue pair must do what the same law does inline: the loop's queues and processors only
//! add time, so with none of it the rate trajectory is the inline one.

use std::time::Duration;

use sluice_control::dcqcn::{Dcqcn, DcqcnParams};
use sluice_core::Instant;
use sluice_core::control::{Actions, Controller, Decoupled, Event, Inline, ScrConfig};
use sluice_wire::Psn;

const LINE: u64 = 100_000_000_000;
const US: u64 = 1_000;

/// What the engine would have seen: every rate applied (time, queue pair, rate; `None` is
/// line rate) and every CNP sent (time, queue pair).
#[derive(Debug, Default)]
struct Applied {
    rates: Vec<(u64, u32, Option<u64>)>,
    cnps: Vec<(u64, u32)>,
}

impl Applied {
    fn take(&mut self, at: u64, qp: u32, act: &Actions) {
        if let Some(r) = act.rate() {
            self.rates.push((at, qp, r));
        }
        if act.cnp() {
            self.cnps.push((at, qp));
        }
    }
}

/// Drives `c` as the engine does: what is due runs before each event, the event's own
/// actions apply at once, deferred ones when they come out of `on_timeout`.
fn drive(c: &mut dyn Controller, events: &[(u64, u32, Event)], end: u64) -> Applied {
    let mut applied = Applied::default();
    let mut out = Vec::new();
    let mut fire = |c: &mut dyn Controller, upto: u64, applied: &mut Applied| {
        while let Some(at) = c.next_timeout().map(Instant::as_nanos) {
            if at > upto {
                break;
            }
            c.on_timeout(Instant::from_nanos(at), &mut out);
            for (qp, act) in out.drain(..) {
                applied.take(at, qp, &act);
            }
        }
    };
    for (at, qp, e) in events {
        fire(c, *at, &mut applied);
        let mut act = Actions::default();
        c.on_event(Instant::from_nanos(*at), *qp, e, &mut act);
        applied.take(*at, *qp, &act);
        fire(c, *at, &mut applied);
    }
    fire(c, end, &mut applied);
    applied
}

/// Queue pair 0 sends a 1 KB packet every `gap` ns and gets a CNP every 50 us for the
/// first 300 us; queue pair 1 receives marked packets for 200 us (its notification point
/// answers with CNPs).
fn events(gap: u64) -> Vec<(u64, u32, Event)> {
    let mut ev = vec![(
        0,
        0,
        Event::Start {
            mtu: 1024,
            line_rate_bps: LINE,
        },
    )];
    let mut t = 100;
    let mut psn = 0;
    while t < 2_000 * US {
        ev.push((
            t,
            0,
            Event::Tx {
                psn: Psn::new(psn),
                bytes: 1024,
                retransmission: false,
            },
        ));
        if t < 200 * US {
            ev.push((
                t + 7,
                1,
                Event::Rx {
                    psn: Psn::new(psn),
                    bytes: 1024,
                    ce: true,
                },
            ));
        }
        psn += 1;
        t += gap;
    }
    for k in 0..6 {
        ev.push((10 * US + k * 50 * US + 3, 0, Event::Cnp));
    }
    ev.sort_by_key(|e| e.0);
    ev
}

fn decoupled(service: Duration) -> Decoupled<Dcqcn> {
    let config = ScrConfig {
        processors: 2,
        loop_delay: Duration::ZERO,
        service_time: service,
        ..ScrConfig::default()
    };
    Decoupled::new(Dcqcn::new(DcqcnParams::default()), config)
}

/// The times queue pair 0's rate changed.
fn changes(a: &Applied) -> Vec<u64> {
    let mut last = Some(LINE);
    let mut out = Vec::new();
    for &(t, q, r) in &a.rates {
        let r = Some(r.unwrap_or(LINE));
        if q == 0 && r != last {
            out.push(t);
            last = r;
        }
    }
    out
}

#[test]
fn dcqcn_behind_a_loop_without_delay_or_service_time_is_dcqcn_inline() {
    let events = events(330);
    let end = 2_000 * US;
    let inline = drive(
        &mut Inline::new(Dcqcn::new(DcqcnParams::default())),
        &events,
        end,
    );
    let decoupled = drive(&mut decoupled(Duration::ZERO), &events, end);
    assert_eq!(decoupled.cnps, inline.cnps, "the notification point");
    assert!(
        changes(&inline).len() > 10,
        "the trajectory has cuts and increases"
    );
    let rates = |a: &Applied| -> Vec<(u64, u32, Option<u64>)> {
        a.rates.iter().copied().filter(|r| r.1 == 0).collect()
    };
    assert_eq!(rates(&decoupled), rates(&inline));
}

/// With a service time, the loop is no longer the inline law even with no delay: at
/// 100 Gbit/s of 1 KB packets a TX event arrives every 85 ns, so the queue pair's processor
/// always has a (coalesced) TX run waiting, and a CNP, which has no priority over it (SCR
/// treats every event kind alike), waits for the run in progress and for the TX queued
/// before it. Each cut lands 1 to 3 service times late (and the notification point's CNP
/// leaves up to 2 service times late): the loop behaves as an inline one with a few us more delay.
#[test]
fn a_service_time_delays_each_cut_by_the_tx_runs_ahead_of_it() {
    let events = events(85);
    let end = 400 * US;
    let inline = drive(
        &mut Inline::new(Dcqcn::new(DcqcnParams::default())),
        &events,
        end,
    );
    let decoupled = drive(&mut decoupled(Duration::from_micros(1)), &events, end);
    let cuts = |a: &Applied| -> Vec<u64> {
        changes(a)
            .into_iter()
            .filter(|t| (10 * US..300 * US).contains(t) && (t - 10 * US) % (50 * US) < 5 * US)
            .collect()
    };
    let (a, b) = (cuts(&inline), cuts(&decoupled));
    assert_eq!(a.len(), 6, "{a:?}");
    assert_eq!(b.len(), 6, "{b:?}");
    for (x, y) in a.iter().zip(&b) {
        let lag = y - x;
        assert!(
            (US + 1..=3 * US).contains(&lag),
            "cut {x} ns inline, {y} ns decoupled"
        );
    }
    for (x, y) in inline.cnps.iter().zip(&decoupled.cnps) {
        let lag = y.0 - x.0;
        assert!(
            (1..=2 * US).contains(&lag),
            "CNP at {} ns inline, {} ns decoupled",
            x.0,
            y.0
        );
    }
}
