//! An RNIC front end with bounded on-chip caches, between a host's applications and its
//! engine (`[rnic]` in a scenario; off by default, and then nothing here runs).
//!
//! What it models, per host, for the WQEs apps post (flows bypass it):
//!
//! - **Doorbell**: the post reaches the NIC `mmio_ns` later. The NIC looks up the QP
//!   context (a miss is a PCIe read) to learn where the queue pair's WQEs are, then reads
//!   the WQE over PCIe and *fills* it into the WQE cache (with its MTT/MPT entry, the
//!   translation the WQE needs, when `wqe_prefetch_mtt`). A doorbell that reaches the NIC
//!   while the context read of an earlier doorbell of the same queue pair is still in
//!   flight rides on that read (one fetch, one context access). A fill may evict the least
//!   recently used WQE of its set, which then drags its MTT/MPT entry out with it.
//! - **Processing units** (`units`): round robin over the queue pairs with fetched WQEs,
//!   one WQE per turn. A unit looks up the WQE's MTT/MPT entry and the WQE (and SwCC's CC
//!   context, if the table is configured). A WQE no longer in the cache is fetched again,
//!   and a fetch needs the QP context again: so a re-fetch looks the context up first. Each
//!   miss is a PCIe read the unit stalls for (QPC, then MTT, then WQE: each needs the one
//!   before). The context a fetch read serves the unit's work on the WQEs it fetched (the
//!   model does not look it up per WQE processed). The unit then works `unit_ns` and hands
//!   the WQE to the transmit stage.
//! - **Transmit stage**: reserves the link for the WQE's bytes (payload plus
//!   `tx_overhead_bytes` per packet) at line rate; the unit is busy until its WQE's turn on
//!   the wire, so units never run ahead of the link, and the WQE is handed to the engine
//!   then (which packetises, sends and completes it).
//! - **PCIe**: reads take a tag (at most `pcie_tags` outstanding), share `pcie_gbps` of
//!   bandwidth in issue order and complete `pcie_read_ns` after their transfer. Payload
//!   reads use bandwidth and tags but their latency is taken as pipelined (hidden).
//! - **Completion**: when the engine completes a WQE, its WQE-cache entry is released and
//!   the CQE reaches host memory `cqe_write_ns` later, stamped with the engine's time.
//!
//! Simplifications, said plainly: one transmit stage per NIC at line rate (the engine's
//! congestion control can hold WQEs longer, not shorter); the WQE cache holds each WQE from
//! its fetch to its completion, so its occupancy is the paper's "doorbelled and not yet
//! completed"; misses cost latency and PCIe, not a model of the hardware's scheduler. The
//! numbers of a preset are a model calibrated to the shapes the papers report, not a
//! measurement of any NIC.

mod cache;
mod config;

pub use cache::{CacheCounters, Lookup, SetAssocCache};
pub use config::{PRESETS, RnicParams, RnicSpec, WeirSpec, send_depth};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::event::{PS_PER_NS, Ps, serialisation_ps};

/// WQEs of one queue pair a key can tell apart (its sequence number modulo this): the
/// deepest queue an app may keep, so live WQEs of a queue pair never share a key.
const SEQ_SPAN: u64 = crate::app::MAX_APP_DEPTH as u64;

/// What a host's NIC model counted, summed over the hosts that have one in reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicCounters {
    /// Doorbells rung: MMIO writes, each handing the NIC one WQE or a run of one queue
    /// pair's WQEs (`processed` counts the WQEs).
    pub doorbells: u64,
    /// WQEs processed and handed to the transmit stage.
    pub processed: u64,
    /// CQEs written.
    pub cqes: u64,
    /// PCIe reads, their bytes, and reads that waited for a free tag.
    pub pcie_reads: u64,
    /// See `pcie_reads`.
    pub pcie_read_bytes: u64,
    /// See `pcie_reads`.
    pub pcie_tag_waits: u64,
    /// Time units spent stalled on misses, ns, summed over units.
    pub stall_ns: u64,
    /// The WQE cache.
    pub wqe: CacheCounters,
    /// The QP-context (ICM) cache.
    pub qpc: CacheCounters,
    /// The MTT/MPT cache.
    pub mtt: CacheCounters,
    /// SwCC's CC-context table, if configured.
    pub cc: Option<CacheCounters>,
    /// The most WQEs doorbelled and not yet completed at once.
    pub max_outstanding: u64,
    /// WQEs doorbelled and not yet completed, integrated over time (WQE x ns): over a
    /// window, divided by its length, the mean occupancy of the WQE cache's demand.
    pub occupancy_wqe_ns: u64,
}

