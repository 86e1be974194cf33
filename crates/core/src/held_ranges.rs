//! Selective repeat for READ responses at the requester: which responses past the first
//! missing one have arrived (their data is already in place in the local buffer).
//!
//! READ responses stream in PSN order between losses, so the held PSNs form a few long
//! runs. They are kept as at most [`HELD_RANGES`] disjoint ranges of offsets from the first
//! missing PSN: each loss costs one range however far the responses run past it, where a
//! bitmap would reach only as far as it has bits.

/// The most disjoint runs of held responses kept; a response that would need another is
/// dropped and asked for again later.
pub(crate) const HELD_RANGES: usize = 16;

/// What [`HeldRanges::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    New,
    Known,
    /// No room for another run: not recorded.
    Full,
}

/// Offsets (from the first missing PSN; offset 0 is that PSN) of the responses held, as
/// sorted, disjoint, non-adjacent ranges `[start, end)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HeldRanges {
    ranges: [(u32, u32); HELD_RANGES],
    len: u8,
}

impl HeldRanges {
    fn runs(&self) -> &[(u32, u32)] {
        &self.ranges[..usize::from(self.len)]
    }

    /// The first run held, if any.
    pub(crate) fn first(&self) -> Option<(u32, u32)> {
        self.runs().first().copied()
    }

    pub(crate) fn contains(&self, offset: u32) -> bool {
        self.runs().iter().any(|&(s, e)| s <= offset && offset < e)
    }

    /// Whether [`HeldRanges::insert`] would record `offset` as new: not held, and either
    /// touching a run or with room for one more.
    pub(crate) fn would_record(&self, offset: u32) -> bool {
        let n = usize::from(self.len);
        let i = self.runs().partition_point(|&(s, _)| s <= offset);
        if i > 0 && offset < self.ranges[i - 1].1 {
            return false;
        }
        n < HELD_RANGES
            || (i > 0 && self.ranges[i - 1].1 == offset)
            || (i < n && self.ranges[i].0 == offset.saturating_add(1))
    }

    /// Records `offset`, joining the runs it touches.
    pub(crate) fn insert(&mut self, offset: u32) -> Insert {
        let n = usize::from(self.len);
        let end = offset.saturating_add(1);
        let i = self.runs().partition_point(|&(s, _)| s <= offset);
        if i > 0 && offset < self.ranges[i - 1].1 {
            return Insert::Known;
        }
        let joins_previous = i > 0 && self.ranges[i - 1].1 == offset;
        let joins_next = i < n && self.ranges[i].0 == end;
        match (joins_previous, joins_next) {
            (true, true) => {
                self.ranges[i - 1].1 = self.ranges[i].1;
                self.ranges.copy_within(i + 1..n, i);
                self.len -= 1;
            }
            (true, false) => self.ranges[i - 1].1 = end,
            (false, true) => self.ranges[i].0 = offset,
            (false, false) => {
                if n == HELD_RANGES {
                    return Insert::Full;
                }
                self.ranges.copy_within(i..n, i + 1);
                self.ranges[i] = (offset, end);
                self.len += 1;
            }
        }
        Insert::New
    }

    /// The first missing PSN moved `n` forward: offsets shift down by `n`, and what falls
    /// below zero is forgotten.
    pub(crate) fn advance(&mut self, n: u32) {
        let mut kept = 0;
        for i in 0..usize::from(self.len) {
            let (s, e) = self.ranges[i];
            if e > n {
                self.ranges[kept] = (s.saturating_sub(n), e - n);
                kept += 1;
            }
        }
        self.len = kept as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_and_shift() {
        let mut h = HeldRanges::default();
        assert_eq!(h.insert(5), Insert::New);
        assert_eq!(h.insert(7), Insert::New);
        assert_eq!(h.insert(6), Insert::New, "joins both neighbours");
        assert_eq!(h.first(), Some((5, 8)));
        assert_eq!(h.insert(6), Insert::Known);
        assert_eq!(h.insert(4), Insert::New);
        assert_eq!(h.insert(8), Insert::New);
        assert_eq!(h.first(), Some((4, 9)));
        assert_eq!(h.insert(1_000_000), Insert::New, "no reach limit");
        assert!(h.contains(1_000_000) && !h.contains(999_999) && !h.contains(3));
        h.advance(4);
        assert_eq!(h.first(), Some((0, 5)));
        assert!(h.contains(999_996));
        h.advance(5);
        assert_eq!(h.first(), Some((999_991, 999_992)));
        h.advance(2_000_000);
        assert_eq!(h.first(), None);
    }

    #[test]
    fn a_full_set_refuses_a_new_run_but_still_grows_one() {
        let mut h = HeldRanges::default();
        for i in 0..HELD_RANGES as u32 {
            assert_eq!(h.insert(10 * (i + 1)), Insert::New);
        }
        assert_eq!(h.insert(5), Insert::Full);
        assert_eq!(h.insert(1000), Insert::Full);
        assert_eq!(h.insert(11), Insert::New, "extends a run");
        assert_eq!(h.insert(9), Insert::New);
        assert_eq!(h.first(), Some((9, 12)));
        assert!(!h.contains(5));
    }

    /// `would_record` says what `insert` then does (the engine asks it before offering a
    /// response to a deferred stage, so that one it could not keep is not offered), over
    /// seeded random inserts and advances that fill the runs.
    #[test]
    fn would_record_foretells_insert() {
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..200 {
            let mut h = HeldRanges::default();
            for _ in 0..200 {
                if rng.next_u64() % 16 == 0 {
                    h.advance((rng.next_u64() % 8) as u32);
                    continue;
                }
                let offset = (rng.next_u64() % 96) as u32;
                let foretold = h.would_record(offset);
                let did = h.insert(offset);
                assert_eq!(foretold, did == Insert::New, "{offset}: {did:?} in {h:?}");
            }
        }
    }
}
