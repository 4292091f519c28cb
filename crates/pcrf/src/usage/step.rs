//! The usage side of one request: the subscriber's accumulators being
//! changed under their lock until the commit, what the policy sees of them,
//! and the counters of usage monitoring.

use crate::policy::input::UsageInput;
use crate::subscriber::Subscriber;
use crate::usage::config::UsageConfig;
use crate::usage::grant::policy_view;
use crate::usage::table::UsageSlot;
use crate::usage::SubscriberUsage;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The usage side of one request: the subscriber's accumulators being
/// changed, and the lock that keeps other writers out until the commit.
pub(crate) struct UsageStep {
    pub cfg: Arc<UsageConfig>,
    pub slot: Arc<UsageSlot>,
    /// Held until the step is dropped, after the commit.
    pub guard: tokio::sync::OwnedMutexGuard<()>,
    /// The next value: changed in place (the only reference until the
    /// commit), then shared by the commit and the table without a copy.
    pub next: Arc<SubscriberUsage>,
    pub billing_day: Option<u8>,
    /// Keys reported in this request (they are granted again).
    pub reported: BTreeSet<String>,
    /// Reported keys the usage file does not know, the first
    /// `MAX_UNKNOWN_KEY_REPORTS_PER_REQUEST` of them (what the policy sees).
    pub unknown: Vec<String>,
    /// Every report of this request for a key the usage file does not
    /// know, kept in `unknown` or not.
    pub unknown_reports: usize,
}

impl UsageStep {
    /// Whether the accumulators differ from the committed ones.
    pub fn changed(&self) -> bool {
        *self.slot.load() != *self.next
    }

    /// What the policy sees.
    pub fn view(&self, profile: Option<&Subscriber>) -> UsageInput {
        let mut v = policy_view(&self.cfg, &self.next, profile);
        v.unknown_keys = self.unknown.clone();
        v
    }
}

/// The subscriber's own billing day, if any (the usage file's default
/// applies otherwise).
pub(crate) fn billing_day(profile: Option<&Subscriber>) -> Option<u8> {
    profile.and_then(|p| p.billing_day)
}
