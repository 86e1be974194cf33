//! Homa (`homa`) end to end over the test kit's link: two engines that agreed on Homa's
//! declared header and on control packets, several queue pairs writing messages of random
//! sizes at once, so that the receiver's SRPT table, its overcommitment and its polls are in
//! play. Under loss, duplication, corruption and reordering (GRANTs, RESENDs, BUSYs, ACKs
//! and data all lost alike), every message must complete exactly once, in order,
//! successfully, with its bytes in place. Seeded cases through the shared runner
//! (`SLUICE_SEEDS=N` runs N, `SLUICE_SEED=S` replays S, a failure is shrunk).

#[path = "../../core/tests/common/mod.rs"]
mod seeded;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluice_control::Params;
use sluice_control::homa::{Homa, HomaContext, HomaParams, declaration};
use sluice_core::control::{
    Actions, Decoupled, Event, EventMask, Gate, Inline, Law, MessagePos, ScrConfig,
};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::{DeclaredCcx, HomaControl};

/// Bytes per message slot: each message writes its own slot, so memory is checked exactly.
const SLOT: u32 = 64 * 1024;
const MESSAGES: usize = 12;

/// Homa with what it heard from the peer recorded (GRANTs and RESENDs at a sender, BUSYs
/// at a receiver), and everything else passed through.
#[derive(Debug)]
struct Recorded {
    homa: Homa,
    heard: Rc<RefCell<Vec<HomaControl>>>,
}

impl Law for Recorded {
    type Context = HomaContext;

    fn name(&self) -> &'static str {
        self.homa.name()
    }

    fn interest(&self) -> EventMask {
        self.homa.interest()
    }

    fn on_event(&mut self, now: Instant, ctx: &mut HomaContext, e: &Event, act: &mut Actions) {
        if let Event::Homa(m) = e {
            self.heard.borrow_mut().push(*m);
        }
        self.homa.on_event(now, ctx, e, act);
    }

    fn on_event_at(
        &mut self,
        now: Instant,
        qp: u32,
        ctx: &mut HomaContext,
        e: &Event,
        act: &mut Actions,
    ) {
        if let Event::Homa(m) = e {
            self.heard.borrow_mut().push(*m);
        }
        self.homa.on_event_at(now, qp, ctx, e, act);
    }

    fn take_wake(&mut self) -> Option<u32> {
        self.homa.take_wake()
    }

    fn wakes_pending(&self) -> bool {
        self.homa.wakes_pending()
    }

    fn gate_message(&mut self, now: Instant, ctx: &mut HomaContext, pos: &MessagePos) -> Gate {
        self.homa.gate_message(now, ctx, pos)
    }

    fn ccx(&self) -> Option<sluice_wire::CcxLayout> {
        self.homa.ccx()
    }

    fn stamp_request(
        &mut self,
        now: Instant,
        ctx: &mut HomaContext,
        pos: &MessagePos,
        out: &mut DeclaredCcx,
    ) {
        self.homa.stamp_request(now, ctx, pos, out);
    }
}

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    /// Per mille of packets lost.
    loss: u32,
    pairs: usize,
    /// Message lengths, taken in turn by the queue pairs.
    lens: Vec<u32>,
    overcommit: u8,
    /// Behind SCR's queues (2 processors, 2 µs loop delay) rather than inline.
    decoupled: bool,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        prop::sample::select(vec![0u32, 10, 50, 100]),
        1..=3usize,
        prop::collection::vec(1..=SLOT, 1..=MESSAGES),
        1..=3u8,
        any::<bool>(),
    )
        .prop_map(|(seed, loss, pairs, lens, overcommit, decoupled)| Case {
            seed,
            loss,
            pairs,
            lens,
            overcommit,
            decoupled,
        })
}

struct Outcome {
    /// What each host's law heard from its peer.
    heard: [Vec<HomaControl>; 2],
    counters: [Counters; 2],
    /// When the last message completed.
    took: Duration,
}

