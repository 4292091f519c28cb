//! Which peer may act on a session. Any admitted peer can put any
//! Session-Id in a request, so a Gx, Sd or Rx request on a session that
//! exists is served only when it comes from the session's peer (the
//! Origin-Host its last request came from, where its RARs go) or from a
//! peer the operator declared its fail-over partner (the same
//! `failover_group` on both `[[peers]]` entries). Every application asks
//! here, so the rule is one rule.
//!
//! The Origin-Host of a request can be trusted for this: the transport
//! refuses a request naming another Origin-Host than its connection's
//! peer unless that peer is a configured relay, and a relay (the
//! cluster's routing agent) keeps the originator's Origin-Host, so a
//! session taken over by another node of a cluster is still its PCEF's.
//!
//! A refused request is answered 5002 DIAMETER_UNKNOWN_SESSION_ID, the
//! answer to a Session-Id that does not exist: the prober cannot tell a
//! session of another peer from none, and nothing of it is applied,
//! replayed or moved.

use crate::config::PeerConfig;
use crate::node::Sessions;
use std::sync::atomic::Ordering::Relaxed;

/// Who sends a request on a session, as seen from the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Requester {
    /// The session's own peer: served, and only it gets a kept answer
    /// replayed (it asked for it).
    Holder,
    /// A peer of the same failover group as the session's peer: served,
    /// and the session's requests go to it from then on.
    Partner,
    /// Any other peer: refused with 5002, nothing applied.
    Stranger,
}

impl Requester {
    pub(crate) fn is_served(self) -> bool {
        self != Requester::Stranger
    }
}

/// Who `origin` is to a session held by `holder`, by the `[[peers]]`
/// entries' failover groups. Diameter identities compare without case.
pub(crate) fn requester(peers: &[PeerConfig], holder: &str, origin: &str) -> Requester {
    if holder.eq_ignore_ascii_case(origin) {
        return Requester::Holder;
    }
    let group_of = |host: &str| {
        peers
            .iter()
            .find(|p| p.origin_host.eq_ignore_ascii_case(host))
            .and_then(|p| p.failover_group.as_deref())
    };
    match (group_of(holder), group_of(origin)) {
        (Some(a), Some(b)) if a == b => Requester::Partner,
        _ => Requester::Stranger,
    }
}

impl Sessions {
    /// Who `origin` is to `session`, held by `holder`, by the failover
    /// groups in force. A stranger is counted
    /// (`pcrf_foreign_session_requests_total`) and logged at debug level
    /// only: a peer that keeps trying must not flood the log.
    pub(crate) fn requester(&self, session: &str, holder: &str, origin: &str) -> Requester {
        let who = requester(&self.node.live.load().cfg.peers, holder, origin);
        if who == Requester::Stranger {
            self.node
                .telemetry
                .counters
                .foreign_session_requests
                .fetch_add(1, Relaxed);
            tracing::debug!(
                session,
                holder,
                origin,
                "request on another peer's session refused (5002)"
            );
        }
        who
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn peers() -> Vec<PeerConfig> {
        Config::parse(
            "[[peers]]\norigin_host = \"pgw1.example\"\nfailover_group = \"pair\"\n\
             [[peers]]\norigin_host = \"pgw2.example\"\nfailover_group = \"pair\"\n\
             [[peers]]\norigin_host = \"pgw3.example\"\nfailover_group = \"other\"\n\
             [[peers]]\norigin_host = \"pgw4.example\"\nfailover_group = \"other\"\n\
             [[peers]]\norigin_host = \"pgw5.example\"\n",
            "c.toml",
        )
        .expect("config")
        .peers
    }

    #[test]
    fn the_holder_and_its_group_are_served_everyone_else_is_not() {
        let p = peers();
        assert_eq!(
            requester(&p, "pgw1.example", "PGW1.example"),
            Requester::Holder
        );
        assert_eq!(
            requester(&p, "pgw1.example", "pgw2.example"),
            Requester::Partner
        );
        assert_eq!(
            requester(&p, "pgw1.example", "pgw3.example"),
            Requester::Stranger,
            "another group"
        );
        assert_eq!(
            requester(&p, "pgw5.example", "pgw1.example"),
            Requester::Stranger,
            "a holder in no group"
        );
        assert_eq!(
            requester(&p, "unlisted.example", "pgw5.example"),
            Requester::Stranger,
            "neither in a group"
        );
        assert_eq!(
            requester(&[], "pgw1.example", "pgw2.example"),
            Requester::Stranger,
            "no [[peers]] at all"
        );
    }
}
