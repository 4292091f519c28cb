//! Sessions and their state, in memory (the read path) and as records for
//! the store (durability).

pub mod af;
pub mod af_index;
pub mod binding;
pub mod diff;
pub mod id_set;
pub mod record;
pub mod rule_failures;
pub mod shared_text;
pub mod spending;
pub mod table;
pub mod tdf;

pub use diff::RuleDiff;
pub use record::{DecisionRecord, GxSession, SessionState};
pub use table::{SessionSlot, SessionTable};
