//! Per-chunk features, cheap enough for a datapath: one pass over the bytes filling a
//! histogram on the stack and three byte-pair counters, then a fixed number of arithmetic
//! steps over the histogram. Nothing is allocated per chunk: the only table
//! (`c * log2 c` for the entropy) is built once, when the [`Extractor`] is made.

/// How many features a chunk yields.
pub const FEATURE_COUNT: usize = 23;

/// The features' names, in order; the model file lists them by these names, so a model
/// trained on another feature set is refused rather than misread.
pub const FEATURE_NAMES: [&str; FEATURE_COUNT] = [
    "entropy",
    "printable",
    "zero",
    "ff",
    "high",
    "distinct",
    "b48",
    "b89",
    "b8b",
    "be8",
    "b0f",
    "rex_other",
    "ret_int3",
    "b24",
    "test",
    "jcc_short",
    "arith_lea",
    "pair_rex_op",
    "pair_0f_op",
    "call_rel32",
    "step",
    "peak_pairs",
    "peak_binary",
];

/// Bytes per window for the two peak features: code spliced into text shows as one dense
/// window even when the chunk-wide rates are diluted.
pub const WINDOW: usize = 64;

/// The features of one chunk.
pub type Features = [f32; FEATURE_COUNT];

/// Bytes that commonly follow a REX prefix (0x40..=0x4F) in x86-64 code: the ALU, MOV, LEA,
/// TEST, MOVSXD and group opcodes a compiler emits most.
const REX_OPS: [bool; 256] = byte_set(&[
    0x01, 0x03, 0x09, 0x0B, 0x21, 0x23, 0x29, 0x2B, 0x31, 0x33, 0x39, 0x3B, 0x63, 0x69, 0x83, 0x85,
    0x89, 0x8B, 0x8D, 0xC1, 0xC7, 0xD1, 0xD3, 0xF7, 0xFF,
]);

/// Second bytes of common two-byte opcodes (0x0F xx): NOP padding, Jcc near, MOVZX/MOVSX,
/// SSE moves, CMOVcc, SETcc, IMUL.
const OF_OPS: [bool; 256] = {
    let mut t = byte_set(&[
        0x05, 0x0B, 0x10, 0x11, 0x1E, 0x1F, 0x28, 0x29, 0x2E, 0x57, 0xA2, 0xAF, 0xB6, 0xB7, 0xBE,
        0xBF, 0xC6, 0xD6, 0xEF,
    ]);
    let mut b = 0x40;
    while b < 0x50 {
        t[b] = true; // CMOVcc
        t[b + 0x40] = true; // Jcc rel32 (0x80..=0x8F)
        t[b + 0x50] = true; // SETcc (0x90..=0x9F)
        b += 1;
    }
    t
};

const fn byte_set(bytes: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < bytes.len() {
        t[bytes[i] as usize] = true;
        i += 1;
    }
    t
}

/// Per-byte classes, looked up once per byte so the loop has few branches. Bits of
/// `CLASS[b]`: 1 REX prefix (0x40..=0x4F), 2 the 0x0F escape, 4 not printable, 8 E8/E9
/// (CALL/JMP rel32). Bits of `FOLLOW[b]`: 1 in [`REX_OPS`], 2 in [`OF_OPS`]; so
/// `CLASS[prev] & FOLLOW[b] & 3` says at once whether the pair is a REX pair or a 0F pair.
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let mut c = 0;
        if b & 0xF0 == 0x40 {
            c |= 1;
        }
        if b == 0x0F {
            c |= 2;
        }
        if !printable(b as u8) {
            c |= 4;
        }
        if b == 0xE8 || b == 0xE9 {
            c |= 8;
        }
        t[b] = c;
        b += 1;
    }
    t
};

const FOLLOW: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = REX_OPS[b] as u8 | ((OF_OPS[b] as u8) << 1);
        b += 1;
    }
    t
};

/// Printable ASCII and the usual whitespace.
const fn printable(b: u8) -> bool {
    matches!(b, 0x20..=0x7E | b'\t' | b'\n' | b'\r')
}

/// Computes [`Features`] for chunks of up to `max_len` bytes.
#[derive(Debug, Clone)]
pub struct Extractor {
    /// `c * log2(c)` for every count a chunk of `max_len` bytes can have.
    clog: Vec<f32>,
}

impl Extractor {
    /// An extractor for chunks of at most `max_len` bytes; longer chunks are cut to it.
    pub fn new(max_len: usize) -> Self {
        let clog = (0..=max_len)
            .map(|c| {
                if c == 0 {
                    0.0
                } else {
                    (c as f64 * (c as f64).log2()) as f32
                }
            })
            .collect();
        Extractor { clog }
    }

    /// The longest chunk this extractor reads whole.
    pub fn max_len(&self) -> usize {
        self.clog.len() - 1
    }

