//! `pcrf client gx`: a small PCEF for operators and the README tour. It
//! connects (CER/CEA), opens a Gx session with a CCR-I as a P-GW would,
//! prints every answer decoded, answers RARs with RAA 2001 (printing them),
//! and on request sends CCR-U and CCR-T. Not a load generator: that is
//! `pcrf-bench`. Over TLS ([`run_with_tls`]) it connects as a TLS-only
//! PCEF would: handshake first, its certificate presented, the PCRF's
//! verified against the CA and the PCRF's Origin-Host.

use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle, PeerTable};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

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
    /// Send a CCR-T at the end.
    pub terminate: bool,
    /// Stay connected this long before the CCR-T/exit, answering RARs.
    pub hold: Duration,
    /// Each CCR-U reports this many octets used on this Monitoring-Key
    /// (Usage-Monitoring-Information with Used-Service-Unit).
    pub usage: Option<(String, u64)>,
}

/// `KEY=OCTETS` of `pcrf client gx --usage`.
pub fn parse_usage(s: &str) -> Result<(String, u64), String> {
    let (key, octets) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=OCTETS, got {s:?}"))?;
    let octets = octets
        .parse::<u64>()
        .map_err(|e| format!("octets in {s:?}: {e}"))?;
    if key.is_empty() {
        return Err(format!("empty Monitoring-Key in {s:?}"));
    }
    Ok((key.to_string(), octets))
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

/// Answers RARs and prints them.
struct PrintingPcef;

impl Handler for PrintingPcef {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == crate::gx::GX && cmd == cmd::RE_AUTH
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        println!(
            "<<< received from the PCRF:\n{}",
            diameter_tools::dump::dump(&req)
        );
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
}

/// Runs the client over plain TCP; an error says what failed.
pub async fn run(o: GxClientOptions) -> Result<(), String> {
    run_with_tls(o, None).await
}

/// Runs the client, over TLS when `tls` is given; an error says what failed.
pub async fn run_with_tls(o: GxClientOptions, tls: Option<GxClientTls>) -> Result<(), String> {
    let local = LocalNode::new(o.origin_host.clone(), o.origin_realm.clone()).with_application(
        Application::auth_vendor(crate::gx::GX, crate::session_message::TGPP),
    );
    let node = Node::with_parts(
        Arc::new(local),
        Arc::new(PeerSettings::default()),
        Arc::new(PrintingPcef),
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
    if !ini.wait_open(Duration::from_secs(10)).await {
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
    let mut number = 0;
    let res = send(
        &peer,
        &o,
        &session,
        enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
        number,
    )
    .await;
    if res.is_ok() {
        for _ in 0..o.updates {
            tokio::time::sleep(Duration::from_secs(1)).await;
            number += 1;
            if send(
                &peer,
                &o,
                &session,
                enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
                number,
            )
            .await
            .is_err()
            {
                break;
            }
        }
        if !o.hold.is_zero() {
            println!(
                "holding the session for {:?}; RARs are answered and shown",
                o.hold
            );
            tokio::time::sleep(o.hold).await;
        }
        if o.terminate {
            number += 1;
            let _ = send(
                &peer,
                &o,
                &session,
                enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
                number,
            )
            .await;
        }
    }
    ini.shutdown(DisconnectCause::Rebooting).await;
    res
}

async fn send(
    peer: &PeerHandle,
    o: &GxClientOptions,
    session: &str,
    kind: i32,
    number: u32,
) -> Result<(), String> {
    let answer = peer
        .request(crate::gx::GX, cmd::CREDIT_CONTROL, |b| {
            b.str(avp::SESSION_ID, session)
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
                enums::CC_REQUEST_TYPE::UPDATE_REQUEST => {
                    if let Some((key, octets)) = &o.usage {
                        b.i32(avp::EVENT_TRIGGER, 33) // USAGE_REPORT
                            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                                g.bytes(avp::MONITORING_KEY, key.as_bytes())
                                    .group(avp::USED_SERVICE_UNIT, |u| {
                                        u.u64(avp::CC_TOTAL_OCTETS, *octets);
                                    })
                                    .i32(avp::USAGE_MONITORING_LEVEL, 0);
                            });
                    }
                }
                enums::CC_REQUEST_TYPE::TERMINATION_REQUEST => {
                    b.i32(avp::TERMINATION_CAUSE, 1);
                }
                _ => {}
            }
        })
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    println!("{}", diameter_tools::dump::dump(&answer));
    Ok(())
}
