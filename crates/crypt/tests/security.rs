//! The issue's security tests, on whole RoCE v2 datagrams built and checked by `sluice-wire`:
//! a flipped ciphertext bit, a flipped tag, a replayed packet, a packet from a peer without
//! the key, a wrong pre-shared key at setup: each refused or dropped, and counted. And the
//! ICRC of an encrypted packet stays valid, so `sluice pcap check` verifies such captures.
//! Both cipher suites (AES-256-GCM, AES-128-GCM) seal the same wire layout; ends configured
//! with different suites, or whose hellos' suite byte is changed in flight, get no keys.
//! A peer naming a suite code this end does not know is refused by name at both ends.

use std::net::{IpAddr, Ipv4Addr};

use sluice_crypt::handshake::{CONFIRM_LEN, HELLO_LEN};
use sluice_crypt::handshake::{Endpoint, Handshake, HandshakeError, Role};
use sluice_crypt::{
    EncryptService, ExchangeError, OVERHEAD, OpenError, Psk, SessionKeys, Suite, Verdict,
    exchange_suite,
};
use sluice_wire::{
    Bth, ExtHeaders, IpHeader, IpUdp, Opcode, Psn, ROCE_V2_PORT, Reth, RoceHeaders, UdpHeader,
    emit_datagram, icrc,
};

const A: Endpoint = Endpoint {
    qpn: 0x11,
    psn: 0x00ff_fffe,
};
const B: Endpoint = Endpoint {
    qpn: 0x22,
    psn: 0x0000_1000,
};

fn handshake(psk_a: u8, psk_b: u8) -> Result<(SessionKeys, SessionKeys), HandshakeError> {
    let (ha, hello_a) =
        Handshake::start(Role::Initiator, Psk::new([psk_a; 32]).unwrap(), A).unwrap();
    let (hb, hello_b) =
        Handshake::start(Role::Responder, Psk::new([psk_b; 32]).unwrap(), B).unwrap();
    let (ca, confirm_a) = ha.receive_hello(&hello_b)?;
    let (cb, confirm_b) = hb.receive_hello(&hello_a)?;
    let b = cb.receive_confirm(&confirm_a);
    let a = ca.receive_confirm(&confirm_b);
    Ok((a?, b?))
}

fn pair() -> (EncryptService, EncryptService) {
    let (a, b) = handshake(7, 7).unwrap();
    (EncryptService::new(&a), EncryptService::new(&b))
}

/// The handshake with each end's own suite; `tamper` sees both hellos in flight (A's first).
fn handshake_suites(
    suite_a: Suite,
    suite_b: Suite,
    tamper: impl Fn(&mut [u8; HELLO_LEN], &mut [u8; HELLO_LEN]),
) -> (
    Result<SessionKeys, HandshakeError>,
    Result<SessionKeys, HandshakeError>,
) {
    let psk = || Psk::new([7; 32]).unwrap();
    let (ha, mut hello_a) = Handshake::start_suite(Role::Initiator, suite_a, psk(), A).unwrap();
    let (hb, mut hello_b) = Handshake::start_suite(Role::Responder, suite_b, psk(), B).unwrap();
    tamper(&mut hello_a, &mut hello_b);
    // An end that refuses a hello sends no confirmation: the other then reads none (an
    // empty message here, a closed stream over `exchange`).
    let (ca, cb) = (ha.receive_hello(&hello_b), hb.receive_hello(&hello_a));
    let confirm_a = ca.as_ref().map_or(&[][..], |(_, m)| &m[..]).to_vec();
    let confirm_b = cb.as_ref().map_or(&[][..], |(_, m)| &m[..]).to_vec();
    (
        ca.and_then(|(c, _)| c.receive_confirm(&confirm_b)),
        cb.and_then(|(c, _)| c.receive_confirm(&confirm_a)),
    )
}

fn suite_pair(suite: Suite) -> (EncryptService, EncryptService) {
    let (a, b) = handshake_suites(suite, suite, |_, _| {});
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.suite, b.suite), (suite, suite));
    let (a, b) = (EncryptService::new(&a), EncryptService::new(&b));
    assert_eq!((a.suite(), b.suite()), (suite, suite));
    (a, b)
}

