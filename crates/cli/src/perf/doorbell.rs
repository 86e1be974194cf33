//! RoCE BALBOA Fig 7's CPU baseline as one real flow, `--doorbell-crypt` (the repro entry
//! sets [`super::Options::doorbell_crypt`] the same way): neither queue pair encrypts; the
//! sender instead seals each message on its own CPU, sends it as a plain WRITE, rings the
//! peer's doorbell with an 8-byte WRITE behind it, and the receiver, seeing the doorbell,
//! opens the message where it landed, on its own thread. Two modes:
//!
//! - **write-lat** (`traffic::write_ping_pong_doorbell`): a ping-pong; each side opens the
//!   peer's message before it answers, so a sample holds one seal, two WRITEs and one open.
//! - **write-bw** ([`bw_sender`], [`bw_receiver`]): messages stream back to back, `-t` in
//!   flight, each in a slot of its own at both ends (message `m` in slot `m mod -t`). As
//!   write-bw posts, the sender fills every free slot (seals the message into it and posts
//!   its two WRITEs) and then polls its datapath, which sends them: so its seals overlap the
//!   flight and the receiver's opening of the messages posted before, but not its own
//!   datapath's sending, which runs on the same thread (as `--encrypt`'s stage shares it).
//!   In steady state a refill is the messages one completion freed (`-Q`; one at a time
//!   with `-Q 1`). No poll after every message, to send each before sealing the next: it
//!   costs a system call a message and gains nothing (`docs/repro.md`, balboa-fig7).
//!   The receiver opens every message whose doorbell rang, in order, between two polls.
//!   A slot is free again once the doorbell's completion came back, and the receiver's
//!   ACK for it leaves only after the open ([`bw_receiver`] says why), so no slot is
//!   written before it was opened, and what the sender times, from before its first seal
//!   to the completion of its last doorbell, ends after the receiver's last open (and one
//!   ACK's flight later).
//!
//! A message of `size` bytes is laid out as
//!
//! ```text
//! | nonce (8) | ciphertext (size - 32) | tag (16) | doorbell (8) |
//! ```
//!
//! the first `size - 8` bytes one WRITE, the doorbell a second WRITE on the same queue pair,
//! so it lands after them (go-back-N places in order; `--recovery selective-repeat`, which
//! may place a later packet first, is refused). write-lat's doorbell ends with perftest's
//! mark (its last byte); write-bw's is the message's number plus one, as a 64-bit
//! little-endian word, so that a slot's next message never looks like its last. One
//! AES-GCM operation (of `--cipher`'s suite) covers the whole buffer (what a CPU decrypting a buffer does;
//! per-packet operations would cost it more), under the keys of the `--encrypt` handshake
//! of the first queue pair (`SessionKeys`), with `sluice-crypt`'s own counter and replay
//! window. With `--verify` the plaintext is `--verify`'s pattern, checked by the receiver
//! after each open; without, it is whatever the slot holds (AES-GCM's cost does not depend
//! on it).

use std::time::{Duration, Instant};

use sluice_core::SendOp;
use sluice_crypt::SessionKeys;
use sluice_crypt::packet::{NONCE_LEN, OVERHEAD, OpenKey, SealKey, TAG_LEN};

use super::session::Session;
use super::traffic::{self, Measured};
use super::verify::{self, Slots};
use super::{Options, PerfError, Test};

/// Bytes of the doorbell WRITE.
pub(crate) const DOORBELL: u32 = 8;
/// The smallest message the baseline sends: a nonce, a tag, a doorbell and a byte of data.
pub(crate) const MIN_SIZE: u32 = OVERHEAD as u32 + DOORBELL + 1;

