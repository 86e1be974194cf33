//! Targeted cases: RNR, bad keys, bounds, permissions, retry exhaustion and the flush that
//! follows, PSN wrap-around, zero-length messages, every path MTU, CQ overrun, the state
//! machine, and 16,384 queue pairs at once.

use std::time::Duration;

use sluice_core::*;
use sluice_testkit::*;

fn sge(mr: MrInfo, offset: u64, len: u32) -> Sge {
    Sge {
        lkey: mr.lkey,
        addr: mr.addr + offset,
        len,
    }
}

fn send_cq_statuses(world: &mut World, p: &Pair) -> Vec<(u64, WcStatus)> {
    Pair::completions(world, 0, p.send_cq[0])
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect()
}

#[test]
fn rnr_nak_then_a_late_receive_completes_the_send() {
    let mut world = World::new(2, 1, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    world.engines[0]
        .post_send(
            p.qp[0],
            &SendWr::new(1, SendOp::Send, &[sge(p.mr[0], 0, 100)]),
        )
        .unwrap();
    // No receive posted: the responder answers RNR and the requester waits.
    world.run_until(Duration::from_micros(200), |_| false);
    assert!(world.engines[1].counters().naks_sent_rnr >= 1);
    assert_eq!(world.engines[0].cq_len(p.send_cq[0]), 0);
    world.engines[1]
        .post_recv(
            p.qp[1],
            &RecvWr {
                wr_id: 9,
                sgl: &[sge(p.mr[1], 0, 100)],
            },
        )
        .unwrap();
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(10), |w| w.engines[0].cq_len(cq) == 1));
    assert_eq!(
        send_cq_statuses(&mut world, &p),
        vec![(1, WcStatus::Success)]
    );
    let recv = Pair::completions(&mut world, 1, p.recv_cq[1]);
    assert_eq!((recv[0].wr_id, recv[0].byte_len), (9, 100));
}

#[test]
fn rnr_retries_run_out_and_the_rest_is_flushed() {
    let mut world = World::new(2, 2, Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            rnr_retry: 2,
            ..PairOptions::default()
        },
    );
    for id in 1..=3 {
        world.engines[0]
            .post_send(
                p.qp[0],
                &SendWr::new(id, SendOp::Send, &[sge(p.mr[0], 0, 10)]),
            )
            .unwrap();
    }
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(10), |w| w.engines[0].cq_len(cq) == 3));
    assert_eq!(
        send_cq_statuses(&mut world, &p),
        vec![
            (1, WcStatus::RnrRetryExceeded),
            (2, WcStatus::WrFlushError),
            (3, WcStatus::WrFlushError)
        ]
    );
    assert_eq!(world.engines[0].qp_state(p.qp[0]), Some(QpState::Error));
    assert_eq!(
        world.engines[1].counters().naks_sent_rnr,
        3,
        "the first try and two retries"
    );
    // A request posted to a queue pair in error completes at once, flushed.
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(4, SendOp::Send, &[]))
        .unwrap();
    assert_eq!(
        send_cq_statuses(&mut world, &p),
        vec![(4, WcStatus::WrFlushError)]
    );
}

/// Runs one request from host 0 and returns its completion status.
fn one(world: &mut World, p: &Pair, op: SendOp, sgl: &[Sge]) -> WcStatus {
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(1, op, sgl))
        .unwrap();
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(10), |w| w.engines[0].cq_len(cq) >= 1));
    Pair::completions(world, 0, cq)[0].status
}