/// An RDMA WRITE FIRST from A to B at `psn` carrying `plain`, sealed by `service` (or in the
/// clear when `None`, a peer that did not agree): the whole IPv4 datagram, ICRC written.
fn write_first(service: Option<&mut EncryptService>, psn: u32, plain: &[u8]) -> Vec<u8> {
    let mut bth = Bth::new(Opcode::RC_RDMA_WRITE_FIRST, B.qpn, Psn::new(psn));
    bth.ack_req = true;
    let roce = RoceHeaders {
        bth,
        ccx: None,
        ext: ExtHeaders {
            reth: Some(Reth {
                va: 0x1000,
                rkey: 0x1234,
                dma_len: 8192,
            }),
            ..ExtHeaders::default()
        },
    };
    let payload = match service {
        Some(service) => {
            let mut wire = vec![0; OVERHEAD + plain.len()];
            wire[EncryptService::HEAD..EncryptService::HEAD + plain.len()].copy_from_slice(plain);
            // The headers as they will go: the pad count is that of the grown payload.
            let mut headers = [0; 64];
            let len = roce.emit_headers(wire.len(), &mut headers).unwrap();
            service
                .on_send(&headers[..12], &headers[12..len], &mut wire)
                .unwrap();
            wire
        }
        None => plain.to_vec(),
    };
    let ip = IpHeader::between(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        0,
    );
    let udp = UdpHeader {
        src_port: 0xc001,
        dst_port: ROCE_V2_PORT,
    };
    let mut buf = vec![0; 9000];
    let len = emit_datagram(&ip, &udp, &roce, &payload, &mut buf).unwrap();
    buf.truncate(len);
    buf
}

/// What B's receive path does: the wire checks (ICRC included), then the service.
fn receive(service: &mut EncryptService, datagram: &[u8]) -> Result<Vec<u8>, OpenError> {
    let parsed = IpUdp::parse(datagram).unwrap();
    let roce = parsed
        .roce()
        .expect("the ICRC of an encrypted packet is valid");
    let udp_payload = parsed.payload();
    let header_len = roce.header_len();
    let ext = &udp_payload[header_len - roce.info.ext_len..header_len];
    let mut wire = roce.payload.to_vec();
    match service.on_receive(&udp_payload[..12], ext, &mut wire) {
        Verdict::Pass(range) => Ok(wire[range].to_vec()),
        Verdict::Drop(why) => Err(why),
    }
}

fn counter(service: &EncryptService, name: &str) -> u64 {
    service
        .counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap()
        .1
}

/// The offset of the payload in a datagram built by [`write_first`]: IPv4, UDP, BTH, RETH.
const PAYLOAD_AT: usize = 20 + 8 + 12 + 16;

#[test]
fn an_encrypted_packet_keeps_a_valid_icrc_and_hides_its_payload() {
    let (mut a, mut b) = pair();
    let plain = b"the payload of an encrypted queue pair, 48 bytes".repeat(4);
    let datagram = write_first(Some(&mut a), A.psn, &plain);
    icrc::verify(&datagram).unwrap();
    assert!(
        !datagram
            .windows(16)
            .any(|w| plain.windows(16).any(|p| p == w))
    );
    assert_eq!(receive(&mut b, &datagram).unwrap(), plain);
    assert_eq!(counter(&b, "opened"), 1);
}

#[test]
fn a_flipped_ciphertext_bit_is_dropped_and_counted_even_with_a_fixed_icrc() {
    let (mut a, mut b) = pair();
    let mut datagram = write_first(Some(&mut a), A.psn, &[0x42; 256]);
    datagram[PAYLOAD_AT + EncryptService::HEAD + 100] ^= 0x01;
    // An attacker recomputes the ICRC: it is a checksum, not a MAC.
    icrc::write(&mut datagram).unwrap();
    assert_eq!(receive(&mut b, &datagram), Err(OpenError::Forged));
    assert_eq!(counter(&b, "dropped_forged"), 1);
    assert_eq!(counter(&b, "opened"), 0);
}