/// What `--doorbell-crypt` runs with, checked before anything connects.
pub(crate) fn validate(o: &Options) -> Result<(), String> {
    if !o.doorbell_crypt {
        return Ok(());
    }
    let flag = "--doorbell-crypt (the doorbell baseline)";
    if !matches!(o.test, Test::WriteLat | Test::WriteBw) {
        return Err(format!(
            "{flag}: write-lat or write-bw only (not {}): it is a WRITE, a doorbell WRITE and \
             an open on the receiver's CPU",
            o.test.name()
        ));
    }
    if o.encrypt.is_none() {
        return Err(format!(
            "{flag}: needs --encrypt and --psk-file: each end seals and opens on its CPU with \
             the keys of their handshake (no queue pair then encrypts in line)"
        ));
    }
    // The test's default where -s is not given (write-lat's, 2 bytes, is too small).
    let size = o.size.unwrap_or(o.test.default_size() as u32);
    if o.all_sizes || size < MIN_SIZE {
        return Err(format!(
            "{flag}: -s of at least {MIN_SIZE} bytes (a nonce, a tag, the doorbell and a byte \
             of data), not -a"
        ));
    }
    if o.policies.recovery == sluice_core::Recovery::SelectiveRepeat {
        return Err(format!(
            "{flag}: go-back-N only: selective repeat may place the doorbell before the data \
             in front of it, and the receiver would open a buffer still landing"
        ));
    }
    if o.test == Test::WriteBw {
        if o.qps != 1 || !o.tenants.is_empty() || o.pacer.is_some() {
            return Err(format!(
                "{flag}: write-bw over one queue pair (-q 1), without --tenant or --pacer"
            ));
        }
        if o.duration.is_some() {
            return Err(format!(
                "{flag}: write-bw runs by -n, not -D (the receiver checks that it opened every \
                 message the sender counted)"
            ));
        }
        let slots = u64::from(o.tx_depth) * u64::from(size);
        if slots > verify::MAX_SLOT_BYTES {
            return Err(format!(
                "{flag}: each message in flight has a slot of its own at both ends: {} MiB \
                 here, more than {} MiB; lower -t or -s",
                slots >> 20,
                verify::MAX_SLOT_BYTES >> 20
            ));
        }
    }
    Ok(())
}

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

/// The work request ids of the data WRITEs, which ask for no completion (the doorbell's,
/// behind each, covers it): apart from the doorbells', which are the message numbers.
const DATA: u64 = 1 << 62;

/// write-bw's doorbell word of message `seq`: its number plus one (a slot's bytes start at
/// zero, which no message's word is).
fn doorbell_word(seq: u64) -> [u8; DOORBELL as usize] {
    (seq + 1).to_le_bytes()
}

/// The run's slots (a bug if the session has none: `Session::open` makes them for every
/// `--doorbell-crypt` write-bw run).
fn slots_of(s: &Session) -> Result<Slots, PerfError> {
    s.doorbell_slots
        .ok_or_else(|| PerfError::Usage("doorbell baseline: write-bw without its slots".into()))
}

/// write-bw's sender: keeps `-t` messages in flight, each sealed on this thread into its
/// own slot just before its two WRITEs are posted (the free slots filled, then one poll,
/// as write-bw posts), until `-n` messages completed. Times
/// from before the first seal to the completion of the last doorbell (see the module's
/// documentation for why that comes after the receiver's last open).
pub(crate) fn bw_sender(s: &mut Session, o: &Options, size: u32) -> Result<Measured, PerfError> {
    let slots = slots_of(s)?;
    let iterations = o.iterations();
    let depth = u64::from(slots.per_qp);
    let cq_mod = u64::from(o.cq_mod.min(slots.per_qp));
    let data = (size - DOORBELL) as usize;
    let (lkey, base) = (slots.mr.lkey, slots.mr.addr);
    let (mut posted, mut completed) = (0u64, 0u64);
    let start = Instant::now();
    let (mut finished, mut last_progress) = (start, start);
    while completed < iterations {
        while posted < iterations && posted - completed < depth {
            let seq = posted;
            let at = slots.offset(0, seq);
            seal_slot(s, lkey, at, data, seq).map_err(|m| s.transport_error(m))?;
            let qp = s.qps[0];
            let remote = qp.remote_addr + slots.offset_in_qp(seq) as u64;
            let write = |to: u64| SendOp::Write {
                remote_addr: to,
                rkey: qp.remote_rkey,
            };
            let from = base + at as u64;
            let signaled = (seq + 1) % cq_mod == 0 || seq + 1 == iterations;
            traffic::post(
                s,
                0,
                write(remote),
                (lkey, from),
                data as u32,
                DATA | seq,
                false,
                0,
            )?;
            let bell = (lkey, from + data as u64);
            let to = remote + data as u64;
            traffic::post(
                s,
                0,
                write(to),
                bell,
                DOORBELL,
                seq,
                signaled,
                o.inline_size,
            )?;
            posted += 1;
        }
        traffic::pump(s)?;
        while let Some(c) = traffic::next_completion(s)? {
            if c.wr_id & DATA == 0 {
                completed = completed.max(c.wr_id + 1);
                finished = Instant::now();
                last_progress = finished;
            }
        }
        if last_progress.elapsed() > o.stall_timeout {
            return Err(s.transport_error(format!(
                "doorbell baseline: no doorbell completed for {:?} ({completed} of \
                 {iterations} messages; do both ends have the same -t and -s?)",
                o.stall_timeout
            )));
        }
    }
    Ok(Measured {
        messages: completed,
        elapsed: finished - start,
        ..Measured::default()
    })
}