/// Runs `case`: host 0 writes every message, each on queue pair `i mod pairs` into slot `i`.
fn run(case: &Case, link: Impairments) -> Result<Outcome, String> {
    let mut world = World::new(2, case.seed, link);
    let heard = [Rc::default(), Rc::default()];
    for (h, heard) in heard.iter().enumerate() {
        let mut p = HomaParams::default();
        // Small enough that most messages are scheduled; a resend timeout of a few RTTs.
        for (k, v) in [
            ("rtt_bytes", "4096"),
            ("base_rtt_us", "12"),
            ("resend_us", "60"),
        ] {
            p.set(k, v).unwrap();
        }
        p.overcommit = case.overcommit;
        let law = Recorded {
            homa: Homa::new(p),
            heard: Rc::clone(heard),
        };
        if case.decoupled {
            let scr = ScrConfig {
                processors: 2,
                loop_delay: Duration::from_micros(2),
                ..ScrConfig::default()
            };
            world.set_controller(h, Box::new(Decoupled::new(law, scr)));
        } else {
            world.set_controller(h, Box::new(Inline::new(law)));
        }
    }
    let options = PairOptions {
        mtu: Mtu::M1024,
        mr_len: SLOT as usize * MESSAGES,
        ccx: [Some(declaration().layout()); 2],
        ..PairOptions::default()
    };
    let pairs: Vec<Pair> = (0..case.pairs)
        .map(|q| {
            // Each queue pair's own first PSN, so that messages have distinct names.
            let options = PairOptions {
                sq_psn: [1000 * (q as u32 + 1), 7],
                ..options
            };
            let p = Pair::connect(&mut world, &options);
            for h in 0..2 {
                world.engines[h].set_cc_control(p.qp[h], true).unwrap();
            }
            let src = world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap();
            for (i, b) in src.iter_mut().enumerate() {
                *b = ((i as u64).wrapping_mul(2_654_435_761) ^ case.seed) as u8;
            }
            p
        })
        .collect();
    for (i, &len) in case.lens.iter().enumerate() {
        let p = &pairs[i % case.pairs];
        p.post_write(&mut world, i as u64, u64::from(SLOT) * i as u64, len);
    }
    let want: Vec<usize> = (0..case.pairs)
        .map(|q| (q..case.lens.len()).step_by(case.pairs).count())
        .collect();
    let mut done: Vec<Vec<Completion>> = vec![Vec::new(); case.pairs];
    let start = world.now;
    let finished = world.run_until(Duration::from_secs(2), |w| {
        for (q, p) in pairs.iter().enumerate() {
            done[q].extend(Pair::completions(w, 0, p.send_cq[0]));
        }
        done.iter().zip(&want).all(|(d, &n)| d.len() >= n)
    });
    let took = world.now - start;
    // A little longer: a duplicate completion would show.
    world.run_until(Duration::from_millis(1), |_| false);
    for (q, p) in pairs.iter().enumerate() {
        done[q].extend(Pair::completions(&mut world, 0, p.send_cq[0]));
    }
    if !finished {
        return Err(format!(
            "not all messages completed: {:?} of {want:?}; {:?}",
            done.iter().map(Vec::len).collect::<Vec<_>>(),
            world.engines[0].counters()
        ));
    }
    for (q, d) in done.iter().enumerate() {
        // Exactly once, in posting order, successfully.
        let ids: Vec<u64> = d.iter().map(|c| c.wr_id).collect();
        let posted: Vec<u64> = (q..case.lens.len())
            .step_by(case.pairs)
            .map(|i| i as u64)
            .collect();
        if ids != posted {
            return Err(format!(
                "queue pair {q}: completions {ids:?}, posted {posted:?}"
            ));
        }
        if let Some(c) = d.iter().find(|c| c.status != WcStatus::Success) {
            return Err(format!("queue pair {q}: {c:?}"));
        }
    }
    for (i, &len) in case.lens.iter().enumerate() {
        let p = &pairs[i % case.pairs];
        let at = (SLOT as usize) * i;
        let range = at..at + len as usize;
        let (a, b) = (
            &world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[range.clone()],
            &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[range],
        );
        if a != b {
            let first = a.iter().zip(b).position(|(x, y)| x != y).unwrap();
            return Err(format!("message {i} ({len} B) differs at byte {first}"));
        }
    }
    let counters = [*world.engines[0].counters(), *world.engines[1].counters()];
    for c in &counters {
        if c.drops_unnegotiated_ccx + c.drops_homa_unagreed + c.homa_unsent != 0 {
            return Err(format!("unagreed or unsent: {c:?}"));
        }
    }
    Ok(Outcome {
        heard: heard.map(|h| h.borrow().clone()),
        counters,
        took,
    })
}

fn lossy(loss: u32) -> Impairments {
    Impairments {
        loss: f64::from(loss) / 1000.0,
        duplicate: 0.01,
        corrupt: 0.01,
        reorder: 0.01,
        jitter: Duration::from_micros(2),
        delay: Duration::from_micros(5),
        gbps: 25,
        ce_mark: 0.0,
    }
}