#[test]
fn a_bad_rkey_is_a_remote_access_error_and_touches_nothing() {
    let mut world = World::new(2, 3, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let before = world.engines[1].mr_bytes(p.mr[1].lkey).unwrap().to_vec();
    let write = SendOp::Write {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey ^ 0x55,
    };
    assert_eq!(
        one(&mut world, &p, write, &[sge(p.mr[0], 0, 64)]),
        WcStatus::RemoteAccessError
    );
    assert_eq!(
        world.engines[1].mr_bytes(p.mr[1].lkey).unwrap(),
        &before[..]
    );
    assert_eq!(world.engines[1].counters().naks_sent_remote_access, 1);
    // Both ends are in error afterwards, as for every responder-detected error but RNR.
    assert_eq!(world.engines[0].qp_state(p.qp[0]), Some(QpState::Error));
    assert_eq!(world.engines[1].qp_state(p.qp[1]), Some(QpState::Error));
}

#[test]
fn out_of_bounds_writes_and_reads_are_refused() {
    for op in ["write", "read"] {
        let mut world = World::new(2, 4, Impairments::CLEAN);
        let p = Pair::connect(
            &mut world,
            &PairOptions {
                mr_len: 4096,
                ..PairOptions::default()
            },
        );
        let before = world.engines[1].mr_bytes(p.mr[1].lkey).unwrap().to_vec();
        let (remote_addr, rkey) = (p.mr[1].addr + 4000, p.mr[1].rkey); // 100 bytes past the end
        let op = if op == "write" {
            SendOp::Write { remote_addr, rkey }
        } else {
            SendOp::Read { remote_addr, rkey }
        };
        assert_eq!(
            one(&mut world, &p, op, &[sge(p.mr[0], 0, 196)]),
            WcStatus::RemoteAccessError
        );
        assert_eq!(
            world.engines[1].mr_bytes(p.mr[1].lkey).unwrap(),
            &before[..]
        );
    }
}

#[test]
fn permissions_are_enforced_by_region_and_by_queue_pair() {
    // A region without remote write: the WRITE is a remote access error.
    let mut world = World::new(2, 5, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let readonly = world.engines[1]
        .register_mr(
            p.pd[1],
            0x900_0000,
            Memory::Bytes(vec![7; 256].into()),
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let write = SendOp::Write {
        remote_addr: readonly.addr,
        rkey: readonly.rkey,
    };
    assert_eq!(
        one(&mut world, &p, write, &[sge(p.mr[0], 0, 16)]),
        WcStatus::RemoteAccessError
    );
    assert_eq!(
        world.engines[1].mr_bytes(readonly.lkey).unwrap(),
        &[7u8; 256][..]
    );

    // A queue pair that does not allow remote reads: the READ is an invalid request.
    let mut world = World::new(2, 6, Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            access: Access::REMOTE_WRITE,
            ..PairOptions::default()
        },
    );
    let read = SendOp::Read {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey,
    };
    assert_eq!(
        one(&mut world, &p, read, &[sge(p.mr[0], 0, 16)]),
        WcStatus::RemoteInvalidRequestError
    );

    // A region of another protection domain is out of reach even with its key.
    let mut world = World::new(2, 7, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let other_pd = world.engines[1].alloc_pd();
    let foreign = world.engines[1]
        .register_mr(
            other_pd,
            0xA00_0000,
            Memory::Bytes(vec![0; 64].into()),
            Access::ALL,
        )
        .unwrap();
    let write = SendOp::Write {
        remote_addr: foreign.addr,
        rkey: foreign.rkey,
    };
    assert_eq!(
        one(&mut world, &p, write, &[sge(p.mr[0], 0, 16)]),
        WcStatus::RemoteAccessError
    );
}

#[test]
fn a_dead_link_exhausts_the_retries_then_flushes_in_order() {
    let link = Impairments {
        loss: 1.0,
        ..Impairments::CLEAN
    };
    let mut world = World::new(2, 8, link);
    let options = PairOptions {
        timeout: 10,
        retry_cnt: 3,
        ..PairOptions::default()
    }; // 4.2 ms
    let p = Pair::connect(&mut world, &options);
    for id in 1..=4 {
        world.engines[0]
            .post_send(
                p.qp[0],
                &SendWr::new(
                    id,
                    SendOp::Write {
                        remote_addr: p.mr[1].addr,
                        rkey: p.mr[1].rkey,
                    },
                    &[sge(p.mr[0], 0, 8)],
                ),
            )
            .unwrap();
    }
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 4));
    assert_eq!(
        send_cq_statuses(&mut world, &p),
        vec![
            (1, WcStatus::RetryExceeded),
            (2, WcStatus::WrFlushError),
            (3, WcStatus::WrFlushError),
            (4, WcStatus::WrFlushError)
        ]
    );
    // The first try and three retries, each one timeout apart.
    assert_eq!(world.engines[0].counters().retransmit_timeouts, 4);
    let timeout = Duration::from_nanos(4096 << 10);
    let elapsed = Duration::from_nanos(world.now.as_nanos());
    assert!(
        elapsed >= timeout * 4 && elapsed < timeout * 5,
        "{elapsed:?}"
    );
}

#[test]
fn psns_wrap_at_2_pow_24() {
    let mut world = World::new(2, 9, Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            sq_psn: [(1 << 24) - 3, (1 << 24) - 1],
            mtu: Mtu::M256,
            ..PairOptions::default()
        },
    );
    world.engines[1]
        .post_recv(
            p.qp[1],
            &RecvWr {
                wr_id: 1,
                sgl: &[sge(p.mr[1], 0, 4096)],
            },
        )
        .unwrap();
    let data: Vec<u8> = (0..2560u32).map(|i| (i % 251) as u8).collect();
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..2560].copy_from_slice(&data);
    assert_eq!(
        one(&mut world, &p, SendOp::Send, &[sge(p.mr[0], 0, 2560)]),
        WcStatus::Success
    );
    assert_eq!(
        &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[..2560],
        &data[..]
    );
    // Ten 256-byte packets from 2^24 - 3 wrap to PSN 7 on both sides; the other way nothing
    // was sent.
    let psns = |world: &World| [0, 1].map(|h| world.engines[h].qp_psns(p.qp[h]).unwrap());
    let [a, b] = psns(&world);
    assert_eq!((a.sq_psn.value(), b.rq_psn.value()), (7, 7));
    assert_eq!(
        (b.sq_psn.value(), a.rq_psn.value()),
        ((1 << 24) - 1, (1 << 24) - 1)
    );
    let read = SendOp::Read {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey,
    };
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..2560].fill(0);
    assert_eq!(
        one(&mut world, &p, read, &[sge(p.mr[0], 0, 2560)]),
        WcStatus::Success
    );
    assert_eq!(
        &world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[..2560],
        &data[..]
    );
    // The READ took ten PSNs, one per response packet.
    let [a, b] = psns(&world);
    assert_eq!((a.sq_psn.value(), b.rq_psn.value()), (17, 17));
}

#[test]
fn zero_length_messages() {
    let mut world = World::new(2, 10, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    world.engines[1]
        .post_recv(p.qp[1], &RecvWr { wr_id: 5, sgl: &[] })
        .unwrap();
    assert_eq!(
        one(&mut world, &p, SendOp::SendWithImm(3), &[]),
        WcStatus::Success
    );
    let recv = Pair::completions(&mut world, 1, p.recv_cq[1]);
    assert_eq!(
        (recv[0].wr_id, recv[0].byte_len, recv[0].imm),
        (5, 0, Some(3))
    );
    // Zero-length RDMA names no memory: even a bad key is not checked.
    assert_eq!(
        one(
            &mut world,
            &p,
            SendOp::Write {
                remote_addr: 0,
                rkey: 0xDEAD
            },
            &[]
        ),
        WcStatus::Success
    );
    assert_eq!(
        one(
            &mut world,
            &p,
            SendOp::Read {
                remote_addr: 0,
                rkey: 0xDEAD
            },
            &[]
        ),
        WcStatus::Success
    );
}

#[test]
fn every_path_mtu_segments_exactly() {
    for mtu in Mtu::ALL {
        let mut world = World::new(2, 11, Impairments::CLEAN);
        let p = Pair::connect(
            &mut world,
            &PairOptions {
                mtu,
                ..PairOptions::default()
            },
        );
        let write = SendOp::Write {
            remote_addr: p.mr[1].addr,
            rkey: p.mr[1].rkey,
        };
        assert_eq!(
            one(&mut world, &p, write, &[sge(p.mr[0], 0, 10_000)]),
            WcStatus::Success
        );
        let packets = world.engines[0].counters().tx_packets;
        assert_eq!(
            packets,
            u64::from(10_000u32.div_ceil(mtu.bytes())),
            "{mtu:?}"
        );
        assert_eq!(
            &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[..10_000],
            &world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[..10_000]
        );
    }
}

#[test]
fn a_full_cq_overruns_and_fails_the_queue_pair() {
    let mut world = World::new(2, 12, Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            cq_entries: 2,
            ..PairOptions::default()
        },
    );
    // WRITEs: only the requester's CQ (room for two) gets completions.
    let write = SendOp::Write {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey,
    };
    for id in 1..=4 {
        world.engines[0]
            .post_send(p.qp[0], &SendWr::new(id, write, &[sge(p.mr[0], 0, 8)]))
            .unwrap();
    }
    world.run_until(Duration::from_millis(5), |_| false);
    let e = &mut world.engines[0];
    assert!(e.poll_cq(p.send_cq[0]).unwrap().is_some());
    assert!(e.poll_cq(p.send_cq[0]).unwrap().is_some());
    assert_eq!(e.poll_cq(p.send_cq[0]), Err(CqOverrun));
    assert!(e.counters().cq_overruns >= 1);
    assert_eq!(e.qp_state(p.qp[0]), Some(QpState::Error));
}

