//! Weir: a host-side doorbell pacer between an application and its NIC.
//!
//! Weir (the paper in `docs/weir.md`) keeps a NIC's on-chip WQE cache from overflowing when
//! thousands of queue pairs are active, by pacing the doorbells the host rings. It watches
//! each WQE's life cycle (doorbell to hardware completion), smooths the delay with an EWMA,
//! counts the active queue pairs in a bitmap over their QPNs, and moves one aggregate
//! doorbell rate up or down by fixed steps (AIAD) against thresholds that grow with the
//! active count. Doorbells are spent against credits: after each doorbell the next credit
//! falls due `size / rate` later; one doorbell may carry a run of a queue pair's pieces
//! (`max_batch`), each drawing its own gap, so that the NIC looks the queue pair's context up
//! once for the run. Large WQEs are split so that no single doorbell leaves a
//! long gap, and the NIC's completions are filtered and merged back so the application sees
//! exactly the completions it asked for.
//!
//! [`Weir`] is sans-IO, like the engine: it never reads a clock, rings a doorbell or polls a
//! completion queue. Its driver (the simulator's host application model, or the verbs layer
//! of the real datapath) passes time in and carries out the [`Doorbell`]s it hands back. All
//! of its state is sized at construction; no call allocates.
//!
//! A driver's loop, with a NIC that completes every piece 5 us after its doorbell:
//!
//! ```
//! use sluice_core::weir::{Decision, Weir, WeirConfig};
//! use sluice_core::{Instant, QpNum};
//!
//! let mut weir = Weir::new(WeirConfig::default()).unwrap();
//! let mut nic = Vec::new(); // (completion time, QP, tag), what the NIC holds
//! let mut now = Instant::ZERO;
//! weir.sync(now, now); // one clock: NIC time is host time
//! // The application posts 10,000 bytes, signalled: split into 4,096 + 4,096 + 1,808.
//! if let Decision::Ring(d) = weir.post(QpNum(0x11), 7, 10_000, true, now).unwrap() {
//!     nic.push((now.as_nanos() + 5_000, d.qp, d.tag)); // post_send(piece, signalled, wr_id = tag)
//! }
//! let mut heard = Vec::new();
//! while !nic.is_empty() || weir.next_timeout().is_some() {
//!     // Wake at the next credit or the next completion, whichever is first.
//!     let cqe = nic.iter().map(|c| c.0).min();
//!     let credit = weir.next_timeout().map(Instant::as_nanos);
//!     now = Instant::from_nanos(cqe.into_iter().chain(credit).min().unwrap());
//!     while let Some(d) = weir.poll_doorbell(now) {
//!         nic.push((now.as_nanos() + 5_000, d.qp, d.tag));
//!     }
//!     nic.sort();
//!     while nic.first().is_some_and(|c| c.0 <= now.as_nanos()) {
//!         let (at, qp, tag) = nic.remove(0);
//!         if let Some(c) = weir.on_completion(qp, tag, Instant::from_nanos(at), true).unwrap() {
//!             heard.push((c.wr_id, c.len, c.pieces));
//!         }
//!     }
//!     if weir.sync_due() {
//!         weir.sync(now, now);
//!     }
//! }
//! // Three doorbells, three CQEs, one completion for the application.
//! assert_eq!(heard, [(7, 10_000, 3)]);
//! assert_eq!(weir.stats().swallowed, 2);
//! ```

use core::time::Duration;
use std::collections::VecDeque;

use thiserror::Error;

use crate::{Instant, QpNum};

#[cfg(test)]
mod tests;

