//! A model of a hardware RNIC's own queue-pair scheduler (SCR's "Default").

use std::collections::VecDeque;

use sluice_wire::Operation;

use super::{Scheduler, Served};
use crate::Instant;

/// A model of the greedy scheduler in an RDMA NIC's ASIC (what SCR calls "Default"), not a
/// policy anyone would choose in software: a per-packet round robin is already fair, which
/// would hide the unfairness SCR sets out to fix.
///
/// The arbiter works per work request and DMA burst, not per packet: a queue pair, once
/// picked, keeps sending until its message ends or it has sent `burst` payload bytes in this
/// turn, then goes to the back of the line. So a turn moves about min(message, burst) bytes,
/// and a queue pair with larger messages gets more of the link. Each work request finished
/// (a message's last packet, responses and control aside) also costs the arbiter a fixed
/// `wqe` byte times on the link (fetching the next descriptor, starting its DMA), during
/// which it serves no one: small messages pay it more often.
///
/// Calibrated against SCR Table 2 at 100 Gbit/s, MTU 1024, 8 KiB bursts and 256 byte times
/// per work request: a 4 KiB writer alone sends 4096 payload bytes per 4440 + 256 byte
/// times, about 87 Gbit/s (SCR: 88.3); against a 64 KiB writer it gets a third of the link,
/// about 30 Gbit/s to the other's 60 (SCR: 33.25 and 57.64). Queue pairs with equal
/// messages share evenly. (A burst as large as the larger message, 1 MiB against 4 KiB,
/// would instead give SCR Fig 11's 16:1; the burst is a parameter.)
///
/// Parameters: `burst` (payload bytes per turn, default 8192), `wqe` (byte times per work
/// request, default 256), `link` (to turn byte times into time; default the engine's line
/// rate, in Gbit/s by name in the registry).
#[derive(Debug, Clone)]
pub struct NicDefault {
    ready: VecDeque<u32>,
    burst: u32,
    /// Byte times the arbiter spends per work request.
    wqe: u32,
    /// The link was given (else the engine's line rate is).
    link_given: bool,
    /// Nanoseconds the arbiter spends per work request.
    wqe_ns: u64,
    /// Payload bytes the queue pair holding the turn sent in it.
    turn: u32,
    /// The arbiter serves no one before this, ns.
    busy_until: u64,
}

impl NicDefault {
    /// The model with `burst` payload bytes per turn and `wqe` byte times per work request on
    /// a link of `link` bit/s (`None`: the engine's line rate, [`super::DEFAULT_LINK`] until
    /// told).
    pub fn new(burst: u32, wqe: u32, link: Option<u64>) -> NicDefault {
        NicDefault {
            ready: VecDeque::new(),
            burst: burst.max(1),
            wqe,
            link_given: link.is_some(),
            wqe_ns: wqe_ns(wqe, link.unwrap_or(super::DEFAULT_LINK)),
            turn: 0,
            busy_until: 0,
        }
    }
}

/// Nanoseconds `wqe` byte times take on a link of `link` bit/s.
fn wqe_ns(wqe: u32, link: u64) -> u64 {
    (f64::from(wqe) * 8e9 / link.max(1) as f64).round() as u64
}

impl Default for NicDefault {
    fn default() -> Self {
        NicDefault::new(8192, 256, None)
    }
}

/// A work request of the sender's ended with this packet (an ACK, a CNP or a grant is the
/// NIC's own, not a work request).
fn ends_work_request(s: &Served) -> bool {
    s.message_end()
        && s.opcode.info().is_some_and(|i| {
            !matches!(
                i.operation,
                Operation::Acknowledge
                    | Operation::AtomicAcknowledge
                    | Operation::Cnp
                    | Operation::CcControl
            )
        })
}

impl Scheduler for NicDefault {
    fn reset(&mut self, _qp: u32) {}

