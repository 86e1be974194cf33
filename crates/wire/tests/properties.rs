//! Property tests: build-then-parse round trips for every opcode, IPv4 and IPv6, every pad
//! count and payload sizes 0..=4096; decoding arbitrary bytes never panics; the ICRC catches
//! every single-bit error in the bytes it covers and ignores the fields it masks.
//!
//! Replay a failure with `PROPTEST_CASES`/the seed proptest prints, e.g.
//! `PROPTEST_CASES=10000 cargo test -p sluice-wire --test properties`.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use sluice_wire::*;

fn arb_opcode() -> impl Strategy<Value = Opcode> {
    let all: Vec<Opcode> = Opcode::all().collect();
    proptest::sample::select(all)
}

fn arb_syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|c| Syndrome::Ack(Credits::from_code(c).unwrap())),
        (0u8..32).prop_map(|c| Syndrome::RnrNak(RnrTimer::from_code(c).unwrap())),
        (0u8..5).prop_map(|c| Syndrome::Nak(NakCode::from_code(c).unwrap())),
    ]
}

/// Extension headers with every field random, for exactly the set `headers`.
fn arb_ext(headers: HeaderSet) -> impl Strategy<Value = ExtHeaders> {
    (
        (any::<u32>(), 0u32..1 << 24),
        (any::<u64>(), any::<u32>(), any::<u32>()),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
        (arb_syndrome(), 0u32..1 << 24),
        (any::<u64>(), any::<u32>(), any::<u32>()),
        (any::<u8>(), any::<u64>()),
    )
        .prop_map(move |(deth, reth, atomic, aeth, (orig, imm, ieth), cc)| {
            let has = |h| headers.contains(h);
            ExtHeaders {
                deth: has(HeaderSet::DETH).then_some(Deth {
                    qkey: deth.0,
                    src_qp: deth.1,
                }),
                reth: has(HeaderSet::RETH).then_some(Reth {
                    va: reth.0,
                    rkey: reth.1,
                    dma_len: reth.2,
                }),
                atomic_eth: has(HeaderSet::ATOMIC_ETH).then_some(AtomicEth {
                    va: atomic.0,
                    rkey: atomic.1,
                    swap_add: atomic.2,
                    compare: atomic.3,
                }),
                aeth: has(HeaderSet::AETH).then_some(Aeth {
                    syndrome: aeth.0,
                    msn: aeth.1,
                }),
                atomic_ack_eth: has(HeaderSet::ATOMIC_ACK_ETH)
                    .then_some(AtomicAckEth { original: orig }),
                imm_dt: has(HeaderSet::IMM_DT).then_some(imm),
                ieth: has(HeaderSet::IETH).then_some(ieth),
                cc_control: has(HeaderSet::CC_CONTROL).then_some(CcControl {
                    kind: if (HOMA_GRANT_KIND..=HOMA_BUSY_KIND).contains(&cc.0) {
                        // Homa's kinds check every field: a random value is rarely one.
                        CcControlKind::Other(cc.0 | 0x80)
                    } else {
                        cc.0.into()
                    },
                    detail: 0,
                    // A path probe's reserved bytes are zero (an encoder refuses others).
                    value: if matches!(cc.0, PROBE_KIND | PROBE_REPLY_KIND) {
                        cc.1 & !0x0000_FFFF_0000_0000
                    } else {
                        cc.1
                    },
                }),
            }
        })
}

fn arb_bth(opcode: Opcode) -> impl Strategy<Value = Bth> {
    (
        any::<[bool; 5]>(),
        any::<u16>(),
        0u32..1 << 24,
        0u32..1 << 24,
    )
        .prop_map(move |(flags, pkey, dest_qp, psn)| Bth {
            opcode,
            solicited: flags[0],
            mig_req: flags[1],
            pad_count: 0,
            pkey,
            fecn: flags[2],
            becn: flags[3],
            dest_qp,
            ack_req: flags[4],
            psn: Psn::new(psn),
        })
}

