//! A CC extension header layout that a control law declares itself (SwCC's user-defined
//! `PktHeader`): named fields of any width from 1 to 64 bits, each either covered by the
//! ICRC or variant (masked, like the timestamp and INT layouts' times and records, because
//! something on the way may rewrite it).
//!
//! On the wire it is CCX layout 4:
//!
//! ```text
//!  byte 0: length in 4-byte words, this word included (as every CCX)
//!  byte 1: 4 (declared)
//!  byte 2: the layout's id, chosen by the law
//!  byte 3: how many bytes from the start of the CCX the ICRC covers (4..=length)
//!  4..   : the fields, big-endian, at the bit offsets the declaration gives
//! ```
//!
//! The ICRC model is the fixed layouts' one: a covered prefix, the rest masked. So every
//! covered field must lie before every variant one; a declaration that puts a variant field
//! among covered bytes is refused ([`DeclareError::VariantInCovered`]). The first word (with
//! the id and the coverage byte) is always covered: nobody may move the boundary in flight.
//!
//! Both ends must agree on the declaration. A packet carries only the id, the length and the
//! coverage; the negotiation exchanges a [`LayoutOffer`] (the id and a hash of the whole
//! declaration: names, offsets, widths, coverage), and [`DeclaredLayout::agree`] refuses a
//! peer whose offer differs ([`DeclareError::NotAgreed`]).

use std::fmt;

use crate::ccx::CCX_MAX_LEN;

/// CCX layout number (byte 1) of a declared layout.
pub const LAYOUT_DECLARED: u8 = 4;

/// The most bytes of fields a declared layout holds (the 64-byte bound less its first word).
pub const DECLARED_BODY_MAX: usize = CCX_MAX_LEN - 4;

/// Whether the ICRC covers a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coverage {
    /// Covered: nothing on the way may change it (a credit total, a law's own stamp).
    Covered,
    /// Masked: a switch or a driver may rewrite it in flight (a time, a telemetry record).
    Variant,
}

/// One field of a declaration: where it sits in the layout's body (the bytes after the
/// CCX's first word), in bits from the most significant bit of the body's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldSpec {
    /// The field's name, unique in its layout.
    pub name: &'static str,
    /// Offset of the field's most significant bit, in bits from the start of the body.
    pub bit_offset: u16,
    /// Width in bits, 1..=64.
    pub bits: u8,
    /// Whether the ICRC covers it.
    pub coverage: Coverage,
}

impl FieldSpec {
    /// A field of `bytes` whole bytes (1..=8) at byte `offset` of the body.
    pub const fn bytes(name: &'static str, offset: u16, bytes: u8, coverage: Coverage) -> Self {
        FieldSpec {
            name,
            bit_offset: offset * 8,
            bits: bytes * 8,
            coverage,
        }
    }

    /// A field of `bits` bits (1..=64) at bit `bit_offset` of the body.
    pub const fn bits(name: &'static str, bit_offset: u16, bits: u8, coverage: Coverage) -> Self {
        FieldSpec {
            name,
            bit_offset,
            bits,
            coverage,
        }
    }

    fn end(&self) -> usize {
        usize::from(self.bit_offset) + usize::from(self.bits)
    }

    fn overlaps(&self, other: &FieldSpec) -> bool {
        usize::from(self.bit_offset) < other.end() && usize::from(other.bit_offset) < self.end()
    }
}

/// Why a declaration, or a peer's offer, was refused. Each names the field or layout at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclareError {
    /// The layout has no fields.
    Empty,
    /// A field is 0 or more than 64 bits wide.
    BadWidth {
        /// The field.
        field: &'static str,
        /// Its width.
        bits: u8,
    },
    /// A field ends past the 64-byte bound.
    TooLong {
        /// The field.
        field: &'static str,
        /// The CCX length, in bytes, the layout would need.
        len: usize,
    },
    /// Two fields share bits.
    Overlap {
        /// The earlier field in the declaration.
        first: &'static str,
        /// The later one.
        second: &'static str,
    },
    /// A variant field lies inside the covered prefix (before the end of a covered field).
    VariantInCovered {
        /// The variant field.
        variant: &'static str,
        /// The covered field that ends after its start.
        covered: &'static str,
    },
    /// Two fields have the same name.
    DuplicateName {
        /// The name.
        name: &'static str,
    },
    /// The peer offered a different layout (or none) for this id.
    NotAgreed {
        /// What this end declared.
        ours: LayoutOffer,
        /// What the peer offered.
        theirs: Option<LayoutOffer>,
    },
}

