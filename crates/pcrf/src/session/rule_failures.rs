//! Applying a PCEF's rule failures (Charging-Rule-Report) to a session in
//! one linear pass: the failed rules leave what the session has installed,
//! and the session keeps only the most recent
//! [`MAX_RULE_FAILURES_KEPT`](crate::limits::MAX_RULE_FAILURES_KEPT)
//! failures, so that a report naming thousands of rules costs time in
//! proportion to its length once and leaves a record of bounded size.

use super::GxSession;
use crate::limits::MAX_RULE_FAILURES_KEPT;
use crate::policy::input::RuleFailure;
use std::collections::HashMap;

/// What applying one request's reports did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Reports of a failure (PCC-Rule-Status other than ACTIVE).
    pub failures: usize,
    /// Older failures dropped to keep the session within the cap.
    pub forgotten: usize,
}

/// Records the failures among `reports` in `s` and forgets the failed
/// rules as installed. A rule reported twice keeps its last report, moved
/// to the end (the most recent); ACTIVE reports are not failures.
pub fn apply(s: &mut GxSession, reports: &[RuleFailure]) -> Applied {
    // The last report of each failed rule, by name.
    let mut last: HashMap<&str, usize> = HashMap::new();
    let mut failures = 0;
    for (i, r) in reports.iter().enumerate() {
        if r.status != 0 {
            last.insert(r.rule.as_str(), i);
            failures += 1;
        }
    }
    if last.is_empty() {
        return Applied::default();
    }
    let failed = |name: &str| last.contains_key(name);
    s.installed.rules.retain(|n| !failed(n));
    s.installed.base_names.retain(|n| !failed(n));
    s.installed.definitions.retain(|d| !failed(&d.name));
    s.rule_failures.retain(|f| !failed(&f.rule));
    s.rule_failures.extend(
        reports
            .iter()
            .enumerate()
            .filter(|(i, r)| last.get(r.rule.as_str()) == Some(i))
            .map(|(_, r)| r.clone()),
    );
    let forgotten = s.rule_failures.len().saturating_sub(MAX_RULE_FAILURES_KEPT);
    s.rule_failures.drain(..forgotten);
    Applied {
        failures,
        forgotten,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn failure(rule: &str, status: u32) -> RuleFailure {
        RuleFailure {
            rule: rule.into(),
            status,
            code: Some(4),
        }
    }

    fn session() -> GxSession {
        let mut s = GxSession::new("pgw;1;1", "001010000000001", "pgw", "example", 0);
        s.installed.rules = vec!["a".into(), "b".into(), "c".into()];
        s
    }

    #[test]
    fn failed_rules_leave_the_installed_set_and_repeats_keep_the_last() {
        let mut s = session();
        s.rule_failures = vec![failure("b", 1)];
        let done = apply(
            &mut s,
            &[
                failure("b", 2),
                failure("c", 1),
                failure("a", 0),
                failure("b", 1),
            ],
        );
        assert_eq!(
            done,
            Applied {
                failures: 3,
                forgotten: 0
            }
        );
        assert_eq!(s.installed.rules, vec!["a".to_string()]);
        assert_eq!(s.rule_failures, vec![failure("c", 1), failure("b", 1)]);
    }

    #[test]
    fn a_30000_rule_report_keeps_the_newest_up_to_the_cap_in_linear_time() {
        let mut s = session();
        let reports: Vec<RuleFailure> = (0..30_000).map(|i| failure(&format!("r{i}"), 1)).collect();
        // Three successive reports, as a hostile PCEF sends them: each must
        // cost one pass, not one pass per name over the kept list.
        let started = Instant::now();
        for _ in 0..3 {
            let done = apply(&mut s, &reports);
            assert_eq!(done.failures, 30_000);
            assert_eq!(s.rule_failures.len(), MAX_RULE_FAILURES_KEPT);
        }
        // Quadratic cleaning took seconds here; linear takes milliseconds.
        // The bound is loose so that a loaded machine does not fail it.
        assert!(started.elapsed().as_secs() < 2, "{:?}", started.elapsed());
        let newest: Vec<String> = (30_000 - MAX_RULE_FAILURES_KEPT..30_000)
            .map(|i| format!("r{i}"))
            .collect();
        let kept: Vec<String> = s.rule_failures.iter().map(|f| f.rule.clone()).collect();
        assert_eq!(kept, newest);
    }
}
