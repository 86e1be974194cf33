//! Each operation on a clean link: the bytes land where they should, completions say so.

use std::time::Duration;

use sluice_core::*;
use sluice_testkit::*;

fn fill(world: &mut World, host: usize, lkey: u32, at: usize, data: &[u8]) {
    world.engines[host].mr_bytes_mut(lkey).unwrap()[at..at + data.len()].copy_from_slice(data);
}

fn bytes(world: &World, host: usize, lkey: u32, at: usize, len: usize) -> Vec<u8> {
    world.engines[host].mr_bytes(lkey).unwrap()[at..at + len].to_vec()
}

#[test]
fn send_write_read_atomics() {
    let mut world = World::new(2, 1, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (a, b) = (p.mr[0], p.mr[1]);
    let message: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    fill(&mut world, 0, a.lkey, 0, &message);
    fill(&mut world, 1, b.lkey, 100_000, &message[..3000]);
    fill(&mut world, 1, b.lkey, 200_000, &42u64.to_le_bytes());

    world.engines[1]
        .post_recv(
            p.qp[1],
            &RecvWr {
                wr_id: 7,
                sgl: &[Sge {
                    lkey: b.lkey,
                    addr: b.addr,
                    len: 8192,
                }],
            },
        )
        .unwrap();
    let e = &mut world.engines[0];
    e.post_send(
        p.qp[0],
        &SendWr::new(
            1,
            SendOp::SendWithImm(0xAB),
            &[Sge {
                lkey: a.lkey,
                addr: a.addr,
                len: 5000,
            }],
        ),
    )
    .unwrap();
    let write = SendOp::Write {
        remote_addr: b.addr + 50_000,
        rkey: b.rkey,
    };
    e.post_send(
        p.qp[0],
        &SendWr::new(
            2,
            write,
            &[Sge {
                lkey: a.lkey,
                addr: a.addr,
                len: 2500,
            }],
        ),
    )
    .unwrap();
    let read = SendOp::Read {
        remote_addr: b.addr + 100_000,
        rkey: b.rkey,
    };
    e.post_send(
        p.qp[0],
        &SendWr::new(
            3,
            read,
            &[Sge {
                lkey: a.lkey,
                addr: a.addr + 300_000,
                len: 3000,
            }],
        ),
    )
    .unwrap();
    let faa = SendOp::FetchAdd {
        remote_addr: b.addr + 200_000,
        rkey: b.rkey,
        add: 8,
    };
    e.post_send(
        p.qp[0],
        &SendWr::new(
            4,
            faa,
            &[Sge {
                lkey: a.lkey,
                addr: a.addr + 400_000,
                len: 8,
            }],
        ),
    )
    .unwrap();
    let cas = SendOp::CompareSwap {
        remote_addr: b.addr + 200_000,
        rkey: b.rkey,
        compare: 50,
        swap: 7,
    };
    e.post_send(
        p.qp[0],
        &SendWr::new(
            5,
            cas,
            &[Sge {
                lkey: a.lkey,
                addr: a.addr + 400_008,
                len: 8,
            }],
        ),
    )
    .unwrap();

    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(100), |w| w.engines[0].cq_len(cq) == 5));
    let sends = Pair::completions(&mut world, 0, cq);
    assert_eq!(
        sends.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert!(
        sends.iter().all(|c| c.status == WcStatus::Success),
        "{sends:?}"
    );
    let recvs = Pair::completions(&mut world, 1, p.recv_cq[1]);
    assert_eq!(recvs.len(), 1);
    assert_eq!(
        (recvs[0].wr_id, recvs[0].byte_len, recvs[0].imm),
        (7, 5000, Some(0xAB))
    );
    assert_eq!(bytes(&world, 1, b.lkey, 0, 5000), message);
    assert_eq!(bytes(&world, 1, b.lkey, 5000, 1), vec![CANARY]);
    assert_eq!(bytes(&world, 1, b.lkey, 50_000, 2500), message[..2500]);
    assert_eq!(bytes(&world, 1, b.lkey, 52_500, 1), vec![CANARY]);
    assert_eq!(bytes(&world, 0, a.lkey, 300_000, 3000), message[..3000]);
    assert_eq!(bytes(&world, 0, a.lkey, 400_000, 8), 42u64.to_le_bytes());
    assert_eq!(bytes(&world, 0, a.lkey, 400_008, 8), 50u64.to_le_bytes());
    assert_eq!(bytes(&world, 1, b.lkey, 200_000, 8), 7u64.to_le_bytes());
    assert_eq!(world.engines[0].counters().retransmitted_packets, 0);
}

/// A completion carries the engine's time of the call that completed it: a receive's, the
/// SEND's arrival; the SEND's own, the arrival of the ACK that followed it back. Both later
/// than the post, none later than the world's clock.
#[test]
fn completions_carry_the_time_the_engine_completed_them() {
    let mut world = World::new(2, 1, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (a, b) = (p.mr[0], p.mr[1]);
    world.run_until(Duration::from_micros(10), |_| false);
    let posted = world.now;
    let sge = |mr: MrInfo| Sge {
        lkey: mr.lkey,
        addr: mr.addr,
        len: 1000,
    };
    world.engines[1]
        .post_recv(
            p.qp[1],
            &RecvWr {
                wr_id: 1,
                sgl: &[sge(b)],
            },
        )
        .unwrap();
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(2, SendOp::Send, &[sge(a)]))
        .unwrap();
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(10), |w| w.engines[0].cq_len(cq) == 1));
    let recv = Pair::completions(&mut world, 1, p.recv_cq[1])[0];
    let send = Pair::completions(&mut world, 0, cq)[0];
    assert!(recv.time > posted, "{recv:?} posted at {posted:?}");
    assert!(send.time > recv.time, "{send:?} after {recv:?}");
    assert!(send.time <= world.now, "{send:?} at {:?}", world.now);
}
