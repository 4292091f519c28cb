//! Sy (TS 29.219): the PCRF as a client of the OCS, subscribing to policy
//! counters; or its 5G twin N28 (TS 29.594), the PCF as a client of the
//! CHF, with the same logic. `wire.rs` encodes SLR and STR and decodes
//! SLA, SNR and STA; `ocs.rs` holds the connections to the OCSs; `n28.rs`
//! the N28 JSON and `chf.rs` the CHF client; `peer.rs` is the seam that
//! gives the service one answer from either (`exchange.rs`); `table.rs`
//! every subscriber's Sy session; `service.rs` the exchanges and the
//! re-decisions a notification (SNR, N28 notify) causes.

pub mod chf;
pub mod exchange;
pub mod n28;
pub mod ocs;
pub mod peer;
pub mod service;
pub mod state;
pub mod table;
mod wire;

pub use wire::*;
