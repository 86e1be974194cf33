//! DCQCN and DCTCP end to end: two engines running the law, the sender's link a 25 Gbit/s
//! switch port that marks ECN on its queue (RED for DCQCN, a step at K for DCTCP), the
//! receiver turning marks into CNPs and the sender cutting on them. With either law the
//! port's queue in the second half of the transfer is a small fraction of what the same
//! transfer parks there without one.
//!
//! DCTCP keeps the port busy. DCQCN with its paper's parameters does not, in this setting:
//! the engine's first window (4 MiB, unpaced at line rate) takes 1.3 ms to drain, RED marks
//! all of it, and a CNP every 50 us (the NP interval) halves the rate each time (α starts at
//! 1), down to the 10 Mbit/s floor; it then climbs back by R_AI = 40 Mbit/s per 55 us
//! (the byte counter, 10 MB, barely counts at low rates), reaching 25 Gbit/s only after
//! ~34 ms. That is DCQCN's equations at work (its evaluation had many flows and no such
//! burst), so this test asserts that the law holds the queue without stalling the flow.

use std::time::Duration;

use sluice_control::registry::{Mode, build};
use sluice_core::*;
use sluice_testkit::*;

const LEN: u32 = 16 << 20;
const PORT_BPS: f64 = 25e9;

struct Run {
    took: Duration,
    /// The largest queue at the port in the second half of the transfer.
    late_queue: u64,
    marked: u64,
    cnps: u64,
}

/// One 16 MiB WRITE from host 0 to host 1, both running `law` (or none), through host 0's
/// marking port.
fn transfer(law: Option<&str>, marking: RedMarking) -> Run {
    let mut world = World::new(2, 11, Impairments::CLEAN);
    if let Some(name) = law {
        for host in 0..2 {
            world.set_controller(host, build(name, &[], &Mode::Inline).unwrap());
        }
    }
    world.ecn_ports[0] = Some(marking);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            mr_len: LEN as usize,
            ..PairOptions::default()
        },
    );
    let took = p.write_and_wait(&mut world, LEN);
    Run {
        took,
        late_queue: world.max_queue_since(Instant::ZERO + took / 2),
        marked: world.ecn_marked,
        cnps: world.engines[0].counters().cnps_received,
    }
}

fn goodput_gbps(r: &Run) -> f64 {
    f64::from(LEN) * 8.0 / r.took.as_secs_f64() / 1e9
}

/// Checks `law` against no law under `marking`; the law must reach `min_share` of the port.
fn check(law: &str, marking: RedMarking, min_share: f64) {
    let with = transfer(Some(law), marking);
    let none = transfer(None, marking);
    println!(
        "{law}: {:?}, {:.2} Gbit/s, late queue {} B, {} marked, {} CNPs; no law: {:?}, {:.2} \
         Gbit/s, late queue {} B",
        with.took,
        goodput_gbps(&with),
        with.late_queue,
        with.marked,
        with.cnps,
        none.took,
        goodput_gbps(&none),
        none.late_queue
    );
    assert!(with.marked > 0 && with.cnps > 0, "{law} saw no congestion");
    assert!(
        with.late_queue * 10 < none.late_queue,
        "{law}: queue {} B, without a law {} B",
        with.late_queue,
        none.late_queue
    );
    assert!(
        goodput_gbps(&with) > min_share * PORT_BPS / 1e9,
        "{law}: {:.2} Gbit/s",
        goodput_gbps(&with)
    );
}

#[test]
fn dcqcn_turns_red_marks_into_cuts_that_empty_the_queue() {
    // DCQCN's switch setting (SwCC's evaluation): K_min 5 KB, K_max 200 KB, P_max 1%.
    let red = RedMarking {
        kmin: 5_000,
        kmax: 200_000,
        pmax: 0.01,
    };
    check("dcqcn", red, 0.2);
}

#[test]
fn dctcp_keeps_the_queue_near_its_marking_step_at_the_port_rate() {
    let step = RedMarking {
        kmin: 30_000,
        kmax: 30_000,
        pmax: 1.0,
    };
    check("dctcp", step, 0.95);
}
