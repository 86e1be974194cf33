//! The pacing that SCR's fairness schedulers share: each class (a queue pair, or a tenant's
//! queue pairs together) has a dequeue rate set by an [`Allocator`], enforced by a token
//! bucket, and eligible classes take turns.

use std::collections::VecDeque;

use super::lists::{Lists, Tenants};
use super::wheel::Wheel;
use super::{Served, Tenant};
use crate::Instant;

/// Decides each class's dequeue rate as classes join and leave and send.
pub(crate) trait Allocator: std::fmt::Debug + 'static {
    /// Makes room for class `class`.
    fn grow(&mut self, class: u32);
    /// Class `class`, of weight `weight`, starts sending at `now` (ns).
    fn join(&mut self, class: u32, weight: u32, now: u64);
    /// Class `class` stopped sending (or is gone).
    fn leave(&mut self, class: u32, now: u64);
    /// The rate class `class` is paced at, bytes per nanosecond (above zero).
    fn rate(&self, class: u32) -> f64;
    /// Its inverse, nanoseconds per byte (kept by the allocator so that a packet costs
    /// multiplications, not divisions).
    fn cost(&self, class: u32) -> f64;
    /// Class `class` sent `bytes` on the link at `now`; `backlogged`: it has more to send,
    /// so its bucket, not its demand, is what holds it back.
    fn sent(&mut self, class: u32, bytes: u32, now: u64, backlogged: bool) {
        let _ = (class, bytes, now, backlogged);
    }
    /// The link is `link` bytes per ns and the floor `floor` (told before any class joins).
    fn set_link(&mut self, link: f64, floor: f64);
}

/// What a class is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No queue pair of it is waiting (none held, or its one is being served).
    Idle,
    /// In `ready` or `waiting`.
    Queued,
    /// One of its queue pairs is out being served.
    Serving,
}

/// A class's pacing state.
#[derive(Debug, Clone, Copy)]
struct Class {
    /// When its bucket allows its next packet, ns.
    ready_at: f64,
    /// Its member queue pairs.
    members: u32,
    state: State,
    /// Classes are queue pairs: its queue pair waits (else the lists say who waits).
    waiting: bool,
}

const NO_CLASS: Class = Class {
    ready_at: 0.0,
    members: 0,
    state: State::Idle,
    waiting: false,
};

/// `x` ns rounded up to a whole ns, 0 if negative. By hand: without SSE4.1 (the baseline
/// target) `f64::ceil` is a call into libm, on every packet.
#[inline]
fn ceil_ns(x: f64) -> u64 {
    let t = (x as i64).max(0);
    (t + i64::from((t as f64) < x)) as u64
}

/// Not dropped (held, or never woken).
const HELD: u64 = u64::MAX;

/// A pacing scheduler over allocator `A`.
///
/// A queue pair joins (and its class with it, if it is the class's first) when it is first
/// woken, and leaves when it is removed, reset, or has been dropped (nothing more to send)
/// for longer than `linger`: a queue pair that pauses between messages keeps its share.
/// A class whose bucket allows its next packet is ready; ready classes take turns, one
/// packet each; the others wait in a timing wheel for the time their bucket allows it
/// (released at the start of the wheel's 256 ns slot that holds it, a little early).
#[derive(Debug)]
pub(crate) struct Paced<A> {
    pub(crate) alloc: A,
    /// Classes are tenants (else queue pairs).
    by_tenant: bool,
    tenants: Tenants,
    /// Each class's waiting queue pairs.
    qps: Lists,
    /// Each queue pair counts as a member of its class.
    member: Vec<bool>,
    /// When each queue pair was dropped, or [`HELD`].
    dropped: Vec<u64>,
    /// Drops in time order, for leaving after `linger`.
    drops: VecDeque<(u64, u32)>,
    linger: u64,
    /// Each class's state, together so that a decision touches one line per class.
    classes: Vec<Class>,
    ready: VecDeque<u32>,
    waiting: Wheel,
    /// The bucket's depth, bytes: what a class that waited may send back to back.
    burst: f64,
    /// How eligible classes take turns: 0, one packet each; else a class keeps the turn
    /// until its message ends or it has sent this many payload bytes in it, while its
    /// bucket allows (a hardware NIC's own arbiter under SCR's rate limiters, as
    /// [`super::NicDefault`] arbitrates: it decides again once the rates no longer bind).
    turn: u32,
    /// Payload bytes the class served last sent in its current turn.
    held: u32,
    /// The latest time seen (wake is not told the time).
    now: u64,
}

impl<A: Allocator> Paced<A> {
    pub(crate) fn new(alloc: A, by_tenant: bool, burst: u32, linger: u64, turn: u32) -> Paced<A> {
        Paced {
            alloc,
            by_tenant,
            tenants: Tenants::default(),
            qps: Lists::default(),
            member: Vec::new(),
            dropped: Vec::new(),
            drops: VecDeque::new(),
            linger,
            classes: Vec::new(),
            ready: VecDeque::new(),
            waiting: Wheel::default(),
            burst: f64::from(burst),
            turn,
            held: 0,
            now: 0,
        }
    }

