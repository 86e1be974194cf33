//! Sealing and opening one packet's payload.
//!
//! On the wire, an encrypted queue pair's payload (what the BTH's opcode says is payload, the
//! pad excluded) becomes
//!
//! ```text
//! +----------------------+---------------------------+--------------------+
//! | explicit nonce (8 B) | ciphertext (payload len)  | GCM tag (16 B)     |  [pad] [ICRC]
//! | counter, big endian  | AES-256-GCM or -128-GCM   |                    |
//! +----------------------+---------------------------+--------------------+
//! ```
//!
//! The GCM nonce is 12 bytes: the direction's 4-byte salt (from the handshake) then the 8-byte
//! counter carried in the packet. The sender's counter goes up by one for every packet it
//! seals, the first sending and every retransmission or regenerated READ response alike, and
//! is never reset under a key: so no nonce ever protects two plaintexts, whatever the
//! transport resends and whatever memory held at the time. The associated data is the BTH
//! with byte 4 zeroed (FECN, BECN: switches may set them, the ICRC masks them too) followed
//! by the InfiniBand extension headers (RETH, AETH, ImmDt, IETH, DETH...) as sent; Sluice's
//! congestion-control header is left out (switches write telemetry into it).
//!
//! The receiver checks the tag before anything else, then a window of the last
//! [`REPLAY_WINDOW`] counters: a packet seen before (a replay, or the network's duplicate) or
//! older than the window is dropped, even after the 24-bit PSN has wrapped.

use std::ops::Range;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey};

use crate::handshake::TrafficSecret;

/// Bytes of explicit nonce in front of the ciphertext.
pub const NONCE_LEN: usize = 8;
/// Bytes of GCM tag after the ciphertext.
pub const TAG_LEN: usize = 16;
/// Bytes an encrypted payload grows by.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// Counters the receiver remembers behind the highest it has accepted.
pub const REPLAY_WINDOW: u64 = 1024;
/// Packets one key may seal. With 4 KiB payloads (259 AES blocks each with the tag) that is
/// about 2^36 blocks, which keeps AES-GCM's distinguishing advantage near 2^-56 (the margin
/// TLS 1.3 keeps); past it, [`SealError::Exhausted`] until a new handshake.
pub const PACKETS_PER_KEY: u64 = 1 << 28;
/// The longest associated data: a BTH and the longest extension headers (an AtomicETH).
const AAD_MAX: usize = 12 + 32;

/// Why a packet could not be sealed. The packet must not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// This key has sealed [`PACKETS_PER_KEY`] packets: a new handshake is due.
    #[error("the traffic key has sealed its last packet; a new handshake is due")]
    Exhausted,
    /// The buffer has no room for the nonce and tag.
    #[error("no room for the nonce and tag")]
    Short,
    /// Not a 12-byte BTH, or extension headers longer than any opcode's.
    #[error("headers of the wrong length for associated data")]
    Headers,
}

/// Why a received packet was dropped. It must not be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Shorter than a nonce and a tag: not sealed (a peer without the key, say).
    #[error("payload shorter than a nonce and a tag")]
    Short,
    /// The tag does not verify: altered in flight, or sealed under another key.
    #[error("authentication tag does not verify")]
    Forged,
    /// A counter seen before, or older than the window: a replay or a duplicate.
    #[error("counter already seen or behind the replay window")]
    Replayed,
    /// Not a 12-byte BTH, or extension headers longer than any opcode's.
    #[error("headers of the wrong length for associated data")]
    Headers,
}

