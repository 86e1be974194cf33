//! The training corpus, built from what a Linux machine already has plus generated data:
//! no downloads, no malware. A proxy for BALBOA's data set (which the paper does not publish).
//!
//! - executable: the code sections (`SHF_EXECINSTR`, e.g. `.text`) of 64-bit little-endian ELF
//!   files found under the roots (system binaries, shared objects, the Rust toolchain's);
//! - text: files whose first 4 KiB are printable (docs, headers, source);
//! - gzip: `.gz` files (compressed text: Debian ships changelogs so);
//! - image: PNG and JPEG files;
//! - csv and random: generated here from the seed.
//!
//! Files are assigned to the training or the held-out part by a seeded hash of their path
//! (generated files by their index), never chunk by chunk, so no file feeds both.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// What a corpus file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Machine code from an ELF file's executable sections.
    Executable,
    /// Printable text.
    Text,
    /// A gzip file.
    Gzip,
    /// A PNG or JPEG image.
    Image,
    /// Generated CSV.
    Csv,
    /// Generated random bytes.
    Random,
    /// Generated sparse binary data: zero-filled and constant buffers, zero-initialised
    /// records with a few small values, short repeated patterns (fresh or sparse memory,
    /// which RDMA buffers often are).
    Sparse,
}

impl Kind {
    /// All kinds, positives first.
    pub const ALL: [Kind; 7] = [
        Kind::Executable,
        Kind::Text,
        Kind::Gzip,
        Kind::Image,
        Kind::Csv,
        Kind::Random,
        Kind::Sparse,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Executable => "executable",
            Kind::Text => "text",
            Kind::Gzip => "gzip",
            Kind::Image => "image",
            Kind::Csv => "csv",
            Kind::Random => "random",
            Kind::Sparse => "sparse",
        }
    }

    /// Whether chunks of this kind should be flagged.
    pub fn positive(self) -> bool {
        self == Kind::Executable
    }
}

/// A small deterministic generator (SplitMix64): the corpus and the training must come out
/// the same from the same seed, on any machine.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Shuffles in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// Byte ranges of an ELF file's executable sections, or `None` if `bytes` is not a 64-bit
/// little-endian ELF file with section headers in bounds.
pub fn elf_code_ranges(bytes: &[u8]) -> Option<Vec<(usize, usize)>> {
    const SHF_EXECINSTR: u64 = 0x4;
    const SHT_NOBITS: u32 = 8;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(bytes.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(bytes.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?));
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let shentsize = usize::from(u16_at(0x3A)?);
    let shnum = usize::from(u16_at(0x3C)?);
    if shentsize < 0x28 {
        return None;
    }
    let mut ranges = Vec::new();
    for i in 0..shnum {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let (kind, flags) = (u32_at(h + 4)?, u64_at(h + 8)?);
        let (off, size) = (u64_at(h + 0x18)?, u64_at(h + 0x20)?);
        if flags & SHF_EXECINSTR == 0 || kind == SHT_NOBITS || size == 0 {
            continue;
        }
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        if end <= bytes.len() {
            ranges.push((start, end));
        }
    }
    Some(ranges)
}

/// One corpus file, its payload bytes (for executables: only the code sections, joined).
#[derive(Debug, Clone)]
pub struct Sample {
    /// Where it came from (a path, or `generated:csv:N`).
    pub origin: String,
    /// What it is.
    pub kind: Kind,
    /// Whether it is in the held-out part.
    pub held_out: bool,
    /// The bytes chunks are cut from.
    pub bytes: Vec<u8>,
}

/// How to build the corpus.
#[derive(Debug, Clone)]
pub struct CorpusConfig {
    /// Directories walked for files.
    pub roots: Vec<PathBuf>,
    /// Seed for the split, the sampling and the generated files.
    pub seed: u64,
    /// At most this many files of each kind found on disk.
    pub files_per_kind: usize,
    /// Generated CSV and random files, each.
    pub generated: usize,
    /// Files larger than this are passed over (the toolchain's largest libraries would
    /// dominate reading time and add nothing a smaller binary lacks).
    pub max_file_bytes: u64,
    /// Held-out share of files, in percent.
    pub held_out_percent: u64,
}

