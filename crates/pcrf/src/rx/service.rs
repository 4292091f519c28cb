//! The Rx flows (TS 29.214, TS 29.213): an AF's AAR is bound to the Gx
//! session holding the UE address, its media become dynamic PCC rules
//! through the policy hook, the rules go to the PCEF in a RAR, and only when
//! the PCEF accepted them is the Gx record (with its AF session inside)
//! committed and the AAA answered. STR removes the rules; a Gx termination
//! aborts every bound AF session (ASR); a rule the PCEF reports as failed is
//! notified to the AF that asked for it (RAR with a Specific-Action).

use crate::admission::Class;
use crate::metrics::{Command, Exposition, NO_ANSWER};
use crate::node::{
    now_ms, Answered, BoxFuture, Capabilities, Policy, Sessions, Settings, Signalling, Subscribers,
    Telemetry,
};
use crate::pcc::charging_id::ChargingId;
use crate::pcc::operation::ControlError;
use crate::pcc::UsageInstructions;
use crate::policy::decision::Decision;
use crate::policy::input::RuleFailure;
use crate::policy::media::{af_tag, AfInput, MediaInput};
use crate::rx::state::RxState;
use crate::rx::{self, AaaExtras, Aar, AfNotice, RxRequestType};
use crate::session::af::{add_af_triggers, merge_media, replace_af_rules, AfSession};
use crate::session::binding::stored_prefixes_containing;
use crate::session::{GxSession, RuleDiff, SessionSlot, SessionState};
use crate::session_message::Outcome;
use crate::store::OpenSessionsBy;
use crate::sy::service::Sy;
use crate::txn::{self, Runner};
use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, Message};
use diameter::dict::{cmd, enums};
use diameter::result_code;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::sync::{OnceLock, Weak};
use std::time::Instant;

/// 3GPP Experimental-Result-Codes of Rx (TS 29.214 §5.5).
pub(crate) const IP_CAN_SESSION_NOT_AVAILABLE: u32 = 5065;
pub(crate) const REQUESTED_SERVICE_NOT_AUTHORIZED: u32 = 5063;

/// The most AF sessions one IP-CAN (or PDU) session holds at once: a
/// UE's voice and video calls, conference legs and MCPTT groups are a
/// handful; more is an AF gone wrong (or hostile).
pub const MAX_AF_SESSIONS: usize = 32;

/// How many Rx sessions aborted by a Gx termination are remembered, so the
/// AF's STR that follows the ASR is answered success rather than 5002.
/// A notification for one AF session: the Specific-Action and, for
/// IP-CAN_CHANGE, the access the UE is on now.
#[derive(Clone, Debug)]
pub(crate) struct AfNote {
    af: AfSession,
    action: i32,
    rat_type: Option<i32>,
    ip_can_type: Option<i32>,
    /// Access-Network-Charging-Identifier-Value (CHARGING_CORRELATION_EXCHANGE).
    charging_id: Option<Vec<u8>>,
    /// The flows concerned (Media-Component-Number, Flow-Numbers).
    flows: Vec<(u32, Vec<u32>)>,
}

impl AfNote {
    pub(crate) fn new(af: &AfSession, action: i32) -> AfNote {
        AfNote {
            af: af.clone(),
            action,
            rat_type: None,
            ip_can_type: None,
            charging_id: None,
            flows: Vec::new(),
        }
    }
}

/// What became of an AF's request (see [`Rx::authorize`]): its rules are
/// installed and stored (the session as stored now), or it is refused with
/// the result an AAA would carry and why.
pub(crate) enum AfOutcome {
    Installed(Arc<GxSession>),
    Refused(Outcome, String),
}

/// What an initial AAR found at the UE address.
enum Binding {
    Bound(Arc<SessionSlot>),
    /// No open session of the APN holds the address.
    NoSession,
    /// Open sessions hold it, but the AAR's Subscription-Id names neither
    /// their identities nor their provisioned profile's.
    OtherSubscriber,
}

/// The Rx service: binds each AF session to its Gx session, installs its
/// media rules there and tells the AF when the bearer changes or ends.
pub struct Rx {
    pub(crate) sessions: Sessions,
    pub(crate) subscribers: Subscribers,
    pub(crate) policy: Policy,
    pub(crate) signalling: Signalling,
    pub(crate) telemetry: Telemetry,
    pub(crate) settings: Settings,
    pub(crate) txn: Runner,
    pub(crate) state: RxState,
    pub(crate) sy: Arc<Sy>,
    /// This service, for the background exchanges it starts.
    pub(crate) me_ref: Weak<Rx>,
    /// The N5 service, which tells the AFs of N5 application sessions
    /// (set once the services exist).
    n5: OnceLock<Weak<dyn AfSignalling>>,
}

/// What Rx asks of the N5 service for an AF session that came over N5
/// (it has a notification URI, where a Diameter AF gets an RAR or an
/// ASR): to tell its AF of an event (an Rx Specific-Action), or that the
/// session ended with its PDU session. The AF's HTTP status, or why there
/// was none. Rx owns the AF flows for both and knows neither N5's
/// resources nor its JSON.
pub trait AfSignalling: Send + Sync {
    fn event<'a>(&'a self, af: &'a AfSession, action: i32) -> BoxFuture<'a, Result<u16, String>>;

