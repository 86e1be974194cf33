//! Declared CC header layouts (SwCC's user-defined header): random declarations within the
//! 64-byte bound, random field values through encode and decode, whole packets through the
//! ICRC (covered bits caught, variant bits ignored), and one fixed layout re-expressed.
//!
//! Replay a failure with the seed proptest prints; more cases with
//! `PROPTEST_CASES=10000 cargo test -p sluice-wire --test ccx_declared`.

use std::net::Ipv4Addr;

use proptest::prelude::*;
use sluice_wire::*;

const NAMES: [&str; 12] = [
    "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "f11",
];

/// A valid random declaration: up to 12 fields of 1..=64 bits with random gaps, the covered
/// ones first, the variant ones from the byte after the last covered bit; fields that would
/// pass the 64-byte bound are left out.
fn arb_layout() -> impl Strategy<Value = DeclaredLayout> {
    (
        any::<u8>(),
        proptest::collection::vec((1u8..=64, 0u16..24, any::<bool>()), 1..12),
    )
        .prop_map(|(id, mut raw)| {
            raw.sort_by_key(|&(_, _, covered)| !covered);
            let mut fields = Vec::new();
            let mut at = 0u16;
            let mut in_variant = false;
            for (i, (bits, gap, covered)) in raw.into_iter().enumerate() {
                if !covered && !in_variant {
                    in_variant = true;
                    at = at.div_ceil(8) * 8;
                }
                let start = at + gap;
                if usize::from(start) + usize::from(bits) > DECLARED_BODY_MAX * 8 {
                    break;
                }
                let coverage = if covered {
                    Coverage::Covered
                } else {
                    Coverage::Variant
                };
                fields.push(FieldSpec::bits(NAMES[i], start, bits, coverage));
                at = start + u16::from(bits);
            }
            if fields.is_empty() {
                fields.push(FieldSpec::bits("f0", 0, 1, Coverage::Covered));
            }
            DeclaredLayout::new(id, &fields).expect("the generator builds valid layouts")
        })
}

fn build(roce: &RoceHeaders, payload: &[u8]) -> Vec<u8> {
    let ip = IpHeader::V4(Ipv4Header {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        tos: 0,
        identification: 7,
        dont_fragment: true,
        ttl: 64,
    });
    let mut buf = vec![0u8; 2048];
    let udp = UdpHeader {
        src_port: 0xC001,
        dst_port: ROCE_V2_PORT,
    };
    let n = emit_datagram(&ip, &udp, roce, payload, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

proptest! {
    /// Every field reads back what was written (its low bits), through the wire bytes.
    #[test]
    fn field_values_round_trip(layout in arb_layout(), values in proptest::collection::vec(any::<u64>(), 12)) {
        let mut h = layout.empty();
        for (f, v) in layout.fields().iter().zip(&values) {
            h.set(layout.field(f.name).unwrap(), *v);
        }
        let len = layout.tag().len as usize;
        prop_assert!(len <= CCX_MAX_LEN && len % 4 == 0);
        let mut buf = [0xEEu8; 80];
        prop_assert_eq!(Ccx::Declared(h).emit(&mut buf), Ok(len));
        prop_assert_eq!(buf[len], 0xEE, "nothing written past the header");
        let (back, n) = Ccx::parse(&buf).unwrap();
        prop_assert_eq!(n, len);
        let Ccx::Declared(back) = back else { panic!("layout changed") };
        prop_assert_eq!(back, h);
        prop_assert_eq!(back.tag(), layout.tag());
        for (f, v) in layout.fields().iter().zip(&values) {
            let mask = u64::MAX >> (64 - u32::from(f.bits));
            prop_assert_eq!(back.get(layout.field(f.name).unwrap()), v & mask, "field {}", f.name);
        }
    }

    /// In a whole packet, every covered bit of a declared header is protected by the ICRC
    /// and every variant bit may change in flight without invalidating it.
    #[test]
    fn icrc_covers_exactly_the_covered_prefix(layout in arb_layout(), value: u64, bit: proptest::sample::Index) {
        let mut h = layout.empty();
        for f in layout.fields() {
            h.set(layout.field(f.name).unwrap(), value);
        }
        let roce = RoceHeaders {
            bth: Bth::new(Opcode::RC_SEND_ONLY, 5, Psn::new(1)),
            ccx: Some(Ccx::Declared(h)),
            ext: ExtHeaders::default(),
        };
        let bytes = build(&roce, b"payload!");
        let at = 20 + UDP_HEADER_LEN + BTH_LEN;
        let (len, covered) = (layout.tag().len as usize, layout.tag().covered as usize);
        let b = bit.index(len * 8);
        let mut flipped = bytes.clone();
        flipped[at + b / 8] ^= 0x80 >> (b % 8);
        let outcome = IpUdp::parse(&flipped).and_then(|d| d.roce().map(|p| p.headers()));
        if b / 8 < covered {
            prop_assert!(outcome.is_err(), "covered bit {} flipped and accepted", b);
        } else {
            prop_assert!(outcome.is_ok(), "variant bit {} flipped and refused: {:?}", b, outcome);
        }
    }
}

/// The credit layout re-expressed as a declaration: one covered 64-bit total, so the same
/// length and coverage, and the same field bytes; only the layout byte (3 against 4) and
/// the declared id and coverage bytes in the first word differ.
#[test]
fn credit_re_expressed_has_the_fixed_layouts_bytes() {
    let declared = DeclaredLayout::new(
        3,
        &[FieldSpec::bytes("granted_total", 0, 8, Coverage::Covered)],
    )
    .unwrap();
    let total = 0x0102_0304_0506_0708;
    let mut h = declared.empty();
    h.set(declared.field("granted_total").unwrap(), total);
    let (mut fixed, mut ours) = ([0u8; 12], [0u8; 12]);
    Ccx::Credit {
        granted_total: total,
    }
    .emit(&mut fixed)
    .unwrap();
    Ccx::Declared(h).emit(&mut ours).unwrap();
    assert_eq!(fixed[4..], ours[4..]);
    assert_eq!(fixed[0], ours[0], "same length");
    assert_eq!(ours[..4], [3, LAYOUT_DECLARED, 3, 12]);
    let layout = declared.layout();
    assert_eq!(layout.wire_len(), CcxLayout::Credit.wire_len());
    assert_eq!(
        layout.icrc_covered_len(),
        CcxLayout::Credit.icrc_covered_len()
    );
}

/// A declared header whose coverage byte is outside 4..=length is malformed, and arbitrary
/// bytes after a declared first word never panic the decoder.
#[test]
fn malformed_declared_headers_are_refused() {
    let mut buf = [0u8; 64];
    buf[..4].copy_from_slice(&[2, LAYOUT_DECLARED, 1, 9]);
    assert!(matches!(Ccx::parse(&buf), Err(Error::BadCcx(_))));
    buf[3] = 3;
    assert!(matches!(Ccx::parse(&buf), Err(Error::BadCcx(_))));
    buf[3] = 8;
    assert!(Ccx::parse(&buf).is_ok());
    buf[0] = 17;
    assert!(matches!(Ccx::parse(&buf), Err(Error::BadCcx(_))));
    buf[0] = 16;
    assert!(matches!(
        Ccx::parse(&buf[..40]),
        Err(Error::Truncated { .. })
    ));
}
