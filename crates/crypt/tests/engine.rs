//! `EncryptService` on two engines' queue pairs, through the engine's service seam: WRITE,
//! SEND and READ arrive byte-exact over the test kit's link (real wire encoding and ICRC);
//! and, with packets moved by hand, a flipped ciphertext or tag bit (the ICRC recomputed, as
//! an attacker would), a replay, and a packet from a peer without the key are dropped and
//! counted, with nothing delivered.

use std::net::IpAddr;
use std::time::Duration;

use sluice_core::*;
use sluice_crypt::handshake::{Endpoint, Handshake, Role};
use sluice_crypt::{EncryptService, Psk};
use sluice_testkit::*;
use sluice_wire::{IpHeader, IpUdp, ROCE_V2_PORT, RoceHeaders, UdpHeader, emit_datagram, icrc};

/// Both ends' session keys for `pair`, from a handshake under `psk` at both ends.
fn encrypt(world: &mut World, pair: &Pair, options: &PairOptions) {
    let psk = || Psk::new([0x42; 32]).unwrap();
    let end = |h: usize| Endpoint {
        qpn: pair.qp[h].0,
        psn: options.sq_psn[h],
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
        world.engines[h]
            .set_services(pair.qp[h], vec![Box::new(EncryptService::new(keys))])
            .unwrap();
    }
}

fn setup(mtu: Mtu) -> (World, Pair) {
    let mut world = World::new(2, 11, Impairments::CLEAN);
    let options = PairOptions {
        mtu,
        ..PairOptions::default()
    };
    let pair = Pair::connect(&mut world, &options);
    encrypt(&mut world, &pair, &options);
    (world, pair)
}

fn counter(world: &World, pair: &Pair, h: usize, name: &str) -> u64 {
    world.engines[h].services(pair.qp[h])[0]
        .counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i * 7) as u8 ^ salt).collect()
}

#[test]
fn write_send_and_read_arrive_byte_exact_through_encryption() {
    for mtu in [Mtu::M256, Mtu::M1024, Mtu::M4096] {
        let (mut world, p) = setup(mtu);
        let (write, send, read) = (pattern(10_000, 1), pattern(5_000, 2), pattern(7_000, 3));
        world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..10_000].copy_from_slice(&write);
        world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[65536..70536].copy_from_slice(&send);
        world.engines[1].mr_bytes_mut(p.mr[1].lkey).unwrap()[131072..138072].copy_from_slice(&read);
        let recv = [Sge {
            lkey: p.mr[1].lkey,
            addr: p.mr[1].addr + 262144,
            len: 8192,
        }];
        world.engines[1]
            .post_recv(
                p.qp[1],
                &RecvWr {
                    wr_id: 7,
                    sgl: &recv,
                },
            )
            .unwrap();
        let empty_recv = [Sge {
            lkey: p.mr[1].lkey,
            addr: p.mr[1].addr + 300_000,
            len: 64,
        }];
        world.engines[1]
            .post_recv(
                p.qp[1],
                &RecvWr {
                    wr_id: 8,
                    sgl: &empty_recv,
                },
            )
            .unwrap();
        let sge = |addr: u64, len| {
            [Sge {
                lkey: p.mr[0].lkey,
                addr: p.mr[0].addr + addr,
                len,
            }]
        };
        let e = &mut world.engines[0];
        let remote = |at: u64| (p.mr[1].addr + at, p.mr[1].rkey);
        let (ra, rkey) = remote(0);
        let op = SendOp::Write {
            remote_addr: ra,
            rkey,
        };
        e.post_send(p.qp[0], &SendWr::new(1, op, &sge(0, 10_000)))
            .unwrap();
        e.post_send(p.qp[0], &SendWr::new(2, SendOp::Send, &sge(65536, 5000)))
            .unwrap();
        e.post_send(p.qp[0], &SendWr::new(3, SendOp::Send, &[]))
            .unwrap();
        let (ra, rkey) = remote(131072);
        let op = SendOp::Read {
            remote_addr: ra,
            rkey,
        };
        e.post_send(p.qp[0], &SendWr::new(4, op, &sge(196608, 7000)))
            .unwrap();
        let cq = p.send_cq[0];
        assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 4));
        for c in Pair::completions(&mut world, 0, cq) {
            assert_eq!(c.status, WcStatus::Success, "{mtu:?}: {c:?}");
        }
        let recvs = Pair::completions(&mut world, 1, p.recv_cq[1]);
        let lens: Vec<u32> = recvs.iter().map(|c| c.byte_len).collect();
        assert_eq!(lens, [5000, 0], "{mtu:?}");
        let b = world.engines[1].mr_bytes(p.mr[1].lkey).unwrap();
        assert_eq!(&b[..10_000], &write[..], "{mtu:?}: WRITE");
        assert_eq!(&b[262144..267144], &send[..], "{mtu:?}: SEND");
        let a = world.engines[0].mr_bytes(p.mr[0].lkey).unwrap();
        assert_eq!(&a[196608..203608], &read[..], "{mtu:?}: READ");
        // Every data packet sealed at one end was opened at the other, none dropped.
        for h in 0..2 {
            assert_eq!(
                counter(&world, &p, h, "sealed"),
                counter(&world, &p, 1 - h, "opened"),
                "{mtu:?}"
            );
            assert_eq!(world.engines[h].counters().drops_service, 0);
        }
        // Segments are the path MTU less the nonce and tag: the WRITE alone takes this many.
        let segment = mtu.bytes() as usize - 24;
        let packets = 10_000usize.div_ceil(segment) + 5000usize.div_ceil(segment) + 1;
        assert_eq!(
            counter(&world, &p, 0, "sealed") as usize,
            packets,
            "{mtu:?}"
        );
    }
}

