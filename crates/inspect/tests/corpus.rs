//! The corpus and training on this machine's files: reproducible, split by file, and good
//! enough on the held-out part. Skips, saying why, where the corpus is missing (no ELF
//! binaries or text files under the roots, e.g. not Linux).

use std::path::PathBuf;

use sluice_inspect::Classifier;
use sluice_inspect::corpus::{self, CorpusConfig, CorpusError, Kind};
use sluice_inspect::train::{self, TrainConfig};

fn config(roots: &[&str]) -> CorpusConfig {
    CorpusConfig {
        roots: roots.iter().map(PathBuf::from).collect(),
        seed: 5,
        files_per_kind: 40,
        generated: 20,
        max_file_bytes: 8 << 20,
        held_out_percent: 25,
    }
}

fn small_train() -> TrainConfig {
    TrainConfig {
        chunk: 512,
        chunks_per_file: 8,
        steps: 150,
        rate: 1.0,
        l2: 1e-4,
        threshold: 0.5,
        seed: 5,
        mixed: true,
    }
}

#[test]
fn an_empty_root_is_refused_naming_what_is_missing() {
    let dir = std::env::temp_dir().join(format!("sluice-inspect-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = corpus::build(&config(&[dir.to_str().unwrap()])).unwrap_err();
    let CorpusError::TooFew { kind, found, .. } = &err;
    assert_eq!((*kind, *found), ("executable", 0));
    assert!(err.to_string().contains("ELF binaries"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn training_on_this_machine_is_reproducible_and_detects_on_held_out_files() {
    let cfg = config(&["/usr/bin", "/usr/share/doc", "/usr/include"]);
    let samples = match corpus::build(&cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("skipped: no corpus on this machine: {e}");
            return;
        }
    };
    // Split by file: every origin is in exactly one part, both parts have both classes.
    let mut origins: Vec<&str> = samples.iter().map(|s| s.origin.as_str()).collect();
    origins.sort_unstable();
    let n = origins.len();
    origins.dedup();
    assert_eq!(origins.len(), n, "a file appears twice");
    for held in [false, true] {
        for kind in [Kind::Executable, Kind::Text] {
            assert!(
                samples.iter().any(|s| s.held_out == held && s.kind == kind),
                "{kind:?} {held}"
            );
        }
    }
    let again = corpus::build(&cfg).unwrap();
    assert!(
        samples
            .iter()
            .zip(&again)
            .all(|(a, b)| a.origin == b.origin && a.held_out == b.held_out)
    );

    let tcfg = small_train();
    let params = train::fit(&train::rows(&samples, false, &tcfg), &tcfg);
    assert_eq!(
        params,
        train::fit(&train::rows(&again, false, &tcfg), &tcfg),
        "same seed, same model"
    );
    let eval = train::evaluate(&Classifier::new(params), &samples, &tcfg);
    eprintln!("{}", eval.report());
    assert!(eval.detection() >= 0.9, "detection {}", eval.detection());
    assert!(
        eval.false_positive() <= 0.05,
        "false positives {}",
        eval.false_positive()
    );

    // The shipped model on this machine's held-out files, too.
    let shipped = train::evaluate(&Classifier::builtin(), &samples, &tcfg);
    assert!(
        shipped.detection() >= 0.9,
        "shipped model detection {}",
        shipped.detection()
    );
    assert!(
        shipped.false_positive() <= 0.05,
        "shipped model false positives {}",
        shipped.false_positive()
    );
}
