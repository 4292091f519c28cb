//! The servers a connection string names, and which of them the store may
//! use. A string may name a primary and its standbys
//! (`host=db1,db2 port=5432,5432` or `postgres://db1:5432,db2:5432/pcrf`):
//! connecting tries them in order, and after a switch-over the store must
//! end up on the server that now accepts writes, never on a standby, and
//! must have time to try each host before its connect bound runs out.

use crate::store::StoreError;
use std::time::Duration;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::Config;

/// How many servers `cfg` names (its host or hostaddr list; at least 1).
pub(super) fn count(cfg: &Config) -> usize {
    cfg.get_hosts().len().max(cfg.get_hostaddrs().len()).max(1)
}

/// Checks what the driver would only refuse at the first connection, and
/// makes a string with several hosts ask for a server that accepts writes
/// (`target_session_attrs=read-write`) unless it asks for something else:
/// the store writes on every batch, and a standby named first would
/// otherwise take every connection and refuse every write.
pub(super) fn settle(cfg: &mut Config) -> Result<(), StoreError> {
    let hosts = count(cfg);
    let ports = cfg.get_ports().len();
    if ports > 1 && ports != hosts {
        return Err(StoreError::Unavailable(format!(
            "invalid database URL: {ports} ports for {hosts} hosts (give one port, or one per host)"
        )));
    }
    if hosts > 1 && cfg.get_target_session_attrs() == TargetSessionAttrs::Any {
        cfg.target_session_attrs(TargetSessionAttrs::ReadWrite);
    }
    Ok(())
}

/// The bound on one connection attempt: `per_host` for each host named.
/// The hosts are tried one after another, and one that is down without
/// answering (a crashed machine drops the SYN) costs its whole connect
/// timeout before the next, the new primary, is tried.
pub(super) fn connect_bound(cfg: &Config, per_host: Duration) -> Duration {
    per_host.saturating_mul(u32::try_from(count(cfg)).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn settled(s: &str) -> Config {
        let mut cfg = Config::from_str(s).expect("parses");
        settle(&mut cfg).expect("settles");
        cfg
    }

    #[test]
    fn both_forms_name_every_host_and_ask_for_the_writable_one() {
        for s in [
            "host=10.0.0.1,10.0.0.2 port=5432,5433 user=pcrf dbname=pcrf",
            "postgres://pcrf@10.0.0.1:5432,10.0.0.2:5433/pcrf",
            "postgres://pcrf@10.0.0.1:5432,10.0.0.2:5433/pcrf?target_session_attrs=read-write",
        ] {
            let cfg = settled(s);
            assert_eq!(count(&cfg), 2, "{s}");
            assert_eq!(cfg.get_ports(), &[5432, 5433], "{s}");
            assert_eq!(
                cfg.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite,
                "{s}"
            );
            assert_eq!(
                connect_bound(&cfg, Duration::from_secs(2)),
                Duration::from_secs(4)
            );
        }
    }

    #[test]
    fn one_host_is_left_as_written() {
        let cfg = settled("postgres://pcrf@127.0.0.1:5432/pcrf");
        assert_eq!(count(&cfg), 1);
        assert_eq!(cfg.get_target_session_attrs(), TargetSessionAttrs::Any);
        assert_eq!(
            connect_bound(&cfg, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
        let cfg = settled("host=/run/postgresql dbname=pcrf");
        assert_eq!(count(&cfg), 1);
    }

    #[test]
    fn a_port_list_that_does_not_match_the_hosts_is_refused() {
        let mut cfg = Config::from_str("host=a,b,c port=5432,5433").expect("parses");
        match settle(&mut cfg) {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("2 ports for 3 hosts"), "{m}"),
            other => panic!("expected refusal, got {other:?}"),
        }
    }
}
