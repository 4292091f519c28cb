//! A PCEF's Re-Auth-Answer as the PCRF reads it, and the Charging-Rule-Report
//! entries it (or a CCR) carries: the node, Rx's pushes and the operations
//! all send a Gx RAR and read its answer, so the reading lives below them.

use crate::limits;
use crate::pcc::charging_id::{decode_charging_id, ChargingId};
use crate::policy::input::RuleFailure;
use crate::session_message::{self, Outcome};
use diameter::codec::{Avp, DiameterError, Message};
use diameter::dict::{avp, enums};

/// The Charging-Rule-Report entries of one CCR or RAA: at most
/// [`limits::MAX_RULE_REPORTS_PER_REQUEST`] of them kept, the rest (and any
/// name longer than a rule name may be) only counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleReports {
    pub kept: Vec<RuleFailure>,
    pub over_cap: u64,
}

impl RuleReports {
    /// Every entry the message carried, kept or not.
    pub fn received(&self) -> u64 {
        self.kept.len() as u64 + self.over_cap
    }
}

impl std::ops::Deref for RuleReports {
    type Target = [RuleFailure];
    fn deref(&self) -> &[RuleFailure] {
        &self.kept
    }
}

pub(crate) fn decode_rule_report(a: &Avp<'_>, out: &mut RuleReports) -> Result<(), DiameterError> {
    let mut names = Vec::new();
    let mut status = None;
    let mut code = None;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::CHARGING_RULE_NAME) || g.is(avp::CHARGING_RULE_BASE_NAME) {
            names.push(g.as_octets());
        } else if g.is(avp::PCC_RULE_STATUS) {
            status = Some(g.as_enum()?);
        } else if g.is(avp::RULE_FAILURE_CODE) {
            code = Some(g.as_enum()?);
        }
    }
    let status = status.unwrap_or(enums::PCC_RULE_STATUS::INACTIVE);
    for rule in names {
        if out.kept.len() >= limits::MAX_RULE_REPORTS_PER_REQUEST
            || rule.len() > limits::MAX_RULE_NAME
        {
            out.over_cap += 1;
            continue;
        }
        out.kept.push(RuleFailure {
            rule: String::from_utf8_lossy(rule).into_owned(),
            status: status.max(0) as u32,
            code: code.map(|c| c.max(0) as u32),
        });
    }
    Ok(())
}

/// The result of an RAA: its Result-Code or Experimental-Result-Code, and
/// any rule failures it reports.
#[derive(Debug, Default)]
pub struct Raa {
    pub result_code: Option<u32>,
    pub experimental_result: Option<u32>,
    pub rule_reports: RuleReports,
    pub charging_ids: Vec<ChargingId>,
}

/// Decodes an RAA.
pub fn decode_raa(msg: &Message) -> Result<Raa, DiameterError> {
    let mut r = Raa::default();
    for a in msg.avps() {
        let a = a?;
        if let Some(outcome) = session_message::decode_outcome(&a)? {
            match outcome {
                Outcome::Result(c) => r.result_code = Some(c),
                Outcome::Experimental(c) => r.experimental_result = Some(c),
            }
        } else if a.is(avp::CHARGING_RULE_REPORT) {
            decode_rule_report(&a, &mut r.rule_reports)?;
        } else if a.is(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX) {
            r.charging_ids.push(decode_charging_id(&a)?);
        }
    }
    Ok(r)
}
