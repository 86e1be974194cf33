//! TIMELY through the shared checks: its rate stays within [min_rate, line rate] under any
//! events (and it never sets a window), and after RTT samples far above T_high have pushed it
//! to its floor, a flow on an uncongested 10 us path climbs back to line rate.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::Params;
use sluice_control::timely::{Timely, TimelyParams};
use sluice_core::Instant;
use sluice_core::control::{Actions, Event, Law};
use sluice_wire::Psn;

const LINE: u64 = 100_000_000_000;
/// TimelyParams' default min_rate_mbps.
const MIN_RATE: u64 = 100_000_000;

/// Rates in [min_rate, line]. TIMELY never sets a window: an empty window range makes any
/// `set_window` fail the check.
fn bounds() -> Bounds {
    Bounds {
        min_rate_bps: MIN_RATE,
        max_rate_bps: LINE,
        min_window: u64::MAX,
        max_window: 0,
    }
}

fn ack(rtt_us: u64) -> Event {
    Event::Ack {
        confirmed: Psn::new(1),
        packets: 1,
        rtt: Some(Duration::from_micros(rtt_us)),
    }
}

/// Samples of 1 ms and more (T_high is 500 us), rising: each cuts the rate by about half.
fn congestion() -> Vec<Event> {
    (0..40).map(|i| ack(1_000 + 100 * i)).collect()
}

#[test]
fn the_warmup_reaches_the_floor() {
    let mut law = Timely::new(TimelyParams::default());
    let mut ctx = Default::default();
    let mut last = Actions::default();
    let start = Event::Start {
        mtu: 4096,
        line_rate_bps: LINE,
    };
    law.on_event(Instant::ZERO, &mut ctx, &start, &mut last);
    for e in congestion() {
        last = Actions::default();
        law.on_event(Instant::ZERO, &mut ctx, &e, &mut last);
    }
    assert_eq!(last.rate(), Some(Some(MIN_RATE)));
}

#[test]
fn recovers_to_line_rate_on_a_benign_path() {
    // From 100 Mbit/s, +10 Mbit/s per ACK (RTT 10 us < T_low) with one ACK per 4 KiB
    // packet: the rate grows by e every 4201 * 8 bits / 10 Mbit/s = 3.4 ms, so it reaches
    // 90 Gbit/s after ln(900) * 3.4 ms = 23 ms. The last quarter of 40 ms (30..40 ms) must
    // run at >= 90% of the line.
    let mut law = Timely::new(TimelyParams::default());
    let r = benign_flow(
        &mut law,
        4096,
        LINE,
        Duration::from_micros(10),
        &congestion(),
        Duration::from_millis(40),
        &bounds(),
    )
    .unwrap();
    assert!(r.tail_rate_bps >= 0.9 * LINE as f64, "{r:?}");
    assert_eq!(r.knobs.rate_bps, None, "back at line rate, unpaced: {r:?}");
}

#[test]
fn parameters_parse_and_refuse_nonsense() {
    let mut p = TimelyParams::default();
    for (name, value) in [
        ("alpha", "0.5"),
        ("beta", "0.25"),
        ("delta_mbps", "40"),
        ("t_low_us", "20"),
        ("t_high_us", "200"),
        ("min_rtt_us", "8"),
        ("hai_after", "3"),
        ("hai_n", "10"),
        ("min_rate_mbps", "1000"),
    ] {
        p.set(name, value).unwrap();
    }
    assert_eq!(
        p,
        TimelyParams {
            alpha: 0.5,
            beta: 0.25,
            delta_mbps: 40.0,
            t_low_us: 20.0,
            t_high_us: 200.0,
            min_rtt_us: 8.0,
            hai_after: 3,
            hai_n: 10,
            min_rate_mbps: 1000.0,
        }
    );
    assert_refused(
        &mut p,
        &[
            ("alpha", "1.5"),
            ("alpha", "NaN"),
            ("beta", "-0.1"),
            ("delta_mbps", "ten"),
            ("t_low_us", "inf"),
            ("min_rtt_us", "0"),
            ("hai_after", "-1"),
            ("hai_n", "99999999999"),
            ("min_rate_mbps", ""),
        ],
        "gamma",
    );
    assert_eq!(Timely::new(p).name(), "timely");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn rate_stays_within_bounds_under_any_events(
        events in prop::collection::vec(arb_event(), 0..300)
    ) {
        let mut law = Timely::new(TimelyParams::default());
        run_random(&mut law, 4096, LINE, &events, &bounds()).map_err(TestCaseError::fail)?;
    }
}