    #[inline]
    fn class(&self, qp: u32) -> u32 {
        if self.by_tenant {
            self.tenants.of[qp as usize]
        } else {
            qp
        }
    }

    fn grow_classes(&mut self, class: u32) {
        let n = class as usize + 1;
        if self.classes.len() < n {
            self.classes.resize(n, NO_CLASS);
            if self.by_tenant {
                self.qps.grow_lists(class);
            }
            self.alloc.grow(class);
            self.ready.reserve(n.saturating_sub(self.ready.len()));
            self.waiting.grow(class);
        }
    }

    fn weight(&self, qp: u32) -> u32 {
        if self.by_tenant {
            self.tenants.weight[self.tenants.of[qp as usize] as usize]
        } else {
            1
        }
    }

    fn join(&mut self, qp: u32) {
        if self.member[qp as usize] {
            return;
        }
        self.member[qp as usize] = true;
        let c = self.class(qp);
        self.classes[c as usize].members += 1;
        if self.classes[c as usize].members == 1 {
            let weight = self.weight(qp);
            self.alloc.join(c, weight, self.now);
        }
    }

    fn leave(&mut self, qp: u32) {
        if !std::mem::take(&mut self.member[qp as usize]) {
            return;
        }
        let c = self.class(qp);
        self.classes[c as usize].members -= 1;
        if self.classes[c as usize].members == 0 {
            self.alloc.leave(c, self.now);
        }
    }

    /// Queue pair `qp` of class `c` waits.
    #[inline]
    fn push(&mut self, c: u32, qp: u32) {
        if self.by_tenant {
            self.qps.push_back(c, qp);
        } else {
            self.classes[c as usize].waiting = true;
        }
    }

    /// The next waiting queue pair of class `c`.
    #[inline]
    fn pop(&mut self, c: u32) -> Option<u32> {
        if self.by_tenant {
            self.qps.pop_front(c)
        } else {
            std::mem::take(&mut self.classes[c as usize].waiting).then_some(c)
        }
    }

    #[inline]
    fn has_waiting(&self, c: u32) -> bool {
        if self.by_tenant {
            !self.qps.is_empty(c)
        } else {
            self.classes[c as usize].waiting
        }
    }

    /// Queue pair `qp` no longer waits; whether it did.
    fn unlink(&mut self, qp: u32) -> bool {
        if self.by_tenant {
            self.qps.unlink(qp).is_some()
        } else {
            std::mem::take(&mut self.classes[qp as usize].waiting)
        }
    }

    /// Puts class `c`, with a queue pair waiting, where its bucket (filling at one byte
    /// per `cost` ns) says.
    #[inline]
    fn enqueue(&mut self, c: u32, cost: f64) {
        let now = self.now;
        let class = &mut self.classes[c as usize];
        // A bucket fills up to `burst` while its class waits or idles.
        let full = now as f64 - self.burst * cost;
        if class.ready_at < full {
            class.ready_at = full;
        }
        let at = ceil_ns(class.ready_at);
        class.state = State::Queued;
        if at <= self.now {
            self.ready.push_back(c);
        } else {
            self.waiting.insert(at, c, &mut self.ready);
        }
    }

    fn expire_drops(&mut self) {
        while let Some(&(at, qp)) = self.drops.front() {
            if at.saturating_add(self.linger) > self.now {
                break;
            }
            self.drops.pop_front();
            if self.dropped[qp as usize] == at {
                self.dropped[qp as usize] = HELD;
                self.leave(qp);
            }
        }
    }

    pub(crate) fn reset(&mut self, qp: u32) {
        if (qp as usize) < self.member.len() {
            self.unlink(qp);
            self.leave(qp);
        }
        self.tenants.reset(qp);
        self.qps.grow_items(qp);
        let n = qp as usize + 1;
        if self.member.len() < n {
            self.member.resize(n, false);
            self.dropped.resize(n, HELD);
            self.drops.reserve(n.saturating_sub(self.drops.len()));
        }
        self.dropped[qp as usize] = HELD;
        let c = self.class(qp);
        self.grow_classes(c);
    }

    #[inline]
    pub(crate) fn wake(&mut self, qp: u32) {
        self.dropped[qp as usize] = HELD;
        self.join(qp);
        let c = self.class(qp);
        self.push(c, qp);
        if self.classes[c as usize].state == State::Idle {
            let cost = self.alloc.cost(c);
            self.enqueue(c, cost);
        }
    }

    #[inline]
    pub(crate) fn next(&mut self, now: Instant) -> Option<u32> {
        self.now = self.now.max(now.as_nanos());
        if !self.drops.is_empty() {
            self.expire_drops();
        }
        self.waiting.release(self.now, &mut self.ready);
        while let Some(c) = self.ready.pop_front() {
            if let Some(qp) = self.pop(c) {
                self.classes[c as usize].state = State::Serving;
                return Some(qp);
            }
            // Its queue pairs were removed while it waited.
            self.classes[c as usize].state = State::Idle;
        }
        None
    }

