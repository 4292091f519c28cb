//! The emulated OCS (`pcrf-bench ocs`): an Sy server (TS 29.219) for the
//! PCRF to talk to in benchmarks and by hand. It answers SLR with a
//! Policy-Counter-Status-Report per counter asked for (all of them when
//! the initial SLR names none), from a configured counter table; refuses
//! unknown counters with 5570 and an SLR for an unknown session with 5002;
//! keeps a session per SLR-I until the PCRF's STR; and pushes SNRs at a
//! configured rate to the sessions it has, cycling each counter through its
//! configured statuses, as spending crosses thresholds. It counts all of it.

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd, enums};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::result_code::{DIAMETER_SUCCESS, DIAMETER_UNKNOWN_SESSION_ID};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// TS 29.219 §5.5.3.
pub const UNKNOWN_POLICY_COUNTERS: u32 = 5570;
/// TS 29.219 §5.5.2.
pub const NO_AVAILABLE_POLICY_COUNTERS: u32 = 4241;

/// The counters the OCS knows: identifier to its statuses (the first is
/// reported in SLAs; SNRs move through the rest and back).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterTable(pub BTreeMap<String, Vec<String>>);

impl CounterTable {
    /// Parses `ID=STATUS[,STATUS...]`, as `--counter` takes it.
    pub fn add(&mut self, spec: &str) -> Result<(), String> {
        let (id, statuses) = spec
            .split_once('=')
            .ok_or_else(|| format!("counter {spec:?}: write ID=STATUS[,STATUS...]"))?;
        let statuses: Vec<String> = statuses.split(',').map(|s| s.trim().to_string()).collect();
        if id.trim().is_empty() || statuses.iter().any(|s| s.is_empty()) {
            return Err(format!("counter {spec:?}: empty identifier or status"));
        }
        self.0.insert(id.trim().to_string(), statuses);
        Ok(())
    }
}

/// What the OCS saw and did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OcsCounts {
    pub slr_initial: u64,
    pub slr_intermediate: u64,
    /// SLAs by result ("2001", "10415:5570", "5002").
    pub sla: BTreeMap<String, u64>,
    pub snr_sent: u64,
    pub sna_success: u64,
    /// SNAs with another result, or no answer.
    pub sna_failed: u64,
    pub str_received: u64,
    /// Sessions open now.
    pub sessions: u64,
}

struct SySession {
    pcrf: PeerHandle,
    /// The PCRF's Origin-Host and Origin-Realm, for the SNR's destination.
    host: String,
    realm: String,
    counters: Vec<String>,
    /// SNRs sent so far for this session: selects the next status.
    notified: usize,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, SySession>,
    /// Round-robin position of the SNR sender.
    order: Vec<String>,
    next: usize,
    counts: OcsCounts,
}

/// An SNR to send: the session, the PCRF and its address, the statuses.
struct Notification {
    session_id: String,
    pcrf: PeerHandle,
    host: String,
    realm: String,
    reports: Vec<(String, String)>,
}

/// The Sy server's handler.
pub struct Ocs {
    origin_host: String,
    origin_realm: String,
    table: CounterTable,
    state: Arc<Mutex<State>>,
}

