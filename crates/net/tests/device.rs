//! Devices over real UDP sockets on 127.0.0.1: data arrives byte-exact with the kernel's
//! segmentation offloads on and off, bad datagrams are dropped and counted, ICRCs computed
//! over a non-zero IPv4 identification (as Linux Soft-RoCE sends them) are accepted, and the
//! capture holds every packet with a valid ICRC.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use sluice_core::control::{Actions, Controller, Event, EventMask, Inline, Law, NoControl};
use sluice_core::{
    Access, Completion, Connection, CqId, Memory, MrInfo, Mtu, QpConfig, QpNum, SendOp, SendWr,
    Sge, WcStatus,
};
use sluice_net::{Capture, CaptureFilter, Device, DeviceConfig};
use sluice_wire::pcap::CaptureReader;
use sluice_wire::{
    Bth, ExtHeaders, IpHeader, IpUdp, Ipv4Header, Opcode, Psn, RoceHeaders, UdpHeader,
    emit_datagram,
};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const BASE: u64 = 0x40_0000;

struct End {
    dev: Device,
    mr: MrInfo,
    cq: CqId,
    qp: QpNum,
}

/// A device on `ip` (ephemeral port) with a `len`-byte region, a CQ and a QP; `None` when
/// the address cannot be bound here (no IPv6 loopback).
fn try_end(ip: IpAddr, len: usize, fill: impl Fn(usize) -> u8, offload: bool) -> Option<End> {
    try_end_controlled(ip, len, fill, offload, Box::new(NoControl))
}

fn try_end_controlled(
    ip: IpAddr,
    len: usize,
    fill: impl Fn(usize) -> u8,
    offload: bool,
    controller: Box<dyn Controller>,
) -> Option<End> {
    let mut config = DeviceConfig::new(ip);
    config.offload = offload;
    try_end_configured(config, len, fill, controller)
}

fn try_end_configured(
    config: DeviceConfig,
    len: usize,
    fill: impl Fn(usize) -> u8,
    controller: Box<dyn Controller>,
) -> Option<End> {
    let policies = sluice_core::Policies {
        controller,
        ..Default::default()
    };
    try_end_with_policies(config, len, fill, policies)
}

fn try_end_with_policies(
    mut config: DeviceConfig,
    len: usize,
    fill: impl Fn(usize) -> u8,
    policies: sluice_core::Policies,
) -> Option<End> {
    config.local.set_port(0);
    let mut dev = Device::open_with_policies(config, policies).ok()?;
    let e = dev.engine();
    let pd = e.alloc_pd();
    let bytes: Vec<u8> = (0..len).map(fill).collect();
    let mr = e
        .register_mr(
            pd,
            BASE,
            Memory::Bytes(bytes.into_boxed_slice()),
            Access::ALL,
        )
        .unwrap();
    let cq = e.create_cq(1024).unwrap();
    let qp = e
        .create_qp(QpConfig {
            pd,
            send_cq: cq,
            recv_cq: cq,
            caps: Default::default(),
        })
        .unwrap();
    Some(End { dev, mr, cq, qp })
}

/// Two connected ends on `ip`: A's region holds a pattern, B's zeroes.
fn try_pair(ip: IpAddr, len: usize, offload: bool, mtu: Mtu) -> Option<(End, End)> {
    let a = try_end(ip, len, |i| (i * 7 + 1) as u8, offload)?;
    let b = try_end(ip, len, |_| 0, offload)?;
    Some(connect(ip, a, b, mtu))
}

fn connect(ip: IpAddr, mut a: End, mut b: End, mtu: Mtu) -> (End, End) {
    a.dev.set_peer_port(b.dev.local_addr().port());
    b.dev.set_peer_port(a.dev.local_addr().port());
    let (aq, bq) = (a.qp, b.qp);
    a.dev
        .engine()
        .connect(
            aq,
            &Connection::new(ip, bq.0, mtu, Psn::new(7), Psn::new(0xFF_FFF0)),
        )
        .unwrap();
    b.dev
        .engine()
        .connect(
            bq,
            &Connection::new(ip, aq.0, mtu, Psn::new(0xFF_FFF0), Psn::new(7)),
        )
        .unwrap();
    (a, b)
}

