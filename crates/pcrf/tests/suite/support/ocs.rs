//! An emulated OCS (the Sy server), a real Diameter server built with the
//! diameter crate, for the tests of the PCRF as Sy client: it answers SLRs
//! from a test-controlled counter table (5570 for counters it does not
//! know), records every SLR and STR, can hang before answering, and sends
//! SNRs over the connection of the PCRF node the test names (each node of a
//! cluster opens its own connection, told apart by its Origin-Host).

use bytes::Bytes;
use diameter::codec::{DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, cmd};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, PeerHandle, Server};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::TGPP;

/// The Sy application.
pub const SY: u32 = 16_777_302;

/// What an emulated OCS knows and saw.
#[derive(Default)]
struct OcsState {
    /// Known counters and their statuses; others are answered 5570.
    counters: Mutex<HashMap<String, String>>,
    /// Every request received (SLR, STR), in order.
    requests: Mutex<Vec<Message>>,
    /// The connection from each PCRF node, by its Origin-Host.
    peers: Mutex<HashMap<String, PeerHandle>>,
    /// How long to wait before answering (a hung OCS), ms.
    delay_ms: AtomicU64,
    /// A status every counter takes this long after the SLA (announced as
    /// Pending-Policy-Counter-Information).
    pending: Mutex<Option<(String, Duration)>>,
}

struct OcsHandler(Arc<OcsState>);

impl Handler for OcsHandler {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == SY && (cmd == cmd::SPENDING_LIMIT || cmd == cmd::SESSION_TERMINATION)
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        req.validate()?;
        self.0.requests.lock().expect("lock").push(req.clone());
        let delay = self.0.delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            // A slow OCS, when a test asks for one.
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.u32(avp::AUTH_APPLICATION_ID, SY)
            .origin(&peer.local().origin_host, &peer.local().origin_realm);
        if req.command_code() == cmd::SPENDING_LIMIT {
            let table = self.0.counters.lock().expect("lock").clone();
            let asked = counter_ids(&req);
            let unknown: Vec<&String> = asked.iter().filter(|c| !table.contains_key(*c)).collect();
            if unknown.is_empty() {
                b.result_code(2001);
                let pending = self.0.pending.lock().expect("lock").clone();
                for c in &asked {
                    b.group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
                        g.str(avp::POLICY_COUNTER_IDENTIFIER, c)
                            .str(avp::POLICY_COUNTER_STATUS, &table[c]);
                        if let Some((status, after)) = &pending {
                            g.group(avp::PENDING_POLICY_COUNTER_INFORMATION, |p| {
                                p.str(avp::POLICY_COUNTER_STATUS, status).time(
                                    avp::PENDING_POLICY_COUNTER_CHANGE_TIME,
                                    std::time::SystemTime::now() + *after,
                                );
                            });
                        }
                    });
                }
            } else {
                b.group(avp::EXPERIMENTAL_RESULT, |g| {
                    g.u32(avp::VENDOR_ID, TGPP)
                        .u32(avp::EXPERIMENTAL_RESULT_CODE, 5570);
                })
                .group(avp::FAILED_AVP, |g| {
                    for c in &unknown {
                        g.str(avp::POLICY_COUNTER_IDENTIFIER, c);
                    }
                });
            }
        } else {
            b.result_code(2001);
        }
        b.finish();
        Ok(buf.freeze())
    }

    fn peer_up(&self, peer: &PeerHandle) {
        if let Some(host) = peer.origin_host() {
            self.0
                .peers
                .lock()
                .expect("lock")
                .insert(host.to_string(), peer.clone());
        }
    }
}

/// The Policy-Counter-Identifiers of a message, in order.
pub fn counter_ids(m: &Message) -> Vec<String> {
    m.avps()
        .filter_map(|a| a.ok())
        .filter(|a| a.is(avp::POLICY_COUNTER_IDENTIFIER))
        .map(|a| a.as_str().expect("utf8").to_owned())
        .collect()
}