#[test]
fn the_state_machine_refuses_illegal_steps() {
    let mut e = Engine::new(EngineConfig::default());
    let pd = e.alloc_pd();
    let cq = e.create_cq(16).unwrap();
    let qp = e
        .create_qp(QpConfig {
            pd,
            send_cq: cq,
            recv_cq: cq,
            caps: QpCaps::default(),
        })
        .unwrap();
    let rts = Transition::Rts {
        sq_psn: sluice_wire::Psn::new(0),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
    };
    assert!(matches!(
        e.modify_qp(qp, rts),
        Err(Error::InvalidState {
            state: QpState::Reset,
            ..
        })
    ));
    assert!(matches!(
        e.post_send(qp, &SendWr::new(1, SendOp::Send, &[])),
        Err(Error::InvalidState { .. })
    ));
    assert!(matches!(
        e.post_recv(qp, &RecvWr { wr_id: 1, sgl: &[] }),
        Err(Error::InvalidState { .. })
    ));
    e.modify_qp(
        qp,
        Transition::Init {
            access: Access::NONE,
        },
    )
    .unwrap();
    assert!(matches!(
        e.modify_qp(
            qp,
            Transition::Init {
                access: Access::NONE
            }
        ),
        Err(Error::InvalidState { .. })
    ));
    e.post_recv(qp, &RecvWr { wr_id: 1, sgl: &[] }).unwrap();
    assert!(matches!(
        e.modify_qp(qp, rts),
        Err(Error::InvalidState {
            state: QpState::Init,
            ..
        })
    ));
    e.modify_qp(qp, Transition::Error).unwrap();
    assert_eq!(
        e.poll_cq(cq).unwrap().map(|c| c.status),
        Some(WcStatus::WrFlushError)
    );
    e.modify_qp(qp, Transition::Reset).unwrap();
    assert_eq!(e.qp_state(qp), Some(QpState::Reset));
    // Bad buffers are refused at post time.
    let bad = [Sge {
        lkey: 0x1234,
        addr: 0,
        len: 8,
    }];
    e.modify_qp(
        qp,
        Transition::Init {
            access: Access::NONE,
        },
    )
    .unwrap();
    assert!(matches!(
        e.post_recv(
            qp,
            &RecvWr {
                wr_id: 2,
                sgl: &bad
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn sixteen_thousand_queue_pairs_at_once() {
    const QPS: usize = 16_384;
    let mut world = World::new(2, 13, Impairments::CLEAN);
    let mut qps = Vec::with_capacity(QPS);
    let mut pds = [PdId(0); 2];
    let mut cqs = [CqId(0); 2];
    let mut mrs = Vec::new();
    for h in 0..2 {
        let e = &mut world.engines[h];
        pds[h] = e.alloc_pd();
        cqs[h] = e.create_cq(2 * QPS as u32).unwrap();
        mrs.push(
            e.register_mr(
                pds[h],
                0,
                Memory::Bytes(vec![0; QPS * 64].into()),
                Access::ALL,
            )
            .unwrap(),
        );
    }
    for _ in 0..QPS {
        let pair: Vec<QpNum> = (0..2)
            .map(|h| {
                world.engines[h]
                    .create_qp(QpConfig {
                        pd: pds[h],
                        send_cq: cqs[h],
                        recv_cq: cqs[h],
                        caps: QpCaps {
                            max_send_wr: 4,
                            max_recv_wr: 4,
                            ..QpCaps::default()
                        },
                    })
                    .unwrap()
            })
            .collect();
        for h in 0..2 {
            let zero = sluice_wire::Psn::new(0);
            let c = Connection::new(world.addrs[1 - h], pair[1 - h].0, Mtu::M1024, zero, zero);
            world.engines[h].connect(pair[h], &c).unwrap();
        }
        qps.push(pair);
    }
    for (i, pair) in qps.iter().enumerate() {
        let at = i as u64 * 64;
        let write = SendOp::Write {
            remote_addr: at,
            rkey: mrs[1].rkey,
        };
        world.engines[0].mr_bytes_mut(mrs[0].lkey).unwrap()[i * 64] = (i % 251) as u8 + 1;
        world.engines[0]
            .post_send(
                pair[0],
                &SendWr::new(
                    i as u64,
                    write,
                    &[Sge {
                        lkey: mrs[0].lkey,
                        addr: at,
                        len: 64,
                    }],
                ),
            )
            .unwrap();
    }
    let cq = cqs[0];
    assert!(
        world.run_until(Duration::from_millis(500), |w| w.engines[0].cq_len(cq)
            == QPS)
    );
    let done = Pair::completions(&mut world, 0, cq);
    assert!(done.iter().all(|c| c.status == WcStatus::Success));
    let memory = world.engines[1].mr_bytes(mrs[1].lkey).unwrap();
    assert!((0..QPS).all(|i| memory[i * 64] == (i % 251) as u8 + 1));
}

/// Moves 512 KiB in one WRITE (host 0's bytes to host 1) or one READ (host 1's bytes to
/// host 0) over a link losing 2%, MTU 1024, with `recovery`; checks it succeeds with the
/// bytes in place and returns the world for its counters.
fn half_a_megabyte_at_two_percent_loss(recovery: Recovery, read: bool) -> World {
    let link = Impairments {
        loss: 0.02,
        ..Impairments::CLEAN
    };
    let mut world = World::new(2, 14, link);
    let options = PairOptions {
        recovery,
        mtu: Mtu::M1024,
        ..PairOptions::default()
    };
    let p = Pair::connect(&mut world, &options);
    let (from, to) = if read { (1, 0) } else { (0, 1) };
    let data: Vec<u8> = (0..512 * 1024u32).map(|i| (i * 13) as u8).collect();
    world.engines[from].mr_bytes_mut(p.mr[from].lkey).unwrap()[..data.len()].copy_from_slice(&data);
    let (remote_addr, rkey) = (p.mr[1].addr, p.mr[1].rkey);
    let op = if read {
        SendOp::Read { remote_addr, rkey }
    } else {
        SendOp::Write { remote_addr, rkey }
    };
    assert_eq!(
        one(&mut world, &p, op, &[sge(p.mr[0], 0, data.len() as u32)]),
        WcStatus::Success
    );
    assert_eq!(
        &world.engines[to].mr_bytes(p.mr[to].lkey).unwrap()[..data.len()],
        &data[..]
    );
    world
}

#[test]
fn selective_repeat_resends_only_what_is_missing() {
    let mut resent = Vec::new();
    for recovery in [Recovery::GoBackN, Recovery::SelectiveRepeat] {
        let world = half_a_megabyte_at_two_percent_loss(recovery, false);
        let (a, b) = (*world.engines[0].counters(), *world.engines[1].counters());
        if recovery == Recovery::SelectiveRepeat {
            assert!(b.packets_held > 0);
        } else {
            assert_eq!(b.packets_held, 0);
        }
        resent.push(a.retransmitted_packets);
    }
    // 512 packets, 2% lost: go-back-N resends whole windows, selective repeat about the
    // lost ones (plus those a timeout sends again).
    eprintln!(
        "go-back-N resent {}, selective repeat {}",
        resent[0], resent[1]
    );
    assert!(
        resent[1] * 4 < resent[0],
        "go-back-N resent {}, selective repeat {}",
        resent[0],
        resent[1]
    );
}

#[test]
fn selective_repeat_asks_once_for_a_burst_of_lost_read_responses() {
    // A 32-packet READ whose responses 5..=10 are lost together: the requester asks for
    // those six again, once, and nothing else is sent twice. If one of the six is lost
    // again (the responder's send 34 is the resent response 7), the resent 8..=10 arrive
    // ahead of it: the requester asks again for 7 alone, without waiting for its timer.
    // (responder sends lost, as ranges of send numbers; READ requests; responses sent)
    type Case = (Vec<std::ops::Range<u64>>, u64, u64);
    let first_burst = 5..11;
    let cases: [Case; 2] = [
        (vec![first_burst.clone()], 2, 32 + 6),
        (vec![first_burst, 34..35], 3, 32 + 6 + 1),
    ];
    for (lost, requests, responses) in cases {
        let mut world = World::new(2, 16, Impairments::CLEAN);
        world.lost_sends[1] = lost.clone();
        let options = PairOptions {
            recovery: Recovery::SelectiveRepeat,
            mtu: Mtu::M1024,
            ..PairOptions::default()
        };
        let p = Pair::connect(&mut world, &options);
        let data: Vec<u8> = (0..32 * 1024u32).map(|i| (i * 13) as u8).collect();
        world.engines[1].mr_bytes_mut(p.mr[1].lkey).unwrap()[..data.len()].copy_from_slice(&data);
        let read = SendOp::Read {
            remote_addr: p.mr[1].addr,
            rkey: p.mr[1].rkey,
        };
        assert_eq!(
            one(&mut world, &p, read, &[sge(p.mr[0], 0, data.len() as u32)]),
            WcStatus::Success
        );
        assert_eq!(
            &world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[..data.len()],
            &data[..]
        );
        let (a, b) = (*world.engines[0].counters(), *world.engines[1].counters());
        assert_eq!(
            (a.tx_packets, b.tx_packets),
            (requests, responses),
            "READ requests, responses; lost {lost:?}"
        );
        assert_eq!(a.stale_responses, 0);
        assert_eq!(a.retransmit_timeouts, 0, "lost {lost:?}");
    }
}

#[test]
fn more_reads_and_atomics_than_the_responder_allows_are_refused() {
    // The responder owes at most max_dest_rd_atomic (16 here) READ responses and atomic
    // ACKs; a requester that sends more before any answer leaves breaks the protocol.
    let mut world = World::new(2, 15, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (b, mr) = (&mut world.engines[1], p.mr[1]);
    let from = world.addrs[0];
    for i in 0..17u32 {
        let bth = sluice_wire::Bth::new(
            sluice_wire::Opcode::RC_FETCH_ADD,
            p.qp[1].0,
            sluice_wire::Psn::new(100 + i),
        );
        let atomic = sluice_wire::AtomicEth {
            va: mr.addr,
            rkey: mr.rkey,
            swap_add: 1,
            compare: 0,
        };
        let ext = sluice_wire::ExtHeaders {
            atomic_eth: Some(atomic),
            ..Default::default()
        };
        b.handle_packet(
            world.now,
            from,
            false,
            &sluice_wire::RoceHeaders {
                bth,
                ccx: None,
                ext,
            },
            Payload::Len(0),
        );
    }
    assert_eq!(b.counters().naks_sent_invalid_request, 1);
    assert_eq!(b.qp_state(p.qp[1]), Some(QpState::Error));
    // Sixteen executed, the seventeenth not: the counter (0xC5 canary bytes) rose by 16.
    let counter = u64::from_le_bytes(b.mr_bytes(mr.lkey).unwrap()[..8].try_into().unwrap());
    assert_eq!(counter, u64::from_le_bytes([CANARY; 8]).wrapping_add(16));
}

#[test]
fn a_duplicate_read_never_takes_the_place_of_a_new_one() {
    // Found by `sluice perf read-bw` under real duplication: the responder owed 15 READ
    // responses, a duplicate READ was replayed (16 queued), and the requester's next new READ
    // (legal: one of its 16 had completed) was refused as an invalid request.
    let mut world = World::new(2, 16, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (b, mr) = (&mut world.engines[1], p.mr[1]);
    let (from, now) = (world.addrs[0], world.now);
    let read = |b: &mut Engine, psn: u32| {
        let bth = sluice_wire::Bth::new(
            sluice_wire::Opcode::RC_RDMA_READ_REQUEST,
            p.qp[1].0,
            sluice_wire::Psn::new(psn),
        );
        let reth = sluice_wire::Reth {
            va: mr.addr,
            rkey: mr.rkey,
            dma_len: 64,
        };
        let ext = sluice_wire::ExtHeaders {
            reth: Some(reth),
            ..Default::default()
        };
        let headers = sluice_wire::RoceHeaders {
            bth,
            ccx: None,
            ext,
        };
        b.handle_packet(now, from, false, &headers, Payload::Len(0));
    };
    let mut buf = [0u8; 4096];
    for i in 0..16 {
        read(b, 100 + i);
    }
    // The answer to the first READ leaves: the requester may now send a seventeenth.
    assert!(b.poll_transmit(now, &mut buf).is_some());
    read(b, 101); // a duplicate, replayed
    read(b, 116); // new, and within the requester's 16
    assert_eq!(b.counters().naks_sent_invalid_request, 0);
    assert_eq!(b.qp_state(p.qp[1]), Some(QpState::Rts));
    // Duplicates beyond the room for replays are dropped: the queue stays bounded.
    for _ in 0..20 {
        read(b, 102);
    }
    let owed = b.qp_queues(p.qp[1]).unwrap().owed_responses;
    assert_eq!(owed, 16 + 8, "16 new answers and 8 replays at most");
    let mut responses = 0;
    while b.poll_transmit(now, &mut buf).is_some() {
        responses += 1;
    }
    assert_eq!(responses, owed);
}

#[test]
fn a_draining_send_queue_finishes_what_it_began_and_holds_the_rest() {
    // 5% loss: the begun WRITE needs resends while the queue pair drains.
    let link = Impairments {
        loss: 0.05,
        ..Impairments::CLEAN
    };
    let mut world = World::new(2, 11, link);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (qp, cq) = (p.qp[0], p.send_cq[0]);
    let first_psn = world.engines[0].qp_psns(qp).unwrap().sq_psn;
    for (i, b) in world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..68 << 10]
        .iter_mut()
        .enumerate()
    {
        *b = (i % 251) as u8;
    }
    p.post_write(&mut world, 1, 0, 64 << 10);
    assert!(world.run_until(Duration::from_millis(1), |w| {
        w.engines[0].counters().tx_packets > 0
    }));
    world.engines[0].modify_qp(qp, Transition::Drain).unwrap();
    assert_eq!(world.engines[0].qp_state(qp), Some(QpState::Sqd));
    // Posting is allowed while draining; the request waits.
    p.post_write(&mut world, 2, 64 << 10, 4096);
    // The responder side keeps working: a WRITE from the peer into host 0 completes.
    let peer_write = SendOp::Write {
        remote_addr: p.mr[0].addr + (100 << 10),
        rkey: p.mr[0].rkey,
    };
    let sgl = [sge(p.mr[1], 0, 512)];
    world.engines[1]
        .post_send(p.qp[1], &SendWr::new(9, peer_write, &sgl))
        .unwrap();
    let mut events = Vec::new();
    world.run_until(Duration::from_millis(50), |w| {
        events.extend(std::iter::from_fn(|| w.engines[0].poll_async_event()));
        false
    });
    assert_eq!(events, vec![AsyncEvent::SqDrained(qp)], "once per drain");
    assert_eq!(
        send_cq_statuses(&mut world, &p),
        vec![(1, WcStatus::Success)]
    );
    assert!(
        world.engines[0].counters().retransmitted_packets > 0,
        "resent while draining"
    );
    // Nothing of the second WRITE left: the send PSN stops after the first's 64 packets.
    assert_eq!(
        world.engines[0].qp_psns(qp).unwrap().sq_psn,
        first_psn.add(64)
    );
    let peer = Pair::completions(&mut world, 1, p.send_cq[1]);
    assert_eq!(peer.len(), 1);
    assert_eq!(peer[0].status, WcStatus::Success);

    // Only SQD resumes, only RTS drains.
    assert!(matches!(
        world.engines[0].modify_qp(qp, Transition::Drain),
        Err(Error::InvalidState {
            state: QpState::Sqd,
            ..
        })
    ));
    world.engines[0].modify_qp(qp, Transition::Resume).unwrap();
    assert!(matches!(
        world.engines[0].modify_qp(qp, Transition::Resume),
        Err(Error::InvalidState {
            state: QpState::Rts,
            ..
        })
    ));
    assert!(world.run_until(Duration::from_millis(50), |w| w.engines[0].cq_len(cq) == 1));
    assert_eq!(
        send_cq_statuses(&mut world, &p),
        vec![(2, WcStatus::Success)]
    );
    let (sent, landed) = (
        world.engines[0].mr_bytes(p.mr[0].lkey).unwrap()[..68 << 10].to_vec(),
        &world.engines[1].mr_bytes(p.mr[1].lkey).unwrap()[..68 << 10],
    );
    assert_eq!(&sent[..], landed, "both WRITEs landed whole");
    // A drain with nothing begun is drained at once.
    world.engines[0].modify_qp(qp, Transition::Drain).unwrap();
    assert_eq!(
        world.engines[0].poll_async_event(),
        Some(AsyncEvent::SqDrained(qp))
    );
    assert_eq!(world.engines[0].poll_async_event(), None);
    // From SQD, ERROR flushes what waits.
    p.post_write(&mut world, 3, 0, 8);
    world.engines[0].modify_qp(qp, Transition::Error).unwrap();
    assert_eq!(
        send_cq_statuses(&mut world, &p),
        vec![(3, WcStatus::WrFlushError)]
    );
}

#[test]
fn the_responder_acks_when_asked_or_every_n_packets() {
    // One 64-packet WRITE; the requester asks for an ACK on its last packet only.
    let acks = |every: u32| {
        let mut world = World::new(2, 5, Impairments::CLEAN);
        world.configure(0, |c| c.ack_request_every = 1000);
        world.configure(1, |c| c.ack_every_packets = every);
        let p = Pair::connect(&mut world, &PairOptions::default());
        p.write_and_wait(&mut world, 64 << 10);
        world.engines[1].counters().tx_packets
    };
    assert_eq!(acks(0), 1, "only when asked");
    assert_eq!(acks(1), 64, "one per packet");
    // Every 16th packet, and the last one asks anyway (it is the 64th: one ACK covers both).
    assert_eq!(acks(16), 4);
    assert_eq!(acks(20), 4, "at 20, 40, 60 and the asked-for last");
}

#[test]
fn selective_repeat_asks_again_only_for_missing_read_responses() {
    let mut served = Vec::new();
    for recovery in [Recovery::GoBackN, Recovery::SelectiveRepeat] {
        let world = half_a_megabyte_at_two_percent_loss(recovery, true);
        // Everything the responder sent is READ responses.
        served.push(world.engines[1].counters().tx_packets);
    }
    // 512 responses, 2% lost: go-back-N asks again for everything from the first gap on,
    // selective repeat for the gaps.
    eprintln!(
        "READ responses sent: go-back-N {}, selective repeat {}",
        served[0], served[1]
    );
    assert!(served[1] < 512 + 60, "selective repeat sent {}", served[1]);
    assert!(
        (served[1] - 512) * 4 < served[0] - 512,
        "go-back-N {}, selective repeat {}",
        served[0],
        served[1]
    );
}

#[test]
fn destroying_a_busy_queue_pair_leaves_the_others_and_its_successor_whole() {
    // A queue pair destroyed mid-transfer (on the ready list, its retransmit timer armed,
    // packets in flight) must neither stop the engine nor leak into the queue pair that
    // reuses its slot.
    // Alone, its timers go with it: nothing is left due.
    let mut alone = World::new(2, 7, Impairments::CLEAN);
    let z = Pair::connect(&mut alone, &PairOptions::default());
    z.post_write(&mut alone, 1, 0, 512 * 1024);
    alone.run_until(Duration::from_micros(20), |_| false);
    assert!(
        alone.engines[0].next_timeout().is_some(),
        "the sender's timer is armed"
    );
    for h in 0..2 {
        alone.engines[h].destroy_qp(z.qp[h]).unwrap();
        assert_eq!(alone.engines[h].next_timeout(), None);
    }
    let mut world = World::new(2, 7, Impairments::CLEAN);
    let a = Pair::connect(&mut world, &PairOptions::default());
    let b = Pair::connect(&mut world, &PairOptions::default());
    a.post_write(&mut world, 1, 0, 512 * 1024);
    b.post_write(&mut world, 2, 0, 512 * 1024);
    world.run_until(Duration::from_micros(20), |_| false);
    for h in 0..2 {
        world.engines[h].destroy_qp(a.qp[h]).unwrap();
        assert!(world.engines[h].destroy_qp(a.qp[h]).is_err());
    }
    // One destroyed with work posted but not a packet sent: still on the ready list; and
    // one reset first (still on the list: a reset does not take it off).
    let d = Pair::connect(&mut world, &PairOptions::default());
    d.post_write(&mut world, 4, 0, 4096);
    let r = Pair::connect(&mut world, &PairOptions::default());
    r.post_write(&mut world, 5, 0, 4096);
    world.engines[0]
        .modify_qp(r.qp[0], Transition::Reset)
        .unwrap();
    for h in 0..2 {
        world.engines[h].destroy_qp(d.qp[h]).unwrap();
        world.engines[h].destroy_qp(r.qp[h]).unwrap();
    }
    world.run_until(Duration::from_micros(10), |_| false);
    let c = Pair::connect(&mut world, &PairOptions::default());
    c.post_write(&mut world, 3, 0, 64 * 1024);
    let (bcq, ccq) = (b.send_cq[0], c.send_cq[0]);
    assert!(world.run_until(Duration::from_millis(50), |w| {
        w.engines[0].cq_len(bcq) >= 1 && w.engines[0].cq_len(ccq) >= 1
    }));
    // Let every timer the dead queue pair had armed come due.
    world.run_until(Duration::from_millis(20), |_| false);
    assert_eq!(send_cq_statuses(&mut world, &b), [(2, WcStatus::Success)]);
    assert_eq!(send_cq_statuses(&mut world, &c), [(3, WcStatus::Success)]);
    assert_eq!(world.engines[0].counters().retransmit_timeouts, 0);
}

/// The bytes of `t`'s payload (polled with `buf`): in place or from the buffer.
fn payload_bytes<'a>(e: &'a Engine, t: &Transmit, buf: &'a [u8]) -> &'a [u8] {
    match e.payload(t.payload_at, t.payload_len, buf) {
        Some(Payload::Bytes(bytes)) => bytes,
        other => panic!("real bytes, got {other:?}"),
    }
}

/// Fills host `h`'s region with a pattern that differs from byte to byte and from host to
/// host, and returns a copy of it.
fn fill_pattern(world: &mut World, p: &Pair, h: usize) -> Vec<u8> {
    let bytes = world.engines[h].mr_bytes_mut(p.mr[h].lkey).unwrap();
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 7 + h * 13) as u8;
    }
    bytes.to_vec()
}

#[test]
fn a_payload_in_one_piece_of_a_region_is_read_in_place_not_copied() {
    let mut world = World::new(2, 1, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (mr0, mr1) = (p.mr[0], p.mr[1]);
    let local = fill_pattern(&mut world, &p, 0);
    let now = world.now;
    let write = SendOp::Write {
        remote_addr: mr1.addr,
        rkey: mr1.rkey,
    };
    let e = &mut world.engines[0];
    // One piece: 1,000 bytes from offset 10 (one packet at MTU 1024).
    e.post_send(p.qp[0], &SendWr::new(1, write, &[sge(mr0, 10, 1000)]))
        .unwrap();
    // Two pieces in one packet: 100 bytes from offset 0, then 200 from offset 2,000.
    let two = [sge(mr0, 0, 100), sge(mr0, 2000, 200)];
    e.post_send(p.qp[0], &SendWr::new(2, write, &two)).unwrap();
    // Inline: copied at post time, so it can only come from the buffer.
    let small = [sge(mr0, 500, 16)];
    let inline = SendWr {
        inline: true,
        ..SendWr::new(3, write, &small)
    };
    e.post_send(p.qp[0], &inline).unwrap();

    let mut buf = [0u8; 4096];
    let t = e.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(
        t.payload_at,
        PayloadAt::Region {
            key: mr0.lkey,
            addr: mr0.addr + 10
        }
    );
    assert!(
        buf.iter().all(|&b| b == 0),
        "nothing copied into the buffer"
    );
    assert_eq!(payload_bytes(e, &t, &buf), &local[10..1010]);

    let t = e.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(t.payload_at, PayloadAt::Buffer);
    assert_eq!(
        payload_bytes(e, &t, &buf),
        [&local[..100], &local[2000..2200]].concat()
    );

    buf.fill(0);
    let t = e.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(t.payload_at, PayloadAt::Buffer);
    assert_eq!(payload_bytes(e, &t, &buf), &local[500..516]);
}

#[test]
fn a_read_response_is_read_in_place_and_dropped_if_its_region_goes() {
    let mut world = World::new(2, 1, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (mr0, mr1) = (p.mr[0], p.mr[1]);
    let remote = fill_pattern(&mut world, &p, 1);
    let now = world.now;
    let read = SendOp::Read {
        remote_addr: mr1.addr + 64,
        rkey: mr1.rkey,
    };
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(1, read, &[sge(mr0, 0, 300)]))
        .unwrap();
    let mut buf = [0u8; 4096];
    let request = world.engines[0].poll_transmit(now, &mut buf).unwrap();
    let responder = &mut world.engines[1];
    let from = world.addrs[0];
    responder.handle_packet(now, from, false, &request.headers, Payload::Len(0));
    let t = responder.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(
        t.payload_at,
        PayloadAt::Region {
            key: mr1.rkey,
            addr: mr1.addr + 64
        }
    );
    assert_eq!(payload_bytes(responder, &t, &buf), &remote[64..364]);
    // Deregistered between building the packet and sending it: there is nothing to send.
    responder.deregister_mr(mr1.lkey).unwrap();
    assert!(
        responder
            .payload(t.payload_at, t.payload_len, &buf)
            .is_none()
    );
}

#[test]
fn the_next_timeout_is_a_time_with_something_to_do() {
    // A queue pair's timer is queued once and not moved as ACKs push its retransmit deadline
    // on; the time `next_timeout` gives must still be one when there is something to do (a
    // driver sleeps until it), and none once nothing is outstanding.
    let mut world = World::new(2, 1, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    p.write_and_wait(&mut world, 4096);
    assert_eq!(world.engines[0].next_timeout(), None, "nothing outstanding");
    world.now = world.now + Duration::from_micros(300);
    p.post_write(&mut world, 2, 0, 4096);
    // Sends the WRITE and stops before its ACK arrives.
    assert!(!world.run_until(Duration::ZERO, |_| false));
    let sent = world.now;
    let timeout = Duration::from_nanos(4096 << PairOptions::default().timeout);
    assert_eq!(world.engines[0].next_timeout(), Some(sent + timeout));
    // The ACK leaves nothing outstanding again; a handled timeout changes nothing.
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
    assert_eq!(world.engines[0].next_timeout(), None);
    assert_eq!(world.engines[0].counters().retransmit_timeouts, 0);
}

#[test]
fn timeout_due_is_never_late_and_a_moved_timer_answers_yes_once() {
    // A polling driver asks `timeout_due` each poll instead of the exact `next_timeout`: it
    // must never say no when a timer is due, and a timer left queued at a deadline that an
    // ACK took away makes it say yes once, until `handle_timeout` has dropped it.
    let mut world = World::new(2, 1, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    p.post_write(&mut world, 1, 0, 4096);
    assert!(!world.run_until(Duration::ZERO, |_| false));
    let sent = world.now;
    let timeout = Duration::from_nanos(4096 << PairOptions::default().timeout);
    let e = &mut world.engines[0];
    assert!(!e.timeout_due(sent));
    assert!(!e.timeout_due(sent + (timeout - Duration::from_nanos(1))));
    assert!(
        e.timeout_due(sent + timeout),
        "the retransmit deadline is due"
    );
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
    // Answered: the entry queued at the old deadline is still there, and says yes once.
    let e = &mut world.engines[0];
    assert!(e.timeout_due(sent + timeout));
    e.handle_timeout(sent + timeout);
    assert!(!e.timeout_due(sent + timeout));
    assert_eq!(e.next_timeout(), None);
    assert_eq!(e.counters().retransmit_timeouts, 0);
}

#[test]
fn a_lost_atomic_ack_holds_back_new_atomics_until_it_is_answered() {
    // Found by `sluice perf atomic-bw` under real loss: the first atomic's ACK was lost,
    // the next ones were answered, and the requester, counting only unanswered atomics
    // against max_rd_atomic, kept starting new ones. By the time the timer resent the
    // first, the responder had let its result go (it keeps the last max_dest_rd_atomic)
    // and could not answer the duplicate: no completion ever again. An answered atomic
    // behind an unanswered one still holds its place until it completes.
    let mut world = World::new(2, 17, Impairments::CLEAN);
    world.lost_sends[1] = std::iter::once(0..1).collect(); // the first atomic ACK
    let p = Pair::connect(&mut world, &PairOptions::default());
    let counter = p.mr[1].addr + 4096;
    let posted = 64u64;
    for i in 0..posted {
        let op = SendOp::FetchAdd {
            remote_addr: counter,
            rkey: p.mr[1].rkey,
            add: 1,
        };
        world.engines[0]
            .post_send(p.qp[0], &SendWr::new(i, op, &[sge(p.mr[0], 8 * i, 8)]))
            .unwrap();
    }
    let cq = p.send_cq[0];
    let mut done = Vec::new();
    world.run_until(Duration::from_secs(2), |w| {
        done.extend(Pair::completions(w, 0, cq));
        done.len() as u64 == posted
    });
    assert_eq!(done.len() as u64, posted, "completions: {done:?}");
    assert!(
        done.iter().all(|c| c.status == WcStatus::Success),
        "{done:?}"
    );
    // Each fetch saw the counter once: the originals are the canary value plus 0..64.
    let base = u64::from_le_bytes([CANARY; 8]);
    let a = world.engines[0].mr_bytes(p.mr[0].lkey).unwrap();
    let mut seen: Vec<u64> = (0..posted as usize)
        .map(|i| u64::from_le_bytes(a[8 * i..8 * i + 8].try_into().unwrap()) - base)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..posted).collect::<Vec<_>>());
    assert!(
        world.engines[0].counters().retransmit_timeouts > 0,
        "the lost ACK's timer"
    );
}

#[test]
fn a_fenced_request_waits_for_the_reads_before_it_and_an_unfenced_one_does_not() {
    // The count of READs and atomics before the cursor is taken only for a request they can
    // hold back (fenced, or a READ or atomic itself): a WRITE behind a READ still waits
    // when fenced and still goes at once when not.
    for fence in [false, true] {
        let mut world = World::new(2, 3, Impairments::CLEAN);
        let p = Pair::connect(&mut world, &PairOptions::default());
        let (mr0, mr1) = (p.mr[0], p.mr[1]);
        let now = world.now;
        let e = &mut world.engines[0];
        let read = SendOp::Read {
            remote_addr: mr1.addr,
            rkey: mr1.rkey,
        };
        e.post_send(p.qp[0], &SendWr::new(1, read, &[sge(mr0, 0, 64)]))
            .unwrap();
        let write = SendOp::Write {
            remote_addr: mr1.addr + 1024,
            rkey: mr1.rkey,
        };
        let sgl = [sge(mr0, 1024, 64)];
        let wr = SendWr {
            fence,
            ..SendWr::new(2, write, &sgl)
        };
        e.post_send(p.qp[0], &wr).unwrap();
        let mut buf = [0u8; 4096];
        let first = e.poll_transmit(now, &mut buf).map(|t| t.headers.bth.opcode);
        assert_eq!(first, Some(sluice_wire::Opcode::RC_RDMA_READ_REQUEST));
        let second = e.poll_transmit(now, &mut buf).map(|t| t.headers.bth.opcode);
        if fence {
            assert_eq!(second, None, "the fenced WRITE waits for the READ");
        } else {
            assert_eq!(second, Some(sluice_wire::Opcode::RC_RDMA_WRITE_ONLY));
        }
        // Either way both complete, in order, once the READ is answered.
        let cq = p.send_cq[0];
        assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 2));
        let done = Pair::completions(&mut world, 0, cq);
        let ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
        assert_eq!(ids, [1, 2]);
        assert!(done.iter().all(|c| c.status == WcStatus::Success));
    }
}

#[test]
fn inline_data_of_every_length_arrives_whole_through_reused_buffers() {
    // Inline data is copied at post time into a buffer a completed inline request gave
    // back: a longer message's bytes must never leak into a shorter one's, nor the local
    // buffer's later contents into a request already posted.
    let mut world = World::new(2, 5, Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (mr0, mr1) = (p.mr[0], p.mr[1]);
    let cq = p.send_cq[0];
    let mut posted = 0u64;
    for round in 0..40u64 {
        // Lengths that grow and shrink: 1..=256 bytes, three requests in flight at once.
        let lens: Vec<u32> = (0..3)
            .map(|k| 1 + ((round * 97 + k * 61) % 256) as u32)
            .collect();
        let mut expect = Vec::new();
        for (k, &len) in lens.iter().enumerate() {
            let local = world.engines[0].mr_bytes_mut(mr0.lkey).unwrap();
            let data: Vec<u8> = (0..len)
                .map(|b| (round as u32 * 7 + k as u32 * 31 + b) as u8)
                .collect();
            local[..len as usize].copy_from_slice(&data);
            let write = SendOp::Write {
                remote_addr: mr1.addr + 1024 * k as u64,
                rkey: mr1.rkey,
            };
            let sgl = [sge(mr0, 0, len)];
            let wr = SendWr {
                inline: true,
                ..SendWr::new(posted, write, &sgl)
            };
            world.engines[0].post_send(p.qp[0], &wr).unwrap();
            posted += 1;
            // Overwritten at once: what was posted is the copy.
            world.engines[0].mr_bytes_mut(mr0.lkey).unwrap()[..len as usize].fill(0xEE);
            expect.push(data);
        }
        let want = posted;
        assert!(world.run_until(Duration::from_secs(1), |w| {
            w.engines[0].cq_len(cq) as u64 == 3
        }));
        let done = Pair::completions(&mut world, 0, cq);
        assert!(
            done.iter().all(|c| c.status == WcStatus::Success),
            "{done:?}"
        );
        assert_eq!(done.last().map(|c| c.wr_id), Some(want - 1));
        let remote = world.engines[1].mr_bytes(mr1.lkey).unwrap();
        for (k, data) in expect.iter().enumerate() {
            let at = 1024 * k;
            assert_eq!(
                &remote[at..at + data.len()],
                &data[..],
                "round {round}, request {k}"
            );
        }
    }
}