fn nonce(salt: [u8; 4], counter: u64) -> Nonce {
    let mut n = [0; 12];
    n[..4].copy_from_slice(&salt);
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// The associated data for a packet: its BTH (byte 4 zeroed) and its IBA extension headers.
fn aad(bth: &[u8], ext: &[u8], out: &mut [u8; AAD_MAX]) -> Option<usize> {
    if bth.len() != 12 || ext.len() > AAD_MAX - 12 {
        return None;
    }
    out[..12].copy_from_slice(bth);
    out[4] = 0;
    out[12..12 + ext.len()].copy_from_slice(ext);
    Some(12 + ext.len())
}

fn key(secret: &TrafficSecret) -> LessSafeKey {
    LessSafeKey::new(
        UnboundKey::new(secret.suite.algorithm(), secret.key_bytes())
            .expect("the handshake derives a key of the suite's length"),
    )
}

/// Seals what one end sends under one direction's key.
pub struct SealKey {
    key: LessSafeKey,
    salt: [u8; 4],
    next: u64,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealKey").field("next", &self.next).finish()
    }
}

impl SealKey {
    /// From the handshake's secret for this direction.
    pub fn new(secret: &TrafficSecret) -> SealKey {
        SealKey {
            key: key(secret),
            salt: secret.salt,
            next: 0,
        }
    }

    /// The counter the next sealed packet gets (packets sealed so far).
    pub fn sealed(&self) -> u64 {
        self.next
    }

    /// Seals `wire` in place: `wire` is [`NONCE_LEN`] bytes of room, the plaintext, then
    /// [`TAG_LEN`] bytes of room; `bth` and `ext` are the packet's headers exactly as they
    /// will be sent (the pad count already that of the grown payload). Returns the counter
    /// used. Every call uses a new counter, even one that fails.
    pub fn seal(&mut self, bth: &[u8], ext: &[u8], wire: &mut [u8]) -> Result<u64, SealError> {
        let len = wire.len();
        if len < OVERHEAD {
            return Err(SealError::Short);
        }
        let mut aad_buf = [0; AAD_MAX];
        let aad_len = aad(bth, ext, &mut aad_buf).ok_or(SealError::Headers)?;
        if self.next >= PACKETS_PER_KEY {
            return Err(SealError::Exhausted);
        }
        let counter = self.next;
        self.next += 1;
        wire[..NONCE_LEN].copy_from_slice(&counter.to_be_bytes());
        let (body, tag_room) = wire[NONCE_LEN..].split_at_mut(len - OVERHEAD);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                nonce(self.salt, counter),
                Aad::from(&aad_buf[..aad_len]),
                body,
            )
            .map_err(|_| SealError::Short)?;
        tag_room.copy_from_slice(tag.as_ref());
        Ok(counter)
    }

    /// [`SealKey::seal`] out of place: reads the plaintext from `plain` (left unchanged) and
    /// writes nonce, ciphertext and tag to `wire`, [`OVERHEAD`] bytes longer. Spares the
    /// copy of the plaintext into the packet buffer.
    pub fn seal_from(
        &mut self,
        bth: &[u8],
        ext: &[u8],
        plain: &[u8],
        wire: &mut [u8],
    ) -> Result<u64, SealError> {
        if wire.len() != plain.len() + OVERHEAD {
            return Err(SealError::Short);
        }
        let mut aad_buf = [0; AAD_MAX];
        let aad_len = aad(bth, ext, &mut aad_buf).ok_or(SealError::Headers)?;
        if self.next >= PACKETS_PER_KEY {
            return Err(SealError::Exhausted);
        }
        let counter = self.next;
        self.next += 1;
        wire[..NONCE_LEN].copy_from_slice(&counter.to_be_bytes());
        let (body, tag) = wire[NONCE_LEN..].split_at_mut(plain.len());
        self.key
            .seal_out_of_place_scatter(
                nonce(self.salt, counter),
                Aad::from(&aad_buf[..aad_len]),
                plain,
                body,
                &[],
                tag,
            )
            .map_err(|_| SealError::Short)?;
        Ok(counter)
    }

    #[cfg(test)]
    pub(crate) fn skip_to(&mut self, next: u64) {
        self.next = next;
    }
}

/// The counters a receiver has accepted: the highest, and which of the
/// [`REPLAY_WINDOW`] below it.
#[derive(Debug, Clone)]
struct ReplayWindow {
    highest: Option<u64>,
    /// Bit `c % REPLAY_WINDOW` set: counter `c` (within the window) was accepted.
    seen: [u64; (REPLAY_WINDOW / 64) as usize],
}