/// Weir's parameters. The paper names most of them without giving values; where it does
/// not, the default is ours and `docs/weir.md` says why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeirConfig {
    /// QPNs below this are accepted; the active bitmap and the per-queue-pair state are
    /// sized for them at construction, about `32 * max_wqes + 8 * sq_depth + 48` bytes per
    /// QPN (depths rounded up to powers of two), 5 KiB with the default depths.
    pub max_qpn: u32,
    /// Application WQEs a queue pair may hold in Weir at once (queued and in flight): the
    /// application's send queue depth.
    pub max_wqes: u32,
    /// Doorbelled pieces a queue pair may have in flight on the NIC: the NIC send queue's
    /// depth (the paper's TX depth).
    pub sq_depth: u32,
    /// Line rate, bit/s: the doorbell rate when the NIC leaves idle, and the ceiling.
    pub line_rate: u64,
    /// The rate's floor, bit/s, so that a burst of slow samples cannot stop the pacer.
    pub min_rate: u64,
    /// Additive increase, bit/s per completion below the lower threshold.
    pub inc: u64,
    /// Additive decrease, bit/s per completion above the upper threshold.
    pub dec: u64,
    /// The EWMA weight `W` of the previous delay (Eq. 2), in [0, 1).
    pub ewma_weight: f64,
    /// `N`, active queue pairs per threshold step (Eq. 3).
    pub qps_per_step: u32,
    /// `init_alpha` (Eq. 3 and 4).
    pub init_alpha: f64,
    /// `init_beta` (Eq. 4): as printed, `beta = alpha + init_alpha - init_beta`, so a hold
    /// band needs `init_beta < init_alpha`.
    pub init_beta: f64,
    /// `base_delay`, the delay the thresholds are relative to: it sets the occupancy Weir
    /// settles at.
    pub base_delay: Duration,
    /// WQEs longer than this are split into pieces of this size (the last one shorter);
    /// 0 never splits.
    pub split_bytes: u32,
    /// Doorbells between clock synchronisations.
    pub sync_every: u32,
    /// Pieces of one queue pair one doorbell may carry (at least 1). When a credit falls
    /// due, the queue pair at the head of the ready list is served a run of up to this
    /// many of its queued pieces (as many as its NIC send queue has room for, and no more
    /// bytes than `split_bytes` after the first piece: a run is no coarser a burst than
    /// the one piece the pacer already allows) under one doorbell; each piece still draws
    /// its own credit gap and gets its own doorbell time.
    /// The paper puts Weir's fewer QP-context misses down to fewer doorbells (each one a
    /// context lookup); its order across queue pairs is unspecified. 1: one piece per
    /// doorbell, queue pairs in turn.
    pub max_batch: u32,
}

impl Default for WeirConfig {
    fn default() -> WeirConfig {
        WeirConfig {
            max_qpn: 1024 + 64,
            max_wqes: 128,
            sq_depth: 128,
            line_rate: 100_000_000_000,
            min_rate: 1_000_000_000,
            inc: 10_000_000,
            dec: 10_000_000,
            ewma_weight: 0.875,
            qps_per_step: 128,
            init_alpha: 1.0,
            init_beta: 0.5,
            base_delay: Duration::from_micros(10),
            split_bytes: 4096,
            sync_every: 1000,
            max_batch: 1,
        }
    }
}

/// Why Weir refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WeirError {
    /// The configuration is inconsistent; the text says which field.
    #[error("invalid Weir configuration: {0}")]
    Config(&'static str),
    /// The QPN is not below `max_qpn`.
    #[error("QPN {0} is not below max_qpn")]
    QpOutOfRange(u32),
    /// The queue pair already holds `max_wqes` application WQEs.
    #[error("queue pair {0} holds max_wqes WQEs")]
    Full(u32),
    /// A completion that is not for the queue pair's oldest piece in flight.
    #[error("queue pair {0}: completion for no piece in flight, or out of order")]
    UnexpectedCompletion(u32),
}

