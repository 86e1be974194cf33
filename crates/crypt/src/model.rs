//! A model test of the nonce rule: across a randomized sequence of first sends, go-back-N
//! retransmissions, READ re-requests answered from memory that may have changed since, and
//! PSN wraps, no nonce ever protects two different plaintexts (in fact no nonce is used
//! twice), every packet opens once at the peer, and a second copy of any is dropped.

use std::collections::HashMap;

use proptest::prelude::*;

use crate::handshake::TrafficSecret;
use crate::packet::{NONCE_LEN, OVERHEAD, OpenError, OpenKey, SealKey};

const PSN_MASK: u32 = 0x00ff_ffff;
const CELL: usize = 64;
const CELLS: usize = 32;

#[derive(Debug, Clone)]
enum Op {
    /// A new message of `cells` packets, from memory at `at`.
    Send { at: usize, cells: usize },
    /// The application (or a remote writer) changes memory.
    Write { cell: usize, byte: u8 },
    /// Go-back-N: the last `back` packets go again, read again from memory.
    Retransmit { back: usize },
    /// A READ re-request: the responder answers packets `from..from + count` of what it
    /// sent, at their PSNs, reading memory now.
    ReRead { from: usize, count: usize },
    /// The PSN goes round its 24 bits (as after 2^24 packets).
    Wrap,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..CELLS, 1usize..6).prop_map(|(at, cells)| Op::Send { at, cells }),
        (0..CELLS, any::<u8>()).prop_map(|(cell, byte)| Op::Write { cell, byte }),
        (1usize..8).prop_map(|back| Op::Retransmit { back }),
        (any::<usize>(), 1usize..6).prop_map(|(from, count)| Op::ReRead { from, count }),
        Just(Op::Wrap),
    ]
}

/// One packet as the transport sends it: its PSN and where its payload is read from.
#[derive(Debug, Clone, Copy)]
struct Sent {
    psn: u32,
    cell: usize,
}

fn bth(psn: u32) -> [u8; 12] {
    let mut b = [0; 12];
    b[0] = 0x10; // RC READ RESPONSE MIDDLE: no extension headers.
    b[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    b[7] = 0x22;
    b[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    b
}

fn secret() -> TrafficSecret {
    TrafficSecret {
        suite: crate::suite::Suite::Aes256Gcm,
        key: [0x3c; 32],
        salt: [9, 8, 7, 6],
    }
}

proptest! {
    #[test]
    fn no_nonce_protects_two_plaintexts(
        // Half the cases start next to the 24-bit wrap, so first sends cross it too.
        start in prop_oneof![0u32..=PSN_MASK, (PSN_MASK - 40)..=PSN_MASK],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut memory = vec![0u8; CELL * CELLS];
        for (i, b) in memory.iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut seal = SealKey::new(&secret());
        let mut psn = start;
        let mut log: Vec<Sent> = Vec::new();
        // Every packet sealed: its wire bytes and headers.
        let mut wires: Vec<([u8; 12], Vec<u8>)> = Vec::new();
        // Nonce -> plaintext it protected.
        let mut by_nonce: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut emit = |sent: Sent, memory: &[u8]| -> Result<(), TestCaseError> {
            let plain = &memory[sent.cell * CELL..(sent.cell + 1) * CELL];
            let mut wire = vec![0; OVERHEAD + CELL];
            wire[NONCE_LEN..NONCE_LEN + CELL].copy_from_slice(plain);
            let headers = bth(sent.psn);
            let counter = seal.seal(&headers, &[], &mut wire).unwrap();
            let on_wire = u64::from_be_bytes(wire[..8].try_into().unwrap());
            prop_assert_eq!(counter, on_wire);
            prop_assert!(
                by_nonce.insert(counter, plain.to_vec()).is_none(),
                "nonce {} used twice", counter
            );
            wires.push((headers, wire));
            Ok(())
        };
        for op in ops {
            match op {
                Op::Send { at, cells } => {
                    for k in 0..cells {
                        let sent = Sent { psn, cell: (at + k) % CELLS };
                        psn = (psn + 1) & PSN_MASK;
                        log.push(sent);
                        emit(sent, &memory)?;
                    }
                }
                Op::Write { cell, byte } => memory[cell * CELL] = byte,
                Op::Retransmit { back } => {
                    let from = log.len().saturating_sub(back);
                    for sent in log[from..].iter().copied() {
                        emit(sent, &memory)?;
                    }
                }
                Op::ReRead { from, count } => {
                    if log.is_empty() {
                        continue;
                    }
                    let from = from % log.len();
                    let to = (from + count).min(log.len());
                    for sent in log[from..to].iter().copied() {
                        emit(sent, &memory)?;
                    }
                }
                Op::Wrap => {
                    // As if 2^24 packets went by: new messages reuse the PSNs already in the
                    // log, with whatever memory holds now. (The real sender's counter would
                    // have moved on by 2^24; the property needs only that it grows.)
                    psn = log.first().map_or(psn, |s| s.psn);
                }
            }
        }
        // The peer opens each once, in order; a second copy of any is dropped.
        let mut open = OpenKey::new(&secret());
        for (headers, wire) in &wires {
            prop_assert!(open.open(headers, &[], &mut wire.clone()).is_ok());
        }
        for (headers, wire) in &wires {
            prop_assert_eq!(open.open(headers, &[], &mut wire.clone()), Err(OpenError::Replayed));
        }
    }
}

/// The hazard the explicit counter removes: with a nonce made of the PSN (and a wrap count),
/// a READ re-request answered after memory changed seals different bytes under a nonce
/// already used. This sequence is a real one in Sluice: a duplicate READ request makes the
/// responder read the region again (`responder.rs`, `on_duplicate`: `Response::Read {
/// replay: true, .. }`).
#[test]
fn the_naive_psn_nonce_would_reuse_and_the_counter_does_not() {
    let mut memory = [1u8; CELL];
    let psn = 0x00ff_ffff; // Next to the wrap, for good measure.
    let mut seal = SealKey::new(&secret());
    let mut first = vec![0; OVERHEAD + CELL];
    first[NONCE_LEN..NONCE_LEN + CELL].copy_from_slice(&memory);
    let c1 = seal.seal(&bth(psn), &[], &mut first).unwrap();
    memory[0] = 2; // Written between the READ and its re-request.
    let mut again = vec![0; OVERHEAD + CELL];
    again[NONCE_LEN..NONCE_LEN + CELL].copy_from_slice(&memory);
    let c2 = seal.seal(&bth(psn), &[], &mut again).unwrap();
    // Naive: (PSN, wraps) is the same for both, the plaintexts differ: a reused nonce.
    assert_ne!(
        first[NONCE_LEN..NONCE_LEN + CELL],
        again[NONCE_LEN..NONCE_LEN + CELL]
    );
    assert_ne!(c1, c2);
    // With a reused nonce the XOR of ciphertexts would be the XOR of plaintexts; here the
    // keystreams differ, so the bytes that did not change do not match either.
    assert_ne!(
        first[NONCE_LEN + 1..NONCE_LEN + CELL],
        again[NONCE_LEN + 1..NONCE_LEN + CELL]
    );
}