impl ReplayWindow {
    fn new() -> Self {
        ReplayWindow {
            highest: None,
            seen: [0; (REPLAY_WINDOW / 64) as usize],
        }
    }

    fn bit(c: u64) -> (usize, u64) {
        let i = c % REPLAY_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn fresh(&self, c: u64) -> bool {
        let Some(h) = self.highest else { return true };
        if c > h {
            return true;
        }
        if h - c >= REPLAY_WINDOW {
            return false;
        }
        let (w, b) = Self::bit(c);
        self.seen[w] & b == 0
    }

    fn accept(&mut self, c: u64) {
        match self.highest {
            Some(h) if c <= h => {}
            Some(h) => {
                // Forget the counters that fall out of the window: their slots are reused.
                for old in (h + 1)..=c.min(h + REPLAY_WINDOW) {
                    let (w, b) = Self::bit(old);
                    self.seen[w] &= !b;
                }
                self.highest = Some(c);
            }
            None => {
                self.highest = Some(c);
            }
        }
        let (w, b) = Self::bit(c);
        self.seen[w] |= b;
    }
}

/// Opens what one end receives under the other direction's key.
pub struct OpenKey {
    key: LessSafeKey,
    salt: [u8; 4],
    window: ReplayWindow,
}

impl std::fmt::Debug for OpenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenKey")
            .field("highest", &self.window.highest)
            .finish()
    }
}

impl OpenKey {
    /// From the handshake's secret for this direction.
    pub fn new(secret: &TrafficSecret) -> OpenKey {
        OpenKey {
            key: key(secret),
            salt: secret.salt,
            window: ReplayWindow::new(),
        }
    }

    /// Opens `wire` (nonce, ciphertext, tag) in place; `bth` and `ext` as received. Returns
    /// where the plaintext is in `wire`. On an error the packet must be dropped: what is left
    /// in `wire` is unspecified and must not be delivered.
    pub fn open(
        &mut self,
        bth: &[u8],
        ext: &[u8],
        wire: &mut [u8],
    ) -> Result<Range<usize>, OpenError> {
        let len = wire.len();
        if len < OVERHEAD {
            return Err(OpenError::Short);
        }
        let mut aad_buf = [0; AAD_MAX];
        let aad_len = aad(bth, ext, &mut aad_buf).ok_or(OpenError::Headers)?;
        let mut counter = [0; 8];
        counter.copy_from_slice(&wire[..NONCE_LEN]);
        let counter = u64::from_be_bytes(counter);
        // Checked before the tag only to spare the work: the window changes only after it.
        if !self.window.fresh(counter) {
            return Err(OpenError::Replayed);
        }
        self.key
            .open_in_place(
                nonce(self.salt, counter),
                Aad::from(&aad_buf[..aad_len]),
                &mut wire[NONCE_LEN..],
            )
            .map_err(|_| OpenError::Forged)?;
        self.window.accept(counter);
        Ok(NONCE_LEN..len - TAG_LEN)
    }