/// One doorbell to ring: a piece of an application WQE, always posted signalled (Weir
/// needs every piece's completion time), with `tag` as the NIC's `wr_id` so that its
/// completion can be handed back to [`Weir::on_completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doorbell {
    /// The queue pair.
    pub qp: QpNum,
    /// The application's `wr_id` of the WQE this piece belongs to.
    pub wr_id: u64,
    /// The piece's tag, to post as the NIC WQE's `wr_id`.
    pub tag: u64,
    /// The piece's offset in the application WQE's data.
    pub offset: u32,
    /// The piece's length.
    pub len: u32,
    /// The piece's index, from 0.
    pub piece: u32,
    /// How many pieces the WQE was split into (1 when not split).
    pub pieces: u32,
    /// Another piece of the same doorbell follows: post this one without ringing, take
    /// the next from [`Weir::poll_doorbell`] at once, and ring after the one with `more`
    /// false (a run of `max_batch` pieces at most; always false with `max_batch` 1).
    pub more: bool,
}

/// What became of a post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Ring this doorbell now: the WQE's first piece (or the whole WQE when `pieces` is 1).
    /// Any further pieces come from [`Weir::poll_doorbell`] (at once if `more` is set:
    /// then they belong under the same doorbell).
    Ring(Doorbell),
    /// Queued in Weir. `until` is the earliest time [`Weir::poll_doorbell`] may hand out a
    /// doorbell; `None` when this queue pair waits for one of its completions (its NIC send
    /// queue is full).
    Hold {
        /// When to poll next, if time alone can release it.
        until: Option<Instant>,
    },
}

/// The one completion the application sees for a WQE it posted: for a signalled WQE, or a
/// WQE one of whose pieces failed. Unsignalled WQEs' completions are swallowed, and a split
/// WQE's pieces are merged into this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppCompletion {
    /// The queue pair.
    pub qp: QpNum,
    /// The application's `wr_id`.
    pub wr_id: u64,
    /// The WQE's length, all pieces together.
    pub len: u32,
    /// How many pieces it was carried in.
    pub pieces: u32,
    /// Whether every piece succeeded.
    pub ok: bool,
}

/// Counts since construction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeirStats {
    /// Application WQEs accepted.
    pub posts: u64,
    /// Pieces handed out (WQEs posted to the NIC).
    pub doorbells: u64,
    /// Doorbells rung: runs of pieces of one queue pair (`doorbells` with `max_batch` 1).
    pub runs: u64,
    /// Application WQEs that were split.
    pub splits: u64,
    /// NIC completions taken.
    pub cqes: u64,
    /// Application completions handed back.
    pub app_completions: u64,
    /// NIC completions swallowed: forced-signalled pieces of unsignalled WQEs, and all but
    /// the last piece of split WQEs.
    pub swallowed: u64,
    /// Rate increases and decreases.
    pub increases: u64,
    /// See `increases`.
    pub decreases: u64,
}

/// One application WQE held in Weir.
#[derive(Debug, Clone, Copy, Default)]
struct Wqe {
    wr_id: u64,
    len: u32,
    pieces: u32,
    /// Pieces doorbelled.
    rung: u32,
    /// Pieces completed.
    done: u32,
    signaled: bool,
    ok: bool,
}

/// A queue pair's WQEs form a ring of `max_wqes` slots: `len` from `head`, of which the
/// first `cursor` are fully doorbelled.
#[derive(Debug, Clone, Copy, Default)]
struct Qp {
    head: u32,
    len: u32,
    cursor: u32,
    /// Pieces not yet doorbelled.
    queued: u32,
    /// Pieces doorbelled, and completed: the tags run from 0, so the oldest piece in flight
    /// is `done`, and `rung - done` are in flight.
    rung: u64,
    done: u64,
    /// In the ready list.
    listed: bool,
}

/// The low 32 bits of a fixed-point nanosecond count.
const FRACTION: u64 = (1 << 32) - 1;

/// ns per byte at `rate` bit/s, with 32 fractional bits.
fn ns_per_byte(rate: u64) -> u64 {
    (8e9 / rate as f64 * 4_294_967_296.0) as u64
}