    /// Fills `out` with the features of `chunk` (cut to [`Extractor::max_len`]). An empty
    /// chunk yields all zeros.
    pub fn extract(&self, chunk: &[u8], out: &mut Features) {
        let chunk = &chunk[..chunk.len().min(self.max_len())];
        *out = [0.0; FEATURE_COUNT];
        if chunk.is_empty() {
            return;
        }
        let mut hist = [0u32; 256];
        let (mut rex_op, mut of_op, mut call, mut step) = (0u32, 0u32, 0u32, 0u32);
        let (mut peak_pairs, mut peak_binary) = (0u32, 0u32);
        // Counted here rather than from the histogram: the loop has the bytes in hand.
        let (mut nonprintable, mut high) = (0u32, 0u32);
        let mut prev = chunk[0];
        hist[prev as usize] += 1;
        for (wi, window) in chunk[1..].chunks(WINDOW).enumerate() {
            let (mut pairs, mut binary) = (0u32, 0u32);
            for (j, &b) in window.iter().enumerate() {
                let i = 1 + wi * WINDOW + j;
                hist[b as usize] += 1;
                let class = CLASS[b as usize];
                let m = CLASS[prev as usize] & FOLLOW[b as usize];
                let (r, o) = (u32::from(m & 1), u32::from((m >> 1) & 1));
                // CALL/JMP rel32 (E8/E9) with a near displacement: its top byte is 00 or FF.
                let c = if class & 8 != 0 && i + 4 < chunk.len() {
                    u32::from(matches!(chunk[i + 4], 0x00 | 0xFF))
                } else {
                    0
                };
                rex_op += r;
                of_op += o;
                call += c;
                pairs += r + o + c;
                binary += u32::from((class >> 2) & 1);
                high += u32::from(b >> 7);
                step += u32::from(b.abs_diff(prev));
                prev = b;
            }
            peak_pairs = peak_pairs.max(pairs);
            peak_binary = peak_binary.max(binary);
            nonprintable += binary;
        }
        let first = chunk[0];
        if (first == 0xE8 || first == 0xE9) && chunk.len() > 4 {
            call += u32::from(matches!(chunk[4], 0x00 | 0xFF));
        }

        let n = chunk.len() as f32;
        let (mut sum_clog, mut distinct) = (0.0f32, 0u32);
        for &c in &hist {
            sum_clog += self.clog[c as usize];
            distinct += u32::from(c > 0);
        }
        let printable_n = chunk.len() as u32 - nonprintable - u32::from(!printable(first));
        let high = high + u32::from(first >= 0x80);
        let f = |c: u32| c as f32 / n;
        let h = |bytes: &[u8]| bytes.iter().map(|&b| hist[b as usize]).sum::<u32>() as f32 / n;
        // Shannon entropy in bits per byte, over 8: log2(n) - (1/n) sum c log2 c.
        let entropy = (n.log2() - sum_clog / n).max(0.0) / 8.0;
        *out = [
            entropy,
            f(printable_n),
            h(&[0x00]),
            h(&[0xFF]),
            f(high),
            distinct as f32 / 256.0,
            h(&[0x48]),
            h(&[0x89]),
            h(&[0x8B]),
            h(&[0xE8]),
            h(&[0x0F]),
            h(&[0x41, 0x44, 0x45, 0x49, 0x4C, 0x4D]),
            h(&[0xC3, 0xCC]),
            h(&[0x24]),
            h(&[0x84, 0x85]),
            h(&[0x74, 0x75]),
            h(&[0x83, 0x8D]),
            f(rex_op),
            f(of_op),
            f(call),
            step as f32 / (n * 255.0),
            peak_pairs as f32 / WINDOW as f32,
            peak_binary as f32 / WINDOW as f32,
        ];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_is_zero_for_one_byte_value_and_one_for_all_values() {
        let e = Extractor::new(1024);
        let mut out = [0.0; FEATURE_COUNT];
        e.extract(&[7u8; 512], &mut out);
        assert!(out[0].abs() < 1e-6, "{}", out[0]);
        let all: Vec<u8> = (0..=255u8).cycle().take(1024).collect();
        e.extract(&all, &mut out);
        assert!((out[0] - 1.0).abs() < 1e-5, "{}", out[0]);
        assert!((out[5] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn code_pairs_count_on_x86_idioms_and_not_on_text() {
        let e = Extractor::new(512);
        let mut out = [0.0; FEATURE_COUNT];
        // mov rax,rbx; call +0x10; nop dword [rax]; setne al
        let code = [
            0x48, 0x89, 0xD8, 0xE8, 0x10, 0, 0, 0, 0x0F, 0x1F, 0x00, 0x0F, 0x95, 0xC0,
        ];
        e.extract(&code, &mut out);
        assert!(out[17] > 0.0 && out[18] > 0.0 && out[19] > 0.0, "{out:?}");
        e.extract(
            b"Hello, world. This is plain text with no machine code.",
            &mut out,
        );
        assert_eq!((out[17], out[18], out[19]), (0.0, 0.0, 0.0));
        assert_eq!(out[1], 1.0);
    }

    #[test]
    fn empty_and_overlong_chunks_are_handled() {
        let e = Extractor::new(64);
        let mut out = [1.0; FEATURE_COUNT];
        e.extract(&[], &mut out);
        assert_eq!(out, [0.0; FEATURE_COUNT]);
        e.extract(&[0u8; 1000], &mut out);
        assert_eq!(out[2], 1.0);
    }
}
