//! SCR's model: events wait in per-(queue pair, event kind) queues, where later events
//! coalesce into the waiting one, until one of a fixed pool of run-to-completion processors
//! takes them. Queue pair `q` always goes to processor `q mod P` (shared-nothing: a queue
//! pair's context is only ever touched by one processor). The control loop is modelled:
//! an event reaches its queue `loop_delay` after it happened, a processor spends
//! `service_time` on each run of the law, and the actions take effect when the run ends.
//!
//! The delay applies to every event, law timers included, at both ends of a loop: a
//! receiver's RX and the sender's CNP each wait it out. With no delay and no service time
//! a law does exactly what it does [`Inline`](super::Inline). A service time alone already
//! lengthens the loop: every event kind is alike (SCR has no priorities), so a signal waits
//! for the run in progress and for whatever was queued before it, and a busy queue pair's
//! TX events keep one queued nearly always.

use std::collections::VecDeque;
use std::time::Duration;

use crate::Instant;

use super::event::{Event, EventKind, EventMask};
use super::law::{Actions, Controller, Deferred, Gate, Law};
use super::store::Store;

/// How a new event merges into the one already waiting in its queue.
#[derive(Debug, Clone, Copy)]
pub enum Coalesce {
    /// Sum what adds up (bytes sent or received, packets acknowledged, credit), keep the
    /// latest of the rest (PSNs, RTT sample), OR the flags (CE mark, retransmission).
    Accumulate,
    /// The newest event replaces the waiting one.
    KeepLatest,
    /// The waiting event stays; newer ones are dropped.
    KeepOldest,
    /// The law's own rule: `merge(waiting, new)`.
    Custom(fn(&mut Event, &Event)),
}

impl Coalesce {
    fn merge(self, waiting: &mut Event, new: &Event) {
        match self {
            Coalesce::Accumulate => accumulate(waiting, new),
            Coalesce::KeepLatest => *waiting = *new,
            Coalesce::KeepOldest => {}
            Coalesce::Custom(f) => f(waiting, new),
        }
    }
}

fn accumulate(waiting: &mut Event, new: &Event) {
    match (waiting, new) {
        (
            Event::Tx {
                psn,
                bytes,
                retransmission,
            },
            Event::Tx {
                psn: p,
                bytes: b,
                retransmission: r,
            },
        ) => {
            *psn = *p;
            *bytes = bytes.saturating_add(*b);
            *retransmission |= r;
        }
        (
            Event::Rx { psn, bytes, ce },
            Event::Rx {
                psn: p,
                bytes: b,
                ce: c,
            },
        ) => {
            *psn = *p;
            *bytes = bytes.saturating_add(*b);
            *ce |= c;
        }
        (
            Event::Ack {
                confirmed,
                packets,
                rtt,
            },
            Event::Ack {
                confirmed: c,
                packets: n,
                rtt: r,
            },
        ) => {
            *confirmed = *c;
            *packets = packets.saturating_add(*n);
            *rtt = r.or(*rtt);
        }
        (
            Event::RxResponse { psn, bytes, ce },
            Event::RxResponse {
                psn: p,
                bytes: b,
                ce: c,
            },
        ) => {
            *psn = *p;
            *bytes = bytes.saturating_add(*b);
            *ce |= c;
        }
        (Event::Credit { bytes }, Event::Credit { bytes: b }) => {
            *bytes = bytes.saturating_add(*b);
        }
        (w, n) => *w = *n,
    }
}

/// The shape of the decoupled control loop.
#[derive(Debug, Clone, Copy)]
pub struct ScrConfig {
    /// Run-to-completion processors (SCR's thread pool); queue pair `q` goes to `q mod P`.
    pub processors: u32,
    /// From the event to its arrival in the queue (SCR's event triggering).
    pub loop_delay: Duration,
    /// A processor's time per run of the law (SCR measured ~4 us for Swift on a DPA).
    pub service_time: Duration,
    /// The coalescing rule of each event kind, indexed by `EventKind as usize`.
    pub coalesce: [Coalesce; EventKind::COUNT],
    /// SCR's software coalescing of TX events on top of the queues' accumulation (its
    /// "coverage of flow rates" strategy): `None` is hardware-only accumulation, where
    /// every TX event a processor takes runs the law.
    pub early_exit: Option<EarlyExit>,
}

