//! Overload control: a bound on Gx requests being worked on across the
//! whole node. Past it a request is answered DIAMETER_TOO_BUSY (3004) at
//! once instead of queueing without limit. New sessions (CCR-I) are shed
//! first: they are admitted only below a share of the bound, so under
//! overload the CCR-U and CCR-T that report usage and release resources
//! still get through.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Share of the bound (in percent) above which new sessions are refused.
const INITIAL_SHARE_PERCENT: usize = 80;

/// Which class a request is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Creates state (CCR-I): shed first.
    New,
    /// Updates or releases state (CCR-U, CCR-T).
    Existing,
}

/// The node-wide bound.
pub struct Admission {
    limit: usize,
    in_flight: AtomicUsize,
    shed_new: AtomicU64,
    shed_existing: AtomicU64,
}

/// Held while a request is worked on.
pub struct Permit<'a>(&'a Admission);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

impl Admission {
    pub fn new(limit: usize) -> Admission {
        Admission {
            limit: limit.max(1),
            in_flight: AtomicUsize::new(0),
            shed_new: AtomicU64::new(0),
            shed_existing: AtomicU64::new(0),
        }
    }

    /// A permit, or None when the request must be answered 3004.
    pub fn admit(&self, class: Class) -> Option<Permit<'_>> {
        let cap = match class {
            Class::New => (self.limit * INITIAL_SHARE_PERCENT / 100).max(1),
            Class::Existing => self.limit,
        };
        let prev = self.in_flight.fetch_add(1, Relaxed);
        if prev >= cap {
            self.in_flight.fetch_sub(1, Relaxed);
            match class {
                Class::New => self.shed_new.fetch_add(1, Relaxed),
                Class::Existing => self.shed_existing.fetch_add(1, Relaxed),
            };
            return None;
        }
        Some(Permit(self))
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// Requests shed so far: (new sessions, existing sessions).
    pub fn shed(&self) -> (u64, u64) {
        (
            self.shed_new.load(Relaxed),
            self.shed_existing.load(Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_sessions_are_shed_first() {
        let a = Admission::new(10);
        let held: Vec<_> = (0..8)
            .map(|_| a.admit(Class::New).expect("below 80%"))
            .collect();
        assert!(a.admit(Class::New).is_none(), "CCR-I refused at 80%");
        let more: Vec<_> = (0..2)
            .map(|_| a.admit(Class::Existing).expect("room for U/T"))
            .collect();
        assert!(
            a.admit(Class::Existing).is_none(),
            "everything refused at 100%"
        );
        assert_eq!(a.shed(), (1, 1));
        assert_eq!(a.in_flight(), 10);
        drop(held);
        drop(more);
        assert_eq!(a.in_flight(), 0);
        assert!(a.admit(Class::New).is_some());
    }
}
