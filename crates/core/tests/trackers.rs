//! Property tests of the receive trackers, driven directly (no engine) the way a
//! selective-repeat responder drives them: arrivals at 24-bit PSNs (in order, ahead of a
//! gap, duplicated, across the PSN wrap), the expected PSN jumping as retransmissions fill
//! gaps, queue pairs closing and opening.
//!
//! - Every tracker (the per-queue-pair bitmap and offset list, LEFT with random sizes, its
//!   ablations MELO+ and LEFT-) answers as a set of received PSNs within the window does,
//!   except that LEFT may refuse a new PSN when its shared pool has no block to give (never
//!   when the pool holds every connection's whole window).
//! - LEFT's pool never leaks: after every step each block is free or in exactly one chain
//!   (free + used = total), and every block is free once the connections close.
//! - LEFT's work: every new offset is recorded once, a cache hit or a pool walk, unless
//!   the expected PSN passes it while it waits in a gather FIFO.
//! - Memory accounting: each LEFT tracker reports its connection's state and the factory
//!   the shared state, as the sizes give them, whatever is recorded; through an engine, the
//!   per-connection sum counts each selective-repeat queue pair once.
//!
//! Each case is generated from its number alone: `SLUICE_SEEDS=N` runs cases 1 to N
//! (default 64), `SLUICE_SEED=S` replays case S alone; a failure is shrunk to the smallest
//! sequence that still fails.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;

use sluice_core::Instant;
use sluice_core::policy::{
    Bitmaps, Left, LeftConfig, OffsetLists, ReceiveTracker, Recorded, TrackerFactory,
};

const PSN_MASK: u32 = 0xFF_FFFF;

/// Over the cases run, how often LEFT refused for want of blocks, gathered, and swapped: a
/// generator that stopped reaching these would make the test pass vacuously.
static EXHAUSTED: AtomicU64 = AtomicU64::new(0);
static GATHERED: AtomicU64 = AtomicU64::new(0);
static SWAPS: AtomicU64 = AtomicU64::new(0);

/// Which tracker a case runs.
#[derive(Debug, Clone)]
enum Kind {
    Bitmap,
    OffsetList(u32),
    Left(LeftConfig),
}

fn left_config() -> impl Strategy<Value = LeftConfig> {
    (
        (1u32..96, 1u32..=64, 2u32..300),
        (0u32..4, 0u32..4, 1u32..10, 0u64..80, 0u64..4000),
    )
        .prop_map(
            |((blocks, block_bits, cache_bits), (caches, fifos, depth, t_max, timeout))| {
                LeftConfig {
                    blocks,
                    block_bits,
                    cache_bits,
                    caches,
                    fifos,
                    depth,
                    t_max,
                    timeout,
                    ..LeftConfig::default()
                }
            },
        )
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        1 => Just(Kind::Bitmap),
        1 => (1u32..400).prop_map(Kind::OffsetList),
        1 => Just(Kind::Left(LeftConfig::default())),
        1 => Just(Kind::Left(LeftConfig::no_gather())),
        1 => Just(Kind::Left(LeftConfig::melo())),
        4 => left_config().prop_map(Kind::Left),
    ]
}

/// One step of the responder's life.
#[derive(Debug, Clone)]
enum Op {
    /// A packet of connection `conn` arrives `ahead` PSNs past its expected one (0: the
    /// expected one; negative: an old duplicate).
    Arrive { conn: usize, ahead: i32 },
    /// A packet already recorded arrives again (the `pick`th recorded, if any).
    Again { conn: usize, pick: usize },
    /// A retransmission filled gaps: the expected PSN moves on by `n`.
    Jump { conn: usize, n: u32 },
    /// The queue pair is destroyed and another takes its place (a fresh tracker).
    Reopen { conn: usize },
}

