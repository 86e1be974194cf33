//! Which PSNs past a selective-repeat queue pair's expected PSN have arrived.
//!
//! The responder keeps packets that arrive past a gap; the tracker says which it has, so a
//! shared bitmap pool (LEFT) can replace the per-queue-pair bitmap without touching the
//! responder.

mod left;

use crate::Instant;

pub use left::{Left, LeftConfig, LeftTracker, PoolUse};

/// Which PSNs past a queue pair's expected PSN have been received. Offsets count from the
/// expected PSN: offset 1 is the PSN after it (offset 0 is never out of order).
pub trait ReceiveTracker: std::fmt::Debug {
    /// The largest offset that can be recorded (and the most packets held past a gap).
    fn capacity(&self) -> u32;
    /// Records `offset`; false if it was recorded already or is past the capacity.
    fn insert(&mut self, offset: u32) -> bool;
    /// Whether `offset` is recorded.
    fn contains(&self, offset: u32) -> bool;
    /// The expected PSN moved forward by `n`: offsets shift down by `n`.
    fn advance(&mut self, n: u32);
    /// Whether nothing is recorded.
    fn is_empty(&self) -> bool;
    /// Bytes this connection's tracker holds (what a NIC would keep per connection on chip).
    fn memory(&self) -> usize;

    /// Records `offset` as [`ReceiveTracker::insert`] does, and says why not when it does
    /// not: a packet refused because a shared pool ran out (not for anything of its own) is
    /// one the engine should count apart, and NAK (LEFT's exhaustion rule).
    fn record(&mut self, offset: u32) -> Recorded {
        if self.insert(offset) {
            Recorded::New
        } else if self.contains(offset) {
            Recorded::Already
        } else if offset == 0 || offset > self.capacity() {
            Recorded::OutOfRange
        } else {
            Recorded::Exhausted
        }
    }

    /// Records `offset`, arrived at `now`, as [`ReceiveTracker::record`] does: for a
    /// tracker whose work depends on time (LEFT's gather timeout). The engine records every
    /// packet it holds this way, with the packet's arrival time; by default the time is not
    /// needed.
    fn record_at(&mut self, offset: u32, now: Instant) -> Recorded {
        let _ = now;
        self.record(offset)
    }

    /// Whether a gap is taken for loss as soon as a packet arrives past it: then the
    /// responder NAKs the first missing PSN at once (IRN's rule, and the default). A tracker
    /// built for sprayed traffic (LEFT) says no: reordering is never a retransmission
    /// trigger, and a packet is NAK'd only when the tracker cannot take it (past its
    /// capacity, or the shared pool exhausted); real loss waits for the requester's timer.
    fn gap_is_loss(&self) -> bool {
        true
    }
}

/// What became of an offset given to [`ReceiveTracker::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded now.
    New,
    /// Recorded before: a duplicate.
    Already,
    /// Offset 0 or past the capacity: nothing to record, or too far ahead.
    OutOfRange,
    /// Within the capacity, but the shared memory it needs is not to be had.
    Exhausted,
}

/// Operations a tracker carried out, counted so that a simulator can charge each its cost
/// in hardware (LEFT's FPGA: 10 ns a cache access, 15 ns the first pool block of a walk,
/// 5 ns each following block; a swap's write-back and read-in overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrackerWork {
    /// Offsets given to record.
    pub records: u64,
    /// Bitmap updates in a cache.
    pub cache_hits: u64,
    /// Bitmap updates in the pool: walks of a connection's chain.
    pub pool_walks: u64,
    /// Blocks walked past the first in those walks.
    pub pool_hops: u64,
    /// Bitmaps loaded into a cache (evicting another, written back at the same time).
    pub swaps: u64,
    /// Blocks past the first of the longer chain walked by each swap.
    pub swap_hops: u64,
    /// Packets sent down the slow path, into a gather FIFO.
    pub gathered: u64,
    /// Gather FIFOs emptied into the bitmap manager.
    pub flushes: u64,
    /// Gathered packets the expected PSN passed (or whose queue pair closed) before their
    /// FIFO was emptied: nothing left to record. Every new offset is one cache hit, one pool
    /// walk, or one of these.
    pub passed: u64,
    /// Offsets refused because the pool had no block to give.
    pub exhausted: u64,
}

