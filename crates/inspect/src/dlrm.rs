//! The DLRM preprocessing chain BALBOA runs on READ responses as they arrive (notes 004,
//! §4.3): Neg2Zero and log over the dense columns, modulus over the sparse ones.
//!
//! Data layout (the paper does not give one; this is the Criteo-style layout of Meta's DLRM
//! toolkit): rows of 40 little-endian 32-bit words, 160 bytes:
//!
//! | words | column | in | out |
//! |---|---|---|---|
//! | 0 | label | u32 | unchanged |
//! | 1..=13 | dense | i32 | f32 bits of `ln(1 + max(x, 0))` (Neg2Zero, then log) |
//! | 14..=39 | sparse | u32 | `x % modulus` |
//!
//! Every operator maps one word to one word, so the chain keeps the payload's length (the
//! paper's first design rule) and can run word by word on bytes as they land, whatever the
//! packet boundaries: [`InLine`] keeps the one position it has reached.

/// Words per row.
pub const ROW_WORDS: usize = 40;
/// Bytes per row.
pub const ROW_BYTES: usize = ROW_WORDS * 4;
/// Dense columns: words `1..=DENSE`.
pub const DENSE: usize = 13;

/// The chain's one parameter.
#[derive(Debug, Clone, Copy)]
pub struct Chain {
    /// Sparse values are reduced modulo this (> 0); the paper does not state its value.
    modulus: u32,
}

impl Default for Chain {
    fn default() -> Self {
        // A typical embedding-table size bound.
        Chain { modulus: 1 << 20 }
    }
}

/// A chain parameter out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dlrm: modulus must be at least 1, got {0}")]
pub struct ZeroModulus(pub u32);

impl Chain {
    /// With the sparse columns reduced modulo `modulus` (at least 1).
    pub fn new(modulus: u32) -> Result<Self, ZeroModulus> {
        if modulus == 0 {
            return Err(ZeroModulus(modulus));
        }
        Ok(Chain { modulus })
    }

    /// The sparse columns' modulus.
    pub fn modulus(&self) -> u32 {
        self.modulus
    }

    /// One word of column `col` (0..ROW_WORDS).
    #[inline]
    pub fn word(&self, col: usize, w: u32) -> u32 {
        if col == 0 {
            w
        } else if col <= DENSE {
            let x = (w as i32).max(0) as f32; // Neg2Zero
            x.ln_1p().to_bits()
        } else {
            w % self.modulus
        }
    }

    /// Processes the whole words of `buf` in place; `buf` starts at word `first_word` of the
    /// data (so its column is known). A trailing partial word is left alone.
    pub fn apply(&self, buf: &mut [u8], first_word: usize) {
        let mut col = first_word % ROW_WORDS;
        for w in buf.chunks_exact_mut(4) {
            let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            w.copy_from_slice(&self.word(col, v).to_le_bytes());
            col += 1;
            if col == ROW_WORDS {
                col = 0;
            }
        }
    }
}

/// The chain run as bytes arrive in order into one buffer: each call processes the words
/// completed since the last call (a word split across two packets waits for its second part).
#[derive(Debug, Clone, Default)]
pub struct InLine {
    chain: Chain,
    done: usize,
}

impl InLine {
    /// At the start of a buffer.
    pub fn new(chain: Chain) -> Self {
        InLine { chain, done: 0 }
    }

    /// `buf[..arrived]` has landed: processes the whole words not yet processed.
    pub fn arrived(&mut self, buf: &mut [u8], arrived: usize) {
        let end = arrived.min(buf.len()) & !3;
        if end > self.done {
            self.chain.apply(&mut buf[self.done..end], self.done / 4);
            self.done = end;
        }
    }

    /// Bytes processed so far.
    pub fn done(&self) -> usize {
        self.done
    }
}

/// The chain as an application offload on the [`Service`](sluice_core::policy::Service)
/// seam: applied to each READ response where it lands in the requester's memory, at its
/// place in the READ's data ([`Service::landed`](sluice_core::policy::Service::landed)),
/// so the application finds the READ's buffer processed when it completes. Responses
/// carry whole words at word-aligned offsets (every path MTU, less any in-line stage's
/// overhead, is a multiple of 4), so packet by packet equals the whole-buffer pass; a
/// response at an odd offset would split words across packets, and is counted
/// ([`Offload::unaligned`]) and left as it came.
#[derive(Debug, Clone, Default)]
pub struct Offload {
    chain: Chain,
    /// Responses processed.
    pub packets: u64,
    /// Bytes processed.
    pub bytes: u64,
    /// Responses at an offset that is not a multiple of 4, left alone.
    pub unaligned: u64,
}

