//! Per-queue-pair authenticated encryption for Sluice (issue 35): the parts that stand alone.
//!
//! - [`psk`]: the pre-shared key that authenticates the handshake, and its file format.
//! - [`handshake`]: a sans-IO ephemeral X25519 exchange, bound to both queue pairs' numbers,
//!   PSNs and roles, that derives one AES-256-GCM key per direction and confirms them.
//!
//! The cipher is aws-lc-rs (AWS-LC); `docs/encryption.md` says why, with the numbers of
//! `cargo bench -p sluice-crypt --bench cipher`.

pub mod handshake;
pub mod psk;

pub use handshake::{Endpoint, Handshake, HandshakeError, Role, SessionKeys};
pub use psk::{Psk, PskError};
