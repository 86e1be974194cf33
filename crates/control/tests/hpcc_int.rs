//! HPCC end to end: two engines, the sender's link a 25 Gbit/s switch port that writes INT
//! records into the CC extension header in flight (as bytes, the ICRC untouched), the
//! receiver echoing them in its ACKs. With HPCC the port's queue stays near empty once the
//! first round trip's burst has drained, at close to η of the port's rate; without a law the
//! same transfer parks everything the engine may have in flight in the queue.

use std::time::Duration;

use sluice_control::registry::{Mode, build};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::CcxLayout;

const LEN: u32 = 8 << 20;

/// Sends one 8 MiB WRITE from host 0 to host 1 with `law` on host 0 (or none); returns the
/// time it took, the largest queue at host 0's port in the second half of it, and the
/// telemetry packets host 1 rejected.
fn transfer(law: Option<&str>) -> (Duration, u64, u64) {
    let mut world = World::new(2, 3, Impairments::CLEAN);
    // The receiver acknowledges every packet, as HPCC expects (its INT echo is its signal);
    // coalesced ACKs would hold its one-BDP window back a few packets per round trip.
    world.configure(1, |c| c.ack_every_packets = 1);
    if let Some(name) = law {
        let params = [("base_rtt_us".to_string(), "12".to_string())];
        world.set_controller(0, build(name, &params, &Mode::Inline).unwrap());
    }
    world.int_ports[0] = true;
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            mr_len: LEN as usize,
            ccx: [Some(CcxLayout::Int); 2],
            ..PairOptions::default()
        },
    );
    let took = p.write_and_wait(&mut world, LEN);
    let late_queue = world.max_queue_since(Instant::ZERO + took / 2);
    (took, late_queue, world.rejected_by_wire)
}

#[test]
fn hpcc_keeps_the_port_queue_near_empty_at_near_full_rate() {
    let port_bps = 25e9;
    let (took, queue, rejected) = transfer(Some("hpcc"));
    assert_eq!(rejected, 0);
    let goodput = f64::from(LEN) * 8.0 / took.as_secs_f64();
    // Payload is 4096 of every 4,262 bytes on the link (framing, headers and the 84-byte INT
    // record); HPCC aims at eta = 0.95 of the port.
    assert!(
        goodput > 0.85 * port_bps,
        "HPCC goodput {:.2} Gbit/s",
        goodput / 1e9
    );
    // One bandwidth-delay product at 25 Gbit/s and ~12 us is 37.5 KB.
    assert!(queue < 40_000, "HPCC left {queue} bytes queued at the port");

    let (took_none, queue_none, _) = transfer(None);
    assert!(
        queue_none > 10 * queue.max(4096),
        "without a law the queue holds {queue_none} bytes (HPCC: {queue})"
    );
    // Both fill the port; HPCC does it without the queue.
    assert!(
        took.as_secs_f64() < 1.15 * took_none.as_secs_f64(),
        "{took:?} vs {took_none:?}"
    );
}
