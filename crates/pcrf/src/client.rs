//! `pcrf client gx`: a small PCEF for operators and the README tour. It
//! connects (CER/CEA), opens a Gx session with a CCR-I as a P-GW would,
//! prints every answer decoded, answers RARs with RAA 2001 (printing them),
//! sends CCR-Us (with usage per Monitoring-Key when asked), and ends the
//! session with a CCR-T: after its hold time, or at once when interrupted
//! (Ctrl-C, SIGTERM). A DPR from the PCRF is answered (DPA) and ends the
//! client. Not a load generator: that is `pcrf-bench`. Over TLS it
//! connects as a TLS-only PCEF would: handshake first, its certificate
//! presented, the PCRF's verified against the CA and the PCRF's Origin-Host.

use crate::pcc::{decode_usage_instructions, key_bytes};
use crate::usage::MonitoringLevel;
use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use diameter::peer::{Application, CloseReason, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle, PeerTable};
use std::collections::HashMap;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What to send.
#[derive(Debug, Clone)]
pub struct GxClientOptions {
    pub server: SocketAddr,
    pub origin_host: String,
    pub origin_realm: String,
    pub imsi: String,
    pub msisdn: Option<String>,
    pub apn: String,
    pub ue_ip: Ipv4Addr,
    /// CCR-U to send after the CCR-I (each one second apart).
    pub updates: u32,
    /// Usage each CCR-U reports, per Monitoring-Key.
    pub reports: Vec<UsageToReport>,
    /// Stay connected this long before the CCR-T/exit, answering RARs.
    pub hold: Duration,
    /// Exit without a CCR-T: the PCRF keeps the session open.
    pub keep_session: bool,
}

/// TLS for the client: our certificate and key, the CA the PCRF's
/// certificate must chain to, and the PCRF's Origin-Host (the name its
/// certificate must carry).
#[derive(Debug, Clone)]
pub struct GxClientTls {
    pub certificate: std::path::PathBuf,
    pub private_key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    pub server_host: String,
}

/// Usage one CCR-U reports for one Monitoring-Key: `KEY=SIZE` on the
/// command line, SIZE a volume as in the usage file ("100MB", "1.5 GB",
/// "512 KiB", plain octets). It is what the gateway counted since its last
/// report, sent as Used-Service-Unit with CC-Total-Octets = SIZE, a tenth
/// of it uplink (CC-Input-Octets) and the rest downlink (CC-Output-Octets),
/// about the split of mobile data traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageToReport {
    /// The Monitoring-Key as text (`hex:` keys are sent as their bytes).
    pub key: String,
    pub octets: u64,
}

impl UsageToReport {
    /// CC-Input-Octets (uplink) and CC-Output-Octets (downlink).
    pub fn split(&self) -> (u64, u64) {
        let input = self.octets / 10;
        (input, self.octets - input)
    }
}

impl std::str::FromStr for UsageToReport {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let Some((key, size)) = s.split_once('=') else {
            return Err(format!("{s:?} is not KEY=SIZE (e.g. total=100MB)"));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("{s:?}: the Monitoring-Key is empty"));
        }
        let octets = crate::usage::config::parse_volume(size)?;
        if octets > crate::pcc::MAX_REPORTED_OCTETS {
            return Err(format!("{s:?}: more than 1 PiB in one report"));
        }
        Ok(UsageToReport {
            key: key.to_string(),
            octets,
        })
    }
}

/// How a run ended when no request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GxClientEnd {
    /// The hold time passed (the session ended with a CCR-T unless kept).
    Done,
    /// Interrupted (Ctrl-C, SIGTERM): the session ended with a CCR-T
    /// unless kept.
    Interrupted,
    /// The PCRF sent DPR (with this Disconnect-Cause, if known), answered
    /// with DPA: the connection is gone, the session was not ended here.
    ServerDisconnected(Option<DisconnectCause>),
}

/// The Monitoring-Keys the PCRF granted, with their levels (from CCAs and
/// RARs), so a report names the level its grant had.
type GrantedKeys = Arc<parking_lot::Mutex<HashMap<String, MonitoringLevel>>>;