impl NicCounters {
    /// Adds another host's counts (the most outstanding: the larger).
    pub fn add(&mut self, o: &NicCounters) {
        *self = self.zip(o, |a, b| a + b);
        self.max_outstanding = self.max_outstanding.max(o.max_outstanding);
    }

    /// The counts since `earlier`, a snapshot of the same NIC (the most outstanding: over
    /// the whole run).
    pub fn since(&self, earlier: &NicCounters) -> NicCounters {
        let mut d = self.zip(earlier, u64::saturating_sub);
        d.max_outstanding = self.max_outstanding;
        d
    }

    fn zip(&self, o: &NicCounters, f: fn(u64, u64) -> u64) -> NicCounters {
        let cache = |a: &CacheCounters, b: &CacheCounters| CacheCounters {
            hits: f(a.hits, b.hits),
            misses: f(a.misses, b.misses),
            fills: f(a.fills, b.fills),
            evictions: f(a.evictions, b.evictions),
            invalidations: f(a.invalidations, b.invalidations),
        };
        NicCounters {
            doorbells: f(self.doorbells, o.doorbells),
            processed: f(self.processed, o.processed),
            cqes: f(self.cqes, o.cqes),
            pcie_reads: f(self.pcie_reads, o.pcie_reads),
            pcie_read_bytes: f(self.pcie_read_bytes, o.pcie_read_bytes),
            pcie_tag_waits: f(self.pcie_tag_waits, o.pcie_tag_waits),
            stall_ns: f(self.stall_ns, o.stall_ns),
            wqe: cache(&self.wqe, &o.wqe),
            qpc: cache(&self.qpc, &o.qpc),
            mtt: cache(&self.mtt, &o.mtt),
            cc: match (&self.cc, &o.cc) {
                (Some(a), Some(b)) => Some(cache(a, b)),
                (Some(a), None) => Some(cache(a, &CacheCounters::default())),
                (None, Some(b)) => Some(cache(&CacheCounters::default(), b)),
                (None, None) => None,
            },
            max_outstanding: self.max_outstanding,
            occupancy_wqe_ns: f(self.occupancy_wqe_ns, o.occupancy_wqe_ns),
        }
    }

    /// As JSON, for run summaries.
    pub fn json(&self) -> serde_json::Value {
        let cache = |c: &CacheCounters| {
            serde_json::json!({
                "hits": c.hits, "misses": c.misses, "fills": c.fills,
                "evictions": c.evictions, "invalidations": c.invalidations,
            })
        };
        let mut v = serde_json::json!({
            "doorbells": self.doorbells,
            "processed": self.processed,
            "cqes": self.cqes,
            "pcie_reads": self.pcie_reads,
            "pcie_read_bytes": self.pcie_read_bytes,
            "pcie_tag_waits": self.pcie_tag_waits,
            "stall_ns": self.stall_ns,
            "max_outstanding": self.max_outstanding,
            "occupancy_wqe_ns": self.occupancy_wqe_ns,
            "wqe_cache": cache(&self.wqe),
            "qpc_cache": cache(&self.qpc),
            "mtt_cache": cache(&self.mtt),
        });
        if let Some(c) = &self.cc {
            v["cc_table"] = cache(c);
        }
        v
    }
}

/// PCIe reads: tags, bandwidth and latency.
#[derive(Debug)]
struct Pcie {
    read_ps: Ps,
    bps: u64,
    tags: usize,
    /// Completion times of the reads holding tags (at most `tags`; the earliest is the
    /// next to free one).
    busy: BinaryHeap<Reverse<Ps>>,
    /// When the link is free to carry the next read's data.
    link_free: Ps,
}