fn pair(len: usize, offload: bool, mtu: Mtu) -> (End, End) {
    try_pair(LO, len, offload, mtu).expect("devices on 127.0.0.1")
}

/// Posts one request on A and pumps both ends until it completes.
fn run(a: &mut End, b: &mut End, wr_id: u64, op: SendOp, len: u32) -> Completion {
    let sge = [Sge {
        lkey: a.mr.lkey,
        addr: BASE,
        len,
    }];
    a.dev
        .engine()
        .post_send(a.qp, &SendWr::new(wr_id, op, &sge))
        .unwrap();
    complete(a, b)
}

/// Posts a `len`-byte WRITE from `from`'s region to `to`'s (both at `BASE`).
fn post_write(from: &mut End, to: &End, wr_id: u64, len: u32) {
    let sge = [Sge {
        lkey: from.mr.lkey,
        addr: BASE,
        len,
    }];
    let op = SendOp::Write {
        remote_addr: BASE,
        rkey: to.mr.rkey,
    };
    from.dev
        .engine()
        .post_send(from.qp, &SendWr::new(wr_id, op, &sge))
        .unwrap();
}

/// Polls `end` until it has received a datagram, for at most 5 s.
fn poll_until_received(end: &mut End) {
    let start = Instant::now();
    while end.dev.counters().rx_datagrams == 0 {
        end.dev.poll().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "nothing arrived in 5 s"
        );
    }
}

/// Polls `end` alone until it completes something, for at most `limit` (`what` says what
/// should have happened).
fn poll_until_completion(end: &mut End, limit: Duration, what: &str) -> Completion {
    let start = Instant::now();
    loop {
        end.dev.poll().unwrap();
        if let Some(c) = end.dev.engine().poll_cq(end.cq).unwrap() {
            return c;
        }
        assert!(start.elapsed() < limit, "{what}");
    }
}

/// Pumps both devices until `a` completes something, for at most 10 s.
fn complete(a: &mut End, b: &mut End) -> Completion {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        a.dev.poll().unwrap();
        b.dev.poll().unwrap();
        if let Some(c) = a.dev.engine().poll_cq(a.cq).unwrap() {
            return c;
        }
    }
    panic!("nothing completed in 10 s");
}

fn transfer(offload: bool) -> (End, End) {
    const LEN: usize = 1 << 20;
    let (mut a, mut b) = pair(LEN, offload, Mtu::M4096);
    // One 1 MiB WRITE (256 packets at MTU 4096: GSO batches when offload is on).
    let op = SendOp::Write {
        remote_addr: BASE,
        rkey: b.mr.rkey,
    };
    assert_eq!(
        run(&mut a, &mut b, 1, op, LEN as u32).status,
        WcStatus::Success
    );
    let (sent, landed) = (
        a.dev.engine().mr_bytes(a.mr.lkey).unwrap().to_vec(),
        b.dev.engine().mr_bytes(b.mr.lkey).unwrap(),
    );
    assert!(sent == landed, "the WRITE landed byte-exact");
    // And READ half of it back over a zeroed front.
    a.dev.engine().mr_bytes_mut(a.mr.lkey).unwrap()[..LEN / 2].fill(0);
    let op = SendOp::Read {
        remote_addr: BASE,
        rkey: b.mr.rkey,
    };
    let half = (LEN / 2) as u32;
    assert_eq!(run(&mut a, &mut b, 2, op, half).status, WcStatus::Success);
    assert!(a.dev.engine().mr_bytes(a.mr.lkey).unwrap()[..LEN / 2] == sent[..LEN / 2]);
    for d in [&a.dev, &b.dev] {
        assert_eq!(d.counters().rx_icrc_errors, 0);
        assert_eq!(d.counters().rx_malformed, 0);
    }
    (a, b)
}

