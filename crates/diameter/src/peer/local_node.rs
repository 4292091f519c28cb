//! Who we are on the Diameter network: the identity and capabilities we
//! advertise in CER/CEA and put in every message we originate.

use super::application::Application;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Our identity (RFC 6733 §5.3.1, §5.3.2). Cheap to share: the transport
/// keeps it in an `Arc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalNode {
    /// Origin-Host: our DiameterIdentity (FQDN).
    pub origin_host: String,
    /// Origin-Realm.
    pub origin_realm: String,
    /// Host-IP-Address values; when empty the transport advertises the
    /// connection's local address.
    pub host_ip_addresses: Vec<IpAddr>,
    /// Vendor-Id (0 when none assigned).
    pub vendor_id: u32,
    /// Product-Name.
    pub product_name: String,
    /// Firmware-Revision, if any.
    pub firmware_revision: Option<u32>,
    /// Origin-State-Id: must grow on every restart (RFC 6733 §8.16).
    pub origin_state_id: u32,
    /// Applications we advertise.
    pub applications: Vec<Application>,
    /// Supported-Vendor-Id values (e.g. 10415 for 3GPP).
    pub supported_vendor_ids: Vec<u32>,
}

impl LocalNode {
    /// A node with the given identity, Product-Name of this crate, and an
    /// Origin-State-Id taken from the clock (so it grows across restarts).
    /// Add applications with [`with_application`](Self::with_application).
    pub fn new(origin_host: impl Into<String>, origin_realm: impl Into<String>) -> LocalNode {
        let state = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() as u32);
        LocalNode {
            origin_host: origin_host.into(),
            origin_realm: origin_realm.into(),
            host_ip_addresses: Vec::new(),
            vendor_id: 0,
            product_name: env!("CARGO_PKG_NAME").to_owned(),
            firmware_revision: None,
            origin_state_id: state,
            applications: Vec::new(),
            supported_vendor_ids: Vec::new(),
        }
    }

    /// Adds an advertised application; a vendor-specific one also adds its
    /// vendor to Supported-Vendor-Id.
    pub fn with_application(mut self, app: Application) -> LocalNode {
        if let Some(v) = app.vendor() {
            if !self.supported_vendor_ids.contains(&v) {
                self.supported_vendor_ids.push(v);
            }
        }
        if !self.applications.contains(&app) {
            self.applications.push(app);
        }
        self
    }

    /// Adds a Host-IP-Address.
    pub fn with_host_ip(mut self, ip: IpAddr) -> LocalNode {
        self.host_ip_addresses.push(ip);
        self
    }
}
