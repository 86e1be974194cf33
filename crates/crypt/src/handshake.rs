//! The handshake: two messages each way, sans-IO, over whatever out-of-band channel sets the
//! queue pairs up (perftest's TCP exchange, say). Both ends send a [`Hello`], then both send a
//! [`Confirm`]; neither order nor turn-taking matters within a step.
//!
//! ```text
//! initiator                                   responder
//!   Hello{role 0, suite, QPN, PSN, pub}  ──▶
//!                                        ◀──  Hello{role 1, suite, QPN, PSN, pub}
//!   Confirm{HMAC(confirm_i, th)}         ──▶
//!                                        ◀──  Confirm{HMAC(confirm_r, th)}
//! ```
//!
//! Key schedule (SHA-256 throughout; `||` is concatenation):
//!
//! ```text
//! th         = SHA-256("sluice-crypt v1 transcript" || Hello_initiator || Hello_responder)
//! dh         = X25519(own ephemeral secret, peer's ephemeral public key)   (all-zero refused)
//! prk        = HKDF-Extract(salt = PSK, IKM = dh)
//! x          = HKDF-Expand(prk, "sluice-crypt v1 " || label || th, len)   for each label:
//!   "key i>r" (K), "key r>i" (K), "salt i>r" (4), "salt r>i" (4),
//!   "confirm i" (32), "confirm r" (32)
//! Confirm    = HMAC-SHA256(confirm_<own role>, th)
//! ```
//! where K is the suite's key length: 32 for AES-256-GCM, 16 for AES-128-GCM.
//!
//! The PSK is the HKDF salt, that is the HMAC key of the extract step: without it nobody,
//! not even a man in the middle who ran X25519 with each end, can compute `prk`. The X25519
//! output is the input keying material, which is what HKDF-Extract is built to condense (a
//! curve point's coordinate is not uniform); the ephemeral secrets are dropped once `dh` is
//! known, so a PSK that leaks later does not open recorded sessions (forward secrecy). Both
//! hellos whole (roles, cipher suites, QPNs, PSNs, public keys, version) are in `th`, so
//! changing any of them in flight makes the confirms disagree, and a wrong PSK is found
//! here, at setup, as [`HandshakeError::BadConfirm`], never as garbled data later.
//!
//! The cipher suite ([`Suite`]) is each end's own choice, named in its hello; the peer's must
//! be the same. An end never adopts the peer's suite: it derives keys for its own and, after
//! the peer's confirmation proves the peer's hello genuine, refuses a different one as
//! [`HandshakeError::SuiteMismatch`], at both ends alike since both hellos are known to both.
//! A suite code this end does not know (a newer peer's) is answered the same way: this end
//! sends its confirmation, derives no traffic keys, and refuses after the peer's
//! confirmation as [`HandshakeError::UnknownPeerSuite`]; the peer, knowing this end's suite,
//! refuses with `SuiteMismatch` instead of seeing the connection close.
//! A suite byte changed in flight (a downgrade) changes one end's transcript: both confirms
//! fail ([`HandshakeError::BadConfirm`]). The suite is in `th`, so the keys are bound to it.
//!
//! Every message has a fixed length and layout (see [`Hello`] and [`Confirm`]); parsing checks
//! every byte's bounds and never panics.

use aws_lc_rs::{agreement, digest, hkdf, hmac, rand};

use crate::psk::Psk;
use crate::suite::Suite;

/// The protocol's version, in every message.
pub const VERSION: u8 = 1;
/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"SLCR";
/// Bytes in a [`Hello`].
pub const HELLO_LEN: usize = 48;
/// Bytes in a [`Confirm`].
pub const CONFIRM_LEN: usize = 40;
const KIND_HELLO: u8 = 1;
const KIND_CONFIRM: u8 = 2;
const TRANSCRIPT_LABEL: &[u8] = b"sluice-crypt v1 transcript";
const EXPAND_LABEL: &[u8] = b"sluice-crypt v1 ";

/// Which end: the initiator is the end that opened the out-of-band connection (perftest's
/// client), the responder the one that accepted it (perftest's server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opened the connection.
    Initiator,
    /// Accepted it.
    Responder,
}

impl Role {
    fn byte(self) -> u8 {
        match self {
            Role::Initiator => 0,
            Role::Responder => 1,
        }
    }