/// The pacer for one NIC. See the module documentation.
#[derive(Debug)]
pub struct Weir {
    cfg: WeirConfig,
    /// Active queue pairs, one bit per QPN.
    active: Vec<u64>,
    active_count: u32,
    qps: Vec<Qp>,
    /// `1 << wqe_shift` slots per QPN, at least `max_wqes`: a power of two, so that a slot
    /// is found with a mask rather than a division on every post and completion.
    wqes: Vec<Wqe>,
    wqe_shift: u32,
    /// Doorbell times (host ns) of pieces in flight, `1 << stamp_shift` slots per QPN (at
    /// least `sq_depth`), by tag.
    stamps: Vec<u64>,
    stamp_shift: u32,
    /// Queue pairs with pieces queued and room on the NIC, served in turn a run at a time
    /// (one piece with `max_batch` 1). Each is in it at most once, so `max_qpn` slots
    /// never grow.
    ready: VecDeque<u32>,
    /// The run being handed out: its queue pair and the pieces left after the last one
    /// handed out (0: no run).
    run_qp: u32,
    run_left: u32,
    run_bytes: u32,
    rate: u64,
    /// ns per byte at `rate`, fixed point with 32 fractional bits: the gap after each
    /// doorbell is integer arithmetic, with no floating-point chain from one post to the
    /// next.
    ns_per_byte: u64,
    /// The next credit falls due at `credit_at`; `carry` is the fraction of a nanosecond
    /// (32 bits) the truncated gaps owe, so that the rate holds over many short gaps.
    credit_at: Instant,
    carry: u64,
    ewma: Option<f64>,
    inv_base_ns: f64,
    /// Eq. 3 and 4 for the current active count, kept as it changes.
    alpha: f64,
    beta: f64,
    /// Host time minus NIC time, two's complement.
    offset: u64,
    synced: bool,
    since_sync: u32,
    stats: WeirStats,
}

impl Weir {
    /// A pacer with all its state sized for `cfg`.
    pub fn new(cfg: WeirConfig) -> Result<Weir, WeirError> {
        if cfg.max_qpn == 0 || cfg.max_wqes == 0 || cfg.sq_depth == 0 {
            return Err(WeirError::Config(
                "max_qpn, max_wqes and sq_depth must be positive",
            ));
        }
        if cfg.line_rate == 0 || cfg.min_rate == 0 || cfg.min_rate > cfg.line_rate {
            return Err(WeirError::Config("need 0 < min_rate <= line_rate"));
        }
        if !(0.0..1.0).contains(&cfg.ewma_weight) {
            return Err(WeirError::Config("ewma_weight must be in [0, 1)"));
        }
        if cfg.qps_per_step == 0 {
            return Err(WeirError::Config("qps_per_step must be positive"));
        }
        if !(cfg.init_alpha >= 0.0 && cfg.init_beta >= 0.0 && cfg.init_beta <= cfg.init_alpha) {
            return Err(WeirError::Config(
                "need 0 <= init_beta <= init_alpha (beta = alpha + init_alpha - init_beta)",
            ));
        }
        if cfg.max_batch == 0 {
            return Err(WeirError::Config("max_batch must be positive"));
        }
        if cfg.base_delay.is_zero() {
            return Err(WeirError::Config("base_delay must be positive"));
        }
        let qpns = cfg.max_qpn as usize;
        let wqe_shift = cfg.max_wqes.next_power_of_two().trailing_zeros();
        let stamp_shift = cfg.sq_depth.next_power_of_two().trailing_zeros();
        let mut weir = Weir {
            cfg,
            active: vec![0; qpns.div_ceil(64)],
            active_count: 0,
            qps: vec![Qp::default(); qpns],
            wqes: vec![Wqe::default(); qpns << wqe_shift],
            wqe_shift,
            stamps: vec![0; qpns << stamp_shift],
            stamp_shift,
            ready: VecDeque::with_capacity(qpns),
            run_qp: 0,
            run_left: 0,
            run_bytes: 0,
            rate: cfg.line_rate,
            ns_per_byte: ns_per_byte(cfg.line_rate),
            credit_at: Instant::ZERO,
            carry: 0,
            ewma: None,
            inv_base_ns: 1.0 / cfg.base_delay.as_nanos() as f64,
            alpha: 0.0,
            beta: 0.0,
            offset: 0,
            synced: false,
            since_sync: 0,
            stats: WeirStats::default(),
        };
        weir.set_thresholds();
        Ok(weir)
    }

