//! A monthly reset at its boundary, with time injected rather than waited
//! for: a node (the real one, on the embedded store) throttles a subscriber
//! whose allowance is used up; the reset sweep one second before the
//! billing-day boundary changes nothing, the sweep at the boundary resets
//! the accumulator durably and re-decides the subscriber's session.

use bytes::Bytes;
use diameter::codec::Message;
use diameter::dict::avp;
use diameter::transport::PeerTable;
use pcrf::config::Config;
use pcrf::control::Control;
use pcrf::metrics::Metrics;
use pcrf::node::NodeParts;
use pcrf::policy::{EngineConfig, Limits, PolicyEngine};
use pcrf::services::Services;
use pcrf::store::{ShardedWriter, SqliteStore, Store};
use pcrf::subscriber::Subscriber;
use pcrf_bench::gx::{self as bench_gx, Gateway, Request, Usage};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const IMSI: &str = "001010000000001";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "pcrf-usage-reset-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

const USAGE: &str = r#"
time_zone = "Europe/Berlin"
billing_day = 1
[keys.total]
chunk = "100 MB"
[accumulators.monthly]
reset = "monthly"
sources = ["total"]
"#;

fn node(dir: &Path, store: Box<dyn Store>) -> Services {
    let cfg = Arc::new(Config::zero_config());
    let policy = Arc::new(
        PolicyEngine::load(EngineConfig {
            path: repo().join("policies/default.lua"),
            limits: Limits {
                instructions: 1_000_000,
                memory_bytes: 16 << 20,
            },
            fallback: Default::default(),
        })
        .expect("policy"),
    );
    // Versions in memory: this node has no store directory of its own.
    let policy = pcrf::policy::PolicyVersions::start(
        policy,
        Arc::new(pcrf::store::SqliteVersions::in_memory().expect("versions")),
    )
    .expect("policy versions");
    let mut store = store;
    let subscribers = store.subscribers().expect("subscribers");
    let sessions = store.open_sessions().expect("sessions");
    let usage = store.usage_records().expect("usage");
    let usage_path = dir.join("usage.toml");
    std::fs::write(&usage_path, USAGE).expect("usage file");
    let (usage_versions, usage_cfg) = pcrf::usage::versions::UsageVersions::start_from_file(
        Arc::new(pcrf::store::SqliteVersions::in_memory().expect("versions")),
        usage_path,
    )
    .expect("usage file");
    Services::new(NodeParts {
        cfg,
        policy,
        store: ShardedWriter::single(store).expect("writer"),
        subscribers,
        sessions,
        usage,
        usage_cfg,
        usage_versions,
        peers: PeerTable::new(),
        metrics: Arc::new(Metrics::new()),
        tz: jiff::tz::TimeZone::get("Europe/Berlin").expect("tz"),
        pg: None,
        notify: pcrf::notify::Outbox::disabled(),
    })
}

fn request(
    number: u32,
    build: impl FnOnce(&mut diameter::MessageBuilder<'_>, &Request<'_>),
) -> Message {
    let gw = Gateway {
        origin_host: "pgw.test.local".into(),
        origin_realm: "test.local".into(),
        destination_realm: "test.local".into(),
        destination_host: None,
        origin_state_id: 1,
        pgw_address: Ipv4Addr::new(192, 0, 2, 1),
        sgw_address: Ipv4Addr::new(192, 0, 2, 2),
        mcc_mnc: "00101".into(),
        apn: "internet".into(),
    };
    let sub = bench_gx::Subscriber {
        imsi: IMSI.into(),
        msisdn: "491700000001".into(),
        ue_ip: Ipv4Addr::new(10, 45, 0, 2),
        imeisv: "3534900698733190".into(),
        cell_id: 0x101,
        tac: 1,
    };
    let r = Request {
        session_id: "pgw.test.local;reset;1",
        gateway: &gw,
        destination_host: None,
        subscriber: &sub,
        number,
        charging_id: 1,
    };
    let bytes: Bytes = bench_gx::encode(number + 1, number + 1, |b| build(b, &r));
    Message::parse(bytes).expect("parse")
}

fn rules_installed(cca: &Bytes) -> Vec<String> {
    let m = Message::parse(cca.clone()).expect("cca");
    let mut out = Vec::new();
    for a in m.avps() {
        let a = a.expect("avp");
        if a.is(avp::CHARGING_RULE_INSTALL) {
            for g in a.grouped() {
                let g = g.expect("avp");
                if g.is(avp::CHARGING_RULE_NAME) {
                    out.push(g.as_str().expect("name").to_string());
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monthly_reset_happens_at_the_billing_day_boundary_and_not_before() {
    let dir = scratch();
    let n = node(
        &dir,
        Box::new(SqliteStore::open(&dir.join("data"), Default::default()).expect("store")),
    );
    n.operations()
        .put_subscriber(Subscriber {
            imsi: IMSI.into(),
            plan: Some("basic".into()),
            quotas: [("monthly".to_string(), 50_000_000)].into_iter().collect(),
            ..Default::default()
        })
        .await
        .expect("provision");

    let cca =
        n.gx.handle_gx(request(0, bench_gx::ccr_initial))
            .await
            .expect("CCA-I");
    assert_eq!(rules_installed(&cca), vec!["internet".to_string()]);
    let usage = vec![Usage {
        monitoring_key: "total".into(),
        input_octets: 10_000_000,
        output_octets: 50_000_000,
    }];
    let cca =
        n.gx.handle_gx(request(1, |b, r| bench_gx::ccr_update(b, r, &usage)))
            .await
            .expect("CCA-U");
    assert_eq!(
        rules_installed(&cca),
        vec!["throttled".to_string()],
        "60 MB of a 50 MB allowance: throttled in this very answer"
    );

    let view = n.operations().usage(IMSI).expect("usage");
    let monthly = &view.accumulators.get("monthly").expect("monthly");
    assert_eq!(monthly.used, 60_000_000);
    assert!(monthly.exhausted);
    let end: jiff::Timestamp = monthly
        .period_end
        .as_deref()
        .expect("a monthly period ends")
        .parse()
        .expect("RFC 3339");
    // The period ends at local midnight of the 1st (Europe/Berlin).
    let local = end.to_zoned(jiff::tz::TimeZone::get("Europe/Berlin").expect("tz"));
    assert_eq!((local.day(), local.hour(), local.minute()), (1, 0, 0));
    let end_ms = end.as_millisecond();

    assert_eq!(
        n.gx.reset_sweep(end_ms - 1000).await,
        0,
        "a second early: no reset"
    );
    assert_eq!(
        n.operations()
            .usage(IMSI)
            .expect("usage")
            .accumulators
            .get("monthly")
            .expect("monthly")
            .used,
        60_000_000
    );
    assert_eq!(n.gx.reset_sweep(end_ms).await, 1, "at the boundary: reset");
    assert_eq!(n.gx.reset_sweep(end_ms + 1000).await, 0, "once");

    // Durable: a node recovering from the same store sees the new period.
    n.node.persistence.store().flush().await.expect("flush");
    let mut stores = n
        .node
        .persistence
        .store()
        .shutdown()
        .await
        .expect("shutdown");
    let recovered = stores.pop().expect("its one shard");
    let n2 = node(&dir, recovered);
    let after = n2.operations().usage(IMSI).expect("usage");
    assert_eq!(after.accumulators.get("monthly").expect("monthly").used, 0);
    assert!(
        !after
            .accumulators
            .get("monthly")
            .expect("monthly")
            .exhausted
    );
    let _ = std::fs::remove_dir_all(&dir);
}
