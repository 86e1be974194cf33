//! Homa (Montazeri et al., SIGCOMM 2018) as a control law: receiver-driven scheduling of
//! messages with switch priorities.
//!
//! A **message** is one work request (SEND or WRITE) of a queue pair, named at both ends by
//! its first PSN. Both ends must run this law and agree on two things at connection setup:
//! its declared CC header (below) and control packets (GRANT, RESEND and BUSY are kinds 4-6
//! of Sluice's 0x18 control packet, `sluice_wire::HomaControl`).
//!
//! ```text
//! sender:   gate(packet at offset o of a message of length L):
//!             o < rtt_bytes                Send at the unscheduled level for L
//!             o < granted                  Send at the level of the latest GRANT
//!             otherwise                    Hold
//!           GRANT(m, offset, level):       granted = max(granted, offset); wake
//!           RESEND(m, from, len, level):   not yet sent up to from+len: a GRANT was lost,
//!                                          take it as one; otherwise BUSY(m)
//! receiver: header(m, L, end) per packet:  received = max(received, end)
//!           while scheduled bytes remain:  if m is among the `overcommit` active messages
//!                                          with the fewest remaining bytes (SRPT), GRANT
//!                                          min(L, received + rtt_bytes) at its rank's level
//!           granted > received for resend_us without progress: RESEND(received..granted)
//!           BUSY(m):                       restart the resend timer
//! ```
//!
//! **Why a declared header.** The receiver must know each message's length and where each
//! packet lies in it; RoCE carries a WRITE's length in its first packet only and a SEND's
//! nowhere. Homa puts them in every data packet; here the sender stamps them into a CC
//! header the law declares (SwCC's programmable header, `DeclaredLayout`): `message` (24
//! bits, the first PSN), `length` and `end` (the byte after the packet's last), 12 bytes all
//! covered by the ICRC, since a corrupted length would misrank a message. A declared layout
//! rather than a new fixed one because it is this law's alone, negotiated and checked by
//! `sluice pcap check` like any declared layout, and costs the engine nothing when unused.
//!
//! **Priorities.** `priorities` levels (8), 0 the lowest. The top `cutoffs + 1` are
//! unscheduled: a message no longer than `unsched_cutoffs[i]` sends its unscheduled bytes
//! at level `priorities - 1 - i` (shorter, higher), longer ones at the lowest of them. The
//! rest (0 ..= 3 by default) are scheduled: with `n` granted messages the one with the
//! fewest remaining bytes gets level `min(n, levels) - 1`, the next one less, and so on
//! (Homa uses the lowest levels while few messages are granted, so that a shorter newcomer
//! can take a higher one). Grants, RESENDs, BUSYs and ACKs go at the highest level.
//!
//! **Departures.** Homa's receiver sees all its messages at once; a law sees one queue
//! pair's event at a time. So the `overcommit` granted messages are a law-wide table (SRPT
//! among them is exact), and the waiting ones a law-wide heap: a place freed goes to the
//! shortest waiting message, woken at once (`Law::take_wake`: its queue pair hears a Timer),
//! and a waiting message that becomes shorter than the longest member takes its place on
//! its own next packet. A fully granted message leaves the table
//! (its last bytes are in flight), as in Homa. RoCE RC recovers lost data itself (NAK and
//! go-back-N, or selective repeat); what it cannot recover is a lost GRANT, which strands
//! a sender that holds. RESEND is what repairs it: a sender asked for bytes it has not sent
//! takes the RESEND as the lost GRANT; asked for bytes it did send, it answers BUSY ("sent;
//! RC's recovery has them, or my send queue is busy with the messages ahead"), which
//! restarts the receiver's timer. The sender does not pick among its queue pairs (Homa's
//! sender-side SRPT): the engine's scheduler does that, `srpt` for Homa's order
//! (`sluice_core::policy::Srpt`; `scheduler = { name = "srpt" }` in a scenario's `[[cc]]`).
//! The default unscheduled cutoffs are fixed; [`workload_cutoffs`] computes its paper's for a
//! workload's flow-size distribution. A table member not heard from for
//! four resend timeouts (its queue pair gone) may be displaced by any waiting message; as
//! such a member frees no place, waiting messages also look for one every 8 resend
//! timeouts on their own (every base RTT if the law was never told their queue pair).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Gate, Law, MessagePos};
use sluice_wire::{
    CcxLayout, Coverage, DeclaredCcx, DeclaredLayout, Field, FieldSpec, HomaControl,
    PRIORITY_LEVELS,
};

use crate::params::{
    ParamError, ParamInfo, Params, parse_f64_in, parse_u64, parse_u64_in, unknown, us_to_ns,
};

/// The id of Homa's declared header on the wire ('H').
pub const LAYOUT_ID: u8 = 0x48;

/// The most unscheduled cutoffs (so at least one scheduled level remains of 8).
pub const MAX_CUTOFFS: usize = 6;

/// The most messages granted at once (the overcommitment degree's bound: a law-wide table).
pub const MAX_OVERCOMMIT: usize = 8;

/// The header both ends must agree on: the message (first PSN), its length, and the byte
/// after this packet's last; all covered by the ICRC.
pub fn declaration() -> DeclaredLayout {
    DeclaredLayout::new(
        LAYOUT_ID,
        &[
            FieldSpec::bytes("message", 0, 3, Coverage::Covered),
            FieldSpec::bytes("length", 3, 4, Coverage::Covered),
            FieldSpec::bytes("end", 7, 4, Coverage::Covered),
        ],
    )
    .expect("a valid declaration")
}

/// Homa's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HomaParams {
    /// RTTbytes, the bytes of each message sent unscheduled and kept granted ahead of what
    /// arrived; 0 = `link_gbps` x `base_rtt_us`. Default 0. Both ends must agree.
    pub rtt_bytes: u64,
    /// The base RTT in µs that sizes RTTbytes. Default 13.
    pub base_rtt_us: f64,
    /// The link rate in Gbit/s that sizes RTTbytes. Default 100.
    pub link_gbps: f64,
    /// The degree of overcommitment: messages granted at once, 1..=8. Default 4.
    pub overcommit: u8,
    /// Priority levels used, 2..=8. Default 8.
    pub priorities: u8,
    /// Message-size cutoffs of the unscheduled levels, ascending, at most 6: `cutoffs + 1`
    /// unscheduled levels. Default 1000, 10000, 100000 bytes.
    pub unsched_cutoffs: [u32; MAX_CUTOFFS],
    /// How many of `unsched_cutoffs` are set.
    pub cutoffs: u8,
    /// Granted bytes missing this long (µs) without progress bring a RESEND. Default 100.
    pub resend_us: f64,
}

