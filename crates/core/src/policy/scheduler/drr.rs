//! Weighted deficit round robin across tenants.

use std::collections::VecDeque;

use super::lists::{Lists, Tenants};
use super::{Scheduler, Served, Tenant};
use crate::Instant;

/// Weighted deficit round robin by bytes across tenants (Shreedhar and Varghese), round
/// robin among each tenant's queue pairs: what a software switch or a host's fair queueing
/// would do, so that a tenant's share of the link follows its weight whatever its message
/// sizes or number of queue pairs.
///
/// Tenants with something to send take turns. At the start of its turn a tenant's deficit
/// grows by `quantum` bytes times its weight; its queue pairs then send a packet each in
/// turn, each packet charged its bytes on the link ([`Served::link_len`]), until the deficit
/// is spent. A packet may overdraw the deficit; the debt is carried into the next turn, so
/// shares stay exact over time. A tenant with nothing left to send gives up what it had left
/// (not its debt). Nothing is paced: the scheduler never leaves the link idle.
///
/// Parameters: `quantum`, bytes per weight per turn (the registry's default is 4096).
#[derive(Debug, Clone)]
pub struct Drr {
    quantum: i64,
    tenants: Tenants,
    /// Each tenant's held queue pairs (one list per tenant slot).
    qps: Lists,
    /// Each tenant's deficit, in bytes.
    deficit: Vec<i64>,
    /// Tenants with held queue pairs in turn order; the front's turn is under way if
    /// `in_turn`.
    active: VecDeque<u32>,
    in_turn: bool,
    /// Each tenant is in `active`.
    queued: Vec<bool>,
}

impl Drr {
    /// Deficit round robin giving a tenant `quantum` bytes per turn per unit of weight.
    pub fn new(quantum: u32) -> Drr {
        Drr {
            quantum: i64::from(quantum.max(1)),
            tenants: Tenants::default(),
            qps: Lists::default(),
            deficit: Vec::new(),
            active: VecDeque::new(),
            in_turn: false,
            queued: Vec::new(),
        }
    }

    fn grow_tenants(&mut self) {
        let n = self.tenants.len();
        if self.deficit.len() < n {
            self.deficit.resize(n, 0);
            self.queued.resize(n, false);
            self.qps.grow_lists(n as u32 - 1);
            self.active.reserve(n - self.active.len());
        }
    }

    fn enqueue(&mut self, t: u32) {
        if !self.queued[t as usize] {
            self.queued[t as usize] = true;
            self.active.push_back(t);
        }
    }
}

impl Scheduler for Drr {
    fn reset(&mut self, qp: u32) {
        self.tenants.reset(qp);
        self.grow_tenants();
        self.qps.grow_items(qp);
        self.qps.unlink(qp);
    }

    #[inline]
    fn wake(&mut self, qp: u32) {
        let t = self.tenants.of[qp as usize];
        self.qps.push_back(t, qp);
        self.enqueue(t);
    }

    #[inline]
    fn next(&mut self, _now: Instant) -> Option<u32> {
        loop {
            let &t = self.active.front()?;
            let ti = t as usize;
            if self.qps.is_empty(t) {
                // Its queue pairs were removed, or its only one is out being served.
                self.active.pop_front();
                self.queued[ti] = false;
                self.in_turn = false;
                self.deficit[ti] = self.deficit[ti].min(0);
                continue;
            }
            if !self.in_turn {
                self.deficit[ti] += self.quantum * i64::from(self.tenants.weight[ti]);
                if self.deficit[ti] <= 0 {
                    // Still paying off an earlier overdraft: its turn passes.
                    self.active.rotate_left(1);
                    continue;
                }
                self.in_turn = true;
            }
            return self.qps.pop_front(t);
        }
    }

    #[inline]
    fn served(&mut self, qp: u32, _now: Instant, sent: Option<Served>, more: bool) {
        let t = self.tenants.of[qp as usize];
        let ti = t as usize;
        if let Some(s) = sent {
            self.deficit[ti] -= i64::from(s.link_len);
        }
        if more {
            self.qps.push_back(t, qp);
            self.enqueue(t);
        }
        if self.in_turn && self.active.front() == Some(&t) {
            let empty = self.qps.is_empty(t);
            if self.deficit[ti] <= 0 || empty {
                self.in_turn = false;
                self.active.pop_front();
                if empty {
                    self.queued[ti] = false;
                    self.deficit[ti] = self.deficit[ti].min(0);
                } else {
                    self.active.push_back(t);
                }
            }
        }
    }

    fn remove(&mut self, qp: u32) {
        self.qps.unlink(qp);
    }

    fn set_tenant(&mut self, qp: u32, tenant: Tenant) {
        let slot = self.tenants.slot(tenant);
        self.grow_tenants();
        let held = self.qps.unlink(qp).is_some();
        self.tenants.of[qp as usize] = slot;
        if held {
            self.wake(qp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::Opcode;

    fn packet(payload_len: u32) -> Served {
        Served::new(Opcode::RC_RDMA_WRITE_MIDDLE, payload_len)
    }

    /// Bytes each tenant (0 and 1) sends in `n` visits when every queue pair stays busy.
    fn shares(s: &mut Drr, n: usize) -> [u64; 2] {
        let mut bytes = [0u64; 2];
        for _ in 0..n {
            let qp = s.next(Instant::ZERO).expect("busy");
            let p = packet(1024);
            bytes[s.tenants.of[qp as usize] as usize] += u64::from(p.link_len);
            s.served(qp, Instant::ZERO, Some(p), true);
        }
        bytes
    }

    #[test]
    fn tenants_share_by_weight_whatever_their_queue_pairs() {
        let mut s = Drr::new(4096);
        for qp in 0..5 {
            s.reset(qp);
        }
        // Tenant 0 (weight 1) has four queue pairs, tenant 7 (weight 3) one.
        s.set_tenant(4, Tenant { id: 7, weight: 3 });
        for qp in 0..5 {
            s.wake(qp);
        }
        let [a, b] = shares(&mut s, 40_000);
        let ratio = b as f64 / a as f64;
        assert!((ratio - 3.0).abs() < 0.01, "{ratio}");
    }

    #[test]
    fn queue_pairs_of_a_tenant_take_turns() {
        let mut s = Drr::new(1 << 20);
        for qp in 0..3 {
            s.reset(qp);
            s.wake(qp);
        }
        let order: Vec<u32> = (0..6)
            .map(|_| {
                let qp = s.next(Instant::ZERO).unwrap();
                s.served(qp, Instant::ZERO, Some(packet(1024)), true);
                qp
            })
            .collect();
        assert_eq!(order, [0, 1, 2, 0, 1, 2]);
    }
}
