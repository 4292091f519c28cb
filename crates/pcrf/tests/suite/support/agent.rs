//! The Diameter routing agent of the cluster tests, and the gateways behind
//! it. The agent is freeDiameterd running the files an operator installs
//! (deploy/cluster/freediameter/), only its ports and file locations moved
//! to a scratch directory, so what the tests pass through is what is
//! shipped. The gateways (emulated PCEFs, AFs and TDFs) connect to the
//! agent alone; a request names its node with Destination-Host, or no node at
//! all, as a real gateway does, and the agent routes it.

use super::*;
use diameter::transport::RequestError;

/// The names deploy/cluster/freediameter/ uses: the agent, the PCRF realm,
/// its nodes, and the realms of the PCEFs, AFs and TDFs it admits.
pub const AGENT: &str = "dra1.dra.example.net";
pub const REALM: &str = "pcrf.example.net";
pub const NODES: [&str; 3] = [
    "pcrf1.pcrf.example.net",
    "pcrf2.pcrf.example.net",
    "pcrf3.pcrf.example.net",
];
pub const PCEF_REALM: &str = "pgw.example.net";
pub const AF_REALM: &str = "pcscf.example.net";
pub const TDF_REALM: &str = "tdf.example.net";
pub const RX: u32 = 16_777_236;
pub const SD: u32 = 16_777_303;

/// The ports of dra.conf, replaced by free ones.
const AGENT_PORT: &str = "Port = 3868;";
const NODE_PORTS: [&str; 3] = ["Port = 3871;", "Port = 3872;", "Port = 3873;"];

/// freeDiameterd running deploy/cluster/freediameter/dra.conf, its files
/// and ports moved to a scratch directory.
pub struct Agent {
    child: Child,
    dir: PathBuf,
    pub addr: SocketAddr,
}

