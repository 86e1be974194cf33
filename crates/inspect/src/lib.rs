//! Payload services for Sluice after RoCE BALBOA (issue 35): an inspection classifier that
//! flags executable content in payload chunks beside the path, and the DLRM preprocessing
//! chain as an application offload on arriving data. See docs/inspection.md.
//!
//! - [`features`]: the per-chunk features (one pass, no allocation);
//! - [`model`]: the logistic-regression model, its file format and the [`Classifier`];
//! - [`corpus`] and [`train`]: the reproducible corpus, training and held-out evaluation
//!   (the `train` binary);
//! - [`service`]: the classifier as a beside-the-path [`sluice_core::policy::Service`];
//! - [`dlrm`]: Neg2Zero -> log(1+x) -> modulus, per arriving chunk or over a whole buffer.

pub mod corpus;
pub mod dlrm;
pub mod features;
pub mod model;
pub mod service;
pub mod train;

pub use model::{Classifier, ModelError, ModelParams};
pub use service::Inspect;
