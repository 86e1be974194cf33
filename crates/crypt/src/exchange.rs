//! The handshake over a byte stream: the out-of-band connection that sets the queue pairs up
//! (perftest's TCP exchange, once both ends know each other's QPN and PSN). Each end writes
//! its hello, reads the peer's, writes its confirmation, reads the peer's; 88 bytes each way.
//!
//! Blocking: set a read timeout on the stream first (a peer that does not speak this
//! protocol may send nothing more). A peer that does not agree, say stock perftest sending
//! its next message, or one with another pre-shared key, ends the exchange with an error;
//! nothing is then to be sent to it over RoCE.

use std::io::{Read, Write};

use crate::SessionKeys;
use crate::handshake::{CONFIRM_LEN, Endpoint, HELLO_LEN, Handshake, HandshakeError, Role};
use crate::psk::Psk;
use crate::suite::Suite;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The stream failed, timed out, or closed early.
    #[error("encryption handshake: {0}")]
    Io(#[from] std::io::Error),
    /// The peer's messages were refused.
    #[error("encryption handshake refused: {0}")]
    Handshake(#[from] HandshakeError),
}

/// Runs the handshake over `stream` as `role` for the local queue pair `local`, for the
/// default suite (AES-256-GCM).
pub fn exchange<S: Read + Write>(
    stream: &mut S,
    role: Role,
    psk: Psk,
    local: Endpoint,
) -> Result<SessionKeys, ExchangeError> {
    exchange_suite(stream, role, Suite::default(), psk, local)
}

/// [`exchange`] for `suite`. A peer that names another suite is refused at both ends
/// ([`HandshakeError::SuiteMismatch`]) after the confirmations, which both ends still send,
/// so that each end learns why rather than seeing the other hang up. So is a peer whose
/// hello names a suite code this end does not know: this end answers with its confirmation
/// (no traffic keys derived) and refuses with [`HandshakeError::UnknownPeerSuite`], and the
/// peer, which knows this end's suite, refuses with `SuiteMismatch`.
pub fn exchange_suite<S: Read + Write>(
    stream: &mut S,
    role: Role,
    suite: Suite,
    psk: Psk,
    local: Endpoint,
) -> Result<SessionKeys, ExchangeError> {
    let (handshake, hello) = Handshake::start_suite(role, suite, psk, local)?;
    stream.write_all(&hello)?;
    stream.flush()?;
    let mut peer_hello = [0; HELLO_LEN];
    stream.read_exact(&mut peer_hello)?;
    let (confirming, confirm) = handshake.receive_hello(&peer_hello)?;
    stream.write_all(&confirm)?;
    stream.flush()?;
    let mut peer_confirm = [0; CONFIRM_LEN];
    stream.read_exact(&mut peer_confirm)?;
    Ok(confirming.receive_confirm(&peer_confirm)?)
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;
    use std::thread;

    use super::*;

    const I: Endpoint = Endpoint { qpn: 0x11, psn: 7 };
    const R: Endpoint = Endpoint { qpn: 0x22, psn: 9 };

    fn psk(b: u8) -> Psk {
        Psk::new([b; 32]).unwrap()
    }

    #[test]
    fn two_ends_agree_over_a_stream() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let peer = thread::spawn(move || exchange(&mut b, Role::Responder, psk(4), R));
        let ours = exchange(&mut a, Role::Initiator, psk(4), I).unwrap();
        let theirs = peer.join().unwrap().unwrap();
        assert_eq!(ours.send, theirs.receive);
        assert_eq!((ours.peer, theirs.peer), (R, I));
    }

    #[test]
    fn each_suite_agrees_and_a_mismatch_is_refused_at_both_ends() {
        for (si, sr) in [
            (Suite::Aes128Gcm, Suite::Aes128Gcm),
            (Suite::Aes256Gcm, Suite::Aes256Gcm),
            (Suite::Aes128Gcm, Suite::Aes256Gcm),
        ] {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            let peer =
                thread::spawn(move || exchange_suite(&mut b, Role::Responder, sr, psk(4), R));
            let ours = exchange_suite(&mut a, Role::Initiator, si, psk(4), I);
            let theirs = peer.join().unwrap();
            if si == sr {
                let (ours, theirs) = (ours.unwrap(), theirs.unwrap());
                assert_eq!((ours.suite, theirs.suite), (si, sr));
                assert_eq!(ours.send, theirs.receive);
            } else {
                let mismatch = |r: Result<SessionKeys, ExchangeError>, ours, theirs| {
                    let Err(ExchangeError::Handshake(e)) = r else {
                        panic!("a mismatch must be refused by the handshake: {r:?}");
                    };
                    assert_eq!(e, HandshakeError::SuiteMismatch { ours, theirs });
                };
                mismatch(ours, si, sr);
                mismatch(theirs, sr, si);
            }
        }
    }

    #[test]
    fn a_wrong_psk_is_refused_at_both_ends() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let peer = thread::spawn(move || exchange(&mut b, Role::Responder, psk(5), R));
        let ours = exchange(&mut a, Role::Initiator, psk(4), I);
        assert!(matches!(
            ours,
            Err(ExchangeError::Handshake(HandshakeError::BadConfirm))
        ));
        assert!(matches!(
            peer.join().unwrap(),
            Err(ExchangeError::Handshake(HandshakeError::BadConfirm))
        ));
    }

    #[test]
    fn stock_perftest_is_refused() {
        // perftest, past its QP exchange, sends its next fixed-width text message.
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let peer = thread::spawn(move || {
            let line = "0000:000011:000007:00001234:0000000000001000:\
                        00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01";
            b.write_all(line.as_bytes()).unwrap();
            let mut sink = Vec::new();
            let _ = b.read_to_end(&mut sink);
        });
        let ours = exchange(&mut a, Role::Initiator, psk(4), I);
        assert!(matches!(
            ours,
            Err(ExchangeError::Handshake(HandshakeError::Magic))
        ));
        drop(a);
        peer.join().unwrap();
    }

    #[test]
    fn a_peer_that_hangs_up_is_an_io_error() {
        let (mut a, b) = UnixStream::pair().unwrap();
        drop(b);
        let err = exchange(&mut a, Role::Initiator, psk(4), I).unwrap_err();
        assert!(matches!(err, ExchangeError::Io(_)), "{err}");
    }

    #[test]
    fn a_silent_peer_times_out() {
        let (mut a, _b) = UnixStream::pair().unwrap();
        a.set_read_timeout(Some(std::time::Duration::from_millis(50)))
            .unwrap();
        let err = exchange(&mut a, Role::Initiator, psk(4), I).unwrap_err();
        assert!(matches!(err, ExchangeError::Io(_)), "{err}");
    }
}
