//! Which nodes share the PostgreSQL store and which of them are alive.
//! Every node (named by its Origin-Host) upserts a row of `cluster_nodes`
//! every `[cluster].heartbeat_interval_ms` from a background task, on a
//! connection of its own (never a writer's, so a slow heartbeat never
//! delays a commit), and reads the whole table back in the same tick. A
//! node is alive while its heartbeat is younger than
//! `[cluster].node_timeout_ms`; ages are computed by the database's clock,
//! so the nodes' clocks need not agree. `GET /v1/cluster` and the
//! `pcrf_cluster_nodes_alive` gauge show the last table read. On the
//! embedded SQLite store the node is alone and answers for itself.

use crate::metrics::{Exposition, MetricsSource};
use crate::policy::versions::Refusal;
use parking_lot::RwLock;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};
use utoipa::ToSchema;

/// One row of `cluster_nodes` as last read, its age by the database clock.
#[derive(Clone, Debug)]
pub(super) struct Row {
    pub(super) name: String,
    pub(super) api: String,
    pub(super) started_ms: i64,
    pub(super) sessions: i64,
    pub(super) age_ms: i64,
    pub(super) policy_version: Option<i64>,
    pub(super) policy_refused: Option<Refusal>,
    pub(super) usage_version: Option<i64>,
    pub(super) usage_refused: Option<Refusal>,
}

/// The table as read at `taken`.
struct Snapshot {
    taken: Instant,
    rows: Vec<Row>,
}

/// What `GET /v1/cluster` shows.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ClusterView {
    /// This node's name (its Origin-Host).
    pub node: String,
    /// `postgres`: the nodes sharing the database; `sqlite`: this node alone.
    pub store: &'static str,
    /// A node whose heartbeat is older than this is not alive.
    pub node_timeout_ms: u64,
    /// How many of `nodes` are alive.
    pub alive: usize,
    /// Every node that ever wrote a heartbeat to this database, by name.
    pub nodes: Vec<NodeView>,
}

/// One node of [`ClusterView`].
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct NodeView {
    /// Its Origin-Host.
    pub name: String,
    /// The address its REST API listens on.
    pub api: String,
    /// When it started (Unix milliseconds).
    pub started_ms: i64,
    /// Its heartbeat is younger than `node_timeout_ms`.
    pub alive: bool,
    /// How long ago its last heartbeat was written; absent while this
    /// node has not yet written or read one.
    pub heartbeat_age_ms: Option<u64>,
    /// Open sessions it held in memory at that heartbeat (closed ones live
    /// in the store only, for `[sessions].retention_secs`).
    pub sessions: u64,
    /// This is the node that answered.
    pub this_node: bool,
    /// The stored policy version it serves (`GET /v1/policy/versions`);
    /// absent before its first heartbeat with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<i64>,
    /// The newest version, when it could not load it (it keeps serving
    /// `policy_version`), and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_refused: Option<Refusal>,
    /// The stored usage file version it counts by
    /// (`GET /v1/usage/versions`; 0: none); absent before its first
    /// heartbeat with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_version: Option<i64>,
    /// The newest usage file version, when it could not take it (its open
    /// sessions hold grants the version would orphan, ...), and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_refused: Option<Refusal>,
}

/// The versions this node serves of the policy and the usage file, for
/// its heartbeat and its own row.
#[derive(Clone, Debug, Default)]
pub struct Serving {
    pub policy_version: i64,
    pub policy_refused: Option<Refusal>,
    pub usage_version: i64,
    pub usage_refused: Option<Refusal>,
}

/// This node's view of the cluster.
pub struct Membership {
    pub(super) name: String,
    pub(super) started_ms: i64,
    /// On a shared (PostgreSQL) store; false: alone.
    shared: bool,
    api: OnceLock<String>,
    pub(super) node_timeout_ms: AtomicU64,
    snapshot: RwLock<Option<Snapshot>>,
}