    /// The configuration.
    pub fn config(&self) -> &WeirConfig {
        &self.cfg
    }

    fn index(&self, qp: QpNum) -> Result<usize, WeirError> {
        if qp.0 < self.cfg.max_qpn {
            Ok(qp.0 as usize)
        } else {
            Err(WeirError::QpOutOfRange(qp.0))
        }
    }

    /// How many pieces a WQE of `len` bytes is carried in.
    pub fn pieces(&self, len: u32) -> u32 {
        if self.cfg.split_bytes == 0 || len <= self.cfg.split_bytes {
            1
        } else {
            len.div_ceil(self.cfg.split_bytes)
        }
    }

    /// The application posts a WQE of `len` bytes on `qp` at `now`; `signaled` is whether
    /// it asked for a completion. Weir marks the queue pair active and either hands back
    /// its first doorbell (a credit is due, nothing is queued ahead of it and the NIC send
    /// queue has room) or queues it.
    pub fn post(
        &mut self,
        qp: QpNum,
        wr_id: u64,
        len: u32,
        signaled: bool,
        now: Instant,
    ) -> Result<Decision, WeirError> {
        let i = self.index(qp)?;
        let pieces = self.pieces(len);
        let q = &self.qps[i];
        if q.len == self.cfg.max_wqes {
            return Err(WeirError::Full(qp.0));
        }
        let slot = self.wqe_slot(i, q.head + q.len);
        self.wqes[slot] = Wqe {
            wr_id,
            len,
            pieces,
            rung: 0,
            done: 0,
            signaled,
            ok: true,
        };
        let q = &mut self.qps[i];
        q.len += 1;
        let was_queued = q.queued;
        q.queued += pieces;
        let room = q.rung - q.done < u64::from(self.cfg.sq_depth);
        self.stats.posts += 1;
        self.stats.splits += u64::from(pieces > 1);
        // The active-QP monitor: set the QPN's bit, count it if it was clear.
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if self.active[word] & bit == 0 {
            self.active[word] |= bit;
            self.active_count += 1;
            self.set_thresholds();
        }
        let in_run = self.run_left > 0 && self.run_qp as usize == i;
        if was_queued > 0 || !room || in_run {
            // Behind this queue pair's own queued pieces (already listed, or waiting for
            // room on the NIC), or a run of its own is being handed out.
            let until = if self.qps[i].listed || in_run {
                Some(self.credit_at)
            } else {
                None
            };
            return Ok(Decision::Hold { until });
        }
        if self.ready.is_empty() && self.run_left == 0 && now >= self.credit_at {
            self.start_run(i);
            return Ok(Decision::Ring(self.ring_run(i, now)));
        }
        self.list_if_ready(i);
        Ok(Decision::Hold {
            until: Some(self.credit_at),
        })
    }

    #[inline]
    fn wqe_slot(&self, i: usize, n: u32) -> usize {
        (i << self.wqe_shift) | (n as usize & ((1 << self.wqe_shift) - 1))
    }

    #[inline]
    fn stamp_slot(&self, i: usize, tag: u64) -> usize {
        (i << self.stamp_shift) | (tag as usize & ((1 << self.stamp_shift) - 1))
    }

    /// Puts the queue pair at the back of the ready list if it has pieces queued and room
    /// on the NIC and is not in the list already.
    #[inline]
    fn list_if_ready(&mut self, i: usize) {
        let q = &mut self.qps[i];
        if !q.listed && q.queued > 0 && q.rung - q.done < u64::from(self.cfg.sq_depth) {
            q.listed = true;
            self.ready.push_back(i as u32);
        }
    }