    fn other(self) -> Role {
        match self {
            Role::Initiator => Role::Responder,
            Role::Responder => Role::Initiator,
        }
    }
}

/// One end's queue pair as its hello announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Its queue pair number (24 bits).
    pub qpn: u32,
    /// The first PSN it sends (24 bits).
    pub psn: u32,
}

/// Why a handshake failed. Every failure ends the handshake: the queue pair must not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// A message of the wrong length.
    #[error("handshake message of {found} bytes, expected {expected}")]
    Length {
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        found: usize,
    },
    /// Not a sluice-crypt message (a peer that does not speak the protocol).
    #[error("not a sluice-crypt handshake message (bad magic)")]
    Magic,
    /// Another version of the protocol.
    #[error("handshake version {found}, this end speaks {VERSION}")]
    Version {
        /// The peer's version.
        found: u8,
    },
    /// A message of another kind than the step expects.
    #[error("handshake message of kind {found}, expected {expected}")]
    Kind {
        /// Expected kind byte.
        expected: u8,
        /// Kind byte found.
        found: u8,
    },
    /// The peer claims this end's role (or an unknown one): a reflected message, or two
    /// initiators.
    #[error("the peer's handshake role is not the opposite of this end's")]
    Role,
    /// A hello's cipher suite byte names no suite this end knows ([`Hello::parse`]; the
    /// handshake itself answers such a hello and refuses it later, as
    /// [`HandshakeError::UnknownPeerSuite`]).
    #[error("the peer's hello names cipher suite code {found}, which this end does not know")]
    Suite {
        /// The code found.
        found: u8,
    },
    /// The peer's (authenticated) hello names another cipher suite than this end's: both
    /// ends must be configured alike; neither falls back to the other's.
    #[error(
        "cipher suite mismatch: this end uses {ours}, the peer {theirs}; both ends must choose the same"
    )]
    SuiteMismatch {
        /// This end's suite.
        ours: Suite,
        /// The peer's.
        theirs: Suite,
    },
    /// The peer's (authenticated) hello names a cipher suite code this end does not know (a
    /// newer peer's suite, say). This end still sent its confirmation, so the peer, which
    /// knows this end's suite, refuses with [`HandshakeError::SuiteMismatch`] rather than
    /// seeing this end hang up; no keys were derived for either suite.
    #[error(
        "cipher suite mismatch: this end uses {ours}, the peer cipher suite code {code}, which this end does not support; both ends must choose the same"
    )]
    UnknownPeerSuite {
        /// This end's suite.
        ours: Suite,
        /// The peer's code.
        code: u8,
    },
    /// A reserved byte or a 24-bit field's top byte not zero.
    #[error("a reserved handshake field is not zero")]
    Reserved,
    /// The peer's public key is this end's own: a reflected hello.
    #[error("the peer's hello is this end's own, reflected")]
    Reflected,
    /// X25519 refused the peer's public key (a low-order point: all-zero shared secret).
    #[error("key agreement failed: the peer's public key is unusable")]
    KeyAgreement,
    /// The peer's key confirmation does not match: a different pre-shared key, or a message
    /// changed in flight.
    #[error(
        "key confirmation failed: the peer has another pre-shared key, or a message was altered"
    )]
    BadConfirm,
    /// A local queue pair number or PSN over 24 bits.
    #[error("local QPN or PSN over 24 bits")]
    LocalRange,
    /// The system's random number generator failed.
    #[error("no randomness for the ephemeral key")]
    Random,
}

/// The first message: a role, a cipher suite, a queue pair, its first PSN and an ephemeral
/// X25519 public key.
///
/// ```text
///  0      4     5     6      7       8            12           16                         48
///  +------+-----+-----+------+-------+------------+------------+---------------------------+
///  |"SLCR"| ver | 1   | role | suite | QPN (BE32) | PSN (BE32) | X25519 public key (32 B)  |
///  +------+-----+-----+------+-------+------------+------------+---------------------------+
/// ```
/// role: 0 initiator, 1 responder; suite: 0 AES-256-GCM (the byte was reserved, zero, before
/// suites were negotiated, so such a hello is an AES-256-GCM one), 1 AES-128-GCM; QPN and
/// PSN are 24-bit values, their top byte zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The sender's role.
    pub role: Role,
    /// The cipher suite the sender uses.
    pub suite: Suite,
    /// The sender's queue pair.
    pub endpoint: Endpoint,
    /// The sender's ephemeral public key.
    pub public: [u8; 32],
}

