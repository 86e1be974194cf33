//! SCR's static fairness scheduler: the link divided evenly among whoever sends.

use super::paced::{Allocator, Paced, paced_scheduler};
use super::{DEFAULT_LINK, Pacing};

/// SCR's "Static" scheduler (§5.1): every active queue pair is paced at C/N, C the link's
/// capacity and N the active queue pairs, recomputed as queue pairs join and leave; or, with
/// `by_tenant`, every active tenant at C times its weight over the active tenants' total
/// weight, its queue pairs taking turns within that. No rate falls below the floor (SCR's
/// 1 Gbit/s: a rate limiter cannot pace finer), so past C/floor members the link is
/// oversubscribed and the turns decide.
///
/// It models the simplest policy a programmable NIC can install: fair by construction
/// between members, but a member that cannot use its share (small messages, a shallow
/// queue) leaves it unused, and one that could use more is held at C/N.
///
/// Parameters ([`Pacing`]; rates in Gbit/s by name in the registry): `link` (C, default
/// the engine's line rate), `floor` (default 1% of C), `by` (`qp` or `tenant`), `burst` (a bucket's depth, bytes) and `linger` (how long a
/// queue pair with nothing to send keeps its share).
#[derive(Debug)]
pub struct StaticShare {
    paced: Paced<Even>,
    pacing: Pacing,
}

impl StaticShare {
    /// The static scheduler over `pacing`.
    pub fn new(pacing: Pacing) -> StaticShare {
        let even = Even {
            link: pacing.link_bytes_per_ns(DEFAULT_LINK),
            floor: pacing.floor_bytes_per_ns(DEFAULT_LINK),
            weight: Vec::new(),
            total: 0,
            uniform: !pacing.by_tenant,
            share: 0.0,
            cost: 0.0,
        };
        StaticShare {
            paced: Paced::new(
                even,
                pacing.by_tenant,
                pacing.burst,
                pacing.linger_ns(),
                pacing.turn,
            ),
            pacing,
        }
    }

    /// The rate member class `class` is paced at, bytes per nanosecond.
    pub fn rate(&self, class: u32) -> f64 {
        self.paced.alloc.rate(class)
    }
}

paced_scheduler!(StaticShare);

/// C times a member's weight over the members' total.
#[derive(Debug)]
struct Even {
    link: f64,
    floor: f64,
    weight: Vec<u32>,
    total: u64,
    /// Every member weighs 1 (classes are queue pairs): all share `share`.
    uniform: bool,
    /// C over the total weight, above the floor.
    share: f64,
    /// Its inverse.
    cost: f64,
}

impl Even {
    fn update(&mut self) {
        self.share = (self.link / self.total.max(1) as f64).max(self.floor);
        self.cost = 1.0 / self.share;
    }
}

impl Allocator for Even {
    fn grow(&mut self, class: u32) {
        if self.weight.len() <= class as usize {
            self.weight.resize(class as usize + 1, 0);
        }
    }

    fn join(&mut self, class: u32, weight: u32, _now: u64) {
        self.weight[class as usize] = weight.max(1);
        self.total += u64::from(weight.max(1));
        self.update();
    }

    fn leave(&mut self, class: u32, _now: u64) {
        self.total -= u64::from(std::mem::take(&mut self.weight[class as usize]));
        self.update();
    }

    fn set_link(&mut self, link: f64, floor: f64) {
        (self.link, self.floor) = (link, floor);
        self.update();
    }

    #[inline]
    fn rate(&self, class: u32) -> f64 {
        if self.uniform {
            return self.share;
        }
        let w = self.weight[class as usize].max(1);
        (self.link * f64::from(w) / self.total.max(1) as f64).max(self.floor)
    }