#[test]
fn a_flipped_tag_bit_is_dropped_and_counted() {
    let (mut a, mut b) = pair();
    let mut datagram = write_first(Some(&mut a), A.psn, &[0x42; 256]);
    let tag_last = datagram.len() - 4 - 1;
    datagram[tag_last] ^= 0x80;
    icrc::write(&mut datagram).unwrap();
    assert_eq!(receive(&mut b, &datagram), Err(OpenError::Forged));
    assert_eq!(counter(&b, "dropped_forged"), 1);
}

#[test]
fn a_changed_header_is_dropped_the_reth_address_say() {
    let (mut a, mut b) = pair();
    let mut datagram = write_first(Some(&mut a), A.psn, &[0x42; 64]);
    // RETH's virtual address, low byte: redirect the write elsewhere in the region.
    datagram[20 + 8 + 12 + 7] ^= 0x40;
    icrc::write(&mut datagram).unwrap();
    assert_eq!(receive(&mut b, &datagram), Err(OpenError::Forged));
}

#[test]
fn a_replayed_packet_is_dropped_and_counted() {
    let (mut a, mut b) = pair();
    let first = write_first(Some(&mut a), A.psn, b"first, once only");
    let second = write_first(Some(&mut a), A.psn.wrapping_add(1) & 0xff_ffff, b"second");
    assert!(receive(&mut b, &first).is_ok());
    assert!(receive(&mut b, &second).is_ok());
    assert_eq!(receive(&mut b, &first), Err(OpenError::Replayed));
    assert_eq!(counter(&b, "dropped_replayed"), 1);
    // A retransmission is not a replay: the same PSN and bytes, sealed anew.
    let resent = write_first(Some(&mut a), A.psn, b"first, once only");
    assert_eq!(receive(&mut b, &resent).unwrap(), b"first, once only");
}

#[test]
fn a_packet_from_a_peer_without_the_key_is_dropped_and_counted() {
    let (_, mut b) = pair();
    // A peer that did not agree sends in the clear.
    let clear = write_first(None, A.psn, b"plain text from a peer without the key");
    assert_eq!(receive(&mut b, &clear), Err(OpenError::Forged));
    let tiny = write_first(None, A.psn, b"tiny");
    assert_eq!(receive(&mut b, &tiny), Err(OpenError::Short));
    // A peer with keys from another handshake (another session, same PSK even).
    let (mut other, _) = pair();
    let foreign = write_first(Some(&mut other), A.psn, b"sealed under another session");
    assert_eq!(receive(&mut b, &foreign), Err(OpenError::Forged));
    assert_eq!(counter(&b, "dropped_forged"), 2);
    assert_eq!(counter(&b, "dropped_short"), 1);
}

#[test]
fn a_wrong_pre_shared_key_is_refused_at_setup() {
    assert_eq!(handshake(7, 8).unwrap_err(), HandshakeError::BadConfirm);
}

#[test]
fn the_payload_budget_shrinks_by_the_overhead() {
    assert_eq!(EncryptService::payload_budget(4096), 4072);
    assert_eq!(EncryptService::payload_budget(1024), 1000);
    assert_eq!(EncryptService::payload_budget(10), 0);
}

