//! A cluster as the cluster tests run it: a database of its own, `pcrf
//! serve` nodes named as deploy/cluster/ names them, and the routing agent
//! in front with every node open; and what the tests read from the nodes
//! (counters, usage).

use super::*;

/// A `[cluster]` section with a fast heartbeat, for tests that watch
/// liveness or the sessions a node reports (`GET /v1/cluster`).
pub const FAST_HEARTBEAT: &str = r#"
[cluster]
heartbeat_interval_ms = 200
node_timeout_ms = 1000
"#;

/// The cluster. Dropped in this order: the agent, the nodes, then the
/// database (kept when the test failed).
pub struct Cluster {
    pub agent: Agent,
    /// NODES[i] is `nodes[i]`.
    pub nodes: Vec<Pcrf>,
    pub db: TestDatabase,
}

impl Cluster {
    /// `count` nodes (NODES[..count]), `extra` appended to each one's
    /// configuration, behind the agent once it has opened every node.
    pub async fn start(count: usize, extra: &str) -> Cluster {
        Self::start_each(count, |_| extra.to_string()).await
    }

    /// As `start`, with `extra(i)` appended to node `i`'s configuration.
    pub async fn start_each(count: usize, extra: impl Fn(usize) -> String) -> Cluster {
        let db = test_database("cluster").await;
        let nodes: Vec<Pcrf> = NODES[..count]
            .iter()
            .enumerate()
            .map(|(i, n)| Pcrf::start_cluster_node_with(n, REALM, AGENT, Some(&db.url), &extra(i)))
            .collect();
        let agent = Agent::start(&nodes.iter().collect::<Vec<_>>());
        let c = Cluster { agent, nodes, db };
        for i in 0..count {
            c.wait_agent_open(i, Duration::from_secs(30));
        }
        c
    }

    /// Waits up to `limit` for the agent to have node `i` open (after a
    /// restart: it reconnects every Tc = 5 s).
    pub fn wait_agent_open(&self, i: usize, limit: Duration) {
        self.agent.wait_open(NODES[i], &self.nodes[i], limit);
    }

    /// A PCEF named `origin_host` connected to the agent.
    pub async fn pcef(&self, origin_host: &str) -> Gateway {
        Gateway::pcef(&self.agent, origin_host).await
    }
}

impl Pcrf {
    /// A counter's value in this node's /metrics: the sum of the series
    /// named `name` (a name with labels names one series), 0 when absent.
    pub fn counter(&self, name: &str) -> u64 {
        self.metrics()
            .lines()
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let labels = series.strip_prefix(name)?;
                (labels.is_empty() || labels.starts_with('{')).then(|| value.parse::<f64>().ok())?
            })
            .sum::<f64>() as u64
    }

    /// Sessions this node took over from another node.
    pub fn taken_over(&self) -> u64 {
        self.counter("pcrf_cluster_sessions_taken_over_total")
    }

    /// The octets used of `imsi`'s "monthly" accumulator (USAGE_FILE), as
    /// the store holds them; 0 when not counted yet.
    pub fn monthly_used(&self, imsi: &str) -> u64 {
        let (st, v) = self.http("GET", &format!("/v1/subscribers/{imsi}/usage"), None);
        assert_eq!(st, 200, "{v}");
        v["accumulators"]["monthly"]["used"].as_u64().unwrap_or(0)
    }
}