impl Membership {
    pub fn new(name: String, started_ms: i64, shared: bool, node_timeout_ms: u64) -> Membership {
        Membership {
            name,
            started_ms,
            shared,
            api: OnceLock::new(),
            node_timeout_ms: AtomicU64::new(node_timeout_ms),
            snapshot: RwLock::new(None),
        }
    }

    /// The address the API listens on, once it is bound.
    pub fn set_api(&self, addr: String) {
        let _ = self.api.set(addr);
    }

    pub(super) fn api(&self) -> String {
        self.api.get().cloned().unwrap_or_default()
    }

    pub(super) fn record(&self, rows: Vec<Row>) {
        *self.snapshot.write() = Some(Snapshot {
            taken: Instant::now(),
            rows,
        });
    }

    /// The nodes as last read (ages advanced to now), or this node alone
    /// with `sessions` when the store is not shared; this node's versions
    /// are `serving`, as they are now.
    pub fn view(&self, sessions: u64, serving: Serving) -> ClusterView {
        let timeout = self.node_timeout_ms.load(Relaxed);
        let me = |age: Option<u64>, sessions: u64| NodeView {
            name: self.name.clone(),
            api: self.api(),
            started_ms: self.started_ms,
            alive: age.is_some_and(|a| a < timeout),
            heartbeat_age_ms: age,
            sessions,
            this_node: true,
            policy_version: Some(serving.policy_version),
            policy_refused: serving.policy_refused.clone(),
            usage_version: Some(serving.usage_version),
            usage_refused: serving.usage_refused.clone(),
        };
        let nodes = if !self.shared {
            vec![me(Some(0), sessions)]
        } else {
            match &*self.snapshot.read() {
                None => vec![me(None, sessions)],
                Some(s) => {
                    let since = u64::try_from(s.taken.elapsed().as_millis()).unwrap_or(u64::MAX);
                    s.rows
                        .iter()
                        .map(|r| {
                            let age = u64::try_from(r.age_ms.max(0))
                                .unwrap_or(0)
                                .saturating_add(since);
                            let this_node = r.name == self.name;
                            let mine = Row {
                                policy_version: Some(serving.policy_version),
                                policy_refused: serving.policy_refused.clone(),
                                usage_version: Some(serving.usage_version),
                                usage_refused: serving.usage_refused.clone(),
                                ..r.clone()
                            };
                            let v = if this_node { &mine } else { r };
                            NodeView {
                                name: r.name.clone(),
                                api: r.api.clone(),
                                started_ms: r.started_ms,
                                alive: age < timeout,
                                heartbeat_age_ms: Some(age),
                                sessions: u64::try_from(r.sessions).unwrap_or(0),
                                this_node,
                                policy_version: v.policy_version,
                                policy_refused: v.policy_refused.clone(),
                                usage_version: v.usage_version,
                                usage_refused: v.usage_refused.clone(),
                            }
                        })
                        .collect()
                }
            }
        };
        ClusterView {
            node: self.name.clone(),
            store: if self.shared { "postgres" } else { "sqlite" },
            node_timeout_ms: timeout,
            alive: nodes.iter().filter(|n| n.alive).count(),
            nodes,
        }
    }
}

impl MetricsSource for Membership {
    fn write(&self, out: &mut Exposition) {
        out.gauge(
            "pcrf_cluster_nodes_alive",
            "Nodes whose heartbeat in the shared store is younger than [cluster].node_timeout_ms, as this node last read them (1 on the embedded store).",
            self.view(0, Serving::default()).alive as u64,
        );
    }
}

pub(super) const UPSERT: &str = "INSERT INTO cluster_nodes \
     (name, api, started_ms, sessions, heartbeat_at, policy_version, policy_refused, \
     usage_version, usage_refused) \
     VALUES ($1, $2, $3, $4, now(), $5, $6, $7, $8) ON CONFLICT (name) DO UPDATE SET \
     api = excluded.api, started_ms = excluded.started_ms, sessions = excluded.sessions, \
     heartbeat_at = excluded.heartbeat_at, policy_version = excluded.policy_version, \
     policy_refused = excluded.policy_refused, usage_version = excluded.usage_version, \
     usage_refused = excluded.usage_refused";
