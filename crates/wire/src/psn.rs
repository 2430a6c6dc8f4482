//! 24-bit packet sequence numbers (IBA 9.7.1).
//!
//! PSNs live in a 2^24 ring. Ordering is only meaningful inside half the
//! ring: `a` is *before* `b` when `b - a (mod 2^24)` lies in `1..2^23`. That
//! is the same serial-number arithmetic RFC 1982 uses, applied to 24 bits, and
//! it is what lets a requester keep going across the wrap.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Psn(u32);

impl Psn {
    /// Number of distinct PSNs.
    pub const MODULUS: u32 = 1 << 24;
    /// Mask selecting the 24 PSN bits.
    pub const MASK: u32 = Self::MODULUS - 1;
    /// Half the ring: the furthest apart two comparable PSNs may be.
    pub const HALF: u32 = 1 << 23;

    /// Makes a PSN, discarding bits above the 24th.
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as an integer in `0..2^24`.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` around the ring.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` around the ring.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The next PSN.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Forward distance from `earlier` to `self` around the ring, in `0..2^24`.
    #[inline]
    pub const fn distance_from(self, earlier: Psn) -> u32 {
        self.0.wrapping_sub(earlier.0) & Self::MASK
    }

    /// Signed distance `self - other` in `-2^23..2^23`.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        let d = self.distance_from(other);
        if d >= Self::HALF {
            d as i32 - Self::MODULUS as i32
        } else {
            d as i32
        }
    }

    /// True when `self` comes strictly before `other` in sequence order.
    #[inline]
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True when `self` comes strictly after `other` in sequence order.
    #[inline]
    pub const fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// True when `self` lies in the half-open window `[start, start + len)`.
    #[inline]
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        self.distance_from(start) < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_24() {
        let last = Psn::new(Psn::MASK);
        assert_eq!(last.next(), Psn::new(0));
        assert!(last.before(Psn::new(0)));
        assert!(Psn::new(0).after(last));
        assert_eq!(Psn::new(3).diff(last), 4);
        assert_eq!(last.diff(Psn::new(3)), -4);
        assert_eq!(Psn::new(2).sub(5), Psn::new(Psn::MASK - 2));
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
        assert!(Psn::new(1).in_window(last, 3));
        assert!(!Psn::new(2).in_window(last, 3));
    }

    proptest! {
        #[test]
        fn ordering_is_consistent_across_the_wrap(a in 0u32..Psn::MODULUS, d in 1u32..Psn::HALF) {
            let a = Psn::new(a);
            let b = a.add(d);
            prop_assert!(a.before(b));
            prop_assert!(b.after(a));
            prop_assert!(!b.before(a));
            prop_assert_eq!(b.diff(a), d as i32);
            prop_assert_eq!(a.diff(b), -(d as i32));
            prop_assert_eq!(b.distance_from(a), d);
            prop_assert_eq!(b.sub(d), a);
        }
    }
}