impl fmt::Display for DeclareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeclareError::Empty => write!(f, "a declared CC header needs at least one field"),
            DeclareError::BadWidth { field, bits } => {
                write!(f, "field {field:?} is {bits} bits wide (1..=64)")
            }
            DeclareError::TooLong { field, len } => write!(
                f,
                "field {field:?} makes the CC header {len} bytes, over the {CCX_MAX_LEN}-byte bound"
            ),
            DeclareError::Overlap { first, second } => {
                write!(f, "fields {first:?} and {second:?} overlap")
            }
            DeclareError::VariantInCovered { variant, covered } => write!(
                f,
                "variant field {variant:?} lies inside the ICRC-covered prefix (covered field \
                 {covered:?} ends after it starts): covered fields must all come first"
            ),
            DeclareError::DuplicateName { name } => write!(f, "two fields are named {name:?}"),
            DeclareError::NotAgreed { ours, theirs } => match theirs {
                Some(t) => write!(
                    f,
                    "the peer did not agree on CC header layout {} (hash {:08x}): it offered \
                     layout {} (hash {:08x})",
                    ours.id, ours.hash, t.id, t.hash
                ),
                None => write!(
                    f,
                    "the peer did not agree on CC header layout {} (hash {:08x}): it offered none",
                    ours.id, ours.hash
                ),
            },
        }
    }
}

impl std::error::Error for DeclareError {}

/// What one end offers in the negotiation: the layout's id and a hash of its declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayoutOffer {
    /// The id the packets carry (byte 2).
    pub id: u8,
    /// FNV-1a of the declaration: every field's name, offset, width and coverage.
    pub hash: u32,
}

/// What a packet says of its declared layout (bytes 0, 2 and 3): what a receiver checks
/// against the layout its queue pair agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeclaredTag {
    /// The layout's id.
    pub id: u8,
    /// Length of the whole CCX in bytes (a multiple of 4, 4..=64).
    pub len: u8,
    /// Bytes from the start of the CCX that the ICRC covers (4..=len).
    pub covered: u8,
}

/// A field's place, resolved once from its name ([`DeclaredLayout::field`]): reading and
/// writing it costs a few shifts, no lookup and no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Field {
    bit_offset: u16,
    bits: u8,
}

/// A validated declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredLayout {
    id: u8,
    fields: Vec<FieldSpec>,
    tag: DeclaredTag,
    hash: u32,
}

impl DeclaredLayout {
    /// Checks and builds a declaration: refuses no fields, a width outside 1..=64, a field
    /// past the 64-byte bound, overlapping fields, a duplicate name, and a variant field in
    /// the covered prefix.
    pub fn new(id: u8, fields: &[FieldSpec]) -> Result<DeclaredLayout, DeclareError> {
        if fields.is_empty() {
            return Err(DeclareError::Empty);
        }
        let mut body_bits = 0;
        let mut covered_bits = 0;
        for (i, f) in fields.iter().enumerate() {
            if f.bits == 0 || f.bits > 64 {
                return Err(DeclareError::BadWidth {
                    field: f.name,
                    bits: f.bits,
                });
            }
            if f.end() > DECLARED_BODY_MAX * 8 {
                return Err(DeclareError::TooLong {
                    field: f.name,
                    len: 4 + f.end().div_ceil(8),
                });
            }
            for g in &fields[..i] {
                if g.name == f.name {
                    return Err(DeclareError::DuplicateName { name: f.name });
                }
                if g.overlaps(f) {
                    return Err(DeclareError::Overlap {
                        first: g.name,
                        second: f.name,
                    });
                }
            }
            body_bits = body_bits.max(f.end());
            if f.coverage == Coverage::Covered {
                covered_bits = covered_bits.max(f.end());
            }
        }
        // The covered prefix ends at the byte holding the last covered bit; a variant field
        // starting before that byte's end would be covered too.
        let covered_bytes = covered_bits.div_ceil(8);
        for v in fields.iter().filter(|f| f.coverage == Coverage::Variant) {
            if usize::from(v.bit_offset) < covered_bytes * 8 {
                let covered = fields
                    .iter()
                    .filter(|c| c.coverage == Coverage::Covered)
                    .find(|c| c.end().div_ceil(8) * 8 > usize::from(v.bit_offset))
                    .map_or("?", |c| c.name);
                return Err(DeclareError::VariantInCovered {
                    variant: v.name,
                    covered,
                });
            }
        }
        let len = (4 + body_bits.div_ceil(8)).next_multiple_of(4);
        let tag = DeclaredTag {
            id,
            len: len as u8,
            covered: (4 + covered_bytes) as u8,
        };
        let mut hash = Fnv::new();
        hash.feed(&[id, tag.len, tag.covered]);
        for f in fields {
            hash.feed(f.name.as_bytes());
            hash.feed(&[0]);
            hash.feed(&f.bit_offset.to_be_bytes());
            hash.feed(&[f.bits, f.coverage as u8]);
        }
        Ok(DeclaredLayout {
            id,
            fields: fields.to_vec(),
            tag,
            hash: hash.0,
        })
    }

