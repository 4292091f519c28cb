//! The Lua policy engine: the operator's script decides each session's rules
//! and QoS. Sandboxed, hot-reloaded, and run only when its inputs changed.

pub mod cases;
pub mod clock;
mod cpu_clock;
pub mod decision;
mod decision_table;
pub mod engine;
pub mod error;
pub mod input;
mod input_table;
pub mod media;
pub mod memo;
pub mod record;
pub mod rollout;
pub mod sandbox;
pub mod shared_decision;
pub mod stats;
pub mod validity;
pub mod versions;
mod watchdog;

pub use crate::file_watch::WatcherGuard;
pub use decision::Decision;
pub use engine::{EngineConfig, Outcome, PolicyEngine, Ran};
pub use error::PolicyError;
pub use input::PolicyInput;
pub use sandbox::{Limits, Notification};
pub use shared_decision::SharedDecision;
pub use stats::StatsSnapshot;
pub use versions::PolicyVersions;