fn op(conns: usize) -> impl Strategy<Value = Op> {
    let c = 0..conns;
    prop_oneof![
        4 => (c.clone(), 0i32..12).prop_map(|(conn, ahead)| Op::Arrive { conn, ahead }),
        6 => (c.clone(), 1i32..420).prop_map(|(conn, ahead)| Op::Arrive { conn, ahead }),
        1 => (c.clone(), -40i32..0).prop_map(|(conn, ahead)| Op::Arrive { conn, ahead }),
        2 => (c.clone(), any::<usize>()).prop_map(|(conn, pick)| Op::Again { conn, pick }),
        2 => (c.clone(), prop_oneof![0u32..80, Just(u32::MAX)])
            .prop_map(|(conn, n)| Op::Jump { conn, n }),
        1 => c.prop_map(|conn| Op::Reopen { conn }),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    kind: Kind,
    /// Each connection's first expected PSN (some just before the wrap).
    starts: Vec<u32>,
    ops: Vec<Op>,
}

fn any_case() -> impl Strategy<Value = Case> {
    (kind(), 1usize..6).prop_flat_map(|(kind, conns)| {
        let start = prop_oneof![any::<u32>(), (0u32..200).prop_map(|d| PSN_MASK - d)]
            .prop_map(|p| p & PSN_MASK);
        (
            Just(kind),
            proptest::collection::vec(start, conns),
            proptest::collection::vec(op(conns), 0..300),
        )
            .prop_map(|(kind, starts, ops)| Case { kind, starts, ops })
    })
}

/// One connection: its tracker, expected PSN, and the reference model, the PSNs received
/// past the expected one and not yet passed.
struct ConnModel {
    tracker: Box<dyn ReceiveTracker>,
    epsn: u32,
    received: BTreeSet<u32>,
}

impl ConnModel {
    /// The offset of `psn` past the expected PSN; `None` if it is behind (24-bit serial
    /// arithmetic, as the responder reads PSNs).
    fn offset(&self, psn: u32) -> Option<u32> {
        let d = psn.wrapping_sub(self.epsn) & PSN_MASK;
        (d < 1 << 23).then_some(d)
    }

    /// The expected PSN moves on by `n`; the model forgets what it passed.
    fn advance(&mut self, n: u32) {
        self.tracker.advance(n);
        if n >= 1 << 23 {
            self.received.clear();
        } else {
            let old = self.epsn;
            self.epsn = old.wrapping_add(n) & PSN_MASK;
            let passed: Vec<u32> = self
                .received
                .iter()
                .copied()
                .filter(|&p| p.wrapping_sub(old) & PSN_MASK < n)
                .collect();
            for p in passed {
                self.received.remove(&p);
            }
        }
        if n >= 1 << 23 {
            // A clear: the queue pair starts over at a PSN of its own.
            self.epsn = self.epsn.wrapping_add(12345) & PSN_MASK;
        }
    }

    /// The expected PSN's packet was carried out: move on over it and every held packet
    /// right behind it, as the responder takes them.
    fn in_order(&mut self) {
        self.advance(1);
        while self.received.contains(&self.epsn) {
            self.advance(1);
        }
    }
}

/// The pool is large enough that no connection can be refused for want of blocks.
fn ample(config: &LeftConfig, conns: usize) -> bool {
    let per_conn = config.capacity() / config.block_bits.max(1) + 2;
    config.blocks as usize >= conns * per_conn as usize
}

fn check_case(case: Case) -> Result<(), TestCaseError> {
    let conns = case.starts.len();
    let mut left = None;
    let mut factory: Box<dyn TrackerFactory> = match &case.kind {
        Kind::Bitmap => Box::new(Bitmaps),
        Kind::OffsetList(cap) => Box::new(OffsetLists {
            capacity: *cap,
            gap_is_loss: true,
        }),
        Kind::Left(config) => {
            let l = Left::new(*config);
            left = Some(l.clone());
            Box::new(l)
        }
    };
    let ample = match &left {
        Some(l) => ample(&l.config(), conns),
        None => true,
    };
    let mut models: Vec<ConnModel> = case
        .starts
        .iter()
        .map(|&epsn| ConnModel {
            tracker: factory.create(),
            epsn,
            received: BTreeSet::new(),
        })
        .collect();
    let capacity = models[0].tracker.capacity();
    let per_connection = models[0].tracker.memory();
    let shared = factory.shared_memory();
    if let Some(l) = &left {
        let c = l.config();
        prop_assert_eq!(per_connection as u64, c.connection_bits().div_ceil(8));
        prop_assert_eq!(shared as u64, c.shared_bits().div_ceil(8));
    }

    let mut new = 0u64;
    for (step, op) in case.ops.iter().enumerate() {
        let now = Instant::from_nanos(step as u64 * 300);
        if step % 7 == 0 {
            factory.poll(now);
        }
        match *op {
            Op::Arrive { conn, ahead } => {
                let m = &mut models[conn];
                let psn = (m.epsn as i64 + ahead as i64).rem_euclid(1 << 24) as u32;
                match m.offset(psn) {
                    None => {} // old: the responder answers it as a duplicate
                    Some(0) => m.in_order(),
                    Some(offset) => {
                        let expected = if offset > capacity {
                            Recorded::OutOfRange
                        } else if m.received.contains(&psn) {
                            Recorded::Already
                        } else {
                            Recorded::New
                        };
                        // Told the time (300 ns a step), so that gather FIFOs time out.
                        let got = m.tracker.record_at(offset, now);
                        if got == Recorded::Exhausted {
                            prop_assert!(!ample, "step {}: refused with an ample pool", step);
                            prop_assert_eq!(expected, Recorded::New, "step {}", step);
                        } else {
                            prop_assert_eq!(got, expected, "step {}: offset {}", step, offset);
                        }
                        if got == Recorded::New {
                            m.received.insert(psn);
                            new += 1;
                        }
                    }
                }
            }
            Op::Again { conn, pick } => {
                let m = &mut models[conn];
                if !m.received.is_empty() {
                    let psn = *m.received.iter().nth(pick % m.received.len()).unwrap();
                    let offset = m.offset(psn).unwrap();
                    prop_assert_eq!(m.tracker.record(offset), Recorded::Already);
                }
            }
            Op::Jump { conn, n } => models[conn].advance(n),
            Op::Reopen { conn } => {
                let m = &mut models[conn];
                m.tracker = factory.create(); // the old one is dropped here
                m.received.clear();
            }
        }
        for (c, m) in models.iter().enumerate() {
            prop_assert_eq!(
                m.tracker.is_empty(),
                m.received.is_empty(),
                "step {} conn {}",
                step,
                c
            );
            for offset in 0..=capacity + 1 {
                let psn = m.epsn.wrapping_add(offset) & PSN_MASK;
                prop_assert_eq!(
                    m.tracker.contains(offset),
                    m.received.contains(&psn),
                    "step {}: conn {} offset {}",
                    step,
                    c,
                    offset
                );
            }
            // Fixed state (an offset list's grows with disorder).
            if !matches!(case.kind, Kind::OffsetList(_)) {
                prop_assert_eq!(m.tracker.memory(), per_connection);
            }
        }
        prop_assert_eq!(factory.shared_memory(), shared);
        if let Some(l) = &left {
            let pool = l.pool();
            prop_assert_eq!(pool.free + pool.used, pool.total);
            if let Err(why) = l.check() {
                return Err(TestCaseError::fail(format!("step {step}: {why}")));
            }
            if models.iter().all(|m| m.received.is_empty()) {
                prop_assert_eq!(
                    pool.used,
                    0,
                    "step {}: blocks held with nothing recorded",
                    step
                );
            }
        }
    }
    drop(models);
    if let Some(l) = &left {
        let w = l.work();
        // The work model: every new offset was one bitmap update, or passed while gathered.
        prop_assert_eq!(w.cache_hits + w.pool_walks + w.passed, new, "{:?}", w);
        prop_assert!(w.swaps <= w.cache_hits, "{:?}", w);
        EXHAUSTED.fetch_add(w.exhausted, Ordering::Relaxed);
        GATHERED.fetch_add(w.gathered, Ordering::Relaxed);
        SWAPS.fetch_add(w.swaps, Ordering::Relaxed);
        prop_assert_eq!(
            l.pool().used,
            0,
            "blocks held after every connection closed"
        );
        prop_assert_eq!(l.connections(), 0);
        if let Err(why) = l.check() {
            return Err(TestCaseError::fail(why));
        }
    }
    Ok(())
}

#[test]
fn every_tracker_agrees_with_a_set_of_received_psns_and_the_pool_never_leaks() {
    let cases = common::check_cases(64, &any_case(), 500, check_case);
    if cases.len() >= 32 {
        for (what, n) in [
            ("refusal for want of blocks", &EXHAUSTED),
            ("gathered packet", &GATHERED),
            ("cache swap", &SWAPS),
        ] {
            assert!(
                n.load(Ordering::Relaxed) > 0,
                "no {what} in {} cases",
                cases.len()
            );
        }
    }
}

/// Through an engine: a selective-repeat WRITE sprayed over a reordering, lossy link lands
/// whole with LEFT (its ablations, a pool too small) at the receiver; the engine reports
/// each queue pair's state once and the pool beside it, the pool is empty once the
/// transfers are done, and destroying the queue pairs closes their connections.
#[test]
fn left_carries_sprayed_selective_repeat_writes_through_an_engine() {
    use sluice_core::policy::{Policies, Spray};
    use sluice_core::{Engine, EngineConfig, Recovery};
    use sluice_testkit::{Impairments, Pair, PairOptions, World};
    use std::time::Duration;

    for config in [
        LeftConfig::default(),
        LeftConfig::no_gather(),
        LeftConfig::melo(),
        // A pool too small for the disorder: refused packets are NAK'd and sent again.
        LeftConfig {
            blocks: 2,
            block_bits: 4,
            ..LeftConfig::default()
        },
    ] {
        let link = Impairments {
            loss: 0.02,
            reorder: 0.3,
            jitter: Duration::from_micros(20),
            ..Impairments::CLEAN
        };
        let mut world = World::new(2, 7, link);
        // A pool per NIC.
        let lefts = [Left::new(config), Left::new(config)];
        for (h, left) in lefts.iter().enumerate() {
            let engine_config = EngineConfig {
                seed: 7 + h as u64,
                ..EngineConfig::default()
            };
            world.engines[h] = Engine::with_policies(
                engine_config,
                Policies {
                    path: Box::new(Spray { paths: 4 }),
                    tracker: Box::new(left.clone()),
                    ..Policies::default()
                },
            );
        }
        let options = PairOptions {
            recovery: Recovery::SelectiveRepeat,
            ..PairOptions::default()
        };
        let pairs = [0, 1].map(|_| Pair::connect(&mut world, &options));
        let len = 128 * 1024;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        for p in &pairs {
            world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..len].copy_from_slice(&data);
            p.write_and_wait(&mut world, len as u32);
            assert_eq!(
                &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[..len],
                &data[..],
                "{config:?}"
            );
        }
        assert!(world.engines[1].counters().packets_held > 0, "{config:?}");
        let per = config.connection_bits().div_ceil(8) as usize;
        for (h, left) in lefts.iter().enumerate() {
            let memory = world.engines[h].tracker_memory();
            assert_eq!(memory.per_connection, 2 * per, "{config:?}");
            assert_eq!(memory.shared, left.shared_memory(), "{config:?}");
            assert_eq!(left.connections(), 2, "{config:?}");
            assert_eq!(left.pool().used, 0, "{config:?}");
            left.check().unwrap();
        }
        assert!(lefts[1].work().records > 0, "{config:?}");
        assert_eq!(
            lefts[1].work().exhausted > 0,
            config.blocks == 2,
            "{config:?}: {:?}",
            lefts[1].work()
        );
        // Destroyed queue pairs give their trackers back.
        for p in &pairs {
            for h in 0..2 {
                world.engines[h].destroy_qp(p.qp[h]).unwrap();
            }
        }
        for left in &lefts {
            assert_eq!(left.connections(), 0, "{config:?}");
            left.check().unwrap();
        }
    }
}

