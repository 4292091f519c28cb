//! Applications a node advertises in CER/CEA and the set both sides share
//! after the exchange (RFC 6733 §5.3, §6.1.1): the only applications whose
//! requests may flow on the connection.

use crate::dict::app;

/// One advertised application: authentication/authorization or accounting,
/// optionally vendor-specific (sent inside Vendor-Specific-Application-Id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Application {
    Auth { id: u32, vendor: Option<u32> },
    Acct { id: u32, vendor: Option<u32> },
}

impl Application {
    /// A plain Auth-Application-Id.
    pub const fn auth(id: u32) -> Application {
        Application::Auth { id, vendor: None }
    }
    /// An Auth-Application-Id inside Vendor-Specific-Application-Id (3GPP Gx, Rx...).
    pub const fn auth_vendor(id: u32, vendor: u32) -> Application {
        Application::Auth {
            id,
            vendor: Some(vendor),
        }
    }
    /// A plain Acct-Application-Id.
    pub const fn acct(id: u32) -> Application {
        Application::Acct { id, vendor: None }
    }
    /// An Acct-Application-Id inside Vendor-Specific-Application-Id.
    pub const fn acct_vendor(id: u32, vendor: u32) -> Application {
        Application::Acct {
            id,
            vendor: Some(vendor),
        }
    }
    /// The application id.
    pub const fn id(&self) -> u32 {
        match *self {
            Application::Auth { id, .. } | Application::Acct { id, .. } => id,
        }
    }
    /// The vendor id, for vendor-specific applications.
    pub const fn vendor(&self) -> Option<u32> {
        match *self {
            Application::Auth { vendor, .. } | Application::Acct { vendor, .. } => vendor,
        }
    }
    /// Whether this is the relay application (0xffffffff), which matches all.
    pub const fn is_relay(&self) -> bool {
        self.id() == app::RELAY
    }
}

/// The applications both peers support, from the capabilities exchange.
/// Base messages (application 0) are always allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NegotiatedApps {
    /// Either side advertised relay: every application is allowed.
    all: bool,
    ids: Vec<u32>,
}

impl NegotiatedApps {
    /// The intersection of what we advertise with what the peer advertised
    /// (application ids, auth and acct alike). Relay on either side matches
    /// everything the other side has; relay on both matches all.
    pub fn intersect(local: &[Application], remote: &[Application]) -> NegotiatedApps {
        let local_relay = local.iter().any(Application::is_relay);
        let remote_relay = remote.iter().any(Application::is_relay);
        if local_relay && remote_relay {
            return NegotiatedApps {
                all: true,
                ids: Vec::new(),
            };
        }
        let mut ids: Vec<u32> = if local_relay {
            remote.iter().map(Application::id).collect()
        } else if remote_relay {
            local.iter().map(Application::id).collect()
        } else {
            local
                .iter()
                .filter(|l| remote.iter().any(|r| r.id() == l.id()))
                .map(Application::id)
                .collect()
        };
        ids.retain(|&id| id != app::DIAMETER_COMMON_MESSAGES);
        ids.sort_unstable();
        ids.dedup();
        NegotiatedApps { all: false, ids }
    }

    /// Whether nothing is shared (the exchange must fail with 5010).
    pub fn is_empty(&self) -> bool {
        !self.all && self.ids.is_empty()
    }

    /// Whether requests of `app_id` may flow on this connection.
    #[inline]
    pub fn contains(&self, app_id: u32) -> bool {
        self.all || app_id == app::DIAMETER_COMMON_MESSAGES || self.ids.contains(&app_id)
    }

    /// Whether every application is allowed (relay).
    pub fn is_all(&self) -> bool {
        self.all
    }

    /// The shared application ids (empty when [`is_all`](Self::is_all)).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GX: u32 = 16_777_238;
    const RX: u32 = 16_777_236;

    #[test]
    fn intersection_by_id() {
        let local = [
            Application::auth_vendor(GX, 10415),
            Application::auth_vendor(RX, 10415),
        ];
        let n = NegotiatedApps::intersect(&local, &[Application::auth(GX)]);
        assert!(n.contains(GX));
        assert!(!n.contains(RX));
        assert!(n.contains(0));
        assert!(!n.is_empty());
        let none = NegotiatedApps::intersect(&local, &[Application::auth(4)]);
        assert!(none.is_empty());
        assert!(!none.contains(GX));
    }

    #[test]
    fn relay_matches_all() {
        let local = [Application::auth(GX)];
        let n = NegotiatedApps::intersect(&local, &[Application::auth(app::RELAY)]);
        assert!(n.contains(GX) && !n.contains(RX));
        let n =
            NegotiatedApps::intersect(&[Application::auth(app::RELAY)], &[Application::auth(RX)]);
        assert!(n.contains(RX) && !n.contains(GX));
        let both = [Application::auth(app::RELAY)];
        let n = NegotiatedApps::intersect(&both, &both);
        assert!(n.is_all() && n.contains(GX));
    }
}