#[test]
fn a_megabyte_arrives_byte_exact_with_offloads() {
    let (a, b) = transfer(true);
    let (gso, gro) = a.dev.offloads();
    eprintln!(
        "GSO {gso} GRO {gro}: a {:?}\nb {:?}",
        a.dev.counters(),
        b.dev.counters()
    );
    if gso {
        assert!(a.dev.counters().tx_gso_batches > 0, "GSO was used");
    }
    if gso && gro {
        // Segment k of a GSO batch has IPv4 identification k, and the ICRC was computed
        // for it: the receiver checks it so, without solving for one.
        assert!(b.dev.counters().rx_datagrams > b.dev.counters().rx_syscalls);
        assert_eq!(b.dev.counters().rx_ipv4_id_nonzero, 0);
    }
}

#[test]
fn a_megabyte_arrives_byte_exact_without_offloads() {
    let (a, b) = transfer(false);
    assert_eq!(a.dev.offloads(), (false, false));
    assert_eq!(a.dev.counters().tx_gso_batches, 0);
    // Single datagrams from an unconnected Don't-Fragment socket carry identification 0.
    assert_eq!(b.dev.counters().rx_ipv4_id_nonzero, 0);
    assert!(b.dev.counters().rx_datagrams >= 256);
}

/// A RoCE datagram for `dst`'s QP, as a peer whose kernel wrote IPv4 identification `id`
/// would have built it; returns the UDP payload (what a socket sends).
fn foreign_packet(from: SocketAddr, to: SocketAddr, qp: u32, id: u16) -> Vec<u8> {
    let ip = IpHeader::V4(Ipv4Header {
        src: Ipv4Addr::LOCALHOST,
        dst: Ipv4Addr::LOCALHOST,
        tos: 0,
        identification: id,
        dont_fragment: true,
        ttl: 64,
    });
    let udp = UdpHeader {
        src_port: from.port(),
        dst_port: to.port(),
    };
    let roce = RoceHeaders {
        bth: Bth::new(Opcode::RC_SEND_ONLY, qp, Psn::new(3)),
        ccx: None,
        ext: ExtHeaders::default(),
    };
    let mut buf = [0u8; 256];
    let n = emit_datagram(&ip, &udp, &roce, b"sixteen bytes!!!", &mut buf).unwrap();
    buf[28..n].to_vec()
}

#[test]
fn bad_datagrams_are_dropped_and_nonzero_identifications_accepted() {
    let (mut a, _b) = pair(4096, true, Mtu::M1024);
    let peer = UdpSocket::bind((LO, 0)).unwrap();
    let to = a.dev.local_addr();
    let from = peer.local_addr().unwrap();
    let send = |bytes: &[u8], a: &mut End| {
        peer.send_to(bytes, to).unwrap();
        let start = Instant::now();
        let before = a.dev.counters().rx_datagrams;
        while a.dev.counters().rx_datagrams == before {
            a.dev.poll().unwrap();
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the datagram arrived"
            );
        }
    };
    let qp = a.qp.0;

    // As Soft-RoCE sends it: the ICRC covers a non-zero identification.
    send(&foreign_packet(from, to, qp, 0xE496), &mut a);
    assert_eq!(a.dev.counters().rx_ipv4_id_nonzero, 1);
    assert_eq!(a.dev.counters().rx_icrc_errors, 0);
    // The datapath handed it to the engine.
    assert_eq!(a.dev.engine().counters().rx_packets, 1);

    // One bit flipped in the payload: no identification explains the ICRC.
    let mut bad = foreign_packet(from, to, qp, 0);
    bad[14] ^= 0x10;
    send(&bad, &mut a);
    assert_eq!(a.dev.counters().rx_icrc_errors, 1);

    // Not RoCE at all, and a truncated BTH.
    send(b"hello", &mut a);
    send(&foreign_packet(from, to, qp, 0)[..10], &mut a);
    assert_eq!(a.dev.counters().rx_malformed, 2);
    assert_eq!(
        a.dev.engine().counters().rx_packets,
        1,
        "nothing bad reached the engine"
    );
}

