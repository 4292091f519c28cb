//! Test fixtures for the store: a unique temporary directory removed on
//! drop, and realistic session and subscriber records.

use crate::policy::decision::Decision;
use crate::session::{GxSession, SessionState};
use crate::subscriber::Subscriber;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TestDir(PathBuf);

impl TestDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("pcrf-store-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create test dir");
        TestDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn session(id: &str, subscriber: &str, updated_ms: i64) -> GxSession {
    GxSession {
        id: id.into(),
        state: SessionState::Open,
        subscriber: subscriber.into(),
        imsi: Some(subscriber.into()),
        msisdn: None,
        pcef_host: "pgw1.example".into(),
        pcef_realm: "example".into(),
        apn: Some("internet".into()),
        ue_ipv4: Some(std::net::Ipv4Addr::new(10, 1, 2, 3)),
        ue_ipv6_prefix: None,
        rat_type: Some(1004),
        ip_can_type: Some(5),
        location: Some("8200f110000100f1100001a2b3c4".into()),
        ms_timezone: None,
        device: Some("3534210112345601".into()),
        supported_features: vec![(1, 0x3)],
        installed: Decision {
            rules: vec!["internet".into()],
            ..Default::default()
        },
        rule_failures: vec![],
        last_request_number: 0,
        last_decision: None,
        last_answer: None,
        created_ms: 1_700_000_000_000,
        updated_ms,
        closed_ms: None,
    }
}

pub fn subscriber(imsi: &str) -> Subscriber {
    Subscriber {
        imsi: imsi.into(),
        msisdn: Some("4915112345678".into()),
        plan: Some("basic".into()),
        services: vec!["vip".into()],
        attributes: [("blocked".to_string(), serde_json::json!(false))]
            .into_iter()
            .collect(),
    }
}