impl TrackerWork {
    /// The time the operations take at `cache` ns a cache access, `first` ns the first block
    /// of a pool walk and `next` ns each following one (LEFT's FPGA: 10, 15, 5).
    pub fn nanos(&self, cache: u64, first: u64, next: u64) -> u64 {
        self.cache_hits * cache
            + (self.pool_walks + self.swaps) * first
            + (self.pool_hops + self.swap_hops) * next
    }
}

/// The largest receive window a queue pair may advertise or be given for its peer, in
/// packets: half the 24-bit PSN space, the largest window a requester may have.
pub const MAX_RECEIVE_WINDOW: u32 = crate::qp::MAX_WINDOW;

/// Makes the receive tracker of each selective-repeat queue pair; a tracker whose queue
/// pairs share state (a pool) keeps it here.
pub trait TrackerFactory: std::fmt::Debug {
    /// The tracker of a queue pair entering RTR with selective repeat.
    fn create(&mut self) -> Box<dyn ReceiveTracker>;
    /// The [`ReceiveTracker::capacity`] of every tracker made here, known before any is
    /// made (so that an engine can advertise its receive window at connection setup).
    fn capacity(&self) -> u32;
    /// The receive window of a selective-repeat queue pair with a tracker made here, in
    /// packets: the expected PSN and what the tracker holds past it, every PSN from the
    /// expected one on that is accepted rather than refused (at most
    /// [`MAX_RECEIVE_WINDOW`]).
    fn receive_window(&self) -> u32 {
        self.capacity().saturating_add(1).min(MAX_RECEIVE_WINDOW)
    }
    /// Bytes held for all queue pairs together (0 when nothing is shared).
    fn shared_memory(&self) -> usize {
        0
    }
    /// The operations carried out so far by every tracker made here (none counted by
    /// default: a per-connection bitmap's work is one access a packet).
    fn work(&self) -> TrackerWork {
        TrackerWork::default()
    }
    /// Time passed to `now`: work that waits for it (a gather FIFO's timeout) is done. The
    /// engine calls it from `handle_timeout` once [`TrackerFactory::next_timeout`] is due;
    /// by default there is none.
    fn poll(&mut self, now: Instant) {
        let _ = now;
    }
    /// When [`TrackerFactory::poll`] next has work (for the engine's `next_timeout`).
    fn next_timeout(&self) -> Option<Instant> {
        None
    }
}

/// What an engine's receive trackers hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrackerMemory {
    /// Summed over the queue pairs that have a tracker.
    pub per_connection: usize,
    /// Shared by all of them.
    pub shared: usize,
}

/// A per-queue-pair bitmap of 256 PSNs (as IRN keeps one per connection).
#[derive(Debug, Clone, Default)]
pub struct Bitmap256 {
    words: [u64; 4],
}

impl ReceiveTracker for Bitmap256 {
    fn capacity(&self) -> u32 {
        255
    }

    fn insert(&mut self, offset: u32) -> bool {
        if offset == 0 || offset > self.capacity() || self.contains(offset) {
            return false;
        }
        self.words[(offset / 64) as usize] |= 1 << (offset % 64);
        true
    }

    fn contains(&self, offset: u32) -> bool {
        offset <= self.capacity() && self.words[(offset / 64) as usize] & (1 << (offset % 64)) != 0
    }

    fn advance(&mut self, n: u32) {
        if n >= 256 {
            self.words = [0; 4];
            return;
        }
        // Shift the 256-bit value right by n.
        let (word_shift, bit_shift) = ((n / 64) as usize, n % 64);
        let mut out = [0u64; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let src = i + word_shift;
            if src < 4 {
                *o = self.words[src] >> bit_shift;
                if bit_shift > 0 && src + 1 < 4 {
                    *o |= self.words[src + 1] << (64 - bit_shift);
                }
            }
        }
        self.words = out;
    }

    fn is_empty(&self) -> bool {
        self.words == [0; 4]
    }

