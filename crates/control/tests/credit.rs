//! Receiver-driven credit through the shared checks, plus its own invariants under random
//! events: a sender never holds more than twice its unscheduled credit, and a receiver's
//! grants, over all its queue pairs, never outrun its downlink.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::Params;
use sluice_control::credit::{Credit, CreditParams};
use sluice_core::Instant;
use sluice_core::control::{Actions, Event, Gate, Law, NakKind};
use sluice_wire::Psn;

const LINE: u64 = 100_000_000_000;
const MTU: u32 = 4096;

/// The law sets no rate (it unpaces) and no window: any rate up to the line is in bounds.
fn bounds() -> Bounds {
    Bounds {
        min_rate_bps: 1,
        max_rate_bps: LINE,
        min_window: 0,
        max_window: u64::MAX,
    }
}

#[test]
fn a_credited_flow_fills_the_line() {
    // Credit keeps no congestion state: CNPs, NAKs, timeouts and huge RTTs leave it as it
    // was (it does not even ask for them). Its floor is the gate holding, which the flow
    // meets from the first RTT: it sends U = 100 Gbit/s · 13 µs = 162 500 B unscheduled,
    // then only what the receiver returns, one for one. With RTT = 13 µs that BDP covers
    // the 158 458 payload bytes a full line carries per RTT (4096 of every 4201 wire
    // bytes), so after the first RTT the flow runs at the line. Measured over 1.5..2 ms.
    let mut warmup = Vec::new();
    for _ in 0..100 {
        warmup.push(Event::Cnp);
        warmup.push(Event::Timeout);
        warmup.push(Event::Nak {
            psn: Psn::new(0),
            kind: NakKind::Sequence,
        });
        warmup.push(Event::Ack {
            confirmed: Psn::new(0),
            packets: 1,
            rtt: Some(Duration::from_millis(10)),
        });
    }
    let mut law = Credit::new(CreditParams::default());
    let r = benign_flow(
        &mut law,
        MTU,
        LINE,
        Duration::from_micros(13),
        &warmup,
        Duration::from_millis(2),
        &bounds(),
    )
    .unwrap();
    assert!(r.tail_rate_bps >= 0.99 * LINE as f64, "{r:?}");
    assert_eq!(r.knobs.rate_bps, None, "unpaced");
    assert_eq!(r.knobs.window, None, "no window");
}

