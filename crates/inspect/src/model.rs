//! The classifier: a logistic regression over [`Features`], stored as a small text file.
//!
//! Format (one item a line, `#` starts a comment, blank lines ignored):
//!
//! ```text
//! format sluice-inspect-model 1
//! chunk 512              # bytes per chunk the model was trained on
//! threshold 0.5          # probability at or above which a chunk is flagged
//! bias -1.25             # on the standardised features
//! feature entropy 0.61 0.21 1.9    # name, mean, standard deviation, weight
//! ...                    # one `feature` line per feature, in FEATURE_NAMES order
//! ```
//!
//! A chunk's score is `bias + sum weight_i * (x_i - mean_i) / std_i`; it is flagged when
//! `sigmoid(score) >= threshold`. The loader folds the standardisation into the weights once,
//! so classifying is one dot product.

// Several arrays indexed by the same feature number: an index loop reads clearest.
#![allow(clippy::needless_range_loop)]

use std::fmt::Write as _;

use crate::features::{Extractor, FEATURE_COUNT, FEATURE_NAMES, Features};

/// The model shipped with the crate (trained by `cargo run -p sluice-inspect --release --bin
/// train`; see docs/inspection.md).
pub const BUILTIN_MODEL: &str = include_str!("../models/exec.model");

const FORMAT: &str = "sluice-inspect-model 1";

/// Why a model file was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    /// A line could not be read.
    #[error("model line {line}: {field}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// The item on that line (`chunk`, `feature`...).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Something required is absent.
    #[error("model: missing {0}")]
    Missing(String),
    /// The model file could not be read.
    #[error("model file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why (the I/O error, or the parse error with its line).
        reason: String,
    },
}

/// The parameters as stored: per-feature mean, standard deviation and weight.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParams {
    /// Bytes per chunk.
    pub chunk: usize,
    /// Flagging probability.
    pub threshold: f64,
    /// Bias on the standardised features.
    pub bias: f64,
    /// Mean of each feature over the training set.
    pub mean: [f64; FEATURE_COUNT],
    /// Standard deviation of each feature over the training set (> 0).
    pub std: [f64; FEATURE_COUNT],
    /// Weight of each standardised feature.
    pub weight: [f64; FEATURE_COUNT],
}

impl ModelParams {
    /// Reads the text format (see the module doc), refusing anything malformed with the line
    /// and item named.
    pub fn parse(text: &str) -> Result<Self, ModelError> {
        let mut format = false;
        let (mut chunk, mut threshold, mut bias) = (None, None, None);
        let mut mean = [0.0; FEATURE_COUNT];
        let mut std = [0.0; FEATURE_COUNT];
        let mut weight = [0.0; FEATURE_COUNT];
        let mut features = 0usize;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let mut words = content.split_whitespace();
            let key = words.next().unwrap_or("");
            let rest: Vec<&str> = words.collect();
            let err = |reason: String| ModelError::Line {
                line,
                field: key.to_string(),
                reason,
            };
            let one = |rest: &[&str]| -> Result<f64, ModelError> {
                match rest {
                    [v] => number(v).map_err(err),
                    _ => Err(err(format!("expected one value, found {}", rest.len()))),
                }
            };
            match key {
                "format" => {
                    if rest.join(" ") != FORMAT {
                        return Err(err(format!(
                            "expected `{FORMAT}`, found `{}`",
                            rest.join(" ")
                        )));
                    }
                    format = true;
                }
                "chunk" => {
                    let v = one(&rest)?;
                    if !(16.0..=65536.0).contains(&v) || v.fract() != 0.0 {
                        return Err(err(format!(
                            "{v} is not a whole number of bytes in 16..=65536"
                        )));
                    }
                    chunk = Some(v as usize);
                }
                "threshold" => {
                    let v = one(&rest)?;
                    if !(v > 0.0 && v < 1.0) {
                        return Err(err(format!(
                            "{v} is not a probability strictly between 0 and 1"
                        )));
                    }
                    threshold = Some(v);
                }
                "bias" => bias = Some(one(&rest)?),
                "feature" => {
                    let [name, m, s, w] = rest[..] else {
                        return Err(err(format!(
                            "expected `name mean std weight`, found {} values",
                            rest.len()
                        )));
                    };
                    let Some(&expected) = FEATURE_NAMES.get(features) else {
                        return Err(err(format!(
                            "more than the {FEATURE_COUNT} features this build knows"
                        )));
                    };
                    if name != expected {
                        return Err(err(format!(
                            "feature {} is `{name}`, this build expects `{expected}` (a model for another feature set?)",
                            features + 1
                        )));
                    }
                    let s = number(s).map_err(err)?;
                    if s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                        return Err(err(format!(
                            "{name}: standard deviation {s} is not positive"
                        )));
                    }
                    mean[features] = number(m).map_err(err)?;
                    std[features] = s;
                    weight[features] = number(w).map_err(err)?;
                    features += 1;
                }
                other => return Err(err(format!("unknown item `{other}`"))),
            }
        }
        if !format {
            return Err(ModelError::Missing(format!("the `format {FORMAT}` line")));
        }
        if features != FEATURE_COUNT {
            return Err(ModelError::Missing(format!(
                "features: {features} of {FEATURE_COUNT} given"
            )));
        }
        Ok(ModelParams {
            chunk: chunk.ok_or_else(|| ModelError::Missing("chunk".into()))?,
            threshold: threshold.ok_or_else(|| ModelError::Missing("threshold".into()))?,
            bias: bias.ok_or_else(|| ModelError::Missing("bias".into()))?,
            mean,
            std,
            weight,
        })
    }

    /// Writes the text format; [`ModelParams::parse`] reads it back exactly (Rust prints
    /// floats so that they round-trip).
    pub fn to_text(&self, header: &str) -> String {
        let mut s = String::new();
        for line in header.lines() {
            let _ = writeln!(s, "# {line}");
        }
        let _ = writeln!(s, "format {FORMAT}");
        let _ = writeln!(s, "chunk {}", self.chunk);
        let _ = writeln!(s, "threshold {}", self.threshold);
        let _ = writeln!(s, "bias {}", self.bias);
        let _ = writeln!(s, "# feature name mean std weight");
        for i in 0..FEATURE_COUNT {
            let _ = writeln!(
                s,
                "feature {} {} {} {}",
                FEATURE_NAMES[i], self.mean[i], self.std[i], self.weight[i]
            );
        }
        s
    }
}

