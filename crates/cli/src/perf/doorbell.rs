//! RoCE BALBOA Fig 7's CPU baseline as one real flow (not a `sluice perf` flag: the repro
//! entry sets [`super::Options::doorbell_crypt`]): write-lat where neither queue pair
//! encrypts, and each side instead seals its message on its own CPU, sends it as a plain
//! WRITE, rings the peer's doorbell with an 8-byte WRITE behind it, and, when the peer's
//! doorbell rings, opens the peer's message where it landed before it answers.
//!
//! A message of `size` bytes is laid out as
//!
//! ```text
//! | nonce (8) | ciphertext (size - 40) | tag (16) | doorbell (8) |
//! ```
//!
//! the first `size - 8` bytes one WRITE, the doorbell (whose last byte is perftest's mark)
//! a second WRITE on the same queue pair, so it lands after them. One AES-256-GCM operation
//! covers the whole buffer (what a CPU decrypting a buffer does; per-packet operations would
//! cost it more), under the keys of the `--encrypt` handshake (`SessionKeys`), with
//! `sluice-crypt`'s own counter and replay window.

use sluice_crypt::SessionKeys;
use sluice_crypt::packet::{OVERHEAD, OpenKey, SealKey};

/// Bytes of the doorbell WRITE.
pub(crate) const DOORBELL: u32 = 8;
/// The smallest message the baseline sends: a nonce, a tag, a doorbell and a byte of data.
pub(crate) const MIN_SIZE: u32 = OVERHEAD as u32 + DOORBELL + 1;

/// Associated data for the buffers: nothing of a packet's headers (the buffer is not a
/// packet), a fixed BTH-sized block so that the same calls serve.
const AAD_BTH: [u8; 12] = [0; 12];

/// One end's software cipher: seals what it sends, opens what it is sent.
#[derive(Debug)]
pub(crate) struct SoftCipher {
    seal: SealKey,
    open: OpenKey,
}

impl SoftCipher {
    /// From this end's handshake with the peer.
    pub(crate) fn new(keys: &SessionKeys) -> SoftCipher {
        SoftCipher {
            seal: SealKey::new(&keys.send),
            open: OpenKey::new(&keys.receive),
        }
    }

    /// Seals `message` (`size - 8` bytes: nonce room, plaintext, tag room) in place.
    pub(crate) fn seal(&mut self, message: &mut [u8]) -> Result<(), String> {
        self.seal
            .seal(&AAD_BTH, &[], message)
            .map(|_| ())
            .map_err(|e| format!("doorbell baseline: seal: {e}"))
    }

    /// Opens the peer's `message` in place; an error if it does not verify (a run that
    /// measured a buffer it could not decrypt would measure nothing).
    pub(crate) fn open(&mut self, message: &mut [u8]) -> Result<(), String> {
        self.open
            .open(&AAD_BTH, &[], message)
            .map(|_| ())
            .map_err(|e| format!("doorbell baseline: open: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_crypt::handshake::{Endpoint, Handshake, Role};
    use sluice_crypt::{Psk, SessionKeys};

    fn pair() -> (SessionKeys, SessionKeys) {
        let psk = || Psk::new([9; 32]).unwrap();
        let (a, hello_a) =
            Handshake::start(Role::Initiator, psk(), Endpoint { qpn: 1, psn: 0 }).unwrap();
        let (b, hello_b) =
            Handshake::start(Role::Responder, psk(), Endpoint { qpn: 2, psn: 0 }).unwrap();
        let (a, confirm_a) = a.receive_hello(&hello_b).unwrap();
        let (b, confirm_b) = b.receive_hello(&hello_a).unwrap();
        (
            a.receive_confirm(&confirm_b).unwrap(),
            b.receive_confirm(&confirm_a).unwrap(),
        )
    }

    #[test]
    fn the_baseline_is_refused_where_it_has_no_meaning() {
        use super::super::{Options, validate};
        use sluice_perftest::Test;
        let with = |test: Test, size: u32, key: bool| {
            let mut o = Options::new(test);
            o.size = Some(size);
            o.doorbell_crypt = true;
            o.encrypt = key.then(|| Psk::new([9; 32]).unwrap());
            validate(&o).map_err(|e| e.to_string())
        };
        assert!(with(Test::WriteLat, 4096, true).is_ok());
        for (test, size, key) in [
            (Test::WriteBw, 4096, true),
            (Test::WriteLat, 4096, false),
            (Test::WriteLat, MIN_SIZE - 1, true),
        ] {
            let e = with(test, size, key).unwrap_err();
            assert!(e.contains("doorbell baseline"), "{e}");
        }
    }

    #[test]
    fn a_sealed_buffer_opens_at_the_peer_once_and_a_flipped_bit_does_not() {
        let (a, b) = pair();
        let (mut a, mut b) = (SoftCipher::new(&a), SoftCipher::new(&b));
        let plain: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut m = vec![0; plain.len() + OVERHEAD];
        m[8..8 + plain.len()].copy_from_slice(&plain);
        a.seal(&mut m).unwrap();
        assert_ne!(&m[8..8 + plain.len()], &plain[..]);
        let sealed = m.clone();
        b.open(&mut m).unwrap();
        assert_eq!(&m[8..8 + plain.len()], &plain[..]);
        // The same buffer again is a replay; the next, altered, is forged.
        assert!(b.open(&mut sealed.clone()).is_err());
        let mut next = sealed;
        a.seal(&mut next).unwrap();
        next[20] ^= 1;
        assert!(b.open(&mut next).is_err());
        // Each direction has its own key: an end cannot open what it sealed itself.
        let mut own = vec![0; 64];
        a.seal(&mut own).unwrap();
        assert!(a.open(&mut own).is_err());
    }
}
