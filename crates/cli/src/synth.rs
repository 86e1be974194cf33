//! `sluice pcap synth`: a deterministic capture holding every opcode, over IPv4 and IPv6,
//! with random header fields and payloads. For testing dissectors and checkers, ours and
//! others' (the conformance tests feed it to tshark and scapy).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sluice_core::Rng;
use sluice_wire::pcap::{PcapWriter, link_type};
use sluice_wire::*;

/// One generated frame and what was put in it.
#[derive(Debug, Clone)]
pub struct SynthPacket {
    /// 1-based frame number in the capture.
    pub frame: u64,
    /// The IP header (IPv4 or IPv6).
    pub ip: IpHeader,
    /// The UDP header.
    pub udp: UdpHeader,
    /// The RoCE headers, from the BTH on.
    pub roce: RoceHeaders,
    /// The payload length in bytes.
    pub payload_len: usize,
    /// True when a bit of this frame was flipped after the ICRC was computed.
    pub corrupted: bool,
}

/// The seed `sluice pcap synth` uses unless told otherwise.
pub const DEFAULT_SEED: u64 = 1;
/// Packets per opcode and IP version unless told otherwise.
pub const DEFAULT_PER_OPCODE: usize = 2;

/// Options for [`synthesize`].
#[derive(Debug, Clone, Copy)]
pub struct SynthOptions {
    /// Seeds every random choice; default [`DEFAULT_SEED`].
    pub seed: u64,
    /// Packets per opcode and IP version.
    pub per_opcode: usize,
    /// How many frames get one bit flipped in their RoCE part after the ICRC is computed.
    pub corrupt: usize,
    /// The UDP destination port; default 4791.
    pub port: u16,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            seed: DEFAULT_SEED,
            per_opcode: DEFAULT_PER_OPCODE,
            corrupt: 0,
            port: ROCE_V2_PORT,
        }
    }
}

fn random_roce(rng: &mut Rng, opcode: Opcode) -> (RoceHeaders, usize) {
    let info = opcode.info().expect("only table opcodes are generated");
    let h = info.headers;
    let syndrome = match rng.below(3) {
        0 => Syndrome::Ack(Credits::from_code(rng.below(32) as u8).unwrap()),
        1 => Syndrome::RnrNak(RnrTimer::from_code(rng.below(32) as u8).unwrap()),
        _ => Syndrome::Nak(NakCode::from_code(rng.below(5) as u8).unwrap()),
    };
    let mut r = |bits: u32| (rng.next_u64() & ((1u64 << bits) - 1)) as u32;
    let bth = Bth {
        opcode,
        solicited: r(1) == 1,
        mig_req: r(1) == 1,
        pad_count: 0,
        pkey: r(16) as u16,
        fecn: r(1) == 1,
        becn: r(1) == 1,
        dest_qp: r(24),
        ack_req: r(1) == 1,
        psn: Psn::new(r(24)),
    };
    let ext = ExtHeaders {
        deth: h.contains(HeaderSet::DETH).then(|| Deth {
            qkey: rng.next_u32(),
            src_qp: rng.next_u32() & 0xFF_FFFF,
        }),
        reth: h.contains(HeaderSet::RETH).then(|| Reth {
            va: rng.next_u64(),
            rkey: rng.next_u32(),
            dma_len: rng.next_u32(),
        }),
        atomic_eth: h.contains(HeaderSet::ATOMIC_ETH).then(|| AtomicEth {
            va: rng.next_u64() & !7,
            rkey: rng.next_u32(),
            swap_add: rng.next_u64(),
            compare: rng.next_u64(),
        }),
        aeth: h.contains(HeaderSet::AETH).then(|| Aeth {
            syndrome,
            msn: rng.next_u32() & 0xFF_FFFF,
        }),
        atomic_ack_eth: h.contains(HeaderSet::ATOMIC_ACK_ETH).then(|| AtomicAckEth {
            original: rng.next_u64(),
        }),
        imm_dt: h.contains(HeaderSet::IMM_DT).then(|| rng.next_u32()),
        ieth: h.contains(HeaderSet::IETH).then(|| rng.next_u32()),
        cc_control: None,
    };
    let payload_len = if !info.has_payload {
        0
    } else {
        match rng.below(4) {
            0 => rng.below(8) as usize,
            1 => [256, 1024, 4096][rng.below(3) as usize],
            _ => rng.below(4097) as usize,
        }
    };
    (
        RoceHeaders {
            bth,
            ccx: None,
            ext,
        },
        payload_len,
    )
}

/// Two endpoints exchanging packets: requests go from `a` to QP `qp_b` at `b`, responses
/// back to QP `qp_a` at `a`, each direction with its own PSN sequence.
#[derive(Debug, Clone)]
struct Connection {
    a: IpAddr,
    b: IpAddr,
    qp_a: u32,
    qp_b: u32,
    request_psn: Psn,
    response_psn: Psn,
}

impl Connection {
    fn random(rng: &mut Rng, index: u16, v6: bool) -> Connection {
        let (a, b) = if v6 {
            let host = |n: u16| IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, index, n));
            (host(1), host(2))
        } else {
            let host = |n: u8| IpAddr::V4(Ipv4Addr::new(10, 0, index as u8, n));
            (host(1), host(2))
        };
        // Start one connection just before the 2^24 wrap, so captures show it.
        let request_psn = if index == 0 {
            Psn::MAX.sub(5)
        } else {
            Psn::new(rng.next_u32())
        };
        Connection {
            a,
            b,
            qp_a: rng.next_u32() & 0xFF_FFFF,
            qp_b: rng.next_u32() & 0xFF_FFFF,
            request_psn,
            response_psn: Psn::new(rng.next_u32()),
        }
    }
}