impl Agent {
    /// Starts the agent in front of `nodes`, the first as NODES[0] and so
    /// on; dra.conf's nodes beyond them are left out.
    pub fn start(nodes: &[&Pcrf]) -> Agent {
        require_tool("freeDiameterd");
        assert!(nodes.len() <= NODE_PORTS.len(), "dra.conf names 3 nodes");
        let deploy = repo_root().join("deploy/cluster/freediameter");
        let dir = scratch_dir("dra");
        let port = free_tcp_port();
        let mut conf = std::fs::read_to_string(deploy.join("dra.conf")).expect("read dra.conf");
        let etc = format!("{}/", dir.display());
        for (from, to) in [
            ("/etc/freeDiameter/", etc.as_str()),
            (AGENT_PORT, &format!("Port = {port};")),
        ] {
            assert!(conf.contains(from), "dra.conf has no `{from}`");
            conf = conf.replace(from, to);
        }
        for (i, from) in NODE_PORTS.iter().enumerate() {
            assert!(conf.contains(from), "dra.conf has no `{from}`");
            conf = match nodes.get(i) {
                Some(node) => conf.replace(from, &format!("Port = {};", node.diameter.port())),
                None => conf
                    .lines()
                    .filter(|l| !l.contains(from))
                    .map(|l| format!("{l}\n"))
                    .collect(),
            };
        }
        std::fs::write(dir.join("dra.conf"), conf).expect("write dra.conf");
        for f in ["acl_wl.conf", "rt_default.conf"] {
            std::fs::copy(deploy.join(f), dir.join(f)).expect("copy agent file");
        }
        let log = std::fs::File::create(dir.join("freeDiameterd.log")).expect("log");
        let child = Command::new("freeDiameterd")
            .arg("-c")
            .arg(dir.join("dra.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("start freeDiameterd");
        Agent {
            child,
            addr: format!("127.0.0.1:{port}").parse().expect("addr"),
            dir,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("freeDiameterd.log")).unwrap_or_default()
    }

    /// Whether the agent's newest state change for peer `name` is to
    /// STATE_OPEN. After a reconnection freeDiameter keeps a peer in
    /// STATE_REOPEN (no requests routed to it: 3002) until its watchdog
    /// exchange succeeds, after the node already counts the peer open.
    fn routes_to(&self, name: &str) -> bool {
        let quoted = format!("'{name}'");
        self.log()
            .lines()
            .rev()
            .find(|l| l.contains("->") && l.contains(&quoted))
            .is_some_and(|l| l.contains("-> 'STATE_OPEN'"))
    }

    /// Waits up to `limit` for `node` (named `name`) to have its connection
    /// with the agent open, on both sides: the node past CER/CEA and the
    /// agent routing to it.
    pub fn wait_open(&self, name: &str, node: &Pcrf, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !(node.peer_open(AGENT) && self.routes_to(name)) {
            assert!(
                Instant::now() < deadline,
                "the agent did not open {name}:\n{}\n{}",
                self.log(),
                node.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("PCRF_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A port free on every address (freeDiameter binds them all).
fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port()
}

fn require_tool(tool: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    assert!(
        std::env::split_paths(&path).any(|d| d.join(tool).is_file()),
        "`{tool}` is not installed; run scripts/install-test-deps.sh (or scripts/test.sh)"
    );
}

/// A gateway (a PCEF, an AF or a TDF) connected to the agent only. The
/// agent forwards the nodes' requests (RARs) to it, so the agent is its
/// relay.
pub struct Gateway {
    connection: Pcef,
    /// Its application: Gx, Rx or Sd.
    app: u32,
}

impl Gateway {
    /// A PCEF named `origin_host` (in PCEF_REALM).
    pub async fn pcef(agent: &Agent, origin_host: &str) -> Gateway {
        Self::connect(agent, origin_host, PCEF_REALM, GX).await
    }

    /// An AF named `origin_host` (in AF_REALM).
    pub async fn af(agent: &Agent, origin_host: &str) -> Gateway {
        Self::connect(agent, origin_host, AF_REALM, RX).await
    }

    /// A TDF named `origin_host` (in TDF_REALM).
    pub async fn tdf(agent: &Agent, origin_host: &str) -> Gateway {
        Self::connect(agent, origin_host, TDF_REALM, SD).await
    }

    async fn connect(agent: &Agent, origin_host: &str, realm: &str, app: u32) -> Gateway {
        match Self::try_connect(agent.addr, origin_host, realm, app).await {
            Some(g) => g,
            None => panic!("{origin_host} could not open the agent:\n{}", agent.log()),
        }
    }

    async fn try_connect(
        addr: SocketAddr,
        origin_host: &str,
        realm: &str,
        app: u32,
    ) -> Option<Gateway> {
        let local = LocalNode::new(origin_host, realm)
            .with_application(Application::auth_vendor(app, TGPP));
        let settings = PeerSettings {
            request_timeout: Duration::from_secs(10),
            relays: vec![AGENT.into()],
            ..PeerSettings::default()
        };
        let connection = Pcef::open(addr, local, app, settings, AGENT).await?;
        Some(Gateway { connection, app })
    }

    /// The connection to the agent.
    pub fn peer(&self) -> &PeerHandle {
        &self.connection.peer
    }

    /// Sends a request of this gateway's application, command `code`, for
    /// `session` to `node` of the PCRF realm (Destination-Host), `extra`
    /// after the common AVPs, as an AF or a TDF does after the node's
    /// first answer; the answer.
    pub async fn request_to(
        &self,
        code: u32,
        node: &str,
        session: &str,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        let local = self.peer().local().clone();
        self.peer()
            .request(self.app, code, |b| {
                b.str(avp::SESSION_ID, session)
                    .u32(avp::AUTH_APPLICATION_ID, self.app)
                    .origin(&local.origin_host, &local.origin_realm)
                    .str(avp::DESTINATION_REALM, REALM)
                    .str(avp::DESTINATION_HOST, node);
                extra(b);
            })
            .await
            .unwrap_or_else(|e| panic!("no answer from {node} for {session}: {e:?}"))
    }

    /// One CCR for the PCRF realm, naming `node` when given, with the T
    /// flag when `retransmit`; the CCR-I's AVPs are those of `imsi`, a
    /// CCR-T's its Termination-Cause, and `extra` follows.
    #[allow(clippy::too_many_arguments)]
    pub async fn try_ccr(
        &self,
        node: Option<&str>,
        retransmit: bool,
        session: &str,
        request_type: i32,
        number: u32,
        imsi: &str,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Result<Message, RequestError> {
        let to = Destination {
            realm: REALM,
            host: node,
        };
        send_gx_request(
            self.peer(),
            to,
            retransmit,
            session,
            request_type,
            number,
            |b| {
                match request_type {
                    enums::CC_REQUEST_TYPE::INITIAL_REQUEST => initial_avps(b, imsi),
                    enums::CC_REQUEST_TYPE::TERMINATION_REQUEST => {
                        b.i32(avp::TERMINATION_CAUSE, 1);
                    }
                    _ => {}
                }
                extra(b);
            },
        )
        .await
    }

    /// As a PCEF delivers a request: sent, then on a timeout, a lost
    /// connection or 3002 DIAMETER_UNABLE_TO_DELIVER sent again with the
    /// T flag, up to 5 times, 1 s apart. The final answer.
    pub async fn deliver(
        &self,
        node: Option<&str>,
        session: &str,
        request_type: i32,
        number: u32,
        imsi: &str,
        extra: impl Fn(&mut MessageBuilder<'_>),
    ) -> Message {
        let mut last = String::new();
        for attempt in 0..6 {
            match self
                .try_ccr(
                    node,
                    attempt > 0,
                    session,
                    request_type,
                    number,
                    imsi,
                    &extra,
                )
                .await
            {
                Ok(a) if result_of(&a) != 3002 => return a,
                Ok(_) => last = "3002 DIAMETER_UNABLE_TO_DELIVER".into(),
                Err(e) => last = format!("{e:?}"),
            }
            // A PCEF's pause between retries while the agent has no route
            // (pacing, not a wait).
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        panic!("{session} #{number}: no answer after 6 tries, the last: {last}");
    }

    /// A CCR-I for `imsi` to `node`, sent once.
    pub async fn ccr_i(&self, node: &str, session: &str, imsi: &str) -> Message {
        let i = enums::CC_REQUEST_TYPE::INITIAL_REQUEST;
        self.try_ccr(Some(node), false, session, i, 0, imsi, |_| {})
            .await
            .unwrap_or_else(|e| panic!("CCR-I {session} to {node}: {e:?}"))
    }

    /// A CCR-U built by `extra` to `node`, sent once.
    pub async fn ccr_u(
        &self,
        node: &str,
        session: &str,
        number: u32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        let u = enums::CC_REQUEST_TYPE::UPDATE_REQUEST;
        self.try_ccr(Some(node), false, session, u, number, "", extra)
            .await
            .unwrap_or_else(|e| panic!("CCR-U {session} #{number} to {node}: {e:?}"))
    }

    /// A CCR-T to `node`, sent once.
    pub async fn ccr_t(&self, node: &str, session: &str, number: u32) -> Message {
        let t = enums::CC_REQUEST_TYPE::TERMINATION_REQUEST;
        self.try_ccr(Some(node), false, session, t, number, "", |_| {})
            .await
            .unwrap_or_else(|e| panic!("CCR-T {session} #{number} to {node}: {e:?}"))
    }

    /// The RARs of its application received so far, from any node.
    pub fn rars(&self) -> Vec<Message> {
        self.connection.rars()
    }

    pub async fn close(self) {
        self.connection.close().await
    }
}

/// The Origin-Host of a message ("" when it has none).
pub fn origin_host(m: &Message) -> String {
    m.find(avp::ORIGIN_HOST)
        .ok()
        .flatten()
        .and_then(|a| a.as_identity().ok().map(str::to_owned))
        .unwrap_or_default()
}

/// The TDF's CCR to `node` for `session` of `request_type` and `number`,
/// then `extra`.
pub async fn sd_ccr(
    tdf: &Gateway,
    node: &str,
    session: &str,
    request_type: i32,
    number: u32,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    tdf.request_to(cmd::CREDIT_CONTROL, node, session, |b| {
        b.i32(avp::CC_REQUEST_TYPE, request_type)
            .u32(avp::CC_REQUEST_NUMBER, number);
        extra(b);
    })
    .await
}