impl Pcie {
    /// A read of `bytes` the NIC decides on at `now` and issues at `issue` (not before
    /// `now`: after the reads it depends on); returns when its data is in the NIC. Its
    /// share of the bandwidth is booked at `now`, so that reads issued ahead in a chain do
    /// not hold back the present ones behind them; it waits for a free tag.
    fn read(&mut self, now: Ps, issue: Ps, bytes: u64, c: &mut NicCounters) -> Ps {
        let mut start = issue;
        let full = self.busy.len() >= self.tags;
        if full {
            let &Reverse(free) = self.busy.peek().expect("full");
            if free > start {
                c.pcie_tag_waits += 1;
                start = free;
            }
        }
        let begin = now.max(self.link_free);
        let end = begin + serialisation_ps(bytes, self.bps);
        self.link_free = end;
        let done = start.max(end) + self.read_ps;
        if full {
            // The read takes the tag that frees first: one sift instead of a pop and a push.
            *self.busy.peek_mut().expect("full") = Reverse(done);
        } else {
            self.busy.push(Reverse(done));
        }
        c.pcie_reads += 1;
        c.pcie_read_bytes += bytes;
        done
    }
}

/// A WQE the NIC holds (doorbelled, not yet handed to the engine).
#[derive(Debug, Clone, Copy)]
struct Wqe {
    /// The app queue pair (its index in the run) and the engine `wr_id` to post with.
    app: u32,
    wr_id: u64,
    len: u32,
    key: u64,
}

#[derive(Debug, Default)]
struct QpState {
    /// Fetched WQEs waiting for a unit, oldest first (slab indices).
    ready: VecDeque<u32>,
    /// WQE keys handed to the engine and not yet completed, oldest first.
    in_engine: VecDeque<u64>,
    /// WQEs doorbelled so far (the next one's sequence number).
    seq: u64,
    /// In the round-robin list.
    listed: bool,
    /// When the QP context read for this queue pair's latest doorbell fetch is in the NIC
    /// (`None`: never fetched). A doorbell arriving by then shares that fetch.
    ctx_ready: Option<Ps>,
}

/// A WQE a unit finished: at `at`, hand it to the engine.
#[derive(Debug, Clone, Copy)]
pub struct Processed {
    /// When its turn on the wire comes (the unit is free then).
    pub at: Ps,
    /// The slab index to pass to [`Rnic::take`].
    pub wqe: u32,
}

/// One host's NIC model.
#[derive(Debug)]
pub struct Rnic {
    p: RnicParams,
    mtu: u64,
    line_bps: u64,
    wqe_cache: SetAssocCache,
    qpc_cache: SetAssocCache,
    mtt_cache: SetAssocCache,
    cc_table: Option<SetAssocCache>,
    pcie: Pcie,
    free_units: u32,
    tx_free: Ps,
    /// Per app queue pair of the run (indexed by its index; those of other hosts unused).
    qps: Vec<QpState>,
    /// Queue pairs with fetched WQEs, in turn.
    rr: VecDeque<u32>,
    slab: Vec<Wqe>,
    free_slots: Vec<u32>,
    outstanding: u64,
    /// When `outstanding` last changed (its integral is counted up to then).
    outstanding_since: Ps,
    counters: NicCounters,
    /// WQE fetches in flight: (when it completes, slab index), earliest first, ties in
    /// doorbell order. They complete without an event of their own (see
    /// [`Rnic::fetch_due`]). Fetches complete nearly in doorbell order (a context miss or
    /// a tag wait puts one later), so a new one goes in from the back, nearly always at it.
    fetches: VecDeque<(Ps, u32)>,
}

/// The WQE cache's key of an app queue pair's WQE `seq` (the cache hashes it to a set).
fn wqe_key(app: u32, seq: u64) -> u64 {
    u64::from(app) * SEQ_SPAN + seq % SEQ_SPAN
}

/// The MTT/MPT key of WQE `seq`'s translation (of its buffer and ring slot), fetched with
/// it: one entry per WQE, keyed as the WQE is, so that the WQE evicted names it.
fn mtt_key(app: u32, seq: u64) -> u64 {
    wqe_key(app, seq)
}

