//! LEFT's receive tracker (Huang et al., APNet 2024): one bitmap pool shared by every
//! connection, a few bitmap caches in front of it, and gather FIFOs that batch the packets
//! which would be slow to record.
//!
//! - The pool is `blocks` blocks of `block_bits` bits. A connection's bitmap is a chain of
//!   blocks linked by next pointers, taken from a free map as its disorder grows and given
//!   back as its expected PSN passes them; memory follows disorder, not connections.
//! - Walking a chain costs a step per block, so a packet deep in a long chain is slow. Each
//!   of `caches` caches holds one connection's whole bitmap (half a BDP, the most a lossless
//!   multipath connection reorders) in registers: one step whatever the offset. A packet
//!   whose walk would take `t_max` or longer loads its bitmap into a cache, evicting the
//!   least occupied one.
//! - Loads are the expensive part, and interleaved connections would thrash the caches. So
//!   (the slow path) such a packet waits in a gather FIFO bound to its connection until
//!   `depth` of them are there, or another connection needs the FIFO; the batch then pays
//!   one load and hits the cache. Packets in order, in a cached bitmap, near the chain's
//!   head, or finding a cache free (the fast path) never wait.
//!
//! Choices where the paper says nothing: while a bitmap is cached its chain stays allocated,
//! so that an eviction can always write it back (a swap never fails); a cache whose bitmap
//! empties is free again; a FIFO goes to the first free one (they are alike here); without
//! the time ([`ReceiveTracker::record`] rather than `record_at`; the engine passes it),
//! gathered packets wait for a full FIFO, a conflict, or the expected PSN to pass them, not
//! for a timeout.
//!
//! Exhaustion: an offset that needs a block when none is free is refused
//! ([`Recorded::Exhausted`]), and its connection takes no new block until it holds nothing
//! again, so that one waiting for a retransmission cannot starve the others.

use std::cell::RefCell;
use std::rc::Rc;

use super::{ReceiveTracker, Recorded, TrackerFactory, TrackerWork};
use crate::Instant;

/// LEFT's sizes and thresholds; the defaults are the paper's (§3.5, §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftConfig {
    /// Blocks in the pool.
    pub blocks: u32,
    /// Bits per block, 1..=64.
    pub block_bits: u32,
    /// Bits per cache: half a BDP. A connection records offsets below it.
    pub cache_bits: u32,
    /// Bitmap caches (0: the pool alone, MELO+).
    pub caches: u32,
    /// Gather FIFOs (0: no gathering, LEFT-).
    pub fifos: u32,
    /// Packets a FIFO gathers before it is emptied (`out_cnt`).
    pub depth: u32,
    /// A pool walk that would take this long or longer goes the slow way, ns.
    pub t_max: u64,
    /// The first block of a pool walk, ns.
    pub first_block: u64,
    /// Each following block, ns.
    pub next_block: u64,
    /// The longest a gathered packet waits for its FIFO to fill, ns (when the tracker is
    /// told the time: [`ReceiveTracker::record_at`], [`TrackerFactory::poll`]).
    pub timeout: u64,
}

impl Default for LeftConfig {
    /// LEFT as evaluated: a 2 Kbit pool (128 blocks of 16 bits), 3 caches of half a
    /// 512-packet BDP, 8 FIFOs gathering 8 packets, walks of 40 ns (a 1 KB packet's time at
    /// 200 Gbit/s) or more sent the slow way.
    fn default() -> Self {
        LeftConfig {
            blocks: 128,
            block_bits: 16,
            cache_bits: 256,
            caches: 3,
            fifos: 8,
            depth: 8,
            t_max: 40,
            first_block: 15,
            next_block: 5,
            timeout: 2000,
        }
    }
}

impl LeftConfig {
    /// MELO+: the shared pool alone, no cache, no gathering.
    pub fn melo() -> LeftConfig {
        LeftConfig {
            caches: 0,
            fifos: 0,
            ..LeftConfig::default()
        }
    }

    /// LEFT-: pool and caches, no gathering.
    pub fn no_gather() -> LeftConfig {
        LeftConfig {
            fifos: 0,
            ..LeftConfig::default()
        }
    }

    /// The largest offset a connection records.
    pub fn capacity(&self) -> u32 {
        self.cache_bits.saturating_sub(1)
    }