    fn memory(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// A [`Bitmap256`] per queue pair.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bitmaps;

impl TrackerFactory for Bitmaps {
    fn create(&mut self) -> Box<dyn ReceiveTracker> {
        Box::new(Bitmap256::default())
    }

    fn capacity(&self) -> u32 {
        Bitmap256::default().capacity()
    }
}

/// The offsets received, as a sorted list of at most `capacity` entries: memory grows with
/// how much is out of order, not with how far ahead it may be.
#[derive(Debug, Clone)]
pub struct OffsetList {
    offsets: Vec<u32>,
    capacity: u32,
    gap_is_loss: bool,
}

impl OffsetList {
    /// A list that records offsets 1..=`capacity`, and takes a gap for loss.
    pub fn new(capacity: u32) -> OffsetList {
        OffsetList {
            offsets: Vec::new(),
            capacity,
            gap_is_loss: true,
        }
    }

    /// The same list, waiting for reordered packets rather than NAKing a gap (see
    /// [`ReceiveTracker::gap_is_loss`]): an ideal reorder buffer to compare LEFT against.
    pub fn waiting(capacity: u32) -> OffsetList {
        OffsetList {
            gap_is_loss: false,
            ..OffsetList::new(capacity)
        }
    }
}

impl ReceiveTracker for OffsetList {
    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn insert(&mut self, offset: u32) -> bool {
        if offset == 0 || offset > self.capacity {
            return false;
        }
        match self.offsets.binary_search(&offset) {
            Ok(_) => false,
            Err(at) => {
                self.offsets.insert(at, offset);
                true
            }
        }
    }

    fn contains(&self, offset: u32) -> bool {
        self.offsets.binary_search(&offset).is_ok()
    }

    fn advance(&mut self, n: u32) {
        self.offsets.retain(|&o| o >= n);
        for o in &mut self.offsets {
            *o -= n;
        }
    }

    fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    fn memory(&self) -> usize {
        std::mem::size_of::<Self>() + self.offsets.capacity() * std::mem::size_of::<u32>()
    }

    fn gap_is_loss(&self) -> bool {
        self.gap_is_loss
    }
}

/// An [`OffsetList`] of `capacity` per queue pair.
#[derive(Debug, Clone, Copy)]
pub struct OffsetLists {
    /// The capacity of each list (see [`OffsetList::new`]).
    pub capacity: u32,
    /// Whether a gap is NAK'd at once ([`OffsetList::new`]) or waited for
    /// ([`OffsetList::waiting`]).
    pub gap_is_loss: bool,
}

impl TrackerFactory for OffsetLists {
    fn create(&mut self) -> Box<dyn ReceiveTracker> {
        Box::new(if self.gap_is_loss {
            OffsetList::new(self.capacity)
        } else {
            OffsetList::waiting(self.capacity)
        })
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bitmap_records_and_shifts() {
        let mut b = Bitmap256::default();
        assert!(b.insert(1) && b.insert(70) && b.insert(255));
        assert!(!b.insert(70) && !b.insert(0) && !b.insert(256));
        b.advance(1);
        assert!(b.contains(69) && b.contains(254) && !b.contains(70));
        // The packet 70 PSNs ahead is now the expected one (offset 0).
        b.advance(69);
        assert!(b.contains(0) && b.contains(185) && !b.contains(1));
        b.advance(186);
        assert!(b.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Advance(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..300).prop_map(Op::Insert),
            (0u32..80).prop_map(Op::Advance)
        ]
    }

    proptest! {
        /// Both trackers answer as a set of offsets does, whatever the operations.
        #[test]
        fn trackers_behave_as_a_set_of_offsets(ops in proptest::collection::vec(op(), 0..200)) {
            let mut model = std::collections::BTreeSet::new();
            let mut trackers: [Box<dyn ReceiveTracker>; 2] =
                [Box::new(Bitmap256::default()), Box::new(OffsetList::new(255))];
            for op in ops {
                match op {
                    Op::Insert(o) => {
                        let new = o != 0 && o <= 255 && !model.contains(&o);
                        if new {
                            model.insert(o);
                        }
                        for t in &mut trackers {
                            prop_assert_eq!(t.insert(o), new, "{:?}", t);
                        }
                    }
                    Op::Advance(n) => {
                        model = model.into_iter().filter(|&o| o >= n).map(|o| o - n).collect();
                        for t in &mut trackers {
                            t.advance(n);
                        }
                    }
                }
                for t in &trackers {
                    prop_assert_eq!(t.is_empty(), model.is_empty());
                    for o in 0..=256 {
                        prop_assert_eq!(t.contains(o), model.contains(&o), "offset {} {:?}", o, t);
                    }
                }
            }
        }
    }

    #[test]
    fn an_offset_list_holds_memory_for_what_is_recorded_only() {
        let mut l = OffsetList::new(100_000);
        let empty = l.memory();
        assert!(empty <= Bitmap256::default().memory());
        assert!(l.insert(99_999));
        assert!(l.memory() > empty);
    }
}
