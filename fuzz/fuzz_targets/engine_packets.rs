//! Arbitrary packets thrown at two engines with a live, connected pair of queue pairs, in
//! between their own traffic: no panic (debug builds also check the requester's
//! invariants after every packet), and afterwards a queue pair that is still ready to send
//! still delivers a WRITE exactly.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use sluice_core::*;
use sluice_wire::{CcxLayout, Psn, RocePacket};

struct Two {
    e: [Engine; 2],
    addr: [IpAddr; 2],
    qp: [QpNum; 2],
    cq: [CqId; 2],
    mr: [MrInfo; 2],
    now: Instant,
}

impl Two {
    fn new(recovery: Recovery, ccx: Option<CcxLayout>) -> Two {
        let addr = [
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        ];
        let mut e = [
            Engine::new(EngineConfig::default()),
            Engine::new(EngineConfig {
                seed: 9,
                ..EngineConfig::default()
            }),
        ];
        let mut qp = [QpNum(0); 2];
        let mut cq = [CqId(0); 2];
        let mut mr = [MrInfo {
            lkey: 0,
            rkey: 0,
            addr: 0,
            len: 0,
        }; 2];
        for h in 0..2 {
            let pd = e[h].alloc_pd();
            cq[h] = e[h].create_cq(4096).unwrap();
            mr[h] = e[h]
                .register_mr(
                    pd,
                    0x1000,
                    Memory::Bytes(vec![0; 65536].into()),
                    Access::ALL,
                )
                .unwrap();
            qp[h] = e[h]
                .create_qp(QpConfig {
                    pd,
                    send_cq: cq[h],
                    recv_cq: cq[h],
                    caps: QpCaps::default(),
                })
                .unwrap();
        }
        for h in 0..2 {
            let c = Connection {
                max_rd_atomic: 4,
                max_dest_rd_atomic: 4,
                timeout: 8,
                min_rnr_timer: 1,
                recovery,
                ccx,
                ..Connection::new(
                    addr[1 - h],
                    qp[1 - h].0,
                    Mtu::M1024,
                    Psn::new(0),
                    Psn::new(0),
                )
            };
            e[h].connect(qp[h], &c).unwrap();
        }
        Two {
            e,
            addr,
            qp,
            cq,
            mr,
            now: Instant::ZERO,
        }
    }

    /// Delivers everything both engines have to send, moving time on to the next timer
    /// whenever both are quiet, for at most `limit_ns` of simulated time.
    fn pump(&mut self, limit_ns: u64) {
        let end = self.now.as_nanos() + limit_ns;
        let mut payload = [0u8; 4096];
        loop {
            let mut moved = false;
            for h in 0..2 {
                while let Some(t) = self.e[h].poll_transmit(self.now, &mut payload) {
                    moved = true;
                    let [a, b] = &mut self.e;
                    let (from, to) = if h == 0 { (&*a, b) } else { (&*b, a) };
                    let Some(p) = from.payload(t.payload_at, t.payload_len, &payload) else {
                        continue; // its region is gone: lost, as a driver would drop it
                    };
                    to.handle_packet(self.now, self.addr[h], false, &t.headers, p);
                }
            }
            if moved {
                continue;
            }
            let next = [0, 1]
                .into_iter()
                .filter_map(|h| self.e[h].next_timeout())
                .min();
            match next {
                Some(t) if t.as_nanos() <= end => {
                    self.now = self.now.max(t);
                    for h in 0..2 {
                        self.e[h].handle_timeout(self.now);
                    }
                }
                _ => return,
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let recovery = if data.first().is_some_and(|b| b & 0x80 != 0) {
        Recovery::SelectiveRepeat
    } else {
        Recovery::GoBackN
    };
    // Bits 5 and 6 pick the CC extension header the pair agreed on (none, or a layout).
    let ccx = match data.first().map(|b| (b >> 5) & 3) {
        Some(1) => Some(CcxLayout::Timestamps),
        Some(2) => Some(CcxLayout::Int),
        Some(3) => Some(CcxLayout::Credit),
        _ => None,
    };
    let mut two = Two::new(recovery, ccx);
    // Some real work in flight: a few WRITEs, a READ, a SEND with its receive.
    let (a, b) = (two.mr[0], two.mr[1]);
    two.e[1]
        .post_recv(
            two.qp[1],
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
        two.e[0]
            .post_send(
                two.qp[0],
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
    two.e[0]
        .post_send(
            two.qp[0],
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
    two.e[0]
        .post_send(
            two.qp[0],
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
            headers.bth.dest_qp = two.qp[to].0;
        }
        let from = if flags & 4 != 0 {
            two.addr[1 - to]
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9))
        };
        impersonated |= from == two.addr[1 - to] && headers.bth.dest_qp == two.qp[to].0;
        two.e[to].handle_packet(
            two.now,
            from,
            flags & 8 != 0,
            &headers,
            Payload::Bytes(packet.payload),
        );
        two.pump(0);
    }
    two.pump(100_000_000); // 100 ms: enough for every retry to run its course

    // A queue pair pair still ready to send, and still in step, delivers a fresh WRITE
    // exactly. Out of step means a forged request from the peer's address carried the PSN the
    // responder expected: it was taken as the peer's own (RoCE has no way to tell them apart;
    // a NIC does the same), so the peer's next request at that PSN is answered as a
    // duplicate. That is the forger's doing, not a fault to look for here.
    let in_step = |two: &Two| {
        let (p0, p1) = (two.e[0].qp_psns(two.qp[0]), two.e[1].qp_psns(two.qp[1]));
        p0.zip(p1)
            .is_some_and(|(p0, p1)| p0.sq_psn == p1.rq_psn && p1.sq_psn == p0.rq_psn)
    };
    let both_ready = two.e[0].qp_state(two.qp[0]) == Some(QpState::Rts)
        && two.e[1].qp_state(two.qp[1]) == Some(QpState::Rts);
    assert!(
        !both_ready || impersonated || in_step(&two),
        "out of step, and no packet came from the peer's address"
    );
    if both_ready && in_step(&two) {
        while let Ok(Some(_)) = two.e[0].poll_cq(two.cq[0]) {}
        two.e[0].mr_bytes_mut(a.lkey).unwrap()[40_000..40_256].fill(0xAB);
        let op = SendOp::Write {
            remote_addr: b.addr + 40_000,
            rkey: b.rkey,
        };
        two.e[0]
            .post_send(
                two.qp[0],
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
        two.pump(100_000_000);
        let mut last = None;
        while let Ok(Some(c)) = two.e[0].poll_cq(two.cq[0]) {
            last = Some(c);
        }
        if let Some(c) = last.filter(|c| c.wr_id == 99) {
            if c.status == WcStatus::Success {
                assert_eq!(
                    &two.e[1].mr_bytes(b.lkey).unwrap()[40_000..40_256],
                    &[0xAB; 256][..]
                );
            }
        } else if two.e[0].qp_state(two.qp[0]) == Some(QpState::Rts) {
            panic!("a ready queue pair did not complete a WRITE: {last:?}");
        }
    }
});