#[test]
fn the_capture_holds_every_packet_with_a_valid_icrc() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("device-capture.pcap");
    let (mut a, mut b) = pair(64 * 1024, true, Mtu::M1024);
    let now = a.dev.now();
    a.dev.set_capture(Some(
        Capture::create(&path, CaptureFilter::default(), 65535, now).unwrap(),
    ));
    for (i, op) in [
        SendOp::Write {
            remote_addr: BASE,
            rkey: b.mr.rkey,
        },
        SendOp::Read {
            remote_addr: BASE,
            rkey: b.mr.rkey,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let c = run(&mut a, &mut b, i as u64, op, 20_000);
        assert_eq!(c.status, WcStatus::Success);
    }
    let packets = a.dev.take_capture().unwrap().finish().unwrap();
    let sent = a.dev.counters().tx_datagrams;
    let received = a.dev.counters().rx_datagrams;
    assert_eq!(packets, sent + received, "every packet each way");
    let mut reader = CaptureReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut n = 0;
    while let Some(r) = reader.next_record().unwrap() {
        let d = IpUdp::parse(r.data).unwrap();
        d.roce().expect("a valid ICRC over the recorded headers");
        n += 1;
    }
    assert_eq!(n, packets);

    // A filter and a snap length: only READ responses received, cut to 100 bytes.
    let filter = CaptureFilter::parse("rx,op=read").unwrap();
    assert_eq!(filter.sent, Some(false));
    let path = dir.join("device-capture-filtered.pcap");
    let now = a.dev.now();
    a.dev
        .set_capture(Some(Capture::create(&path, filter, 100, now).unwrap()));
    let read = SendOp::Read {
        remote_addr: BASE,
        rkey: b.mr.rkey,
    };
    assert_eq!(
        run(&mut a, &mut b, 7, read, 20_000).status,
        WcStatus::Success
    );
    let kept = a.dev.take_capture().unwrap().finish().unwrap();
    // 20,000 bytes at MTU 1024: 20 READ responses (First, 18 Middle, Last).
    assert_eq!(kept, 20);
    let mut reader = CaptureReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut n = 0;
    while let Some(r) = reader.next_record().unwrap() {
        assert_eq!(r.data.len(), 100, "cut to the snap length");
        assert!(r.orig_len > 100, "with the true length recorded");
        // The BTH opcode, after the 20-byte IPv4 and 8-byte UDP headers.
        let op = Opcode(r.data[28]);
        assert_eq!(
            op.info().unwrap().operation,
            sluice_wire::Operation::RdmaReadResponse
        );
        n += 1;
    }
    assert_eq!(n, 20);

    assert!(CaptureFilter::parse("op=teleport").is_err());
    assert!(CaptureFilter::parse("qp=0x1000000").is_err());
    assert!(CaptureFilter::parse("sideways").is_err());
}

#[test]
fn ipv6_carries_the_same_traffic() {
    let v6 = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    let Some((mut a, mut b)) = try_pair(v6, 50_000, true, Mtu::M2048) else {
        eprintln!("SKIPPED: no IPv6 loopback here");
        return;
    };
    let op = SendOp::Write {
        remote_addr: BASE,
        rkey: b.mr.rkey,
    };
    assert_eq!(run(&mut a, &mut b, 9, op, 50_000).status, WcStatus::Success);
    let sent = a.dev.engine().mr_bytes(a.mr.lkey).unwrap().to_vec();
    assert!(b.dev.engine().mr_bytes(b.mr.lkey).unwrap() == sent);
    assert_eq!(b.dev.counters().rx_icrc_errors, 0);
    assert_eq!(b.dev.counters().rx_ipv4_id_nonzero, 0);
}

#[test]
fn flush_sends_the_ack_owed_for_what_was_received() {
    let (mut a, mut b) = pair(4096, true, Mtu::M1024);
    post_write(&mut a, &b, 5, 100);
    a.dev.flush().unwrap();
    // B takes the WRITE in, flushes, and then goes quiet for good.
    poll_until_received(&mut b);
    b.dev.flush().unwrap();
    // A completes from B's ACK alone, well before its retransmit timeout (67 ms) could
    // have resent the WRITE.
    let c = poll_until_completion(&mut a, Duration::from_millis(50), "the ACK was flushed");
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(a.dev.engine().counters().retransmitted_packets, 0);
}

