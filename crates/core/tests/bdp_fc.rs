//! BDP flow control (IRN's) under deep reordering, as a seeded property test: a
//! selective-repeat WRITE sprayed packet by packet over 2 to 4 paths, one of them slower by
//! tens to hundreds of packet times, with an engine window (`max_outstanding_packets`) far
//! larger than the receive tracker holds past a gap.
//!
//! Without the flow control, packets landing past the tracker's capacity are refused, and
//! selective repeat sends back only the one PSN each NAK names: the refused packets then
//! come one a round trip (the crawl three web-search flows of `sluice repro left-fig45`
//! showed). With it, the requester never has more unacknowledged than the tracker holds
//! (plus the expected PSN), nothing is refused for want of room, and the WRITE completes
//! at the pace its window and the slow path allow. Each case checks:
//!
//! - the WRITE completes, successfully, byte-exact;
//! - no packet was refused for want of room (out-of-order arrivals all held, or
//!   duplicates);
//! - it took at most three times what a window a round trip of the slow path takes, plus
//!   the serialisation, plus two round trips.
//!
//! A receiver whose tracker is smaller than the sender takes it to be (the flow control
//! assumes the peer's tracker is its own) still refuses packets past it. Then, once what it
//! holds runs out, it asks for everything from the expected PSN again (an RNR NAK), rather
//! than each refused packet coming back a round trip apart: the second test's cases, a
//! bitmap sender (window 256) against an offset list of 16 to 128, complete within three
//! times a slow round trip and an RNR wait for each of the receiver's windows.
//!
//! `SLUICE_SEEDS=N` runs cases 1 to N (default 24 each); `SLUICE_SEED=S` replays case S
//! alone.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluice_core::policy::{
    Bitmaps, Left, LeftConfig, OffsetLists, Policies, Spray, TrackerFactory,
};
use sluice_core::{Engine, EngineConfig, QpNum, Recovery, WcStatus};
use sluice_testkit::{Impairments, Pair, PairOptions, World};

/// The link: 25 Gbit/s, 5 us each way (the testkit's), so a 1 KB packet takes 0.33 us.
const GBPS: u64 = 25;
const MTU: u32 = 1024;

#[derive(Debug, Clone, Copy)]
enum Tracker {
    /// IRN's 256-PSN bitmap (capacity 255), NAKing every gap.
    Bitmap,
    /// An offset list of this capacity, NAKing gaps (`true`) or waiting for them.
    OffsetList(u32, bool),
    /// LEFT with its defaults (capacity 255), which waits for gaps.
    Left,
}

impl Tracker {
    fn build(self) -> Box<dyn TrackerFactory> {
        match self {
            Tracker::Bitmap => Box::new(Bitmaps),
            Tracker::OffsetList(capacity, gap_is_loss) => Box::new(OffsetLists {
                capacity,
                gap_is_loss,
            }),
            Tracker::Left => Box::new(Left::new(LeftConfig::default())),
        }
    }

    /// PSNs it holds past a gap.
    fn capacity(self) -> u32 {
        match self {
            Tracker::Bitmap | Tracker::Left => 255,
            Tracker::OffsetList(capacity, _) => capacity,
        }
    }
}

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    tracker: Tracker,
    /// The receiver's tracker, if not `tracker` (smaller: the sender's flow control
    /// assumes its own).
    receiver: Option<Tracker>,
    /// Source ports sprayed over; the first is slow.
    paths: u16,
    /// The slow path's extra delay each way, us.
    slow_us: u64,
    /// The engines' configured window, packets.
    window: u32,
    /// The WRITE's length, packets.
    packets: u32,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        prop_oneof![
            Just(Tracker::Bitmap),
            (16..=255u32, any::<bool>()).prop_map(|(c, l)| Tracker::OffsetList(c, l)),
            Just(Tracker::Left),
        ],
        2..=4u16,
        20..=120u64,
        512..=4096u32,
        256..=1024u32,
    )
        .prop_map(|(seed, tracker, paths, slow_us, window, packets)| Case {
            seed,
            tracker,
            receiver: None,
            paths,
            slow_us,
            window,
            packets,
        })
}

/// A bitmap sender against a smaller offset list.
fn smaller_receiver() -> impl Strategy<Value = Case> {
    (case(), 16..=128u32, any::<bool>()).prop_map(|(c, capacity, gap_is_loss)| Case {
        tracker: Tracker::Bitmap,
        receiver: Some(Tracker::OffsetList(capacity, gap_is_loss)),
        ..c
    })
}

