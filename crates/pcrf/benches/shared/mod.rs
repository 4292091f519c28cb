//! Records shared by the store benches, so they measure the same shape.

use pcrf::policy::decision::{Ambr, Arp, BearerQos, Decision, RuleDefinition, RuleQos};

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
    }
}
