//! A set-associative cache with LRU replacement, as the on-chip caches of an RNIC are
//! modelled: it holds keys only (what matters is whether an entry is there, not its bytes),
//! and counts hits, misses, fills and evictions.
//!
//! A key's set is `key % sets`, as hardware indexes a QP-context cache by the QPN's low
//! bits, or with `hashed` a mix of the key's bits modulo `sets` (WQEs and ring pages, whose
//! raw keys would crowd a few sets).
//! Within a set, the least recently used way is the victim. Storage is sized at
//! construction: no call allocates.

/// Hit, miss and eviction counts of one cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounters {
    /// Lookups that found their key.
    pub hits: u64,
    /// Lookups that did not (the entry is then filled).
    pub misses: u64,
    /// Entries filled without a lookup (a prefetch).
    pub fills: u64,
    /// Valid entries pushed out to make room for another.
    pub evictions: u64,
    /// Entries released by their owner (a completed WQE) or dragged out with another.
    pub invalidations: u64,
}

impl CacheCounters {
    /// Hits over lookups, if there were any.
    pub fn hit_rate(&self) -> Option<f64> {
        let n = self.hits + self.misses;
        (n > 0).then(|| self.hits as f64 / n as f64)
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The key was there (now the most recently used of its set).
    Hit,
    /// It was not, and is now; `evicted` is the key it replaced, if its set was full.
    Miss {
        /// The victim.
        evicted: Option<u64>,
    },
}

/// The set of `key` among `sets`.
fn set_index(key: u64, sets: u64, hashed: bool) -> u64 {
    // Fully associative (the preset's WQE and MTT/MPT caches): one set, no mixing to do.
    if sets == 1 {
        return 0;
    }
    if hashed { mix(key) % sets } else { key % sets }
}

/// One SplitMix64 finaliser: every key bit reaches the low bits.
fn mix(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hasher for the key map: keys are already spread or sequential, one multiply does.
#[derive(Debug, Default, Clone, Copy)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(v);
    }
}

type KeyMap = std::collections::HashMap<u64, u32, std::hash::BuildHasherDefault<KeyHasher>>;

/// No way.
const NIL: u32 = u32::MAX;
/// No key in this way.
const EMPTY: u64 = u64::MAX;

/// A set-associative LRU cache of `u64` keys. Each set keeps its ways in a list from most
/// to least recently used (empty ways last), and one map finds a key's way, so a lookup
/// costs the same at any associativity (a fully associative cache of thousands of entries
/// included). The map is sized at construction and never grows past it: no call allocates.
#[derive(Debug, Clone)]
pub struct SetAssocCache {
    sets: u64,
    hashed: bool,
    /// `sets * ways` keys, set-major; `EMPTY` for a free way.
    keys: Box<[u64]>,
    /// The recency list of each set through its ways.
    prev: Box<[u32]>,
    next: Box<[u32]>,
    /// Per set, its most and least recently used ways.
    head: Box<[u32]>,
    tail: Box<[u32]>,
    map: KeyMap,
    counters: CacheCounters,
}

impl SetAssocCache {
    /// A cache of `entries` entries in sets of `ways` (`ways` must divide `entries`; both at
    /// least 1: the scenario's checks refuse other values before this is called), indexed by
    /// the key or, with `hashed`, by a mix of it.
    pub fn new(entries: u32, ways: u32, hashed: bool) -> SetAssocCache {
        assert!(ways >= 1 && entries >= ways && entries % ways == 0);
        let n = entries as usize;
        let sets = (entries / ways) as usize;
        let w = ways as usize;
        let mut prev = vec![NIL; n];
        let mut next = vec![NIL; n];
        for set in 0..sets {
            for i in 0..w {
                let way = set * w + i;
                if i > 0 {
                    prev[way] = (way - 1) as u32;
                }
                if i + 1 < w {
                    next[way] = (way + 1) as u32;
                }
            }
        }
        SetAssocCache {
            sets: sets as u64,
            hashed,
            keys: vec![EMPTY; n].into_boxed_slice(),
            prev: prev.into_boxed_slice(),
            next: next.into_boxed_slice(),
            head: (0..sets).map(|s| (s * w) as u32).collect(),
            tail: (0..sets).map(|s| (s * w + w - 1) as u32).collect(),
            map: KeyMap::with_capacity_and_hasher(n, Default::default()),
            counters: CacheCounters::default(),
        }
    }

