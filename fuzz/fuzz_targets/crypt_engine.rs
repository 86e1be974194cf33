//! The encrypted receive path through the engine: two engines whose connected queue pairs run
//! `EncryptService` (keys from a real handshake), with real work in flight, get arbitrary
//! packets in between their own traffic. No panic; every injected packet that carries a
//! payload and reaches the live queue pair from the peer's address is dropped by the stage
//! (a forger has no key), never opened; and afterwards a queue pair still ready to send, and
//! still in step, delivers a fresh WRITE exactly.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sluice_core::*;
use sluice_crypt::handshake::{Endpoint, Handshake, Role};
use sluice_crypt::{EncryptService, Psk};
use sluice_testkit::{Direct, Pair, PairOptions, RegionMemory};
use sluice_wire::RocePacket;

/// Two engines with an encrypted, connected pair of queue pairs (MTU 1024, 64 KiB regions of
/// zeros, one CQ per side), packets handed straight across.
fn two(recovery: Recovery) -> (Direct, Pair) {
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
        ..PairOptions::default()
    };
    let pair = Pair::connect(&mut direct, &options);
    let psk = || Psk::new([0x6b; 32]).unwrap();
    let end = |h: usize| Endpoint {
        qpn: pair.qp[h].0,
        psn: 0,
    };
    let (i, hello_i) = Handshake::start(Role::Initiator, psk(), end(0)).unwrap();
    let (r, hello_r) = Handshake::start(Role::Responder, psk(), end(1)).unwrap();
    let (i, confirm_i) = i.receive_hello(&hello_r).unwrap();
    let (r, confirm_r) = r.receive_hello(&hello_i).unwrap();
    let keys = [
        i.receive_confirm(&confirm_r).unwrap(),
        r.receive_confirm(&confirm_i).unwrap(),
    ];
    for (h, keys) in keys.iter().enumerate() {
        direct.engines[h]
            .set_services(pair.qp[h], vec![Box::new(EncryptService::new(keys))])
            .unwrap();
    }
    (direct, pair)
}

fn opened(two: &Direct, pair: &Pair, h: usize) -> u64 {
    two.engines[h].services(pair.qp[h])[0]
        .counters()
        .into_iter()
        .find(|(n, _)| *n == "opened")
        .map_or(0, |(_, v)| v)
}

fn sge(mr: MrInfo, offset: u64, len: u32) -> [Sge; 1] {
    [Sge {
        lkey: mr.lkey,
        addr: mr.addr + offset,
        len,
    }]
}

fuzz_target!(|data: &[u8]| {
    let recovery = if data.first().is_some_and(|b| b & 0x80 != 0) {
        Recovery::SelectiveRepeat
    } else {
        Recovery::GoBackN
    };
    let (mut two, pair) = two(recovery);
    // Some real work in flight: WRITEs, a READ, a SEND with its receive.
    let (a, b) = (pair.mr[0], pair.mr[1]);
    let recv = sge(b, 0, 4096);
    two.engines[1]
        .post_recv(
            pair.qp[1],
            &RecvWr {
                wr_id: 1,
                sgl: &recv,
            },
        )
        .unwrap();
    let from = sge(a, 0, 1500);
    for i in 0..3u64 {
        let op = SendOp::Write {
            remote_addr: b.addr + i * 2048,
            rkey: b.rkey,
        };
        two.engines[0]
            .post_send(pair.qp[0], &SendWr::new(i, op, &from))
            .unwrap();
    }
    let read = SendOp::Read {
        remote_addr: b.addr,
        rkey: b.rkey,
    };
    let into = sge(a, 8192, 3000);
    two.engines[0]
        .post_send(pair.qp[0], &SendWr::new(10, read, &into))
        .unwrap();
    let small = sge(a, 0, 100);
    two.engines[0]
        .post_send(pair.qp[0], &SendWr::new(11, SendOp::Send, &small))
        .unwrap();

    // Chunks: [flags][len][bytes...]; flags bit 0 picks the target engine, bit 1 points the
    // packet at the live queue pair, bit 2 makes it come from the right peer address.
    let mut rest = data;
    // A packet without payload (an ACK, a READ request...) reached a live queue pair from
    // its peer's address: nothing authenticates those yet, so it may put the pair out of
    // step.
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
        let at_the_pair = from == two.addrs[1 - to] && headers.bth.dest_qp == pair.qp[to].0;
        let sealed = packet.info.has_payload;
        impersonated |= at_the_pair && !sealed;
        let before = (
            opened(&two, &pair, to),
            two.engines[to].counters().drops_service,
        );
        two.engines[to].handle_packet(
            two.now,
            from,
            flags & 8 != 0,
            &headers,
            Payload::Bytes(packet.payload),
        );
        let after = (
            opened(&two, &pair, to),
            two.engines[to].counters().drops_service,
        );
        if at_the_pair && sealed && two.engines[to].qp_state(pair.qp[to]).is_some() {
            assert_eq!(after.0, before.0, "a forged packet was opened");
            assert_eq!(after.1, before.1 + 1, "a forged packet was not dropped");
        }
        two.run_for(Duration::ZERO);
    }
    two.run_for(Duration::from_millis(100)); // enough for every retry to run its course

    // A pair still ready to send, and in step, delivers a fresh WRITE exactly (out of step
    // only through an unauthenticated packet without payload from the peer's address).
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
        "out of step, and only sealed packets came from the peer's address"
    );
    if both_ready && in_step(&two) {
        while let Ok(Some(_)) = two.engines[0].poll_cq(pair.send_cq[0]) {}
        two.engines[0].mr_bytes_mut(a.lkey).unwrap()[40_000..40_256].fill(0xAB);
        let op = SendOp::Write {
            remote_addr: b.addr + 40_000,
            rkey: b.rkey,
        };
        let fresh = sge(a, 40_000, 256);
        two.engines[0]
            .post_send(pair.qp[0], &SendWr::new(99, op, &fresh))
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
