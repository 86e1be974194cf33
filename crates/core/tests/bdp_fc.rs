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
//! A receiver that advertises its receive window at connection setup
//! (`Connection::peer_receive_window`, as two `sluice perf` ends do in the exchange) is
//! never sent past it: the third test's cases, a bitmap or LEFT sender (window 256) against
//! an offset list of 16 to 128 that advertises, over a link that also loses up to 2% of
//! packets, send no RNR NAK, and complete byte-exact although the requester's RNR retry
//! count is 0 (one RNR NAK would fail its queue pair). `one_smaller_receiver_three_ways`
//! shows the difference on one setup: without the advertisement RNR NAKs come (fine with
//! `rnr_retry` 7, the queue pair's end with 0); with it, none.
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
    /// The requester is told the receiver's window (`Connection::peer_receive_window`).
    advertise: bool,
    /// The requester's RNR retry count (7: forever).
    rnr_retry: u8,
    /// The share of packets the link loses.
    loss: f64,
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
            advertise: false,
            rnr_retry: 7,
            loss: 0.0,
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

/// A bitmap or LEFT sender against a smaller offset list that advertises its window, no
/// RNR retry, over a link that may lose packets.
fn advertised_smaller_receiver() -> impl Strategy<Value = Case> {
    (
        case(),
        prop_oneof![Just(Tracker::Bitmap), Just(Tracker::Left)],
        16..=128u32,
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.005), Just(0.02)],
    )
        .prop_map(|(c, tracker, capacity, gap_is_loss, loss)| Case {
            tracker,
            receiver: Some(Tracker::OffsetList(capacity, gap_is_loss)),
            advertise: true,
            rnr_retry: 0,
            loss,
            ..c
        })
}

/// What a run did: its completion status, how long it took, and both engines' counters.
struct Run {
    status: WcStatus,
    took: Duration,
    tx: sluice_core::Counters,
    rx: sluice_core::Counters,
    /// The requester's BDP window (`Engine::bdp_window`).
    bdp_window: Option<u32>,
    stats: String,
}

