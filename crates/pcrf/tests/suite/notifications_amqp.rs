//! Notifications to the machine's RabbitMQ (127.0.0.1:5672, guest/guest),
//! read and acknowledged by a lapin consumer in the test: persistent
//! messages with the routing key from the template, and `kill -9` of the
//! PCRF while it delivers, and again while the broker is unreachable
//! behind a TCP proxy the test cuts, loses no event: every event of every
//! answered request arrives, a duplicate only ever with its event's id and
//! idempotency key, on the embedded store and on PostgreSQL. Each test
//! uses its own exchange and queue.

use crate::support;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::notify::*;
use support::*;

const BROKER: &str = "127.0.0.1:5672";

/// A message as the consumer got it.
#[derive(Debug)]
struct Got {
    routing_key: String,
    persistent: bool,
    body: Value,
}

/// A queue bound to a fresh exchange, read with basic.get and acked.
struct Consumer {
    _conn: Connection,
    ch: Channel,
    exchange: String,
    queue: String,
}

impl Consumer {
    async fn start(tag: &str) -> Consumer {
        let unique = format!(
            "{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let conn = Connection::connect(
            &format!("amqp://guest:guest@{BROKER}/%2f"),
            ConnectionProperties::default(),
        )
        .await
        .expect("RabbitMQ on 127.0.0.1:5672 (scripts/test.sh starts it)");
        let ch = conn.create_channel().await.expect("channel");
        let exchange = format!("pcrf-test-{unique}");
        let queue = format!("pcrf-test-q-{unique}");
        // As the sink declares it (durable topic), so both agree.
        ch.exchange_declare(
            &exchange,
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("exchange");
        ch.queue_declare(
            &queue,
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("queue");
        ch.queue_bind(
            &queue,
            &exchange,
            "pcrf.#",
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
        Consumer {
            _conn: conn,
            ch,
            exchange,
            queue,
        }
    }

    /// Everything queued now, each acked.
    async fn drain(&self, into: &mut Vec<Got>) {
        while let Some(m) = self
            .ch
            .basic_get(&self.queue, BasicGetOptions::default())
            .await
            .expect("basic.get")
        {
            let d = &m.delivery;
            into.push(Got {
                routing_key: d.routing_key.to_string(),
                persistent: d.properties.delivery_mode() == &Some(2),
                body: serde_json::from_slice(&d.data).expect("JSON body"),
            });
            d.ack(BasicAckOptions::default()).await.expect("ack");
        }
    }

    /// Reads until `done` holds of what was read, or `limit` passes.
    async fn read_until(&self, limit: Duration, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = Instant::now() + limit;
        let mut got = Vec::new();
        loop {
            self.drain(&mut got).await;
            if done(&got) || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn remove(self) {
        let _ = self
            .ch
            .exchange_delete(&self.exchange, ExchangeDeleteOptions::default())
            .await;
    }
}

fn sink(broker: SocketAddr, exchange: &str) -> String {
    format!(
        r#"
[notifications]

[[notifications.sinks]]
name = "bus"
kind = "amqp"
url = "amqp://guest:guest@{broker}/%2f"
exchange = "{exchange}"
routing_key = "pcrf.{{name}}"
events = ["session.*"]
concurrency = 4
timeout_ms = 2000
retry_initial_ms = 50
retry_max_ms = 500
"#
    )
}

fn keys(got: &[Got]) -> BTreeSet<String> {
    got.iter()
        .map(|g| g.body["idempotency_key"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn status(p: &Pcrf) -> Value {
    p.http("GET", "/v1/notifications/status", None).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_published_persistent_and_confirmed() {
    let c = Consumer::start("publish").await;
    let p = Pcrf::start(&sink(BROKER.parse().unwrap(), &c.exchange));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;amqp;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);
    assert_eq!(result_of(&pcef.ccr_t(sid, 1).await), 2001);
    let got = c
        .read_until(Duration::from_secs(10), |g| g.len() >= 2)
        .await;
    assert_eq!(got.len(), 2, "{got:?}\n{}", p.log());
    assert_eq!(got[0].routing_key, "pcrf.session.started");
    assert_eq!(got[1].routing_key, "pcrf.session.ended");
    for g in &got {
        assert!(g.persistent, "delivery mode 2: {g:?}");
        assert_matches_schema(&g.body);
        assert_eq!(g.body["payload"]["session"], sid);
    }
    assert!(poll_until_async(Duration::from_secs(5), || status(&p)["backlog"] == 0).await);
    assert_eq!(status(&p)["sinks"][0]["delivered"], 2);
    c.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_delivering_and_while_the_broker_is_away_loses_nothing() {
    kill_9_loses_nothing(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_nothing_on_the_postgres_store_either() {
    let db = test_database("notify").await;
    kill_9_loses_nothing(Some(db.store_section())).await;
}

/// The kill -9 scenario on the embedded store, or on `store`.
async fn kill_9_loses_nothing(store: Option<String>) {
    let c = Consumer::start("kill9").await;
    let proxy = Proxy::start(BROKER.parse().unwrap()).await;
    let mut p = Pcrf::start_with_store(store.as_deref(), &sink(proxy.addr, &c.exchange));
    let mut expected = BTreeSet::new();
    for i in 0..110 {
        p.provision(&format!("00101000000{i:04}"), r#"{"plan":"basic"}"#);
    }

    // 1. Many events, the PCRF killed as soon as the last is answered:
    //    some are delivered, some in flight, some still in the outbox.
    {
        let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
        for i in 0..100 {
            let sid = format!("pgw.test.local;kill;{i}");
            let imsi = format!("00101000000{i:04}");
            assert_eq!(result_of(&pcef.ccr_i(&sid, &imsi).await), 2001);
            assert_eq!(result_of(&pcef.ccr_t(&sid, 1).await), 2001);
            expected.insert(format!("session.started:{sid}"));
            expected.insert(format!("session.ended:{sid}"));
        }
    }
    p.kill9();

    // 2. The broker unreachable: events wait in the outbox; killed again.
    proxy.cut();
    p.restart();
    {
        let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
        for i in 100..110 {
            let sid = format!("pgw.test.local;kill;{i}");
            let imsi = format!("00101000000{i:04}");
            assert_eq!(result_of(&pcef.ccr_i(&sid, &imsi).await), 2001);
            assert_eq!(result_of(&pcef.ccr_t(&sid, 1).await), 2001);
            expected.insert(format!("session.started:{sid}"));
            expected.insert(format!("session.ended:{sid}"));
        }
        let s = status(&p);
        assert!(s["backlog"].as_u64().unwrap() >= 20, "{s}");
    }
    p.kill9();

    // 3. Back: everything the PCRF answered for arrives.
    proxy.restore();
    p.restart();
    let got = c
        .read_until(Duration::from_secs(30), |g| keys(g).len() >= expected.len())
        .await;
    let arrived = keys(&got);
    let missing: Vec<&String> = expected.difference(&arrived).collect();
    assert!(missing.is_empty(), "lost: {missing:?}\n{}", p.log());
    assert_eq!(keys(&got), expected, "nothing but what was answered");
    // A duplicate is the same event again: same id, same key.
    let mut by_id: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for g in &got {
        assert!(g.persistent);
        by_id
            .entry(g.body["id"].as_str().unwrap().to_owned())
            .or_default()
            .insert(g.body["idempotency_key"].as_str().unwrap().to_owned());
    }
    assert!(by_id.values().all(|k| k.len() == 1), "{by_id:?}");
    assert_eq!(by_id.len(), expected.len(), "one id per event");
    // Every event of a subscriber in order: started before ended.
    for g in got.iter().filter(|g| g.body["name"] == "session.ended") {
        let key = format!(
            "session.started:{}",
            g.body["payload"]["session"].as_str().unwrap()
        );
        let ended_at = got.iter().position(|x| std::ptr::eq(x, g)).unwrap();
        assert!(
            got[..ended_at]
                .iter()
                .any(|x| x.body["idempotency_key"] == key.as_str()),
            "{key} after its end"
        );
    }
    assert!(poll_until_async(Duration::from_secs(10), || status(&p)["backlog"] == 0).await);
    c.remove().await;
}