impl Rnic {
    /// A NIC of `p` in front of a link of `line_bps` with path MTU `mtu`, for a run of
    /// `app_qps` app queue pairs.
    pub fn new(p: RnicParams, line_bps: u64, mtu: u32, app_qps: usize) -> Rnic {
        Rnic {
            p,
            mtu: u64::from(mtu),
            line_bps,
            wqe_cache: SetAssocCache::new(p.wqe_entries, p.wqe_ways, true),
            // QPNs are sequential: their low bits index the set, as in hardware.
            qpc_cache: SetAssocCache::new(p.qpc_entries, p.qpc_ways, false),
            mtt_cache: SetAssocCache::new(p.mtt_entries, p.mtt_ways, true),
            cc_table: (p.cc_entries > 0)
                .then(|| SetAssocCache::new(p.cc_entries, p.cc_ways, false)),
            pcie: Pcie {
                read_ps: ns_ps(p.pcie_read_ns),
                bps: (p.pcie_gbps * 1e9) as u64,
                tags: p.pcie_tags as usize,
                busy: BinaryHeap::with_capacity(p.pcie_tags as usize + 1),
                link_free: 0,
            },
            free_units: p.units,
            tx_free: 0,
            qps: (0..app_qps).map(|_| QpState::default()).collect(),
            rr: VecDeque::new(),
            slab: Vec::new(),
            free_slots: Vec::new(),
            outstanding: 0,
            outstanding_since: 0,
            counters: NicCounters::default(),
            fetches: VecDeque::new(),
        }
    }

    /// The counts up to `now`.
    pub fn counters(&self, now: Ps) -> NicCounters {
        let mut c = self.counters;
        c.occupancy_wqe_ns +=
            self.outstanding * (now.saturating_sub(self.outstanding_since) / PS_PER_NS);
        c.wqe = self.wqe_cache.counters();
        c.qpc = self.qpc_cache.counters();
        c.mtt = self.mtt_cache.counters();
        c.cc = self.cc_table.as_ref().map(SetAssocCache::counters);
        c
    }

    /// WQEs doorbelled and not yet completed.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// Counts the occupancy up to `now`, before it changes.
    fn occupancy_to(&mut self, now: Ps) {
        let since = self.outstanding_since.min(now);
        self.counters.occupancy_wqe_ns += self.outstanding * ((now - since) / PS_PER_NS);
        // Whole nanoseconds only: the remainder is counted next time.
        self.outstanding_since = now - (now - since) % PS_PER_NS;
    }

