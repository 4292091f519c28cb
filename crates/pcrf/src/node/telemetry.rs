//! The telemetry capability: the metrics registry, the node's own
//! counters, and the node's part of /metrics (sessions, policy, store,
//! peers, admission, usage). A separate handle so that what only counts
//! reaches nothing else of the node.

use super::state::{Node, NodeCounters};
use crate::metrics::{
    peer_stats, write_peers, CommitStats, Exposition, HistogramSnapshot, Kind, Metrics,
    MetricsSource, PolicyStats as MetricsPolicyStats, SessionStats,
};
use crate::store::group_commit::{APPLY_MICROS_BOUNDS, BATCH_SIZE_BOUNDS};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The metrics registry and the node's counters.
#[derive(Clone)]
pub struct Telemetry {
    pub(super) node: Arc<Node>,
}

impl Telemetry {
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.node.telemetry.metrics
    }

    pub fn counters(&self) -> &NodeCounters {
        &self.node.telemetry.counters
    }

    fn session_stats(&self) -> SessionStats {
        let (open, closed) = self.node.sessions.counts();
        SessionStats {
            open_sessions: open as u64,
            closed_sessions: closed as u64,
            cached_subscribers: self.node.subscribers.len() as u64,
        }
    }

    fn write_store_metrics(&self, out: &mut Exposition) {
        let g = self.node.persistence.writer.stats();
        let Some(batch_sizes) = HistogramSnapshot::from_cumulative(
            &BATCH_SIZE_BOUNDS,
            0,
            &g.batch_size_le,
            g.batches,
            g.requests,
        ) else {
            return;
        };
        let Some(apply_times) = HistogramSnapshot::from_cumulative(
            &APPLY_MICROS_BOUNDS,
            6,
            &g.apply_micros_le,
            g.applies,
            g.apply_micros,
        ) else {
            return;
        };
        CommitStats {
            batches: g.batches,
            commits: g.commits,
            skipped: g.skipped_commits,
            rows: g.rows_changed,
            coalesced: g.coalesced,
            errors: g.errors,
            purged: g.purged,
            queued: g.queued,
            apply_micros: g.apply_micros,
            batch_sizes,
            apply_times,
        }
        .write(out);
    }
}