    /// The layout's id.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// The fields as declared.
    pub fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    /// What packets of this layout carry in their first word.
    pub fn tag(&self) -> DeclaredTag {
        self.tag
    }

    /// The layout as a queue pair's agreed CCX layout.
    pub fn layout(&self) -> crate::CcxLayout {
        crate::CcxLayout::Declared(self.tag)
    }

    /// What this end sends in the negotiation.
    pub fn offer(&self) -> LayoutOffer {
        LayoutOffer {
            id: self.id,
            hash: self.hash,
        }
    }

    /// The agreement: the layout to send and accept if the peer offered exactly this
    /// declaration; refused otherwise (then the queue pair must carry no declared header).
    pub fn agree(&self, peer: Option<LayoutOffer>) -> Result<crate::CcxLayout, DeclareError> {
        if peer == Some(self.offer()) {
            Ok(self.layout())
        } else {
            Err(DeclareError::NotAgreed {
                ours: self.offer(),
                theirs: peer,
            })
        }
    }

    /// The field called `name`, resolved for [`DeclaredCcx::get`] and [`DeclaredCcx::set`].
    pub fn field(&self, name: &str) -> Option<Field> {
        self.fields.iter().find(|f| f.name == name).map(|f| Field {
            bit_offset: f.bit_offset,
            bits: f.bits,
        })
    }

    /// An empty header of this layout (every field zero).
    pub fn empty(&self) -> DeclaredCcx {
        DeclaredCcx::empty(self.tag)
    }
}

/// A declared CCX as carried: its first word and its body. `Copy` and fixed size, so that it
/// rides in [`crate::RoceHeaders`] and events without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeclaredCcx {
    tag: DeclaredTag,
    body: [u8; DECLARED_BODY_MAX],
}

impl DeclaredCcx {
    /// A header of layout `tag` with every field zero.
    pub fn empty(tag: DeclaredTag) -> DeclaredCcx {
        DeclaredCcx {
            tag,
            body: [0; DECLARED_BODY_MAX],
        }
    }

    /// The layout it says it is.
    pub const fn tag(&self) -> DeclaredTag {
        self.tag
    }

    /// The body: the bytes after the first word, `len - 4` of them.
    pub fn body(&self) -> &[u8] {
        &self.body[..usize::from(self.tag.len).saturating_sub(4)]
    }

    /// The value of `field`.
    pub fn get(&self, field: Field) -> u64 {
        let (start, end, tail) = field.span();
        let mut acc = 0u128;
        for &b in &self.body[start..end] {
            acc = acc << 8 | u128::from(b);
        }
        (acc >> tail) as u64 & field.mask()
    }

    /// Sets `field` to the low bits of `value` (as many as the field is wide).
    pub fn set(&mut self, field: Field, value: u64) {
        let (start, end, tail) = field.span();
        let bytes = &mut self.body[start..end];
        let mut acc = 0u128;
        for &b in bytes.iter() {
            acc = acc << 8 | u128::from(b);
        }
        let mask = u128::from(field.mask()) << tail;
        acc = (acc & !mask) | (u128::from(value & field.mask()) << tail);
        for (i, b) in bytes.iter_mut().rev().enumerate() {
            *b = (acc >> (8 * i)) as u8;
        }
    }

    /// Decodes the body of a CCX whose first word is `word` (layout 4) from `ccx`, which
    /// holds at least the whole CCX.
    pub(crate) fn parse(word: [u8; 4], ccx: &[u8]) -> crate::Result<DeclaredCcx> {
        let len = usize::from(word[0]) * 4;
        let tag = DeclaredTag {
            id: word[2],
            len: len as u8,
            covered: word[3],
        };
        if !(4..=len).contains(&usize::from(tag.covered)) {
            return Err(crate::Error::BadCcx(
                "a declared header's covered length is outside 4..=its length",
            ));
        }
        let mut out = DeclaredCcx::empty(tag);
        out.body[..len - 4].copy_from_slice(&ccx[4..len]);
        Ok(out)
    }

    /// Writes the CCX (`len` bytes) to `out`, which is exactly that long.
    pub(crate) fn emit(&self, out: &mut [u8]) {
        out[2] = self.tag.id;
        out[3] = self.tag.covered;
        let n = out.len() - 4;
        out[4..].copy_from_slice(&self.body[..n]);
    }
}