fn header(buf: &[u8], expected_len: usize, kind: u8) -> Result<Role, HandshakeError> {
    if buf.len() != expected_len {
        return Err(HandshakeError::Length {
            expected: expected_len,
            found: buf.len(),
        });
    }
    if buf[..4] != MAGIC {
        return Err(HandshakeError::Magic);
    }
    if buf[4] != VERSION {
        return Err(HandshakeError::Version { found: buf[4] });
    }
    if buf[5] != kind {
        return Err(HandshakeError::Kind {
            expected: kind,
            found: buf[5],
        });
    }
    match buf[6] {
        0 => Ok(Role::Initiator),
        1 => Ok(Role::Responder),
        _ => Err(HandshakeError::Role),
    }
}

fn be24(bytes: &[u8]) -> Result<u32, HandshakeError> {
    let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if v >> 24 != 0 {
        return Err(HandshakeError::Reserved);
    }
    Ok(v)
}

impl Hello {
    /// Decodes a hello; never panics.
    pub fn parse(buf: &[u8]) -> Result<Hello, HandshakeError> {
        let role = header(buf, HELLO_LEN, KIND_HELLO)?;
        let suite = Suite::from_code(buf[7]).ok_or(HandshakeError::Suite { found: buf[7] })?;
        let mut public = [0; 32];
        public.copy_from_slice(&buf[16..48]);
        Ok(Hello {
            role,
            suite,
            endpoint: Endpoint {
                qpn: be24(&buf[8..12])?,
                psn: be24(&buf[12..16])?,
            },
            public,
        })
    }

    /// Encodes it.
    pub fn emit(&self) -> [u8; HELLO_LEN] {
        let mut out = [0; HELLO_LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = KIND_HELLO;
        out[6] = self.role.byte();
        out[7] = self.suite.code();
        out[8..12].copy_from_slice(&self.endpoint.qpn.to_be_bytes());
        out[12..16].copy_from_slice(&self.endpoint.psn.to_be_bytes());
        out[16..].copy_from_slice(&self.public);
        out
    }
}

/// The second message: the sender's key confirmation.
///
/// ```text
///  0      4     5     6      7       8                                              40
///  +------+-----+-----+------+-------+----------------------------------------------+
///  |"SLCR"| ver | 2   | role | 0     | HMAC-SHA256(confirm_<role>, th) (32 B)       |
///  +------+-----+-----+------+-------+----------------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirm {
    /// The sender's role.
    pub role: Role,
    /// Its MAC over the transcript.
    pub mac: [u8; 32],
}

impl Confirm {
    /// Decodes a confirmation; never panics.
    pub fn parse(buf: &[u8]) -> Result<Confirm, HandshakeError> {
        let role = header(buf, CONFIRM_LEN, KIND_CONFIRM)?;
        if buf[7] != 0 {
            return Err(HandshakeError::Reserved);
        }
        let mut mac = [0; 32];
        mac.copy_from_slice(&buf[8..40]);
        Ok(Confirm { role, mac })
    }

    /// Encodes it.
    pub fn emit(&self) -> [u8; CONFIRM_LEN] {
        let mut out = [0; CONFIRM_LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = KIND_CONFIRM;
        out[6] = self.role.byte();
        out[8..].copy_from_slice(&self.mac);
        out
    }
}

/// One direction's traffic key material: the suite, its key and the nonce's 4-byte salt.
#[derive(Clone, PartialEq, Eq)]
pub struct TrafficSecret {
    /// Which AEAD the key is for.
    pub(crate) suite: Suite,
    /// The key: its first [`Suite::key_len`] bytes (the rest zero).
    pub(crate) key: [u8; 32],
    /// The nonce's fixed first four bytes.
    pub(crate) salt: [u8; 4],
}

impl Drop for TrafficSecret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.key);
        zeroize::Zeroize::zeroize(&mut self.salt);
    }
}

impl TrafficSecret {
    /// The key, as long as the suite's.
    pub(crate) fn key_bytes(&self) -> &[u8] {
        &self.key[..self.suite.key_len()]
    }

    /// The suite it is for.
    pub fn suite(&self) -> Suite {
        self.suite
    }
}

impl std::fmt::Debug for TrafficSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrafficSecret(..)")
    }
}

