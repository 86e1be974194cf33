//! DCTCP through the shared checks: its window stays within [one MTU, 64 BDP] under any
//! events, and a flow knocked down to one MTU by marks and a timeout grows back to fill the
//! line on a path that marks nothing.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::Params;
use sluice_control::dctcp::{Dctcp, DctcpParams};
use sluice_core::control::{Event, Law};

const LINE: u64 = 100_000_000_000;
const MTU: u32 = 4096;
/// 100 Gbit/s × 10 µs (the default base RTT) / 8.
const BDP: u64 = 125_000;

/// Windows within [one MTU, 64 BDP = 8 MB]; DCTCP sets no rate (an empty range: any rate
/// would fail).
fn bounds(mtu: u32) -> Bounds {
    Bounds {
        min_rate_bps: u64::MAX,
        max_rate_bps: 0,
        min_window: u64::from(mtu),
        max_window: 64 * BDP,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_window_stays_within_its_bounds_under_any_events(
        mtu in prop_oneof![Just(256u32), Just(1024), Just(4096)],
        events in prop::collection::vec(arb_event(), 0..300),
    ) {
        let mut law = Dctcp::new(DctcpParams::default());
        run_random(&mut law, mtu, LINE, &events, &bounds(mtu)).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn a_flow_at_the_floor_recovers_to_line_rate() {
    let mut law = Dctcp::new(DctcpParams::default());
    // The first CNP halves the window (α = 1) to 62 500 B, the rest of the window's CNPs
    // only count, and the timeout drops it to one MTU with ssthresh = 31 250 B.
    let mut warmup = vec![Event::Cnp; 8];
    warmup.push(Event::Timeout);
    // Expected: slow start to 31 250 B in 3 RTTs, then one MTU per RTT to the 125 000 B
    // BDP: ≈ 23 more RTTs, about 0.3 ms at 10 µs. 2 ms simulated, the last 0.5 ms measured.
    let r = benign_flow(
        &mut law,
        MTU,
        LINE,
        Duration::from_micros(10),
        &warmup,
        Duration::from_millis(2),
        &bounds(MTU),
    )
    .unwrap();
    assert!(r.tail_rate_bps >= 0.9 * LINE as f64, "{r:?}");
    assert!(r.knobs.window.unwrap() >= BDP, "{r:?}");
}

#[test]
fn without_marks_a_flow_starts_at_line_rate() {
    let mut law = Dctcp::new(DctcpParams::default());
    let r = benign_flow(
        &mut law,
        MTU,
        LINE,
        Duration::from_micros(10),
        &[],
        Duration::from_millis(1),
        &bounds(MTU),
    )
    .unwrap();
    assert!(r.tail_rate_bps >= 0.99 * LINE as f64, "{r:?}");
}

#[test]
fn parameters_parse_and_refuse_nonsense() {
    let mut p = DctcpParams::default();
    for (name, value) in [
        ("g", "0.125"),
        ("base_rtt_us", "25"),
        ("max_window_bdp", "8"),
        ("cnp_interval_us", "50"),
    ] {
        p.set(name, value).unwrap();
    }
    assert_eq!(
        p,
        DctcpParams {
            g: 0.125,
            base_rtt_us: 25.0,
            max_window_bdp: 8.0,
            cnp_interval_us: 50.0,
        }
    );
    assert_refused(
        &mut p,
        &[
            ("g", "2"),
            ("g", "NaN"),
            ("base_rtt_us", "0"),
            ("base_rtt_us", "-3"),
            ("max_window_bdp", "0.5"),
            ("cnp_interval_us", "-1"),
            ("cnp_interval_us", ""),
        ],
        "alpha",
    );
    assert_eq!(Dctcp::new(p).name(), "dctcp");
}