impl CorpusConfig {
    /// The default roots on a Linux machine: system binaries and libraries, documentation,
    /// headers, shared data (images), and the Rust toolchain's sysroot when `rustc` is found.
    pub fn default_roots() -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = [
            "/usr/bin",
            "/usr/lib",
            "/usr/libexec",
            "/usr/share/doc",
            "/usr/share/common-licenses",
            "/usr/include",
            "/usr/share/pixmaps",
            "/usr/share/icons",
            "/usr/share",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        if let Some(sysroot) = rust_sysroot() {
            roots.push(sysroot);
        }
        roots
    }
}

fn rust_sysroot() -> Option<PathBuf> {
    let out =
        std::process::Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
            .args(["--print", "sysroot"])
            .output()
            .ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    let p = PathBuf::from(s.trim());
    p.is_dir().then_some(p)
}

/// Why the corpus could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// Not enough files of a kind the model needs.
    #[error(
        "corpus: found {found} {kind} files under the roots ({roots}), need at least {need}: \
         training needs a Linux machine with ELF binaries and text files (see docs/inspection.md)"
    )]
    TooFew {
        /// Which kind.
        kind: &'static str,
        /// How many were found.
        found: usize,
        /// How many are needed.
        need: usize,
        /// The roots walked.
        roots: String,
    },
}

/// Walks `root` (not following symlinks: the same file is met once), calling `f` on
/// regular files.
fn walk(root: &Path, depth: usize, seen: &mut BTreeSet<PathBuf>, f: &mut dyn FnMut(&Path, u64)) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let Ok(t) = e.file_type() else { continue };
        let path = e.path();
        if t.is_dir() && depth < 12 {
            walk(&path, depth + 1, seen, f);
        } else if t.is_file() && seen.insert(path.clone()) {
            if let Ok(m) = e.metadata() {
                f(&path, m.len());
            }
        }
    }
}

fn head(path: &Path, n: usize) -> Option<Vec<u8>> {
    let mut file = fs::File::open(path).ok()?;
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(_) => return None,
        }
    }
    buf.truncate(got);
    Some(buf)
}

/// The kind of a file judged by its first bytes, or `None` for files the corpus leaves out.
fn sniff(path: &Path, first: &[u8]) -> Option<Kind> {
    if first.starts_with(b"\x7fELF") {
        return Some(Kind::Executable);
    }
    if first.starts_with(&[0x1F, 0x8B]) {
        return Some(Kind::Gzip);
    }
    if first.starts_with(b"\x89PNG") || first.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some(Kind::Image);
    }
    // Text: valid UTF-8 (a character cut at the 4 KiB mark allowed), no control characters
    // but whitespace. SVG is XML text but carries images: left out rather than mislabelled.
    let valid = match std::str::from_utf8(first) {
        Ok(s) => s,
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&first[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    let text = valid
        .chars()
        .all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r'));
    (text && first.len() >= 512 && path.extension().is_none_or(|e| e != "svg"))
        .then_some(Kind::Text)
}

fn split(seed: u64, origin: &str, percent: u64) -> bool {
    // FNV-1a of the origin, mixed with the seed: stable across runs and machines.
    let mut h = 0xCBF2_9CE4_8422_2325u64 ^ seed;
    for b in origin.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
    }
    SplitMix::new(h).next_u64() % 100 < percent
}

