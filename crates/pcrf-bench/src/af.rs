//! The emulated AFs (P-CSCFs): Rx client connections to the PCRF, each its
//! own Diameter node (Origin-Host pcscf-N.<realm>) advertising Rx
//! (16777236, vendor 10415). They answer the PCRF's RAR (Specific-Action
//! notifications) and ASR (the bearer or the IP-CAN session is gone) with
//! 2001 (5002 for a session no call holds), counting both; an ASR also wakes the call so that it sends its STR
//! at once, as TS 29.214 §4.4.4 has the AF do after the ASA.

use crate::client_peers::ClientPeers;
use crate::rx::{self, AfIdentity};
use bytes::Bytes;
use diameter::dict::{app, avp, cmd};
use diameter::peer::{Application, CloseReason, LocalNode, PeerSettings};
use diameter::transport::{Handler, PeerHandle};
use diameter::{DiameterError, Message};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// What the AFs received from the PCRF.
#[derive(Debug, Default)]
pub struct AfCounters {
    pub rar_received: AtomicU64,
    pub asr_received: AtomicU64,
    /// RARs and ASRs for a session no call holds, answered 5002.
    pub unknown_session: AtomicU64,
    /// Specific-Action values notified in RARs, by value.
    pub notified: Mutex<BTreeMap<i32, u64>>,
    /// Calls in progress, woken by an ASR for their Rx session.
    calls: Mutex<HashMap<String, Arc<Notify>>>,
    pub events: Mutex<Vec<String>>,
}

/// The AFs' counts, for a report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AfCounts {
    pub rar_received: u64,
    pub asr_received: u64,
    #[serde(default)]
    pub unknown_session: u64,
    /// Specific-Action value (as a string, for JSON) to notifications.
    pub notified: BTreeMap<String, u64>,
}

impl AfCounters {
    /// Registers a call: the returned Notify fires on an ASR for it.
    pub fn watch(&self, session_id: &str) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        self.lock_calls().insert(session_id.to_string(), n.clone());
        n
    }

    pub fn unwatch(&self, session_id: &str) {
        self.lock_calls().remove(session_id);
    }

    fn lock_calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn counts(&self) -> AfCounts {
        AfCounts {
            rar_received: self.rar_received.load(Relaxed),
            asr_received: self.asr_received.load(Relaxed),
            unknown_session: self.unknown_session.load(Relaxed),
            notified: self
                .notified
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
        }
    }
}

/// Answers Rx RAR and ASR; anything else is refused by the transport with
/// 3001, as an AF serves nothing else.
#[derive(Clone, Debug)]
pub struct AfHandler {
    counters: Arc<AfCounters>,
}

impl AfHandler {
    pub fn new(counters: Arc<AfCounters>) -> Self {
        AfHandler { counters }
    }
}

impl Handler for AfHandler {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::RX && (command == cmd::RE_AUTH || command == cmd::ABORT_SESSION)
    }

    fn handle(
        &self,
        req: Message,
        peer: PeerHandle,
    ) -> impl Future<Output = Result<Bytes, DiameterError>> + Send {
        let counters = self.counters.clone();
        async move {
            let call = req
                .session_id()
                .ok()
                .flatten()
                .and_then(|sid| counters.lock_calls().get(sid).cloned());
            if req.command_code() == cmd::ABORT_SESSION {
                counters.asr_received.fetch_add(1, Relaxed);
                if let Some(n) = &call {
                    n.notify_one();
                }
            } else {
                counters.rar_received.fetch_add(1, Relaxed);
                let mut notified = counters.notified.lock().unwrap_or_else(|e| e.into_inner());
                for a in req.avps().filter_code(avp::SPECIFIC_ACTION).flatten() {
                    if let Ok(v) = a.as_enum() {
                        *notified.entry(v).or_default() += 1;
                    }
                }
            }
            let local = peer.local();
            // A session no call holds (ended, or never ours): RFC 6733 §7.1.5.
            let code = if call.is_some() {
                diameter::result_code::DIAMETER_SUCCESS
            } else {
                counters.unknown_session.fetch_add(1, Relaxed);
                diameter::result_code::DIAMETER_UNKNOWN_SESSION_ID
            };
            Ok(rx::answer(
                &req,
                &local.origin_host,
                &local.origin_realm,
                code,
            ))
        }
    }

    fn peer_down(&self, peer: &PeerHandle, reason: CloseReason) {
        let mut ev = self
            .counters
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if ev.len() < 100 {
            ev.push(format!(
                "{} lost its connection: {reason:?}",
                peer.local().origin_host
            ));
        }
    }
}

/// How the emulated AFs connect.
#[derive(Clone, Debug)]
pub struct AfOptions {
    pub target: SocketAddr,
    pub peers: usize,
    pub origin_realm: String,
    pub destination_realm: String,
    pub destination_host: Option<String>,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
}

/// The emulated P-CSCFs of a run.
pub struct Afs {
    peers: ClientPeers,
    identities: Vec<Arc<AfIdentity>>,
    pub counters: Arc<AfCounters>,
}