    fn terminate<'a>(&'a self, af: &'a AfSession) -> BoxFuture<'a, Result<u16, String>>;
}

impl Rx {
    pub fn new(caps: &Capabilities, sy: Arc<Sy>) -> Arc<Rx> {
        Arc::new_cyclic(|me| Rx {
            sessions: caps.sessions.clone(),
            subscribers: caps.subscribers.clone(),
            policy: caps.policy.clone(),
            signalling: caps.signalling.clone(),
            telemetry: caps.telemetry.clone(),
            settings: caps.settings.clone(),
            txn: Runner::new(caps),
            state: RxState::default(),
            sy,
            me_ref: me.clone(),
            n5: OnceLock::new(),
        })
    }

    /// Names the N5 service: it tells the AFs of N5 application sessions.
    pub fn set_n5(&self, n5: Weak<dyn AfSignalling>) {
        let _ = self.n5.set(n5);
    }

    /// The N5 service, or why an N5 AF cannot be told.
    fn n5(&self) -> Result<Arc<dyn AfSignalling>, String> {
        self.n5
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| "the N5 service is not running".to_owned())
    }
    /// Answers one Rx request from an AF (AAR or STR).
    pub async fn handle_rx(&self, req: Message) -> Result<Bytes, DiameterError> {
        let started = Instant::now();
        let command = match req.command_code() {
            cmd::AA => Command::Aar,
            cmd::SESSION_TERMINATION => Command::Str,
            _ => {
                return Err(DiameterError::new(
                    result_code::DIAMETER_COMMAND_UNSUPPORTED,
                    "Rx serves AAR and STR",
                ))
            }
        };
        // An AAR may open an AF session (new state, shed first under
        // overload); an STR releases one.
        let class = if command == Command::Aar {
            Class::New
        } else {
            Class::Existing
        };
        let req = &req;
        let envelope = txn::Request {
            message: req,
            command,
            class,
            subject: req.session_id().ok().flatten().unwrap_or_default(),
            started,
        };
        txn::serve(&self.txn, envelope, move |_| async move {
            match command {
                Command::Aar => self.aar(req).await,
                _ => self.rx_str(req).await,
            }
        })
        .await
    }

    fn aaa(
        &self,
        req: &Message,
        outcome: Outcome,
        s: Option<&GxSession>,
        why: Option<&str>,
    ) -> Answered {
        let mut buf = BytesMut::with_capacity(256);
        let extras = AaaExtras {
            ip_can_type: s.and_then(|s| s.ip_can_type),
            rat_type: s.and_then(|s| s.rat_type),
        };
        rx::encode_aaa(&mut buf, req, self.signalling.me(), outcome, &extras, why);
        Answered {
            decided_by: None,
            bytes: buf.freeze(),
            code: match outcome {
                Outcome::Result(c) | Outcome::Experimental(c) => c,
            },
        }
    }

    /// The open Gx session an initial AAR binds to: by UE IPv4 address or
    /// IPv6 prefix, narrowed by APN and subscriber when the AAR names them.
    fn bind_aar(&self, a: &Aar<'_>) -> Binding {
        let mut slots = Vec::new();
        if let Some(v4) = a.ue_ipv4 {
            slots = self.sessions.table().bound_to(IpAddr::V4(v4));
        }
        if slots.is_empty() {
            if let Some(p) = a.ue_ipv6_prefix {
                slots = self
                    .sessions
                    .table()
                    .bindings()
                    .find_prefix(p)
                    .iter()
                    .filter_map(|id| self.sessions.table().get(id))
                    .collect();
            }
        }
        let mut open = slots.into_iter().filter(|slot| {
            let s = slot.load();
            s.state == SessionState::Open && a.apn.is_none_or(|apn| s.apn.as_deref() == Some(apn))
        });
        let Some(first) = open.next() else {
            return Binding::NoSession;
        };
        std::iter::once(first)
            .chain(open)
            .find(|slot| self.same_subscriber(a, &slot.load()))
            .map_or(Binding::OtherSubscriber, Binding::Bound)
    }

    /// Whether the subscriber an AAR names (Subscription-Id) is the one of
    /// the Gx session: each identity it gives must be the one the PCEF
    /// sent or the provisioned profile's (a PCEF may send the IMSI alone
    /// while the P-CSCF knows the MSISDN).
    fn same_subscriber(&self, a: &Aar<'_>, s: &GxSession) -> bool {
        if a.imsi.is_none() && a.msisdn.is_none() {
            return true;
        }
        let profile = self
            .subscribers
            .find(s.imsi.as_deref(), s.msisdn.as_deref());
        let profile = profile.as_deref();
        a.imsi
            .is_none_or(|i| s.imsi.as_deref() == Some(i) || profile.is_some_and(|p| p.imsi == i))
            && a.msisdn.is_none_or(|m| {
                s.msisdn.as_deref() == Some(m)
                    || profile.is_some_and(|p| p.msisdn.as_deref() == Some(m))
            })
    }

    /// On a store shared with other nodes, takes over the open Gx sessions
    /// the store has at the AAR's UE address, as `bind_aar` looks in
    /// memory: the IPv4 address, else the IPv6 prefixes containing the
    /// address; whether any was.
    async fn take_over_at(&self, a: &Aar<'_>) -> Result<bool, DiameterError> {
        if let Some(v4) = a.ue_ipv4 {
            let by = OpenSessionsBy::Ipv4(v4.to_string());
            if !self.sessions.take_over_by(by).await?.is_empty() {
                return Ok(true);
            }
        }
        let Some(p) = a.ue_ipv6_prefix else {
            return Ok(false);
        };
        let keys = stored_prefixes_containing(p);
        if keys.is_empty() {
            return Ok(false);
        }
        let by = OpenSessionsBy::Ipv6Prefixes(keys);
        Ok(!self.sessions.take_over_by(by).await?.is_empty())
    }

    /// Binds an AAR to the Gx session at its UE address; on a store
    /// shared with other nodes, when none here fits (none at the address,
    /// or only another subscriber's), a session held by another node is
    /// taken over through the store first.
    async fn bind_or_take_over(&self, a: &Aar<'_>) -> Result<Binding, DiameterError> {
        match self.bind_aar(a) {
            Binding::NoSession | Binding::OtherSubscriber if self.take_over_at(a).await? => {
                Ok(self.bind_aar(a))
            }
            binding => Ok(binding),
        }
    }

    /// The Gx session an Rx session is bound to: the one here, or on a
    /// store shared with other nodes, the one the store has holding it
    /// (bound on another node), taken over.
    pub(crate) async fn bound_af_or_take_over(
        &self,
        rx_session: &str,
    ) -> Result<Option<Arc<SessionSlot>>, DiameterError> {
        if let Some(slot) = self.sessions.table().bound_af(rx_session) {
            return Ok(Some(slot));
        }
        let by = OpenSessionsBy::SubSession(rx_session.to_owned());
        self.sessions.take_over_by(by).await?;
        Ok(self.sessions.table().bound_af(rx_session))
    }

    async fn aar(&self, req: &Message) -> Result<Answered, DiameterError> {
        let a = req.validate().and_then(|_| rx::decode_aar(req)).inspect_err(|e| {
            tracing::info!(session = ?req.session_id().ok().flatten(), error = %e, "AAR refused");
        })?;
        Ok(match self.authorize(&a).await? {
            AfOutcome::Installed(next) => self.aaa(
                req,
                Outcome::Result(result_code::DIAMETER_SUCCESS),
                Some(&next),
                None,
            ),
            AfOutcome::Refused(outcome, why) => self.aaa(req, outcome, None, Some(why.as_str())),
        })
    }

    /// An AF's request for its session's media, whichever interface it
    /// came over (Rx's AAR, or N5's app session as an `Aar`): binds it to
    /// the IP-CAN or PDU session at the UE address (or finds the AF
    /// session it updates), asks the policy for the media's rules, pushes
    /// them to the enforcement point and stores them. What the AF is
    /// answered is the adapter's to write.
    pub(crate) async fn authorize(&self, a: &Aar<'_>) -> Result<AfOutcome, DiameterError> {
        // An update names a bound Rx session, maybe bound on another
        // node; an initial request is bound by address (no store read for
        // an id that cannot be bound yet).
        let existing = match a.request_type {
            Some(RxRequestType::Update) => self.bound_af_or_take_over(a.session_id).await?,
            _ => self.sessions.table().bound_af(a.session_id),
        };
        let slot = match existing {
            Some(slot) => slot,
            None if a.request_type == Some(RxRequestType::Update) => {
                return Ok(AfOutcome::Refused(
                    Outcome::Result(result_code::DIAMETER_UNKNOWN_SESSION_ID),
                    "unknown Rx session".into(),
                ));
            }
            None => match self.bind_or_take_over(a).await? {
                Binding::Bound(slot) => slot,
                Binding::NoSession => {
                    self.state.binding_failures.fetch_add(1, Relaxed);
                    tracing::info!(session = a.session_id, ipv4 = ?a.ue_ipv4, apn = ?a.apn, "AAR: no IP-CAN session holds the UE address");
                    return Ok(AfOutcome::Refused(
                        Outcome::Experimental(IP_CAN_SESSION_NOT_AVAILABLE),
                        "no IP-CAN session for the UE address".into(),
                    ));
                }
                Binding::OtherSubscriber => {
                    self.state.binding_failures.fetch_add(1, Relaxed);
                    tracing::info!(session = a.session_id, ipv4 = ?a.ue_ipv4, apn = ?a.apn, imsi = ?a.imsi, msisdn = ?a.msisdn, "AAR: the IP-CAN session holding the UE address belongs to another subscriber");
                    return Ok(AfOutcome::Refused(
                        Outcome::Experimental(IP_CAN_SESSION_NOT_AVAILABLE),
                        "the IP-CAN session for the UE address is another subscriber's".into(),
                    ));
                }
            },
        };
        txn::holding(&slot, async |cur| -> Result<AfOutcome, DiameterError> {
            let old = cur.af.iter().find(|x| x.id == a.session_id);
            if old.is_some_and(|o| {
                !self.sessions
                    .requester(&o.id, &o.af_host, a.origin_host)
                    .is_served()
            }) {
                // Another AF's session: as if there were none (node/ownership.rs).
                return Ok(AfOutcome::Refused(
                    Outcome::Result(result_code::DIAMETER_UNKNOWN_SESSION_ID),
                    "unknown Rx session".into(),
                ));
            }
            if cur.state != SessionState::Open {
                self.state.binding_failures.fetch_add(1, Relaxed);
                return Ok(AfOutcome::Refused(
                    Outcome::Experimental(IP_CAN_SESSION_NOT_AVAILABLE),
                    "the IP-CAN session ended".into(),
                ));
            }
            if old.is_none() && cur.af.len() >= MAX_AF_SESSIONS {
                // Each AF session is stored, pushed and decided with the
                // session's record: without a bound, one AF could grow it
                // (and every write and push of it) without end.
                return Ok(AfOutcome::Refused(
                    Outcome::Experimental(REQUESTED_SERVICE_NOT_AUTHORIZED),
                    format!("the IP-CAN session already holds {MAX_AF_SESSIONS} AF sessions"),
                ));
            }
            let now = now_ms();
            let mut af = match old {
                Some(o) => {
                    let mut n = o.clone();
                    n.media = merge_media(&o.media, &a.media);
                    n.updated_ms = now;
                    n
                }
                None => AfSession {
                    id: a.session_id.to_owned(),
                    af_host: a.origin_host.to_owned(),
                    af_realm: a.origin_realm.to_owned(),
                    application: None,
                    charging_id: None,
                    service_urn: None,
                    specific_actions: Vec::new(),
                    media: a.media.clone(),
                    rules: Vec::new(),
                    notification_uri: None,
                    created_ms: now,
                    updated_ms: now,
                },
            };
            if a.application.is_some() {
                af.application = a.application.clone();
            }
            if let Some(c) = a.charging_id {
                af.charging_id = Some(hex::encode(c));
            }
            if a.service_urn.is_some() {
                af.service_urn = a.service_urn.clone();
            }
            if !a.specific_actions.is_empty() {
                af.specific_actions = a.specific_actions.clone();
            }
            if let Some(uri) = a.notification_uri {
                af.notification_uri = Some(uri.to_owned());
            }
            // A fail-over partner of the AF carries the session on (the only
            // other peer served): notifications go there now.
            af.af_host = a.origin_host.to_owned();
            af.af_realm = a.origin_realm.to_owned();

            let sub = self.subscribers
                .find(cur.imsi.as_deref(), cur.msisdn.as_deref());
            let gx_input =
                self.policy
                    .policy_input(&cur, sub.as_ref(), self.sy.spending_of(&cur), now_ms());
            let input = MediaInput {
                af: AfInput {
                    session: af.id.clone(),
                    tag: af_tag(&af.id),
                    host: af.af_host.clone(),
                    application: af.application.clone(),
                    service_urn: af.service_urn.clone(),
                    specific_actions: af.specific_actions.clone(),
                },
                media: af.media.clone(),
                session: gx_input.session,
                subscriber: gx_input.subscriber,
            };
            let decided = self.policy
                .engine()
                .authorize_media(&input)
                .map_err(|e| e.to_string())
                .and_then(|d| check_rule_names(&cur, &af.id, d));
            let decided = match decided {
                Ok(d) => d,
                Err(e) => {
                    self.state.policy_errors.fetch_add(1, Relaxed);
                    tracing::error!(session = a.session_id, error = %e, "authorize_media failed; AAR refused");
                    return Ok(AfOutcome::Refused(
                        Outcome::Result(result_code::DIAMETER_UNABLE_TO_COMPLY),
                        "policy error".into(),
                    ));
                }
            };
            if let Some(reason) = &decided.reject {
                tracing::info!(
                    session = a.session_id,
                    reason,
                    "policy refused the AF service"
                );
                return Ok(AfOutcome::Refused(
                    Outcome::Experimental(REQUESTED_SERVICE_NOT_AUTHORIZED),
                    reason.into(),
                ));
            }
            let old_rules = old.map(|o| o.rules.clone()).unwrap_or_default();
            let mut installed = replace_af_rules(&cur.installed, &old_rules, &decided.rules);
            let others = cur.af.iter().filter(|x| x.id != af.id);
            add_af_triggers(others.chain(std::iter::once(&af)), &mut installed);
            let diff = RuleDiff::between(&cur.installed, &installed);
            let mut next = (*cur).clone();
            if !diff.is_empty() && !self.settings.live().cfg.rx.answer_after_raa {
                // Answer first: store the rules as installed, answer, and push
                // in the background; a refusal is undone and notified.
                drop(diff);
                let new_rules = decided.rules.clone();
                next.installed = installed.into();
                af.rules = decided.rules;
                next.af.retain(|x| x.id != af.id);
                next.af.push(af.clone());
                next.updated_ms = now;
                let next = Arc::new(next);
                txn::commit_record(&self.txn, &slot, next.clone()).await?;
                if let Some(this) = self.me_ref.upgrade() {
                    let (gx_id, before) = (cur.id.clone(), (*cur.installed).clone());
                    tokio::spawn(async move {
                        this.push_af_rules(&gx_id, before, af, old_rules, new_rules)
                            .await;
                    });
                }
                return Ok(AfOutcome::Installed(next));
            }
            if !diff.is_empty() {
                let pushed = self.push_rules(&cur, &diff, &installed).await;
                let raa = match pushed {
                    Ok(raa) => raa,
                    Err(ControlError::Peer(e)) if e.starts_with("bad RAA") => {
                        tracing::warn!(session = a.session_id, error = %e, "bad RAA for Rx rules");
                        return Ok(AfOutcome::Refused(
                            Outcome::Result(result_code::DIAMETER_UNABLE_TO_COMPLY),
                            "PCEF answered badly".into(),
                        ));
                    }
                    Err(e) => {
                        tracing::warn!(session = a.session_id, error = %e, "Rx rules not pushed");
                        return Ok(AfOutcome::Refused(
                            Outcome::Result(result_code::DIAMETER_UNABLE_TO_COMPLY),
                            "PCEF did not answer".into(),
                        ));
                    }
                };
                let code = raa.result_code.or(raa.experimental_result).unwrap_or(0);
                if code != result_code::DIAMETER_SUCCESS {
                    tracing::info!(
                        session = a.session_id,
                        code,
                        "PCEF refused the Rx rules; nothing stored"
                    );
                    return Ok(AfOutcome::Refused(
                        Outcome::Result(result_code::DIAMETER_UNABLE_TO_COMPLY),
                        "the PCEF refused the rules".into(),
                    ));
                }
                drop(diff);
                next.installed = installed.into();
                af.rules = decided.rules;
                next.af.retain(|x| x.id != af.id);
                next.af.push(af);
                // A rule accepted in the RAA but reported failed with it.
                let failed =
                    self.af_notes_from_pcef(&cur, &mut next, &raa.rule_reports, &raa.charging_ids);
                self.sessions.apply_rule_reports(&mut next, &raa.rule_reports);
                self.spawn_af_notices(failed);
            } else {
                drop(diff);
                af.rules = decided.rules;
                next.af.retain(|x| x.id != af.id);
                next.af.push(af);
            }
            next.updated_ms = now;
            let next = Arc::new(next);
            txn::commit_record(&self.txn, &slot, next.clone()).await?;
            Ok(AfOutcome::Installed(next))
        })
        .await
    }

    async fn rx_str(&self, req: &Message) -> Result<Answered, DiameterError> {
        let s = req.validate().and_then(|_| rx::decode_str(req))?;
        let code = self.end_af(s.session_id, Some(s.origin_host)).await?;
        let mut buf = BytesMut::with_capacity(128);
        rx::encode_sta(&mut buf, req, self.signalling.me(), code);
        Ok(Answered {
            decided_by: None,
            bytes: buf.freeze(),
            code,
        })
    }

    /// An AF ends its session `af_id` (Rx's STR, N5's delete): its rules
    /// are removed at the enforcement point and the AF session forgotten.
    /// The result an STA would carry: 2001, or 5002 when no such AF
    /// session is `origin_host`'s.
    /// `origin_host` `None`: the requester is not known by a peer name
    /// (N5, where the unguessable id is what names the AF's session).
    pub(crate) async fn end_af(
        &self,
        af_id: &str,
        origin_host: Option<&str>,
    ) -> Result<u32, DiameterError> {
        let served = |holder: &str| {
            origin_host.is_none_or(|o| self.sessions.requester(af_id, holder, o).is_served())
        };
        let slot = match self.sessions.table().bound_af(af_id) {
            Some(slot) => slot,
            // The Gx session ended first (ASR sent): the AF's STR closes it.
            None if self.state.take_aborted(af_id, |af_host| served(af_host)) => {
                return Ok(result_code::DIAMETER_SUCCESS);
            }
            // Bound on another node?
            None => match self.bound_af_or_take_over(af_id).await? {
                Some(slot) => slot,
                None => return Ok(result_code::DIAMETER_UNKNOWN_SESSION_ID),
            },
        };
        txn::holding(&slot, async |cur| -> Result<u32, DiameterError> {
            let Some(af) = cur.af.iter().find(|x| x.id == af_id) else {
                return Ok(result_code::DIAMETER_UNKNOWN_SESSION_ID);
            };
            if !served(&af.af_host) {
                // Another AF's session: as if there were none (node/ownership.rs).
                return Ok(result_code::DIAMETER_UNKNOWN_SESSION_ID);
            }
            let installed = replace_af_rules(&cur.installed, &af.rules, &[]);
            let mut next = (*cur).clone();
            next.af.retain(|x| x.id != af_id);
            let diff = RuleDiff::between(&cur.installed, &installed);
            if !diff.is_empty() && cur.state == SessionState::Open {
                let pushed = self.push_rules(&cur, &diff, &installed).await;
                let ok = matches!(
                    pushed.as_ref().map(|r| r.result_code),
                    Ok(Some(result_code::DIAMETER_SUCCESS))
                );
                drop(diff);
                if ok {
                    next.installed = installed.into();
                } else {
                    // The AF session is over either way; the rules no AF owns
                    // now drop out of the next Gx decision's difference.
                    tracing::warn!(session = af_id, "removing the Rx rules at the PCEF failed");
                }
            }
            next.updated_ms = now_ms();
            let next = Arc::new(next);
            txn::commit_record(&self.txn, &slot, next).await?;
            Ok(result_code::DIAMETER_SUCCESS)
        })
        .await
    }

    /// Pushes the rule difference an AF's media change made (to
    /// `installed`) to the enforcement point holding session `s`: a Gx
    /// RAR or an N7 notification, with no usage instruction.
    async fn push_rules(
        &self,
        s: &GxSession,
        diff: &RuleDiff<'_>,
        installed: &Decision,
    ) -> Result<crate::pcc::reauth_answer::Raa, ControlError> {
        self.signalling
            .send_push(
                s,
                Some(diff),
                Some(installed),
                None,
                &UsageInstructions::default(),
            )
            .await
    }

    /// The background push of `answer_after_raa = false`: the RAR moving
    /// the PCEF from `before` to the AF's new rules, under the Gx session's
    /// lock; if the PCEF refuses, the AF session gets its old rules back
    /// and the AF is told (INDICATION_OF_FAILED_RESOURCES_ALLOCATION).
    async fn push_af_rules(
        &self,
        gx_id: &str,
        before: crate::policy::Decision,
        af: AfSession,
        old_rules: Vec<crate::policy::decision::RuleDefinition>,
        new_rules: Vec<crate::policy::decision::RuleDefinition>,
    ) {
        let Some(slot) = self.sessions.table().get(gx_id) else {
            return;
        };
        txn::holding(&slot, async |cur| {
            if cur.state != SessionState::Open {
                return;
            }
            let after = replace_af_rules(&before, &old_rules, &new_rules);
            let diff = RuleDiff::between(&before, &after);
            // An SMF is told the difference from what it holds, `before`: the
            // record has the AF's rules as installed already (the AAA went
            // first). A RAR carries `diff` itself and needs no such copy.
            let held = cur.n7.is_some().then(|| {
                let mut held = (*cur).clone();
                held.installed = before.clone().into();
                held
            });
            let res = self
                .push_rules(held.as_ref().unwrap_or(&cur), &diff, &after)
                .await;
            drop(held);
            drop(diff);
            let raa = res.ok();
            let code = raa
                .as_ref()
                .and_then(|r| r.result_code.or(r.experimental_result));
            let mut next = (*cur).clone();
            let mut notes = Vec::new();
            if code == Some(result_code::DIAMETER_SUCCESS) {
                if let Some(raa) = raa {
                    notes =
                        self.af_notes_from_pcef(&cur, &mut next, &raa.rule_reports, &raa.charging_ids);
                    self.sessions.apply_rule_reports(&mut next, &raa.rule_reports);
                }
            } else {
                tracing::warn!(session = %af.id, code = ?code, "PCEF refused the Rx rules after the AAA; undone");
                next.installed = replace_af_rules(&cur.installed, &new_rules, &old_rules).into();
                if let Some(x) = next.af.iter_mut().find(|x| x.id == af.id) {
                    x.rules = old_rules;
                    if x.subscribed(enums::SPECIFIC_ACTION::INDICATION_OF_FAILED_RESOURCES_ALLOCATION) {
                        notes.push(AfNote::new(
                            x,
                            enums::SPECIFIC_ACTION::INDICATION_OF_FAILED_RESOURCES_ALLOCATION,
                        ));
                    }
                }
            }
            if !next.durably_equal(&cur) {
                next.updated_ms = now_ms();
                let next = Arc::new(next);
                if txn::commit_record(&self.txn, &slot, next).await.is_err() {
                    return;
                }
            }
            self.spawn_af_notices(notes);
        })
        .await
    }

    /// What the PCEF just reported (in a CCR-U or an RAA) that AFs asked
    /// to hear about: failed Rx rules (which leave their AF session), a RAT
    /// or IP-CAN change, charging ids of the access network. Call before
    /// `apply_rule_reports`; `before` is the record as it was.
    pub(crate) fn af_notes_from_pcef(
        &self,
        before: &GxSession,
        s: &mut GxSession,
        reports: &[RuleFailure],
        charging_ids: &[ChargingId],
    ) -> Vec<AfNote> {
        if s.af.is_empty() {
            return Vec::new();
        }
        let mut notes = self.af_rule_reports(s, reports);
        notes.extend(self.af_access_changes(before, s));
        notes.extend(af_charging_ids(s, charging_ids));
        notes
    }

    /// AF sessions subscribed to IP-CAN_CHANGE when a CCR-U reports another
    /// RAT or IP-CAN type.
    fn af_access_changes(&self, before: &GxSession, now: &GxSession) -> Vec<AfNote> {
        if before.rat_type == now.rat_type && before.ip_can_type == now.ip_can_type {
            return Vec::new();
        }
        now.af
            .iter()
            .filter(|af| af.subscribed(enums::SPECIFIC_ACTION::IP_CAN_CHANGE))
            .map(|af| AfNote {
                rat_type: now.rat_type,
                ip_can_type: now.ip_can_type,
                ..AfNote::new(af, enums::SPECIFIC_ACTION::IP_CAN_CHANGE)
            })
            .collect()
    }

    /// AF sessions whose rules the PCEF reports on. Failed rules leave the
    /// AF session (so no re-decision installs them again); an AF that
    /// subscribed hears of the failure, or of the rules now active
    /// (INDICATION_OF_SUCCESSFUL_RESOURCES_ALLOCATION).
    fn af_rule_reports(&self, s: &mut GxSession, reports: &[RuleFailure]) -> Vec<AfNote> {
        let mut notices = Vec::new();
        for af in s.af.iter_mut() {
            let success = enums::SPECIFIC_ACTION::INDICATION_OF_SUCCESSFUL_RESOURCES_ALLOCATION;
            let active: Vec<&str> = reports
                .iter()
                .filter(|r| r.status == 0 && af.owns(&r.rule))
                .map(|r| r.rule.as_str())
                .collect();
            if af.subscribed(success) && !active.is_empty() {
                notices.push(AfNote {
                    flows: af.flows_of(&active),
                    ..AfNote::new(af, success)
                });
            }
            let failed: Vec<&RuleFailure> = reports
                .iter()
                .filter(|r| r.status != 0 && af.owns(&r.rule))
                .collect();
            if failed.is_empty() {
                continue;
            }
            let names: Vec<&str> = failed.iter().map(|f| f.rule.as_str()).collect();
            let flows = af.flows_of(&names);
            af.rules
                .retain(|r| !failed.iter().any(|f| f.rule == r.name));
            // TEMPORARILY_INACTIVE (2) is a bearer lost for now; INACTIVE
            // a rule that could not be (or is no longer) installed. The AF
            // hears the most fitting action it subscribed to.
            use enums::SPECIFIC_ACTION::{
                INDICATION_OF_FAILED_RESOURCES_ALLOCATION as FAILED,
                INDICATION_OF_LOSS_OF_BEARER as LOST, INDICATION_OF_RELEASE_OF_BEARER as RELEASED,
            };
            let preference = if failed.iter().all(|f| f.status == 2) {
                [LOST, FAILED, RELEASED]
            } else {
                [FAILED, RELEASED, LOST]
            };
            let action = preference.into_iter().find(|a| af.subscribed(*a));
            if let Some(action) = action {
                notices.push(AfNote {
                    flows,
                    ..AfNote::new(af, action)
                });
            }
        }
        notices
    }

    /// Sends the AF notices in the background (never holding up an answer).
    pub(crate) fn spawn_af_notices(&self, notices: Vec<AfNote>) {
        if notices.is_empty() {
            return;
        }
        let Some(this) = self.me_ref.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            for note in notices {
                this.notify_af(&note).await;
            }
        });
    }

    async fn notify_af(&self, note: &AfNote) {
        let (af, action) = (&note.af, note.action);
        if let Some(uri) = &af.notification_uri {
            let started = Instant::now();
            let res = match self.n5() {
                Ok(n5) => n5.event(af, action).await,
                Err(e) => Err(e),
            };
            self.state.af_notifications.fetch_add(1, Relaxed);
            self.telemetry
                .metrics()
                .request(Command::N5Notify, http_code(&res), started.elapsed());
            tracing::info!(af = %uri, session = %af.id, action, answer = ?res, "AF notified (N5)");
            return;
        }
        let Some(peer) = self.signalling.route_to(&af.af_host) else {
            tracing::warn!(af = %af.af_host, session = %af.id, "AF not connected; notification dropped");
            return;
        };
        let notice = AfNotice {
            actions: vec![action],
            rat_type: note.rat_type,
            ip_can_type: note.ip_can_type,
            charging_id: note.charging_id.as_deref(),
            flows: note.flows.clone(),
        };
        let started = Instant::now();
        let res = peer
            .request(rx::RX, cmd::RE_AUTH, |b| {
                rx::encode_af_rar(
                    b,
                    &af.id,
                    self.signalling.me(),
                    &af.af_host,
                    &af.af_realm,
                    &notice,
                )
            })
            .await;
        let code = match &res {
            Ok(m) => rx::decode_answer_code(m).unwrap_or(0),
            Err(_) => NO_ANSWER,
        };
        self.state.af_notifications.fetch_add(1, Relaxed);
        self.telemetry
            .metrics()
            .request(Command::Rar, code, started.elapsed());
        tracing::info!(af = %af.af_host, session = %af.id, action, code, "AF notified");
    }

    /// After a Gx session ended: ASR (Abort-Cause BEARER_RELEASED) to every
    /// AF session it held, in the background.
    pub(crate) fn abort_afs(&self, ended: &GxSession) {
        if ended.af.is_empty() {
            return;
        }
        let Some(this) = self.me_ref.upgrade() else {
            return;
        };
        let afs = ended.af.clone();
        for af in &afs {
            self.state.remember_aborted(&af.id, &af.af_host);
        }
        tokio::spawn(async move {
            for af in afs {
                this.send_asr(&af).await;
            }
        });
    }

    async fn send_asr(&self, af: &AfSession) {
        if let Some(uri) = &af.notification_uri {
            let started = Instant::now();
            let res = match self.n5() {
                Ok(n5) => n5.terminate(af).await,
                Err(e) => Err(e),
            };
            self.telemetry
                .metrics()
                .request(Command::N5Notify, http_code(&res), started.elapsed());
            tracing::info!(af = %uri, session = %af.id, answer = ?res, "AF session terminated (N5)");
            return;
        }
        let Some(peer) = self.signalling.route_to(&af.af_host) else {
            tracing::warn!(af = %af.af_host, session = %af.id, "AF not connected; ASR not sent");
            return;
        };
        let started = Instant::now();
        let res = peer
            .request(rx::RX, cmd::ABORT_SESSION, |b| {
                rx::encode_asr(
                    b,
                    &af.id,
                    self.signalling.me(),
                    &af.af_host,
                    &af.af_realm,
                    enums::ABORT_CAUSE::BEARER_RELEASED,
                )
            })
            .await;
        let code = match &res {
            Ok(m) => rx::decode_answer_code(m).unwrap_or(0),
            Err(_) => NO_ANSWER,
        };
        self.telemetry
            .metrics()
            .request(Command::Asr, code, started.elapsed());
        tracing::info!(af = %af.af_host, session = %af.id, code, "AF session aborted");
    }

    /// Rx gauges and counters for /metrics.
    pub(crate) fn write_rx_metrics(&self, out: &mut Exposition) {
        out.counter(
            "pcrf_rx_binding_failures_total",
            "AARs answered IP-CAN_SESSION_NOT_AVAILABLE (5065): no open Gx session of the AAR's APN and subscriber held the UE address",
            self.state.binding_failures.load(Relaxed),
        );
        out.counter(
            "pcrf_rx_af_notifications_total",
            "RARs sent to AFs for a subscribed Specific-Action",
            self.state.af_notifications.load(Relaxed),
        );
        out.counter(
            "pcrf_rx_policy_errors_total",
            "AARs answered 5012 because authorize_media failed (error, budget, bad return value)",
            self.state.policy_errors.load(Relaxed),
        );
        out.gauge(
            "pcrf_rx_sessions",
            "Rx (AF) sessions bound to open Gx sessions",
            self.sessions.table().af_index().len() as u64,
        );
    }
}