    /// [`OpenKey::open`] out of place: reads `wire` (left unchanged) and writes the
    /// plaintext into `out`, as long as `wire`, at the range returned. Spares the copy of
    /// the packet into a buffer of its own. On an error nothing in `out` may be delivered.
    pub fn open_from(
        &mut self,
        bth: &[u8],
        ext: &[u8],
        wire: &[u8],
        out: &mut [u8],
    ) -> Result<Range<usize>, OpenError> {
        let len = wire.len();
        if len < OVERHEAD || out.len() != len {
            return Err(OpenError::Short);
        }
        let mut aad_buf = [0; AAD_MAX];
        let aad_len = aad(bth, ext, &mut aad_buf).ok_or(OpenError::Headers)?;
        let mut counter = [0; 8];
        counter.copy_from_slice(&wire[..NONCE_LEN]);
        let counter = u64::from_be_bytes(counter);
        if !self.window.fresh(counter) {
            return Err(OpenError::Replayed);
        }
        let plain = NONCE_LEN..len - TAG_LEN;
        self.key
            .open_separate_gather(
                nonce(self.salt, counter),
                Aad::from(&aad_buf[..aad_len]),
                &wire[plain.clone()],
                &wire[plain.end..],
                &mut out[plain.clone()],
            )
            .map_err(|_| OpenError::Forged)?;
        self.window.accept(counter);
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Suite;

    fn secret(b: u8) -> TrafficSecret {
        suite_secret(Suite::Aes256Gcm, b)
    }

    fn suite_secret(suite: Suite, b: u8) -> TrafficSecret {
        let mut key = [0; 32];
        key[..suite.key_len()].fill(b);
        TrafficSecret {
            suite,
            key,
            salt: [b, 1, 2, 3],
        }
    }

    #[test]
    fn each_suite_round_trips_with_the_same_wire_layout() {
        let plain: Vec<u8> = (0..4072u32).map(|i| (i * 5) as u8).collect();
        let mut wires = Vec::new();
        for suite in Suite::ALL {
            let (mut s, mut o) = (
                SealKey::new(&suite_secret(suite, 6)),
                OpenKey::new(&suite_secret(suite, 6)),
            );
            let mut wire = sealed(&mut s, &plain);
            assert_eq!(wire.len(), plain.len() + OVERHEAD, "{suite}");
            assert_eq!(wire[..NONCE_LEN], 0u64.to_be_bytes(), "{suite}");
            wires.push(wire.clone());
            let at = o.open(&BTH, &RETH, &mut wire).unwrap();
            assert_eq!(at, NONCE_LEN..NONCE_LEN + plain.len());
            assert_eq!(&wire[at], &plain[..], "{suite}");
        }
        assert_ne!(wires[0], wires[1]);
        // A packet sealed under one suite never opens under the other, even with a key
        // that starts with the same bytes.
        for (w, suite) in wires.iter_mut().zip([Suite::Aes128Gcm, Suite::Aes256Gcm]) {
            let mut o = OpenKey::new(&suite_secret(suite, 6));
            assert_eq!(o.open(&BTH, &RETH, w), Err(OpenError::Forged));
        }
    }

    const BTH: [u8; 12] = [0x06, 0x40, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 5];
    const RETH: [u8; 16] = [0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x12, 0x34, 0, 0, 0x10, 0];

    fn sealed(key: &mut SealKey, plain: &[u8]) -> Vec<u8> {
        let mut wire = vec![0; OVERHEAD + plain.len()];
        wire[NONCE_LEN..NONCE_LEN + plain.len()].copy_from_slice(plain);
        key.seal(&BTH, &RETH, &mut wire).unwrap();
        wire
    }

    #[test]
    fn sealed_then_opened_gives_the_plaintext_and_hides_it() {
        let (mut s, mut o) = (SealKey::new(&secret(1)), OpenKey::new(&secret(1)));
        let mut wire = sealed(&mut s, b"attack at dawn");
        assert!(!wire.windows(6).any(|w| w == b"attack"));
        let at = o.open(&BTH, &RETH, &mut wire).unwrap();
        assert_eq!(&wire[at], b"attack at dawn");
    }

    #[test]
    fn sealing_out_of_place_gives_the_same_bytes_as_in_place() {
        let (mut a, mut b) = (SealKey::new(&secret(4)), SealKey::new(&secret(4)));
        let plain: Vec<u8> = (0..4072u32).map(|i| (i * 3) as u8).collect();
        let in_place = sealed(&mut a, &plain);
        let mut out = vec![0xEE; OVERHEAD + plain.len()];
        assert_eq!(b.seal_from(&BTH, &RETH, &plain, &mut out), Ok(0));
        assert_eq!(out, in_place);
        let mut o = OpenKey::new(&secret(4));
        let at = o.open(&BTH, &RETH, &mut out).unwrap();
        assert_eq!(&out[at], &plain[..]);
        // A room of the wrong size is an error, and uses no counter.
        assert_eq!(
            b.seal_from(&BTH, &RETH, &plain, &mut [0; 10]),
            Err(SealError::Short)
        );
        assert_eq!(b.sealed(), 1);
    }

    #[test]
    fn opening_out_of_place_checks_as_in_place_does() {
        let mut s = SealKey::new(&secret(5));
        let plain: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let wire = sealed(&mut s, &plain);
        let mut o = OpenKey::new(&secret(5));
        let mut out = vec![0; wire.len()];
        let at = o.open_from(&BTH, &RETH, &wire, &mut out).unwrap();
        assert_eq!(&out[at], &plain[..]);
        // The same packet again is a replay; a flipped bit anywhere is forged.
        assert_eq!(
            o.open_from(&BTH, &RETH, &wire, &mut out),
            Err(OpenError::Replayed)
        );
        let next = sealed(&mut s, &plain);
        for bit in [0, 8 * NONCE_LEN + 3, 8 * (next.len() - 1)] {
            let mut forged = next.clone();
            forged[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                o.open_from(&BTH, &RETH, &forged, &mut out),
                Err(OpenError::Forged)
            );
        }
        assert!(o.open_from(&BTH, &RETH, &next, &mut out).is_ok());
        assert_eq!(
            o.open_from(&BTH, &RETH, &next[..10], &mut out[..10]),
            Err(OpenError::Short)
        );
    }

    #[test]
    fn an_empty_payload_is_sealed_too() {
        let (mut s, mut o) = (SealKey::new(&secret(1)), OpenKey::new(&secret(1)));
        let mut wire = sealed(&mut s, b"");
        assert_eq!(wire.len(), OVERHEAD);
        assert_eq!(o.open(&BTH, &RETH, &mut wire).unwrap(), 8..8);
    }

    #[test]
    fn every_bit_of_nonce_ciphertext_and_tag_is_checked() {
        let mut s = SealKey::new(&secret(1));
        let wire = sealed(&mut s, b"sixteen bytes!!!");
        for bit in 0..wire.len() * 8 {
            let mut o = OpenKey::new(&secret(1));
            let mut bad = wire.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                o.open(&BTH, &RETH, &mut bad),
                Err(OpenError::Forged),
                "bit {bit}"
            );
        }
    }