/// What a completed handshake gives: both directions' secrets and the peer's authenticated
/// queue pair.
#[derive(Debug, Clone)]
pub struct SessionKeys {
    /// This end's role.
    pub role: Role,
    /// The cipher suite both ends named.
    pub suite: Suite,
    /// This end's queue pair, as it announced it.
    pub local: Endpoint,
    /// The peer's queue pair, as its (authenticated) hello announced it. The caller must
    /// connect to exactly this QPN and expect exactly this PSN, or refuse.
    pub peer: Endpoint,
    /// For what this end sends.
    pub send: TrafficSecret,
    /// For what this end receives.
    pub receive: TrafficSecret,
}

/// Step one: this end's hello is out, the peer's awaited.
#[derive(Debug)]
pub struct Handshake {
    psk: Psk,
    hello: Hello,
    secret: agreement::PrivateKey,
}

/// Step two: this end's confirmation is out, the peer's awaited.
pub struct Confirming {
    role: Role,
    /// The keys if the peer's hello named this end's suite, else the refusal
    /// ([`HandshakeError::SuiteMismatch`] or [`HandshakeError::UnknownPeerSuite`]) that the
    /// peer's confirmation, once it proves that hello genuine, turns into the outcome.
    keys: Result<SessionKeys, HandshakeError>,
    /// The peer's confirmation to be: never shown (it would let a reader forge it).
    expected: [u8; 32],
}

impl std::fmt::Debug for Confirming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirming")
            .field("role", &self.role)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn expand<const N: usize>(prk: &hkdf::Prk, label: &[u8], th: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    expand_into(prk, label, th, &mut out);
    out
}