    /// The bits of on-chip state per connection: its chain's head and length, its highest
    /// offset, where its bitmap is (pool or which cache), its FIFO if any, its no-new-block
    /// flag, and where its expected PSN sits in the head block.
    pub fn connection_bits(&self) -> u64 {
        2 * bits_for(u64::from(self.blocks))
            + bits_for(u64::from(self.capacity()))
            + bits_for(u64::from(self.caches))
            + bits_for(u64::from(self.fifos))
            + 1
            + bits_for(u64::from(self.block_bits.saturating_sub(1)))
    }

    /// The bits of on-chip state shared by all connections: the pool, its next pointers and
    /// free map; each cache's bits and owner; each FIFO's entries (an offset each), owner,
    /// count and first arrival time.
    pub fn shared_bits(&self) -> u64 {
        let blocks = u64::from(self.blocks);
        let pool = blocks * u64::from(self.block_bits)
            + blocks * bits_for(blocks.saturating_sub(1))
            + blocks;
        let caches = u64::from(self.caches) * (u64::from(self.cache_bits) + OWNER_BITS);
        let fifo = u64::from(self.depth) * bits_for(u64::from(self.capacity()))
            + OWNER_BITS
            + bits_for(u64::from(self.depth))
            + TIME_BITS;
        pool + caches + u64::from(self.fifos) * fifo
    }

    /// What a walk to block `k` (0 the head) of a chain costs, ns.
    fn walk(&self, k: u64) -> u64 {
        self.first_block + self.next_block * k
    }
}

/// A connection's number in a cache or FIFO (a QPN).
const OWNER_BITS: u64 = 24;
/// A FIFO's first arrival time.
const TIME_BITS: u64 = 32;

/// The bits that hold every value in 0..=n.
fn bits_for(n: u64) -> u64 {
    u64::from(64 - n.leading_zeros()).max(1)
}

/// How many of the pool's blocks are free and in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUse {
    /// Blocks in the free map.
    pub free: u32,
    /// Blocks in some connection's chain.
    pub used: u32,
    /// Blocks in the pool.
    pub total: u32,
}

/// No block.
const NONE: u32 = u32::MAX;

/// One connection's state. Positions count PSNs from the connection's start (so never
/// wrap); `epos` is the expected PSN's.
#[derive(Debug, Clone, Default)]
struct Conn {
    epos: u64,
    /// The head block of the chain, `NONE` when it has none.
    head: u32,
    tail: u32,
    blocks: u32,
    /// The position of the head block's bit 0.
    head_pos: u64,
    /// Positions at `epos` or later recorded, in the bitmap or waiting in a FIFO.
    count: u32,
    /// The highest position recorded.
    max_pos: u64,
    cache: Option<usize>,
    fifo: Option<usize>,
    no_alloc: bool,
}

#[derive(Debug, Clone)]
struct Cache {
    owner: Option<usize>,
    /// A ring: position `p` is bit `p % cache_bits`.
    ring: Vec<u64>,
}

#[derive(Debug, Clone, Default)]
struct Fifo {
    owner: Option<usize>,
    positions: Vec<u64>,
    /// When its first packet arrived, if the tracker was told.
    first: Option<Instant>,
}

/// What the trackers of one [`Left`] share.
#[derive(Debug)]
struct Shared {
    config: LeftConfig,
    /// Each block's bits.
    bits: Vec<u64>,
    next: Vec<u32>,
    /// The free map: a set bit is a block in use.
    used: Vec<u64>,
    free: u32,
    caches: Vec<Cache>,
    fifos: Vec<Fifo>,
    conns: Vec<Option<Conn>>,
    work: TrackerWork,
}

impl Shared {
    fn new(config: LeftConfig) -> Shared {
        let blocks = config.blocks as usize;
        Shared {
            config,
            bits: vec![0; blocks],
            next: vec![NONE; blocks],
            used: vec![0; blocks.div_ceil(64)],
            free: config.blocks,
            caches: (0..config.caches)
                .map(|_| Cache {
                    owner: None,
                    ring: vec![0; (config.cache_bits as usize).div_ceil(64)],
                })
                .collect(),
            fifos: vec![Fifo::default(); config.fifos as usize],
            conns: Vec::new(),
            work: TrackerWork::default(),
        }
    }

    fn conn(&self, c: usize) -> &Conn {
        self.conns[c].as_ref().expect("a live connection")
    }

    fn conn_mut(&mut self, c: usize) -> &mut Conn {
        self.conns[c].as_mut().expect("a live connection")
    }

