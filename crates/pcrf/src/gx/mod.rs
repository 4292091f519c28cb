//! Gx (TS 29.212): the PCEF's IP-CAN sessions. `wire.rs` decodes CCR and RAA
//! and encodes CCA and RAR; `service.rs` answers each CCR (apply to the
//! session, decide, persist, answer) and pushes re-decisions in RARs;
//! `monitoring.rs` handles usage reports and grants; `pushes.rs` re-decides
//! many sessions over time (congestion, top-ups, period resets).

pub mod monitoring;
pub mod pushes;
pub mod service;
pub mod state;
mod wire;

pub use state::UsageCounters;
pub use wire::*;
