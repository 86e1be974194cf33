//! HPCC through the shared checks: its bounds under any events, recovery on an idle path
//! after full-queue telemetry pushed it to its floor, and its parameters.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::Params;
use sluice_control::hpcc::{Hpcc, HpccParams};
use sluice_core::Instant;
use sluice_core::control::{Actions, Event, IntHop, IntPath, Law};
use sluice_wire::Psn;

const LINE: u64 = 100_000_000_000;
const MTU: u32 = 4096;

/// With the defaults (T = 13 µs) at 100 Gbit/s and a 4096-byte MTU: the window lies in
/// [one MTU, W_init = 100 Gbit/s · 13 µs = 162 500 B], the rate W/T in
/// [4096 · 8 / 13 µs = 2 520 615 384 bit/s, the line].
fn bounds() -> Bounds {
    Bounds {
        min_rate_bps: 2_520_615_384,
        max_rate_bps: LINE,
        min_window: 4096,
        max_window: 162_500,
    }
}

/// Ten round trips of telemetry from a hop with a 1 MB standing queue, one packet of
/// 4201 wire bytes per µs: u = 10⁶ / 162 500 + 4.2 / 12.5 ≈ 6.5 per sample. Its PSNs end
/// just before 0, where the benign flow's begin, as if the same flow went on.
fn full_queue_warmup() -> Vec<Event> {
    let mut events = Vec::new();
    for k in 0..10u32 {
        let psn = Psn::new(0).sub(10 - k);
        events.push(Event::Tx {
            psn,
            bytes: MTU,
            retransmission: false,
        });
        let mut path = IntPath::default();
        path.push(IntHop {
            qlen_bytes: 1_000_000,
            tx_bytes: k * 4201,
            ts_ns: k * 1000,
            rate_100mbps: 1000,
        });
        events.push(Event::Telemetry {
            confirmed: psn.next(),
            path,
        });
    }
    events
}

#[test]
fn the_warmup_pushes_hpcc_to_its_floor() {
    let mut law = Hpcc::new(HpccParams::default());
    let mut ctx = Default::default();
    let start = Event::Start {
        mtu: MTU,
        line_rate_bps: LINE,
    };
    law.on_event(Instant::ZERO, &mut ctx, &start, &mut Actions::default());
    let mut last = Actions::default();
    for e in full_queue_warmup() {
        let mut act = Actions::default();
        law.on_event(Instant::ZERO, &mut ctx, &e, &mut act);
        last.merge(act);
    }
    assert_eq!(last.window(), Some(Some(4096)));
    assert_eq!(last.rate(), Some(Some(2_520_615_384)));
}

#[test]
fn hpcc_recovers_to_its_target_on_an_idle_path() {
    // RTT = T = 13 µs. From the floor (one packet per RTT) it takes one RTT to sample the
    // idle path, maxStage = 5 RTTs of additive steps, then one multiplicative jump to
    // W_c·η/U (≈ 115 µs in all); after that it holds U at η = 0.95 of the line, plus W_AI.
    // A 400 µs run measures 300..400 µs (recovered within 300 µs, 23 RTTs); a 2 ms run
    // measures 1.5..2 ms (it stays there).
    for run in [Duration::from_micros(400), Duration::from_millis(2)] {
        let mut law = Hpcc::new(HpccParams::default());
        let r = benign_flow(
            &mut law,
            MTU,
            LINE,
            Duration::from_micros(13),
            &full_queue_warmup(),
            run,
            &bounds(),
        )
        .unwrap();
        assert!(r.tail_rate_bps >= 0.9 * LINE as f64, "{run:?}: {r:?}");
        assert!(r.tail_rate_bps <= 0.97 * LINE as f64, "{run:?}: {r:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hpcc_stays_within_its_bounds(events in prop::collection::vec(arb_event(), 0..300)) {
        let mut law = Hpcc::new(HpccParams::default());
        run_random(&mut law, MTU, LINE, &events, &bounds()).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn hpcc_parameters_parse_and_refuse_nonsense() {
    let mut p = HpccParams::default();
    assert_eq!(
        p,
        HpccParams {
            eta: 0.95,
            max_stage: 5,
            base_rtt_us: 13.0,
            expected_flows: 100
        }
    );
    p.set("eta", "0.9").unwrap();
    p.set("max_stage", "0").unwrap();
    p.set("base_rtt_us", "8.5").unwrap();
    p.set("expected_flows", "20").unwrap();
    assert_eq!(
        p,
        HpccParams {
            eta: 0.9,
            max_stage: 0,
            base_rtt_us: 8.5,
            expected_flows: 20
        }
    );
    assert_refused(
        &mut p,
        &[
            ("eta", "0"),
            ("eta", "1.5"),
            ("eta", "NaN"),
            ("max_stage", "-1"),
            ("max_stage", "256"),
            ("base_rtt_us", "0"),
            ("base_rtt_us", "x"),
            ("expected_flows", "0"),
            ("expected_flows", "2.5"),
        ],
        "wai",
    );
    assert_eq!(Hpcc::new(p).name(), "hpcc");
}
