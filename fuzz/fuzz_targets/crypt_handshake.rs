//! sluice-crypt's handshake and packet opening fed a peer's bytes that are partly or wholly
//! arbitrary: a remote end may send anything, and the answer must be an error, never a panic
//! and never keys or a delivered payload it did not earn.
//!
//! The first input byte chooses what the rest is:
//! - 0: a hello and a confirmation as parsed (whatever parses re-encodes to the same bytes);
//! - 1: the peer's real hello with the byte at `input[1]` replaced by `input[2]`, then the
//!   rest as its confirmation: keys only if the confirmation is the peer's genuine one for an
//!   untouched hello; both ends AES-128-GCM when `input[1]`'s top bit is set, else
//!   AES-256-GCM (so a suite byte changed in flight is covered under either);
//! - else: a received payload with the BTH and extension headers from the first 28 bytes: it
//!   never opens (a forgery would have to guess a 128-bit tag).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_crypt::handshake::{Confirm, Endpoint, Handshake, Hello, Role};
use sluice_crypt::{EncryptService, Psk, SessionKeys, Suite, Verdict};

const I: Endpoint = Endpoint {
    qpn: 0x11,
    psn: 0x00ab_cdef,
};
const R: Endpoint = Endpoint {
    qpn: 0x22,
    psn: 0x0012_3456,
};

fn psk() -> Psk {
    Psk::new([0x5a; 32]).unwrap()
}

fn keys() -> SessionKeys {
    let (hi, hello_i) = Handshake::with_secret(Role::Initiator, psk(), I, [1; 32]).unwrap();
    let (hr, hello_r) = Handshake::with_secret(Role::Responder, psk(), R, [2; 32]).unwrap();
    let (_, confirm_i) = hi.receive_hello(&hello_r).unwrap();
    let (cr, _) = hr.receive_hello(&hello_i).unwrap();
    cr.receive_confirm(&confirm_i).unwrap()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        0 => {
            if let Ok(h) = Hello::parse(rest) {
                assert_eq!(&h.emit()[..], rest);
            }
            if let Ok(c) = Confirm::parse(rest) {
                assert_eq!(&c.emit()[..], rest);
            }
        }
        1 => {
            if rest.len() < 2 {
                return;
            }
            let (at, byte, confirm) = (rest[0] as usize % 48, rest[1], &rest[2..]);
            let suite = if rest[0] & 0x80 != 0 {
                Suite::Aes128Gcm
            } else {
                Suite::Aes256Gcm
            };
            let (hi, hello_i) =
                Handshake::with_secret_suite(Role::Initiator, suite, psk(), I, [1; 32]).unwrap();
            let (hr, hello_r) =
                Handshake::with_secret_suite(Role::Responder, suite, psk(), R, [2; 32]).unwrap();
            // The responder's genuine confirmation, for the untouched hellos.
            let (_, genuine) = hr.receive_hello(&hello_i).unwrap();
            let mut hello = hello_r;
            hello[at] = byte;
            let Ok((ci, _)) = hi.receive_hello(&hello) else {
                return;
            };
            let accepted = ci.receive_confirm(confirm).is_ok();
            assert_eq!(accepted, hello == hello_r && confirm == genuine);
        }
        _ => {
            if rest.len() < 28 {
                return;
            }
            let mut service = EncryptService::new(&keys());
            let ext_len = usize::from(rest[12]) % 17;
            let mut wire = rest[28..].to_vec();
            let verdict = service.on_receive(&rest[..12], &rest[12..12 + ext_len], &mut wire);
            assert!(matches!(verdict, Verdict::Drop(_)));
        }
    }
});