pub(super) const READ: &str = "SELECT name, api, started_ms, sessions, \
     (EXTRACT(EPOCH FROM (now() - heartbeat_at)) * 1000)::BIGINT, policy_version, policy_refused, \
     usage_version, usage_refused FROM cluster_nodes ORDER BY name";

/// `policy_refused` and `usage_refused` as stored: "VERSION REASON".
pub(super) fn refused_column(r: &Option<Refusal>) -> Option<String> {
    r.as_ref().map(|r| format!("{} {}", r.version, r.reason))
}

pub(super) fn refusal_of(column: Option<String>) -> Option<Refusal> {
    let text = column?;
    let (version, reason) = text.split_once(' ')?;
    Some(Refusal {
        version: version.parse().ok()?,
        reason: reason.to_owned(),
    })
}

/// A connection of its own to the database `url` names; the caller drives
/// it. `purpose` and the node's name become its application name (what
/// `pg_stat_activity` shows; PostgreSQL keeps 63 bytes of it).
pub(crate) async fn connect(
    url: &str,
    timeout: Duration,
    purpose: &str,
    node: &str,
) -> Result<
    (
        Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    String,
> {
    let (mut cfg, bound) =
        crate::store::postgres::side_connection(url, timeout).map_err(|e| e.to_string())?;
    let mut name = format!("{purpose} {node}");
    while name.len() > 63 {
        name.pop();
    }
    cfg.application_name(&name);
    match tokio::time::timeout(bound, cfg.connect(NoTls)).await {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connecting timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_on_the_embedded_store_the_node_is_alive() {
        let m = Membership::new("pcrf-a".into(), 7, false, 5000);
        m.set_api("127.0.0.1:8080".into());
        let v = m.view(3, Serving::default());
        assert_eq!((v.store, v.alive, v.nodes.len()), ("sqlite", 1, 1));
        assert_eq!(v.nodes[0].sessions, 3);
        assert!(v.nodes[0].this_node);
    }

    #[test]
    fn a_stale_heartbeat_is_not_alive() {
        let m = Membership::new("pcrf-a".into(), 7, true, 5000);
        assert_eq!(m.view(0, Serving::default()).alive, 0, "nothing read yet");
        let row = |name: &str, age_ms| Row {
            name: name.into(),
            api: String::new(),
            started_ms: 1,
            sessions: 2,
            age_ms,
            policy_version: Some(3),
            policy_refused: refusal_of(Some("4 a test case fails".into())),
            usage_version: Some(2),
            usage_refused: refusal_of(Some("3 key \"web\" is removed".into())),
        };
        m.record(vec![row("pcrf-a", 10), row("pcrf-b", 6000)]);
        let v = m.view(
            0,
            Serving {
                policy_version: 4,
                usage_version: 3,
                ..Serving::default()
            },
        );
        assert_eq!(v.alive, 1);
        // This node's own version is its live one, the other's as read.
        assert_eq!(v.nodes[0].policy_version, Some(4));
        assert_eq!(v.nodes[0].policy_refused, None);
        assert_eq!(v.nodes[1].policy_version, Some(3));
        assert_eq!(
            v.nodes[1].policy_refused,
            Some(Refusal {
                version: 4,
                reason: "a test case fails".into()
            })
        );
        assert_eq!(
            (v.nodes[0].usage_version, v.nodes[1].usage_version),
            (Some(3), Some(2))
        );
        assert_eq!(v.nodes[0].usage_refused, None);
        assert_eq!(
            v.nodes[1].usage_refused.as_ref().map(|r| r.version),
            Some(3)
        );
        assert!(v.nodes[0].alive && v.nodes[0].this_node);
        assert!(!v.nodes[1].alive && !v.nodes[1].this_node);
        assert_eq!(v.nodes[1].sessions, 2);
    }
}
