//! Sessions and their state, in memory (the read path) and as records for
//! the store (durability).

pub mod record;

pub use record::{DecisionRecord, GxSession, SessionState};
