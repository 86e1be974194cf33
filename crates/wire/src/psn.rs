//! Packet sequence numbers: 24-bit counters that wrap.
//!
//! PSNs are compared the way the IBTA specification and Linux Soft-RoCE (`psn_compare`) do:
//! the difference modulo 2^24, read as a signed 24-bit number. So `a` precedes `b` when `b` is
//! less than half the PSN space (2^23) ahead of `a`.

/// A 24-bit packet sequence number. The value is always below 2^24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Psn(u32);

impl Psn {
    /// The number of distinct PSNs.
    pub const MODULUS: u32 = 1 << 24;
    /// The largest PSN.
    pub const MAX: Psn = Psn(Self::MODULUS - 1);
    const MASK: u32 = Self::MODULUS - 1;

    /// A PSN from the low 24 bits of `value` (higher bits are dropped, as on the wire).
    #[inline]
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// The PSN as a number in `0..2^24`.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self - n`, modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The PSN after this one.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// How far `other` is ahead of `self`: `other - self` modulo 2^24 as a signed number in
    /// `-2^23 ..= 2^23 - 1`. Negative when `other` is behind.
    #[inline]
    pub const fn distance_to(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
        ((other.0.wrapping_sub(self.0) << 8) as i32) >> 8
    }

    /// True when `self` comes strictly before `other` in sequence order.
    #[inline]
    pub const fn precedes(self, other: Psn) -> bool {
        self.distance_to(other) > 0
    }

    /// True when `self` lies in the window of `len` PSNs that starts at `start`, i.e. in
    /// `start, start + 1, ..., start + len - 1` (modulo 2^24). A window of 0 holds nothing;
    /// a window of 2^24 or more holds every PSN.
    #[inline]
    pub const fn is_within_window(self, start: Psn, len: u32) -> bool {
        self.0.wrapping_sub(start.0) & Self::MASK < len || len >= Self::MODULUS
    }
}

impl core::fmt::Display for Psn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_2_pow_24() {
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(0xFF_FFF0).add(0x20), Psn::new(0x10));
        assert_eq!(Psn::new(0x1_000_005), Psn::new(5));
    }

    #[test]
    fn distance_is_signed_across_the_wrap() {
        let a = Psn::new(0xFF_FFFE);
        let b = Psn::new(3);
        assert_eq!(a.distance_to(b), 5);
        assert_eq!(b.distance_to(a), -5);
        assert!(a.precedes(b));
        assert!(!b.precedes(a));
        assert!(!a.precedes(a));
        // Half the space away is "behind" (the most negative value), as in Soft-RoCE.
        assert_eq!(Psn::new(0).distance_to(Psn::new(1 << 23)), -(1 << 23));
        assert_eq!(
            Psn::new(0).distance_to(Psn::new((1 << 23) - 1)),
            (1 << 23) - 1
        );
    }

    #[test]
    fn window_membership_across_the_wrap() {
        let start = Psn::new(0xFF_FFFC);
        for k in 0..8 {
            assert!(start.add(k).is_within_window(start, 8), "k = {k}");
        }
        assert!(!start.add(8).is_within_window(start, 8));
        assert!(!start.sub(1).is_within_window(start, 8));
        assert!(!start.is_within_window(start, 0));
        assert!(Psn::new(12345).is_within_window(start, Psn::MODULUS));
    }
}
