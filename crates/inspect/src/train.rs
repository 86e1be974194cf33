//! Training and evaluation: logistic regression by full-batch gradient descent on
//! standardised features, classes weighted to count equally; evaluation on the held-out
//! files, whole chunks and code embedded in text.

// Several arrays indexed by the same feature number: an index loop reads clearest.
#![allow(clippy::needless_range_loop)]

use std::fmt::Write as _;

use crate::corpus::{Kind, Sample, SplitMix, chunks};
use crate::features::{Extractor, FEATURE_COUNT, Features};
use crate::model::{Classifier, ModelParams};

/// Training settings.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// Bytes per chunk.
    pub chunk: usize,
    /// Chunks drawn from each file at most.
    pub chunks_per_file: usize,
    /// Gradient descent steps.
    pub steps: usize,
    /// Step size.
    pub rate: f64,
    /// L2 penalty on the weights.
    pub l2: f64,
    /// Flagging probability written into the model.
    pub threshold: f64,
    /// Seed for the chunk sampling.
    pub seed: u64,
    /// Also train on text chunks with a contiguous run of code spliced in (1/8 to 3/4 of
    /// the chunk, from training executables only), labelled executable.
    pub mixed: bool,
}

/// Labelled feature rows.
#[derive(Debug, Default)]
pub struct Rows {
    /// Features.
    pub x: Vec<Features>,
    /// Whether each row is executable.
    pub y: Vec<bool>,
    /// The kind each row came from.
    pub kind: Vec<Kind>,
}

/// Feature rows of the chunks of the samples in one part (`held_out` or not).
pub fn rows(samples: &[Sample], held_out: bool, cfg: &TrainConfig) -> Rows {
    let ex = Extractor::new(cfg.chunk);
    let mut g = SplitMix::new(cfg.seed ^ u64::from(held_out));
    let mut r = Rows::default();
    for s in samples.iter().filter(|s| s.held_out == held_out) {
        for c in chunks(s, cfg.chunk, cfg.chunks_per_file, &mut g) {
            let mut f = [0.0; FEATURE_COUNT];
            ex.extract(c, &mut f);
            r.x.push(f);
            r.y.push(s.kind.positive());
            r.kind.push(s.kind);
        }
    }
    if cfg.mixed && !held_out {
        let of = |kind: Kind, g: &mut SplitMix| -> Vec<&[u8]> {
            let picked = samples.iter().filter(|s| !s.held_out && s.kind == kind);
            picked
                .flat_map(|s| chunks(s, cfg.chunk, cfg.chunks_per_file, g))
                .collect()
        };
        let code = of(Kind::Executable, &mut g);
        let text = of(Kind::Text, &mut g);
        let mut buf = vec![0u8; cfg.chunk];
        for t in text.iter().filter(|_| !code.is_empty()) {
            let c = code[g.below(code.len() as u64) as usize];
            let len = cfg.chunk / 8 + g.below((cfg.chunk * 5 / 8) as u64 + 1) as usize;
            splice(&mut buf, t, c, len, &mut g);
            let mut f = [0.0; FEATURE_COUNT];
            ex.extract(&buf, &mut f);
            r.x.push(f);
            r.y.push(true);
            r.kind.push(Kind::Text);
        }
    }
    r
}

/// `buf` = `text` with `len` bytes of `code` (from a random offset) at a random offset.
fn splice(buf: &mut [u8], text: &[u8], code: &[u8], len: usize, g: &mut SplitMix) {
    let chunk = buf.len();
    buf.copy_from_slice(text);
    let at = g.below((chunk - len + 1) as u64) as usize;
    let from = g.below((chunk - len + 1) as u64) as usize;
    buf[at..at + len].copy_from_slice(&code[from..from + len]);
}

