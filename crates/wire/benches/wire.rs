//! Wire benchmarks: decode + ICRC verify and encode + ICRC compute per packet, for payloads
//! of 0, 256, 1024 and 4096 bytes; the IPv4 identification solver on a cached and on a new
//! datagram length; then the ICRC over a 4 KiB packet against a `memcpy` of the same size,
//! measured in the same run, printed as a ratio; and the ICRC of one packet as the device
//! computes it (an ACK, an 8-byte WRITE, a 4 KiB WRITE MIDDLE).
//!
//! `cargo bench -p sluice-wire --bench wire` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use sluice_wire::*;

const SIZES: [usize; 4] = [0, 256, 1024, 4096];

fn headers() -> (IpHeader, UdpHeader, RoceHeaders) {
    let ip = IpHeader::V4(Ipv4Header {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        tos: 0x6A,
        identification: 0,
        dont_fragment: true,
        ttl: 64,
    });
    let udp = UdpHeader {
        src_port: 0xC011,
        dst_port: ROCE_V2_PORT,
    };
    let roce = RoceHeaders {
        bth: Bth {
            ack_req: true,
            ..Bth::new(Opcode::RC_RDMA_WRITE_MIDDLE, 0x11, Psn::new(1000))
        },
        ccx: None,
        ext: ExtHeaders::default(),
    };
    (ip, udp, roce)
}