/// SCR's early termination of TX runs (§4.3.2, Fig 10c/d): a processor that takes a TX
/// event covering fewer than `bytes` (with what earlier early exits of its queue pair
/// carried) only adds them to the queue pair's carry, which costs `time` instead of a run
/// of the law; the next TX event that reaches `bytes` runs the law on the sum. A
/// retransmission always runs the law. Bytes still carried when a flow stops sending
/// never reach the law, as on SCR (the paper gives no flush).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlyExit {
    /// TX bytes a run of the law should cover at least.
    pub bytes: u32,
    /// A processor's time for an early exit (SCR: an enqueue and an add).
    pub time: Duration,
}

impl Default for ScrConfig {
    /// 4 processors, 2 us to reach the queue, 1 us per run; counters accumulate, signals
    /// keep the latest, one-shot events keep the oldest.
    fn default() -> Self {
        let mut coalesce = [Coalesce::KeepOldest; EventKind::COUNT];
        for k in [
            EventKind::Tx,
            EventKind::Rx,
            EventKind::RxResponse,
            EventKind::Ack,
            EventKind::Credit,
        ] {
            coalesce[k as usize] = Coalesce::Accumulate;
        }
        for k in [
            EventKind::Nak,
            EventKind::Telemetry,
            EventKind::Hint,
            EventKind::Header,
            // A GRANT's offset is a total, and a RESEND or BUSY lost in a merge is asked
            // again at the next resend timeout.
            EventKind::Homa,
        ] {
            coalesce[k as usize] = Coalesce::KeepLatest;
        }
        ScrConfig {
            processors: 4,
            loop_delay: Duration::from_micros(2),
            service_time: Duration::from_micros(1),
            coalesce,
            early_exit: None,
        }
    }
}

/// What the decoupled loop did, for the granularity measurements of SCR.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScrStats {
    /// Events the engine handed in.
    pub events: u64,
    /// Events merged into one already waiting.
    pub coalesced: u64,
    /// Runs of the law.
    pub runs: u64,
    /// Runs on a TX event, and the payload bytes they covered.
    pub tx_runs: u64,
    /// Payload bytes covered by the runs on a TX event.
    pub tx_bytes: u64,
    /// TX events a processor took and only carried ([`EarlyExit`]): handled, not run.
    pub early_exits: u64,
    /// Events dropped while waiting because their queue pair was reset.
    pub dropped: u64,
}

impl ScrStats {
    /// Events that took a place in a queue (the rest merged into one waiting).
    pub fn queued(&self) -> u64 {
        self.events - self.coalesced
    }

    /// Events a processor took: runs of the law and early exits.
    pub fn processed(&self) -> u64 {
        self.runs + self.early_exits
    }

    /// TX payload bytes per run of the law on a TX event (SCR's coalescing granularity,
    /// Fig 10b), if there was one.
    pub fn bytes_per_tx_run(&self) -> Option<f64> {
        (self.tx_runs > 0).then(|| self.tx_bytes as f64 / self.tx_runs as f64)
    }

    fn add(&mut self, o: &ScrStats) {
        self.events += o.events;
        self.coalesced += o.coalesced;
        self.runs += o.runs;
        self.tx_runs += o.tx_runs;
        self.tx_bytes += o.tx_bytes;
        self.early_exits += o.early_exits;
        self.dropped += o.dropped;
    }

