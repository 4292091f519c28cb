//! What the node holds: the configuration in force, the three tables, the
//! policy runner, the signalling and persistence parts, the metrics and
//! counters; assembled once at start-up. Its fields are reached only by
//! the capability handles (the other files of `node/`); a step that spans
//! parts (a take-over reads the store, an event the decision log) lives
//! with the capability it serves and reads the other parts here, so
//! nothing outside `node/` names `Node` or its fields.

use super::doic::Doic;
use super::enforcement::{GxSignalling, SmfSignalling};
use super::PolicyRunner;
use crate::admission::Admission;
use crate::cluster::membership::Membership;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::notify::Outbox;
use crate::session::{GxSession, SessionTable};
use crate::session_message::Identity;
use crate::store::postgres::PostgresHandles;
use crate::store::Change;
use crate::store::ShardedWriter;
use crate::subscriber::Subscriber;
use crate::subscriber::SubscriberTable;
use crate::usage::config::UsageConfig;
use crate::usage::step::UsageStep;
use crate::usage::table::UsageTable;
use crate::usage::SubscriberUsage;
use bytes::{Bytes, BytesMut};
use diameter::codec::Message;
use diameter::dict::{self, avp};
use diameter::result_code;
use diameter::transport::PeerTable;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::sync::{OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// DIAMETER_USER_UNKNOWN: a Result-Code of RFC 4006 (§9.1) that TS 29.212
/// (§5.5) uses in a CCA-I for a subscriber the PCRF does not know.
pub const USER_UNKNOWN: u32 = 5030;

/// How long a request waits for the store (or for a subscriber's usage
/// held by another request) before it is answered 5012.
pub(crate) const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Counters of the node's own decisions, rendered into /metrics.
#[derive(Default)]
pub struct NodeCounters {
    /// Sessions read from the store on a miss and served here from then
    /// on (taken over from another node of a shared store).
    pub taken_over: AtomicU64,
    pub policy_fallbacks: AtomicU64,
    pub unknown_rule_names: AtomicU64,
    pub rule_failures_reported: AtomicU64,
    /// Rule reports past the per-request cap (answered, not applied).
    pub rule_reports_over_cap: AtomicU64,
    /// Rule failures a session dropped (oldest first) to stay in its cap.
    pub rule_failures_forgotten: AtomicU64,
    pub retransmissions: AtomicU64,
    pub store_failures: AtomicU64,
    pub writes_skipped: AtomicU64,
    /// Answers refused for exceeding `[diameter].max_message_bytes`.
    pub answers_too_large: AtomicU64,
    /// Requests on a session from a peer that is neither its peer nor a
    /// fail-over partner of it (answered 5002, see `ownership.rs`).
    pub foreign_session_requests: AtomicU64,
}

/// The parts of the configuration that change without a restart.
pub(crate) struct Live {
    pub(crate) cfg: Arc<Config>,
    pub(crate) catalog_rules: HashSet<String>,
    pub(crate) catalog_bases: HashSet<String>,
}

impl Live {
    pub(crate) fn of(cfg: Arc<Config>) -> Live {
        Live {
            catalog_rules: cfg.rules.predefined.iter().cloned().collect(),
            catalog_bases: cfg.rules.base_names.iter().cloned().collect(),
            cfg,
        }
    }
}

/// The PCRF node: the configuration in force, the three tables the
/// requests work on, and the parts they are carried out with. Every field
/// is private to this module: the applications and the REST operations
/// reach each part only through the capability handle that owns it.
pub(super) struct Node {
    pub(super) live: arc_swap::ArcSwap<Live>,
    pub(super) sessions: SessionTable,
    pub(super) subscribers: SubscriberTable,
    /// Every subscriber's accumulators (the read path; the store has them
    /// too), the usage file in force and the usage counters.
    pub(super) usage: UsageTable,
    pub(super) policy: PolicyRunner,
    pub(super) signalling: SignallingParts,
    pub(super) persistence: PersistenceParts,
    pub(super) telemetry: Instruments,
}

/// The metrics registry and the node's own counters.
pub(super) struct Instruments {
    pub(super) metrics: Arc<Metrics>,
    pub(super) counters: NodeCounters,
}

/// What start-up hands to the node.
pub struct NodeParts {
    pub cfg: Arc<Config>,
    /// The policy's versions and the engine serving one of them.
    pub policy: Arc<crate::policy::PolicyVersions>,
    pub store: ShardedWriter,
    pub subscribers: Vec<Subscriber>,
    pub sessions: Vec<GxSession>,
    pub usage: Vec<SubscriberUsage>,
    pub usage_cfg: UsageConfig,
    /// The usage file's versions; `usage_cfg` is the one in force
    /// (`UsageVersions::start` returns both).
    pub usage_versions: Arc<crate::usage::versions::UsageVersions>,
    pub peers: PeerTable,
    pub metrics: Arc<Metrics>,
    pub tz: jiff::tz::TimeZone,
    pub pg: Option<PostgresHandles>,
    /// The notification outbox (`Outbox::disabled()` for none).
    pub notify: Arc<crate::notify::Outbox>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What one Gx request produced: the answer and its result for metrics.
pub(crate) struct Answered {
    pub(crate) bytes: Bytes,
    pub(crate) code: u32,
    /// The stored policy version that decided it, when the policy did
    /// (its latency and errors are counted by version too).
    pub(crate) decided_by: Option<u64>,
}

impl Node {
    pub(super) fn new(p: NodeParts) -> Arc<Node> {
        let sub_table = SubscriberTable::default();
        for s in p.subscribers {
            sub_table.put(Arc::new(s));
        }
        let session_table = SessionTable::default();
        for s in p.sessions {
            session_table.replace(Arc::new(s));
        }
        let usage = UsageTable::new(p.store.is_shared(), p.usage_cfg);
        for u in p.usage {
            usage.recover(u);
        }
        let cfg = p.cfg;
        let membership = Arc::new(crate::cluster::membership::Membership::new(
            cfg.node.origin_host.clone(),
            now_ms(),
            cfg.store.kind == crate::store::config::StoreKind::Postgres,
            cfg.cluster.node_timeout_ms,
        ));
        let decision_log = crate::notify::decision_log::DecisionLog::start(&cfg.decision_log);
        Arc::new(Node {
            signalling: SignallingParts::new(
                Identity {
                    origin_host: cfg.node.origin_host.clone(),
                    origin_realm: cfg.node.origin_realm.clone(),
                },
                p.peers,
                Admission::new(
                    cfg.diameter.max_pending_requests,
                    cfg.overload.target(),
                    cfg.overload.interval(),
                ),
            ),
            live: arc_swap::ArcSwap::from_pointee(Live::of(cfg)),
            subscribers: sub_table,
            sessions: session_table,
            policy: PolicyRunner::new(p.policy, p.usage_versions, p.tz, decision_log),
            persistence: PersistenceParts::new(p.store, p.pg, p.notify, membership),
            usage,
            telemetry: Instruments {
                metrics: p.metrics,
                counters: NodeCounters::default(),
            },
        })
    }
}

/// The accumulators to write with a request, when they changed.
pub(crate) fn usage_change(usage: &Option<UsageStep>) -> Option<Change> {
    usage
        .as_ref()
        .filter(|u| u.changed())
        .map(|u| Change::PutUsage(u.next.clone()))
}

/// A stored answer sent again with the retransmission's ids.
pub(crate) fn replay(stored: &[u8], req: &Message) -> Answered {
    let mut b = BytesMut::from(stored);
    if b.len() >= 20 {
        b[12..16].copy_from_slice(&req.hop_by_hop().to_be_bytes());
        b[16..20].copy_from_slice(&req.end_to_end().to_be_bytes());
    }
    let code = Message::parse(Bytes::copy_from_slice(stored))
        .ok()
        .and_then(|m| {
            m.find(avp::RESULT_CODE)
                .ok()
                .flatten()
                .and_then(|a| a.as_u32().ok())
        })
        .unwrap_or(result_code::DIAMETER_SUCCESS);
    Answered {
        decided_by: None,
        bytes: b.freeze(),
        code,
    }
}

/// An enumerated value's dictionary name, or the number.
pub(super) fn enum_name(code: diameter::AvpCode, v: i32) -> std::borrow::Cow<'static, str> {
    dict::avp(code.code, code.vendor)
        .and_then(|d| d.enum_name(i64::from(v)))
        .map_or_else(|| v.to_string().into(), std::borrow::Cow::Borrowed)
}

/// The ECGI (cell) of a 3GPP-User-Location-Info given as hex: type 130
/// (TAI+ECGI: 5 bytes TAI then 7 bytes ECGI) or 129 (ECGI only) (TS 29.061 §16.4.7.2).
pub(crate) fn ecgi_of_location(hex: &str) -> Option<&str> {
    let ty = u8::from_str_radix(hex.get(0..2)?, 16).ok()?;
    match ty {
        130 => hex.get(12..26),
        129 => hex.get(2..16),
        _ => None,
    }
}

/// What the signalling capability holds of the node.
pub(super) struct SignallingParts {
    pub(super) me: Identity,
    pub(super) peers: PeerTable,
    pub(super) admission: Admission,
    /// The peers that advertised DOIC (shown with the peer metrics), and
    /// the overload report they get while requests are shed.
    pub(super) doic: Doic,
    /// The Gx service, which re-decides sessions when Sd or Sy learn
    /// something that changes a decision, and sends the RARs the node
    /// composes (set once the services exist).
    pub(super) gx: OnceLock<Weak<dyn GxSignalling>>,
    /// The N7 service, which pushes to the SMFs (set once the services
    /// exist).
    pub(super) smf: OnceLock<Weak<dyn SmfSignalling>>,
}

impl SignallingParts {
    pub(super) fn new(me: Identity, peers: PeerTable, admission: Admission) -> SignallingParts {
        SignallingParts {
            me,
            peers,
            admission,
            doic: Doic::default(),
            gx: OnceLock::new(),
            smf: OnceLock::new(),
        }
    }
}

/// What the persistence capability holds of the node.
pub(super) struct PersistenceParts {
    pub(super) writer: ShardedWriter,
    pub(super) pg: Option<PostgresHandles>,
    pub(super) outbox: Arc<Outbox>,
    pub(super) membership: Arc<Membership>,
}

impl PersistenceParts {
    pub(super) fn new(
        writer: ShardedWriter,
        pg: Option<PostgresHandles>,
        outbox: Arc<Outbox>,
        membership: Arc<Membership>,
    ) -> PersistenceParts {
        PersistenceParts {
            writer,
            pg,
            outbox,
            membership,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecgi_from_location() {
        // TAI+ECGI: type 130, TAI (MCC/MNC 3 bytes + TAC 2), ECGI (3 + 4).
        let loc = "82".to_string() + "00f110" + "0001" + "00f110" + "00000101";
        assert_eq!(ecgi_of_location(&loc), Some("00f11000000101"));
        assert_eq!(ecgi_of_location("8100f11000000101"), Some("00f11000000101"));
        assert_eq!(ecgi_of_location("01"), None);
        assert_eq!(ecgi_of_location("zz"), None);
    }

    #[test]
    fn enum_names_come_from_the_dictionary() {
        assert_eq!(enum_name(avp::RAT_TYPE, 1004), "EUTRAN");
        assert_eq!(enum_name(avp::RAT_TYPE, 424242), "424242");
    }
}