    /// A credit is due: queue pair `i` (unlisted, with pieces queued and room on the NIC)
    /// gets a run of as many of its queued pieces as one doorbell may carry and its NIC
    /// send queue has room for.
    #[inline]
    fn start_run(&mut self, i: usize) {
        let q = &self.qps[i];
        let room = u64::from(self.cfg.sq_depth) - (q.rung - q.done);
        let k = u64::from(self.cfg.max_batch.min(q.queued)).min(room);
        self.run_qp = i as u32;
        self.run_left = k as u32;
        self.run_bytes = 0;
        self.stats.runs += 1;
    }

    /// Hands out the run's next piece (of queue pair `i`); after its last, the queue pair
    /// goes to the back of the ready list if it still has pieces and room.
    #[inline]
    fn ring_run(&mut self, i: usize, now: Instant) -> Doorbell {
        self.run_left -= 1;
        let mut d = self.ring(i, now);
        self.run_bytes = self.run_bytes.saturating_add(d.len);
        if self.run_left > 0
            && self.cfg.split_bytes != 0
            && self.run_bytes.saturating_add(self.next_len(i)) > self.cfg.split_bytes
        {
            self.run_left = 0;
        }
        d.more = self.run_left > 0;
        if !d.more {
            self.list_if_ready(i);
        }
        d
    }

    /// The length of queue pair `i`'s next piece to doorbell (it has one).
    #[inline]
    fn next_len(&self, i: usize) -> u32 {
        let q = &self.qps[i];
        let w = &self.wqes[self.wqe_slot(i, q.head + q.cursor)];
        if w.pieces == 1 {
            w.len
        } else {
            (w.len - w.rung * self.cfg.split_bytes).min(self.cfg.split_bytes)
        }
    }

    /// Doorbells queue pair `i`'s next piece at `now` and sets the next credit's deadline:
    /// `size / rate` after now, or after the previous piece's deadline within a run (the
    /// run's pieces go at once, and their gaps add up).
    #[inline]
    fn ring(&mut self, i: usize, now: Instant) -> Doorbell {
        let slot = self.wqe_slot(i, self.qps[i].head + self.qps[i].cursor);
        let stamp = self.stamp_slot(i, self.qps[i].rung);
        let q = &mut self.qps[i];
        let w = &mut self.wqes[slot];
        let piece = w.rung;
        let (offset, len) = if w.pieces == 1 {
            (0, w.len)
        } else {
            let offset = piece * self.cfg.split_bytes;
            (offset, (w.len - offset).min(self.cfg.split_bytes))
        };
        w.rung += 1;
        let d = Doorbell {
            qp: QpNum(i as u32),
            wr_id: w.wr_id,
            tag: q.rung,
            offset,
            len,
            piece,
            pieces: w.pieces,
            more: false,
        };
        if w.rung == w.pieces {
            q.cursor += 1;
        }
        q.queued -= 1;
        self.stamps[stamp] = now.as_nanos();
        q.rung += 1;
        // time_deadline = now + size / rate, the size being this piece's.
        let gap = u128::from(len) * u128::from(self.ns_per_byte) + u128::from(self.carry);
        let whole = (gap >> 32) as u64;
        self.carry = gap as u64 & FRACTION;
        let from = now.max(self.credit_at);
        self.credit_at = Instant::from_nanos(from.as_nanos().saturating_add(whole));
        self.since_sync = self.since_sync.saturating_add(1);
        self.stats.doorbells += 1;
        d
    }