    fn sub(&mut self, o: &ScrStats) {
        self.events -= o.events.min(self.events);
        self.coalesced -= o.coalesced.min(self.coalesced);
        self.runs -= o.runs.min(self.runs);
        self.tx_runs -= o.tx_runs.min(self.tx_runs);
        self.tx_bytes -= o.tx_bytes.min(self.tx_bytes);
        self.early_exits -= o.early_exits.min(self.early_exits);
        self.dropped -= o.dropped.min(self.dropped);
    }
}

/// One processor's share of the work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessorLoad {
    /// Events it took (runs and early exits).
    pub processed: u64,
    /// Runs of the law among them.
    pub runs: u64,
    /// Time it spent on them (modelled: service times and early-exit times).
    pub busy: Duration,
}

/// What a decoupled control plane did: totals and each processor's load. Several
/// controllers' (a simulator's hosts, a host's tenants) add up processor by processor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecoupledStats {
    /// Totals over every processor.
    pub totals: ScrStats,
    /// By processor index.
    pub processors: Vec<ProcessorLoad>,
    /// How many loops these are the sum of (one per host and law).
    pub loops: u32,
}

impl DecoupledStats {
    /// Adds `other`'s counts, processor `i` to processor `i`.
    pub fn add(&mut self, other: &DecoupledStats) {
        self.totals.add(&other.totals);
        self.loops += other.loops;
        if self.processors.len() < other.processors.len() {
            self.processors
                .resize(other.processors.len(), ProcessorLoad::default());
        }
        for (mine, theirs) in self.processors.iter_mut().zip(&other.processors) {
            mine.processed += theirs.processed;
            mine.runs += theirs.runs;
            mine.busy += theirs.busy;
        }
    }

    /// What was done since `before` was taken (counts never go below zero).
    pub fn since(&self, before: &DecoupledStats) -> DecoupledStats {
        let mut out = self.clone();
        out.totals.sub(&before.totals);
        for (mine, theirs) in out.processors.iter_mut().zip(&before.processors) {
            mine.processed -= theirs.processed.min(mine.processed);
            mine.runs -= theirs.runs.min(mine.runs);
            mine.busy = mine.busy.saturating_sub(theirs.busy);
        }
        out
    }

    /// Each processor's busy fraction of `elapsed`, the mean over the loops summed (0 when
    /// nothing elapsed).
    pub fn utilisation(&self, elapsed: Duration) -> Vec<f64> {
        let span = elapsed.as_secs_f64() * f64::from(self.loops.max(1));
        self.processors
            .iter()
            .map(|p| {
                if span == 0.0 {
                    0.0
                } else {
                    p.busy.as_secs_f64() / span
                }
            })
            .collect()
    }
}

const EMPTY: u32 = u32::MAX;
/// The queue pair of a waiting event whose queue pair was reset meanwhile.
const ORPHAN: u32 = u32::MAX;

/// A waiting event and the queue it belongs to.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    qp: u32,
    event: Event,
}

#[derive(Debug, Default)]
struct Processor {
    /// Free from this time on.
    busy_until: Instant,
    /// Queues with an event waiting, in arrival order: (when it reached the queue, slot).
    ready: VecDeque<(Instant, u32)>,
    /// Actions of finished runs, in the order they take effect.
    done: VecDeque<(Instant, u32, Actions)>,
    load: ProcessorLoad,
}

