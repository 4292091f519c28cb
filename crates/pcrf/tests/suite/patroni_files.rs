//! The Patroni, etcd and HAProxy examples in deploy/cluster/patroni/ hold
//! what deploy/cluster/postgresql.md says they guarantee: synchronous mode,
//! strict, one synchronous standby, `synchronous_commit = on`, Patroni's
//! timing rule (loop_wait + 2 × retry_timeout ≤ ttl), the three nodes'
//! files differing only in the lines marked "differs per node", and the
//! same three machines named in the Patroni, etcd and HAProxy files. Each
//! node's file also passes Patroni's own `patroni --validate-config`
//! (scripts/install-test-deps.sh installs Debian's patroni).

use crate::support;

use std::path::PathBuf;
use std::process::Command;
use support::*;
use yaml_rust2::{Yaml, YamlLoader};

const NODES: [&str; 3] = ["db1", "db2", "db3"];

fn dir() -> PathBuf {
    repo_root().join("deploy/cluster/patroni")
}

fn text(name: &str) -> String {
    let path = dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn node(name: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(&text(&format!("{name}.yml")))
        .unwrap_or_else(|e| panic!("{name}.yml: {e}"));
    assert_eq!(docs.len(), 1, "{name}.yml: one document");
    docs.remove(0)
}

fn int(y: &Yaml, what: &str) -> i64 {
    y.as_i64()
        .unwrap_or_else(|| panic!("{what}: not an integer: {y:?}"))
}

/// The host of "host:port".
fn host(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(h, _)| h)
}

#[test]
fn the_settings_give_what_the_page_promises() {
    for name in NODES {
        let y = node(name);
        let dcs = &y["bootstrap"]["dcs"];
        assert_eq!(dcs["synchronous_mode"].as_bool(), Some(true), "{name}");
        assert_eq!(
            dcs["synchronous_mode_strict"].as_bool(),
            Some(true),
            "{name}"
        );
        assert_eq!(
            int(&dcs["synchronous_node_count"], "synchronous_node_count"),
            1
        );
        let params = &dcs["postgresql"]["parameters"];
        assert_eq!(params["synchronous_commit"].as_str(), Some("on"), "{name}");
        assert_eq!(params["wal_log_hints"].as_str(), Some("on"), "{name}");
        assert_eq!(dcs["postgresql"]["use_pg_rewind"].as_bool(), Some(true));
        let (ttl, loop_wait, retry) = (
            int(&dcs["ttl"], "ttl"),
            int(&dcs["loop_wait"], "loop_wait"),
            int(&dcs["retry_timeout"], "retry_timeout"),
        );
        assert!(ttl >= 20, "{name}: Patroni's minimum ttl is 20");
        assert!(
            loop_wait + 2 * retry <= ttl,
            "{name}: Patroni needs loop_wait + 2 * retry_timeout <= ttl"
        );
        assert!(int(&dcs["maximum_lag_on_failover"], "maximum_lag_on_failover") > 0);
        assert_eq!(y["name"].as_str(), Some(name));
        assert_eq!(y["watchdog"]["mode"].as_str(), Some("automatic"));
    }
}

#[test]
fn the_nodes_files_differ_only_where_marked() {
    let first = text("db1.yml");
    for name in &NODES[1..] {
        let other = text(&format!("{name}.yml"));
        let (a, b): (Vec<&str>, Vec<&str>) = (first.lines().collect(), other.lines().collect());
        assert_eq!(a.len(), b.len(), "{name}.yml and db1.yml: line counts");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if x != y {
                assert!(
                    i == 0 || (x.contains("differs per node") && y.contains("differs per node")),
                    "{name}.yml line {}: differs from db1.yml but is not marked:\n{x}\n{y}",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn patroni_etcd_and_haproxy_name_the_same_machines() {
    let mut postgres = Vec::new();
    for name in NODES {
        let y = node(name);
        let pg = y["postgresql"]["connect_address"]
            .as_str()
            .expect("postgresql.connect_address");
        let api = y["restapi"]["connect_address"]
            .as_str()
            .expect("restapi.connect_address");
        assert_eq!(host(pg), host(api), "{name}: one machine");
        postgres.push(pg.to_string());
        let etcd: Vec<&str> = y["etcd3"]["hosts"]
            .as_vec()
            .expect("etcd3.hosts")
            .iter()
            .filter_map(Yaml::as_str)
            .collect();
        assert_eq!(etcd.len(), 3, "{name}: three etcd members");
        let etcd_cfg = text("etcd.conf");
        for member in &etcd {
            assert!(
                etcd_cfg.contains(&format!("http://{}:2380", host(member))),
                "{name}: etcd member {member} is not in etcd.conf's cluster"
            );
        }
    }
    let mut machines: Vec<&str> = postgres.iter().map(|a| host(a)).collect();
    machines.dedup();
    assert_eq!(machines.len(), 3, "three distinct machines: {postgres:?}");
    let haproxy = text("haproxy.cfg");
    for pg in &postgres {
        assert!(
            haproxy.contains(&format!("{pg} check port 8008")),
            "haproxy.cfg does not check {pg} through Patroni's REST API"
        );
    }
}

#[test]
fn each_node_file_passes_patronis_validator() {
    let probe = Command::new("patroni").arg("--version").output();
    if probe.is_err() {
        panic!("cannot run patroni; scripts/install-test-deps.sh installs Debian's patroni");
    }
    let scratch = scratch_dir("patroni-validate");
    let mut valid = String::new();
    for name in NODES {
        // The validator also checks that the listen ports are free on
        // this machine, where a test PostgreSQL may own 5432: the copy
        // listens on loopback ports nothing uses.
        let (pg_port, api_port) = {
            let a = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
            let b = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
            (
                a.local_addr().expect("addr").port(),
                b.local_addr().expect("addr").port(),
            )
        };
        let original = text(&format!("{name}.yml"));
        assert!(
            original.contains("listen: 0.0.0.0:5432") && original.contains("listen: 0.0.0.0:8008")
        );
        let copy = original
            .replace(
                "listen: 0.0.0.0:5432",
                &format!("listen: 127.0.0.1:{pg_port}"),
            )
            .replace(
                "listen: 0.0.0.0:8008",
                &format!("listen: 127.0.0.1:{api_port}"),
            );
        let path = scratch.join(format!("{name}.yml"));
        std::fs::write(&path, &copy).expect("write copy");
        valid = copy;
        let out = Command::new("patroni")
            .arg("--validate-config")
            .arg(&path)
            .output()
            .expect("patroni --validate-config");
        assert!(
            out.status.success(),
            "{name}.yml fails patroni --validate-config:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The validator does refuse a broken file (else this test proves nothing).
    let broken = scratch.join("broken.yml");
    assert!(valid.contains("ttl: 20"));
    std::fs::write(&broken, valid.replace("ttl: 20", "ttl: twenty")).expect("write");
    let out = Command::new("patroni")
        .arg("--validate-config")
        .arg(&broken)
        .output()
        .expect("patroni --validate-config");
    assert!(!out.status.success(), "the validator accepted ttl: twenty");
    let _ = std::fs::remove_dir_all(&scratch);
}