/// Fills message `seq`'s plaintext (with `--verify`), seals it in its slot at `at` of the
/// region `lkey`, and writes its doorbell word after it.
fn seal_slot(s: &mut Session, lkey: u32, at: usize, data: usize, seq: u64) -> Result<(), String> {
    let (Some(cipher), Some(b)) = (s.soft_cipher.as_mut(), s.dev.engine().mr_bytes_mut(lkey))
    else {
        return Err("doorbell baseline: no cipher or region".into());
    };
    let (message, bell) = b[at..at + data + DOORBELL as usize].split_at_mut(data);
    if let Some(v) = s.verify.as_mut() {
        v.fill_next(&mut message[NONCE_LEN..data - TAG_LEN], 0);
    }
    cipher.seal(message)?;
    bell.copy_from_slice(&doorbell_word(seq));
    Ok(())
}

/// write-bw's receiver: opens, in order, every message whose doorbell rang, each where it
/// landed in its slot, until the sender ends the test; checks each plaintext with
/// `--verify`. Its own figures: the messages opened, from the first open's start to the
/// last's end.
///
/// Why no slot is written again before it was opened: the sender reuses message `m`'s
/// slot for `m + -t` only once `m`'s doorbell completed, that is once our ACK covering the
/// doorbell came back. `Device::poll` sends what the engine owes *before* it receives, so
/// the ACK for a doorbell received in one poll leaves in the next at the earliest, and
/// this loop opens every message whose doorbell landed between the two (as write-bw's
/// `--verify` checks its slots: `traffic::landing_write`). A duplicate of an old WRITE is
/// acknowledged again, never written again.
pub(crate) fn bw_receiver(s: &mut Session, size: u32) -> Result<Measured, PerfError> {
    let slots = slots_of(s)?;
    let data = (size - DOORBELL) as usize;
    let qpn = s.qps[0].qpn.0;
    let mut opened = 0u64;
    let mut first = None;
    let mut last = Instant::now();
    loop {
        loop {
            let at = slots.offset(0, opened);
            let bell = at + data..at + data + DOORBELL as usize;
            let rang = s.dev.engine_ref().mr_bytes(slots.mr.lkey).map(|b| &b[bell])
                == Some(&doorbell_word(opened)[..]);
            if !rang {
                break;
            }
            first.get_or_insert_with(Instant::now);
            open_slot(s, slots.mr.lkey, at, data, qpn).map_err(|m| s.transport_error(m))?;
            opened += 1;
            last = Instant::now();
        }
        if s.peer_finished()? {
            break;
        }
        traffic::pump(s)?;
    }
    Ok(Measured {
        messages: opened,
        elapsed: first.map_or(Duration::ZERO, |f| last - f),
        ..Measured::default()
    })
}

/// Opens the message in the slot at `at` of the region `lkey` in place, and with
/// `--verify` checks its plaintext as the queue pair's next message.
fn open_slot(s: &mut Session, lkey: u32, at: usize, data: usize, qpn: u32) -> Result<(), String> {
    let (Some(cipher), Some(b)) = (s.soft_cipher.as_mut(), s.dev.engine().mr_bytes_mut(lkey))
    else {
        return Err("doorbell baseline: no cipher or region".into());
    };
    let message = &mut b[at..at + data];
    cipher.open(message)?;
    if let Some(v) = s.verify.as_mut() {
        let msg = v.received[0];
        v.received[0] += 1;
        v.check(
            &message[NONCE_LEN..data - TAG_LEN],
            verify::tag(0, msg),
            qpn,
            msg,
        );
    }
    Ok(())
}