fn expand_into(prk: &hkdf::Prk, label: &[u8], th: &[u8], out: &mut [u8]) {
    prk.expand(&[EXPAND_LABEL, label, th], Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .expect("HKDF-SHA256 expands up to 8160 bytes; these are at most 32");
}

/// One direction's secret for `suite`: a key of the suite's length (HKDF's output length is
/// the key's, not a cut of a longer one) and the salt.
fn traffic(
    prk: &hkdf::Prk,
    suite: Suite,
    key_label: &[u8],
    salt_label: &[u8],
    th: &[u8],
) -> TrafficSecret {
    let mut key = [0; 32];
    expand_into(prk, key_label, th, &mut key[..suite.key_len()]);
    TrafficSecret {
        suite,
        key,
        salt: expand(prk, salt_label, th),
    }
}

impl Handshake {
    /// Starts a handshake for the default suite (AES-256-GCM) with a fresh ephemeral key from
    /// the system's generator; returns the hello to send.
    pub fn start(
        role: Role,
        psk: Psk,
        local: Endpoint,
    ) -> Result<(Handshake, [u8; HELLO_LEN]), HandshakeError> {
        Handshake::start_suite(role, Suite::default(), psk, local)
    }

    /// [`Handshake::start`] for `suite`: the peer must name the same one.
    pub fn start_suite(
        role: Role,
        suite: Suite,
        psk: Psk,
        local: Endpoint,
    ) -> Result<(Handshake, [u8; HELLO_LEN]), HandshakeError> {
        let mut secret = [0; 32];
        rand::fill(&mut secret).map_err(|_| HandshakeError::Random)?;
        let started = Handshake::with_secret_suite(role, suite, psk, local, secret);
        zeroize::Zeroize::zeroize(&mut secret);
        started
    }

    /// Starts a handshake for the default suite with the given ephemeral secret (tests, and
    /// callers with their own generator). The secret must be fresh, random, and never used
    /// again.
    pub fn with_secret(
        role: Role,
        psk: Psk,
        local: Endpoint,
        secret: [u8; 32],
    ) -> Result<(Handshake, [u8; HELLO_LEN]), HandshakeError> {
        Handshake::with_secret_suite(role, Suite::default(), psk, local, secret)
    }

    /// [`Handshake::with_secret`] for `suite`.
    pub fn with_secret_suite(
        role: Role,
        suite: Suite,
        psk: Psk,
        local: Endpoint,
        secret: [u8; 32],
    ) -> Result<(Handshake, [u8; HELLO_LEN]), HandshakeError> {
        if local.qpn >> 24 != 0 || local.psn >> 24 != 0 {
            return Err(HandshakeError::LocalRange);
        }
        let secret = agreement::PrivateKey::from_private_key(&agreement::X25519, &secret)
            .map_err(|_| HandshakeError::KeyAgreement)?;
        let public = secret
            .compute_public_key()
            .map_err(|_| HandshakeError::KeyAgreement)?;
        let mut public_bytes = [0; 32];
        public_bytes.copy_from_slice(public.as_ref());
        let hello = Hello {
            role,
            suite,
            endpoint: local,
            public: public_bytes,
        };
        let bytes = hello.emit();
        Ok((Handshake { psk, hello, secret }, bytes))
    }

    /// Takes the peer's hello; returns the next step and the confirmation to send.
    pub fn receive_hello(
        self,
        bytes: &[u8],
    ) -> Result<(Confirming, [u8; CONFIRM_LEN]), HandshakeError> {
        // A hello whose only fault is a suite code this end does not know is answered like
        // any other (its confirmation tells the peer this end's hello was genuine, so the peer
        // can name the mismatch) and refused after the peer's confirmation, as a mismatch is.
        // Its fields are parsed with the code read as 0; the transcript takes the bytes as
        // received, code included.
        let (peer, peer_suite) = match Hello::parse(bytes) {
            Err(HandshakeError::Suite { found }) => {
                let mut known = [0; HELLO_LEN];
                known.copy_from_slice(bytes);
                known[7] = Suite::default().code();
                (Hello::parse(&known)?, Err(found))
            }
            parsed => {
                let peer = parsed?;
                (peer, Ok(peer.suite))
            }
        };
        let mut peer_bytes = [0; HELLO_LEN];
        peer_bytes.copy_from_slice(bytes);
        let role = self.hello.role;
        if peer.role != role.other() {
            return Err(HandshakeError::Role);
        }
        if peer.public == self.hello.public {
            return Err(HandshakeError::Reflected);
        }
        let own_bytes = self.hello.emit();
        let (initiator, responder) = match role {
            Role::Initiator => (&own_bytes, &peer_bytes),
            Role::Responder => (&peer_bytes, &own_bytes),
        };
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(TRANSCRIPT_LABEL);
        ctx.update(initiator);
        ctx.update(responder);
        let th = ctx.finish();
        let th = th.as_ref();
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, self.psk.bytes());
        let prk = agreement::agree(
            &self.secret,
            agreement::UnparsedPublicKey::new(&agreement::X25519, &peer.public),
            HandshakeError::KeyAgreement,
            |dh| {
                if dh.iter().all(|&b| b == 0) {
                    return Err(HandshakeError::KeyAgreement);
                }
                Ok(salt.extract(dh))
            },
        )?;
        // Traffic keys only when the peer named this end's suite: a mismatch (or a code this
        // end does not know) is refused once the peer's confirmation shows whether its hello
        // arrived as sent, and until then only the confirmation keys are needed.
        let suite = self.hello.suite;
        let confirm_i: [u8; 32] = expand(&prk, b"confirm i", th);
        let confirm_r: [u8; 32] = expand(&prk, b"confirm r", th);
        let mac = |key: &[u8; 32]| {
            let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), th);
            let mut out = [0; 32];
            out.copy_from_slice(tag.as_ref());
            out
        };
        let (own, expected) = match role {
            Role::Initiator => (mac(&confirm_i), mac(&confirm_r)),
            Role::Responder => (mac(&confirm_r), mac(&confirm_i)),
        };
        let confirm = Confirm { role, mac: own }.emit();
        let keys = match peer_suite {
            Ok(theirs) if theirs == suite => {
                let i2r = traffic(&prk, suite, b"key i>r", b"salt i>r", th);
                let r2i = traffic(&prk, suite, b"key r>i", b"salt r>i", th);
                let (send, receive) = match role {
                    Role::Initiator => (i2r, r2i),
                    Role::Responder => (r2i, i2r),
                };
                Ok(SessionKeys {
                    role,
                    suite,
                    local: self.hello.endpoint,
                    peer: peer.endpoint,
                    send,
                    receive,
                })
            }
            Ok(theirs) => Err(HandshakeError::SuiteMismatch {
                ours: suite,
                theirs,
            }),
            Err(code) => Err(HandshakeError::UnknownPeerSuite { ours: suite, code }),
        };
        Ok((
            Confirming {
                role,
                keys,
                expected,
            },
            confirm,
        ))
    }
}

