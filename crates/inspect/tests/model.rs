//! The shipped model loads and classifies; bad model files are refused naming the line and
//! the item; the model text round-trips.

use sluice_inspect::Classifier;
use sluice_inspect::corpus::elf_code_ranges;
use sluice_inspect::model::{BUILTIN_MODEL, ModelError, ModelParams};

/// Code chunks from this test's own executable (an ELF file on Linux), or `None` elsewhere.
fn own_code(chunk: usize) -> Option<Vec<Vec<u8>>> {
    let bytes = std::fs::read(std::env::current_exe().ok()?).ok()?;
    let ranges = elf_code_ranges(&bytes)?;
    let code: Vec<u8> = ranges
        .iter()
        .flat_map(|&(s, e)| bytes[s..e].iter().copied())
        .collect();
    Some(code.chunks_exact(chunk).map(<[u8]>::to_vec).collect())
}

#[test]
fn the_shipped_model_loads() {
    let m = Classifier::builtin();
    assert_eq!(m.chunk(), 512);
    let p = ModelParams::parse(BUILTIN_MODEL).unwrap();
    assert_eq!(ModelParams::parse(&p.to_text("round trip")).unwrap(), p);
}

#[test]
fn an_elf_code_chunk_is_flagged_and_text_is_not() {
    let m = Classifier::builtin();
    let Some(code) = own_code(m.chunk()) else {
        eprintln!("skipped: this test's executable is not a 64-bit little-endian ELF file");
        return;
    };
    assert!(code.len() >= 50, "{} code chunks", code.len());
    // Most chunks of real machine code are flagged (the held-out rate is ~99%).
    let flagged = code.iter().filter(|c| m.is_executable(c)).count();
    assert!(
        flagged * 100 >= code.len() * 90,
        "{flagged} of {} code chunks flagged",
        code.len()
    );
    // And one known chunk, classified individually: the middle of the code.
    assert!(m.is_executable(&code[code.len() / 2]) || m.is_executable(&code[code.len() / 2 + 1]));

    let text = include_str!("../../../docs/inspection.md").as_bytes();
    let text_flagged = text
        .chunks_exact(m.chunk())
        .filter(|c| m.is_executable(c))
        .count();
    assert_eq!(text_flagged, 0, "text chunks flagged");
    let source = include_str!("../src/corpus.rs").as_bytes();
    assert!(!m.is_executable(&source[..m.chunk()]));
}

/// Fresh RDMA buffers are zero-filled: such chunks are not code (the first shipped model
/// flagged every zero chunk of `sluice perf --inspect`'s buffers), nor are most fills of one
/// byte.
#[test]
fn zero_and_constant_chunks_are_not_flagged() {
    let m = Classifier::builtin();
    let flagged: Vec<u8> = (0..=255u8)
        .filter(|&b| m.is_executable(&vec![b; m.chunk()]))
        .collect();
    assert!(!flagged.contains(&0), "a zero chunk flagged");
    // A few fills of one byte are: the bytes the x86 features count (0x24, 0x48, 0x84,
    // 0x85, 0x8b and 0xff with the shipped model; docs/inspection.md).
    assert!(flagged.len() <= 8, "fills of {flagged:x?} flagged");
}

#[test]
fn a_text_chunk_with_code_spliced_in_is_flagged() {
    let m = Classifier::builtin();
    let Some(code) = own_code(m.chunk()) else {
        eprintln!("skipped: this test's executable is not a 64-bit little-endian ELF file");
        return;
    };
    let text = include_str!("../src/train.rs").as_bytes();
    let mut hits = 0;
    for (i, c) in code.iter().take(100).enumerate() {
        let mut chunk = text[i..i + m.chunk()].to_vec();
        chunk[100..100 + m.chunk() / 2].copy_from_slice(&c[..m.chunk() / 2]);
        hits += usize::from(m.is_executable(&chunk));
    }
    assert!(hits >= 80, "{hits} of 100 half-code chunks flagged");
}

fn refused(text: &str) -> ModelError {
    Classifier::from_text(text).expect_err("must be refused")
}

fn with_line(line: usize, replacement: &str) -> String {
    let mut lines: Vec<&str> = BUILTIN_MODEL.lines().collect();
    lines[line - 1] = replacement;
    lines.join("\n")
}

fn line_of(prefix: &str) -> usize {
    BUILTIN_MODEL
        .lines()
        .position(|l| l.starts_with(prefix))
        .unwrap()
        + 1
}

#[test]
fn bad_model_files_are_refused_naming_the_line_and_item() {
    let cases = [
        (line_of("chunk"), "chunk lots", "chunk", "not a number"),
        (
            line_of("chunk"),
            "chunk 3",
            "chunk",
            "whole number of bytes",
        ),
        (
            line_of("threshold"),
            "threshold 1.5",
            "threshold",
            "probability",
        ),
        (line_of("bias"), "bias NaN", "bias", "not finite"),
        (
            line_of("format"),
            "format other-model 9",
            "format",
            "expected",
        ),
        (
            line_of("feature entropy"),
            "feature entropy 0.5 0 1",
            "feature",
            "not positive",
        ),
        (
            line_of("feature entropy"),
            "feature colour 0.5 1 1",
            "feature",
            "another feature set",
        ),
        (
            line_of("feature entropy"),
            "feature entropy 0.5 1",
            "feature",
            "expected `name mean std weight`",
        ),
        (line_of("bias"), "weights 1 2 3", "weights", "unknown item"),
    ];
    for (line, replacement, field, reason) in cases {
        match refused(&with_line(line, replacement)) {
            ModelError::Line {
                line: l,
                field: f,
                reason: r,
            } => {
                assert_eq!((l, f.as_str()), (line, field), "{replacement}");
                assert!(r.contains(reason), "{replacement}: {r}");
            }
            other => panic!("{replacement}: {other}"),
        }
    }
    let no_features: String = BUILTIN_MODEL
        .lines()
        .filter(|l| !l.starts_with("feature step"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(matches!(
        refused(&no_features),
        ModelError::Line { .. } | ModelError::Missing(_)
    ));
    let last_missing: String = BUILTIN_MODEL
        .lines()
        .filter(|l| !l.starts_with("feature peak_binary"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        refused(&last_missing).to_string(),
        "model: missing features: 22 of 23 given"
    );
    assert!(refused("").to_string().contains("format"));
    let no_bias: String = BUILTIN_MODEL
        .lines()
        .filter(|l| !l.starts_with("bias"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(refused(&no_bias), ModelError::Missing("bias".into()));
}

#[test]
fn a_model_file_is_loaded_and_a_bad_one_names_the_file() {
    let dir = std::env::temp_dir().join(format!("sluice-inspect-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.model");
    std::fs::write(&good, BUILTIN_MODEL).unwrap();
    assert_eq!(
        Classifier::from_file(&good).unwrap().params(),
        Classifier::builtin().params()
    );

    let bad = dir.join("bad.model");
    std::fs::write(&bad, BUILTIN_MODEL.replace("threshold 0.5", "threshold 2")).unwrap();
    let err = Classifier::from_file(&bad).unwrap_err().to_string();
    assert!(
        err.contains("bad.model") && err.contains("threshold"),
        "{err}"
    );

    let missing = dir.join("absent.model");
    let err = Classifier::from_file(&missing).unwrap_err().to_string();
    assert!(err.contains("absent.model"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
