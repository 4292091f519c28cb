//! The emulated OCS against an Sy client built here with the diameter
//! crate, as a PCRF uses Sy (TS 29.219): SLR-I for named counters, for all
//! counters, for an unknown one; SLR-U for an unknown session; SNRs pushed
//! to the client and answered; STR ending the session. Then the
//! `pcrf-bench ocs` binary, pushing SNRs at a rate and printing its counts.

use bytes::Bytes;
use diameter::dict::{app, avp, cmd, enums};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle, PeerTable};
use diameter::{DiameterError, Message};
use pcrf_bench::ocs::{self, CounterTable, OcsCounts};
use pcrf_bench::stats::ResultKind;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Counter identifier and status.
type Report = (String, String);

/// The PCRF side: answers SNR with SNA 2001 and keeps the reported statuses.
#[derive(Default)]
struct SyClient {
    snr: Mutex<Vec<(String, Vec<Report>)>>,
}

fn reports(m: &Message) -> Vec<Report> {
    m.avps()
        .filter_code(avp::POLICY_COUNTER_STATUS_REPORT)
        .flatten()
        .map(|r| {
            let f = |c| {
                r.grouped()
                    .find(c)
                    .ok()
                    .flatten()
                    .and_then(|a| a.as_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            (
                f(avp::POLICY_COUNTER_IDENTIFIER),
                f(avp::POLICY_COUNTER_STATUS),
            )
        })
        .collect()
}

impl Handler for SyClient {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::SY && command == cmd::SPENDING_STATUS_NOTIFICATION
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        req.validate()
            .map_err(|_| DiameterError::new(5004, "malformed SNR"))?;
        let sid = req
            .session_id()
            .ok()
            .flatten()
            .unwrap_or_default()
            .to_string();
        self.snr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((sid, reports(&req)));
        let mut buf = bytes::BytesMut::new();
        let mut b = diameter::MessageBuilder::answer(&mut buf, &req);
        b.result_code(2001)
            .origin(&peer.local().origin_host, &peer.local().origin_realm);
        b.finish();
        Ok(buf.freeze())
    }
}

async fn client(target: SocketAddr) -> (diameter::transport::Initiator, Arc<SyClient>) {
    let local = LocalNode::new("pcrf.pcrf.test", "pcrf.test")
        .with_application(Application::auth_vendor(app::SY, 10415));
    let handler = Arc::new(SyClient::default());
    let node = Node::with_parts(
        Arc::new(local),
        Arc::new(PeerSettings::default()),
        handler.clone(),
        PeerTable::new(),
    );
    let init = node.connect(target, None);
    assert!(init.wait_open(Duration::from_secs(5)).await, "Sy open");
    (init, handler)
}

async fn slr(peer: &PeerHandle, sid: &str, kind: i32, counters: &[&str]) -> Message {
    let a = peer
        .request(app::SY, cmd::SPENDING_LIMIT, |b| {
            b.str(avp::SESSION_ID, sid)
                .u32(avp::AUTH_APPLICATION_ID, app::SY)
                .origin("pcrf.pcrf.test", "pcrf.test")
                .str(avp::DESTINATION_REALM, "bench.test")
                .i32(avp::SL_REQUEST_TYPE, kind)
                .group(avp::SUBSCRIPTION_ID, |g| {
                    g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                        .str(avp::SUBSCRIPTION_ID_DATA, "001010000000001");
                });
            for c in counters {
                b.str(avp::POLICY_COUNTER_IDENTIFIER, c);
            }
        })
        .await
        .expect("SLA");
    a.validate().expect("valid SLA");
    assert_eq!(a.session_id(), Ok(Some(sid)));
    a
}

async fn str_(peer: &PeerHandle, sid: &str) -> ResultKind {
    let a = peer
        .request(app::SY, cmd::SESSION_TERMINATION, |b| {
            b.str(avp::SESSION_ID, sid)
                .u32(avp::AUTH_APPLICATION_ID, app::SY)
                .origin("pcrf.pcrf.test", "pcrf.test")
                .str(avp::DESTINATION_REALM, "bench.test")
                .i32(avp::TERMINATION_CAUSE, 1);
        })
        .await
        .expect("STA");
    a.validate().expect("valid STA");
    ResultKind::of(&a)
}

fn table() -> CounterTable {
    let mut t = CounterTable::default();
    t.add("data-cap=valid,limit-reached").expect("counter");
    t.add("roaming=allowed").expect("counter");
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_slr_pushes_snr_and_ends_on_str() {
    let node = ocs::node("ocs.bench.test", "bench.test", table());
    let server = node.listen("127.0.0.1:0").await.expect("listen");
    let addr = server.local_addr().expect("addr");
    tokio::spawn(server.run(std::future::pending()));
    let ocs = node.handler().clone();
    let (init, seen) = client(addr).await;
    let peer = init.handle();
    let (initial, intermediate) = (
        enums::SL_REQUEST_TYPE::INITIAL_REQUEST,
        enums::SL_REQUEST_TYPE::INTERMEDIATE_REQUEST,
    );

    // Nothing to notify yet.
    assert!(!ocs.notify_next().await);

    let a = slr(&peer, "pcrf;1;1", initial, &["data-cap"]).await;
    assert_eq!(ResultKind::of(&a), ResultKind::Code(2001));
    assert_eq!(reports(&a), [("data-cap".into(), "valid".into())]);

    // No identifiers: every counter.
    let a = slr(&peer, "pcrf;1;2", initial, &[]).await;
    assert_eq!(
        reports(&a),
        [
            ("data-cap".into(), "valid".into()),
            ("roaming".into(), "allowed".into())
        ]
    );

    let a = slr(&peer, "pcrf;1;3", initial, &["data-cap", "no-such"]).await;
    assert_eq!(
        ResultKind::of(&a),
        ResultKind::Experimental(10415, ocs::UNKNOWN_POLICY_COUNTERS)
    );
    assert!(reports(&a).is_empty());
    let a = slr(&peer, "pcrf;1;9", intermediate, &["data-cap"]).await;
    assert_eq!(ResultKind::of(&a), ResultKind::Code(5002));
    // An intermediate SLR adds a counter to a known session.
    let a = slr(&peer, "pcrf;1;1", intermediate, &["roaming"]).await;
    assert_eq!(ResultKind::of(&a), ResultKind::Code(2001));

    // Round robin over the two sessions; each SNR moves data-cap on.
    assert!(ocs.notify_next().await);
    assert!(ocs.notify_next().await);
    assert!(ocs.notify_next().await);
    let snr = seen.snr.lock().expect("lock").clone();
    assert_eq!(snr.len(), 3);
    assert_eq!(snr[0].0, "pcrf;1;1");
    assert_eq!(
        snr[0].1,
        [
            ("data-cap".into(), "limit-reached".into()),
            ("roaming".into(), "allowed".into())
        ]
    );
    assert_eq!(snr[1].0, "pcrf;1;2");
    assert_eq!(snr[2].0, "pcrf;1;1");
    assert_eq!(snr[2].1[0], ("data-cap".into(), "valid".into()));

    // Bad input: RFC 6733 error answers naming the AVP in Failed-AVP.
    for (kind, code) in [(None, 5005), (Some(7), 5004)] {
        let a = peer
            .request(app::SY, cmd::SPENDING_LIMIT, |b| {
                b.str(avp::SESSION_ID, "pcrf;1;bad")
                    .u32(avp::AUTH_APPLICATION_ID, app::SY)
                    .origin("pcrf.pcrf.test", "pcrf.test")
                    .str(avp::DESTINATION_REALM, "bench.test");
                if let Some(k) = kind {
                    b.i32(avp::SL_REQUEST_TYPE, k);
                }
            })
            .await
            .expect("error answer");
        assert_eq!(ResultKind::of(&a), ResultKind::Code(code));
        let failed = a.find(avp::FAILED_AVP).expect("ok").expect("Failed-AVP");
        let inner = failed.grouped().next().expect("one AVP").expect("ok");
        assert!(inner.is(avp::SL_REQUEST_TYPE));
    }

    assert_eq!(str_(&peer, "pcrf;1;1").await, ResultKind::Code(2001));
    assert_eq!(str_(&peer, "pcrf;1;1").await, ResultKind::Code(5002));
    let c = ocs.counts();
    assert_eq!(
        c,
        OcsCounts {
            slr_initial: 3,
            slr_intermediate: 2,
            sla: [("2001", 3), ("10415:5570", 1), ("5002", 1)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            snr_sent: 3,
            sna_success: 3,
            sna_failed: 0,
            str_received: 2,
            sessions: 1,
        }
    );
    init.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ocs_command_notifies_at_its_rate_and_prints_its_counts() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pcrf-bench"))
        .args([
            "ocs",
            "--listen",
            "127.0.0.1:0",
            "--counter",
            "data-cap=valid,limit-reached",
            "--snr-rate",
            "20",
            "--duration",
            "2s",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("pcrf-bench ocs");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("first line");
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening line")
        .parse()
        .expect("address");
    let (init, seen) = client(addr).await;
    let a = slr(
        &init.handle(),
        "pcrf;2;1",
        enums::SL_REQUEST_TYPE::INITIAL_REQUEST,
        &[],
    )
    .await;
    assert_eq!(ResultKind::of(&a), ResultKind::Code(2001));
    let status = tokio::task::spawn_blocking(move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).expect("counts");
        (child.wait().expect("exit"), rest)
    })
    .await
    .expect("join");
    assert!(status.0.success());
    let counts: OcsCounts = serde_json::from_str(&status.1).expect("JSON counts");
    let got = seen.snr.lock().expect("lock").len() as u64;
    // About 20/s for the ~2 s the session was open.
    assert!(counts.snr_sent >= 10, "{counts:?}");
    assert_eq!(counts.sna_success, got);
    assert_eq!(counts.slr_initial, 1);
    init.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;
}
