//! A `pcrf serve` as one node of a cluster: its own Origin-Host in the
//! cluster's realm, the PostgreSQL database every node shares, and the
//! routing agent (a relay) as its only Diameter peer.

use super::*;

impl Pcrf {
    /// Starts a node named `origin_host` in `realm`, on the PostgreSQL
    /// database at `database_url`, accepting only the relay `agent` (from
    /// 127.0.0.1).
    pub fn start_cluster_node(
        origin_host: &str,
        realm: &str,
        agent: &str,
        database_url: &str,
    ) -> Pcrf {
        Self::start_cluster_node_with(origin_host, realm, agent, Some(database_url), "")
    }

    /// As `start_cluster_node`, with `extra` appended to the configuration
    /// (sections after `[log]`: `[usage]`, `[cluster]`...); without a
    /// database URL, on the embedded store (a node alone).
    pub fn start_cluster_node_with(
        origin_host: &str,
        realm: &str,
        agent: &str,
        database_url: Option<&str>,
        extra: &str,
    ) -> Pcrf {
        let dir = scratch_dir("node");
        let policy = dir.join("policy.lua");
        std::fs::copy(repo_root().join("policies/default.lua"), &policy).expect("copy policy");
        let [diameter_port, api_port] = free_ports();
        let diameter: SocketAddr = format!("127.0.0.1:{diameter_port}").parse().expect("addr");
        let api: SocketAddr = format!("127.0.0.1:{api_port}").parse().expect("addr");
        let config = dir.join("pcrf.toml");
        let text = format!(
            r#"
[node]
origin_host = "{origin_host}"
origin_realm = "{realm}"

[diameter]
listen = "{diameter}"
watchdog_secs = 30
request_timeout_ms = 3000

[[peers]]
origin_host = "{agent}"
addresses = ["127.0.0.1"]
relay = true

[store]
{store}

[policy]
path = "{policy}"
time_zone = "{zone}"

[api]
listen = "{api}"

[log]
level = "info"
{extra}
"#,
            store = match database_url {
                Some(url) => format!("kind = \"postgres\"\nurl = \"{url}\""),
                None => format!("path = \"{}\"", dir.join("data").display()),
            },
            policy = policy.display(),
            zone = midday_zone(),
        );
        std::fs::write(&config, text).expect("write config");
        let mut p = Pcrf {
            child: None,
            dir,
            config,
            policy,
            diameter,
            api,
            serve_args: Vec::new(),
        };
        p.first_spawn();
        p
    }

    /// Whether this node's Diameter connection to `peer` is open.
    pub fn peer_open(&self, peer: &str) -> bool {
        let Ok((200, text)) = self.try_http("GET", "/metrics", None) else {
            return false;
        };
        text.lines().any(|l| {
            l.starts_with("pcrf_peer_state{")
                && l.contains(&format!("peer=\"{peer}\""))
                && l.contains("state=\"open\"")
                && l.ends_with(" 1")
        })
    }
}