#[test]
fn a_small_unscheduled_budget_limits_the_flow_to_it() {
    // U = 40 000 B per 13 µs RTT (the grants come back one RTT after the data left):
    // at most 40 000 / 4096 → 9 packets of 4201 wire bytes per RTT = 23.3 Gbit/s.
    let mut law = Credit::new(CreditParams {
        unscheduled_bytes: 40_000,
        ..CreditParams::default()
    });
    let r = benign_flow(
        &mut law,
        MTU,
        LINE,
        Duration::from_micros(13),
        &[],
        Duration::from_millis(1),
        &bounds(),
    )
    .unwrap();
    let expected = 9.0 * 4201.0 * 8.0 / 13e-6;
    assert!((r.tail_rate_bps / expected - 1.0).abs() < 0.02, "{r:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn credit_stays_within_its_bounds(events in prop::collection::vec(arb_event(), 0..300)) {
        let mut law = Credit::new(CreditParams::default());
        run_random(&mut law, MTU, LINE, &events, &bounds()).map_err(TestCaseError::fail)?;
    }

    /// Whatever happens, a sender can afterwards send at most 2U = 325 000 bytes in a row.
    #[test]
    fn credit_never_exceeds_twice_the_unscheduled_bytes(
        events in prop::collection::vec(arb_event(), 0..300),
    ) {
        let mut law = Credit::new(CreditParams::default());
        let mut ctx = Default::default();
        let mut now = Instant::from_nanos(1_000_000);
        let start = Event::Start { mtu: MTU, line_rate_bps: LINE };
        law.on_event(now, &mut ctx, &start, &mut Actions::default());
        for (gap, e) in &events {
            now = now + Duration::from_nanos(*gap);
            if let Event::Tx { bytes, .. } = e {
                let _ = law.gate(now, &mut ctx, *bytes);
            }
            law.on_event(now, &mut ctx, e, &mut Actions::default());
        }
        let mut sent = 0u64;
        while sent <= 400_000 && law.gate(now, &mut ctx, 1000) == Gate::Send {
            sent += 1000;
        }
        prop_assert!(sent <= 325_000, "{sent}");
    }

    /// Rx events on three queue pairs of one receiver, timers fired in time order: no grant
    /// goes before the downlink (100 Gbit/s) has carried the grants before it.
    #[test]
    fn grants_of_all_queue_pairs_never_outrun_the_downlink(
        steps in prop::collection::vec((0u64..2_000, 0usize..3, 0u32..=16_384), 1..300),
    ) {
        let mut law = Credit::new(CreditParams::default());
        let mut ctxs = [Default::default(); 3];
        let mut timers: [Option<Instant>; 3] = [None; 3];
        let mut now = Instant::from_nanos(1_000);
        let mut free_at = Instant::ZERO; // when the grants so far have been carried
        let mut check = |at: Instant, act: &Actions, timer: &mut Option<Instant>| {
            if let Some(t) = act.timer() {
                prop_assert!(t.is_none_or(|t| t >= at));
                *timer = t;
            }
            let g = act.granted();
            if g > 0 {
                prop_assert!(at >= free_at, "grant of {g} at {at:?}, downlink busy until {free_at:?}");
                free_at = at + Duration::from_nanos((g * 8_000_000_000).div_ceil(LINE));
            }
            Ok(())
        };
        for (gap, qp, bytes) in steps {
            let next = now + Duration::from_nanos(gap);
            // Fire due timers, earliest first.
            while let Some((i, t)) = timers
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.filter(|&t| t <= next).map(|t| (i, t)))
                .min_by_key(|&(_, t)| t)
            {
                timers[i] = None;
                let mut act = Actions::default();
                law.on_event(t, &mut ctxs[i], &Event::Timer, &mut act);
                check(t, &act, &mut timers[i])?;
            }
            now = next;
            let mut act = Actions::default();
            let rx = Event::Rx { psn: Psn::new(0), bytes, ce: false };
            law.on_event(now, &mut ctxs[qp], &rx, &mut act);
            check(now, &act, &mut timers[qp])?;
        }
    }
}

#[test]
fn credit_parameters_parse_and_refuse_nonsense() {
    let mut p = CreditParams::default();
    assert_eq!(
        p,
        CreditParams {
            unscheduled_bytes: 0,
            base_rtt_us: 13.0,
            grant_quantum_bytes: 4096,
            downlink_gbps: 100.0,
            stall_us: 1000.0,
        }
    );
    p.set("unscheduled_bytes", "65536").unwrap();
    p.set("base_rtt_us", "8").unwrap();
    p.set("grant_quantum_bytes", "1024").unwrap();
    p.set("downlink_gbps", "25").unwrap();
    p.set("stall_us", "500").unwrap();
    assert_eq!(
        p,
        CreditParams {
            unscheduled_bytes: 65536,
            base_rtt_us: 8.0,
            grant_quantum_bytes: 1024,
            downlink_gbps: 25.0,
            stall_us: 500.0,
        }
    );
    assert_refused(
        &mut p,
        &[
            ("unscheduled_bytes", "-1"),
            ("unscheduled_bytes", "1.5"),
            ("base_rtt_us", "0"),
            ("grant_quantum_bytes", "0"),
            ("grant_quantum_bytes", "99999999999"),
            ("downlink_gbps", "0"),
            ("downlink_gbps", "inf"),
            ("stall_us", "0.5"),
        ],
        "quantum",
    );
    assert_eq!(Credit::new(p).name(), "credit");
}