fn datagram(payload_len: usize) -> Vec<u8> {
    let (ip, udp, roce) = headers();
    let mut buf = vec![0u8; 8192];
    let n = emit_datagram(&ip, &udp, &roce, &vec![0xA5; payload_len], &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn bench_parse_verify(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_verify");
    for size in SIZES {
        let packet = datagram(size);
        group.throughput(Throughput::Bytes(packet.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &packet, |b, p| {
            b.iter(|| {
                let d = IpUdp::parse(black_box(p)).unwrap();
                black_box(d.roce().unwrap().bth.psn)
            })
        });
    }
    group.finish();
}

fn bench_build_icrc(c: &mut Criterion) {
    let mut group = c.benchmark_group("build_icrc");
    let (ip, udp, roce) = headers();
    let payload = vec![0xA5u8; 4096];
    let mut buf = vec![0u8; 8192];
    for size in SIZES {
        group.throughput(Throughput::Bytes(datagram(size).len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| {
                emit_datagram(
                    &ip,
                    &udp,
                    black_box(&roce),
                    black_box(&payload[..size]),
                    &mut buf,
                )
                .unwrap()
            })
        });
    }
    group.finish();
}

/// The IPv4 identification solver: one call on a length it has cached, and one on a length
/// it has not (eight lengths in turn through its four ways, so every call builds a system).
fn bench_ipv4_id_solve(c: &mut Criterion) {
    let mut group = c.benchmark_group("ipv4_id_solve");
    // (datagram length, ICRC computed with identification 0, ICRC on the wire)
    let case = |identification: u16, payload_len: usize| {
        let (ip, udp, roce) = headers();
        let IpHeader::V4(h) = ip else { unreachable!() };
        let ip = IpHeader::V4(Ipv4Header {
            identification,
            ..h
        });
        let mut buf = vec![0u8; 8192];
        let n = emit_datagram(&ip, &udp, &roce, &vec![0xA5; payload_len], &mut buf).unwrap();
        let found = icrc::compute(&buf[..n]).unwrap();
        buf[4..6].fill(0);
        let computed = icrc::compute(&buf[..n]).unwrap();
        let mut solver = icrc::Ipv4IdSolver::new();
        assert_eq!(solver.solve(n, computed, found), Some(identification));
        (n, computed, found)
    };
    let (len, computed, found) = case(0x1234, 4096);
    let mut solver = icrc::Ipv4IdSolver::new();
    group.bench_function("cached", |b| {
        b.iter(|| solver.solve(black_box(len), black_box(computed), black_box(found)))
    });
    let cases: Vec<_> = (0..8u16)
        .map(|i| case(0x1234 + i, 256 * usize::from(i)))
        .collect();
    let mut next = 0;
    group.bench_function("new_length", |b| {
        b.iter(|| {
            let (len, computed, found) = cases[next % cases.len()];
            next += 1;
            solver.solve(black_box(len), black_box(computed), black_box(found))
        })
    });
    group.finish();
}

/// Median time of one call of `f`, over `rounds` timed batches.
fn median_ns(rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut batch = 1u32;
    loop {
        let start = Instant::now();
        for _ in 0..batch {
            f();
        }
        if start.elapsed() > Duration::from_millis(20) {
            break;
        }
        batch *= 2;
    }
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(batch)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[rounds / 2]
}

/// The ICRC of a 4 KiB-payload packet against a memcpy of the same number of bytes, timed
/// alternately so that both see the same machine state.
fn icrc_vs_memcpy() {
    let packet = datagram(4096);
    let len = packet.len();
    let src = vec![0x5Au8; len];
    let mut dst = vec![0u8; len];
    let mut icrc_ns = Vec::new();
    let mut copy_ns = Vec::new();
    for _ in 0..5 {
        icrc_ns.push(median_ns(11, || {
            black_box(icrc::compute(black_box(&packet)).unwrap());
        }));
        copy_ns.push(median_ns(11, || {
            black_box(&mut dst).copy_from_slice(black_box(&src));
        }));
    }
    icrc_ns.sort_by(f64::total_cmp);
    copy_ns.sort_by(f64::total_cmp);
    let (icrc, copy) = (icrc_ns[2], copy_ns[2]);
    let gbps = |ns: f64| len as f64 / ns;
    println!("\nICRC vs memcpy, {len} bytes (median of 5 x 11 batches):");
    println!("  icrc::compute  {icrc:8.1} ns  {:6.2} GB/s", gbps(icrc));
    println!("  memcpy         {copy:8.1} ns  {:6.2} GB/s", gbps(copy));
    println!("  ratio (ICRC GB/s / memcpy GB/s): {:.2}x", copy / icrc);
}

/// The ICRC of one packet as the device computes it on both ends (`masked_ip_udp`, then
/// an `IcrcInput` over the packet's head, payload and tail where they lie) for the lengths
/// of an ACK, an 8-byte WRITE (a latency test's packets) and a 4 KiB WRITE MIDDLE: prepared
/// and hashed at once (`compute_parts`, a lone packet), and prepared one packet ahead of
/// its hashing (a batch, as the device does it). The headers are zeros, not those packets'
/// own: the ICRC's work depends on the lengths alone (and on TVer, 0 here: no CC extension
/// header).
fn icrc_per_packet() {
    let (src, dst) = (
        "10.0.0.1:49169".parse().unwrap(),
        "10.0.0.2:4791".parse().unwrap(),
    );
    let payload = vec![0xA5u8; 4096];
    println!("\nICRC per packet, as the device computes it (median of 11 batches):");
    println!("  {:28} {:>10} {:>14}", "", "at once", "one ahead");
    for (name, head_len, payload_len) in [
        ("ACK (BTH, AETH)", BTH_LEN + AETH_LEN, 0),
        ("WRITE ONLY 8 B (BTH, RETH)", BTH_LEN + 16, 8),
        ("WRITE MIDDLE 4 KiB", BTH_LEN, 4096),
    ] {
        let head = vec![0u8; head_len];
        let payload = &payload[..payload_len];
        let tail = [0u8; ICRC_LEN];
        let roce_len = head_len + payload_len + ICRC_LEN;
        let prepare = |input: &mut icrc::IcrcInput| {
            let mut ip_udp = [0u8; icrc::MAX_IP_UDP_LEN];
            let n = icrc::masked_ip_udp(src, dst, roce_len, 0, &mut ip_udp).unwrap();
            input
                .prepare(&ip_udp[..n], black_box(&head), black_box(payload), &tail)
                .unwrap();
        };
        let at_once = median_ns(11, || {
            let mut input = icrc::IcrcInput::new();
            prepare(&mut input);
            black_box(input.crc(&head, payload, &tail));
        });
        let mut inputs = [icrc::IcrcInput::new(), icrc::IcrcInput::new()];
        prepare(&mut inputs[0]);
        let mut k = 0;
        let ahead = median_ns(11, || {
            prepare(&mut inputs[(k + 1) % 2]);
            black_box(inputs[k % 2].crc(&head, payload, &tail));
            k += 1;
        });
        println!("  {name:28} {at_once:7.1} ns {ahead:11.1} ns");
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_parse_verify(&mut c);
    bench_build_icrc(&mut c);
    bench_ipv4_id_solve(&mut c);
    c.final_summary();
    icrc_vs_memcpy();
    icrc_per_packet();
}