impl Processor {
    /// When this processor next has something to do.
    fn next(&self) -> Option<Instant> {
        let start = self.ready.front().map(|&(at, _)| at.max(self.busy_until));
        let release = self.done.front().map(|&(at, _, _)| at);
        match (start, release) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Runs a [`Law`] behind SCR's coalescing queues and processor pool.
#[derive(Debug)]
pub struct Decoupled<L: Law> {
    law: L,
    store: Store<L>,
    config: ScrConfig,
    /// Slot of the waiting event of each (queue pair, kind), or EMPTY.
    slot_of: Vec<[u32; EventKind::COUNT]>,
    /// TX bytes early exits carried, by queue pair ([`EarlyExit`]).
    carry: Vec<u32>,
    slots: Vec<Waiting>,
    free: Vec<u32>,
    processors: Vec<Processor>,
    stats: ScrStats,
}

impl<L: Law> Decoupled<L> {
    /// Runs `law` as `config` says (at least one processor).
    pub fn new(law: L, config: ScrConfig) -> Self {
        let n = config.processors.max(1) as usize;
        Decoupled {
            law,
            store: Store::new(),
            config,
            slot_of: Vec::new(),
            carry: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            processors: (0..n).map(|_| Processor::default()).collect(),
            stats: ScrStats::default(),
        }
    }

    /// The law.
    pub fn law(&self) -> &L {
        &self.law
    }

    /// What the loop has done so far.
    pub fn stats(&self) -> ScrStats {
        self.stats
    }

    /// Each processor's load so far, by index.
    pub fn loads(&self) -> Vec<ProcessorLoad> {
        self.processors.iter().map(|p| p.load).collect()
    }

    fn processor_of(&self, qp: u32) -> usize {
        qp as usize % self.processors.len()
    }

    /// Queues `event` (or merges it into the one waiting) at time `at`.
    fn enqueue(&mut self, at: Instant, qp: u32, event: &Event) {
        self.stats.events += 1;
        let kind = event.kind() as usize;
        if self.slot_of.len() <= qp as usize {
            self.slot_of
                .resize(qp as usize + 1, [EMPTY; EventKind::COUNT]);
            self.carry.resize(qp as usize + 1, 0);
        }
        let slot = self.slot_of[qp as usize][kind];
        if slot != EMPTY {
            self.stats.coalesced += 1;
            self.config.coalesce[kind].merge(&mut self.slots[slot as usize].event, event);
            return;
        }
        let waiting = Waiting { qp, event: *event };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = waiting;
                s
            }
            None => {
                self.slots.push(waiting);
                self.slots.len() as u32 - 1
            }
        };
        self.slot_of[qp as usize][kind] = slot;
        let p = self.processor_of(qp);
        self.processors[p]
            .ready
            .push_back((at + self.config.loop_delay, slot));
    }

    /// Starts every run due by `now`, in time order per processor.
    fn start_due(&mut self, now: Instant) {
        // Law timers become events like any other signal; so do the law's wakes.
        while let Some(qp) = self.law.take_wake() {
            self.enqueue(now, qp, &Event::Timer);
        }
        while let Some((qp, at)) = self.store.pop_due(now) {
            self.enqueue(at, qp, &Event::Timer);
        }
        for p in 0..self.processors.len() {
            loop {
                let proc = &self.processors[p];
                let Some(&(ready_at, slot)) = proc.ready.front() else {
                    break;
                };
                let start = ready_at.max(proc.busy_until);
                if start > now {
                    break;
                }
                self.processors[p].ready.pop_front();
                let Waiting { qp, mut event } = self.slots[slot as usize];
                self.free.push(slot);
                if qp == ORPHAN {
                    self.stats.dropped += 1;
                    continue; // its queue pair was reset while it waited
                }
                self.slot_of[qp as usize][event.kind() as usize] = EMPTY;
                if self.carried(qp, &mut event) {
                    let time = self.config.early_exit.map_or(Duration::ZERO, |e| e.time);
                    self.stats.early_exits += 1;
                    let proc = &mut self.processors[p];
                    proc.busy_until = start + time;
                    proc.load.processed += 1;
                    proc.load.busy += time;
                    continue;
                }
                let mut act = Actions::default();
                self.law
                    .on_event_at(start, qp, self.store.ctx(qp), &event, &mut act);
                if let Some(timer) = act.take_timer() {
                    self.store.set_timer(qp, timer);
                }
                self.stats.runs += 1;
                if let Event::Tx { bytes, .. } = event {
                    self.stats.tx_runs += 1;
                    self.stats.tx_bytes += u64::from(bytes);
                }
                let end = start + self.config.service_time;
                let proc = &mut self.processors[p];
                proc.busy_until = end;
                proc.load.processed += 1;
                proc.load.runs += 1;
                proc.load.busy += self.config.service_time;
                if !act.is_empty() {
                    proc.done.push_back((end, qp, act));
                }
            }
        }
    }
}