    /// Pops a free block from the free map.
    fn pop_block(&mut self) -> u32 {
        let (w, word) = self
            .used
            .iter()
            .enumerate()
            .find(|(_, w)| **w != u64::MAX)
            .expect("a free block");
        let b = w as u32 * 64 + word.trailing_ones();
        debug_assert!(b < self.config.blocks);
        self.used[w] |= 1 << (b % 64);
        self.free -= 1;
        self.bits[b as usize] = 0;
        self.next[b as usize] = NONE;
        b
    }

    /// Pushes block `b` back into the free map.
    fn push_block(&mut self, b: u32) {
        self.used[(b / 64) as usize] &= !(1 << (b % 64));
        self.free += 1;
        self.bits[b as usize] = 0;
        self.next[b as usize] = NONE;
    }

    /// Extends connection `c`'s chain to cover position `p`, all or nothing.
    fn cover(&mut self, c: usize, p: u64) -> bool {
        let bb = u64::from(self.config.block_bits);
        let conn = self.conn(c);
        let (start, have) = if conn.blocks == 0 {
            (conn.epos, 0)
        } else {
            (conn.head_pos, u64::from(conn.blocks))
        };
        let need = (p - start) / bb + 1;
        if need <= have {
            return true;
        }
        let more = (need - have) as u32;
        if conn.no_alloc || more > self.free {
            self.conn_mut(c).no_alloc = true;
            return false;
        }
        for _ in 0..more {
            let b = self.pop_block();
            let conn = self.conn_mut(c);
            if conn.blocks == 0 {
                conn.head = b;
                conn.head_pos = conn.epos;
            } else {
                let tail = conn.tail;
                self.next[tail as usize] = b;
            }
            let conn = self.conn_mut(c);
            conn.tail = b;
            conn.blocks += 1;
        }
        true
    }

    /// Connection `c`'s chain block holding position `p` (covered), and the blocks walked
    /// past the head to reach it.
    fn block_of(&self, c: usize, p: u64) -> (u32, u64, u32) {
        let conn = self.conn(c);
        let bb = u64::from(self.config.block_bits);
        let k = (p - conn.head_pos) / bb;
        let mut b = conn.head;
        for _ in 0..k {
            b = self.next[b as usize];
        }
        (b, k, ((p - conn.head_pos) % bb) as u32)
    }

    /// Whether position `p` is set in connection `c`'s bitmap, wherever it is.
    fn bit(&self, c: usize, p: u64) -> bool {
        let conn = self.conn(c);
        if let Some(i) = conn.cache {
            // The ring holds the window alone; past it, a slot stands for another position.
            let cb = u64::from(self.config.cache_bits);
            if p < conn.epos || p - conn.epos >= cb {
                return false;
            }
            let at = p % cb;
            return self.caches[i].ring[(at / 64) as usize] & (1 << (at % 64)) != 0;
        }
        let span = u64::from(conn.blocks) * u64::from(self.config.block_bits);
        if conn.blocks == 0 || p < conn.head_pos || p >= conn.head_pos + span {
            return false;
        }
        let (b, _, bit) = self.block_of(c, p);
        self.bits[b as usize] & (1 << bit) != 0
    }

    fn has(&self, c: usize, p: u64) -> bool {
        let conn = self.conn(c);
        self.bit(c, p)
            || conn
                .fifo
                .is_some_and(|f| self.fifos[f].positions.contains(&p))
    }

    /// Sets or clears position `p` in connection `c`'s cache (its bitmap is cached).
    fn ring_set(&mut self, i: usize, p: u64, on: bool) {
        let at = p % u64::from(self.config.cache_bits);
        let word = &mut self.caches[i].ring[(at / 64) as usize];
        if on {
            *word |= 1 << (at % 64);
        } else {
            *word &= !(1 << (at % 64));
        }
    }

    /// The cost of a walk to the block holding `p` in `c`'s chain (covered), ns.
    fn walk_cost(&self, c: usize, p: u64) -> u64 {
        let conn = self.conn(c);
        self.config
            .walk((p - conn.head_pos) / u64::from(self.config.block_bits))
    }

    /// Writes cache `i`'s bitmap back into its owner's chain and frees the cache; the
    /// blocks the chain has (its length).
    fn evict(&mut self, i: usize) -> u32 {
        let Some(owner) = self.caches[i].owner.take() else {
            return 0;
        };
        let (epos, blocks) = {
            let conn = self.conn(owner);
            (conn.epos, conn.blocks)
        };
        self.conn_mut(owner).cache = None;
        let cb = u64::from(self.config.cache_bits);
        for p in epos..epos + cb {
            let at = p % cb;
            if self.caches[i].ring[(at / 64) as usize] & (1 << (at % 64)) != 0 {
                let (b, _, bit) = self.block_of(owner, p);
                self.bits[b as usize] |= 1 << bit;
            }
        }
        self.caches[i].ring.fill(0);
        blocks
    }

