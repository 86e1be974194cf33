//! Swift through the shared checks: its window stays within [one MTU, max_cwnd x MTU] and
//! its pacing rate within [1 bit/s, line rate] under any events, and after retransmit
//! timeouts have dropped it to its 0.001-packet floor, a flow on an uncongested 10 us path
//! (below the default ~27 us target) climbs back to line rate.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::Params;
use sluice_control::swift::{Swift, SwiftParams};
use sluice_core::Instant;
use sluice_core::control::{Actions, Event, Law};

const LINE: u64 = 100_000_000_000;
const MTU: u32 = 4096;

/// Windows: at least one MTU (the engine's unit), at most max_cwnd (default 1000) packets.
/// Rates: a cwnd of 0.001 over a long RTT paces at a few bits/s, so the floor is
/// `set_rate`'s 1 bit/s; never above the line.
fn bounds() -> Bounds {
    Bounds {
        min_rate_bps: 1,
        max_rate_bps: LINE,
        min_window: u64::from(MTU),
        max_window: 1000 * u64::from(MTU),
    }
}

/// retx_reset (5) consecutive timeouts: the window drops to min_cwnd.
fn congestion() -> Vec<Event> {
    vec![Event::Timeout; 5]
}

#[test]
fn the_warmup_reaches_the_floor() {
    let mut law = Swift::new(SwiftParams::default());
    let mut ctx = Default::default();
    let mut last = Actions::default();
    let start = Event::Start {
        mtu: MTU,
        line_rate_bps: LINE,
    };
    law.on_event(Instant::ZERO, &mut ctx, &start, &mut last);
    for e in congestion() {
        last = Actions::default();
        law.on_event(Instant::ZERO, &mut ctx, &e, &mut last);
    }
    assert_eq!(last.window(), Some(Some(u64::from(MTU))));
    // 0.001 x 4096 x 8 bits per base_rtt (20 us, no sample yet) = 1.6384 Mbit/s.
    assert_eq!(last.rate(), Some(Some(1_638_400)));
}

#[test]
fn recovers_to_line_rate_on_a_benign_path() {
    // At the floor (0.001 packets, paced at 1.6384 Mbit/s) the first packet is followed by
    // a pacing gap of 4201 x 8 bits / 1.6384 Mbit/s = 20.5 ms: this harness keeps a gap
    // computed at send time even after the law unpaces (the engine's pacer does not: it
    // sends at once when unpaced). Its ACK lifts the window to 1.001 packets (ai per
    // packet below one), then +1 packet per RTT: 90% of 100 Gbit/s over 10 us is 27 packets
    // of 4201 wire bytes, ~27 RTTs = 0.27 ms after the gap. So by ~21 ms the flow is at
    // line rate; the last quarter of 32 ms (24..32 ms) must run at >= 90% of the line.
    let mut law = Swift::new(SwiftParams::default());
    let r = benign_flow(
        &mut law,
        MTU,
        LINE,
        Duration::from_micros(10),
        &congestion(),
        Duration::from_millis(32),
        &bounds(),
    )
    .unwrap();
    assert!(r.tail_rate_bps >= 0.9 * LINE as f64, "{r:?}");
    assert_eq!(r.knobs.rate_bps, None, "unpaced above one packet: {r:?}");
}

#[test]
fn parameters_parse_and_refuse_nonsense() {
    let mut p = SwiftParams::default();
    for (name, value) in [
        ("ai", "2"),
        ("beta", "0.5"),
        ("max_mdf", "0.25"),
        ("base_target_us", "5"),
        ("hops", "3"),
        ("per_hop_us", "1.5"),
        ("fs_range_us", "4"),
        ("fs_min_cwnd", "0.5"),
        ("fs_max_cwnd", "50"),
        ("min_cwnd", "0.01"),
        ("max_cwnd", "200"),
        ("init_cwnd", "10"),
        ("base_rtt_us", "8"),
        ("retx_reset", "3"),
    ] {
        p.set(name, value).unwrap();
    }
    assert_eq!(
        p,
        SwiftParams {
            ai: 2.0,
            beta: 0.5,
            max_mdf: 0.25,
            base_target_us: 5.0,
            hops: 3,
            per_hop_us: 1.5,
            fs_range_us: 4.0,
            fs_min_cwnd: 0.5,
            fs_max_cwnd: 50.0,
            min_cwnd: 0.01,
            max_cwnd: 200.0,
            init_cwnd: 10.0,
            base_rtt_us: 8.0,
            retx_reset: 3,
        }
    );
    assert_refused(
        &mut p,
        &[
            ("ai", "-1"),
            ("beta", "1.1"),
            ("max_mdf", "NaN"),
            ("base_target_us", "inf"),
            ("hops", "1.5"),
            ("fs_min_cwnd", "0"),
            ("min_cwnd", "0"),
            ("base_rtt_us", "0"),
            ("retx_reset", "x"),
        ],
        "target",
    );
    assert_eq!(Swift::new(p).name(), "swift");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn window_and_rate_stay_within_bounds_under_any_events(
        events in prop::collection::vec(arb_event(), 0..300)
    ) {
        let mut law = Swift::new(SwiftParams::default());
        run_random(&mut law, MTU, LINE, &events, &bounds()).map_err(TestCaseError::fail)?;
    }
}
