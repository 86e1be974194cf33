//! Arbitrary bytes as an IP datagram, a UDP payload and an Ethernet frame: no decoder may
//! panic, and whatever decodes must re-encode to the same structure.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::{EthernetHeader, IpUdp, PathProbeHeader, RocePacket, emit_datagram, icrc};

fn reencode(p: &RocePacket<'_>) {
    let headers = p.headers();
    // A path probe the decoder let through reads back as one (its reserved bytes were
    // checked on the raw header).
    if let Some(c) = headers.ext.cc_control {
        let probe = PathProbeHeader::from_control(&c).unwrap();
        if let Some(probe) = probe {
            assert_eq!(probe.control(), c);
        }
    }
    let mut out = vec![0u8; headers.wire_len(p.payload.len()).unwrap()];
    let n = headers.emit(p.payload, &mut out).unwrap();
    let again = RocePacket::parse(&out[..n]).unwrap();
    assert_eq!(
        (again.headers(), again.payload),
        (p.headers(), p.payload)
    );
}

/// Wraps `roce` (a would-be UDP payload) in IPv4 and UDP headers and fills in its ICRC, so
/// that the full receive path, ICRC check included, sees arbitrary RoCE content.
fn wrapped(roce: &[u8]) -> Option<Vec<u8>> {
    if roce.len() < 4 || roce.len() > 60_000 {
        return None;
    }
    let total = 28 + roce.len();
    let mut d = vec![0u8; total];
    d[0] = 0x45;
    d[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    d[6] = 0x40;
    d[8] = 64;
    d[9] = 17;
    let sum = sluice_wire::internet_checksum(&d[..20], 0);
    d[10..12].copy_from_slice(&sum.to_be_bytes());
    d[22..24].copy_from_slice(&sluice_wire::ROCE_V2_PORT.to_be_bytes());
    d[24..26].copy_from_slice(&((8 + roce.len()) as u16).to_be_bytes());
    d[28..].copy_from_slice(roce);
    icrc::write(&mut d).ok()?;
    Some(d)
}

fuzz_target!(|data: &[u8]| {
    if let Some(d) = wrapped(data) {
        let structural = RocePacket::parse(&d[28..]);
        let full = IpUdp::parse(&d).unwrap().roce();
        // With a correct ICRC, the full check agrees with the structural decode.
        assert_eq!(
            structural.map(|p| (p.bth, p.ext())),
            full.map(|p| (p.bth, p.ext()))
        );
    }
    if let Ok(p) = RocePacket::parse(data) {
        reencode(&p);
    }
    let _ = icrc::compute(data);
    let _ = EthernetHeader::parse(data);
    if let Ok(d) = IpUdp::parse(data) {
        if let Ok(p) = d.roce() {
            reencode(&p);
            // A valid datagram re-encodes to one that verifies too.
            let mut out = vec![0u8; d.packet().len() + 64];
            let n = emit_datagram(
                &d.ip,
                &d.udp,
                &p.headers(),
                p.payload,
                &mut out,
            )
            .unwrap();
            IpUdp::parse(&out[..n]).unwrap().roce().unwrap();
        }
    }
});