/// An OCS listening on a free loopback port.
pub struct Ocs {
    pub host: String,
    pub realm: String,
    pub addr: SocketAddr,
    state: Arc<OcsState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Ocs {
    /// Starts an OCS named `host` in `realm` that knows `counters` (name,
    /// status).
    pub async fn start(host: &str, realm: &str, counters: &[(&str, &str)]) -> Ocs {
        let state = Arc::new(OcsState::default());
        *state.counters.lock().expect("lock") = counters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let local =
            LocalNode::new(host, realm).with_application(Application::auth_vendor(SY, TGPP));
        let server = Server::bind(
            "127.0.0.1:0",
            local,
            PeerSettings::default(),
            OcsHandler(state.clone()),
        )
        .await
        .expect("bind OCS");
        let addr = server.local_addr().expect("addr");
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = server
                .run(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ocs {
            host: host.to_owned(),
            realm: realm.to_owned(),
            addr,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Its entry in the `[sy]` section's `ocs` list.
    pub fn config(&self) -> String {
        format!(
            "{{ origin_host = \"{}\", origin_realm = \"{}\", address = \"{}\" }}",
            self.host, self.realm, self.addr
        )
    }

    /// Waits `delay` before answering each request from now on (zero: at
    /// once again).
    pub fn answer_after(&self, delay: Duration) {
        self.state
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// From now on every counter's report in an SLA announces that it
    /// changes to `status` `after` from then.
    pub fn announce_pending(&self, status: &str, after: Duration) {
        *self.state.pending.lock().expect("lock") = Some((status.to_owned(), after));
    }

    /// Waits until the connection from the PCRF node `node` (its
    /// Origin-Host) is open, and returns it.
    pub async fn peer(&self, node: &str) -> PeerHandle {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let open = self
                .state
                .peers
                .lock()
                .expect("lock")
                .get(node)
                .filter(|p| p.is_open())
                .cloned();
            if let Some(p) = open {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "{node} did not connect to {}",
                self.host
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The requests with command code `command` received so far.
    pub fn requests(&self, command: u32) -> Vec<Message> {
        self.state
            .requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|m| m.command_code() == command)
            .cloned()
            .collect()
    }

    /// The Sy Session-Id of the first SLR.
    pub fn sy_session(&self) -> String {
        self.requests(cmd::SPENDING_LIMIT)[0]
            .session_id()
            .expect("sid")
            .expect("Session-Id")
            .to_owned()
    }

    /// Sends an SNR for `sy_session` reporting `counter` at `status` over
    /// the connection from node `node`, addressed to it; the SNA.
    pub async fn snr(&self, node: &str, sy_session: &str, counter: &str, status: &str) -> Message {
        let peer = self.peer(node).await;
        let realm = peer
            .capabilities()
            .expect("the node's CER")
            .origin_realm
            .clone();
        peer.request(SY, cmd::SPENDING_STATUS_NOTIFICATION, |b| {
            b.str(avp::SESSION_ID, sy_session)
                .u32(avp::AUTH_APPLICATION_ID, SY)
                .origin(&self.host, &self.realm)
                .str(avp::DESTINATION_REALM, &realm)
                .str(avp::DESTINATION_HOST, node)
                .group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
                    g.str(avp::POLICY_COUNTER_IDENTIFIER, counter)
                        .str(avp::POLICY_COUNTER_STATUS, status);
                });
        })
        .await
        .expect("SNA")
    }

    /// Stops: DPR to the PCRF nodes, no more connections accepted.
    pub async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

/// A `[sy]` section naming `ocs`, in order, with `timeout_ms`.
pub fn sy_section(ocs: &[&Ocs], timeout_ms: u64) -> String {
    let list: Vec<String> = ocs.iter().map(|o| o.config()).collect();
    format!(
        "\n[sy]\ntimeout_ms = {timeout_ms}\nocs = [ {} ]\n",
        list.join(", ")
    )
}