fn note_grants(msg: &Message, granted: &GrantedKeys) {
    if let Ok(u) = decode_usage_instructions(msg) {
        let mut g = granted.lock();
        for grant in u.grants {
            g.insert(grant.key, grant.level);
        }
        for key in u.disable {
            g.remove(&key);
        }
    }
}

/// Answers RARs and prints them; tells the client when the connection ends.
struct PrintingPcef {
    granted: GrantedKeys,
    closed: mpsc::UnboundedSender<CloseReason>,
}

impl Handler for PrintingPcef {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == crate::gx::GX && cmd == cmd::RE_AUTH
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        println!(
            "<<< received from the PCRF:\n{}",
            diameter_tools::dump::dump(&req)
        );
        note_grants(&req, &self.granted);
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.origin(&peer.local().origin_host, &peer.local().origin_realm)
            .result_code(diameter::result_code::DIAMETER_SUCCESS);
        b.finish();
        let ans = buf.freeze();
        if let Ok(m) = Message::parse(ans.clone()) {
            println!(">>> answered:\n{}", diameter_tools::dump::dump(&m));
        }
        Ok(ans)
    }

    fn peer_down(&self, _peer: &PeerHandle, reason: CloseReason) {
        let _ = self.closed.send(reason);
    }
}

/// What the client waits on between its requests: the time, the
/// interruption, the connection's end.
struct Waits<I> {
    interrupt: std::pin::Pin<Box<I>>,
    interrupted: bool,
    closed: mpsc::UnboundedReceiver<CloseReason>,
}

impl<I: Future<Output = ()>> Waits<I> {
    /// Waits `d`; `Some` when the client must stop first.
    async fn pause(&mut self, d: Duration) -> Option<GxClientEnd> {
        if self.interrupted {
            return Some(GxClientEnd::Interrupted);
        }
        let sleep = tokio::time::sleep(d);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return None,
                _ = self.interrupt.as_mut() => {
                    self.interrupted = true;
                    return Some(GxClientEnd::Interrupted);
                }
                Some(reason) = self.closed.recv() => {
                    if let Some(end) = Self::closed_by(reason) {
                        return Some(end);
                    }
                }
            }
        }
    }

    /// After a failed request: whether the PCRF's DPR caused it (the
    /// connection's end is reported just after its requests fail).
    async fn dpr_after_failure(&mut self) -> Option<GxClientEnd> {
        let deadline = tokio::time::sleep(Duration::from_secs(2));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return None,
                Some(reason) = self.closed.recv() => {
                    if let Some(end) = Self::closed_by(reason) {
                        return Some(end);
                    }
                }
            }
        }
    }

    /// A DPR ends the client; any other loss is said, and the connection
    /// is made again.
    fn closed_by(reason: CloseReason) -> Option<GxClientEnd> {
        match reason {
            CloseReason::PeerDisconnect(cause) => {
                println!(
                    "<<< DPR from the PCRF (Disconnect-Cause {}), answered with DPA; exiting \
                     (the session stays with the PCRF)",
                    cause_name(cause)
                );
                Some(GxClientEnd::ServerDisconnected(cause))
            }
            other => {
                eprintln!("connection to the PCRF lost ({other:?}); connecting again");
                None
            }
        }
    }
}

fn cause_name(cause: Option<DisconnectCause>) -> &'static str {
    match cause {
        Some(DisconnectCause::Rebooting) => "REBOOTING",
        Some(DisconnectCause::Busy) => "BUSY",
        Some(DisconnectCause::DoNotWantToTalkToYou) => "DO_NOT_WANT_TO_TALK_TO_YOU",
        None => "missing or unknown",
    }
}

