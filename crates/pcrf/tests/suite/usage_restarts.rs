//! Exact per-subscriber usage after a load with `kill -9` in the middle:
//! the seed scenario's CCR-I, CCR-U with volumes and CCR-T (built by
//! `pcrf-bench`, as the benchmark sends them) from several sessions per
//! subscriber at once, the PCRF killed while requests are in flight, and
//! every request that got no answer retransmitted (T flag) to the restarted
//! node, as a PCEF does. Afterwards each subscriber's accumulator must hold
//! exactly the sum of the volumes reported: none lost, none counted twice.
//! Also with the number of store writers (shards) changed at each restart,
//! so that rows move between shard files while requests are retransmitted.

use crate::support;

use diameter::dict::cmd;
use pcrf_bench::gx::{self as bench_gx, Gateway, Request, Subscriber, Usage};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::sync::RwLock;
use tokio::task::JoinSet;

const SUBSCRIBERS: usize = 10;
const SESSIONS_PER_SUBSCRIBER: usize = 3;
const UPDATES: u32 = 6;

fn gateway() -> Gateway {
    Gateway {
        origin_host: "pgw.test.local".into(),
        origin_realm: "test.local".into(),
        destination_realm: "test.local".into(),
        destination_host: Some("pcrf.test.local".into()),
        origin_state_id: 1,
        pgw_address: Ipv4Addr::new(192, 0, 2, 1),
        sgw_address: Ipv4Addr::new(192, 0, 2, 2),
        mcc_mnc: "00101".into(),
        apn: "internet".into(),
    }
}

fn subscriber(i: usize) -> Subscriber {
    Subscriber {
        imsi: format!("0010100000001{i:02}"),
        msisdn: format!("4917000001{i:02}"),
        ue_ip: Ipv4Addr::new(10, 46, 0, i as u8 + 1),
        imeisv: "3534900698733190".into(),
        cell_id: 0x101,
        tac: 1,
    }
}

/// A deterministic volume per (session, request) so the expected sums are known.
fn volume(session: usize, number: u32) -> Usage {
    let x = (session as u64 * 7919 + u64::from(number) * 104_729) % 5_000_000;
    Usage {
        monitoring_key: "total".into(),
        input_octets: 100_000 + x / 10,
        output_octets: 1_000_000 + x,
    }
}

/// Sends one request until it is answered, retransmitting (T flag) over a
/// new connection when the PCRF went away; returns the Result-Code.
async fn send_until_answered(
    link: Link,
    sid: String,
    sub: Subscriber,
    number: u32,
    kind: Kind,
    usage: Vec<Usage>,
) -> u32 {
    let Link {
        addr,
        pcef,
        retries,
    } = link;
    let gw = gateway();
    let mut retransmit = false;
    for _ in 0..100 {
        let peer = pcef.read().await.peer.clone();
        let r = Request {
            session_id: &sid,
            gateway: &gw,
            destination_host: None,
            subscriber: &sub,
            number,
            charging_id: number,
        };
        let res = peer
            .request(GX, cmd::CREDIT_CONTROL, |b| {
                if retransmit {
                    b.set_retransmit();
                }
                match kind {
                    Kind::Initial => bench_gx::ccr_initial(b, &r),
                    Kind::Update => bench_gx::ccr_update(b, &r, &usage),
                    Kind::Terminate => bench_gx::ccr_terminate(b, &r, &usage, 1),
                }
            })
            .await;
        match res {
            Ok(answer) => return result_of(&answer),
            Err(_) => {
                if !retransmit {
                    retries.fetch_add(1, Ordering::Relaxed);
                }
                retransmit = true;
                // A PCEF's pause before it retransmits (pacing, not a wait).
                tokio::time::sleep(Duration::from_millis(100)).await;
                // The first task to see the dead connection reconnects for all.
                let mut guard = pcef.write().await;
                if !guard.peer.is_open() {
                    if let Some(p) = Pcef::try_connect(addr, "pgw.test.local").await {
                        *guard = p;
                    }
                }
            }
        }
    }
    panic!("{sid} #{number} never answered");
}

/// The emulated PCEF's connection, shared by every session's task.
#[derive(Clone)]
struct Link {
    addr: SocketAddr,
    pcef: Arc<RwLock<Pcef>>,
    /// Requests that had to be sent again.
    retries: Arc<AtomicUsize>,
}