fn number(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        Ok(x) => Err(format!("{x} is not finite")),
        Err(_) => Err(format!("`{v}` is not a number")),
    }
}

/// A loaded model, ready to score chunks: standardisation folded into the weights.
#[derive(Debug, Clone)]
pub struct Classifier {
    params: ModelParams,
    extractor: Extractor,
    weight: [f32; FEATURE_COUNT],
    bias: f32,
    /// The score at or above which a chunk is flagged: logit(threshold).
    cut: f32,
}

impl Classifier {
    /// Loads a model from its text.
    pub fn from_text(text: &str) -> Result<Self, ModelError> {
        Ok(Self::new(ModelParams::parse(text)?))
    }

    /// Loads a model file; errors name the file, and the line and item when it is malformed.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ModelError> {
        let read = |reason: String| ModelError::Read {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
        Self::from_text(&text).map_err(|e| read(e.to_string()))
    }

    /// The model shipped with the crate.
    pub fn builtin() -> Self {
        Self::from_text(BUILTIN_MODEL).expect("the committed model parses (tested)")
    }

    /// A classifier from parameters.
    pub fn new(params: ModelParams) -> Self {
        let mut weight = [0.0; FEATURE_COUNT];
        let mut bias = params.bias;
        for i in 0..FEATURE_COUNT {
            let w = params.weight[i] / params.std[i];
            weight[i] = w as f32;
            bias -= w * params.mean[i];
        }
        let t = params.threshold;
        Classifier {
            extractor: Extractor::new(params.chunk),
            weight,
            bias: bias as f32,
            cut: (t / (1.0 - t)).ln() as f32,
            params,
        }
    }

    /// The stored parameters.
    pub fn params(&self) -> &ModelParams {
        &self.params
    }

    /// Bytes per chunk.
    pub fn chunk(&self) -> usize {
        self.params.chunk
    }

    /// The score (logit) of features already extracted.
    pub fn score_features(&self, f: &Features) -> f32 {
        let mut s = self.bias;
        for i in 0..FEATURE_COUNT {
            s += self.weight[i] * f[i];
        }
        s
    }

    /// The score (logit) of one chunk (cut to [`Classifier::chunk`] bytes).
    pub fn score(&self, chunk: &[u8]) -> f32 {
        let mut f = [0.0; FEATURE_COUNT];
        self.extractor.extract(chunk, &mut f);
        self.score_features(&f)
    }

    /// Whether a chunk looks like executable code.
    pub fn is_executable(&self, chunk: &[u8]) -> bool {
        self.score(chunk) >= self.cut
    }

    /// Whether features already extracted are flagged.
    pub fn flags(&self, f: &Features) -> bool {
        self.score_features(f) >= self.cut
    }
}