/// A capture of encrypted traffic (a WRITE's packets, one resent) written as pcap and read back
/// the way `sluice pcap check` reads one: every record decodes and its ICRC verifies. With
/// `SLUICE_CRYPT_PCAP=path` the capture is kept there, for `sluice pcap check path`.
#[test]
fn a_capture_of_encrypted_traffic_passes_the_icrc_check() {
    use sluice_wire::pcap::{CaptureReader, PcapWriter, link_type};
    let (mut a, mut b) = pair();
    let mut datagrams = Vec::new();
    for k in 0..4u32 {
        let plain = vec![k as u8; 1000 + k as usize]; // Some lengths need a pad.
        datagrams.push(write_first(Some(&mut a), (A.psn + k) & 0xff_ffff, &plain));
    }
    datagrams.push(write_first(Some(&mut a), A.psn, &[0; 1000])); // A resend.
    let mut writer = PcapWriter::new(Vec::new(), link_type::RAW, 65535).unwrap();
    for (i, d) in datagrams.iter().enumerate() {
        writer.write(i as u64 * 1000, d).unwrap();
    }
    let bytes = writer.into_inner();
    if let Some(path) = std::env::var_os("SLUICE_CRYPT_PCAP") {
        std::fs::write(path, &bytes).unwrap();
    }
    let mut reader = CaptureReader::new(&bytes[..]).unwrap();
    let mut n = 0;
    while let Some(record) = reader.next_record().unwrap() {
        let parsed = IpUdp::parse(record.data).unwrap();
        parsed.roce().expect("ICRC valid on encrypted traffic");
        n += 1;
    }
    assert_eq!(n, 5);
    for d in &datagrams[..4] {
        assert!(receive(&mut b, d).is_ok());
    }
}

#[test]
fn both_suites_round_trip_whole_datagrams_in_the_same_layout() {
    let plain: Vec<u8> = (0..1000u32).map(|i| (i * 11) as u8).collect();
    let mut lengths = Vec::new();
    for suite in Suite::ALL {
        let (mut a, mut b) = suite_pair(suite);
        let datagram = write_first(Some(&mut a), A.psn, &plain);
        icrc::verify(&datagram).unwrap();
        lengths.push(datagram.len());
        assert!(
            !datagram
                .windows(16)
                .any(|w| plain.windows(16).any(|p| p == w)),
            "{suite}"
        );
        assert_eq!(receive(&mut b, &datagram).unwrap(), plain, "{suite}");
        // Tampering is caught under either suite.
        let mut forged = write_first(Some(&mut a), A.psn + 1, &plain);
        forged[PAYLOAD_AT + EncryptService::HEAD + 7] ^= 0x04;
        icrc::write(&mut forged).unwrap();
        assert_eq!(receive(&mut b, &forged), Err(OpenError::Forged), "{suite}");
        assert_eq!(counter(&b, "opened"), 1);
        assert_eq!(counter(&b, "dropped_forged"), 1);
    }
    // Nonce and tag lengths do not depend on the suite.
    assert_eq!(lengths[0], lengths[1]);
    assert_eq!(lengths[0], 20 + 8 + 12 + 16 + OVERHEAD + plain.len() + 4);
}

#[test]
fn a_packet_sealed_under_the_other_suite_is_dropped_and_counted() {
    let (mut a128, _) = suite_pair(Suite::Aes128Gcm);
    let (_, mut b256) = suite_pair(Suite::Aes256Gcm);
    let datagram = write_first(Some(&mut a128), A.psn, b"sealed under AES-128-GCM");
    assert_eq!(receive(&mut b256, &datagram), Err(OpenError::Forged));
    assert_eq!(counter(&b256, "dropped_forged"), 1);
}

#[test]
fn ends_with_different_suites_are_refused_at_setup_at_both_ends() {
    let (a, b) = handshake_suites(Suite::Aes128Gcm, Suite::Aes256Gcm, |_, _| {});
    assert_eq!(
        a.unwrap_err(),
        HandshakeError::SuiteMismatch {
            ours: Suite::Aes128Gcm,
            theirs: Suite::Aes256Gcm
        }
    );
    assert_eq!(
        b.unwrap_err(),
        HandshakeError::SuiteMismatch {
            ours: Suite::Aes256Gcm,
            theirs: Suite::Aes128Gcm
        }
    );
}

