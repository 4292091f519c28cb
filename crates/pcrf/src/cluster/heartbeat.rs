//! This node's heartbeat task: writes its row of `cluster_nodes` and reads
//! the others' (membership.rs says what they mean). It reads the node (its
//! open sessions, the configuration in force), so it lives apart from
//! `Membership`, which the node holds: the node's file imports membership,
//! this one imports the node, and neither imports the other back.

use super::membership::{connect, refusal_of, refused_column, Membership, Row, READ, UPSERT};
use crate::node::{Capabilities, Persistence, Policy, Sessions, Settings};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio_postgres::Client;

/// What the heartbeat reads and writes: the sessions held (their count),
/// the versions served, the membership, the cluster settings.
pub struct Heartbeat {
    sessions: Sessions,
    policy: Policy,
    persistence: Persistence,
    settings: Settings,
}

impl Heartbeat {
    pub fn new(caps: &Capabilities) -> Heartbeat {
        Heartbeat {
            sessions: caps.sessions.clone(),
            policy: caps.policy.clone(),
            persistence: caps.persistence.clone(),
            settings: caps.settings.clone(),
        }
    }
}

/// One heartbeat: this node's row written, the whole table read back.
async fn beat(client: &Client, reach: &Heartbeat, m: &Membership) -> Result<Vec<Row>, String> {
    // Memory holds open sessions only (a closed one is dropped at its
    // CCR-T and lives in the store), so this is the open sessions held.
    let sessions = i64::try_from(reach.sessions.table().len()).unwrap_or(i64::MAX);
    let serving = reach.policy.runner().serving();
    client
        .execute(
            UPSERT,
            &[
                &m.name,
                &m.api(),
                &m.started_ms,
                &sessions,
                &serving.policy_version,
                &refused_column(&serving.policy_refused),
                &serving.usage_version,
                &refused_column(&serving.usage_refused),
            ],
        )
        .await
        .map_err(|e| e.to_string())?;
    let rows = client.query(READ, &[]).await.map_err(|e| e.to_string())?;
    rows.iter()
        .map(|r| {
            Ok(Row {
                name: r.try_get(0).map_err(|e| e.to_string())?,
                api: r.try_get(1).map_err(|e| e.to_string())?,
                started_ms: r.try_get(2).map_err(|e| e.to_string())?,
                sessions: r.try_get(3).map_err(|e| e.to_string())?,
                age_ms: r.try_get(4).map_err(|e| e.to_string())?,
                policy_version: r.try_get(5).map_err(|e| e.to_string())?,
                policy_refused: refusal_of(r.try_get(6).map_err(|e| e.to_string())?),
                usage_version: r.try_get(7).map_err(|e| e.to_string())?,
                usage_refused: refusal_of(r.try_get(8).map_err(|e| e.to_string())?),
            })
        })
        .collect()
}

/// Writes this node's heartbeat and reads the others' until `stop`, on a
/// connection of its own (re-opened after a failure, at the next tick).
pub async fn run_heartbeats(
    reach: Heartbeat,
    url: String,
    timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let m = reach.persistence.membership().clone();
    let mut client: Option<Client> = None;
    let mut failing = false;
    loop {
        let cfg = reach.settings.live().cfg.cluster.clone();
        m.node_timeout_ms.store(cfg.node_timeout_ms, Relaxed);
        if client.is_none() {
            match connect(&url, timeout, "pcrf-membership", &m.name).await {
                Ok((c, conn)) => {
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    client = Some(c);
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "cluster heartbeat: cannot connect; retrying");
                    }
                    failing = true;
                }
            }
        }
        if let Some(c) = &client {
            match tokio::time::timeout(timeout, beat(c, &reach, &m)).await {
                Ok(Ok(rows)) => {
                    if failing {
                        tracing::info!("cluster heartbeat written again");
                    }
                    failing = false;
                    m.record(rows);
                }
                Ok(Err(e)) => {
                    if !failing {
                        tracing::warn!(error = %e, "cluster heartbeat failed; reconnecting");
                    }
                    failing = true;
                    client = None;
                }
                Err(_) => {
                    if !failing {
                        tracing::warn!("cluster heartbeat timed out; reconnecting");
                    }
                    failing = true;
                    client = None;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.heartbeat_interval()) => {}
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}