impl Ocs {
    pub fn new(origin_host: &str, origin_realm: &str, table: CounterTable) -> Ocs {
        Ocs {
            origin_host: origin_host.to_string(),
            origin_realm: origin_realm.to_string(),
            table,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn counts(&self) -> OcsCounts {
        let s = self.lock();
        OcsCounts {
            sessions: s.sessions.len() as u64,
            ..s.counts.clone()
        }
    }

    fn answer(&self, req: &Message, f: impl FnOnce(&mut MessageBuilder<'_>)) -> Bytes {
        let mut buf = BytesMut::with_capacity(512);
        let mut b = MessageBuilder::answer(&mut buf, req);
        b.u32(avp::AUTH_APPLICATION_ID, app::SY)
            .origin(&self.origin_host, &self.origin_realm);
        f(&mut b);
        b.finish();
        buf.freeze()
    }

    fn count_sla(&self, key: &str) {
        *self.lock().counts.sla.entry(key.to_string()).or_default() += 1;
    }

    /// SLR (TS 29.219 §5.6.1) -> SLA (§5.6.2).
    fn slr(&self, req: &Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let sid = req
            .session_id()
            .ok()
            .flatten()
            .ok_or_else(|| diameter::codec::missing_avp(avp::SESSION_ID, "Session-Id"))?
            .to_string();
        // The codec's errors carry the offending AVP (Failed-AVP).
        let [rt, oh, or] =
            req.pick(&[avp::SL_REQUEST_TYPE, avp::ORIGIN_HOST, avp::ORIGIN_REALM])?;
        let rt = rt
            .ok_or_else(|| diameter::codec::missing_avp(avp::SL_REQUEST_TYPE, "SL-Request-Type"))?;
        let initial = match rt.as_enum()? {
            enums::SL_REQUEST_TYPE::INITIAL_REQUEST => true,
            enums::SL_REQUEST_TYPE::INTERMEDIATE_REQUEST => false,
            _ => return Err(rt.invalid_value("unknown SL-Request-Type")),
        };
        let text = |a: Option<diameter::Avp<'_>>| {
            a.and_then(|a| a.as_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let (host, realm) = (text(oh), text(or));
        let mut asked = Vec::new();
        for a in req.avps().filter_code(avp::POLICY_COUNTER_IDENTIFIER) {
            let a = a?;
            let id = a
                .as_str()
                .map_err(|_| a.invalid_value("Policy-Counter-Identifier is not UTF-8"))?;
            asked.push(id.to_string());
        }
        {
            let mut st = self.lock();
            if initial {
                st.counts.slr_initial += 1;
            } else {
                st.counts.slr_intermediate += 1;
                if !st.sessions.contains_key(&sid) {
                    drop(st);
                    self.count_sla("5002");
                    return Ok(self.answer(req, |b| {
                        b.result_code(DIAMETER_UNKNOWN_SESSION_ID);
                    }));
                }
            }
        }
        // An initial SLR without identifiers asks for every counter.
        if asked.is_empty() && initial {
            asked = self.table.0.keys().cloned().collect();
        }
        if initial && asked.is_empty() {
            self.count_sla("10415:4241");
            return Ok(self.answer(req, |b| {
                b.experimental_result(crate::gx::VENDOR_3GPP, NO_AVAILABLE_POLICY_COUNTERS);
            }));
        }
        if asked.iter().any(|id| !self.table.0.contains_key(id)) {
            self.count_sla("10415:5570");
            return Ok(self.answer(req, |b| {
                b.experimental_result(crate::gx::VENDOR_3GPP, UNKNOWN_POLICY_COUNTERS);
            }));
        }
        let reports: Vec<(String, String)> = asked
            .iter()
            .map(|id| {
                let status = self.table.0.get(id).and_then(|s| s.first()).cloned();
                (id.clone(), status.unwrap_or_default())
            })
            .collect();
        {
            let mut st = self.lock();
            let known = st.sessions.contains_key(&sid);
            let session = st.sessions.entry(sid.clone()).or_insert(SySession {
                pcrf: peer,
                host,
                realm,
                counters: Vec::new(),
                notified: 0,
            });
            for id in asked {
                if !session.counters.contains(&id) {
                    session.counters.push(id);
                }
            }
            if !known {
                st.order.push(sid);
            }
            *st.counts.sla.entry("2001".into()).or_default() += 1;
        }
        Ok(self.answer(req, |b| {
            b.result_code(DIAMETER_SUCCESS);
            for (id, status) in &reports {
                status_report(b, id, status);
            }
        }))
    }

    /// STR (TS 29.219 §5.6.5) -> STA: the session ends.
    fn str_(&self, req: &Message) -> Bytes {
        let sid = req.session_id().ok().flatten().unwrap_or_default();
        let mut st = self.lock();
        st.counts.str_received += 1;
        let known = st.sessions.remove(sid).is_some();
        st.order.retain(|s| s != sid);
        drop(st);
        self.answer(req, |b| {
            b.result_code(if known {
                DIAMETER_SUCCESS
            } else {
                DIAMETER_UNKNOWN_SESSION_ID
            });
        })
    }

    /// The next session to notify; none when there is no session.
    fn next_notification(&self) -> Option<Notification> {
        let mut st = self.lock();
        if st.order.is_empty() {
            return None;
        }
        let i = st.next % st.order.len();
        st.next = i + 1;
        let sid = st.order[i].clone();
        let s = st.sessions.get_mut(&sid)?;
        s.notified += 1;
        let reports = s
            .counters
            .iter()
            .map(|id| {
                let statuses = self.table.0.get(id).map(Vec::as_slice).unwrap_or_default();
                let status = statuses
                    .get(s.notified % statuses.len().max(1))
                    .cloned()
                    .unwrap_or_default();
                (id.clone(), status)
            })
            .collect();
        Some(Notification {
            session_id: sid,
            pcrf: s.pcrf.clone(),
            host: s.host.clone(),
            realm: s.realm.clone(),
            reports,
        })
    }

    /// Sends one SNR (TS 29.219 §5.6.3) to the next session; whether one went.
    pub async fn notify_next(&self) -> bool {
        let Some(Notification {
            session_id: sid,
            pcrf: peer,
            host,
            realm,
            reports,
        }) = self.next_notification()
        else {
            return false;
        };
        let r = peer
            .request(app::SY, cmd::SPENDING_STATUS_NOTIFICATION, |b| {
                snr(
                    b,
                    &sid,
                    (&self.origin_host, &self.origin_realm),
                    (&host, &realm),
                    &reports,
                )
            })
            .await;
        let ok = matches!(&r, Ok(a) if crate::stats::ResultKind::of(a).is_success());
        let mut st = self.lock();
        st.counts.snr_sent += 1;
        if ok {
            st.counts.sna_success += 1;
        } else {
            st.counts.sna_failed += 1;
        }
        true
    }

    /// Sends SNRs at `per_second` until `stop` resolves. Stopping happens
    /// only between SNRs: one already sent is seen through to its SNA (or
    /// its timeout), so the counts printed at the end agree with what the
    /// PCRF answered.
    pub async fn notify_until(&self, per_second: f64, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        if !(per_second.is_finite() && per_second > 0.0) {
            return stop.await;
        }
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            self.notify_next().await;
        }
    }
}

/// One Policy-Counter-Status-Report (TS 29.219 §5.3.3).
pub fn status_report(b: &mut MessageBuilder<'_>, id: &str, status: &str) {
    b.group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
        g.str(avp::POLICY_COUNTER_IDENTIFIER, id)
            .str(avp::POLICY_COUNTER_STATUS, status);
    });
}

/// The SNR's AVPs: `from` is the OCS (host, realm), `to` the PCRF.
pub fn snr(
    b: &mut MessageBuilder<'_>,
    session_id: &str,
    from: (&str, &str),
    to: (&str, &str),
    reports: &[(String, String)],
) {
    b.str(avp::SESSION_ID, session_id)
        .u32(avp::AUTH_APPLICATION_ID, app::SY)
        .origin(from.0, from.1)
        .str(avp::DESTINATION_REALM, to.1);
    if !to.0.is_empty() {
        b.str(avp::DESTINATION_HOST, to.0);
    }
    for (id, status) in reports {
        status_report(b, id, status);
    }
}

impl Handler for Ocs {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::SY && (command == cmd::SPENDING_LIMIT || command == cmd::SESSION_TERMINATION)
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        if req.command_code() == cmd::SPENDING_LIMIT {
            self.slr(&req, peer)
        } else {
            Ok(self.str_(&req))
        }
    }
}