    /// The next doorbell to ring at `now`, if a credit is due and a queue pair is ready.
    /// Call it until `None` after [`Weir::next_timeout`] passes and after completions.
    pub fn poll_doorbell(&mut self, now: Instant) -> Option<Doorbell> {
        if self.run_left > 0 {
            // The rest of a run: its credit was drawn when it started.
            return Some(self.ring_run(self.run_qp as usize, now));
        }
        if now < self.credit_at {
            return None;
        }
        while let Some(i) = self.ready.pop_front() {
            let i = i as usize;
            self.qps[i].listed = false;
            let q = &self.qps[i];
            // A queue pair reset while listed has nothing left.
            if q.queued == 0 || q.rung - q.done >= u64::from(self.cfg.sq_depth) {
                continue;
            }
            self.start_run(i);
            return Some(self.ring_run(i, now));
        }
        None
    }

    /// When [`Weir::poll_doorbell`] may next hand out a doorbell, if anything is queued
    /// that time alone can release.
    pub fn next_timeout(&self) -> Option<Instant> {
        if self.run_left > 0 {
            // A run not handed out in full: the driver should not have stopped.
            Some(Instant::ZERO)
        } else if self.ready.is_empty() {
            None
        } else {
            Some(self.credit_at)
        }
    }

    /// The NIC completed the piece `tag` on `qp`; `nic_time` is the completion's hardware
    /// timestamp (NIC clock), `ok` whether it succeeded. Updates the delay EWMA, the active
    /// count and the rate, and returns the application's completion if this was the last
    /// piece of a WQE the application is to hear about.
    pub fn on_completion(
        &mut self,
        qp: QpNum,
        tag: u64,
        nic_time: Instant,
        ok: bool,
    ) -> Result<Option<AppCompletion>, WeirError> {
        let i = self.index(qp)?;
        let q = &self.qps[i];
        if q.done == q.rung || tag != q.done {
            return Err(WeirError::UnexpectedCompletion(qp.0));
        }
        let rung_at = self.stamps[self.stamp_slot(i, tag)];
        // The head WQE owns the oldest piece in flight: pieces complete in order.
        let slot = self.wqe_slot(i, q.head);
        let mask = (1u32 << self.wqe_shift) - 1;
        let q = &mut self.qps[i];
        q.done += 1;
        self.stats.cqes += 1;
        let w = &mut self.wqes[slot];
        w.done += 1;
        w.ok &= ok;
        let mut out = None;
        if w.done == w.pieces {
            if w.signaled || !w.ok {
                out = Some(AppCompletion {
                    qp,
                    wr_id: w.wr_id,
                    len: w.len,
                    pieces: w.pieces,
                    ok: w.ok,
                });
            }
            q.head = (q.head + 1) & mask;
            q.len -= 1;
            q.cursor -= 1;
        }
        let idle_qp = q.len == 0;
        match out {
            Some(_) => self.stats.app_completions += 1,
            None => self.stats.swallowed += 1,
        }
        self.list_if_ready(i);
        // Eq. 1 and 2: the delay from doorbell to completion, both in host time, smoothed.
        let sample = if ok {
            let cqe_host = nic_time.as_nanos().wrapping_add(self.offset);
            Some((cqe_host.wrapping_sub(rung_at) as i64).max(0) as f64)
        } else {
            None
        };
        if let Some(s) = sample {
            let w = self.cfg.ewma_weight;
            self.ewma = Some(match self.ewma {
                Some(prev) => w * prev + (1.0 - w) * s,
                None => s,
            });
        }
        if idle_qp {
            self.deactivate(i);
        }
        if sample.is_some() && self.active_count > 0 {
            self.adjust_rate();
        }
        Ok(out)
    }

    /// Clears the queue pair's active bit; when none is left the NIC is idle, and leaves
    /// idle at line rate with no delay history.
    fn deactivate(&mut self, i: usize) {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if self.active[word] & bit != 0 {
            self.active[word] &= !bit;
            self.active_count -= 1;
            self.set_thresholds();
            if self.active_count == 0 {
                self.set_rate(self.cfg.line_rate);
                self.ewma = None;
            }
        }
    }

