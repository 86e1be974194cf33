//! Where a ping-pong's turn goes, in nanoseconds (feature `turn-timing`, off by default):
//! for each turn of a device (datagrams received, then the next datagrams sent), how long
//! the receive call that brought them took (`recvmmsg` with the arrays it takes and the
//! control messages it returns), how long the user-space work from its return to the send
//! call took, and how long that call took (the arrays, then `sendmmsg`). On loopback the
//! kernel delivers a datagram inside the sender's `sendmmsg`, so with both ends spinning a
//! half round trip is about the receive, the user-space work and the send, plus the wait
//! for the poll that finds the datagram. `scripts/bench-turn-time` compares Sluice's turn
//! with the RoCE-shaped UDP ping-pong's (`examples/udp_pingpong.rs`, which records the
//! same three with this module): where the kernel's calls take the same, the difference is
//! the user-space work.
//!
//! Read with the time-stamp counter on x86-64 (12 ns a reading on the project's VM, where a
//! clock reading takes 21: a loop of 10 million of each), elsewhere with the monotonic
//! clock, converted to nanoseconds by the monotonic clock's reading over the whole run. A
//! diagnostic build, never the default one: each mark costs a counter read and a push on
//! the datapath.
#![allow(unsafe_code)]

use std::time::Instant;

/// A counter reading: the time-stamp counter on x86-64, else nanoseconds of the monotonic
/// clock since the first reading.
#[inline(always)]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC reads a counter; it has no memory effects and exists on every
        // x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// One device's (or one ping-pong end's) turns, as cycle counts.
#[derive(Debug, Clone)]
pub struct TurnTiming {
    started: (u64, Instant),
    /// When the last receive that brought datagrams returned, if no send has followed it.
    received_at: Option<u64>,
    recv: Vec<u64>,
    user: Vec<u64>,
    send: Vec<u64>,
}

/// Medians of a run's turns, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnSummary {
    /// Turns counted.
    pub turns: usize,
    /// A receive call that returned datagrams without sleeping.
    pub recv_ns: f64,
    /// From that call's return to the next send call.
    pub user_ns: f64,
    /// The send call (on loopback: with the delivery to the peer's socket).
    pub send_ns: f64,
}

impl Default for TurnTiming {
    fn default() -> Self {
        TurnTiming {
            started: (cycles(), Instant::now()),
            received_at: None,
            recv: Vec::with_capacity(1 << 20),
            user: Vec::with_capacity(1 << 20),
            send: Vec::with_capacity(1 << 20),
        }
    }
}

impl TurnTiming {
    /// A receive call that began at `start` (a [`cycles`] reading) has returned; `got`:
    /// with datagrams. A call that may have slept (`waited`) starts a turn but is not
    /// timed.
    #[inline]
    pub fn received(&mut self, start: u64, got: bool, waited: bool) {
        if got {
            let now = cycles();
            if !waited {
                self.recv.push(now - start);
            }
            self.received_at = Some(now);
        }
    }

    /// A send call begins: returns its start, for [`TurnTiming::sent`].
    #[inline]
    pub fn sending(&mut self) -> u64 {
        let now = cycles();
        if let Some(at) = self.received_at.take() {
            self.user.push(now - at);
        }
        now
    }

    /// The send call that began at `start` has returned.
    #[inline]
    pub fn sent(&mut self, start: u64) {
        self.send.push(cycles() - start);
    }

    /// The medians so far, or `None` before a turn was complete.
    pub fn summary(&self) -> Option<TurnSummary> {
        let (c0, t0) = self.started;
        let cycles_run = cycles().saturating_sub(c0);
        if self.user.is_empty() || cycles_run == 0 {
            return None;
        }
        let ns_per_cycle = t0.elapsed().as_nanos() as f64 / cycles_run as f64;
        let median = |v: &[u64]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v.get(v.len() / 2).map_or(0.0, |&c| c as f64 * ns_per_cycle)
        };
        Some(TurnSummary {
            turns: self.user.len(),
            recv_ns: median(&self.recv),
            user_ns: median(&self.user),
            send_ns: median(&self.send),
        })
    }
}

impl std::fmt::Display for TurnSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} turns, medians: receive {:.0} ns, user space {:.0} ns, send {:.0} ns",
            self.turns, self.recv_ns, self.user_ns, self.send_ns
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_runs_from_a_receive_with_datagrams_to_the_next_send() {
        let mut t = TurnTiming::default();
        // A send before anything arrived, and empty receives: no turn.
        let s = t.sending();
        t.sent(s);
        t.received(cycles(), false, false);
        assert_eq!(t.summary(), None);
        // Datagrams, after a sleep: a turn, but the receive is not timed.
        t.received(cycles(), true, true);
        let s = t.sending();
        t.sent(s);
        // Datagrams without a sleep, 2 ms of work, then two sends: one more turn, one timed
        // receive, and the counter's cycles read back as the time they took.
        t.received(cycles(), true, false);
        let work = Instant::now();
        while work.elapsed() < std::time::Duration::from_millis(2) {}
        let s = t.sending();
        t.sent(s);
        let s = t.sending();
        t.sent(s);
        let summary = t.summary().expect("two turns");
        assert_eq!(summary.turns, 2);
        assert_eq!((t.recv.len(), t.user.len(), t.send.len()), (1, 2, 4));
        // Of two turns the middle value is the larger: the turn with the 2 ms of work.
        assert!(
            (1.9e6..3e6).contains(&summary.user_ns),
            "2 ms of work read as {} ns",
            summary.user_ns
        );
    }
}
