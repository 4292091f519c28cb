//! A small, fast pseudo-random source for timer jitter (RFC 3539 §3.4.1,
//! reconnect backoff). Not for anything secret. Seedable, so tests of the
//! state machine are deterministic.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// xorshift64* generator.
#[derive(Clone, Debug)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    /// A generator with a fixed seed (tests).
    pub fn seeded(seed: u64) -> Jitter {
        Jitter {
            state: seed | 1, // xorshift must not start at zero
        }
    }

    /// A generator seeded from the process's hash randomness.
    pub fn from_entropy() -> Jitter {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x9e37_79b9_7f4a_7c15);
        Jitter::seeded(h.finish())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A duration uniformly in `[base - spread, base + spread]` (clipped at zero).
    pub fn around(&mut self, base: Duration, spread: Duration) -> Duration {
        self.between(base.saturating_sub(spread), base + spread)
    }

    /// A duration uniformly in `[low, high]`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high
            .saturating_sub(low)
            .as_nanos()
            .min(u64::MAX as u128 - 1) as u64;
        low + Duration::from_nanos(self.next_u64() % (span + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_bounds() {
        let mut j = Jitter::seeded(42);
        let base = Duration::from_secs(30);
        let two = Duration::from_secs(2);
        let mut seen_low = false;
        let mut seen_high = false;
        for _ in 0..10_000 {
            let d = j.around(base, two);
            assert!(d >= base - two && d <= base + two, "{d:?}");
            seen_low |= d < base - Duration::from_millis(1500);
            seen_high |= d > base + Duration::from_millis(1500);
            let b = j.between(Duration::from_secs(1), Duration::from_secs(2));
            assert!(b >= Duration::from_secs(1) && b <= Duration::from_secs(2));
        }
        assert!(seen_low && seen_high, "jitter covers the whole window");
        let small = j.around(Duration::from_millis(100), two);
        assert!(small <= Duration::from_millis(100) + two);
    }
}
