//! The seam between the spending-limit logic and its peer: an OCS over Sy
//! (TS 29.219, Diameter) or a CHF over N28 (TS 29.594, HTTP/2), whichever
//! `[sy]` names. The service (`service.rs`) decides what to ask and what
//! the answer means for the subscriber; this file only carries the two
//! exchanges the PCF starts (subscribe or modify: SLR initial or
//! intermediate, or POST then PUT; unsubscribe: STR or DELETE) and gives
//! back the same neutral answer (`exchange.rs`) for both.

use crate::session::spending::SySession;
use crate::session_message::Identity;
use crate::sy::chf::Chf;
use crate::sy::exchange::{Answer, NoAnswer, SubscribeRequest, Subscribed};
use crate::sy::ocs::OcsPool;
use crate::sy::{self, AnswerCode, SlRequestType, Slr};
use diameter::dict::{cmd, enums};

/// The configured spending-limit peer.
pub enum SpendingPeer {
    Ocs(OcsPool),
    Chf(Chf),
}

impl SpendingPeer {
    /// Subscribes `req.counters` (initial), or replaces the subscription
    /// with them when the peer holds the session already (modify).
    pub async fn subscribe(
        &self,
        me: &Identity,
        req: &SubscribeRequest<'_>,
    ) -> Result<Answer<Subscribed>, NoAnswer> {
        match self {
            SpendingPeer::Chf(chf) => chf.subscribe(req).await,
            SpendingPeer::Ocs(pool) => {
                let request_type = if req.session.open {
                    SlRequestType::Intermediate
                } else {
                    SlRequestType::Initial
                };
                let ans = pool
                    .request(sy::SY, cmd::SPENDING_LIMIT, |b, host, realm| {
                        sy::encode_slr(
                            b,
                            me,
                            &Slr {
                                session_id: &req.session.session_id,
                                request_type,
                                destination_host: host,
                                destination_realm: realm,
                                imsi: req.imsi,
                                msisdn: req.msisdn,
                                counters: req.counters,
                            },
                        );
                    })
                    .await
                    .map_err(|e| NoAnswer(e.to_string()))?;
                let (code, outcome) = match sy::decode_sla(&ans.msg) {
                    Ok(sla) if sla.code.is_success() => (
                        sla.code.code(),
                        Subscribed::Accepted {
                            reports: sla.reports,
                            subscription: None,
                        },
                    ),
                    Ok(sla)
                        if sla.code == AnswerCode::Experimental(sy::UNKNOWN_POLICY_COUNTERS) =>
                    {
                        (
                            sla.code.code(),
                            Subscribed::UnknownCounters(sla.failed_counters),
                        )
                    }
                    Ok(sla) => (
                        sla.code.code(),
                        Subscribed::Refused(format!("SLA result code {}", sla.code.code())),
                    ),
                    Err(e) => (e.result_code, Subscribed::Refused(format!("bad SLA: {e}"))),
                };
                Ok(Answer {
                    peer: ans.host,
                    code,
                    outcome,
                })
            }
        }
    }

    /// Ends the subscriber's session at the peer (STR, or DELETE of the
    /// CHF's subscription).
    pub async fn unsubscribe(
        &self,
        me: &Identity,
        session: &SySession,
    ) -> Result<Answer<()>, NoAnswer> {
        match self {
            SpendingPeer::Chf(chf) => chf.unsubscribe(session).await,
            SpendingPeer::Ocs(pool) => {
                let ans = pool
                    .request(sy::SY, cmd::SESSION_TERMINATION, |b, host, realm| {
                        sy::encode_str(
                            b,
                            me,
                            &session.session_id,
                            host,
                            realm,
                            enums::TERMINATION_CAUSE::DIAMETER_LOGOUT,
                        );
                    })
                    .await
                    .map_err(|e| NoAnswer(e.to_string()))?;
                let code = sy::decode_sta(&ans.msg).map_or_else(|e| e.result_code, |c| c.code());
                Ok(Answer {
                    peer: ans.host,
                    code,
                    outcome: (),
                })
            }
        }
    }

    /// What the peer is, for the log: "OCS" or "CHF".
    pub fn kind(&self) -> &'static str {
        match self {
            SpendingPeer::Ocs(_) => "OCS",
            SpendingPeer::Chf(_) => "CHF",
        }
    }

    /// The OCSs, each with whether it is up now (none for a CHF: HTTP/2
    /// connects per request).
    pub fn ocs_status(&self) -> Vec<(String, bool)> {
        match self {
            SpendingPeer::Ocs(pool) => pool.status(),
            SpendingPeer::Chf(_) => Vec::new(),
        }
    }
}