fn check(c: Case) -> Result<(), TestCaseError> {
    let link = Impairments {
        gbps: GBPS,
        ..Impairments::CLEAN
    };
    let mut world = World::new(2, c.seed, link);
    for h in 0..2 {
        let config = EngineConfig {
            max_outstanding_packets: c.window,
            ..World::engine_config(c.seed, h)
        };
        world.engines[h] = Engine::with_policies(
            config,
            Policies {
                path: Box::new(Spray { paths: c.paths }),
                tracker: match (h, c.receiver) {
                    (1, Some(receiver)) => receiver.build(),
                    _ => c.tracker.build(),
                },
                ..Policies::default()
            },
        );
    }
    let options = PairOptions {
        recovery: Recovery::SelectiveRepeat,
        ..PairOptions::default()
    };
    let pair = Pair::connect(&mut world, &options);
    // The requester's first sprayed port (step 0) is the slow path, both ways.
    world.port_paths = vec![(
        spray_port(pair.qp[0], 0),
        Some(Duration::from_micros(c.slow_us)),
    )];
    let len = c.packets * MTU;
    let data: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
    world.engines[0].mr_bytes_mut(pair.mr[0].lkey).unwrap()[..len as usize].copy_from_slice(&data);
    pair.post_write(&mut world, 1, 0, len);
    let start = world.now;
    let cq = pair.send_cq[0];
    let done = world.run_until(Duration::from_millis(200), |w| w.engines[0].cq_len(cq) == 1);
    let took = world.now - start;
    let (tx, rx) = (*world.engines[0].counters(), *world.engines[1].counters());
    let stats = format!(
        "took {took:?}; requester {} packets, {} resent, {} NAKs ({} RNR), {} timeouts; \
         responder {} out of order, {} held, {} duplicates",
        tx.tx_packets,
        tx.retransmitted_packets,
        tx.naks_received_sequence,
        tx.naks_received_rnr,
        tx.retransmit_timeouts,
        rx.out_of_order_arrivals,
        rx.packets_held,
        rx.duplicate_requests
    );
    prop_assert!(done, "the WRITE did not complete in 200 ms: {stats}");
    let status = Pair::completions(&mut world, 0, cq)[0].status;
    prop_assert_eq!(status, WcStatus::Success, "{}", stats);
    prop_assert!(
        world.engines[1].mr_bytes(pair.mr[1].lkey).unwrap()[..len as usize] == data[..],
        "the WRITE's bytes differ at the responder"
    );
    // Every packet that arrived past a gap was held: none refused for want of room (when
    // the receiver's tracker is the sender's).
    prop_assert!(
        c.receiver.is_some() || rx.packets_held + rx.duplicate_requests >= rx.out_of_order_arrivals,
        "packets refused past the tracker: {stats}"
    );
    // The window the flow control allows (or the receiver holds), a slow round trip each
    // (and the RNR wait that asks again for what it refused), at worst.
    let receiver = c.receiver.unwrap_or(c.tracker);
    let window = c
        .window
        .min(c.tracker.capacity() + 1)
        .min(receiver.capacity() + 1);
    let rnr_wait = if c.receiver.is_some() { 10 } else { 0 };
    let slow_rtt = Duration::from_micros(2 * (5 + c.slow_us) + 2 + rnr_wait);
    let serialise = Duration::from_nanos(u64::from(len) * 8 / GBPS);
    let rounds = c.packets.div_ceil(window) + 2;
    let bound = 3 * (slow_rtt * rounds) + serialise;
    prop_assert!(
        took <= bound,
        "took {took:?}, more than {bound:?} ({rounds} slow round trips of {slow_rtt:?}): {stats}"
    );
    Ok(())
}

/// The source port [`Spray`] gives the queue pair's packets `step` paths along (its
/// `port_at`: 0xC000 plus the QPN's hash, stepped).
fn spray_port(qp: QpNum, step: u16) -> u16 {
    let base = sluice_core::policy::QpnHash::port(qp) & 0x3FFF;
    0xC000 | (base.wrapping_add(step) & 0x3FFF)
}

#[test]
fn a_window_past_the_receive_tracker_never_crawls_under_deep_reordering() {
    common::check_cases(24, &case(), 16, check);
}

#[test]
fn a_receiver_smaller_than_the_senders_window_asks_for_all_it_refused_at_once() {
    common::check_cases(24, &smaller_receiver(), 16, check);
}