    #[inline]
    fn wake(&mut self, qp: u32) {
        self.ready.push_back(qp);
    }

    #[inline]
    fn next(&mut self, now: Instant) -> Option<u32> {
        if now.as_nanos() < self.busy_until {
            return None;
        }
        self.ready.pop_front()
    }

    #[inline]
    fn served(&mut self, qp: u32, now: Instant, sent: Option<Served>, more: bool) {
        let Some(s) = sent else {
            self.turn = 0;
            if more {
                self.ready.push_back(qp);
            }
            return;
        };
        self.turn = self.turn.saturating_add(s.payload_len);
        let ended = s.message_end();
        if ends_work_request(&s) {
            self.busy_until = now.as_nanos() + self.wqe_ns;
        }
        if !more {
            self.turn = 0;
        } else if !ended && self.turn < self.burst {
            self.ready.push_front(qp);
        } else {
            self.turn = 0;
            self.ready.push_back(qp);
        }
    }

    fn remove(&mut self, qp: u32) {
        self.ready.retain(|&i| i != qp);
    }

    fn eligible_at(&self) -> Option<Instant> {
        (!self.ready.is_empty()).then_some(Instant::from_nanos(self.busy_until))
    }

    fn set_link(&mut self, bits_per_second: u64) {
        if !self.link_given {
            self.wqe_ns = wqe_ns(self.wqe, bits_per_second);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::Opcode;

    /// Packets of 1024 bytes of `message` bytes' WRITEs.
    fn packet(sent: u32, message: u32) -> Served {
        let (first, last) = (sent % message == 0, (sent + 1024) % message == 0);
        let opcode = match (first, last) {
            (true, true) => Opcode::RC_RDMA_WRITE_ONLY,
            (true, false) => Opcode::RC_RDMA_WRITE_FIRST,
            (false, true) => Opcode::RC_RDMA_WRITE_LAST,
            (false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
        };
        Served::new(opcode, 1024)
    }

    /// Gbit/s of payload each of two always-busy writers of `messages` bytes gets on a
    /// 100 Gbit/s link served by the default model.
    fn table2(messages: [u32; 2]) -> [f64; 2] {
        let mut s = NicDefault::default();
        s.wake(0);
        s.wake(1);
        let (mut now, mut sent) = (0u64, [0u32; 2]);
        let mut payload = [0u64; 2];
        while now < 10_000_000 {
            let Some(qp) = s.next(Instant::from_nanos(now)) else {
                now = s.eligible_at().unwrap().as_nanos();
                continue;
            };
            let q = qp as usize;
            let p = packet(sent[q], messages[q]);
            sent[q] = (sent[q] + 1024) % messages[q];
            payload[q] += 1024;
            now += (f64::from(p.link_len) * 8.0 / 100.0).round() as u64;
            s.served(qp, Instant::from_nanos(now), Some(p), true);
        }
        payload.map(|b| b as f64 * 8.0 / now as f64)
    }

    #[test]
    fn large_messages_win_as_on_a_hardware_nic_and_equal_ones_share_evenly() {
        let [small, hog] = table2([4096, 65536]);
        assert!((25.0..38.0).contains(&small), "{small}");
        assert!((55.0..66.0).contains(&hog), "{hog}");
        let [a, b] = table2([4096, 4096]);
        assert!((a - b).abs() < 0.5, "{a} {b}");
        assert!((40.0..46.0).contains(&a), "{a}");
    }

    #[test]
    fn the_work_request_cost_follows_the_engines_line_rate_unless_given_a_link() {
        let mut s = NicDefault::new(8192, 256, None);
        assert_eq!(s.wqe_ns, 20);
        s.set_link(25_000_000_000);
        assert_eq!(s.wqe_ns, 82);
        let mut given = NicDefault::new(8192, 256, Some(100_000_000_000));
        given.set_link(25_000_000_000);
        assert_eq!(given.wqe_ns, 20);
    }
}