    /// Entries in all.
    pub fn entries(&self) -> usize {
        self.keys.len()
    }

    /// The counts so far.
    pub fn counters(&self) -> CacheCounters {
        self.counters
    }

    fn set(&self, key: u64) -> usize {
        set_index(key, self.sets, self.hashed) as usize
    }

    fn unlink(&mut self, set: usize, way: u32) {
        let (p, n) = (self.prev[way as usize], self.next[way as usize]);
        match p {
            NIL => self.head[set] = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.tail[set] = p,
            n => self.prev[n as usize] = p,
        }
    }

    fn push_front(&mut self, set: usize, way: u32) {
        let h = self.head[set];
        self.prev[way as usize] = NIL;
        self.next[way as usize] = h;
        match h {
            NIL => self.tail[set] = way,
            h => self.prev[h as usize] = way,
        }
        self.head[set] = way;
    }

    fn push_back(&mut self, set: usize, way: u32) {
        let t = self.tail[set];
        self.next[way as usize] = NIL;
        self.prev[way as usize] = t;
        match t {
            NIL => self.head[set] = way,
            t => self.next[t as usize] = way,
        }
        self.tail[set] = way;
    }

    fn touch(&mut self, set: usize, way: u32) {
        if self.head[set] != way {
            self.unlink(set, way);
            self.push_front(set, way);
        }
    }

    /// Puts `key` in its set's least recently used (or empty) way; returns the key it
    /// replaced.
    fn place(&mut self, set: usize, key: u64) -> Option<u64> {
        let victim = self.tail[set];
        let old = self.keys[victim as usize];
        if old != EMPTY {
            self.map.remove(&old);
            self.counters.evictions += 1;
        }
        self.keys[victim as usize] = key;
        self.map.insert(key, victim);
        self.touch(set, victim);
        (old != EMPTY).then_some(old)
    }

    /// Looks `key` up, filling it on a miss.
    pub fn access(&mut self, key: u64) -> Lookup {
        debug_assert_ne!(key, EMPTY);
        let set = self.set(key);
        match self.map.get(&key) {
            Some(&way) => {
                self.touch(set, way);
                self.counters.hits += 1;
                Lookup::Hit
            }
            None => {
                self.counters.misses += 1;
                Lookup::Miss {
                    evicted: self.place(set, key),
                }
            }
        }
    }

    /// Fills `key` without counting a lookup (a prefetch); a key already there becomes the
    /// most recently used. Returns the key it evicted.
    pub fn fill(&mut self, key: u64) -> Option<u64> {
        debug_assert_ne!(key, EMPTY);
        let set = self.set(key);
        self.counters.fills += 1;
        match self.map.get(&key) {
            Some(&way) => {
                self.touch(set, way);
                None
            }
            None => self.place(set, key),
        }
    }

    /// Removes `key` if present (its owner released it); true if it was.
    pub fn invalidate(&mut self, key: u64) -> bool {
        let Some(way) = self.map.remove(&key) else {
            return false;
        };
        let set = self.set(key);
        self.keys[way as usize] = EMPTY;
        self.unlink(set, way);
        self.push_back(set, way);
        self.counters.invalidations += 1;
        true
    }