/// The receiver's count against the sender's, once the sender reported it: every message
/// the sender counted must have been opened here.
pub(crate) fn check_count(opened: u64, sent: u64) -> Result<(), String> {
    if opened == sent {
        return Ok(());
    }
    Err(format!(
        "doorbell baseline: the client counted {sent} messages, this end opened {opened} \
         (is the client Sluice run with --doorbell-crypt and the same -t and -s?)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::Report;
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

    /// Options for the baseline over loopback: `test`, `size`-byte messages, the key.
    fn options(test: Test, size: u32) -> Options {
        let mut o = Options::new(test);
        o.size = Some(size);
        o.doorbell_crypt = true;
        o.encrypt = Some(Psk::new([9; 32]).unwrap());
        o
    }

    #[test]
    fn the_baseline_is_refused_where_it_has_no_meaning() {
        let refused = |o: Options, why: &str| {
            let e = super::super::validate(&o).unwrap_err().to_string();
            assert!(e.contains("--doorbell-crypt") && e.contains(why), "{e}");
        };
        for test in [Test::WriteLat, Test::WriteBw] {
            assert!(super::super::validate(&options(test, 4096)).is_ok());
            refused(
                Options {
                    encrypt: None,
                    ..options(test, 4096)
                },
                "--encrypt",
            );
            refused(options(test, MIN_SIZE - 1), "-s of at least 33");
            let mut o = options(test, 4096);
            o.policies.recovery = sluice_core::Recovery::SelectiveRepeat;
            refused(o, "go-back-N");
        }
        refused(options(Test::ReadBw, 4096), "not ib_read_bw");
        refused(
            Options {
                qps: 2,
                ..options(Test::WriteBw, 4096)
            },
            "-q 1",
        );
        let timed = Options {
            duration: Some(Duration::from_secs(1)),
            ..options(Test::WriteBw, 4096)
        };
        refused(timed, "not -D");
        refused(
            Options {
                tx_depth: 8192,
                ..options(Test::WriteBw, 1 << 20)
            },
            "slot",
        );
    }

    /// Both ends of a loopback run, each end's reports (`perf::run_loopback` keeps only the
    /// client's; the receiver's say what it checked).
    type Ends = (
        Result<Vec<Report>, PerfError>,
        Result<Vec<Report>, PerfError>,
    );
    fn both_ends(o: &Options) -> Ends {
        use std::net::{IpAddr, Ipv4Addr, SocketAddr};
        super::super::validate(o).unwrap();
        let roce_port = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .unwrap()
            .port();
        let server_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let listener = super::super::session::listen(SocketAddr::new(server_ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let o = Options {
            roce_port,
            quiet: true,
            stall_timeout: Duration::from_secs(20),
            ..o.clone()
        };
        let server_options = o.clone();
        let server =
            std::thread::spawn(move || super::super::session::serve(&server_options, &listener));
        let client = super::super::session::run(&Options {
            connect: Some(server_ip.to_string()),
            port,
            ..o
        });
        (client, server.join().unwrap())
    }

    /// write-bw's flow: every message the sender counted was opened at the receiver and its
    /// plaintext is byte for byte what was sealed; the bandwidth counts messages x size. A
    /// size not a multiple of 8, 3 slots and a completion every 2 messages, so that slots
    /// are reused out of step with the completions.
    #[test]
    fn write_bw_opens_every_message_byte_exact_and_counts_messages_times_size() {
        let (n, size) = (60, 1001);
        let o = Options {
            iterations: Some(n),
            tx_depth: 3,
            cq_mod: 2,
            verify: true,
            ..options(Test::WriteBw, size)
        };
        let (client, server) = both_ends(&o);
        let (client, server) = (&client.unwrap()[0], &server.unwrap()[0]);
        assert_eq!((client.iterations, client.bytes), (n, size));
        let bytes = client.bw_avg_gbps * 1e9 / 8.0 * client.duration_s;
        assert!(
            (bytes - (n * u64::from(size)) as f64).abs() < 1e-3,
            "{bytes}"
        );
        assert_eq!(server.verified_messages, Some(n), "{server:?}");
        assert_eq!(server.verify_errors, Some(0), "{server:?}");
    }

    /// The check can fail: a message whose plaintext the sender spoiled after filling it
    /// (before sealing: it opens) fails the receiver's check, naming the message.
    #[test]
    fn write_bw_finds_a_spoiled_plaintext() {
        let mut o = Options {
            iterations: Some(20),
            tx_depth: 4,
            verify: true,
            ..options(Test::WriteBw, 4096)
        };
        o.faults.corrupt_message = Some(7);
        let (_, server) = both_ends(&o);
        let e = server.unwrap_err().to_string();
        assert!(
            e.contains("1 of the 20 messages") && e.contains("message 7"),
            "{e}"
        );
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