impl Field {
    /// First byte, end byte (exclusive) and the bits after the field in the last byte.
    fn span(self) -> (usize, usize, u32) {
        let start_bit = usize::from(self.bit_offset);
        let end_bit = start_bit + usize::from(self.bits);
        let end = end_bit.div_ceil(8).min(DECLARED_BODY_MAX);
        (start_bit / 8, end, (end * 8 - end_bit) as u32)
    }

    fn mask(self) -> u64 {
        u64::MAX >> (64 - u32::from(self.bits))
    }
}

/// FNV-1a, 32 bits: a fingerprint both ends compute alike, not a defence against a forger
/// (the peer is trusted to declare what it runs).
struct Fnv(u32);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0x811c_9dc5)
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coverage::{Covered, Variant};

    #[test]
    fn refusals_name_the_field() {
        let big = DeclaredLayout::new(1, &[FieldSpec::bytes("huge", 56, 8, Covered)]);
        assert_eq!(
            big,
            Err(DeclareError::TooLong {
                field: "huge",
                len: 68
            })
        );
        assert!(big.unwrap_err().to_string().contains("\"huge\""));
        let overlap = DeclaredLayout::new(
            1,
            &[
                FieldSpec::bytes("a", 0, 4, Covered),
                FieldSpec::bits("b", 31, 2, Covered),
            ],
        );
        assert_eq!(
            overlap,
            Err(DeclareError::Overlap {
                first: "a",
                second: "b"
            })
        );
        let dup = DeclaredLayout::new(
            1,
            &[
                FieldSpec::bytes("a", 0, 4, Covered),
                FieldSpec::bytes("a", 4, 4, Covered),
            ],
        );
        assert_eq!(dup, Err(DeclareError::DuplicateName { name: "a" }));
        // A variant field before a covered one, or in the byte a covered field ends in.
        for variant_at in [0u16, 35] {
            let mixed = DeclaredLayout::new(
                1,
                &[
                    FieldSpec::bits("t", variant_at, 4, Variant),
                    FieldSpec::bits("c", 8, 26, Covered),
                ],
            );
            assert_eq!(
                mixed,
                Err(DeclareError::VariantInCovered {
                    variant: "t",
                    covered: "c"
                }),
                "variant at bit {variant_at}"
            );
        }
        assert_eq!(DeclaredLayout::new(1, &[]), Err(DeclareError::Empty));
        assert_eq!(
            DeclaredLayout::new(1, &[FieldSpec::bits("w", 0, 65, Covered)]),
            Err(DeclareError::BadWidth {
                field: "w",
                bits: 65
            })
        );
        // Exactly 64 bytes is allowed.
        let full = DeclaredLayout::new(1, &[FieldSpec::bytes("last", 52, 8, Variant)]).unwrap();
        assert_eq!(full.tag().len, 64);
        assert_eq!(full.tag().covered, 4, "only the first word is covered");
    }

    #[test]
    fn agreement_needs_the_same_declaration() {
        let a = DeclaredLayout::new(7, &[FieldSpec::bytes("x", 0, 8, Covered)]).unwrap();
        let same = DeclaredLayout::new(7, &[FieldSpec::bytes("x", 0, 8, Covered)]).unwrap();
        let renamed = DeclaredLayout::new(7, &[FieldSpec::bytes("y", 0, 8, Covered)]).unwrap();
        let masked = DeclaredLayout::new(7, &[FieldSpec::bytes("x", 0, 8, Variant)]).unwrap();
        assert_eq!(a.agree(Some(same.offer())), Ok(a.layout()));
        for other in [&renamed, &masked] {
            let e = a.agree(Some(other.offer())).unwrap_err();
            assert!(matches!(e, DeclareError::NotAgreed { .. }));
            assert!(
                e.to_string()
                    .contains("did not agree on CC header layout 7")
            );
        }
        assert!(a.agree(None).is_err());
    }

    #[test]
    fn fields_pack_big_endian_at_their_bits() {
        let l = DeclaredLayout::new(
            2,
            &[
                FieldSpec::bits("flag", 0, 1, Covered),
                FieldSpec::bits("odd", 1, 11, Covered),
                FieldSpec::bytes("word", 2, 4, Covered),
            ],
        )
        .unwrap();
        let mut h = l.empty();
        h.set(l.field("flag").unwrap(), 1);
        h.set(l.field("odd").unwrap(), 0xFFFF_0ABC); // keeps the low 11 bits: 0x2BC
        h.set(l.field("word").unwrap(), 0x0102_0304);
        assert_eq!(h.body(), &[0xAB, 0xC0, 1, 2, 3, 4, 0, 0]);
        assert_eq!(h.get(l.field("odd").unwrap()), 0x2BC);
        assert_eq!(h.get(l.field("flag").unwrap()), 1);
    }
}