impl Confirming {
    /// Takes the peer's confirmation: the keys if it proves the same pre-shared key and
    /// transcript, else [`HandshakeError::BadConfirm`]; then, the peer's hello now known to
    /// be genuine, [`HandshakeError::SuiteMismatch`] if it named another suite, or
    /// [`HandshakeError::UnknownPeerSuite`] if it named a code this end does not know.
    pub fn receive_confirm(self, bytes: &[u8]) -> Result<SessionKeys, HandshakeError> {
        let confirm = Confirm::parse(bytes)?;
        if confirm.role != self.role.other() {
            return Err(HandshakeError::Role);
        }
        aws_lc_rs::constant_time::verify_slices_are_equal(&confirm.mac, &self.expected)
            .map_err(|_| HandshakeError::BadConfirm)?;
        self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn psk(b: u8) -> Psk {
        Psk::new([b; 32]).unwrap()
    }

    const I: Endpoint = Endpoint {
        qpn: 0x11,
        psn: 0x00ab_cdef,
    };
    const R: Endpoint = Endpoint {
        qpn: 0x22,
        psn: 0x0012_3456,
    };

    /// Runs both ends; returns each end's outcome.
    pub(crate) fn run(
        psk_i: Psk,
        psk_r: Psk,
        tamper: impl Fn(&mut Vec<u8>),
    ) -> (
        Result<SessionKeys, HandshakeError>,
        Result<SessionKeys, HandshakeError>,
    ) {
        let (hi, hello_i) = Handshake::with_secret(Role::Initiator, psk_i, I, [1; 32]).unwrap();
        let (hr, hello_r) = Handshake::with_secret(Role::Responder, psk_r, R, [2; 32]).unwrap();
        let mut hello_i = hello_i.to_vec();
        tamper(&mut hello_i);
        let (ci, confirm_i) = hi.receive_hello(&hello_r).unwrap();
        let (cr, confirm_r) = match hr.receive_hello(&hello_i) {
            Ok(x) => x,
            Err(e) => return (Err(e), Err(e)),
        };
        (
            ci.receive_confirm(&confirm_r),
            cr.receive_confirm(&confirm_i),
        )
    }

    #[test]
    fn both_ends_agree_on_keys_and_endpoints() {
        let (i, r) = run(psk(9), psk(9), |_| {});
        let (i, r) = (i.unwrap(), r.unwrap());
        assert_eq!(i.send, r.receive);
        assert_eq!(i.receive, r.send);
        assert_ne!(i.send, i.receive);
        assert_eq!((i.peer, r.peer), (R, I));
    }

    /// Runs both ends with their own suites; `tamper` may change either hello in flight
    /// (the initiator's first). Returns each end's outcome.
    fn run_suites(
        suite_i: Suite,
        suite_r: Suite,
        tamper: impl Fn(&mut [u8; HELLO_LEN], &mut [u8; HELLO_LEN]),
    ) -> (
        Result<SessionKeys, HandshakeError>,
        Result<SessionKeys, HandshakeError>,
    ) {
        let (hi, mut hello_i) =
            Handshake::with_secret_suite(Role::Initiator, suite_i, psk(9), I, [1; 32]).unwrap();
        let (hr, mut hello_r) =
            Handshake::with_secret_suite(Role::Responder, suite_r, psk(9), R, [2; 32]).unwrap();
        tamper(&mut hello_i, &mut hello_r);
        let (ci, confirm_i) = hi.receive_hello(&hello_r).unwrap();
        let (cr, confirm_r) = hr.receive_hello(&hello_i).unwrap();
        (
            ci.receive_confirm(&confirm_r),
            cr.receive_confirm(&confirm_i),
        )
    }

    #[test]
    fn each_suite_agrees_on_keys_of_its_length() {
        let mut keys = Vec::new();
        for suite in Suite::ALL {
            let (i, r) = run_suites(suite, suite, |_, _| {});
            let (i, r) = (i.unwrap(), r.unwrap());
            assert_eq!((i.suite, r.suite), (suite, suite));
            assert_eq!(i.send, r.receive);
            assert_eq!(i.receive, r.send);
            assert_eq!(i.send.key_bytes().len(), suite.key_len());
            assert!(i.send.key[suite.key_len()..].iter().all(|&b| b == 0));
            keys.push(i.send.key_bytes().to_vec());
        }
        // The same ephemeral secrets and PSK, another suite: other keys (the suite is in the
        // transcript), not the 256-bit key cut short.
        assert_ne!(keys[0][..16], keys[1][..]);
    }

    #[test]
    fn a_suite_mismatch_is_refused_at_both_ends_naming_both_suites() {
        use Suite::{Aes128Gcm as S128, Aes256Gcm as S256};
        for (si, sr) in [(S256, S128), (S128, S256)] {
            let (i, r) = run_suites(si, sr, |_, _| {});
            assert_eq!(
                i.unwrap_err(),
                HandshakeError::SuiteMismatch {
                    ours: si,
                    theirs: sr
                }
            );
            let err = r.unwrap_err();
            assert_eq!(
                err,
                HandshakeError::SuiteMismatch {
                    ours: sr,
                    theirs: si
                }
            );
            assert!(err.to_string().contains(si.name()) && err.to_string().contains(sr.name()));
        }
    }

    #[test]
    fn a_suite_changed_in_flight_fails_both_confirmations() {
        // One hello's suite flipped, or both (a downgrade of two AES-256 ends to AES-128,
        // or two mismatched ends made to look alike): no end gets keys, none falls back.
        for (si, sr) in [
            (Suite::Aes256Gcm, Suite::Aes256Gcm),
            (Suite::Aes128Gcm, Suite::Aes128Gcm),
            (Suite::Aes256Gcm, Suite::Aes128Gcm),
        ] {
            for which in 0..3 {
                let (i, r) = run_suites(si, sr, |hi, hr| {
                    if which != 1 {
                        hi[7] ^= 1;
                    }
                    if which != 0 {
                        hr[7] ^= 1;
                    }
                });
                assert_eq!(
                    i.unwrap_err(),
                    HandshakeError::BadConfirm,
                    "{si} {sr} {which}"
                );
                assert_eq!(
                    r.unwrap_err(),
                    HandshakeError::BadConfirm,
                    "{si} {sr} {which}"
                );
            }
        }
    }

    #[test]
    fn a_wrong_psk_fails_at_setup_on_both_ends() {
        let (i, r) = run(psk(9), psk(8), |_| {});
        assert_eq!(i.unwrap_err(), HandshakeError::BadConfirm);
        assert_eq!(r.unwrap_err(), HandshakeError::BadConfirm);
    }

    #[test]
    fn a_qpn_or_psn_changed_in_flight_fails_the_confirmation() {
        for at in [11, 15] {
            let (i, r) = run(psk(9), psk(9), |h| h[at] ^= 1);
            assert_eq!(i.unwrap_err(), HandshakeError::BadConfirm, "byte {at}");
            assert_eq!(r.unwrap_err(), HandshakeError::BadConfirm, "byte {at}");
        }
    }

    #[test]
    fn a_reflected_hello_or_two_initiators_are_refused() {
        let (h, hello) = Handshake::with_secret(Role::Initiator, psk(9), I, [1; 32]).unwrap();
        assert_eq!(h.receive_hello(&hello).unwrap_err(), HandshakeError::Role);
        let (h, hello) = Handshake::with_secret(Role::Initiator, psk(9), I, [1; 32]).unwrap();
        let mut reflected = hello;
        reflected[6] = 1;
        assert_eq!(
            h.receive_hello(&reflected).unwrap_err(),
            HandshakeError::Reflected
        );
    }

    #[test]
    fn a_low_order_public_key_is_refused() {
        let (h, _) = Handshake::with_secret(Role::Initiator, psk(9), I, [1; 32]).unwrap();
        let evil = Hello {
            role: Role::Responder,
            suite: Suite::Aes256Gcm,
            endpoint: R,
            public: [0; 32],
        };
        assert_eq!(
            h.receive_hello(&evil.emit()).unwrap_err(),
            HandshakeError::KeyAgreement
        );
    }

    #[test]
    fn malformed_messages_have_typed_errors() {
        let good = Hello {
            role: Role::Responder,
            suite: Suite::Aes256Gcm,
            endpoint: R,
            public: [3; 32],
        }
        .emit();
        assert_eq!(
            Hello::parse(&good[..47]).unwrap_err(),
            HandshakeError::Length {
                expected: 48,
                found: 47
            }
        );
        let mut b = good;
        b[0] = b'X';
        assert_eq!(Hello::parse(&b).unwrap_err(), HandshakeError::Magic);
        let mut b = good;
        b[4] = 2;
        assert_eq!(
            Hello::parse(&b).unwrap_err(),
            HandshakeError::Version { found: 2 }
        );
        let mut b = good;
        b[5] = 2;
        assert!(matches!(
            Hello::parse(&b).unwrap_err(),
            HandshakeError::Kind { .. }
        ));
        let mut b = good;
        b[7] = 2;
        assert_eq!(
            Hello::parse(&b).unwrap_err(),
            HandshakeError::Suite { found: 2 }
        );
        let mut b = good;
        b[7] = 1;
        assert_eq!(Hello::parse(&b).unwrap().suite, Suite::Aes128Gcm);
        let confirm = Confirm {
            role: Role::Initiator,
            mac: [4; 32],
        }
        .emit();
        let mut c = confirm;
        c[7] = 1;
        assert_eq!(Confirm::parse(&c).unwrap_err(), HandshakeError::Reserved);
        let mut b = good;
        b[8] = 1;
        assert_eq!(Hello::parse(&b).unwrap_err(), HandshakeError::Reserved);
        let mut b = good;
        b[6] = 7;
        assert_eq!(Hello::parse(&b).unwrap_err(), HandshakeError::Role);
        assert_eq!(Hello::parse(&good).unwrap().emit(), good);
        // perftest's own exchange line is not a hello: a peer that does not speak this.
        let perftest = b"0000:000011:abcdef:00001234:0000000000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:00:01";
        assert!(Hello::parse(perftest).is_err());
        assert!(Hello::parse(&perftest[..48]).is_err());
    }

    #[test]
    fn a_local_endpoint_over_24_bits_is_refused() {
        let big = Endpoint {
            qpn: 1 << 24,
            psn: 0,
        };
        assert_eq!(
            Handshake::with_secret(Role::Initiator, psk(9), big, [1; 32]).unwrap_err(),
            HandshakeError::LocalRange
        );
    }

    #[test]
    fn start_draws_a_fresh_key_each_time() {
        let (_, a) = Handshake::start(Role::Initiator, psk(9), I).unwrap();
        let (_, b) = Handshake::start(Role::Initiator, psk(9), I).unwrap();
        assert_ne!(a[16..], b[16..]);
    }

    proptest::proptest! {
        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..100)) {
            let _ = Hello::parse(&bytes);
            let _ = Confirm::parse(&bytes);
            let (h, _) = Handshake::with_secret(Role::Initiator, psk(9), I, [1; 32]).unwrap();
            if let Ok((c, _)) = h.receive_hello(&bytes) {
                let _ = c.receive_confirm(&bytes);
            }
        }