    /// App queue pair `app` rings a doorbell at `post` (at or after `now`, the simulator's
    /// time: a post later in a batch) for a WQE of `len` bytes to post to the engine as
    /// `wr_id`. `more_of_run`: this WQE follows the previous one of the same queue pair
    /// under the same doorbell (a run), so there is no MMIO write and no QP context
    /// lookup of its own, only its fetch. Returns the WQE's slab index and when its fetch
    /// completes (then call [`Rnic::fetched`]).
    pub fn doorbell(
        &mut self,
        now: Ps,
        post: Ps,
        app: u32,
        len: u32,
        wr_id: u64,
        more_of_run: bool,
    ) -> (u32, Ps) {
        let q = &mut self.qps[app as usize];
        let seq = q.seq;
        q.seq += 1;
        let w = Wqe {
            app,
            wr_id,
            len,
            key: seq,
        };
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slab[i as usize] = w;
                i
            }
            None => {
                self.slab.push(w);
                (self.slab.len() - 1) as u32
            }
        };
        self.counters.doorbells += u64::from(!more_of_run);
        self.occupancy_to(now);
        self.outstanding += 1;
        self.counters.max_outstanding = self.counters.max_outstanding.max(self.outstanding);
        let at = post.max(now) + ns_ps(self.p.mmio_ns);
        let c = &mut self.counters;
        // The NIC needs the QP context to find the WQE (and learn the producer index).
        let q = &mut self.qps[app as usize];
        let ctx = match q.ctx_ready {
            // The run's doorbell read (or found) the context: its WQEs are fetched after.
            Some(ready) if more_of_run => ready.max(at),
            Some(ready) if at <= ready => ready,
            _ => {
                let ready = match self.qpc_cache.access(u64::from(app)) {
                    Lookup::Miss { .. } => self.pcie.read(now, at, u64::from(self.p.qpc_bytes), c),
                    Lookup::Hit => at,
                };
                q.ctx_ready = Some(ready);
                ready
            }
        };
        let done = self.pcie.read(now, ctx, u64::from(self.p.wqe_bytes), c);
        (slot, done)
    }

    /// Holds WQE `wqe`'s fetch, completing at `done` (from [`Rnic::doorbell`]), until
    /// [`Rnic::fetch_due`] hands it out. A fetch needs an event at its time only if a unit
    /// is idle then (to start on it at once); otherwise what it changes (its cache fill and
    /// its place in the round robin) need only happen before the NIC's next operation, so
    /// the driver catches up on due fetches before each and wakes only for idle units
    /// ([`Rnic::wake_at`]). In completion order, ties in doorbell order: the order their
    /// events would have had.
    pub fn defer_fetch(&mut self, wqe: u32, done: Ps) {
        // After every fetch completing at or before it (ties: the earlier doorbell first).
        let mut i = self.fetches.len();
        while i > 0 && self.fetches[i - 1].0 > done {
            i -= 1;
        }
        self.fetches.insert(i, (done, wqe));
    }

    /// The earliest held fetch completed by `now`, if any (then call [`Rnic::fetched`]).
    pub fn fetch_due(&mut self, now: Ps) -> Option<u32> {
        let &(done, wqe) = self.fetches.front()?;
        if done > now {
            return None;
        }
        self.fetches.pop_front();
        Some(wqe)
    }

    /// When the driver must look at the NIC again without another reason to: the earliest
    /// held fetch's completion, if a unit is idle to start on it.
    pub fn wake_at(&self) -> Option<Ps> {
        if self.free_units == 0 {
            return None;
        }
        self.fetches.front().map(|&(done, _)| done)
    }

    /// A unit is idle.
    pub fn unit_idle(&self) -> bool {
        self.free_units > 0
    }

    /// WQE `wqe`'s fetch completed: into the WQE cache, and its queue pair in line.
    pub fn fetched(&mut self, wqe: u32) {
        let w = self.slab[wqe as usize];
        let seq = w.key;
        if let Some(evicted) = self.wqe_cache.fill(wqe_key(w.app, seq)) {
            self.drag_out(evicted);
        }
        if self.p.wqe_prefetch_mtt {
            self.mtt_cache.fill(mtt_key(w.app, seq));
        }
        let q = &mut self.qps[w.app as usize];
        q.ready.push_back(wqe);
        if !q.listed {
            q.listed = true;
            self.rr.push_back(w.app);
        }
    }

    /// A WQE pushed out of the WQE cache drags its page's MTT/MPT entry out with it (when
    /// the two are fetched together).
    fn drag_out(&mut self, evicted_wqe: u64) {
        if self.p.wqe_prefetch_mtt {
            self.mtt_cache.invalidate(evicted_wqe);
        }
    }

    /// Starts a free unit on the next queue pair's oldest fetched WQE, if both exist.
    pub fn dispatch(&mut self, now: Ps) -> Option<Processed> {
        if self.free_units == 0 {
            return None;
        }
        let app = self.rr.pop_front()?;
        let q = &mut self.qps[app as usize];
        let wqe = q.ready.pop_front().expect("listed queue pairs have work");
        if q.ready.is_empty() {
            q.listed = false;
        } else {
            self.rr.push_back(app);
        }
        let w = self.slab[wqe as usize];
        let seq = w.key;
        let c = &mut self.counters;
        let mut t = now;
        // A WQE evicted since its fetch is fetched again, which needs the QP context again.
        if !self.wqe_cache.contains(wqe_key(app, seq)) {
            if let Lookup::Miss { .. } = self.qpc_cache.access(u64::from(app)) {
                t = self.pcie.read(now, t, u64::from(self.p.qpc_bytes), c);
            }
        }
        if let Lookup::Miss { .. } = self.mtt_cache.access(mtt_key(app, seq)) {
            t = self.pcie.read(now, t, u64::from(self.p.mtt_bytes), c);
        }
        if let Lookup::Miss { evicted } = self.wqe_cache.access(wqe_key(app, seq)) {
            t = self.pcie.read(now, t, u64::from(self.p.wqe_bytes), c);
            if let Some(k) = evicted {
                self.drag_out(k);
            }
        }
        if let Some(table) = &mut self.cc_table {
            if let Lookup::Miss { .. } = table.access(u64::from(app)) {
                t += ns_ps(self.p.cc_miss_ns);
            }
        }
        let c = &mut self.counters;
        c.stall_ns += (t - now) / PS_PER_NS;
        t += ns_ps(self.p.unit_ns);
        // The payload's DMA: bandwidth and a tag, its latency pipelined.
        self.pcie.read(now, t, u64::from(w.len), c);
        let len = u64::from(w.len);
        let packets = len.div_ceil(self.mtu).max(1);
        let wire = len + packets * u64::from(self.p.tx_overhead_bytes);
        let at = t.max(self.tx_free);
        self.tx_free = at + serialisation_ps(wire, self.line_bps);
        self.free_units -= 1;
        c.processed += 1;
        Some(Processed { at, wqe })
    }

    /// The unit of `wqe` reached its turn on the wire: the unit is free, and the WQE goes to
    /// the engine. Returns its app queue pair, length and `wr_id`.
    pub fn take(&mut self, wqe: u32) -> (u32, u32, u64) {
        let w = self.slab[wqe as usize];
        self.free_slots.push(wqe);
        self.free_units += 1;
        self.qps[w.app as usize]
            .in_engine
            .push_back(wqe_key(w.app, w.key));
        (w.app, w.len, w.wr_id)
    }

    /// The engine completed app queue pair `app`'s oldest WQE at `now`: its cache entry is
    /// released; returns when the CQE is in host memory.
    pub fn complete(&mut self, now: Ps, app: u32) -> Ps {
        self.occupancy_to(now);
        if let Some(key) = self.qps[app as usize].in_engine.pop_front() {
            // The CQE frees the WQE's cache resources: its entry and its translation.
            self.wqe_cache.invalidate(key);
            if self.p.wqe_prefetch_mtt {
                self.mtt_cache.invalidate(key);
            }
            self.outstanding -= 1;
        }
        self.counters.cqes += 1;
        now + ns_ps(self.p.cqe_write_ns)
    }

    /// App queue pair `app` was closed: WQEs the NIC still holds for it are dropped (the
    /// caller drops them as they come out of [`Rnic::take`]).
    pub fn close(&mut self, app: u32) {
        let q = &mut self.qps[app as usize];
        self.outstanding -= q.in_engine.len() as u64;
        for key in std::mem::take(&mut q.in_engine) {
            self.wqe_cache.invalidate(key);
        }
    }
}