    #[inline]
    pub(crate) fn served(&mut self, qp: u32, now: Instant, sent: Option<Served>, more: bool) {
        self.now = self.now.max(now.as_nanos());
        let c = self.class(qp);
        let ci = c as usize;
        let mut cost = self.alloc.cost(c);
        // Whether it keeps the turn (a NIC-like arbiter, `turn` above 0).
        let mut keep = false;
        if let Some(s) = sent {
            let bytes = s.link_len;
            let full = self.now as f64 - self.burst * cost;
            let backlogged = more || self.has_waiting(c);
            self.alloc.sent(c, bytes, self.now, backlogged);
            // The packet is paid for at the rate it leaves set (as a hardware limiter
            // refills at a rate from the moment it is installed), not at the one before:
            // else a step, which comes on a packet, would take effect a packet late.
            cost = self.alloc.cost(c);
            let class = &mut self.classes[ci];
            class.ready_at = class.ready_at.max(full) + f64::from(bytes) * cost;
            if self.turn > 0 {
                self.held = self.held.saturating_add(s.payload_len);
                keep = more && !s.message_end() && self.held < self.turn;
            }
        }
        if more {
            self.push(c, qp);
        } else {
            self.dropped[qp as usize] = self.now;
            self.drops.push_back((self.now, qp));
        }
        if self.classes[ci].state != State::Queued {
            self.classes[ci].state = State::Idle;
            if self.has_waiting(c) {
                if keep && ceil_ns(self.classes[ci].ready_at) <= self.now {
                    self.classes[ci].state = State::Queued;
                    self.ready.push_front(c);
                    return;
                }
                self.enqueue(c, cost);
            }
        }
        self.held = 0;
    }

    pub(crate) fn remove(&mut self, qp: u32) {
        self.unlink(qp);
        self.dropped[qp as usize] = HELD;
        self.leave(qp);
    }

    pub(crate) fn set_tenant(&mut self, qp: u32, tenant: Tenant) {
        let slot = self.tenants.slot(tenant);
        if !self.by_tenant {
            self.tenants.of[qp as usize] = slot;
            return;
        }
        self.grow_classes(slot);
        let listed = self.unlink(qp);
        let was = self.member[qp as usize];
        self.leave(qp);
        self.tenants.of[qp as usize] = slot;
        if was {
            self.join(qp);
        }
        if listed {
            self.wake(qp);
        }
    }

    pub(crate) fn eligible_at(&self) -> Option<Instant> {
        if !self.ready.is_empty() {
            return Some(Instant::from_nanos(self.now));
        }
        self.waiting.next_time().map(Instant::from_nanos)
    }

    /// The members (classes) there are now, for tests.
    #[cfg(test)]
    pub(crate) fn classes(&self) -> usize {
        self.classes.iter().filter(|c| c.members > 0).count()
    }
}

#[cfg(test)]
#[test]
fn ceil_ns_rounds_up() {
    assert_eq!(
        [-3.5, 0.0, 0.2, 7.0, 7.000001].map(ceil_ns),
        [0, 0, 1, 7, 8]
    );
}

/// Implements [`super::Scheduler`] for a wrapper `$t` whose field `paced` is a [`Paced`] and
/// `pacing` the [`super::Pacing`] it was made with.
macro_rules! paced_scheduler {
    ($t:ty) => {
        impl $crate::policy::Scheduler for $t {
            fn reset(&mut self, qp: u32) {
                self.paced.reset(qp)
            }
            #[inline]
            fn wake(&mut self, qp: u32) {
                self.paced.wake(qp)
            }
            #[inline]
            fn next(&mut self, now: $crate::Instant) -> Option<u32> {
                self.paced.next(now)
            }
            #[inline]
            fn served(
                &mut self,
                qp: u32,
                now: $crate::Instant,
                sent: Option<$crate::policy::Served>,
                more: bool,
            ) {
                self.paced.served(qp, now, sent, more)
            }
            fn remove(&mut self, qp: u32) {
                self.paced.remove(qp)
            }
            fn set_tenant(&mut self, qp: u32, tenant: $crate::policy::Tenant) {
                self.paced.set_tenant(qp, tenant)
            }
            fn eligible_at(&self) -> Option<$crate::Instant> {
                self.paced.eligible_at()
            }
            fn set_link(&mut self, bits_per_second: u64) {
                // A link given in the parameters wins.
                if self.pacing.link.is_none() {
                    let link = self.pacing.link_bytes_per_ns(bits_per_second);
                    let floor = self.pacing.floor_bytes_per_ns(bits_per_second);
                    self.paced.alloc.set_link(link, floor);
                }
            }
        }
    };
}
pub(crate) use paced_scheduler;