/// No CCX half the time; otherwise any layout, INT with 0 to 5 hops whose queue lengths
/// are whole wire units (so that they round-trip exactly).
fn arb_ccx() -> impl Strategy<Value = Option<Ccx>> {
    let hop = (any::<u16>(), any::<u32>(), any::<u32>(), any::<u16>()).prop_map(
        |(qlen, tx_bytes, ts_ns, rate_100mbps)| IntHop {
            qlen_bytes: u32::from(qlen) * IntHop::QLEN_UNIT,
            tx_bytes,
            ts_ns,
            rate_100mbps,
        },
    );
    prop_oneof![
        2 => Just(None),
        1 => any::<(u64, Option<u64>)>().prop_map(|(tx_ns, echo_ns)| Some(Ccx::Timestamps { tx_ns, echo_ns })),
        1 => proptest::collection::vec(hop, 0..=MAX_INT_HOPS).prop_map(|hops| {
            let mut path = IntPath::default();
            hops.into_iter().for_each(|h| assert!(path.push(h)));
            Some(Ccx::Int(path))
        }),
        1 => any::<u64>().prop_map(|granted_total| Some(Ccx::Credit { granted_total })),
        1 => arb_declared().prop_map(Some),
    ]
}

/// A declared header (layout 4): up to three covered 8-byte fields then up to three variant
/// ones, every field random.
fn arb_declared() -> impl Strategy<Value = Ccx> {
    const NAMES: [&str; 6] = ["c0", "c1", "c2", "v0", "v1", "v2"];
    (any::<u8>(), 0u16..=3, 0u16..=3, any::<[u64; 6]>()).prop_map(
        |(id, covered, variant, values)| {
            let mut fields = Vec::new();
            for i in 0..covered + variant.max(u16::from(covered == 0)) {
                let coverage = if i < covered {
                    Coverage::Covered
                } else {
                    Coverage::Variant
                };
                let name = NAMES[usize::from(if i < covered { i } else { 3 + i - covered })];
                fields.push(FieldSpec::bytes(name, i * 8, 8, coverage));
            }
            let layout = DeclaredLayout::new(id, &fields).unwrap();
            let mut h = layout.empty();
            for (f, v) in fields.iter().zip(values) {
                h.set(layout.field(f.name).unwrap(), v);
            }
            Ccx::Declared(h)
        },
    )
}

fn arb_roce() -> impl Strategy<Value = (RoceHeaders, Vec<u8>)> {
    arb_opcode().prop_flat_map(|opcode| {
        let info = opcode.info().unwrap();
        let max_payload = if info.has_payload { 4096 } else { 0 };
        (
            arb_bth(opcode),
            arb_ccx(),
            arb_ext(info.headers),
            proptest::collection::vec(any::<u8>(), 0..=max_payload),
        )
            .prop_map(|(bth, ccx, ext, payload)| (RoceHeaders { bth, ccx, ext }, payload))
    })
}

/// Where the bytes of `roce`'s CCX that the ICRC masks lie in a datagram whose IP header is
/// `ip_len` bytes: an empty range without a CCX.
fn ccx_masked(ip_len: usize, roce: &RoceHeaders) -> std::ops::Range<usize> {
    let at = ip_len + UDP_HEADER_LEN + BTH_LEN;
    roce.ccx.map_or(at..at, |c| {
        at + c.layout().icrc_covered_len()..at + c.wire_len()
    })
}

fn arb_ip() -> impl Strategy<Value = IpHeader> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
            any::<u8>()
        )
            .prop_map(|(s, d, tos, identification, dont_fragment, ttl)| {
                IpHeader::V4(Ipv4Header {
                    src: Ipv4Addr::from(s),
                    dst: Ipv4Addr::from(d),
                    tos,
                    identification,
                    dont_fragment,
                    ttl,
                })
            }),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u8>(),
            0u32..1 << 20,
            any::<u8>()
        )
            .prop_map(|(s, d, traffic_class, flow_label, hop_limit)| {
                IpHeader::V6(Ipv6Header {
                    src: Ipv6Addr::from(s),
                    dst: Ipv6Addr::from(d),
                    traffic_class,
                    flow_label,
                    hop_limit,
                })
            }),
    ]
}

