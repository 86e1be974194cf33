//! SwCC's Listing 1 credit law end to end on the header it declares: two engines agree on
//! the declaration by their offers, the receiver returns credit in every ACK's
//! `returned_credit`, and the sender, over a 25 Gbit/s switch port, keeps at most its
//! initial credit in flight. Without the agreement no credit comes back and the sender
//! stops when its first credit is spent.

use std::time::Duration;

use sluice_control::swcc_credit::{SwccCredit, declaration};
use sluice_core::control::Inline;
use sluice_core::*;
use sluice_testkit::*;

const LEN: u32 = 4 << 20;
/// One BDP of the port: 25 Gbit/s x 13 us.
const BDP: u64 = 40_625;

fn world(link: Impairments, agreed: bool) -> (World, Pair) {
    world_with(link, agreed, 2 * BDP)
}

fn world_with(link: Impairments, agreed: bool, initial: u64) -> (World, Pair) {
    let mut world = World::new(2, 9, link);
    world.watched_ports[0] = true;
    for h in 0..2 {
        world.set_controller(h, Box::new(Inline::new(SwccCredit::new(initial))));
    }
    let (a, b) = (declaration(), declaration());
    let ccx = if agreed {
        [
            Some(a.agree(Some(b.offer())).unwrap()),
            Some(b.agree(Some(a.offer())).unwrap()),
        ]
    } else {
        [None, None]
    };
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            mr_len: LEN as usize,
            ccx,
            ..PairOptions::default()
        },
    );
    (world, p)
}

/// Goodput and the port's largest queue in the second half of a 4 MiB WRITE.
fn run(initial: u64) -> (f64, u64) {
    let (mut world, p) = world_with(Impairments::CLEAN, true, initial);
    let took = p.write_and_wait(&mut world, LEN);
    let goodput = f64::from(LEN) * 8.0 / took.as_secs_f64();
    let late_queue = world.max_queue_since(Instant::ZERO + took / 2);
    eprintln!(
        "swcc-credit, {initial} B of credit: {:.2} Gbit/s, late queue {late_queue} B",
        goodput / 1e9
    );
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!(a.drops_unnegotiated_ccx + b.drops_unnegotiated_ccx, 0);
    (goodput, late_queue)
}

#[test]
fn credit_in_a_declared_header_bounds_what_is_in_flight() {
    // Credit of two BDPs keeps the port busy; what the pipe does not hold (about one BDP)
    // waits in the port's queue.
    let (goodput, queue) = run(2 * BDP);
    assert!(goodput > 0.9 * 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    assert!(queue <= 2 * BDP - BDP / 2, "{queue} B queued");
    // One BDP does not: the receiver's ACKs (and so the credit) come every half window,
    // and a returned half spends a round trip on the way back. The queue stays within it.
    let (goodput, queue) = run(BDP);
    assert!(goodput > 0.5 * 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    assert!(queue <= BDP, "{queue} B queued");
}

#[test]
fn lost_acks_are_made_up_by_the_next_total() {
    let link = Impairments {
        loss: 0.02,
        reorder: 0.01,
        jitter: Duration::from_micros(5),
        ..Impairments::CLEAN
    };
    let (mut world, p) = world(link, true);
    let took = p.write_and_wait(&mut world, LEN);
    assert!(took < Duration::from_millis(100), "{took:?}");
}

#[test]
fn without_the_agreement_no_credit_comes_back() {
    let (mut world, p) = world(Impairments::CLEAN, false);
    p.post_write(&mut world, 1, 0, LEN);
    let cq = p.send_cq[0];
    world.run_until(Duration::from_millis(20), |w| w.engines[0].cq_len(cq) == 1);
    assert_eq!(
        world.engines[0].cq_len(cq),
        0,
        "stalled on its first credit"
    );
}