impl Afs {
    /// Connects `opts.peers` AFs and waits until every one is open.
    pub async fn connect(opts: &AfOptions) -> Result<Afs, String> {
        if opts.peers == 0 || opts.peers > 250 {
            return Err(format!("AF peers must be 1..=250, not {}", opts.peers));
        }
        let counters = Arc::new(AfCounters::default());
        let handler = Arc::new(AfHandler::new(counters.clone()));
        let settings = Arc::new(PeerSettings {
            request_timeout: opts.request_timeout,
            cer_timeout: opts.connect_timeout,
            ..PeerSettings::default()
        });
        let mut nodes = Vec::with_capacity(opts.peers);
        let mut identities = Vec::with_capacity(opts.peers);
        for i in 0..opts.peers {
            let host = format!("pcscf-{}.{}", i + 1, opts.origin_realm);
            let local = LocalNode::new(host.clone(), opts.origin_realm.clone())
                .with_application(Application::auth_vendor(app::RX, crate::gx::VENDOR_3GPP));
            nodes.push((local, handler.clone()));
            identities.push(Arc::new(AfIdentity {
                origin_host: host,
                origin_realm: opts.origin_realm.clone(),
                destination_realm: opts.destination_realm.clone(),
                destination_host: opts.destination_host.clone(),
            }));
        }
        let peers = ClientPeers::connect(
            opts.target,
            &settings,
            nodes,
            opts.connect_timeout,
            "AF",
            "does the server serve Rx?",
        )
        .await?;
        Ok(Afs {
            peers,
            identities,
            counters,
        })
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    pub fn handle(&self, i: usize) -> &PeerHandle {
        self.peers.handle(i)
    }

    pub fn identity(&self, i: usize) -> &Arc<AfIdentity> {
        &self.identities[i % self.identities.len()]
    }

    pub fn events(&self) -> Vec<String> {
        self.counters
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Disconnects every AF with DPR (REBOOTING).
    pub async fn shutdown(&self) {
        self.peers.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::transport::Node;

    /// The PCRF's side, serving nothing: the test sends its RAR and ASR.
    struct Silent;

    impl Handler for Silent {
        fn serves(&self, _: u32, _: u32) -> bool {
            false
        }
        async fn handle(&self, _req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
            Err(DiameterError::new(3001, "unused"))
        }
    }

    async fn send(pcrf: &PeerHandle, command: u32, sid: &str) -> u32 {
        let a = pcrf
            .request(app::RX, command, |b| {
                b.str(avp::SESSION_ID, sid)
                    .u32(avp::AUTH_APPLICATION_ID, app::RX)
                    .origin("pcrf.pcrf.test", "pcrf.test")
                    .str(avp::DESTINATION_REALM, "ims.test")
                    .str(avp::DESTINATION_HOST, "pcscf-1.ims.test");
                if command == cmd::ABORT_SESSION {
                    b.i32(avp::ABORT_CAUSE, 0);
                } else {
                    b.i32(avp::RE_AUTH_REQUEST_TYPE, 0)
                        .i32(avp::SPECIFIC_ACTION, 2);
                }
            })
            .await
            .expect("answer");
        a.validate().expect("valid answer");
        assert_eq!(a.session_id(), Ok(Some(sid)));
        match crate::stats::ResultKind::of(&a) {
            crate::stats::ResultKind::Code(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn answers_calls_in_progress_and_refuses_unknown_sessions() {
        let local = LocalNode::new("pcrf.pcrf.test", "pcrf.test")
            .with_application(Application::auth_vendor(app::RX, crate::gx::VENDOR_3GPP));
        let node = Node::new(local, PeerSettings::default(), Silent);
        let server = node.listen("127.0.0.1:0").await.expect("listen");
        let target = server.local_addr().expect("addr");
        let table = server.peer_table();
        tokio::spawn(server.run(std::future::pending()));
        let afs = Afs::connect(&AfOptions {
            target,
            peers: 1,
            origin_realm: "ims.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            request_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(5),
        })
        .await
        .expect("open");
        let pcrf = table.get("pcscf-1.ims.test").expect("connected");

        assert_eq!(
            send(&pcrf, cmd::RE_AUTH, "pcscf-1.ims.test;1;1").await,
            5002
        );
        let call = afs.counters.watch("pcscf-1.ims.test;1;1");
        assert_eq!(
            send(&pcrf, cmd::RE_AUTH, "pcscf-1.ims.test;1;1").await,
            2001
        );
        assert_eq!(
            send(&pcrf, cmd::ABORT_SESSION, "pcscf-1.ims.test;1;1").await,
            2001
        );
        // The ASR woke the call.
        tokio::time::timeout(Duration::from_secs(1), call.notified())
            .await
            .expect("the call is told");
        afs.counters.unwatch("pcscf-1.ims.test;1;1");
        assert_eq!(
            send(&pcrf, cmd::ABORT_SESSION, "pcscf-1.ims.test;1;1").await,
            5002
        );
        let c = afs.counters.counts();
        assert_eq!(
            (c.rar_received, c.asr_received, c.unknown_session),
            (2, 2, 2)
        );
        assert_eq!(c.notified.get("2"), Some(&2));
        afs.shutdown().await;
    }
}