    /// Loads connection `c`'s bitmap into the free cache `i`; its chain's length.
    fn load(&mut self, c: usize, i: usize) -> u32 {
        let conn = self.conn(c).clone();
        let bb = u64::from(self.config.block_bits);
        let mut b = conn.head;
        let mut pos = conn.head_pos;
        for _ in 0..conn.blocks {
            let word = std::mem::take(&mut self.bits[b as usize]);
            for bit in 0..bb {
                if word & (1 << bit) != 0 && pos + bit >= conn.epos {
                    self.ring_set(i, pos + bit, true);
                }
            }
            b = self.next[b as usize];
            pos += bb;
        }
        self.caches[i].owner = Some(c);
        self.conn_mut(c).cache = Some(i);
        conn.blocks
    }

    /// Algorithm 1: sets position `p` (covered) in connection `c`'s bitmap, in its cache,
    /// a free cache, the pool, or a cache it takes from the least occupied.
    fn manage(&mut self, c: usize, p: u64) {
        if self.conn(c).cache.is_none() {
            let free = self.caches.iter().position(|k| k.owner.is_none());
            let cost = self.walk_cost(c, p);
            let target = match free {
                Some(i) => Some(i),
                None if self.caches.is_empty() || cost < self.config.t_max => None,
                None => self
                    .caches
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, k)| k.ring.iter().map(|w| w.count_ones()).sum::<u32>())
                    .map(|(i, _)| i),
            };
            match target {
                Some(i) => {
                    let out = self.evict(i);
                    let inn = self.load(c, i);
                    self.work.swaps += 1;
                    self.work.swap_hops += u64::from(out.max(inn).saturating_sub(1));
                }
                None => {
                    let (b, k, bit) = self.block_of(c, p);
                    self.bits[b as usize] |= 1 << bit;
                    self.work.pool_walks += 1;
                    self.work.pool_hops += k;
                    return;
                }
            }
        }
        let i = self.conn(c).cache.expect("cached");
        self.ring_set(i, p, true);
        self.work.cache_hits += 1;
    }

    /// Algorithm 2: queues position `p` of connection `c` in its FIFO (taking a free one,
    /// or emptying the fullest), and empties the FIFO once it holds `depth` or its first
    /// packet has waited `timeout`.
    fn gather(&mut self, c: usize, p: u64, now: Option<Instant>) {
        self.work.gathered += 1;
        let f = match self.conn(c).fifo {
            Some(f) => f,
            None => {
                let f = match self.fifos.iter().position(|f| f.owner.is_none()) {
                    Some(f) => f,
                    None => {
                        let f = (0..self.fifos.len())
                            .max_by_key(|&f| (self.fifos[f].positions.len(), usize::MAX - f))
                            .expect("a FIFO");
                        self.flush(f);
                        f
                    }
                };
                self.fifos[f].owner = Some(c);
                self.fifos[f].first = now;
                self.conn_mut(c).fifo = Some(f);
                f
            }
        };
        self.fifos[f].positions.push(p);
        if self.fifos[f].positions.len() >= self.config.depth as usize || self.expired(f, now) {
            self.flush(f);
        }
    }

    /// Whether FIFO `f`'s first packet has waited its time by `now`.
    fn expired(&self, f: usize, now: Option<Instant>) -> bool {
        match (self.fifos[f].first, now) {
            (Some(first), Some(now)) => now.as_nanos() >= first.as_nanos() + self.config.timeout,
            _ => false,
        }
    }

    /// Empties the FIFOs whose first packet has waited its time by `now`.
    fn poll(&mut self, now: Instant) {
        for f in 0..self.fifos.len() {
            if self.fifos[f].owner.is_some() && self.expired(f, Some(now)) {
                self.flush(f);
            }
        }
    }

    /// When the first FIFO's wait ends.
    fn next_timeout(&self) -> Option<Instant> {
        self.fifos
            .iter()
            .filter(|f| f.owner.is_some())
            .filter_map(|f| f.first)
            .map(|t| Instant::from_nanos(t.as_nanos() + self.config.timeout))
            .min()
    }

    /// Empties FIFO `f` into the bitmap manager, in arrival order.
    fn flush(&mut self, f: usize) {
        let Some(c) = self.fifos[f].owner.take() else {
            return;
        };
        self.fifos[f].first = None;
        self.conn_mut(c).fifo = None;
        let positions = std::mem::take(&mut self.fifos[f].positions);
        for &p in &positions {
            if p >= self.conn(c).epos {
                self.manage(c, p);
            } else {
                self.work.passed += 1;
            }
        }
        self.fifos[f].positions = positions;
        self.fifos[f].positions.clear();
        self.work.flushes += 1;
    }

    /// Algorithm 3 and the exhaustion rule: records offset `offset` of connection `c`,
    /// arrived at `now` if known.
    fn record(&mut self, c: usize, offset: u32, now: Option<Instant>) -> Recorded {
        self.work.records += 1;
        let p = self.conn(c).epos + u64::from(offset);
        if self.has(c, p) {
            return Recorded::Already;
        }
        if offset == 0 || offset > self.config.capacity() {
            return Recorded::OutOfRange;
        }
        if !self.cover(c, p) {
            self.work.exhausted += 1;
            return Recorded::Exhausted;
        }
        let conn = self.conn_mut(c);
        conn.count += 1;
        conn.max_pos = conn.max_pos.max(p);
        let fast = self.fifos.is_empty()
            || self.conn(c).cache.is_some()
            || self.caches.iter().any(|k| k.owner.is_none())
            || self.walk_cost(c, p) < self.config.t_max;
        if fast {
            self.manage(c, p);
        } else {
            self.gather(c, p, now);
        }
        Recorded::New
    }

    /// Connection `c`'s expected PSN moved `n` on: clears what it passed, gives back the
    /// blocks wholly behind it, and (if nothing is left) its cache and the right to blocks.
    fn advance(&mut self, c: usize, n: u32) {
        let conn = self.conn(c);
        let old = conn.epos;
        let new = old + u64::from(n);
        if conn.count > 0 && new <= conn.max_pos {
            // Cleared while the expected PSN is still `old`: the cache's window is still
            // the one they are in.
            for p in old..new {
                if self.bit(c, p) {
                    match self.conn(c).cache {
                        Some(i) => self.ring_set(i, p, false),
                        None => {
                            let (b, _, bit) = self.block_of(c, p);
                            self.bits[b as usize] &= !(1 << bit);
                        }
                    }
                    self.conn_mut(c).count -= 1;
                }
            }
            self.conn_mut(c).epos = new;
            if let Some(f) = self.conn(c).fifo {
                let before = self.fifos[f].positions.len();
                self.fifos[f].positions.retain(|&p| p >= new);
                let passed = (before - self.fifos[f].positions.len()) as u32;
                self.conn_mut(c).count -= passed;
                self.work.passed += u64::from(passed);
                if self.fifos[f].positions.is_empty() {
                    self.fifos[f].owner = None;
                    self.fifos[f].first = None;
                    self.conn_mut(c).fifo = None;
                }
            }
            let bb = u64::from(self.config.block_bits);
            while self.conn(c).blocks > 0 && self.conn(c).head_pos + bb <= new {
                let b = self.conn(c).head;
                let next = self.next[b as usize];
                let conn = self.conn_mut(c);
                conn.blocks -= 1;
                conn.head_pos += bb;
                conn.head = next;
                if conn.blocks == 0 {
                    conn.tail = NONE;
                }
                self.push_block(b);
            }
        } else {
            let conn = self.conn_mut(c);
            conn.epos = new;
            conn.count = 0;
        }
        if self.conn(c).count == 0 {
            self.empty(c);
        }
    }

    /// Gives back everything connection `c` holds.
    fn empty(&mut self, c: usize) {
        if let Some(i) = self.conn(c).cache {
            self.caches[i].ring.fill(0);
            self.caches[i].owner = None;
        }
        if let Some(f) = self.conn(c).fifo {
            self.work.passed += self.fifos[f].positions.len() as u64;
            self.fifos[f].positions.clear();
            self.fifos[f].owner = None;
            self.fifos[f].first = None;
        }
        let mut b = self.conn(c).head;
        for _ in 0..self.conn(c).blocks {
            let next = self.next[b as usize];
            self.push_block(b);
            b = next;
        }
        let conn = self.conn_mut(c);
        *conn = Conn {
            epos: conn.epos,
            head: NONE,
            tail: NONE,
            ..Conn::default()
        };
    }

    /// Checks the pool's bookkeeping: every block in use is in exactly one chain, as long as
    /// the chain says; every free one is in none; caches and FIFOs and their owners agree.
    fn check(&self) -> Result<(), String> {
        let mut owner = vec![None; self.config.blocks as usize];
        for (c, conn) in self.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            let mut b = conn.head;
            for _ in 0..conn.blocks {
                if b == NONE {
                    return Err(format!(
                        "connection {c}'s chain is short of {}",
                        conn.blocks
                    ));
                }
                if let Some(o) = owner[b as usize].replace(c) {
                    return Err(format!("block {b} is in connections {o} and {c}"));
                }
                if self.used[(b / 64) as usize] & (1 << (b % 64)) == 0 {
                    return Err(format!("block {b} of connection {c} is free"));
                }
                if conn.blocks > 0 && b == conn.tail && self.next[b as usize] != NONE {
                    return Err(format!("connection {c}'s tail {b} links on"));
                }
                b = self.next[b as usize];
            }
            if conn.cache.is_some_and(|i| self.caches[i].owner != Some(c)) {
                return Err(format!("connection {c}'s cache belongs to another"));
            }
            if conn.fifo.is_some_and(|f| self.fifos[f].owner != Some(c)) {
                return Err(format!("connection {c}'s FIFO belongs to another"));
            }
        }
        let used = owner.iter().filter(|o| o.is_some()).count() as u32;
        let marked: u32 = self.used.iter().map(|w| w.count_ones()).sum();
        if used != marked || used + self.free != self.config.blocks {
            return Err(format!(
                "{used} blocks in chains, {marked} marked used, {} free of {}",
                self.free, self.config.blocks
            ));
        }
        for (i, k) in self.caches.iter().enumerate() {
            if k.owner.is_some_and(|c| self.conn(c).cache != Some(i))
                || (k.owner.is_none() && k.ring.iter().any(|&w| w != 0))
            {
                return Err(format!("cache {i} and its owner disagree"));
            }
        }
        for (f, q) in self.fifos.iter().enumerate() {
            if q.owner.is_some_and(|c| self.conn(c).fifo != Some(f))
                || (q.owner.is_none() && !q.positions.is_empty())
            {
                return Err(format!("FIFO {f} and its owner disagree"));
            }
        }
        Ok(())
    }
}

