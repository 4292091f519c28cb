//! Election (RFC 6733 §5.6.4): when both peers connect to each other at
//! once, only one connection may survive.
//!
//! The RFC: the responder compares the Origin-Host in the received CER with
//! its own "as two streams of octets"; if ours is higher it wins, closes its
//! own initiator connection and answers the CER; the loser closes the
//! connection it accepted and keeps the one it initiated. Either way the
//! survivor is the connection initiated by the lower Origin-Host.
//!
//! What this stack does: DiameterIdentity is an FQDN and FQDNs compare
//! case-insensitively, so we compare ASCII-lowercased octets. The transport
//! applies the election when a CER arrives for an Origin-Host whose
//! connection we initiated is still waiting for its CEA. If we win, our
//! initiator connection is closed and the CER is answered with success; if
//! we lose, the CER is answered with 4003 ELECTION_LOST and that connection
//! closed, and our initiator connection goes on. A CER for an Origin-Host
//! that already has an Open connection first probes that connection with a
//! DWR ([`crate::peer::PeerMachine::probe`], bounded by
//! `PeerSettings::replace_probe`): if it answers, the CER is refused with
//! 5012 DIAMETER_UNABLE_TO_COMPLY (RFC 6733 state table: R-Open +
//! R-Conn-CER -> R-Reject); if it stays silent, it is the half-open
//! leftover of a peer that restarted, and it is closed and the new one
//! accepted. Origin-State-Id plays no part: anyone who may connect could
//! present a new one, and a restarted peer may send none.

/// The outcome of an election for the local node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Election {
    /// Keep the connection the peer initiated, close ours.
    Won,
    /// Keep the connection we initiated, close the peer's.
    Lost,
}

/// Whether `local` wins against `remote` (RFC 6733 §5.6.4, case-insensitive).
pub fn wins_election(local: &str, remote: &str) -> Election {
    let l = local.bytes().map(|b| b.to_ascii_lowercase());
    let r = remote.bytes().map(|b| b.to_ascii_lowercase());
    if l.cmp(r) == std::cmp::Ordering::Greater {
        Election::Won
    } else {
        Election::Lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_origin_host_wins() {
        assert_eq!(
            wins_election("pcrf-b.example", "pcrf-a.example"),
            Election::Won
        );
        assert_eq!(
            wins_election("pcrf-a.example", "pcrf-b.example"),
            Election::Lost
        );
        assert_eq!(
            wins_election("PCRF-B.example", "pcrf-a.example"),
            Election::Won
        );
        assert_eq!(wins_election("abc", "ab"), Election::Won);
        // Equal names cannot both win: the responder loses.
        assert_eq!(wins_election("same", "SAME"), Election::Lost);
    }
}
