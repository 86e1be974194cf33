//! Receive crediting (RoCE BALBOA's network request crediting): a deferred stage that is
//! deliberately slow (the test gives it one payload every few steps of the world) on the
//! receiving queue pair. Whatever the credit, the slowness, the recovery and the link's
//! losses, the queue waiting for the stage never passes the credit (packets and bytes),
//! packets past it are dropped and counted, and the transport brings them again: every
//! message completes exactly once, its bytes exact; the stage, drained at the end, saw every
//! byte the application got, exactly once.

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;
use sluice_core::policy::{Service, ServiceFlags, ServicePacket};
use sluice_core::*;
use sluice_testkit::*;

/// Beside the path and deferred: counts the payload bytes it is given (shared with the
/// test, which reads them after the stage went into the engine).
#[derive(Debug)]
struct Slow {
    bytes: Rc<Cell<u64>>,
}

impl Service for Slow {
    fn name(&self) -> &str {
        "slow"
    }

    fn in_line(&self) -> bool {
        false
    }

    fn deferred(&self) -> bool {
        true
    }

    fn observe(&mut self, _packet: &ServicePacket<'_>, payload: &[u8]) -> ServiceFlags {
        self.bytes.set(self.bytes.get() + payload.len() as u64);
        ServiceFlags::NONE
    }
}

#[derive(Debug, Clone)]
struct Case {
    credit: ServiceCredit,
    /// What the stage takes per payload, in simulated microseconds (the link carries a
    /// 1 KiB packet in a third of one).
    cost_us: u64,
    selective: bool,
    loss: f64,
    sizes: Vec<u32>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..12,
        1u64..24,
        1u64..8,
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.02)],
        prop::collection::vec(1u32..20_000, 4..16),
    )
        .prop_map(|(packets, kib, cost_us, selective, loss, sizes)| Case {
            // At least one packet's worth of bytes (MTU 1024), or nothing gets through.
            credit: ServiceCredit {
                packets,
                bytes: (kib * 1024).max(1024),
            },
            cost_us,
            selective,
            loss,
            sizes,
        })
}

/// Gives host 1's deferred stage what its rate allows: one payload per `cost` of simulated
/// time since the start (what it could not take because nothing waited is not saved up).
struct SlowClock {
    cost: Duration,
    next: Instant,
}

impl SlowClock {
    fn new(world: &World, cost_us: u64) -> SlowClock {
        let cost = Duration::from_micros(cost_us);
        SlowClock {
            cost,
            next: world.now + cost,
        }
    }

    fn run(&mut self, w: &mut World) {
        while self.next <= w.now {
            if w.engines[1].run_deferred(1) == 0 {
                self.next = w.now;
            }
            self.next = self.next + self.cost;
        }
    }
}

fn pattern(len: usize, salt: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(salt) as u8)
        .collect()
}

fn run(c: Case, seed: u64) -> Result<(), TestCaseError> {
    let mut world = common::lossy_world(seed, c.loss);
    world.configure(1, |e| e.service_credit = c.credit);
    let p = Pair::connect(&mut world, &common::recovering(c.selective));
    let seen = Rc::new(Cell::new(0));
    world.engines[1]
        .set_services(
            p.qp[1],
            vec![Box::new(Slow {
                bytes: seen.clone(),
            })],
        )
        .unwrap();
    // Each message from its own place to its own place, SENDs and WRITEs alternating.
    let messages = c
        .sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| pattern(len as usize, i as u32))
        .collect();
    let placed = common::post_writes_and_sends(&mut world, &p, messages);
    let n = c.sizes.len();
    let (cq, credit) = (p.send_cq[0], c.credit);
    let mut slow = SlowClock::new(&world, c.cost_us);
    let mut over: Option<String> = None;
    let done = world.run_until(Duration::from_secs(30), |w| {
        let (packets, bytes) = w.engines[1].deferred_waiting();
        if packets > credit.packets as usize || bytes > credit.bytes {
            over = Some(format!("{packets} packets, {bytes} bytes waiting"));
        }
        slow.run(w);
        w.engines[0].cq_len(cq) == n
    });
    prop_assert!(over.is_none(), "past the credit {:?}: {:?}", credit, over);
    prop_assert!(done, "not every message completed");
    common::each_completed_once(&mut world, 0, cq, n)?;
    let recvs = Pair::completions(&mut world, 1, p.recv_cq[1]);
    prop_assert_eq!(recvs.len(), n / 2, "each SEND received once");
    let memory = world.engines[1].mr_bytes(p.mr[1].lkey).unwrap();
    common::placed_intact(memory, &placed, "message")?;
    let counters = *world.engines[1].counters();
    prop_assert!(counters.service_queue_peak_bytes <= credit.bytes);
    world.engines[1].run_deferred(usize::MAX);
    prop_assert_eq!(world.engines[1].deferred_waiting(), (0, 0));
    let total: u64 = c.sizes.iter().map(|&s| u64::from(s)).sum();
    // Each payload once: a duplicate (resent after a loss, or held already past a gap) is
    // not queued again.
    prop_assert_eq!(
        seen.get(),
        total,
        "the stage saw {} of {}",
        seen.get(),
        total
    );
    Ok(())
}

#[test]
fn a_slow_stage_is_bounded_by_the_credit_and_loses_nothing() {
    common::check_cases(24, &(case(), any::<u64>()), 16, |(c, seed)| run(c, seed));
}

/// A tight credit and a stage given one payload every 8 steps: packets are dropped (and
/// counted), and everything still arrives.
#[test]
fn drops_past_the_credit_are_counted() {
    let c = Case {
        credit: ServiceCredit {
            packets: 2,
            bytes: 4096,
        },
        cost_us: 8,
        selective: false,
        loss: 0.0,
        sizes: vec![16_384; 8],
    };
    // `run` checks delivery; the drops are read from a second identical world.
    run(c.clone(), 7).unwrap();
    let mut world = World::new(2, 7, Impairments::CLEAN);
    world.configure(1, |e| e.service_credit = c.credit);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let seen = Rc::new(Cell::new(0));
    world.engines[1]
        .set_services(p.qp[1], vec![Box::new(Slow { bytes: seen })])
        .unwrap();
    for i in 0..8 {
        p.post_write(&mut world, i, i * 16_384, 16_384);
    }
    let mut slow = SlowClock::new(&world, c.cost_us);
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(30), |w| {
        slow.run(w);
        w.engines[0].cq_len(cq) == 8
    }));
    let counters = world.engines[1].counters();
    assert!(counters.drops_service_credit > 0, "{counters:?}");
    assert!(counters.service_queue_peak_bytes <= 4096);
    assert!(world.engines[0].counters().retransmitted_packets > 0);
}