#[test]
fn a_tampered_suite_field_is_refused_at_setup_never_a_downgrade() {
    /// The suite byte of a hello (see `Hello`'s layout).
    const SUITE_AT: usize = 7;
    let to_128 = Suite::Aes128Gcm.code();
    // Two AES-256 ends, one hello or both rewritten to name AES-128: the transcripts differ,
    // both confirmations fail, nobody gets (weaker) keys.
    for which in 0..3 {
        let (a, b) = handshake_suites(Suite::Aes256Gcm, Suite::Aes256Gcm, |ha, hb| {
            if which != 1 {
                ha[SUITE_AT] = to_128;
            }
            if which != 0 {
                hb[SUITE_AT] = to_128;
            }
        });
        assert_eq!(a.unwrap_err(), HandshakeError::BadConfirm, "case {which}");
        assert_eq!(b.unwrap_err(), HandshakeError::BadConfirm, "case {which}");
    }
    // Mismatched ends each made to see its own suite in the other's hello: still refused.
    let (a, b) = handshake_suites(Suite::Aes128Gcm, Suite::Aes256Gcm, |ha, hb| {
        ha[SUITE_AT] = Suite::Aes256Gcm.code();
        hb[SUITE_AT] = Suite::Aes128Gcm.code();
    });
    assert_eq!(a.unwrap_err(), HandshakeError::BadConfirm);
    assert_eq!(b.unwrap_err(), HandshakeError::BadConfirm);
    // A code that names no suite, written in flight: the transcripts differ, so it is
    // refused at both ends as a changed message, never as the peer's choice.
    let (a, b) = handshake_suites(Suite::Aes256Gcm, Suite::Aes256Gcm, |ha, _| {
        ha[SUITE_AT] = 0x7f;
    });
    assert_eq!(a.unwrap_err(), HandshakeError::BadConfirm);
    assert_eq!(b.unwrap_err(), HandshakeError::BadConfirm);
}

/// A peer of a newer version whose hello names a suite code this one does not know
/// (`UNKNOWN`), written here from the key schedule in `handshake`'s documentation rather than
/// with this crate's code: it derives only the confirmation keys, as this end must, and
/// refuses a hello naming another suite than its own once the confirmation proves it genuine.
struct NewerPeer {
    psk: [u8; 32],
    secret: aws_lc_rs::agreement::PrivateKey,
    hello: [u8; HELLO_LEN],
}

const UNKNOWN: u8 = 0x7f;

impl NewerPeer {
    /// The responder at `B`, naming suite code `UNKNOWN`.
    fn new(psk: u8) -> NewerPeer {
        use aws_lc_rs::agreement::{PrivateKey, X25519};
        let secret = PrivateKey::from_private_key(&X25519, &[0x42; 32]).unwrap();
        let public = secret.compute_public_key().unwrap();
        let mut hello = [0; HELLO_LEN];
        hello[..8].copy_from_slice(&[b'S', b'L', b'C', b'R', 1, 1, 1, UNKNOWN]);
        hello[8..12].copy_from_slice(&B.qpn.to_be_bytes());
        hello[12..16].copy_from_slice(&B.psn.to_be_bytes());
        hello[16..].copy_from_slice(public.as_ref());
        NewerPeer {
            psk: [psk; 32],
            secret,
            hello,
        }
    }

    /// Given the initiator's hello: this end's confirmation, and the initiator's expected one.
    fn confirms(&self, initiator: &[u8; HELLO_LEN]) -> ([u8; CONFIRM_LEN], [u8; CONFIRM_LEN]) {
        use aws_lc_rs::{agreement, digest, hkdf, hmac};
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(b"sluice-crypt v1 transcript");
        ctx.update(initiator);
        ctx.update(&self.hello);
        let th = ctx.finish();
        let peer_public = agreement::UnparsedPublicKey::new(&agreement::X25519, &initiator[16..]);
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, &self.psk);
        let prk =
            agreement::agree(&self.secret, peer_public, (), |dh| Ok(salt.extract(dh))).unwrap();
        let confirm = |label: &[u8], role: u8| {
            let mut key = [0; 32];
            prk.expand(
                &[b"sluice-crypt v1 ", label, th.as_ref()],
                hkdf::HKDF_SHA256,
            )
            .unwrap()
            .fill(&mut key)
            .unwrap();
            let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), th.as_ref());
            let mut out = [0; CONFIRM_LEN];
            out[..8].copy_from_slice(&[b'S', b'L', b'C', b'R', 1, 2, role, 0]);
            out[8..].copy_from_slice(tag.as_ref());
            out
        };
        (confirm(b"confirm r", 1), confirm(b"confirm i", 0))
    }

    /// Its outcome once the initiator's confirmation arrived: the initiator's suite code,
    /// which it then refuses by name, or why the confirmation did not prove that hello.
    fn refusal(
        &self,
        initiator: &[u8; HELLO_LEN],
        their_confirm: &[u8],
    ) -> Result<u8, &'static str> {
        if their_confirm.len() != CONFIRM_LEN {
            return Err("no confirmation: the other end hung up");
        }
        if their_confirm != self.confirms(initiator).1 {
            return Err("bad confirmation");
        }
        Ok(initiator[7])
    }
}

