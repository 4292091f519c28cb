//! The in-memory subscriber table: every provisioned profile, by IMSI, with
//! an MSISDN index. It is the read path for CCRs (the store is read once at
//! start-up), sharded so lookups never contend.

use crate::subscriber::Subscriber;
use dashmap::DashMap;
use std::sync::Arc;

/// All subscribers.
#[derive(Default)]
pub struct SubscriberTable {
    by_imsi: DashMap<String, Arc<Subscriber>>,
    imsi_by_msisdn: DashMap<String, String>,
}

impl SubscriberTable {
    pub fn get(&self, imsi: &str) -> Option<Arc<Subscriber>> {
        self.by_imsi.get(imsi).map(|s| s.value().clone())
    }

    pub fn by_msisdn(&self, msisdn: &str) -> Option<Arc<Subscriber>> {
        let imsi = self.imsi_by_msisdn.get(msisdn)?.value().clone();
        self.get(&imsi)
    }

    /// Inserts or replaces; returns the previous profile.
    pub fn put(&self, s: Arc<Subscriber>) -> Option<Arc<Subscriber>> {
        let prev = self.by_imsi.insert(s.imsi.clone(), s.clone());
        if let Some(old) = prev.as_ref().and_then(|p| p.msisdn.as_ref()) {
            if s.msisdn.as_ref() != Some(old) {
                self.imsi_by_msisdn.remove(old);
            }
        }
        if let Some(m) = &s.msisdn {
            self.imsi_by_msisdn.insert(m.clone(), s.imsi.clone());
        }
        prev
    }

    pub fn remove(&self, imsi: &str) -> Option<Arc<Subscriber>> {
        let (_, prev) = self.by_imsi.remove(imsi)?;
        if let Some(m) = &prev.msisdn {
            self.imsi_by_msisdn.remove(m);
        }
        Some(prev)
    }

    pub fn len(&self) -> usize {
        self.by_imsi.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(imsi: &str, msisdn: Option<&str>) -> Arc<Subscriber> {
        Arc::new(Subscriber {
            imsi: imsi.into(),
            msisdn: msisdn.map(Into::into),
            ..Default::default()
        })
    }

    #[test]
    fn msisdn_index_follows_changes() {
        let t = SubscriberTable::default();
        assert!(t
            .put(sub("001010000000001", Some("491700000001")))
            .is_none());
        assert_eq!(
            t.by_msisdn("491700000001").map(|s| s.imsi.clone()),
            Some("001010000000001".into())
        );
        t.put(sub("001010000000001", Some("491700000002")));
        assert!(t.by_msisdn("491700000001").is_none());
        assert!(t.by_msisdn("491700000002").is_some());
        assert_eq!(t.len(), 1);
        t.remove("001010000000001");
        assert!(t.by_msisdn("491700000002").is_none());
        assert!(t.is_empty());
    }
}