/// Runs the client, over TLS when `tls` is given, until its hold time
/// ends, `interrupt` resolves (then the session is ended at once) or the
/// PCRF disconnects; an error says what failed.
pub async fn run(
    o: GxClientOptions,
    tls: Option<GxClientTls>,
    interrupt: impl Future<Output = ()>,
) -> Result<GxClientEnd, String> {
    let local = LocalNode::new(o.origin_host.clone(), o.origin_realm.clone()).with_application(
        Application::auth_vendor(crate::gx::GX, crate::session_message::TGPP),
    );
    let granted = GrantedKeys::default();
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let node = Node::with_parts(
        Arc::new(local),
        Arc::new(PeerSettings::default()),
        Arc::new(PrintingPcef {
            granted: granted.clone(),
            closed: closed_tx,
        }),
        PeerTable::new(),
    );
    let ini = match &tls {
        None => node.connect(o.server, None),
        Some(t) => {
            let cfg = diameter::transport::TlsConfig::from_pem_files(
                &t.certificate,
                &t.private_key,
                &t.ca,
                true,
            )
            .map_err(|e| format!("TLS: {e}"))?;
            node.connect_tls(o.server, &t.server_host, &cfg)
        }
    };
    let mut waits = Waits {
        interrupt: Box::pin(interrupt),
        interrupted: false,
        closed,
    };
    let open = tokio::select! {
        open = ini.wait_open(Duration::from_secs(10)) => open,
        _ = waits.interrupt.as_mut() => {
            // Nothing was opened yet: nothing to end.
            ini.shutdown(DisconnectCause::DoNotWantToTalkToYou).await;
            return Ok(GxClientEnd::Interrupted);
        }
    };
    if !open {
        ini.shutdown(DisconnectCause::DoNotWantToTalkToYou).await;
        return Err(format!(
            "could not open a Diameter {}connection to {} (is the PCRF running, and is {} an allowed peer?{})",
            if tls.is_some() { "TLS " } else { "" },
            o.server,
            o.origin_host,
            if tls.is_some() {
                " Is our certificate signed by a CA it trusts, and does its certificate name the PCRF's Origin-Host?"
            } else {
                ""
            }
        ));
    }
    let peer = ini.handle();
    let session = format!(
        "{};{};{}",
        o.origin_host,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        std::process::id()
    );
    let client = Client {
        peer: &peer,
        o: &o,
        session: &session,
        granted: &granted,
    };
    let result = client.session(&mut waits).await;
    ini.shutdown(DisconnectCause::Rebooting).await;
    result
}

/// One session's requests.
struct Client<'a> {
    peer: &'a PeerHandle,
    o: &'a GxClientOptions,
    session: &'a str,
    granted: &'a GrantedKeys,
}