#[test]
fn waiting_takes_in_what_arrives_and_ends_at_the_timeout() {
    let (mut a, mut b) = pair(4096, true, Mtu::M1024);
    // Nothing to send, no timer: B sleeps in its receive until its timeout.
    let start = Instant::now();
    b.dev.wait(Some(Duration::from_millis(20))).unwrap();
    let slept = start.elapsed();
    assert!(slept >= Duration::from_millis(20), "woke early: {slept:?}");
    assert!(slept < Duration::from_millis(500), "woke late: {slept:?}");
    // A short wait keeps to its time (a receive timeout would run to a scheduler tick, 4 ms
    // at 250 Hz): the best of five waits of 1 ms.
    let best = (0..5)
        .map(|_| {
            let start = Instant::now();
            b.dev.wait(Some(Duration::from_millis(1))).unwrap();
            start.elapsed()
        })
        .min()
        .unwrap();
    assert!(best >= Duration::from_millis(1), "woke early: {best:?}");
    assert!(best < Duration::from_micros(3500), "woke late: {best:?}");
    // A WRITE from A wakes it, and B's engine has taken it in before any poll.
    post_write(&mut a, &b, 5, 100);
    a.dev.flush().unwrap();
    let start = Instant::now();
    b.dev.wait(Some(Duration::from_secs(5))).unwrap();
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(b.dev.counters().rx_datagrams, 1);
    let landed = &b.dev.engine().mr_bytes(b.mr.lkey).unwrap()[..100];
    assert_eq!(landed, &a.dev.engine().mr_bytes(a.mr.lkey).unwrap()[..100]);
    // Its ACK leaves at the next poll.
    b.dev.flush().unwrap();
    assert_eq!(complete(&mut a, &mut b).status, WcStatus::Success);
}

/// A queue pair held back by a pacing scheduler wakes a sleeping device when it may send
/// again: `wait` sleeps until the scheduler's `next_transmit_at`, not until a datagram or
/// the retransmit timer (67 ms here) comes.
#[test]
fn a_paced_queue_pair_wakes_the_device_when_it_may_send() {
    let paced = |ip| {
        let pacing = sluice_core::policy::Pacing {
            link: Some(1_000_000_000),
            ..Default::default()
        };
        let policies = sluice_core::Policies {
            scheduler: Box::new(sluice_core::policy::StaticShare::new(pacing)),
            ..Default::default()
        };
        try_end_with_policies(DeviceConfig::new(ip), 1 << 16, |_| 7, policies)
            .expect("a device on 127.0.0.1")
    };
    let (mut a, mut b) = connect(LO, paced(LO), paced(LO), Mtu::M1024);
    // 64 KiB at 1 Gbit/s: 16 KiB of bucket at once, then a packet about every 8 us.
    post_write(&mut a, &b, 1, 1 << 16);
    a.dev.flush().unwrap();
    let sent = a.dev.counters().tx_datagrams;
    assert!(
        a.dev.engine_ref().next_transmit_at().is_some(),
        "the scheduler holds the rest back"
    );
    // B does not answer: nothing but the scheduler can wake A.
    let start = Instant::now();
    a.dev.wait(Some(Duration::from_secs(1))).unwrap();
    let slept = start.elapsed();
    assert!(slept < Duration::from_millis(20), "slept {slept:?}");
    a.dev.flush().unwrap();
    assert!(
        a.dev.counters().tx_datagrams > sent,
        "sent more after the wait"
    );
    assert_eq!(complete(&mut a, &mut b).status, WcStatus::Success);
}

