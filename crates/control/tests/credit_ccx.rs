//! The credit law end to end on the credit CC extension header: two engines, the sender's
//! link a 25 Gbit/s switch port, grants riding the receiver's ACKs (no control packets). The
//! sender keeps about one BDP in flight, so the port's queue stays within it at close to the
//! port's rate; without a law the same transfer parks megabytes in the queue.

use std::time::Duration;

use sluice_control::registry::{Mode, build};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::CcxLayout;

const LEN: u32 = 8 << 20;

struct Outcome {
    took: Duration,
    late_queue: u64,
    grants_sent: u64,
    grants_received: u64,
}

/// One 8 MiB WRITE from host 0 to host 1 with the credit law on both hosts (or none).
fn transfer(credit: bool, link: Impairments) -> Outcome {
    let mut world = World::new(2, 5, link);
    world.watched_ports[0] = true;
    if credit {
        // The receiver's downlink is the port's 25 Gbit/s; U is one BDP of it (the engine's
        // line rate is 100 Gbit/s, so the default U would be four): 25 Gbit/s x 13 us.
        let params = [
            ("downlink_gbps".to_string(), "25".to_string()),
            ("unscheduled_bytes".to_string(), "40625".to_string()),
        ];
        for h in 0..2 {
            world.set_controller(h, build("credit", &params, &Mode::Inline).unwrap());
        }
    }
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            mr_len: LEN as usize,
            ccx: [credit.then_some(CcxLayout::Credit); 2],
            ..PairOptions::default()
        },
    );
    let took = p.write_and_wait(&mut world, LEN);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!(a.drops_unnegotiated_ccx + b.drops_unnegotiated_ccx, 0);
    assert_eq!(b.grants_unsent, 0);
    Outcome {
        took,
        late_queue: world.max_queue_since(Instant::ZERO + took / 2),
        grants_sent: b.grants_sent,
        grants_received: a.grants_received,
    }
}

#[test]
fn credit_on_acks_keeps_the_queue_within_a_bdp_at_near_full_rate() {
    let credit = transfer(true, Impairments::CLEAN);
    let goodput = f64::from(LEN) * 8.0 / credit.took.as_secs_f64();
    eprintln!(
        "credit: {:.2} Gbit/s, late queue {} B, {} grants sent, {} received",
        goodput / 1e9,
        credit.late_queue,
        credit.grants_sent,
        credit.grants_received
    );
    // Payload is 4096 of every ~4170 bytes on the wire.
    assert!(goodput > 0.85 * 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    // The sender keeps U = 40.6 KB in flight, data and credit on the way together.
    assert!(credit.late_queue < 40_625, "{} B queued", credit.late_queue);
    assert!(credit.grants_sent > 1000);
    let none = transfer(false, Impairments::CLEAN);
    eprintln!("no law: late queue {} B", none.late_queue);
    assert!(none.late_queue > 20 * credit.late_queue.max(4096));
}

#[test]
fn credit_on_acks_survives_loss_and_reordering() {
    let link = Impairments {
        loss: 0.02,
        reorder: 0.01,
        jitter: Duration::from_micros(5),
        ..Impairments::CLEAN
    };
    let credit = transfer(true, link);
    // Grants went down with lost ACKs, later totals made them up, and the WRITE completed.
    assert!(credit.grants_received < credit.grants_sent);
    assert!(
        credit.took < Duration::from_millis(100),
        "{:?}",
        credit.took
    );
}
