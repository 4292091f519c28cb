//! The peers' DOIC state in the API: a PCEF whose requests carry
//! OC-Supported-Features (RFC 7683) is shown as speaking DOIC in
//! `GET /v1/stats` (the console's peers page reads it there), one whose
//! requests do not is shown as not, and no overload report is shown while
//! the node is not shedding.

use crate::support;

use diameter::dict::{avp, enums};
use support::*;

/// The value of `family`'s sample for `peer` in a `/v1/stats` body (a
/// family without samples is left out of the scrape).
fn sample(stats: &serde_json::Value, family: &str, peer: &str) -> Option<f64> {
    stats["metrics"][family]
        .as_array()?
        .iter()
        .find(|s| s["labels"]["peer"] == peer)
        .map(|s| s["value"].as_f64().expect("number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_show_which_peers_advertised_doic() {
    let p =
        Pcrf::start("[[peers]]\norigin_host = \"pgw2.test.local\"\naddresses = [\"127.0.0.1\"]\n");
    let doic = Pcef::connect(p.diameter, "pgw.test.local").await;
    let plain = Pcef::connect(p.diameter, "pgw2.test.local").await;
    let ccr = |with_osf: bool| {
        move |b: &mut diameter::codec::MessageBuilder<'_>| {
            initial_avps(b, "001010000000001");
            if with_osf {
                b.group(avp::OC_SUPPORTED_FEATURES, |g| {
                    g.u64(avp::OC_FEATURE_VECTOR, 1);
                });
            }
        }
    };
    let init = enums::CC_REQUEST_TYPE::INITIAL_REQUEST;
    let cca = doic.ccr("pgw.test.local;doic;1", init, 0, ccr(true)).await;
    // The answer says the PCRF speaks DOIC too: the request was read as DOIC.
    assert!(cca
        .find(avp::OC_SUPPORTED_FEATURES)
        .expect("avps")
        .is_some());
    plain
        .ccr("pgw2.test.local;plain;1", init, 0, ccr(false))
        .await;

    let (status, stats) = p.http("GET", "/v1/stats", None);
    assert_eq!(status, 200, "{stats}");
    let supported = "pcrf_peer_doic_supported";
    assert_eq!(sample(&stats, supported, "pgw.test.local"), Some(1.0));
    assert_eq!(sample(&stats, supported, "pgw2.test.local"), Some(0.0));
    for family in [
        "pcrf_peer_doic_reduction_percent",
        "pcrf_peer_doic_validity_seconds",
        "pcrf_peer_doic_sequence",
    ] {
        assert_eq!(
            sample(&stats, family, "pgw.test.local"),
            None,
            "{family}: no overload, no report"
        );
    }

    // What a peer advertised goes with its connection.
    doic.close().await;
    let doic = Pcef::connect(p.diameter, "pgw.test.local").await;
    doic.ccr("pgw.test.local;doic;2", init, 0, ccr(false)).await;
    let (_, stats) = p.http("GET", "/v1/stats", None);
    assert_eq!(sample(&stats, supported, "pgw.test.local"), Some(0.0));
    doic.close().await;
    plain.close().await;
}