/// Fits the model on `train`.
pub fn fit(train: &Rows, cfg: &TrainConfig) -> ModelParams {
    let n = train.x.len() as f64;
    let mut mean = [0.0; FEATURE_COUNT];
    let mut std = [0.0; FEATURE_COUNT];
    for x in &train.x {
        for i in 0..FEATURE_COUNT {
            mean[i] += f64::from(x[i]) / n;
        }
    }
    for x in &train.x {
        for i in 0..FEATURE_COUNT {
            std[i] += (f64::from(x[i]) - mean[i]).powi(2) / n;
        }
    }
    for s in &mut std {
        // A feature constant over the corpus gets a unit scale rather than a division by 0.
        *s = if *s > 1e-12 { s.sqrt() } else { 1.0 };
    }
    let z: Vec<[f64; FEATURE_COUNT]> = train
        .x
        .iter()
        .map(|x| std::array::from_fn(|i| (f64::from(x[i]) - mean[i]) / std[i]))
        .collect();
    let positives = train.y.iter().filter(|&&y| y).count() as f64;
    let (wp, wn) = (0.5 / positives.max(1.0), 0.5 / (n - positives).max(1.0));
    let mut w = [0.0; FEATURE_COUNT];
    let mut b = 0.0;
    for _ in 0..cfg.steps {
        let mut gw = [0.0; FEATURE_COUNT];
        let mut gb = 0.0;
        for (zi, &yi) in z.iter().zip(&train.y) {
            let s = b + (0..FEATURE_COUNT).map(|i| w[i] * zi[i]).sum::<f64>();
            let p = 1.0 / (1.0 + (-s).exp());
            let (err, weight) = if yi { (p - 1.0, wp) } else { (p, wn) };
            for i in 0..FEATURE_COUNT {
                gw[i] += weight * err * zi[i];
            }
            gb += weight * err;
        }
        for i in 0..FEATURE_COUNT {
            w[i] -= cfg.rate * (gw[i] + cfg.l2 * w[i]);
        }
        b -= cfg.rate * gb;
    }
    ModelParams {
        chunk: cfg.chunk,
        threshold: cfg.threshold,
        bias: b,
        mean,
        std,
        weight: w,
    }
}

/// Held-out results.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Per kind: (chunks, flagged).
    pub per_kind: Vec<(Kind, usize, usize)>,
    /// Per embedded share of code in a text chunk: (share, chunks, flagged).
    pub embedded: Vec<(f64, usize, usize)>,
    /// Messages of 4 chunks of text with one chunk's worth of code at a random offset:
    /// (messages, flagged by any chunk).
    pub messages_with_code: (usize, usize),
    /// The same messages without the code: (messages, flagged by any chunk).
    pub messages_clean: (usize, usize),
}

impl Evaluation {
    /// Detection rate on whole executable chunks.
    pub fn detection(&self) -> f64 {
        let (n, f) = self.sum(|k| k.positive());
        f as f64 / n.max(1) as f64
    }

    /// False-positive rate over all non-executable chunks (each kind counted by its chunks).
    pub fn false_positive(&self) -> f64 {
        let (n, f) = self.sum(|k| !k.positive());
        f as f64 / n.max(1) as f64
    }

    fn sum(&self, pick: impl Fn(Kind) -> bool) -> (usize, usize) {
        self.per_kind
            .iter()
            .filter(|(k, ..)| pick(*k))
            .fold((0, 0), |(n, f), &(_, cn, cf)| (n + cn, f + cf))
    }