/// Builds the corpus: walks the roots, keeps up to `files_per_kind` files of each kind
/// (chosen by the seed), adds the generated files. Errors if too few executables or text
/// files are found to train on.
pub fn build(cfg: &CorpusConfig) -> Result<Vec<Sample>, CorpusError> {
    let mut found: [Vec<PathBuf>; 4] = Default::default();
    let mut seen = BTreeSet::new();
    for root in &cfg.roots {
        walk(root, 0, &mut seen, &mut |path, len| {
            if len < 1024 || len > cfg.max_file_bytes {
                return;
            }
            let Some(first) = head(path, 4096) else {
                return;
            };
            if let Some(kind) = sniff(path, &first) {
                found[kind as usize].push(path.to_path_buf());
            }
        });
    }
    let mut rng = SplitMix::new(cfg.seed);
    let mut samples = Vec::new();
    for (k, paths) in found.iter_mut().enumerate() {
        let kind = Kind::ALL[k];
        rng.shuffle(paths);
        let mut kept = 0;
        for path in paths.iter() {
            if kept == cfg.files_per_kind {
                break;
            }
            let Ok(bytes) = fs::read(path) else { continue };
            let bytes = if kind == Kind::Executable {
                let Some(ranges) = elf_code_ranges(&bytes) else {
                    continue;
                };
                ranges
                    .iter()
                    .flat_map(|&(s, e)| bytes[s..e].iter().copied())
                    .collect()
            } else {
                bytes
            };
            if bytes.len() < 1024 {
                continue;
            }
            let origin = path.display().to_string();
            samples.push(Sample {
                held_out: split(cfg.seed, &origin, cfg.held_out_percent),
                origin,
                kind,
                bytes,
            });
            kept += 1;
        }
    }
    let roots = cfg
        .roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    for kind in [Kind::Executable, Kind::Text] {
        let have = samples.iter().filter(|s| s.kind == kind).count();
        let need = 20;
        if have < need {
            return Err(CorpusError::TooFew {
                kind: kind.name(),
                found: have,
                need,
                roots,
            });
        }
    }
    for i in 0..cfg.generated {
        for kind in [Kind::Csv, Kind::Random, Kind::Sparse] {
            let origin = format!("generated:{}:{i}", kind.name());
            let mut g =
                SplitMix::new(cfg.seed ^ (i as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
            let bytes = match kind {
                Kind::Csv => csv(&mut g),
                Kind::Random => random(&mut g),
                _ => sparse(&mut g),
            };
            samples.push(Sample {
                held_out: split(cfg.seed, &origin, cfg.held_out_percent),
                origin,
                kind,
                bytes,
            });
        }
    }
    Ok(samples)
}

/// A generated CSV file: a header, then rows mixing ids, counts, decimals, timestamps,
/// short words and quoted fields, column types drawn per file.
pub fn csv(g: &mut SplitMix) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "alpha", "beta", "gamma", "delta", "north", "south", "pending", "done", "GET", "POST",
        "eu-west", "us-east",
    ];
    let cols = 3 + g.below(8) as usize;
    let types: Vec<u64> = (0..cols).map(|_| g.below(6)).collect();
    let mut s = String::new();
    let names: Vec<String> = (0..cols).map(|c| format!("col_{c}")).collect();
    s.push_str(&names.join(","));
    s.push('\n');
    let rows = 100 + g.below(900);
    for r in 0..rows {
        for (c, t) in types.iter().enumerate() {
            if c > 0 {
                s.push(',');
            }
            let _ = match t {
                0 => write!(s, "{r}"),
                1 => write!(s, "{}", g.below(100_000)),
                2 => write!(s, "{:.3}", g.unit() * 1000.0 - 500.0),
                3 => write!(
                    s,
                    "2026-{:02}-{:02}T{:02}:{:02}:00Z",
                    1 + g.below(12),
                    1 + g.below(28),
                    g.below(24),
                    g.below(60)
                ),
                4 => write!(s, "{}", WORDS[g.below(WORDS.len() as u64) as usize]),
                _ => write!(s, "\"{} {}\"", WORDS[g.below(12) as usize], g.below(1000)),
            };
        }
        s.push('\n');
    }
    s.into_bytes()
}

/// Generated uniform random bytes (stands in for encrypted or well-compressed payloads).
pub fn random(g: &mut SplitMix) -> Vec<u8> {
    let n = 8 * 1024 + g.below(56 * 1024) as usize;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        v.extend_from_slice(&g.next_u64().to_le_bytes());
    }
    v.truncate(n);
    v
}

/// Generated sparse binary data, one of four shapes per file: all zeros, one constant byte,
/// zero-initialised records of 16 to 128 bytes with a few small integers in each, or a short
/// pattern repeated.
pub fn sparse(g: &mut SplitMix) -> Vec<u8> {
    let n = 8 * 1024 + g.below(56 * 1024) as usize;
    match g.below(4) {
        0 => vec![0; n],
        1 => vec![g.next_u64() as u8; n],
        2 => {
            let record = 16 + g.below(113) as usize;
            let mut v = vec![0u8; n];
            for start in (0..n).step_by(record) {
                for _ in 0..1 + g.below(4) {
                    let at = start + g.below(record as u64) as usize;
                    if at < n {
                        v[at] = g.below(64) as u8;
                    }
                }
            }
            v
        }
        _ => {
            let pattern: Vec<u8> = (0..1 + g.below(16)).map(|_| g.next_u64() as u8).collect();
            pattern.iter().copied().cycle().take(n).collect()
        }
    }
}