impl Client<'_> {
    async fn session<I: Future<Output = ()>>(
        &self,
        waits: &mut Waits<I>,
    ) -> Result<GxClientEnd, String> {
        let mut number = 0;
        if let Err(e) = self
            .send(enums::CC_REQUEST_TYPE::INITIAL_REQUEST, number)
            .await
        {
            return match waits.dpr_after_failure().await {
                Some(end) => Ok(end),
                None => Err(e),
            };
        }
        let mut end = GxClientEnd::Done;
        let mut failed = None;
        for _ in 0..self.o.updates {
            if let Some(stop) = waits.pause(Duration::from_secs(1)).await {
                end = stop;
                break;
            }
            number += 1;
            if let Err(e) = self
                .send(enums::CC_REQUEST_TYPE::UPDATE_REQUEST, number)
                .await
            {
                if let Some(stop) = waits.dpr_after_failure().await {
                    return Ok(stop);
                }
                eprintln!("error: CCR-U: {e}");
                failed = Some(e);
                break;
            }
        }
        if end == GxClientEnd::Done && !self.o.hold.is_zero() {
            println!(
                "holding the session for {:?}; RARs are answered and shown{}",
                self.o.hold,
                if self.o.keep_session {
                    ""
                } else {
                    "; Ctrl-C ends it"
                }
            );
            if let Some(stop) = waits.pause(self.o.hold).await {
                end = stop;
            }
        }
        if let GxClientEnd::ServerDisconnected(_) = end {
            return Ok(end);
        }
        if end == GxClientEnd::Interrupted {
            println!("interrupted");
        }
        if self.o.keep_session {
            println!("leaving the session {} open (--keep-session)", self.session);
        } else {
            number += 1;
            if let Err(e) = self
                .send(enums::CC_REQUEST_TYPE::TERMINATION_REQUEST, number)
                .await
            {
                if let Some(stop) = waits.dpr_after_failure().await {
                    return Ok(stop);
                }
                return Err(format!("CCR-T: {e}"));
            }
        }
        match failed {
            Some(e) => Err(format!("CCR-U: {e}")),
            None => Ok(end),
        }
    }

    async fn send(&self, kind: i32, number: u32) -> Result<(), String> {
        let o = self.o;
        let granted = self.granted.lock().clone();
        let reports = if kind == enums::CC_REQUEST_TYPE::UPDATE_REQUEST {
            o.reports.as_slice()
        } else {
            &[]
        };
        for r in reports {
            if !granted.contains_key(&r.key) {
                eprintln!(
                    "warning: Monitoring-Key {:?} was not granted by the PCRF; reported anyway",
                    r.key
                );
            }
        }
        let answer = self
            .peer
            .request(crate::gx::GX, cmd::CREDIT_CONTROL, |b| {
                b.str(avp::SESSION_ID, self.session)
                    .u32(avp::AUTH_APPLICATION_ID, crate::gx::GX)
                    .origin(&o.origin_host, &o.origin_realm)
                    .str(avp::DESTINATION_REALM, "localdomain")
                    .i32(avp::CC_REQUEST_TYPE, kind)
                    .u32(avp::CC_REQUEST_NUMBER, number);
                match kind {
                    enums::CC_REQUEST_TYPE::INITIAL_REQUEST => {
                        b.group(avp::SUBSCRIPTION_ID, |g| {
                            g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                                .str(avp::SUBSCRIPTION_ID_DATA, &o.imsi);
                        });
                        if let Some(m) = &o.msisdn {
                            b.group(avp::SUBSCRIPTION_ID, |g| {
                                g.i32(avp::SUBSCRIPTION_ID_TYPE, 0)
                                    .str(avp::SUBSCRIPTION_ID_DATA, m);
                            });
                        }
                        b.i32(avp::NETWORK_REQUEST_SUPPORT, 1)
                            .bytes(avp::FRAMED_IP_ADDRESS, &o.ue_ip.octets())
                            .i32(avp::IP_CAN_TYPE, 5) // 3GPP-EPS
                            .i32(avp::RAT_TYPE, 1004) // EUTRAN
                            .str(avp::CALLED_STATION_ID, &o.apn);
                    }
                    enums::CC_REQUEST_TYPE::TERMINATION_REQUEST => {
                        b.i32(avp::TERMINATION_CAUSE, 1);
                    }
                    _ => {}
                }
                if !reports.is_empty() {
                    b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::USAGE_REPORT);
                }
                for r in reports {
                    let (input, output) = r.split();
                    b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                        g.bytes(avp::MONITORING_KEY, &key_bytes(&r.key));
                        g.group(avp::USED_SERVICE_UNIT, |u| {
                            u.u64(avp::CC_TOTAL_OCTETS, r.octets)
                                .u64(avp::CC_INPUT_OCTETS, input)
                                .u64(avp::CC_OUTPUT_OCTETS, output);
                        });
                        if let Some(level) = granted.get(&r.key) {
                            g.i32(avp::USAGE_MONITORING_LEVEL, level.code());
                        }
                    });
                }
            })
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        println!("{}", diameter_tools::dump::dump(&answer));
        note_grants(&answer, self.granted);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse_with_units() {
        let r: UsageToReport = "total=100MB".parse().expect("valid");
        assert_eq!(
            r,
            UsageToReport {
                key: "total".into(),
                octets: 100_000_000
            }
        );
        assert_eq!(r.split(), (10_000_000, 90_000_000));
        let r: UsageToReport = "vip = 1.5 GiB".parse().expect("valid");
        assert_eq!(r.key, "vip");
        assert_eq!(r.octets, 1_610_612_736);
        let (i, o) = r.split();
        assert_eq!(i + o, r.octets, "the directions add up to the total");
        assert!("total".parse::<UsageToReport>().is_err());
        assert!("=5MB".parse::<UsageToReport>().is_err());
        assert!("total=lots".parse::<UsageToReport>().is_err());
        assert!("total=2000TB".parse::<UsageToReport>().is_err());
    }
}