    #[inline]
    fn cost(&self, class: u32) -> f64 {
        if self.uniform {
            return self.cost;
        }
        1.0 / self.rate(class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Instant;
    use crate::policy::{Scheduler, Tenant};

    #[test]
    fn each_member_gets_its_share_of_the_link_recomputed_on_join_and_leave() {
        let mut s = StaticShare::new(Pacing::default());
        for qp in 0..4 {
            s.reset(qp);
        }
        s.wake(0);
        s.wake(1);
        assert!((s.rate(0) - 6.25).abs() < 1e-9, "{}", s.rate(0));
        s.wake(2);
        s.wake(3);
        assert!((s.rate(3) - 3.125).abs() < 1e-9);
        s.remove(3);
        assert!((s.rate(0) - 12.5 / 3.0).abs() < 1e-9);
        assert_eq!(s.paced.classes(), 3);
    }

    #[test]
    fn a_queue_pair_with_nothing_to_send_leaves_after_linger() {
        let mut s = StaticShare::new(Pacing::default());
        for qp in 0..2 {
            s.reset(qp);
            s.wake(qp);
        }
        let qp = s.next(Instant::ZERO).unwrap();
        s.served(qp, Instant::ZERO, None, false);
        assert_eq!(s.paced.classes(), 2);
        let later = Instant::from_nanos(Pacing::default().linger_ns());
        assert!(s.next(later).is_some());
        assert_eq!(s.paced.classes(), 1);
    }

    #[test]
    fn by_tenant_the_share_follows_the_weight() {
        let mut s = StaticShare::new(Pacing {
            by_tenant: true,
            ..Pacing::default()
        });
        for qp in 0..3 {
            s.reset(qp);
        }
        s.set_tenant(2, Tenant { id: 5, weight: 3 });
        for qp in 0..3 {
            s.wake(qp);
        }
        // Tenant 0 (two queue pairs) gets a quarter, tenant 5 three quarters.
        assert!((s.rate(0) - 12.5 / 4.0).abs() < 1e-9);
        assert!((s.rate(1) - 12.5 * 0.75).abs() < 1e-9);
    }

    /// Packets each of two always-backlogged queue pairs sends in 2 ms on a 100 Gbit/s link
    /// at 1 KiB a packet, the first with `messages[0]` packets a message, the second with
    /// `messages[1]`; a floor of `floor` bit/s.
    fn packets(turn: u32, floor: u64, messages: [u64; 2]) -> [u64; 2] {
        use crate::policy::Served;
        use sluice_wire::Opcode;

        let mut s = StaticShare::new(Pacing {
            floor: Some(floor),
            turn,
            ..Pacing::default()
        });
        for qp in 0..2 {
            s.reset(qp);
            s.wake(qp);
        }
        let mut sent = [0u64; 2];
        let mut now = 0.0f64;
        while now < 2e6 {
            let t = Instant::from_nanos(now as u64);
            let Some(qp) = s.next(t) else {
                now = s.eligible_at().unwrap().as_nanos() as f64;
                continue;
            };
            let q = qp as usize;
            sent[q] += 1;
            let opcode = if sent[q] % messages[q] == 0 {
                Opcode::RC_RDMA_WRITE_LAST
            } else {
                Opcode::RC_RDMA_WRITE_MIDDLE
            };
            let p = Served::new(opcode, 1024);
            s.served(qp, t, Some(p), true);
            now += f64::from(p.link_len) / 12.5;
        }
        sent
    }

    #[test]
    fn with_a_nic_arbiter_large_messages_win_only_once_the_rates_no_longer_bind() {
        // Rates that bind (C/2 each, no floor above it): even, whatever the turns.
        for turn in [0, 65536] {
            let [small, large] = packets(turn, 0, [1, 64]);
            let ratio = large as f64 / small as f64;
            assert!((ratio - 1.0).abs() < 0.05, "turn {turn}: {small} {large}");
        }
        // A floor of 2C: no rate binds. One packet each in turn is still even; the NIC's
        // arbiter gives a queue pair its whole message (64 KiB, the turn's cap) in a turn,
        // its bucket refilling faster than it sends.
        let [small, large] = packets(0, 200_000_000_000, [1, 64]);
        assert!(small.abs_diff(large) <= 1, "{small} {large}");
        let [small, large] = packets(65536, 200_000_000_000, [1, 64]);
        let ratio = large as f64 / small as f64;
        assert!((55.0..70.0).contains(&ratio), "{small} {large}");
    }
}