fn ip_header(rng: &mut Rng, src: IpAddr, dst: IpAddr) -> IpHeader {
    // No ECN, ECT(0), DSCP 26 with ECT(0), DSCP 26 with CE: all masked by the ICRC.
    let tos = [0x00, 0x02, 0x6A, 0x6B][rng.below(4) as usize];
    match (src, dst) {
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpHeader::V6(Ipv6Header {
            src,
            dst,
            traffic_class: tos,
            flow_label: rng.next_u32() & 0xF_FFFF,
            hop_limit: 64,
        }),
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpHeader::V4(Ipv4Header {
            src,
            dst,
            tos,
            identification: 0,
            dont_fragment: true,
            ttl: 64,
        }),
        _ => unreachable!("a connection's endpoints share an IP version"),
    }
}

/// How many connections of each IP version a synthetic capture holds.
const CONNECTIONS_PER_VERSION: u16 = 2;

/// Writes a capture to `out` (Ethernet link type) and returns what each frame holds.
pub fn synthesize(out: impl Write, options: &SynthOptions) -> std::io::Result<Vec<SynthPacket>> {
    let mut rng = Rng::new(options.seed);
    let mut writer = PcapWriter::new(out, link_type::ETHERNET, 65_535)?;
    let mut plan = Vec::new();
    for _ in 0..options.per_opcode {
        for opcode in Opcode::standard() {
            for v6 in [false, true] {
                plan.push((opcode, v6));
            }
        }
    }
    let mut to_corrupt: Vec<usize> = Vec::new();
    while to_corrupt.len() < options.corrupt.min(plan.len()) {
        let i = rng.below(plan.len() as u64) as usize;
        if !to_corrupt.contains(&i) {
            to_corrupt.push(i);
        }
    }
    let mut connections: Vec<Connection> = (0..2 * CONNECTIONS_PER_VERSION)
        .map(|i| {
            Connection::random(
                &mut rng,
                i % CONNECTIONS_PER_VERSION,
                i >= CONNECTIONS_PER_VERSION,
            )
        })
        .collect();
    let mut frame = vec![0u8; ETHERNET_HEADER_LEN + 8192];
    let mut payload = vec![0u8; 4096];
    let mut packets = Vec::with_capacity(plan.len());
    for (i, (opcode, v6)) in plan.into_iter().enumerate() {
        let per_version = usize::from(CONNECTIONS_PER_VERSION);
        let pick = rng.below(per_version as u64) as usize + if v6 { per_version } else { 0 };
        let conn = &mut connections[pick];
        let (mut roce, payload_len) = random_roce(&mut rng, opcode);
        let (src, dst) = match roce.bth.opcode.info().map(|i| i.operation) {
            // A CNP goes back to the sender of the marked traffic; its PSN is no sequence.
            Some(Operation::Cnp) => {
                roce.bth.dest_qp = conn.qp_a;
                (conn.b, conn.a)
            }
            Some(
                Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse,
            ) => {
                roce.bth.dest_qp = conn.qp_a;
                roce.bth.psn = conn.response_psn;
                conn.response_psn = conn.response_psn.next();
                (conn.b, conn.a)
            }
            _ => {
                roce.bth.dest_qp = conn.qp_b;
                roce.bth.psn = conn.request_psn;
                conn.request_psn = conn.request_psn.next();
                (conn.a, conn.b)
            }
        };
        let ip = ip_header(&mut rng, src, dst);
        for b in &mut payload[..payload_len] {
            *b = rng.next_u64() as u8;
        }
        // Soft-RoCE's choice of source port: 0xC000 + a hash of the QPN.
        let udp = UdpHeader {
            src_port: 0xC000 | (roce.bth.dest_qp as u16 & 0x3FFF),
            dst_port: options.port,
        };
        let eth = EthernetHeader {
            dst: [0x02, 0, 0, 0, 0, 2],
            src: [0x02, 0, 0, 0, 0, 1],
            ethertype: if v6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 },
        };
        eth.emit(&mut frame)
            .expect("frame buffer holds an Ethernet header");
        let len = emit_datagram(
            &ip,
            &udp,
            &roce,
            &payload[..payload_len],
            &mut frame[ETHERNET_HEADER_LEN..],
        )
        .map_err(std::io::Error::other)?;
        let corrupted = to_corrupt.contains(&i);
        if corrupted {
            // Flip one bit of the BTH, headers or payload: nothing the ICRC masks.
            let roce_at = ETHERNET_HEADER_LEN + ip.header_len() + UDP_HEADER_LEN;
            let roce_len = len - ip.header_len() - UDP_HEADER_LEN - ICRC_LEN;
            let mut at = roce_at + rng.below(roce_len as u64) as usize;
            if at == roce_at + 4 {
                at += 1; // BTH byte 4 (FECN/BECN) is masked
            }
            frame[at] ^= 1 << rng.below(8);
        }
        writer.write(i as u64 * 1_000, &frame[..ETHERNET_HEADER_LEN + len])?;
        packets.push(SynthPacket {
            frame: i as u64 + 1,
            ip,
            udp,
            roce,
            payload_len,
            corrupted,
        });
    }
    writer.flush()?;
    Ok(packets)
}