impl Default for HomaParams {
    fn default() -> Self {
        HomaParams {
            rtt_bytes: 0,
            base_rtt_us: 13.0,
            link_gbps: 100.0,
            overcommit: 4,
            priorities: PRIORITY_LEVELS,
            unsched_cutoffs: [1000, 10_000, 100_000, 0, 0, 0],
            cutoffs: 3,
            resend_us: 100.0,
        }
    }
}

fn bad_cutoffs(value: &str) -> ParamError {
    ParamError::Invalid {
        name: "unsched_cutoffs".into(),
        value: value.into(),
        expected: "at most 6 ascending byte counts separated by '/' (e.g. 1000/10000/100000)",
    }
}

/// Homa's unscheduled cutoffs for a workload, as its paper sets them (§3.4): the
/// unscheduled levels take a share of the `priorities` levels in proportion to the share of
/// all bytes sent unscheduled (each message's first `rtt_bytes`), rounded, at least one and
/// leaving one scheduled; the cutoffs between them split the unscheduled bytes evenly
/// (shorter messages above). `cdf` is a flow-size distribution as `(size in bytes,
/// cumulative percent)` points, linear between them (the simulator's `Cdf::points`).
/// Returns the cutoffs, ascending (empty: one unscheduled level), for `unsched_cutoffs`;
/// empty for a distribution without bytes.
pub fn workload_cutoffs(cdf: &[(f64, f64)], rtt_bytes: u64, priorities: u8) -> Vec<u32> {
    let r = rtt_bytes.max(1) as f64;
    // Unscheduled bytes of messages no longer than `c`, and all bytes, per message: each
    // segment holds (p1 - p0)% of messages spread evenly over [b0, b1].
    let unsched_upto = |c: f64| -> f64 {
        cdf.windows(2)
            .map(|w| {
                let ((b0, p0), (b1, p1)) = (w[0], w[1]);
                let mass = (p1 - p0).max(0.0) / 100.0;
                if b1 <= b0 {
                    return if c >= b0 { mass * b0.min(r) } else { 0.0 };
                }
                let hi = c.min(b1);
                if hi <= b0 {
                    return 0.0;
                }
                // The integral of min(x, r) over [b0, hi], over the segment's width.
                let below = |x: f64| {
                    if x <= r {
                        x * x / 2.0
                    } else {
                        r * r / 2.0 + r * (x - r)
                    }
                };
                mass * (below(hi) - below(b0)) / (b1 - b0)
            })
            .sum()
    };
    let total: f64 = cdf
        .windows(2)
        .map(|w| (w[1].1 - w[0].1).max(0.0) / 100.0 * (w[0].0 + w[1].0) / 2.0)
        .sum();
    let largest = cdf.iter().map(|p| p.0).fold(0.0, f64::max);
    let unsched = unsched_upto(largest);
    if !(total > 0.0 && unsched > 0.0) {
        return Vec::new();
    }
    let priorities = priorities.clamp(2, PRIORITY_LEVELS);
    let levels = (f64::from(priorities) * unsched / total).round() as usize;
    let levels = levels.clamp(1, usize::from(priorities - 1).min(MAX_CUTOFFS + 1));
    let mut cutoffs: Vec<u32> = Vec::new();
    for i in 1..levels {
        let want = unsched * i as f64 / levels as f64;
        // The smallest size whose messages carry `want` unscheduled bytes (by bisection:
        // `unsched_upto` grows with the size).
        let (mut lo, mut hi) = (0.0, largest);
        for _ in 0..64 {
            let mid = (lo + hi) / 2.0;
            if unsched_upto(mid) < want {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let c = hi.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        if cutoffs.last().is_none_or(|&last| c > last) {
            cutoffs.push(c);
        }
    }
    cutoffs
}

impl Params for HomaParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "rtt_bytes",
            help: "RTTbytes: bytes of each message sent unscheduled and kept granted ahead, 0 = link x base RTT (default 0)",
        },
        ParamInfo {
            name: "base_rtt_us",
            help: "base RTT in µs, sizing RTTbytes, 0.1..=100000 (default 13)",
        },
        ParamInfo {
            name: "link_gbps",
            help: "link rate in Gbit/s sizing RTTbytes, 0.001..=10000 (default 100)",
        },
        ParamInfo {
            name: "overcommit",
            help: "degree of overcommitment: messages granted at once, 1..=8 (default 4)",
        },
        ParamInfo {
            name: "priorities",
            help: "priority levels used, 2..=8, more than the unscheduled cutoffs + 1 (default 8)",
        },
        ParamInfo {
            name: "unsched_cutoffs",
            help: "message-size cutoffs of the unscheduled levels, ascending, '/'-separated, at most 6 (default 1000/10000/100000)",
        },
        ParamInfo {
            name: "resend_us",
            help: "µs without progress on granted bytes before a RESEND, 1..=10^7 (default 100)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "rtt_bytes" => self.rtt_bytes = parse_u64(name, value)?.min(u64::from(u32::MAX)),
            "base_rtt_us" => self.base_rtt_us = parse_f64_in(name, value, 0.1, 100_000.0)?,
            "link_gbps" => self.link_gbps = parse_f64_in(name, value, 0.001, 10_000.0)?,
            "overcommit" => self.overcommit = parse_u64_in(name, value, 1, 8)? as u8,
            "priorities" => self.priorities = parse_u64_in(name, value, 2, 8)? as u8,
            "unsched_cutoffs" => {
                let mut cutoffs = [0u32; MAX_CUTOFFS];
                let mut n = 0;
                for part in value.split('/').filter(|p| !p.trim().is_empty()) {
                    let c: u32 = part.trim().parse().map_err(|_| bad_cutoffs(value))?;
                    if n == MAX_CUTOFFS || (n > 0 && c <= cutoffs[n - 1]) {
                        return Err(bad_cutoffs(value));
                    }
                    cutoffs[n] = c;
                    n += 1;
                }
                self.unsched_cutoffs = cutoffs;
                self.cutoffs = n as u8;
            }
            "resend_us" => self.resend_us = parse_f64_in(name, value, 1.0, 1e7)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Per queue pair: the sender's half (the message it is sending) and the receiver's (the
/// message it is receiving). 64 bytes, one cache line (a test holds it there): message ids
/// are 24 bits on the wire (a first PSN), so each message word carries its small fields in
/// its top byte, and the two deadlines are 8 bytes each rather than an `Option`'s 16.
#[derive(Debug, Clone, Copy, Default)]
pub struct HomaContext {
    /// Sender: the message being sent (first PSN, bits 0..24) and the level of its latest
    /// grant (bits 24..32); its length (0: no message seen yet: a message gated has one),
    /// how far it may go, how far it went.
    s_word: u32,
    s_len: u32,
    s_granted: u32,
    s_sent: u32,
    /// Receiver: the message arriving (bits 0..24), the level granted (24..28), whether
    /// bytes are missing (bit 28), the RESENDs since the last progress (29..31: each doubles
    /// the wait, up to 8 x); its length, bytes arrived (the largest end seen), bytes granted
    /// (unscheduled included).
    r_word: u32,
    r_len: u32,
    r_received: u32,
    r_granted: u32,
    /// Receiver: this queue pair's name in the law's table (0: none yet).
    token: u32,
    /// The engine's index of this queue pair plus one (0: not known, as when a test drives
    /// the law through `Law::on_event`): whom a freed place wakes.
    qp1: u32,
    /// Receiver: the last progress, RESEND or BUSY (the resend timer runs from it).
    r_heard: Instant,
    /// Receiver: when a waiting message next looks for a place on its own (a fallback:
    /// a freed place wakes the best waiting message at once).
    poll_at: Deadline,
    /// The law timer armed for this queue pair.
    timer_at: Deadline,
}

/// A message id's bits (24: a PSN).
const ID: u32 = 0x00FF_FFFF;
const R_LEVEL_SHIFT: u32 = 24;
const R_ACTIVE: u32 = 1 << 28;
const RESENDS_SHIFT: u32 = 29;

impl HomaContext {
    fn s_msg(&self) -> u32 {
        self.s_word & ID
    }

    fn s_level(&self) -> u8 {
        (self.s_word >> 24) as u8
    }

    fn set_s_msg(&mut self, id: u32) {
        self.s_word = (self.s_word & !ID) | (id & ID);
    }

    fn set_s_level(&mut self, level: u8) {
        self.s_word = (self.s_word & ID) | (u32::from(level) << 24);
    }

    fn s_known(&self) -> bool {
        self.s_len != 0
    }

    fn r_msg(&self) -> u32 {
        self.r_word & ID
    }

    fn set_r_msg(&mut self, id: u32) {
        self.r_word = (self.r_word & !ID) | (id & ID);
    }

    /// The receiver's granted level: a scheduled level, below 8 (`PRIORITY_LEVELS`).
    fn r_level(&self) -> u8 {
        ((self.r_word >> R_LEVEL_SHIFT) & 0xF) as u8
    }

    fn set_r_level(&mut self, level: u8) {
        debug_assert!(level < 16, "a level of at most 8 priorities");
        self.r_word =
            (self.r_word & !(0xF << R_LEVEL_SHIFT)) | ((u32::from(level) & 0xF) << R_LEVEL_SHIFT);
    }

    fn r_active(&self) -> bool {
        self.r_word & R_ACTIVE != 0
    }

    fn set_r_active(&mut self, active: bool) {
        if active {
            self.r_word |= R_ACTIVE;
        } else {
            self.r_word &= !R_ACTIVE;
        }
    }

    /// RESENDs since the last progress, 0..=3.
    fn resends(&self) -> u32 {
        (self.r_word >> RESENDS_SHIFT) & 0x3
    }

    fn set_resends(&mut self, n: u32) {
        self.r_word = (self.r_word & !(0x3 << RESENDS_SHIFT)) | ((n & 0x3) << RESENDS_SHIFT);
    }
}

/// A deadline or none, in 8 bytes: `u64::MAX` ns (584 years) stands for none, and a
/// deadline there is taken 1 ns earlier.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Deadline(u64);

impl Deadline {
    const NONE: Deadline = Deadline(u64::MAX);

    fn at(t: Instant) -> Deadline {
        Deadline(t.as_nanos().min(u64::MAX - 1))
    }

    fn get(self) -> Option<Instant> {
        (self != Self::NONE).then(|| Instant::from_nanos(self.0))
    }
}

impl Default for Deadline {
    fn default() -> Self {
        Self::NONE
    }
}

impl std::fmt::Debug for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// One granted message in the law's table.
#[derive(Debug, Clone, Copy, Default)]
struct Member {
    /// The receiving queue pair's token; 0: a free place.
    token: u32,
    /// Its queue pair's index plus one (0: unknown).
    qp1: u32,
    remaining: u32,
    heard: Instant,
}

/// Homa: see the module documentation.
#[derive(Debug, Clone)]
pub struct Homa {
    rtt_bytes: u32,
    base_rtt: Duration,
    resend: Duration,
    overcommit: usize,
    /// The highest level (grants, ACKs) and the number of scheduled levels (0..sched).
    top: u8,
    sched: u8,
    cutoffs: [u32; MAX_CUTOFFS],
    unsched_levels: u8,
    /// The granted messages (at most `overcommit` places used).
    granted: [Member; MAX_OVERCOMMIT],
    next_token: u32,
    /// The waiting messages, shortest first: (remaining, queue pair index, generation).
    /// An entry is current while `wait_gen[qp]` holds its generation; stale ones are
    /// skipped when popped and dropped when the heap outgrows the queue pairs.
    waiting: BinaryHeap<Reverse<(u32, u32, u32)>>,
    wait_gen: Vec<u32>,
    generation: u32,
    /// Queue pairs to wake (a freed place's next holder), for `Law::take_wake`.
    wakes: Vec<u32>,
    fields: [Field; 3],
    layout: CcxLayout,
}

impl Homa {
    /// A Homa law with parameters `p`. Unscheduled levels that would leave no scheduled
    /// one are dropped from the bottom (the largest cutoffs merge).
    pub fn new(p: HomaParams) -> Homa {
        let rtt = match p.rtt_bytes {
            0 => (p.link_gbps * 1e9 / 8.0 * p.base_rtt_us * 1e-6) as u64,
            b => b,
        };
        let priorities = p.priorities.clamp(2, PRIORITY_LEVELS);
        let unsched_levels = (p.cutoffs + 1).min(priorities - 1);
        let d = declaration();
        let field = |name| d.field(name).expect("declared above");
        Homa {
            rtt_bytes: rtt.clamp(1, u64::from(u32::MAX)) as u32,
            base_rtt: Duration::from_nanos(us_to_ns(p.base_rtt_us)),
            resend: Duration::from_nanos(us_to_ns(p.resend_us)),
            overcommit: usize::from(p.overcommit).clamp(1, MAX_OVERCOMMIT),
            top: priorities - 1,
            sched: priorities - unsched_levels,
            cutoffs: p.unsched_cutoffs,
            unsched_levels,
            granted: [Member::default(); MAX_OVERCOMMIT],
            next_token: 0,
            waiting: BinaryHeap::new(),
            wait_gen: Vec::new(),
            generation: 0,
            wakes: Vec::new(),
            fields: [field("message"), field("length"), field("end")],
            layout: d.layout(),
        }
    }

    /// The level of a message of `len` bytes' unscheduled packets.
    pub fn unscheduled_level(&self, len: u32) -> u8 {
        let i = self.cutoffs[..usize::from(self.unsched_levels - 1)]
            .iter()
            .position(|&c| len <= c)
            .unwrap_or(usize::from(self.unsched_levels - 1));
        self.top - i as u8
    }

    /// The place of `token` in the table, if it holds one.
    fn place(&self, token: u32) -> Option<usize> {
        self.granted[..self.overcommit]
            .iter()
            .position(|m| m.token == token)
    }

    /// Puts `token` (with `remaining` bytes) among the granted if it is there already, a
    /// place is free, or it has fewer remaining bytes than the longest there (or that one
    /// went silent): SRPT with overcommitment. Whether it is in.
    fn join(&mut self, now: Instant, token: u32, qp1: u32, remaining: u32) -> bool {
        if let Some(i) = self.place(token) {
            self.granted[i].remaining = remaining;
            self.granted[i].heard = now;
            return true;
        }
        let stale = self.resend * 4;
        let places = &mut self.granted[..self.overcommit];
        // A free place, else a silent member, else the longest.
        let worst = places
            .iter()
            .enumerate()
            .max_by_key(|(_, m)| {
                (
                    m.token == 0,
                    now - m.heard > stale,
                    m.remaining,
                    std::cmp::Reverse(m.token),
                )
            })
            .map(|(i, _)| i)
            .expect("at least one place");
        let w = places[worst];
        if w.token == 0 || now - w.heard > stale || remaining < w.remaining {
            places[worst] = Member {
                token,
                qp1,
                remaining,
                heard: now,
            };
            self.not_waiting(qp1);
            if w.token != 0 && now - w.heard <= stale {
                // Displaced, it waits for a place like any other.
                self.wait(w.qp1, w.remaining);
            }
            true
        } else {
            false
        }
    }

    /// Takes `token` out of the table; its place goes to the best waiting message, which
    /// is woken to claim it.
    fn leave(&mut self, token: u32) {
        if let Some(i) = self.place(token) {
            self.granted[i] = Member::default();
            while let Some(Reverse((_, qp, generation))) = self.waiting.pop() {
                if self.wait_gen.get(qp as usize) == Some(&generation) {
                    self.wait_gen[qp as usize] = 0;
                    self.wakes.push(qp);
                    break;
                }
            }
        }
    }

    /// Queue pair `qp1 - 1` waits for a place with `remaining` bytes (unknown queue pairs,
    /// 0, rely on their poll).
    fn wait(&mut self, qp1: u32, remaining: u32) {
        let Some(qp) = qp1.checked_sub(1) else {
            return;
        };
        let at = qp as usize;
        if self.wait_gen.len() <= at {
            self.wait_gen.resize(at + 1, 0); // once per queue pair index, not per event
        }
        self.generation = self.generation.wrapping_add(1).max(1);
        self.wait_gen[at] = self.generation;
        self.waiting.push(Reverse((remaining, qp, self.generation)));
        if self.waiting.len() > 2 * self.wait_gen.len() + 64 {
            let current = &self.wait_gen;
            self.waiting
                .retain(|Reverse((_, q, g))| current.get(*q as usize) == Some(g));
        }
    }

    /// Queue pair `qp1 - 1` no longer waits.
    fn not_waiting(&mut self, qp1: u32) {
        if let Some(g) = qp1
            .checked_sub(1)
            .and_then(|q| self.wait_gen.get_mut(q as usize))
        {
            *g = 0;
        }
    }

    /// The scheduled level of a member: by its rank in remaining bytes (ties by token),
    /// from the lowest levels up while fewer messages than levels are granted.
    fn level(&self, token: u32) -> u8 {
        let places = &self.granted[..self.overcommit];
        let Some(me) = places.iter().find(|m| m.token == token) else {
            return 0;
        };
        let (mut n, mut rank) = (0u8, 0u8);
        for m in places.iter().filter(|m| m.token != 0) {
            n += 1;
            if (m.remaining, m.token) < (me.remaining, me.token) {
                rank += 1;
            }
        }
        n.min(self.sched).saturating_sub(1).saturating_sub(rank)
    }

    /// The receiver's scheduling of `ctx`'s message: leave the table when done or fully
    /// granted; otherwise join it if SRPT says so and grant RTTbytes ahead of what arrived
    /// at the rank's level, or wait for a place.
    fn schedule(&mut self, now: Instant, ctx: &mut HomaContext, act: &mut Actions) {
        let remaining = ctx.r_len - ctx.r_received;
        if remaining == 0 || ctx.r_granted >= ctx.r_len {
            self.leave(ctx.token);
            self.not_waiting(ctx.qp1);
            ctx.poll_at = Deadline::NONE;
            ctx.set_r_active(remaining != 0);
            return;
        }
        if !self.join(now, ctx.token, ctx.qp1, remaining) {
            self.wait(ctx.qp1, remaining);
            // A freed place wakes the best waiting message; the poll is the fallback for
            // a member that went silent (its queue pair gone), which frees no place. A
            // message the law cannot wake (its queue pair unknown) polls every base RTT.
            let poll = if ctx.qp1 == 0 {
                self.base_rtt
            } else {
                self.resend * 8
            };
            if ctx.poll_at.get().is_none() {
                ctx.poll_at = Deadline::at(now + poll);
            }
            return;
        }
        ctx.poll_at = Deadline::NONE;
        let level = self.level(ctx.token);
        let want = ctx.r_len.min(ctx.r_received.saturating_add(self.rtt_bytes));
        if want > ctx.r_granted || level != ctx.r_level() {
            if want > ctx.r_granted {
                // The resend timer runs from the grant for the bytes it asks for (a message
                // that waited for a place has heard nothing for a while).
                ctx.r_heard = now;
                ctx.set_resends(0);
            }
            ctx.r_granted = ctx.r_granted.max(want);
            ctx.set_r_level(level);
            act.send_homa(HomaControl::Grant {
                message: ctx.r_msg(),
                offset: ctx.r_granted,
                priority: level,
            });
            if ctx.r_granted >= ctx.r_len {
                self.leave(ctx.token); // fully granted: its place goes to the next
            }
        }
    }

    /// The receiver's resend check: granted bytes missing for `resend` without progress.
    fn check_resend(&mut self, now: Instant, ctx: &mut HomaContext, act: &mut Actions) {
        if ctx.r_active()
            && ctx.r_granted > ctx.r_received
            && now - ctx.r_heard >= self.resend_wait(ctx)
        {
            act.send_homa(HomaControl::Resend {
                message: ctx.r_msg(),
                offset: ctx.r_received,
                length: ctx.r_granted - ctx.r_received,
                priority: ctx.r_level(),
            });
            ctx.r_heard = now;
            ctx.set_resends((ctx.resends() + 1).min(3));
        }
    }

    /// How long missing granted bytes wait for a RESEND: `resend`, doubling with each
    /// RESEND that brought no progress, up to 8 x (a sender that is slow rather than
    /// stranded is not asked every timeout, and every waiting message's timer costs).
    fn resend_wait(&self, ctx: &HomaContext) -> Duration {
        self.resend * (1u32 << ctx.resends())
    }

    /// Arms the law timer for the earlier of the poll and the resend deadline, if that is
    /// sooner than the timer already armed. A deadline that moved later (progress restarts
    /// the resend timer with every packet) leaves the timer as it is: when it fires early,
    /// the handler finds nothing due and arms it again. So a flowing message touches the
    /// timer once per resend timeout, not once per packet.
    fn rearm(&self, ctx: &mut HomaContext, act: &mut Actions) {
        let resend_at = (ctx.r_active() && ctx.r_granted > ctx.r_received)
            .then(|| ctx.r_heard + self.resend_wait(ctx));
        let at = match (ctx.poll_at.get(), resend_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = at
            && ctx.timer_at.get().is_none_or(|armed| at < armed)
        {
            act.arm_timer(at);
            ctx.timer_at = Deadline::at(at);
        }
    }

    /// A packet of the peer's message arrived (its declared header).
    fn on_header(
        &mut self,
        now: Instant,
        ctx: &mut HomaContext,
        message: u32,
        len: u32,
        end: u32,
        act: &mut Actions,
    ) {
        if ctx.token == 0 {
            self.next_token = self.next_token.wrapping_add(1).max(1);
            ctx.token = self.next_token;
        }
        let new = ctx.r_len == 0 || message != ctx.r_msg();
        if !new && !ctx.r_active() {
            return; // a late packet of a message already complete
        }
        if new {
            // A new message (RC delivers messages in order: the previous one is done).
            self.leave(ctx.token);
            ctx.set_r_msg(message);
            ctx.r_len = len;
            ctx.r_received = 0;
            ctx.r_granted = len.min(self.rtt_bytes);
            ctx.set_r_level(0);
            ctx.set_r_active(true);
            ctx.r_heard = now;
            ctx.set_resends(0);
            ctx.poll_at = Deadline::NONE;
            act.set_response_priority(self.top);
        }
        let end = end.min(ctx.r_len);
        if end > ctx.r_received {
            ctx.r_received = end;
            ctx.r_heard = now;
            ctx.set_resends(0);
        }
        self.schedule(now, ctx, act);
        if ctx.r_received >= ctx.r_len {
            ctx.set_r_active(false);
        }
    }
}

impl Law for Homa {
    type Context = HomaContext;

    fn name(&self) -> &'static str {
        "homa"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[
            EventKind::Start,
            EventKind::Header,
            EventKind::Homa,
            EventKind::Timer,
        ])
        .union(EventMask::GATE)
    }

    fn ccx(&self) -> Option<CcxLayout> {
        Some(self.layout)
    }

    fn on_event_at(
        &mut self,
        now: Instant,
        qp: u32,
        ctx: &mut HomaContext,
        event: &Event,
        act: &mut Actions,
    ) {
        ctx.qp1 = qp.saturating_add(1);
        self.on_event(now, ctx, event, act);
    }

    fn take_wake(&mut self) -> Option<u32> {
        self.wakes.pop()
    }

    fn wakes_pending(&self) -> bool {
        !self.wakes.is_empty()
    }

    fn on_event(&mut self, now: Instant, ctx: &mut HomaContext, event: &Event, act: &mut Actions) {
        match *event {
            Event::Start { .. } => {
                act.unpace();
                act.set_response_priority(self.top);
            }
            Event::Header(h) => {
                let [m, l, e] = self.fields.map(|f| h.get(f) as u32);
                if l != 0 {
                    self.on_header(now, ctx, m, l, e, act);
                }
            }
            // A grant for a message this queue pair is not sending (done already) is stale.
            Event::Homa(HomaControl::Grant {
                message,
                offset,
                priority,
            }) if ctx.s_known() && message == ctx.s_msg() => {
                ctx.s_granted = ctx.s_granted.max(offset.min(ctx.s_len));
                ctx.set_s_level(priority);
                act.wake();
            }
            Event::Homa(HomaControl::Resend {
                message,
                offset,
                length,
                priority,
            }) => {
                let end = offset.saturating_add(length);
                if ctx.s_known() && message == ctx.s_msg() && ctx.s_sent < end.min(ctx.s_len) {
                    // Asked for bytes never sent: the GRANT for them was lost.
                    ctx.s_granted = ctx.s_granted.max(end.min(ctx.s_len));
                    ctx.set_s_level(priority);
                    act.wake();
                } else {
                    act.send_homa(HomaControl::Busy { message });
                }
            }
            Event::Homa(HomaControl::Busy { message })
                if ctx.r_active() && message == ctx.r_msg() =>
            {
                ctx.r_heard = now;
            }
            // Its timer, or a wake: a freed place may be this message's.
            Event::Timer => {
                if ctx.timer_at.get().is_some_and(|at| at <= now) {
                    ctx.timer_at = Deadline::NONE;
                }
                if ctx.r_active() {
                    if ctx.poll_at.get().is_some_and(|at| at <= now) {
                        ctx.poll_at = Deadline::NONE;
                    }
                    self.schedule(now, ctx, act);
                }
                self.check_resend(now, ctx, act);
            }
            _ => {}
        }
        self.rearm(ctx, act);
    }

    fn gate_message(&mut self, _: Instant, ctx: &mut HomaContext, pos: &MessagePos) -> Gate {
        if pos.len == 0 {
            return Gate::Send; // a READ request or an atomic: no message to schedule
        }
        if !ctx.s_known() || pos.id & ID != ctx.s_msg() {
            ctx.set_s_msg(pos.id);
            ctx.s_len = pos.len;
            ctx.s_granted = pos.len.min(self.rtt_bytes);
            ctx.s_sent = 0;
            ctx.set_s_level(0);
        }
        let level = if pos.offset < self.rtt_bytes {
            self.unscheduled_level(pos.len)
        } else if pos.offset < ctx.s_granted {
            ctx.s_level()
        } else {
            return Gate::Hold;
        };
        ctx.s_sent = ctx.s_sent.max(pos.offset + pos.bytes);
        Gate::SendAt(level)
    }

    fn stamp_request(
        &mut self,
        _: Instant,
        _: &mut HomaContext,
        pos: &MessagePos,
        out: &mut DeclaredCcx,
    ) {
        if pos.len != 0 {
            let [m, l, e] = self.fields;
            out.set(m, u64::from(pos.id));
            out.set(l, u64::from(pos.len));
            out.set(e, u64::from(pos.offset + pos.bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant::ZERO;

    /// A queue pair's context is one cache line: 16,384 of them are 1 MiB, not 1.4.
    #[test]
    fn context_fits_a_cache_line() {
        assert_eq!(std::mem::size_of::<HomaContext>(), 64);
    }

    /// The packed fields keep their values apart: each set leaves the others as they were.
    #[test]
    fn packed_fields_are_independent() {
        let mut c = HomaContext::default();
        assert!(!c.s_known() && !c.r_active() && c.poll_at.get().is_none());
        c.set_s_msg(0xFF_FFFF);
        c.set_s_level(0xFF);
        assert_eq!((c.s_msg(), c.s_level()), (0xFF_FFFF, 0xFF));
        c.set_s_msg(0x12_3456);
        assert_eq!((c.s_msg(), c.s_level()), (0x12_3456, 0xFF));
        c.set_s_level(3);
        assert_eq!((c.s_msg(), c.s_level()), (0x12_3456, 3));
        c.set_r_msg(0xAB_CDEF);
        c.set_r_level(7);
        c.set_r_active(true);
        c.set_resends(3);
        assert_eq!(
            (c.r_msg(), c.r_level(), c.r_active(), c.resends()),
            (0xAB_CDEF, 7, true, 3)
        );
        c.set_r_level(0);
        c.set_resends(1);
        assert_eq!(
            (c.r_msg(), c.r_level(), c.r_active(), c.resends()),
            (0xAB_CDEF, 0, true, 1)
        );
        c.set_r_active(false);
        c.set_r_msg(5);
        assert_eq!(
            (c.r_msg(), c.r_level(), c.r_active(), c.resends()),
            (5, 0, false, 1)
        );
        let t = Instant::from_nanos(1_234);
        c.timer_at = Deadline::at(t);
        assert_eq!(c.timer_at.get(), Some(t));
        assert!(Deadline::at(Instant::from_nanos(u64::MAX)).get().is_some());
    }

    fn law(rtt_bytes: u64, overcommit: u8) -> Homa {
        Homa::new(HomaParams {
            rtt_bytes,
            overcommit,
            ..HomaParams::default()
        })
    }

    fn header(message: u32, len: u32, end: u32) -> Event {
        let d = declaration();
        let mut h = d.empty();
        let [m, l, e] = ["message", "length", "end"].map(|n| d.field(n).unwrap());
        h.set(m, u64::from(message));
        h.set(l, u64::from(len));
        h.set(e, u64::from(end));
        Event::Header(h)
    }

    fn event(law: &mut Homa, now: Instant, ctx: &mut HomaContext, e: Event) -> Actions {
        let mut act = Actions::default();
        law.on_event(now, ctx, &e, &mut act);
        act
    }

    fn pos(id: u32, len: u32, offset: u32) -> MessagePos {
        MessagePos {
            id,
            len,
            offset,
            bytes: (len - offset).min(4096),
        }
    }

    fn grant(message: u32, offset: u32, priority: u8) -> Option<HomaControl> {
        Some(HomaControl::Grant {
            message,
            offset,
            priority,
        })
    }

    #[test]
    fn unscheduled_levels_follow_the_size_cutoffs_from_the_top() {
        let h = law(10_000, 4);
        let levels: Vec<u8> = [1, 1000, 1001, 10_000, 50_000, 100_000, 100_001, u32::MAX]
            .iter()
            .map(|&len| h.unscheduled_level(len))
            .collect();
        assert_eq!(levels, [7, 7, 6, 6, 5, 5, 4, 4]);
        // Scheduled levels are the four below.
        assert_eq!((h.top, h.sched), (7, 4));
        // With 3 levels, two cutoffs merge into the last unscheduled level.
        let mut p = HomaParams::default();
        p.set("priorities", "3").unwrap();
        let h = Homa::new(p);
        assert_eq!((h.top, h.sched, h.unsched_levels), (2, 1, 2));
        assert_eq!(h.unscheduled_level(10), 2);
        assert_eq!(h.unscheduled_level(5000), 1);
        assert_eq!(h.unscheduled_level(u32::MAX), 1);
    }

    /// DCTCP's web search sizes (the simulator's `websearch`).
    const WEBSEARCH: [(f64, f64); 12] = [
        (0.0, 0.0),
        (10e3, 15.0),
        (20e3, 20.0),
        (30e3, 30.0),
        (50e3, 40.0),
        (80e3, 53.0),
        (200e3, 60.0),
        (1e6, 70.0),
        (2e6, 80.0),
        (5e6, 90.0),
        (10e6, 97.0),
        (30e6, 100.0),
    ];

    #[test]
    fn workload_cutoffs_share_levels_and_bytes_as_homas_paper_does() {
        // Web search: 5.3% of its bytes go unscheduled at RTTbytes 162,500 (8 x 5.3% rounds
        // to 0): one unscheduled level, no cutoff, seven scheduled.
        assert!(workload_cutoffs(&WEBSEARCH, 162_500, 8).is_empty());
        // Every message 1..=1000 bytes, evenly: all bytes unscheduled, so 7 levels (one
        // stays scheduled) splitting the bytes evenly. The unscheduled bytes of messages up
        // to c grow as c^2: the cutoffs are at 1000 x sqrt(i / 7).
        let tiny = [(0.0, 0.0), (1000.0, 100.0)];
        let c = workload_cutoffs(&tiny, 10_000, 8);
        let want: Vec<u32> = (1..7)
            .map(|i| (1000.0 * (f64::from(i) / 7.0).sqrt()).round() as u32)
            .collect();
        assert_eq!(c, want);
        // Half the bytes unscheduled: 90% of messages of 1000 bytes, 10% of 27,000 with
        // RTTbytes 9000 (900 + 900 of 3600 bytes a message). 4 levels; the small messages
        // carry the first half of the unscheduled bytes, so the first two cutoffs are both
        // 1000 (one is kept) and the third is the large size.
        let two = [
            (0.0, 0.0),
            (1000.0, 0.0),
            (1000.0, 90.0),
            (27_000.0, 90.0),
            (27_000.0, 100.0),
        ];
        let c = workload_cutoffs(&two, 9000, 8);
        assert_eq!(c, [1000, 27_000]);
        // The result is a valid parameter for the law.
        let mut p = HomaParams::default();
        let text: Vec<String> = c.iter().map(u32::to_string).collect();
        p.set("unsched_cutoffs", &text.join("/")).unwrap();
        assert_eq!(Homa::new(p).unscheduled_level(1000), 7);
        assert!(workload_cutoffs(&[(0.0, 0.0)], 1000, 8).is_empty());
    }

    #[test]
    fn cutoffs_parse_ascending_and_refuse_the_rest_naming_the_field() {
        let mut p = HomaParams::default();
        p.set("unsched_cutoffs", "500/ 4000/64000").unwrap();
        assert_eq!(
            (p.cutoffs, &p.unsched_cutoffs[..3]),
            (3, &[500, 4000, 64000][..])
        );
        for bad in ["5/4", "1/2/3/4/5/6/7", "x", "10/10"] {
            let e = p.set("unsched_cutoffs", bad).unwrap_err();
            assert!(e.to_string().contains("unsched_cutoffs"), "{e}");
        }
        p.set("unsched_cutoffs", "").unwrap();
        assert_eq!(Homa::new(p).unscheduled_level(u32::MAX), 7);
    }

    #[test]
    fn a_sender_sends_rtt_bytes_unscheduled_then_only_what_is_granted() {
        let mut h = law(10_000, 4);
        let mut ctx = HomaContext::default();
        let len = 30_000; // unscheduled at level 5 (10,000 < len <= 100,000)
        // 0, 4096, 8192 start below RTTbytes: unscheduled (the last overshoots by a packet's
        // tail, as Homa rounds to packets); 12288 waits for a grant.
        for offset in [0, 4096, 8192] {
            assert_eq!(
                h.gate_message(T0, &mut ctx, &pos(9, len, offset)),
                Gate::SendAt(5)
            );
        }
        assert_eq!(
            h.gate_message(T0, &mut ctx, &pos(9, len, 12_288)),
            Gate::Hold
        );
        // A grant for another message changes nothing; one for this one wakes it.
        let a = event(
            &mut h,
            T0,
            &mut ctx,
            Event::Homa(HomaControl::Grant {
                message: 8,
                offset: 30_000,
                priority: 3,
            }),
        );
        assert!(!a.woken());
        let a = event(
            &mut h,
            T0,
            &mut ctx,
            Event::Homa(grant(9, 20_000, 2).unwrap()),
        );
        assert!(a.woken());
        for offset in [12_288, 16_384] {
            assert_eq!(
                h.gate_message(T0, &mut ctx, &pos(9, len, offset)),
                Gate::SendAt(2)
            );
        }
        assert_eq!(
            h.gate_message(T0, &mut ctx, &pos(9, len, 20_480)),
            Gate::Hold
        );
        // A stale (smaller) grant takes nothing back but sets the level.
        event(
            &mut h,
            T0,
            &mut ctx,
            Event::Homa(grant(9, 4096, 1).unwrap()),
        );
        assert_eq!(ctx.s_granted, 20_000);
        // RESEND of bytes never sent: the grant for them was lost, take it as one.
        let a = event(
            &mut h,
            T0,
            &mut ctx,
            Event::Homa(HomaControl::Resend {
                message: 9,
                offset: 20_480,
                length: 4096,
                priority: 3,
            }),
        );
        assert!(a.woken() && a.homa().is_none() && a.busy().is_none());
        assert_eq!(
            h.gate_message(T0, &mut ctx, &pos(9, len, 20_480)),
            Gate::SendAt(3)
        );
        // RESEND of bytes sent (lost on the way: RC resends them), or of another message:
        // BUSY.
        for (message, offset) in [(9, 0), (7, 0)] {
            let a = event(
                &mut h,
                T0,
                &mut ctx,
                Event::Homa(HomaControl::Resend {
                    message,
                    offset,
                    length: 4096,
                    priority: 3,
                }),
            );
            assert_eq!(a.busy(), Some(message));
            assert!(!a.woken());
        }
        // The next message starts unscheduled again, at its own size's level.
        assert_eq!(
            h.gate_message(T0, &mut ctx, &pos(20, 800, 0)),
            Gate::SendAt(7)
        );
        // READs and atomics are not messages here.
        assert_eq!(
            h.gate_message(T0, &mut ctx, &MessagePos::default()),
            Gate::Send
        );
    }

    #[test]
    fn the_receiver_grants_srpt_with_overcommitment_and_rank_levels() {
        // Overcommit 2, RTTbytes 10,000, scheduled levels 0..=3.
        let mut h = law(10_000, 2);
        let (mut a, mut b, mut c) = Default::default();
        let t = |us| Instant::ZERO + Duration::from_micros(us);
        // A (100,000 B) alone: rank 0 of 1, the lowest level; granted RTTbytes ahead.
        let act = event(&mut h, t(0), &mut a, header(1, 100_000, 4096));
        assert_eq!(act.homa(), grant(1, 14_096, 0));
        assert_eq!(act.response_priority(), Some(7));
        // B (50,000 B) joins: it is shorter, so rank 0 of 2, level 1.
        let act = event(&mut h, t(1), &mut b, header(2, 50_000, 4096));
        assert_eq!(act.homa(), grant(2, 14_096, 1));
        // C (30,000 B): the table is full; C beats A (the longest), which is displaced.
        let act = event(&mut h, t(2), &mut c, header(3, 30_000, 4096));
        assert_eq!(act.homa(), grant(3, 14_096, 1));
        // B's next packet: rank 1 of 2 now, level 0, granted on.
        let act = event(&mut h, t(3), &mut b, header(2, 50_000, 8192));
        assert_eq!(act.homa(), grant(2, 18_192, 0));
        // A's next packet: not among the two shortest, so no grant; it polls every base
        // RTT (13 µs), sooner than its resend timeout.
        let act = event(&mut h, t(4), &mut a, header(1, 100_000, 8192));
        assert_eq!(act.homa(), None);
        assert_eq!(act.timer(), Some(Some(t(4) + Duration::from_micros(13))));
        // C is granted to its end (30,000): fully granted, it leaves the table...
        let act = event(&mut h, t(5), &mut c, header(3, 30_000, 20_480));
        assert_eq!(act.homa(), grant(3, 30_000, 1));
        // ...so A's poll finds a place: rank 1 of 2 (B is shorter), level 0.
        let act = event(&mut h, t(17), &mut a, Event::Timer);
        assert_eq!(act.homa(), grant(1, 18_192, 0));
        // B's next packet: rank 0 of 2, level 1.
        let act = event(&mut h, t(18), &mut b, header(2, 50_000, 12_288));
        assert_eq!(act.homa(), grant(2, 22_288, 1));
        // A late packet of C arrives: C completes; nothing granted.
        let act = event(&mut h, t(19), &mut c, header(3, 30_000, 30_000));
        assert_eq!(act.homa(), None);
        assert!(!c.r_active());
        let act = event(&mut h, t(20), &mut c, header(3, 30_000, 8192));
        assert!(act.homa().is_none() && !c.r_active());
    }

    #[test]
    fn missing_granted_bytes_bring_a_resend_and_busy_restarts_the_timer() {
        let mut h = law(10_000, 4);
        let mut r = HomaContext::default();
        let t = |us| Instant::ZERO + Duration::from_micros(us);
        let act = event(&mut h, t(0), &mut r, header(5, 40_000, 4096));
        assert_eq!(act.homa(), grant(5, 14_096, 0));
        // Resend timeout 100 µs after the last progress.
        assert_eq!(act.timer(), Some(Some(t(100))));
        let act = event(&mut h, t(100), &mut r, Event::Timer);
        assert_eq!(
            act.homa(),
            Some(HomaControl::Resend {
                message: 5,
                offset: 4096,
                length: 10_000,
                priority: 0,
            })
        );
        // The next waits twice as long: 300.
        assert_eq!(act.timer(), Some(Some(t(300))));
        // The sender says BUSY at 150: the next RESEND waits until 350. The timer armed for
        // 300 stays; firing then, it finds nothing due and moves to 350.
        let busy = Event::Homa(HomaControl::Busy { message: 5 });
        let act = event(&mut h, t(150), &mut r, busy);
        assert_eq!(act.timer(), None);
        let act = event(&mut h, t(300), &mut r, Event::Timer);
        assert_eq!((act.homa(), act.timer()), (None, Some(Some(t(350)))));
        // Progress restarts it too; once the message wholly arrived a firing does nothing.
        let act = event(&mut h, t(310), &mut r, header(5, 40_000, 40_000));
        assert_eq!(act.timer(), None);
        assert!(!r.r_active());
        let act = event(&mut h, t(350), &mut r, Event::Timer);
        assert!(act.is_empty(), "{act:?}");
    }

    #[test]
    fn a_freed_place_wakes_the_shortest_waiting_message() {
        let mut h = law(10_000, 1);
        let mut ctx = [HomaContext::default(); 3];
        let t = |us| Instant::ZERO + Duration::from_micros(us);
        let mut on = |h: &mut Homa, us, q: usize, e: Event| {
            let mut act = Actions::default();
            h.on_event_at(t(us), q as u32, &mut ctx[q], &e, &mut act);
            act
        };
        // A (queue pair 0) holds the one place; C (2, 50 KB) and B (1, 30 KB) wait. C's
        // timer is its resend timeout (its unscheduled bytes are missing), not a poll
        // every RTT (its poll, the fallback, is 8 resend timeouts away).
        assert!(on(&mut h, 0, 0, header(1, 20_000, 4096)).homa().is_some());
        let act = on(&mut h, 1, 2, header(3, 50_000, 4096));
        assert_eq!(act.timer(), Some(Some(t(101))));
        assert!(on(&mut h, 2, 1, header(2, 30_000, 4096)).homa().is_none());
        assert!(!h.wakes_pending());
        // A is granted to its end: it leaves, and B, the shorter, is woken at once.
        assert_eq!(
            on(&mut h, 3, 0, header(1, 20_000, 12_288)).homa(),
            grant(1, 20_000, 0)
        );
        assert!(h.wakes_pending());
        assert_eq!((h.take_wake(), h.take_wake()), (Some(1), None));
        assert_eq!(on(&mut h, 3, 1, Event::Timer).homa(), grant(2, 14_096, 0));
        // B completes: C is woken next.
        on(&mut h, 4, 1, header(2, 30_000, 30_000));
        assert_eq!(h.take_wake(), Some(2));
        assert_eq!(on(&mut h, 4, 2, Event::Timer).homa(), grant(3, 14_096, 0));
    }

    #[test]
    fn a_silent_member_is_displaced() {
        let mut h = law(10_000, 1);
        let (mut a, mut b) = (HomaContext::default(), HomaContext::default());
        let t = |us| Instant::ZERO + Duration::from_micros(us);
        assert!(
            event(&mut h, t(0), &mut a, header(1, 20_000, 4096))
                .homa()
                .is_some()
        );
        // B is longer: it waits while A is heard from...
        assert!(
            event(&mut h, t(1), &mut b, header(2, 90_000, 4096))
                .homa()
                .is_none()
        );
        // ...and takes A's place once A was silent for four resend timeouts (its queue
        // pair gone).
        assert!(event(&mut h, t(402), &mut b, Event::Timer).homa().is_some());
    }

    #[test]
    fn requests_are_stamped_with_their_message_length_and_end() {
        let mut h = law(10_000, 4);
        let mut out = declaration().empty();
        h.stamp_request(
            T0,
            &mut HomaContext::default(),
            &pos(0xAB_CDEF, 9000, 8192),
            &mut out,
        );
        let [m, l, e] = h.fields;
        assert_eq!(
            (out.get(m), out.get(l), out.get(e)),
            (0xAB_CDEF, 9000, 9000)
        );
        assert_eq!(declaration().layout(), h.ccx().unwrap());
    }
}