/// The OCS's Diameter node, advertising Sy (16777302, vendor 10415).
pub fn node(origin_host: &str, origin_realm: &str, table: CounterTable) -> Node<Ocs> {
    let local = LocalNode::new(origin_host, origin_realm)
        .with_application(Application::auth_vendor(app::SY, crate::gx::VENDOR_3GPP));
    Node::new(
        local,
        PeerSettings::default(),
        Ocs::new(origin_host, origin_realm, table),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_specs_parse_and_bad_ones_are_refused() {
        let mut t = CounterTable::default();
        t.add("data-cap=valid,limit-reached").expect("ok");
        t.add("roaming = valid").expect("ok");
        assert_eq!(t.0["data-cap"], ["valid", "limit-reached"]);
        assert_eq!(t.0["roaming"], ["valid"]);
        assert!(t.add("nothing").is_err());
        assert!(t.add("=valid").is_err());
        assert!(t.add("x=valid,").is_err());
    }

    #[test]
    fn snr_is_valid() {
        let mut buf = BytesMut::new();
        let mut b =
            MessageBuilder::request(&mut buf, cmd::SPENDING_STATUS_NOTIFICATION, app::SY, 1, 2);
        snr(
            &mut b,
            "pcrf;1;2",
            ("ocs.bench.test", "bench.test"),
            ("pcrf.pcrf.test", "pcrf.test"),
            &[("data-cap".into(), "limit-reached".into())],
        );
        b.finish();
        let m = Message::parse(buf.freeze()).expect("parse");
        m.validate().expect("valid");
        let r = m
            .find(avp::POLICY_COUNTER_STATUS_REPORT)
            .expect("ok")
            .expect("present");
        let st = r
            .grouped()
            .find(avp::POLICY_COUNTER_STATUS)
            .expect("ok")
            .expect("status");
        assert_eq!(st.as_str(), Ok("limit-reached"));
    }
}