#[test]
fn a_reply_leaves_before_the_ack_it_travels_with() {
    // B owes A an ACK when it posts its own WRITE: both leave in one GSO send, the WRITE
    // first, so that A (in a ping-pong, asleep waiting for it) wakes to the WRITE and gets
    // the ACK of its own WRITE in the same datagram (on this host, where GRO keeps them
    // together; elsewhere the kernel splits them).
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("device-reply-first.pcap");
    let (mut a, mut b) = pair(4096, true, Mtu::M1024);
    let (gso, gro) = b.dev.offloads();
    post_write(&mut a, &b, 1, 8);
    a.dev.flush().unwrap();
    poll_until_received(&mut b);
    let now = b.dev.now();
    let filter = CaptureFilter::parse("tx").unwrap();
    b.dev
        .set_capture(Some(Capture::create(&path, filter, 65535, now).unwrap()));
    b.dev.engine().mr_bytes_mut(b.mr.lkey).unwrap()[..8].fill(0xAB);
    post_write(&mut b, &a, 2, 8);
    let before = *b.dev.counters();
    b.dev.poll().unwrap();
    let after = *b.dev.counters();
    assert_eq!(after.tx_syscalls - before.tx_syscalls, 1);
    assert_eq!(after.tx_datagrams - before.tx_datagrams, 2);
    if gso {
        assert_eq!(after.tx_gso_batches - before.tx_gso_batches, 1, "one send");
    }
    assert_eq!(b.dev.take_capture().unwrap().finish().unwrap(), 2);
    // A takes both in: its WRITE completes, B's lands, both ICRCs check.
    let c = poll_until_completion(&mut a, Duration::from_secs(5), "A's WRITE completes");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    assert_eq!(a.dev.counters().rx_datagrams, 2);
    assert_eq!(a.dev.counters().rx_icrc_errors, 0);
    if gso && gro {
        assert_eq!(
            a.dev.counters().rx_ipv4_id_nonzero,
            0,
            "the ACK checked as segment 1"
        );
    }
    assert_eq!(a.dev.engine().mr_bytes(a.mr.lkey).unwrap()[..8], [0xAB; 8]);
    assert_eq!(a.dev.engine().counters().retransmitted_packets, 0);
    let mut reader = CaptureReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut opcodes = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        // The BTH opcode, after the 20-byte IPv4 and 8-byte UDP headers.
        opcodes.push(Opcode(r.data[28]));
    }
    assert_eq!(
        opcodes,
        [Opcode::RC_RDMA_WRITE_ONLY, Opcode::RC_ACKNOWLEDGE],
        "{:?}",
        opcodes.iter().map(|o| o.name()).collect::<Vec<_>>()
    );
}

#[test]
fn an_ack_after_a_reply_with_a_short_end_travels_with_that_end() {
    // B's reply is one packet longer than the MTU: a full packet and a 1-byte one. The ACK
    // B owes cannot follow the short one in the reply's GSO batch, so the short one leaves
    // the batch and the ACK joins it: the last datagram A reads holds the reply's end and
    // the ACK of A's WRITE, which a ping-pong peer needs both of before it answers.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("device-short-end.pcap");
    let (mut a, mut b) = pair(4096, true, Mtu::M1024);
    let (gso, gro) = b.dev.offloads();
    post_write(&mut a, &b, 1, 8);
    a.dev.flush().unwrap();
    poll_until_received(&mut b);
    let now = b.dev.now();
    let filter = CaptureFilter::parse("tx").unwrap();
    b.dev
        .set_capture(Some(Capture::create(&path, filter, 65535, now).unwrap()));
    b.dev.engine().mr_bytes_mut(b.mr.lkey).unwrap()[..1025].fill(0xCD);
    post_write(&mut b, &a, 2, 1025);
    let before = *b.dev.counters();
    b.dev.poll().unwrap();
    let after = *b.dev.counters();
    assert_eq!(after.tx_syscalls - before.tx_syscalls, 1, "one sendmmsg");
    assert_eq!(after.tx_datagrams - before.tx_datagrams, 3);
    if gso {
        // The full packet alone, then the short one and the ACK as one batch.
        assert_eq!(after.tx_gso_batches - before.tx_gso_batches, 1);
    }
    assert_eq!(b.dev.take_capture().unwrap().finish().unwrap(), 3);
    let c = poll_until_completion(&mut a, Duration::from_secs(5), "A's WRITE completes");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    let start = Instant::now();
    while a.dev.counters().rx_datagrams < 3 {
        a.dev.poll().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "B's reply arrives"
        );
    }
    assert_eq!(a.dev.counters().rx_icrc_errors, 0);
    if gso && gro {
        assert_eq!(
            a.dev.counters().rx_ipv4_id_nonzero,
            0,
            "the short end checked as segment 0 of its batch, the ACK as segment 1"
        );
    }
    assert_eq!(
        a.dev.engine().mr_bytes(a.mr.lkey).unwrap()[..1025],
        [0xCD; 1025]
    );
    assert_eq!(a.dev.engine().counters().retransmitted_packets, 0);
    let mut reader = CaptureReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let (mut opcodes, mut ids) = (Vec::new(), Vec::new());
    while let Some(r) = reader.next_record().unwrap() {
        opcodes.push(Opcode(r.data[28]));
        // The IPv4 identification: the packet's segment number in its GSO batch.
        ids.push(u16::from_be_bytes([r.data[4], r.data[5]]));
    }
    if gso {
        // The full packet alone, then the short end as segment 0 and the ACK as segment 1
        // of one batch (unsplit: the end was segment 1 and the ACK a datagram alone).
        assert_eq!(ids, [0, 0, 1], "IPv4 identifications");
    }
    assert_eq!(
        opcodes,
        [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_LAST,
            Opcode::RC_ACKNOWLEDGE
        ],
        "{opcodes:?}"
    );
}

