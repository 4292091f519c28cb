//! Provisioning done through any node, seen by every node at once. Each
//! node keeps every profile in memory (the read path of a CCR), so a
//! profile written through another node's API must replace this node's
//! copy before the next CCR. A trigger on `subscribers` (schema 9) sends
//! `NOTIFY pcrf_subscribers` with the IMSIs a statement changed (in
//! payloads of about 7000 bytes), in the writing transaction, so PostgreSQL
//! delivers them exactly when the change commits. Every node LISTENs on a
//! connection of its own, reads the named profiles back, puts them in its
//! table (or removes them) and re-decides the sessions of those
//! subscribers that it holds, as a local provisioning change does. The
//! first LISTEN is issued before start-up reads the subscribers, so nothing
//! falls between; a notification sent while the connection was down is
//! lost, so after every reconnection the whole table is compared with the
//! store.

use crate::cluster::membership::connect;
use crate::node::{Capabilities, Sessions, Signalling, Subscribers};
use crate::pcc::PushReason;
use crate::subscriber::Subscriber;
use diameter::peer::{Backoff, Jitter};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client};

/// The channel the trigger notifies.
pub const CHANNEL: &str = "pcrf_subscribers";

/// Profiles read per page when the whole table is compared.
const PAGE: i64 = 1000;

/// A LISTENing connection and the notifications it received.
pub struct Listener {
    client: Client,
    pub(crate) notes: mpsc::UnboundedReceiver<String>,
    _driver: AbortOnDrop,
}

impl Listener {
    /// Connects and LISTENs: every change committed from now on is queued
    /// here. Start-up opens one before it reads the subscribers, so what
    /// it read and what follows leave no gap.
    pub async fn open(url: &str, timeout: Duration, node: &str) -> Result<Listener, String> {
        Listener::open_on(url, timeout, node, CHANNEL).await
    }

    /// As `open`, on `channel` (the deployed versions' feed listens on its
    /// own).
    pub(crate) async fn open_on(
        url: &str,
        timeout: Duration,
        node: &str,
        channel: &str,
    ) -> Result<Listener, String> {
        let (client, mut conn) = connect(url, timeout, "pcrf-feed", node).await?;
        let (tx, notes) = mpsc::unbounded_channel::<String>();
        let driver = tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        if tx.send(n.payload().to_owned()).is_err() {
                            return;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => return,
                }
            }
        });
        let listener = Listener {
            client,
            notes,
            _driver: AbortOnDrop(driver),
        };
        tokio::time::timeout(
            timeout,
            listener.client.batch_execute(&format!("LISTEN {channel}")),
        )
        .await
        .map_err(|_| "LISTEN timed out".to_string())?
        .map_err(|e| e.to_string())?;
        Ok(listener)
    }
}

/// What the feed reaches: the subscriber table it keeps in step, the
/// sessions of a changed subscriber and the push that re-decides them,
/// and this node's name.
pub struct Feed {
    subscribers: Subscribers,
    sessions: Sessions,
    signalling: Signalling,
}

impl Feed {
    pub fn new(caps: &Capabilities) -> Feed {
        Feed {
            subscribers: caps.subscribers.clone(),
            sessions: caps.sessions.clone(),
            signalling: caps.signalling.clone(),
        }
    }
}

