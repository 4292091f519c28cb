//! Test fixtures for the store: a unique temporary directory removed on
//! drop, realistic session, subscriber and usage records, and a wait on a
//! writer's state.

use crate::policy::decision::Decision;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::{Accumulator, LastReport, ServiceUnits, SubscriberUsage};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Polls `reached` every few milliseconds until it holds; panics naming
/// `what` after 5 s. For the tests that must know a writer has reached a
/// state (its batch started, so it now waits on a lock) before they go
/// on: a fixed sleep would pass when the writer was merely slow to get
/// there, and wait for nothing when it was quick.
pub async fn until(what: &str, mut reached: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !reached() {
        assert!(
            std::time::Instant::now() < deadline,
            "not reached in 5 s: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

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

/// A realistic open session (built on `GxSession::new`, so fields added
/// later take their defaults).
pub fn session(id: &str, subscriber: &str, updated_ms: i64) -> GxSession {
    let mut s = GxSession::new(id, subscriber, "pgw1.example", "example", 1_700_000_000_000);
    s.imsi = Some(subscriber.into());
    s.apn = Some("internet".into());
    s.ue_ipv4 = Some(std::net::Ipv4Addr::new(10, 1, 2, 3));
    s.rat_type = Some(1004);
    s.ip_can_type = Some(5);
    s.location = Some("8200f110000100f1100001a2b3c4".into());
    s.device = Some("3534210112345601".into());
    s.supported_features = vec![(1, 0x3)];
    s.installed = Decision {
        rules: vec!["internet".into()],
        ..Default::default()
    }
    .into();
    s.updated_ms = updated_ms;
    s
}

/// A provisioned subscriber.
pub fn subscriber(imsi: &str) -> Subscriber {
    Subscriber {
        imsi: imsi.into(),
        msisdn: Some("4915112345678".into()),
        plan: Some("basic".into()),
        services: vec!["vip".into()],
        attributes: [("blocked".to_string(), serde_json::json!(false))]
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// A subscriber's usage with one monthly accumulator at `used` octets and
/// the report that brought it there.
pub fn usage(subscriber: &str, used: u64) -> SubscriberUsage {
    SubscriberUsage {
        subscriber: subscriber.into(),
        accumulators: [(
            "monthly".into(),
            Accumulator {
                used,
                topup: 0,
                period_start_ms: 1_700_000_000_000,
                period_end_ms: Some(1_702_592_000_000),
            },
        )]
        .into_iter()
        .collect(),
        last_reports: [(
            "mk-internet".into(),
            LastReport {
                at_ms: 1_700_000_100_000,
                session: "gx;1".into(),
                used: ServiceUnits {
                    total: Some(used),
                    ..Default::default()
                },
            },
        )]
        .into_iter()
        .collect(),
        unknown_key_reports: 0,
        notified: Default::default(),
        version: Default::default(),
    }
}
