//! Which loss recovery a `sluice perf` connection runs: `--recovery`, as far as the peer can
//! take part in it.
//!
//! Selective repeat needs a responder that holds the packets that arrive past a gap. A
//! standard RoCE responder (perftest on Soft-RoCE or on a NIC) is go-back-N: it NAKs the
//! first missing PSN and drops everything after it. A selective-repeat requester resends
//! just the NAK'd packet; the responder takes it silently and waits for the next one, which
//! the requester believes held, so with its window full only the retransmit timer moves
//! things (a timeout per loss; docs/perftest.md). Selective repeat is therefore something
//! both ends must run, and perftest's exchange has one place where a Sluice end says it
//! does: the `SLC1` tail of the version message, with its receive window
//! (`sluice_perftest::Negotiated::peer_receive_window`). An end that asked for selective
//! repeat runs it only with a peer that sent that tail; with any other peer it runs
//! go-back-N (rewinds on a sequence NAK, drops past a gap), as the peer does.

use sluice_core::Recovery;

/// What `--recovery` asked for and what the connection runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecoveryChoice {
    /// `--recovery`.
    pub(crate) asked: Recovery,
    /// What the queue pairs are connected with.
    pub(crate) used: Recovery,
}

impl RecoveryChoice {
    /// The recovery for a connection whose peer advertised `peer_window` in the exchange
    /// (`None`: it sent no `SLC1` tail, so it is perftest, or Sluice with go-back-N).
    pub(crate) fn negotiate(asked: Recovery, peer_window: Option<u32>) -> RecoveryChoice {
        let used = match (asked, peer_window) {
            (Recovery::SelectiveRepeat, Some(_)) => Recovery::SelectiveRepeat,
            _ => Recovery::GoBackN,
        };
        RecoveryChoice { asked, used }
    }

    /// The one-line note an end prints when it does not run what was asked.
    pub(crate) fn note(&self) -> Option<&'static str> {
        (self.asked != self.used).then_some(
            "sluice perf: note: the peer did not advertise a selective-repeat receive window \
             (perftest, or Sluice with go-back-N), so this end runs go-back-N with it",
        )
    }
}

/// `--recovery`'s spelling of `r` (and the JSON's).
pub(crate) fn name(r: Recovery) -> &'static str {
    match r {
        Recovery::GoBackN => "go-back-n",
        Recovery::SelectiveRepeat => "selective-repeat",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selective_repeat_needs_the_peers_window() {
        let sr = Recovery::SelectiveRepeat;
        let gbn = Recovery::GoBackN;
        // Two Sluice ends with selective repeat: kept, whatever the window.
        for w in [1, 17, 256, 1 << 23] {
            let c = RecoveryChoice::negotiate(sr, Some(w));
            assert_eq!(c.used, sr, "window {w}");
            assert_eq!(c.note(), None);
        }
        // A peer that sent no tail: go-back-N, and said so.
        let c = RecoveryChoice::negotiate(sr, None);
        assert_eq!((c.asked, c.used), (sr, gbn));
        assert!(c.note().unwrap().contains("go-back-N"));
        // Go-back-N asked: go-back-N, silently, whatever the peer advertised.
        for w in [None, Some(256)] {
            let c = RecoveryChoice::negotiate(gbn, w);
            assert_eq!(c.used, gbn);
            assert_eq!(c.note(), None);
        }
    }

    #[test]
    fn names_are_the_flags_values() {
        assert_eq!(name(Recovery::GoBackN), "go-back-n");
        assert_eq!(name(Recovery::SelectiveRepeat), "selective-repeat");
    }
}