/// Applies notifications until `stop`, starting with `first` (opened before
/// the subscribers were read at start-up; `None` if that failed); reconnects
/// with a jittered backoff from 100 ms doubling up to 5 s when the
/// connection is lost.
pub async fn run(
    reach: Feed,
    url: String,
    timeout: Duration,
    first: Option<Listener>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(5),
        None,
        Jitter::from_entropy(),
    );
    // No retry since the last time it listened: the failure is news.
    let mut first_failure = true;
    let mut first = first;
    let mut reconnected = false;
    loop {
        let res = match first.take() {
            Some(l) => serve(&reach, l, timeout, &mut stop).await,
            None => match Listener::open(&url, timeout, &reach.signalling.me().origin_host).await {
                // What changed while no connection listened was not
                // notified: compare the whole table with the store.
                Ok(l) => match resync(&reach, &l.client, timeout).await {
                    Ok(changed) => {
                        tracing::info!(
                            profiles_changed = changed,
                            reconnected,
                            "provisioning feed listening again"
                        );
                        backoff.reset();
                        first_failure = true;
                        serve(&reach, l, timeout, &mut stop).await
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
        };
        match res {
            Ok(()) => return,
            // Once per outage (not at every retry, as on a database
            // without LISTEN).
            Err(e) if first_failure => {
                tracing::warn!(error = %e, "provisioning feed lost; reconnecting")
            }
            Err(e) => tracing::debug!(error = %e, "provisioning feed: reconnecting failed"),
        }
        reconnected = true;
        first_failure = false;
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

/// Applies each notification of `l`. `Ok` when stopped, `Err` when the
/// connection failed.
async fn serve(
    reach: &Feed,
    mut l: Listener,
    timeout: Duration,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    loop {
        let first = tokio::select! {
            m = l.notes.recv() => m,
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return Ok(());
                }
                continue;
            }
        };
        let Some(first) = first else {
            return Err("the connection closed".into());
        };
        // Whatever else is queued goes in the same read.
        let mut keys: HashSet<String> = HashSet::new();
        let mut all = false;
        let mut add = |payload: &str| {
            for k in payload.split(',').filter(|k| !k.is_empty()) {
                if k == "*" {
                    all = true;
                } else {
                    keys.insert(k.to_owned());
                }
            }
        };
        add(&first);
        while let Ok(more) = l.notes.try_recv() {
            add(&more);
        }
        if all {
            resync(reach, &l.client, timeout).await?;
        } else {
            let keys: Vec<String> = keys.into_iter().collect();
            let stored = read(&l.client, &keys, timeout).await?;
            for imsi in &keys {
                apply(reach, imsi, stored.get(imsi).cloned());
            }
        }
    }
}

/// Aborts the connection's task when the listener ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The stored profiles of `keys` (absent: deleted).
async fn read(
    client: &Client,
    keys: &[String],
    timeout: Duration,
) -> Result<HashMap<String, Subscriber>, String> {
    let rows = tokio::time::timeout(
        timeout,
        client.query(
            "SELECT imsi, data FROM subscribers WHERE imsi = ANY($1)",
            &[&keys],
        ),
    )
    .await
    .map_err(|_| "reading subscribers timed out".to_string())?
    .map_err(|e| e.to_string())?;
    decode(&rows)
}

fn decode(rows: &[tokio_postgres::Row]) -> Result<HashMap<String, Subscriber>, String> {
    let mut skipped = 0;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let imsi: String = r.try_get(0).map_err(|e| e.to_string())?;
        let data: Vec<u8> = r.try_get(1).map_err(|e| e.to_string())?;
        if let Some(s) = crate::store::blob::decode_subscriber(&mut skipped, &imsi, &data) {
            out.insert(imsi, s);
        }
    }
    Ok(out)
}

/// Compares the whole table with the store; returns how many profiles
/// changed here.
async fn resync(reach: &Feed, client: &Client, timeout: Duration) -> Result<usize, String> {
    let mut after = String::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut changed = 0;
    loop {
        let rows = tokio::time::timeout(
            timeout,
            client.query(
                "SELECT imsi, data FROM subscribers WHERE imsi > $1 ORDER BY imsi LIMIT $2",
                &[&after, &PAGE],
            ),
        )
        .await
        .map_err(|_| "reading subscribers timed out".to_string())?
        .map_err(|e| e.to_string())?;
        let Some(last) = rows.last() else { break };
        after = last.try_get(0).map_err(|e| e.to_string())?;
        let n = rows.len();
        for (imsi, s) in decode(&rows)? {
            seen.insert(imsi.clone());
            changed += usize::from(apply(reach, &imsi, Some(s)));
        }
        if n < PAGE as usize {
            break;
        }
    }
    // Gone from the store, unless written since its page was read (its
    // own notification follows then).
    let missing: Vec<String> = reach
        .subscribers
        .table()
        .imsis()
        .into_iter()
        .filter(|i| !seen.contains(i))
        .collect();
    if !missing.is_empty() {
        let stored = read(client, &missing, timeout).await?;
        for imsi in &missing {
            changed += usize::from(apply(reach, imsi, stored.get(imsi).cloned()));
        }
    }
    Ok(changed)
}

/// Puts the stored profile in the table (or removes it) and, if it
/// differed, re-decides this node's sessions of the subscriber.
fn apply(reach: &Feed, imsi: &str, stored: Option<Subscriber>) -> bool {
    let (before, after) = match stored {
        Some(s) => {
            let s = Arc::new(s);
            let before = reach.subscribers.table().put(s.clone());
            if before.as_deref() == Some(&*s) {
                return false;
            }
            (before, Some(s))
        }
        None => match reach.subscribers.table().remove(imsi) {
            Some(before) => (Some(before), None),
            None => return false,
        },
    };
    tracing::debug!(
        imsi,
        deleted = after.is_none(),
        "profile changed by another node"
    );
    // Sessions are indexed by IMSI, or by MSISDN when the PCEF sent none.
    let mut keys = vec![imsi.to_owned()];
    for p in [&before, &after].into_iter().flatten() {
        if let Some(m) = &p.msisdn {
            if !keys.contains(m) {
                keys.push(m.clone());
            }
        }
    }
    keys.retain(|k| !reach.sessions.table().ids_of_subscriber(k).is_empty());
    if keys.is_empty() {
        return true;
    }
    if let Some(gx) = reach.signalling.gx() {
        tokio::spawn(async move {
            for k in keys {
                gx.subscriber(&k, PushReason::Provisioning).await;
            }
        });
    }
    true
}
