//! The cipher suites a queue pair may be sealed with, and how the handshake names them.
//!
//! Both are AES-GCM with the same 12-byte nonce (4-byte salt, 8-byte counter) and 16-byte
//! tag, so the wire format, the MTU budget and the nonce discipline do not depend on the
//! suite: only the key length does (and the AES rounds, 14 or 10). AES-128-GCM is offered
//! because the cipher runs on the engine's core, and a cheaper cipher is the one lever left
//! on encrypted throughput (`docs/encryption.md`, Cipher suites).

use std::fmt;
use std::str::FromStr;

use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM, Algorithm};

/// An AEAD for the payloads. The handshake carries it in each hello and refuses a peer that
/// named another one: an end never uses a suite it was not configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Suite {
    /// AES-256-GCM: 32-byte keys. The default; code 0, what every hello of this protocol
    /// version carried before suites were negotiated.
    #[default]
    Aes256Gcm,
    /// AES-128-GCM: 16-byte keys, 10 AES rounds instead of 14.
    Aes128Gcm,
}

/// A name or a code that is no suite.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cipher suite {0:?}: aes-256-gcm or aes-128-gcm")]
pub struct UnknownSuite(pub String);

impl Suite {
    /// Every suite, the default first.
    pub const ALL: [Suite; 2] = [Suite::Aes256Gcm, Suite::Aes128Gcm];

    /// Its name, as `sluice perf --cipher` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Aes256Gcm => "aes-256-gcm",
            Suite::Aes128Gcm => "aes-128-gcm",
        }
    }

    /// Its byte in a hello.
    pub fn code(self) -> u8 {
        match self {
            Suite::Aes256Gcm => 0,
            Suite::Aes128Gcm => 1,
        }
    }

    /// The suite a hello's byte names, if any.
    pub fn from_code(code: u8) -> Option<Suite> {
        Suite::ALL.into_iter().find(|s| s.code() == code)
    }

    /// Bytes of key the handshake derives for it.
    pub fn key_len(self) -> usize {
        match self {
            Suite::Aes256Gcm => 32,
            Suite::Aes128Gcm => 16,
        }
    }

    /// aws-lc-rs's algorithm.
    pub fn algorithm(self) -> &'static Algorithm {
        match self {
            Suite::Aes256Gcm => &AES_256_GCM,
            Suite::Aes128Gcm => &AES_128_GCM,
        }
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Suite {
    type Err = UnknownSuite;

    fn from_str(s: &str) -> Result<Suite, UnknownSuite> {
        Suite::ALL
            .into_iter()
            .find(|suite| suite.name() == s)
            .ok_or_else(|| UnknownSuite(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip_and_nothing_else_parses() {
        for s in Suite::ALL {
            assert_eq!(s.name().parse::<Suite>(), Ok(s));
            assert_eq!(Suite::from_code(s.code()), Some(s));
            assert_eq!(s.algorithm().key_len(), s.key_len());
        }
        for bad in [
            "",
            "aes-gcm",
            "AES-256-GCM",
            "aes-192-gcm",
            "chacha20-poly1305",
        ] {
            let err = bad.parse::<Suite>().unwrap_err();
            assert!(err.to_string().contains("aes-128-gcm"), "{err}");
        }
        assert_eq!(Suite::from_code(2), None);
        assert_eq!(Suite::default(), Suite::Aes256Gcm);
    }
}
