//! Per-queue-pair authenticated encryption for Sluice (issue 35): the parts that stand alone.
//!
//! The cipher is aws-lc-rs (AWS-LC); `docs/encryption.md` says why, with the numbers of
//! `cargo bench -p sluice-crypt --bench cipher`.