    #[test]
    fn the_headers_are_bound_but_not_fecn_and_becn() {
        let mut s = SealKey::new(&secret(1));
        let wire = sealed(&mut s, b"payload");
        for at in 0..12 + RETH.len() {
            let (mut bth, mut reth) = (BTH, RETH);
            if at < 12 {
                bth[at] ^= 0x80;
            } else {
                reth[at - 12] ^= 0x80;
            }
            let mut o = OpenKey::new(&secret(1));
            let got = o.open(&bth, &reth, &mut wire.clone());
            if at == 4 {
                assert!(got.is_ok(), "FECN/BECN byte is not bound");
            } else {
                assert_eq!(got, Err(OpenError::Forged), "header byte {at}");
            }
        }
    }

    #[test]
    fn another_key_or_a_plaintext_peer_is_refused() {
        let mut s = SealKey::new(&secret(2));
        let mut o = OpenKey::new(&secret(1));
        let mut wire = sealed(&mut s, b"from a peer with another key");
        assert_eq!(o.open(&BTH, &RETH, &mut wire), Err(OpenError::Forged));
        // A peer that did not agree sends plaintext: too short, or not a valid tag.
        assert_eq!(
            o.open(&BTH, &RETH, &mut b"hi".to_vec()),
            Err(OpenError::Short)
        );
        let mut plain = b"a plaintext payload of some forty bytes!".to_vec();
        assert_eq!(o.open(&BTH, &RETH, &mut plain), Err(OpenError::Forged));
    }

