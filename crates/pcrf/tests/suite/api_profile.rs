//! `GET /v1/debug/profile` against the real server: a 1 s CPU profile as a
//! flame graph (SVG) and as gzip-compressed pprof protobuf that decodes,
//! behind the API token, one at a time, and seconds bounded.

use crate::support;

use pprof::protos::Message;
use std::io::Read;
use std::time::Duration;
use support::*;

const TOKEN: &str = "profile-test-token-0123456789";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

async fn get(p: &Pcrf, query: &str, token: Option<&str>) -> (u16, String, Vec<u8>) {
    let mut req = client().get(format!("http://{}/v1/debug/profile{query}", p.api));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, ctype, resp.bytes().await.expect("body").to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_second_profile_as_svg_and_as_pprof_behind_the_token() {
    let p = Pcrf::start_with_api(&format!("token = \"{TOKEN}\""), "");

    let (status, _, _) = get(&p, "?seconds=1", None).await;
    assert_eq!(status, 401, "the profile needs the token");
    let (status, _, _) = get(&p, "?seconds=1", Some("wrong-token-wrong-token")).await;
    assert_eq!(status, 401);

    // Work for the profiler to see: scrapes of /metrics meanwhile.
    let busy = {
        let api = p.api;
        tokio::spawn(async move {
            let c = client();
            let until = std::time::Instant::now() + Duration::from_millis(1500);
            while std::time::Instant::now() < until {
                let _ = c
                    .get(format!("http://{api}/metrics"))
                    .bearer_auth(TOKEN)
                    .send()
                    .await;
            }
        })
    };
    let (status, ctype, svg) = get(&p, "?seconds=1", Some(TOKEN)).await;
    busy.await.expect("scrapes");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&svg));
    assert_eq!(ctype, "image/svg+xml");
    let text = String::from_utf8(svg).expect("SVG is text");
    assert!(
        text.contains("<svg") && text.trim_end().ends_with("</svg>"),
        "not an SVG document: {}",
        &text[..text.len().min(300)]
    );
    assert!(
        text.contains("pcrf: "),
        "titled: {}",
        &text[..text.len().min(300)]
    );

    let (status, ctype, gz) = get(&p, "?seconds=1&format=pprof", Some(TOKEN)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&gz));
    assert_eq!(ctype, "application/octet-stream");
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .expect("gunzip");
    let profile = pprof::protos::Profile::parse_from_bytes(&raw).expect("a pprof protobuf");
    assert!(
        !profile.sample_type.is_empty(),
        "sample types described (samples, cpu)"
    );
    assert!(
        profile.string_table.iter().any(|s| s == "cpu"),
        "a CPU profile: {:?}",
        &profile.string_table[..profile.string_table.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_profile_at_a_time_and_seconds_bounded() {
    let p = Pcrf::start("");
    for q in ["?seconds=0", "?seconds=61", "?format=png", "?seconds=x"] {
        let (status, ctype, body) = get(&p, q, None).await;
        assert_eq!(status, 400, "{q}: {}", String::from_utf8_lossy(&body));
        assert!(ctype.starts_with("application/json"), "{q}: {ctype}");
    }
    let first = {
        let api = p.api;
        tokio::spawn(async move {
            client()
                .get(format!("http://{api}/v1/debug/profile?seconds=3"))
                .send()
                .await
                .expect("first")
                .status()
                .as_u16()
        })
    };
    // The first is sampling for 3 s (the node logs its start once it
    // holds the profiler): a second one meanwhile is refused.
    p.wait_log("CPU profile started by API", 0, Duration::from_secs(10))
        .await;
    let (status, _, body) = get(&p, "?seconds=1", None).await;
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    assert_eq!(first.await.expect("first"), 200);
    // Once it is done, the next one runs.
    let (status, _, _) = get(&p, "?seconds=1&format=svg", None).await;
    assert_eq!(status, 200);
}