/// LEFT's trackers (or MELO+'s, or LEFT-'s, by [`LeftConfig`]): every one made here
/// shares this pool, caches and FIFOs.
#[derive(Debug, Clone)]
pub struct Left {
    shared: Rc<RefCell<Shared>>,
}

impl Left {
    /// A pool, caches and FIFOs as `config` sizes them (see [`LeftConfig`]'s fields for the
    /// ranges that make sense; a `block_bits` outside 1..=64 or a `cache_bits` below 2 is
    /// raised or lowered into them).
    pub fn new(mut config: LeftConfig) -> Left {
        config.block_bits = config.block_bits.clamp(1, 64);
        config.cache_bits = config.cache_bits.max(2);
        config.depth = config.depth.max(1);
        Left {
            shared: Rc::new(RefCell::new(Shared::new(config))),
        }
    }

    /// Its sizes.
    pub fn config(&self) -> LeftConfig {
        self.shared.borrow().config
    }

    /// How much of the pool is in use.
    pub fn pool(&self) -> PoolUse {
        let s = self.shared.borrow();
        PoolUse {
            free: s.free,
            used: s.config.blocks - s.free,
            total: s.config.blocks,
        }
    }

    /// Connections with a tracker alive.
    pub fn connections(&self) -> usize {
        self.shared.borrow().conns.iter().flatten().count()
    }