        #[test]
        fn any_single_bit_flip_in_a_message_fails_the_handshake(msg in 0usize..4, bit in 0usize..(40 * 8)) {
            // Flip one bit of one of the four messages in flight: no end gets keys.
            let (hi, hello_i) = Handshake::with_secret(Role::Initiator, psk(9), I, [1; 32]).unwrap();
            let (hr, hello_r) = Handshake::with_secret(Role::Responder, psk(9), R, [2; 32]).unwrap();
            let (mut hello_i, mut hello_r) = (hello_i.to_vec(), hello_r.to_vec());
            match msg {
                0 => hello_i[bit / 8 % HELLO_LEN] ^= 1 << (bit % 8),
                1 => hello_r[bit / 8 % HELLO_LEN] ^= 1 << (bit % 8),
                _ => {}
            }
            let step_i = hi.receive_hello(&hello_r);
            let step_r = hr.receive_hello(&hello_i);
            let (Ok((ci, confirm_i)), Ok((cr, confirm_r))) = (step_i, step_r) else {
                return Ok(());
            };
            let (mut confirm_i, mut confirm_r) = (confirm_i.to_vec(), confirm_r.to_vec());
            match msg {
                2 => confirm_i[bit / 8] ^= 1 << (bit % 8),
                3 => confirm_r[bit / 8] ^= 1 << (bit % 8),
                _ => {}
            }
            let i = ci.receive_confirm(&confirm_r);
            let r = cr.receive_confirm(&confirm_i);
            proptest::prop_assert!(i.is_err() || r.is_err());
            if msg < 2 {
                proptest::prop_assert!(i.is_err() && r.is_err());
            }
        }
    }
}