fn build(ip: &IpHeader, src_port: u16, roce: &RoceHeaders, payload: &[u8]) -> Vec<u8> {
    let udp = UdpHeader {
        src_port,
        dst_port: ROCE_V2_PORT,
    };
    let mut buf = vec![0u8; 8192];
    let n = emit_datagram(ip, &udp, roce, payload, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// An IPv4 header as Linux Soft-RoCE writes it: Don't Fragment, any identification.
fn arb_ipv4() -> impl Strategy<Value = Ipv4Header> {
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        any::<u16>(),
        any::<u8>(),
    )
        .prop_map(|(s, d, tos, identification, ttl)| Ipv4Header {
            src: Ipv4Addr::from(s),
            dst: Ipv4Addr::from(d),
            tos,
            identification,
            dont_fragment: true,
            ttl,
        })
}

/// What a receiver on a UDP socket has of an IPv4 datagram `bytes` sent with `sent`: the
/// headers rebuilt from the addresses, ports and length with identification 0 (and TOS, TTL
/// and checksums it cannot know, which the ICRC masks), and the UDP payload.
fn received_v4<'a>(sent: &Ipv4Header, src_port: u16, bytes: &'a [u8]) -> ([u8; 28], &'a [u8]) {
    let rebuilt = IpHeader::V4(Ipv4Header {
        identification: 0,
        tos: 0,
        ttl: 1,
        ..*sent
    });
    let udp = UdpHeader {
        src_port,
        dst_port: ROCE_V2_PORT,
    };
    let mut head = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
    rebuilt.emit(bytes.len(), &mut head).unwrap();
    udp.emit(bytes.len() - IPV4_HEADER_LEN, &mut head[IPV4_HEADER_LEN..])
        .unwrap();
    (head, &bytes[head.len()..])
}

/// The ICRC as carried in the last four bytes.
fn icrc_found(bytes: &[u8]) -> u32 {
    let at = bytes.len() - ICRC_LEN;
    u32::from_le_bytes(bytes[at..].try_into().unwrap())
}

