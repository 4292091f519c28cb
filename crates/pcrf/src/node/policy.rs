//! The policy capability: the engine and the versions it serves, what a
//! decision is made on (the policy input), and the node's checks of a
//! decision (the rule catalog, the fallback count). A separate handle so
//! that what decides reaches the policy and nothing else of the node.

use super::state::{ecgi_of_location, enum_name, Node};
use super::PolicyRunner;
use crate::policy::decision::Decision;
use crate::policy::input::{
    InstalledRules, Ipv4Input, NetworkInput, PolicyInput, SessionContext, SessionInput,
    SubscriberFields, SubscriberInput, TimeInput,
};
use crate::policy::shared_decision::CheckedUnder;
use crate::policy::PolicyEngine;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use diameter::dict::avp;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The policy engine, its versions and the decision steps.
#[derive(Clone)]
pub struct Policy {
    pub(super) node: Arc<Node>,
}

impl Policy {
    /// The policy engine: the script serving, its rollout, its counters.
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        self.node.policy.engine()
    }

    /// The policy's and the usage file's versions, the time zone, the
    /// congestion by cell, the decision log.
    pub fn runner(&self) -> &PolicyRunner {
        &self.node.policy
    }

    pub(crate) fn note_fallback(&self, session: &str, out: &crate::policy::Outcome) {
        if let Some(err) = &out.error {
            self.node
                .telemetry
                .counters
                .policy_fallbacks
                .fetch_add(1, Relaxed);
            tracing::error!(session, error = %err, "policy failed; fallback decision applied");
        }
    }

    /// Drops rule names the PCEFs do not know (when a catalog is configured).
    pub(crate) fn check_catalog(&self, session: &str, mut d: Decision) -> Decision {
        let live = self.node.live.load();
        if !live.catalog_rules.is_empty() {
            d.rules.retain(|r| {
                let ok = live.catalog_rules.contains(r);
                if !ok {
                    self.node.telemetry.counters.unknown_rule_names.fetch_add(1, Relaxed);
                    tracing::warn!(session, rule = %r, "policy named a predefined rule not in [rules].predefined; dropped");
                }
                ok
            });
        }
        if !live.catalog_bases.is_empty() {
            d.base_names.retain(|r| {
                let ok = live.catalog_bases.contains(r);
                if !ok {
                    self.node.telemetry.counters.unknown_rule_names.fetch_add(1, Relaxed);
                    tracing::warn!(session, base = %r, "policy named a rule base not in [rules].base_names; dropped");
                }
                ok
            });
        }
        d
    }

    /// The configuration the node's decision checks read: the rule
    /// catalog, and the usage file when the Monitoring-Keys are checked.
    pub(crate) fn checked_under(&self, with_usage: bool) -> CheckedUnder {
        let catalog: Arc<dyn std::any::Any + Send + Sync> = self.node.live.load_full();
        let usage = with_usage.then(|| {
            let usage: Arc<dyn std::any::Any + Send + Sync> = self.node.usage.config_full();
            usage
        });
        CheckedUnder([Some(catalog), usage])
    }

    /// What the policy decides `s` on at `now` (Unix ms).
    pub(crate) fn policy_input(
        &self,
        s: &GxSession,
        sub: Option<&Arc<Subscriber>>,
        spending: BTreeMap<String, String>,
        now: i64,
    ) -> PolicyInput {
        let subscriber = match sub {
            Some(p) => SubscriberInput::from_profile(p),
            None => SubscriberFields {
                known: false,
                imsi: s.imsi.as_deref().map(str::to_owned),
                msisdn: s.msisdn.as_deref().map(str::to_owned),
                ..Default::default()
            }
            .into(),
        };
        let installed = InstalledRules::Decision(s.installed.clone());
        let congestion = s
            .location
            .as_deref()
            .and_then(ecgi_of_location)
            .map_or(0, |cell| self.node.policy.congestion_at(cell));
        let session = match &s.n7 {
            // A 5G PDU session: what the SMF said, as N7 names it.
            Some(ctx) => {
                let mut session = ctx.session_input();
                session.installed = installed;
                session.rule_failures = s.rule_failures.clone();
                session
            }
            None => SessionInput {
                apn: s.apn.clone(),
                rat: s.rat_type.map(|v| enum_name(avp::RAT_TYPE, v)),
                ip_can_type: s.ip_can_type.map(|v| enum_name(avp::IP_CAN_TYPE, v)),
                ue_ipv4: s.ue_ipv4.map(Ipv4Input::Address),
                ue_ipv6_prefix: s.ue_ipv6_prefix.clone(),
                location: s.location.clone(),
                ms_timezone: s.ms_timezone.clone(),
                device: s.device.clone(),
                pcef: s.pcef_host.clone(),
                installed,
                rule_failures: s.rule_failures.clone(),
                n7: None,
            },
        };
        PolicyInput {
            subscriber,
            session,
            time: TimeInput::at_ms(now, self.node.policy.tz()),
            network: NetworkInput { congestion },
            usage: Default::default(),
            applications: s.tdf.as_ref().map(|t| t.applications()).unwrap_or_default(),
            spending,
        }
    }
}