impl<L: Law> Decoupled<L> {
    /// With software coalescing on, whether TX `event` of `qp` is only carried (an early
    /// exit); otherwise it leaves with what earlier exits carried added to its bytes.
    fn carried(&mut self, qp: u32, event: &mut Event) -> bool {
        let (
            Some(exit),
            Event::Tx {
                bytes,
                retransmission,
                ..
            },
        ) = (self.config.early_exit, event)
        else {
            return false;
        };
        let carry = &mut self.carry[qp as usize];
        let total = carry.saturating_add(*bytes);
        if total < exit.bytes && !*retransmission {
            *carry = total;
            return true;
        }
        *carry = 0;
        *bytes = total;
        false
    }
}

impl<L: Law> Controller for Decoupled<L> {
    fn interest(&self) -> EventMask {
        self.law.interest()
    }

    fn ccx(&self) -> Option<sluice_wire::CcxLayout> {
        self.law.ccx()
    }

    fn opcodes(&self) -> super::OpcodeMask {
        self.law.opcodes()
    }

    // The header is filled as the packet leaves, even behind SCR's queues: it carries the
    // context as it is then (a field is a snapshot, not an event to coalesce).
    fn stamp(&mut self, now: Instant, qp: u32, out: &mut sluice_wire::DeclaredCcx) {
        self.law.stamp(now, self.store.ctx(qp), out);
    }

    fn stamp_request(
        &mut self,
        now: Instant,
        qp: u32,
        pos: &super::MessagePos,
        out: &mut sluice_wire::DeclaredCcx,
    ) {
        self.law.stamp_request(now, self.store.ctx(qp), pos, out);
    }

    fn decoupled_stats(&self) -> Option<DecoupledStats> {
        Some(DecoupledStats {
            totals: self.stats,
            processors: self.loads(),
            loops: 1,
        })
    }

    fn on_foreign_rx(&mut self, now: Instant, bytes: u32) {
        self.law.on_foreign_rx(now, bytes);
    }

    fn reset(&mut self, qp: u32) {
        self.store.reset(qp);
        if let Some(c) = self.carry.get_mut(qp as usize) {
            *c = 0;
        }
        // Events still waiting for the old queue pair at this index are dropped.
        if let Some(slots) = self.slot_of.get_mut(qp as usize) {
            for s in slots.iter_mut() {
                if *s != EMPTY {
                    self.slots[*s as usize].qp = ORPHAN;
                    *s = EMPTY;
                }
            }
        }
    }

    fn on_event(&mut self, now: Instant, qp: u32, event: &Event, _: &mut Actions) {
        self.start_due(now);
        self.enqueue(now, qp, event);
    }

    fn gate(&mut self, now: Instant, qp: u32, bytes: u32) -> Gate {
        // The TX decision stays on the packet's path (SwCC): it reads the context as the
        // processors last left it.
        self.law.gate(now, self.store.ctx(qp), bytes)
    }

    fn gate_message(&mut self, now: Instant, qp: u32, pos: &super::MessagePos) -> Gate {
        self.law.gate_message(now, self.store.ctx(qp), pos)
    }

    fn next_timeout(&mut self) -> Option<Instant> {
        if self.law.wakes_pending() {
            return Some(Instant::ZERO); // due at once
        }
        let timer = self.store.next_timer();
        self.processors
            .iter()
            .filter_map(Processor::next)
            .chain(timer)
            .min()
    }

    fn on_timeout(&mut self, now: Instant, out: &mut Deferred) {
        self.start_due(now);
        for proc in &mut self.processors {
            while let Some(&(at, qp, act)) = proc.done.front() {
                if at > now {
                    break;
                }
                proc.done.pop_front();
                out.push((qp, act));
            }
        }
    }
}
