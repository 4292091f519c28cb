//! Usage monitoring (TS 29.212 §4.5.17): what the PCEF reports per
//! Monitoring-Key is counted into per-subscriber accumulators (monthly,
//! daily, night-time, per application...), configured in a file with a
//! checksum (which the memo's key includes, so a changed file re-decides
//! every session), and turned back into
//! grants and into policy inputs.
//!
//! The state is in two places, both written in the same group commit that
//! precedes the answer: a session's grants travel in its blob
//! (`SessionMonitoring`), a subscriber's accumulators are one row
//! (`SubscriberUsage`). Each Used-Service-Unit is counted exactly once: the
//! report, the new accumulators and the answer (kept for replay of a
//! retransmission) are one durable change.
//!
//! - `config.rs`: the usage file: keys, accumulators, plans' quotas; load,
//!   validation with locations, checksum, reload checks.
//! - `period.rs`: reset periods (daily, weekly, monthly on the billing day)
//!   in the configured time zone.
//! - `account.rs`: one subscriber's accumulators: count a report, roll over
//!   at period ends, top up, reset, quotas and what remains.
//! - `grant.rs`: what to grant per key (min(remaining, chunk)) and the
//!   policy's view of usage.
//! - `spread.rs`: when each of many pushes goes out, spread over a window.
//! - `table.rs`: every subscriber's usage in memory, with a writer lock.
//! - `units.rs`: amounts of service as the PCEF reports them, and the
//!   monitoring level.
//! - `monitoring.rs`: a session's monitored keys and what each was granted.
//! - `lean_map.rs`: the first entry of a small map without room to spare.
//! - `versions.rs`: the usage file's stored versions: deploy, rollback,
//!   adoption of another node's version, each checked against the grants
//!   open sessions hold.
//!
//! The operator's view (file format, counting, periods, grants, reloads) is
//! `docs/usage.md`; `config/usage.toml` is the example for the default policy.

pub mod account;
pub mod config;
pub mod grant;
pub(crate) mod lean_map;
mod monitoring;
pub mod period;
pub mod spread;
pub mod step;
pub mod table;
mod units;
pub mod versions;

pub use account::{Accumulator, Counted, LastReport, SubscriberUsage};
pub use config::{Interface, UsageConfig, UsageConfigError};
pub use monitoring::{KeyGrant, SessionMonitoring};
pub use period::Reset;
pub use units::{MonitoringLevel, ServiceUnits};
