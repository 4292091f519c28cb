//! The emulated PCEFs (P-GWs): P Gx client connections to the PCRF, each
//! its own Diameter node (Origin-Host pgw-N.<realm>) with CER/CEA and the
//! RFC 3539 watchdog, answering the PCRF's RARs with RAA 2001 as a gateway
//! that applied the change would, and counting them. A RAR carrying
//! Session-Release-Cause asks the gateway to end the session: its
//! Session-Id is queued for the runner, which sends the CCR-T.

use crate::client_peers::ClientPeers;
use crate::delivery::Delivery;
use crate::gx::Gateway;
use crate::scenario::GxSettings;
use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd};
use diameter::peer::{Application, CloseReason, LocalNode, PeerSettings};
use diameter::transport::{Handler, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use std::collections::HashSet;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Counters shared by every emulated PCEF.
#[derive(Debug, Default)]
pub struct PcefCounters {
    pub rar_received: AtomicU64,
    pub raa_sent: AtomicU64,
    /// RARs with Session-Release-Cause.
    pub release_requests: AtomicU64,
    /// Session-Ids the PCRF asked to release, not yet acted on.
    pub releases: Mutex<HashSet<String>>,
    /// Connection events worth reporting (a PCEF losing its PCRF).
    pub events: Mutex<Vec<String>>,
}

impl PcefCounters {
    pub fn lock_releases(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.releases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the PCRF asked to release this session (forgets the request).
    pub fn take_release(&self, session_id: &str) -> bool {
        self.lock_releases().remove(session_id)
    }
}

/// Answers RAR with RAA; every other request is refused by the transport
/// with 3001, as a PCEF serves nothing else on Gx.
#[derive(Clone, Debug)]
pub struct PcefHandler {
    counters: Arc<PcefCounters>,
}

impl Handler for PcefHandler {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::GX && command == cmd::RE_AUTH
    }

    fn handle(
        &self,
        req: Message,
        peer: PeerHandle,
    ) -> impl Future<Output = Result<Bytes, DiameterError>> + Send {
        let counters = self.counters.clone();
        async move {
            counters.rar_received.fetch_add(1, Relaxed);
            if let Ok([Some(sid), Some(_)]) =
                req.pick(&[avp::SESSION_ID, avp::SESSION_RELEASE_CAUSE])
            {
                if let Ok(sid) = sid.as_str() {
                    counters.release_requests.fetch_add(1, Relaxed);
                    counters.lock_releases().insert(sid.to_string());
                }
            }
            let mut buf = BytesMut::with_capacity(256);
            let mut b = MessageBuilder::answer(&mut buf, &req);
            let local = peer.local();
            b.result_code(diameter::result_code::DIAMETER_SUCCESS)
                .origin(&local.origin_host, &local.origin_realm);
            b.finish();
            counters.raa_sent.fetch_add(1, Relaxed);
            Ok(buf.freeze())
        }
    }

    fn peer_down(&self, peer: &PeerHandle, reason: CloseReason) {
        let mut ev = self
            .counters
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Bounded: a flapping peer must not grow the report without end.
        if ev.len() < 100 {
            ev.push(format!(
                "{} lost its connection: {reason:?}",
                peer.local().origin_host
            ));
        }
    }
}

/// The emulated gateways of a run.
pub struct Pcefs {
    peers: ClientPeers,
    gateways: Vec<Arc<Gateway>>,
    pub counters: Arc<PcefCounters>,
    /// Retransmission and the answer log, for every request of the run.
    pub delivery: Arc<Delivery>,
}

/// How the emulated gateways connect.
#[derive(Clone, Debug)]
pub struct PcefOptions {
    pub target: SocketAddr,
    pub peers: usize,
    pub request_timeout: Duration,
    /// RFC 3539 Tw (at least 6 s).
    pub watchdog: Duration,
    pub connect_timeout: Duration,
}

impl Pcefs {
    /// Connects `opts.peers` gateways and waits until every one is open.
    pub async fn connect(opts: &PcefOptions, gx: &GxSettings) -> Result<Pcefs, String> {
        Pcefs::connect_tuned(opts, gx, false).await
    }

    /// [`connect`](Self::connect); with `fast_reconnect` the gateways
    /// reconnect after 100 ms, backing off to at most 2 s (instead of 1 s
    /// up to Tc = 30 s): for chaos runs, where the server restarts.
    pub async fn connect_tuned(
        opts: &PcefOptions,
        gx: &GxSettings,
        fast_reconnect: bool,
    ) -> Result<Pcefs, String> {
        if opts.peers == 0 || opts.peers > 250 {
            return Err(format!("--peers must be 1..=250, not {}", opts.peers));
        }
        let counters = Arc::new(PcefCounters::default());
        let handler = Arc::new(PcefHandler {
            counters: counters.clone(),
        });
        let settings = Arc::new(PeerSettings {
            tw: opts.watchdog.max(Duration::from_secs(6)),
            request_timeout: opts.request_timeout,
            cer_timeout: opts.connect_timeout,
            ..PeerSettings::default()
        });
        let settings = if fast_reconnect {
            Arc::new(PeerSettings {
                reconnect_initial: Duration::from_millis(100),
                tc: Duration::from_secs(2),
                ..(*settings).clone()
            })
        } else {
            settings
        };
        let mut nodes = Vec::with_capacity(opts.peers);
        let mut gateways = Vec::with_capacity(opts.peers);
        for i in 0..opts.peers {
            let host = format!("pgw-{}.{}", i + 1, gx.origin_realm);
            let local = LocalNode::new(host.clone(), gx.origin_realm.clone())
                .with_application(Application::auth_vendor(app::GX, crate::gx::VENDOR_3GPP));
            let n = i as u8;
            gateways.push(Arc::new(Gateway {
                origin_host: host,
                origin_realm: gx.origin_realm.clone(),
                destination_realm: gx.destination_realm.clone(),
                destination_host: gx.destination_host.clone(),
                origin_state_id: local.origin_state_id,
                // Documentation ranges (RFC 5737): P-GW and S-GW addresses.
                pgw_address: Ipv4Addr::new(192, 0, 2, n.wrapping_add(1)),
                sgw_address: Ipv4Addr::new(198, 51, 100, n.wrapping_add(1)),
                mcc_mnc: gx.mcc_mnc.clone(),
                apn: gx.apn.clone(),
            }));
            nodes.push((local, handler.clone()));
        }
        let peers = ClientPeers::connect(
            opts.target,
            &settings,
            nodes,
            opts.connect_timeout,
            "gateway",
            "is the server running?",
        )
        .await?;
        Ok(Pcefs {
            peers,
            gateways,
            counters,
            delivery: Arc::default(),
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

    pub fn gateway(&self, i: usize) -> &Arc<Gateway> {
        &self.gateways[i % self.gateways.len()]
    }

    /// Connection events so far.
    pub fn events(&self) -> Vec<String> {
        self.counters
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Disconnects every gateway with DPR (REBOOTING: we may come back).
    pub async fn shutdown(&self) {
        self.peers.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::dict::avp;
    use diameter::transport::Node;

    /// A PCRF stand-in that serves no requests of its own; the test drives
    /// its side of the connection (the RAR) by hand.
    struct Silent;

    impl Handler for Silent {
        fn serves(&self, _: u32, _: u32) -> bool {
            false
        }
        fn handle(
            &self,
            _req: Message,
            _peer: PeerHandle,
        ) -> impl Future<Output = Result<Bytes, DiameterError>> + Send {
            std::future::ready(Err(DiameterError::new(3001, "unused")))
        }
    }

    #[tokio::test]
    async fn answers_rar_with_raa_2001_and_counts_it() {
        let local = LocalNode::new("pcrf.pcrf.test", "pcrf.test")
            .with_application(Application::auth_vendor(app::GX, crate::gx::VENDOR_3GPP));
        let node = Node::new(local, PeerSettings::default(), Silent);
        let server = node.listen("127.0.0.1:0").await.expect("listen");
        let addr = server.local_addr().expect("addr");
        let table = server.peer_table();
        tokio::spawn(server.run(std::future::pending()));

        let gx = GxSettings {
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            apn: "internet".into(),
            mcc_mnc: "00101".into(),
        };
        let opts = PcefOptions {
            target: addr,
            peers: 2,
            request_timeout: Duration::from_secs(5),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        };
        let pcefs = Pcefs::connect(&opts, &gx).await.expect("gateways open");
        assert_eq!(pcefs.len(), 2);
        assert_eq!(pcefs.gateway(1).origin_host, "pgw-2.bench.test");

        let pgw = table.get("pgw-2.bench.test").expect("server sees pgw-2");
        let raa = pgw
            .request(app::GX, cmd::RE_AUTH, |b| {
                b.str(avp::SESSION_ID, "pgw-2.bench.test;1;7")
                    .u32(avp::AUTH_APPLICATION_ID, app::GX)
                    .origin("pcrf.pcrf.test", "pcrf.test")
                    .str(avp::DESTINATION_REALM, "bench.test")
                    .str(avp::DESTINATION_HOST, "pgw-2.bench.test")
                    .i32(avp::RE_AUTH_REQUEST_TYPE, 0);
            })
            .await
            .expect("RAA");
        raa.validate().expect("valid RAA");
        assert_eq!(raa.session_id(), Ok(Some("pgw-2.bench.test;1;7")));
        let [rc, oh] = raa
            .pick(&[avp::RESULT_CODE, avp::ORIGIN_HOST])
            .expect("pick");
        assert_eq!(rc.map(|a| a.as_u32()), Some(Ok(2001)));
        assert_eq!(oh.map(|a| a.as_str()), Some(Ok("pgw-2.bench.test")));
        assert_eq!(pcefs.counters.rar_received.load(Relaxed), 1);
        assert_eq!(pcefs.counters.raa_sent.load(Relaxed), 1);
        assert_eq!(pcefs.counters.release_requests.load(Relaxed), 0);

        // A RAR that releases the session queues it for the runner.
        let raa = pgw
            .request(app::GX, cmd::RE_AUTH, |b| {
                b.str(avp::SESSION_ID, "pgw-2.bench.test;1;8")
                    .u32(avp::AUTH_APPLICATION_ID, app::GX)
                    .origin("pcrf.pcrf.test", "pcrf.test")
                    .str(avp::DESTINATION_REALM, "bench.test")
                    .i32(avp::RE_AUTH_REQUEST_TYPE, 0)
                    .i32(avp::SESSION_RELEASE_CAUSE, 0);
            })
            .await
            .expect("RAA");
        assert_eq!(
            raa.find(avp::RESULT_CODE).expect("ok").map(|a| a.as_u32()),
            Some(Ok(2001))
        );
        assert_eq!(pcefs.counters.release_requests.load(Relaxed), 1);
        assert!(pcefs.counters.take_release("pgw-2.bench.test;1;8"));
        assert!(!pcefs.counters.take_release("pgw-2.bench.test;1;8"));
        pcefs.shutdown().await;
    }

    #[tokio::test]
    async fn refuses_nonsense_peer_counts() {
        let gx = GxSettings {
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            apn: "internet".into(),
            mcc_mnc: "00101".into(),
        };
        let opts = PcefOptions {
            target: "127.0.0.1:9".parse().expect("addr"),
            peers: 0,
            request_timeout: Duration::from_secs(1),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(1),
        };
        assert!(Pcefs::connect(&opts, &gx).await.is_err());
    }
}
