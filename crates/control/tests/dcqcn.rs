//! DCQCN through the shared checks: its rate stays within [min_rate, line rate] under any
//! events, and a flow cut to the floor by a storm of CNPs climbs back to line rate on a
//! path that marks nothing.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::Params;
use sluice_control::dcqcn::{Dcqcn, DcqcnParams};
use sluice_core::control::{Event, Law};

const LINE: u64 = 100_000_000_000;
const MTU: u32 = 4096;

/// Rates within [10 Mbit/s (the default floor), line rate]; DCQCN sets no window (an empty
/// range: any window would fail).
fn bounds() -> Bounds {
    Bounds {
        min_rate_bps: 10_000_000,
        max_rate_bps: LINE,
        min_window: u64::MAX,
        max_window: 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_rate_stays_within_its_bounds_under_any_events(
        events in prop::collection::vec(arb_event(), 0..300),
    ) {
        let mut law = Dcqcn::new(DcqcnParams::default());
        run_random(&mut law, MTU, LINE, &events, &bounds()).map_err(TestCaseError::fail)?;
    }

    /// Short timers and a small byte counter make every stage (fast recovery, additive,
    /// hyper) and the timer catch-up happen within the random sequences.
    #[test]
    fn with_fast_timers_too(events in prop::collection::vec(arb_event(), 0..300)) {
        let mut law = Dcqcn::new(DcqcnParams {
            alpha_timer_us: 3.0,
            increase_timer_us: 5.0,
            byte_counter_bytes: 4096,
            rate_hai_mbps: 5_000.0,
            ..DcqcnParams::default()
        });
        run_random(&mut law, MTU, LINE, &events, &bounds()).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn a_flow_at_the_floor_recovers_to_line_rate() {
    let mut law = Dcqcn::new(DcqcnParams::default());
    // 40 CNPs with α = 1 halve 100 Gbit/s 40 times: the rate sits at its 10 Mbit/s floor.
    let warmup = [Event::Cnp; 40];
    // Expected climb with the paper's defaults, timer-driven (55 µs): 5 fast-recovery steps,
    // then additive increase of 40 Mbit/s per 55 µs (≈0.73 Gbit/s per ms) until the byte
    // counter has also counted F = 5 × 10 MB (≈ 33 ms in), then hyper increase of
    // i × 200 Mbit/s per event: back at line rate (unpaced) before 50 ms into the run (a
    // 50 ms run ends unpaced; at 40 ms the rate is ≈ 64 Gbit/s). 70 ms of simulated time,
    // the last quarter (52.5–70 ms) measured.
    let r = benign_flow(
        &mut law,
        MTU,
        LINE,
        Duration::from_micros(10),
        &warmup,
        Duration::from_millis(70),
        &bounds(),
    )
    .unwrap();
    assert!(r.tail_rate_bps >= 0.9 * LINE as f64, "{r:?}");
    // Back at line rate the law unpaces and stops its timer.
    assert_eq!(r.knobs.rate_bps, None, "{r:?}");
    assert_eq!(r.knobs.timer, None, "{r:?}");
}

#[test]
fn without_cnps_a_flow_never_leaves_line_rate() {
    let mut law = Dcqcn::new(DcqcnParams::default());
    let r = benign_flow(
        &mut law,
        MTU,
        LINE,
        Duration::from_micros(10),
        &[],
        Duration::from_millis(1),
        &bounds(),
    )
    .unwrap();
    assert!(r.tail_rate_bps >= 0.99 * LINE as f64, "{r:?}");
    assert_eq!((r.knobs.rate_bps, r.knobs.timer), (None, None), "{r:?}");
}

#[test]
fn parameters_parse_and_refuse_nonsense() {
    let mut p = DcqcnParams::default();
    for (name, value) in [
        ("g", "0.0625"),
        ("alpha_timer_us", "30"),
        ("increase_timer_us", "300"),
        ("byte_counter_bytes", "65536"),
        ("fast_recovery", "3"),
        ("rate_ai_mbps", "5"),
        ("rate_hai_mbps", "50"),
        ("min_rate_mbps", "100"),
        ("cnp_interval_us", "4"),
        ("cnp_delay_us", "23"),
    ] {
        p.set(name, value).unwrap();
    }
    assert_eq!(
        p,
        DcqcnParams {
            g: 0.0625,
            alpha_timer_us: 30.0,
            increase_timer_us: 300.0,
            byte_counter_bytes: 65536,
            fast_recovery: 3,
            rate_ai_mbps: 5.0,
            rate_hai_mbps: 50.0,
            min_rate_mbps: 100.0,
            cnp_interval_us: 4.0,
            cnp_delay_us: 23.0,
        }
    );
    assert_refused(
        &mut p,
        &[
            ("g", "1.5"),
            ("g", "-0.1"),
            ("alpha_timer_us", "0"),
            ("increase_timer_us", "NaN"),
            ("byte_counter_bytes", "0"),
            ("byte_counter_bytes", "1.5"),
            ("fast_recovery", "-1"),
            ("fast_recovery", "5000000000"),
            ("rate_ai_mbps", "inf"),
            ("min_rate_mbps", "0"),
            ("cnp_interval_us", "soon"),
            ("cnp_delay_us", "-1"),
        ],
        "rate_ai",
    );
    assert_eq!(Dcqcn::new(p).name(), "dcqcn");
}