/// Two engines whose packets a test moves by hand, as whole IPv4 datagrams.
struct Wire {
    world: World,
    pair: Pair,
    buffer: Vec<u8>,
}

/// Where a WRITE ONLY's payload starts in its datagram: IPv4, UDP, BTH, RETH.
const PAYLOAD_AT: usize = 20 + 8 + 12 + 16;

impl Wire {
    fn new() -> Wire {
        let (world, pair) = setup(Mtu::M1024);
        Wire {
            world,
            pair,
            buffer: vec![0; 4096],
        }
    }

    /// Host `h`'s next packet as a datagram with a valid ICRC.
    fn next(&mut self, h: usize) -> Option<Vec<u8>> {
        let now = self.world.now;
        let t = self.world.engines[h].poll_transmit(now, &mut self.buffer)?;
        let payload = match self.world.engines[h].payload(t.payload_at, t.payload_len, &self.buffer)
        {
            Some(Payload::Bytes(b)) => b.to_vec(),
            other => panic!("a payload with bytes: {other:?}"),
        };
        Some(datagram(self.world.addrs[h], t.dst, &t.headers, &payload))
    }

    fn deliver(&mut self, to: usize, datagram: &[u8]) {
        let parsed = IpUdp::parse(datagram).unwrap();
        let roce = parsed.roce().expect("a valid ICRC");
        let now = self.world.now;
        self.world.engines[to].handle_packet(
            now,
            parsed.ip.src(),
            false,
            &roce.headers(),
            Payload::Bytes(roce.payload),
        );
    }

    fn landed(&self, len: usize) -> Vec<u8> {
        self.world.engines[1]
            .mr_bytes(self.pair.mr[1].lkey)
            .unwrap()[..len]
            .to_vec()
    }

    fn counter(&self, h: usize, name: &str) -> u64 {
        counter(&self.world, &self.pair, h, name)
    }
}

fn datagram(src: IpAddr, dst: IpAddr, headers: &RoceHeaders, payload: &[u8]) -> Vec<u8> {
    let ip = IpHeader::between(src, dst, 0);
    let udp = UdpHeader {
        src_port: 0xC000,
        dst_port: ROCE_V2_PORT,
    };
    let mut buf = vec![0; 4096 + 128];
    let n = emit_datagram(&ip, &udp, headers, payload, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn tampered_replayed_and_unkeyed_packets_are_dropped_counted_and_not_delivered() {
    let mut w = Wire::new();
    let data = pattern(512, 9);
    w.world.engines[0].mr_bytes_mut(w.pair.mr[0].lkey).unwrap()[..512].copy_from_slice(&data);
    let pair = w.pair;
    pair.post_write(&mut w.world, 1, 0, 512);
    let genuine = w.next(0).expect("the WRITE");
    assert_eq!(genuine.len(), PAYLOAD_AT + 8 + 512 + 16 + 4);
    assert!(
        !genuine
            .windows(32)
            .any(|s| data.windows(32).any(|d| d == s)),
        "in the clear"
    );
    let untouched = w.landed(512);

    // A flipped ciphertext bit and a flipped tag bit, the ICRC made valid again.
    let mut refused = 0;
    // Then a nonce bit and a bit of the RETH's address (the headers are bound).
    for at in [
        PAYLOAD_AT + 8 + 100,
        genuine.len() - 4 - 1,
        PAYLOAD_AT + 3,
        PAYLOAD_AT - 10,
    ] {
        let mut forged = genuine.clone();
        forged[at] ^= 0x10;
        icrc::write(&mut forged).unwrap();
        w.deliver(1, &forged);
        refused += 1;
        assert_eq!(w.counter(1, "dropped_forged"), refused);
        assert_eq!(w.world.engines[1].counters().drops_service, refused);
        assert_eq!(w.landed(512), untouched, "a forged packet delivered");
    }
    // The same WRITE from a peer without the key: its payload in the clear.
    let headers = IpUdp::parse(&genuine).unwrap().roce().unwrap().headers();
    let plain = datagram(w.world.addrs[0], w.world.addrs[1], &headers, &data);
    w.deliver(1, &plain);
    assert_eq!(w.counter(1, "dropped_forged"), refused + 1);
    // Nothing was answered: the responder never saw any of them.
    assert!(w.next(1).is_none());
    assert_eq!(w.landed(512), untouched);

    // The genuine packet lands and is acknowledged.
    w.deliver(1, &genuine);
    assert_eq!(w.landed(512), data);
    assert_eq!(w.counter(1, "opened"), 1);
    let ack = w.next(1).expect("an ACK");
    w.deliver(0, &ack);
    assert_eq!(
        Pair::completions(&mut w.world, 0, pair.send_cq[0])[0].status,
        WcStatus::Success
    );

    // Replayed after the memory changed: dropped by the stage, nothing written again.
    w.world.engines[1].mr_bytes_mut(pair.mr[1].lkey).unwrap()[..512].fill(0);
    w.deliver(1, &genuine);
    assert_eq!(w.counter(1, "dropped_replayed"), 1);
    assert_eq!(w.landed(512), vec![0; 512]);
    assert!(w.next(1).is_none(), "a replay is not even re-acknowledged");
}
