//! Arbitrary packets thrown at two engines with a live, connected pair of queue pairs, in
//! between their own traffic: no panic (debug builds also check the requester's
//! invariants after every packet), and afterwards a queue pair that is still ready to send
//! still delivers a WRITE exactly.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sluice_core::*;
use sluice_testkit::{Direct, Pair, PairOptions, RegionMemory};
use sluice_wire::{CcxLayout, RocePacket};

/// Two engines with a live, connected pair of queue pairs (MTU 1024, 64 KiB regions of
/// zeros, one CQ per side, four READs/atomics in flight), packets handed straight across.
fn two(recovery: Recovery, ccx: Option<CcxLayout>) -> (Direct, Pair) {
    let mut direct = Direct::new([
        EngineConfig::default(),
        EngineConfig {
            seed: 9,
            ..EngineConfig::default()
        },
    ]);
    let options = PairOptions {
        mr_len: 65536,
        memory: RegionMemory::Bytes(0),
        mr_addr: [0x1000, 0x1000],
        sq_psn: [0, 0],
        max_rd_atomic: 4,
        shared_cq: true,
        recovery,
        ccx: [ccx; 2],
        ..PairOptions::default()
    };
    let pair = Pair::connect(&mut direct, &options);
    (direct, pair)
}

fuzz_target!(|data: &[u8]| {
    let recovery = if data.first().is_some_and(|b| b & 0x80 != 0) {
        Recovery::SelectiveRepeat
    } else {
        Recovery::GoBackN
    };
    // Bits 5 and 6 pick the CC extension header the pair agreed on (none, or a layout);
    // with neither, bit 4 picks a declared layout (a covered and a variant field).
    let ccx = match data.first().map(|b| (b >> 5) & 3) {
        Some(0) if data[0] & 0x10 != 0 => Some(
            sluice_wire::DeclaredLayout::new(
                0x42,
                &[
                    sluice_wire::FieldSpec::bytes("c", 0, 8, sluice_wire::Coverage::Covered),
                    sluice_wire::FieldSpec::bytes("v", 8, 4, sluice_wire::Coverage::Variant),
                ],
            )
            .expect("a valid declaration")
            .layout(),
        ),
        Some(1) => Some(CcxLayout::Timestamps),
        Some(2) => Some(CcxLayout::Int),
        Some(3) => Some(CcxLayout::Credit),
        _ => None,
    };
    let (mut two, pair) = two(recovery, ccx);
    // Some real work in flight: a few WRITEs, a READ, a SEND with its receive.
    let (a, b) = (pair.mr[0], pair.mr[1]);
    two.engines[1]
        .post_recv(
            pair.qp[1],
            &RecvWr {
                wr_id: 1,
                sgl: &[Sge {
                    lkey: b.lkey,
                    addr: b.addr,
                    len: 4096,
                }],
            },
        )
        .unwrap();
    for i in 0..3u64 {
        let op = SendOp::Write {
            remote_addr: b.addr + i * 2048,
            rkey: b.rkey,
        };
        two.engines[0]
            .post_send(
                pair.qp[0],
                &SendWr::new(
                    i,
                    op,
                    &[Sge {
                        lkey: a.lkey,
                        addr: a.addr,
                        len: 1500,
                    }],
                ),
            )
            .unwrap();
    }
    let read = SendOp::Read {
        remote_addr: b.addr,
        rkey: b.rkey,
    };
    two.engines[0]
        .post_send(
            pair.qp[0],
            &SendWr::new(
                10,
                read,
                &[Sge {
                    lkey: a.lkey,
                    addr: a.addr + 8192,
                    len: 3000,
                }],
            ),
        )
        .unwrap();
    two.engines[0]
        .post_send(
            pair.qp[0],
            &SendWr::new(
                11,
                SendOp::Send,
                &[Sge {
                    lkey: a.lkey,
                    addr: a.addr,
                    len: 100,
                }],
            ),
        )
        .unwrap();

    // Chunks: [flags][len][bytes...]; flags bit 0 picks the target engine, bit 1 points the
    // packet at the live queue pair, bit 2 makes it come from the right peer address.
    let mut rest = data;
    // Some packet reached a live queue pair from its peer's address (a forger the
    // responder cannot tell from the peer).
    let mut impersonated = false;
    while rest.len() >= 2 {
        let (flags, len) = (rest[0], usize::from(rest[1]));
        let chunk = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[(2 + len).min(rest.len())..];
        let Ok(packet) = RocePacket::parse(chunk) else {
            continue;
        };
        let to = usize::from(flags & 1);
        let mut headers = packet.headers();
        if flags & 2 != 0 {
            headers.bth.dest_qp = pair.qp[to].0;
        }
        let from = if flags & 4 != 0 {
            two.addrs[1 - to]
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9))
        };
        impersonated |= from == two.addrs[1 - to] && headers.bth.dest_qp == pair.qp[to].0;
        two.engines[to].handle_packet(
            two.now,
            from,
            flags & 8 != 0,
            &headers,
            Payload::Bytes(packet.payload),
        );
        two.run_for(Duration::ZERO);
    }
    two.run_for(Duration::from_millis(100)); // enough for every retry to run its course

    // A queue pair pair still ready to send, and still in step, delivers a fresh WRITE
    // exactly. Out of step means a forged request from the peer's address carried the PSN the
    // responder expected: it was taken as the peer's own (RoCE has no way to tell them apart;
    // a NIC does the same), so the peer's next request at that PSN is answered as a
    // duplicate. That is the forger's doing, not a fault to look for here.
    let in_step = |two: &Direct| {
        let (p0, p1) = (
            two.engines[0].qp_psns(pair.qp[0]),
            two.engines[1].qp_psns(pair.qp[1]),
        );
        p0.zip(p1)
            .is_some_and(|(p0, p1)| p0.sq_psn == p1.rq_psn && p1.sq_psn == p0.rq_psn)
    };
    let both_ready = two.engines[0].qp_state(pair.qp[0]) == Some(QpState::Rts)
        && two.engines[1].qp_state(pair.qp[1]) == Some(QpState::Rts);
    assert!(
        !both_ready || impersonated || in_step(&two),
        "out of step, and no packet came from the peer's address"
    );
    if both_ready && in_step(&two) {
        while let Ok(Some(_)) = two.engines[0].poll_cq(pair.send_cq[0]) {}
        two.engines[0].mr_bytes_mut(a.lkey).unwrap()[40_000..40_256].fill(0xAB);
        let op = SendOp::Write {
            remote_addr: b.addr + 40_000,
            rkey: b.rkey,
        };
        two.engines[0]
            .post_send(
                pair.qp[0],
                &SendWr::new(
                    99,
                    op,
                    &[Sge {
                        lkey: a.lkey,
                        addr: a.addr + 40_000,
                        len: 256,
                    }],
                ),
            )
            .unwrap();
        two.run_for(Duration::from_millis(100));
        let mut last = None;
        while let Ok(Some(c)) = two.engines[0].poll_cq(pair.send_cq[0]) {
            last = Some(c);
        }
        if let Some(c) = last.filter(|c| c.wr_id == 99) {
            if c.status == WcStatus::Success {
                assert_eq!(
                    &two.engines[1].mr_bytes(b.lkey).unwrap()[40_000..40_256],
                    &[0xAB; 256][..]
                );
            }
        } else if two.engines[0].qp_state(pair.qp[0]) == Some(QpState::Rts) {
            panic!("a ready queue pair did not complete a WRITE: {last:?}");
        }
    }
});
