//! The sessions capability: the session table and what is done to a
//! session record as a whole, whoever asks (an application, a push, a
//! REST operation): finding it or taking it over from another node of a
//! shared store (`takeover.rs`, `takeover_by.rs`), knowing it moved away,
//! telling who may act on it (`ownership.rs`), recording the rule reports
//! of its enforcement point, purging closed ones. A separate handle so
//! that a service that only reads sessions gets nothing else of the node.

use super::state::{now_ms, Node};
use crate::limits::{LOGGED_ITEMS_PER_REQUEST, MAX_RULE_REPORTS_PER_REQUEST};
use crate::session::{GxSession, SessionTable};
use crate::store::StoreError;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The session table and the steps on session records.
#[derive(Clone)]
pub struct Sessions {
    pub(super) node: Arc<Node>,
}

impl Sessions {
    /// The sessions held in memory.
    pub fn table(&self) -> &SessionTable {
        &self.node.sessions
    }

    /// Records rule failures and forgets failed rules as installed (the
    /// PCEF does not have them); the policy sees the failures next. The
    /// reports past the per-request cap and the failures past the
    /// per-session cap are counted, not kept; the first few failures are
    /// logged one by one, the rest summed up in one line.
    pub(crate) fn apply_rule_reports(
        &self,
        s: &mut GxSession,
        reports: &crate::pcc::reauth_answer::RuleReports,
    ) {
        let applied = crate::session::rule_failures::apply(s, reports);
        let c = &self.node.telemetry.counters;
        c.rule_failures_reported
            .fetch_add(applied.failures as u64, Relaxed);
        c.rule_reports_over_cap.fetch_add(reports.over_cap, Relaxed);
        c.rule_failures_forgotten
            .fetch_add(applied.forgotten as u64, Relaxed);
        let failed = reports.iter().filter(|r| r.status != 0);
        for r in failed.take(LOGGED_ITEMS_PER_REQUEST) {
            tracing::warn!(session = %s.id, rule = %r.rule, status = r.status, code = ?r.code, "PCEF reported a rule failure");
        }
        if applied.failures > LOGGED_ITEMS_PER_REQUEST || reports.over_cap > 0 {
            tracing::warn!(
                session = %s.id,
                reports = reports.received(),
                failures = applied.failures,
                over_cap = reports.over_cap,
                forgotten = applied.forgotten,
                "{} rule reports, {} over the cap of {} per request; {} failures, {} not logged one by one, {} older ones forgotten",
                reports.received(),
                reports.over_cap,
                MAX_RULE_REPORTS_PER_REQUEST,
                applied.failures,
                applied.failures.saturating_sub(LOGGED_ITEMS_PER_REQUEST),
                applied.forgotten,
            );
        }
    }

    /// Removes closed sessions older than the retention, from memory and store.
    pub async fn purge_closed(&self) -> Result<usize, StoreError> {
        let before = now_ms() - (self.node.live.load().cfg.sessions.retention_secs as i64) * 1000;
        let ids = self.node.sessions.closed_before(before);
        for id in &ids {
            self.node.sessions.remove(id);
        }
        self.node.persistence.writer.purge_closed(before).await
    }
}