/// Runs case `c`'s WRITE; `Err` if it did not complete in 200 ms or its bytes differ.
fn run(c: &Case) -> Result<Run, TestCaseError> {
    let link = Impairments {
        gbps: GBPS,
        loss: c.loss,
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
        rnr_retry: c.rnr_retry,
        advertise_receive_window: c.advertise,
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
    let bdp_window = world.engines[0].bdp_window(pair.qp[0]).unwrap();
    let stats = format!(
        "took {took:?}; requester window {bdp_window:?}, {} packets, {} resent, {} NAKs \
         ({} RNR), {} timeouts; responder {} out of order, {} held, {} refused, {} duplicates",
        tx.tx_packets,
        tx.retransmitted_packets,
        tx.naks_received_sequence,
        tx.naks_received_rnr,
        tx.retransmit_timeouts,
        rx.out_of_order_arrivals,
        rx.packets_held,
        rx.packets_refused,
        rx.duplicate_requests
    );
    prop_assert!(done, "the WRITE did not complete in 200 ms: {stats}");
    let status = Pair::completions(&mut world, 0, cq)[0].status;
    if status == WcStatus::Success {
        prop_assert!(
            world.engines[1].mr_bytes(pair.mr[1].lkey).unwrap()[..len as usize] == data[..],
            "the WRITE's bytes differ at the responder"
        );
    }
    Ok(Run {
        status,
        took,
        tx,
        rx,
        bdp_window,
        stats,
    })
}

fn check(c: Case) -> Result<(), TestCaseError> {
    let Run {
        status,
        took,
        tx: _,
        rx,
        bdp_window,
        stats,
    } = run(&c)?;
    prop_assert_eq!(status, WcStatus::Success, "{}", stats);
    let receiver = c.receiver.unwrap_or(c.tracker);
    if c.advertise {
        // The requester keeps the largest power of two within the receiver's window, so
        // the receiver refuses nothing for want of room and never asks again.
        let want = 1 << (receiver.capacity() + 1).ilog2();
        prop_assert_eq!(bdp_window, Some(want), "{}", stats);
        prop_assert_eq!(rx.naks_sent_rnr, 0, "RNR NAKs sent: {}", stats);
        prop_assert_eq!(rx.packets_refused, 0, "packets refused: {}", stats);
    }
    // Every packet that arrived past a gap was held: none refused for want of room (when
    // the receiver's tracker is the sender's).
    prop_assert!(
        c.receiver.is_some() || rx.packets_held + rx.duplicate_requests >= rx.out_of_order_arrivals,
        "packets refused past the tracker: {stats}"
    );
    if c.loss > 0.0 {
        return Ok(()); // no bound on time: losses cost timeouts
    }
    // The window the flow control allows (or the receiver holds), a slow round trip each
    // (and the RNR wait that asks again for what it refused), at worst.
    let window = c
        .window
        .min(c.tracker.capacity() + 1)
        .min(receiver.capacity() + 1);
    let rnr_wait = if c.receiver.is_some() && !c.advertise {
        10
    } else {
        0
    };
    let slow_rtt = Duration::from_micros(2 * (5 + c.slow_us) + 2 + rnr_wait);
    let serialise = Duration::from_nanos(u64::from(c.packets * MTU) * 8 / GBPS);
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

#[test]
fn a_receiver_that_advertises_its_window_is_never_sent_past_it() {
    common::check_cases(24, &advertised_smaller_receiver(), 16, check);
}

/// One setup three ways: a bitmap sender (window 256) sprays a 1,024-packet WRITE over 4
/// paths, one 100 us slower, at an offset list of 16. Without the advertisement the
/// receiver refuses what lands past its 16 and asks for it again with RNR NAKs: with
/// `rnr_retry` 7 the WRITE completes; with 0 the first RNR NAK fails the queue pair (the
/// caveat the advertisement removes). With it, the requester keeps 16 unacknowledged and
/// no RNR NAK is sent, so `rnr_retry` 0 completes.
#[test]
fn one_smaller_receiver_three_ways() {
    let base = Case {
        seed: 7,
        tracker: Tracker::Bitmap,
        receiver: Some(Tracker::OffsetList(16, true)),
        paths: 4,
        slow_us: 100,
        window: 4096,
        packets: 1024,
        advertise: false,
        rnr_retry: 7,
        loss: 0.0,
    };
    let r = run(&base).unwrap();
    assert_eq!(r.status, WcStatus::Success, "{}", r.stats);
    assert_eq!(r.bdp_window, Some(256), "{}", r.stats);
    assert!(r.rx.naks_sent_rnr > 0, "no RNR NAK: {}", r.stats);
    assert!(r.rx.packets_refused > 0, "{}", r.stats);
    assert!(r.tx.naks_received_rnr > 0, "{}", r.stats);

    let r = run(&Case {
        rnr_retry: 0,
        ..base.clone()
    })
    .unwrap();
    assert_eq!(r.status, WcStatus::RnrRetryExceeded, "{}", r.stats);

    let r = run(&Case {
        rnr_retry: 0,
        advertise: true,
        ..base
    })
    .unwrap();
    assert_eq!(r.status, WcStatus::Success, "{}", r.stats);
    assert_eq!(r.bdp_window, Some(16), "{}", r.stats);
    assert_eq!(r.rx.naks_sent_rnr, 0, "{}", r.stats);
    assert_eq!(r.rx.packets_refused, 0, "{}", r.stats);
}

/// The advertised window is the peer's word: 0 (nothing could be sent) and past 2^23
/// packets (half the PSN space, the largest window) are refused, naming the field, and so
/// is one given once the queue pair has left INIT; a window within bounds caps the
/// requester at its largest power of two (and at its own tracker's, 256).
#[test]
fn a_peer_receive_window_out_of_bounds_is_refused_naming_the_field() {
    for (window, cap) in [(1, 1), (2, 2), (17, 16), (100, 64), (256, 256), (5000, 256)] {
        let mut world = World::new(2, 1, Impairments::CLEAN);
        let options = PairOptions {
            recovery: Recovery::SelectiveRepeat,
            ..PairOptions::default()
        };
        let pair = Pair::connect(&mut world, &options);
        assert_eq!(world.engines[0].bdp_window(pair.qp[0]), Ok(Some(256)));
        // Another pair on the same engines, connected with the window.
        let mut c = sluice_core::Connection::new(
            sluice_testkit::host_addr(1),
            pair.qp[1].0,
            sluice_core::Mtu::M1024,
            sluice_wire::Psn::new(0),
            sluice_wire::Psn::new(0),
        );
        c.recovery = Recovery::SelectiveRepeat;
        c.peer_receive_window = Some(window);
        let qp = new_qp(&mut world.engines[0], &pair);
        world.engines[0].connect(qp, &c).unwrap();
        assert_eq!(world.engines[0].bdp_window(qp), Ok(Some(cap)), "{window}");
        // Too late once connected.
        let e = world.engines[0]
            .set_peer_receive_window(qp, Some(window))
            .unwrap_err();
        assert!(e.to_string().contains("peer_receive_window"), "{e}");
        // Go-back-N keeps no cap, whatever the peer advertised.
        c.recovery = Recovery::GoBackN;
        let qp = new_qp(&mut world.engines[0], &pair);
        world.engines[0].connect(qp, &c).unwrap();
        assert_eq!(world.engines[0].bdp_window(qp), Ok(None));
    }
    for bad in [0, (1 << 23) + 1, u32::MAX] {
        let mut world = World::new(2, 1, Impairments::CLEAN);
        let pair = Pair::connect(&mut world, &PairOptions::default());
        let mut c = sluice_core::Connection::new(
            sluice_testkit::host_addr(1),
            pair.qp[1].0,
            sluice_core::Mtu::M1024,
            sluice_wire::Psn::new(0),
            sluice_wire::Psn::new(0),
        );
        c.peer_receive_window = Some(bad);
        let qp = new_qp(&mut world.engines[0], &pair);
        let e = world.engines[0].connect(qp, &c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: peer_receive_window must be 1..=2^23 packets",
            "{bad}"
        );
    }
}

/// A new queue pair on host 0 of `pair`'s PD and CQs.
fn new_qp(engine: &mut Engine, pair: &Pair) -> QpNum {
    engine
        .create_qp(sluice_core::QpConfig {
            pd: pair.pd[0],
            send_cq: pair.send_cq[0],
            recv_cq: pair.recv_cq[0],
            caps: sluice_core::QpCaps::default(),
        })
        .unwrap()
}
