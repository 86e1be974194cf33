//! Builds the corpus, trains the classifier, writes the model file and prints the held-out
//! evaluation. Deterministic for a given seed and machine (the corpus is this machine's
//! files). See docs/inspection.md.
//!
//!     cargo run -p sluice-inspect --release --bin train -- --out crates/inspect/models/exec.model
//!     cargo run -p sluice-inspect --release --bin train -- --evaluate crates/inspect/models/exec.model

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sluice_inspect::corpus::{self, CorpusConfig, Kind};
use sluice_inspect::model::Classifier;
use sluice_inspect::train::{self, TrainConfig};

#[derive(Debug, Parser)]
#[command(about = "Train and evaluate the executable-content classifier")]
struct Args {
    /// Write the trained model here (nothing is written without it).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not train: evaluate this model file on the held-out part.
    #[arg(long, conflicts_with = "out")]
    evaluate: Option<PathBuf>,
    /// Directories to walk for corpus files (repeatable); default: the system's binaries,
    /// libraries, docs, headers, shared data and the Rust sysroot.
    #[arg(long = "root")]
    roots: Vec<PathBuf>,
    /// Seed for the split, the sampling and the generated files.
    #[arg(long, default_value_t = 35)]
    seed: u64,
    /// Bytes per chunk.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(64..=65536))]
    chunk: u32,
    /// Files of each kind found on disk, at most.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(20..))]
    files_per_kind: u32,
    /// Chunks drawn per file, at most.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..))]
    chunks_per_file: u32,
    /// Generated CSV and random files, each.
    #[arg(long, default_value_t = 150)]
    generated: usize,
    /// Gradient descent steps.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// Train on whole chunks only (no text chunks with code spliced in).
    #[arg(long)]
    no_mixed: bool,
    /// Flagging probability.
    #[arg(long, default_value_t = 0.5)]
    threshold: f64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if !(args.threshold > 0.0 && args.threshold < 1.0) {
        return Err(format!(
            "--threshold {} is not strictly between 0 and 1",
            args.threshold
        )
        .into());
    }
    let roots = if args.roots.is_empty() {
        CorpusConfig::default_roots()
    } else {
        args.roots.clone()
    };
    let ccfg = CorpusConfig {
        roots,
        seed: args.seed,
        files_per_kind: args.files_per_kind as usize,
        generated: args.generated,
        max_file_bytes: 64 << 20,
        held_out_percent: 25,
    };
    let tcfg = TrainConfig {
        chunk: args.chunk as usize,
        chunks_per_file: args.chunks_per_file as usize,
        steps: args.steps as usize,
        rate: 1.0,
        l2: 1e-4,
        threshold: args.threshold,
        seed: args.seed,
        mixed: !args.no_mixed,
    };
    // A model to evaluate is read before the corpus is built: a bad file fails at once.
    let given = match &args.evaluate {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let m = Classifier::from_text(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            if m.chunk() != tcfg.chunk {
                return Err(format!(
                    "{}: model chunk {} differs from --chunk {}",
                    path.display(),
                    m.chunk(),
                    tcfg.chunk
                )
                .into());
            }
            Some(m)
        }
        None => None,
    };
    let t0 = std::time::Instant::now();
    let samples = corpus::build(&ccfg)?;
    println!(
        "corpus (seed {}, built in {:.1?}): files train/held-out",
        args.seed,
        t0.elapsed()
    );
    for kind in Kind::ALL {
        let of = |h: bool| {
            samples
                .iter()
                .filter(|s| s.kind == kind && s.held_out == h)
                .count()
        };
        println!("  {:<11} {:>5} / {:<5}", kind.name(), of(false), of(true));
    }
    let model = if let Some(m) = given {
        m
    } else {
        let rows = train::rows(&samples, false, &tcfg);
        let positives = rows.y.iter().filter(|&&y| y).count();
        println!("training chunks: {} ({positives} executable)", rows.x.len());
        let params = train::fit(&rows, &tcfg);
        if let Some(out) = &args.out {
            let header = format!(
                "sluice-inspect executable-content classifier (docs/inspection.md)\n\
                 trained by: cargo run -p sluice-inspect --release --bin train -- --out ... \
                 --seed {} --chunk {} --files-per-kind {} --chunks-per-file {} --generated {} --steps {}{}",
                args.seed,
                args.chunk,
                args.files_per_kind,
                args.chunks_per_file,
                args.generated,
                args.steps,
                if args.no_mixed { " --no-mixed" } else { "" }
            );
            std::fs::write(out, params.to_text(&header))
                .map_err(|e| format!("{}: {e}", out.display()))?;
            println!("model written to {}", out.display());
        }
        Classifier::new(params)
    };
    let eval = train::evaluate(&model, &samples, &tcfg);
    print!("{}", eval.report());
    Ok(())
}