    /// Whether `key` is cached (no effect on recency or counts).
    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    /// Keys cached now.
    pub fn occupancy(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Rng;

    /// The reference: per set, a list of keys from least to most recently used.
    struct Reference {
        sets: Vec<Vec<u64>>,
        ways: usize,
        hashed: bool,
        counters: CacheCounters,
    }

    impl Reference {
        fn new(entries: u32, ways: u32, hashed: bool) -> Reference {
            Reference {
                sets: vec![Vec::new(); (entries / ways) as usize],
                ways: ways as usize,
                hashed,
                counters: CacheCounters::default(),
            }
        }
        fn set(&mut self, key: u64) -> &mut Vec<u64> {
            let n = self.sets.len() as u64;
            &mut self.sets[set_index(key, n, self.hashed) as usize]
        }
        /// Moves `key` to the back (most recent), inserting it and dropping the front if
        /// full; returns (was present, evicted).
        fn touch(&mut self, key: u64) -> (bool, Option<u64>) {
            let ways = self.ways;
            let set = self.set(key);
            if let Some(p) = set.iter().position(|&k| k == key) {
                set.remove(p);
                set.push(key);
                return (true, None);
            }
            let evicted = (set.len() == ways).then(|| set.remove(0));
            set.push(key);
            (false, evicted)
        }
        fn access(&mut self, key: u64) -> Lookup {
            match self.touch(key) {
                (true, _) => {
                    self.counters.hits += 1;
                    Lookup::Hit
                }
                (false, evicted) => {
                    self.counters.misses += 1;
                    self.counters.evictions += u64::from(evicted.is_some());
                    Lookup::Miss { evicted }
                }
            }
        }
        fn fill(&mut self, key: u64) -> Option<u64> {
            self.counters.fills += 1;
            let (_, evicted) = self.touch(key);
            self.counters.evictions += u64::from(evicted.is_some());
            evicted
        }
        fn invalidate(&mut self, key: u64) -> bool {
            let set = self.set(key);
            let p = set.iter().position(|&k| k == key);
            if let Some(p) = p {
                set.remove(p);
                self.counters.invalidations += 1;
            }
            p.is_some()
        }
    }

    /// Random accesses, prefetches and releases over a key space a few times the cache's
    /// size, for several shapes: every result and count equals the reference's.
    #[test]
    fn matches_a_reference_lru_on_random_sequences() {
        for seed in 0..40u64 {
            let mut rng = Rng::new(seed);
            let mut ways = [1u32, 2, 4, 8][rng.below(4) as usize];
            let entries = ways * (1 + rng.below(16) as u32);
            if rng.chance(0.25) {
                ways = entries; // fully associative
            }
            let keys = u64::from(entries) * (1 + rng.below(4));
            let hashed = rng.chance(0.5);
            let mut cache = SetAssocCache::new(entries, ways, hashed);
            let mut reference = Reference::new(entries, ways, hashed);
            for step in 0..5_000 {
                let key = rng.below(keys);
                match rng.below(10) {
                    0..=5 => assert_eq!(
                        cache.access(key),
                        reference.access(key),
                        "seed {seed} step {step} access {key}"
                    ),
                    6..=7 => assert_eq!(cache.fill(key), reference.fill(key), "seed {seed}"),
                    _ => assert_eq!(
                        cache.invalidate(key),
                        reference.invalidate(key),
                        "seed {seed}"
                    ),
                }
                assert_eq!(cache.counters(), reference.counters, "seed {seed}");
            }
            let held: usize = reference.sets.iter().map(Vec::len).sum();
            assert_eq!(cache.occupancy(), held, "seed {seed}");
            for k in 0..keys {
                let n = reference.sets.len() as u64;
                let present = reference.sets[set_index(k, n, hashed) as usize].contains(&k);
                assert_eq!(cache.contains(k), present, "seed {seed} key {k}");
            }
        }
    }

    /// A cyclic sweep over more keys than one set holds misses every time (LRU's worst
    /// case: the reason a round robin over more QPs than the QP-context cache holds
    /// collapses), and over fewer hits after the first pass.
    #[test]
    fn cyclic_sweeps_thrash_only_past_capacity() {
        let mut c = SetAssocCache::new(64, 4, false);
        for _ in 0..10 {
            for k in 0..64 {
                c.access(k);
            }
        }
        assert_eq!((c.counters().misses, c.counters().hits), (64, 576));
        let mut c = SetAssocCache::new(64, 4, false);
        for _ in 0..10 {
            for k in 0..65 {
                c.access(k);
            }
        }
        // Key 64 shares set 0 with 0, 16, 32 and 48: five keys cycling through four ways
        // all miss; the other sets keep hitting.
        assert_eq!(c.counters().misses, 60 + 5 * 10);
        assert_eq!(c.counters().evictions, 5 * 10 - 4);
    }

    #[test]
    fn hit_rate_counts_lookups_only() {
        let mut c = SetAssocCache::new(4, 4, true);
        assert_eq!(c.counters().hit_rate(), None);
        c.fill(1);
        c.access(1);
        c.access(2);
        assert_eq!(c.counters().hit_rate(), Some(0.5));
        assert!(c.invalidate(1) && !c.invalidate(1) && !c.contains(1));
    }
}
