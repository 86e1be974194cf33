//! Each policy seam with a second implementation swapped in: the engine takes it, and what
//! it decides shows on the wire or in memory.

mod common;

use std::time::Duration;

use sluice_core::policy::{
    ByteCount, Direction, OffsetLists, Overhead, PerMessage, Policies, RoundRobin, Service,
    ServicePacket, Spray, Srpt, Verdict, XorPayload,
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
    order_of(scheduler, &[4 * 1024, 4 * 1024])
}

/// Queue pairs each with a WRITE of `lens[i]` bytes posted (1 KB packets): the order host
/// 0 sends their packets in, by the queue pair's place in `lens`.
fn order_of(scheduler: Box<dyn sluice_core::policy::Scheduler>, lens: &[u32]) -> Vec<u32> {
    let mut scheduler = Some(scheduler);
    let mut world = world_with(Impairments::CLEAN, |h| Policies {
        scheduler: if h == 0 {
            scheduler.take().unwrap()
        } else {
            Box::new(RoundRobin::default())
        },
        ..Policies::default()
    });
    let pairs: Vec<Pair> = lens
        .iter()
        .map(|_| Pair::connect(&mut world, &PairOptions::default()))
        .collect();
    for (p, &len) in pairs.iter().zip(lens) {
        p.post_write(&mut world, 1, 0, len);
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
fn srpt_sends_the_message_with_the_fewest_bytes_left_first() {
    // Each queue pair's first packet in the order posted (their keys are unknown until
    // then), then the engine's `left` ranks them: 1 KB, 2 KB, 5 KB left.
    assert_eq!(
        order_of(Box::new(Srpt::default()), &[6 * 1024, 2 * 1024, 3 * 1024]),
        [0, 1, 2, 1, 2, 2, 0, 0, 0, 0, 0]
    );
    // Round robin interleaves them.
    assert_eq!(
        order_of(
            Box::new(RoundRobin::default()),
            &[6 * 1024, 2 * 1024, 3 * 1024]
        ),
        [0, 1, 2, 0, 1, 2, 0, 2, 0, 0, 0]
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

    fn transform(&mut self, packet: &ServicePacket<'_>, _payload: &mut [u8]) -> Verdict {
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

/// In line, grows each payload: its length and PSN in front, a checksum behind, checked on
/// the way in (a stand-in for an encrypting stage: a length change, the headers read, every
/// packet of a payload-carrying opcode seen, zero-length ones too).
#[derive(Debug, Default)]
struct Frame {
    sent: u64,
    received: u64,
    empty: u64,
    refused: u64,
    /// The largest payload given to the stage on the way out.
    largest: u32,
}

impl Frame {
    const HEAD: usize = 8;
    const TAIL: usize = 4;

    fn sum(bytes: &[u8]) -> u32 {
        bytes
            .iter()
            .fold(7u32, |s, &b| s.wrapping_mul(31) ^ u32::from(b))
    }
}

impl Service for Frame {
    fn name(&self) -> &str {
        "frame"
    }

    fn in_line(&self) -> bool {
        true
    }

    fn overhead(&self) -> Overhead {
        Overhead {
            head: Self::HEAD as u32,
            tail: Self::TAIL as u32,
        }
    }

    fn transform(&mut self, packet: &ServicePacket<'_>, payload: &mut [u8]) -> Verdict {
        assert_eq!(
            packet.headers.bth.psn, packet.psn,
            "the headers are the packet's"
        );
        assert_eq!(packet.headers.bth.opcode, packet.opcode);
        let total = payload.len();
        match packet.direction {
            Direction::Send => {
                assert_eq!(total, packet.len as usize + Self::HEAD + Self::TAIL);
                self.sent += 1;
                self.empty += u64::from(packet.len == 0);
                self.largest = self.largest.max(packet.len);
                payload[..4].copy_from_slice(&packet.len.to_be_bytes());
                payload[4..8].copy_from_slice(&packet.psn.value().to_be_bytes());
                let sum = Self::sum(&payload[..total - Self::TAIL]);
                payload[total - Self::TAIL..].copy_from_slice(&sum.to_be_bytes());
                Verdict::Pass
            }
            Direction::Receive => {
                let ok = total >= Self::HEAD + Self::TAIL
                    && payload[..4] == ((total - Self::HEAD - Self::TAIL) as u32).to_be_bytes()
                    && payload[4..8] == packet.psn.value().to_be_bytes()
                    && payload[total - Self::TAIL..]
                        == Self::sum(&payload[..total - Self::TAIL]).to_be_bytes();
                if ok {
                    self.received += 1;
                    Verdict::Pass
                } else {
                    self.refused += 1;
                    Verdict::Drop
                }
            }
        }
    }

    fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
        out.clear();
        out.extend_from_slice(&[
            ("sent", self.sent),
            ("received", self.received),
            ("empty", self.empty),
            ("refused", self.refused),
            ("largest", u64::from(self.largest)),
        ]);
    }
}

/// In line, fails on the `n`th packet it sends (from 1), as an encrypting stage whose key is
/// used up would.
#[derive(Debug)]
struct FailOnSend {
    n: u64,
    seen: u64,
}

impl Service for FailOnSend {
    fn name(&self) -> &str {
        "fail-on-send"
    }

    fn in_line(&self) -> bool {
        true
    }

    fn transform(&mut self, packet: &ServicePacket<'_>, payload: &mut [u8]) -> Verdict {
        if packet.direction == Direction::Receive {
            return Verdict::Pass;
        }
        self.seen += 1;
        if self.seen == self.n {
            // Half done: what is in the buffer must not go.
            payload.fill(0xEE);
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

fn counter(world: &World, p: &Pair, h: usize, name: &str) -> u64 {
    world.engines[h].services(p.qp[h])[0]
        .counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap()
        .1
}

#[test]
fn an_in_line_stage_that_grows_the_payload_keeps_packets_within_the_path_mtu() {
    // MTU 1024 (the pair's default), 12 bytes of overhead: 1012 bytes of data a packet.
    let len = 10_000;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
    let (world, p, landed) = write_through(len, |_| vec![Box::new(Frame::default())]);
    assert_eq!(landed, data);
    let packets = len.div_ceil(1024 - 12) as u64;
    assert_eq!(counter(&world, &p, 0, "sent"), packets);
    assert_eq!(counter(&world, &p, 0, "largest"), 1012);
    assert_eq!(counter(&world, &p, 1, "received"), packets);
    assert_eq!(counter(&world, &p, 1, "refused"), 0);
    // On the wire, each packet carries the overhead: bytes sent count it, as does the peer.
    let c = world.engines[0].counters();
    assert_eq!(c.tx_bytes, len as u64 + packets * 12);
    assert_eq!(world.engines[1].counters().rx_bytes, c.tx_bytes);
}

#[test]
fn an_in_line_stage_frames_send_read_and_zero_length_packets() {
    let mut world = world_with(Impairments::CLEAN, |_| Policies::default());
    let p = Pair::connect(&mut world, &PairOptions::default());
    for h in 0..2 {
        world.engines[h]
            .set_services(p.qp[h], vec![Box::new(Frame::default())])
            .unwrap();
    }
    let data: Vec<u8> = (0..5000).map(|i| (i * 13 + 5) as u8).collect();
    world.engines[1].mr_bytes_mut(p.mr[1].lkey).unwrap()[..5000].copy_from_slice(&data);
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[8192..13192].copy_from_slice(&data);
    // A READ of 5000 bytes, a SEND of 5000, and an empty SEND and WRITE.
    let sge = |addr: u64, len| {
        [Sge {
            lkey: p.mr[0].lkey,
            addr: p.mr[0].addr + addr,
            len,
        }]
    };
    let read = SendOp::Read {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey,
    };
    let write = SendOp::Write {
        remote_addr: p.mr[1].addr + 65536,
        rkey: p.mr[1].rkey,
    };
    for i in 0..2 {
        common::post_recv(&mut world, &p, i, 16384 + i * 8192, 8192);
    }
    let e = &mut world.engines[0];
    e.post_send(p.qp[0], &SendWr::new(1, read, &sge(0, 5000)))
        .unwrap();
    e.post_send(p.qp[0], &SendWr::new(2, SendOp::Send, &sge(8192, 5000)))
        .unwrap();
    e.post_send(p.qp[0], &SendWr::new(3, SendOp::Send, &[]))
        .unwrap();
    e.post_send(p.qp[0], &SendWr::new(4, write, &[])).unwrap();
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 4));
    for c in Pair::completions(&mut world, 0, cq) {
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
    }
    let recvs = Pair::completions(&mut world, 1, p.recv_cq[1]);
    assert_eq!(
        recvs.iter().map(|c| c.byte_len).collect::<Vec<_>>(),
        [5000, 0]
    );
    assert_eq!(
        &world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[..5000],
        &data[..]
    );
    assert_eq!(
        &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[16384..21384],
        &data[..]
    );
    // The empty SEND and WRITE went through the stage at both ends.
    assert_eq!(counter(&world, &p, 0, "empty"), 2);
    assert_eq!(counter(&world, &p, 1, "refused"), 0);
    // READ responses are framed by the responder and checked by the requester.
    assert_eq!(counter(&world, &p, 1, "sent"), 5);
}

#[test]
fn an_empty_payload_that_was_not_framed_is_refused() {
    // Host 1 frames, host 0 does not: host 0's empty SEND reaches host 1's stage, which
    // refuses it (a stage that authenticates must see the empty packets too).
    let mut world = world_with(Impairments::CLEAN, |_| Policies::default());
    let p = Pair::connect(&mut world, &PairOptions::default());
    world.engines[1]
        .set_services(p.qp[1], vec![Box::new(Frame::default())])
        .unwrap();
    common::post_recv(&mut world, &p, 9, 0, 64);
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(1, SendOp::Send, &[]))
        .unwrap();
    world.run_until(Duration::from_millis(5), |_| false);
    assert_eq!(
        counter(&world, &p, 1, "refused"),
        world.engines[1].counters().drops_service
    );
    assert!(world.engines[1].counters().drops_service >= 1);
    assert!(Pair::completions(&mut world, 1, p.recv_cq[1]).is_empty());
}

#[test]
fn a_send_side_failure_sends_nothing_and_stops_the_queue_pair() {
    let mut world = world_with(Impairments::CLEAN, |_| Policies::default());
    let p = Pair::connect(&mut world, &PairOptions::default());
    world.engines[0]
        .set_services(p.qp[0], vec![Box::new(FailOnSend { n: 2, seen: 0 })])
        .unwrap();
    // Three packets: the first goes, the second fails, the third is never built.
    p.post_write(&mut world, 1, 0, 3000);
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
    let done = Pair::completions(&mut world, 0, cq);
    assert_eq!(done[0].status, WcStatus::WrFlushError);
    assert_eq!(world.engines[0].counters().service_send_failures, 1);
    assert_eq!(world.engines[0].counters().tx_packets, 1);
    // The packet before the failure is on its way.
    world.run_until(Duration::from_millis(5), |_| false);
    assert_eq!(world.engines[1].counters().rx_packets, 1);
    let landed = &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[1024..3000];
    assert!(
        landed.iter().all(|&b| b == CANARY),
        "nothing of the failed packet arrived"
    );
    assert_eq!(world.engines[0].qp_state(p.qp[0]), Some(QpState::Error));
}

#[test]
fn the_overhead_of_services_is_bounded_and_not_changed_under_way() {
    let mut world = world_with(Impairments::CLEAN, |_| Policies::default());
    let p = Pair::connect(&mut world, &PairOptions::default());
    let many: Vec<Box<dyn Service>> = (0..11).map(|_| Box::new(Frame::default()) as _).collect();
    assert!(world.engines[0].set_services(p.qp[0], many).is_err());
    p.post_write(&mut world, 1, 0, 3000);
    assert!(
        world.engines[0]
            .set_services(p.qp[0], vec![Box::new(Frame::default())])
            .is_err()
    );
    // Services that keep the length may still be swapped.
    world.engines[0]
        .set_services(p.qp[0], vec![Box::new(ByteCount::default())])
        .unwrap();
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