    /// Checks the shared state's bookkeeping (for tests): an error says what disagrees.
    pub fn check(&self) -> Result<(), String> {
        self.shared.borrow().check()
    }
}

impl TrackerFactory for Left {
    fn create(&mut self) -> Box<dyn ReceiveTracker> {
        let mut s = self.shared.borrow_mut();
        let conn = Conn {
            head: NONE,
            tail: NONE,
            ..Conn::default()
        };
        let id = match s.conns.iter().position(Option::is_none) {
            Some(id) => {
                s.conns[id] = Some(conn);
                id
            }
            None => {
                s.conns.push(Some(conn));
                s.conns.len() - 1
            }
        };
        Box::new(LeftTracker {
            shared: Rc::clone(&self.shared),
            id,
        })
    }

    fn capacity(&self) -> u32 {
        self.shared.borrow().config.capacity()
    }

    fn shared_memory(&self) -> usize {
        self.shared.borrow().config.shared_bits().div_ceil(8) as usize
    }

    fn work(&self) -> TrackerWork {
        self.shared.borrow().work
    }

    fn poll(&mut self, now: Instant) {
        self.shared.borrow_mut().poll(now);
    }

    fn next_timeout(&self) -> Option<Instant> {
        self.shared.borrow().next_timeout()
    }
}