impl MetricsSource for Telemetry {
    fn write(&self, out: &mut Exposition) {
        self.session_stats().write(out);
        let p = self.node.policy.engine().stats();
        MetricsPolicyStats {
            runs: p.runs,
            skips: p.skips,
            skips_within_bounds: p.skips_within_bounds,
            errors: p.errors,
            reloads_ok: p.reloads,
            reloads_failed: p.reload_failures,
            script_version: p.script_version,
            log_dropped: p.log_dropped,
        }
        .write(out);
        self.write_store_metrics(out);
        self.node.policy.decision_log().write_metrics(out);
        let configured: Vec<String> = self
            .node
            .live
            .load()
            .cfg
            .peers
            .iter()
            .map(|p| p.origin_host.clone())
            .collect();
        let mut peers = peer_stats(&self.node.signalling.peers, &configured);
        for p in &mut peers {
            p.doic_supported = self.node.signalling.doic.speaks(&p.host);
        }
        write_peers(out, &peers, self.node.signalling.doic.reporter().current());
        out.counter(
            "pcrf_diameter_closed_awaiting_cer_total",
            "Diameter connections closed before CER because [diameter].max_connections_awaiting_cer were already waiting.",
            self.node.signalling.peers.closed_awaiting_cer(),
        );
        out.gauge(
            "pcrf_diameter_connections_awaiting_cer",
            "Diameter connections accepted and not yet past CER.",
            self.node.signalling.peers.awaiting_cer(),
        );
        out.gauge(
            "pcrf_diameter_buffered_bytes_awaiting_cer",
            "Bytes that Diameter connections awaiting CER hold in partly received messages, together (at most [diameter].max_buffered_bytes_awaiting_cer).",
            self.node.signalling.peers.buffered_awaiting_cer(),
        );
        let mut errors = out.family(
            "pcrf_diameter_errors_awaiting_cer_total",
            "Diameter connections closed for a protocol error before their capabilities exchange, by kind: framing (bad version or length), too_long (over [diameter].max_message_bytes_awaiting_cer), buffer_budget (over [diameter].max_buffered_bytes_awaiting_cer), undecodable, tls_handshake.",
            Kind::Counter,
        );
        for (kind, n) in self.node.signalling.peers.errors_awaiting_cer() {
            errors.sample(&[("kind", kind.name())], n);
        }
        let c = &self.node.telemetry.counters;
        let shed = self.node.signalling.admission.shed();
        out.family(
            "pcrf_overload_shed_total",
            "Gx and Sd requests answered DIAMETER_TOO_BUSY: cause queue_delay in sustained overload ([overload]), in_flight_cap at [diameter].max_pending_requests (new = CCR-I, shed first).",
            Kind::Counter,
        )
        .sample(&[("class", "new"), ("cause", "queue_delay")], shed.new_delay)
        .sample(&[("class", "existing"), ("cause", "queue_delay")], shed.existing_delay)
        .sample(&[("class", "new"), ("cause", "in_flight_cap")], shed.new_cap)
        .sample(&[("class", "existing"), ("cause", "in_flight_cap")], shed.existing_cap);
        out.gauge(
            "pcrf_gx_in_flight",
            "Gx and Sd requests being worked on now.",
            self.node.signalling.admission.in_flight(),
        );
        out.gauge(
            "pcrf_overload_active",
            "1 while the node is in sustained overload (queueing delay above [overload].target_delay_ms for a whole interval) or has half of [diameter].max_pending_requests in flight, else 0.",
            self.node.signalling.admission.overloaded(),
        );
        out.gauge(
            "pcrf_queue_delay_min_seconds",
            "The smallest queueing delay (read to handler start) of the current [overload] interval so far.",
            self.node.signalling.admission.interval_min_delay().map_or(0.0, |d| d.as_secs_f64()),
        );
        let u = &self.node.usage.counters;
        let counters: [(&str, &str, &AtomicU64); 16] = [
            ("pcrf_policy_fallbacks_total", "Decisions that fell back to [policy].fallback because the script failed or returned a value out of range.", &c.policy_fallbacks),
            ("pcrf_answers_too_large_total", "Answers over [diameter].max_message_bytes, replaced by DIAMETER_UNABLE_TO_COMPLY (5012).", &c.answers_too_large),
            ("pcrf_unknown_rule_names_total", "Rule or base names a decision named that the [rules] catalog does not list (dropped).", &c.unknown_rule_names),
            ("pcrf_rule_failures_reported_total", "Rules the PCEFs reported as failed (Charging-Rule-Report).", &c.rule_failures_reported),
            ("pcrf_rule_reports_over_cap_total", "Charging-Rule-Report entries past the cap of one request (or naming a rule longer than a rule name may be): answered, not applied.", &c.rule_reports_over_cap),
            ("pcrf_rule_failures_forgotten_total", "Rule failures a session dropped, oldest first, to keep at most its cap for the policy.", &c.rule_failures_forgotten),
            ("pcrf_retransmissions_total", "Retransmitted CCRs answered again without being applied twice.", &c.retransmissions),
            ("pcrf_foreign_session_requests_total", "Gx, Sd or Rx requests on a session from a peer that is neither the session's peer nor in its [[peers]] failover_group: answered 5002, nothing applied.", &c.foreign_session_requests),
            ("pcrf_store_failures_total", "Requests answered 5012 because their state change could not be committed.", &c.store_failures),
            ("pcrf_writes_skipped_total", "CCR-U whose session changed nothing durable: no write.", &c.writes_skipped),
            ("pcrf_usage_reports_total", "Usage reports (Used-Service-Unit per Monitoring-Key) counted, each once.", &u.reports),
            ("pcrf_usage_reported_octets_total", "Octets in those reports.", &u.octets),
            ("pcrf_usage_unknown_key_reports_total", "Reports for Monitoring-Keys the usage file does not define (counted in no accumulator).", &u.unknown_key_reports),
            ("pcrf_usage_unknown_key_reports_over_cap_total", "Of those, the reports past the cap one request shows to the policy (counted only).", &u.unknown_key_reports_over_cap),
            ("pcrf_usage_unknown_keys_decided_total", "Monitoring-Keys a decision named that the usage file does not define (ignored).", &u.unknown_keys_decided),
            ("pcrf_usage_grants_total", "Granted-Service-Unit sent (initial grants and re-grants).", &u.grants),
        ];
        for (name, help, value) in counters {
            out.counter(name, help, value.load(Relaxed));
        }
        out.gauge(
            "pcrf_usage_subscribers",
            "Subscribers with usage accumulators in memory.",
            self.node.usage.len() as u64,
        );
        out.counter(
            "pcrf_cluster_sessions_taken_over_total",
            "Sessions this node did not hold, read from the shared store on a request and served here from then on.",
            self.node.telemetry.counters.taken_over.load(Relaxed),
        );
        out.counter(
            "pcrf_cluster_conflicts_total",
            "Session or usage rows another node had written since this node read them: the request was handled again on a fresh copy.",
            self.node.persistence.writer.stats().conflicts,
        );
    }
}
