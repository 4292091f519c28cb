//! The emulated TDFs (DPI nodes on Sd, TS 29.212 §5b): Diameter clients of
//! the PCRF, each its own node (Origin-Host tdf-N.<realm>) advertising Sd
//! (16777303, vendor 10415).
//!
//! Solicited mode: the PCRF opens the Sd session with a TSR; the TDF
//! answers TSA 2001 and records the session (the PCRF's host, the UE
//! address, the ADC rules installed). Sd RARs (ADC rule changes) are
//! answered 2001 (5002 for a session the TDF does not hold) and counted. Then [`Tdfs::report`] sends a CCR-U with
//! APPLICATION_START and usage per application, and [`Tdfs::terminate`]
//! the CCR-T. Unsolicited mode: [`Tdfs::start_unsolicited`] sends a CCR-I
//! with the UE's address first.

use crate::client_peers::ClientPeers;
use crate::sd::{self, AppUsage, TdfIdentity};
use crate::stats::{Outcome, ResultKind};
use bytes::Bytes;
use diameter::dict::{app, avp, cmd};
use diameter::peer::{Application, CloseReason, LocalNode, PeerSettings};
use diameter::transport::{Handler, PeerHandle, RequestError};
use diameter::{DiameterError, Message, MessageBuilder};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One Sd session the TDF knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdfSession {
    /// Which emulated TDF holds it.
    pub tdf: usize,
    pub pcrf_host: Option<String>,
    pub ue_ip: Option<Ipv4Addr>,
    /// ADC-Rule-Names (or base names) the PCRF installed.
    pub adc_rules: Vec<String>,
    /// The next CC-Request-Number.
    pub next_number: u32,
}

#[derive(Debug, Default)]
struct Shared {
    tsr_received: AtomicU64,
    rar_received: AtomicU64,
    sessions: Mutex<HashMap<String, TdfSession>>,
    events: Mutex<Vec<String>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, TdfSession>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the TDFs received.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TdfCounts {
    pub tsr_received: u64,
    pub rar_received: u64,
    pub sessions: u64,
}

/// Answers Sd TSR and RAR; anything else is refused by the transport (3001).
struct TdfHandler {
    index: usize,
    shared: Arc<Shared>,
}

/// The ADC rule names and base names in a TSR's or RAR's ADC-Rule-Install.
fn adc_rules(req: &Message) -> Vec<String> {
    let mut names = Vec::new();
    for install in req.avps().filter_code(avp::ADC_RULE_INSTALL).flatten() {
        for a in install.grouped().flatten() {
            if a.is(avp::ADC_RULE_BASE_NAME) {
                names.extend(a.as_str().ok().map(String::from));
            } else if a.is(avp::ADC_RULE_DEFINITION) {
                let name = a.grouped().find(avp::ADC_RULE_NAME).ok().flatten();
                names.extend(name.map(|n| String::from_utf8_lossy(n.as_octets()).into_owned()));
            }
        }
    }
    names
}

impl Handler for TdfHandler {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::SD && (command == cmd::TDF_SESSION || command == cmd::RE_AUTH)
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let sid = req
            .session_id()
            .ok()
            .flatten()
            .ok_or_else(|| diameter::codec::missing_avp(avp::SESSION_ID, "Session-Id"))?
            .to_string();
        let rules = adc_rules(&req);
        let mut code = diameter::result_code::DIAMETER_SUCCESS;
        if req.command_code() == cmd::TDF_SESSION {
            self.shared.tsr_received.fetch_add(1, Relaxed);
            let [oh, fip] = req.pick(&[avp::ORIGIN_HOST, avp::FRAMED_IP_ADDRESS])?;
            let ue_ip = fip
                .and_then(|a| <[u8; 4]>::try_from(a.as_octets()).ok())
                .map(Ipv4Addr::from);
            self.shared.lock().insert(
                sid,
                TdfSession {
                    tdf: self.index,
                    pcrf_host: oh.and_then(|a| a.as_str().ok()).map(String::from),
                    ue_ip,
                    adc_rules: rules,
                    next_number: 0,
                },
            );
        } else {
            self.shared.rar_received.fetch_add(1, Relaxed);
            match self.shared.lock().get_mut(&sid) {
                Some(s) => s.adc_rules.extend(rules),
                None => code = diameter::result_code::DIAMETER_UNKNOWN_SESSION_ID,
            }
        }
        let local = peer.local();
        Ok(sd::answer(
            &req,
            &local.origin_host,
            &local.origin_realm,
            local.origin_state_id,
            code,
        ))
    }