/// One connection's view of a [`Left`] pool; it gives its blocks, cache and FIFO back when
/// dropped (the queue pair left RTR or was destroyed).
pub struct LeftTracker {
    shared: Rc<RefCell<Shared>>,
    id: usize,
}

impl std::fmt::Debug for LeftTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.shared.borrow();
        f.debug_struct("LeftTracker")
            .field("id", &self.id)
            .field("conn", s.conn(self.id))
            .finish()
    }
}

impl Drop for LeftTracker {
    fn drop(&mut self) {
        let mut s = self.shared.borrow_mut();
        s.empty(self.id);
        s.conns[self.id] = None;
    }
}

impl ReceiveTracker for LeftTracker {
    fn capacity(&self) -> u32 {
        self.shared.borrow().config.capacity()
    }

    fn insert(&mut self, offset: u32) -> bool {
        self.record(offset) == Recorded::New
    }

    fn record(&mut self, offset: u32) -> Recorded {
        self.shared.borrow_mut().record(self.id, offset, None)
    }

    fn record_at(&mut self, offset: u32, now: Instant) -> Recorded {
        self.shared.borrow_mut().record(self.id, offset, Some(now))
    }

    fn gap_is_loss(&self) -> bool {
        false
    }

    fn contains(&self, offset: u32) -> bool {
        let s = self.shared.borrow();
        let p = s.conn(self.id).epos + u64::from(offset);
        s.has(self.id, p)
    }

    fn advance(&mut self, n: u32) {
        self.shared.borrow_mut().advance(self.id, n);
    }

    fn is_empty(&self) -> bool {
        self.shared.borrow().conn(self.id).count == 0
    }

