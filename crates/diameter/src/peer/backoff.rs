//! When an initiator tries to connect again: exponential backoff from
//! `reconnect_initial` doubling up to Tc, each delay jittered into its upper
//! half so that many peers restarting together do not reconnect in step
//! (a whole region of gateways reconnecting at once after an outage
//! would otherwise hit the server in waves). A DPR's Disconnect-Cause
//! changes the next delay as RFC 6733 §5.4.3 says.

use super::disconnect_cause::DisconnectCause;
use super::jitter::Jitter;
use std::time::Duration;

/// Reconnect delays for one initiator.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    refused_holdoff: Option<Duration>,
    current: Duration,
    jitter: Jitter,
}

impl Backoff {
    /// Delays start at `initial` and double up to `cap` (Tc). After a DPR
    /// that asks us not to come back, wait `refused_holdoff` (`None`: stop).
    pub fn new(
        initial: Duration,
        cap: Duration,
        refused_holdoff: Option<Duration>,
        jitter: Jitter,
    ) -> Backoff {
        let initial = initial
            .max(Duration::from_millis(1))
            .min(cap.max(Duration::from_millis(1)));
        Backoff {
            initial,
            cap: cap.max(initial),
            refused_holdoff,
            current: initial,
            jitter,
        }
    }

    /// The delay before the next attempt after a failed or lost connection:
    /// uniformly in `[d/2, d]`, then `d` doubles (capped).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.cap);
        self.jitter.between(d / 2, d)
    }

    /// The connection reached Open: start again from the initial delay.
    pub fn reset(&mut self) {
        self.current = self.initial;
    }

    /// The delay before reconnecting after the peer closed with DPR.
    /// REBOOTING: the peer is coming back; try from the initial delay.
    /// BUSY, DO_NOT_WANT_TO_TALK_TO_YOU: the RFC says SHOULD NOT reconnect;
    /// wait the configured hold-off, or `None` (never) if there is none.
    pub fn after_peer_disconnect(&mut self, cause: Option<DisconnectCause>) -> Option<Duration> {
        match cause {
            Some(c) if !c.allows_reconnect() => {
                self.current = self.cap;
                self.refused_holdoff
            }
            _ => {
                self.reset();
                Some(self.next_delay())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(30),
            Some(Duration::from_secs(300)),
            Jitter::seeded(7),
        )
    }

    #[test]
    fn doubles_capped_and_jittered() {
        let mut b = backoff();
        let mut upper = Duration::from_secs(1);
        for _ in 0..10 {
            let d = b.next_delay();
            assert!(d >= upper / 2 && d <= upper, "{d:?} for {upper:?}");
            upper = (upper * 2).min(Duration::from_secs(30));
        }
        assert!(b.next_delay() >= Duration::from_secs(15));
        b.reset();
        assert!(b.next_delay() <= Duration::from_secs(1));
    }

    #[test]
    fn disconnect_cause_changes_the_wait() {
        let mut b = backoff();
        for _ in 0..5 {
            b.next_delay();
        }
        let d = b
            .after_peer_disconnect(Some(DisconnectCause::Rebooting))
            .expect("reconnect");
        assert!(d <= Duration::from_secs(1));
        assert_eq!(
            b.after_peer_disconnect(Some(DisconnectCause::Busy)),
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            b.after_peer_disconnect(Some(DisconnectCause::DoNotWantToTalkToYou)),
            Some(Duration::from_secs(300))
        );
        let mut never = Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(30),
            None,
            Jitter::seeded(1),
        );
        assert_eq!(
            never.after_peer_disconnect(Some(DisconnectCause::Busy)),
            None
        );
        assert!(never.after_peer_disconnect(None).is_some());
    }
}
