//! A RAR for a PCEF that reaches the PCRF only through a routing agent:
//! freeDiameter 1.2.1 (`freeDiameterd`, a real DRA, running
//! deploy/cluster/freediameter/) connects to `pcrf serve` and advertises the
//! Relay application; the PCEF is connected to freeDiameter alone. Its
//! CCR-I crosses the relay by Destination-Realm, and a provisioning change
//! then goes back as a RAR through the relay, with Destination-Host naming
//! the PCEF, which freeDiameter routes to it. One node on the embedded
//! store: the relay path needs no cluster. Needs freeDiameterd
//! (scripts/install-test-deps.sh).

use crate::support;

use diameter::dict::{avp, enums};
use std::time::Duration;
use support::*;

const IMSI: &str = "001010000000001";
const PGW: &str = "pgw1.pgw.example.net";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rar_for_a_pcef_behind_the_routing_agent_goes_through_it() {
    let p = Pcrf::start_cluster_node_with(NODES[0], REALM, AGENT, None, "");
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let agent = Agent::start(&[&p]);
    agent.wait_open(NODES[0], &p, Duration::from_secs(30));

    // The PCEF, connected to the relay only; its CCR-I names no node.
    let pcef = Gateway::pcef(&agent, PGW).await;
    let sid = "pgw1.pgw.example.net;relay;1";
    let initial = enums::CC_REQUEST_TYPE::INITIAL_REQUEST;
    let cca = pcef
        .try_ccr(None, false, sid, initial, 0, IMSI, |_| {})
        .await
        .unwrap_or_else(|e| panic!("no CCA: {e:?}\n{}", agent.log()));
    assert_eq!(result_of(&cca), 2001, "{}", p.log());
    assert_eq!(origin_host(&cca), NODES[0]);
    assert_eq!(apn_ambr(&cca).map(|a| a.0), Some(5_000_000));

    // A plan change: the RAR goes through the relay to the PCEF.
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    let (arrived, rars) = poll_for(Duration::from_secs(10), || {
        let r = pcef.rars();
        (!r.is_empty(), r)
    });
    assert!(
        arrived,
        "no RAR reached the PCEF:\n{}\n{}",
        p.log(),
        agent.log()
    );
    let rar = &rars[0];
    assert_eq!(rar.session_id().ok().flatten(), Some(sid));
    assert_eq!(apn_ambr(rar).map(|a| a.0), Some(50_000_000));
    let [host, realm] = rar
        .pick(&[avp::DESTINATION_HOST, avp::DESTINATION_REALM])
        .expect("well-formed");
    assert_eq!(host.map(|a| a.as_str()), Some(Ok(PGW)));
    assert_eq!(realm.map(|a| a.as_str()), Some(Ok(PCEF_REALM)));
    // The relay recorded the PCRF on the way (RFC 6733 §6.1.8).
    let route: Vec<String> = rar
        .avps()
        .filter_code(avp::ROUTE_RECORD)
        .filter_map(|a| a.ok().and_then(|a| a.as_str().ok().map(str::to_owned)))
        .collect();
    assert_eq!(route, [NODES[0]]);
    // The RAA came back the same way.
    let counted = poll_until(Duration::from_secs(5), || {
        p.metrics()
            .contains(r#"pcrf_requests_total{command="RAR",result_code="2001"} 1"#)
    });
    assert!(counted, "RAA not counted:\n{}", p.metrics());
    pcef.close().await;
}
