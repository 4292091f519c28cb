//! Sy (TS 29.219): the PCRF as a client of the OCS, subscribing to policy
//! counters. `wire.rs` encodes SLR and STR and decodes SLA, SNR and STA;
//! `ocs.rs` holds the connections to the OCSs; `table.rs` every
//! subscriber's Sy session; `service.rs` the exchanges and the re-decisions
//! an SNR causes.

pub mod ocs;
pub mod service;
pub mod state;
pub mod table;
mod wire;

pub use wire::*;
