//! Text that thousands of sessions hold alike: the PCEF's Origin-Host and
//! Origin-Realm, the APN. A node serves a handful of gateways and APNs and
//! hundreds of thousands of sessions; each session holding its own copy
//! of "pgw1.epc.mnc001.mcc001.3gppnetwork.org" spent about 130 bytes a
//! session on three strings that a few dozen allocations hold for all.
//!
//! `shared` returns the node's one `Arc<str>` of a text, made on first
//! use. The set is bounded: past `MAX_SHARED` distinct texts (a peer
//! inventing APNs), a text gets an allocation of its own, as before, so
//! no input can make the set grow without end. Looked up when a session
//! is created or read back from the store, never on an update that
//! changes nothing.

use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

/// The most distinct texts shared; far above the gateways and APNs of
/// any node.
pub const MAX_SHARED: usize = 4096;

fn set() -> &'static RwLock<HashSet<Arc<str>>> {
    static SET: OnceLock<RwLock<HashSet<Arc<str>>>> = OnceLock::new();
    SET.get_or_init(|| RwLock::new(HashSet::new()))
}

/// The node's shared copy of `text` (a copy of its own once the set is
/// full).
pub fn shared(text: &str) -> Arc<str> {
    if let Some(s) = set().read().get(text) {
        return s.clone();
    }
    let mut all = set().write();
    if let Some(s) = all.get(text) {
        return s.clone();
    }
    let s: Arc<str> = Arc::from(text);
    if all.len() < MAX_SHARED {
        all.insert(s.clone());
    }
    s
}

/// `deserialize_with` for a shared text.
pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    let text: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
    Ok(shared(&text))
}

/// `deserialize_with` for an optional shared text.
pub(crate) fn deserialize_opt<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Arc<str>>, D::Error> {
    let text: Option<std::borrow::Cow<'de, str>> = serde::Deserialize::deserialize(d)?;
    Ok(text.map(|t| shared(&t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_share_one_allocation() {
        let a = shared("pgw1.shared-text.test");
        let b = shared(&String::from("pgw1.shared-text.test"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &shared("pgw2.shared-text.test")));
        assert_eq!(&*a, "pgw1.shared-text.test");
    }

    #[test]
    fn a_record_read_back_shares_its_host_realm_and_apn() {
        let mut s = crate::session::GxSession::new(
            "gx;shared",
            "001",
            "pgw.shared-text.test",
            "realm.shared-text.test",
            1,
        );
        s.apn = Some(shared("apn.shared-text.test"));
        let bytes = crate::store::blob::encode_session(&s).expect("encodes");
        let mut skipped = 0;
        let back =
            crate::store::blob::decode_session(&mut skipped, "gx;shared", &bytes).expect("decodes");
        assert!(Arc::ptr_eq(&back.pcef_host, &s.pcef_host));
        assert!(Arc::ptr_eq(&back.pcef_realm, &s.pcef_realm));
        assert!(matches!((&back.apn, &s.apn), (Some(a), Some(b)) if Arc::ptr_eq(a, b)));
        assert_eq!(back, s);
    }
}
