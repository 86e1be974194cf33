//! A receive tracker's cost per packet, in order and out of order, for every tracker beside
//! today's per-queue-pair bitmap in the same run, and each one's memory at 5,000 connections.
//!
//! What the responder asks of a tracker (`crates/core/src/responder.rs`): in order, each
//! packet moves the expected PSN by one (`advance(1)`); out of order, each packet past a gap
//! is recorded (`record_at`) and, when the gap fills, the expected PSN moves over all of
//! them at once (`advance(n)`). The out-of-order pattern here is a window of `WINDOW`
//! packets whose first arrives last, on `CONNS` connections in turn; the clock moves 50 ns
//! a packet (LEFT's gather FIFOs are polled when their deadline passes, as the engine does).
//!
//! `cargo bench -p sluice-core --bench tracker`.

use std::hint::black_box;
use std::time::Instant as WallClock;

use sluice_core::Instant;
use sluice_core::policy::{Bitmaps, Left, LeftConfig, OffsetLists, ReceiveTracker, TrackerFactory};

/// Packets in one out-of-order window (its first arrives last).
const WINDOW: u32 = 64;
/// Connections receiving at once.
const CONNS: usize = 5;
/// Packets per measured pass.
const PACKETS: u64 = 2_000_000;

/// Makes one tracker factory.
type Make = fn() -> Box<dyn TrackerFactory>;

/// The trackers compared, by their `--tracker` names; the first is the baseline.
const TRACKERS: [(&str, Make); 5] = [
    ("bitmap", || Box::new(Bitmaps)),
    ("offset-list", || {
        Box::new(OffsetLists {
            capacity: 255,
            gap_is_loss: true,
        })
    }),
    ("left", || Box::new(Left::new(LeftConfig::default()))),
    ("left-nogather", || {
        Box::new(Left::new(LeftConfig::no_gather()))
    }),
    ("melo", || Box::new(Left::new(LeftConfig::melo()))),
];

/// ns per packet with every packet in order.
fn in_order(factory: &mut dyn TrackerFactory) -> f64 {
    let mut conns: Vec<Box<dyn ReceiveTracker>> = (0..CONNS).map(|_| factory.create()).collect();
    let start = WallClock::now();
    for i in 0..PACKETS {
        let t = &mut conns[i as usize % CONNS];
        t.advance(1);
        black_box(t.is_empty());
    }
    start.elapsed().as_nanos() as f64 / PACKETS as f64
}

/// ns per packet when every window's first packet arrives last.
fn out_of_order(factory: &mut dyn TrackerFactory) -> f64 {
    let mut conns: Vec<Box<dyn ReceiveTracker>> = (0..CONNS).map(|_| factory.create()).collect();
    let windows = PACKETS / u64::from(WINDOW);
    let mut now = 0u64;
    let start = WallClock::now();
    for w in 0..windows {
        let t = &mut conns[w as usize % CONNS];
        for offset in 1..WINDOW {
            now += 50;
            black_box(t.record_at(offset, Instant::from_nanos(now)));
        }
        now += 50;
        let at = Instant::from_nanos(now);
        if factory.next_timeout().is_some_and(|d| d <= at) {
            factory.poll(at);
        }
        t.advance(WINDOW);
    }
    start.elapsed().as_nanos() as f64 / (windows * u64::from(WINDOW)) as f64
}

/// Bytes held for 5,000 connections: per connection and shared.
fn memory(factory: &mut dyn TrackerFactory) -> usize {
    let conns: Vec<Box<dyn ReceiveTracker>> = (0..5_000).map(|_| factory.create()).collect();
    conns.iter().map(|t| t.memory()).sum::<usize>() + factory.shared_memory()
}

fn main() {
    // The best of three passes of each, the trackers taking turns.
    let rows = TRACKERS;
    let mut best = vec![(f64::MAX, f64::MAX); rows.len()];
    for _ in 0..3 {
        for (i, (_, make)) in rows.iter().enumerate() {
            let ordered = in_order(make().as_mut());
            let reordered = out_of_order(make().as_mut());
            best[i] = (best[i].0.min(ordered), best[i].1.min(reordered));
        }
    }
    let (base_in, base_out) = best[0];
    println!(
        "receive tracker cost per packet, {CONNS} connections, windows of {WINDOW} with the first last"
    );
    println!(
        "{:<14} {:>10} {:>8} {:>14} {:>8} {:>18}",
        "tracker", "in order", "ratio", "out of order", "ratio", "bytes at 5,000"
    );
    for (i, (name, make)) in rows.iter().enumerate() {
        let (ordered, reordered) = best[i];
        println!(
            "{:<14} {:>7.1} ns {:>8.2} {:>11.1} ns {:>8.2} {:>18}",
            name,
            ordered,
            ordered / base_in,
            reordered,
            reordered / base_out,
            memory(make().as_mut())
        );
    }
}