    fn memory(&self) -> usize {
        self.shared.borrow().config.connection_bits().div_ceil(8) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(left: &mut Left) -> Box<dyn ReceiveTracker> {
        left.create()
    }

    #[test]
    fn the_defaults_are_the_papers_and_cost_a_few_bytes_a_connection() {
        let c = LeftConfig::default();
        assert_eq!(c.blocks * c.block_bits, 2048);
        assert_eq!(c.capacity(), 255);
        // Head 8 + length 8 + highest offset 8 + place 2 + FIFO 4 + flag 1 + head bit 4.
        assert_eq!(c.connection_bits(), 35);
        let left = Left::new(c);
        let mut l = left.clone();
        assert_eq!(tracker(&mut l).memory(), 5);
        // At 5000 connections about the paper's 27 KB.
        let total = 5000 * 5 + left.shared_memory();
        assert!((25_000..28_000).contains(&total), "{total}");
        let melo = Left::new(LeftConfig::melo()).shared_memory();
        let nogather = Left::new(LeftConfig::no_gather()).shared_memory();
        assert!(melo < nogather && nogather < left.shared_memory());
    }

    #[test]
    fn blocks_are_taken_as_disorder_grows_and_given_back_as_it_drains() {
        let mut left = Left::new(LeftConfig::melo());
        let mut t = tracker(&mut left);
        assert!(t.insert(3));
        assert_eq!(left.pool().used, 1);
        assert!(t.insert(40)); // offsets 0..16, 16..32, 32..48
        assert_eq!(left.pool().used, 3);
        assert!(t.contains(3) && t.contains(40) && !t.contains(39));
        t.advance(3);
        assert!(t.contains(0) && t.contains(37));
        assert_eq!(left.pool().used, 3);
        t.advance(16); // past the first block
        assert_eq!(left.pool().used, 2);
        assert!(t.contains(21) && !t.is_empty());
        t.advance(22);
        assert!(t.is_empty());
        assert_eq!(left.pool().used, 0);
        left.check().unwrap();
    }

    #[test]
    fn deep_offsets_walk_the_pool_without_caches_and_hit_with_them() {
        let mut melo = Left::new(LeftConfig::melo());
        let mut t = tracker(&mut melo);
        assert!(t.insert(200));
        let w = melo.work();
        assert_eq!((w.pool_walks, w.pool_hops, w.cache_hits), (1, 12, 0));
        assert_eq!(w.nanos(10, 15, 5), 15 + 12 * 5);

        let mut left = Left::new(LeftConfig::no_gather());
        let mut ts: Vec<_> = (0..4).map(|_| tracker(&mut left)).collect();
        // Three connections take the three caches.
        for t in &mut ts[..3] {
            assert!(t.insert(200));
        }
        let w = left.work();
        assert_eq!((w.swaps, w.cache_hits, w.pool_walks), (3, 3, 0));
        // The fourth: near its head it walks the pool; deep it swaps with the emptiest.
        assert!(ts[0].insert(201));
        assert!(ts[3].insert(2));
        assert_eq!(left.work().pool_walks, 1);
        assert!(ts[3].insert(200));
        let w = left.work();
        assert_eq!(w.swaps, 4);
        assert!(ts.iter().all(|t| t.contains(200)) && ts[3].contains(2) && ts[0].contains(201));
        left.check().unwrap();
        drop(ts);
        assert_eq!(left.pool().used, 0);
        assert_eq!(left.connections(), 0);
        left.check().unwrap();
    }

    #[test]
    fn slow_packets_are_gathered_and_recorded_in_one_load() {
        let config = LeftConfig {
            caches: 1,
            ..LeftConfig::default()
        };
        let mut left = Left::new(config);
        let mut a = tracker(&mut left);
        let mut b = tracker(&mut left);
        assert!(a.insert(1)); // a takes the cache
        for o in 100..107 {
            assert!(b.insert(o));
        }
        let w = left.work();
        assert_eq!((w.gathered, w.flushes, w.swaps), (7, 0, 1));
        // Gathered, not yet in the bitmap, but recorded all the same.
        assert!(b.contains(103) && !b.insert(103));
        assert!(b.insert(107)); // the eighth fills the FIFO
        let w = left.work();
        assert_eq!((w.flushes, w.swaps, w.cache_hits), (1, 2, 1 + 8));
        assert!((100..108).all(|o| b.contains(o)) && a.contains(1));
        left.check().unwrap();
    }

    #[test]
    fn told_the_time_a_fifo_is_emptied_once_its_first_packet_has_waited() {
        let mut left = Left::new(LeftConfig {
            caches: 1,
            ..LeftConfig::default()
        });
        let mut a = tracker(&mut left);
        let mut b = tracker(&mut left);
        let ns = Instant::from_nanos;
        assert!(a.insert(1)); // a takes the cache; b's deep packets are slow
        assert_eq!(b.record_at(100, ns(1000)), Recorded::New);
        assert_eq!(b.record_at(101, ns(2000)), Recorded::New);
        assert_eq!(left.next_timeout(), Some(ns(3000)));
        left.poll(ns(2999));
        assert_eq!(left.work().flushes, 0);
        left.poll(ns(3000));
        assert_eq!(left.work().flushes, 1);
        assert_eq!(left.next_timeout(), None);
        // Checked on arrival too (Algorithm 2), when nobody polled: `b` holds the cache
        // now, so `a`'s deep packets are the slow ones.
        assert_eq!(a.record_at(200, ns(10_000)), Recorded::New);
        assert_eq!(a.record_at(201, ns(12_500)), Recorded::New);
        assert_eq!(left.work().flushes, 2);
        assert!(b.contains(100) && b.contains(101) && a.contains(200) && a.contains(201));
        left.check().unwrap();
    }

    #[test]
    fn an_exhausted_pool_refuses_and_the_connection_waits_until_it_drains() {
        let mut left = Left::new(LeftConfig {
            blocks: 2,
            ..LeftConfig::melo()
        });
        let mut a = tracker(&mut left);
        let mut b = tracker(&mut left);
        assert_eq!(a.record(20), Recorded::New); // two blocks
        assert_eq!(b.record(1), Recorded::Exhausted);
        assert_eq!(a.record(40), Recorded::Exhausted);
        assert_eq!(a.record(5), Recorded::New); // within its blocks
        assert_eq!(a.record(5), Recorded::Already);
        assert_eq!(a.record(300), Recorded::OutOfRange);
        a.advance(16);
        // A block is free, but `a` may take none until it holds nothing.
        assert_eq!(a.record(20), Recorded::Exhausted);
        assert_eq!(left.work().exhausted, 3);
        a.advance(5);
        assert!(a.is_empty());
        assert_eq!(left.pool().free, 2);
        // `b` was refused before: it takes no block until it too has drained.
        assert_eq!(b.record(1), Recorded::Exhausted);
        b.advance(1);
        assert_eq!(b.record(1), Recorded::New);
        assert_eq!(a.record(20), Recorded::Exhausted); // two blocks wanted, one free
        left.check().unwrap();
    }
}
