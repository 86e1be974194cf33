//! Each policy seam with a second implementation swapped in: the engine takes it, and what
//! it decides shows on the wire or in memory.

use std::time::Duration;

use sluice_core::policy::{
    ByteCount, Direction, OffsetLists, PerMessage, Policies, RoundRobin, Service, ServicePacket,
    Spray, Verdict, XorPayload,
};
use sluice_core::*;
use sluice_testkit::*;

/// A world whose host `h` has an engine built with `policies(h)`.
fn world_with(link: Impairments, mut policies: impl FnMut(usize) -> Policies) -> World {
    let mut world = World::new(2, 7, link);
    for h in 0..2 {
        let config = EngineConfig {
            seed: 7 + h as u64,
            ..EngineConfig::default()
        };
        world.engines[h] = Engine::with_policies(config, policies(h));
    }
    world
}

/// Host 0's packets as it would send them now, without delivering them: (QPN, source port).
fn drain(world: &mut World) -> Vec<(u32, u16)> {
    let mut buffer = [0u8; 4096];
    let now = world.now;
    std::iter::from_fn(|| world.engines[0].poll_transmit(now, &mut buffer))
        .map(|t| (t.headers.bth.dest_qp, t.src_port))
        .collect()
}

/// Two queue pairs each with a 4-packet WRITE posted: the order host 0 sends their packets.
fn order_with(scheduler: Box<dyn sluice_core::policy::Scheduler>) -> Vec<u32> {
    let mut scheduler = Some(scheduler);
    let mut world = world_with(Impairments::CLEAN, |h| Policies {
        scheduler: if h == 0 {
            scheduler.take().unwrap()
        } else {
            Box::new(RoundRobin::default())
        },
        ..Policies::default()
    });
    let pairs = [0, 1].map(|_| Pair::connect(&mut world, &PairOptions::default()));
    for p in &pairs {
        p.post_write(&mut world, 1, 0, 4 * 1024);
    }
    let dest: Vec<u32> = pairs.iter().map(|p| p.qp[1].0).collect();
    drain(&mut world)
        .into_iter()
        .map(|(qp, _)| dest.iter().position(|&d| d == qp).unwrap() as u32)
        .collect()
}

#[test]
fn a_second_scheduler_changes_the_order_queue_pairs_send_in() {
    assert_eq!(
        order_with(Box::new(RoundRobin::default())),
        [0, 1, 0, 1, 0, 1, 0, 1]
    );
    assert_eq!(
        order_with(Box::new(PerMessage::default())),
        [0, 0, 0, 0, 1, 1, 1, 1]
    );
}

#[test]
fn a_second_path_selector_sprays_a_queue_pairs_packets() {
    let ports = |policies: fn() -> Policies| {
        let mut world = world_with(Impairments::CLEAN, |_| policies());
        let p = Pair::connect(&mut world, &PairOptions::default());
        p.post_write(&mut world, 1, 0, 16 * 1024);
        let mut ports: Vec<u16> = drain(&mut world).into_iter().map(|(_, s)| s).collect();
        assert_eq!(ports.len(), 16);
        ports.sort_unstable();
        ports.dedup();
        ports.len()
    };
    assert_eq!(ports(Policies::default), 1);
    assert_eq!(
        ports(|| Policies {
            path: Box::new(Spray { paths: 4 }),
            ..Policies::default()
        }),
        4
    );
}

/// A selective-repeat WRITE of `len` bytes over a lossy, reordering link with `tracker` at
/// the receiver: the bytes land, and the tracker's memory is reported.
#[test]
fn a_second_receive_tracker_carries_selective_repeat_over_a_lossy_link() {
    let link = Impairments {
        loss: 0.05,
        reorder: 0.2,
        jitter: Duration::from_micros(20),
        ..Impairments::CLEAN
    };
    let mut world = world_with(link, |_| Policies {
        tracker: Box::new(OffsetLists {
            capacity: 64,
            gap_is_loss: true,
        }),
        ..Policies::default()
    });
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            recovery: Recovery::SelectiveRepeat,
            ..PairOptions::default()
        },
    );
    let len = 256 * 1024;
    let data: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..len].copy_from_slice(&data);
    p.write_and_wait(&mut world, len as u32);
    assert_eq!(
        &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[..len],
        &data[..]
    );
    let held = world.engines[1].counters().packets_held;
    assert!(held > 0, "nothing arrived out of order");
    assert!(world.engines[1].tracker_memory().per_connection > 0);
}