/// CHARGING_CORRELATION_EXCHANGE: each AF session that subscribed hears
/// the access network's charging ids for its own rules (or for the whole
/// IP-CAN session when the PCEF named no rule).
/// An AF's HTTP answer counted as an RAA's code would be: 2001 for a
/// 2xx, 5002 for a 404, 5012 otherwise, none when no answer came.
fn http_code(res: &Result<u16, String>) -> u32 {
    match res {
        Ok(s) if (200..300).contains(s) => result_code::DIAMETER_SUCCESS,
        Ok(404) => result_code::DIAMETER_UNKNOWN_SESSION_ID,
        Ok(_) => result_code::DIAMETER_UNABLE_TO_COMPLY,
        Err(_) => NO_ANSWER,
    }
}

fn af_charging_ids(s: &GxSession, ids: &[ChargingId]) -> Vec<AfNote> {
    let action = enums::SPECIFIC_ACTION::CHARGING_CORRELATION_EXCHANGE;
    let mut notes = Vec::new();
    for af in s.af.iter().filter(|af| af.subscribed(action)) {
        for id in ids {
            if id.rules.is_empty() || id.rules.iter().any(|r| af.owns(r)) {
                notes.push(AfNote {
                    charging_id: Some(id.value.clone()),
                    ..AfNote::new(af, action)
                });
            }
        }
    }
    notes
}

/// The hook's rules must have names, distinct from each other and from any
/// rule that is not this AF session's (the policy's own dynamic rules,
/// other AF sessions'): installing one would replace that rule at the PCEF.
fn check_rule_names(
    s: &GxSession,
    rx_session: &str,
    d: crate::policy::media::MediaDecision,
) -> Result<crate::policy::media::MediaDecision, String> {
    let mine = |name: &str| s.af.iter().any(|af| af.id == rx_session && af.owns(name));
    for (i, r) in d.rules.iter().enumerate() {
        if r.name.is_empty() {
            return Err("authorize_media returned a rule without a name".into());
        }
        if d.rules[..i].iter().any(|o| o.name == r.name) {
            return Err(format!("authorize_media returned rule {:?} twice", r.name));
        }
        let taken = s.installed.definitions.iter().any(|x| x.name == r.name)
            || s.installed.rules.contains(&r.name);
        if taken && !mine(&r.name) {
            return Err(format!(
                "authorize_media returned rule {:?}, a name another rule of the session has",
                r.name
            ));
        }
    }
    Ok(d)
}

impl crate::metrics::MetricsSource for Rx {
    fn write(&self, out: &mut crate::metrics::Exposition) {
        self.write_rx_metrics(out);
    }
}