#[derive(Clone, Copy)]
enum Kind {
    Initial,
    Update,
    Terminate,
}

/// Sets `[store] writers` in the server's configuration (None: the
/// default), for its next start.
fn set_writers(p: &Pcrf, writers: Option<usize>) {
    let text = std::fs::read_to_string(&p.config).expect("config");
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.starts_with("writers = ")) {
        out.push_str(line);
        out.push('\n');
        if let (true, Some(n)) = (line == "[store]", writers) {
            out.push_str(&format!("writers = {n}\n"));
        }
    }
    std::fs::write(&p.config, out).expect("write config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_scenario_usage_is_exact_after_kill_9_in_the_middle() {
    seed_scenario([None, None, None]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_exact_when_each_restart_changes_the_number_of_writers() {
    let log = seed_scenario([Some(4), Some(3), Some(1)]).await;
    assert!(
        log.matches("store directory laid out for its shards")
            .count()
            >= 2,
        "{log}"
    );
}

/// The scenario with `writers[0]` store writers from the start, then
/// `writers[1]` and `writers[2]` after the two kills; returns the log.
async fn seed_scenario(writers: [Option<usize>; 3]) -> String {
    let mut p = Pcrf::start_with_usage("");
    if writers[0].is_some() {
        set_writers(&p, writers[0]);
        p.restart();
    }
    for i in 0..SUBSCRIBERS {
        p.provision(&subscriber(i).imsi, r#"{"plan":"basic"}"#);
    }
    let pcef = Arc::new(RwLock::new(
        Pcef::connect(p.diameter, "pgw.test.local").await,
    ));
    let sessions: Vec<(String, usize)> = (0..SUBSCRIBERS * SESSIONS_PER_SUBSCRIBER)
        .map(|s| (format!("pgw.test.local;r;{s}"), s % SUBSCRIBERS))
        .collect();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut kills = 0;
    let retries = Arc::new(AtomicUsize::new(0));
    let link = Link {
        addr: p.diameter,
        pcef: pcef.clone(),
        retries: retries.clone(),
    };
    for number in 0..=UPDATES + 1 {
        let kind = match number {
            0 => Kind::Initial,
            n if n > UPDATES => Kind::Terminate,
            _ => Kind::Update,
        };
        // Every session's request of this round at once.
        let mut round = JoinSet::new();
        for (si, (sid, sub)) in sessions.iter().enumerate() {
            let usage = match kind {
                Kind::Initial => Vec::new(),
                _ => vec![volume(si, number)],
            };
            for u in &usage {
                *expected.entry(subscriber(*sub).imsi).or_default() +=
                    u.input_octets + u.output_octets;
            }
            round.spawn(send_until_answered(
                link.clone(),
                sid.clone(),
                subscriber(*sub),
                number,
                kind,
                usage,
            ));
        }
        if number == 2 || number == 5 {
            // SIGKILL once a few answers of the round are in and the rest in
            // flight (some committed, their answers lost), then start again
            // on the same data and ports; the PCEF retransmits what it lost.
            for _ in 0..5 {
                if let Some(code) = round.join_next().await {
                    assert_eq!(code.expect("task"), 2001);
                }
            }
            set_writers(&p, writers[kills + 1]);
            tokio::task::block_in_place(|| p.restart());
            kills += 1;
        }
        while let Some(code) = round.join_next().await {
            assert_eq!(code.expect("task"), 2001, "{}", p.log());
        }
    }
    assert_eq!(kills, 2);
    // The kills must have cut requests off, or this test proved nothing.
    let retried = retries.load(Ordering::Relaxed);
    assert!(retried > 0, "no request was in flight at either kill");
    eprintln!("{retried} requests retransmitted after the kills");
    let retransmitted = p.metrics();
    for (imsi, want) in &expected {
        let (st, v) = p.http("GET", &format!("/v1/subscribers/{imsi}/usage"), None);
        assert_eq!(st, 200, "{v}");
        assert_eq!(
            v["accumulators"]["monthly"]["used"].as_u64(),
            Some(*want),
            "subscriber {imsi}: {v}\n{retransmitted}"
        );
    }
    p.log()
}
