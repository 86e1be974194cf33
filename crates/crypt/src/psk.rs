//! The pre-shared key: 32 secret bytes both ends hold before they connect, which authenticate
//! the handshake. It is never sent; a peer without it cannot complete the handshake.
//!
//! A key file holds either exactly 32 raw bytes, or 64 hexadecimal digits (upper or lower
//! case) with optional white space around them (`openssl rand -hex 32 > key`). Anything else
//! is refused with the reason: an unreadable file, the wrong length, a non-hex digit, or an
//! all-zero key.

use std::fmt;
use std::path::{Path, PathBuf};

/// Bytes in a pre-shared key.
pub const PSK_LEN: usize = 32;

/// Why a pre-shared key was refused.
#[derive(Debug, thiserror::Error)]
pub enum PskError {
    /// The key file could not be read.
    #[error("cannot read the pre-shared key file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Neither 32 raw bytes nor 64 hex digits.
    #[error(
        "a pre-shared key is 32 raw bytes or 64 hex digits; found {found} bytes{}",
        if *.hex { " of text" } else { "" }
    )]
    WrongLength {
        /// What was found: bytes of the file, or characters of text once white space is trimmed.
        found: usize,
        /// Whether it was read as text.
        hex: bool,
    },
    /// 64 characters, not all hexadecimal digits.
    #[error("the pre-shared key's text has a character that is not a hex digit at {at}")]
    NotHex {
        /// Index of the first bad character in the trimmed text.
        at: usize,
    },
    /// All zero bytes: surely a placeholder, not a secret.
    #[error("the pre-shared key is all zeros")]
    AllZero,
}

/// A pre-shared key. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Psk([u8; PSK_LEN]);

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Psk(..)")
    }
}

impl Drop for Psk {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl Psk {
    /// From 32 bytes; refuses an all-zero key.
    pub fn new(bytes: [u8; PSK_LEN]) -> Result<Self, PskError> {
        if bytes == [0; PSK_LEN] {
            return Err(PskError::AllZero);
        }
        Ok(Psk(bytes))
    }

    /// From a key file's contents: 32 raw bytes, or 64 hex digits with white space around.
    pub fn parse(contents: &[u8]) -> Result<Self, PskError> {
        if contents.len() == PSK_LEN {
            let mut key = [0; PSK_LEN];
            key.copy_from_slice(contents);
            return Psk::new(key);
        }
        let text = contents.trim_ascii();
        if text.len() != 2 * PSK_LEN {
            return Err(PskError::WrongLength {
                found: text.len(),
                hex: contents.len() != PSK_LEN,
            });
        }
        let mut key = [0; PSK_LEN];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            let hi = hex_digit(pair[0]).ok_or(PskError::NotHex { at: 2 * i })?;
            let lo = hex_digit(pair[1]).ok_or(PskError::NotHex { at: 2 * i + 1 })?;
            key[i] = hi << 4 | lo;
        }
        Psk::new(key)
    }

    /// Reads a key file ([`Psk::parse`]).
    pub fn from_file(path: &Path) -> Result<Self, PskError> {
        let contents = std::fs::read(path).map_err(|source| PskError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        Psk::parse(&contents)
    }

    pub(crate) fn bytes(&self) -> &[u8; PSK_LEN] {
        &self.0
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191A1B1C1D1E1F";

    #[test]
    fn hex_with_a_newline_and_raw_bytes_give_the_same_key() {
        let from_hex = Psk::parse(format!("  {HEX}\n").as_bytes()).unwrap();
        let raw: Vec<u8> = (0..32).collect();
        assert_eq!(from_hex, Psk::parse(&raw).unwrap());
    }

    #[test]
    fn wrong_lengths_say_what_they_found() {
        let err = Psk::parse(b"abcd\n").unwrap_err();
        assert!(matches!(
            err,
            PskError::WrongLength {
                found: 4,
                hex: true
            }
        ));
        assert!(err.to_string().contains("32 raw bytes or 64 hex digits"));
        let err = Psk::parse(&[7; 31]).unwrap_err();
        assert!(matches!(err, PskError::WrongLength { found: 31, .. }));
        assert!(matches!(
            Psk::parse(&[7; 33]).unwrap_err(),
            PskError::WrongLength { found: 33, .. }
        ));
        assert!(matches!(
            Psk::parse(format!("{HEX}00").as_bytes()).unwrap_err(),
            PskError::WrongLength { found: 66, .. }
        ));
    }

    #[test]
    fn a_non_hex_digit_is_pointed_at() {
        let bad = HEX.replace("0a", "0g");
        assert!(matches!(
            Psk::parse(bad.as_bytes()).unwrap_err(),
            PskError::NotHex { at: 21 }
        ));
    }

    #[test]
    fn an_all_zero_key_is_refused() {
        assert!(matches!(Psk::parse(&[0; 32]), Err(PskError::AllZero)));
        assert!(matches!(Psk::parse(&[b'0'; 64]), Err(PskError::AllZero)));
    }

    #[test]
    fn an_unreadable_file_names_itself() {
        let path = Path::new("/nonexistent/sluice-psk");
        let err = Psk::from_file(path).unwrap_err();
        assert!(matches!(err, PskError::Unreadable { .. }));
        let text = err.to_string();
        assert!(text.contains("/nonexistent/sluice-psk"), "{text}");
    }

    #[test]
    fn a_key_file_is_read() {
        let path = std::env::temp_dir().join(format!("sluice-psk-test-{}", std::process::id()));
        std::fs::write(&path, format!("{HEX}\n")).unwrap();
        let key = Psk::from_file(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(key.unwrap().bytes()[31], 0x1f);
    }

    #[test]
    fn debug_hides_the_key() {
        let key = Psk::parse(HEX.as_bytes()).unwrap();
        assert_eq!(format!("{key:?}"), "Psk(..)");
    }
}