    fn peer_down(&self, peer: &PeerHandle, reason: CloseReason) {
        let mut ev = self.shared.events.lock().unwrap_or_else(|e| e.into_inner());
        if ev.len() < 100 {
            ev.push(format!(
                "{} lost its connection: {reason:?}",
                peer.local().origin_host
            ));
        }
    }
}

/// How the emulated TDFs connect.
#[derive(Clone, Debug)]
pub struct TdfOptions {
    pub target: SocketAddr,
    pub peers: usize,
    pub origin_realm: String,
    pub destination_realm: String,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
}

/// The emulated TDFs.
pub struct Tdfs {
    peers: ClientPeers,
    identities: Vec<TdfIdentity>,
    shared: Arc<Shared>,
}

fn outcome(r: Result<Message, RequestError>, session_id: &str, number: u32) -> Outcome {
    match r {
        Ok(a) => {
            let kind = ResultKind::of(&a);
            let echoed = a.session_id() == Ok(Some(session_id))
                && a.find(avp::CC_REQUEST_NUMBER)
                    .ok()
                    .flatten()
                    .and_then(|n| n.as_u32().ok())
                    == Some(number);
            if kind.is_success() && !echoed {
                Outcome::Answered(ResultKind::Mismatched)
            } else {
                Outcome::Answered(kind)
            }
        }
        Err(RequestError::Timeout) => Outcome::Timeout,
        Err(_) => Outcome::SendFailed,
    }
}

