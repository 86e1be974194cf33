//! `sluice pcap check` on CC headers of a layout a law declared (CCX layout 4). Without the
//! declaration it checks what the packet itself says: the length (4..=64 bytes, within the
//! packet), the coverage byte (4..=the length), and the ICRC over the covered prefix with the
//! rest masked. A covered bit changed in flight fails; a variant field rewritten passes.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use sluice_wire::pcap::{PcapWriter, link_type};
use sluice_wire::*;

/// One Ethernet + IPv4 frame with a declared CCX holding `value` in every field.
fn frame(layout: &DeclaredLayout, value: u64, buf: &mut [u8]) -> usize {
    let ip = IpHeader::V4(Ipv4Header {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        tos: 0,
        identification: 0,
        dont_fragment: true,
        ttl: 64,
    });
    let eth = EthernetHeader {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        ethertype: ETHERTYPE_IPV4,
    };
    eth.emit(buf).unwrap();
    let mut h = layout.empty();
    for f in layout.fields() {
        h.set(layout.field(f.name).unwrap(), value);
    }
    let roce = RoceHeaders {
        bth: Bth::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(0)),
        ccx: Some(Ccx::Declared(h)),
        ext: ExtHeaders::default(),
    };
    let udp = UdpHeader {
        src_port: 0xC011,
        dst_port: ROCE_V2_PORT,
    };
    ETHERNET_HEADER_LEN
        + emit_datagram(&ip, &udp, &roce, &[7; 64], &mut buf[ETHERNET_HEADER_LEN..]).unwrap()
}

#[test]
fn declared_headers_are_checked_by_length_coverage_and_icrc() {
    let layout = DeclaredLayout::new(
        5,
        &[
            FieldSpec::bytes("delivered", 0, 8, Coverage::Covered),
            FieldSpec::bytes("sent_ns", 8, 8, Coverage::Variant),
        ],
    )
    .unwrap();
    // The CCX starts after Ethernet, IPv4, UDP and BTH.
    let ccx_at = ETHERNET_HEADER_LEN + 20 + UDP_HEADER_LEN + BTH_LEN;
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("declared.pcap");
    let mut w = PcapWriter::new(File::create(&path).unwrap(), link_type::ETHERNET, 65535).unwrap();
    let mut buf = [0u8; 256];
    let n = frame(&layout, 0x1234, &mut buf);
    // 1: as sent.
    w.write(0, &buf[..n]).unwrap();
    // 2: a bit of the covered field flipped in flight.
    let mut bad = buf;
    bad[ccx_at + 4] ^= 1;
    w.write(0, &bad[..n]).unwrap();
    // 3: the variant field rewritten in flight (as a driver moves a time).
    let mut moved = buf;
    moved[ccx_at + 12..ccx_at + 20].copy_from_slice(&[9; 8]);
    w.write(0, &moved[..n]).unwrap();
    // 4: a coverage byte below the first word.
    let mut uncovered = buf;
    uncovered[ccx_at + 3] = 2;
    w.write(0, &uncovered[..n]).unwrap();
    drop(w);

    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["pcap", "check", "--json", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["roce_packets"], 4);
    let problems: Vec<(u64, String)> = s["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["frame"].as_u64().unwrap(),
                p["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(problems[0], (2, "icrc".to_string()));
    assert_eq!(problems[1].0, 4);
}