    #[test]
    fn a_replay_is_dropped_even_out_of_order_and_after_the_window() {
        let (mut s, mut o) = (SealKey::new(&secret(1)), OpenKey::new(&secret(1)));
        let first = sealed(&mut s, b"one");
        let second = sealed(&mut s, b"two");
        assert!(o.open(&BTH, &RETH, &mut second.clone()).is_ok());
        assert!(
            o.open(&BTH, &RETH, &mut first.clone()).is_ok(),
            "reordered, not replayed"
        );
        assert_eq!(
            o.open(&BTH, &RETH, &mut first.clone()),
            Err(OpenError::Replayed)
        );
        assert_eq!(
            o.open(&BTH, &RETH, &mut second.clone()),
            Err(OpenError::Replayed)
        );
        // A forged packet does not move the window.
        let mut s2 = SealKey::new(&secret(1));
        s2.skip_to(5000);
        let mut late = sealed(&mut s2, b"far ahead");
        let last = late.len() - 1;
        late[last] ^= 1;
        assert_eq!(o.open(&BTH, &RETH, &mut late), Err(OpenError::Forged));
        let third = sealed(&mut s, b"three");
        assert!(o.open(&BTH, &RETH, &mut third.clone()).is_ok());
        // Far ahead: the old ones fall behind the window.
        s.skip_to(2 + REPLAY_WINDOW + 1);
        assert!(o.open(&BTH, &RETH, &mut sealed(&mut s, b"later")).is_ok());
        assert_eq!(
            o.open(&BTH, &RETH, &mut third.clone()),
            Err(OpenError::Replayed)
        );
    }

    #[test]
    fn a_packet_replayed_after_the_psn_wrapped_is_dropped() {
        // PSN 5 now, and PSN 5 again 2^24 packets later: same BTH, so the transport's own
        // duplicate check would take the old one for new; the counter tells them apart.
        let (mut s, mut o) = (SealKey::new(&secret(1)), OpenKey::new(&secret(1)));
        let old = sealed(&mut s, b"before the wrap");
        assert!(o.open(&BTH, &RETH, &mut old.clone()).is_ok());
        s.skip_to(1 << 24);
        let new = sealed(&mut s, b"after the wrap!");
        assert!(o.open(&BTH, &RETH, &mut new.clone()).is_ok());
        assert_eq!(
            o.open(&BTH, &RETH, &mut old.clone()),
            Err(OpenError::Replayed)
        );
    }

    #[test]
    fn a_key_seals_at_most_its_limit() {
        let mut s = SealKey::new(&secret(1));
        s.skip_to(PACKETS_PER_KEY - 1);
        let mut wire = [0; OVERHEAD];
        assert_eq!(s.seal(&BTH, &RETH, &mut wire), Ok(PACKETS_PER_KEY - 1));
        assert_eq!(s.seal(&BTH, &RETH, &mut wire), Err(SealError::Exhausted));
    }

    #[test]
    fn bad_headers_and_short_buffers_are_errors_not_panics() {
        let mut s = SealKey::new(&secret(1));
        let mut o = OpenKey::new(&secret(1));
        let mut wire = [0; OVERHEAD];
        assert_eq!(s.seal(&BTH[..11], &[], &mut wire), Err(SealError::Headers));
        assert_eq!(s.seal(&BTH, &[0; 33], &mut wire), Err(SealError::Headers));
        assert_eq!(s.seal(&BTH, &[], &mut wire[..23]), Err(SealError::Short));
        assert_eq!(o.open(&BTH[..11], &[], &mut wire), Err(OpenError::Headers));
    }

    proptest::proptest! {
        #[test]
        fn the_replay_window_matches_a_set(ops in proptest::collection::vec(0u64..3000, 1..300)) {
            // Model: accepted = every counter ever accepted; fresh iff not in it and within
            // the window behind the highest.
            let mut w = ReplayWindow::new();
            let mut accepted = std::collections::BTreeSet::new();
            for c in ops {
                let highest = accepted.last().copied();
                let model = !accepted.contains(&c)
                    && highest.is_none_or(|h: u64| c > h || h - c < REPLAY_WINDOW);
                proptest::prop_assert_eq!(w.fresh(c), model, "counter {}", c);
                if model {
                    w.accept(c);
                    accepted.insert(c);
                }
            }
        }
    }
}
