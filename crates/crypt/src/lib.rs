//! Per-queue-pair authenticated encryption for Sluice (issue 35): the parts that stand alone.
//!
//! - [`psk`]: the pre-shared key that authenticates the handshake, and its file format.
//! - [`handshake`]: a sans-IO ephemeral X25519 exchange, bound to both queue pairs' numbers,
//!   PSNs, roles and cipher suites, that derives one AES-GCM key per direction and confirms
//!   them.
//! - [`suite`]: the cipher suites (AES-256-GCM, the default, and AES-128-GCM) and their names.
//! - [`exchange`](mod@exchange): the handshake run over a byte stream (perftest's TCP
//!   connection, say).
//! - [`packet`]: sealing and opening one RoCE payload: an explicit per-key counter as the
//!   nonce (never reused, whatever the transport resends or regenerates), the BTH and the
//!   extension headers as associated data, the tag after the ciphertext.
//! - [`service`]: the per-QP stage built on them, with its drop counters: an in-line stage of
//!   the engine's payload-service seam (`sluice_core::policy::Service`).
//!
//! The cipher is aws-lc-rs (AWS-LC); `docs/encryption.md` says why, with the numbers of
//! `cargo bench -p sluice-crypt --bench cipher`.

pub mod exchange;
pub mod handshake;
pub mod packet;
pub mod psk;
pub mod service;
pub mod suite;

#[cfg(test)]
mod model;

pub use exchange::{ExchangeError, exchange, exchange_suite};
pub use handshake::{Endpoint, Handshake, HandshakeError, Role, SessionKeys};
pub use packet::{OVERHEAD, OpenError, SealError};
pub use psk::{Psk, PskError};
pub use service::{EncryptService, Verdict};
pub use suite::{Suite, UnknownSuite};