impl Tdfs {
    /// Connects `opts.peers` TDFs and waits until every one is open.
    pub async fn connect(opts: &TdfOptions) -> Result<Tdfs, String> {
        if opts.peers == 0 || opts.peers > 250 {
            return Err(format!("TDF peers must be 1..=250, not {}", opts.peers));
        }
        let shared = Arc::new(Shared::default());
        let settings = Arc::new(PeerSettings {
            request_timeout: opts.request_timeout,
            cer_timeout: opts.connect_timeout,
            ..PeerSettings::default()
        });
        let mut nodes = Vec::with_capacity(opts.peers);
        let mut identities = Vec::with_capacity(opts.peers);
        for i in 0..opts.peers {
            let host = format!("tdf-{}.{}", i + 1, opts.origin_realm);
            let local = LocalNode::new(host.clone(), opts.origin_realm.clone())
                .with_application(Application::auth_vendor(app::SD, crate::gx::VENDOR_3GPP));
            identities.push(TdfIdentity {
                origin_host: host,
                origin_realm: opts.origin_realm.clone(),
                destination_realm: opts.destination_realm.clone(),
                origin_state_id: local.origin_state_id,
            });
            let handler = Arc::new(TdfHandler {
                index: i,
                shared: shared.clone(),
            });
            nodes.push((local, handler));
        }
        let peers = ClientPeers::connect(
            opts.target,
            &settings,
            nodes,
            opts.connect_timeout,
            "TDF",
            "does the server serve Sd?",
        )
        .await?;
        Ok(Tdfs {
            peers,
            identities,
            shared,
        })
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    pub fn counts(&self) -> TdfCounts {
        TdfCounts {
            tsr_received: self.shared.tsr_received.load(Relaxed),
            rar_received: self.shared.rar_received.load(Relaxed),
            sessions: self.shared.lock().len() as u64,
        }
    }

    /// The Sd sessions the TDFs hold now, by Session-Id.
    pub fn sessions(&self) -> HashMap<String, TdfSession> {
        self.shared.lock().clone()
    }

    /// Takes the session's next CC-Request-Number; the TDF and PCRF host.
    fn next(&self, session_id: &str) -> Option<(usize, u32, Option<String>)> {
        let mut s = self.shared.lock();
        let session = s.get_mut(session_id)?;
        let n = session.next_number;
        session.next_number += 1;
        Some((session.tdf, n, session.pcrf_host.clone()))
    }

    /// Sends the session's next CCR (built by `build`) from the TDF that
    /// holds it; the answer and the CC-Request-Number used. `None` when no
    /// TDF holds the session.
    async fn send_next(
        &self,
        session_id: &str,
        build: impl FnOnce(&mut MessageBuilder<'_>, &sd::Request<'_>),
    ) -> Option<(Result<Message, RequestError>, u32)> {
        let (i, number, host) = self.next(session_id)?;
        let r = sd::Request {
            session_id,
            tdf: &self.identities[i],
            destination_host: host.as_deref(),
            number,
        };
        let a = self
            .peers
            .handle(i)
            .request(app::SD, cmd::CREDIT_CONTROL, |b| build(b, &r))
            .await;
        Some((a, number))
    }

    /// Unsolicited mode: TDF `tdf` saw the UE's traffic and opens the Sd
    /// session with a CCR-I; on success the session is kept.
    pub async fn start_unsolicited(
        &self,
        tdf: usize,
        session_id: &str,
        ue_ip: Ipv4Addr,
        imsi: &str,
    ) -> Outcome {
        let i = tdf % self.peers.len();
        let id = &self.identities[i];
        let r = sd::Request {
            session_id,
            tdf: id,
            destination_host: None,
            number: 0,
        };
        let answer = self
            .peers
            .handle(i)
            .request(app::SD, cmd::CREDIT_CONTROL, |b| {
                sd::ccr_initial(b, &r, ue_ip, imsi)
            })
            .await;
        let pcrf_host = answer.as_ref().ok().and_then(|a| {
            a.find(avp::ORIGIN_HOST)
                .ok()
                .flatten()
                .and_then(|h| h.as_str().ok().map(String::from))
        });
        let o = outcome(answer, session_id, 0);
        if matches!(o, Outcome::Answered(k) if k.is_success()) {
            self.shared.lock().insert(
                session_id.to_string(),
                TdfSession {
                    tdf: i,
                    pcrf_host,
                    ue_ip: Some(ue_ip),
                    adc_rules: Vec::new(),
                    next_number: 1,
                },
            );
        }
        o
    }

    /// CCR-U: APPLICATION_START for `started` (application, instance) and
    /// usage per application. `None` when the TDF has no such session.
    pub async fn report(
        &self,
        session_id: &str,
        started: &[(&str, u32)],
        usage: &[AppUsage],
    ) -> Option<Outcome> {
        let (a, number) = self
            .send_next(session_id, |b, r| sd::ccr_update(b, r, started, usage))
            .await?;
        Some(outcome(a, session_id, number))
    }

    /// CCR-T with the final usage; the session is forgotten.
    pub async fn terminate(&self, session_id: &str, usage: &[AppUsage]) -> Option<Outcome> {
        let (a, number) = self
            .send_next(session_id, |b, r| sd::ccr_terminate(b, r, usage))
            .await?;
        self.shared.lock().remove(session_id);
        Some(outcome(a, session_id, number))
    }

    pub fn events(&self) -> Vec<String> {
        self.shared
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Disconnects every TDF with DPR (REBOOTING).
    pub async fn shutdown(&self) {
        self.peers.shutdown().await;
    }
}
