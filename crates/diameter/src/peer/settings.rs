//! Per-connection protocol settings: timers (RFC 6733 Tc, RFC 3539 Tw),
//! limits, and which peers may connect.

use std::net::IpAddr;
use std::time::Duration;

/// A peer allowed to connect: its Origin-Host and, when not empty, the
/// source addresses it may connect from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedPeer {
    pub origin_host: String,
    /// Empty means any address.
    pub addresses: Vec<IpAddr>,
}

/// Timers and limits. `Default` gives the RFC values.
#[derive(Clone, Debug)]
pub struct PeerSettings {
    /// Watchdog interval Tw (RFC 3539 §3.4.1: default 30 s, at least 6 s;
    /// each interval is jittered by ±2 s).
    pub tw: Duration,
    /// Tc: the longest wait between reconnection attempts (RFC 6733 §2.1
    /// recommends 30 s); the backoff grows up to it.
    pub tc: Duration,
    /// The first reconnection delay; doubles per failure up to `tc`.
    pub reconnect_initial: Duration,
    /// After a DPR with BUSY or DO_NOT_WANT_TO_TALK_TO_YOU the RFC says not
    /// to reconnect; an initiator waits this long instead (`None`: never).
    pub refused_holdoff: Option<Duration>,
    /// How long to wait for CER (responder) or CEA (initiator).
    pub cer_timeout: Duration,
    /// How long to wait for DPA after sending DPR before closing anyway.
    pub dpa_timeout: Duration,
    /// How long a locally originated request waits for its answer.
    pub request_timeout: Duration,
    /// The largest message accepted (default 1 MiB); longer closes the connection.
    pub max_message_len: u32,
    /// Requests from the peer handled at once; beyond it they are answered
    /// 3004 DIAMETER_TOO_BUSY.
    pub max_in_flight: usize,
    /// `None` accepts any peer; otherwise a peer not listed gets 3010
    /// DIAMETER_UNKNOWN_PEER and is disconnected.
    pub allowed_peers: Option<Vec<AllowedPeer>>,
    /// Origin-Hosts that must connect over TLS: over plain TCP their CER is
    /// answered 3010 DIAMETER_UNKNOWN_PEER. Case-insensitive.
    pub tls_required: Vec<String>,
    /// Origin-Hosts of relays (DRAs): their connections may carry requests
    /// whose Origin-Host names another node. Any other peer's request must
    /// name the peer itself, else it is answered 3010 DIAMETER_UNKNOWN_PEER
    /// (E bit) without reaching the application. Case-insensitive.
    pub relays: Vec<String>,
    /// When a CER arrives for a peer that already has an open connection,
    /// that connection is probed with a DWR: if nothing comes back within
    /// this bound it is taken for dead (a half-open connection of a
    /// restarted peer) and replaced; if it answers, it stays and the new
    /// CER is refused 5012.
    pub replace_probe: Duration,
    /// Accepted connections that have not yet completed CER, at most. A
    /// further one closes the oldest of them (each costs a task, buffers
    /// and a socket; a flood of silent connections must not grow memory
    /// without bound). At least 1.
    pub max_awaiting_cer: usize,
    /// The largest message a connection may send before its capabilities
    /// exchange is done (default 16 KiB; a CER or CEA is a few hundred
    /// bytes). A longer announced length closes the connection before any
    /// of the message is buffered. Capped by `max_message_len`.
    pub max_message_len_awaiting_cer: u32,
    /// The bytes all connections awaiting their capabilities exchange may
    /// hold together in partly received messages (default 4 MiB: the
    /// default 256 connections each with a whole 16 KiB message). A
    /// connection whose bytes would pass it is closed.
    pub max_buffered_awaiting_cer: usize,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            tw: Duration::from_secs(30),
            tc: Duration::from_secs(30),
            reconnect_initial: Duration::from_secs(1),
            refused_holdoff: Some(Duration::from_secs(300)),
            cer_timeout: Duration::from_secs(10),
            dpa_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            max_message_len: 1 << 20,
            // A memory cap: a request in flight holds its message and its
            // task (~10 KB), so about 250 MB for one connection.
            max_in_flight: 25_000,
            allowed_peers: None,
            tls_required: Vec::new(),
            relays: Vec::new(),
            replace_probe: Duration::from_millis(1500),
            max_awaiting_cer: 256,
            max_message_len_awaiting_cer: 16 << 10,
            max_buffered_awaiting_cer: 4 << 20,
        }
    }
}

impl PeerSettings {
    /// Whether this peer may only talk to us over TLS.
    pub fn requires_tls(&self, origin_host: &str) -> bool {
        self.tls_required
            .iter()
            .any(|h| h.eq_ignore_ascii_case(origin_host))
    }

    /// Whether this peer is a relay, which may forward requests of others.
    pub fn is_relay(&self, origin_host: &str) -> bool {
        self.relays
            .iter()
            .any(|h| h.eq_ignore_ascii_case(origin_host))
    }

    /// Whether a peer with this Origin-Host connecting from `addr` may talk
    /// to us. Origin-Host compares case-insensitively (it is an FQDN).
    pub fn is_allowed(&self, origin_host: &str, addr: Option<IpAddr>) -> bool {
        let Some(list) = &self.allowed_peers else {
            return true;
        };
        list.iter().any(|p| {
            p.origin_host.eq_ignore_ascii_case(origin_host)
                && (p.addresses.is_empty()
                    || addr.is_some_and(|a| {
                        // A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d.
                        let a = a.to_canonical();
                        p.addresses.iter().any(|x| x.to_canonical() == a)
                    }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_checks_host_and_address() {
        let mut s = PeerSettings::default();
        assert!(s.is_allowed("any.host", None));
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        let other: IpAddr = "127.0.0.2".parse().expect("ip");
        s.allowed_peers = Some(vec![
            AllowedPeer {
                origin_host: "pgw.example".into(),
                addresses: vec![lo],
            },
            AllowedPeer {
                origin_host: "af.example".into(),
                addresses: vec![],
            },
        ]);
        assert!(s.is_allowed("PGW.example", Some(lo)));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("ip");
        assert!(s.is_allowed("pgw.example", Some(mapped)));
        assert!(!s.is_allowed("pgw.example", Some(other)));
        assert!(!s.is_allowed("pgw.example", None));
        assert!(s.is_allowed("af.example", Some(other)));
        assert!(!s.is_allowed("x.example", Some(lo)));
    }
}
