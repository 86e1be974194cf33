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
