//! What the seeded property tests share: each case is generated from its number alone, so
//! that `SLUICE_SEED=N` replays case N, and a failing case is shrunk to the smallest one.
// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::fmt::Debug;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

/// The cases to run: 1 to `SLUICE_SEEDS` (default `default`), or only `SLUICE_SEED`.
pub(crate) fn cases(default: u64) -> Vec<u64> {
    let count = std::env::var("SLUICE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    sluice_testkit::seeds(count)
}

/// Runs `check` on the value `strategy` draws for case `case`; if it fails, shrinks it (at
/// most `max_shrink_iters` steps) and returns the smallest failing value with the reason.
pub(crate) fn run_case<S>(
    case: u64,
    strategy: &S,
    max_shrink_iters: u32,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Result<(), String>
where
    S: Strategy,
    S::Value: Debug,
{
    let config = Config {
        cases: 1,
        failure_persistence: None,
        max_shrink_iters,
        ..Config::default()
    };
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&case.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
    let mut runner = TestRunner::new_with_rng(config, rng);
    match runner.run(strategy, check) {
        Ok(()) => Ok(()),
        Err(TestError::Fail(why, value)) => Err(format!("{why}\nsmallest failing: {value:#?}")),
        Err(TestError::Abort(why)) => Err(format!("aborted: {why}")),
    }
}

/// Runs every case of [`cases`]`(default)`, panicking on the first that fails with how to
/// replay it.
pub(crate) fn check_cases<S>(
    default: u64,
    strategy: &S,
    max_shrink_iters: u32,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Vec<u64>
where
    S: Strategy,
    S::Value: Debug,
{
    let cases = cases(default);
    for &case in &cases {
        if let Err(why) = run_case(case, strategy, max_shrink_iters, &check) {
            panic!("case {case} fails (replay with SLUICE_SEED={case}): {why}");
        }
    }
    cases
}

/// Posts a receive on the pair's receiving end (host 1) for `len` bytes at `offset` in its
/// region: the setup every SEND test repeats.
pub(crate) fn post_recv(
    world: &mut sluice_testkit::World,
    p: &sluice_testkit::Pair,
    wr_id: u64,
    offset: u64,
    len: u32,
) {
    let sgl = [sluice_core::Sge {
        lkey: p.mr[1].lkey,
        addr: p.mr[1].addr + offset,
        len,
    }];
    world.engines[1]
        .post_recv(p.qp[1], &sluice_core::RecvWr { wr_id, sgl: &sgl })
        .unwrap();
}

/// Two hosts on a link that loses `loss` of its packets (and is otherwise clean).
pub(crate) fn lossy_world(seed: u64, loss: f64) -> sluice_testkit::World {
    sluice_testkit::World::new(
        2,
        seed,
        sluice_testkit::Impairments {
            loss,
            ..sluice_testkit::Impairments::CLEAN
        },
    )
}

/// A pair that recovers with selective repeat (else go-back-N) and a timeout of 6
/// (262 us), so that losses are recovered in simulated time.
pub(crate) fn recovering(selective: bool) -> sluice_testkit::PairOptions {
    sluice_testkit::PairOptions {
        recovery: if selective {
            sluice_core::Recovery::SelectiveRepeat
        } else {
            sluice_core::Recovery::GoBackN
        },
        timeout: 6,
        ..sluice_testkit::PairOptions::default()
    }
}

/// Posts `messages` from host 0, message i with work request id i, each from its own place
/// in host 0's region to the same place in host 1's (64-byte aligned, one after another),
/// WRITEs and SENDs alternating (a receive posted for each SEND). Returns where each went
/// and its bytes, for [`placed_intact`].
pub(crate) fn post_writes_and_sends(
    world: &mut sluice_testkit::World,
    p: &sluice_testkit::Pair,
    messages: Vec<Vec<u8>>,
) -> Vec<(u64, Vec<u8>)> {
    let mut at = 0u64;
    let mut placed = Vec::with_capacity(messages.len());
    for (i, data) in messages.into_iter().enumerate() {
        let len = data.len() as u32;
        world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[at as usize..at as usize + data.len()]
            .copy_from_slice(&data);
        let sge = [sluice_core::Sge {
            lkey: p.mr[0].lkey,
            addr: p.mr[0].addr + at,
            len,
        }];
        let op = if i % 2 == 0 {
            sluice_core::SendOp::Write {
                remote_addr: p.mr[1].addr + at,
                rkey: p.mr[1].rkey,
            }
        } else {
            post_recv(world, p, i as u64, at, len);
            sluice_core::SendOp::Send
        };
        world.engines[0]
            .post_send(p.qp[0], &sluice_core::SendWr::new(i as u64, op, &sge))
            .unwrap();
        placed.push((at, data));
        at += u64::from(len).next_multiple_of(64);
    }
    placed
}

/// Every work request 0..n completed on `cq` of host `host`, successfully and once.
pub(crate) fn each_completed_once(
    world: &mut sluice_testkit::World,
    host: usize,
    cq: sluice_core::CqId,
    n: usize,
) -> Result<(), TestCaseError> {
    let mut ids: Vec<u64> = sluice_testkit::Pair::completions(world, host, cq)
        .iter()
        .map(|c| {
            assert_eq!(c.status, sluice_core::WcStatus::Success, "{c:?}");
            c.wr_id
        })
        .collect();
    ids.sort_unstable();
    proptest::prop_assert_eq!(ids, (0..n as u64).collect::<Vec<_>>(), "each once");
    Ok(())
}

/// Each of `placed` (where, bytes) is in `memory` as it was sent; `what` names a message
/// in the failure.
pub(crate) fn placed_intact(
    memory: &[u8],
    placed: &[(u64, Vec<u8>)],
    what: &str,
) -> Result<(), TestCaseError> {
    for (i, (at, data)) in placed.iter().enumerate() {
        proptest::prop_assert!(
            memory[*at as usize..*at as usize + data.len()] == data[..],
            "{} {} differs",
            what,
            i
        );
    }
    Ok(())
}