/// Records the RTT sample of every ACK.
#[derive(Debug)]
struct RttRecorder(std::sync::Arc<std::sync::Mutex<Vec<Duration>>>);

impl Law for RttRecorder {
    type Context = ();

    fn name(&self) -> &'static str {
        "rtt-recorder"
    }

    fn interest(&self) -> EventMask {
        EventMask::ALL
    }

    fn on_event(&mut self, _: sluice_core::Instant, _: &mut (), event: &Event, _: &mut Actions) {
        if let Event::Ack { rtt: Some(rtt), .. } = event {
            self.0.lock().unwrap().push(*rtt);
        }
    }
}

#[test]
fn rtt_samples_leave_out_the_time_packets_wait_to_be_read() {
    // A sends a WRITE; B reads it 30 ms later and answers 30 ms after that; A reads the
    // ACK 30 ms later. With the kernel's receive timestamps (both ends) and the echo that
    // B advances by its hold, A's sample is the kernel's round trip, not the 90 ms.
    const NAP: Duration = Duration::from_millis(30);
    let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let law = Box::new(Inline::new(RttRecorder(samples.clone())));
    let a = try_end_controlled(LO, 4096, |i| i as u8, true, law).unwrap();
    let b = try_end(LO, 4096, |_| 0, true).unwrap();
    let (mut a, mut b) = connect(LO, a, b, Mtu::M1024);
    let layout = Some(sluice_wire::CcxLayout::Timestamps);
    let (aq, bq) = (a.qp, b.qp);
    a.dev.engine().set_ccx(aq, layout).unwrap();
    b.dev.engine().set_ccx(bq, layout).unwrap();
    // Linux turns receive timestamping on a moment after the first socket asks (deferred
    // work); until then it stamps at read time. One exchange first lets that happen.
    let op = SendOp::Write {
        remote_addr: BASE,
        rkey: b.mr.rkey,
    };
    assert_eq!(run(&mut a, &mut b, 0, op, 100).status, WcStatus::Success);
    std::thread::sleep(NAP);
    samples.lock().unwrap().clear();
    post_write(&mut a, &b, 1, 100);
    a.dev.poll().unwrap();
    std::thread::sleep(NAP);
    let before = b.dev.counters().rx_datagrams;
    b.dev.poll().unwrap(); // reads the WRITE
    assert_eq!(b.dev.counters().rx_datagrams, before + 1);
    std::thread::sleep(NAP);
    b.dev.poll().unwrap(); // sends the ACK
    std::thread::sleep(NAP);
    a.dev.poll().unwrap(); // reads the ACK
    let c = a
        .dev
        .engine()
        .poll_cq(a.cq)
        .unwrap()
        .expect("the WRITE completed");
    assert_eq!(c.status, WcStatus::Success);
    let samples = samples.lock().unwrap().clone();
    assert_eq!(samples.len(), 1, "{samples:?}");
    // Generous for a loaded machine, and far below any of the three naps.
    assert!(samples[0] < Duration::from_millis(10), "{samples:?}");
}

/// Moves its queue pair to the path (UDP source port) it was made with, at start.
#[derive(Debug, Clone, Copy)]
struct FixedPath(u16);

