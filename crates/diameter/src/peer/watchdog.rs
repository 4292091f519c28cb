//! The transport failure detection algorithm of RFC 3539 §3.4 (DWR/DWA).
//!
//! Any message from the peer resets the timer; after Tw of silence a DWR is
//! sent; if Tw passes again with no DWA the peer is SUSPECT (no new requests
//! should go to it); one more Tw and it is DOWN: the connection is closed.
//! Any message from a SUSPECT peer makes it OKAY again. Each interval is Tw
//! jittered by up to ±2 s (RFC 3539 §3.4.1), scaled down for a Tw below
//! 10 s so the jitter never exceeds a fifth of it.

use super::jitter::Jitter;
use std::time::{Duration, Instant};

/// RFC 3539 watchdog states, as far as one connection sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogState {
    Okay,
    Suspect,
    Down,
}

/// What the connection must do when the watchdog timer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogAction {
    /// Nothing (not due yet, or already down).
    None,
    /// Send a DWR.
    SendDwr,
    /// The peer became SUSPECT.
    Suspect,
    /// The peer is DOWN: close the connection.
    Down,
}

/// The watchdog of one open connection.
#[derive(Clone, Debug)]
pub struct Watchdog {
    tw: Duration,
    spread: Duration,
    deadline: Instant,
    pending: bool,
    state: WatchdogState,
    jitter: Jitter,
}

impl Watchdog {
    /// Starts in OKAY with the first interval from `now`.
    pub fn new(tw: Duration, now: Instant, jitter: Jitter) -> Watchdog {
        let spread = Duration::from_secs(2).min(tw / 5);
        let mut w = Watchdog {
            tw,
            spread,
            deadline: now,
            pending: false,
            state: WatchdogState::Okay,
            jitter,
        };
        w.rearm(now);
        w
    }

    fn rearm(&mut self, now: Instant) {
        self.deadline = now + self.jitter.around(self.tw, self.spread);
    }

    /// When the timer fires next.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The current state.
    pub fn state(&self) -> WatchdogState {
        self.state
    }

    /// Whether a DWR is waiting for its DWA.
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    /// Any message arrived from the peer (`is_dwa`: it was the DWA).
    pub fn on_receive(&mut self, now: Instant, is_dwa: bool) {
        if self.state == WatchdogState::Down {
            return;
        }
        if is_dwa {
            self.pending = false;
        }
        self.state = WatchdogState::Okay;
        self.rearm(now);
    }

    /// The timer may have fired; says what to do.
    pub fn on_timer(&mut self, now: Instant) -> WatchdogAction {
        if now < self.deadline || self.state == WatchdogState::Down {
            return WatchdogAction::None;
        }
        self.rearm(now);
        match (self.state, self.pending) {
            (WatchdogState::Okay, false) => {
                self.pending = true;
                WatchdogAction::SendDwr
            }
            (WatchdogState::Okay, true) => {
                self.state = WatchdogState::Suspect;
                WatchdogAction::Suspect
            }
            (WatchdogState::Suspect, _) => {
                self.state = WatchdogState::Down;
                WatchdogAction::Down
            }
            (WatchdogState::Down, _) => WatchdogAction::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TW: Duration = Duration::from_secs(30);

    #[test]
    fn silence_sends_dwr_then_suspect_then_down() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(TW, t0, Jitter::seeded(3));
        let first = w.deadline() - t0;
        assert!(first >= TW - Duration::from_secs(2) && first <= TW + Duration::from_secs(2));
        assert_eq!(
            w.on_timer(t0 + Duration::from_secs(27)),
            WatchdogAction::None
        );
        let t = w.deadline();
        assert_eq!(w.on_timer(t), WatchdogAction::SendDwr);
        assert!(w.is_pending());
        let t = w.deadline();
        assert_eq!(w.on_timer(t), WatchdogAction::Suspect);
        assert_eq!(w.state(), WatchdogState::Suspect);
        let t = w.deadline();
        assert_eq!(w.on_timer(t), WatchdogAction::Down);
        assert_eq!(w.state(), WatchdogState::Down);
        w.on_receive(t, true);
        assert_eq!(
            w.state(),
            WatchdogState::Down,
            "down is final for a connection"
        );
    }

    #[test]
    fn traffic_resets_and_dwa_clears() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(TW, t0, Jitter::seeded(5));
        // Traffic every 20 s: the DWR is never needed.
        let mut t = t0;
        for _ in 0..10 {
            t += Duration::from_secs(20);
            assert_eq!(w.on_timer(t), WatchdogAction::None);
            w.on_receive(t, false);
        }
        let t = w.deadline();
        assert_eq!(w.on_timer(t), WatchdogAction::SendDwr);
        w.on_receive(t + Duration::from_secs(1), true);
        assert!(!w.is_pending());
        let t = w.deadline();
        assert_eq!(w.on_timer(t), WatchdogAction::SendDwr);
        let t = w.deadline();
        assert_eq!(w.on_timer(t), WatchdogAction::Suspect);
        // Any message brings a suspect peer back.
        w.on_receive(t + Duration::from_secs(1), false);
        assert_eq!(w.state(), WatchdogState::Okay);
    }
}
