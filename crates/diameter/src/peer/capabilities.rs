//! The capabilities carried by CER and CEA (RFC 6733 §5.3): encoding ours,
//! decoding the peer's. Decoding matches AVPs by code and vendor only, so a
//! peer that sends Origin-Host/Origin-Realm without the M bit is accepted.

use super::application::Application;
use super::local_node::LocalNode;
use crate::codec::{missing_avp, DiameterError, Message, MessageBuilder};
use crate::dict::avp;
use std::net::IpAddr;

/// What the peer told us about itself in its CER or CEA.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerCapabilities {
    pub origin_host: String,
    pub origin_realm: String,
    pub host_ip_addresses: Vec<IpAddr>,
    pub vendor_id: u32,
    pub product_name: String,
    pub firmware_revision: Option<u32>,
    pub origin_state_id: Option<u32>,
    pub supported_vendor_ids: Vec<u32>,
    pub applications: Vec<Application>,
}

impl PeerCapabilities {
    /// Decodes a CER or CEA. Origin-Host and Origin-Realm are required
    /// (5005 with an example Failed-AVP when missing); anything malformed is
    /// the error the codec reports (5014, 5004...).
    pub fn parse(msg: &Message) -> Result<PeerCapabilities, DiameterError> {
        let mut caps = PeerCapabilities::default();
        let mut have_host = false;
        let mut have_realm = false;
        for a in msg.avps() {
            let a = a?;
            if a.vendor() != 0 {
                continue;
            }
            match a.code() {
                c if c == avp::ORIGIN_HOST.code => {
                    caps.origin_host = a.as_identity()?.to_owned();
                    have_host = true;
                }
                c if c == avp::ORIGIN_REALM.code => {
                    caps.origin_realm = a.as_identity()?.to_owned();
                    have_realm = true;
                }
                c if c == avp::HOST_IP_ADDRESS.code => {
                    caps.host_ip_addresses.push(a.as_address()?);
                }
                c if c == avp::VENDOR_ID.code => caps.vendor_id = a.as_u32()?,
                c if c == avp::PRODUCT_NAME.code => caps.product_name = a.as_str()?.to_owned(),
                c if c == avp::FIRMWARE_REVISION.code => caps.firmware_revision = Some(a.as_u32()?),
                c if c == avp::ORIGIN_STATE_ID.code => caps.origin_state_id = Some(a.as_u32()?),
                c if c == avp::SUPPORTED_VENDOR_ID.code => {
                    caps.supported_vendor_ids.push(a.as_u32()?)
                }
                c if c == avp::AUTH_APPLICATION_ID.code => {
                    caps.applications.push(Application::auth(a.as_u32()?))
                }
                c if c == avp::ACCT_APPLICATION_ID.code => {
                    caps.applications.push(Application::acct(a.as_u32()?))
                }
                c if c == avp::VENDOR_SPECIFIC_APPLICATION_ID.code => {
                    let mut vendor = None;
                    let mut app = None;
                    for g in a.grouped() {
                        let g = g?;
                        if g.is(avp::VENDOR_ID) {
                            vendor.get_or_insert(g.as_u32()?);
                        } else if g.is(avp::AUTH_APPLICATION_ID) {
                            app = Some((true, g.as_u32()?));
                        } else if g.is(avp::ACCT_APPLICATION_ID) {
                            app = Some((false, g.as_u32()?));
                        }
                    }
                    match app {
                        Some((true, id)) => {
                            caps.applications.push(Application::Auth { id, vendor })
                        }
                        Some((false, id)) => {
                            caps.applications.push(Application::Acct { id, vendor })
                        }
                        None => {
                            return Err(a.invalid_value(
                                "Vendor-Specific-Application-Id without an application id",
                            ))
                        }
                    }
                }
                _ => {}
            }
        }
        if !have_host {
            return Err(missing_avp(avp::ORIGIN_HOST, "Origin-Host"));
        }
        if !have_realm {
            return Err(missing_avp(avp::ORIGIN_REALM, "Origin-Realm"));
        }
        Ok(caps)
    }
}

/// Appends our capabilities AVPs (everything of CER/CEA after Result-Code)
/// to a CER or CEA being built. `fallback_ip` is used as Host-IP-Address
/// when the node lists none (the connection's local address).
pub fn encode_capabilities(
    b: &mut MessageBuilder<'_>,
    local: &LocalNode,
    fallback_ip: Option<IpAddr>,
) {
    b.origin(&local.origin_host, &local.origin_realm);
    if local.host_ip_addresses.is_empty() {
        if let Some(ip) = fallback_ip {
            b.address(avp::HOST_IP_ADDRESS, ip);
        }
    }
    for ip in &local.host_ip_addresses {
        b.address(avp::HOST_IP_ADDRESS, *ip);
    }
    b.u32(avp::VENDOR_ID, local.vendor_id)
        .str(avp::PRODUCT_NAME, &local.product_name)
        .u32(avp::ORIGIN_STATE_ID, local.origin_state_id);
    for v in &local.supported_vendor_ids {
        b.u32(avp::SUPPORTED_VENDOR_ID, *v);
    }
    for app in &local.applications {
        match *app {
            Application::Auth { id, vendor: None } => {
                b.u32(avp::AUTH_APPLICATION_ID, id);
            }
            Application::Acct { id, vendor: None } => {
                b.u32(avp::ACCT_APPLICATION_ID, id);
            }
            Application::Auth {
                id,
                vendor: Some(v),
            } => {
                b.group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                    g.u32(avp::VENDOR_ID, v).u32(avp::AUTH_APPLICATION_ID, id);
                });
            }
            Application::Acct {
                id,
                vendor: Some(v),
            } => {
                b.group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                    g.u32(avp::VENDOR_ID, v).u32(avp::ACCT_APPLICATION_ID, id);
                });
            }
        }
    }
    if let Some(fw) = local.firmware_revision {
        b.u32(avp::FIRMWARE_REVISION, fw);
    }
}