/// A deterministic xorshift generator for the corruption counts below.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The identification solver on corrupted datagrams, 5,000 of each kind with a fixed seed:
/// a single flipped bit anywhere in the RoCE packet (ICRC included, the masked BTH byte 4
/// excluded) is always rejected (the solver guarantees it for datagrams up to 26,772 bytes);
/// a random run of 1 to 16 bytes overwritten is accepted with probability about 2^-16, so
/// about 0.08 times in 5,000: allow a handful.
#[test]
fn the_ipv4_id_solver_rejects_corrupted_datagrams() {
    let mut rng = Rng(0x5EED_1C2C_0000_0001);
    let mut solver = icrc::Ipv4IdSolver::new();
    let (mut bit_accepted, mut run_accepted) = (0, 0);
    for trial in 0..5000 {
        let h = Ipv4Header {
            src: Ipv4Addr::from(rng.next() as u32),
            dst: Ipv4Addr::from(rng.next() as u32),
            tos: rng.next() as u8,
            identification: rng.next() as u16,
            dont_fragment: true,
            ttl: 64,
        };
        let src_port = rng.next() as u16;
        let payload: Vec<u8> = (0..rng.below(4097)).map(|_| rng.next() as u8).collect();
        let roce = RoceHeaders {
            bth: Bth::new(Opcode::RC_RDMA_WRITE_MIDDLE, 0x11, Psn::new(trial)),
            ccx: None,
            ext: ExtHeaders::default(),
        };
        let sent = build(&IpHeader::V4(h), src_port, &roce, &payload);
        let roce_at = IPV4_HEADER_LEN + UDP_HEADER_LEN;
        let masked = roce_at + 4;

        let mut bytes = sent.clone();
        let bit = loop {
            let bit = roce_at * 8 + rng.below((bytes.len() - roce_at) * 8);
            if bit / 8 != masked {
                break bit;
            }
        };
        bytes[bit / 8] ^= 0x80 >> (bit % 8);
        let (head, udp_payload) = received_v4(&h, src_port, &bytes);
        // A flip that makes the packet malformed (TVer 1 without a CCX) is rejected too.
        if let Ok(computed) = icrc::compute_split(&head, udp_payload)
            && solver
                .solve(bytes.len(), computed, icrc_found(&bytes))
                .is_some()
        {
            bit_accepted += 1;
        }

        let mut bytes = sent;
        let (at, run) = loop {
            let run = 1 + rng.below(16);
            let at = roce_at + rng.below(bytes.len() - roce_at - run + 1);
            if (at, run) != (masked, 1) {
                break (at, run);
            }
        };
        let before = bytes[at..at + run].to_vec();
        let changed =
            |new: &[u8]| (at..at + run).any(|i| i != masked && new[i - at] != before[i - at]);
        let mut new = before.clone();
        while !changed(&new) {
            new.iter_mut().for_each(|b| *b = rng.next() as u8);
        }
        bytes[at..at + run].copy_from_slice(&new);
        let (head, udp_payload) = received_v4(&h, src_port, &bytes);
        // A flip that makes the packet malformed (TVer 1 without a CCX) is rejected too.
        if let Ok(computed) = icrc::compute_split(&head, udp_payload)
            && solver
                .solve(bytes.len(), computed, icrc_found(&bytes))
                .is_some()
        {
            run_accepted += 1;
        }
    }
    assert_eq!(bit_accepted, 0);
    assert!(
        run_accepted <= 3,
        "{run_accepted} of 5000 corrupted runs accepted"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A receiver that cannot see the IPv4 identification recovers exactly the one the sender
    /// wrote, from the ICRC computed with identification 0 and the one on the wire.
    #[test]
    fn the_ipv4_identification_is_recovered(h in arb_ipv4(), src_port: u16, (roce, payload) in arb_roce()) {
        let bytes = build(&IpHeader::V4(h), src_port, &roce, &payload);
        let (head, udp_payload) = received_v4(&h, src_port, &bytes);
        let computed = icrc::compute_split(&head, udp_payload).unwrap();
        let found = RocePacket::parse(udp_payload).unwrap().icrc;
        prop_assert_eq!(found, icrc_found(&bytes));
        let mut solver = icrc::Ipv4IdSolver::new();
        prop_assert_eq!(solver.solve(bytes.len(), computed, found), Some(h.identification));
        // Cached, the answer is the same.
        prop_assert_eq!(solver.solve(bytes.len(), computed, found), Some(h.identification));
    }

    /// The ICRC over headers and RoCE packet in two buffers is the ICRC over them joined.
    #[test]
    fn split_icrc_equals_whole(ip in arb_ip(), src_port: u16, (roce, payload) in arb_roce()) {
        let bytes = build(&ip, src_port, &roce, &payload);
        let at = ip.header_len() + UDP_HEADER_LEN;
        let whole = icrc::compute(&bytes).unwrap();
        prop_assert_eq!(whole, icrc_found(&bytes));
        prop_assert_eq!(icrc::compute_split(&bytes[..at], &bytes[at..]), Ok(whole));
    }

    #[test]
    fn datagram_round_trip(ip in arb_ip(), src_port: u16, (roce, payload) in arb_roce()) {
        let bytes = build(&ip, src_port, &roce, &payload);
        let datagram = IpUdp::parse(&bytes).unwrap();
        prop_assert_eq!(datagram.ip, ip);
        prop_assert_eq!(datagram.udp, UdpHeader { src_port, dst_port: ROCE_V2_PORT });
        let packet = datagram.roce().unwrap();
        prop_assert_eq!(packet.bth, Bth { pad_count: pad_for(payload.len()), ..roce.bth });
        prop_assert_eq!(packet.ccx, roce.ccx);
        prop_assert_eq!(packet.ext(), roce.ext);
        prop_assert_eq!(packet.headers(), RoceHeaders { bth: packet.bth, ..roce });
        prop_assert_eq!(packet.payload, &payload[..]);
        prop_assert_eq!(bytes.len() % 4, ip.header_len() % 4);
        if let IpHeader::V6(h) = ip {
            // The UDP checksum we wrote verifies.
            let udp = &bytes[IPV6_HEADER_LEN..];
            let mut zeroed = udp.to_vec();
            zeroed[6..8].fill(0);
            let sum = u16::from_be_bytes([udp[6], udp[7]]);
            prop_assert_eq!(udp6_checksum(&h.src, &h.dst, &zeroed), sum);
        }
    }

    /// Every payload size from 0 to 4096 bytes, so every pad count, on a fixed SEND.
    #[test]
    fn every_payload_size_and_pad(len in 0usize..=4096, v6: bool) {
        let ip = if v6 {
            IpHeader::V6(Ipv6Header { src: Ipv6Addr::LOCALHOST, dst: Ipv6Addr::LOCALHOST, traffic_class: 0, flow_label: 0, hop_limit: 64 })
        } else {
            IpHeader::V4(Ipv4Header { src: Ipv4Addr::LOCALHOST, dst: Ipv4Addr::LOCALHOST, tos: 0, identification: 0, dont_fragment: true, ttl: 64 })
        };
        let roce = RoceHeaders { bth: Bth::new(Opcode::RC_SEND_MIDDLE, 3, Psn::new(9)), ccx: None, ext: ExtHeaders::default() };
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let bytes = build(&ip, 0xC000, &roce, &payload);
        let packet = IpUdp::parse(&bytes).unwrap().roce().unwrap();
        prop_assert_eq!(usize::from(packet.bth.pad_count), (4 - len % 4) % 4);
        prop_assert_eq!(packet.payload, &payload[..]);
    }

    /// CRC-32 detects every single-bit error: flipping any covered bit makes the datagram
    /// fail, either as malformed or on its ICRC; never does it decode as valid.
    #[test]
    fn any_single_bit_flip_is_caught(ip in arb_ip(), (roce, payload) in arb_roce(), pick: proptest::sample::Index) {
        let mut bytes = build(&ip, 0xC123, &roce, &payload);
        let ip_len = ip.header_len();
        let masked: &[usize] = match ip {
            IpHeader::V4(_) => &[1, 8, 10, 11],
            IpHeader::V6(_) => &[0, 1, 2, 3, 7],
        };
        let bit = pick.index(bytes.len() * 8);
        let byte = bit / 8;
        let in_masked = masked.contains(&byte) || byte == ip_len + 6 || byte == ip_len + 7 || byte == ip_len + 8 + 4
            || ccx_masked(ip_len, &roce).contains(&byte);
        let v6_version_nibble = matches!(ip, IpHeader::V6(_)) && byte == 0 && bit % 8 < 4;
        prop_assume!(!in_masked || v6_version_nibble);
        bytes[byte] ^= 0x80 >> (bit % 8);
        let outcome = IpUdp::parse(&bytes).and_then(|d| d.roce().map(|_| ()));
        prop_assert!(outcome.is_err(), "bit {} flipped and still accepted", bit);
    }

    /// The fields the ICRC masks (the CCX's telemetry among them) can change on the way
    /// without invalidating it.
    #[test]
    fn masked_fields_are_ignored(ip in arb_ip(), (roce, payload) in arb_roce(), noise: [u8; 8], telemetry: [u8; 62]) {
        let mut bytes = build(&ip, 0xC123, &roce, &payload);
        let before = icrc::compute(&bytes).unwrap();
        let ip_len = ip.header_len();
        match ip {
            IpHeader::V4(_) => { bytes[1] = noise[0]; bytes[8] = noise[1]; bytes[10] = noise[2]; bytes[11] = noise[3]; }
            IpHeader::V6(_) => { bytes[0] = 0x60 | (noise[0] & 0x0F); bytes[1] = noise[1]; bytes[2] = noise[2]; bytes[3] = noise[3]; bytes[7] = noise[4]; }
        }
        bytes[ip_len + 6] = noise[5];
        bytes[ip_len + 7] = noise[6];
        bytes[ip_len + 12] = noise[7];
        let ccx = ccx_masked(ip_len, &roce);
        bytes[ccx.clone()].copy_from_slice(&telemetry[..ccx.len()]);
        prop_assert_eq!(icrc::compute(&bytes).unwrap(), before);
    }

    /// Arbitrary bytes never panic any decoder.
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = RocePacket::parse(&bytes);
        let _ = icrc::compute(&bytes);
        for at in [0, 20, 28, 48, bytes.len() / 2] {
            let at = at.min(bytes.len());
            let _ = icrc::compute_split(&bytes[..at], &bytes[at..]);
        }
        let _ = EthernetHeader::parse(&bytes);
        if let Ok(d) = IpUdp::parse(&bytes) {
            let _ = d.roce();
        }
        let _ = pcap::CaptureReader::new(&bytes[..]).map(|mut r| while let Ok(Some(_)) = r.next_record() {});
    }

    /// A valid BTH followed by random bytes: decoding never panics, and whatever it accepts
    /// re-encodes to the same structure.
    #[test]
    fn random_bodies_behind_valid_opcodes(opcode in arb_opcode(), tver in 0u8..=1, body in proptest::collection::vec(any::<u8>(), 0..128)) {
        let mut bytes = vec![opcode.0, tver, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 1];
        bytes.extend_from_slice(&body);
        if let Ok(p) = RocePacket::parse(&bytes) {
            let again = p.headers();
            let mut out = vec![0u8; bytes.len() + 8];
            let n = again.emit(p.payload, &mut out).unwrap();
            let q = RocePacket::parse(&out[..n]).unwrap();
            prop_assert_eq!(q.bth, p.bth);
            prop_assert_eq!(q.ccx, p.ccx);
            prop_assert_eq!(q.ext(), p.ext());
            prop_assert_eq!(q.payload, p.payload);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn psn_arithmetic(a in 0u32..1 << 24, n in 0u32..1 << 23) {
        let p = Psn::new(a);
        prop_assert_eq!(p.add(n).sub(n), p);
        prop_assert_eq!(p.distance_to(p.add(n)), n as i32);
        prop_assert_eq!(p.add(n).distance_to(p), -(n as i32));
        prop_assert_eq!(p.precedes(p.add(n)), n > 0);
        prop_assert!(p.add(n).is_within_window(p, n + 1));
        prop_assert!(!p.add(n).is_within_window(p, n));
    }
}