    /// Eq. 3 and 4, then AIAD on `ewma / base_delay - 1`.
    fn adjust_rate(&mut self) {
        let Some(delay) = self.ewma else { return };
        let ratio = delay * self.inv_base_ns - 1.0;
        if ratio <= self.alpha {
            self.stats.increases += 1;
            self.set_rate(self.rate.saturating_add(self.cfg.inc));
        } else if ratio >= self.beta {
            self.stats.decreases += 1;
            self.set_rate(self.rate.saturating_sub(self.cfg.dec));
        }
    }

    #[inline]
    fn set_rate(&mut self, rate: u64) {
        let rate = rate.clamp(self.cfg.min_rate, self.cfg.line_rate);
        if rate != self.rate {
            self.rate = rate;
            self.ns_per_byte = ns_per_byte(rate);
        }
    }

    /// `(alpha, beta)` for the current active count: Eq. 3,
    /// `alpha = ceil(active / N) * init_alpha`, and Eq. 4 as printed,
    /// `beta = alpha + init_alpha - init_beta`.
    pub fn thresholds(&self) -> (f64, f64) {
        (self.alpha, self.beta)
    }

    fn set_thresholds(&mut self) {
        let steps = self.active_count.div_ceil(self.cfg.qps_per_step);
        self.alpha = f64::from(steps) * self.cfg.init_alpha;
        self.beta = self.alpha + self.cfg.init_alpha - self.cfg.init_beta;
    }

    /// Whether a clock synchronisation is due: before the first completion's delay can be
    /// measured, and every `sync_every` doorbells after that.
    pub fn sync_due(&self) -> bool {
        !self.synced || self.since_sync >= self.cfg.sync_every
    }

    /// A (NIC clock, host clock) pair read together: completion timestamps are moved into
    /// host time by their difference from now on.
    pub fn sync(&mut self, nic_time: Instant, host_time: Instant) {
        self.offset = host_time.as_nanos().wrapping_sub(nic_time.as_nanos());
        self.synced = true;
        self.since_sync = 0;
    }

    /// Forgets everything the queue pair holds, for `destroy_qp` or a reset after an error
    /// whose flushed completions the driver will not hand in. Its tags are not reused.
    pub fn reset_qp(&mut self, qp: QpNum) -> Result<(), WeirError> {
        let i = self.index(qp)?;
        let q = &mut self.qps[i];
        q.head = 0;
        q.len = 0;
        q.cursor = 0;
        q.queued = 0;
        q.done = q.rung;
        if self.run_qp as usize == i {
            self.run_left = 0;
        }
        // A listed entry is skipped when it comes up.
        self.deactivate(i);
        Ok(())
    }

    /// The aggregate doorbell rate, bit/s.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The smoothed delay, ns, if there is a sample since the NIC was last idle.
    pub fn delay(&self) -> Option<f64> {
        self.ewma
    }

    /// When the next credit falls due.
    pub fn credit_at(&self) -> Instant {
        self.credit_at
    }

    /// Active queue pairs.
    pub fn active_qps(&self) -> u32 {
        self.active_count
    }

    /// Whether `qp`'s bit is set.
    pub fn is_active(&self, qp: QpNum) -> bool {
        qp.0 < self.cfg.max_qpn && self.active[qp.0 as usize / 64] & (1 << (qp.0 % 64)) != 0
    }

    /// Pieces of `qp` doorbelled and not completed.
    pub fn in_flight(&self, qp: QpNum) -> u32 {
        self.index(qp)
            .map_or(0, |i| (self.qps[i].rung - self.qps[i].done) as u32)
    }

    /// Pieces of `qp` queued in Weir, not yet doorbelled.
    pub fn queued(&self, qp: QpNum) -> u32 {
        self.index(qp).map_or(0, |i| self.qps[i].queued)
    }

    /// Application WQEs `qp` holds (queued or in flight).
    pub fn held(&self, qp: QpNum) -> u32 {
        self.index(qp).map_or(0, |i| self.qps[i].len)
    }

    /// Counts since construction.
    pub fn stats(&self) -> WeirStats {
        self.stats
    }
}
