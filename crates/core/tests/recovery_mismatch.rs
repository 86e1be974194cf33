//! Why both ends must agree on selective repeat, as a seeded property test: a stream of
//! WRITEs from host 0 whose link loses a burst of one to three of its packets (first
//! transmissions, never the stream's last packets, so that every loss is followed by
//! packets that reveal it), with each end's recovery set separately.
//!
//! - Both go-back-N (what `sluice perf` now runs with a peer that advertised no
//!   selective-repeat window, perftest on Soft-RoCE among them): the responder NAKs the
//!   first missing PSN, the requester rewinds to it, and the stream completes byte-exact
//!   without a retransmit timeout.
//! - Both selective repeat (two Sluice ends that heard each other's window): the same.
//! - A selective-repeat requester facing a go-back-N responder (what `sluice perf
//!   --recovery selective-repeat` ran against perftest before): the responder drops what
//!   follows the gap and takes the one resent packet silently; the requester believes the
//!   rest held, so only its retransmit timer ends the stall. It completes byte-exact, but
//!   only after at least one timeout, and later than the go-back-N pair. (The lab
//!   measured the same against Soft-RoCE: docs/perftest.md.)
//!
//! `SLUICE_SEEDS=N` runs cases 1 to N (default 24); `SLUICE_SEED=S` replays case S alone.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluice_core::{Connection, Recovery, WcStatus};
use sluice_testkit::{Impairments, Pair, World};

/// Each WRITE's length: 16 packets of the testkit's MTU of 1,024.
const MESSAGE: u32 = 16 * 1024;

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    /// WRITEs in the stream (16 packets each).
    messages: u32,
    /// Host 0's sends (0 first) the link loses: a burst within 16 packets, early enough
    /// that it is made of first transmissions and is followed by more of the stream.
    lost: Vec<u64>,
}

fn case() -> impl Strategy<Value = Case> {
    (any::<u64>(), 8u32..=32)
        .prop_flat_map(|(seed, messages)| {
            let packets = u64::from(messages) * 16;
            (
                Just(seed),
                Just(messages),
                0..packets - 64,
                proptest::collection::btree_set(0u64..16, 1..=3),
            )
        })
        .prop_map(|(seed, messages, at, offsets)| Case {
            seed,
            messages,
            lost: offsets.into_iter().map(|o| at + o).collect(),
        })
}

/// What a run of `c` with `recovery` at [requester, responder] came to.
#[derive(Debug)]
struct Run {
    /// The requester's retransmit timer expiries.
    timeouts: u64,
    /// Simulated time until the last WRITE completed.
    took: Duration,
}

/// Host 0 and host 1 with a queue pair each, connected with each end's own recovery (the
/// testkit's `Pair` gives both ends one), and a timeout of 262 us.
fn mixed_pair(world: &mut World, recovery: [Recovery; 2]) -> Pair {
    let options = common::recovering(false);
    let mut p = Pair::connect(world, &options);
    p.qp = p.another_with(world, &options, |h, c| Connection {
        recovery: recovery[h],
        ..c
    });
    p
}

fn run(c: &Case, recovery: [Recovery; 2]) -> Result<Run, TestCaseError> {
    let mut world = World::new(2, c.seed, Impairments::CLEAN);
    world.lost_sends[0] = c.lost.iter().map(|&n| n..n + 1).collect();
    let p = mixed_pair(&mut world, recovery);
    let len = MESSAGE as usize;
    let fill: Vec<u8> = (0..len * c.messages as usize)
        .map(|i| (i as u64 ^ c.seed) as u8)
        .collect();
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..fill.len()].copy_from_slice(&fill);
    for m in 0..c.messages {
        p.post_write(&mut world, u64::from(m), u64::from(m * MESSAGE), MESSAGE);
    }
    let start = world.now;
    let cq = p.send_cq[0];
    let n = c.messages as usize;
    let mut done = Vec::new();
    let finished = world.run_until(Duration::from_secs(1), |w| {
        while let Ok(Some(x)) = w.engines[0].poll_cq(cq) {
            done.push(x);
        }
        done.len() == n
    });
    prop_assert!(finished, "{recovery:?}: {} of {n} WRITEs done", done.len());
    let took = world.now - start;
    for (i, x) in done.iter().enumerate() {
        prop_assert_eq!(x.status, WcStatus::Success, "{:?}: {:?}", recovery, x);
        prop_assert_eq!(x.wr_id, i as u64, "{:?}: in order", recovery);
    }
    let landed = &world.engines[1].mr_bytes_mut(p.mr[1].lkey).unwrap()[..fill.len()];
    prop_assert!(landed == &fill[..], "{:?}: the data differs", recovery);
    prop_assert_eq!(
        world.dropped_by_link,
        c.lost.len() as u64,
        "every loss happened"
    );
    Ok(Run {
        timeouts: world.engines[0].counters().retransmit_timeouts,
        took,
    })
}

#[test]
fn selective_repeat_pays_a_timeout_per_stall_against_a_go_back_n_responder() {
    use Recovery::{GoBackN as Gbn, SelectiveRepeat as Sr};
    common::check_cases(24, &case(), 32, |c| {
        let gbn = run(&c, [Gbn, Gbn])?;
        prop_assert_eq!(gbn.timeouts, 0, "go-back-N at both ends: {:?}", gbn);
        let sr = run(&c, [Sr, Sr])?;
        prop_assert_eq!(sr.timeouts, 0, "selective repeat at both ends: {:?}", sr);
        let mismatched = run(&c, [Sr, Gbn])?;
        prop_assert!(
            mismatched.timeouts >= 1 && mismatched.took > gbn.took,
            "a selective-repeat requester against a go-back-N responder: {mismatched:?}, \
             go-back-N at both ends: {gbn:?}"
        );
        Ok(())
    });
}