fn ns_ps(ns: f64) -> Ps {
    (ns * PS_PER_NS as f64).round() as Ps
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Ps = PS_PER_NS;

    fn pcie(tags: usize) -> Pcie {
        Pcie {
            read_ps: 800 * NS,
            bps: 200_000_000_000,
            tags,
            busy: BinaryHeap::new(),
            link_free: 0,
        }
    }

    /// A read completes its transfer (64 B at 200 Gbit/s: 2.56 ns) plus the round trip;
    /// reads share the bandwidth in order; with every tag taken, the next waits for the
    /// earliest to free.
    #[test]
    fn pcie_reads_take_latency_bandwidth_and_tags() {
        let mut c = NicCounters::default();
        let mut p = pcie(2);
        assert_eq!(p.read(0, 0, 64, &mut c), 2_560 + 800 * NS);
        assert_eq!(p.read(0, 0, 64, &mut c), 5_120 + 800 * NS);
        // Both tags are held until 802.56 and 805.12 ns: the third waits for the first.
        assert_eq!(p.read(0, 0, 64, &mut c), 802_560 + 800 * NS);
        assert_eq!(
            (c.pcie_reads, c.pcie_read_bytes, c.pcie_tag_waits),
            (3, 192, 1)
        );
        // A read issued later (after the one it depends on) books its bandwidth now but
        // completes after its issue.
        let mut p = pcie(8);
        assert_eq!(p.read(0, 1_000 * NS, 64, &mut c), 1_000 * NS + 800 * NS);
    }

    /// Held fetches come out in completion order, ties in the order they were held (the
    /// order their events would have had), each once, none before its time; the NIC asks
    /// to be woken at the earliest while a unit is idle.
    #[test]
    fn held_fetches_come_out_in_time_order_ties_in_doorbell_order() {
        let mut n = nic(1);
        for (w, done) in [(0, 5), (1, 3), (2, 5), (3, 9), (4, 3)] {
            n.defer_fetch(w, done * NS);
        }
        assert_eq!(n.wake_at(), Some(3 * NS));
        let due: Vec<u32> = std::iter::from_fn(|| n.fetch_due(5 * NS)).collect();
        assert_eq!(due, [1, 4, 0, 2]);
        assert_eq!(n.fetch_due(9 * NS - 1), None);
        assert_eq!(n.wake_at(), Some(9 * NS));
        assert_eq!(n.fetch_due(9 * NS), Some(3));
        assert_eq!(n.wake_at(), None);
    }

    fn nic(units: u32) -> Rnic {
        let p = RnicParams {
            units,
            wqe_entries: 4,
            wqe_ways: 4,
            mtt_entries: 4,
            mtt_ways: 4,
            ..RnicParams::preset("connectx6-like").unwrap()
        };
        Rnic::new(p, 100_000_000_000, 1024, 4)
    }

    /// A doorbell reaches the NIC after the MMIO write; the NIC misses the QP context
    /// (a 256 B read: 10.24 ns of transfer, booked at the post, then the round trip), then
    /// reads the WQE (its 2.56 ns booked behind) after it. The unit then finds the WQE and
    /// its MTT/MPT entry cached (they came with the fetch) and the context is not looked up
    /// again: it works 100 ns and waits for the wire.
    #[test]
    fn a_wqe_costs_its_misses_then_its_turn_on_the_wire() {
        let mut n = nic(1);
        let (w, fetched) = n.doorbell(0, 0, 0, 512, 7, false);
        assert_eq!(fetched, 100 * NS + 800 * NS + 800 * NS);
        n.fetched(w);
        let now = fetched;
        let done = n.dispatch(now).expect("a unit and a WQE");
        assert_eq!(done.at, now + 100 * NS);
        assert!(n.dispatch(now).is_none(), "one unit, busy");
        let c = n.counters(0);
        assert_eq!(
            (c.qpc.misses, c.qpc.hits, c.wqe.hits, c.mtt.hits),
            (1, 0, 1, 1)
        );
        assert_eq!(n.take(done.wqe), (0, 512, 7));
        assert_eq!(n.outstanding(), 1);
        assert_eq!(n.complete(done.at, 0), done.at + 400 * NS);
        assert_eq!(n.outstanding(), 0);
        assert_eq!(n.counters(0).wqe.invalidations, 1);
    }

    /// Five WQEs fetched into a 4-entry WQE cache: the first is evicted and drags its
    /// MTT/MPT entry out; processing it then re-fetches it: the QP context (a hit: the
    /// doorbells' fetch brought it), then two reads more, its MTT/MPT entry and the WQE.
    #[test]
    fn an_evicted_wqe_misses_with_its_translation() {
        let mut n = nic(8);
        let mut slots = Vec::new();
        for _ in 0..5 {
            let (w, _) = n.doorbell(0, 0, 1, 512, 0, false);
            n.fetched(w);
            slots.push(w);
        }
        let c = n.counters(0);
        assert_eq!((c.wqe.evictions, c.mtt.invalidations), (1, 1));
        // One context access for the five doorbells: they reach the NIC together.
        assert_eq!((c.qpc.misses, c.qpc.hits), (1, 0));
        let first = n.dispatch(0).unwrap();
        let c = n.counters(0);
        assert_eq!(
            (c.qpc.misses, c.qpc.hits, c.mtt.misses, c.wqe.misses),
            (1, 1, 1, 1)
        );
        // Two dependent reads and the work: at least 1.6 us + 100 ns.
        assert!(first.at >= 1_700 * NS, "{}", first.at);
        assert_eq!(first.wqe, slots[0]);
    }

    /// A doorbell carrying a run of three WQEs of one queue pair: one MMIO doorbell and
    /// one QP context lookup, then three WQE fetches; three doorbells rung one after
    /// another (each after the previous context read is done) look the context up three
    /// times.
    #[test]
    fn a_run_under_one_doorbell_reads_the_context_once() {
        let mut n = nic(8);
        let mut done = Vec::new();
        for k in 0..3 {
            done.push(n.doorbell(0, 0, 1, 512, k, k > 0).1);
        }
        let c = n.counters(0);
        assert_eq!((c.doorbells, c.qpc.misses, c.qpc.hits), (1, 1, 0));
        // Each WQE's own fetch, after the context's: in order, none before the first.
        assert!(done[0] <= done[1] && done[1] <= done[2], "{done:?}");
        let mut n = nic(8);
        for k in 0..3u64 {
            let t = k * 10_000 * NS;
            n.doorbell(t, t, 1, 512, k, false);
        }
        let c = n.counters(0);
        assert_eq!((c.doorbells, c.qpc.misses, c.qpc.hits), (3, 1, 2));
    }

    /// A least-recently-used list of `cap` keys: the reference the QP-context cache's
    /// counts are checked against, fed with the accesses the model should make.
    struct RefLru {
        cap: usize,
        keys: Vec<u64>,
        hits: u64,
        misses: u64,
    }

    impl RefLru {
        fn access(&mut self, key: u64) {
            if let Some(i) = self.keys.iter().position(|&k| k == key) {
                self.keys.remove(i);
                self.hits += 1;
            } else {
                if self.keys.len() == self.cap {
                    self.keys.remove(0);
                }
                self.misses += 1;
            }
            self.keys.push(key);
        }
    }

    /// Which QP-context accesses happen: one per doorbell fetch (a doorbell arriving
    /// while its queue pair's context read is in flight shares it), one per re-fetch of an
    /// evicted WQE, none for a WQE processed from the cache. A 2-entry context cache's
    /// hits and misses after each step equal a reference LRU's fed with exactly those.
    #[test]
    fn the_qp_context_is_read_per_fetch_not_per_wqe() {
        let p = RnicParams {
            units: 8,
            wqe_entries: 4,
            wqe_ways: 4,
            mtt_entries: 4,
            mtt_ways: 4,
            qpc_entries: 2,
            qpc_ways: 2,
            ..RnicParams::preset("connectx6-like").unwrap()
        };
        let mut n = Rnic::new(p, 100_000_000_000, 1024, 3);
        let mut r = RefLru {
            cap: 2,
            keys: Vec::new(),
            hits: 0,
            misses: 0,
        };
        fn check(n: &Rnic, r: &mut RefLru, expected: &[u64]) {
            for &k in expected {
                r.access(k);
            }
            let c = n.counters(0).qpc;
            assert_eq!((c.hits, c.misses), (r.hits, r.misses), "after {expected:?}");
        }
        let mut slots = Vec::new();
        // (post time, queue pair, the context accesses its doorbell makes)
        let doorbells: [(Ps, u32, &[u64]); 5] = [
            (0, 0, &[0]),
            (0, 0, &[]), // reaches the NIC with the first: one fetch
            (0, 1, &[1]),
            (0, 2, &[2]),          // evicts queue pair 0's context
            (2_000 * NS, 1, &[1]), // after its first fetch's read: a fetch of its own
        ];
        for (t, app, expected) in doorbells {
            let (w, _) = n.doorbell(t, t, app, 512, 0, false);
            slots.push(w);
            check(&n, &mut r, expected);
        }
        // Five fills into four WQE entries: queue pair 0's first WQE is evicted.
        for &w in &slots {
            n.fetched(w);
        }
        check(&n, &mut r, &[]);
        // In turn: 0's first (re-fetched: its context again, a miss; its WQE's fill
        // evicts the least recently used WQE, 0's second), 1's first and 2's (cached: no
        // context access), 0's second (re-fetched: a hit now; its fill evicts 1's second),
        // 1's second (re-fetched: a hit). LRU's cyclic worst case, in miniature.
        let turns: [(u32, &[u64]); 5] = [(0, &[0]), (1, &[]), (2, &[]), (0, &[0]), (1, &[1])];
        for (app, expected) in turns {
            let d = n.dispatch(3_000 * NS).expect("a free unit and a WQE");
            assert_eq!(n.slab[d.wqe as usize].app, app);
            check(&n, &mut r, expected);
        }
        assert_eq!((r.hits, r.misses), (3, 4));
    }
}
