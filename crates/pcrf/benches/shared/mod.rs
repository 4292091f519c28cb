//! Records shared by the store benches, so they measure the same shape.

use pcrf::policy::decision::{Ambr, Arp, BearerQos, Decision, RuleDefinition, RuleQos};
use pcrf::session::record::DecisionInputs;
use pcrf::session::{DecisionRecord, GxSession};

/// The decision a CCR-U typically leaves installed: a few rules, one
/// dynamic definition with QoS, APN-AMBR and default bearer QoS.
pub fn ccr_u_decision() -> Decision {
    Decision {
        rules: vec!["internet".into(), "dns".into()],
        base_names: vec!["consumer-basic".into()],
        definitions: vec![RuleDefinition {
            name: "video-boost".into(),
            flows: vec![
                "permit out ip from 198.51.100.0/24 to assigned".into(),
                "permit in ip from assigned to 198.51.100.0/24".into(),
            ],
            flow_status: Some(2),
            qos: Some(RuleQos {
                qci: 6,
                arp: Some(Arp {
                    priority: 9,
                    may_preempt: false,
                    preemptable: true,
                }),
                mbr_ul: Some(2_000_000),
                mbr_dl: Some(20_000_000),
                gbr_ul: None,
                gbr_dl: None,
            }),
            precedence: Some(100),
            rating_group: Some(20),
            service_identifier: Some(2001),
            online: Some(false),
            offline: Some(true),
            monitoring_key: Some("video".into()),
        }],
        apn_ambr: Some(Ambr {
            ul: 50_000_000,
            dl: 150_000_000,
        }),
        default_bearer_qos: Some(BearerQos {
            qci: 9,
            arp: Arp {
                priority: 8,
                may_preempt: false,
                preemptable: true,
            },
        }),
        event_triggers: vec![1, 2, 13, 17, 20],
        revalidation_secs: Some(3600),
        reject: None,
        monitoring: Default::default(),
        adc: Vec::new(),
        spending_counters: Vec::new(),
        valid: None,
    }
}

/// A session as a CCR-U leaves it: a few rules, QoS, and the last decision
/// with its inputs (the largest part of the blob).
pub fn ccr_u_session(id: String, imsi: String, updated_ms: i64) -> GxSession {
    let decision = ccr_u_decision();
    let mut s = GxSession::new(
        id,
        imsi.as_str(),
        "pgw1.epc.mnc001.mcc001.3gppnetwork.org",
        "epc.mnc001.mcc001.3gppnetwork.org",
        1_763_000_000_000,
    );
    s.set_identity(Some(&imsi), Some("4915112345678"));
    s.apn = Some(pcrf::session::shared_text::shared("internet"));
    s.ue_ipv4 = Some(std::net::Ipv4Addr::new(10, 45, 3, 17));
    s.ue_ipv6_prefix = Some("0040200107f8000100000000".into());
    s.rat_type = Some(1004);
    s.ip_can_type = Some(5);
    s.location = Some("8200f110000100f1100001a2b3c4".into());
    s.ms_timezone = Some("4000".into());
    s.device = Some("3534210112345601".into());
    s.supported_features = vec![(1, 0x0000_03ff)];
    s.installed = decision.clone().into();
    s.last_request_number = (updated_ms % 1000) as u32;
    // The encoded last answer, kept for retransmissions (a CCA with rules).
    s.last_answer = Some(vec![0x5a; 420].into());
    s.last_decision = Some(std::sync::Arc::new(DecisionRecord {
        input_hash: 0x1234_5678_9abc_def0,
        script_version: 3,
        policy_version: 0,
        decision: decision.into(),
        inputs: DecisionInputs::of(&serde_json::json!({
            "subscriber": {"imsi": "001010123456789", "plan": "basic",
                           "services": ["video-boost"], "attributes": {"blocked": false}},
            "session": {"apn": "internet", "rat_type": 1004, "location": "8200f110000100f1100001a2b3c4",
                        "ue_ipv4": "10.45.3.17", "device": "3534210112345601"},
            "time": {"hour": 21, "weekday": 5},
            "network": {"congestion": 0}
        })),
        at_ms: updated_ms,
        bounds: None,
    }));
    s.updated_ms = updated_ms;
    s
}

/// The last record written per row, so that the next record of that row
/// is written at its version, as the services do (session and usage
/// writes are compare-and-set on PostgreSQL). A row's next record is built
/// only after the previous write committed.
#[derive(Default)]
pub struct LastWritten {
    sessions:
        std::sync::Mutex<std::collections::HashMap<std::sync::Arc<str>, std::sync::Arc<GxSession>>>,
    usage: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Arc<pcrf::usage::SubscriberUsage>>,
    >,
}

#[allow(dead_code)]
impl LastWritten {
    /// `s` as the next record of its row.
    pub fn session(&self, s: GxSession) -> pcrf::store::Change {
        let mut m = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(prev) = m.get(&s.id) {
            s.version.set(prev.version.get());
        }
        let s = std::sync::Arc::new(s);
        m.insert(s.id.clone(), s.clone());
        pcrf::store::Change::PutSession(s)
    }

    /// `u` as the next record of its row.
    pub fn usage(&self, u: pcrf::usage::SubscriberUsage) -> pcrf::store::Change {
        let mut m = self.usage.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(prev) = m.get(&*u.subscriber) {
            u.version.set(prev.version.get());
        }
        let u = std::sync::Arc::new(u);
        m.insert(u.subscriber.to_string(), u.clone());
        pcrf::store::Change::PutUsage(u)
    }
}