#[test]
fn a_suite_code_this_end_does_not_know_is_refused_at_both_ends_by_name() {
    for suite in Suite::ALL {
        let (ha, hello_a) =
            Handshake::start_suite(Role::Initiator, suite, Psk::new([7; 32]).unwrap(), A).unwrap();
        let newer = NewerPeer::new(7);
        // This end answers the unknown code with its confirmation, as it answers a mismatch...
        let (ca, confirm_a) = ha.receive_hello(&newer.hello).unwrap();
        let (confirm_newer, _) = newer.confirms(&hello_a);
        // ...and refuses once the peer's confirmation proves the code was the peer's choice.
        assert_eq!(
            ca.receive_confirm(&confirm_newer).unwrap_err(),
            HandshakeError::UnknownPeerSuite {
                ours: suite,
                code: UNKNOWN
            }
        );
        // The peer got a confirmation it can verify, hence this end's genuine suite to name.
        assert_eq!(newer.refusal(&hello_a, &confirm_a), Ok(suite.code()));
    }
    let err = HandshakeError::UnknownPeerSuite {
        ours: Suite::Aes128Gcm,
        code: UNKNOWN,
    }
    .to_string();
    assert!(
        err.contains("aes-128-gcm") && err.contains("code 127"),
        "{err}"
    );
}

#[test]
fn an_unknown_suite_code_from_a_peer_without_the_key_is_a_bad_confirmation() {
    let (ha, hello_a) = Handshake::start(Role::Initiator, Psk::new([7; 32]).unwrap(), A).unwrap();
    let newer = NewerPeer::new(8);
    let (ca, confirm_a) = ha.receive_hello(&newer.hello).unwrap();
    let (confirm_newer, _) = newer.confirms(&hello_a);
    assert_eq!(
        ca.receive_confirm(&confirm_newer).unwrap_err(),
        HandshakeError::BadConfirm
    );
    assert_eq!(newer.refusal(&hello_a, &confirm_a), Err("bad confirmation"));
}

#[test]
fn an_unknown_suite_code_is_refused_by_name_over_a_socket_pair() {
    use std::io::{Read, Write};
    let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
    }
    let peer = std::thread::spawn(move || {
        let newer = NewerPeer::new(7);
        b.write_all(&newer.hello).unwrap();
        let mut hello_a = [0; HELLO_LEN];
        b.read_exact(&mut hello_a).unwrap();
        b.write_all(&newer.confirms(&hello_a).0).unwrap();
        // Whatever arrives until the other end closes: its confirmation, not an empty stream.
        let mut confirm_a = Vec::new();
        b.read_to_end(&mut confirm_a).unwrap();
        newer.refusal(&hello_a, &confirm_a)
    });
    let ours = exchange_suite(
        &mut a,
        Role::Initiator,
        Suite::Aes128Gcm,
        Psk::new([7; 32]).unwrap(),
        A,
    );
    drop(a);
    let Err(ExchangeError::Handshake(err)) = ours else {
        panic!("an unknown suite code must be refused by the handshake: {ours:?}");
    };
    assert_eq!(
        err,
        HandshakeError::UnknownPeerSuite {
            ours: Suite::Aes128Gcm,
            code: UNKNOWN
        }
    );
    assert_eq!(peer.join().unwrap(), Ok(Suite::Aes128Gcm.code()));
}