/// Up to `per_file` whole chunks of `chunk` bytes from a sample, at seeded distinct offsets
/// on the chunk grid.
pub fn chunks<'a>(s: &'a Sample, chunk: usize, per_file: usize, g: &mut SplitMix) -> Vec<&'a [u8]> {
    let n = s.bytes.len() / chunk;
    let mut idx: Vec<usize> = (0..n).collect();
    g.shuffle(&mut idx);
    idx.truncate(per_file);
    idx.sort_unstable();
    idx.iter()
        .map(|&i| &s.bytes[i * chunk..(i + 1) * chunk])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_parser_refuses_garbage_and_truncation() {
        assert_eq!(
            elf_code_ranges(b"not an elf file at all, plainly text, long enough....."),
            None
        );
        let mut fake = vec![0u8; 64];
        fake[..4].copy_from_slice(b"\x7fELF");
        fake[4] = 2;
        fake[5] = 1;
        fake[0x28..0x30].copy_from_slice(&1000u64.to_le_bytes()); // headers past the end
        fake[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        fake[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(elf_code_ranges(&fake), None);
    }

    #[test]
    fn elf_parser_never_panics_on_damaged_headers() {
        // A plausible header with its section table fields, then seeded damage to them.
        let mut base = vec![0u8; 4096];
        base[..4].copy_from_slice(b"\x7fELF");
        base[4] = 2;
        base[5] = 1;
        base[0x28..0x30].copy_from_slice(&512u64.to_le_bytes());
        base[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        base[0x3C..0x3E].copy_from_slice(&4u16.to_le_bytes());
        let mut g = SplitMix::new(11);
        for _ in 0..5000 {
            let mut b = base.clone();
            for _ in 0..1 + g.below(12) {
                let at = if g.below(2) == 0 {
                    0x28 + g.below(24)
                } else {
                    512 + g.below(256)
                };
                b[at as usize] = g.next_u64() as u8;
            }
            b.truncate(64 + g.below(4096 - 64) as usize);
            if let Some(ranges) = elf_code_ranges(&b) {
                assert!(ranges.iter().all(|&(s, e)| s <= e && e <= b.len()));
            }
        }
    }

    #[test]
    fn files_are_classed_by_their_first_bytes() {
        let p = Path::new("f");
        let text = "Plain text, with tabs\tand newlines\n and UTF-8: é ü.\n".repeat(20);
        assert_eq!(sniff(p, text.as_bytes()), Some(Kind::Text));
        // A multi-byte character cut at the end of the sniffed prefix is still text.
        let cut = &"é".repeat(400).into_bytes()[..799];
        assert_eq!(sniff(p, cut), Some(Kind::Text));
        assert_eq!(
            sniff(p, &text.as_bytes()[..100]),
            None,
            "too short to judge"
        );
        let mut control = text.clone().into_bytes();
        control[50] = 0x01;
        assert_eq!(sniff(p, &control), None);
        assert_eq!(sniff(Path::new("a.svg"), text.as_bytes()), None);
        assert_eq!(sniff(p, b"\x7fELF\x02\x01"), Some(Kind::Executable));
        assert_eq!(sniff(p, &[0x1F, 0x8B, 8, 0]), Some(Kind::Gzip));
        assert_eq!(sniff(p, b"\x89PNG\r\n"), Some(Kind::Image));
        assert_eq!(sniff(p, &[0xFF, 0xD8, 0xFF, 0xE0]), Some(Kind::Image));
        assert_eq!(sniff(p, &[0u8; 600]), None, "unknown binary is left out");
    }

    #[test]
    fn split_is_by_origin_and_stable() {
        let a = split(7, "/usr/bin/ls", 20);
        for _ in 0..3 {
            assert_eq!(split(7, "/usr/bin/ls", 20), a);
        }
        let held = (0..1000).filter(|i| split(7, &format!("f{i}"), 20)).count();
        assert!((150..250).contains(&held), "{held}");
    }

    #[test]
    fn generated_files_are_reproducible() {
        let a = csv(&mut SplitMix::new(3));
        assert_eq!(a, csv(&mut SplitMix::new(3)));
        assert_ne!(a, csv(&mut SplitMix::new(4)));
        assert!(a.iter().all(|b| b.is_ascii()));
    }
}