/// Through an engine, LEFT's gather FIFOs wait by the arrival time: with no cache and every
/// pool walk too slow (so each packet past the gap is gathered), the packets held behind a
/// lost first packet are written to the pool when their FIFO's timeout passes
/// (`handle_timeout` polls the trackers once their `next_timeout` is due), before the
/// retransmission (on the requester's timer: LEFT NAKs no gap) fills the gap, not only when
/// the expected PSN passes them.
#[test]
fn left_empties_a_gather_fifo_on_its_timeout_through_an_engine() {
    use sluice_core::policy::Policies;
    use sluice_core::{Engine, EngineConfig, Recovery};
    use sluice_testkit::{Impairments, Pair, PairOptions, World};
    use std::time::Duration;

    let config = LeftConfig {
        caches: 0,
        t_max: 0,
        timeout: 1_000,
        ..LeftConfig::default()
    };
    let left = Left::new(config);
    let mut world = World::new(2, 5, Impairments::CLEAN);
    world.engines[1] = Engine::with_policies(
        EngineConfig {
            seed: 5,
            ..EngineConfig::default()
        },
        Policies {
            tracker: Box::new(left.clone()),
            ..Policies::default()
        },
    );
    let options = PairOptions {
        recovery: Recovery::SelectiveRepeat,
        ..PairOptions::default()
    };
    let p = Pair::connect(&mut world, &options);
    // A four-packet WRITE whose first packet is lost: three held past the gap.
    world.lost_sends[0].push(0..1);
    p.post_write(&mut world, 1, 0, 4 * 1024);
    // Until the three are gathered: a FIFO (of depth 8) waits, with a deadline.
    world.run_until(Duration::from_millis(1), |w| {
        w.engines[1].tracker_work().gathered == 3
    });
    let deadline = world.engines[1].next_timeout().expect("the FIFO's timeout");
    assert!(deadline <= world.now + Duration::from_micros(1));
    assert_eq!(left.work().flushes, 0);
    let cq = p.send_cq[0];
    // LEFT takes no gap for loss: no NAK, the requester's retransmit timer brings the
    // lost packet back.
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
    assert_eq!(world.engines[1].counters().naks_sent_sequence, 0);
    assert_eq!(world.engines[0].counters().retransmit_timeouts, 1);
    let work = world.engines[1].tracker_work();
    assert_eq!(work, left.work());
    assert_eq!(
        (work.gathered, work.flushes, work.passed),
        (3, 1, 0),
        "{work:?}"
    );
    assert_eq!(world.engines[1].counters().packets_held, 3);
    left.check().unwrap();
}