/// In line, drops every third received packet: the transport recovers them as losses.
#[derive(Debug, Default)]
struct DropEveryThird {
    seen: u64,
}

impl Service for DropEveryThird {
    fn name(&self) -> &str {
        "drop-every-third"
    }

    fn in_line(&self) -> bool {
        true
    }

    fn transform(&mut self, packet: &ServicePacket, _payload: &mut [u8]) -> Verdict {
        if packet.direction == Direction::Send {
            return Verdict::Pass;
        }
        self.seen += 1;
        if self.seen % 3 == 0 {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }
}

/// A WRITE of `len` patterned bytes with `services(h)` on each host's queue pair; returns
/// what landed at host 1.
fn write_through(
    len: usize,
    services: impl Fn(usize) -> Vec<Box<dyn Service>>,
) -> (World, Pair, Vec<u8>) {
    let mut world = world_with(Impairments::CLEAN, |_| Policies::default());
    let p = Pair::connect(&mut world, &PairOptions::default());
    for h in 0..2 {
        world.engines[h].set_services(p.qp[h], services(h)).unwrap();
    }
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..len].copy_from_slice(&data);
    p.write_and_wait(&mut world, len as u32);
    let landed = world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[..len].to_vec();
    assert_eq!(
        &world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[..len],
        &data[..],
        "an in-line service changed the sender's memory"
    );
    (world, p, landed)
}

#[test]
fn an_in_line_service_changes_the_wire_and_its_peer_undoes_it() {
    let len = 10_000;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
    // On the sender only: the receiver's memory gets the changed bytes.
    let (_, _, landed) = write_through(len, |h| match h {
        0 => vec![Box::new(XorPayload { key: 0x5A })],
        _ => vec![],
    });
    let changed: Vec<u8> = data.iter().map(|b| b ^ 0x5A).collect();
    assert_eq!(landed, changed);
    // On both: the bytes arrive as sent.
    let (_, _, landed) = write_through(len, |_| vec![Box::new(XorPayload { key: 0x5A })]);
    assert_eq!(landed, data);
}

#[test]
fn a_service_beside_the_path_sees_every_payload_byte_each_way() {
    let len = 10_000;
    let (world, p, _) = write_through(len, |_| vec![Box::new(ByteCount::default())]);
    let counters = |h: usize| world.engines[h].services(p.qp[h])[0].counters();
    assert!(counters(0).contains(&("sent_bytes", len as u64)));
    assert!(counters(0).contains(&("sent_packets", 10)));
    assert!(counters(1).contains(&("received_bytes", len as u64)));
    assert!(counters(1).contains(&("sent_bytes", 0)));
}

#[test]
fn packets_an_in_line_service_drops_are_counted_and_recovered() {
    let len = 64 * 1024;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
    let (world, _, landed) = write_through(len, |h| match h {
        1 => vec![Box::new(DropEveryThird::default())],
        _ => vec![],
    });
    assert_eq!(landed, data);
    assert!(world.engines[1].counters().drops_service >= 64 / 3);
    assert!(world.engines[0].counters().retransmitted_packets > 0);
}

#[test]
fn a_tenant_needs_a_weight() {
    let mut world = world_with(Impairments::CLEAN, |_| Policies::default());
    let p = Pair::connect(&mut world, &PairOptions::default());
    let tenant = |weight| policy::Tenant { id: 1, weight };
    assert!(world.engines[0].set_tenant(p.qp[0], tenant(0)).is_err());
    world.engines[0].set_tenant(p.qp[0], tenant(3)).unwrap();
}

#[test]
fn a_reset_queue_pair_has_no_services() {
    let mut world = world_with(Impairments::CLEAN, |_| Policies::default());
    let p = Pair::connect(&mut world, &PairOptions::default());
    world.engines[0]
        .set_services(p.qp[0], vec![Box::new(ByteCount::default())])
        .unwrap();
    assert_eq!(world.engines[0].services(p.qp[0]).len(), 1);
    world.engines[0]
        .modify_qp(p.qp[0], Transition::Reset)
        .unwrap();
    assert!(world.engines[0].services(p.qp[0]).is_empty());
}
