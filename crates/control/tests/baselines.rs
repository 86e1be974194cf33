//! The two baselines through the shared checks: line rate really is line rate, and a
//! static limit holds a flow to its rate.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::line_rate::{LineRate, LineRateParams};
use sluice_control::static_rate::{StaticRate, StaticRateParams};

const LINE: u64 = 10_000_000_000;

fn bounds() -> Bounds {
    Bounds {
        min_rate_bps: 1,
        max_rate_bps: LINE,
        min_window: 1,
        max_window: u64::MAX,
    }
}

#[test]
fn line_rate_fills_the_line() {
    let mut law = LineRate::new(LineRateParams);
    let r = benign_flow(
        &mut law,
        4096,
        LINE,
        Duration::from_micros(10),
        &[],
        Duration::from_millis(2),
        &bounds(),
    )
    .unwrap();
    assert!(r.tail_rate_bps > 0.99 * LINE as f64, "{r:?}");
}

#[test]
fn a_static_rate_holds_the_flow_to_it() {
    let mut law = StaticRate::new(StaticRateParams { rate_gbps: 2.0 });
    let r = benign_flow(
        &mut law,
        4096,
        LINE,
        Duration::from_micros(10),
        &[],
        Duration::from_millis(2),
        &bounds(),
    )
    .unwrap();
    assert!((r.tail_rate_bps / 2e9 - 1.0).abs() < 0.01, "{r:?}");
}

proptest! {
    #[test]
    fn static_rate_stays_put_under_any_events(events in prop::collection::vec(arb_event(), 0..200)) {
        let mut law = StaticRate::new(StaticRateParams { rate_gbps: 2.0 });
        let b = Bounds { min_rate_bps: 2_000_000_000, max_rate_bps: 2_000_000_000, ..bounds() };
        run_random(&mut law, 1024, LINE, &events, &b).map_err(TestCaseError::fail)?;
    }
}