impl Offload {
    /// Running `chain`.
    pub fn new(chain: Chain) -> Self {
        Offload {
            chain,
            ..Offload::default()
        }
    }
}

impl sluice_core::policy::Service for Offload {
    fn name(&self) -> &str {
        "dlrm"
    }

    fn in_line(&self) -> bool {
        // It changes nothing on the wire: it works where the data lands.
        false
    }

    fn on_landing(&self) -> bool {
        true
    }

    fn landed(&mut self, _qpn: sluice_core::QpNum, offset: u32, bytes: &mut [u8]) {
        if offset % 4 != 0 {
            self.unaligned += 1;
            return;
        }
        self.chain.apply(bytes, offset as usize / 4);
        self.packets += 1;
        self.bytes += bytes.len() as u64;
    }

    fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
        out.clear();
        out.extend_from_slice(&[
            ("landed_packets", self.packets),
            ("landed_bytes", self.bytes),
            ("unaligned", self.unaligned),
        ]);
    }
}

/// A generated table of `rows` rows: labels 0/1, dense values with some negatives and a long
/// tail, sparse values as wide hashes. Deterministic in `seed`.
pub fn generate(rows: usize, seed: u64) -> Vec<u8> {
    let mut g = crate::corpus::SplitMix::new(seed);
    let mut out = Vec::with_capacity(rows * ROW_BYTES);
    for _ in 0..rows {
        out.extend_from_slice(&(g.below(2) as u32).to_le_bytes());
        for _ in 0..DENSE {
            let bits = g.below(20) + 1;
            let v = g.below(1 << bits) as i64 - 8;
            out.extend_from_slice(&(v as i32).to_le_bytes());
        }
        for _ in DENSE + 1..ROW_WORDS {
            out.extend_from_slice(&(g.next_u64() as u32).to_le_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_do_what_they_say() {
        assert_eq!(
            Chain::new(0).unwrap_err().to_string(),
            "dlrm: modulus must be at least 1, got 0"
        );
        let c = Chain::new(1000).unwrap();
        assert_eq!(c.modulus(), 1000);
        assert_eq!(c.word(0, 7), 7);
        assert_eq!(f32::from_bits(c.word(1, (-5i32) as u32)), 0.0);
        assert!((f32::from_bits(c.word(13, 99)) - 100f32.ln()).abs() < 1e-6);
        assert_eq!(c.word(14, 123_456), 456);
        assert_eq!(c.word(39, 999), 999);
    }

    #[test]
    fn offload_per_landing_equals_the_whole_buffer_pass() {
        use sluice_core::policy::Service;
        let data = generate(40, 3);
        let mut whole = data.clone();
        Chain::default().apply(&mut whole, 0);
        let mut buf = data.clone();
        let mut o = Offload::new(Chain::default());
        // 1 KiB responses, the last short; one landed twice (a re-request's copy, as it came).
        for (i, piece) in buf.chunks_mut(1024).enumerate() {
            let raw = piece.to_vec();
            o.landed(sluice_core::QpNum(1), (i * 1024) as u32, piece);
            if i == 2 {
                piece.copy_from_slice(&raw);
                o.landed(sluice_core::QpNum(1), (i * 1024) as u32, piece);
            }
        }
        assert_eq!(buf, whole);
        let mut odd = [0u8; 8];
        o.landed(sluice_core::QpNum(1), 6, &mut odd);
        assert_eq!(o.unaligned, 1);
        assert!(o.on_landing() && !o.in_line());
    }

    #[test]
    fn in_line_over_any_packet_boundaries_equals_the_whole_buffer_pass() {
        let data = generate(50, 9);
        let mut whole = data.clone();
        Chain::default().apply(&mut whole, 0);
        let mut g = crate::corpus::SplitMix::new(1);
        for _ in 0..20 {
            let mut buf = data.clone();
            let mut s = InLine::new(Chain::default());
            let mut at = 0;
            while at < buf.len() {
                at = (at + 1 + g.below(700) as usize).min(buf.len());
                s.arrived(&mut buf, at);
            }
            assert_eq!(s.done(), buf.len());
            assert_eq!(buf, whole);
        }
    }
}