    /// A printable report.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let pct = |f: usize, n: usize| 100.0 * f as f64 / n.max(1) as f64;
        let _ = writeln!(s, "held-out whole chunks, by kind (flagged / chunks):");
        for &(k, n, f) in &self.per_kind {
            let what = if k.positive() {
                "detected"
            } else {
                "false positives"
            };
            let _ = writeln!(
                s,
                "  {:<11} {f:>6} / {n:<6} {:6.2}% {what}",
                k.name(),
                pct(f, n)
            );
        }
        let _ = writeln!(
            s,
            "  detection rate       {:6.2}%",
            100.0 * self.detection()
        );
        let _ = writeln!(
            s,
            "  false-positive rate  {:6.2}%",
            100.0 * self.false_positive()
        );
        let _ = writeln!(
            s,
            "held-out text chunks with code spliced in (contiguous, random offset):"
        );
        for &(share, n, f) in &self.embedded {
            let _ = writeln!(
                s,
                "  {:>3.0}% code  {f:>6} / {n:<6} {:6.2}% detected",
                share * 100.0,
                pct(f, n)
            );
        }
        let (n, f) = self.messages_with_code;
        let (cn, cf) = self.messages_clean;
        let _ = writeln!(
            s,
            "messages of 4 chunks of text, one chunk's length of code at a random offset (flagged if any chunk is):"
        );
        let _ = writeln!(
            s,
            "  with code     {f:>6} / {n:<6} {:6.2}% detected",
            pct(f, n)
        );
        let _ = writeln!(
            s,
            "  without code  {cf:>6} / {cn:<6} {:6.2}% false positives",
            pct(cf, cn)
        );
        s
    }
}

/// Evaluates `model` on the held-out samples.
pub fn evaluate(model: &Classifier, samples: &[Sample], cfg: &TrainConfig) -> Evaluation {
    let held = rows(samples, true, cfg);
    let mut eval = Evaluation::default();
    for kind in Kind::ALL {
        let (mut n, mut f) = (0, 0);
        for (x, _) in held.x.iter().zip(&held.kind).filter(|(_, k)| **k == kind) {
            n += 1;
            f += usize::from(model.flags(x));
        }
        if n > 0 {
            eval.per_kind.push((kind, n, f));
        }
    }

    let chunk = cfg.chunk;
    let mut g = SplitMix::new(cfg.seed ^ 0xE3B);
    let held_of = |kind: Kind| samples.iter().filter(move |s| s.held_out && s.kind == kind);
    let mut code: Vec<&[u8]> = Vec::new();
    for s in held_of(Kind::Executable) {
        code.extend(chunks(s, chunk, cfg.chunks_per_file, &mut g));
    }
    let mut text: Vec<&[u8]> = Vec::new();
    for s in held_of(Kind::Text) {
        text.extend(chunks(s, chunk, cfg.chunks_per_file, &mut g));
    }
    if code.is_empty() || text.is_empty() {
        return eval;
    }
    let mut buf = vec![0u8; chunk];
    for share in [0.125, 0.25, 0.5, 0.75] {
        let len = (chunk as f64 * share) as usize;
        let (mut n, mut f) = (0, 0);
        for (i, t) in text.iter().enumerate() {
            let c = code[(i * 7919 + g.below(code.len() as u64) as usize) % code.len()];
            splice(&mut buf, t, c, len, &mut g);
            n += 1;
            f += usize::from(model.is_executable(&buf));
        }
        eval.embedded.push((share, n, f));
    }

    // Messages: four text chunks in a row with one chunk's length of code at any offset,
    // so the code usually straddles two chunks, as in a real payload.
    let mut msg = vec![0u8; 4 * chunk];
    let (mut n, mut f, mut cn, mut cf) = (0, 0, 0, 0);
    for i in 0..text.len() / 4 {
        for (j, t) in text[4 * i..4 * i + 4].iter().enumerate() {
            msg[j * chunk..(j + 1) * chunk].copy_from_slice(t);
        }
        cn += 1;
        cf += usize::from(msg.chunks(chunk).any(|c| model.is_executable(c)));
        let c = code[g.below(code.len() as u64) as usize];
        let at = g.below((3 * chunk + 1) as u64) as usize;
        msg[at..at + chunk].copy_from_slice(c);
        n += 1;
        f += usize::from(msg.chunks(chunk).any(|c| model.is_executable(c)));
    }
    eval.messages_with_code = (n, f);
    eval.messages_clean = (cn, cf);
    eval
}