impl Law for FixedPath {
    type Context = ();

    fn name(&self) -> &'static str {
        "fixed-path"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[sluice_core::control::EventKind::Start])
    }

    fn on_event(&mut self, _: sluice_core::Instant, _: &mut (), _: &Event, act: &mut Actions) {
        act.set_path(self.0);
    }
}

/// The UDP source ports of the packets `end` sent while it ran one 64 KiB WRITE, read from
/// its capture (each with a valid ICRC over the recorded headers).
fn source_ports_of_a_write(a: &mut End, b: &mut End, name: &str) -> Vec<u16> {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let filter = CaptureFilter::parse("tx").unwrap();
    let now = a.dev.now();
    a.dev
        .set_capture(Some(Capture::create(&path, filter, 65535, now).unwrap()));
    let write = SendOp::Write {
        remote_addr: BASE,
        rkey: b.mr.rkey,
    };
    assert_eq!(run(a, b, 1, write, 64 * 1024).status, WcStatus::Success);
    a.dev.take_capture().unwrap().finish().unwrap();
    let mut reader = CaptureReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut ports = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        let d = IpUdp::parse(r.data).unwrap();
        d.roce().expect("a valid ICRC over the recorded headers");
        ports.push(d.udp.src_port);
    }
    ports
}

#[test]
fn a_queue_pair_leaves_from_the_source_socket_of_its_path() {
    let sources = |e: &End| -> Vec<u16> { e.dev.source_addrs().map(|a| a.port()).collect() };
    let end = |controller: Box<dyn Controller>, fill: u8| {
        let mut config = DeviceConfig::new(LO);
        config.source_sockets = 16;
        try_end_configured(config, 64 * 1024, |i| i as u8 & fill, controller).unwrap()
    };
    // Without a law: the engine's hash of the QP number picks one of the 16 source sockets,
    // not the receive port, and every packet of the QP leaves from it.
    let (mut a, mut b) = connect(
        LO,
        end(Box::new(NoControl), 0xFF),
        end(Box::new(NoControl), 0),
        Mtu::M1024,
    );
    let own = sources(&a);
    assert_eq!(own.len(), 17, "the receive port and 16 source sockets");
    let ports = source_ports_of_a_write(&mut a, &mut b, "device-source-ports.pcap");
    assert_eq!(ports.len(), 64);
    assert!(ports.iter().all(|&p| p == ports[0]), "{ports:?}");
    assert!(own[1..].contains(&ports[0]), "{} not in {own:?}", ports[0]);
    // The per-source count says the same: every packet A sent left from that one socket.
    let counted: Vec<(u16, u64)> = a
        .dev
        .packets_by_source()
        .filter(|&(_, n)| n > 0)
        .map(|(addr, n)| (addr.port(), n))
        .collect();
    assert_eq!(counted, [(ports[0], 64)]);

    // A law's path p is source socket p mod 16: the peer checks the ICRC over that port.
    for (path, socket) in [(16 * 3 + 5, 5usize), (2, 2)] {
        let law = Box::new(Inline::new(FixedPath(path)));
        let (mut a, mut b) = connect(LO, end(law, 0xFF), end(Box::new(NoControl), 0), Mtu::M1024);
        let ports = source_ports_of_a_write(&mut a, &mut b, "device-source-ports-law.pcap");
        let want = sources(&a)[1 + socket];
        assert!(ports.iter().all(|&p| p == want), "path {path}: {ports:?}");
        let by_source: Vec<u64> = a.dev.packets_by_source().map(|(_, n)| n).collect();
        assert_eq!(by_source[1 + socket], 64, "path {path}: {by_source:?}");
        assert_eq!(
            by_source.iter().sum::<u64>(),
            64,
            "path {path}: {by_source:?}"
        );
        assert_eq!(b.dev.counters().rx_icrc_errors, 0);
    }

    // By default (no source sockets) everything leaves from the receive port.
    let mut config = DeviceConfig::new(LO);
    config.local.set_port(0);
    let dev = Device::open(config).unwrap();
    assert_eq!(dev.source_addrs().count(), 1);
}