#[test]
fn every_message_completes_once_byte_exact_under_loss() {
    let resends = std::cell::Cell::new(0usize);
    let busies = std::cell::Cell::new(0usize);
    let cases = seeded::check_cases(40, &case_strategy(), 64, |case| {
        let o = run(&case, lossy(case.loss)).map_err(TestCaseError::fail)?;
        let r = o.heard[0]
            .iter()
            .filter(|m| matches!(m, HomaControl::Resend { .. }))
            .count();
        resends.set(resends.get() + r);
        busies.set(busies.get() + o.heard[1].len());
        Ok(())
    });
    // Over the run, RESENDs were needed and answered (the cases are random; over 40 with
    // up to 10% loss there are always some, which is what this guards).
    if cases.len() >= 20 {
        assert!(resends.get() > 0, "no RESEND over {} cases", cases.len());
        assert!(busies.get() > 0, "no BUSY over {} cases", cases.len());
    }
}

#[test]
fn a_clean_link_needs_no_resend_and_grants_in_srpt_order() {
    // Three queue pairs, messages of 60, 20 and 40 KB posted at once; overcommit 1: one
    // message is granted at a time, the shortest first.
    let case = Case {
        seed: 1,
        loss: 0,
        pairs: 3,
        lens: vec![60 * 1024, 20 * 1024, 40 * 1024],
        overcommit: 1,
        decoupled: false,
    };
    let o = run(&case, Impairments::CLEAN).unwrap();
    // Queue pair q's message is named 1000 (q + 1); the order in which each was granted to
    // its end is shortest first.
    let mut finished = Vec::new();
    for m in &o.heard[0] {
        match *m {
            HomaControl::Grant {
                message, offset, ..
            } => {
                let len = case.lens[(message / 1000 - 1) as usize];
                if offset == len {
                    finished.push(len);
                }
            }
            other => panic!("a clean link needs no {other:?}"),
        }
    }
    assert_eq!(finished, [20 * 1024, 40 * 1024, 60 * 1024]);
    assert!(o.heard[1].is_empty(), "{:?}", o.heard[1]);
    assert_eq!(o.counters[1].homa_sent, o.counters[0].homa_received);
    // Each freed place was handed on at once (the wake), not at a waiting message's own
    // look every 8 resend timeouts (480 µs here).
    eprintln!("three messages, overcommit 1: {:?}", o.took);
    assert!(o.took < Duration::from_micros(480), "{:?}", o.took);
}

#[test]
fn lost_grants_are_repaired_by_resend() {
    // The receiver's next 64 packets after the first 10 µs are lost: its grants and ACKs. The sender holds, the receiver's resend timer fires, and its RESEND
    // (taken as the lost grant) gets the message going again.
    let case = Case {
        seed: 7,
        loss: 0,
        pairs: 1,
        lens: vec![48 * 1024],
        overcommit: 2,
        decoupled: false,
    };
    let heard = run_with_blackout(&case);
    assert!(
        heard
            .iter()
            .any(|m| matches!(m, HomaControl::Resend { .. })),
        "{heard:?}"
    );
}

/// [`run`]'s world for one message, with host 1's next 64 packets after 10 µs dropped;
/// what the sender's law heard.
fn run_with_blackout(case: &Case) -> Vec<HomaControl> {
    let mut world = World::new(2, case.seed, Impairments::CLEAN);
    let heard: Rc<RefCell<Vec<HomaControl>>> = Rc::default();
    for h in 0..2 {
        let mut p = HomaParams::default();
        for (k, v) in [("rtt_bytes", "4096"), ("resend_us", "60")] {
            p.set(k, v).unwrap();
        }
        let law = Recorded {
            homa: Homa::new(p),
            heard: if h == 0 {
                Rc::clone(&heard)
            } else {
                Rc::default()
            },
        };
        world.set_controller(h, Box::new(Inline::new(law)));
    }
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M1024,
            mr_len: SLOT as usize,
            ccx: [Some(declaration().layout()); 2],
            ..PairOptions::default()
        },
    );
    for h in 0..2 {
        world.engines[h].set_cc_control(p.qp[h], true).unwrap();
    }
    p.post_write(&mut world, 1, 0, case.lens[0]);
    world.run_until(Duration::from_micros(10), |_| false);
    for _ in 0..64 {
        world.impair_next(1, Fault::Drop);
    }
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(50), |w| w.engines[0].cq_len(cq) == 1));
    assert_eq!(
        Pair::completions(&mut world, 0, cq)[0].status,
        WcStatus::Success
    );
    assert_eq!(
        world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[..case.lens[0] as usize],
        world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[..case.lens[0] as usize]
    );
    heard.take()
}
